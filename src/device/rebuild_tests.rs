//! Uses that race a context rebuild, with the rebuild held open at one stage by a test hook.

use super::poison::rebuild_hooks::{self, Stage};
use crate::{backend::sim::SimConfig, device::Device, error::Error, recorder::LaunchRecorder, track::StreamId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Long enough for the other thread to reach its wait on any machine; a hook that waits this
/// long means that thread never waited.
const HOLD: Duration = Duration::from_secs(10);

/// Faults `s`'s context and rebuilds it, from this thread.
fn fault_and_rebuild(d: &Device, s: StreamId) {
    LaunchRecorder::new_strict(s).named("oob_write").launch(d, |scope| scope.sim_fault()).unwrap();
    let r = d.synchronize(s);
    assert!(matches!(r, Err(Error::ContextPoisoned { .. })), "the fault poisons the context");
}

/// Removes a device's rebuild hooks when dropped, so that a failing test leaves none behind.
struct HooksOff(u32);

impl Drop for HooksOff {
    fn drop(&mut self) {
        rebuild_hooks::off(self.0);
    }
}

/// The name of the thread whose launch a test holds at a stage.
const LATE: &str = "late-launch";

/// Runs `during` on another thread once the rebuild of `d` reaches `stage`, holding the rebuild
/// there until `during` has started waiting for it (or has ended), and returns its result.
fn during_rebuild<T: Send + 'static>(
    d: &Device,
    fault_on: StreamId,
    stage: Stage,
    during: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (open_tx, open_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (open_tx, held_rx) = (Mutex::new(Some(open_tx)), Mutex::new(held_rx));
    let done_tx = held_tx.clone();
    let held_tx = Mutex::new(held_tx);
    rebuild_hooks::on(d.shared.uid, move |at| {
        if at == Stage::Awaited {
            let _ = held_tx.lock().unwrap().send(());
        } else if at == stage {
            if let Some(open) = open_tx.lock().unwrap().take() {
                let _ = open.send(());
                let _ = held_rx.lock().unwrap().recv_timeout(HOLD);
            }
        }
    });
    let _off = HooksOff(d.shared.uid);
    let result = Arc::new(Mutex::new(None));
    let out = result.clone();
    let worker = std::thread::spawn(move || {
        if open_rx.recv().is_ok() {
            *out.lock().unwrap() = Some(during());
            // Ends the hold if `during` never waited for the rebuild.
            let _ = done_tx.send(());
        }
    });
    fault_and_rebuild(d, fault_on);
    // Drops the hook's sender too: a worker still waiting for a stage the rebuild never
    // reached ends instead of hanging the test.
    rebuild_hooks::off(d.shared.uid);
    worker.join().unwrap();
    let value = result.lock().unwrap().take();
    value.expect("the rebuild reached the stage")
}

/// A buffer made on a stream already moved to the new context, used on a stream that is not
/// yet: the use waits for the rebuild to finish and then runs, rather than failing with a
/// `ContextPoisoned` naming "a context rebuild" when nothing the use touched was poisoned.
#[test]
fn a_use_on_a_stream_not_yet_rebuilt_waits_for_the_rebuild() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let dev = d.clone();
    let result = during_rebuild(&d, s1, Stage::Replaced(s0.index()), move || {
        let buf = dev.alloc_zeros::<u32>(s0, 4)?;
        let data = buf.sim_data()?;
        let mut rec = LaunchRecorder::new_strict(s1);
        rec.write(&buf)?;
        rec.launch(&dev, |scope| scope.sim_kernel(move || data.lock().fill(7)))?;
        Ok::<_, Error>(buf)
    });
    let buf = result.expect("the use after the rebuild runs");
    assert_eq!(buf.download(s1).unwrap(), vec![7; 4]);
}

/// Memory made on the old context while the rebuild is under way carries the new generation,
/// so only its context epoch tells it apart: a use after the rebuild is refused as memory of
/// the poisoned context, not run on a stream of the new one.
#[test]
fn memory_made_during_a_rebuild_is_refused_after_it() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let dev = d.clone();
    let made = during_rebuild(&d, s1, Stage::ContextMade, move || dev.alloc_zeros::<u32>(s0, 4));
    let buf = made.expect("memory of the old context can still be made before the device moves");
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.write(&buf).expect("the handle is of the new generation");
    let err = rec.launch(&d, |_| Ok(())).expect_err("memory of the poisoned context must not reach its new stream");
    assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
}

/// A launch with no tracked buffer on a stream the rebuild has not moved yet waits for it too:
/// its kernel runs on the new context instead of being dropped by the poisoned one.
#[test]
fn a_launch_without_buffers_on_a_stream_not_yet_rebuilt_runs_after_the_rebuild() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let ran = Arc::new(AtomicBool::new(false));
    let (dev, flag) = (d.clone(), ran.clone());
    let result = during_rebuild(&d, s1, Stage::Replaced(s0.index()), move || {
        LaunchRecorder::new_strict(s1)
            .launch(&dev, |scope| scope.sim_kernel(move || flag.store(true, Ordering::SeqCst)))?;
        dev.synchronize(s1)
    });
    result.expect("the launch after the rebuild runs and completes");
    assert!(ran.load(Ordering::SeqCst), "the kernel ran");
}

/// Holds a launch named `late` between its start (where it reads the device's context epoch)
/// and its preflight until `release` fires.
struct HoldLate {
    reached: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl crate::trace::KernelTrace for HoldLate {
    fn before_enqueue(&self, op: &crate::trace::OpInfo) {
        if op.op == "late" {
            let _ = self.reached.lock().unwrap().send(());
            let _ = self.release.lock().unwrap().recv_timeout(HOLD);
        }
    }
}

/// A launch that started on the old context, found its stream behind the rebuild and waited
/// for it, runs on the new context: a sticky failure of it is a fault of the new context,
/// recorded and rebuilt again, not reported as the poison the first rebuild cured (which would
/// leave the new context poisoned until a later op found the fault again).
#[test]
fn a_fault_of_a_launch_that_waited_for_a_rebuild_rebuilds_again() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let before = d.shared.epoch();
    let (reached_tx, reached_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let hold = HoldLate { reached: Mutex::new(reached_tx), release: Mutex::new(release_rx) };
    d.set_trace(Arc::new(hold), crate::trace::TraceOptions::default()).unwrap();
    let _off = HooksOff(d.shared.uid);
    // The rebuild lets the launch go on once the device is on the new context and `s1` is not
    // yet, and goes on itself once the launch waits for it.
    let (awaited_tx, awaited_rx) = mpsc::channel::<()>();
    let (release_tx, awaited_tx, awaited_rx) =
        (Mutex::new(Some(release_tx)), Mutex::new(awaited_tx), Mutex::new(awaited_rx));
    rebuild_hooks::on(d.shared.uid, move |at| match at {
        // The first rebuild only: the second, which the launch's fault starts, runs through.
        Stage::Replaced(i) if i == s0.index() => {
            if let Some(release) = release_tx.lock().unwrap().take() {
                let _ = release.send(());
                let _ = awaited_rx.lock().unwrap().recv_timeout(HOLD);
            }
        }
        Stage::Awaited => {
            let _ = awaited_tx.lock().unwrap().send(());
        }
        _ => {}
    });
    let dev = d.clone();
    let worker = std::thread::spawn(move || {
        LaunchRecorder::new_strict(s1).named("late").launch(&dev, |_| {
            Err::<(), _>(Error::Driver { call: "second_fault", status: crate::backend::cuda::ILLEGAL_ADDRESS })
        })
    });
    reached_rx.recv_timeout(HOLD).expect("the launch starts");
    // The fault is found here or, since the device traces, by the completion thread watching
    // the trace backlog: either rebuilds, and this synchronize may see the stream already moved.
    LaunchRecorder::new_strict(s1).named("oob_write").launch(&d, |scope| scope.sim_fault()).unwrap();
    let _ = d.synchronize(s1);
    let err = worker.join().unwrap().expect_err("the launch fails");
    assert!(matches!(err, Error::ContextPoisoned { call: "second_fault", .. }), "{err}");
    assert_eq!(d.shared.epoch(), before + 2, "the second fault rebuilt the device again");
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    LaunchRecorder::new_strict(s1)
        .launch(&d, |scope| scope.sim_kernel(move || flag.store(true, Ordering::SeqCst)))
        .unwrap();
    d.synchronize(s1).unwrap();
    assert!(ran.load(Ordering::SeqCst), "the device runs work again");
}

/// Holds the launch of the thread named [`LATE`] once it has read the device's epoch and taken
/// its marks, until the rebuild of `d` has moved the device and `moved` (not the streams after
/// it), and holds the rebuild there until a thread waits for it. Returns a receiver told when
/// the marks are taken, and a sender that ends the rebuild's hold for a late launch that never
/// waits for it.
fn hold_late_marks(d: &Device, moved: StreamId) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (taken_tx, taken_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (awaited_tx, awaited_rx) = mpsc::channel::<()>();
    let done_tx = awaited_tx.clone();
    let (taken_tx, go_rx) = (Mutex::new(taken_tx), Mutex::new(go_rx));
    let (go_tx, awaited_tx, awaited_rx) = (Mutex::new(Some(go_tx)), Mutex::new(awaited_tx), Mutex::new(awaited_rx));
    rebuild_hooks::on(d.shared.uid, move |at| match at {
        Stage::MarksTaken if std::thread::current().name() == Some(LATE) => {
            let _ = taken_tx.lock().unwrap().send(());
            let _ = go_rx.lock().unwrap().recv_timeout(HOLD);
        }
        Stage::Replaced(i) if i == moved.index() => {
            if let Some(go) = go_tx.lock().unwrap().take() {
                let _ = go.send(());
                let _ = awaited_rx.lock().unwrap().recv_timeout(HOLD);
            }
        }
        Stage::Awaited => {
            let _ = awaited_tx.lock().unwrap().send(());
        }
        _ => {}
    });
    (taken_rx, done_tx)
}

/// A preflight that read the device's context before a rebuild began, and fences a stream the
/// rebuild has not moved yet after the device moved on, waits for the rebuild as well: its
/// kernel runs on the new context instead of being dropped by the poisoned one.
#[test]
fn a_preflight_overtaken_by_a_rebuild_waits_for_it() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let _off = HooksOff(d.shared.uid);
    let (taken_rx, _) = hold_late_marks(&d, s0);
    let ran = Arc::new(AtomicBool::new(false));
    let (dev, flag) = (d.clone(), ran.clone());
    let worker = std::thread::Builder::new()
        .name(LATE.into())
        .spawn(move || {
            LaunchRecorder::new_strict(s1)
                .launch(&dev, |scope| scope.sim_kernel(move || flag.store(true, Ordering::SeqCst)))
        })
        .unwrap();
    taken_rx.recv_timeout(HOLD).expect("the late launch takes its marks");
    fault_and_rebuild(&d, s1);
    worker.join().unwrap().expect("the late launch runs after the rebuild");
    d.synchronize(s1).unwrap();
    assert!(ran.load(Ordering::SeqCst), "the late launch's kernel ran on the new context");
}

/// A device in solo mode on `s1` is rebuilt; while `s0` has moved to the new context and `s1`
/// has not, a launch on `s0` closes solo mode. The floor must not be an event of the new
/// context recorded on `s1`'s stream of the poisoned one: every solo use was of the old
/// context (its buffers are stale), so there is none, or one that reports no old fault.
#[test]
fn closing_solo_mode_during_a_rebuild_records_no_floor_on_the_old_stream() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let dev = d.clone();
    // `fault_and_rebuild(d, s1)` makes s1 the solo stream: its fault launch is the first.
    let r = during_rebuild(&d, s1, Stage::Replaced(s0.index()), move || {
        LaunchRecorder::new_strict(s0).launch(&dev, |_| Ok(()))
    });
    r.expect("the launch on the rebuilt stream runs");
    let floor = d.shared.solo.closed_floor();
    assert!(!matches!(floor, crate::track::Floor::NotYet), "solo mode closed");
    let floor = floor.event().cloned();
    if let Some(floor) = floor {
        let waited = floor.synchronize();
        assert!(waited.is_ok(), "the floor (epoch {}) reports the old context's fault: {waited:?}", floor.epoch());
    }
}

/// Solo launches on the solo stream after it moved to the new context, then a close from a
/// stream still behind: the data and the order stay right.
#[test]
fn solo_launches_on_a_rebuilt_solo_stream_then_a_close_from_a_stream_behind() {
    let d = Device::sim(SimConfig { max_delay: Duration::from_micros(200), ..SimConfig::default() }).unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let dev = d.clone();
    let r = during_rebuild(&d, s0, Stage::Replaced(s0.index()), move || {
        let b = dev.alloc_zeros::<u32>(s0, 4)?;
        let y = dev.alloc_zeros::<u32>(s0, 4)?;
        let m = b.sim_data()?;
        let mut rec = LaunchRecorder::new_strict(s0);
        rec.write(&b)?;
        rec.launch(&dev, |scope| {
            scope.sim_kernel(move || {
                std::thread::sleep(Duration::from_millis(30));
                m.lock().fill(7)
            })
        })?;
        let (o, i) = (y.sim_data()?, b.sim_data()?);
        let mut rec = LaunchRecorder::new_strict(s1);
        rec.read(&b)?.write(&y)?;
        rec.launch(&dev, |scope| {
            scope.sim_kernel(move || {
                let v = i.read().to_vec();
                o.lock().copy_from_slice(&v)
            })
        })?;
        Ok::<_, Error>(y)
    });
    let y = r.expect("runs");
    assert_eq!(y.download(s1).unwrap(), vec![7; 4]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// A warm peer copy (past solo mode, its peer floor followed, so it takes the two-buffer
/// quick path) whose preflight has taken its marks when its device's rebuild moves the device
/// and not yet the copy's stream: its source is memory of the context the device left, so the
/// copy is refused, as the general path refuses it, instead of being enqueued on the old
/// context's stream after the device moved on.
#[test]
fn a_warm_peer_copy_overtaken_by_a_rebuild_is_refused() {
    let gpus = Device::sim_group(SimConfig::default(), 2).unwrap();
    let (d, e) = (gpus[0].clone(), gpus[1].clone());
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.alloc_zeros::<u32>(s1, 4).unwrap();
    let y = e.alloc_zeros::<u32>(e.default_stream(), 4).unwrap();
    // Both streams of `d` in use: the device is past solo mode, and the copies warm the
    // stream's peer floor.
    LaunchRecorder::new_strict(s0).launch(&d, |_| Ok(())).unwrap();
    for _ in 0..3 {
        x.copy_to(s1, &y).unwrap();
    }
    d.synchronize(s1).unwrap();
    let _off = HooksOff(d.shared.uid);
    let (taken_rx, done_tx) = hold_late_marks(&d, s0);
    let (src, dst) = (x.clone(), y.clone());
    let worker = std::thread::Builder::new()
        .name(LATE.into())
        .spawn(move || {
            let copied = src.copy_to(s1, &dst);
            // Ends the rebuild's hold: a refused copy never waits for the rebuild.
            let _ = done_tx.send(());
            copied
        })
        .unwrap();
    taken_rx.recv_timeout(HOLD).expect("the late copy takes its marks");
    fault_and_rebuild(&d, s0);
    let copied = worker.join().unwrap();
    assert!(
        matches!(copied, Err(Error::Stale { .. })),
        "a copy of memory of the context the device left is refused as stale, got {copied:?}"
    );
}
