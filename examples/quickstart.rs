//! The README's main example: a pipeline over three lanes (upload, compute, download) over many
//! chunks, ordered by the tracker alone, with the result checked and the stage overlap printed.
//!
//! `cargo run --release --example quickstart` uses GPU 0, or the CPU simulation when there is
//! none (and says so). `-- --trace out.json` also writes the pipelined run's timeline as
//! Chrome-trace JSON (open it in Perfetto or chrome://tracing).

use cusched::cudarc::driver::{LaunchConfig, PushKernelArg};
use cusched::{Completion, Device, Error, GpuRef, HostBuffer, Kernel, Lane, Result, Timeline, TraceOptions};
use std::time::{Duration, Instant};

const SRC: &str = r#"
extern "C" __global__ void poly(float* y, const float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = (v * v + 1.0f) * 0.5f; }
}
"#;

fn expected(v: f32) -> f32 {
    (v * v + 1.0) * 0.5
}

/// `y = poly(x)` on the lane's stream: a raw kernel launch on CUDA, a host closure on the
/// simulator, declared on a recorder either way.
fn compute(cx: &mut cusched::Handles, kernel: Option<&Kernel>, x: &GpuRef<f32>, y: &GpuRef<f32>) -> Result<()> {
    let mut rec = cx.recorder().named("poly");
    rec.read(x)?.write(y)?;
    rec.launch(cx.device(), |scope| match kernel {
        Some(k) => {
            let n = x.len() as u32;
            // SAFETY: (1) the kernel reads `x` and writes `y`, as declared, on the launch's
            // stream, enqueued before the closure returns, and no cudarc memory is made; (2) the
            // arguments match `poly`, and both buffers hold `n` floats of this device.
            unsafe {
                let mut b = scope.cuda_stream()?.launch_builder(k.function()?);
                b.arg(y.cuda_slice()?).arg(x.cuda_slice()?).arg(&n);
                b.launch(LaunchConfig::for_num_elems(n))
            }
            .map(drop)
            .map_err(|status| Error::Driver { call: "cuLaunchKernel", status })
        }
        None => {
            let (xs, ys) = (x.sim_data()?, y.sim_data()?);
            scope.sim_kernel(move || {
                let xs = xs.read().to_vec();
                for (o, v) in ys.lock().iter_mut().zip(xs) {
                    *o = expected(v);
                }
            })
        }
    })
}

struct Stages {
    up: Lane,
    mid: Lane,
    down: Lane,
}

/// One chunk's buffers: pinned input (filled), pinned output, and the device buffers.
struct Chunk {
    index: usize,
    host_in: HostBuffer<f32>,
    host_out: HostBuffer<f32>,
    x: GpuRef<f32>,
    y: GpuRef<f32>,
}

/// Allocates and fills every chunk up front, so the timed run measures the pipeline, not
/// pinned-memory allocation.
fn prepare(device: &Device, chunks: usize, n: usize) -> Result<Vec<Chunk>> {
    (0..chunks)
        .map(|c| {
            let input: Vec<f32> = (0..n).map(|i| ((i + c * 7) % 1000) as f32 * 0.01).collect();
            Ok(Chunk {
                index: c,
                host_in: device.host_from_slice(&input)?,
                host_out: device.alloc_host::<f32>(n)?,
                x: device.alloc::<f32>(device.default_stream(), n)?,
                y: device.alloc::<f32>(device.default_stream(), n)?,
            })
        })
        .collect()
}

/// Runs every chunk through upload, compute and download; returns the wall time.
fn run(stages: &Stages, kernel: Option<&Kernel>, chunks: Vec<Chunk>) -> Result<Duration> {
    let start = Instant::now();
    let mut results: Vec<(usize, Completion<HostBuffer<f32>>)> = Vec::with_capacity(chunks.len());
    for Chunk { index: c, host_in, mut host_out, x, y } in chunks {
        // Declared jobs: each reserves its buffers when submitted, so every stage is ordered
        // after the one submitted before it (no wait in between), and the GPU work of different
        // chunks overlaps across the three streams. Each closure gets a handle to every buffer
        // it declared; a `HostBuffer` has one owner, so its place holds `()` and the closure
        // takes the buffer itself.
        stages.up.job().read(&host_in).write(&x).submit(move |cx, ((), x)| {
            x.copy_from_host(cx.stream(), &host_in)?;
            cx.keep(host_in);
            Ok(())
        });
        let kernel = kernel.cloned();
        stages.mid.job().read(&x).write(&y).submit(move |cx, (x, y)| compute(cx, kernel.as_ref(), &x, &y));
        let downloaded = stages.down.job().read(&y).write(&host_out).submit(move |cx, (y, ())| {
            y.copy_to_host(cx.stream(), &mut host_out)?;
            Ok(host_out)
        });
        results.push((c, downloaded));
    }
    let outputs: Vec<(usize, Result<HostBuffer<f32>>)> = results.into_iter().map(|(c, d)| (c, d.wait())).collect();
    let elapsed = start.elapsed();
    for (c, out) in outputs {
        let out = out?;
        let out = out.read()?;
        // The GPU contracts `v * v + 1` into one fused multiply-add, so compare within f32
        // rounding rather than bit for bit.
        let bad = out
            .iter()
            .enumerate()
            .filter(|(i, &v)| {
                let want = expected(((i + c * 7) % 1000) as f32 * 0.01);
                (v - want).abs() > 1e-6 * want.abs().max(1.0)
            })
            .count();
        if bad > 0 {
            return Err(Error::InvalidArgument { arg: "result", reason: format!("chunk {c}: {bad} wrong elements") });
        }
    }
    Ok(elapsed)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let trace_path = match args.iter().position(|a| a == "--trace") {
        Some(i) => match args.get(i + 1) {
            Some(p) => Some(p.clone()),
            None => {
                return Err(Error::InvalidArgument {
                    arg: "--trace",
                    reason: "needs a file name: --trace out.json".into(),
                })
            }
        },
        None => None,
    };
    // CUDA device 0 if there is one, else the CPU simulation (logged at info).
    let device = Device::open_or_sim()?;
    println!("running on {}", if device.is_simulated() { "the CPU simulation" } else { "CUDA device 0" });
    let kernel = if device.is_simulated() { None } else { Some(device.compile(SRC, &[])?.kernel("poly")?) };
    let (chunks, n) = if device.is_simulated() { (32, 1 << 14) } else { (64, 1 << 22) };
    let pipelined = Stages { up: device.lane("upload")?, mid: device.lane("compute")?, down: device.lane("download")? };
    let one = device.lane("single")?;
    let serial = Stages { up: one.clone(), mid: one.clone(), down: one };

    run(&pipelined, kernel.as_ref(), prepare(&device, 4, n)?)?; // warm-up: module load, pools
    let timeline = trace_path.as_ref().map(|_| Timeline::new());
    if let Some(t) = &timeline {
        device.set_trace(t.clone(), TraceOptions { gpu_timing: true })?;
    }
    let work = prepare(&device, chunks, n)?;
    let t_pipe = run(&pipelined, kernel.as_ref(), work)?;
    device.clear_trace();
    let t_one = run(&serial, kernel.as_ref(), prepare(&device, chunks, n)?)?;
    let stats = device.stats();
    println!(
        "{chunks} chunks of {n} floats, results checked: 3 lanes {:.1} ms, 1 lane {:.1} ms; \
         overlap speed-up {:.2}x; tracker issued {} waits, {} events, created {} events",
        t_pipe.as_secs_f64() * 1e3,
        t_one.as_secs_f64() * 1e3,
        t_one.as_secs_f64() / t_pipe.as_secs_f64(),
        stats.waits,
        stats.events,
        device.events_created()
    );
    if let (Some(t), Some(path)) = (&timeline, &trace_path) {
        // The completion thread may still be delivering the last ops' completion hooks.
        let mut seen = usize::MAX;
        while seen != t.spans().len() {
            seen = t.spans().len();
            std::thread::sleep(Duration::from_millis(20));
        }
        t.write_chrome_trace(path)?;
        println!("wrote a timeline of the pipelined run ({seen} spans) to {path}");
    }
    Ok(())
}
