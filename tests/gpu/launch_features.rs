//! Hopper launch features on a real GPU (sm_90): dynamic shared memory above 48 KiB, a
//! cooperative launch whose grid synchronizes, thread-block clusters (portable and
//! non-portable sizes), programmatic dependent launch between fenced launches, and the
//! occupancy queries; each refusal a typed error with nothing recorded.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, Error, GpuRef, LaunchOptions, LaunchRecorder, StreamId, PDL_DEVICE_FUNCTIONS};

const SRC: &str = r#"
extern "C" __global__ void smem_sum(const float* x, float* out, unsigned n) {
    extern __shared__ float tile[];
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0.0f; for (unsigned i = 0; i < n; ++i) s += tile[i]; out[0] = s; }
}

// A grid-wide barrier by counting: it only returns if every block of the grid is resident at
// once, which a cooperative launch guarantees.
extern "C" __global__ void coop_sum(const float* x, float* partial, unsigned* arrived, float* out, unsigned per_block) {
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned i = 0; i < per_block; ++i) s += x[blockIdx.x * per_block + i];
        partial[blockIdx.x] = s;
        __threadfence();
        atomicAdd(arrived, 1u);
        while (atomicAdd(arrived, 0u) < gridDim.x) {}
        if (blockIdx.x == 0) { float t = 0.0f; for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b]; out[0] = t; }
    }
}

extern "C" __global__ void cluster_rank(unsigned* out) {
    unsigned rank = 0, id = 0;
#if __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(id));
#endif
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = rank; out[2 * blockIdx.x + 1] = id; }
}

// Lets its dependent start at once, then spins `cycles` before writing `x`.
extern "C" __global__ void slow_write(float* x, float v, long long cycles) {
    cusched_release_dependents();
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    x[0] = v;
}

extern "C" __global__ void waits_then_adds(const float* x, float* y) {
    cusched_wait_for_predecessor();
    y[0] = x[0] + 1.0f;
}

// Reads before waiting: not a kernel a user may launch programmatically under the contract, run
// here only to show that the launch really overlaps its predecessor.
extern "C" __global__ void reads_early(const float* x, float* seen) {
    seen[0] = x[0];
    cusched_wait_for_predecessor();
}

extern "C" __global__ void add_one(const float* x, float* y) { y[0] = x[0] + 1.0f; }
"#;

fn source() -> String {
    format!("{PDL_DEVICE_FUNCTIONS}{SRC}")
}

fn sm90(d: &Device) -> bool {
    use cusched::cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: the context is only queried for an attribute: no work, no memory.
    let major =
        unsafe { d.cuda_context() }.unwrap().attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap();
    if major < 9 {
        eprintln!("skipped: needs sm_90 (compute capability {major}.x)");
    }
    major >= 9
}

fn cfg(grid: u32, block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: smem }
}

/// Asserts that `f` recorded nothing on the device (no event, no wait).
fn nothing_recorded<T: std::fmt::Debug>(d: &Device, what: &str, f: impl FnOnce() -> cusched::Result<T>) -> Error {
    let before = d.stats();
    let err = match f() {
        Ok(v) => panic!("{what}: accepted ({v:?})"),
        Err(e) => e,
    };
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "{what}: something was recorded");
    err
}

fn invalid_arg(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dynamic_shared_memory_above_48_kib() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("smem_sum").unwrap();
    for n in [1000u32, 25_000, 50_000] {
        let host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let x = d.upload(s, &host).unwrap();
        let out = d.alloc_zeros::<f32>(s, 1).unwrap();
        let launch = k.launch(&d, s, cfg(1, 256, n * 4)).read(&x).write(&out).scalar(n);
        // SAFETY: 1. `smem_sum` reads `x[0..n]` and writes `out[0]`, as declared; 2. its shared
        // tile holds n floats, the dynamic shared memory given; 3. parameters as declared.
        unsafe { launch.enqueue() }.unwrap().wait().unwrap();
        assert_eq!(out.download(s).unwrap()[0], host.iter().sum::<f32>(), "n = {n} ({} KiB)", n * 4 / 1024);
    }
    // More than any block can have: refused, naming the argument, nothing recorded.
    let (x, out) = (d.alloc_zeros::<f32>(s, 1).unwrap(), d.alloc_zeros::<f32>(s, 1).unwrap());
    let e = nothing_recorded(&d, "512 KiB of shared memory", || {
        let launch = k.launch(&d, s, cfg(1, 256, 512 << 10)).read(&x).write(&out).scalar(1u32);
        // SAFETY: refused before launch.
        unsafe { launch.enqueue() }
    });
    assert_eq!(invalid_arg(&e), "config.shared_mem_bytes", "{e}");
}

/// The buffers of a cooperative sum over `grid` blocks.
struct Coop {
    partial: GpuRef<f32>,
    arrived: GpuRef<u32>,
    out: GpuRef<f32>,
}

impl Coop {
    fn new(d: &Device, s: StreamId, grid: u32) -> Coop {
        Coop {
            partial: d.alloc_zeros::<f32>(s, grid as usize).unwrap(),
            arrived: d.alloc_zeros::<u32>(s, 1).unwrap(),
            out: d.alloc_zeros::<f32>(s, 1).unwrap(),
        }
    }

    fn run(&self, d: &Device, s: StreamId, k: &cusched::Kernel, grid: u32, x: &GpuRef<f32>) -> cusched::Result<()> {
        let launch = k
            .launch(d, s, cfg(grid, 32, 0))
            .cooperative()
            .read(x)
            .write(&self.partial)
            .read_write(&self.arrived)
            .write(&self.out)
            .scalar(64u32);
        // SAFETY: 1. `coop_sum` reads `x[0..grid * 64]`, writes `partial[0..grid]` and
        // `out[0]`, and counts in `arrived[0]`, as declared; 2. every block reaches the
        // barrier; 3. parameters as declared.
        unsafe { launch.enqueue() }?.wait()
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cooperative_launch_synchronizes_its_grid_and_refuses_a_grid_too_large() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("coop_sum").unwrap();
    let per_sm = k.max_active_blocks_per_sm(32, 0).unwrap();
    use cusched::cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: the context is only queried for an attribute.
    let sms =
        unsafe { d.cuda_context() }.unwrap().attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap() as u32;
    assert!(per_sm >= 1, "occupancy {per_sm}");
    // The whole device at once: all blocks resident, the barrier passes.
    let most = per_sm * sms;
    for grid in [1, sms, most] {
        let host: Vec<f32> = (0..grid * 64).map(|i| (i % 5) as f32).collect();
        let x = d.upload(s, &host).unwrap();
        let got = bounded(std::time::Duration::from_secs(60), {
            let (d, k, x) = (d.clone(), k.clone(), x.clone());
            move || {
                let c = Coop::new(&d, s, grid);
                c.run(&d, s, &k, grid, &x).unwrap();
                c.out.download(s).unwrap()[0]
            }
        });
        assert_eq!(got, host.iter().sum::<f32>(), "grid {grid} of at most {most}");
    }
    let x = d.alloc_zeros::<f32>(s, (most as usize + 1) * 64).unwrap();
    let c = Coop::new(&d, s, most + 1);
    d.synchronize(s).unwrap();
    let e = nothing_recorded(&d, "a cooperative grid one block too large", || c.run(&d, s, &k, most + 1, &x));
    assert_eq!(invalid_arg(&e), "config.grid_dim", "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn thread_block_clusters_portable_and_non_portable() {
    let Some(d) = gpu() else { return };
    if !sm90(&d) {
        return;
    }
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("cluster_rank").unwrap();
    for cluster in [1u32, 2, 8, 16] {
        let grid = cluster * 4;
        let out = d.alloc_zeros::<u32>(s, 2 * grid as usize).unwrap();
        let launch = k.launch(&d, s, cfg(grid, 64, 0)).cluster((cluster, 1, 1)).write(&out);
        // SAFETY: 1. `cluster_rank` writes `out[0..2 * grid]`, as declared; 2. parameters as
        // declared.
        unsafe { launch.enqueue() }.unwrap().wait().unwrap();
        let got = out.download(s).unwrap();
        for b in 0..grid {
            let (rank, id) = (got[2 * b as usize], got[2 * b as usize + 1]);
            assert_eq!((rank, id), (b % cluster, b / cluster), "block {b}, clusters of {cluster}");
        }
    }
    let active = k.max_active_clusters(cfg(64, 64, 0), (8, 1, 1)).unwrap();
    assert!(active >= 1, "{active} clusters of 8 fit");
    let out = d.alloc_zeros::<u32>(s, 256).unwrap();
    for (what, grid, cluster) in
        [("grid not a multiple", 6u32, (4u32, 1u32, 1u32)), ("zero", 4, (0, 1, 1)), ("32 blocks", 32, (32, 1, 1))]
    {
        let e = nothing_recorded(&d, what, || {
            let launch = k.launch(&d, s, cfg(grid, 64, 0)).cluster(cluster).write(&out);
            // SAFETY: refused before launch.
            unsafe { launch.enqueue() }
        });
        assert_eq!(invalid_arg(&e), "cluster", "{what}: {e}");
    }
    let coop = nothing_recorded(&d, "cooperative with clusters", || {
        let launch = k.launch(&d, s, cfg(4, 64, 0)).cluster((2, 1, 1)).cooperative().write(&out);
        // SAFETY: refused before launch.
        unsafe { launch.enqueue() }
    });
    assert!(matches!(coop, Error::Unsupported { .. }), "{coop:?}");
}

/// A slow kernel lets a programmatic dependent start at once: a dependent that reads before
/// `griddepcontrol.wait` sees the old value (the launch did overlap), one that waits sees the
/// new one, and a fenced launch on another stream after it sees its result: the tracker's
/// order holds around programmatic launches.
#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_dependent_launch_between_fenced_launches() {
    let Some(d) = gpu() else { return };
    if !sm90(&d) {
        return;
    }
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let m = d.compile(&source(), &[]).unwrap();
    let (slow, waits, early, add) = (
        m.kernel("slow_write").unwrap(),
        m.kernel("waits_then_adds").unwrap(),
        m.kernel("reads_early").unwrap(),
        m.kernel("add_one").unwrap(),
    );
    // About 20 ms at the H100's clock.
    let cycles = 40_000_000i64;
    for round in 0..3 {
        let x = d.upload(s1, &[0.0f32]).unwrap();
        let (y, seen, z) = (
            d.alloc_zeros::<f32>(s1, 1).unwrap(),
            d.alloc_zeros::<f32>(s1, 1).unwrap(),
            d.alloc_zeros::<f32>(s2, 1).unwrap(),
        );
        let one = cfg(1, 1, 0);
        // SAFETY (all four): each kernel touches exactly the buffers declared, element 0; the
        // programmatic ones wait for their predecessor before touching declared memory, except
        // `reads_early`, whose early read of `x` is a read the tracker allows (x is declared
        // read; the only writer is the predecessor, which the next launch's fence follows).
        unsafe {
            slow.launch(&d, s1, one).write(&x).scalar(7.0f32).scalar(cycles).enqueue().unwrap();
            early.launch(&d, s1, one).programmatic_dependent().read(&x).write(&seen).enqueue().unwrap();
            slow.launch(&d, s1, one).write(&x).scalar(41.0f32).scalar(cycles).enqueue().unwrap();
            waits.launch(&d, s1, one).programmatic_dependent().read(&x).write(&y).enqueue().unwrap();
            // Fenced on another stream: waits for the programmatic launch's event.
            add.launch(&d, s2, one).read(&y).write(&z).enqueue().unwrap().wait().unwrap();
        }
        // compute-sanitizer serializes kernels, so there the dependent starts late.
        if std::env::var_os("NV_SANITIZER_INJECTION_PORT_BASE").is_none() {
            assert_eq!(seen.download(s1).unwrap(), [0.0], "round {round}: the dependent did not start early");
        }
        assert_eq!(y.download(s1).unwrap(), [42.0], "round {round}");
        assert_eq!(z.download(s2).unwrap(), [43.0], "round {round}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn occupancy_queries() {
    let Some(d) = gpu() else { return };
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("smem_sum").unwrap();
    let (grid, block) = k.suggested_block_size(0).unwrap();
    assert!(grid >= 1 && (32..=1024).contains(&block), "suggested grid {grid}, block {block}");
    let light = k.max_active_blocks_per_sm(block, 0).unwrap();
    let heavy = k.max_active_blocks_per_sm(block, 100 << 10).unwrap();
    assert!(light >= 1 && heavy <= light, "{light} blocks without shared memory, {heavy} with 100 KiB");
    for bad in [0u32, 1025] {
        assert_eq!(invalid_arg(&k.max_active_blocks_per_sm(bad, 0).unwrap_err()), "block_threads");
    }
}

/// Launches `k` through the raw path (`Kernel::prepare_raw`, then `RawLaunch::enqueue` inside
/// the recorder's closure) with the uses `declare` makes and `args` (device addresses and
/// scalars, each widened to 8 bytes: the driver reads each parameter's own size from the
/// start of its slot, which on a little-endian host holds the value).
fn raw_launch(
    d: &Device,
    s: StreamId,
    k: &cusched::Kernel,
    config: LaunchConfig,
    options: LaunchOptions,
    declare: impl FnOnce(&mut LaunchRecorder) -> cusched::Result<()>,
    mut args: Vec<u64>,
) -> cusched::Result<()> {
    let launch = k.prepare_raw(d, config, options)?;
    let mut rec = LaunchRecorder::new_strict(s);
    declare(&mut rec)?;
    rec.launch(d, |scope| {
        let mut params: Vec<*mut std::ffi::c_void> = args.iter_mut().map(|a| (a as *mut u64).cast()).collect();
        // SAFETY: 1. each caller declares on `rec` exactly what its kernel touches, inside the
        // buffers' lengths; 2. each argument is the device address or scalar its kernel takes;
        // 3. the PDL kernel waits before touching memory, the cooperative one reaches its barrier
        // from every block.
        unsafe { launch.enqueue(scope, &mut params) }
    })
}

fn ptr<T: cusched::Element>(b: &GpuRef<T>) -> u64 {
    b.raw_device_ptr().unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_path_dynamic_shared_memory_above_48_kib() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("smem_sum").unwrap();
    let n = 25_000u32;
    let host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let (x, out) = (d.upload(s, &host).unwrap(), d.alloc_zeros::<f32>(s, 1).unwrap());
    let declare = |rec: &mut LaunchRecorder| rec.read(&x)?.write(&out).map(drop);
    raw_launch(&d, s, &k, cfg(1, 256, n * 4), LaunchOptions::new(), declare, vec![ptr(&x), ptr(&out), n as u64])
        .unwrap();
    assert_eq!(out.download(s).unwrap()[0], host.iter().sum::<f32>());
    let e = nothing_recorded(&d, "512 KiB of shared memory (raw)", || {
        raw_launch(&d, s, &k, cfg(1, 256, 512 << 10), LaunchOptions::new(), declare, vec![ptr(&x), ptr(&out), 1])
    });
    assert_eq!(invalid_arg(&e), "config.shared_mem_bytes", "{e}");
    // A wrong parameter count is refused naming `params`.
    let e = raw_launch(&d, s, &k, cfg(1, 256, 0), LaunchOptions::new(), declare, vec![ptr(&x)]).unwrap_err();
    assert_eq!(invalid_arg(&e), "params", "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_path_cooperative_launch() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("coop_sum").unwrap();
    let per_sm = k.max_active_blocks_per_sm(32, 0).unwrap();
    use cusched::cudarc::driver::sys::CUdevice_attribute as A;
    // SAFETY: the context is only queried for an attribute.
    let sms =
        unsafe { d.cuda_context() }.unwrap().attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap() as u32;
    let most = per_sm * sms;
    let host: Vec<f32> = (0..most * 64).map(|i| (i % 5) as f32).collect();
    let x = d.upload(s, &host).unwrap();
    let c = Coop::new(&d, s, most);
    let run = |grid: u32| {
        let declare =
            |rec: &mut LaunchRecorder| rec.read(&x)?.write(&c.partial)?.read_write(&c.arrived)?.write(&c.out).map(drop);
        let args = vec![ptr(&x), ptr(&c.partial), ptr(&c.arrived), ptr(&c.out), 64];
        raw_launch(&d, s, &k, cfg(grid, 32, 0), LaunchOptions::new().cooperative(), declare, args)
    };
    run(most).unwrap();
    assert_eq!(c.out.download(s).unwrap()[0], host.iter().sum::<f32>());
    let e = nothing_recorded(&d, "a cooperative grid one block too large (raw)", || run(most + 1));
    assert_eq!(invalid_arg(&e), "config.grid_dim", "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_path_thread_block_clusters() {
    let Some(d) = gpu() else { return };
    if !sm90(&d) {
        return;
    }
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let k = m.kernel("cluster_rank").unwrap();
    for cluster in [2u32, 16] {
        let grid = cluster * 4;
        let out = d.alloc_zeros::<u32>(s, 2 * grid as usize).unwrap();
        let declare = |rec: &mut LaunchRecorder| rec.write(&out).map(drop);
        let options = LaunchOptions::new().cluster((cluster, 1, 1));
        raw_launch(&d, s, &k, cfg(grid, 64, 0), options, declare, vec![ptr(&out)]).unwrap();
        let got = out.download(s).unwrap();
        for b in 0..grid {
            assert_eq!((got[2 * b as usize], got[2 * b as usize + 1]), (b % cluster, b / cluster), "block {b}");
        }
    }
    let out = d.alloc_zeros::<u32>(s, 64).unwrap();
    let e = nothing_recorded(&d, "a grid not a whole number of clusters (raw)", || {
        let declare = |rec: &mut LaunchRecorder| rec.write(&out).map(drop);
        raw_launch(&d, s, &k, cfg(6, 64, 0), LaunchOptions::new().cluster((4, 1, 1)), declare, vec![ptr(&out)])
    });
    assert_eq!(invalid_arg(&e), "cluster", "{e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_path_programmatic_dependent_launch() {
    let Some(d) = gpu() else { return };
    if !sm90(&d) {
        return;
    }
    let s = d.new_stream().unwrap();
    let m = d.compile(&source(), &[]).unwrap();
    let (slow, dependent) = (m.kernel("slow_write").unwrap(), m.kernel("waits_then_adds").unwrap());
    let (x, y) = (d.alloc_zeros::<f32>(s, 1).unwrap(), d.alloc_zeros::<f32>(s, 1).unwrap());
    let launch = slow.launch(&d, s, cfg(1, 1, 0)).write(&x).scalar(41.0f32).scalar(10_000_000i64);
    // SAFETY: 1. `slow_write` writes `x[0]` only, as declared; 2. parameters as declared.
    unsafe { launch.enqueue() }.unwrap();
    let declare = |rec: &mut LaunchRecorder| rec.read(&x)?.write(&y).map(drop);
    let options = LaunchOptions::new().programmatic_dependent();
    raw_launch(&d, s, &dependent, cfg(1, 1, 0), options, declare, vec![ptr(&x), ptr(&y)]).unwrap();
    // It waited for its predecessor's write before reading it.
    assert_eq!(y.download(s).unwrap(), [42.0]);
}
