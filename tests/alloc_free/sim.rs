//! The tracking layers allocate nothing per op in steady state.
//!
//! A counting global allocator counts the allocations of the calling thread only (simulated
//! streams and the completion thread are other threads). The ops enqueue no kernel: a
//! simulated kernel is a boxed closure sent over a channel, which is the simulator's cost, not
//! the tracker's. What is left is exactly the tracker and recorder: record, preflight (reserve,
//! plan, fence), commit (position, event, publish).

use crate::allocs;
use crate::common::*;
use cusched::{Device, GpuRef, LaunchRecorder};

/// `c = f(a, b)` declared on a recorder, with nothing enqueued.
fn op(d: &Device, s: cusched::StreamId, a: &GpuRef<f32>, b: &GpuRef<f32>, c: &GpuRef<f32>) {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(a).unwrap().read(b).unwrap().write(c).unwrap();
    rec.launch(d, |_| Ok(())).unwrap();
}

/// Allocations per op over `n` ops after a warm-up, alternating over `streams`.
fn per_op(d: &Device, streams: &[cusched::StreamId], n: u64) -> f64 {
    let s = streams[0];
    let (a, b, c) = (d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap());
    for i in 0..1000 {
        op(d, streams[i % streams.len()], &a, &b, &c);
    }
    d.synchronize(s).unwrap();
    let before = allocs();
    for i in 0..n as usize {
        op(d, streams[i % streams.len()], &a, &b, &c);
    }
    let n_allocs = allocs() - before;
    for &s in streams {
        d.synchronize(s).unwrap();
    }
    n_allocs as f64 / n as f64
}

#[test]
fn a_one_stream_op_allocates_nothing() {
    let d = sim();
    let got = per_op(&d, &[d.default_stream()], 2000);
    assert_eq!(got, 0.0, "{got} allocations per op on the tracking path of a one-stream device");
}

#[test]
fn a_one_stream_device_with_an_unused_second_stream_allocates_nothing() {
    let d = sim();
    let _unused = d.new_stream().unwrap();
    let got = per_op(&d, &[d.default_stream()], 2000);
    assert_eq!(got, 0.0, "{got} allocations per op on the tracking path of a one-stream device");
}

/// With several streams every commit records an event, and the simulator's `cuEventRecord`
/// allocates its own record (one `Arc`, plus a channel block every few dozen sends). Beyond
/// that, the tracker must add nothing.
#[test]
fn a_several_stream_op_allocates_only_the_simulated_record() {
    let d = sim();
    let s2 = d.new_stream().unwrap();
    let got = per_op(&d, &[d.default_stream(), s2], 2000);
    assert!(got < 1.1, "{got} allocations per op: the simulated record accounts for about 1.03");
}

struct NoopTrace;
impl cusched::KernelTrace for NoopTrace {}

/// A traced op without a completion hands its ticket to the device's trace backlog, which the
/// completion thread drains a watch at a time: no shared completion state per op.
#[test]
fn a_traced_one_stream_op_allocates_no_completion() {
    let d = sim();
    d.set_trace(std::sync::Arc::new(NoopTrace), cusched::TraceOptions::default()).unwrap();
    let got = per_op(&d, &[d.default_stream()], 2000);
    assert!(got < 0.5, "{got} allocations per traced op: one would be a completion per op");
}
