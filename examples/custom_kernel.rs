//! A raw cudarc kernel launch, ordered across two streams by `LaunchRecorder`s alone: no
//! hand-written events.
//!
//! `cargo run --example custom_kernel` uses GPU 0, or the CPU simulation when there is none. A
//! CUDA C++ kernel has no CPU meaning, so on the simulator `axpb` runs as a host closure
//! (`LaunchScope::sim_kernel`) under the same recorder, and the result is checked the same way.

use cusched::cudarc::driver::{LaunchConfig, PushKernelArg};
use cusched::{Device, Error, GpuRef, LaunchRecorder, Result, SimConfig, StreamId};

const SRC: &str = r#"
extern "C" __global__ void axpb(float* out, const float* in, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i] + b;
}
"#;

/// `out = a * input + b` on `stream`, declared on a recorder around a raw cudarc launch (or a
/// host closure on the simulator).
fn axpb(
    device: &Device,
    kernel: Option<&cusched::Kernel>,
    stream: StreamId,
    out: &GpuRef<f32>,
    input: &GpuRef<f32>,
    a: f32,
    b: f32,
) -> Result<()> {
    let mut rec = LaunchRecorder::new_strict(stream);
    rec.read(input)?.write(out)?;
    rec.launch(device, |scope| match kernel {
        Some(k) => {
            let n = out.len() as u32;
            // SAFETY: (1) the kernel reads `input` and writes `out`, as the recorder declared,
            // on the launch's stream, enqueued before the closure returns, and no cudarc memory
            // is made; (2) the argument list matches `axpb`'s signature and both buffers hold
            // `n` floats of this device.
            unsafe {
                let s = scope.cuda_stream()?;
                let mut launch = s.launch_builder(k.function()?);
                launch.arg(out.cuda_slice()?).arg(input.cuda_slice()?).arg(&a).arg(&b).arg(&n);
                launch.launch(LaunchConfig::for_num_elems(n))
            }
            .map_err(|e| Error::Driver { call: "cuLaunchKernel", status: e })?;
            Ok(())
        }
        None => {
            let (o, i) = (out.sim_data()?, input.sim_data()?);
            scope.sim_kernel(move || {
                let i = i.read();
                for (o, x) in o.lock().iter_mut().zip(i.iter()) {
                    *o = a * x + b;
                }
            })
        }
    })
}

fn main() -> Result<()> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU ({e}): running on the simulated backend, where axpb runs as a host closure");
            Device::sim(SimConfig::default())?
        }
    };
    let kernel = if device.is_simulated() { None } else { Some(device.compile(SRC, &[])?.kernel("axpb")?) };
    let (s1, s2) = (device.default_stream(), device.new_stream()?);
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let input = device.upload(s1, &x)?;
    let mid = device.alloc::<f32>(s2, n)?;
    let out = device.alloc::<f32>(s1, n)?;

    // s2 reads the upload made on s1: the recorder makes s2 wait for it.
    axpb(&device, kernel.as_ref(), s2, &mid, &input, 2.0, 1.0)?;
    // s1 reads what s2 wrote: s1 waits for s2's event.
    axpb(&device, kernel.as_ref(), s1, &out, &mid, 0.5, -0.5)?;
    // s2 overwrites the input s2 itself read earlier: same stream, no wait needed.
    axpb(&device, kernel.as_ref(), s2, &input, &out, 1.0, 0.0)?;

    let got = out.download(s1)?;
    let bad = got.iter().zip(&x).filter(|(g, x)| (**g - **x).abs() > 1e-3 * x.abs().max(1.0)).count();
    let stats = device.stats();
    println!(
        "{} elements through 3 kernels on 2 streams: {} wrong; tracker issued {} waits and {} events",
        n, bad, stats.waits, stats.events
    );
    if bad != 0 {
        return Err(Error::InvalidArgument { arg: "result", reason: format!("{bad} elements differ") });
    }
    Ok(())
}
