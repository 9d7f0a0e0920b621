//! CUDA graphs on a real step: a small MLP forward (two cuBLASLt matmuls with a fused
//! bias + GELU epilogue, then a row-wise softmax kernel) replayed as one graph, against the
//! same three ops enqueued eagerly.
//!
//! The step, in PyTorch's terms (`benches/torch_graph_mlp.py` is the same step in PyTorch):
//!
//! - `h = gelu(x W1ᵀ + b1)`: x `[64, 256]`, W1 `[1024, 256]`, b1 `[1024]`, h `[64, 1024]`;
//! - `y = gelu(h W2ᵀ + b2)`: W2 `[256, 1024]`, b2 `[256]`, y `[64, 256]`;
//! - `p = softmax(y)` along each row: p `[64, 256]`.
//!
//! Row-major as PyTorch stores them, bf16 operands, biases and outputs of the matmuls with f32
//! accumulation (cuBLASLt's bf16 compute), GELU in its tanh form (the epilogue's; PyTorch's
//! `approximate="tanh"`); `p` is f32, from an NVRTC kernel (one block of 256 threads per row).
//! In cuBLASLt's column-major terms each matmul is `Hᵀ = op(W1) Xᵀ` with `op` a transpose
//! (PyTorch's own "TN" call), so the bias runs along the column-major rows. The weights are
//! 1 MiB of bf16 and the matmuls 67 MFLOP: a few microseconds of GPU time per step (the
//! graph row measures it), small enough that the launch cost of three ops weighs on
//! the eager step, which is what a graph saves.
//!
//! Rows, in one run, on one stream, with the same buffers (timed rounds interleaved, eager then
//! graph, the median round reported):
//!
//! - cusched eager: the three ops through one `Handles` on the stream (the inline path), N steps
//!   back to back, then a synchronize: time per step; and host time per step (the median step,
//!   timed apart in batches of 16 steps between synchronizes, so the queue never fills);
//! - cusched graph: the step recorded once with `Graph::record` (branch 0's handles) and
//!   replayed with `GraphExec::replay`, N replays back to back, then a synchronize: time per
//!   step; and host time per replay call (the median, in batches of 16 as above).
//!
//! Before timing, one eager step and one replay (into a cleared `p`) are compared: every
//! probability within 1e-3 and within 5% (see `compare`), every row summing to 1 within 1e-3;
//! a mismatch fails the bench.
//!
//! The goal: eager time per step / graph time per step ≥ 2. The issue also compares the graph
//! with the same step as a PyTorch CUDA graph on the same GPU (and PyTorch's graph of 200
//! adds, 1.31 µs per node and 5.9 µs host per replay): run `benches/torch_graph_mlp.py` there.
//!
//! `bench-graph_mlp [steps]` on a GPU (2000 steps per timed round by default; built by
//! `tools/gpu-bundle --features cublaslt`, or `cargo bench --bench graph_mlp --features cublaslt
//! -- [steps]`); without one it says so and stops. `--sim` runs the comparison (not the timing)
//! on the simulated backend: the matmuls and the softmax computed on the CPU.

mod common;

use common::*;
use cusched::blas_lt::{Epilogue, Matmul, Transpose};
use cusched::cudarc::driver::LaunchConfig;
use cusched::half::bf16;
use cusched::{Device, GpuRef, Graph, Handles, Kernel, LaunchRecorder, StreamId};
use std::time::Instant;

const BATCH: usize = 64;
const IN: usize = 256;
const HID: usize = 1024;
const OUT: usize = 256;
/// Threads per softmax block (one block per row): a multiple of 32, at most 1024.
const THREADS: u32 = 256;
/// Timed rounds per row, interleaved between the rows.
const ROUNDS: usize = 5;

/// `p[r][c] = softmax(y[r])[c]` with y bf16 (read as its bits: NVRTC then needs no header) and
/// p f32. One block per row; each reduction is a warp shuffle, then one warp over the warps'
/// results.
const SOFTMAX: &str = r#"
__device__ float bf16_to_f32(unsigned short v) { return __int_as_float(((unsigned)v) << 16); }

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every thread of the block gets the result. `red` holds one value per warp; the second
// barrier keeps it from being overwritten (by the next reduction) before every warp has read it.
__device__ float block_reduce(float v, float* red, bool is_max) {
    unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float neutral = is_max ? __int_as_float(0xff800000u) : 0.0f;
    v = lane < warps ? red[lane] : neutral;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    return v;
}

extern "C" __global__ void softmax_rows(const unsigned short* y, float* p, unsigned cols) {
    __shared__ float red[32];
    const unsigned short* row = y + (unsigned long long)blockIdx.x * cols;
    float* out = p + (unsigned long long)blockIdx.x * cols;
    float m = __int_as_float(0xff800000u);
    for (unsigned i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, bf16_to_f32(row[i]));
    m = block_reduce(m, red, true);
    float s = 0.0f;
    for (unsigned i = threadIdx.x; i < cols; i += blockDim.x) s += expf(bf16_to_f32(row[i]) - m);
    float inv = 1.0f / block_reduce(s, red, false);
    for (unsigned i = threadIdx.x; i < cols; i += blockDim.x) out[i] = expf(bf16_to_f32(row[i]) - m) * inv;
}
"#;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The step's buffers, row-major as PyTorch's tensors.
#[derive(Clone)]
struct Mlp {
    x: GpuRef<bf16>,
    w1: GpuRef<bf16>,
    b1: GpuRef<bf16>,
    h: GpuRef<bf16>,
    w2: GpuRef<bf16>,
    b2: GpuRef<bf16>,
    y: GpuRef<bf16>,
    p: GpuRef<f32>,
}

impl Mlp {
    /// Deterministic inputs, uniform in `[-scale, scale)`, with `scale` keeping every layer's
    /// output of order one (so the softmax rows are neither flat nor one-hot).
    fn new(device: &Device, s: StreamId) -> cusched::Result<Mlp> {
        let fill = |n: usize, seed: u32, scale: f32| -> Vec<bf16> {
            (0..n)
                .map(|i| {
                    let u = ((i as u32).wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) % 2000;
                    bf16::from_f32((u as f32 / 1000.0 - 1.0) * scale)
                })
                .collect()
        };
        // Uniform in [-a, a) has variance a²/3: a = sqrt(3 / fan_in) gives weights of variance
        // 1 / fan_in, so a layer keeps its input's spread (W2's is doubled: GELU halves it or
        // so). With these inputs y lies in about [-0.2, 2.3] and p in [6e-4, 7e-3].
        let (a1, a2) = ((3.0 / IN as f32).sqrt(), (3.0 / HID as f32).sqrt());
        Ok(Mlp {
            x: device.upload(s, &fill(BATCH * IN, 1, 1.0))?,
            w1: device.upload(s, &fill(HID * IN, 2, a1))?,
            b1: device.upload(s, &fill(HID, 3, 0.5))?,
            h: device.alloc_zeros(s, BATCH * HID)?,
            w2: device.upload(s, &fill(OUT * HID, 4, 2.0 * a2))?,
            b2: device.upload(s, &fill(OUT, 5, 0.5))?,
            y: device.alloc_zeros(s, BATCH * OUT)?,
            p: device.alloc_zeros(s, BATCH * OUT)?,
        })
    }
}

/// One step on `h`'s stream: the eager handles, or branch 0 of a recording (the same calls).
/// `softmax` is `None` on the simulator, where the softmax is a host closure.
fn step(h: &mut Handles, softmax: Option<&Kernel>, m: &Mlp) -> cusched::Result<()> {
    let lt = h.blas_lt()?;
    // Row-major [BATCH, HID] is column-major HID x BATCH: Hᵀ = op(W1) Xᵀ, with W1 stored as
    // column-major IN x HID (PyTorch's [HID, IN] row-major) and transposed.
    lt.matmul(
        &Matmul::new(HID, BATCH, IN, &m.w1, &m.x, &m.h)
            .transpose(Transpose::Yes, Transpose::No)
            .epilogue(Epilogue::GeluBias(&m.b1)),
    )?;
    lt.matmul(
        &Matmul::new(OUT, BATCH, HID, &m.w2, &m.h, &m.y)
            .transpose(Transpose::Yes, Transpose::No)
            .epilogue(Epilogue::GeluBias(&m.b2)),
    )?;
    match softmax {
        Some(kernel) => {
            let cfg = LaunchConfig { grid_dim: (BATCH as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
            let launch = h.launch(kernel, cfg).read(&m.y).write(&m.p).scalar(OUT as u32);
            // SAFETY: 1. `softmax_rows` reads only `y` and writes only `p`, as declared; 2. with
            // BATCH blocks and cols = OUT it touches rows 0..BATCH of OUT elements, the lengths
            // of both buffers; 3. its parameters are two pointers (bf16 read as its 16 bits, and
            // f32) and an unsigned, as declared.
            unsafe { launch.enqueue() }?;
        }
        None => {
            let mut rec = LaunchRecorder::new_strict(h.stream()).named("softmax_rows");
            rec.read(&m.y)?.write(&m.p)?;
            let (ys, ps) = (m.y.sim_data()?, m.p.sim_data()?);
            rec.launch(h.device(), |scope| {
                scope.sim_kernel(move || {
                    let y = ys.read();
                    let mut p = ps.lock();
                    for (yr, pr) in y.chunks(OUT).zip(p.chunks_mut(OUT)) {
                        let m = yr.iter().map(|v| v.to_f32()).fold(f32::NEG_INFINITY, f32::max);
                        let s: f32 = yr.iter().map(|v| (v.to_f32() - m).exp()).sum();
                        for (o, v) in pr.iter_mut().zip(yr) {
                            *o = (v.to_f32() - m).exp() / s;
                        }
                    }
                })
            })?;
        }
    }
    Ok(())
}

fn main() -> Res<()> {
    let steps: usize = std::env::args().skip(1).find_map(|s| s.parse().ok()).unwrap_or(2000);
    let device = if sim_requested() {
        Device::sim(cusched::SimConfig::default())?
    } else {
        match Device::open(0) {
            Ok(d) => d,
            Err(e) => {
                println!(
                    "bench-graph_mlp: needs a CUDA GPU (graphs replay GPU work; --sim checks the step only): {e}; \
                     skipped"
                );
                return Ok(());
            }
        }
    };
    println!(
        "bench-graph_mlp: x [{BATCH}, {IN}] -> gelu(linear) [{BATCH}, {HID}] -> gelu(linear) [{BATCH}, {OUT}] -> \
         softmax, bf16 (f32 accumulation), p f32"
    );
    let s = device.new_stream()?;
    let mlp = Mlp::new(&device, s)?;
    let softmax = match device.is_simulated() {
        true => None,
        false => Some(device.compile(SOFTMAX, &[])?.kernel("softmax_rows")?),
    };
    let mut eager = Handles::new(&device, s)?;

    // The reference: one eager step (which also makes the matmuls' plans and workspace).
    step(&mut eager, softmax.as_ref(), &mlp)?;
    let want = mlp.p.download(s)?;
    let (mr, kr) = (mlp.clone(), softmax.clone());
    let graph = Graph::record(&device, move |rec| step(rec.handles(0)?, kr.as_ref(), &mr))?;
    let (ops, buffers) = (graph.ops(), graph.buffers());
    let exec = graph.instantiate()?;
    // Cleared first, so that a replay that wrote nothing cannot match.
    mlp.p.copy_from_slice(s, &vec![0.0f32; BATCH * OUT])?;
    exec.replay(s)?.wait()?;
    let got = mlp.p.download(s)?;
    let diff = compare(&got, &want)?;
    println!(
        "graph of {ops} ops declaring {buffers} buffers; its replay matches the eager step: every probability \
         within 1e-3 and 5% (max |diff| {diff:.2e}), rows sum to 1"
    );
    if device.is_simulated() {
        println!("simulated backend: timings need a GPU; done");
        return Ok(());
    }
    let (major, minor) = device.compute_capability()?;
    println!("GPU 0 (compute capability {major}.{minor}), {steps} steps per timed round, {ROUNDS} rounds\n");

    let kernel = softmax.as_ref();
    let sync = || -> Res<()> { Ok(device.synchronize(s)?) };
    let mut eager_step = || -> Res<()> { Ok(step(&mut eager, kernel, &mlp)?) };
    let mut replay = || -> Res<()> { Ok(exec.replay(s).map(drop)?) };
    // Warm-up: the eager handles' plans are made; a few replays page the graph in.
    for _ in 0..20 {
        eager_step()?;
        replay()?;
    }
    sync()?;
    let (mut eager_t, mut graph_t) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        eager_t.push(per_step(steps, &mut eager_step, &sync)?);
        graph_t.push(per_step(steps, &mut replay, &sync)?);
    }
    let (eager_step_t, graph_step_t) = (median(&mut eager_t), median(&mut graph_t));
    let eager_host = host_per_call(steps, &mut eager_step, &sync)?;
    let graph_host = host_per_call(steps, &mut replay, &sync)?;

    println!("| row | per step | host per call |");
    println!("| --- | --- | --- |");
    println!("| cusched eager (3 ops on one stream) | {} | {} per step |", us(eager_step_t), us(eager_host));
    println!("| cusched graph (1 replay) | {} | {} per replay |", us(graph_step_t), us(graph_host));
    let speedup = eager_step_t / graph_step_t;
    println!(
        "\ngoal: eager / graph per step ≥ 2x: {}: {}",
        ratio(graph_step_t, eager_step_t),
        if speedup >= 2.0 { "met" } else { "missed" }
    );
    println!(
        "compare the graph row with `python3 benches/torch_graph_mlp.py` on the same GPU (the same step as a \
         PyTorch CUDA graph, and its graph of 200 adds)"
    );
    Ok(())
}

/// Fails unless `got` and `want` agree everywhere within 1e-3 and within 5% of `want`, and
/// every row of `got` sums to 1 within 1e-3; returns the largest difference.
///
/// The probabilities are about 1e-3 (0.6e-3 to 7e-3 with these inputs), so 1e-3 alone would
/// pass a badly wrong step; 5% still passes the graph's matmuls picking another algorithm than
/// the eager handles' (a `y` one bf16 step apart moves a probability by up to about 2%).
fn compare(got: &[f32], want: &[f32]) -> Res<f32> {
    let mut max = 0.0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d.is_nan() || d > 1e-3 || d > 5e-2 * w.abs() {
            return Err(
                format!("graph replay differs from the eager step at [{}, {}]: {g} vs {w}", i / OUT, i % OUT).into()
            );
        }
        max = max.max(d);
    }
    for (r, row) in got.chunks(OUT).enumerate() {
        let sum: f32 = row.iter().sum();
        if sum.is_nan() || (sum - 1.0).abs() > 1e-3 {
            return Err(format!("softmax row {r} sums to {sum}, not 1").into());
        }
    }
    Ok(max)
}

/// Seconds per call of `op` over `n` calls back to back, then `sync`.
fn per_step(n: usize, op: &mut impl FnMut() -> Res<()>, sync: &impl Fn() -> Res<()>) -> Res<f64> {
    sync()?;
    let t = Instant::now();
    for _ in 0..n {
        op()?;
    }
    sync()?;
    Ok(t.elapsed().as_secs_f64() / n as f64)
}

/// The median host seconds of one call of `op`, timed apart in batches of 16 between `sync`s
/// (so the queue never fills and a call never waits for the GPU).
fn host_per_call(n: usize, op: &mut impl FnMut() -> Res<()>, sync: &impl Fn() -> Res<()>) -> Res<f64> {
    let mut host = Vec::with_capacity(n);
    for _ in 0..n.div_ceil(16) {
        for _ in 0..16 {
            let t = Instant::now();
            op()?;
            host.push(t.elapsed().as_secs_f64());
        }
        sync()?;
    }
    Ok(median(&mut host))
}
