//! The device's completion thread: it watches the events of registered completions, resolves
//! them when the GPU passes them, and runs `on_complete` callbacks.
//!
//! It sits below the device and the completions it serves: it knows only events and the
//! [`Pending`] trait that completions and the device's trace backlog implement.
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
//! left with [`Error::Timeout`](crate::Error::Timeout) and leaking its keep-alives (logged)
//! rather than freeing memory the GPU may still use. Without a watchdog, shutdown waits as long
//! as the GPU takes.

mod poll_loop;

use crate::error::Result;
use crate::track::EventRef;
use crossbeam_channel::Sender;
use poll_loop::completion_loop;
#[cfg(test)]
pub(crate) use poll_loop::LAZY_POLL;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the completion thread holds of a pending job, whatever its `T`.
pub(crate) trait Pending: Send + Sync {
    /// The GPU passed the job's event (`Ok`), or querying it failed.
    fn resolve(&self, outcome: Result<()>);
    /// The watchdog fired: resolve with [`Error::Timeout`](crate::Error::Timeout) now, but keep the keep-alives until
    /// [`resolve`](Self::resolve) reports the GPU really done.
    fn expire(&self, waited: Duration);
    /// Shutdown gave up on the GPU: resolve with [`Error::Timeout`](crate::Error::Timeout) if not yet resolved, and
    /// leak the keep-alives, which the GPU may still be using.
    fn abandon(&self, waited: Duration);
    /// Whether someone waits for this to resolve promptly: its registration and its delivery
    /// open the spin window. A job that only promises to run after the GPU finished (trace
    /// hooks of ops without a completion) is polled once per [`LAZY_POLL`](super::poll_loop::LAZY_POLL), so that watching
    /// it does not keep the thread querying the driver beside the threads that enqueue.
    fn prompt(&self) -> bool {
        true
    }
    /// [`resolve`](Self::resolve), for a job that watches a sequence of events (a stream's
    /// trace backlog): the event to watch next, if any. The thread keeps watching it itself,
    /// even after shutdown closed the gate to registrations, so that it stays under the
    /// watchdog and never blocks the thread.
    fn resolve_then(&self, outcome: Result<()>) -> Option<EventRef> {
        self.resolve(outcome);
        None
    }
}

/// What the completion thread receives.
pub(super) enum Msg {
    /// Watch `event` of stream `stream` and resolve `job` when the GPU passes it.
    Register { stream: u32, event: EventRef, job: Arc<dyn Pending> },
    /// Run this on the completion thread.
    Callback(Box<dyn FnOnce() + Send>),
    /// Resolve everything pending, then exit; always the last message.
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
    start: crate::sync::Ranked<Mutex<()>, { crate::sync::rank::THREAD_START }>,
    gate: AtomicUsize,
    stats: Arc<LoopStats>,
}

/// What the completion loop has done, so tests can check that it parks when nothing is
/// pending and polls a registration at once. Written only by the completion thread (`Relaxed`:
/// counters that order nothing).
#[derive(Default)]
pub(crate) struct LoopStats {
    /// Passes of the loop.
    pub(super) iterations: AtomicU64,
    /// Timed sleeps between polls (the backoff after the spin window).
    pub(super) sleeps: AtomicU64,
    /// Whether the thread is blocked with nothing pending, until a message arrives.
    pub(super) parked: AtomicBool,
}

#[cfg_attr(not(test), allow(dead_code))]
impl LoopStats {
    pub(crate) fn iterations(&self) -> u64 {
        self.iterations.load(Ordering::Relaxed)
    }
    pub(crate) fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }
    pub(crate) fn parked(&self) -> bool {
        self.parked.load(Ordering::Relaxed)
    }
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
            start: crate::sync::Ranked::new(Mutex::new(())),
            gate: AtomicUsize::new(0),
            stats: Arc::default(),
        }
    }

    /// The loop's counters.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn stats(&self) -> &LoopStats {
        &self.stats
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
            let (device, spin, watchdog, stats) = (self.device, self.spin, self.watchdog, self.stats.clone());
            let spawned = std::thread::Builder::new()
                .name("cusched-completion".into())
                .spawn(move || completion_loop(device, rx, spin, watchdog, &stats));
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

    pub(crate) fn register(
        &self,
        stream: u32,
        event: EventRef,
        job: Arc<dyn Pending>,
    ) -> std::result::Result<(), Rejected> {
        let Some(inside) = self.enter() else { return Err((stream, event, job)) };
        match self.sender(&inside) {
            Some(tx) => tx.send(Msg::Register { stream, event, job }).map_err(|e| match e.0 {
                Msg::Register { stream, event, job } => (stream, event, job),
                _ => unreachable!("the message sent is returned"),
            }),
            None => Err((stream, event, job)),
        }
    }

    pub(crate) fn run_callback(&self, f: Box<dyn FnOnce() + Send>) {
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
