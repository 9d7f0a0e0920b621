//! The completion loop's schedule, observed through its counters: it parks when nothing is
//! pending, polls a registration at once (even after idling), and backs off instead of spinning
//! while the GPU is busy.

use super::{Completion, Slot};
use crate::{backend::sim::SimConfig, device::Device, libs::Handles, recorder::LaunchRecorder};
use std::future::Future;
use std::sync::{mpsc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn sim() -> Device {
    Device::sim(SimConfig { max_delay: Duration::ZERO, ..SimConfig::default() }).unwrap()
}

/// Polls `cond` until it holds; panics after [`LIMIT`] (a hang guard, not a timing assert).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Delivers one callback through the completion thread and returns once the thread has parked
/// with nothing pending.
fn warm_and_park(d: &Device, h: &mut Handles) {
    let (tx, rx) = mpsc::channel();
    h.run(|_| Ok(())).on_complete(move |r| tx.send(r.is_ok()).unwrap());
    assert!(rx.recv_timeout(LIMIT).unwrap());
    eventually("the completion thread parks", || d.shared.completions().stats().parked());
}

#[test]
fn the_completion_thread_parks_when_nothing_is_pending() {
    let d = sim();
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    warm_and_park(&d, &mut h);
    let stats = d.shared.completions().stats();
    let before = stats.iterations();
    // Nothing is sent to a parked thread, so no pass of its loop can run meanwhile.
    std::thread::sleep(Duration::from_millis(20));
    assert!(stats.parked());
    assert_eq!(stats.iterations(), before, "the loop ran while nothing was pending");
}

#[test]
fn a_registration_after_idle_is_polled_without_a_backoff_sleep() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    warm_and_park(&d, &mut h);
    // Long past the spin window of the last delivery.
    std::thread::sleep(Duration::from_millis(10));
    let done = h.run(|_| Ok(5u32));
    d.synchronize(s).unwrap();
    let stats = d.shared.completions().stats();
    let sleeps = stats.sleeps();
    let (tx, rx) = mpsc::channel();
    done.on_complete(move |r| tx.send(r).unwrap());
    assert_eq!(rx.recv_timeout(LIMIT).unwrap().unwrap(), 5);
    assert_eq!(stats.sleeps(), sleeps, "the registration waited out a backoff sleep before its first poll");
}

#[test]
fn the_completion_thread_backs_off_while_the_gpu_is_busy() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    let (release, gate) = mpsc::channel::<()>();
    let busy = h.run(move |cx| {
        LaunchRecorder::new_strict(cx.stream()).launch(cx.device(), move |scope| {
            scope.sim_kernel(move || {
                let _ = gate.recv_timeout(LIMIT);
            })
        })
    });
    let (tx, rx) = mpsc::channel();
    busy.on_complete(move |r| tx.send(r.is_ok()).unwrap());
    let stats = d.shared.completions().stats();
    // Past the spin window it sleeps between polls; once the backoff has reached its longest
    // sleep (a millisecond), 20 ms leave room for a few dozen passes, not the thousands of a
    // spinning loop.
    eventually("the completion thread backs off", || stats.sleeps() >= 12);
    let before = stats.iterations();
    std::thread::sleep(Duration::from_millis(20));
    let passes = stats.iterations() - before;
    assert!(passes < 2000, "{passes} passes in 20 ms while backing off");
    release.send(()).unwrap();
    assert!(rx.recv_timeout(LIMIT).unwrap());
}

/// A job that is not prompt (as a trace backlog's watch): it notes when it was resolved.
struct Lazy(mpsc::Sender<Instant>);

impl crate::completion_thread::Pending for Lazy {
    fn resolve(&self, _outcome: crate::error::Result<()>) {
        let _ = self.0.send(Instant::now());
    }
    fn expire(&self, _waited: Duration) {}
    fn abandon(&self, _waited: Duration) {}
    fn prompt(&self) -> bool {
        false
    }
}

/// Registers a [`Lazy`] job on `ev` with `d`'s completion thread; the receiver gets the time it
/// was resolved.
fn watch_lazily(d: &Device, ev: crate::track::EventRef) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    let job: std::sync::Arc<dyn crate::completion_thread::Pending> = std::sync::Arc::new(Lazy(tx));
    assert!(d.shared.completions().register(ev.pos().stream, ev, job).is_ok());
    rx
}

#[test]
fn a_job_that_is_not_prompt_is_queried_once_per_lazy_poll_only() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    warm_and_park(&d, &mut h);
    let ev = d.shared.record(s).unwrap();
    ev.synchronize().unwrap();
    let registered = Instant::now();
    let rx = watch_lazily(&d, ev);
    // The event is already done, yet the first query waits out the lazy interval: a lower
    // bound, which load cannot break.
    let resolved = rx.recv_timeout(LIMIT).unwrap();
    assert!(
        resolved.duration_since(registered) >= crate::completion_thread::LAZY_POLL,
        "a lazy job was resolved {:?} after its registration",
        resolved.duration_since(registered)
    );
}

#[test]
fn a_lazy_job_on_busy_work_is_queried_once_per_lazy_poll_not_continuously() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    warm_and_park(&d, &mut h);
    let (release, gate) = mpsc::channel::<()>();
    LaunchRecorder::new_strict(s)
        .launch(&d, move |scope| {
            scope.sim_kernel(move || {
                let _ = gate.recv_timeout(LIMIT);
            })
        })
        .unwrap();
    let rx = watch_lazily(&d, d.shared.record(s).unwrap());
    let stats = d.shared.completions().stats();
    // Past its first lazy interval, a job whose event is still pending waits another interval
    // between queries: 30 ms leave room for a few dozen passes, not the many thousands of a
    // loop that queries without sleeping.
    std::thread::sleep(crate::completion_thread::LAZY_POLL * 3);
    let before = stats.iterations();
    std::thread::sleep(Duration::from_millis(30));
    let passes = stats.iterations() - before;
    assert!(passes < 1000, "{passes} passes in 30 ms with one lazy job pending");
    release.send(()).unwrap();
    rx.recv_timeout(LIMIT).unwrap();
}

#[test]
fn a_prompt_job_behind_a_lazy_one_still_gets_its_query() {
    let d = sim();
    let s = d.default_stream();
    let mut h = Handles::new(&d, s).unwrap();
    warm_and_park(&d, &mut h);
    let lazy_rx = watch_lazily(&d, d.shared.record(s).unwrap());
    // A prompt completion behind it on the same stream: the lazy front is queried for it, and
    // both resolve in that pass, the lazy one first (a stream's events finish in order).
    let (tx, rx) = mpsc::channel();
    h.run(|_| Ok(())).on_complete(move |_| tx.send(Instant::now()).unwrap());
    let prompt_at = rx.recv_timeout(LIMIT).unwrap();
    let lazy_at = lazy_rx.recv_timeout(LIMIT).unwrap();
    assert!(lazy_at <= prompt_at, "the prompt job was resolved before the lazy one ahead of it");
}

/// An op enqueued on `s` whose kernel waits for `gate` (if any), with a completion made the way
/// an op on the caller's thread makes it: no keep-alives, no trace, so held in place.
fn local_op(d: &Device, s: crate::track::StreamId, gate: Option<mpsc::Receiver<()>>, v: u32) -> Completion<u32> {
    LaunchRecorder::new_strict(s)
        .launch(d, move |scope| {
            scope.sim_kernel(move || {
                if let Some(g) = gate {
                    let _ = g.recv_timeout(LIMIT);
                }
            })
        })
        .unwrap();
    let ev = d.shared.record_since(s, d.shared.epoch()).unwrap();
    Completion::enqueued(&d.shared, Ok(v), Some(ev), Vec::new(), None)
}

/// Whether `c` still holds its state in place (no shared state was made).
fn in_place<T: Send + 'static>(c: &Completion<T>) -> bool {
    matches!(&c.slot, Slot::Local(l) if !l.is_promoted())
}

#[test]
fn waiting_and_polling_keep_a_completion_in_place() {
    let d = sim();
    let s = d.default_stream();
    let c = local_op(&d, s, None, 7);
    assert!(in_place(&c));
    d.synchronize(s).unwrap();
    assert!(c.is_ready());
    assert_eq!(format!("{c:?}"), "Completion(ready)");
    assert!(c.wait_committed().is_ok());
    assert!(in_place(&c));
    assert_eq!(c.wait().unwrap(), 7);

    let c = local_op(&d, s, None, 8);
    assert_eq!(c.wait_timeout(LIMIT).unwrap(), 8);
    let c = local_op(&d, s, None, 9);
    let got = loop {
        if let Some(v) = c.try_take() {
            break v;
        }
        std::thread::yield_now();
    };
    assert_eq!(got.unwrap(), 9);
    assert!(matches!(c.try_take(), Some(Err(crate::error::Error::AlreadyTaken))));
    assert!(in_place(&c));
}

#[test]
fn a_callback_waker_or_bounded_wait_moves_a_pending_completion_to_shared_state() {
    let d = sim();
    let s = d.default_stream();
    let (release, gate) = mpsc::channel();
    let blocked = local_op(&d, s, Some(gate), 1);
    let (tx, rx) = mpsc::channel();
    let waiting = local_op(&d, s, None, 2);
    let timed = local_op(&d, s, None, 3);
    let mut fut = local_op(&d, s, None, 4);
    let polled = std::pin::Pin::new(&mut fut).poll(&mut Context::from_waker(&waker(tx.clone())));
    assert!(polled.is_pending());
    assert!(!in_place(&fut));
    assert!(matches!(timed.wait_timeout(Duration::from_millis(1)), Err(crate::error::Error::Timeout { .. })));
    assert!(!in_place(&timed));
    assert!(in_place(&waiting));
    let cb = tx.clone();
    blocked.on_complete(move |r| cb.send(r.map(|v| v as u64 * 100)).unwrap());
    release.send(()).unwrap();
    // The callback sends 100 and the waker 0 once woken, in either order: the completion
    // thread may wake the later future before it runs the earlier op's callback.
    let mut got = [rx.recv_timeout(LIMIT).unwrap().unwrap(), rx.recv_timeout(LIMIT).unwrap().unwrap()];
    got.sort_unstable();
    assert_eq!(got, [0, 100]);
    let Poll::Ready(v) = std::pin::Pin::new(&mut fut).poll(&mut Context::from_waker(&waker(tx))) else {
        panic!("woken but not ready")
    };
    assert_eq!(v.unwrap(), 4);
    assert_eq!(timed.wait_timeout(LIMIT).unwrap(), 3);
    assert_eq!(waiting.wait().unwrap(), 2);
}

#[test]
fn in_place_completions_resolve_once_under_load() {
    let d = sim();
    let streams: Vec<_> = (0..4).map(|_| d.new_stream().unwrap()).collect();
    let (tx, rx) = mpsc::channel::<(u32, bool)>();
    let threads: Vec<_> = (0..6u32)
        .map(|t| {
            let (d, streams, tx) = (d.clone(), streams.clone(), tx.clone());
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    let v = t * 1000 + i;
                    let c = local_op(&d, streams[(v % 4) as usize], None, v);
                    let got = match (v / 7) % 4 {
                        0 => {
                            let tx = tx.clone();
                            c.on_complete(move |r| tx.send((r.unwrap(), true)).unwrap());
                            continue;
                        }
                        1 => c.wait().unwrap(),
                        2 => c.wait_timeout(LIMIT).unwrap(),
                        _ => {
                            let mut c = c;
                            let (wtx, wrx) = mpsc::channel();
                            let w = waker(wtx);
                            loop {
                                match std::pin::Pin::new(&mut c).poll(&mut Context::from_waker(&w)) {
                                    Poll::Ready(v) => break v.unwrap(),
                                    Poll::Pending => drop(wrx.recv_timeout(LIMIT).unwrap()),
                                }
                            }
                        }
                    };
                    tx.send((got, false)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    for t in threads {
        t.join().unwrap();
    }
    let mut seen: Vec<u32> = rx.iter().take(6 * 200).map(|(v, _)| v).collect();
    seen.sort_unstable();
    let want: Vec<u32> = (0..6u32).flat_map(|t| (0..200).map(move |i| t * 1000 + i)).collect();
    assert_eq!(seen, want, "each value delivered exactly once");
}

struct SendWake(Mutex<mpsc::Sender<crate::error::Result<u64>>>);

impl std::task::Wake for SendWake {
    fn wake(self: std::sync::Arc<Self>) {
        let _ = self.0.lock().unwrap().send(Ok(0));
    }
}

/// A waker that sends `Ok(0)` on `tx` each time it is woken.
fn waker(tx: mpsc::Sender<crate::error::Result<u64>>) -> std::task::Waker {
    std::task::Waker::from(std::sync::Arc::new(SendWake(Mutex::new(tx))))
}

/// A judge that fails the jobs of odd tokens, counting its rulings.
struct OddFails(std::sync::atomic::AtomicUsize);

impl super::Judge for OddFails {
    fn judge(&self, token: u128) -> crate::error::Result<()> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if token % 2 == 1 {
            return Err(crate::error::Error::invalid("token", "odd"));
        }
        Ok(())
    }
}

/// [`local_op`] whose value the judge rules on once the GPU has passed its event.
fn judged_op(
    d: &Device,
    judge: &std::sync::Arc<OddFails>,
    gate: Option<mpsc::Receiver<()>>,
    token: u128,
) -> Completion<u32> {
    let s = d.default_stream();
    LaunchRecorder::new_strict(s)
        .launch(d, move |scope| {
            scope.sim_kernel(move || {
                if let Some(g) = gate {
                    let _ = g.recv_timeout(LIMIT);
                }
            })
        })
        .unwrap();
    let ev = d.shared.record_since(s, d.shared.epoch()).unwrap();
    Completion::judged(&d.shared, Ok(token as u32), ev, super::Verdict::new(judge.clone(), token), None)
}

#[test]
fn a_judged_completion_takes_its_verdict_once_the_gpu_is_past_its_event_in_place_or_shared() {
    let d = sim();
    let judge = std::sync::Arc::new(OddFails(std::sync::atomic::AtomicUsize::new(0)));
    let (release, gate) = mpsc::channel();
    let held = judged_op(&d, &judge, Some(gate), 4);
    let failing = judged_op(&d, &judge, None, 5);
    let (tx, rx) = mpsc::channel();
    let promoted = judged_op(&d, &judge, None, 7);
    assert!(in_place(&held) && in_place(&failing));
    // Not ruled on while the GPU is short of the event.
    assert!(!held.is_ready());
    assert_eq!(judge.0.load(std::sync::atomic::Ordering::Relaxed), 0);
    promoted.on_complete(move |r| tx.send(r.is_err()).unwrap());
    release.send(()).unwrap();
    assert_eq!(held.wait().unwrap(), 4);
    assert!(matches!(failing.wait(), Err(crate::error::Error::InvalidArgument { arg: "token", .. })));
    assert!(rx.recv_timeout(LIMIT).unwrap(), "the callback got the judge's failure");
    assert_eq!(judge.0.load(std::sync::atomic::Ordering::Relaxed), 3, "one ruling per job");
}
