//! Enqueueing the entered ops of a launch: the CUDA ones as one NCCL group on their locked
//! communicators, the simulated ones as one kernel per stream.

use super::calls::{self, Call, RawComm, RawStream};
use super::comm::{Backend, Communicator};
use super::launch::{Few, SimBody, Slot, Target, Work};
use super::watch::{State, Watch};
use super::DType;
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::recorder::SimEnqueuer;
use crate::track::EventRef;
use std::sync::MutexGuard;
use std::time::Instant;

/// A CUDA op enqueued and followed by its communicator's watchdog, until its launch publishes
/// its end. One dropped unpublished (its launch failed, or unwound) is published as having
/// nothing to wait for, so that the watchdog never takes it for an op that stays pending.
pub(super) struct Watched {
    comm: Option<Communicator>,
    watch: Watch,
}

impl Watched {
    /// Publishes `event` as the op's end: the communicator and watch its verdict reads.
    pub(super) fn publish(mut self, event: Option<EventRef>) -> Option<(Communicator, Watch)> {
        let comm = self.comm.take()?;
        if let Backend::Cuda(c) = &comm.inner.backend {
            c.publish(self.watch, event);
        }
        Some((comm, self.watch))
    }

    /// An op enqueued whose launch failed afterwards (its commit): its work runs on, and
    /// nothing would follow it. Its communicator is aborted with `e`, which fails its pending
    /// ops and makes whatever it launched return.
    pub(super) fn abandon(self, e: &Error) {
        if let Some(Backend::Cuda(c)) = self.comm.as_ref().map(|c| &c.inner.backend) {
            // As a collective's fault, which is what the communicator's later ops report.
            let fault = match e {
                Error::Collective { .. } => e.clone(),
                e => Error::Collective {
                    call: "the op's launch",
                    fault: crate::CollectiveFault::Aborted,
                    detail: format!("the op was enqueued, then its launch failed: {e}"),
                },
            };
            c.declare(fault);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(Backend::Cuda(c)) = self.comm.as_ref().map(|c| &c.inner.backend) {
            c.publish(self.watch, None);
        }
    }
}

/// Enqueues every op of a launch (`works[i]` on `targets[i]`; a launch never mixes simulated
/// and CUDA ops): the simulated ones one kernel per stream (their work taken), the CUDA ones as
/// one NCCL group. `watched` gets an entry per op, in order: the CUDA op's watch once
/// enqueued, `None` for a simulated one.
pub(super) fn enqueue_all(
    works: &mut [&mut Option<(Communicator, Work)>],
    targets: Few<Target>,
    watched: &mut Few<Option<Watched>>,
) -> Result<()> {
    if matches!(targets.first(), Some(Target::Sim(..))) {
        return enqueue_sim(works, targets, watched);
    }
    let mut cuda: Few<CudaOp<'_>> = Few::new();
    for (work, target) in works.iter().zip(targets) {
        match (work.as_ref(), target) {
            (Some((comm, Work::Cuda { calls, dtype, premul })), Target::Cuda(stream))
                if matches!(comm.inner.backend, Backend::Cuda(_)) =>
            {
                cuda.push((comm, calls, *dtype, *premul, stream));
            }
            _ => return Err(Error::invalid("comm", "the communicator's backend is not its stream's")),
        }
    }
    enqueue_cuda(&cuda, watched)
}

/// The simulated ops of a launch, one kernel per stream, their work taken.
fn enqueue_sim(
    works: &mut [&mut Option<(Communicator, Work)>],
    targets: Few<Target>,
    watched: &mut Few<Option<Watched>>,
) -> Result<()> {
    let mut taken = Vec::with_capacity(works.len());
    for (work, target) in works.iter_mut().zip(targets) {
        match (work.take(), target) {
            (Some((comm, Work::Sim { collective, body, slot })), Target::Sim(stream, enq))
                if matches!(comm.inner.backend, Backend::Sim(_)) =>
            {
                taken.push((comm, collective, body, slot, stream, enq));
            }
            _ => return Err(Error::invalid("comm", "the communicator's backend is not its stream's")),
        }
    }
    // A simulated op has no watch: its kernel's outcome is its verdict.
    watched.extend(taken.iter().map(|_| None));
    let mut sim: Vec<(StreamId, SimEnqueuer, Vec<SimJob>)> = Vec::new();
    // Only now, every op checked, does each take its rank's next sequence number (in the order
    // the ops were called: every rank's collectives meet in it), so the ranks stay in step.
    for (comm, collective, body, slot, stream, enq) in taken {
        let seq = match &comm.inner.backend {
            Backend::Sim(rank) if collective => rank.next_seq(),
            _ => 0,
        };
        let job = SimJob { comm, seq, body, slot };
        match sim.iter_mut().find(|(s, ..)| *s == stream) {
            Some((_, kernel, jobs)) => {
                kernel.merge(enq);
                jobs.push(job);
            }
            None => sim.push((stream, enq, vec![job])),
        }
    }
    for (_, kernel, jobs) in sim {
        kernel.run(move || run_jobs(jobs));
    }
    Ok(())
}

/// A simulated op of a group, in its stream's kernel.
struct SimJob {
    comm: Communicator,
    seq: u64,
    body: SimBody,
    slot: Slot,
}

impl SimJob {
    fn run(self) {
        let Backend::Sim(rank) = &self.comm.inner.backend else { return };
        let outcome = (self.body)(rank, self.seq);
        *crate::sync::lock_unranked(&self.slot) = Some(outcome);
    }
}

/// The kernel of one stream's ops in a group. As in an NCCL group, they progress together (a
/// receive before the send it pairs with on a peer, or a collective between them, cannot
/// wait for each other): each runs on a thread of its own, joined before the kernel ends.
/// (Their buffer accesses then come from threads the checker does not watch; the kernel's
/// declared uses, every op's, are still checked against other kernels.)
fn run_jobs(mut jobs: Vec<SimJob>) {
    if jobs.len() == 1 {
        if let Some(job) = jobs.pop() {
            job.run();
        }
        return;
    }
    std::thread::scope(|s| {
        for job in jobs {
            let spawned =
                std::thread::Builder::new().name("cusched-sim-nccl".into()).spawn_scoped(s, move || job.run());
            if let Err(e) = spawned {
                log::error!(
                    "cusched: a simulated NCCL op could not get a thread ({e}); its completion reports a failure"
                );
            }
        }
    });
}

/// A CUDA op of a group, borrowed from where the group queued it: its communicator, calls,
/// element type, PreMulSum scalar and stream.
type CudaOp<'a> = (&'a Communicator, &'a [Call], DType, Option<[u8; 8]>, RawStream);

/// One CUDA op outside a group on `stream` (the op path of a collective called on its own):
/// [`enqueue_cuda`] for one op, without its lists. Returns the op watched.
pub(super) fn enqueue_one(
    comm: Communicator,
    calls: &[Call],
    dtype: DType,
    premul: Option<[u8; 8]>,
    stream: RawStream,
) -> Result<Watched> {
    let Backend::Cuda(cc) = &comm.inner.backend else {
        return Err(Error::invalid("comm", "the communicator's backend is not its stream's"));
    };
    let mut st = cc.lock();
    let raw = st.raw()?;
    let plain = premul.is_none() && calls.len() == 1;
    let timeout = comm.inner.config.timeout;
    let result = in_group(cc.blocking(), plain, &[raw], timeout, |made| {
        enqueue_op(&comm, raw, calls, dtype, premul, stream, made)
    });
    match result {
        Ok(()) => {
            let watch = cc.watch_locked(&mut st);
            drop(st);
            Ok(Watched { comm: Some(comm), watch })
        }
        Err(Failed { error, abort }) => {
            if abort {
                cc.declare_locked(&mut st, error.clone());
            }
            Err(error)
        }
    }
}

/// A launch that failed: its error, and whether its communicators are in an unknown state
/// and are aborted, so that whatever they launched returns.
struct Failed {
    error: Error,
    abort: bool,
}

impl Failed {
    /// A launch's first failure, `error`, aborting the communicators unless every failure of
    /// its steps (`enqueued`, `ended`) was a rejected argument, which launched nothing, and its
    /// wait for NCCL (`waited`) succeeded: any other failure, and any failed wait (the
    /// communicator still in progress, or failed), leaves them in an unknown state.
    fn first_of(error: Error, steps: [&Result<()>; 2], waited: bool) -> Failed {
        let launched_nothing = |r: &&Result<()>| r.as_ref().err().is_none_or(rejected);
        Failed { abort: !waited || !steps.iter().all(launched_nothing), error }
    }
}

/// Whether `e` is an argument NCCL rejected, which launched nothing.
fn rejected(e: &Error) -> bool {
    matches!(e, Error::Collective { fault: crate::CollectiveFault::InvalidArgument, .. })
}

/// Runs `enqueue` (which lists the PreMulSum ops it makes in `made`) as one NCCL group on the
/// locked communicators `raws`: between `ncclGroupStart` and `ncclGroupEnd`, except one
/// `plain` call on blocking communicators (NCCL groups a lone call inside: an explicit group
/// only adds its bookkeeping twice). NCCL's background launch on non-blocking communicators
/// is awaited, bounded by `timeout`; then the ops made are destroyed, unless that wait
/// failed: a communicator still in progress (or failed) takes no call but its abort, which
/// the caller then makes and which frees its ops with it. The first failure wins: the
/// enqueue's, the group's end, the wait.
fn in_group(
    blocking: bool,
    plain: bool,
    raws: &[RawComm],
    timeout: std::time::Duration,
    enqueue: impl FnOnce(&mut Few<(RawComm, calls::RawOp)>) -> Result<()>,
) -> std::result::Result<(), Failed> {
    let grouped = !(blocking && plain);
    if grouped {
        if let Err(error) = calls::group_start() {
            return Err(Failed { abort: !rejected(&error), error });
        }
    }
    let mut made: Few<(RawComm, calls::RawOp)> = Few::new();
    let enqueued = enqueue(&mut made);
    // Ends the group whatever happened in it: a group left open breaks later calls.
    let ended = if grouped { calls::group_end() } else { Ok(()) };
    // Blocking communicators are done when their calls return; non-blocking ones finish the
    // launch in the background, polled here.
    let ready = if blocking {
        Ok(())
    } else {
        let deadline = Instant::now().checked_add(timeout).unwrap_or_else(Instant::now);
        calls::wait_ready(raws, "ncclGroupEnd", deadline)
    };
    if ready.is_ok() {
        for (raw, op) in made {
            // SAFETY: `op` was made on `raw`, locked by this thread; the calls given it have
            // returned (the group has ended) and the communicator is ready for the next call.
            unsafe { calls::destroy_op(op, raw) };
        }
    }
    match enqueued.as_ref().and(ended.as_ref()).and(ready.as_ref()) {
        Ok(()) => Ok(()),
        Err(first) => Err(Failed::first_of(first.clone(), [&enqueued, &ended], ready.is_ok())),
    }
}

/// The CUDA ops of a launch, as one NCCL group: every communicator locked (in one order), its
/// calls enqueued by [`in_group`]. Each op's watch record is made under the same lock, so that
/// the communicator is locked once per launch.
fn enqueue_cuda(ops: &[CudaOp<'_>], watched: &mut Few<Option<Watched>>) -> Result<()> {
    let mut comms: Few<&Communicator> = ops.iter().map(|o| o.0).collect();
    comms.sort_by_key(|c| c.inner.uid);
    comms.dedup_by_key(|c| c.inner.uid);
    let mut locked: Few<(u64, MutexGuard<'_, State>)> = Few::new();
    let mut all_blocking = true;
    for c in &comms {
        if let Backend::Cuda(cc) = &c.inner.backend {
            all_blocking &= cc.blocking();
            locked.push((c.inner.uid, cc.lock()));
        }
    }
    let raw_of = |uid: u64, locked: &[(u64, MutexGuard<'_, State>)]| -> Result<RawComm> {
        locked
            .iter()
            .find(|(u, _)| *u == uid)
            .map_or_else(|| Err(Error::invalid("comm", "not locked")), |(_, s)| s.raw())
    };
    for (c, ..) in ops {
        raw_of(c.inner.uid, &locked)?;
    }
    let plain = matches!(ops, [(_, calls, _, None, _)] if calls.len() == 1);
    let timeout = ops.iter().map(|o| o.0.inner.config.timeout).min().unwrap_or_default();
    let raws: Few<RawComm> = locked.iter().filter_map(|(_, s)| s.raw().ok()).collect();
    let result = in_group(all_blocking, plain, &raws, timeout, |made| {
        for &(comm, calls, dtype, premul, stream) in ops {
            let raw = raw_of(comm.inner.uid, &locked)?;
            enqueue_op(comm, raw, calls, dtype, premul, stream, made)?;
        }
        Ok(())
    });
    let Err(Failed { error, abort }) = result else {
        let watches: Few<Watch> = ops
            .iter()
            .map(|(comm, ..)| match (&comm.inner.backend, locked.iter_mut().find(|(u, _)| *u == comm.inner.uid)) {
                (Backend::Cuda(cc), Some((_, st))) => cc.watch_locked(st),
                _ => Watch::Unwatched,
            })
            .collect();
        drop(locked);
        watched.extend(ops.iter().zip(watches).map(|(op, watch)| Some(Watched { comm: Some(op.0.clone()), watch })));
        return Ok(());
    };
    if abort {
        for (uid, st) in &mut locked {
            if let Some(c) = comms.iter().find(|c| c.inner.uid == *uid) {
                if let Backend::Cuda(cc) = &c.inner.backend {
                    cc.declare_locked(st, error.clone());
                }
            }
        }
    }
    Err(error)
}

/// One op's calls on `raw` (`comm`'s) and `stream`, its PreMulSum op made first (and listed in
/// `made` for the caller to destroy once the group has ended).
fn enqueue_op(
    comm: &Communicator,
    raw: RawComm,
    calls: &[Call],
    dtype: DType,
    premul: Option<[u8; 8]>,
    stream: RawStream,
    made: &mut Few<(RawComm, calls::RawOp)>,
) -> Result<()> {
    // The stream is of the communicator's device (checked when the op was planned), so the
    // communicator's context is the stream's.
    match &comm.inner.backend {
        Backend::Cuda(cc) => match cc.context() {
            Some(ctx) => crate::backend::cuda::bind(ctx)?,
            None => return Err(Error::invalid("comm", "the communicator's device has no CUDA context")),
        },
        Backend::Sim(_) => return Err(Error::invalid("comm", "the communicator's backend is not its stream's")),
    }
    let op = match premul {
        Some(mut scalar) => {
            // SAFETY: `raw` is live and locked by this thread.
            let op = unsafe { calls::premul_sum(&mut scalar, dtype, raw) }?;
            made.push((raw, op));
            Some(op)
        }
        None => None,
    };
    for &call in calls {
        let call = match (call, op) {
            (Call::AllReduce { send, recv, count, .. }, Some(op)) => Call::AllReduce { send, recv, count, op },
            (Call::Reduce { send, recv, count, root, .. }, Some(op)) => Call::Reduce { send, recv, count, op, root },
            (Call::ReduceScatter { send, recv, count, .. }, Some(op)) => Call::ReduceScatter { send, recv, count, op },
            (call, _) => call,
        };
        // SAFETY: 1. `raw` is live and locked by this thread; 2. the stream is the op's, of the
        // communicator's device (checked when the op was planned), and alive: the op's launch,
        // which holds it, returns only after this enqueue; 3. the pointers are the
        // op's buffers, fenced by its preflight and alive while the GPU uses them: the
        // caller's borrow (in a group, the op's handles) keeps each until its launch has
        // returned, and a buffer dropped after that is freed on the device timeline behind
        // the op's committed uses.
        unsafe { calls::enqueue(call, dtype, raw, stream) }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CollectiveFault;

    fn fault(fault: CollectiveFault) -> Result<()> {
        Err(Error::Collective { call: "ncclGroupEnd", fault, detail: String::new() })
    }

    fn aborts(steps: [&Result<()>; 2], waited: bool) -> bool {
        let first = steps.iter().find_map(|r| r.as_ref().err()).cloned().unwrap_or_else(|| Error::invalid("x", "y"));
        Failed::first_of(first, steps, waited).abort
    }

    /// A rejected argument launched nothing: the communicator goes on, unless another step
    /// failed too or the wait did.
    #[test]
    fn only_a_rejected_argument_with_a_good_wait_spares_the_communicator() {
        let rejected = fault(CollectiveFault::InvalidArgument);
        assert!(!aborts([&rejected, &Ok(())], true));
        assert!(!aborts([&rejected, &rejected], true));
        assert!(aborts([&rejected, &fault(CollectiveFault::Internal)], true));
        assert!(aborts([&Ok(()), &fault(CollectiveFault::Cuda)], true));
        assert!(aborts([&fault(CollectiveFault::System), &Ok(())], true));
        // The wait failed (a timeout, or an asynchronous error of any kind): NCCL may still be
        // in progress, which allows no call but the abort.
        assert!(aborts([&Ok(()), &Ok(())], false));
        assert!(aborts([&rejected, &Ok(())], false));
    }
}
