//! A templated CUDA kernel compiled at run time, looked up by its name expression, and launched
//! with the typed launch API: reads, writes and scalars declared once, the recorder built from
//! them. With `CUSCHED_KERNEL_CACHE=dir`, the compiled CUBIN persists across runs.
//!
//! `cargo run --release --example nvrtc_kernel` (needs a GPU with NVRTC).

use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, DeviceConfig, Program};

const SRC: &str = r#"
template <typename T>
__global__ void saxpy(const T* x, T* y, T a, unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
"#;

fn main() -> cusched::Result<()> {
    let config = DeviceConfig {
        kernel_cache_dir: std::env::var_os("CUSCHED_KERNEL_CACHE").map(Into::into),
        ..Default::default()
    };
    let device = match Device::open_with(0, config) {
        Ok(d) => d,
        Err(e) => {
            println!("this example needs a CUDA GPU ({e}); the quickstart example runs on the simulator");
            return Ok(());
        }
    };
    let program = Program::new(SRC).name_expression("saxpy<float>").name_expression("saxpy<double>");
    let module = device.compile_program(&program)?;
    let stats = device.kernel_cache_stats();
    println!("compiled: {} NVRTC compile(s), {} disk hit(s)", stats.compiles, stats.disk_hits);

    let n = 1 << 20;
    let (s1, s2) = (device.new_stream()?, device.new_stream()?);
    let x = device.upload(s1, &vec![2.0f32; n])?;
    let y = device.upload(s2, &vec![1.0f32; n])?;
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
    let got = y.download(s1)?;
    let wrong = got.iter().filter(|&&v| v != 7.0).count();
    println!("saxpy<float> over {n} elements: {wrong} wrong; {} fence(s) queued", device.stats().waits);
    Ok(())
}
