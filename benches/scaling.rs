//! Scaling: 1, 2, 4 and 8 submitting threads over 1, 2 and 4 lanes, each job one small kernel
//! launch on its lane's own buffers (no cross-lane fences), every completion waited for. Jobs per
//! second, next to the same launches made directly with cudarc from the same threads onto as
//! many streams, and next to those launches each followed by one `cuEventRecord`: the event the
//! contract records per committed launch once several streams are in use, so that row is the
//! floor of any tracker that keeps it.
//!
//! Run from the GPU bundle: `target/gpu-bundle/bin/bench-scaling [jobs]`.

mod common;

use common::*;
use cusched::cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cusched::{Device, GpuRef, Kernel, Lane};
use std::sync::Arc;
use std::time::Instant;

const N: u32 = 256;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ours(lanes: &[(Lane, GpuRef<f32>, GpuRef<f32>)], k: &Kernel, threads: usize, jobs: usize) -> Res<f64> {
    let t = Instant::now();
    std::thread::scope(|sc| -> Res<()> {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                sc.spawn(move || -> cusched::Result<()> {
                    let mut done = Vec::with_capacity(jobs / threads);
                    for i in 0..jobs / threads {
                        let (lane, a, c) = &lanes[(th + i) % lanes.len()];
                        let (k, a, c) = (k.clone(), a.clone(), c.clone());
                        done.push(lane.submit(move |cx| {
                            let launch =
                                cx.launch(&k, LaunchConfig::for_num_elems(N)).read(&a).read(&a).write(&c).scalar(N);
                            // SAFETY: 1. add3 reads its first two parameters (both `a`) and
                            // writes the third (`c`), as declared; 2. it touches indices below
                            // N, the length of both buffers; 3. the parameters are three float
                            // pointers and an unsigned, as declared.
                            unsafe { launch.enqueue() }.map(drop)
                        }));
                    }
                    cusched::wait_all(done).into_iter().collect::<cusched::Result<Vec<()>>>().map(drop)
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a submitting thread panicked")??;
        }
        Ok(())
    })?;
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

struct RawLane {
    s: Arc<CudaStream>,
    a: CudaSlice<f32>,
    c: CudaSlice<f32>,
    /// Re-recorded after each launch when the baseline includes the contract's event.
    ev: CudaEvent,
}

fn raw(lanes: &[RawLane], f: &CudaFunction, threads: usize, jobs: usize, with_event: bool) -> Res<f64> {
    let t = Instant::now();
    std::thread::scope(|sc| -> Res<()> {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                sc.spawn(move || -> Result<(), cusched::cudarc::driver::DriverError> {
                    for i in 0..jobs / threads {
                        let l = &lanes[(th + i) % lanes.len()];
                        let mut b = l.s.launch_builder(f);
                        b.arg(&l.a).arg(&l.a).arg(&l.c).arg(&N);
                        // SAFETY: `add3` takes three float pointers and a length; N floats each.
                        // Concurrent writers of `c` race by design: only host throughput counts.
                        unsafe { b.launch(LaunchConfig::for_num_elems(N)) }?;
                        if with_event {
                            l.ev.record(&l.s)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a launching thread panicked")??;
        }
        for l in lanes {
            l.s.synchronize()?;
        }
        Ok(())
    })?;
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

fn main() -> Res<()> {
    let jobs: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(40_000);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-scaling needs a GPU: {e}");
            return Ok(());
        }
    };
    let k = device.compile(ADD_SRC, &[])?.kernel("add3")?;
    let lanes: Vec<_> = (0..4)
        .map(|i| -> cusched::Result<_> {
            let lane = device.lane(&format!("scale-{i}"))?;
            let a = device.alloc_zeros::<f32>(lane.stream(), N as usize)?;
            let c = device.alloc_zeros::<f32>(lane.stream(), N as usize)?;
            Ok((lane, a, c))
        })
        .collect::<Result<_, _>>()?;
    let ctx = CudaContext::new(0)?;
    // SAFETY: baseline launches only; see the race note in `raw`.
    unsafe { ctx.disable_event_tracking() };
    let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(ADD_SRC)?)?.load_function("add3")?;
    let raws: Vec<RawLane> = (0..4)
        .map(|_| -> Res<RawLane> {
            let s = ctx.new_stream()?;
            Ok(RawLane { a: s.alloc_zeros(N as usize)?, c: s.alloc_zeros(N as usize)?, ev: ctx.new_event(None)?, s })
        })
        .collect::<Result<_, _>>()?;
    ours(&lanes, &k, 2, 2000)?;
    raw(&raws, &f, 2, 2000, false)?;
    raw(&raws, &f, 2, 2000, true)?;
    println!(
        "{jobs} jobs of one small launch each; thousands of jobs per second, best of 2; in parentheses raw \
         cudarc launches and our ratio to them, then raw launches each followed by one cuEventRecord and \
         our ratio to those\n"
    );
    println!("| threads | 1 lane | 2 lanes | 4 lanes |");
    println!("| --- | --- | --- | --- |");
    for threads in [1usize, 2, 4, 8] {
        let mut cells = Vec::new();
        for l in [1usize, 2, 4] {
            let (mut o, mut r, mut re) = (0.0f64, 0.0f64, 0.0f64);
            for _ in 0..2 {
                o = o.max(ours(&lanes[..l], &k, threads, jobs)?);
                r = r.max(raw(&raws[..l], &f, threads, jobs, false)?);
                re = re.max(raw(&raws[..l], &f, threads, jobs, true)?);
            }
            cells.push(format!(
                "{:.0}k ({:.0}k raw, {:.2}; {:.0}k raw+event, {:.2})",
                o / 1e3,
                r / 1e3,
                o / r,
                re / 1e3,
                o / re
            ));
        }
        println!("| {threads} | {} |", cells.join(" | "));
    }
    Ok(())
}
