//! `Completion<T>`: the result of GPU work, delivered by blocking, polling, callback or future;
//! and the device's completion thread.
//!
//! # Protocol
//!
//! A completion moves through three states, published in `status` (for spinning readers) and
//! authoritative under `state`'s lock:
//!
//! ```text
//!   QUEUED    the job has not run yet (lanes); nothing to wait on
//!   ENQUEUED  the job ran: its value and keep-alives are stored, with the event recorded after
//!             its GPU work; the completion thread has it queued under the job's stream
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
//!
//! # Waiting from the device's own threads
//!
//! Some waits could never end: a lane job waiting on a job queued behind it on its own lane
//! (only that lane runs it), a lane job submitting to its own full queue. These return
//! [`Error::WouldDeadlock`] at once. A callback (or any user code on the completion thread)
//! that waits on a completion does not wait for the completion thread, which is busy running
//! it: it watches the job's event itself, polling it, so `wait`, `wait_timeout` and the
//! watchdog all work there (other deliveries wait meanwhile, so keep such waits short).
//!
//! # Panics
//!
//! Every piece of user code the completion thread runs (callbacks, keep-alive drops, trace
//! hooks, wakers) runs under `catch_unwind`; a panic is logged and later deliveries go on.
//!
//! # Shutdown
//!
//! Registration and shutdown meet at one atomic gate (see [`Completions`]): once shutdown has
//! closed it, no registration can reach the thread, so the thread's last message is
//! `Shutdown` and nothing sent before it is lost. Registrations refused by a closed gate are
//! resolved by the caller, on its own thread, after synchronizing on the event. The thread is
//! never started again after shutdown. At shutdown the thread waits for the GPU to pass every
//! pending event; with a watchdog it gives up after the watchdog's limit, resolving what is
//! left with [`Error::Timeout`] and leaking its keep-alives (logged) rather than freeing memory
//! the GPU may still use. Without a watchdog, shutdown waits as long as the GPU takes.

use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::trace::TraceTicket;
use crate::track::EventRef;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::any::Any;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const QUEUED: u8 = 0;
const ENQUEUED: u8 = 1;
const READY: u8 = 2;

/// Anything kept alive until the GPU has finished a job.
pub(crate) type KeepAlive = Box<dyn Any + Send>;
type Callback<T> = Box<dyn FnOnce(Result<T>) + Send>;
/// Produces a value once the GPU has passed the job's event (reading a result the GPU wrote to
/// pinned memory, say).
pub(crate) type Deferred<T> = Box<dyn FnOnce() -> Result<T> + Send>;

struct State<T> {
    value: Option<Result<T>>,
    deferred: Option<Deferred<T>>,
    event: Option<EventRef>,
    keep: Vec<KeepAlive>,
    callback: Option<Callback<T>>,
    waker: Option<Waker>,
    taken: bool,
    trace: Option<TraceTicket>,
    /// Whether the completion thread watches this completion's event.
    registered: bool,
    /// A waiter relies on the completion thread (a bounded wait): register once enqueued.
    watched: bool,
}

pub(crate) struct Shared<T> {
    status: AtomicU8,
    /// Set when a trace ticket rides along, so untraced resolves skip a lock.
    traced: AtomicBool,
    state: Mutex<State<T>>,
    cv: Condvar,
    device: Arc<DeviceShared>,
    /// The lane that will run the job (0: none, or already run): waiting on it from that lane
    /// while it is still queued could never end.
    runner: u64,
}

/// What the completion thread holds of a pending job, whatever its `T`.
pub(crate) trait Pending: Send + Sync {
    /// The GPU passed the job's event (`Ok`), or querying it failed.
    fn resolve(&self, outcome: Result<()>);
    /// The watchdog fired: resolve with [`Error::Timeout`] now, but keep the keep-alives until
    /// [`resolve`](Self::resolve) reports the GPU really done.
    fn expire(&self, waited: Duration);
    /// Shutdown gave up on the GPU: resolve with [`Error::Timeout`] if not yet resolved, and
    /// leak the keep-alives, which the GPU may still be using.
    fn abandon(&self, waited: Duration);
}

impl<T: Send + 'static> Shared<T> {
    fn new(device: &Arc<DeviceShared>, runner: u64) -> Arc<Self> {
        Arc::new(Shared {
            status: AtomicU8::new(QUEUED),
            traced: AtomicBool::new(false),
            state: Mutex::new(State {
                value: None,
                deferred: None,
                event: None,
                keep: Vec::new(),
                callback: None,
                waker: None,
                taken: false,
                trace: None,
                registered: false,
                watched: false,
            }),
            cv: Condvar::new(),
            device: device.clone(),
            runner,
        })
    }

    /// Attaches an op's trace ticket: its completion hooks run when this resolves.
    pub(crate) fn set_trace(&self, ticket: TraceTicket) {
        crate::sync::lock(&self.state).trace = Some(ticket);
        self.traced.store(true, Ordering::Release);
    }

    /// The job ran: store its value and keep-alives, and hand it to the completion thread to
    /// watch `event` (or resolve at once when there is no GPU work to wait for).
    pub(crate) fn enqueued(self: &Arc<Self>, value: Result<T>, event: Option<EventRef>, keep: Vec<KeepAlive>) {
        self.enqueued_value(Ok(value), event, keep)
    }

    /// Like [`enqueued`](Self::enqueued), but the value is computed by `deferred` once the GPU
    /// has passed `event` (by whichever thread resolves the completion).
    #[cfg(feature = "cublas")]
    pub(crate) fn enqueued_deferred(self: &Arc<Self>, deferred: Deferred<T>, event: EventRef, keep: Vec<KeepAlive>) {
        self.enqueued_value(Err(deferred), Some(event), keep)
    }

    fn enqueued_value(
        self: &Arc<Self>,
        value: std::result::Result<Result<T>, Deferred<T>>,
        event: Option<EventRef>,
        keep: Vec<KeepAlive>,
    ) {
        let store = |st: &mut State<T>| match value {
            Ok(v) => st.value = Some(v),
            Err(d) => st.deferred = Some(d),
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
        let register;
        {
            let mut st = crate::sync::lock(&self.state);
            store(&mut st);
            // Only a completion that must act when the GPU finishes needs the completion
            // thread: one with keep-alives, a deferred value, a trace ticket, a callback or a
            // waker. Any other is resolved by whoever waits or polls it, or simply dropped, which
            // saves the completion thread a registration and an event query per op.
            register = st.watched
                || self.device.config.watchdog.is_some()
                || !keep.is_empty()
                || st.deferred.is_some()
                || st.trace.is_some()
                || st.callback.is_some()
                || st.waker.is_some();
            st.registered = register;
            st.event = Some(event.clone());
            st.keep = keep;
            self.status.store(ENQUEUED, Ordering::Release);
        }
        self.cv.notify_all();
        if register {
            self.register(stream, event);
        }
    }

    /// Hands the completion to the completion thread to watch `event`.
    fn register(self: &Arc<Self>, stream: u32, event: EventRef) {
        let pending: Arc<dyn Pending> = self.clone();
        if let Err(pending) = self.device.completions().register(stream, event, pending) {
            // No completion thread any more (the device shut down): finish here.
            let outcome = pending.1.synchronize();
            pending.2.resolve(outcome);
        }
    }

    /// Called under the state lock by a caller that now needs the completion thread (it set a
    /// callback or a waker): returns what to register, if nobody has yet.
    fn needs_registration(&self, st: &mut State<T>) -> Option<(u32, EventRef)> {
        if self.status.load(Ordering::Acquire) != ENQUEUED || st.registered {
            return None;
        }
        let event = st.event.clone()?;
        st.registered = true;
        Some((event.pos().stream, event))
    }

    fn resolve_in(&self, outcome: Result<()>, run_callback_here: bool) {
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
    fn publish_value(&self, outcome: Result<()>, gpu_done: bool, run_callback_here: bool) {
        let (keep, callback, waker, value);
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
        }
        self.cv.notify_all();
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

fn run_callback<T>(cb: Callback<T>, v: Result<T>) {
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

/// The outcome of GPU work: `T` once every kernel and copy the job enqueued has finished.
///
/// Dropping a completion never cancels the work and never releases its keep-alives early, so
/// ignoring one is fine: library ops return one each, and inside a lane job the job's own
/// completion already covers them.
///
/// ```
/// use cusched::{Device, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let lane = device.lane("compute")?;
/// let done = lane.submit(|cx| {
///     let buf = cx.device().upload(cx.stream(), &[1u32, 2, 3])?;
///     cx.keep(buf.clone());
///     Ok(buf.len())
/// });
/// assert_eq!(done.wait()?, 3);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Completion<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.shared.status.load(Ordering::Acquire) {
            QUEUED => "queued",
            ENQUEUED => "enqueued",
            _ => "ready",
        };
        write!(f, "Completion({s})")
    }
}

impl<T: Send + 'static> Completion<T> {
    pub(crate) fn queued(device: &Arc<DeviceShared>) -> (Completion<T>, Arc<Shared<T>>) {
        Self::queued_on(device, 0)
    }

    /// A completion for a job queued on the lane with id `lane`.
    pub(crate) fn queued_on(device: &Arc<DeviceShared>, lane: u64) -> (Completion<T>, Arc<Shared<T>>) {
        let shared = Shared::new(device, lane);
        (Completion { shared: shared.clone() }, shared)
    }

    fn spin(&self) -> Duration {
        self.shared.device.config.spin
    }

    /// Blocks until the status reaches `at_least` or `deadline` passes (`None`: no deadline);
    /// spins briefly first.
    fn wait_status(&self, at_least: u8, deadline: Option<Instant>) -> bool {
        // Measured as elapsed time, so that any spin, however large, cannot overflow `Instant`.
        let (start, spin) = (Instant::now(), self.spin());
        while start.elapsed() < spin && deadline.is_none_or(|d| Instant::now() < d) {
            if self.shared.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            std::hint::spin_loop();
        }
        let mut st = crate::sync::lock(&self.shared.state);
        loop {
            if self.shared.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            st = match deadline {
                None => crate::sync::wait(&self.shared.cv, st),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    crate::sync::wait_timeout(&self.shared.cv, st, left)
                }
            };
        }
    }

    /// `Some(WouldDeadlock)` when waiting here could never end: the job is still queued on the
    /// lane whose thread this is.
    fn would_deadlock(&self) -> Option<Error> {
        let runner = self.shared.runner;
        (runner != 0
            && self.shared.status.load(Ordering::Acquire) == QUEUED
            && crate::sync::role::lane() == runner)
            .then(|| Error::WouldDeadlock {
                what: "a lane job waited on a job queued behind it on its own lane, which only runs after the waiting job returns; return the completion instead, or submit the second job to another lane".into(),
            })
    }

    /// Whether this is the completion thread of the completion's device, which cannot both wait
    /// and deliver.
    fn on_completion_thread(&self) -> bool {
        self.shared.device.completions().is_current_thread()
    }

    /// On the completion thread: resolves the completion by polling its event from here (the
    /// thread cannot wait for itself), enforcing the watchdog too. `false` if `deadline` passed.
    fn watch_here(&self, deadline: Option<Instant>) -> bool {
        // The job runs on a lane or the caller's thread, neither of which needs this thread.
        if !self.wait_status(ENQUEUED, deadline) {
            return false;
        }
        let event = crate::sync::lock(&self.shared.state).event.clone();
        if let Some(ev) = event {
            let watchdog = self.shared.device.config.watchdog;
            let expires = watchdog.and_then(|w| Instant::now().checked_add(w));
            let mut backoff = Duration::from_micros(20);
            loop {
                match ev.is_done() {
                    Ok(false) => {}
                    done => {
                        self.shared.resolve_in(done.map(drop), true);
                        break;
                    }
                }
                let now = Instant::now();
                if let (Some(w), Some(e)) = (watchdog, expires) {
                    if now >= e {
                        // The completion thread resolves it again, releasing its keep-alives,
                        // once the GPU is really done.
                        self.shared.publish_value(Err(Error::Timeout { waited: w }), false, true);
                        break;
                    }
                }
                if deadline.is_some_and(|d| now >= d) {
                    return false;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(1));
            }
        }
        self.wait_status(READY, deadline)
    }

    fn take(&self) -> Result<T> {
        let mut st = crate::sync::lock(&self.shared.state);
        if st.taken {
            return Err(Error::AlreadyTaken);
        }
        st.taken = true;
        st.value.take().unwrap_or(Err(Error::AlreadyTaken))
    }

    /// Blocks until the job's GPU work has finished and returns its value. Synchronizes on the
    /// job's event from this thread.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane. Inside a callback (on the completion thread) it works: it watches the event
    /// from there.
    pub fn wait(self) -> Result<T> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        if self.shared.device.config.watchdog.is_some() {
            // The completion thread enforces the watchdog; synchronizing here could outwait it.
            if self.on_completion_thread() {
                self.watch_here(None);
            } else {
                self.wait_status(READY, None);
            }
            return self.take();
        }
        self.wait_status(ENQUEUED, None);
        let event = crate::sync::lock(&self.shared.state).event.clone();
        if let Some(ev) = event {
            let outcome = ev.synchronize();
            drop(ev);
            self.shared.resolve_in(outcome, false);
        }
        self.wait_status(READY, None);
        self.take()
    }

    /// Like [`wait`](Self::wait), but gives up after `timeout` with [`Error::Timeout`]; after a
    /// timeout the completion stays usable (wait again, poll it, or set a callback). A value
    /// returned is taken: later calls return [`Error::AlreadyTaken`]. A timeout too large for
    /// [`Instant`] means no limit.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<T> {
        let deadline = Instant::now().checked_add(timeout);
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        if self.on_completion_thread() {
            if !self.watch_here(deadline) {
                return Err(Error::Timeout { waited: timeout });
            }
            return self.take();
        }
        {
            let mut st = crate::sync::lock(&self.shared.state);
            st.watched = true;
            let register = self.shared.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.shared.register(stream, event);
            }
        }
        if !self.wait_status(READY, deadline) {
            return Err(Error::Timeout { waited: timeout });
        }
        self.take()
    }

    /// Blocks until the job has run and its work is enqueued and committed (its uses are
    /// ordered before any later recorder's), without waiting for the GPU. Use it to order a
    /// job on one lane before a job on another.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane (it could only run after the waiting job returns). The job's own outcome is
    /// not reported here: [`wait`](Self::wait) returns it.
    pub fn wait_committed(&self) -> Result<()> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        self.wait_status(ENQUEUED, None);
        Ok(())
    }

    /// Whether the value is available (the GPU work has finished). Never blocks.
    pub fn is_ready(&self) -> bool {
        match self.shared.status.load(Ordering::Acquire) {
            READY => true,
            QUEUED => false,
            _ => {
                let event = crate::sync::lock(&self.shared.state).event.clone();
                match event.map(|e| e.is_done()) {
                    Some(Ok(false)) => false,
                    Some(Ok(true)) | None => {
                        self.shared.resolve_in(Ok(()), false);
                        true
                    }
                    Some(Err(e)) => {
                        self.shared.resolve_in(Err(e), false);
                        true
                    }
                }
            }
        }
    }

    /// The value if it is available, once; `None` while the work is pending.
    pub fn try_take(&self) -> Option<Result<T>> {
        self.is_ready().then(|| self.take())
    }

    /// Runs `callback` with the value on the device's completion thread once the GPU work has
    /// finished (never on CUDA's driver thread). Keep callbacks short: they delay other
    /// completions.
    pub fn on_complete(self, callback: impl FnOnce(Result<T>) + Send + 'static) {
        let mut st = crate::sync::lock(&self.shared.state);
        if self.shared.status.load(Ordering::Acquire) != READY {
            st.callback = Some(Box::new(callback));
            let register = self.shared.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.shared.register(stream, event);
            }
            return;
        }
        st.taken = true;
        let value = st.value.take().unwrap_or(Err(Error::AlreadyTaken));
        drop(st);
        let job: Box<dyn FnOnce() + Send> = Box::new(move || run_callback(Box::new(callback), value));
        self.shared.device.completions().run_callback(job);
    }
}

impl<T: Send + 'static> Future for Completion<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if self.shared.status.load(Ordering::Acquire) != READY {
            let mut st = crate::sync::lock(&self.shared.state);
            // Re-checked under the lock the resolver takes the waker in: no lost wake-up.
            if self.shared.status.load(Ordering::Acquire) != READY {
                st.waker = Some(cx.waker().clone());
                let register = self.shared.needs_registration(&mut st);
                drop(st);
                if let Some((stream, event)) = register {
                    self.shared.register(stream, event);
                }
                return Poll::Pending;
            }
        }
        Poll::Ready(self.take())
    }
}

/// Waits for every completion, in order, and returns their results.
pub fn wait_all<T: Send + 'static>(completions: impl IntoIterator<Item = Completion<T>>) -> Vec<Result<T>> {
    completions.into_iter().map(Completion::wait).collect()
}

enum Msg {
    Register { stream: u32, event: EventRef, job: Arc<dyn Pending> },
    Callback(Box<dyn FnOnce() + Send>),
    Shutdown,
}

type Rejected = (u32, EventRef, Arc<dyn Pending>);

/// Set in [`Completions::gate`] once shutdown has begun; the bits below count senders between
/// their check of the gate and the end of their send.
const STOPPED: usize = 1 << (usize::BITS - 1);

/// The device's completion thread, started on first use and never again after shutdown.
///
/// # Memory ordering
///
/// `gate` orders registrations against shutdown. A sender increments it (AcqRel) and proceeds
/// only if `STOPPED` was clear, then decrements it after its send. Shutdown sets `STOPPED`
/// (AcqRel) and waits until the count reads zero (Acquire): every sender that saw the gate
/// open has finished its send by then, and every later one sees `STOPPED` and backs off. So
/// the `Shutdown` message, sent after that wait, is the last message the thread receives, and
/// the thread is never started after it (starting happens only inside the gate).
pub(crate) struct Completions {
    device: u32,
    spin: Duration,
    watchdog: Option<Duration>,
    thread: std::sync::OnceLock<Sender<Msg>>,
    join: Mutex<Option<JoinHandle<()>>>,
    start: Mutex<()>,
    gate: AtomicUsize,
}

/// A sender inside the gate; leaving it decrements the count.
struct Entered<'a>(&'a AtomicUsize);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Completions {
    pub(crate) fn new(device: u32, spin: Duration, watchdog: Option<Duration>) -> Self {
        Completions {
            device,
            spin,
            watchdog,
            thread: std::sync::OnceLock::new(),
            join: Mutex::new(None),
            start: Mutex::new(()),
            gate: AtomicUsize::new(0),
        }
    }

    /// Enters the gate, or `None` once shutdown has begun.
    fn enter(&self) -> Option<Entered<'_>> {
        if self.gate.fetch_add(1, Ordering::AcqRel) & STOPPED != 0 {
            self.gate.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Entered(&self.gate))
    }

    /// The thread's sender, starting the thread on first use. Call only inside the gate.
    fn sender(&self, _inside: &Entered<'_>) -> Option<&Sender<Msg>> {
        if let Some(tx) = self.thread.get() {
            return Some(tx);
        }
        let _g = crate::sync::lock(&self.start);
        if self.thread.get().is_none() {
            let (tx, rx) = crossbeam_channel::unbounded();
            let (device, spin, watchdog) = (self.device, self.spin, self.watchdog);
            let spawned = std::thread::Builder::new()
                .name("cusched-completion".into())
                .spawn(move || completion_loop(device, rx, spin, watchdog));
            match spawned {
                Ok(h) => {
                    let _ = self.thread.set(tx);
                    *crate::sync::lock(&self.join) = Some(h);
                }
                Err(e) => {
                    log::error!("cusched: could not start the completion thread: {e}");
                    return None;
                }
            }
        }
        self.thread.get()
    }

    pub(crate) fn is_current_thread(&self) -> bool {
        crate::sync::role::completion_thread_of() == self.device
    }

    fn register(&self, stream: u32, event: EventRef, job: Arc<dyn Pending>) -> std::result::Result<(), Rejected> {
        let Some(inside) = self.enter() else { return Err((stream, event, job)) };
        match self.sender(&inside) {
            Some(tx) => tx.send(Msg::Register { stream, event, job }).map_err(|e| match e.0 {
                Msg::Register { stream, event, job } => (stream, event, job),
                _ => unreachable!("the message sent is returned"),
            }),
            None => Err((stream, event, job)),
        }
    }

    fn run_callback(&self, f: Box<dyn FnOnce() + Send>) {
        if self.is_current_thread() {
            return f();
        }
        let f = match self.enter() {
            Some(inside) => match self.sender(&inside).map(|tx| tx.send(Msg::Callback(f))) {
                Some(Ok(())) => return,
                Some(Err(e)) => match e.0 {
                    Msg::Callback(f) => f,
                    _ => unreachable!("the message sent is returned"),
                },
                None => {
                    log::error!("cusched: a callback could not reach the completion thread; it was dropped unrun");
                    return;
                }
            },
            None => f,
        };
        // The device has shut down: there is no completion thread to run it any more.
        log::debug!("cusched: the completion thread has stopped; running a callback on the caller's thread");
        f();
    }

    /// Closes the gate (once) and tells the thread to finish: it resolves everything pending
    /// (waiting for the GPU, bounded by the watchdog if there is one), then exits.
    pub(crate) fn stop(&self) {
        if self.gate.fetch_or(STOPPED, Ordering::AcqRel) & STOPPED != 0 {
            return;
        }
        // Senders inside the gate only start a thread and send; none waits on this one.
        while self.gate.load(Ordering::Acquire) & !STOPPED != 0 {
            std::thread::yield_now();
        }
        if let Some(tx) = self.thread.get() {
            let _ = tx.send(Msg::Shutdown);
        }
    }

    /// [`stop`](Self::stop)s the thread and joins it, unless called from the thread itself
    /// (from a callback), which then finishes on its own once the callback returns.
    pub(crate) fn shutdown(&self) {
        self.stop();
        if self.is_current_thread() {
            return;
        }
        if let Some(h) = crate::sync::lock(&self.join).take() {
            let _ = h.join();
        }
    }
}

/// A registered completion: its event, itself, when it was registered, and whether the watchdog
/// already resolved it.
struct Watched {
    event: EventRef,
    job: Arc<dyn Pending>,
    since: Instant,
    expired: bool,
}

/// Queues `w` on its stream's queue in sequence order: registration is lazy, so a later op can
/// register before an earlier one, and only the front of a queue is polled.
fn insert_in_order(q: &mut VecDeque<Watched>, w: Watched) {
    let seq = w.event.pos().seq;
    let at = q.iter().rposition(|x| x.event.pos().seq <= seq).map_or(0, |i| i + 1);
    q.insert(at, w);
}

/// Resolves a job and drops the thread's hold on it, catching any panic of user code in it (a
/// value's `Drop`, say) so that later deliveries go on.
fn deliver(w: Watched, outcome: Result<()>) {
    crate::sync::guarded("delivering a completion", move || {
        w.job.resolve(outcome);
        drop(w);
    });
}

/// Polls the oldest pending event of each stream; spins for `spin` after progress, then backs
/// off exponentially (50 µs to 1 ms) while new registrations can still wake it at once.
///
/// After `Shutdown` (always the last message, see [`Completions`]) it resolves everything left
/// and exits: waiting for the GPU, or with a watchdog polling until the watchdog's limit and
/// then abandoning what is left.
fn completion_loop(device: u32, rx: Receiver<Msg>, spin: Duration, watchdog: Option<Duration>) {
    crate::sync::role::set_completion_thread(device);
    let mut queues: Vec<VecDeque<Watched>> = Vec::new();
    let mut pending = 0usize;
    let mut idle_since = Instant::now();
    let mut backoff = Duration::from_micros(50);
    // Set once `Shutdown` arrived: when shutdown gives up on the GPU (`None`: never).
    let mut shutting_down: Option<Option<Instant>> = None;
    loop {
        let msg = if shutting_down.is_some() {
            if pending == 0 {
                return;
            }
            if watchdog.is_some() {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(1));
            }
            Err(TryRecvError::Empty)
        } else if pending == 0 {
            rx.recv().map_err(|_| TryRecvError::Disconnected)
        } else if idle_since.elapsed() < spin {
            rx.try_recv()
        } else {
            let m = rx.recv_timeout(backoff).map_err(|e| match e {
                RecvTimeoutError::Timeout => TryRecvError::Empty,
                RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
            });
            backoff = (backoff * 2).min(Duration::from_millis(1));
            m
        };
        match msg {
            Ok(Msg::Register { stream, event, job }) => {
                let i = stream as usize;
                if queues.len() <= i {
                    queues.resize_with(i + 1, VecDeque::new);
                }
                insert_in_order(&mut queues[i], Watched { event, job, since: Instant::now(), expired: false });
                pending += 1;
                continue;
            }
            Ok(Msg::Callback(f)) => {
                crate::sync::guarded("an on_complete callback", f);
                continue;
            }
            Ok(Msg::Shutdown) | Err(TryRecvError::Disconnected) => {
                shutting_down = Some(watchdog.and_then(|w| Instant::now().checked_add(w)));
            }
            Err(TryRecvError::Empty) => {}
        }
        // Without a watchdog, shutdown waits on each event as long as the GPU takes.
        let block = shutting_down.is_some() && watchdog.is_none();
        let mut progressed = false;
        for q in &mut queues {
            while let Some(w) = q.front() {
                let outcome = if block { w.event.synchronize().map(|_| true) } else { w.event.is_done() };
                let outcome = match outcome {
                    Ok(false) => break,
                    Ok(true) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Some(w) = q.pop_front() {
                    deliver(w, outcome);
                }
                pending -= 1;
                progressed = true;
            }
            // One stream's events finish in order, so everything left is still running.
            if let Some(limit) = watchdog {
                for w in q.iter_mut().filter(|w| !w.expired && w.since.elapsed() >= limit) {
                    w.expired = true;
                    let job = w.job.clone();
                    crate::sync::guarded("expiring a completion", move || job.expire(limit));
                }
            }
        }
        if progressed {
            idle_since = Instant::now();
            backoff = Duration::from_micros(50);
        }
        if let (Some(Some(give_up)), Some(limit)) = (shutting_down, watchdog) {
            if Instant::now() >= give_up {
                for w in queues.iter_mut().flat_map(std::mem::take) {
                    let Watched { event, job, .. } = w;
                    // The event may still be pending on its stream: leaked, not pooled again.
                    std::mem::forget(event);
                    crate::sync::guarded("abandoning a completion", move || job.abandon(limit));
                }
                return;
            }
        }
    }
}
