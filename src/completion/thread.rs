//! The device's completion thread: it watches the events of registered completions, resolves
//! them when the GPU passes them, and runs `on_complete` callbacks.
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

use crate::error::Result;
use crate::track::EventRef;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// hooks of ops without a completion) is polled once per [`LAZY_POLL`], so that watching
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
    stats: Arc<LoopStats>,
}

/// What the completion loop has done, so tests can check that it parks when nothing is
/// pending and polls a registration at once. Written only by the completion thread (`Relaxed`:
/// counters that order nothing).
#[derive(Default)]
pub(crate) struct LoopStats {
    /// Passes of the loop.
    iterations: AtomicU64,
    /// Timed sleeps between polls (the backoff after the spin window).
    sleeps: AtomicU64,
    /// Whether the thread is blocked with nothing pending, until a message arrives.
    parked: AtomicBool,
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
            start: Mutex::new(()),
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

    pub(super) fn run_callback(&self, f: Box<dyn FnOnce() + Send>) {
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
    /// [`Pending::prompt`], read once.
    prompt: bool,
    /// When its event was last queried (or, before that, registered): a lazy job waits
    /// [`LAZY_POLL`] from here for its next query.
    queried: Instant,
}

impl Watched {
    fn new(event: EventRef, job: Arc<dyn Pending>, prompt: bool) -> Self {
        let now = Instant::now();
        Watched { event, job, since: now, expired: false, prompt, queried: now }
    }
}

/// Queues `w` on its stream's queue in sequence order: registration is lazy, so a later op can
/// register before an earlier one, and only the front of a queue is polled.
fn insert_in_order(q: &mut VecDeque<Watched>, w: Watched) {
    let seq = w.event.pos().seq;
    let at = q.iter().rposition(|x| x.event.pos().seq <= seq).map_or(0, |i| i + 1);
    q.insert(at, w);
}

/// Resolves a job and drops the thread's hold on it, catching any panic of user code in it (a
/// value's `Drop`, say) so that later deliveries go on. Returns the job again, watching its
/// next event, if it has one.
fn deliver(w: Watched, outcome: Result<()>) -> Option<Watched> {
    let mut again = None;
    crate::sync::guarded("delivering a completion", || {
        if let Some(event) = w.job.resolve_then(outcome) {
            again = Some(Watched::new(event, w.job.clone(), w.prompt));
        }
        drop(w);
    });
    again
}

/// Shortest and longest sleep between two polls once the spin window has passed.
const MIN_BACKOFF: Duration = Duration::from_micros(50);
const MAX_BACKOFF: Duration = Duration::from_millis(1);

/// How long a job that is not [`Pending::prompt`] waits between two queries of its event
/// (unless a prompt job behind it on its stream needs the query anyway). A query made while
/// other threads enqueue contends with them inside the driver: measured on an H100 with two
/// streams, polling a trace backlog at the backoff's pace took 4.8 µs of the completion
/// thread's time per traced op and added over 1 µs to each op of the enqueuing thread.
pub(super) const LAZY_POLL: Duration = Duration::from_millis(1);

/// `spin_loop` hints between two passes of the spin window (well under a microsecond): a pass
/// already queries one event per busy stream (about 1.5 µs each on CUDA), so the pause only
/// spares the core's sibling hyperthread, and adds next to nothing to the latency.
const PAUSES: u32 = 8;

/// The loop's pace: a spin window that every registration and every delivery reopens, then a
/// backoff, then (with nothing pending) a blocking receive.
struct Pace {
    spin: Duration,
    /// The last registration or delivery: the spin window runs `spin` from here.
    active: Instant,
    backoff: Duration,
}

impl Pace {
    fn new(spin: Duration) -> Self {
        Pace { spin, active: Instant::now(), backoff: MIN_BACKOFF }
    }

    /// Something happened: spin again, and start the next backoff from its shortest sleep.
    fn activity(&mut self) {
        self.active = Instant::now();
        self.backoff = MIN_BACKOFF;
    }

    fn spinning(&self) -> bool {
        self.active.elapsed() < self.spin
    }

    /// The next backoff sleep, doubling up to [`MAX_BACKOFF`].
    fn next_sleep(&mut self) -> Duration {
        let d = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        d
    }
}

/// How long until the first lazy job (not [`Pending::prompt`]) at the front of a queue is due
/// for its next query, at most [`MAX_BACKOFF`].
fn lazy_due_in(queues: &[VecDeque<Watched>]) -> Duration {
    queues
        .iter()
        .filter_map(|q| q.front())
        .map(|w| LAZY_POLL.saturating_sub(w.queried.elapsed()))
        .min()
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// Polls the oldest pending event of each stream.
///
/// Each registration and each delivery opens a spin window of `spin`: the thread polls pass
/// after pass, with a short pause between passes, and takes new messages without blocking, so
/// a registration is polled at once and a sender never has to wake a sleeping thread while work
/// flows. Past the window, with work pending, it sleeps between polls (50 µs doubling to 1 ms;
/// a new registration still wakes it at once and reopens the window). A job that is not
/// prompt (a trace backlog's watch) is queried once per [`LAZY_POLL`] only, and with nothing
/// else pending the thread sleeps until it is due. With nothing pending it blocks on the
/// channel: no core is busy while the device is idle.
///
/// After `Shutdown` (always the last message, see [`Completions`]) it resolves everything left
/// and exits: waiting for the GPU, or with a watchdog polling until the watchdog's limit and
/// then abandoning what is left.
fn completion_loop(device: u32, rx: Receiver<Msg>, spin: Duration, watchdog: Option<Duration>, stats: &LoopStats) {
    crate::sync::role::set_completion_thread(device);
    let mut queues: Vec<VecDeque<Watched>> = Vec::new();
    let mut pending = 0usize;
    // How many of the pending jobs are prompt: with none, the loop sleeps until the first lazy
    // one is due instead of backing off from the shortest sleep.
    let mut pending_prompt = 0usize;
    let mut pace = Pace::new(spin);
    // Set once `Shutdown` arrived: when shutdown gives up on the GPU (`None`: never).
    let mut shutting_down: Option<Option<Instant>> = None;
    loop {
        stats.iterations.fetch_add(1, Ordering::Relaxed);
        let mut next = if shutting_down.is_some() {
            if pending == 0 {
                return;
            }
            if watchdog.is_some() {
                std::thread::sleep(pace.next_sleep());
            }
            None
        } else if pace.spinning() {
            std::hint::spin_loop();
            for _ in 1..PAUSES {
                std::hint::spin_loop();
            }
            None
        } else if pending == 0 {
            stats.parked.store(true, Ordering::Relaxed);
            let m = rx.recv().unwrap_or(Msg::Shutdown);
            stats.parked.store(false, Ordering::Relaxed);
            Some(m)
        } else {
            stats.sleeps.fetch_add(1, Ordering::Relaxed);
            let sleep = if pending_prompt == 0 { lazy_due_in(&queues) } else { pace.next_sleep() };
            match rx.recv_timeout(sleep) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Msg::Shutdown),
            }
        };
        // Take every queued message before polling: a burst of registrations costs one pass.
        while shutting_down.is_none() {
            match next.take() {
                Some(Msg::Register { stream, event, job }) => {
                    let i = stream as usize;
                    if queues.len() <= i {
                        queues.resize_with(i + 1, VecDeque::new);
                    }
                    let prompt = job.prompt();
                    let w = Watched::new(event, job, prompt);
                    insert_in_order(&mut queues[i], w);
                    pending += 1;
                    if prompt {
                        pending_prompt += 1;
                        pace.activity();
                    }
                }
                Some(Msg::Callback(f)) => crate::sync::guarded("an on_complete callback", f),
                Some(Msg::Shutdown) => {
                    shutting_down = Some(watchdog.and_then(|w| Instant::now().checked_add(w)));
                    break;
                }
                None => {}
            }
            next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => Some(Msg::Shutdown),
            };
        }
        if pending == 0 {
            continue;
        }
        // Without a watchdog, shutdown waits on each event as long as the GPU takes.
        let block = shutting_down.is_some() && watchdog.is_none();
        let mut progressed = false;
        for q in &mut queues {
            while let Some(w) = q.front() {
                if shutting_down.is_none()
                    && !w.prompt
                    && w.queried.elapsed() < LAZY_POLL
                    && q.iter().all(|x| !x.prompt)
                {
                    break;
                }
                let outcome = if block { w.event.synchronize().map(|_| true) } else { w.event.is_done() };
                let outcome = match outcome {
                    Ok(false) => {
                        if let Some(w) = q.front_mut().filter(|w| !w.prompt) {
                            w.queried = Instant::now();
                        }
                        break;
                    }
                    Ok(true) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Some(w) = q.pop_front() {
                    progressed |= w.prompt;
                    pending_prompt -= usize::from(w.prompt);
                    if let Some(again) = deliver(w, outcome) {
                        pending_prompt += usize::from(again.prompt);
                        insert_in_order(q, again);
                        pending += 1;
                    }
                }
                pending -= 1;
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
            pace.activity();
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
