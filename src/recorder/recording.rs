//! Recording into a graph, the third admission strategy: a launch on a stream lent to a graph
//! recording (see [`crate::Graph`]) is not run; its work becomes nodes of the recording's graph,
//! after the nodes of the earlier recorded ops it conflicts with (its declared uses against
//! theirs: read after write, write after read or write). No buffer is marked and no stream is
//! fenced: the graph runs later, as one launch whose uses are the union of the recorded ones.
//!
//! One op records at a time per recording (the driver's graph objects take one caller at a
//! time): the op's turn lasts from its admission to its commit. How the op's work becomes
//! nodes depends on the backend, decided when the recording starts ([`Mode`]).

use super::admission::Admission;
use super::{LaunchRecorder, Reserved, Use};
use crate::backend::cuda::graph::{Node, RawGraph, WhileNode};
use crate::backend::{RawEvent, RawStream};
use crate::completion::KeepAlive;
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result};
use crate::track::{Access, StreamSlot};
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

/// How a recording turns an op's work into nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// CUDA: each op is captured into the graph (`cuStreamBeginCaptureToGraph`), its roots
    /// the last nodes of the ops it must follow.
    Capture,
    /// The simulator, recording: the op's simulated work is dropped (nothing runs); only its
    /// uses and its place among the other ops are kept.
    Dry,
    /// The simulator, replaying: the op runs on its stream after the events of the ops it must
    /// follow (and after `start`); its own event marks its end.
    Execute,
}

/// Where a recorded op ends, for the ops that follow it.
enum Tail {
    /// The op's last nodes (CUDA).
    Nodes(Vec<Node>),
    /// An event recorded after the op on its stream (simulator, replaying).
    Event(Arc<RawEvent>),
    /// Nothing ran (simulator, recording).
    Nothing,
}

/// A buffer the recording's ops used: the union of their accesses, and the ops a later use
/// must follow.
struct Buffer {
    buf: Use,
    last_write: Option<usize>,
    reads: SmallVec<[usize; 4]>,
}

/// What the recorded ops left, under the recording's lock.
#[derive(Default)]
struct Built {
    graph: Option<RawGraph>,
    ops: Vec<Tail>,
    buffers: BTreeMap<u64, Buffer>,
    keep: Vec<KeepAlive>,
    /// The first error that abandoned the recording.
    failed: Option<Error>,
    /// The last op recorded on each stream (its index): an op follows it too, since a
    /// library handle's hidden state (a default workspace) is shared by the ops of its stream.
    last_on: Vec<(u32, usize)>,
    /// Streams the ops ran on (replaying), with the last op's event on each: the replay's
    /// stream joins them.
    ends: Vec<(u32, Arc<RawStream>, Arc<RawEvent>)>,
}

/// One recording in progress: the graph it builds and the state of its buffers. Lent to the
/// streams it records on (`StreamSlot::lend_to_recording`).
pub(crate) struct GraphBuild {
    /// The device's uid.
    pub(crate) device: u32,
    pub(crate) mode: Mode,
    /// Replaying: the event every op's stream waits for before its first op (the replay's
    /// start on its own stream).
    start: Option<Arc<RawEvent>>,
    /// Replaying with the checker's self-test: ops wait for nothing recorded before them.
    drop_edges: bool,
    built: Mutex<Built>,
    /// The streams lent to the recording, to take back when it ends.
    lent: Mutex<Vec<crate::device::StreamId>>,
    /// The thread whose op is recording now.
    turn: Mutex<Option<ThreadId>>,
    turn_free: Condvar,
}

/// What a recording leaves once its last op has committed.
pub(crate) struct Finished {
    /// The graph (CUDA).
    pub graph: Option<RawGraph>,
    /// Every buffer the ops used, with the union of their accesses.
    pub uses: Vec<(Arc<dyn super::Tracked>, Access)>,
    /// What the ops' completions would have kept alive until the GPU was done.
    pub keep: Vec<KeepAlive>,
    /// Replaying: each stream the ops ran on, with the event after its last op.
    pub ends: Vec<(Arc<RawStream>, Arc<RawEvent>)>,
    /// How many ops were recorded.
    pub ops: usize,
}

impl GraphBuild {
    /// A recording on `device` in `mode` (`graph` for [`Mode::Capture`]); replaying, ops start
    /// after `start`, and with `drop_edges` after nothing recorded.
    pub(crate) fn new(
        device: &DeviceShared,
        mode: Mode,
        graph: Option<RawGraph>,
        start: Option<Arc<RawEvent>>,
        drop_edges: bool,
    ) -> Self {
        GraphBuild {
            device: device.uid,
            mode,
            start,
            drop_edges,
            built: Mutex::new(Built { graph, ..Built::default() }),
            lent: Mutex::new(Vec::new()),
            turn: Mutex::new(None),
            turn_free: Condvar::new(),
        }
    }

    /// Ends the recording: its graph, uses and keep-alives, or the error that abandoned it.
    pub(crate) fn finish(&self) -> Result<Finished> {
        let mut built = crate::sync::lock(&self.built);
        if let Some(e) = built.failed.take() {
            return Err(e);
        }
        let built = std::mem::take(&mut *built);
        Ok(Finished {
            ops: built.ops.len(),
            graph: built.graph,
            uses: built.buffers.into_values().map(|b| (b.buf.buf, b.buf.access)).collect(),
            keep: built.keep,
            ends: built.ends.into_iter().map(|(_, raw, ev)| (raw, ev)).collect(),
        })
    }

    /// Notes that `stream` is lent to this recording.
    pub(crate) fn note_lent(&self, stream: crate::device::StreamId) {
        crate::sync::lock(&self.lent).push(stream);
    }

    /// The streams lent to this recording, to take back.
    pub(crate) fn take_lent(&self) -> Vec<crate::device::StreamId> {
        std::mem::take(&mut *crate::sync::lock(&self.lent))
    }

    /// Abandons the recording with `e`, unless an earlier error did.
    pub(crate) fn fail(&self, e: Error) {
        let mut built = crate::sync::lock(&self.built);
        built.failed.get_or_insert(e);
    }

    /// Keeps what a recorded op's completion would have kept alive, for the graph's life.
    pub(crate) fn keep(&self, keep: Vec<KeepAlive>) {
        crate::sync::lock(&self.built).keep.extend(keep);
    }

    /// Waits for this thread's turn to record an op.
    fn enter(&self, timeout: std::time::Duration) -> Result<()> {
        let me = std::thread::current().id();
        let mut turn = crate::sync::lock(&self.turn);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match *turn {
                None => {
                    *turn = Some(me);
                    return Ok(());
                }
                Some(t) if t == me => {
                    return Err(Error::WouldDeadlock {
                        what: "an op recorded into a graph while this thread's previous op still records (an op enqueued from inside another op's enqueue)".into(),
                    })
                }
                Some(_) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(Error::Recording {
                            what: "waiting for another thread's op to finish recording timed out".into(),
                            hint: "record from fewer threads at once, or raise DeviceConfig::preflight_timeout",
                        });
                    }
                    turn = crate::sync::wait_timeout(&self.turn_free, turn, left);
                }
            }
        }
    }

    fn leave(&self) {
        *crate::sync::lock(&self.turn) = None;
        self.turn_free.notify_one();
    }

    /// The ops a launch on stream `stream` (its index) with `uses` must follow, without
    /// repeats: the conflicting ones, and the last op on the same stream.
    fn follows(&self, built: &Built, stream: u32, uses: &[Use]) -> SmallVec<[usize; 8]> {
        let mut after: SmallVec<[usize; 8]> = SmallVec::new();
        if self.drop_edges {
            return after;
        }
        after.extend(built.last_on.iter().filter(|(s, _)| *s == stream).map(|&(_, op)| op));
        for u in uses {
            let Some(b) = built.buffers.get(&u.id) else { continue };
            after.extend(b.last_write);
            if u.access.writes() {
                after.extend(b.reads.iter().copied());
            }
        }
        after.sort_unstable();
        after.dedup();
        after
    }
}

/// A device-side loop being recorded into a graph: the body's own recording and, on CUDA,
/// the WHILE node it records into.
pub(crate) struct LoopBody {
    /// The body's recording: into the node's body graph (CUDA), dry (the simulator,
    /// recording) or running (the simulator, replaying: one iteration; see
    /// [`GraphBuild::next_iteration`]).
    pub build: Arc<GraphBuild>,
    /// The condition handle the body's kernels set (CUDA; 0 on the simulator).
    pub handle: u64,
    node: Option<Node>,
}

impl GraphBuild {
    /// Opens a loop in this recording, after every op recorded so far (a loop is a barrier:
    /// its body may touch anything): on CUDA a WHILE node, whose body graph the returned
    /// build captures into; replaying on the simulator, the first iteration's build, which
    /// starts once every earlier op has ended (`join` is a stream to join them on).
    pub(crate) fn open_loop(&self, device: &DeviceShared, join: &RawStream) -> Result<LoopBody> {
        let timeout = device.config.preflight_timeout;
        self.enter(timeout)?;
        let opened = self.open_loop_in_turn(device, join);
        if let Err(e) = &opened {
            crate::sync::lock(&self.built).failed.get_or_insert_with(|| e.clone());
        }
        self.leave();
        opened
    }

    fn open_loop_in_turn(&self, device: &DeviceShared, join: &RawStream) -> Result<LoopBody> {
        if let RawStream::Cuda(stream) = join {
            crate::backend::cuda::bind(stream.context())?;
        }
        // Read (and on CUDA, the node added) under the recording's lock, a leaf: the events a
        // replay's iteration starts after are joined once it is released.
        let events = {
            let built = crate::sync::lock(&self.built);
            if let Some(e) = &built.failed {
                return Err(e.clone());
            }
            match (self.mode, join) {
                (Mode::Capture, RawStream::Cuda(stream)) => {
                    let after: Vec<Node> = built
                        .ops
                        .iter()
                        .flat_map(|t| match t {
                            Tail::Nodes(n) => n.clone(),
                            _ => Vec::new(),
                        })
                        .collect();
                    let graph = built.graph.as_ref().ok_or_else(no_graph)?;
                    // SAFETY: the stream's context, the graph's, was made current above.
                    let WhileNode { node, handle, body } =
                        unsafe { graph.add_while(stream.context().cu_ctx(), &after) }?;
                    let build = GraphBuild::new(device, Mode::Capture, Some(body), None, false);
                    return Ok(LoopBody { build: Arc::new(build), handle, node: Some(node) });
                }
                (Mode::Capture, _) => {
                    return Err(Error::WrongBackend { what: "a graph loop", needed: "cuda", actual: "sim" })
                }
                (Mode::Dry, _) => {
                    let build = GraphBuild::new(device, Mode::Dry, None, None, false);
                    return Ok(LoopBody { build: Arc::new(build), handle: 0, node: None });
                }
                (Mode::Execute, _) => {
                    let mut events: Vec<Arc<RawEvent>> = self.start.iter().cloned().collect();
                    events.extend(built.ops.iter().filter_map(|t| match t {
                        Tail::Event(ev) => Some(ev.clone()),
                        _ => None,
                    }));
                    events
                }
            }
        };
        let start = join_on(device, join, &events)?;
        let build = GraphBuild::new(device, Mode::Execute, None, Some(start), self.drop_edges);
        Ok(LoopBody { build: Arc::new(build), handle: 0, node: None })
    }

    /// Replaying on the simulator: the next iteration's build, after every op of `done` (the
    /// iteration before), whose ends the host has waited for.
    pub(crate) fn next_iteration(
        &self,
        device: &DeviceShared,
        join: &RawStream,
        done: &Finished,
    ) -> Result<Arc<GraphBuild>> {
        let ends: Vec<Arc<RawEvent>> = done.ends.iter().map(|(_, ev)| ev.clone()).collect();
        let start = join_on(device, join, &ends)?;
        Ok(Arc::new(GraphBuild::new(device, Mode::Execute, None, Some(start), self.drop_edges)))
    }

    /// Closes a loop opened with [`open_loop`](Self::open_loop): it becomes one op of this
    /// recording, using what its body used (`body`: what the body's recording left; replaying,
    /// the union over its iterations, all of which the host has seen end), and the last op on
    /// each of `streams` (the graph's branches).
    ///
    /// Replaying, `ends` are the last iteration's ends: the loop ends once all have, on
    /// `join` (stream `join_index`), which later ops and the replay's stream wait for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn close_loop(
        &self,
        device: &DeviceShared,
        body: &LoopBody,
        used: Vec<(Arc<dyn super::Tracked>, Access)>,
        keep: Vec<KeepAlive>,
        streams: &[u32],
        ends: &[Arc<RawEvent>],
        join: (&Arc<RawStream>, u32),
    ) -> Result<()> {
        let tail = match (body.node, self.mode) {
            (Some(node), _) => Tail::Nodes(vec![node]),
            (None, Mode::Execute) => Tail::Event(join_on(device, join.0, ends)?),
            (None, _) => Tail::Nothing,
        };
        self.enter(device.config.preflight_timeout)?;
        let mut built = crate::sync::lock(&self.built);
        let out = match &built.failed {
            Some(e) => Err(e.clone()),
            None => {
                let op = built.ops.len();
                if let Tail::Event(ev) = &tail {
                    let (raw, index) = join;
                    match built.ends.iter_mut().find(|(i, _, _)| *i == index) {
                        Some(end) => end.2 = ev.clone(),
                        None => built.ends.push((index, raw.clone(), ev.clone())),
                    }
                }
                built.ops.push(tail);
                let uses: Vec<Use> = used
                    .into_iter()
                    .map(|(buf, access)| {
                        let id = buf.track().id.0;
                        Use { buf, access, id }
                    })
                    .collect();
                enter_uses(&mut built, &uses, op);
                for &index in streams {
                    match built.last_on.iter_mut().find(|(s, _)| *s == index) {
                        Some(last) => last.1 = op,
                        None => built.last_on.push((index, op)),
                    }
                }
                built.keep.extend(keep);
                Ok(())
            }
        };
        drop(built);
        self.leave();
        out
    }
}

/// An event on `join` after every event of `events`.
fn join_on(device: &DeviceShared, join: &RawStream, events: &[Arc<RawEvent>]) -> Result<Arc<RawEvent>> {
    for ev in events {
        join.wait(ev)?;
    }
    let start = device.backend().new_event()?;
    join.record(&start)?;
    Ok(Arc::new(start))
}

impl LaunchRecorder {
    /// The recording preflight: waits for the recording's turn, then opens the op's capture
    /// after the ops it must follow (CUDA), makes its stream wait for them (replaying), or
    /// sends its work nowhere (recording on the simulator).
    pub(super) fn admit_recording(&mut self, device: &Device, slot: &StreamSlot, lent: LentTo) -> Result<Reserved> {
        let build = lent.0;
        if self.uses.iter().any(|u| u.track().device.uid != build.device) {
            return Err(Error::Recording {
                what: "a launch that uses another device's memory".into(),
                hint: "record peer copies and peer launches outside the graph",
            });
        }
        let shared = &device.shared;
        build.enter(shared.config.preflight_timeout)?;
        match self.open(shared, slot, &build) {
            Ok((raw, epoch)) => Ok(Reserved::new(self.stream, raw, epoch, Admission::Recording { build })),
            Err(e) => {
                build.leave();
                Err(e)
            }
        }
    }

    /// The op's turn has begun: opens its capture (see [`admit_recording`](Self::admit_recording)).
    fn open(&self, shared: &DeviceShared, slot: &StreamSlot, build: &GraphBuild) -> Result<(Arc<RawStream>, u64)> {
        let (raw, epoch) = slot.raw_and_epoch();
        if epoch != shared.epoch() {
            return Err(shared.poison_since(epoch));
        }
        // What the op follows, read under the recording's lock (a leaf: nothing else is taken
        // under it; the turn keeps the graph to this thread until the commit).
        let (roots, events) = {
            let built = crate::sync::lock(&build.built);
            if let Some(e) = &built.failed {
                return Err(e.clone());
            }
            let mut roots: Vec<Node> = Vec::new();
            let mut events: Vec<Arc<RawEvent>> = build.start.iter().cloned().collect();
            for i in build.follows(&built, self.stream.index, &self.uses) {
                match &built.ops[i] {
                    Tail::Nodes(n) => roots.extend(n.iter().copied()),
                    Tail::Event(ev) => events.push(ev.clone()),
                    Tail::Nothing => {}
                }
            }
            (roots, events)
        };
        match build.mode {
            Mode::Capture => {
                let RawStream::Cuda(stream) = &*raw else {
                    return Err(Error::WrongBackend { what: "a graph capture", needed: "cuda", actual: "sim" });
                };
                crate::backend::cuda::bind(stream.context())?;
                // Counted before the stream is marked capturing and the recording's lock is
                // taken (the count may wait for a destroy): a destroy that synchronizes the
                // device (which would invalidate the capture) runs before or after it, never
                // during (see `captures`).
                let counted = crate::backend::cuda::captures::Opened::new(stream.context().ordinal());
                slot.set_capturing(true);
                let begun = {
                    let built = crate::sync::lock(&build.built);
                    match built.graph.as_ref() {
                        // SAFETY: 1. The stream is live (its slot holds it) and its context is
                        // current. 2. It is lent to this recording, whose turn this thread
                        // holds, so no other op captures on it, and its frees wait at its gate
                        // while it captures. 3. `roots` are nodes of this graph.
                        Some(graph) => unsafe { graph.begin_capture(stream.cu_stream(), &roots) },
                        None => Err(no_graph()),
                    }
                };
                if let Err(e) = begun {
                    slot.set_capturing(false);
                    drop(counted);
                    return Err(e);
                }
                // Counted closed by `close`, which every admitted op reaches (its drop too).
                counted.begun();
                Ok((raw, epoch))
            }
            Mode::Execute => {
                for ev in &events {
                    raw.wait(ev)?;
                }
                Ok((raw, epoch))
            }
            Mode::Dry => Ok((Arc::new(raw.discarding()), epoch)),
        }
    }
}

fn no_graph() -> Error {
    Error::Recording { what: "the recording has no graph".into(), hint: "record again" }
}

impl LaunchRecorder {
    /// The closure form of a recorded launch: runs `enqueue` on the launch's scope and ends
    /// the op's turn (on unwind too, so that no capture stays open). Returns the value and the
    /// recording, which keeps what the op's completion would have kept alive.
    pub(super) fn run_recorded<R>(
        &self,
        device: &Device,
        reserved: Reserved,
        enqueue: impl FnOnce(&super::LaunchScope<'_>) -> Result<R>,
    ) -> Result<(R, Arc<GraphBuild>)> {
        let Admission::Recording { build } = &reserved.admission else {
            return Err(Error::Recording {
                what: "a launch not admitted for recording".into(),
                hint: "this is a defect of cusched; please report it",
            });
        };
        let build = build.clone();
        let mut ending = Ending { device: &device.shared, reserved: &reserved, uses: &self.uses, armed: true };
        let out = enqueue(&super::LaunchScope::new(&reserved, &self.uses));
        ending.armed = false;
        let ended = reserved.end_recorded(&device.shared, &self.uses, out.as_ref().err());
        let value = out?;
        ended?;
        Ok((value, build))
    }
}

/// A recorded launch between admission and the end of its turn: ends it on unwind too.
struct Ending<'a> {
    device: &'a DeviceShared,
    reserved: &'a Reserved,
    uses: &'a [Use],
    armed: bool,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if self.armed {
            let unwound = Error::JobPanicked { message: "a recorded launch's enqueue closure panicked".into() };
            let _ = self.reserved.end_recorded(self.device, self.uses, Some(&unwound));
        }
    }
}

/// The recording a stream is lent to, as [`StreamSlot::recording`] hands it out.
pub(super) struct LentTo(Arc<GraphBuild>);

impl LentTo {
    /// The recording behind `lent`, if it is one of this module's (streams are lent to
    /// nothing else).
    pub(super) fn of(lent: Arc<dyn std::any::Any + Send + Sync>) -> Result<LentTo> {
        lent.downcast::<GraphBuild>().map(LentTo).map_err(|_| Error::Recording {
            what: "the stream is lent to something that is not a graph recording".into(),
            hint: "this is a defect of cusched; please report it",
        })
    }
}

/// Hands `object` (a library object retired on a stream the recording holds) to the
/// recording, which keeps it for the graph's life; gives it back if `lent` is not a recording.
pub(crate) fn keep_for_recording(lent: Arc<dyn std::any::Any + Send + Sync>, object: KeepAlive) -> Option<KeepAlive> {
    match LentTo::of(lent) {
        Ok(build) => {
            build.0.keep(vec![object]);
            None
        }
        Err(_) => Some(object),
    }
}

/// Refuses an op that cannot be a graph node when its stream is lent to a recording: abandons
/// that recording and returns the error `refusal` makes. `Ok` on any other stream, and on one
/// that cannot be looked up (the op's own launch reports that, in its order).
pub(crate) fn refuse_if_recording(
    device: &DeviceShared,
    stream: crate::device::StreamId,
    refusal: impl FnOnce() -> Error,
) -> Result<()> {
    let Ok(slot) = device.stream(stream) else { return Ok(()) };
    if slot.recording().is_none() {
        return Ok(());
    }
    Err(abandon_recording(slot, refusal()))
}

/// Abandons the recording `slot` is lent to with `e` (an allocation inside an op's capture,
/// say), and returns `e`.
pub(crate) fn abandon_recording(slot: &StreamSlot, e: Error) -> Error {
    if let Some(Ok(lent)) = slot.recording().map(LentTo::of) {
        lent.0.fail(e.clone());
    }
    e
}

impl Reserved {
    /// Ends a recorded op's turn: closes its capture (CUDA) or marks its end (replaying), and
    /// enters its uses into the recording. `failed`: the op's enqueue failed, which abandons
    /// the recording (its graph would lack the op's work).
    pub(super) fn end_recorded(&self, device: &DeviceShared, uses: &[Use], failed: Option<&Error>) -> Result<()> {
        let Admission::Recording { build } = &self.admission else {
            return Ok(());
        };
        let ended = self.close(device, build);
        let mut built = crate::sync::lock(&build.built);
        let out = match (ended, failed) {
            (Ok(tail), None) => {
                let op = built.ops.len();
                built.ops.push(tail);
                enter_uses(&mut built, uses, op);
                let index = self.stream.index;
                match built.last_on.iter_mut().find(|(s, _)| *s == index) {
                    Some(last) => last.1 = op,
                    None => built.last_on.push((index, op)),
                }
                if let Tail::Event(ev) = &built.ops[op] {
                    let ev = ev.clone();
                    note_end(&mut built, self, ev);
                }
                Ok(())
            }
            (Ok(_), Some(e)) => Err(e.clone()),
            (Err(e), _) => Err(e),
        };
        if let Err(e) = &out {
            built.failed.get_or_insert_with(|| e.clone());
        }
        drop(built);
        build.leave();
        out
    }

    /// The backend's part of [`end_recorded`](Self::end_recorded).
    fn close(&self, device: &DeviceShared, build: &GraphBuild) -> Result<Tail> {
        match build.mode {
            Mode::Capture => {
                let RawStream::Cuda(stream) = &*self.raw else {
                    return Err(Error::WrongBackend { what: "a graph capture", needed: "cuda", actual: "sim" });
                };
                // The capture ends first, whatever else fails: no stream stays capturing.
                let tail = {
                    let built = crate::sync::lock(&build.built);
                    match built.graph.as_ref() {
                        // SAFETY: the admission opened a capture into this graph on this stream,
                        // on this thread, with its context current; it is ended exactly once.
                        Some(graph) => unsafe { graph.end_capture(stream.cu_stream()) },
                        None => Err(no_graph()),
                    }
                };
                crate::backend::cuda::captures::closed(stream.context().ordinal());
                // By index: no check of the device's state stands between the capture's end
                // and the gate's.
                if let Some(slot) = device.slot_by_index(self.stream.index) {
                    slot.set_capturing(false);
                }
                tail.map(Tail::Nodes).map_err(|e| Error::Recording {
                    what: format!("the op could not be captured into a graph ({e})"),
                    hint: "ops that synchronize with the host, allocate or read results back cannot be recorded; run them outside the recording",
                })
            }
            Mode::Execute => {
                let ev = device.backend().new_event()?;
                self.raw.record(&ev)?;
                Ok(Tail::Event(Arc::new(ev)))
            }
            Mode::Dry => Ok(Tail::Nothing),
        }
    }
}

/// Enters op `op`'s uses into the recording's buffers.
fn enter_uses(built: &mut Built, uses: &[Use], op: usize) {
    for u in uses {
        let b = built.buffers.entry(u.id).or_insert_with(|| Buffer {
            buf: Use { buf: u.buf.clone(), access: u.access, id: u.id },
            last_write: None,
            reads: SmallVec::new(),
        });
        b.buf.access = b.buf.access.merge(u.access);
        if u.access.writes() {
            b.last_write = Some(op);
            b.reads.clear();
        } else {
            b.reads.push(op);
        }
    }
}

/// Replaying: the op's event is now the last on its stream.
fn note_end(built: &mut Built, launch: &Reserved, ev: Arc<RawEvent>) {
    let index = launch.stream.index;
    match built.ends.iter_mut().find(|(i, _, _)| *i == index) {
        Some(end) => end.2 = ev,
        None => built.ends.push((index, launch.raw.clone(), ev)),
    }
}
