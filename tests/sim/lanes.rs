//! Lanes and completions on the simulator: shared buffers across lanes and threads checked
//! against a sequential reference, every delivery path, errors, panics, queue limits and
//! shutdown with work in flight. Every test is bounded so that a hang fails it.

use crate::common::*;
use cusched::{
    wait_all, Device, DeviceConfig, Error, GpuRef, Lane, LaneOptions, LaunchRecorder, SimConfig, StreamId,
    SubmitOrderCheck,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

/// `acc[i] += v` as a simulated kernel that reads, waits, then writes: a read-modify-write that
/// loses updates if two such kernels on the same buffer are not ordered.
fn add(cx: &mut cusched::Handles, acc: &GpuRef<u64>, v: u64) -> cusched::Result<()> {
    let mut rec = cx.recorder();
    rec.read_write(acc)?;
    let data = acc.sim_data()?;
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            let old = data.lock().clone();
            std::thread::yield_now();
            let mut g = data.lock();
            for (x, o) in g.iter_mut().zip(old) {
                *x = o + v;
            }
        })
    })
}

fn run_shared_accumulators(d: &Device) -> (Vec<u64>, Vec<u64>) {
    const THREADS: u64 = 8;
    const JOBS: u64 = 300;
    const ACCS: usize = 4;
    let lanes: Arc<Vec<Lane>> = Arc::new((0..4).map(|i| d.lane(&format!("lane-{i}")).unwrap()).collect());
    let accs: Arc<Vec<GpuRef<u64>>> =
        Arc::new((0..ACCS).map(|_| d.alloc_zeros::<u64>(d.default_stream(), 8).unwrap()).collect());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lanes, accs) = (lanes.clone(), accs.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::seeded(t + 11);
                let mut expected = vec![0u64; ACCS];
                let mut done = Vec::new();
                for j in 0..JOBS {
                    let lane = &lanes[rng.below(lanes.len() as u64) as usize];
                    let a = rng.below(ACCS as u64) as usize;
                    let v = t * 1000 + j;
                    expected[a] += v;
                    let acc = accs[a].clone();
                    done.push(lane.submit(move |cx| add(cx, &acc, v)));
                }
                for r in wait_all(done) {
                    r.unwrap();
                }
                expected
            })
        })
        .collect();
    let mut expected = vec![0u64; ACCS];
    for t in threads {
        for (e, x) in expected.iter_mut().zip(t.join().unwrap()) {
            *e += x;
        }
    }
    let got = accs.iter().map(|a| a.download(d.default_stream()).unwrap()[0]).collect();
    (got, expected)
}

#[test]
fn many_threads_many_lanes_shared_buffers_match_the_sequential_sum() {
    bounded(LIMIT, || {
        // Additions commute: this program means commit order, which the check of submit order
        // would report (undeclared jobs of eight threads updating the same buffers).
        let config = DeviceConfig { submit_order: SubmitOrderCheck::Off, ..DeviceConfig::default() };
        let sim_cfg = SimConfig { max_delay: Duration::from_micros(30), seed: 7, ..SimConfig::default() };
        let d = Device::sim_with(sim_cfg, config).unwrap();
        let (got, expected) = run_shared_accumulators(&d);
        assert_eq!(got, expected);
        assert!(d.sim_hazards().unwrap().is_empty());
    });
}

#[test]
fn without_fences_shared_accumulators_lose_updates_or_report_hazards() {
    bounded(LIMIT, || {
        let d = sim_with(false);
        let (got, expected) = run_shared_accumulators(&d);
        assert!(got != expected || !d.sim_hazards().unwrap().is_empty());
        assert!(!d.sim_hazards().unwrap().is_empty());
    });
}

#[test]
fn pipeline_across_lanes_in_commit_order() {
    bounded(LIMIT, || {
        let d = sim();
        let (up, mid, down) = (d.lane("up").unwrap(), d.lane("mid").unwrap(), d.lane("down").unwrap());
        let mut outs = Vec::new();
        for chunk in 0..64u32 {
            let x = d.alloc::<u32>(d.default_stream(), 256).unwrap();
            let y = d.alloc::<u32>(d.default_stream(), 256).unwrap();
            let data: Vec<u32> = (0..256).map(|i| i * chunk).collect();
            let x1 = x.clone();
            up.submit(move |cx| x1.copy_from_slice(cx.stream(), &data)).wait_committed().unwrap();
            let (x2, y2) = (x.clone(), y.clone());
            mid.submit(move |cx| {
                let mut rec = cx.recorder();
                rec.read(&x2)?.write(&y2)?;
                let (xs, ys) = (x2.sim_data()?, y2.sim_data()?);
                rec.launch(cx.device(), move |s| {
                    s.sim_kernel(move || {
                        let xs = xs.read().to_vec();
                        for (o, i) in ys.lock().iter_mut().zip(xs) {
                            *o = i + 1;
                        }
                    })
                })
            })
            .wait_committed()
            .unwrap();
            outs.push((chunk, down.submit(move |cx| y.download(cx.stream()))));
        }
        for (chunk, c) in outs {
            let v = c.wait().unwrap();
            assert!(v.iter().enumerate().all(|(i, &e)| e == i as u32 * chunk + 1), "chunk {chunk}");
        }
        assert!(d.sim_hazards().unwrap().is_empty());
    });
}

#[test]
fn callbacks_and_futures_deliver_values() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("cb").unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..100u32 {
            let tx = tx.clone();
            lane.submit(move |cx| {
                let b = cx.device().upload(cx.stream(), &[i])?;
                cx.keep(b);
                Ok(i)
            })
            .on_complete(move |r| {
                let name = std::thread::current().name().map(str::to_string);
                tx.send((r.unwrap(), name)).unwrap();
            });
        }
        let mut got: Vec<_> = (0..100).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
        assert!(
            got.iter().all(|g| g.1.as_deref() == Some("cusched-completion")),
            "callbacks run on the completion thread"
        );

        // A future under a minimal hand-written executor (no async runtime anywhere).
        let fut = lane.submit(|_| Ok(41 + 1));
        assert_eq!(block_on(fut).unwrap(), 42);
        // A callback set after the value is ready still runs.
        let ready = lane.submit(|_| Ok(7));
        while !ready.is_ready() {
            std::thread::yield_now();
        }
        ready.on_complete(move |r| tx.send((r.unwrap(), None)).unwrap());
        assert_eq!(rx.recv().unwrap().0, 7);
    });
}

#[test]
fn wait_timeout_try_take_and_is_ready() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("slow").unwrap();
        // The job's kernel blocks until released: the completion cannot be ready before that,
        // however slowly this thread runs.
        let (release, gate) = mpsc::channel::<()>();
        let c = lane.submit(move |cx| {
            let b = cx.device().alloc_zeros::<u8>(cx.stream(), 1)?;
            let mut rec = cx.recorder();
            rec.write(&b)?;
            rec.launch(cx.device(), move |s| {
                s.sim_kernel(move || {
                    gate.recv().ok();
                })
            })?;
            cx.keep(b);
            Ok(5)
        });
        assert!(matches!(c.wait_timeout(Duration::from_millis(10)), Err(Error::Timeout { .. })));
        assert!(!c.is_ready());
        assert!(c.try_take().is_none());
        release.send(()).unwrap();
        assert_eq!(c.wait_timeout(LIMIT).unwrap(), 5);
        assert!(matches!(c.try_take(), Some(Err(Error::AlreadyTaken))));
    });
}

#[test]
fn errors_and_panics_resolve_their_completion_and_the_lane_keeps_working() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("faulty").unwrap();
        let e = lane.submit(|_| -> cusched::Result<()> {
            Err(Error::InvalidArgument { arg: "test", reason: "deliberate".into() })
        });
        assert!(matches!(e.wait(), Err(Error::InvalidArgument { .. })));
        let p = lane.submit(|_| -> cusched::Result<()> { panic!("boom") });
        match p.wait() {
            Err(Error::JobPanicked { message }) => assert!(message.contains("boom")),
            other => panic!("{other:?}"),
        }
        assert_eq!(lane.submit(|_| Ok(1)).wait().unwrap(), 1);
    });
}

#[test]
fn keep_alives_are_held_until_the_gpu_finishes() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("keep").unwrap();
        let (dropped_tx, dropped) = mpsc::channel::<()>();
        struct Flag(mpsc::Sender<()>);
        impl Drop for Flag {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let flag = Flag(dropped_tx);
        // The job's kernel blocks until released, so its GPU work is unfinished until then.
        let (release, gate) = mpsc::channel::<()>();
        let c = lane.submit(move |cx| {
            let b = cx.device().alloc_zeros::<u8>(cx.stream(), 1)?;
            let mut rec = cx.recorder();
            rec.write(&b)?;
            rec.launch(cx.device(), move |s| {
                s.sim_kernel(move || {
                    gate.recv().ok();
                })
            })?;
            cx.keep(b);
            cx.keep(flag);
            Ok(())
        });
        c.wait_committed().unwrap();
        drop(c); // dropping the completion must not release the keep-alives early
        assert_eq!(dropped.try_recv(), Err(mpsc::TryRecvError::Empty), "released while the GPU work is unfinished");
        release.send(()).unwrap();
        dropped.recv_timeout(LIMIT).expect("released once the GPU work finished");
    });
}

/// Enqueues on `stream` a simulated kernel that blocks until `gate` opens, then sets `ran`.
fn gated_kernel(d: &Device, stream: StreamId, gate: mpsc::Receiver<()>, ran: Arc<AtomicBool>) -> cusched::Result<()> {
    let b = d.alloc_zeros::<u8>(stream, 1)?;
    let mut rec = LaunchRecorder::new_strict(stream);
    rec.write(&b)?;
    rec.launch(d, move |s| {
        s.sim_kernel(move || {
            gate.recv().ok();
            ran.store(true, Ordering::SeqCst);
        })
    })
}

/// A keep-alive that reports, when dropped, whether the job's kernel had run by then.
struct Witness(Arc<AtomicBool>, mpsc::Sender<bool>);

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.1.send(self.0.load(Ordering::SeqCst));
    }
}

/// The test's side of a job whose kernel waits on a gate: it opens the gate and watches the
/// job's keep-alives.
struct GateProbe {
    ran: Arc<AtomicBool>,
    kept: Arc<()>,
    release: mpsc::Sender<()>,
    dropped: mpsc::Receiver<bool>,
}

/// The job's side: the gate its kernel waits on, and the keep-alives it hands to its context.
struct Gated {
    gate: mpsc::Receiver<()>,
    ran: Arc<AtomicBool>,
    keep: (Arc<()>, Witness),
}

impl Gated {
    /// Launches the gated kernel on `stream` of `d`; returns the keep-alives to keep.
    fn launch(self, d: &Device, stream: StreamId) -> cusched::Result<(Arc<()>, Witness)> {
        gated_kernel(d, stream, self.gate, self.ran)?;
        Ok(self.keep)
    }
}

fn gate_probe() -> (GateProbe, Gated) {
    let (ran, kept) = (Arc::new(AtomicBool::new(false)), Arc::new(()));
    let (release, gate) = mpsc::channel::<()>();
    let (dropped_tx, dropped) = mpsc::channel();
    let keep = (kept.clone(), Witness(ran.clone(), dropped_tx));
    (GateProbe { ran: ran.clone(), kept, release, dropped }, Gated { gate, ran, keep })
}

impl GateProbe {
    /// Checks a completion whose job enqueued the gated kernel on another stream than its own:
    /// neither it nor its keep-alives may be done while the kernel is blocked, and `wait`
    /// returns only after the kernel ran.
    fn check(self, c: cusched::Completion<()>) {
        let GateProbe { ran, kept, release, dropped } = self;
        c.wait_committed().unwrap();
        assert!(matches!(c.wait_timeout(Duration::from_millis(20)), Err(Error::Timeout { .. })));
        assert_eq!(Arc::strong_count(&kept), 2, "a keep-alive was dropped while the job's kernel was blocked");
        assert_eq!(
            dropped.try_recv(),
            Err(mpsc::TryRecvError::Empty),
            "a keep-alive was dropped while the job's kernel was blocked"
        );
        // Opened while this thread is already waiting.
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            release.send(()).unwrap();
        });
        c.wait().unwrap();
        assert!(ran.load(Ordering::SeqCst), "wait returned before the job's kernel on another stream ran");
        assert!(dropped.recv_timeout(LIMIT).unwrap(), "a keep-alive was dropped before the job's kernel ran");
        assert_eq!(Arc::strong_count(&kept), 1);
        opener.join().unwrap();
    }
}

#[test]
fn a_job_that_enqueues_on_another_stream_completes_after_that_work() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("two-streams").unwrap();
        let s2 = d.new_stream().unwrap();
        let (probe, gated) = gate_probe();
        let c = lane.submit(move |cx| {
            let keep = gated.launch(cx.device(), s2)?;
            // Also some work on the job's own stream, which finishes at once.
            cx.device().alloc_zeros::<u8>(cx.stream(), 1)?;
            cx.keep(keep);
            Ok(())
        });
        probe.check(c);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}

#[test]
fn an_inline_run_that_enqueues_on_another_stream_completes_after_that_work() {
    bounded(LIMIT, || {
        let d = sim();
        let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
        let mut h = cusched::Handles::new(&d, s1).unwrap();
        let (probe, gated) = gate_probe();
        // Only on the other stream: the run commits nothing on its own.
        let c = h.run(move |h| {
            let keep = gated.launch(h.device(), s2)?;
            h.keep(keep);
            Ok(())
        });
        probe.check(c);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}

#[test]
fn a_job_with_an_inline_run_on_a_third_stream_completes_after_its_work() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("nested").unwrap();
        let s3 = d.new_stream().unwrap();
        let (probe, gated) = gate_probe();
        let c = lane.submit(move |cx| {
            // An inline run of its own stream inside the job: its work is the job's work too.
            // The keep-alives go to the outer job, whose end must cover the inner run's kernel.
            let mut inner = cusched::Handles::new(cx.device(), s3)?;
            let (keep_tx, keep_rx) = mpsc::channel();
            let _inner_done =
                inner.run(move |h| keep_tx.send(gated.launch(h.device(), s3)?).map_err(|_| Error::Shutdown));
            cx.keep(keep_rx.recv().map_err(|_| Error::Shutdown)?);
            Ok(())
        });
        probe.check(c);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}

#[test]
fn a_job_that_enqueues_on_another_device_completes_after_that_work() {
    bounded(LIMIT, || {
        let mut g = Device::sim_group(SimConfig::default(), 2).unwrap();
        let (d1, d2) = (g.remove(0), g.remove(0));
        let lane = d1.lane("cross-device").unwrap();
        let s2 = d2.default_stream();
        let (probe, gated) = gate_probe();
        let c = lane.submit(move |cx| {
            let keep = gated.launch(&d2, s2)?;
            cx.keep(keep);
            Ok(())
        });
        probe.check(c);
    });
}

#[test]
fn queue_full_and_blocking_submit() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane_with("tiny", LaneOptions { capacity: 1 }).unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let blocker = lane.submit(move |_| {
            started_tx.send(()).unwrap();
            rx.recv().ok();
            Ok(())
        });
        // Once the worker is inside `blocker`, the queue is empty: exactly one more fills it.
        started.recv().unwrap();
        let mut queued = Vec::new();
        let full = loop {
            match lane.try_submit(|_| Ok(())) {
                Ok(c) => queued.push(c),
                Err(e) => break e,
            }
            assert!(queued.len() <= 1, "capacity 1 must fill");
        };
        assert!(matches!(full, Error::QueueFull));
        assert_eq!(queued.len(), 1, "capacity 1 holds one job");
        tx.send(()).unwrap();
        blocker.wait().unwrap();
        for c in queued {
            c.wait().unwrap();
        }
        assert!(lane.try_submit(|_| Ok(())).unwrap().wait().is_ok());
    });
}

#[test]
fn dropping_the_device_with_work_in_flight_resolves_everything() {
    bounded(LIMIT, || {
        let d = Device::sim_with(
            SimConfig {
                min_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(3),
                ..Default::default()
            },
            DeviceConfig::default(),
        )
        .unwrap();
        let lanes: Vec<_> = (0..3).map(|i| d.lane(&format!("l{i}")).unwrap()).collect();
        let (tx, rx) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let gate = lanes[0].submit(move |_| {
            started_tx.send(()).unwrap();
            rx.recv().ok();
            Ok(0)
        });
        // The gate is running before shutdown, so it must finish with its value.
        started.recv().unwrap();
        let mut all = Vec::new();
        for i in 0..300 {
            let lane = &lanes[i % 3];
            all.push(lane.submit(move |cx| {
                let b = cx.device().upload(cx.stream(), &[i as u32; 64])?;
                cx.keep(b);
                Ok(i)
            }));
        }
        let lane0 = lanes[0].clone();
        drop(lanes);
        // Opens the gate only once shutdown has begun (new submissions are refused), so the
        // jobs queued behind it on lane 0 are still queued when it begins.
        let probe = lane0.clone();
        let releaser = std::thread::spawn(move || {
            while !matches!(probe.try_submit(|_| Ok(())), Err(Error::Shutdown)) {
                std::thread::sleep(Duration::from_millis(1));
            }
            tx.send(()).ok();
        });
        drop(d); // shuts down: running jobs finish, queued ones resolve with Shutdown
        releaser.join().unwrap();
        assert!(matches!(gate.wait(), Ok(0)));
        let (mut ok, mut shut) = (0, 0);
        for c in all {
            match c.wait() {
                Ok(_) => ok += 1,
                Err(Error::Shutdown) => shut += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(ok + shut, 300);
        assert!(shut >= 100, "the 100 jobs queued behind the gate never started, yet only {shut} resolved Shutdown");
        // Submitting after shutdown resolves at once.
        assert!(matches!(lane0.submit(|_| Ok(())).wait(), Err(Error::Shutdown)));
        assert!(matches!(lane0.try_submit(|_| Ok(())), Err(Error::Shutdown)));
    });
}

#[test]
fn last_lane_clone_drains_its_queue() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("drain").unwrap();
        let counter = Arc::new(AtomicUsize::new(0));
        let cs: Vec<_> = (0..50)
            .map(|_| {
                let c = counter.clone();
                lane.submit(move |_| {
                    c.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
            })
            .collect();
        drop(lane);
        assert_eq!(counter.load(Ordering::SeqCst), 50, "drop ran every queued job before joining");
        assert!(wait_all(cs).iter().all(Result::is_ok));
    });
}

#[test]
fn inline_handles_return_completions() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.new_stream().unwrap();
        let mut h = cusched::Handles::new(&d, s).unwrap();
        let x = d.upload(d.default_stream(), &[1u32, 2, 3]).unwrap();
        let c = h.run(|h| {
            let y = h.device().alloc_zeros::<u32>(h.stream(), 3)?;
            y.copy_from(h.stream(), &x)?;
            h.keep(y.clone());
            Ok(y)
        });
        let y = c.wait().unwrap();
        assert_eq!(y.download(s).unwrap(), vec![1, 2, 3]);
        let other = sim();
        assert!(cusched::Handles::new(&other, s).is_err(), "stream of another device");
        assert!(d.sim_hazards().unwrap().is_empty());
    });
}
