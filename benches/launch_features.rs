//! Hopper launch features through cusched's typed launch against the same kernels launched raw
//! (`cuLaunchKernelEx` with the same attributes, on the same stream, on buffers of their own),
//! side by side in one process: a cooperative reduction (a grid-stride sum, a grid-wide barrier,
//! one block adding the partial sums) and a kernel in clusters of 2 (each block adds its
//! partner's first element through distributed shared memory).
//!
//! `bench-launch_features [elements] [iterations]` (defaults 2^26 and 50), on one sm_90 GPU.

mod common;

use common::interleaved;
use cusched::cudarc::driver::{sys, LaunchConfig};
use cusched::{Device, GpuRef, Kernel};
use std::ffi::c_void;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const SRC: &str = r#"
extern "C" __global__ void coop_sum(const float* x, float* partial, unsigned* arrived, float* out, unsigned long long n) {
    __shared__ float acc[256];
    float s = 0.0f;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) s += x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) acc[threadIdx.x] += acc[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc[0];
        __threadfence();
        unsigned ticket = atomicAdd(arrived, 1u);
        unsigned target = (ticket / gridDim.x + 1) * gridDim.x;
        while (atomicAdd(arrived, 0u) < target) {}
        if (blockIdx.x == 0) { float t = 0.0f; for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b]; out[0] = t; }
    }
}

extern "C" __global__ void pair_add(const float* x, float* y, unsigned long long n) {
    __shared__ float first;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long head = blockIdx.x * (unsigned long long)blockDim.x;
    if (threadIdx.x == 0) first = head < n ? x[head] : 0.0f;
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    unsigned long long local = (unsigned long long)(&first), remote;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(remote) : "l"(local), "r"(rank ^ 1u));
    float other;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(other) : "l"(remote) : "memory");
    if (i < n) y[i] = x[i] + other;
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"#;

/// A raw `cuLaunchKernelEx` of `f` with one attribute (cooperative or a 2-block cluster).
///
/// # Safety
/// `f` is loaded in the current context, `stream` is live, `params` points to the kernel's
/// parameters, and the memory they reach stays valid while the kernel runs.
unsafe fn raw_launch(
    f: sys::CUfunction,
    cfg: LaunchConfig,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    cooperative: bool,
) -> Res<()> {
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    if cooperative {
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attr.value.cooperative = 1;
    } else {
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: 2, y: 1, z: 1 };
    }
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    let st = sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut());
    if st != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuLaunchKernelEx: {st:?}").into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 26);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-launch_features needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let module = device.compile(SRC, &[])?;
    let (coop, pair): (Kernel, Kernel) = (module.kernel("coop_sum")?, module.kernel("pair_add")?);
    let host: Vec<f32> = (0..n).map(|i| (i % 3) as f32).collect();
    let sms = {
        use sys::CUdevice_attribute as A;
        // SAFETY: the context is only queried for an attribute.
        unsafe { device.cuda_context() }?.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32
    };
    let grid = coop.max_active_blocks_per_sm(256, 0)? * sms;
    let alloc = |len: usize| -> Res<(GpuRef<f32>, GpuRef<f32>)> {
        Ok((device.alloc_zeros::<f32>(s, len)?, device.alloc_zeros::<f32>(s, len)?))
    };
    let (x, rx) = (device.upload(s, &host)?, device.upload(s, &host)?);
    let (partial, rpartial) = alloc(grid as usize)?;
    let (out, rout) = alloc(1)?;
    let (arrived, rarrived) = (device.alloc_zeros::<u32>(s, 1)?, device.alloc_zeros::<u32>(s, 1)?);
    let (y, ry) = alloc(n)?;
    // SAFETY: (1) the raw side's buffers are its own and used only by raw launches on this
    // stream, synchronized before each timing ends; (2) cusched's buffers only by cusched.
    let stream = unsafe { device.cuda_stream(s) }?;
    stream.context().bind_to_thread()?;
    let cu = stream.cu_stream();
    let n64 = n as u64;
    println!("bench-launch_features: {n} floats ({} MiB), {sms} SMs", (n * 4) >> 20);
    println!("| kernel | cusched | raw cuLaunchKernelEx | ratio (raw/cusched time) |");
    println!("| --- | --- | --- | --- |");

    let coop_cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut raw_coop_args =
        [rx.raw_device_ptr()?, rpartial.raw_device_ptr()?, rarrived.raw_device_ptr()?, rout.raw_device_ptr()?];
    let mut n_arg = n64;
    let (o, r) = interleaved(
        iters,
        || {
            let l = coop
                .launch(&device, s, coop_cfg)
                .cooperative()
                .read(&x)
                .write(&partial)
                .read_write(&arrived)
                .write(&out)
                .scalar(n64);
            // SAFETY: `coop_sum` reads x[0..n], writes partial[0..grid] and out[0], and counts in
            // arrived[0] (monotonically, so no reset between launches), as declared; the grid fits
            // the device at once (checked).
            unsafe { l.enqueue() }?;
            Ok(())
        },
        || {
            let mut params: Vec<*mut c_void> = raw_coop_args.iter_mut().map(|p| (p as *mut u64).cast()).collect();
            params.push((&mut n_arg as *mut u64).cast());
            // SAFETY: the function is loaded in this context; the parameters point to live values
            // of the kernel's types; the raw buffers outlive the synchronize that ends the timing.
            unsafe { raw_launch(coop.function()?.cu_function(), coop_cfg, cu, &mut params, true) }
        },
        || Ok(device.synchronize(s)?),
        || Ok(device.synchronize(s)?),
    )?;
    let want: f64 = host.iter().map(|&v| v as f64).sum();
    let (got, rgot) = (out.download(s)?[0] as f64, rout.download(s)?[0] as f64);
    println!(
        "| cooperative sum, {grid} blocks x 256 | {:.1} µs ({:.0} GB/s) | {:.1} µs ({:.0} GB/s) | {:.3}x |",
        o * 1e6,
        (n * 4) as f64 / o / 1e9,
        r * 1e6,
        (n * 4) as f64 / r / 1e9,
        r / o
    );
    if (got - want).abs() > 1e-3 * want || (rgot - want).abs() > 1e-3 * want {
        return Err(format!("cooperative sums {got} / {rgot}, want {want}").into());
    }

    let blocks = (n as u32).div_ceil(256).next_multiple_of(2);
    let pair_cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut raw_pair_args = [rx.raw_device_ptr()?, ry.raw_device_ptr()?];
    let (o, r) = interleaved(
        iters,
        || {
            let l = pair.launch(&device, s, pair_cfg).cluster((2, 1, 1)).read(&x).write(&y).scalar(n64);
            // SAFETY: `pair_add` reads x[0..n] (each block's first element within it) and writes
            // y[0..n], as declared; the grid is a whole number of clusters of 2.
            unsafe { l.enqueue() }?;
            Ok(())
        },
        || {
            let mut params: Vec<*mut c_void> = raw_pair_args.iter_mut().map(|p| (p as *mut u64).cast()).collect();
            params.push((&mut n_arg as *mut u64).cast());
            // SAFETY: as for the cooperative launch.
            unsafe { raw_launch(pair.function()?.cu_function(), pair_cfg, cu, &mut params, false) }
        },
        || Ok(device.synchronize(s)?),
        || Ok(device.synchronize(s)?),
    )?;
    println!(
        "| cluster pairs (2 blocks), {blocks} blocks x 256 | {:.1} µs ({:.0} GB/s) | {:.1} µs ({:.0} GB/s) | {:.3}x |",
        o * 1e6,
        (n * 8) as f64 / o / 1e9,
        r * 1e6,
        (n * 8) as f64 / r / 1e9,
        r / o
    );
    let (gy, gry) = (y.download(s)?, ry.download(s)?);
    for i in [0usize, 255, 256, 511, 512, n - 1] {
        let b = i / 256;
        let partner = (b ^ 1) * 256;
        let want = host[i] + host.get(partner).copied().unwrap_or(0.0);
        if gy[i] != want || gry[i] != want {
            return Err(format!("pair_add at {i}: {} / {}, want {want}", gy[i], gry[i]).into());
        }
    }
    Ok(())
}
