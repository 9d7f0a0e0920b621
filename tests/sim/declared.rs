//! Declared lane jobs on the simulator: submit order is program order across lanes without
//! `wait_committed`, checked against a sequential replay with the hazard checker on; random
//! schedules that must never deadlock; strict undeclared uses; reservations released when a
//! job fails, panics, declares more than it touches, or never runs. Every test is bounded so
//! that a hang fails it.

use crate::common::*;
use cusched::{
    wait_all, Access, Device, DeviceConfig, Error, GpuRef, Handles, HazardKind, Lane, LaneOptions, SimConfig,
    SubmitOrderCheck,
};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

fn lanes(d: &Device, n: usize) -> Arc<Vec<Lane>> {
    Arc::new((0..n).map(|i| d.lane(&format!("lane-{i}")).unwrap()).collect())
}

/// `dst[..] = dst[0] * 3 + src[0] + k` as one simulated kernel (reads, yields, then writes, so
/// an unordered pair shows up as a wrong value and as a hazard). `src == dst` reads itself.
fn step(cx: &mut Handles, dst: &GpuRef<u64>, src: Option<&GpuRef<u64>>, k: u64) -> cusched::Result<()> {
    let mut rec = cx.recorder();
    rec.read_write(dst)?;
    if let Some(s) = src {
        rec.read(s)?;
    }
    let (d, s) = (dst.sim_data()?, src.map(|s| s.sim_data()).transpose()?);
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            let old = d.lock()[0];
            let add = s.map_or(old, |s| s.read()[0]);
            std::thread::yield_now();
            d.lock().fill(old.wrapping_mul(3).wrapping_add(add).wrapping_add(k));
        })
    })
}

/// `buf[..] = v`, after a host delay of `delay_us`.
fn set(cx: &mut Handles, buf: &GpuRef<u64>, v: u64, delay_us: u64) -> cusched::Result<()> {
    std::thread::sleep(Duration::from_micros(delay_us));
    let mut rec = cx.recorder();
    rec.write(buf)?;
    let d = buf.sim_data()?;
    rec.launch(cx.device(), move |scope| scope.sim_kernel(move || d.lock().fill(v)))
}

/// Runs `iters` rounds of "lane A writes i into x, then lane B copies x to y" with no wait in
/// between; returns how many rounds B read a value other than i.
fn write_then_read(declared: bool, iters: u64) -> u64 {
    let d = sim();
    let ls = lanes(&d, 2);
    let s = d.default_stream();
    let mut rng = Rng::seeded(99);
    let mut stale = 0;
    for i in 1..=iters {
        let x = d.alloc_zeros::<u64>(s, 4).unwrap();
        let y = d.alloc_zeros::<u64>(s, 4).unwrap();
        let delay = rng.below(300);
        let (xa, xb, yb) = (x.clone(), x.clone(), y.clone());
        let write = move |cx: &mut Handles| set(cx, &xa, i, delay);
        let copy = move |cx: &mut Handles| yb.copy_from(cx.stream(), &xb);
        let (w, c) = if declared {
            (
                ls[0].job().write(&x).submit(move |cx, _| write(cx)),
                ls[1].job().read(&x).write(&y).submit(move |cx, _| copy(cx)),
            )
        } else {
            (ls[0].submit(write), ls[1].submit(copy))
        };
        let copied = c.wait();
        match w.wait() {
            // The copy ran first: the write, submitted before it, is refused with the
            // submit-order hazard instead of landing after the read.
            Err(Error::Hazard { hazard, .. }) if !declared && hazard.kind == HazardKind::SubmitOrder => {
                stale += 1;
                continue;
            }
            other => other.unwrap(),
        }
        copied.unwrap();
        assert_eq!(y.download(s).unwrap()[0], i, "round {i}: stale data and nothing reported");
    }
    let hazards = d.sim_hazards().unwrap();
    assert!(hazards.iter().all(|h| h.kind == HazardKind::SubmitOrder), "{hazards:?}");
    assert_eq!(hazards.len() as u64, stale);
    stale
}

#[test]
fn declared_write_on_one_lane_then_read_on_another_always_reads_the_new_data() {
    bounded(LIMIT, || assert_eq!(write_then_read(true, 200), 0));
}

/// The undeclared rule (ordered by commit): the same program may run the copy first, and then
/// the write, submitted before it, fails with the submit-order hazard; a round never reads
/// stale data silently. How many rounds invert depends on timing.
#[test]
fn undeclared_write_then_read_out_of_submit_order_is_reported_never_silently_stale() {
    let inverted = bounded(LIMIT, || write_then_read(false, 200));
    eprintln!("undeclared jobs: {inverted} of 200 rounds reported out of submit order");
}

#[derive(Clone, Copy, Debug)]
struct Op {
    dst: usize,
    src: Option<usize>,
    k: u64,
}

fn replay(ops: &[Op], bufs: usize) -> Vec<u64> {
    let mut v = vec![0u64; bufs];
    for op in ops {
        let old = v[op.dst];
        let add = op.src.map_or(old, |s| v[s]);
        v[op.dst] = old.wrapping_mul(3).wrapping_add(add).wrapping_add(op.k);
    }
    v
}

#[test]
fn declared_jobs_from_many_threads_over_many_lanes_match_a_sequential_replay_in_submit_order() {
    bounded(LIMIT, || {
        const THREADS: u64 = 6;
        const JOBS: u64 = 150;
        const BUFS: usize = 5;
        let d = sim();
        let ls = lanes(&d, 4);
        let bufs: Arc<Vec<GpuRef<u64>>> =
            Arc::new((0..BUFS).map(|_| d.alloc_zeros::<u64>(d.default_stream(), 4).unwrap()).collect());
        // The submit order: each submit (or inline op) and its log entry happen under this lock.
        let log: Arc<Mutex<Vec<Op>>> = Arc::default();
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ls, bufs, log, d) = (ls.clone(), bufs.clone(), log.clone(), d.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::seeded(t * 7 + 3);
                    let mut inline = cusched::Handles::new(&d, d.new_stream().unwrap()).unwrap();
                    let mut done = Vec::new();
                    for j in 0..JOBS {
                        let dst = rng.below(BUFS as u64) as usize;
                        let src = match rng.below(3) {
                            0 => None,
                            _ => Some(rng.below(BUFS as u64) as usize).filter(|&s| s != dst),
                        };
                        let op = Op { dst, src, k: t * 1000 + j };
                        let delay = rng.below(4) * 50;
                        let mut log = log.lock().unwrap();
                        if rng.below(5) == 0 {
                            // Inline, on this thread: it must follow every job submitted before.
                            let (db, sb) = (&bufs[dst], src.map(|s| &bufs[s]));
                            inline.run(|h| step(h, db, sb, op.k)).wait_committed().unwrap();
                        } else {
                            let lane = &ls[rng.below(ls.len() as u64) as usize];
                            let mut job = lane.job().read_write(&bufs[dst]);
                            if let Some(s) = src {
                                job = job.declare(&bufs[s], Access::Read);
                            }
                            let b = bufs.clone();
                            done.push(job.submit(move |cx, _| {
                                std::thread::sleep(Duration::from_micros(delay));
                                step(cx, &b[op.dst], op.src.map(|s| &b[s]), op.k)
                            }));
                        }
                        log.push(op);
                    }
                    for r in wait_all(done) {
                        r.unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let got: Vec<u64> = bufs.iter().map(|b| b.download(d.default_stream()).unwrap()[0]).collect();
        assert_eq!(got, replay(&log.lock().unwrap(), BUFS));
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}

/// Random mixes of declared and undeclared jobs, reads shared by several jobs, declarations a
/// job never touches, inline uses, try_submit and jobs that submit declared jobs themselves:
/// every job must finish (a reservation waited out by the preflight timeout would fail it).
#[test]
fn random_schedules_of_declared_and_undeclared_jobs_never_deadlock() {
    bounded(LIMIT, || {
        // Undeclared jobs from six threads with nothing ordering them race on purpose: the
        // check of submit order would report those races, and this test is about deadlocks.
        let config = DeviceConfig {
            preflight_timeout: Duration::from_secs(60),
            submit_order: SubmitOrderCheck::Off,
            ..DeviceConfig::default()
        };
        let sim_cfg = SimConfig { max_delay: Duration::from_micros(30), seed: 5, ..SimConfig::default() };
        let d = Device::sim_with(sim_cfg, config).unwrap();
        let ls = lanes(&d, 3);
        let bufs: Arc<Vec<GpuRef<u64>>> =
            Arc::new((0..4).map(|_| d.alloc_zeros::<u64>(d.default_stream(), 2).unwrap()).collect());
        let threads: Vec<_> = (0..6u64)
            .map(|t| {
                let (ls, bufs, d) = (ls.clone(), bufs.clone(), d.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::seeded(t + 1000);
                    let s = d.new_stream().unwrap();
                    let mut done = Vec::new();
                    for j in 0..120u64 {
                        let lane = ls[rng.below(3) as usize].clone();
                        let (a, b) = (rng.below(4) as usize, rng.below(4) as usize);
                        let k = t * 1000 + j;
                        let bs = bufs.clone();
                        match rng.below(6) {
                            0 => done.push(lane.submit(move |cx| step(cx, &bs[a], None, k))),
                            1 => {
                                // Declares a write it never makes, and reads shared with others.
                                let job = lane.job().read(&bufs[a]).write(&bufs[b]).read(&bufs[(a + 1) % 4]);
                                done.push(job.submit(|_, _| Ok(())));
                            }
                            2 => {
                                bufs[a].download(s).unwrap();
                            }
                            3 => {
                                let next = ls[rng.below(3) as usize].clone();
                                let job = lane.job().read(&bufs[a]);
                                done.push(job.submit(move |cx, _| {
                                    // Submitted from inside a job: later in submit order, so it
                                    // waits for this job's reservations, never the reverse.
                                    let inner = bs.clone();
                                    drop(
                                        next.job().read_write(&bs[b]).submit(move |cx, _| step(cx, &inner[b], None, k)),
                                    );
                                    bs[a].download(cx.stream()).map(drop)
                                }));
                            }
                            4 => {
                                match lane.job().read_write(&bufs[a]).try_submit(move |cx, _| step(cx, &bs[a], None, k))
                                {
                                    Ok(c) => done.push(c),
                                    Err(Error::QueueFull) => {}
                                    Err(e) => panic!("{e}"),
                                }
                            }
                            _ => {
                                let src = (a != b).then_some(b);
                                let job = lane.job().read_write(&bufs[a]);
                                let job = if let Some(s) = src { job.declare(&bufs[s], Access::Read) } else { job };
                                done.push(job.submit(move |cx, _| step(cx, &bs[a], src.map(|s| &bs[s]), k)));
                            }
                        }
                    }
                    for r in wait_all(done) {
                        r.unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for b in bufs.iter() {
            b.download(d.default_stream()).unwrap();
        }
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}

#[test]
fn a_declared_job_uses_the_buffers_it_makes_without_declaring_them() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("maker").unwrap();
        let x = d.upload(d.default_stream(), &[5u64, 6]).unwrap();
        let xc = x.clone();
        let out = lane
            .job()
            .read(&x)
            .submit(move |cx, _| {
                // Made inside the job: an allocation (a write), an upload (a write) and strict
                // launches on both, none of which the job could have declared at submit.
                let made = cx.device().alloc_zeros::<u64>(cx.stream(), 2)?;
                let up = cx.device().upload(cx.stream(), &[1u64, 2])?;
                made.copy_from(cx.stream(), &xc)?;
                step(cx, &made, Some(&up), 0)?;
                made.download(cx.stream())
            })
            .wait()
            .unwrap();
        // made = [5, 6] -> 5 * 3 + up[0] (1) = 16 everywhere.
        assert_eq!(out, [16, 16]);
        // A buffer made before the job started still has to be declared.
        let early = d.alloc_zeros::<u64>(d.default_stream(), 2).unwrap();
        let err = lane.job().submit(move |cx, _| set(cx, &early, 1, 0)).wait().unwrap_err();
        assert!(matches!(err, Error::UndeclaredUse { access: "write", .. }), "{err:?}");
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}

/// A buffer made on another thread while a declared job runs is not the job's own: a submit
/// after the job may have reserved it before handing it over, and only a declaration orders the
/// job before that submit. So its strict use in the job is refused, as for any undeclared
/// buffer.
#[test]
fn a_buffer_made_on_another_thread_during_a_declared_job_must_be_declared() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("taker").unwrap();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (buf_tx, buf_rx) = mpsc::channel::<GpuRef<u64>>();
        let job = lane.job().submit(move |cx, _| {
            started_tx.send(()).map_err(|_| Error::Shutdown)?;
            let given = buf_rx.recv().map_err(|_| Error::Shutdown)?;
            set(cx, &given, 1, 0)
        });
        started_rx.recv().unwrap();
        let made_after_start = d.alloc_zeros::<u64>(d.default_stream(), 2).unwrap();
        buf_tx.send(made_after_start).unwrap();
        let err = job.wait().unwrap_err();
        assert!(matches!(err, Error::UndeclaredUse { access: "write", .. }), "{err:?}");
    });
}

#[test]
fn a_strict_use_of_an_undeclared_buffer_in_a_declared_job_is_an_error_naming_it() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("strict").unwrap();
        let s = d.default_stream();
        let (x, y) = (d.alloc_zeros::<u64>(s, 2).unwrap(), d.alloc_zeros::<u64>(s, 2).unwrap());
        let y_name = format!("buffer #{}", y.id());
        let (xc, yc) = (x.clone(), y.clone());
        let err = lane.job().write(&x).submit(move |cx, _| yc.copy_from(cx.stream(), &xc)).wait().unwrap_err();
        match &err {
            Error::UndeclaredUse { buffer, lane, access, .. } => {
                assert_eq!((buffer.as_str(), lane.as_str(), *access), (y_name.as_str(), "strict", "write"));
            }
            e => panic!("expected UndeclaredUse, got {e:?}"),
        }
        assert!(err.to_string().contains(".write(&buffer)"), "{err}");
        // Declared only as read, then written.
        let xc = x.clone();
        let err = lane.job().read(&x).submit(move |cx, _| set(cx, &xc, 1, 0)).wait().unwrap_err();
        assert!(matches!(err, Error::UndeclaredUse { access: "write", .. }), "{err:?}");
        // A permissive recorder lets it through (ordered by commit, like an undeclared job).
        let xc = x.clone();
        lane.job()
            .submit(move |cx, _| {
                let mut rec = cx.recorder_permissive();
                rec.write(&xc)?;
                let m = xc.sim_data()?;
                rec.launch(cx.device(), move |sc| sc.sim_kernel(move || m.lock().fill(3)))
            })
            .wait()
            .unwrap();
        assert_eq!(x.download(s).unwrap(), [3, 3]);
        // An external pointer cannot be declared.
        let ext = cusched::External { ptr: 0x1000, bytes: 8 };
        assert!(matches!(lane.job().read(&ext).submit(|_, _| Ok(())).wait(), Err(Error::Untracked { .. })));
        assert!(matches!(lane.job().read(&ext).try_submit(|_, _| Ok(())), Err(Error::Untracked { .. })));
    });
}

#[test]
fn reservations_are_released_when_a_job_fails_panics_or_never_touches_its_buffer() {
    bounded(LIMIT, || {
        let d = short_timeout(Duration::from_secs(5));
        let lane = d.lane("release").unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[7u64, 7]).unwrap();
        // Released, not leaked (a leak would be BufferReserved): the download fails at once
        // because the job that declared the write failed, and a write makes x valid again.
        let failed = lane.job().write(&x).submit(|_, _| -> cusched::Result<()> { Err(Error::QueueFull) });
        assert!(matches!(failed.wait(), Err(Error::QueueFull)));
        assert!(matches!(x.download(s), Err(Error::FailedInput { .. })));
        x.copy_from_slice(s, &[7, 7]).unwrap();
        assert_eq!(x.download(s).unwrap(), [7, 7]);
        let panicked = lane.job().write(&x).submit(|_, _| -> cusched::Result<()> { panic!("job panics") });
        assert!(matches!(panicked.wait(), Err(Error::JobPanicked { .. })));
        assert!(matches!(x.download(s), Err(Error::FailedInput { .. })));
        x.copy_from_slice(s, &[7, 7]).unwrap();
        assert_eq!(x.download(s).unwrap(), [7, 7]);
        lane.job().read(&x).write(&x).submit(|_, _| Ok(())).wait().unwrap();
        assert_eq!(x.download(s).unwrap(), [7, 7]);
    });
}

#[test]
fn a_try_submit_refused_by_a_full_queue_reserves_nothing() {
    bounded(LIMIT, || {
        let d = short_timeout(Duration::from_secs(5));
        let lane = d.lane_with("full", LaneOptions { capacity: 1 }).unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[1u64]).unwrap();
        let (open, gate) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let blocker = lane.submit(move |_| {
            started_tx.send(()).ok();
            gate.recv().ok();
            Ok(())
        });
        started.recv().unwrap();
        let queued = lane.submit(|_| Ok(()));
        assert!(matches!(lane.job().write(&x).try_submit(|_, _| Ok(())), Err(Error::QueueFull)));
        // The lane is still blocked, yet x is free.
        assert_eq!(x.download(s).unwrap(), [1]);
        open.send(()).unwrap();
        blocker.wait().unwrap();
        queued.wait().unwrap();
    });
}

#[test]
fn a_declared_job_dropped_unrun_at_shutdown_releases_its_reservations() {
    bounded(LIMIT, || {
        let d = short_timeout(Duration::from_secs(5));
        let lane = d.lane("shut").unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[4u64, 4]).unwrap();
        let (open, gate) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let blocker = lane.submit(move |_| {
            started_tx.send(()).ok();
            gate.recv().ok();
            Ok(())
        });
        started.recv().unwrap();
        let xc = x.clone();
        let queued = lane.job().write(&x).submit(move |cx, _| set(cx, &xc, 9, 0));
        let probe = lane.clone();
        let releaser = std::thread::spawn(move || {
            while !matches!(probe.try_submit(|_| Ok(())), Err(Error::Shutdown)) {
                std::thread::sleep(Duration::from_millis(1));
            }
            open.send(()).ok();
        });
        d.shutdown().unwrap();
        releaser.join().unwrap();
        blocker.wait().unwrap();
        assert!(matches!(queued.wait(), Err(Error::Shutdown)));
        // Buffers stay usable after shutdown; x's reservation is gone, and the write the job
        // declared never happened: x carries its failure until rewritten.
        assert!(matches!(x.download(s), Err(Error::FailedInput { .. })));
        x.copy_from_slice(s, &[4, 4]).unwrap();
        assert_eq!(x.download(s).unwrap(), [4, 4]);
    });
}

#[test]
fn a_reservation_that_is_never_released_fails_a_later_use_with_buffer_reserved() {
    bounded(LIMIT, || {
        let d = short_timeout(Duration::from_secs(1));
        let lane = d.lane("stuck").unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[1u64]).unwrap();
        let (open, gate) = mpsc::channel::<()>();
        let stuck = lane.job().write(&x).submit(move |_, _| {
            gate.recv().ok();
            Ok(())
        });
        let err = x.download(s).unwrap_err();
        assert!(matches!(&err, Error::BufferReserved { .. }), "{err:?}");
        assert!(err.to_string().contains("reserved by a declared lane job"), "{err}");
        open.send(()).unwrap();
        stuck.wait().unwrap();
        assert_eq!(x.download(s).unwrap(), [1]);
    });
}

/// A declared job's reservations order uses made after its submit by everyone but the jobs
/// submitted before it, the submitting job included: a job that submits a declared job to
/// its own lane and then writes the same buffer must not wait for it (the new job runs only
/// after the submitting one ends), so its write runs at once, and the new job's after it.
#[test]
fn a_use_by_the_submitting_job_after_its_submit_is_not_ordered_after_the_submitted_job() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("submitter").unwrap();
        let x = d.alloc_zeros::<u64>(d.default_stream(), 2).unwrap();
        let (l2, xa) = (lane.clone(), x.clone());
        let later = lane
            .submit(move |cx| {
                let xb = xa.clone();
                let later = l2.job().write(&xa).submit(move |cx, _| set(cx, &xb, 2, 0));
                // Not ordered after `later`, which waits in this lane's queue behind this job.
                set(cx, &xa, 1, 0)?;
                Ok(later)
            })
            .wait()
            .unwrap();
        later.wait().unwrap();
        assert_eq!(x.download(d.default_stream()).unwrap(), [2, 2]);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    });
}
