//! The state a completion shares with whoever resolves it (its waiters, pollers, the job that
//! fills it and the completion thread), and the protocol that makes it ready exactly once.
//!
//! # Protocol
//!
//! A completion moves through three states, published in `status` (for spinning readers) and
//! authoritative under `state`'s lock:
//!
//! ```text
//!   QUEUED    the job has not run yet (lanes); nothing to wait on
//!   ENQUEUED  the job ran: its value and keep-alives are stored, with the event recorded after
//!             its GPU work; the completion thread watches it once registered
//!   READY     the GPU passed the event: keep-alives dropped, value available
//! ```
//!
//! Whoever first observes the event done moves ENQUEUED to READY: `wait` (which synchronizes
//! on the event from its own thread, no hop through another thread), `is_ready`, or the
//! completion thread (which queries only the oldest pending event per stream, since one
//! stream's events complete in order). The move happens under the lock, and takes the
//! keep-alives, callback and waker out with it, so each runs exactly once, outside the lock.
//!
//! Lost wake-ups: a future registers its waker under the lock and re-checks the state in the
//! same critical section; the resolver takes the waker in the critical section that sets
//! READY. Blocking waiters re-check the state under the lock before every condvar wait.

use crate::completion_thread::Pending;
use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::trace::TraceTicket;
use crate::track::EventRef;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::time::Duration;

pub(super) const QUEUED: u8 = 0;
pub(super) const ENQUEUED: u8 = 1;
pub(super) const READY: u8 = 2;

/// The `runner` of a completion only a callback fills (a composed one, see `compose`): waiting
/// on it from the completion thread while it is queued could never end. No lane has this id.
pub(super) const FILLED_BY_CALLBACK: u64 = u64::MAX;

/// Anything kept alive until the GPU has finished a job.
pub(crate) type KeepAlive = Box<dyn Any + Send>;
pub(super) type Callback<T> = Box<dyn FnOnce(Result<T>) + Send>;
/// Produces a value once the GPU has passed the job's event (reading a result the GPU wrote to
/// pinned memory, say).
pub(crate) type Deferred<T> = Box<dyn FnOnce() -> Result<T> + Send>;

/// Host state that says, once the GPU has passed a job's event, whether the job failed (a
/// library's watchdog that failed it, say). It reads nothing the GPU writes.
pub(crate) trait Judge: Send + Sync {
    /// The job of `token` failed: its error; `Ok` when it did not.
    fn judge(&self, token: u128) -> Result<()>;
}

/// A job's [`Judge`] and its token: the judge is shared by every job it rules on, so a job's
/// verdict allocates nothing.
pub(crate) struct Verdict {
    judge: Arc<dyn Judge>,
    token: u128,
}

impl Verdict {
    /// The verdict of `judge` on the job of `token`.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn new(judge: Arc<dyn Judge>, token: u128) -> Verdict {
        Verdict { judge, token }
    }

    /// `value`, or the job's failure if the judge ruled one: called once the GPU has passed
    /// the job's event.
    pub(super) fn apply<T>(self, value: Result<T>) -> Result<T> {
        let ruled = self.judge.judge(self.token);
        value.and_then(|v| ruled.map(|()| v))
    }
}

pub(super) struct State<T> {
    pub(super) value: Option<Result<T>>,
    deferred: Option<Deferred<T>>,
    /// Applied to the value once the GPU has passed the event.
    verdict: Option<Verdict>,
    pub(super) event: Option<EventRef>,
    keep: Vec<KeepAlive>,
    pub(super) callback: Option<Callback<T>>,
    pub(super) waker: Option<Waker>,
    pub(super) taken: bool,
    trace: Option<TraceTicket>,
    /// Whether the completion thread watches this completion's event.
    registered: bool,
    /// A waiter relies on the completion thread (a bounded wait): register once enqueued.
    pub(super) watched: bool,
    /// Threads blocked on `cv`: a state change notifies only when there is one, so the op
    /// path makes no futex call when nobody waits.
    pub(super) waiters: u32,
}

pub(crate) struct Shared<T> {
    pub(super) status: AtomicU8,
    /// Set by a lane worker when it starts the job: a waiter that sees it keeps spinning a
    /// little longer instead of parking, since the job's own enqueue is usually short and a
    /// parked waiter costs a second thread wake (the first woke the worker). A hint only.
    running: AtomicBool,
    /// Set when a trace ticket rides along, so untraced resolves skip a lock.
    traced: AtomicBool,
    pub(super) state: crate::sync::Ranked<Mutex<State<T>>, { crate::sync::rank::COMPLETION }>,
    pub(super) cv: Condvar,
    pub(super) device: Arc<DeviceShared>,
    /// The lane that will run the job (0: none, or already run): waiting on it from that lane
    /// while it is still queued could never end.
    pub(super) runner: u64,
}

impl<T: Send + 'static> Shared<T> {
    pub(super) fn new(device: &Arc<DeviceShared>, runner: u64) -> Arc<Self> {
        Arc::new(Shared {
            status: AtomicU8::new(QUEUED),
            running: AtomicBool::new(false),
            traced: AtomicBool::new(false),
            state: crate::sync::Ranked::new(Mutex::new(State {
                value: None,
                deferred: None,
                verdict: None,
                event: None,
                keep: Vec::new(),
                callback: None,
                waker: None,
                taken: false,
                trace: None,
                registered: false,
                watched: false,
                waiters: 0,
            })),
            cv: Condvar::new(),
            device: device.clone(),
            runner,
        })
    }

    /// Shared state for a completion whose job already ran on the caller's thread, made only
    /// now that something needs it: enqueued on `event`, or ready without one.
    pub(super) fn settled(
        device: &Arc<DeviceShared>,
        value: Option<Result<T>>,
        event: Option<EventRef>,
        verdict: Option<Verdict>,
        taken: bool,
    ) -> Arc<Self> {
        let shared = Shared::new(device, 0);
        {
            let mut st = crate::sync::lock(&shared.state);
            st.value = value;
            st.verdict = verdict;
            st.taken = taken;
            let status = if event.is_some() { ENQUEUED } else { READY };
            st.event = event;
            shared.status.store(status, Ordering::Release);
        }
        shared
    }

    /// The job has started on its lane (see `running`).
    pub(crate) fn mark_running(&self) {
        self.running.store(true, Ordering::Relaxed);
    }

    /// Whether the job has started on its lane.
    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Attaches an op's trace ticket: its completion hooks run when this resolves.
    pub(crate) fn set_trace(&self, ticket: TraceTicket) {
        crate::sync::lock(&self.state).trace = Some(ticket);
        self.traced.store(true, Ordering::Release);
    }

    /// The job ran: store its value and keep-alives, and hand it to the completion thread to
    /// watch `event` (or resolve at once when there is no GPU work to wait for).
    pub(crate) fn enqueued(self: &Arc<Self>, value: Result<T>, event: Option<EventRef>, keep: Vec<KeepAlive>) {
        self.enqueued_value(Ok(value), event, keep, false)
    }

    /// Like [`enqueued`](Self::enqueued), but the value is computed by `deferred` once the GPU
    /// has passed `event` (by whichever thread resolves the completion): how any library
    /// returns a scalar the GPU writes.
    // Only the libraries that read scalars back call it; without them it is unused.
    #[cfg_attr(not(any(feature = "cublas", feature = "cusolver")), allow(dead_code))]
    pub(crate) fn enqueued_deferred(self: &Arc<Self>, deferred: Deferred<T>, event: EventRef, keep: Vec<KeepAlive>) {
        self.enqueued_value(Err(deferred), Some(event), keep, true)
    }

    /// Like [`enqueued`](Self::enqueued), with `verdict` applied to `value` once the GPU has
    /// passed `event`. The verdict reads only host state and keeps nothing the GPU uses alive,
    /// so the completion thread watches the op only if someone asks it to (a callback, a waker,
    /// a bounded wait), as for a plain value.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn enqueued_verdict(self: &Arc<Self>, value: Result<T>, verdict: Verdict, event: EventRef) {
        self.enqueued_as(Ok(value), Some(verdict), Some(event), Vec::new(), false)
    }

    fn enqueued_value(
        self: &Arc<Self>,
        value: std::result::Result<Result<T>, Deferred<T>>,
        event: Option<EventRef>,
        keep: Vec<KeepAlive>,
        deferred_holds_gpu_state: bool,
    ) {
        self.enqueued_as(value, None, event, keep, deferred_holds_gpu_state)
    }

    fn enqueued_as(
        self: &Arc<Self>,
        value: std::result::Result<Result<T>, Deferred<T>>,
        verdict: Option<Verdict>,
        event: Option<EventRef>,
        keep: Vec<KeepAlive>,
        deferred_holds_gpu_state: bool,
    ) {
        let store = |st: &mut State<T>| {
            match value {
                Ok(v) => st.value = Some(v),
                Err(d) => st.deferred = Some(d),
            }
            st.verdict = verdict;
        };
        let Some(event) = event else {
            {
                let mut st = crate::sync::lock(&self.state);
                store(&mut st);
                st.keep = keep;
            }
            self.resolve(Ok(()));
            return;
        };
        let stream = event.pos().stream;
        let (register, wake);
        {
            let mut st = crate::sync::lock(&self.state);
            store(&mut st);
            // Only a completion that must act when the GPU finishes needs the completion
            // thread: one with keep-alives, a deferred value that reads what the GPU writes, a
            // trace ticket, a callback or a waker. Any other is resolved by whoever waits or
            // polls it, or simply dropped, which saves the completion thread a registration and
            // an event query per op.
            register = st.watched
                || self.device.config.watchdog.is_some()
                || !keep.is_empty()
                || (deferred_holds_gpu_state && st.deferred.is_some())
                || st.trace.is_some()
                || st.callback.is_some()
                || st.waker.is_some();
            st.registered = register;
            st.event = Some(event.clone());
            st.keep = keep;
            self.status.store(ENQUEUED, Ordering::Release);
            wake = st.waiters > 0;
        }
        if wake {
            self.cv.notify_all();
        }
        if register {
            self.register(stream, event);
        }
    }

    /// Hands the completion to the completion thread to watch `event`.
    pub(super) fn register(self: &Arc<Self>, stream: u32, event: EventRef) {
        let pending: Arc<dyn Pending> = self.clone();
        if let Err(pending) = self.device.completions().register(stream, event, pending) {
            // No completion thread any more (the device shut down): finish here.
            let outcome = pending.1.synchronize();
            pending.2.resolve(outcome);
        }
    }

    /// Called under the state lock by a caller that now needs the completion thread (it set a
    /// callback or a waker): returns what to register, if nobody has yet.
    pub(super) fn needs_registration(&self, st: &mut State<T>) -> Option<(u32, EventRef)> {
        if self.status.load(Ordering::Acquire) != ENQUEUED || st.registered {
            return None;
        }
        let event = st.event.clone()?;
        st.registered = true;
        Some((event.pos().stream, event))
    }

    pub(super) fn resolve_in(&self, outcome: Result<()>, run_callback_here: bool) {
        let outcome = outcome.map_err(|e| {
            let epoch =
                crate::sync::lock(&self.state).event.as_ref().map_or_else(|| self.device.epoch(), |ev| ev.epoch());
            self.device.classify(e, epoch)
        });
        let ticket =
            if self.traced.load(Ordering::Acquire) { crate::sync::lock(&self.state).trace.take() } else { None };
        let mut span = None;
        if let Some(t) = &ticket {
            crate::sync::guarded("a KernelTrace completion hook", || span = t.completing(outcome.is_ok()));
        }
        self.publish(outcome, run_callback_here);
        if let Some(t) = ticket {
            crate::sync::guarded("a KernelTrace completion hook", || t.completed(span));
        }
    }

    fn publish(&self, outcome: Result<()>, run_callback_here: bool) {
        self.publish_value(outcome, true, run_callback_here)
    }

    /// Makes the completion READY with `outcome`. `gpu_done`: the GPU is past the job's event,
    /// so the keep-alives drop now; otherwise (the watchdog) they stay until a later call with
    /// `gpu_done` releases them.
    pub(super) fn publish_value(&self, outcome: Result<()>, gpu_done: bool, run_callback_here: bool) {
        let (keep, callback, waker, value, wake);
        {
            let mut st = crate::sync::lock(&self.state);
            if self.status.load(Ordering::Acquire) == READY {
                // Expired by the watchdog earlier: only the keep-alives are left to release.
                if gpu_done {
                    let keep = std::mem::take(&mut st.keep);
                    st.event = None;
                    drop(st);
                    crate::sync::guarded("a keep-alive's Drop", || drop(keep));
                }
                return;
            }
            let deferred = st.deferred.take();
            let verdict = st.verdict.take();
            match outcome {
                Err(e) => {
                    st.value = Some(Err(e));
                    // What the deferred reads may still be written by the GPU: keep it with
                    // the other keep-alives.
                    if let (Some(d), false) = (deferred, gpu_done) {
                        st.keep.push(Box::new(d));
                    }
                }
                // The GPU is past the event, so what the deferred reads is final.
                Ok(()) => {
                    if let Some(d) = deferred {
                        st.value = Some(d());
                    }
                    if let Some(v) = verdict {
                        st.value = st.value.take().map(|value| v.apply(value));
                    }
                }
            }
            keep = if gpu_done { std::mem::take(&mut st.keep) } else { Vec::new() };
            if gpu_done {
                st.event = None;
            }
            waker = st.waker.take();
            callback = st.callback.take();
            value = if callback.is_some() { st.value.take() } else { None };
            if callback.is_some() {
                st.taken = true;
            }
            self.status.store(READY, Ordering::Release);
            wake = st.waiters > 0;
        }
        if wake {
            self.cv.notify_all();
        }
        // Keep-alives drop only now that the GPU is done with them.
        if !keep.is_empty() {
            crate::sync::guarded("a keep-alive's Drop", || drop(keep));
        }
        if let (Some(cb), Some(v)) = (callback, value) {
            if run_callback_here {
                run_callback(cb, v);
            } else {
                let job: Box<dyn FnOnce() + Send> = Box::new(move || run_callback(cb, v));
                self.device.completions().run_callback(job);
            }
        }
        if let Some(w) = waker {
            crate::sync::guarded("a Waker", || w.wake());
        }
    }

    /// Leaks what the GPU may still use: the keep-alives, a deferred value's reader and the
    /// event (which may still be pending on its stream).
    fn leak_gpu_state(&self) {
        let (keep, deferred, event) = {
            let mut st = crate::sync::lock(&self.state);
            (std::mem::take(&mut st.keep), st.deferred.take(), st.event.take())
        };
        if !keep.is_empty() || deferred.is_some() {
            log::error!(
                "cusched: device {} shut down while the GPU still ran a job past the watchdog; its {} keep-alive(s) are leaked rather than freed under running work",
                self.device.label(),
                keep.len() + usize::from(deferred.is_some())
            );
        }
        std::mem::forget(keep);
        std::mem::forget(deferred);
        std::mem::forget(event);
    }
}

pub(super) fn run_callback<T>(cb: Callback<T>, v: Result<T>) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || cb(v))).is_err() {
        log::error!("cusched: an on_complete callback panicked");
    }
}

impl<T: Send + 'static> Pending for Shared<T> {
    fn resolve(&self, outcome: Result<()>) {
        let on_thread = self.device.completions().is_current_thread();
        self.resolve_in(outcome, on_thread);
    }

    fn expire(&self, waited: Duration) {
        let on_thread = self.device.completions().is_current_thread();
        self.publish_value(Err(Error::Timeout { waited }), false, on_thread);
    }

    fn abandon(&self, waited: Duration) {
        self.leak_gpu_state();
        self.expire(waited);
    }
}
