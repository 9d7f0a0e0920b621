//! Recorder rules on the simulated backend: dedup, every misuse error, strict and permissive
//! handling of untracked, foreign and stale memory, drop after preflight, atomic
//! preflight-to-commit across threads.

use crate::common::*;
use cusched::{Device, DeviceConfig, Error, External, LaunchRecorder, SimConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn duplicate_uses_merge_to_the_strongest_access() {
    let d = sim();
    let s = d.default_stream();
    let a = d.alloc_zeros::<f32>(s, 4).unwrap();
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(&a).unwrap().read(&a).unwrap();
    assert_eq!(rec.recorded_count(), 1);
    rec.write(&a).unwrap();
    assert_eq!(rec.recorded_count(), 1);
    rec.launch(&d, |_| Ok(())).unwrap();

    // The merged use was a write: a read on another stream must now wait for it, and a later
    // write on a third stream must wait for that read.
    let s2 = d.new_stream().unwrap();
    let before = d.stats().waits;
    let mut r = LaunchRecorder::new_strict(s2);
    r.read(&a).unwrap();
    r.launch(&d, |_| Ok(())).unwrap();
    assert_eq!(d.stats().waits - before, 1);
}

/// The hand-paired form: only the preflighted launch gives a scope and commits (misuse of the
/// order does not compile; see the `Preflighted` docs), and its commit fences later users.
#[test]
fn a_preflighted_launch_enqueues_on_its_scope_and_commits_once() {
    let d = sim();
    let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s1, 1).unwrap();
    let mut rec = LaunchRecorder::new_strict(s1);
    rec.write(&a).unwrap();
    let launch = rec.preflight(&d).unwrap();
    assert_eq!(launch.stream(), s1);
    let data = a.sim_data().unwrap();
    launch.scope().sim_kernel(move || data.lock()[0] = 3).unwrap();
    let events = d.stats().events;
    launch.commit().unwrap();
    assert_eq!(d.stats().events, events + 1, "the commit recorded one event");
    let waits = d.stats().waits;
    assert_eq!(a.download(s2).unwrap(), vec![3]);
    assert_eq!(d.stats().waits, waits + 1, "the reader on another stream waited for the commit");
}

#[test]
fn buffer_of_another_device_is_rejected_strict_and_skipped_permissive() {
    let d1 = sim();
    let d2 = sim();
    let foreign = d2.alloc_zeros::<u32>(d2.default_stream(), 1).unwrap();
    let mut strict = LaunchRecorder::new_strict(d1.default_stream());
    let err = strict.read(&foreign).unwrap_err();
    assert!(matches!(err, Error::ForeignDevice { .. }), "{err}");
    assert!(err.to_string().contains(&format!("buffer #{}", foreign.id())), "names the buffer: {err}");

    let mut permissive = LaunchRecorder::new_permissive(d1.default_stream());
    permissive.read(&foreign).unwrap();
    assert_eq!(permissive.recorded_count(), 0);
    permissive.launch(&d1, |_| Ok(())).unwrap();
}

#[test]
fn stream_of_another_device_is_rejected_at_preflight() {
    let d1 = sim();
    let d2 = sim();
    let rec = LaunchRecorder::new_strict(d2.default_stream());
    assert!(matches!(rec.preflight(&d1), Err(Error::ForeignDevice { .. })));
}

#[test]
fn untracked_memory_is_rejected_strict_and_skipped_permissive() {
    let d = sim();
    let ext = External { ptr: 0x7f00_0000, bytes: 256 };
    let mut strict = LaunchRecorder::new_strict(d.default_stream());
    let err = strict.read(&ext).unwrap_err();
    assert!(matches!(err, Error::Untracked { .. }), "{err}");
    assert!(err.to_string().contains("0x7f000000"), "names the memory: {err}");
    let mut permissive = LaunchRecorder::new_permissive(d.default_stream());
    permissive.write(&ext).unwrap();
    assert_eq!(permissive.recorded_count(), 0);
}

#[test]
fn stale_buffer_is_rejected_strict_and_skipped_permissive() {
    let d = sim();
    let s = d.default_stream();
    let a = d.alloc_zeros::<u32>(s, 1).unwrap();
    d.advance_generation();
    let err = LaunchRecorder::new_strict(s).read(&a).map(|_| ()).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err}");
    assert!(matches!(a.download(s), Err(Error::Stale { .. })));
    let mut p = LaunchRecorder::new_permissive(s);
    p.read(&a).unwrap();
    assert_eq!(p.recorded_count(), 0);
    // New work succeeds after the generation advanced.
    let b = d.upload(s, &[5u32]).unwrap();
    assert_eq!(b.download(s).unwrap(), vec![5]);
}

#[test]
fn buffer_going_stale_between_record_and_preflight_is_rejected() {
    let d = sim();
    let s = d.default_stream();
    let a = d.alloc_zeros::<u32>(s, 1).unwrap();
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(&a).unwrap();
    d.advance_generation();
    assert!(matches!(rec.preflight(&d), Err(Error::Stale { .. })));
}

#[test]
fn dropped_after_preflight_commits_anyway() {
    let d = sim();
    let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s1, 1).unwrap();
    let events = d.stats().events;
    {
        let mut rec = LaunchRecorder::new_strict(s1);
        rec.write(&a).unwrap();
        let _launch = rec.preflight(&d).unwrap();
        // Dropped here without commit.
    }
    assert_eq!(d.stats().events, events + 1, "the drop recorded the launch's event");
    // The buffer is not left reserved, and a reader on another stream waits for that write.
    let waits = d.stats().waits;
    let mut r = LaunchRecorder::new_strict(s2);
    r.read(&a).unwrap();
    r.launch(&d, |_| Ok(())).unwrap();
    assert_eq!(d.stats().waits, waits + 1);
}

/// The closure form commits even when its enqueue closure panics after enqueueing: the buffer is
/// released, and a reader on another stream waits for the kernel (the checker would report the
/// read otherwise, and the data would be the old one).
#[test]
fn a_launch_whose_closure_panics_after_enqueueing_still_commits() {
    let d = sim();
    let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s1, 1).unwrap();
    let events = d.stats().events;
    let data = a.sim_data().unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut rec = LaunchRecorder::new_strict(s1);
        rec.write(&a).unwrap();
        rec.launch(&d, |scope| -> cusched::Result<()> {
            scope.sim_kernel(move || {
                std::thread::sleep(Duration::from_millis(100));
                data.lock()[0] = 5;
            })?;
            panic!("the enqueue closure fails after its kernel is enqueued");
        })
    }));
    assert!(unwound.is_err(), "the panic reaches the caller");
    assert_eq!(d.stats().events, events + 1, "the unwinding launch recorded its event");
    // The launch failed, so a read of what it wrote fails; not left reserved: a write on this
    // thread would fail at once with WouldDeadlock if it were. (The write's kernel reads the
    // buffer, which any declared use covers for the checker.)
    let mut r = LaunchRecorder::new_strict(s2);
    r.read(&a).unwrap();
    assert!(matches!(r.launch(&d, |_| Ok(())), Err(Error::FailedInput { .. })));
    let mut r = LaunchRecorder::new_strict(s2);
    r.write(&a).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(0));
    let (src, out) = (a.sim_data().unwrap(), seen.clone());
    r.launch(&d, |scope| scope.sim_kernel(move || *out.lock().unwrap() = src.lock()[0])).unwrap();
    d.synchronize(s2).unwrap();
    assert_eq!(*seen.lock().unwrap(), 5, "the reader on another stream ran after the kernel");
}

#[test]
fn same_thread_conflicting_preflight_fails_at_once() {
    // Waiting for itself would last the whole preflight timeout, far beyond the hang guard;
    // failing at once returns `WouldDeadlock`, whereas a timeout would be `BufferBusy`.
    let cfg = DeviceConfig { preflight_timeout: Duration::from_secs(3600), ..Default::default() };
    bounded(LIMIT, move || {
        let d = Device::sim_with(SimConfig::default(), cfg).unwrap();
        let s = d.default_stream();
        let a = d.alloc_zeros::<u32>(s, 1).unwrap();
        let mut w = LaunchRecorder::new_strict(s);
        w.write(&a).unwrap();
        let w = w.preflight(&d).unwrap();
        let mut r = LaunchRecorder::new_strict(s);
        r.read(&a).unwrap();
        // A failed preflight consumes the recorder and reserves nothing: retry with a clone.
        assert!(matches!(r.clone().preflight(&d), Err(Error::WouldDeadlock { .. })));
        w.commit().unwrap();
        r.preflight(&d).unwrap().commit().unwrap();
    });
}

#[test]
fn conflicting_preflight_times_out_with_a_typed_error() {
    let cfg = DeviceConfig { preflight_timeout: Duration::from_millis(50), ..Default::default() };
    let d = Device::sim_with(SimConfig::default(), cfg).unwrap();
    let s = d.default_stream();
    let a = d.alloc_zeros::<u32>(s, 1).unwrap();
    let mut w = LaunchRecorder::new_strict(s);
    w.write(&a).unwrap();
    let w = w.preflight(&d).unwrap();
    let (d2, a2) = (d.clone(), a.clone());
    let err = bounded(LIMIT, move || {
        let mut r = LaunchRecorder::new_strict(d2.default_stream());
        r.read(&a2).unwrap();
        r.preflight(&d2).map(drop)
    })
    .unwrap_err();
    assert!(matches!(err, Error::BufferBusy { .. }), "{err}");
    w.commit().unwrap();
}

/// A read preflighted on one thread and committed late must not be missed by a write
/// preflighted on another thread in between: the write waits for the commit, then fences
/// after the read. Both launches run real simulated kernels, so a write that slipped in
/// unfenced shows as a hazard (the checker orders by clocks, not timing) and in the data.
#[test]
fn preflight_to_commit_is_atomic_per_buffer() {
    bounded(LIMIT, || {
        let d = sim();
        let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
        let a = d.upload(s1, &[1u32]).unwrap();
        d.synchronize(s1).unwrap();

        // The reader's kernel is enqueued inside its preflight-to-commit window.
        let mut reader = LaunchRecorder::new_strict(s2);
        reader.read(&a).unwrap();
        let reader = reader.preflight(&d).unwrap();
        let (seen_tx, seen) = mpsc::channel();
        let data = a.sim_data().unwrap();
        reader.scope().sim_kernel(move || seen_tx.send(data.read()[0]).unwrap()).unwrap();

        let committing = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(2));
        let (d2, a2, b2, c2) = (d.clone(), a.clone(), barrier.clone(), committing.clone());
        let writer = std::thread::spawn(move || {
            let mut w = LaunchRecorder::new_strict(d2.default_stream());
            w.write(&a2).unwrap();
            b2.wait();
            let waits = d2.stream_stats(d2.default_stream()).unwrap().waits;
            let w = w.preflight(&d2).unwrap();
            let returned_before_commit = !c2.load(Ordering::SeqCst);
            let issued = d2.stream_stats(d2.default_stream()).unwrap().waits - waits;
            let data = a2.sim_data().unwrap();
            w.scope().sim_kernel(move || data.lock()[0] = 2).unwrap();
            w.commit().unwrap();
            (returned_before_commit, issued)
        });
        barrier.wait();
        // Gives a preflight that does not wait time to return early; a correct one waits for
        // the commit below however long this takes, so passing never depends on it.
        std::thread::sleep(Duration::from_millis(50));
        committing.store(true, Ordering::SeqCst);
        reader.commit().unwrap();
        let (returned_before_commit, issued) = writer.join().unwrap();
        assert!(!returned_before_commit, "the writer's preflight returned before the reader's commit");
        assert_eq!(issued, 1, "the writer fenced after the late-committed read");
        assert_eq!(seen.recv().unwrap(), 1, "the read saw the value from before the write");
        assert_eq!(a.download(s1).unwrap(), vec![2]);
        let hazards = d.sim_hazards().unwrap();
        assert!(hazards.is_empty(), "{hazards:?}");
    });
}

/// A preflight that fails after entering some of its uses (here its second buffer is held by
/// an uncommitted launch of the same thread) leaves nothing pending on the first: another
/// thread's use of it goes on at once instead of waiting out the timeout.
#[test]
fn a_preflight_failing_part_way_leaves_no_use_pending() {
    let cfg = DeviceConfig { preflight_timeout: Duration::from_millis(200), ..Default::default() };
    let d = Device::sim_with(SimConfig::default(), cfg).unwrap();
    let s = d.default_stream();
    // Reserved in id order: `first` is entered before `second` is found held.
    let first = d.alloc_zeros::<u32>(s, 1).unwrap();
    let second = d.alloc_zeros::<u32>(s, 1).unwrap();
    let mut held = LaunchRecorder::new_strict(s);
    held.write(&second).unwrap();
    let held = held.preflight(&d).unwrap();
    let mut both = LaunchRecorder::new_strict(s);
    both.write(&first).unwrap().write(&second).unwrap();
    assert!(matches!(both.preflight(&d), Err(Error::WouldDeadlock { .. })));
    let (d2, first2) = (d.clone(), first.clone());
    let other = bounded(LIMIT, move || {
        let mut w = LaunchRecorder::new_strict(d2.default_stream());
        w.write(&first2).unwrap();
        w.launch(&d2, |_| Ok(()))
    });
    assert!(other.is_ok(), "the failed preflight left its use of `first` pending: {other:?}");
    held.commit().unwrap();
}

/// Conflicting launches on two threads, each waiting for the other's commit thousands of times:
/// a commit that failed to wake its waiter would leave it blocked for the hour-long timeout,
/// far past the hang guard.
#[test]
fn every_commit_wakes_the_preflights_waiting_for_it() {
    let cfg = DeviceConfig { preflight_timeout: Duration::from_secs(3600), ..Default::default() };
    let d = Device::sim_with(SimConfig::default(), cfg).unwrap();
    let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s1, 1).unwrap();
    let b = d.alloc_zeros::<u32>(s1, 1).unwrap();
    d.synchronize(s1).unwrap();
    let threads: Vec<_> = [(s1, true), (s2, false), (s1, false), (s2, true)]
        .into_iter()
        .map(|(s, writes)| {
            let (d, a, b) = (d.clone(), a.clone(), b.clone());
            std::thread::spawn(move || {
                for i in 0..2000 {
                    let mut rec = LaunchRecorder::new_strict(s);
                    if writes == (i % 2 == 0) {
                        rec.write(&a).unwrap().read(&b).unwrap();
                    } else {
                        rec.read(&a).unwrap().write(&b).unwrap();
                    }
                    let launch = rec.preflight(&d).unwrap();
                    // A kernel, so that the hazard checker sees every use; held a little, so
                    // that the others queue up behind it.
                    launch.scope().sim_kernel(|| {}).unwrap();
                    std::thread::yield_now();
                    launch.commit().unwrap();
                }
            })
        })
        .collect();
    bounded(LIMIT, move || threads.into_iter().for_each(|t| t.join().unwrap()));
    let hazards = d.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "{hazards:?}");
}

/// Uses declared out of buffer-id order are still reserved in id order, the order that keeps
/// two preflights from each holding a buffer the other waits for. A launch declaring `second`
/// before `first`, blocked on `first`, must not be holding `second` meanwhile.
#[test]
fn uses_declared_out_of_order_are_reserved_in_id_order() {
    let cfg = DeviceConfig { preflight_timeout: Duration::from_millis(100), ..Default::default() };
    let d = Device::sim_with(SimConfig::default(), cfg).unwrap();
    let s = d.default_stream();
    let first = d.alloc_zeros::<u32>(s, 1).unwrap();
    let second = d.alloc_zeros::<u32>(s, 1).unwrap();
    let mut held = LaunchRecorder::new_strict(s);
    held.write(&first).unwrap();
    let held = held.preflight(&d).unwrap();
    let (d2, first2, second2) = (d.clone(), first.clone(), second.clone());
    let blocked = std::thread::spawn(move || {
        let mut rec = LaunchRecorder::new_strict(d2.default_stream());
        rec.write(&second2).unwrap().write(&first2).unwrap();
        // Retried past the short timeout until `held` commits below.
        loop {
            match rec.clone().preflight(&d2) {
                Err(Error::BufferBusy { .. }) => continue,
                other => return other.and_then(|launch| launch.commit()),
            }
        }
    });
    // Gives the other thread time to block; a correct order passes however long this takes.
    std::thread::sleep(Duration::from_millis(50));
    let mut other = LaunchRecorder::new_strict(s);
    other.write(&second).unwrap();
    let r = other.launch(&d, |_| Ok(()));
    assert!(r.is_ok(), "`second` was held by a launch waiting for `first`: {r:?}");
    held.commit().unwrap();
    bounded(LIMIT, move || blocked.join().unwrap()).unwrap();
}
