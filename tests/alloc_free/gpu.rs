//! A full inline launch on CUDA allocates nothing on the calling thread in steady state: a
//! strict recorder around a raw `cuLaunchKernel` (cudarc's launch builder allocates its
//! argument list, so the test launches through the driver call itself), on one stream and
//! alternating over two.

use crate::allocs;
use crate::common::*;
use cusched::cudarc::driver::{result, LaunchConfig};
use cusched::{Device, GpuRef, Kernel, LaunchRecorder, StreamId};
use std::ffi::c_void;

const N: u32 = 256;
const SRC: &str = r#"
extern "C" __global__ void add3(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"#;

struct Bufs {
    a: GpuRef<f32>,
    b: GpuRef<f32>,
    c: GpuRef<f32>,
}

fn inline_launch(d: &Device, s: StreamId, k: &Kernel, x: &Bufs) -> cusched::Result<()> {
    let f = k.function()?.cu_function();
    let (mut pa, mut pb, mut pc, mut n) = (x.a.raw_device_ptr()?, x.b.raw_device_ptr()?, x.c.raw_device_ptr()?, N);
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(&x.a)?.read(&x.b)?.write(&x.c)?;
    rec.launch(d, |scope| {
        // SAFETY: the launch below reads `a` and `b` and writes `c`, as declared, on this stream
        // before the closure returns, and makes no cudarc memory.
        let cuda = unsafe { scope.cuda_stream() }?;
        cuda.context().bind_to_thread().map_err(|status| cusched::Error::Driver { call: "cuCtxSetCurrent", status })?;
        let stream = cuda.cu_stream();
        let mut params: [*mut c_void; 4] = [
            (&mut pa as *mut u64).cast(),
            (&mut pb as *mut u64).cast(),
            (&mut pc as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
        ];
        let cfg = LaunchConfig::for_num_elems(N);
        // SAFETY: 1. `f` is a function of a module loaded in this device's context, which the
        // stream belongs to and which is bound above; 2. `add3` takes three float pointers and an unsigned, passed as such; 3. each buffer
        // holds N floats and its uses are declared and fenced.
        unsafe { result::launch_kernel(f, cfg.grid_dim, cfg.block_dim, 0, stream, &mut params) }
            .map_err(|status| cusched::Error::Driver { call: "cuLaunchKernel", status })
    })
}

/// Allocations per op over `n` ops after a warm-up, alternating over `streams`.
fn per_op(d: &Device, streams: &[StreamId], k: &Kernel, x: &Bufs, n: usize) -> f64 {
    for i in 0..1000 {
        inline_launch(d, streams[i % streams.len()], k, x).unwrap();
    }
    for &s in streams {
        d.synchronize(s).unwrap();
    }
    // The event slab grows (one allocation) whenever more events are in flight than ever
    // before, which depends on how far the GPU lags: steady state is the first window of `n`
    // ops in which that high-water mark held. Later windows must then stay at zero too.
    let mut windows = Vec::new();
    for _ in 0..8 {
        let before = allocs();
        for i in 0..n {
            inline_launch(d, streams[i % streams.len()], k, x).unwrap();
        }
        let got = allocs() - before;
        for &s in streams {
            d.synchronize(s).unwrap();
        }
        windows.push(got);
        if windows.len() >= 2 && windows[windows.len() - 2..] == [0, 0] {
            break;
        }
    }
    eprintln!("allocations per window of {n} ops on {} stream(s): {windows:?}", streams.len());
    let last_two: u64 = windows.iter().rev().take(2).sum();
    last_two as f64 / (2 * n) as f64
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_full_inline_launch_allocates_nothing_in_steady_state() {
    let Some(d) = gpu() else { return };
    let s0 = d.default_stream();
    let k = d.compile(SRC, &[]).unwrap().kernel("add3").unwrap();
    let x = Bufs {
        a: d.alloc_zeros(s0, N as usize).unwrap(),
        b: d.alloc_zeros(s0, N as usize).unwrap(),
        c: d.alloc_zeros(s0, N as usize).unwrap(),
    };
    let one = per_op(&d, &[s0], &k, &x, 2000);
    let recorded_one = d.stats().recorded;
    let s1 = d.new_stream().unwrap();
    let two = per_op(&d, &[s0, s1], &k, &x, 2000);
    eprintln!(
        "allocations per op: one stream {one}, two streams {two}; events recorded while one stream: {recorded_one}"
    );
    assert_eq!(one, 0.0, "{one} allocations per inline launch on one stream");
    assert_eq!(two, 0.0, "{two} allocations per inline launch over two streams");
}

/// The typed launch adds only its completion's shared state, which is allocated per op until
/// completions allocate lazily; everything under it (the op path) allocates nothing.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_typed_launch_allocates_at_most_its_completion() {
    let Some(d) = gpu() else { return };
    let s0 = d.default_stream();
    let k = d.compile(SRC, &[]).unwrap().kernel("add3").unwrap();
    let x = Bufs {
        a: d.alloc_zeros(s0, N as usize).unwrap(),
        b: d.alloc_zeros(s0, N as usize).unwrap(),
        c: d.alloc_zeros(s0, N as usize).unwrap(),
    };
    let typed = |s: StreamId| {
        let launch = k.launch(&d, s, LaunchConfig::for_num_elems(N)).read(&x.a).read(&x.b).write(&x.c).scalar(N);
        // SAFETY: 1. add3 reads a and b and writes c, as declared; 2. it touches indices below
        // N, the length of all three; 3. the parameters are three float pointers and an
        // unsigned, as declared.
        drop(unsafe { launch.enqueue() }.unwrap());
    };
    let s1 = d.new_stream().unwrap();
    for (label, streams) in [("one stream", vec![s0]), ("two streams", vec![s0, s1])] {
        for i in 0..1000 {
            typed(streams[i % streams.len()]);
        }
        d.synchronize(s0).unwrap();
        let before = allocs();
        for i in 0..2000 {
            typed(streams[i % streams.len()]);
        }
        let got = (allocs() - before) as f64 / 2000.0;
        for &s in &streams {
            d.synchronize(s).unwrap();
        }
        eprintln!("typed launch, {label}: {got} allocations per op");
        assert!(got <= 1.0, "{got} allocations per typed launch ({label}): more than the completion's");
    }
}
