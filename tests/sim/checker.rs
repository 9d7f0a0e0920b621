//! The hazard checker fails when it should: each ordering rule of the tracker, broken alone
//! through a `FenceMutation`, is caught with the expected hazard kind, while the same schedule
//! with no mutation is clean; and kernels that touch memory they did not declare are caught.
//!
//! Every step synchronizes the streams it used before the next is issued, so the simulated
//! kernels run in program order and each hazard's kind (which depends on which of an
//! unordered pair ran first) is deterministic. Host synchronization is no stream wait, so it
//! orders nothing as far as the checker is concerned.

use crate::common::*;
use cusched::{Device, FenceMutation, GpuRef, Hazard, HazardKind, LaunchRecorder, SimOp, StreamId};

fn use_once(d: &Device, s: StreamId, buf: &GpuRef<u32>, write: bool) {
    let mut rec = LaunchRecorder::new_strict(s);
    let m = buf.sim_data().unwrap();
    if write {
        rec.write(buf).unwrap();
        rec.launch(d, move |sc| sc.sim_kernel(move || m.lock().iter_mut().for_each(|x| *x += 1))).unwrap();
    } else {
        rec.read(buf).unwrap();
        rec.launch(d, move |sc| sc.sim_kernel(move || assert!(m.read().len() == 4))).unwrap();
    }
    d.synchronize(s).unwrap();
}

/// One schedule that needs every rule, on streams s0, s1, s2 (each step completes before the
/// next is issued):
///
/// 1. allocate x on s0                        (s0 op 1: the allocation's write)
/// 2. read x on s1                            needs the allocation-as-write and cross-stream RAW
/// 3. read x on s2                            the same
/// 4. write x on s0                           needs WAR on both readers, s1's is not the latest
/// 5. read x on s1                            needs cross-stream RAW on step 4
/// 6. drop x: the free on s0                  needs the free's fence on step 5's read
///
/// Returns the hazards on x, and x's id.
fn every_rule_schedule(mutation: Option<FenceMutation>) -> (Vec<Hazard>, u64) {
    let d = sim_mutated(mutation);
    let s = [d.default_stream(), d.new_stream().unwrap(), d.new_stream().unwrap()];
    let x = d.upload(s[0], &[0u32; 4]).unwrap();
    let id = x.id();
    d.synchronize(s[0]).unwrap();
    use_once(&d, s[1], &x, false);
    use_once(&d, s[2], &x, false);
    use_once(&d, s[0], &x, true);
    use_once(&d, s[1], &x, false);
    drop(x);
    for st in s {
        d.synchronize(st).unwrap();
    }
    let hazards = d.sim_hazards().unwrap();
    assert!(hazards.iter().all(|h| h.buffer == id), "{hazards:?}");
    (hazards, id)
}

fn op(stream: u32, op: u64) -> SimOp {
    SimOp { stream, op }
}

fn pairs(hazards: &[Hazard]) -> Vec<(HazardKind, SimOp, SimOp)> {
    hazards.iter().map(|h| (h.kind, h.earlier, h.later)).collect()
}

#[test]
fn the_schedule_is_clean_without_mutation() {
    let (hazards, _) = every_rule_schedule(None);
    assert!(hazards.is_empty(), "{hazards:?}");
}

#[test]
fn without_any_fence_every_ordering_rule_is_reported() {
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::NoFences));
    let kinds: Vec<_> = hazards.iter().map(|h| h.kind).collect();
    assert!(kinds.contains(&HazardKind::ReadAfterWrite), "{hazards:?}");
    assert!(kinds.contains(&HazardKind::WriteAfterRead), "{hazards:?}");
}

#[test]
fn a_write_fenced_on_the_latest_reader_only_is_a_write_after_read() {
    // cudarc's single read event: the write on s0 waits for s2's read, not s1's.
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::LatestReaderOnly));
    assert_eq!(pairs(&hazards), vec![(HazardKind::WriteAfterRead, op(1, 1), op(0, 2))]);
}

#[test]
fn an_allocation_not_recorded_as_a_write_is_a_read_after_write() {
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::NoAllocationWrite));
    assert_eq!(
        pairs(&hazards),
        vec![(HazardKind::ReadAfterWrite, op(0, 1), op(1, 1)), (HazardKind::ReadAfterWrite, op(0, 1), op(2, 1))]
    );
}

#[test]
fn an_unfenced_free_is_a_write_after_read() {
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::NoFreeFence));
    assert_eq!(pairs(&hazards), vec![(HazardKind::WriteAfterRead, op(1, 2), op(0, 3))]);
}

#[test]
fn a_read_not_fenced_on_another_streams_write_is_a_read_after_write() {
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::NoCrossStreamRaw));
    assert_eq!(
        pairs(&hazards),
        vec![
            (HazardKind::ReadAfterWrite, op(0, 1), op(1, 1)),
            (HazardKind::ReadAfterWrite, op(0, 1), op(2, 1)),
            (HazardKind::ReadAfterWrite, op(0, 2), op(1, 2)),
        ]
    );
}

#[test]
fn a_write_after_write_unfenced_is_reported_as_such() {
    // Without fences, a write on s1 after the allocation's write on s0 is unordered.
    let d = sim_with(false);
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.alloc_zeros::<u32>(s0, 4).unwrap();
    d.synchronize(s0).unwrap();
    use_once(&d, s1, &x, true);
    let hazards = d.sim_hazards().unwrap();
    assert_eq!(pairs(&hazards), vec![(HazardKind::WriteAfterWrite, op(0, 1), op(1, 1))]);
}

/// A kernel on `s` that declares `declare` (read only) and runs `body`.
fn kernel(d: &Device, s: StreamId, declare: &GpuRef<u32>, body: impl FnOnce() + Send + 'static) {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(declare).unwrap();
    rec.launch(d, move |sc| sc.sim_kernel(body)).unwrap();
    d.synchronize(s).unwrap();
}

#[test]
fn a_kernel_writing_a_buffer_it_did_not_declare_is_reported() {
    let d = sim_listing_hazards();
    let s = d.default_stream();
    let (a, b) = (d.upload(s, &[1u32; 4]).unwrap(), d.upload(s, &[2u32; 4]).unwrap());
    let bm = b.sim_data().unwrap();
    kernel(&d, s, &a, move || bm.lock()[0] = 9);
    let hazards = d.sim_hazards().unwrap();
    assert_eq!(hazards.len(), 1, "{hazards:?}");
    assert_eq!((hazards[0].buffer, hazards[0].kind), (b.id(), HazardKind::Undeclared));
    assert_eq!(hazards[0].earlier, hazards[0].later);
}

#[test]
fn a_kernel_reading_a_buffer_it_did_not_declare_is_reported_once() {
    let d = sim_listing_hazards();
    let s = d.default_stream();
    let (a, b) = (d.upload(s, &[1u32; 4]).unwrap(), d.upload(s, &[2u32; 4]).unwrap());
    let bm = b.sim_data().unwrap();
    kernel(&d, s, &a, move || {
        for _ in 0..3 {
            assert_eq!(bm.read()[0], 2);
        }
    });
    let hazards = d.sim_hazards().unwrap();
    assert_eq!(hazards.iter().map(|h| (h.buffer, h.kind)).collect::<Vec<_>>(), vec![(b.id(), HazardKind::Undeclared)]);
}

#[test]
fn a_kernel_writing_a_buffer_it_declared_read_only_is_reported() {
    let d = sim_listing_hazards();
    let s = d.default_stream();
    let a = d.upload(s, &[1u32; 4]).unwrap();
    let am = a.sim_data().unwrap();
    kernel(&d, s, &a, move || am.lock()[0] = 5);
    let hazards = d.sim_hazards().unwrap();
    assert_eq!(hazards.iter().map(|h| (h.buffer, h.kind)).collect::<Vec<_>>(), vec![(a.id(), HazardKind::Undeclared)]);
}

#[test]
fn declared_accesses_and_host_accesses_are_not_reported() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.upload(s0, &[1u32; 4]).unwrap();
    let b = d.alloc_zeros::<u32>(s1, 4).unwrap();
    let mut host = d.host_from_slice(&[7u32; 4]).unwrap();
    // Reading a buffer declared for writing is ordered at least as strictly as a read.
    let mut rec = LaunchRecorder::new_strict(s1);
    rec.read(&a).unwrap().write(&b).unwrap();
    let (am, bm) = (a.sim_data().unwrap(), b.sim_data().unwrap());
    rec.launch(&d, move |sc| {
        sc.sim_kernel(move || {
            let v: Vec<u32> = am.read().iter().map(|x| x * 3).collect();
            assert_eq!(bm.read().len(), 4);
            bm.lock().copy_from_slice(&v);
        })
    })
    .unwrap();
    // The crate's own copies declare what they touch.
    b.copy_to_host(s0, &mut host).unwrap();
    a.copy_from_host(s1, &host).unwrap();
    b.copy_from(s0, &a).unwrap();
    assert_eq!(b.download(s1).unwrap(), vec![3u32; 4]);
    assert_eq!(&*host.read().unwrap(), &[3u32; 4]);
    host.write().unwrap()[0] = 1;
    // Host code touching simulated memory is no kernel access.
    assert_eq!(a.sim_data().unwrap().lock()[0], 3);
    d.synchronize(s0).unwrap();
    d.synchronize(s1).unwrap();
    drop((a, b));
    d.synchronize(s0).unwrap();
    d.synchronize(s1).unwrap();
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards().unwrap());
}

#[test]
fn a_second_stream_not_waiting_for_the_first_streams_solo_work_is_a_read_after_write() {
    // x's upload runs while s0 is the device's only stream, so it is in no buffer state: only
    // the floor orders s1's and s2's first reads after it.
    let (hazards, _) = every_rule_schedule(Some(FenceMutation::NoSoloFloor));
    assert_eq!(
        pairs(&hazards),
        vec![(HazardKind::ReadAfterWrite, op(0, 1), op(1, 1)), (HazardKind::ReadAfterWrite, op(0, 1), op(2, 1))]
    );
}
