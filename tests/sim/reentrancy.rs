//! Waiting from places that can never see a completion finish (inside a callback on the
//! completion thread, on the lane that must run the job), user code on the completion thread that
//! panics, delivery order on one stream, and deadlines too large for `Instant`. Every test is
//! bounded, so a hang fails instead of stalling.

use crate::common::*;
use cusched::{Completion, Device, DeviceConfig, Error, Handles, LaneOptions, SimConfig};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn with_watchdog(limit: Duration) -> Device {
    Device::sim_with(SimConfig::default(), DeviceConfig { watchdog: Some(limit), ..DeviceConfig::default() }).unwrap()
}

/// Two inline ops on one stream: the first's callback waits on the second.
fn wait_in_callback(d: &Device, bounded_wait: bool) -> cusched::Result<u32> {
    let mut h = Handles::new(d, d.default_stream()).unwrap();
    let outer = h.run(|_| Ok(()));
    let inner = h.run(|_| Ok(7u32));
    let (tx, rx) = mpsc::channel();
    outer.on_complete(move |_| {
        let got = if bounded_wait { inner.wait_timeout(Duration::from_secs(5)) } else { inner.wait() };
        tx.send(got).ok();
    });
    rx.recv_timeout(LIMIT).expect("the callback ran")
}

#[test]
fn wait_timeout_inside_on_complete_returns_the_value() {
    bounded(LIMIT, || {
        let d = sim();
        assert_eq!(wait_in_callback(&d, true).unwrap(), 7);
    });
}

#[test]
fn wait_inside_on_complete_with_a_watchdog_returns_the_value() {
    bounded(LIMIT, || {
        let d = with_watchdog(Duration::from_secs(30));
        assert_eq!(wait_in_callback(&d, false).unwrap(), 7);
        let d = with_watchdog(Duration::from_secs(30));
        assert_eq!(wait_in_callback(&d, true).unwrap(), 7);
    });
}

#[test]
fn a_lane_job_waiting_on_a_job_queued_behind_it_is_would_deadlock() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("self-wait").unwrap();
        let (tx, rx) = mpsc::channel::<Completion<u32>>();
        let (tx2, rx2) = mpsc::channel::<Completion<u32>>();
        let first = lane.submit(move |_| {
            let later = rx.recv().unwrap();
            let bounded_err = later.wait_timeout(LIMIT).unwrap_err();
            let later2 = rx2.recv().unwrap();
            let err = later2.wait().unwrap_err();
            Ok((bounded_err, err))
        });
        tx.send(lane.submit(|_| Ok(5))).unwrap();
        tx2.send(lane.submit(|_| Ok(6))).unwrap();
        let (bounded_err, err) = first.wait().unwrap();
        assert!(matches!(bounded_err, Error::WouldDeadlock { .. }), "{bounded_err}");
        assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
        assert!(err.to_string().contains("lane"), "the message says what to do: {err}");
        assert_eq!(lane.submit(|_| Ok(1)).wait().unwrap(), 1, "the lane keeps working");
    });
}

#[test]
fn a_lane_job_waiting_for_the_commit_of_a_job_queued_behind_it_is_would_deadlock() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("self-commit-wait").unwrap();
        let (tx, rx) = mpsc::channel::<Completion<u32>>();
        let first = lane.submit(move |_| {
            let later = rx.recv().unwrap();
            Ok(later.wait_committed().map(|()| later))
        });
        tx.send(lane.submit(|_| Ok(7))).unwrap();
        let err = first.wait().unwrap().unwrap_err();
        assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
        assert_eq!(lane.submit(|_| Ok(1)).wait().unwrap(), 1, "the lane keeps working");
    });
}

#[test]
fn submit_to_its_own_full_queue_is_would_deadlock() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane_with("tiny", LaneOptions { capacity: 1 }).unwrap();
        let me = lane.clone();
        let job = lane.submit(move |_| {
            let fits = me.submit(|_| Ok(1));
            let overflow = me.submit(|_| Ok(2));
            Ok((fits, overflow.wait()))
        });
        let (fits, overflow) = job.wait().unwrap();
        assert!(matches!(overflow, Err(Error::WouldDeadlock { .. })), "{overflow:?}");
        assert_eq!(fits.wait().unwrap(), 1);
    });
}

#[test]
fn device_shutdown_inside_a_lane_job_returns() {
    bounded(LIMIT, || {
        let d = sim();
        let lane_a = d.lane("stopper").unwrap();
        let lane_b = d.lane("waiter").unwrap();
        let (open, gate) = mpsc::channel::<()>();
        let stop = lane_a.submit(move |cx| {
            gate.recv().ok();
            let b = cx.device().upload(cx.stream(), &[2u32; 16])?;
            cx.keep(b);
            cx.device().shutdown().unwrap();
            Ok(3)
        });
        let behind = lane_a.submit(|_| Ok(4));
        let (send_behind, behind_rx) = mpsc::channel();
        let (waiting_tx, waiting) = mpsc::channel();
        let waiter = lane_b.submit(move |_| {
            let c: Completion<u32> = behind_rx.recv().unwrap();
            waiting_tx.send(()).unwrap();
            Ok(c.wait())
        });
        send_behind.send(behind).unwrap();
        // The waiter runs on lane B and waits on a job queued on lane A behind the stopper.
        waiting.recv().unwrap();
        open.send(()).unwrap();
        assert_eq!(stop.wait().unwrap(), 3);
        assert!(matches!(waiter.wait().unwrap(), Err(Error::Shutdown)));
        drop((lane_a, lane_b, d));
    });
}

#[test]
fn device_dropped_inside_a_lane_job_returns() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("owner").unwrap();
        let stop = lane.submit(move |cx| {
            let b = cx.device().upload(cx.stream(), &[2u32; 16])?;
            cx.keep(b);
            drop(d); // the last user handle: shuts the device down from its own lane
            Ok(3)
        });
        assert_eq!(stop.wait().unwrap(), 3);
        assert!(matches!(lane.submit(|_| Ok(4)).wait(), Err(Error::Shutdown)));
    });
}

struct PanicOnDrop;
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("a keep-alive's Drop panicked");
    }
}

/// Delivers `n` callbacks on `d` and returns how many arrived.
fn later_callbacks_arrive(d: &Device, n: usize) -> usize {
    let lane = d.lane("after").unwrap();
    let (tx, rx) = mpsc::channel();
    for i in 0..n {
        let tx = tx.clone();
        lane.submit(move |_| Ok(i)).on_complete(move |v| {
            tx.send(v.is_ok()).ok();
        });
    }
    (0..n).filter(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap_or(false)).count()
}

#[test]
fn a_panicking_keep_alive_drop_does_not_stop_later_deliveries() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("bomb").unwrap();
        let (tx, rx) = mpsc::channel();
        let c = lane.submit(|cx| {
            cx.keep(PanicOnDrop);
            Ok(1)
        });
        c.on_complete(move |v| {
            tx.send(v.is_ok()).ok();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(true), "its own callback still runs");
        assert_eq!(later_callbacks_arrive(&d, 5), 5);
        // Resolved on the waiter's thread, a panicking keep-alive does not reach the caller.
        let mut h = Handles::new(&d, d.default_stream()).unwrap();
        let c = h.run(|h| {
            h.keep(PanicOnDrop);
            Ok(2)
        });
        assert_eq!(c.wait().unwrap(), 2);
    });
}

struct PanicWaker;
impl std::task::Wake for PanicWaker {
    fn wake(self: Arc<Self>) {
        panic!("a waker panicked");
    }
}

#[test]
fn a_panicking_waker_does_not_stop_later_deliveries() {
    bounded(LIMIT, || {
        let d = sim();
        let mut h = Handles::new(&d, d.default_stream()).unwrap();
        let (go, gate) = mpsc::channel::<()>();
        let mut c = h.run(move |h| {
            let rec = h.recorder();
            rec.launch(h.device(), |s| {
                s.sim_kernel(move || {
                    gate.recv_timeout(LIMIT).ok();
                })
            })?;
            Ok(1)
        });
        let waker = std::task::Waker::from(Arc::new(PanicWaker));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::future::Future::poll(std::pin::Pin::new(&mut c), &mut cx).is_pending());
        // Registered behind the future's op on the same stream, before its waker panics.
        let (tx, rx) = mpsc::channel();
        for i in 0..5 {
            let tx = tx.clone();
            h.run(move |_| Ok(i)).on_complete(move |v| {
                tx.send(v.is_ok()).ok();
            });
        }
        go.send(()).unwrap();
        let arrived = (0..5).filter(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap_or(false)).count();
        assert_eq!(arrived, 5);
    });
}

struct PanicTrace;
impl cusched::KernelTrace for PanicTrace {
    fn after_completion(&self, _: &cusched::OpInfo, _: Option<cusched::GpuSpan>) {
        panic!("a trace hook panicked");
    }
}

#[test]
fn a_panicking_trace_hook_does_not_stop_later_deliveries() {
    bounded(LIMIT, || {
        let d = sim();
        d.set_trace(Arc::new(PanicTrace), cusched::TraceOptions::default()).unwrap();
        let lane = d.lane("traced").unwrap();
        let (tx, rx) = mpsc::channel();
        let c = lane.submit(|cx| {
            let b = cx.device().alloc_zeros::<u8>(cx.stream(), 4)?;
            Ok(b.download(cx.stream())?.len())
        });
        c.on_complete(move |v| {
            tx.send(v.is_ok()).ok();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(true));
        assert_eq!(later_callbacks_arrive(&d, 5), 5);
        d.clear_trace();
    });
}

#[test]
fn an_early_op_is_delivered_before_a_long_later_op_on_its_stream() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let mut h = Handles::new(&d, s).unwrap();
        let buf = d.alloc_zeros::<u32>(s, 4).unwrap();
        let early = h.run(|_| Ok(1));
        let (release, gate) = mpsc::channel::<()>();
        let b = buf.clone();
        let late = h.run(move |h| {
            let mut rec = h.recorder();
            rec.write(&b)?;
            rec.launch(h.device(), |sc| {
                sc.sim_kernel(move || {
                    gate.recv_timeout(LIMIT).ok();
                })
            })
        });
        // The later op registers first; the earlier one must not queue behind it.
        let (late_tx, late_rx) = mpsc::channel();
        late.on_complete(move |v| {
            late_tx.send(v.is_ok()).ok();
        });
        let (tx, rx) = mpsc::channel();
        early.on_complete(move |v| {
            tx.send(v).ok();
        });
        let got = rx.recv_timeout(Duration::from_secs(20));
        release.send(()).ok();
        assert_eq!(got.expect("the early op's callback did not wait for the later op").unwrap(), 1);
        assert_eq!(late_rx.recv_timeout(LIMIT), Ok(true));
    });
}

#[test]
fn huge_timeouts_and_spins_do_not_overflow() {
    bounded(LIMIT, || {
        let d = Device::sim_with(
            SimConfig::default(),
            DeviceConfig { spin: Duration::MAX, preflight_timeout: Duration::MAX, ..DeviceConfig::default() },
        )
        .unwrap();
        let lane = d.lane("huge").unwrap();
        let c = lane.submit(|cx| {
            let b = cx.device().upload(cx.stream(), &[3u32; 8])?;
            cx.keep(b.clone());
            b.download(cx.stream())
        });
        assert_eq!(c.wait_timeout(Duration::MAX).unwrap(), vec![3u32; 8]);
        assert_eq!(lane.submit(|_| Ok(2)).wait().unwrap(), 2);
        // A preflight that waits for another thread's uncommitted launch, with no bound.
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let mut holder = cusched::LaunchRecorder::new_strict(d.default_stream());
        holder.write(&buf).unwrap();
        let holder = holder.preflight(&d).unwrap();
        let (d2, b2) = (d.clone(), buf.clone());
        let s2 = d.new_stream().unwrap();
        let (started_tx, started) = mpsc::channel();
        let contender = std::thread::spawn(move || {
            let mut rec = cusched::LaunchRecorder::new_strict(s2);
            rec.write(&b2).unwrap();
            started_tx.send(()).unwrap();
            rec.preflight(&d2).and_then(|launch| launch.commit())
        });
        started.recv().unwrap();
        // Give the contender a chance to block (coverage only: the result does not depend on it).
        std::thread::sleep(Duration::from_millis(50));
        holder.commit().unwrap();
        contender.join().expect("the contender did not panic").unwrap();
        drop(lane);
        d.shutdown().unwrap();
    });
}

#[test]
fn wait_timeout_keeps_the_completion_usable_only_on_timeout() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("rule").unwrap();
        let (go, gate) = mpsc::channel::<()>();
        let c = lane.submit(move |_| {
            gate.recv().ok();
            Ok(9)
        });
        assert!(matches!(c.wait_timeout(Duration::from_millis(1)), Err(Error::Timeout { .. })));
        go.send(()).unwrap();
        assert_eq!(c.wait_timeout(LIMIT).unwrap(), 9);
        assert!(matches!(c.wait_timeout(LIMIT), Err(Error::AlreadyTaken)));
    });
}
