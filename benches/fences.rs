//! Fences for one DAG: 2000 dependent launches (`c = a + b` over three of sixteen buffers) spread
//! over four streams, issued once through cusched and once through cudarc with its own event
//! tracking, in the same process. Counts the `cuStreamWaitEvent`s each issues, the time per op,
//! and checks both results against a CPU replay of the DAG.
//!
//! `bench-fences` on a GPU; `bench-fences --sim` (or no GPU) runs cusched on the simulated
//! backend, where the wait counts are the same and the times are the simulator's.

mod common;

use common::*;
use cusched::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig, PushKernelArg};
use cusched::{Device, GpuRef, LaunchRecorder, SimConfig};
use std::time::Instant;

const BUFFERS: usize = 16;
const STREAMS: usize = 4;
const OPS: usize = 2000;
const N: usize = 256;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Clone, Copy)]
struct Op {
    stream: usize,
    a: usize,
    b: usize,
    c: usize,
}

/// A fixed pseudo-random DAG: each op reads two buffers and writes a third, on a random stream.
fn dag() -> Vec<Op> {
    let mut state = 0x5eed_u64;
    let mut next = move |n: usize| {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    };
    (0..OPS)
        .map(|_| {
            let c = next(BUFFERS);
            let a = (c + 1 + next(BUFFERS - 1)) % BUFFERS;
            let mut b = (c + 1 + next(BUFFERS - 1)) % BUFFERS;
            if b == a {
                b = (b + 1) % BUFFERS;
                if b == c {
                    b = (b + 1) % BUFFERS;
                }
            }
            Op { stream: next(STREAMS), a, b, c }
        })
        .collect()
}

fn initial(i: usize) -> Vec<f32> {
    (0..N).map(|j| ((i * 31 + j * 7) % 97) as f32 * 1e-3).collect()
}

fn reference(ops: &[Op]) -> Vec<Vec<f32>> {
    let mut bufs: Vec<Vec<f32>> = (0..BUFFERS).map(initial).collect();
    for op in ops {
        let v: Vec<f32> = bufs[op.a].iter().zip(&bufs[op.b]).map(|(x, y)| x + y).collect();
        bufs[op.c] = v;
    }
    bufs
}

/// Waits cudarc 0.19.10's tracking queues for the DAG. Per `CudaSlice`'s `DevicePtr` and
/// `DevicePtrMut`: a read waits on the slice's write event, a write on its read and write events;
/// every slice has both events from allocation on, and waits are queued even when the event's
/// stream is the launching stream.
fn cudarc_waits(ops: &[Op]) -> usize {
    ops.len() * (1 + 1 + 2)
}

fn run_cusched(device: &Device, ops: &[Op]) -> Res<(f64, u64, Vec<Vec<f32>>)> {
    let streams: Vec<_> = (0..STREAMS).map(|_| device.new_stream()).collect::<Result<_, _>>()?;
    let bufs: Vec<GpuRef<f32>> =
        (0..BUFFERS).map(|i| device.upload(streams[i % STREAMS], &initial(i))).collect::<Result<_, _>>()?;
    let kernel = if device.is_simulated() { None } else { Some(device.compile(ADD_SRC, &[])?.kernel("add3")?) };
    for s in &streams {
        device.synchronize(*s)?;
    }
    let before = device.stats().waits;
    let t = Instant::now();
    for op in ops {
        let (a, b, c) = (&bufs[op.a], &bufs[op.b], &bufs[op.c]);
        let s = streams[op.stream];
        match &kernel {
            Some(k) => {
                let launch = k
                    .launch(device, s, LaunchConfig::for_num_elems(N as u32))
                    .read(a)
                    .read(b)
                    .write(c)
                    .scalar(N as u32);
                // SAFETY: 1. add3 reads a and b and writes c, as declared; 2. it touches indices
                // below N, the length of every buffer; 3. the parameters are three float pointers
                // and an unsigned, as declared.
                unsafe { launch.enqueue() }?;
            }
            None => {
                let mut rec = LaunchRecorder::new_strict(s);
                rec.read(a)?.read(b)?.write(c)?;
                let (xa, xb, xc) = (a.sim_data()?, b.sim_data()?, c.sim_data()?);
                rec.launch(device, move |scope| {
                    scope.sim_kernel(move || {
                        let v: Vec<f32> = xa.read().iter().zip(xb.read().iter()).map(|(x, y)| x + y).collect();
                        *xc.lock() = v;
                    })
                })?;
            }
        }
    }
    let enqueue = t.elapsed().as_secs_f64() / ops.len() as f64;
    let waits = device.stats().waits - before;
    let out = bufs.iter().map(|b| b.download(streams[0])).collect::<Result<_, _>>()?;
    Ok((enqueue, waits, out))
}

fn run_cudarc(ops: &[Op]) -> Res<(f64, Vec<Vec<f32>>)> {
    let ctx = CudaContext::new(0)?;
    let streams: Vec<_> = (0..STREAMS).map(|_| ctx.new_stream()).collect::<Result<_, _>>()?;
    let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(ADD_SRC)?)?.load_function("add3")?;
    let mut bufs: Vec<CudaSlice<f32>> =
        (0..BUFFERS).map(|i| streams[i % STREAMS].clone_htod(&initial(i))).collect::<Result<_, _>>()?;
    for s in &streams {
        s.synchronize()?;
    }
    let n = N as u32;
    let t = Instant::now();
    for op in ops {
        // Split borrows: c is written, a and b read (the three are distinct).
        let (mut a, mut b, mut c) = (None, None, None);
        for (i, x) in bufs.iter_mut().enumerate() {
            if i == op.a {
                a = Some(&*x);
            } else if i == op.b {
                b = Some(&*x);
            } else if i == op.c {
                c = Some(x);
            }
        }
        let (Some(a), Some(b), Some(c)) = (a, b, c) else {
            return Err("the DAG names a buffer twice in one op".into());
        };
        let mut l = streams[op.stream].launch_builder(&f);
        l.arg(a).arg(b).arg(c).arg(&n);
        // SAFETY: `add3` takes three float pointers and a length; each slice holds N floats.
        unsafe { l.launch(LaunchConfig::for_num_elems(n)) }?;
    }
    let enqueue = t.elapsed().as_secs_f64() / ops.len() as f64;
    let out = bufs.iter().map(|b| streams[0].clone_dtoh(b)).collect::<Result<_, _>>()?;
    Ok((enqueue, out))
}

fn main() -> Res<()> {
    let ops = dag();
    let want = reference(&ops);
    let gpu = if sim_requested() { None } else { Device::open(0).ok() };
    let device = match &gpu {
        Some(d) => d.clone(),
        None => {
            println!("running cusched on the simulated backend (no GPU, or --sim): times are the simulator's");
            Device::sim(SimConfig { max_delay: std::time::Duration::ZERO, ..SimConfig::default() })?
        }
    };
    let (ours_t, ours_waits, ours_out) = run_cusched(&device, &ops)?;
    let ours_ok = ours_out == want;
    println!("DAG: {OPS} launches over {STREAMS} streams and {BUFFERS} buffers (2 reads + 1 write each)\n");
    println!("| path | waits issued | waits per op | host time per op | result |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| cusched | {ours_waits} | {:.2} | {} | {} |",
        ours_waits as f64 / OPS as f64,
        ns(ours_t),
        if ours_ok { "matches the CPU replay" } else { "WRONG" }
    );
    let theirs = cudarc_waits(&ops);
    if gpu.is_some() {
        let (t, out) = run_cudarc(&ops)?;
        let ok = out == want;
        println!(
            "| cudarc tracking | {theirs} | {:.2} | {} | {} |",
            theirs as f64 / OPS as f64,
            ns(t),
            if ok { "matches the CPU replay" } else { "WRONG (unordered write-after-read)" }
        );
        println!(
            "\ncusched issues {:.1}% of cudarc's waits; host time ratio {}",
            100.0 * ours_waits as f64 / theirs as f64,
            ratio(ours_t, t)
        );
    } else {
        println!("| cudarc tracking (counted from its rules) | {theirs} | {:.2} | - | - |", theirs as f64 / OPS as f64);
    }
    if !ours_ok {
        return Err("cusched's result differs from the CPU replay".into());
    }
    Ok(())
}
