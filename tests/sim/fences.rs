//! Fence minimality: for fixed schedules, the exact number of waits the tracker issues.

use crate::common::*;
use cusched::{Device, GpuRef, LaunchRecorder, StreamId};

fn launch(d: &Device, s: StreamId, reads: &[&GpuRef<u32>], writes: &[&GpuRef<u32>]) -> u64 {
    let before = d.stats().waits;
    let mut rec = LaunchRecorder::new_strict(s);
    for r in reads {
        rec.read(*r).unwrap();
    }
    for w in writes {
        rec.write(*w).unwrap();
    }
    rec.launch(d, |scope| scope.sim_kernel(|| {})).unwrap();
    d.stats().waits - before
}

fn setup(streams: usize) -> (Device, Vec<StreamId>) {
    let d = sim();
    let mut s = vec![d.default_stream()];
    for _ in 1..streams {
        s.push(d.new_stream().unwrap());
    }
    (d, s)
}

#[test]
fn same_stream_uses_need_no_wait() {
    let (d, s) = setup(1);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    assert_eq!(launch(&d, s[0], &[&x], &[]), 0);
    assert_eq!(launch(&d, s[0], &[], &[&x]), 0);
    assert_eq!(launch(&d, s[0], &[&x], &[&x]), 0);
}

#[test]
fn read_after_write_across_streams_waits_once() {
    let (d, s) = setup(2);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    assert_eq!(launch(&d, s[1], &[&x], &[]), 1, "first use on s1 waits for the allocation on s0");
    assert_eq!(launch(&d, s[1], &[&x], &[]), 0, "already covered");
    assert_eq!(launch(&d, s[0], &[], &[&x]), 1, "write waits for s1's read");
    assert_eq!(launch(&d, s[1], &[&x], &[]), 1, "read waits for the new write");
}

#[test]
fn reads_never_wait_on_reads() {
    let (d, s) = setup(3);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    assert_eq!(launch(&d, s[1], &[&x], &[]), 1);
    assert_eq!(launch(&d, s[2], &[&x], &[]), 1, "waits for the write on s0 only, not s1's read");
}

#[test]
fn write_after_reads_waits_for_every_reader() {
    let (d, s) = setup(4);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    d.synchronize(s[0]).unwrap();
    launch(&d, s[1], &[&x], &[]);
    launch(&d, s[2], &[&x], &[]);
    // The readers on s1 and s2 each covered the allocation; the writer on s3 needs both reads
    // (neither covers the other), and they imply the allocation.
    assert_eq!(launch(&d, s[3], &[], &[&x]), 2);
}

#[test]
fn chain_over_three_streams_issues_no_covered_wait() {
    let (d, s) = setup(3);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    let y = d.alloc_zeros::<u32>(s[1], 4).unwrap();
    // s1 reads x (waits for s0), writes y.
    assert_eq!(launch(&d, s[1], &[&x], &[&y]), 1);
    // s2 reads x and y: s1's event covers x's write on s0, so one wait suffices.
    assert_eq!(launch(&d, s[2], &[&x, &y], &[]), 1);
    // s2 again, and s0 reading y after s2 already covered it: s0 must still wait for s1.
    assert_eq!(launch(&d, s[2], &[&y], &[]), 0);
    assert_eq!(launch(&d, s[0], &[&y], &[]), 1);
}

#[test]
fn transitive_coverage_through_an_unrelated_buffer() {
    let (d, s) = setup(3);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    let z = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    // s1 waits on s0 (via z), which also covers x's allocation.
    assert_eq!(launch(&d, s[1], &[&z], &[]), 1);
    assert_eq!(launch(&d, s[1], &[&x], &[]), 0);
    // s2 waits on s1's position, which carries s0's: reading x on s2 afterwards needs nothing.
    let w = d.alloc_zeros::<u32>(s[1], 4).unwrap();
    assert_eq!(launch(&d, s[2], &[&w], &[]), 1);
    assert_eq!(launch(&d, s[2], &[&x], &[]), 0);
}

#[test]
fn steady_state_creates_no_events() {
    let (d, s) = setup(2);
    let x = d.alloc_zeros::<u32>(s[0], 4).unwrap();
    for _ in 0..50 {
        launch(&d, s[0], &[], &[&x]);
        launch(&d, s[1], &[&x], &[]);
    }
    d.synchronize(s[0]).unwrap();
    d.synchronize(s[1]).unwrap();
    let created = d.events_created();
    for _ in 0..500 {
        launch(&d, s[0], &[], &[&x]);
        launch(&d, s[1], &[&x], &[]);
    }
    assert!(d.events_created() - created <= 4, "{} new events in steady state", d.events_created() - created);
    assert!(d.sim_hazards().unwrap().is_empty());
}
