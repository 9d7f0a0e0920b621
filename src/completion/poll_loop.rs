//! The completion thread's loop: it polls the oldest pending event of each stream, resolves
//! the jobs whose events the GPU has passed, and paces itself between a spin window, a backoff
//! and a blocking receive. The thread itself, its gate and its messages are in `thread`.

use super::thread::{LoopStats, Msg, Pending};
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
