//! CUDA graphs: 200 empty kernels, replayed as one graph.
//!
//! - raw eager: 200 launches of the kernel through raw cudarc (tracking off), then a
//!   synchronize: the eager cost per kernel;
//! - raw graph: the same 200 launches stream-captured through cudarc into a graph, replayed
//!   with `cuGraphLaunch`: GPU time per node (K replays back to back, then a synchronize,
//!   divided by K × 200: the GPU is the bottleneck) and host time per replay (the launch call);
//! - cusched graph: the same 200 typed launches recorded with `Graph::record`, replayed with
//!   `GraphExec::replay` (one tracked op each). Kernel `i` declares a read-write of buffers
//!   `i % B` and `(i + 1) % B` of B (B = 1, 8, 64: the replay declares B buffers), so that
//!   consecutive kernels conflict and the graph is one chain of 200 nodes, the raw graph's
//!   shape, whatever B: GPU time per node and host time per replay.
//!
//! The goals: GPU time per node ≤ 1.05 µs, and host time per replay ≤ 3 µs + 0.05 µs per
//! declared buffer, each against the raw graph of the same run. The graph rows (raw and the
//! three cusched ones) are timed in 5 rounds, every row in turn, and each row's median round is
//! reported.
//!
//! `bench-graph [replays]` on a GPU; without one it says so and stops.

mod common;

use common::*;
use cusched::cudarc::driver::{sys, CudaContext, LaunchConfig, PushKernelArg};
use cusched::{Device, GpuRef, Graph};
use std::time::Instant;

const SRC: &str = r#"
extern "C" __global__ void empty(float* p, float* q, unsigned n) {
    if (n == 0xffffffffu) p[threadIdx.x] = q[threadIdx.x];
}
"#;
const NODES: usize = 200;
/// Rounds of every row in turn.
const ROUNDS: usize = 5;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let replays: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let device = match Device::open(0) {
        Ok(d) if !sim_requested() => d,
        _ => {
            println!("bench-graph: needs a CUDA GPU (graphs replay GPU work); skipped");
            return Ok(());
        }
    };
    println!("bench-graph: {NODES} empty kernels per graph, {replays} replays per row\n");
    println!("| row | GPU per node | host per replay |");
    println!("| --- | --- | --- |");

    // Raw cudarc: its own context object (tracking off) and stream.
    let ctx = CudaContext::new(0)?;
    // SAFETY: the baseline's one slice is used only by its own launches, on one stream.
    unsafe { ctx.disable_event_tracking() };
    let st = ctx.new_stream()?;
    let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(SRC)?)?.load_function("empty")?;
    let p = st.alloc_zeros::<f32>(32)?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let n = 32u32;
    let launch_all = || -> Res<()> {
        for _ in 0..NODES {
            // SAFETY: `empty` takes two float pointers and an unsigned, and touches nothing unless n
            // is all ones.
            unsafe { st.launch_builder(&f).arg(&p).arg(&p).arg(&n).launch(cfg) }?;
        }
        Ok(())
    };
    launch_all()?;
    st.synchronize()?;
    let t = Instant::now();
    for _ in 0..replays / 10 {
        launch_all()?;
    }
    st.synchronize()?;
    let eager = t.elapsed().as_secs_f64() / ((replays / 10) * NODES) as f64;
    println!("| raw eager (per kernel) | {} | |", us(eager));

    st.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    launch_all()?;
    let raw_graph = st
        .end_capture(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)?
        .ok_or("empty capture")?;
    let s = device.new_stream()?;
    let kernel = device.compile(SRC, &[])?.kernel("empty")?;
    let mut execs = Vec::new();
    for buffers in [1usize, 8, 64] {
        let bufs: Vec<GpuRef<f32>> =
            (0..buffers).map(|_| device.alloc_zeros::<f32>(s, 32)).collect::<cusched::Result<_>>()?;
        let k = kernel.clone();
        let graph = Graph::record(&device, move |rec| {
            let h = rec.handles(0)?;
            for i in 0..NODES {
                let (b, c) = (&bufs[i % bufs.len()], &bufs[(i + 1) % bufs.len()]);
                let launch = h.launch(&k, cfg).read_write(b).read_write(c).scalar(32u32);
                // SAFETY: `empty` takes two float pointers and an unsigned, and touches nothing
                // unless n is all ones.
                unsafe { launch.enqueue() }?;
            }
            Ok(())
        })?;
        let exec = graph.instantiate()?;
        exec.replay(s)?.wait()?;
        execs.push((buffers, exec));
    }
    // Rounds of every row in turn (raw first), each row's median over the rounds: the host
    // time of one launch call moves with the machine's state over a run, and rows measured one
    // after the other saw different states.
    let per_round = (replays / ROUNDS).max(16);
    let mut raw_rounds = (Vec::new(), Vec::new());
    let mut rounds: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); execs.len()];
    for _ in 0..ROUNDS {
        let (g, h) = time(per_round, || Ok(raw_graph.launch()?), || Ok(st.synchronize()?))?;
        raw_rounds.0.push(g);
        raw_rounds.1.push(h);
        for ((_, exec), r) in execs.iter().zip(rounds.iter_mut()) {
            let (g, h) =
                time(per_round, || exec.replay(s).map(drop).map_err(Into::into), || Ok(device.synchronize(s)?))?;
            r.0.push(g);
            r.1.push(h);
        }
    }
    let (gpu_raw, host_raw) = (median(&mut raw_rounds.0), median(&mut raw_rounds.1));
    println!("| raw graph | {} | {} |", us(gpu_raw), us(host_raw));
    let mut rows = Vec::new();
    for ((buffers, _), (mut g, mut h)) in execs.iter().zip(rounds) {
        let (gpu, host) = (median(&mut g), median(&mut h));
        println!("| cusched graph, {buffers} declared buffers | {} | {} |", us(gpu), us(host));
        rows.push((*buffers, gpu, host));
    }

    println!("\ngoals (against the raw graph of this run):");
    for (buffers, gpu, host) in rows {
        let budget = 3e-6 + 0.05e-6 * buffers as f64;
        let verdict = |ok: bool| if ok { "met" } else { "missed" };
        println!(
            "- {buffers} buffers: GPU per node {} (goal ≤ 1.05 µs; raw {}: {}); host per replay {} (goal ≤ {}; raw {}): {}",
            us(gpu),
            us(gpu_raw),
            verdict(gpu <= 1.05e-6),
            us(host),
            us(budget),
            us(host_raw),
            verdict(host <= budget)
        );
    }
    Ok(())
}

/// GPU seconds per node (`replays` replays back to back, then `sync`) and the median host
/// seconds of one `replay` call (measured apart, in batches of 16 between synchronizes, so the
/// queue never fills).
fn time(replays: usize, mut replay: impl FnMut() -> Res<()>, sync: impl Fn() -> Res<()>) -> Res<(f64, f64)> {
    for _ in 0..20 {
        replay()?;
    }
    sync()?;
    let t = Instant::now();
    for _ in 0..replays {
        replay()?;
    }
    sync()?;
    let gpu = t.elapsed().as_secs_f64() / (replays * NODES) as f64;
    let mut host = Vec::with_capacity(replays);
    for _ in 0..replays / 16 {
        for _ in 0..16 {
            let t = Instant::now();
            replay()?;
            host.push(t.elapsed().as_secs_f64());
        }
        sync()?;
    }
    Ok((gpu, median(&mut host)))
}
