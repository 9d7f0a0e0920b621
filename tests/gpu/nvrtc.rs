//! NVRTC on a real GPU: architecture from the device, compile errors with the log, the module
//! caches (memory and disk), lowered names for templates, and the typed launch API.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, DeviceConfig, Error, Handles, Program};

const SRC: &str = r#"
extern "C" __global__ void add(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void arch(int* out) { out[0] = __CUDA_ARCH__; }
template <typename T> __global__ void scale(T* x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn compiles_for_the_device_architecture() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let m = d.compile(SRC, &[]).unwrap();
    let out = d.upload(s, &[0i32]).unwrap();
    let arch = m.kernel("arch").unwrap();
    let launch = arch.launch(&d, s, LaunchConfig::for_num_elems(1)).write(&out);
    // SAFETY: 1. `arch` writes element 0 of `out`, as declared, which holds one int; 2. its one
    // parameter is the declared int pointer.
    unsafe { launch.enqueue() }.unwrap().wait().unwrap();
    let (major, minor) = {
        use cusched::cudarc::driver::sys::CUdevice_attribute as A;
        // SAFETY: the context is only queried for attributes: no work, no memory.
        let ctx = unsafe { d.cuda_context() }.unwrap();
        (
            ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap(),
            ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap(),
        )
    };
    assert_eq!(out.download(s).unwrap(), vec![major * 100 + minor * 10], "compiled for another architecture");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn compile_errors_carry_the_log() {
    let Some(d) = gpu() else { return };
    match d.compile("extern \"C\" __global__ void k() { undefined_thing(); }", &[]) {
        Err(Error::CompileFailed { log, .. }) => assert!(log.contains("undefined_thing"), "log: {log}"),
        other => panic!("expected CompileFailed, got {other:?}"),
    }
    assert!(matches!(d.compile(SRC, &["--no-such-option"]), Err(Error::CompileFailed { .. } | Error::Library { .. })));
    assert!(matches!(d.compile(SRC, &["-DX\0"]), Err(Error::InvalidArgument { arg: "options", .. })));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn module_cache_in_memory_and_on_disk() {
    let Some(d) = gpu() else { return };
    let before = d.kernel_cache_stats();
    let src = format!("{SRC}\n// {}", Rng::new().next());
    d.compile(&src, &["-DA=1"]).unwrap();
    d.compile(&src, &["-DA=1"]).unwrap();
    d.compile(&src, &["-DA=2"]).unwrap();
    let after = d.kernel_cache_stats();
    assert_eq!(after.compiles - before.compiles, 2, "options are part of the key");
    assert_eq!(after.memory_hits - before.memory_hits, 1);

    let dir = std::env::temp_dir().join(format!("cusched-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = DeviceConfig { kernel_cache_dir: Some(dir.clone()), ..Default::default() };
    let first = Device::open_with(0, cfg.clone()).unwrap();
    let p = Program::new(src.clone()).name_expression("scale<float>");
    first.compile_program(&p).unwrap();
    assert_eq!(first.kernel_cache_stats().compiles, 1);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one cache file, no temporaries left: {files:?}");
    drop(first);
    // A new device (as after a restart) finds it on disk, lowered names included.
    let second = Device::open_with(0, cfg.clone()).unwrap();
    let m = second.compile_program(&p).unwrap();
    assert_eq!(second.kernel_cache_stats(), cusched::KernelCacheStats { memory_hits: 0, disk_hits: 1, compiles: 0 });
    let s = second.new_stream().unwrap();
    let x = second.upload(s, &[1.0f32, 2.0, 3.0]).unwrap();
    let scale = m.kernel("scale<float>").unwrap();
    let launch = scale.launch(&second, s, LaunchConfig::for_num_elems(3)).read_write(&x).scalar(2.0f32).scalar(3u32);
    // SAFETY: 1. `scale<float>` reads and writes x, as declared; 2. it touches indices below 3,
    // x's length; 3. the parameters are a float pointer, a float and an unsigned, as declared.
    unsafe { launch.enqueue() }.unwrap();
    assert_eq!(x.download(s).unwrap(), vec![2.0, 4.0, 6.0]);
    // A corrupt entry is recompiled, not trusted.
    std::fs::write(files[0].path(), b"garbage").unwrap();
    drop(second);
    let third = Device::open_with(0, cfg).unwrap();
    third.compile_program(&p).unwrap();
    assert_eq!(third.kernel_cache_stats().compiles, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lowered_names_and_typed_launches_inline_and_on_a_lane() {
    let Some(d) = gpu() else { return };
    let p = Program::new(SRC).name_expression("scale<float>").name_expression("scale<double>");
    let m = d.compile_program(&p).unwrap();
    let (sf, sd, add) =
        (m.kernel("scale<float>").unwrap(), m.kernel("scale<double>").unwrap(), m.kernel("add").unwrap());
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let n = 10_000;
    let a: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
    let (da, db, dc) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.upload(s, &vec![f32::NAN; n]).unwrap());
    let cfg = LaunchConfig::for_num_elems(n as u32);
    let sum = h.launch(&add, cfg).read(&da).read(&db).write(&dc).scalar(n as u32);
    let half = h.launch(&sf, cfg).read_write(&dc).scalar(0.5f32).scalar(n as u32);
    // SAFETY: 1. `add` reads da and db and writes dc, and `scale<float>` reads and writes dc,
    // as declared; 2. both touch indices below n, the length of every buffer; 3. the
    // parameters match the kernels' signatures (float pointers, a float, unsigned lengths).
    unsafe {
        sum.enqueue().unwrap();
        half.enqueue().unwrap().wait().unwrap();
    }
    let got = dc.download(s).unwrap();
    assert!((0..n).all(|i| got[i] == (a[i] + b[i]) * 0.5));

    // The same on a lane, on another stream: the lane's reads of dc are fenced after the above.
    let lane = d.lane("rtc").unwrap();
    let dd = d.clone();
    let x = d.upload(s, &vec![3.0f64; n]).unwrap();
    let x2 = x.clone();
    lane.submit(move |cx| {
        let launch = cx.launch(&sd, cfg).read_write(&x2).scalar(-2.0f64).scalar(n as u32);
        // SAFETY: 1. `scale<double>` reads and writes x2, as declared; 2. it touches indices
        // below n, x2's length; 3. the parameters are a double pointer, a double and an
        // unsigned, as declared.
        unsafe { launch.enqueue() }.map(drop)
    })
    .wait()
    .unwrap();
    assert!(x.download(s).unwrap().iter().all(|&v| v == -6.0));
    drop(dd);

    // Bad launches: rejected before anything is recorded.
    let before = d.stats();
    // SAFETY: every launch below is refused by `enqueue`'s checks (parameter count and sizes,
    // launch configuration) before anything is enqueued, which is what this asserts.
    let cases: Vec<(&str, cusched::Result<_>)> = unsafe {
        vec![
            ("args", h.launch(&add, cfg).read(&da).read(&db).write(&dc).enqueue()),
            ("args", h.launch(&add, cfg).read(&da).read(&db).write(&dc).scalar(n as u64).enqueue()),
            ("args", h.launch(&sf, cfg).read_write(&dc).scalar(0.5f64).scalar(n as u32).enqueue()),
            (
                "config.grid_dim",
                h.launch(&add, LaunchConfig { grid_dim: (0, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 })
                    .read(&da)
                    .read(&db)
                    .write(&dc)
                    .scalar(n as u32)
                    .enqueue(),
            ),
            (
                "config.block_dim",
                h.launch(&add, LaunchConfig { grid_dim: (1, 1, 1), block_dim: (2048, 1, 1), shared_mem_bytes: 0 })
                    .read(&da)
                    .read(&db)
                    .write(&dc)
                    .scalar(n as u32)
                    .enqueue(),
            ),
        ]
    };
    for (arg, r) in cases {
        assert!(matches!(&r, Err(Error::InvalidArgument { arg: a, .. }) if *a == arg), "{arg}: {r:?}");
    }
    let after = d.stats();
    assert_eq!((before.events, before.waits), (after.events, after.waits), "a rejected launch recorded something");
    d.advance_generation();
    let stale = h.launch(&add, cfg).read(&da);
    // SAFETY: nothing is launched: `da` is stale, which `enqueue` reports before launching.
    let stale = unsafe { stale.enqueue() };
    assert!(matches!(&stale, Err(Error::Stale { what, .. }) if what.contains("parameter 0")), "{stale:?}");
    assert!(matches!(m.kernel("add"), Err(Error::Stale { .. })));
}

/// A kernel compiled on the GPU and launched on a simulated device: the error names the
/// simulator's form of a kernel (a host closure through `LaunchScope::sim_kernel`), not the
/// device pointer the simulator's buffers lack.
#[test]
#[ignore = "needs a CUDA GPU"]
fn launching_on_the_simulator_names_the_host_closure_form() {
    let Some(d) = gpu() else { return };
    let add = d.compile(SRC, &[]).unwrap().kernel("add").unwrap();
    let sim = sim();
    let s = sim.default_stream();
    let (a, c) = (sim.alloc_zeros::<f32>(s, 4).unwrap(), sim.alloc_zeros::<f32>(s, 4).unwrap());
    let launch = add.launch(&sim, s, LaunchConfig::for_num_elems(4)).read(&a).read(&a).write(&c).scalar(4u32);
    // SAFETY: it is refused before anything is launched (the device is simulated).
    let err = unsafe { launch.enqueue() }.unwrap_err();
    assert!(matches!(err, Error::LibraryUnavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("LaunchScope::sim_kernel"), "{err}");
}
