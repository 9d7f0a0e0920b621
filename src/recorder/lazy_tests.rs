//! Lazily recorded events keep every contract on a device where one stream has committed:
//! completions, host waits, frees, a second stream appearing, and steady state recording none.

use crate::{backend::sim::SimConfig, device::Device, memory::GpuRef, recorder::LaunchRecorder, track::StreamId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A hang guard, not a deadline.
const LIMIT: Duration = Duration::from_secs(60);

fn sim() -> Device {
    Device::sim(SimConfig::default()).unwrap()
}

/// Commits a launch on `s` that reads `read` and writes `write` (either may be absent) with a
/// 100 ms simulated kernel, which sets the returned flag as its last act; returns the launch's
/// completion.
fn slow(
    d: &Device,
    s: StreamId,
    read: Option<&dyn crate::recorder::Resource>,
    write: Option<&GpuRef<u32>>,
) -> (crate::completion::Completion<()>, Arc<AtomicBool>) {
    let mut rec = LaunchRecorder::new_strict(s);
    if let Some(r) = read {
        rec.read(&r).unwrap();
    }
    let data = write.map(|w| {
        rec.write(w).unwrap();
        w.sim_data().unwrap()
    });
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let launched = rec
        .launch_event(d, |scope| {
            scope.sim_kernel(move || {
                std::thread::sleep(Duration::from_millis(100));
                if let Some(data) = data {
                    data.lock().fill(7);
                }
                flag.store(true, Ordering::SeqCst);
            })
        })
        .unwrap();
    (launched.complete(d, Vec::new()), done)
}

#[test]
fn steady_state_on_one_stream_records_no_event() {
    let d = sim();
    let s = d.default_stream();
    let a = d.alloc_zeros::<u32>(s, 4).unwrap();
    let launch = || {
        let mut rec = LaunchRecorder::new_strict(s);
        rec.read_write(&a).unwrap();
        rec.launch(&d, |_| Ok(())).unwrap();
    };
    // The first launches make the few events the stream cycles through.
    (0..4).for_each(|_| launch());
    let before = (d.stats(), d.events_created());
    (0..100).for_each(|_| launch());
    let after = d.stats();
    assert_eq!(after.events, before.0.events, "a one-stream launch that hands out no event takes no position");
    assert_eq!(after.recorded, before.0.recorded, "no commit recorded a backend event");
    assert_eq!(d.events_created(), before.1, "steady state creates no event");
}

#[test]
fn a_completion_waited_on_resolves_after_its_work() {
    let d = sim();
    let a = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
    let (c, done) = slow(&d, d.default_stream(), None, Some(&a));
    assert_eq!(d.stats().recorded, 0, "the commit recorded lazily");
    c.wait().unwrap();
    assert!(done.load(Ordering::SeqCst), "wait returned before the kernel finished");
}

#[test]
fn a_completion_callback_runs_after_its_work() {
    let d = sim();
    let a = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
    let (c, done) = slow(&d, d.default_stream(), None, Some(&a));
    assert!(!c.is_ready(), "ready before the kernel finished");
    let (tx, rx) = mpsc::channel();
    c.on_complete(move |r| {
        let _ = tx.send((r.is_ok(), done.load(Ordering::SeqCst)));
    });
    let (ok, finished) = rx.recv_timeout(LIMIT).expect("the callback never ran");
    assert!(ok);
    assert!(finished, "the callback ran before the kernel finished");
}

#[test]
fn a_second_stream_appearing_waits_for_earlier_work() {
    let d = sim();
    let s0 = d.default_stream();
    let a = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let (_c, done) = slow(&d, s0, None, Some(&a));
    assert_eq!(d.stats().recorded, 0);
    // Another stream now reads what the lazily committed kernel writes.
    let s1 = d.new_stream().unwrap();
    let (seen, src) = (Arc::new(std::sync::Mutex::new(Vec::new())), a.sim_data().unwrap());
    let (out, flag) = (seen.clone(), done.clone());
    let mut rec = LaunchRecorder::new_strict(s1);
    rec.read(&a).unwrap();
    rec.launch(&d, |scope| {
        scope.sim_kernel(move || {
            assert!(flag.load(Ordering::SeqCst), "the reader ran before the writer finished");
            *out.lock().unwrap() = src.read().to_vec();
        })
    })
    .unwrap();
    d.synchronize(s1).unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![7; 4], "the reader saw stale data");
    assert_eq!(d.stats().waits, 1, "one wait on the earlier stream");
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards().unwrap());
    // From now on commits record at once.
    let before = d.stats();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.read(&a).unwrap();
    rec.launch(&d, |_| Ok(())).unwrap();
    assert_eq!(d.stats().recorded - before.recorded, 1, "several streams: one event per commit");
}

#[test]
fn a_free_follows_lazily_committed_work() {
    let d = sim();
    let s = d.default_stream();
    let a = d.alloc_zeros::<u32>(s, 4).unwrap();
    let b = d.alloc_zeros::<u32>(s, 4).unwrap();
    let (c, done) = slow(&d, s, Some(&a), Some(&b));
    drop(a);
    drop(b);
    c.wait().unwrap();
    assert!(done.load(Ordering::SeqCst));
    d.synchronize(s).unwrap();
    assert!(d.sim_hazards().unwrap().is_empty(), "a free overtook a use: {:?}", d.sim_hazards().unwrap());
}

#[test]
fn a_host_write_waits_for_a_lazily_committed_gpu_read() {
    let d = sim();
    let mut h = d.host_from_slice(&[1u32, 2, 3, 4]).unwrap();
    let (_c, done) = slow(&d, d.default_stream(), Some(&h), None);
    assert_eq!(d.stats().recorded, 0);
    let w = h.write().unwrap();
    assert!(done.load(Ordering::SeqCst), "the host wrote while the GPU still read the buffer");
    drop(w);
}
