//! Pinned host memory on a real GPU: a dropped `HostBuffer` never frees its memory while the
//! device is busy (`cuMemFreeHost` waits for the whole device and holds up every thread's CUDA
//! calls), it is reused by the next buffer of its size class only once its copies finished, and
//! `trim_host_cache` gives it back.

use crate::common::slow::{fill, kernels, N};
use crate::common::*;
use std::time::{Duration, Instant};

/// Elements of the big buffers: 16 MiB of `f32`, a typical staging buffer.
const BIG: usize = 4 << 20;
/// Cycles of the long kernel: about 200 ms on an H100.
const LONG: i64 = 400_000_000;

#[test]
#[ignore = "needs a CUDA GPU"]
fn dropping_a_host_buffer_does_not_stall_other_streams() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let (busy, other) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let out = d.alloc_zeros::<f32>(busy, N).unwrap();
    let small = d.alloc_zeros::<f32>(other, 1024).unwrap();
    let small_host = d.host_from_slice(&[1f32; 1024]).unwrap();
    let big = d.alloc_zeros::<f32>(other, BIG).unwrap();

    let t = Instant::now();
    fill(&d, &k, busy, &out, 1.0, LONG).unwrap();
    d.synchronize(busy).unwrap();
    let spin = t.elapsed();
    assert!(spin > Duration::from_millis(40), "the long kernel took only {spin:?}");

    let host = d.host_from_slice(&vec![2f32; BIG]).unwrap();
    big.copy_from_host(other, &host).unwrap();
    d.synchronize(other).unwrap();
    fill(&d, &k, busy, &out, 2.0, LONG).unwrap();
    // The buffer's copy is done, but the device is busy: freeing its memory now would hold up
    // every CUDA call until the long kernel ends.
    drop(host);
    std::thread::sleep(spin / 10);
    let t = Instant::now();
    small.copy_from_host(other, &small_host).unwrap();
    let enqueue = t.elapsed();
    d.synchronize(busy).unwrap();
    d.synchronize(other).unwrap();
    eprintln!("long kernel {spin:?}; a copy enqueued after a host buffer dropped took {enqueue:?}");
    assert!(enqueue < spin / 4, "enqueueing a copy took {enqueue:?} while a {spin:?} kernel ran: held up by a free");
    assert_eq!(d.host_cache_stats().cached_blocks, 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_dropped_host_buffer_is_reused_zeroed_and_trim_releases_it() {
    let Some(d) = gpu() else { return };
    let s = d.default_stream();
    let before = d.host_cache_stats();
    let gpu = d.alloc_zeros::<f32>(s, BIG).unwrap();
    let host = d.host_from_slice(&vec![3f32; BIG]).unwrap();
    gpu.copy_from_host(s, &host).unwrap();
    drop(host);
    d.synchronize(s).unwrap();
    let parked = d.host_cache_stats();
    assert_eq!(parked.cached_blocks, before.cached_blocks + 1);
    assert!(parked.cached_bytes >= before.cached_bytes + BIG * 4);

    // A smaller buffer of the same size class takes the block, zeroed.
    let again = d.alloc_host::<f32>(BIG - 100).unwrap();
    let stats = d.host_cache_stats();
    assert_eq!(stats.reused, before.reused + 1, "{stats:?}");
    assert_eq!(stats.cached_blocks, before.cached_blocks);
    assert!(again.read().unwrap().iter().all(|&v| v == 0.0), "a reused block is not zeroed");
    let copy = d.host_from_slice(&vec![4f32; BIG - 100]).unwrap();
    assert!(copy.read().unwrap().iter().all(|&v| v == 4.0));

    let mut back = d.alloc_host::<f32>(BIG).unwrap();
    gpu.copy_to_host(s, &mut back).unwrap();
    assert!(back.read().unwrap().iter().all(|&v| v == 3.0));
    drop((again, copy, back));
    let released = d.trim_host_cache();
    assert!(released >= 3 * BIG * 4, "trim released {released} bytes");
    let stats = d.host_cache_stats();
    assert_eq!((stats.cached_bytes, stats.cached_blocks), (0, 0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_block_whose_copy_is_still_queued_is_not_reused() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let s = d.new_stream().unwrap();
    let out = d.alloc_zeros::<f32>(s, N).unwrap();
    let gpu = d.alloc_zeros::<f32>(s, BIG).unwrap();
    let host = d.host_from_slice(&vec![5f32; BIG]).unwrap();
    let before = d.host_cache_stats();
    // The copy waits behind the long kernel, so it has not read `host` when the buffer drops.
    fill(&d, &k, s, &out, 1.0, LONG / 4).unwrap();
    gpu.copy_from_host(s, &host).unwrap();
    drop(host);
    let other = d.host_from_slice(&vec![7f32; BIG]).unwrap();
    let stats = d.host_cache_stats();
    assert_eq!(stats.reused, before.reused, "the block was handed out before its copy ran");
    assert_eq!(stats.allocated, before.allocated + 1);
    d.synchronize(s).unwrap();
    let got = gpu.download(s).unwrap();
    assert!(got.iter().all(|&v| v == 5.0), "the queued copy read memory a new buffer overwrote");
    drop(other);
}
