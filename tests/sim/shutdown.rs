//! Shutdown of the completion thread and lanes, a kernel that never ends, streams given back by
//! dropped lanes, and what new work does after shutdown. Every test is bounded, so a hang fails
//! instead of stalling.

use crate::common::*;
use cusched::{Device, DeviceConfig, Error, Handles, SimConfig};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_callback_set_after_shutdown_never_restarts_the_completion_thread() {
    bounded(LIMIT, || {
        let d = sim();
        let mut h = Handles::new(&d, d.default_stream()).unwrap();
        // Nothing needs the completion thread yet, so it was never started.
        let c = h.run(|_| Ok(1));
        d.shutdown().unwrap();
        let (tx, rx) = mpsc::channel();
        c.on_complete(move |v| {
            tx.send((v.ok(), std::thread::current().name().map(str::to_owned))).ok();
        });
        let (v, thread) = rx.recv_timeout(Duration::from_secs(20)).expect("the callback ran");
        assert_eq!(v, Some(1));
        assert_ne!(
            thread.as_deref(),
            Some("cusched-completion"),
            "a completion thread started after shutdown is never joined"
        );
    });
}

/// A keep-alive that checks the GPU finished the job before it drops.
struct AfterGpu {
    ran: Arc<AtomicBool>,
    early: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}
impl Drop for AfterGpu {
    fn drop(&mut self) {
        if !self.ran.load(Ordering::SeqCst) {
            self.early.fetch_add(1, Ordering::SeqCst);
        }
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn registrations_racing_shutdown_are_all_delivered_after_the_gpu() {
    bounded(Duration::from_secs(120), || {
        for round in 0..100 {
            let d = Device::sim(SimConfig {
                min_delay: Duration::ZERO,
                max_delay: Duration::from_micros(200),
                seed: round,
                ..Default::default()
            })
            .unwrap();
            let lanes: Vec<_> = (0..2).map(|i| d.lane(&format!("l{i}")).unwrap()).collect();
            let delivered = Arc::new(AtomicUsize::new(0));
            let early = Arc::new(AtomicUsize::new(0));
            let dropped = Arc::new(AtomicUsize::new(0));
            let n = 200;
            let (start_tx, start_rx) = mpsc::channel::<()>();
            let d2 = d.clone();
            let stopper = std::thread::spawn(move || {
                start_rx.recv().ok();
                d2.shutdown().unwrap();
            });
            for i in 0..n {
                if i == n / 2 {
                    start_tx.send(()).unwrap();
                }
                let (early, dropped) = (early.clone(), dropped.clone());
                let dl = delivered.clone();
                lanes[i % 2]
                    .submit(move |cx| {
                        // Made when the job runs: a job cancelled by the shutdown never has one.
                        let ran = Arc::new(AtomicBool::new(false));
                        let keep = AfterGpu { ran: ran.clone(), early, dropped };
                        let rec = cx.recorder();
                        rec.launch(cx.device(), |s| s.sim_kernel(move || ran.store(true, Ordering::SeqCst)))?;
                        cx.keep(keep);
                        Ok(())
                    })
                    .on_complete(move |_| {
                        dl.fetch_add(1, Ordering::SeqCst);
                    });
            }
            stopper.join().unwrap();
            drop(lanes);
            drop(d);
            let deadline = Instant::now() + Duration::from_secs(20);
            while delivered.load(Ordering::SeqCst) < n && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(delivered.load(Ordering::SeqCst), n, "round {round}: every callback runs");
            assert_eq!(early.load(Ordering::SeqCst), 0, "round {round}: no keep-alive freed before the GPU");
        }
    });
}

#[test]
fn dropping_the_device_with_a_kernel_that_never_ends_returns_after_the_watchdog() {
    let watchdog = Duration::from_millis(200);
    let d =
        Device::sim_with(SimConfig::default(), DeviceConfig { watchdog: Some(watchdog), ..DeviceConfig::default() })
            .unwrap();
    let lane = d.lane("stuck").unwrap();
    let (release, gate) = mpsc::channel::<()>();
    let marker = Arc::new(());
    let m = marker.clone();
    let stuck = lane.submit(move |cx| {
        let rec = cx.recorder();
        rec.launch(cx.device(), |s| {
            s.sim_kernel(move || {
                gate.recv_timeout(Duration::from_secs(120)).ok();
            })
        })?;
        cx.keep(m);
        Ok(())
    });
    stuck.wait_committed().unwrap();
    drop(lane);
    let start = Instant::now();
    let dropped = std::thread::spawn(move || drop(d));
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        done_tx.send(dropped.join().is_ok()).ok();
    });
    let returned = done_rx.recv_timeout(LIMIT);
    release.send(()).ok();
    assert_eq!(returned, Ok(true), "dropping the device returned while the kernel still ran");
    assert!(start.elapsed() < LIMIT);
    match stuck.wait_timeout(LIMIT) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the stuck job resolves with Timeout, got {other:?}"),
    }
    assert_eq!(Arc::strong_count(&marker), 2, "the keep-alive is leaked, never freed under running work");
}

#[test]
fn lanes_created_and_dropped_one_at_a_time_reuse_their_streams() {
    bounded(LIMIT, || {
        let d = sim();
        let shared = d.upload(d.default_stream(), &[0u64; 8]).unwrap();
        for i in 0..200u64 {
            let lane = d.lane(&format!("lane{i}")).unwrap_or_else(|e| panic!("lane {i}: {e}"));
            let b = shared.clone();
            lane.submit(move |cx| {
                let mut rec = cx.recorder();
                rec.read_write(&b)?;
                let data = b.sim_data()?;
                rec.launch(cx.device(), move |s| s.sim_kernel(move || data.lock().iter_mut().for_each(|x| *x += 1)))?;
                cx.keep(b);
                Ok(())
            });
            drop(lane); // runs the queued job, joins the thread; its work may still be running
        }
        assert_eq!(shared.download(d.default_stream()).unwrap(), vec![200u64; 8]);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}

struct Names(Arc<std::sync::Mutex<Vec<Option<String>>>>);
impl cusched::KernelTrace for Names {
    fn before_enqueue(&self, op: &cusched::OpInfo) {
        self.0.lock().unwrap().push(op.lane.as_deref().map(str::to_owned));
    }
}

#[test]
fn a_reused_stream_carries_its_new_lane_name_in_traces() {
    bounded(LIMIT, || {
        let d = sim();
        let a = d.lane("first").unwrap();
        let stream = a.stream();
        drop(a);
        let b = d.lane("second").unwrap();
        assert_eq!(b.stream(), stream, "the dropped lane's stream is reused");
        let lanes = Arc::new(std::sync::Mutex::new(Vec::new()));
        d.set_trace(Arc::new(Names(lanes.clone())), cusched::TraceOptions::default()).unwrap();
        b.submit(|cx| cx.device().alloc_zeros::<u8>(cx.stream(), 4).map(drop)).wait().unwrap();
        d.clear_trace();
        let spans = lanes.lock().unwrap().clone();
        assert!(!spans.is_empty());
        assert!(spans.iter().all(|s| s.as_deref() == Some("second")), "{spans:?}");
    });
}

#[test]
fn inline_work_after_shutdown_fails_like_lane_work() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("l").unwrap();
        let mut h = Handles::new(&d, d.default_stream()).unwrap();
        d.shutdown().unwrap();
        assert!(matches!(lane.submit(|_| Ok(1)).wait(), Err(Error::Shutdown)));
        assert!(matches!(h.run(|_| Ok(1)).wait(), Err(Error::Shutdown)));
        assert!(matches!(Handles::new(&d, d.default_stream()), Err(Error::Shutdown)));
    });
}
