//! The per-stream done marks: a wait on a position that a later one of its stream has been seen
//! past needs no driver call, and a mark never covers a position the GPU has not passed, also
//! when the stream's index has passed to a new stream.

use super::EventRef;
use crate::{backend::sim::SimConfig, device::Device, recorder::LaunchRecorder, track::StreamId};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

/// A hang guard, not a deadline.
const LIMIT: Duration = Duration::from_secs(60);

/// Commits a launch on `s` whose simulated kernel runs once `release` sends (or at once when
/// `None`); returns its commit event.
fn launch(d: &Device, s: StreamId, release: Option<mpsc::Receiver<()>>) -> EventRef {
    let launched = LaunchRecorder::new_strict(s)
        .launch_event(d, |scope| {
            scope.sim_kernel(move || {
                if let Some(rx) = release {
                    let _ = rx.recv_timeout(LIMIT);
                }
            })
        })
        .unwrap();
    launched.event.expect("a launch commits an event")
}

#[test]
fn a_mark_never_covers_a_position_the_gpu_has_not_passed() {
    let d = Device::sim(SimConfig::default()).unwrap();
    let s = d.new_stream().unwrap();
    // A commit on a second stream makes every later commit record at once: a lazy event
    // recorded late would cover the blocked kernel too.
    launch(&d, d.default_stream(), None);
    let first = launch(&d, s, None);
    let (tx, rx) = mpsc::channel();
    let blocked = launch(&d, s, Some(rx));
    first.synchronize().unwrap();
    assert!(first.known_done());
    assert!(!blocked.known_done(), "marked done while its kernel is blocked");
    assert!(!blocked.is_done().unwrap());
    tx.send(()).unwrap();
    blocked.synchronize().unwrap();
    assert!(blocked.known_done());
}

#[test]
fn an_earlier_position_is_known_done_without_recording_or_asking_the_driver() {
    // One stream: commits record lazily, so an event nobody needed is still unrecorded.
    let d = Device::sim(SimConfig::default()).unwrap();
    let s = d.default_stream();
    let early = launch(&d, s, None);
    let late = launch(&d, s, None);
    assert!(!early.recorded.load(Ordering::Acquire), "the pool recorded a lazy event at commit");
    late.synchronize().unwrap();
    early.synchronize().unwrap();
    assert!(early.is_done().unwrap());
    assert!(!early.recorded.load(Ordering::Acquire), "waiting on a covered position went to the driver");
}

#[test]
fn a_new_stream_starts_beyond_the_mark_of_its_index() {
    // Devices come and go, so their streams' indices (process-wide, lowest free first) are
    // reused, by this test or by others running beside it: whichever index a new stream gets,
    // its first position lies beyond everything marked done on that index so far.
    for _ in 0..8 {
        let d = Device::sim(SimConfig::default()).unwrap();
        launch(&d, d.default_stream(), None).synchronize().unwrap();
        let s = d.new_stream().unwrap();
        let (tx, rx) = mpsc::channel();
        let ev = launch(&d, s, Some(rx));
        let mark = super::DONE[ev.pos().stream as usize].load(Ordering::Acquire);
        assert!(
            mark < ev.pos().seq,
            "index {} marked up to {mark}, past its new position {:?}",
            ev.pos().stream,
            ev.pos()
        );
        assert!(!ev.known_done());
        tx.send(()).unwrap();
        ev.synchronize().unwrap();
        assert!(super::DONE[ev.pos().stream as usize].load(Ordering::Acquire) >= ev.pos().seq);
    }
}

#[cfg(feature = "nccl")]
#[test]
fn a_mark_is_covered_only_where_a_later_position_can_pass_it() {
    // Past the watermarks a position is never known done: a follower that dropped its event
    // for such a mark would wait on it forever. Nor is a position that names no sequence.
    let d = Device::sim(SimConfig::default()).unwrap();
    let mut later = d.shared.events.take(None).unwrap();
    let past = super::WATERMARKS as u32 + 5;
    let Some(e) = std::sync::Arc::get_mut(&mut later) else { panic!("a taken event is its taker's alone") };
    e.pos = super::Pos { stream: past, seq: 10 };
    let mark =
        super::PassMark { pos: super::Pos { stream: past, seq: 5 }, epoch: later.epoch, pool: later.pool.clone() };
    later.note_done();
    assert!(!mark.covered_by(&later) || mark.known_done(), "covered by {later:?}, yet never known done");
    let unset = super::PassMark { pos: super::Pos { stream: 0, seq: 0 }, epoch: later.epoch, pool: later.pool.clone() };
    let Some(e) = std::sync::Arc::get_mut(&mut later) else { panic!("a taken event is its taker's alone") };
    e.pos = super::Pos { stream: 0, seq: 10 };
    assert!(!unset.covered_by(&later), "a position without a sequence number is never known done");
}
