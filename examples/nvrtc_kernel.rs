//! A templated CUDA kernel compiled at run time, looked up by its name expression, and launched
//! with the typed launch API: reads, writes and scalars declared once, the recorder built from
//! them. With `CUSCHED_KERNEL_CACHE=dir`, the compiled CUBIN persists across runs.
//!
//! `cargo run --release --example nvrtc_kernel` uses GPU 0 (with NVRTC), or the CPU simulation
//! when there is none. A CUDA C++ kernel has no CPU meaning, so on the simulator saxpy runs as a
//! host closure (`LaunchScope::sim_kernel`) under the same declared reads and writes, and the
//! result is checked the same way.

use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, DeviceConfig, Error, GpuRef, LaunchRecorder, Program, SimConfig, StreamId};

const SRC: &str = r#"
template <typename T>
__global__ void saxpy(const T* x, T* y, T a, unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
"#;

/// `y = a * x + y` on `stream` as a host closure: the simulator's form of the saxpy kernel,
/// declared like the typed launch (`x` read, `y` read and written).
fn saxpy_on_sim(device: &Device, stream: StreamId, x: &GpuRef<f32>, y: &GpuRef<f32>, a: f32) -> cusched::Result<()> {
    let (xm, ym) = (x.sim_data()?, y.sim_data()?);
    let mut rec = LaunchRecorder::new_strict(stream).named("saxpy<float>");
    rec.read(x)?.read_write(y)?;
    rec.launch(device, |scope| {
        scope.sim_kernel(move || {
            let x = xm.read();
            for (y, x) in ym.lock().iter_mut().zip(x.iter()) {
                *y += a * x;
            }
        })
    })
}

fn main() -> cusched::Result<()> {
    let config = DeviceConfig {
        kernel_cache_dir: std::env::var_os("CUSCHED_KERNEL_CACHE").map(Into::into),
        ..Default::default()
    };
    let device = match Device::open_with(0, config) {
        Ok(d) => d,
        Err(e @ (Error::LibraryUnavailable { .. } | Error::NoDevice { .. })) => {
            println!("no CUDA GPU ({e}): running on the simulated backend, where saxpy runs as a host closure");
            Device::sim(SimConfig::default())?
        }
        Err(e) => return Err(e),
    };

    let n = 1 << 20;
    let (s1, s2) = (device.new_stream()?, device.new_stream()?);
    let x = device.upload(s1, &vec![2.0f32; n])?;
    let y = device.upload(s2, &vec![1.0f32; n])?;
    if device.is_simulated() {
        // x was uploaded on s1 and y on s2: the closure on s2 waits for x's upload, as the
        // kernel would.
        saxpy_on_sim(&device, s2, &x, &y, 3.0)?;
    } else {
        let program = Program::new(SRC).name_expression("saxpy<float>").name_expression("saxpy<double>");
        let module = device.compile_program(&program)?;
        let stats = device.kernel_cache_stats();
        println!("compiled: {} NVRTC compile(s), {} disk hit(s)", stats.compiles, stats.disk_hits);
        // x was uploaded on s1 and y on s2: the launch on s2 waits for x's upload, nothing else.
        let saxpy = module.kernel("saxpy<float>")?;
        let launch = saxpy
            .launch(&device, s2, LaunchConfig::for_num_elems(n as u32))
            .read(&x)
            .read_write(&y)
            .scalar(3.0f32)
            .scalar(n as u32);
        // SAFETY: 1. saxpy reads x and reads and writes y, as declared; 2. its loop stays below
        // n, the length of both buffers; 3. the parameters are two float pointers, a float and an
        // unsigned, as declared.
        unsafe { launch.enqueue() }?.wait()?;
    }
    let got = y.download(s1)?;
    let wrong = got.iter().filter(|&&v| v != 7.0).count();
    println!("saxpy<float> over {n} elements: {wrong} wrong; {} fence(s) queued", device.stats().waits);
    if wrong != 0 {
        return Err(Error::InvalidArgument { arg: "result", reason: format!("{wrong} elements differ from 7") });
    }
    Ok(())
}
