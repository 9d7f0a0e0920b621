//! The completion loop's schedule, observed through its counters: it parks when nothing is
//! pending, polls a registration at once (even after idling), and backs off instead of spinning
//! while the GPU is busy.

use crate::{Device, Handles, LaunchRecorder, SimConfig};
use std::sync::mpsc;
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
