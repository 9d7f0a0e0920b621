//! Peer copies and uses across devices on real GPUs: slow kernels on both devices, so that a
//! missing fence shows up as wrong data. Each test runs on two GPUs (skipped with one), and on
//! two contexts of GPU 0 (`Device::open` and `Device::open_isolated`), so that one GPU exercises
//! the cross-context path: waits on another context's events, `cuMemcpyPeerAsync` between
//! contexts. Skipped without a GPU unless `CUSCHED_REQUIRE_GPU=1`.

use crate::common::slow::*;
use crate::common::*;
use cusched::{Device, DeviceConfig};

/// The two devices of a test: two GPUs, or two contexts of GPU 0.
fn two_gpus() -> Option<(Device, Device)> {
    let a = gpu()?;
    match Device::open(1) {
        Ok(b) => Some((a, b)),
        Err(e) => {
            eprintln!("skipping the two-GPU variant: {e}");
            None
        }
    }
}

fn two_contexts_of_gpu0() -> Option<(Device, Device)> {
    let a = gpu()?;
    let b = Device::open_isolated(0, DeviceConfig::default()).expect("a second context on GPU 0");
    Some((a, b))
}

/// Read after write both ways, pulled (the copy on the destination's stream) and pushed (on
/// the source's): the copy must wait for the slow write on the other device.
fn peer_copies_both_ways(a: Device, b: Device) {
    let (ka, kb) = (kernels(&a), kernels(&b));
    let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let x = a.alloc_zeros::<f32>(sa, N).unwrap();
    let y = b.alloc_zeros::<f32>(sb, N).unwrap();
    for round in 0..4 {
        let v = round as f32 + 1.0;
        // A -> B, pulled on B's stream.
        fill(&a, &ka, sa, &x, v, SLOW).unwrap();
        x.copy_to(sb, &y).unwrap();
        assert!(all_eq(&y.download(b.default_stream()).unwrap(), v), "round {round}: A -> B pulled");
        // B -> A, pushed on B's stream.
        fill(&b, &kb, sb, &y, v + 10.0, SLOW).unwrap();
        y.copy_to(sb, &x).unwrap();
        assert!(all_eq(&x.download(a.default_stream()).unwrap(), v + 10.0), "round {round}: B -> A pushed");
        // A -> B pushed on A's default stream, after a slow write on A's other stream.
        fill(&a, &ka, sa, &x, v + 20.0, SLOW).unwrap();
        x.copy_to(a.default_stream(), &y).unwrap();
        assert!(all_eq(&y.download(sb).unwrap(), v + 20.0), "round {round}: A -> B pushed");
    }
}

/// A slow reader of y on B, then a peer copy into y from A's stream: the copy must wait for the
/// read. Then a slow writer of y on B, then a peer copy into y: the copy must land last.
fn peer_write_after_read_and_write(a: Device, b: Device) {
    let kb = kernels(&b);
    let sb = b.new_stream().unwrap();
    let x = a.upload(a.default_stream(), &vec![1.0f32; N]).unwrap();
    let y = b.upload(sb, &vec![2.0f32; N]).unwrap();
    let z = b.alloc_zeros::<f32>(sb, N).unwrap();
    let w = b.upload(sb, &vec![3.0f32; N]).unwrap();
    b.synchronize(sb).unwrap();
    copy(&b, &kb, sb, &z, &y, SLOW).unwrap();
    x.copy_to(a.default_stream(), &y).unwrap();
    assert!(all_eq(&z.download(b.default_stream()).unwrap(), 2.0), "the peer write overtook a slow read");
    assert!(all_eq(&y.download(b.default_stream()).unwrap(), 1.0));
    copy(&b, &kb, sb, &y, &w, SLOW).unwrap();
    x.copy_to(a.default_stream(), &y).unwrap();
    assert!(all_eq(&y.download(b.default_stream()).unwrap(), 1.0), "the slow write on B landed after the peer write");
}

/// The source is dropped right after a peer read on the other device, and its memory handed
/// out again at once on its home stream and overwritten: the free must wait for the read.
fn free_after_peer_read(a: Device, b: Device) {
    let (ka, kb) = (kernels(&a), kernels(&b));
    let sa = a.default_stream();
    let sb = b.new_stream().unwrap();
    let y = b.alloc_zeros::<f32>(sb, N).unwrap();
    for round in 0..4 {
        let v = round as f32 + 5.0;
        let x = a.alloc::<f32>(sa, N).unwrap();
        fill(&a, &ka, sa, &x, v, 0).unwrap();
        // A slow use on B first, so the peer read of x runs late.
        let z = b.alloc_zeros::<f32>(sb, N).unwrap();
        fill(&b, &kb, sb, &z, 0.0, SLOW).unwrap();
        x.copy_to(sb, &y).unwrap();
        drop(x);
        // Likely the same memory, from the stream-ordered pool: overwritten at once.
        let reuse = a.alloc::<f32>(sa, N).unwrap();
        fill(&a, &ka, sa, &reuse, -1.0, 0).unwrap();
        assert!(all_eq(&y.download(sb).unwrap(), v), "round {round}: x was freed before the peer read");
    }
}

/// GPU0 -> GPU1 -> GPU0: produce on A, transform on B, bring back to A, five rounds, with slow
/// kernels at every stage.
fn pipeline_a_b_a(a: Device, b: Device) {
    let (ka, kb) = (kernels(&a), kernels(&b));
    let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let src = a.alloc_zeros::<f32>(sa, N).unwrap();
    let mid = b.alloc_zeros::<f32>(sb, N).unwrap();
    let back = a.alloc_zeros::<f32>(a.default_stream(), N).unwrap();
    for round in 1..=5 {
        let r = round as f32;
        fill(&a, &ka, sa, &src, r, SLOW).unwrap();
        src.copy_to(sb, &mid).unwrap();
        add(&b, &kb, sb, &mid, 100.0 * r, SLOW).unwrap();
        mid.copy_to(a.default_stream(), &back).unwrap();
        add(&a, &ka, sa, &back, 1000.0, SLOW).unwrap();
        assert!(all_eq(&back.download(a.default_stream()).unwrap(), 1000.0 + 101.0 * r), "round {round}");
    }
}

/// Empty copies, then copies on streams of both devices in turn, each after a slow write on
/// the other device, past solo mode on both: a copy's commit records its event with the
/// context its enqueue made current, so a commit that followed a copy on the other device (or
/// an empty copy, which enqueues nothing) must still record in its own stream's context, and
/// the slow readers that follow must see every copy's data.
fn empty_then_alternating_copies(a: Device, b: Device) {
    let (ka, kb) = (kernels(&a), kernels(&b));
    let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let (ea, eb) = (a.alloc_zeros::<f32>(sa, 0).unwrap(), b.alloc_zeros::<f32>(sb, 0).unwrap());
    let x = a.alloc_zeros::<f32>(sa, N).unwrap();
    let y = b.alloc_zeros::<f32>(sb, N).unwrap();
    for round in 0..4 {
        let v = round as f32 + 1.0;
        ea.copy_to(sa, &eb).unwrap();
        eb.copy_to(sb, &ea).unwrap();
        fill(&a, &ka, sa, &x, v, SLOW).unwrap();
        x.copy_to(sb, &y).unwrap();
        eb.copy_to(sa, &ea).unwrap();
        fill(&b, &kb, sb, &y, v + 10.0, SLOW).unwrap();
        y.copy_to(sa, &x).unwrap();
        assert!(all_eq(&x.download(a.default_stream()).unwrap(), v + 10.0), "round {round}: B -> A on A's stream");
        x.copy_to(a.default_stream(), &y).unwrap();
        ea.copy_to(a.default_stream(), &eb).unwrap();
        assert!(all_eq(&y.download(sb).unwrap(), v + 10.0), "round {round}: A -> B on A's default stream");
    }
}

macro_rules! both_variants {
    ($body:ident, $two:ident, $ctx:ident) => {
        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $two() {
            let Some((a, b)) = two_gpus() else { return };
            bounded(std::time::Duration::from_secs(120), move || $body(a, b));
        }

        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $ctx() {
            let Some((a, b)) = two_contexts_of_gpu0() else { return };
            bounded(std::time::Duration::from_secs(120), move || $body(a, b));
        }
    };
}

both_variants!(peer_copies_both_ways, gpu_peer_copies_both_ways_two_gpus, gpu_peer_copies_both_ways_two_contexts);
both_variants!(
    peer_write_after_read_and_write,
    gpu_peer_write_after_read_and_write_two_gpus,
    gpu_peer_write_after_read_and_write_two_contexts
);
both_variants!(
    free_after_peer_read,
    gpu_peer_free_after_peer_read_two_gpus,
    gpu_peer_free_after_peer_read_two_contexts
);
both_variants!(pipeline_a_b_a, gpu_peer_pipeline_a_b_a_two_gpus, gpu_peer_pipeline_a_b_a_two_contexts);
both_variants!(
    empty_then_alternating_copies,
    gpu_peer_empty_then_alternating_copies_two_gpus,
    gpu_peer_empty_then_alternating_copies_two_contexts
);

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_peer_access_is_reported_and_idempotent() {
    let Some((a, b)) = two_gpus() else { return };
    let first = a.enable_peer_access(&b).unwrap();
    assert_eq!(a.enable_peer_access(&b).unwrap(), first, "enabling twice changes nothing");
    eprintln!("peer access GPU0 -> GPU1: {first}");
    let Some((c, d)) = two_contexts_of_gpu0() else { return };
    assert!(!c.enable_peer_access(&d).unwrap(), "one GPU needs no peer access");
}
