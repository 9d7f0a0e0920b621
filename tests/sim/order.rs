//! Submit order across lanes on the simulator: jobs submitted without declarations whose
//! conflicting uses would take effect against the order the program submitted them are
//! reported (a `SubmitOrder` hazard that fails the older job's op) instead of giving wrong data
//! silently; each conflict kind inverted; no report for declared jobs or for one lane's jobs.

use crate::common::*;
use cusched::{
    Access, Completion, Device, DeviceConfig, Error, GpuRef, Handles, HazardKind, SimConfig, SubmitOrderCheck,
};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

const N: usize = 4;

fn is_submit_order<T: std::fmt::Debug>(r: &cusched::Result<T>) -> bool {
    matches!(r, Err(Error::Hazard { hazard, .. }) if format!("{:?}", hazard.kind) == "SubmitOrder")
}

/// `y = 2 x` as one simulated kernel named "scale".
fn scale(cx: &mut Handles, x: &GpuRef<f32>, y: &GpuRef<f32>) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("scale");
    rec.read(x)?.write(y)?;
    let (xs, ys) = (x.sim_data()?, y.sim_data()?);
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            let x = xs.read().to_vec();
            for (d, s) in ys.lock().iter_mut().zip(x) {
                *d = 2.0 * s;
            }
        })
    })
}

/// `z = y w` (N×N, row major) as one simulated kernel named "gemm".
fn gemm(cx: &mut Handles, y: &GpuRef<f32>, w: &GpuRef<f32>, z: &GpuRef<f32>) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("gemm");
    rec.read(y)?.read(w)?.write(z)?;
    let (ys, ws, zs) = (y.sim_data()?, w.sim_data()?, z.sim_data()?);
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            let (y, w) = (ys.read().to_vec(), ws.read().to_vec());
            let mut z = zs.lock();
            for i in 0..N {
                for j in 0..N {
                    z[i * N + j] = (0..N).map(|k| y[i * N + k] * w[k * N + j]).sum();
                }
            }
        })
    })
}

fn expected(h: &[f32], w: &[f32]) -> Vec<f32> {
    let mut z = vec![0.0; N * N];
    for i in 0..N {
        for j in 0..N {
            z[i * N + j] = (0..N).map(|k| 2.0 * h[i * N + k] * w[k * N + j]).sum();
        }
    }
    z
}

/// The pipeline a new user writes from the README: upload → scale → GEMM → download, 16
/// chunks over three lanes, each stage an undeclared `Lane::submit` with no `wait_committed`
/// in between. The upload does some host work first, so the later stages tend to run before
/// it. Wrong data must never come back silently: a chunk is either right or one of its stages
/// failed with the submit-order hazard.
#[test]
fn undeclared_pipeline_over_three_lanes_never_gives_wrong_data_silently() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let (up, compute, down) = (d.lane("upload").unwrap(), d.lane("compute").unwrap(), d.lane("download").unwrap());
        let wh: Vec<f32> = (0..N * N).map(|i| (i % 5) as f32).collect();
        let w = d.upload(s, &wh).unwrap().with_label("w");
        d.synchronize(s).unwrap();
        let mut chunks = Vec::new();
        for c in 0..16 {
            let h: Vec<f32> = (0..N * N).map(|i| (c * 100 + i) as f32).collect();
            let x = d.alloc_zeros::<f32>(s, N * N).unwrap().with_label(&format!("x{c}"));
            let y = d.alloc_zeros::<f32>(s, N * N).unwrap().with_label(&format!("y{c}"));
            let z = d.alloc_zeros::<f32>(s, N * N).unwrap().with_label(&format!("z{c}"));
            d.synchronize(s).unwrap();
            let (xu, hu) = (x.clone(), h.clone());
            let uploaded: Completion<()> = up.submit(move |cx| {
                std::thread::sleep(Duration::from_micros(300));
                xu.copy_from_slice(cx.stream(), &hu)
            });
            let (xc, yc, zc, wc) = (x.clone(), y.clone(), z.clone(), w.clone());
            let computed = compute.submit(move |cx| {
                scale(cx, &xc, &yc)?;
                gemm(cx, &yc, &wc, &zc)
            });
            let zd = z.clone();
            let downloaded = down.submit(move |cx| zd.download(cx.stream()));
            chunks.push((h, uploaded, computed, downloaded));
        }
        let (mut right, mut loud) = (0, 0);
        for (c, (h, uploaded, computed, downloaded)) in chunks.into_iter().enumerate() {
            let (u, k, r) = (uploaded.wait(), computed.wait(), downloaded.wait());
            let reported = is_submit_order(&u) || is_submit_order(&k) || is_submit_order(&r);
            match (&u, &k, &r) {
                (Ok(()), Ok(()), Ok(z)) if *z == expected(&h, &wh) => right += 1,
                _ if reported => loud += 1,
                _ => panic!("chunk {c}: wrong data or another error and nothing reported the order: upload {u:?}, compute {k:?}, download {r:?}"),
            }
        }
        eprintln!("{right} chunks right, {loud} reported out of submit order");
    });
}

/// One simulated kernel making `access` of `x`.
fn touch(cx: &mut Handles, x: &GpuRef<f32>, access: Access) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("touch");
    rec.access(x, access)?;
    let xs = x.sim_data()?;
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            if access.writes() {
                xs.lock()[0] += 1.0;
            } else {
                let _ = xs.read()[0];
            }
        })
    })
}

/// The job submitted first on lane "older" makes `older` of x after a delay; the job
/// submitted second on lane "younger" makes `younger` of it at once, so it commits first.
fn inverted(d: &Device, older: Access, younger: Access) -> (cusched::Result<()>, cusched::Result<()>) {
    let (a, b) = (d.lane("older").unwrap(), d.lane("younger").unwrap());
    let x = d.alloc_zeros::<f32>(d.default_stream(), 4).unwrap().with_label("x");
    d.synchronize(d.default_stream()).unwrap();
    let (xa, xb) = (x.clone(), x.clone());
    let first = a.submit(move |cx| {
        std::thread::sleep(Duration::from_millis(5));
        touch(cx, &xa, older)
    });
    let second = b.submit(move |cx| touch(cx, &xb, younger));
    let second = second.wait();
    (first.wait(), second)
}

#[test]
fn each_conflict_kind_committed_against_submit_order_is_reported_naming_both_jobs_and_the_buffer() {
    bounded(LIMIT, || {
        for (older, younger, meant) in [
            (Access::Write, Access::Read, "read-after-write"),
            (Access::Write, Access::Write, "write-after-write"),
            (Access::Read, Access::Write, "write-after-read"),
            (Access::ReadWrite, Access::Read, "read-after-write"),
        ] {
            let d = sim();
            let (first, second) = inverted(&d, older, younger);
            second.unwrap();
            let Err(Error::Hazard { hazard, .. }) = first else {
                panic!("{meant}: the older job was not refused: {first:?}")
            };
            assert_eq!(hazard.kind, HazardKind::SubmitOrder, "{meant}");
            assert!(hazard.earlier.op > hazard.later.op, "{meant}: the younger job's submit number is the larger");
            let text = hazard.to_string();
            for part in ["\"x\"", "lane \"older\"", "lane \"younger\"", "`touch`", "submitted first"] {
                assert!(text.contains(part), "{meant}: {part} missing from: {text}");
            }
            assert_eq!(d.sim_hazards().unwrap().len(), 1, "{meant}");
        }
    });
}

/// Submit order is one thread's program order: the same inversion, with each job submitted by
/// a thread of its own (the second strictly after the first), has no order the program stated
/// and is not reported, as accumulations from several threads must not be.
#[test]
fn jobs_submitted_by_two_threads_are_not_compared() {
    bounded(LIMIT, || {
        let d = sim();
        let (a, b) = (d.lane("older").unwrap(), d.lane("younger").unwrap());
        let x = d.alloc_zeros::<f32>(d.default_stream(), 4).unwrap().with_label("x");
        d.synchronize(d.default_stream()).unwrap();
        let (xa, xb) = (x.clone(), x.clone());
        let first = std::thread::scope(|t| {
            t.spawn(|| {
                a.submit(move |cx| {
                    std::thread::sleep(Duration::from_millis(5));
                    touch(cx, &xa, Access::Write)
                })
            })
            .join()
            .unwrap()
        });
        let second =
            std::thread::scope(|t| t.spawn(|| b.submit(move |cx| touch(cx, &xb, Access::Write))).join().unwrap());
        second.wait().unwrap();
        first.wait().unwrap();
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}

#[test]
fn reads_committed_against_submit_order_are_not_reported() {
    bounded(LIMIT, || {
        let d = sim();
        let (first, second) = inverted(&d, Access::Read, Access::Read);
        first.unwrap();
        second.unwrap();
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}

#[test]
fn log_lists_the_inversion_and_lets_the_op_go_on_and_off_checks_nothing() {
    bounded(LIMIT, || {
        for (check, listed) in [(SubmitOrderCheck::Log, 1), (SubmitOrderCheck::Off, 0)] {
            let config = DeviceConfig { submit_order: check, ..DeviceConfig::default() };
            let d =
                Device::sim_with(SimConfig { max_delay: Duration::from_micros(30), ..SimConfig::default() }, config)
                    .unwrap();
            let (first, second) = inverted(&d, Access::Write, Access::Read);
            first.unwrap();
            second.unwrap();
            let hazards = d.sim_hazards().unwrap();
            assert_eq!(hazards.len(), listed, "{check:?}: {hazards:?}");
            assert!(hazards.iter().all(|h| h.kind == HazardKind::SubmitOrder));
        }
    });
}

#[test]
fn one_lanes_undeclared_jobs_are_in_submit_order_by_construction_and_never_reported() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("only").unwrap();
        let x = d.alloc_zeros::<f32>(d.default_stream(), 4).unwrap();
        let mut rng = Rng::seeded(3);
        let mut done = Vec::new();
        for i in 0..200 {
            let (xj, delay) = (x.clone(), rng.below(50));
            let access = if i % 3 == 0 { Access::Read } else { Access::ReadWrite };
            done.push(lane.submit(move |cx| {
                std::thread::sleep(Duration::from_micros(delay));
                touch(cx, &xj, access)
            }));
        }
        for r in cusched::wait_all(done) {
            r.unwrap();
        }
        assert_eq!(x.download(d.default_stream()).unwrap()[0], 133.0);
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}

/// The same pipeline as the first test, declared and without `wait_committed`: every chunk is
/// right and nothing is reported.
#[test]
fn declared_pipeline_over_three_lanes_is_right_and_never_reported() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let (up, compute, down) = (d.lane("upload").unwrap(), d.lane("compute").unwrap(), d.lane("download").unwrap());
        let wh: Vec<f32> = (0..N * N).map(|i| (i % 5) as f32).collect();
        let w = d.upload(s, &wh).unwrap().with_label("w");
        let mut chunks = Vec::new();
        for c in 0..16 {
            let h: Vec<f32> = (0..N * N).map(|i| (c * 100 + i) as f32).collect();
            let x = d.alloc_zeros::<f32>(s, N * N).unwrap();
            let y = d.alloc_zeros::<f32>(s, N * N).unwrap();
            let z = d.alloc_zeros::<f32>(s, N * N).unwrap();
            let hu = h.clone();
            up.job().write(&x).submit(move |cx, (x,)| {
                std::thread::sleep(Duration::from_micros(300));
                x.copy_from_slice(cx.stream(), &hu)
            });
            compute.job().read(&x).read(&w).write(&y).write(&z).submit(|cx, (x, w, y, z)| {
                scale(cx, &x, &y)?;
                gemm(cx, &y, &w, &z)
            });
            chunks.push((h, down.job().read(&z).submit(|cx, (z,)| z.download(cx.stream()))));
        }
        for (h, r) in chunks {
            assert_eq!(r.wait().unwrap(), expected(&h, &wh));
        }
        assert_eq!(d.sim_hazards().unwrap(), vec![]);
    });
}
