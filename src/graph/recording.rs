//! [`Recording`]: what a graph's recording closure records on, and one run of that closure
//! against a recording in progress.

use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::libs::Handles;
use crate::recorder::{GraphBuild, LoopBody, Substitute, Tracked};
use crate::track::Access;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// How many branches (streams) one graph may record on.
pub(crate) const MAX_BRANCHES: usize = 16;

/// One branch of a graph: a stream of the device that the graph holds for its life, and the
/// library handles on it (made when first asked for, kept for every later recording and
/// replay, so that the library objects the graph's nodes use live as long as the graph).
pub(crate) struct Branch {
    pub stream: StreamId,
    pub handles: Option<Handles>,
}

/// What a graph's recording closure records on ([`Graph::record`](crate::Graph::record)).
///
/// Ops on [`stream`](Self::stream)`(b)` (or through [`handles`](Self::handles)`(b)`) are
/// recorded into the graph, not run: library ops, typed and recorder launches, copies between
/// device buffers and pinned host buffers, fills. An op follows the op before it on its branch
/// and the recorded ops it conflicts with on other branches (it reads what they wrote, or
/// writes what they read or wrote), so branches fork and join where the data says. An op the
/// closure enqueues on any other stream is refused ([`Error::Recording`]): the closure runs
/// again for a rebinding (and on the simulator for every replay), where eager work would run
/// again too.
///
/// Allocations and uploads on a branch happen at once, outside the graph (a library's
/// workspace grows this way the first time an op needs it); an op that cannot be a graph node
/// (a download, a blocking copy from a host slice, an op whose result the host reads back)
/// fails with [`Error::Recording`] and abandons the recording.
///
/// ```
/// use cusched::{Device, Graph, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let x = device.upload(s, &[1.0f32, 2.0, 3.0])?;
/// let y = device.alloc_zeros::<f32>(s, 3)?;
/// let (xr, yr) = (x.clone(), y.clone());
/// let graph = Graph::record(&device, move |rec| {
///     let b = rec.stream(0)?;
///     let (xm, ym) = (xr.sim_data()?, yr.sim_data()?);
///     let mut launch = LaunchRecorder::new_strict(b).named("double");
///     launch.read(&xr)?.write(&yr)?;
///     launch.launch(rec.device(), |scope| {
///         scope.sim_kernel(move || {
///             for (o, i) in ym.lock().iter_mut().zip(xm.read().iter()) { *o = 2.0 * i; }
///         })
///     })
/// })?;
/// let exec = graph.instantiate()?;
/// exec.replay(s)?.wait()?;
/// assert_eq!(y.download(s)?, [2.0, 4.0, 6.0]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Recording<'g> {
    pub(super) device: &'g Device,
    pub(super) branches: &'g mut Vec<Branch>,
    pub(super) build: &'g Arc<GraphBuild>,
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({} branches)", self.branches.len())
    }
}

impl Recording<'_> {
    /// The device the graph belongs to.
    pub fn device(&self) -> &Device {
        self.device
    }

    /// The stream of branch `branch` (made on first use; at most 16 branches): ops enqueued
    /// on it are recorded into the graph.
    pub fn stream(&mut self, branch: usize) -> Result<StreamId> {
        while self.branches.len() <= branch {
            if self.branches.len() == MAX_BRANCHES {
                return Err(Error::invalid(
                    "branch",
                    format!("is {branch}; a graph records on at most {MAX_BRANCHES} branches"),
                ));
            }
            let stream = self.device.shared.lane_stream("graph")?;
            self.branches.push(Branch { stream, handles: None });
            lend(self.device, stream, self.build)?;
        }
        Ok(self.branches[branch].stream)
    }

    /// The library handles on branch `branch`'s stream: their ops are recorded into the graph.
    pub fn handles(&mut self, branch: usize) -> Result<&mut Handles> {
        let stream = self.stream(branch)?;
        let b = &mut self.branches[branch];
        if b.handles.is_none() {
            b.handles = Some(Handles::new(self.device, stream)?);
        }
        b.handles.as_mut().ok_or(Error::Recording { what: "branch handles".into(), hint: "record again" })
    }
}

impl Recording<'_> {
    /// Records a device-side loop: `body` records the loop's body (on this recording's
    /// branches, as the closure does), and every replay runs that body again and again on the
    /// GPU, with no host round trip, until a kernel of the body sets the loop's condition to 0.
    /// The body runs at least once per replay.
    ///
    /// On CUDA this is a WHILE conditional node (CUDA 12.4 or later) whose body graph holds the
    /// body's ops. A kernel ends the loop by calling `cudaGraphSetConditional(handle, 0)`
    /// with the [`LoopCondition::handle`] it was given as an argument (a `u64`, the CUDA
    /// type `cudaGraphConditionalHandle`); prepend [`LoopCondition::DEVICE_DECLARATION`] to
    /// the kernel's source to declare that function. A condition left at 1 loops forever, as
    /// a `while (true)` would. On the simulator a simulated kernel sets it with
    /// [`LoopCondition::set_simulated`], and a replay runs the body's ops iteration by
    /// iteration under the hazard checker.
    ///
    /// The loop is one op of the recording: it follows every op recorded before it (its body
    /// may touch anything), and later ops follow it where their uses conflict with the body's.
    /// A body graph holds kernels, copies and fills only (CUDA's rule for conditional
    /// bodies): a library op that allocates or records events inside its work cannot be in a
    /// loop, and fails the recording with [`Error::Recording`].
    pub fn while_loop<F>(&mut self, body: F) -> Result<()>
    where
        F: FnMut(&mut Recording<'_>, &LoopCondition) -> Result<()>,
    {
        let join = self.stream(0)?;
        let shared = &self.device.shared;
        let join_raw = shared.stream(join)?.raw_and_epoch().0;
        let outer = self.build.clone();
        let looped =
            outer.open_loop(shared, &join_raw).and_then(|opened| self.run_loop(&outer, &join_raw, opened, body));
        if let Err(e) = &looped {
            outer.fail(e.clone());
        }
        looped
    }

    /// Runs `body` once into `opened`'s build (recording), or until its condition is 0
    /// (replaying on the simulator), with the branches lent to the body meanwhile; then closes
    /// the loop in `outer`.
    fn run_loop<F>(
        &mut self,
        outer: &Arc<GraphBuild>,
        join: &Arc<crate::backend::RawStream>,
        opened: LoopBody,
        mut body: F,
    ) -> Result<()>
    where
        F: FnMut(&mut Recording<'_>, &LoopCondition) -> Result<()>,
    {
        let condition = LoopCondition { handle: opened.handle, flag: Arc::new(AtomicU32::new(1)) };
        let replaying = outer.mode == crate::recorder::RecordingMode::Execute;
        let mut used: BTreeMap<u64, (Arc<dyn Tracked>, Access)> = BTreeMap::new();
        let mut keep = Vec::new();
        let mut build = opened.build.clone();
        let mut ends = Vec::new();
        loop {
            let finished = {
                let _lent = Relend::to(self.device, outer, &build)?;
                let mut rec = Recording { device: self.device, branches: &mut *self.branches, build: &build };
                let ran = body(&mut rec, &condition);
                let finished = build.finish();
                ran?;
                finished?
            };
            for (buf, access) in &finished.uses {
                let id = buf.track().id.0;
                used.entry(id).and_modify(|u| u.1 = u.1.merge(*access)).or_insert_with(|| (buf.clone(), *access));
            }
            if !replaying {
                keep.extend(finished.keep);
                break;
            }
            // The host reads the condition once the iteration has ended, as the GPU does.
            for (_, end) in &finished.ends {
                end.synchronize()?;
            }
            if !condition.keeps_going() {
                keep.extend(finished.keep);
                ends = finished.ends.into_iter().map(|(_, ev)| ev).collect();
                break;
            }
            build = outer.next_iteration(&self.device.shared, join, &finished)?;
            keep.extend(finished.keep);
        }
        let streams: Vec<u32> = self.branches.iter().map(|b| b.stream.index).collect();
        let join = (join, self.branches.first().map_or(0, |b| b.stream.index));
        outer.close_loop(&self.device.shared, &opened, used.into_values().collect(), keep, &streams, &ends, join)
    }
}

/// The condition of a device-side loop ([`Recording::while_loop`]): the body runs again while
/// it is non-zero.
#[derive(Clone, Debug)]
pub struct LoopCondition {
    handle: u64,
    flag: Arc<AtomicU32>,
}

impl LoopCondition {
    /// The declaration of CUDA's device function that sets a loop's condition, for a kernel's
    /// source (NVRTC declares the types it names):
    /// `cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value)`.
    pub const DEVICE_DECLARATION: &'static str = "extern \"C\" __device__ __cudart_builtin__ void CUDARTAPI \
cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);\n";

    /// The condition's CUDA handle (`cudaGraphConditionalHandle`), to pass to the kernel that
    /// sets it; 0 on the simulator.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// Sets the condition from a simulated kernel (the simulator's `cudaGraphSetConditional`):
    /// `false` ends the loop after the current iteration. On CUDA the condition lives on the
    /// GPU, where only kernels set it; a simulated kernel never runs there.
    pub fn set_simulated(&self, keep_going: bool) {
        self.flag.store(u32::from(keep_going), Ordering::Release);
    }

    fn keeps_going(&self) -> bool {
        self.flag.load(Ordering::Acquire) != 0
    }
}

/// The branches lent to a loop body's recording, and lent back to the recording around it
/// when dropped (on unwind too).
struct Relend<'a> {
    device: &'a Device,
    outer: &'a Arc<GraphBuild>,
    body: &'a Arc<GraphBuild>,
}

impl<'a> Relend<'a> {
    fn to(device: &'a Device, outer: &'a Arc<GraphBuild>, body: &'a Arc<GraphBuild>) -> Result<Relend<'a>> {
        let moved = Relend { device, outer, body };
        move_lent(device, outer, body)?;
        Ok(moved)
    }
}

impl Drop for Relend<'_> {
    fn drop(&mut self) {
        if let Err(e) = move_lent(self.device, self.body, self.outer) {
            self.outer.fail(e);
        }
    }
}

/// Lends every stream lent to `from` to `to` instead.
fn move_lent(device: &Device, from: &GraphBuild, to: &Arc<GraphBuild>) -> Result<()> {
    let mut out = Ok(());
    for stream in from.take_lent() {
        if let Ok(slot) = device.shared.stream(stream) {
            slot.end_recording();
        }
        if let Err(e) = lend(device, stream, to) {
            out = out.and(Err(e));
        }
    }
    out
}

/// Lends `stream` to `build`.
fn lend(device: &Device, stream: StreamId, build: &Arc<GraphBuild>) -> Result<()> {
    let lent: Arc<dyn std::any::Any + Send + Sync> = build.clone();
    device.shared.stream(stream)?.lend_to_recording(lent).map_err(|_| Error::Recording {
        what: format!("{stream} is held by another graph recording already"),
        hint: "record one graph at a time on a stream",
    })?;
    build.note_lent(stream);
    Ok(())
}

/// The closure a graph is recorded with, run again for rebinding and (on the simulator) for
/// every replay.
pub(crate) type RecordFn = Box<dyn FnMut(&mut Recording<'_>) -> Result<()> + Send>;

/// Runs `record` once against `build`: lends the graph's branches to it for the run (and any
/// branch the run adds), with `substitutes` in force, and takes them back after, whatever
/// happens (an error, a panic). Returns the closure's result.
pub(crate) fn run_once(
    device: &Device,
    branches: &mut Vec<Branch>,
    build: &Arc<GraphBuild>,
    substitutes: &[Substitute],
    record: &mut RecordFn,
) -> Result<()> {
    /// Takes back every stream lent to the build, on unwind too.
    struct GiveBack<'a> {
        device: &'a Device,
        build: &'a GraphBuild,
    }
    impl Drop for GiveBack<'_> {
        fn drop(&mut self) {
            for stream in self.build.take_lent() {
                if let Ok(slot) = self.device.shared.stream(stream) {
                    slot.end_recording();
                }
            }
        }
    }
    let _give_back = GiveBack { device, build };
    for b in branches.iter() {
        lend(device, b.stream, build)?;
    }
    let mut rec = Recording { device, branches, build };
    crate::recorder::with_substitutes(substitutes, || record(&mut rec))
}
