//! Fault injection on a real GPU: a kernel writes far out of bounds while other lanes have work
//! in flight. Every pending completion resolves with `ContextPoisoned` naming the first failing
//! call, the generation advances, and old buffers and kernels are stale. Then either the device
//! rebuilt its context and new work (kernels and cuBLAS) succeeds on the same lanes, or, where
//! the driver refuses any new context after the fault (NVIDIA drivers do for an illegal
//! address), the device reports itself poisoned and every new op fails at once.
//!
//! A binary of its own (not a module of `gpu`): the fault poisons the GPU for the rest of the
//! process, and sanitizer runs, where the fault is the point, leave it out. Built with `nvrtc`
//! (Cargo.toml's `required-features`).

mod common;
use common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Error, GpuRef, Handles, Kernel};
use std::time::{Duration, Instant};

const SRC: &str = r#"
extern "C" __global__ void oob(float* p) {
    // A terabyte past the buffer: an illegal address, which poisons the context.
    p[(1ull << 40) / sizeof(float) + threadIdx.x] = 1.0f;
}
extern "C" __global__ void slow(float* p, unsigned long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < (long long)cycles) {}
    p[threadIdx.x] += 1.0f;
}
"#;

const LIMIT: Duration = Duration::from_secs(20);

fn slow(cx: &mut Handles, k: &Kernel, buf: &GpuRef<f32>, cycles: u64) -> cusched::Result<()> {
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let launch = cx.launch(k, cfg).read_write(buf).scalar(cycles);
    // SAFETY: 1. `slow` reads and writes buf, as declared; 2. its 32 threads touch elements
    // 0..32, and every buffer the tests pass holds 32; 3. the parameters are a float pointer and
    // a u64, as declared.
    unsafe { launch.enqueue() }.map(drop)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_fault_poisons_in_flight_work_and_the_device_recovers() {
    let Some(d) = gpu() else { return };
    let module = d.compile(SRC, &[]).unwrap();
    let (oob, slow_k) = (module.kernel("oob").unwrap(), module.kernel("slow").unwrap());
    let lanes: Vec<_> = (0..3).map(|i| d.lane(&format!("poison-{i}")).unwrap()).collect();
    let bufs: Vec<_> = (0..3).map(|_| d.alloc_zeros::<f32>(d.default_stream(), 32).unwrap()).collect();
    #[cfg(feature = "cublas")]
    {
        // A cuBLAS handle made before the fault, to be remade after it.
        let b = bufs[0].clone();
        lanes[0].submit(move |cx| cx.blas()?.scal(32, 1.0f32, (&b).into()).map(drop)).wait().unwrap();
    }
    let generation = d.generation();
    // About half a second of GPU time on each of two lanes, holding their buffers.
    let pending: Vec<_> = (0..2)
        .map(|i| {
            let (k, b) = (slow_k.clone(), bufs[i].clone());
            lanes[i].submit(move |cx| {
                slow(cx, &k, &b, 1_000_000_000)?;
                cx.keep(b);
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let (k, b) = (oob.clone(), bufs[2].clone());
    let start = Instant::now();
    let fault = lanes[2].submit(move |cx| {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let launch = cx.launch(&k, cfg).write(&b);
        // SAFETY: the fault is the point: `oob` writes 1 TiB past `b`, where no allocation of
        // this process is mapped (device memory here is a few hundred GiB at most), so the GPU
        // traps it as an illegal address and no memory Rust holds is touched; its one parameter
        // is the declared float pointer.
        unsafe { launch.enqueue() }.map(drop)
    });
    match fault.wait_timeout(LIMIT) {
        Err(Error::ContextPoisoned { call, status }) => eprintln!("fault reported as poison by {call} ({status:?})"),
        other => panic!("the faulting job must fail with ContextPoisoned, got {other:?}"),
    }
    for p in pending {
        match p.wait_timeout(LIMIT) {
            Err(Error::ContextPoisoned { .. }) => {}
            other => panic!("in-flight work must resolve ContextPoisoned, got {other:?}"),
        }
    }
    // Each wait above is bounded by LIMIT only to turn a hang into a failure; how long the
    // resolution took depends on the host's load and is reported, not asserted.
    eprintln!("all pending completions resolved {:?} after the fault", start.elapsed());
    assert!(d.generation() > generation, "the generation advanced");

    // Old handles are stale and touch nothing.
    assert!(matches!(bufs[0].download(d.default_stream()), Err(Error::Stale { .. })));
    // The kernel is checked before anything else: stale, whatever its arguments.
    let launch = slow_k.launch(&d, d.default_stream(), LaunchConfig::for_num_elems(32)).scalar(0u64).scalar(1u64);
    // SAFETY: nothing is launched: the kernel is stale, which `enqueue` checks before anything
    // else (what this asserts).
    let stale_launch = unsafe { launch.enqueue() };
    assert!(matches!(stale_launch, Err(Error::Stale { .. })), "{stale_launch:?}");

    if let Some(e) = d.poisoned() {
        // The driver refused a new context: new work must fail fast, never hang.
        eprintln!("the device could not rebuild its context on this driver: {e}");
        assert!(matches!(e, Error::ContextPoisoned { .. }));
        for lane in &lanes {
            // LIMIT only turns a hang into a failure; how fast it fails is not asserted.
            let r = lane.submit(|cx| cx.device().upload(cx.stream(), &[1u8]).map(drop)).wait_timeout(LIMIT);
            assert!(matches!(r, Err(Error::ContextPoisoned { .. })), "{r:?}");
        }
        // Every entry point classifies the driver's status the same way, whichever call sees it.
        let compiled = d.compile(SRC, &[]).and_then(|m| m.kernel("slow")).map(drop);
        assert!(matches!(compiled, Err(Error::ContextPoisoned { .. })), "compile: {compiled:?}");
        let host = d.alloc_host::<f32>(1024).map(drop);
        assert!(matches!(host, Err(Error::ContextPoisoned { .. })), "alloc_host: {host:?}");
        let dev = d.alloc::<f32>(d.default_stream(), 1024).map(drop);
        assert!(matches!(dev, Err(Error::ContextPoisoned { .. })), "alloc: {dev:?}");
        let sync = d.synchronize(d.default_stream());
        assert!(matches!(sync, Err(Error::ContextPoisoned { .. })), "synchronize: {sync:?}");
        return;
    }
    // New work succeeds on every lane: a freshly compiled kernel, and cuBLAS.
    let slow_k = d.compile(SRC, &[]).unwrap().kernel("slow").unwrap();
    for lane in &lanes {
        let k = slow_k.clone();
        let out = lane
            .submit(move |cx| {
                let b = cx.device().upload(cx.stream(), &[2.0f32; 32])?;
                slow(cx, &k, &b, 1000)?;
                b.download(cx.stream())
            })
            .wait_timeout(LIMIT)
            .unwrap();
        assert_eq!(out, vec![3.0f32; 32]);
    }
    #[cfg(feature = "cublas")]
    {
        let out = lanes[0]
            .submit(|cx| {
                let (x, y) =
                    (cx.device().upload(cx.stream(), &[1.0f32; 32])?, cx.device().upload(cx.stream(), &[1.0f32; 32])?);
                cx.blas()?.axpy(32, 2.0f32, (&x).into(), (&y).into())?;
                y.download(cx.stream())
            })
            .wait_timeout(LIMIT)
            .unwrap();
        assert_eq!(out, vec![3.0f32; 32], "a cuBLAS handle remade in the new context");
    }
    let fresh = d.alloc_zeros::<f32>(d.default_stream(), 32).unwrap();
    assert_eq!(fresh.download(d.default_stream()).unwrap(), vec![0.0f32; 32]);
}
