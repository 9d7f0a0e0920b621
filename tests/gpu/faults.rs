//! Faults on a real GPU: out-of-memory is a typed error and the device keeps working; the
//! watchdog times out long work but holds its keep-alives until the GPU is done. Skipped without
//! a GPU unless `CUSCHED_REQUIRE_GPU=1`.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, DeviceConfig, Error};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOW: &str = r#"
extern "C" __global__ void slow(float* p, unsigned long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < (long long)cycles) {}
    p[threadIdx.x] += 1.0f;
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_allocation_beyond_device_memory_is_out_of_memory_and_the_device_keeps_working() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let keep = d.upload(s, &[7u32; 1024]).unwrap();
    // 1 TiB of floats: more than any GPU has.
    let requested = 1usize << 40;
    match d.alloc::<u8>(s, requested) {
        Err(Error::OutOfMemory { requested: r, free }) => {
            assert_eq!(r, requested);
            assert!(free > 0 && free < requested, "free = {free}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // The failure is not sticky: existing buffers and new work are fine.
    assert_eq!(keep.download(s).unwrap(), vec![7u32; 1024]);
    let fresh = d.upload(s, &[1.5f32; 4096]).unwrap();
    assert_eq!(fresh.download(d.default_stream()).unwrap(), vec![1.5f32; 4096]);
    assert_eq!(d.generation(), 1, "an out-of-memory error does not poison the context");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_watchdog_times_out_long_work_and_holds_keep_alives_until_it_ends() {
    if gpu().is_none() {
        return;
    }
    let d =
        Device::open_with(0, DeviceConfig { watchdog: Some(Duration::from_millis(100)), ..DeviceConfig::default() })
            .unwrap();
    let k = d.compile(SLOW, &[]).unwrap().kernel("slow").unwrap();
    let lane = d.lane("watchdog").unwrap();
    let buf = d.alloc_zeros::<f32>(d.default_stream(), 32).unwrap();
    let marker = Arc::new(());
    let (m, b) = (marker.clone(), buf.clone());
    let start = Instant::now();
    let done = lane.submit(move |cx| {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        let launch = cx.launch(&k, cfg).read_write(&b).scalar(1_500_000_000u64);
        // SAFETY: 1. `slow` reads and writes b, as declared; 2. its 32 threads touch elements
        // 0..32 of a 32-element buffer; 3. the parameters are a float pointer and a u64, as
        // declared.
        unsafe { launch.enqueue() }?;
        cx.keep(m);
        Ok(())
    });
    assert!(matches!(done.wait(), Err(Error::Timeout { .. })));
    let fired = start.elapsed();
    assert!(fired < Duration::from_millis(500), "fired after {fired:?}");
    assert_eq!(Arc::strong_count(&marker), 2, "held while the kernel still runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Arc::strong_count(&marker) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(Arc::strong_count(&marker), 1, "released when the kernel ended");
    eprintln!("watchdog fired after {fired:?}; keep-alive released after {:?}", start.elapsed());
    assert_eq!(buf.download(d.default_stream()).unwrap(), vec![1.0f32; 32]);
}

/// The bytes the driver reports for the allocation that holds `buf` (`cuMemGetAddressRange`).
fn allocation_bytes<T: cusched::Element>(d: &Device, buf: &cusched::GpuRef<T>) -> usize {
    // SAFETY: the context is only bound to this thread to ask about a pointer; no cudarc memory
    // is made from it.
    let ctx = unsafe { d.cuda_context() }.unwrap();
    ctx.bind_to_thread().unwrap();
    let ptr = buf.raw_device_ptr().unwrap();
    let (mut base, mut size) = (0, 0usize);
    // SAFETY: valid out-pointers; `ptr` is a live allocation of the bound context.
    let r = unsafe { cusched::cudarc::driver::sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    assert_eq!(r, cusched::cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    assert_eq!(base, ptr, "a fresh buffer starts its allocation");
    size
}

/// Library kernels read whole aligned words: NCCL's send/receive kernel reads 4 bytes of a
/// 3-byte buffer, which compute-sanitizer reports as out of bounds of an allocation of exactly
/// 3 bytes. Every allocation is a whole number of 16-byte granules, so such reads stay inside it
/// (unless `CUSCHED_EXACT_ALLOCATIONS=1`, which `tools/sanitize.sh` sets to see every overrun:
/// then each allocation is exactly its bytes).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_allocations_are_whole_16_byte_granules() {
    let Some(d) = gpu() else { return };
    let exact = std::env::var("CUSCHED_EXACT_ALLOCATIONS").is_ok_and(|v| v == "1");
    let s = d.default_stream();
    for (len, padded) in [(1usize, 16usize), (3, 16), (16, 16), (17, 32), (1000, 1008)] {
        let b = d.alloc_zeros::<u8>(s, len).unwrap();
        let want = if exact { len } else { padded };
        assert_eq!(allocation_bytes(&d, &b), want, "{len} bytes");
        assert_eq!(b.len(), len, "the buffer keeps its length");
    }
    let f = d.upload(s, &[1.0f32, 2.0, 3.0]).unwrap();
    assert_eq!(allocation_bytes(&d, &f), if exact { 12 } else { 16 }, "3 f32");
    assert_eq!(f.download(s).unwrap(), [1.0, 2.0, 3.0]);
}
