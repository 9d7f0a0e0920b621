//! Soundness on a real GPU: host-to-device copies from pinned memory finish with the call that
//! takes the slice, and typed launches name the variant (foreign device, stale generation) and
//! the parameter of a rejected buffer.
//!
//! The copy tests hold the stream behind a gate kernel that spins on a pinned flag, so that a
//! copy left running asynchronously would read the source only after the host has overwritten
//! it. The gate also opens by itself after a few seconds, so that a copy that waits (the correct
//! behaviour) is not deadlocked by it.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Device, Error, HostBuffer, Kernel, StreamId};
use std::time::Duration;

const GATE: &str = r#"
extern "C" __global__ void gate(const volatile unsigned* flag, unsigned long long timeout_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        if (*flag) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < timeout_ns);
}
extern "C" __global__ void fill(float* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 1.0f;
}
extern "C" __global__ void copy(const float* a, float* b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}
"#;

/// 16 MiB: long enough a copy that an unwaited one is still reading when the host writes.
const N: usize = 4 << 20;
const LIMIT: Duration = Duration::from_secs(120);

/// Queues a gate on `s` that holds back later work until `flag[0]` is non-zero, or five
/// seconds have passed.
fn close_gate(d: &Device, s: StreamId, gate: &Kernel, flag: &mut HostBuffer<u32>) {
    flag.write().unwrap()[0] = 0;
    // Pinned memory is mapped into the device's address space at the same address (unified
    // addressing), so the host pointer is the kernel's pointer.
    let addr = flag.read().unwrap().as_ptr() as u64;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: 1. `gate` writes nothing; it only reads the flag at `addr`, one pinned `u32` that
    // stays allocated while it runs (the test drops `flag` only after downloading, which waits
    // for the stream), and a read the host races with sees the old or the new value; 2. it
    // takes a pointer and a u64, the two declared 8-byte parameters; 3. it ends within five
    // seconds even if the flag is never set.
    let launched = unsafe { gate.launch(d, s, cfg).scalar(addr).scalar(5_000_000_000u64).enqueue() };
    launched.unwrap();
}

fn open_gate(flag: &mut HostBuffer<u32>) {
    flag.write().unwrap()[0] = 1;
}

/// A device, a stream, the gate kernel and its flag, and `N` numbered values both in a `Vec`
/// and in pinned memory.
struct Setup {
    d: Device,
    s: StreamId,
    gate: Kernel,
    flag: HostBuffer<u32>,
    original: Vec<u32>,
    host: HostBuffer<u32>,
}

fn setup() -> Option<Setup> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let gate = d.compile(GATE, &[]).unwrap().kernel("gate").unwrap();
    let flag = d.alloc_host::<u32>(1).unwrap();
    let original: Vec<u32> = (0..N as u32).collect();
    let host = d.host_from_slice(&original).unwrap();
    Some(Setup { d, s, gate, flag, original, host })
}

fn overwrite(host: &mut HostBuffer<u32>) {
    host.write().unwrap().iter_mut().for_each(|x| *x = u32::MAX);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn upload_from_pinned_memory_has_read_it_on_return() {
    bounded(LIMIT, || {
        let Some(Setup { d, s, gate, mut flag, original, mut host }) = setup() else { return };
        close_gate(&d, s, &gate, &mut flag);
        let buf = {
            let src = host.read().unwrap();
            d.upload(s, &src[..]).unwrap()
        };
        // `upload` promises its slice may be reused once it returns.
        overwrite(&mut host);
        open_gate(&mut flag);
        let got = buf.download(s).unwrap();
        let bad = got.iter().zip(&original).filter(|(g, o)| g != o).count();
        assert_eq!(bad, 0, "{bad} of {N} elements were read after upload returned");
    });
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn copy_from_slice_from_pinned_memory_has_read_it_on_return() {
    bounded(LIMIT, || {
        let Some(Setup { d, s, gate, mut flag, original, mut host }) = setup() else { return };
        let buf = d.alloc_zeros::<u32>(s, N).unwrap();
        close_gate(&d, s, &gate, &mut flag);
        {
            let src = host.read().unwrap();
            buf.copy_from_slice(s, &src[..]).unwrap();
        }
        overwrite(&mut host);
        open_gate(&mut flag);
        let got = buf.download(s).unwrap();
        let bad = got.iter().zip(&original).filter(|(g, o)| g != o).count();
        assert_eq!(bad, 0, "{bad} of {N} elements were read after copy_from_slice returned");
    });
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_launch_reports_a_foreign_buffer_as_foreign_device() {
    let Some(d) = gpu() else { return };
    let other = Device::open(0).unwrap();
    let s = d.new_stream().unwrap();
    let fill = d.compile(GATE, &[]).unwrap().kernel("fill").unwrap();
    let foreign = other.alloc_zeros::<f32>(other.default_stream(), 4).unwrap();
    // SAFETY: the launch is refused before anything is enqueued (the buffer belongs to another
    // device); were it launched, `fill` writes 4 floats into a 4-float buffer.
    let r = unsafe { fill.launch(&d, s, LaunchConfig::for_num_elems(4)).write(&foreign).scalar(4u32).enqueue() };
    match r {
        Err(Error::ForeignDevice { what, .. }) => assert!(what.contains("parameter 0"), "{what}"),
        Err(e) => panic!("expected ForeignDevice naming parameter 0, got {e:?}"),
        Ok(_) => panic!("a buffer of another device was launched"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn typed_launch_reports_a_stale_buffer_as_stale() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let old = d.alloc_zeros::<f32>(s, 4).unwrap();
    d.advance_generation();
    let copy = d.compile(GATE, &[]).unwrap().kernel("copy").unwrap();
    let fresh = d.alloc_zeros::<f32>(s, 4).unwrap();
    // SAFETY: the launch is refused before anything is enqueued (`old` is stale); were it
    // launched, `copy` reads and writes 4 floats of two 4-float buffers.
    let r =
        unsafe { copy.launch(&d, s, LaunchConfig::for_num_elems(4)).read(&fresh).write(&old).scalar(4u32).enqueue() };
    match r {
        Err(Error::Stale { what, .. }) => assert!(what.contains("parameter 1"), "{what}"),
        Err(e) => panic!("expected Stale naming parameter 1, got {e:?}"),
        Ok(_) => panic!("a stale buffer was launched"),
    }
}
