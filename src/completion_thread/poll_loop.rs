//! The completion thread's loop: it polls the oldest pending event of each stream, resolves
//! the jobs whose events the GPU has passed, and paces itself between a spin window, a backoff
//! and a blocking receive. The thread itself, its gate and its messages are in the parent module.

use super::{LoopStats, Msg, Pending};
use crate::error::Result;
use crate::track::EventRef;
use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
pub(crate) const LAZY_POLL: Duration = Duration::from_millis(1);

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
/// After `Shutdown` (always the last message, see [`Completions`](super::Completions)) it resolves everything left
/// and exits: waiting for the GPU, or with a watchdog polling until the watchdog's limit and
/// then abandoning what is left.
pub(super) fn completion_loop(
    device: u32,
    rx: Receiver<Msg>,
    spin: Duration,
    watchdog: Option<Duration>,
    stats: &LoopStats,
) {
    crate::sync::role::set_completion_thread(device);
    let mut l = Loop {
        rx,
        watchdog,
        stats,
        queues: Vec::new(),
        pending: 0,
        pending_prompt: 0,
        pace: Pace::new(spin),
        phase: Phase::Running,
    };
    loop {
        stats.iterations.fetch_add(1, Ordering::Relaxed);
        let first = match l.wait() {
            Woke::Exit => return,
            Woke::Message(m) => Some(m),
            Woke::Poll => None,
        };
        l.take_messages(first);
        if l.pending == 0 {
            continue;
        }
        if l.poll() {
            l.pace.activity();
        }
        if l.give_up_if_due() {
            return;
        }
    }
}

/// Whether the loop still takes messages.
#[derive(Clone, Copy)]
enum Phase {
    Running,
    /// `Shutdown` arrived: no more messages; resolve what is pending, then exit.
    Draining(GiveUp),
}

/// When shutdown gives up on the GPU and abandons what is still pending.
#[derive(Clone, Copy)]
enum GiveUp {
    /// No watchdog: shutdown waits as long as the GPU takes.
    Never,
    At(Instant),
}

impl GiveUp {
    /// The watchdog's limit from now (never without one).
    fn after(watchdog: Option<Duration>) -> Self {
        match watchdog.and_then(|w| Instant::now().checked_add(w)) {
            Some(t) => GiveUp::At(t),
            None => GiveUp::Never,
        }
    }
}

/// How a pass's wait ended.
enum Woke {
    /// Shutdown resolved everything: the thread ends.
    Exit,
    Message(Msg),
    /// Time to poll the queues.
    Poll,
}

/// The loop's state between passes.
struct Loop<'a> {
    rx: Receiver<Msg>,
    watchdog: Option<Duration>,
    stats: &'a LoopStats,
    /// Per process-wide stream index, its registered jobs in sequence order.
    queues: Vec<VecDeque<Watched>>,
    pending: usize,
    /// How many of the pending jobs are prompt: with none, the loop sleeps until the first lazy
    /// one is due instead of backing off from the shortest sleep.
    pending_prompt: usize,
    pace: Pace,
    phase: Phase,
}

impl Loop<'_> {
    /// Waits for the next pass as the pace says: spin, sleep (taking a message that comes
    /// meanwhile), or, with nothing pending, block on the channel.
    fn wait(&mut self) -> Woke {
        if let Phase::Draining(_) = self.phase {
            if self.pending == 0 {
                return Woke::Exit;
            }
            if self.watchdog.is_some() {
                std::thread::sleep(self.pace.next_sleep());
            }
            return Woke::Poll;
        }
        if self.pace.spinning() {
            std::hint::spin_loop();
            for _ in 1..PAUSES {
                std::hint::spin_loop();
            }
            return Woke::Poll;
        }
        if self.pending == 0 {
            self.stats.parked.store(true, Ordering::Relaxed);
            let m = self.rx.recv().unwrap_or(Msg::Shutdown);
            self.stats.parked.store(false, Ordering::Relaxed);
            return Woke::Message(m);
        }
        self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
        let sleep = if self.pending_prompt == 0 { lazy_due_in(&self.queues) } else { self.pace.next_sleep() };
        match self.rx.recv_timeout(sleep) {
            Ok(m) => Woke::Message(m),
            Err(RecvTimeoutError::Timeout) => Woke::Poll,
            Err(RecvTimeoutError::Disconnected) => Woke::Message(Msg::Shutdown),
        }
    }

    /// Takes `first` and every message queued behind it before polling, so that a burst of
    /// registrations costs one pass; stops at `Shutdown`.
    fn take_messages(&mut self, mut next: Option<Msg>) {
        while let Phase::Running = self.phase {
            match next.take() {
                Some(Msg::Register { stream, event, job }) => self.register(stream, event, job),
                Some(Msg::Callback(f)) => crate::sync::guarded("an on_complete callback", f),
                Some(Msg::Shutdown) => {
                    self.phase = Phase::Draining(GiveUp::after(self.watchdog));
                    break;
                }
                None => {}
            }
            next = match self.rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => Some(Msg::Shutdown),
            };
        }
    }

    fn register(&mut self, stream: u32, event: EventRef, job: Arc<dyn Pending>) {
        let i = stream as usize;
        if self.queues.len() <= i {
            self.queues.resize_with(i + 1, VecDeque::new);
        }
        let prompt = job.prompt();
        insert_in_order(&mut self.queues[i], Watched::new(event, job, prompt));
        self.pending += 1;
        if prompt {
            self.pending_prompt += 1;
            self.pace.activity();
        }
    }

    /// Polls the front of every queue, delivering what the GPU has passed, then lets the
    /// watchdog expire what is overdue. Returns whether a prompt job was delivered.
    fn poll(&mut self) -> bool {
        let running = matches!(self.phase, Phase::Running);
        // Without a watchdog, shutdown waits on each event as long as the GPU takes.
        let block = !running && self.watchdog.is_none();
        let mut progressed = false;
        for q in &mut self.queues {
            while let Some(w) = q.front() {
                if running && !w.prompt && w.queried.elapsed() < LAZY_POLL && q.iter().all(|x| !x.prompt) {
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
                    self.pending_prompt -= usize::from(w.prompt);
                    if let Some(again) = deliver(w, outcome) {
                        self.pending_prompt += usize::from(again.prompt);
                        insert_in_order(q, again);
                        self.pending += 1;
                    }
                }
                self.pending -= 1;
            }
            // One stream's events finish in order, so everything left is still running.
            if let Some(limit) = self.watchdog {
                expire_overdue(q, limit);
            }
        }
        progressed
    }

    /// Past shutdown's give-up time, abandons everything pending; returns whether it did (the
    /// thread then ends).
    fn give_up_if_due(&mut self) -> bool {
        let (Phase::Draining(GiveUp::At(give_up)), Some(limit)) = (self.phase, self.watchdog) else { return false };
        if Instant::now() < give_up {
            return false;
        }
        for w in self.queues.iter_mut().flat_map(std::mem::take) {
            let Watched { event, job, .. } = w;
            // The event may still be pending on its stream: leaked, not pooled again.
            std::mem::forget(event);
            crate::sync::guarded("abandoning a completion", move || job.abandon(limit));
        }
        true
    }
}

/// Resolves with the watchdog's error every job of `q` registered `limit` ago or longer
/// (once each); they stay queued until the GPU passes them.
fn expire_overdue(q: &mut VecDeque<Watched>, limit: Duration) {
    for w in q.iter_mut().filter(|w| !w.expired && w.since.elapsed() >= limit) {
        w.expired = true;
        let job = w.job.clone();
        crate::sync::guarded("expiring a completion", move || job.expire(limit));
    }
}
