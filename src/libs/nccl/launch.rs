//! The op path of collectives, and groups.
//!
//! An op is validated into a [`Planned`]: its strict recorder, the raw NCCL calls (CUDA) or
//! the host computation (simulator), and the completion the caller already holds. Outside a
//! group it launches at once; inside [`group`] it is queued, and the group launches every
//! queued op together. A launch nests the ops' launches in each other's enqueue closures, so
//! that every op is preflighted (fenced, its buffers held) before anything is enqueued, the
//! innermost enqueues them all (between `ncclGroupStart` and `ncclGroupEnd` on CUDA), and each
//! op commits as its closure returns, even when the group failed (contract 4), leaving what
//! its launch returned in its place; the ops are then finished (their completions given
//! their events) in the order they were called. An op is one recorded launch on its own
//! stream, whatever the group holds.

use super::calls::Call;
use super::comm::Communicator;
use super::enqueue::{enqueue_all, enqueue_one, Watched};
use super::sim::SimRank;
use super::DType;
use crate::completion::{Completion, KeepAlive, Shared, Verdict};
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::recorder::{LaunchRecorder, LaunchScope, Launched, SimEnqueuer};
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

/// The ops of one launch: one outside a group, a rank's few inside one. Kept inline, so that
/// a collective's launch allocates no list of its own.
pub(super) type Few<T> = SmallVec<[T; 2]>;

/// What a simulated op's kernel leaves for its completion.
pub(super) type Slot = Arc<Mutex<Option<Result<()>>>>;

/// A simulated op's kernel body: given its communicator and round number.
pub(super) type SimBody = Box<dyn FnOnce(&SimRank, u64) -> Result<()> + Send>;

/// What launching an op takes: its recorder, device (`D`: owned or borrowed), and its
/// communicator and work, which its launch takes (the recorder stays in place: it is large to
/// copy).
struct Launch<D> {
    rec: LaunchRecorder,
    device: D,
    op: Option<(Communicator, Work)>,
}

/// A handle that keeps one of an op's buffers alive.
pub(super) type Holder = Arc<dyn std::any::Any + Send + Sync>;

/// An op, validated and recorded, not yet launched.
pub(super) struct Planned {
    launch: Launch<Device>,
    /// The caller's completion, until the op is finished or abandoned.
    fill: Option<Arc<Shared<()>>>,
    /// Handles to the op's buffers, kept until the GPU is done with the op: a buffer dropped
    /// between the op's call and its group's launch must not be freed before it. (A CUDA op
    /// outside a group is launched in its call, under the caller's borrow, without a `Planned`.)
    keep: Few<Holder>,
}

/// What an op enqueues.
pub(super) enum Work {
    /// NCCL calls on the op's stream; `premul` holds a PreMulSum scalar (one element of
    /// `dtype`, little-endian) whose op replaces each call's reduction.
    Cuda { calls: Few<Call>, dtype: DType, premul: Option<[u8; 8]> },
    /// The simulated kernel; `collective` ops take a round number.
    Sim { collective: bool, body: SimBody, slot: Slot },
}

impl Work {
    /// The simulated form of an op.
    pub(super) fn sim(collective: bool, body: SimBody) -> Work {
        Work::Sim { collective, body, slot: Arc::new(Mutex::new(None)) }
    }
}

thread_local! {
    /// The ops queued by this thread's open [`group`], if one is open.
    static GROUP: RefCell<Option<Vec<Planned>>> = const { RefCell::new(None) };
    /// The list of this thread's last group, emptied, for its next group: a group allocates
    /// no list of its own.
    static SPARE: Cell<Vec<Planned>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with an NCCL group open on this thread: every collective `f` calls (on any
/// [`Nccl`](super::Nccl) and communicator, of one rank or of several) is queued, and when `f`
/// returns they are launched together, as one NCCL group (`ncclGroupStart` ...
/// `ncclGroupEnd`). This is how one thread drives several ranks (every rank's collective must
/// be enqueued before any of them can finish), and how sends and receives pair up
/// without waiting for each other.
///
/// The completions the ops return resolve once the group has run; do not wait for one inside
/// `f` (nothing is enqueued before `f` returns). Each op is still one recorded op on its own
/// stream: all are preflighted before any is enqueued, and all commit even when the group
/// fails, which then fails the buffers every op of the group writes. Ops of one group must
/// not use one buffer in conflicting ways (NCCL runs them in any order): that is refused
/// with [`Error::WouldDeadlock`] for buffers on different streams. When `f` fails, nothing is
/// enqueued, and the queued ops' completions resolve with its error. An op whose launch
/// fails after the group was enqueued (its commit) aborts its communicator, whose work would
/// otherwise run on unfollowed. Groups nest: an inner group's ops launch with the outer one.
///
/// ```
/// use cusched::{nccl::{self, Communicator, CommConfig}, Device, Handles, SimConfig};
/// let gpus = Device::sim_group(SimConfig::default(), 2)?;
/// let comms = Communicator::init_all(&gpus, &CommConfig::default())?;
/// let mut h: Vec<Handles> = gpus.iter().map(|g| Handles::new(g, g.default_stream())).collect::<Result<_, _>>()?;
/// let x: Vec<_> = gpus.iter().map(|g| g.upload(g.default_stream(), &[g.ordinal() as i32; 3])).collect::<Result<_, _>>()?;
/// let y: Vec<_> = gpus.iter().map(|g| g.alloc_zeros::<i32>(g.default_stream(), 3)).collect::<Result<_, _>>()?;
/// // Each rank sends its buffer to the other: the sends and receives pair up in one group.
/// let done = nccl::group(|| {
///     let mut done = Vec::new();
///     for r in 0..2 {
///         done.push(h[r].nccl()?.send(&comms[r], &x[r], 1 - r)?);
///         done.push(h[r].nccl()?.recv(&comms[r], &y[r], 1 - r)?);
///     }
///     Ok(done)
/// })?;
/// for r in cusched::wait_all(done) {
///     r?;
/// }
/// assert_eq!(y[0].download(gpus[0].default_stream())?, [1, 1, 1]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let outer = GROUP.with(|g| g.borrow().is_some());
    if outer {
        return f();
    }
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            // Closes the group however `f` ended (an unwind too): what it queued never runs.
            if let Some(mut ops) = GROUP.with(|g| g.borrow_mut().take()) {
                abandon(&mut ops, &Error::JobPanicked { message: "the group's closure panicked".into() });
            }
        }
    }
    GROUP.with(|g| *g.borrow_mut() = Some(SPARE.take()));
    let close = Close;
    let out = f();
    let mut ops = GROUP.with(|g| g.borrow_mut().take()).unwrap_or_default();
    drop(close);
    let out = match out {
        Ok(v) => launch_all(&mut ops).map(|()| v),
        Err(e) => {
            abandon(&mut ops, &e);
            Err(e)
        }
    };
    // The ops' recorders and handles go now: what the GPU still needs, their commits and
    // completions hold.
    ops.clear();
    SPARE.set(ops);
    out
}

/// Resolves the completions of ops that were never launched with `e`.
fn abandon<'a>(ops: impl IntoIterator<Item = &'a mut Planned>, e: &Error) {
    for fill in ops.into_iter().filter_map(|op| op.fill.take()) {
        fill.enqueued(Err(e.clone()), None, Vec::new());
    }
}

/// Launches `rec`'s op (or queues it in this thread's open group) and returns its completion.
/// `keep` makes the handles that keep the op's buffers alive, asked for only where the op
/// outlives its call (queued in a group) or the simulator's kernel reads them later.
pub(super) fn submit(
    rec: LaunchRecorder,
    device: &Device,
    comm: &Communicator,
    work: Work,
    keep: impl FnOnce() -> Few<Holder>,
) -> Result<Completion<()>> {
    let in_group = GROUP.with(|g| g.borrow().is_some());
    if !in_group && matches!(work, Work::Cuda { .. }) {
        return launch_one(Launch { rec, device, op: Some((comm.clone(), work)) });
    }
    let (completion, fill) = Completion::queued(&device.shared);
    let completion = finished(completion, &work);
    let keep = if in_group || matches!(work, Work::Sim { .. }) { keep() } else { Few::new() };
    let mut op = Planned {
        launch: Launch { rec, device: device.internal(), op: Some((comm.clone(), work)) },
        fill: Some(fill),
        keep,
    };
    if !in_group {
        return launch_all(std::slice::from_mut(&mut op)).map(|()| completion);
    }
    GROUP.with(|g| match g.borrow_mut().as_mut() {
        Some(ops) => ops.push(op),
        None => abandon([&mut op], &Error::invalid("group", "the group closed while its op was queued")),
    });
    Ok(completion)
}

/// The caller's completion: on the simulator, the op's event and then the kernel's outcome. A
/// CUDA op's completion is the op's own: its value is decided when its event is passed (see
/// [`finish`]).
fn finished(completion: Completion<()>, work: &Work) -> Completion<()> {
    match work {
        Work::Sim { slot, .. } => {
            let slot = slot.clone();
            completion.try_map(move |()| {
                let outcome = crate::sync::lock_unranked(&slot).take();
                outcome.unwrap_or_else(|| {
                    Err(Error::JobPanicked { message: "the simulated NCCL op's host computation panicked".into() })
                })
            })
        }
        Work::Cuda { .. } => completion,
    }
}

/// Launches a CUDA op outside a group, and makes its completion only now, in place: the op
/// path allocates nothing for it (see [`finish`] for the verdict it carries). What [`enter`]
/// and [`enqueue_all`] do for a group, for one op, without their lists.
fn launch_one(mut launch: Launch<&Device>) -> Result<Completion<()>> {
    let device = launch.device;
    let Some((comm, Work::Cuda { calls, dtype, premul })) = launch.op.take() else {
        return Err(Error::invalid("comm", "the op is not a CUDA op to launch"));
    };
    let stream = launch.rec.stream();
    refuse_recorded(device, stream)?;
    let mut watched = None;
    let launched = launch.rec.launch_event_in_place(device, |scope| {
        watched = Some(enqueue_one(comm, &calls, dtype, premul, cuda_target(scope)?)?);
        Ok(())
    });
    let Launched { event, trace, .. } = match launched {
        Ok(launched) => launched,
        Err(e) => {
            if let Some(w) = watched {
                w.abandon(&e);
            }
            return Err(e);
        }
    };
    let watched = watched.and_then(|w| w.publish(event.clone()));
    Ok(match (watched, event) {
        (Some((comm, watch)), Some(event)) => {
            let verdict = Verdict::new(comm.inner, watch.token());
            Completion::judged(&device.shared, Ok(()), event, verdict, trace)
        }
        (_, event) => Completion::enqueued(&device.shared, Ok(()), event, Vec::new(), trace),
    })
}

/// Launches `ops` together: see the module docs.
fn launch_all(ops: &mut [Planned]) -> Result<()> {
    let Some(first) = ops.first() else { return Ok(()) };
    let sim = first.launch.device.is_simulated();
    if ops.iter().any(|op| op.launch.device.is_simulated() != sim) {
        let e = Error::invalid("comm", "one group mixes simulated and CUDA communicators");
        abandon(ops.iter_mut(), &e);
        return Err(e);
    }
    // The recorders stay where the group queued them (a recorder is large to copy): each
    // level borrows its op's recorder, the innermost every op's work, and each launch leaves
    // what it returns in its op's place in `done`.
    let mut levels: Few<(&mut LaunchRecorder, &Device)> = Few::new();
    let mut works: Few<&mut Option<(Communicator, Work)>> = Few::new();
    for op in ops.iter_mut() {
        let Launch { rec, device, op } = &mut op.launch;
        levels.push((rec, &*device));
        works.push(op);
    }
    let mut done: Few<Option<Launched<()>>> = levels.iter().map(|_| None).collect();
    let (mut targets, mut watched) = (Few::new(), Few::new());
    let result = enter(&mut levels, &mut works, &mut targets, &mut watched, &mut done);
    drop((levels, works));
    // In the order the ops were called, which is the order their watches were claimed in, so
    // that each publish can release the event of the op claimed before it (see `slots`).
    let mut watched = watched.into_iter();
    for (op, launched) in ops.iter_mut().zip(done) {
        match (launched, watched.next().flatten(), &result) {
            (Some(launched), watched, _) => finish(op, launched, watched),
            (None, Some(watched), Err(e)) => watched.abandon(e),
            (None, ..) => {}
        }
    }
    if let Err(e) = &result {
        abandon(ops.iter_mut(), e);
    }
    result
}

/// Where an entered op enqueues.
pub(super) enum Target {
    /// The op's CUDA stream, alive through the launch that entered it.
    Cuda(super::calls::RawStream),
    /// The op's simulated stream (to put the ops of one stream in one kernel) and enqueuer.
    Sim(StreamId, SimEnqueuer),
}

/// Enters the first level's launch (preflight), and inside it the rest; the innermost
/// enqueues every op (`works`, on `targets`), each op's watch landing in `watched` at its
/// index. Each level leaves what its launch returned in its place in `done`.
fn enter(
    levels: &mut [(&mut LaunchRecorder, &Device)],
    works: &mut [&mut Option<(Communicator, Work)>],
    targets: &mut Few<Target>,
    watched: &mut Few<Option<Watched>>,
    done: &mut [Option<Launched<()>>],
) -> Result<()> {
    let (Some(((rec, device), rest)), Some((here, inner))) = (levels.split_first_mut(), done.split_first_mut()) else {
        return enqueue_all(works, std::mem::take(targets), watched);
    };
    let stream = rec.stream();
    refuse_recorded(device, stream)?;
    *here = Some(rec.launch_event_in_place(device, |scope| {
        targets.push(target(scope, stream)?);
        enter(rest, works, targets, watched, inner)
    })?);
    Ok(())
}

/// Gives a launched op's completion its event (and, on CUDA, the verdict of its watch, which
/// it publishes first).
fn finish(op: &mut Planned, launched: Launched<()>, watched: Option<Watched>) {
    let Launched { event, trace, .. } = launched;
    let Some(fill) = op.fill.take() else { return };
    if let Some(t) = trace {
        fill.set_trace(t);
    }
    let keep = std::mem::take(&mut op.keep);
    match (watched.and_then(|w| w.publish(event.clone())), event) {
        // The watchdog fails the op (before aborting the communicator, which is what lets its
        // kernels return) when its peers are gone: the value is read once the op's event is
        // passed, by whoever resolves the completion.
        //
        // The buffers need no keeping past this point: the op's uses are committed, so a
        // buffer dropped now is freed after the op, like after any tracked op. Nor does the
        // verdict hold anything the GPU uses, so the completion thread watches the op only if
        // asked to (a callback, a waker): a collective costs it no registration and no event
        // polling, which on the op path is time in the driver's locks that small collectives,
        // bound by their host enqueue, pay in full.
        (Some((comm, watch)), Some(event)) => {
            drop(keep);
            fill.enqueued_verdict(Ok(()), Verdict::new(comm.inner, watch.token()), event);
        }
        (_, event) => fill.enqueued(Ok(()), event, keep.into_iter().map(boxed).collect()),
    }
}

/// A buffer's handle as a completion keeps it.
fn boxed(h: Holder) -> KeepAlive {
    Box::new(h)
}

/// Refuses a collective on `stream` while a graph recording holds it: NCCL's own capture
/// support aside, a collective's completion and the watchdog's timeout stand on its events,
/// which a recorded op does not have.
fn refuse_recorded(device: &Device, stream: StreamId) -> Result<()> {
    crate::recorder::refuse_if_recording(&device.shared, stream, || Error::Recording {
        what: format!("an NCCL collective on {stream}, which a graph recording holds"),
        hint: "run collectives outside the graph, between its replays",
    })
}

fn target(scope: &LaunchScope<'_>, stream: StreamId) -> Result<Target> {
    match scope.sim_enqueuer() {
        Ok(s) => Ok(Target::Sim(stream, s)),
        Err(_) => cuda_target(scope).map(Target::Cuda),
    }
}

/// The CUDA stream of a launch's op.
fn cuda_target(scope: &LaunchScope<'_>) -> Result<super::calls::RawStream> {
    // SAFETY: 1. the stream is used for the op's NCCL calls only, which touch the buffers as
    // the recorder declared them; 2. they are enqueued before the closure of `scope`'s launch
    // returns (in a group, by the innermost launch, which runs inside it), with NCCL's
    // background launch on a non-blocking communicator awaited or, where that wait failed,
    // the communicator aborted, which ends it; 3. no cudarc memory is made from it.
    Ok(unsafe { scope.cuda_stream() }?.cu_stream() as super::calls::RawStream)
}
