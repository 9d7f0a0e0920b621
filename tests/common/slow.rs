//! Slow kernels for hazard tests on a real GPU: each spins for a given number of cycles before
//! touching memory, so that a missing fence shows up as wrong data.

use cusched::cudarc::driver::{LaunchConfig, PushKernelArg};
use cusched::{Device, Error, GpuRef, Kernel, LaunchRecorder, Result, StreamId};

const SRC: &str = r#"
__device__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
extern "C" __global__ void fill(float* out, float v, unsigned n, long long cycles) {
    spin(cycles);
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
extern "C" __global__ void copy(float* out, const float* in, unsigned n, long long cycles) {
    // Spin before reading: a writer that does not wait for this reader overwrites `in` first.
    spin(cycles);
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
extern "C" __global__ void add(float* x, float v, unsigned n, long long cycles) {
    spin(cycles);
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}
"#;

/// About 10 ms on an H100 at ~2 GHz.
pub const SLOW: i64 = 20_000_000;
/// Elements of the test buffers.
pub const N: usize = 1 << 16;

/// The slow kernels, compiled for one device.
pub struct Kernels {
    fill: Kernel,
    copy: Kernel,
    add: Kernel,
}

pub fn kernels(d: &Device) -> Kernels {
    let m = d.compile(SRC, &[]).unwrap();
    Kernels { fill: m.kernel("fill").unwrap(), copy: m.kernel("copy").unwrap(), add: m.kernel("add").unwrap() }
}

fn launch_err(e: cusched::cudarc::driver::DriverError) -> Error {
    Error::Driver { call: "cuLaunchKernel", status: e }
}

/// `out = v` after spinning `cycles`.
pub fn fill(d: &Device, k: &Kernels, s: StreamId, out: &GpuRef<f32>, v: f32, cycles: i64) -> Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.write(out)?;
    rec.launch(d, |scope| {
        let n = out.len() as u32;
        // SAFETY: (1) the kernel touches its buffers only as the recorder declared them, on the
        // launch's stream, before the closure returns, and no cudarc memory is made; (2) arguments match `fill`'s signature; `out` holds `n` floats of this device.
        unsafe {
            let mut b = scope.cuda_stream()?.launch_builder(k.fill.function()?);
            b.arg(out.cuda_slice()?).arg(&v).arg(&n).arg(&cycles);
            b.launch(LaunchConfig::for_num_elems(n))
        }
        .map(drop)
        .map_err(launch_err)
    })
}

/// `out = input` after spinning `cycles` (the read comes after the spin).
pub fn copy(d: &Device, k: &Kernels, s: StreamId, out: &GpuRef<f32>, input: &GpuRef<f32>, cycles: i64) -> Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(input)?.write(out)?;
    rec.launch(d, |scope| {
        let n = out.len() as u32;
        // SAFETY: (1) the kernel touches its buffers only as the recorder declared them, on the
        // launch's stream, before the closure returns, and no cudarc memory is made; (2) arguments match `copy`'s signature; both buffers hold `n` floats of this device.
        unsafe {
            let mut b = scope.cuda_stream()?.launch_builder(k.copy.function()?);
            b.arg(out.cuda_slice()?).arg(input.cuda_slice()?).arg(&n).arg(&cycles);
            b.launch(LaunchConfig::for_num_elems(n))
        }
        .map(drop)
        .map_err(launch_err)
    })
}

/// `x += v` after spinning `cycles`.
pub fn add(d: &Device, k: &Kernels, s: StreamId, x: &GpuRef<f32>, v: f32, cycles: i64) -> Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read_write(x)?;
    rec.launch(d, |scope| {
        let n = x.len() as u32;
        // SAFETY: (1) the kernel touches its buffers only as the recorder declared them, on the
        // launch's stream, before the closure returns, and no cudarc memory is made; (2) arguments match `add`'s signature; `x` holds `n` floats of this device.
        unsafe {
            let mut b = scope.cuda_stream()?.launch_builder(k.add.function()?);
            b.arg(x.cuda_slice()?).arg(&v).arg(&n).arg(&cycles);
            b.launch(LaunchConfig::for_num_elems(n))
        }
        .map(drop)
        .map_err(launch_err)
    })
}

pub fn all_eq(v: &[f32], x: f32) -> bool {
    v.iter().all(|&e| e == x)
}
