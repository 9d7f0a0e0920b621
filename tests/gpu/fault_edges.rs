//! Edges of the fault and teardown paths on a real GPU: a completion of a launch with no
//! tracked buffers must cover its kernel, and dropping library handles or the last handles of
//! a compiled module while a long kernel runs must not block the dropping thread.

use crate::common::*;
use cusched::cudarc::driver::{sys, LaunchConfig};
use cusched::fft::{Direction, FftLayout};
use cusched::{Complex, Device, Handles, Kernel, StreamId};
use std::time::{Duration, Instant};

const SRC: &str = r#"
extern "C" __global__ void spin(unsigned long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < (long long)cycles) {}
}
"#;

/// About 200 ms at 2 GHz, more on slower clocks.
const LONG: u64 = 400_000_000;

fn spin_kernel(d: &Device) -> Kernel {
    d.compile(SRC, &[]).unwrap().kernel("spin").unwrap()
}

/// Whether every kernel enqueued on `s` so far has finished (`cuStreamQuery`).
fn stream_idle(d: &Device, s: StreamId) -> bool {
    // SAFETY: the stream is only queried: no work is enqueued and no memory made.
    let raw = unsafe { d.cuda_stream(s) }.unwrap();
    raw.context().bind_to_thread().unwrap();
    // SAFETY: a live stream of the bound context.
    match unsafe { sys::cuStreamQuery(raw.cu_stream()) } {
        sys::CUresult::CUDA_SUCCESS => true,
        sys::CUresult::CUDA_ERROR_NOT_READY => false,
        other => panic!("cuStreamQuery failed: {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_scalar_only_launch_completes_only_after_its_kernel() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let spin = spin_kernel(&d);
    // No tracked buffers: the launch's recorder has no uses.
    let launch = spin.launch(&d, s, LaunchConfig::for_num_elems(1)).scalar(LONG);
    // SAFETY: 1. `spin` reads no memory and writes none; 2. its one parameter is a u64.
    unsafe { launch.enqueue() }.unwrap().wait().unwrap();
    assert!(stream_idle(&d, s), "the completion resolved while its kernel was still running");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_library_handles_while_a_kernel_runs_does_not_block() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let spin = spin_kernel(&d);
    let mut h = Handles::new(&d, s).unwrap();
    // Make a cuBLAS handle and a cuFFT plan on the stream.
    h.blas().unwrap();
    let n = 256;
    let x = d.upload(s, &vec![Complex::new(1.0f32, 0.0); n]).unwrap();
    let y = d.alloc_zeros::<Complex<f32>>(s, n).unwrap();
    h.fft().unwrap().c2c(&FftLayout::d1(n), &x, &y, Direction::Forward).unwrap().wait().unwrap();
    let launch = spin.launch(&d, s, LaunchConfig::for_num_elems(1)).scalar(LONG);
    // SAFETY: 1. `spin` reads no memory and writes none; 2. its one parameter is a u64.
    let running = unsafe { launch.enqueue() }.unwrap();
    let kernel_start = Instant::now();
    let t = Instant::now();
    drop(h);
    let dropped_in = t.elapsed();
    let kernel_busy = !stream_idle(&d, s);
    running.wait().unwrap();
    d.synchronize(s).unwrap();
    let kernel_took = kernel_start.elapsed();
    assert!(kernel_busy || kernel_took > Duration::from_millis(50), "the kernel must still run during the drop");
    assert!(
        dropped_in < Duration::from_millis(5),
        "dropping Handles took {dropped_in:?} while a {kernel_took:?} kernel ran: a destroy blocked the host"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_the_last_module_handle_while_its_kernel_runs_does_not_block() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    // A source no other test compiles, so no other handle shares its module.
    let src = format!("{SRC}\n// dropping_the_last_module_handle_while_its_kernel_runs_does_not_block\n");
    let module = d.compile(&src, &[]).unwrap();
    let spin = module.kernel("spin").unwrap();
    // The device's module cache holds the module too: advancing the generation and compiling
    // again drops its entry, leaving `module` and `spin` the last holders. Loading a module
    // waits for the kernels running in the context, so this happens before the spin starts.
    d.advance_generation();
    let fresh = d.compile(&src, &[]).unwrap();
    let fresh_spin = fresh.kernel("spin").unwrap();
    let launch = fresh_spin.launch(&d, s, LaunchConfig::for_num_elems(1)).scalar(LONG);
    // SAFETY: 1. `spin` reads no memory and writes none; 2. its one parameter is a u64.
    let running = unsafe { launch.enqueue() }.unwrap();
    let kernel_start = Instant::now();
    let busy_before = !stream_idle(&d, s);
    let t = Instant::now();
    drop(spin);
    drop(module);
    let dropped_in = t.elapsed();
    running.wait().unwrap();
    d.synchronize(s).unwrap();
    let kernel_took = kernel_start.elapsed();
    assert!(busy_before, "the kernel finished before the drop ({kernel_took:?}): the test proves nothing");
    assert!(
        dropped_in < Duration::from_millis(5),
        "dropping the last Kernel and Module took {dropped_in:?} while a {kernel_took:?} kernel ran: the module \
         unload blocked the host"
    );
    // The device still works: the recompiled module launches and completes.
    assert!(d.poisoned().is_none());
    let again = fresh_spin.launch(&d, s, LaunchConfig::for_num_elems(1)).scalar(1000u64);
    // SAFETY: 1. `spin` reads no memory and writes none; 2. its one parameter is a u64.
    unsafe { again.enqueue() }.unwrap().wait().unwrap();
}
