//! A CUDA communicator and its watchdog: a thread per communicator that, while ops are
//! pending, polls NCCL's asynchronous error and the ops' ages, and on a fault marks every
//! pending op failed and aborts the communicator, so that its kernels return and nothing
//! waits forever. It also destroys the communicator once the last handle is gone and its ops
//! have finished.

use super::calls::{self, RawComm};
use crate::device::Device;
use crate::error::{CollectiveFault, Error, Result};
use crate::track::EventRef;
use cudarc::driver::CudaContext;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How often the watchdog looks while ops are pending.
const POLL: Duration = Duration::from_millis(2);

const PENDING: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// One enqueued op, as the watchdog follows it.
pub(super) struct OpWatch {
    event: Option<EventRef>,
    since: Instant,
    state: AtomicU8,
}

impl OpWatch {
    /// Whether the watchdog failed this op (it was pending when the communicator faulted).
    pub(super) fn failed(&self) -> bool {
        self.state.load(Ordering::Acquire) == FAILED
    }
}

/// The communicator handle, `None` once aborted or destroyed.
struct Raw(RawComm);
// SAFETY: an NCCL communicator may be used from any thread, one at a time: every use goes
// through `Shared::state`'s lock.
unsafe impl Send for Raw {}

pub(super) struct State {
    raw: Option<Raw>,
    fault: Option<Error>,
    pending: Vec<Arc<OpWatch>>,
    closing: bool,
}

impl State {
    /// The live communicator, or the error every op gets once it has faulted.
    pub(super) fn raw(&self) -> Result<RawComm> {
        match (&self.raw, &self.fault) {
            (Some(r), None) => Ok(r.0),
            (_, fault) => Err(aborted(fault.as_ref())),
        }
    }
}

struct Shared {
    state: Mutex<State>,
    /// The fault, once declared, readable without the lock (which an abort in progress holds).
    fault: OnceLock<Error>,
    wake: Condvar,
    ctx: Option<Arc<CudaContext>>,
    timeout: Duration,
    /// Whether the communicator is blocking (its shrink makes a blocking one too).
    blocking: bool,
}

/// A CUDA communicator, watched.
pub(super) struct CudaComm {
    shared: Arc<Shared>,
    /// The watchdog, joined on drop: it destroys the communicator, which must happen before
    /// the process (or the device's context) goes away under NCCL's own threads.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CudaComm {
    /// Watches `raw`, a ready communicator on `device`.
    pub(super) fn new(raw: RawComm, device: &Device, timeout: Duration, blocking: bool) -> CudaComm {
        let ctx = device.shared.cuda_ctx("nccl").ok();
        let state = State { raw: Some(Raw(raw)), fault: None, pending: Vec::new(), closing: false };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            fault: OnceLock::new(),
            wake: Condvar::new(),
            ctx,
            timeout,
            blocking,
        });
        let watched = shared.clone();
        let spawned = std::thread::Builder::new().name("cusched-nccl-watch".into()).spawn(move || watch(&watched));
        let thread = match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                // Without the thread nothing detects a dead peer: say so, and keep working.
                log::error!(
                    "cusched: could not start an NCCL communicator's watchdog ({e}); its faults will not be detected"
                );
                None
            }
        };
        CudaComm { shared, thread }
    }

    /// Locks the communicator for enqueueing (one thread at a time uses it).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock_unranked(&self.shared.state)
    }

    /// Whether NCCL's calls on this communicator return only once they are done.
    pub(super) fn blocking(&self) -> bool {
        self.shared.blocking
    }

    /// The fault that ended the communicator, if any.
    pub(super) fn fault(&self) -> Option<Error> {
        self.shared.fault.get().cloned()
    }

    /// Declares `fault`: fails every pending op and aborts the communicator.
    pub(super) fn declare(&self, fault: Error) {
        let mut st = self.lock();
        declare(&mut st, fault, &self.shared);
    }

    /// [`declare`](Self::declare) on a state the caller holds.
    pub(super) fn declare_locked(&self, st: &mut State, fault: Error) {
        declare(st, fault, &self.shared);
    }

    /// Follows an op enqueued on the communicator, whose end is `event`.
    pub(super) fn watch(&self, event: Option<EventRef>) -> Arc<OpWatch> {
        let op = Arc::new(OpWatch { event, since: Instant::now(), state: AtomicU8::new(PENDING) });
        let mut st = self.lock();
        if st.fault.is_some() {
            // It went to a communicator that faulted before it could be followed.
            op.state.store(FAILED, Ordering::Release);
        } else {
            st.pending.push(op.clone());
            // Only an idle watchdog sleeps without a timeout; a busy one looks again within
            // `POLL`. Waking it for every op cost the op path more than the op.
            if st.pending.len() == 1 {
                self.shared.wake.notify_all();
            }
        }
        op
    }

    /// `ncclCommShrink` on the live communicator.
    pub(super) fn shrink(&self, exclude: &[usize]) -> Result<Option<RawComm>> {
        let st = self.lock();
        let raw = st.raw()?;
        if let Some(ctx) = &self.shared.ctx {
            crate::backend::cuda::bind(ctx)?;
        }
        let mut ranks = exclude.iter().map(|&r| r as std::ffi::c_int).collect::<Vec<_>>();
        // SAFETY: `raw` is live and locked by this thread; its context is current.
        let slot = unsafe { calls::shrink(raw, &mut ranks, self.shared.blocking) }?;
        // The parent is in progress too until the shrink is done (non-blocking communicators):
        // nothing else may use it meanwhile, and the new handle is read only then.
        let deadline = Instant::now() + self.shared.timeout;
        let parent_ready = calls::wait_ready(&[raw], "ncclCommShrink", deadline);
        let new = match parent_ready {
            Ok(()) => Some(*slot).filter(|n| !n.is_null()),
            Err(_) => {
                // Not done: NCCL may still write the slot, which must then stay allocated.
                Box::leak(slot);
                None
            }
        };
        let ready =
            parent_ready.and_then(|()| new.map_or(Ok(()), |n| calls::wait_ready(&[n], "ncclCommShrink", deadline)));
        drop(st);
        if let Err(e) = ready {
            if let Some(n) = new {
                calls::abort(n);
            }
            return Err(e);
        }
        Ok(new)
    }

    /// The error the ops of `op`'s communicator get when the watchdog failed `op`.
    pub(super) fn failure(&self) -> Error {
        aborted(self.shared.fault.get())
    }
}

impl Drop for CudaComm {
    fn drop(&mut self) {
        // The watchdog destroys the communicator once its pending ops are done (or the
        // timeout failed them). Waited for here: NCCL's proxy threads outliving the
        // communicator's owner crashed processes at exit. A communicator is dropped at
        // teardown, not on the op path.
        self.lock().closing = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// The error of an op on a communicator that faulted (with `fault`).
fn aborted(fault: Option<&Error>) -> Error {
    match fault {
        Some(e) => e.clone(),
        None => Error::Collective {
            call: "nccl",
            fault: CollectiveFault::Aborted,
            detail: "the communicator is gone".into(),
        },
    }
}

fn declare(st: &mut State, fault: Error, shared: &Shared) {
    if st.fault.is_none() {
        log::error!("cusched: an NCCL communicator faulted ({fault}); aborting it");
        let _ = shared.fault.set(fault.clone());
        st.fault = Some(fault);
    }
    // Failed before the abort lets their kernels return: a completion that resolves because
    // its kernel was stopped sees the failure.
    for op in st.pending.drain(..) {
        // One the GPU is known to have finished keeps its success.
        let to = if op.event.as_ref().is_some_and(|e| e.known_done()) { DONE } else { FAILED };
        let _ = op.state.compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire);
    }
    if let Some(Raw(raw)) = st.raw.take() {
        if let Some(ctx) = &shared.ctx {
            let _ = crate::backend::cuda::bind(ctx);
        }
        calls::abort(raw);
    }
}

/// How many of the oldest pending ops the watchdog asks the driver about per look, beside the
/// newer ones [`settle`] picks: a communicator's ops mostly run on one stream, in order.
const QUERIES: usize = 8;

/// Drops the ops that are over: failed, marked done, or known done without a driver call.
/// Returns the ops to ask the driver about, without the lock: the newest, then going back
/// toward the oldest in doubling steps (the 2nd, 4th, 8th ... newest), then the oldest few.
/// Ops of one stream finish in order, so the first of those seen done makes every earlier op
/// of its stream known done: each look clears what finished in a few queries, however many
/// ops came since the last one, and the list stays short whether the host or the GPU is ahead.
fn settle(pending: &mut Vec<Arc<OpWatch>>) -> Vec<Arc<OpWatch>> {
    pending.retain(|op| {
        if op.event.as_ref().is_none_or(|e| e.known_done()) {
            // An op the watchdog failed meanwhile stays failed.
            let _ = op.state.compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire);
        }
        op.state.load(Ordering::Acquire) == PENDING
    });
    let n = pending.len();
    let newer = std::iter::successors(Some(1usize), |back| back.checked_mul(2))
        .take_while(|&back| back <= n.saturating_sub(QUERIES))
        .map(|back| &pending[n - back]);
    newer.chain(pending.iter().take(QUERIES)).cloned().collect()
}

/// Marks done the ops of `picked` the driver reports done (an op already known done through a
/// later one of its stream costs no query). An event that cannot be queried (its context is
/// gone) counts as done: its op's completion reports that failure. Called without the
/// communicator's lock: querying an event may record it, under its stream's lock.
fn mark_finished(picked: &[Arc<OpWatch>]) {
    for op in picked {
        if op.event.as_ref().is_none_or(|e| e.is_done().unwrap_or(true)) {
            let _ = op.state.compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// The watchdog's loop: see the module docs.
fn watch(shared: &Shared) {
    let mut st = crate::sync::lock_unranked(&shared.state);
    loop {
        let picked = settle(&mut st.pending);
        drop(st);
        mark_finished(&picked);
        drop(picked);
        st = crate::sync::lock_unranked(&shared.state);
        st.pending.retain(|op| op.state.load(Ordering::Acquire) == PENDING);
        if st.closing && st.pending.is_empty() {
            if let Some(Raw(raw)) = st.raw.take() {
                if let Some(ctx) = &shared.ctx {
                    let _ = crate::backend::cuda::bind(ctx);
                }
                calls::destroy(raw, shared.timeout.min(Duration::from_secs(30)));
            }
            return;
        }
        if let (Some(raw), false) = (st.raw.as_ref().map(|r| r.0), st.pending.is_empty()) {
            let oldest = st.pending.iter().map(|op| op.since).min();
            let fault = match calls::async_state(raw) {
                Err(e) => Some(e),
                Ok(_) if oldest.is_some_and(|t| t.elapsed() > shared.timeout) => Some(Error::Collective {
                    call: "the communicator's watchdog",
                    fault: CollectiveFault::Timeout,
                    detail: format!("an op stayed pending longer than the timeout ({:?})", shared.timeout),
                }),
                Ok(_) => None,
            };
            if let Some(fault) = fault {
                declare(&mut st, fault, shared);
            }
        }
        st = if st.pending.is_empty() && !st.closing {
            shared.wake.wait(st).unwrap_or_else(|e| e.into_inner())
        } else {
            shared.wake.wait_timeout(st, POLL).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0)
        };
    }
}
