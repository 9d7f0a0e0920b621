//! Uses that race a context rebuild, with the rebuild held open at one stage by a test hook.

use super::poison::rebuild_hooks::{self, Stage};
use crate::{Device, Error, LaunchRecorder, SimConfig, StreamId};
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
    worker.join().unwrap();
    let value = result.lock().unwrap().take();
    value.expect("the rebuild reached the stage")
}

/// A buffer made on a stream already moved to the new context, used on a stream that is not
/// yet: the use waits for the rebuild to finish and then runs (it used to fail with a
/// `ContextPoisoned` naming "a context rebuild", though nothing the use touched was poisoned).
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
