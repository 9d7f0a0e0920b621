//! Pipeline overlap: upload, compute, download of many chunks over three lanes (cusched) and
//! over three streams with hand-written events (raw cudarc), against the ideal overlapped time
//! (the longest stage's total, each stage measured alone) and against one stream.
//!
//! Pinned host buffers and device buffers are allocated once up front, so the runs measure
//! scheduling and overlap, not allocation.
//!
//! Run from the GPU bundle: `target/gpu-bundle/bin/bench-pipeline [chunks] [floats per chunk]`.

mod common;

use common::*;
use cusched::cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cusched::{Device, GpuRef, HostBuffer, Kernel, Lane};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Enough arithmetic per element that compute takes about as long as one copy.
const SRC: &str = r#"
extern "C" __global__ void work(float* y, const float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        #pragma unroll 1
        for (int k = 0; k < 48; ++k) v = v * 0.999f + 0.001f;
        y[i] = v;
    }
}
"#;

struct OursChunk {
    host_in: Arc<HostBuffer<f32>>,
    host_out: Arc<Mutex<HostBuffer<f32>>>,
    x: GpuRef<f32>,
    y: GpuRef<f32>,
}

fn launch_work(cx: &mut cusched::Handles, k: &Kernel, x: &GpuRef<f32>, y: &GpuRef<f32>) -> cusched::Result<()> {
    let n = x.len() as u32;
    let launch = cx.launch(k, LaunchConfig::for_num_elems(n)).write(y).read(x).scalar(n);
    // SAFETY: 1. `work` writes y and reads x, as declared; 2. it touches indices below n, the
    // length of both (allocated together); 3. the parameters are two float pointers and an
    // unsigned, as declared.
    unsafe { launch.enqueue() }.map(drop)
}

/// All chunks through `up`, `mid`, `down` (the same lane three times for one stream).
fn run_ours(chunks: &[OursChunk], k: &Kernel, up: &Lane, mid: &Lane, down: &Lane) -> Res<f64> {
    let t = Instant::now();
    let mut last = Vec::with_capacity(chunks.len());
    for c in chunks {
        let (hi, x) = (c.host_in.clone(), c.x.clone());
        up.submit(move |cx| x.copy_from_host(cx.stream(), &hi)).wait_committed()?;
        let (k, x, y) = (k.clone(), c.x.clone(), c.y.clone());
        mid.submit(move |cx| launch_work(cx, &k, &x, &y)).wait_committed()?;
        let (ho, y) = (c.host_out.clone(), c.y.clone());
        last.push(down.submit(move |cx| {
            let mut out = ho.lock().map_err(|_| cusched::Error::Shutdown)?;
            y.copy_to_host(cx.stream(), &mut out)
        }));
    }
    for done in last {
        done.wait()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The same pipeline with declared jobs: each job reserves its buffers at submit, so the
/// compute job on `mid` follows the upload on `up` (and the download the compute) without the
/// caller waiting for either to commit; the submitting thread never blocks until the end.
fn run_declared(chunks: &[OursChunk], k: &Kernel, up: &Lane, mid: &Lane, down: &Lane) -> Res<f64> {
    let t = Instant::now();
    let mut last = Vec::with_capacity(chunks.len());
    for c in chunks {
        let (hi, x) = (c.host_in.clone(), c.x.clone());
        up.job().read(&*hi).write(&x).submit(move |cx, _| x.copy_from_host(cx.stream(), &hi));
        let (k, x, y) = (k.clone(), c.x.clone(), c.y.clone());
        mid.job().read(&x).write(&y).submit(move |cx, _| launch_work(cx, &k, &x, &y));
        let (ho, y) = (c.host_out.clone(), c.y.clone());
        let out = ho.lock().map_err(|_| "poisoned")?;
        let job = down.job().read(&y).write(&*out);
        drop(out);
        last.push(job.submit(move |cx, _| {
            let mut out = ho.lock().map_err(|_| cusched::Error::Shutdown)?;
            y.copy_to_host(cx.stream(), &mut out)
        }));
    }
    for done in last {
        done.wait()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

struct RawChunk {
    host_in: PinnedHostSlice<f32>,
    host_out: PinnedHostSlice<f32>,
    x: CudaSlice<f32>,
    y: CudaSlice<f32>,
    uploaded: CudaEvent,
    computed: CudaEvent,
}

struct Raw {
    s: [Arc<CudaStream>; 3],
    f: CudaFunction,
    chunks: Vec<RawChunk>,
}

impl Raw {
    /// `streams` 3: one per stage, ordered by two events per chunk; 1: everything on one.
    fn run(&mut self, streams: usize, stages: [bool; 3]) -> Res<f64> {
        let t = Instant::now();
        let (su, sc, sd) = if streams == 3 { (0, 1, 2) } else { (0, 0, 0) };
        for c in &mut self.chunks {
            let n = c.x.len() as u32;
            if stages[0] {
                self.s[su].memcpy_htod(&c.host_in, &mut c.x)?;
                c.uploaded.record(&self.s[su])?;
                self.s[sc].wait(&c.uploaded)?;
            }
            if stages[1] {
                let mut l = self.s[sc].launch_builder(&self.f);
                l.arg(&mut c.y).arg(&c.x).arg(&n);
                // SAFETY: `work` takes (float*, const float*, unsigned); both slices hold n floats.
                unsafe { l.launch(LaunchConfig::for_num_elems(n)) }?;
                c.computed.record(&self.s[sc])?;
                self.s[sd].wait(&c.computed)?;
            }
            if stages[2] {
                self.s[sd].memcpy_dtoh(&c.y, &mut c.host_out)?;
            }
        }
        for s in &self.s {
            s.synchronize()?;
        }
        Ok(t.elapsed().as_secs_f64())
    }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let chunks: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 22);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-pipeline needs a GPU: {e}");
            return Ok(());
        }
    };
    let k = device.compile(SRC, &[])?.kernel("work")?;
    let input: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let s0 = device.default_stream();
    let ours: Vec<OursChunk> = (0..chunks)
        .map(|_| -> cusched::Result<OursChunk> {
            Ok(OursChunk {
                host_in: Arc::new(device.host_from_slice(&input)?),
                host_out: Arc::new(Mutex::new(device.alloc_host(n)?)),
                x: device.alloc(s0, n)?,
                y: device.alloc(s0, n)?,
            })
        })
        .collect::<Result<_, _>>()?;
    device.synchronize(s0)?;
    let (up, mid, down) = (device.lane("upload")?, device.lane("compute")?, device.lane("download")?);
    let one = device.lane("single")?;

    let ctx = CudaContext::new(0)?;
    // SAFETY: the baseline orders its own work with the events it records.
    unsafe { ctx.disable_event_tracking() };
    let s = [ctx.new_stream()?, ctx.new_stream()?, ctx.new_stream()?];
    let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(SRC)?)?.load_function("work")?;
    let mut raw = Raw {
        chunks: (0..chunks)
            .map(|_| -> Res<RawChunk> {
                // SAFETY: the pinned buffers are fully written (host_in below, host_out by the
                // download) before anything reads them.
                let mut host_in = unsafe { ctx.alloc_pinned::<f32>(n) }?;
                host_in.as_mut_slice()?.copy_from_slice(&input);
                Ok(RawChunk {
                    host_in,
                    // SAFETY: as above.
                    host_out: unsafe { ctx.alloc_pinned::<f32>(n) }?,
                    x: s[0].alloc_zeros(n)?,
                    y: s[0].alloc_zeros(n)?,
                    uploaded: ctx.new_event(None)?,
                    computed: ctx.new_event(None)?,
                })
            })
            .collect::<Result<_, _>>()?,
        s,
        f,
    };

    // Warm up both, then interleave three rounds and keep each one's best.
    run_ours(&ours[..4.min(chunks)], &k, &up, &mid, &down)?;
    raw.run(3, [true; 3])?;
    run_declared(&ours[..4.min(chunks)], &k, &up, &mid, &down)?;
    let mut best = [f64::MAX; 8];
    for _ in 0..3 {
        best[0] = best[0].min(run_ours(&ours, &k, &up, &mid, &down)?);
        best[1] = best[1].min(raw.run(3, [true; 3])?);
        best[2] = best[2].min(run_ours(&ours, &k, &one, &one, &one)?);
        best[3] = best[3].min(raw.run(1, [true; 3])?);
        best[4] = best[4].min(raw.run(1, [true, false, false])?);
        best[5] = best[5].min(raw.run(1, [false, true, false])?);
        best[6] = best[6].min(raw.run(1, [false, false, true])?);
        best[7] = best[7].min(run_declared(&ours, &k, &up, &mid, &down)?);
    }
    let want: Vec<f32> = input
        .iter()
        .map(|&x| {
            let mut v = x;
            for _ in 0..48 {
                v = v * 0.999 + 0.001;
            }
            v
        })
        .collect();
    for c in &ours {
        let out = c.host_out.lock().map_err(|_| "poisoned")?;
        let out = out.read()?;
        if out.iter().zip(&want).any(|(a, b)| (a - b).abs() > 1e-5) {
            return Err("cusched pipeline result is wrong".into());
        }
    }
    let ideal = best[4].max(best[5]).max(best[6]);
    let mb = (n * 4) as f64 / 1e6;
    println!("{chunks} chunks of {n} floats ({mb:.1} MB each way); best of 3 interleaved rounds\n");
    println!(
        "stages alone (raw, one stream): upload {:.2} ms, compute {:.2} ms, download {:.2} ms; ideal overlapped = {:.2} ms\n",
        best[4] * 1e3,
        best[5] * 1e3,
        best[6] * 1e3,
        ideal * 1e3
    );
    println!("| path | time | ideal / time | speed-up over one stream |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| cusched, 3 lanes | {:.2} ms | {:.3} | {:.2}x (cusched, 1 lane: {:.2} ms) |",
        best[0] * 1e3,
        ideal / best[0],
        best[2] / best[0],
        best[2] * 1e3
    );
    println!(
        "| cusched, 3 lanes, declared jobs (no wait_committed) | {:.2} ms | {:.3} | {:.2}x |",
        best[7] * 1e3,
        ideal / best[7],
        best[2] / best[7]
    );
    println!(
        "| raw cudarc, 3 streams + events | {:.2} ms | {:.3} | {:.2}x (raw, 1 stream: {:.2} ms) |",
        best[1] * 1e3,
        ideal / best[1],
        best[3] / best[1],
        best[3] * 1e3
    );
    println!("\ncusched 3 lanes vs raw 3 streams: {}", ratio(best[0], best[1]));
    println!("cusched 3 lanes, declared jobs, vs raw 3 streams: {}", ratio(best[7], best[1]));
    Ok(())
}
