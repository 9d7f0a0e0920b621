//! Declared lane jobs on a real GPU: a three-lane pipeline of slow kernels submitted with no
//! `wait_committed` between the stages, reusing two buffers per stage, so that a job ordered by
//! commit instead of by submit reads old data or overwrites data still being read. Skipped
//! without a GPU unless `CUSCHED_REQUIRE_GPU=1`.

use crate::common::slow::*;
use crate::common::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_declared_three_lane_pipeline_without_wait_committed_is_exact() {
    let Some(d) = gpu() else { return };
    let k = Arc::new(kernels(&d));
    let (up, mid, down) = (d.lane("up").unwrap(), d.lane("mid").unwrap(), d.lane("down").unwrap());
    let s0 = d.default_stream();
    const CHUNKS: usize = 24;
    // Two buffers per stage, reused every other chunk: the upload of chunk i + 2 overwrites
    // what the compute of chunk i reads.
    let x: Vec<_> = (0..2).map(|_| d.alloc_zeros::<f32>(s0, N).unwrap()).collect();
    let y: Vec<_> = (0..2).map(|_| d.alloc_zeros::<f32>(s0, N).unwrap()).collect();
    let outs: Vec<_> = (0..CHUNKS).map(|_| d.alloc_zeros::<f32>(s0, N).unwrap()).collect();
    d.synchronize(s0).unwrap();
    let mut rng = Rng::new();
    let mut done = Vec::new();
    for i in 0..CHUNKS {
        let (xi, yi, oi) = (x[i % 2].clone(), y[i % 2].clone(), outs[i].clone());
        // A host delay in the upload job, so that without reservations the compute job's host
        // side would often run first.
        let delay = Duration::from_micros(rng.below(2000));
        let (dd, kk, xw) = (d.clone(), k.clone(), xi.clone());
        done.push(up.job().write(&xi).submit(move |cx, _| {
            std::thread::sleep(delay);
            fill(&dd, &kk, cx.stream(), &xw, i as f32, SLOW / 4)
        }));
        let (dd, kk, xr, yw) = (d.clone(), k.clone(), xi.clone(), yi.clone());
        done.push(mid.job().read(&xi).write(&yi).submit(move |cx, _| {
            copy(&dd, &kk, cx.stream(), &yw, &xr, SLOW / 4)?;
            add(&dd, &kk, cx.stream(), &yw, 1.0, 0)
        }));
        let (dd, kk, yr, ow) = (d.clone(), k.clone(), yi.clone(), oi.clone());
        done.push(down.job().read(&yi).write(&oi).submit(move |cx, _| copy(&dd, &kk, cx.stream(), &ow, &yr, SLOW / 8)));
    }
    for r in cusched::wait_all(done) {
        r.unwrap();
    }
    for (i, o) in outs.iter().enumerate() {
        let got = o.download(s0).unwrap();
        assert!(all_eq(&got, i as f32 + 1.0), "chunk {i}: expected {}, got {} (first element)", i as f32 + 1.0, got[0]);
    }
}
