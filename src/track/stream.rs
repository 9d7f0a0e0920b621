//! Per-stream clock state, and the one place that issues `cuEventRecord` for tracked work
//! (`fence` issues its `cuStreamWaitEvent`s, `solo` keeps the solo strategy's state).

use super::event::Record;
use super::registry::StreamIndex;
use super::{Clock, EventPool, EventRef, Pos};
use crate::backend::sim::FenceMutation;
use crate::backend::RawStream;
use crate::error::Result;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod fence;
mod recording;
mod solo;

pub(crate) use fence::FenceError;
pub(crate) use recording::RecordingGate;
use solo::SoloStream;

/// A stream of one device. Only [`crate::Device::new_stream`] and
/// [`crate::Device::default_stream`] make them, and every use checks that the id belongs to the device it is used with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub(crate) device: u32,
    pub(crate) index: u32,
}

impl StreamId {
    /// The stream's dense index on its device (0 is the default stream).
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {} of device #{}", self.index, self.device)
    }
}

/// Driver calls the tracker issued on one stream (or summed over a device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// `cuStreamWaitEvent` calls queued by preflights and frees.
    pub waits: u64,
    /// Positions committed: one per launch (and per host synchronization or deferred
    /// destroy), except that on a device that has used one stream only, a
    /// [`LaunchRecorder::launch`](crate::LaunchRecorder::launch) with no trace hook takes
    /// none. There, most are never recorded as backend events either (see
    /// [`recorded`](Self::recorded)).
    pub events: u64,
    /// `cuEventRecord` calls the tracker made: at commit once several streams are in use, else
    /// only when a host wait, a query, a free or another stream needed a position.
    pub recorded: u64,
    /// Launches on the stream that checked whether launches of the device's one-stream period
    /// (when launches hold no buffer; see [`LaunchRecorder::launch`](crate::LaunchRecorder::launch))
    /// still had to be ordered before them: none once the stream has been ordered after that
    /// period's end.
    pub one_stream_checks: u64,
}

impl std::ops::AddAssign for StreamStats {
    fn add_assign(&mut self, o: StreamStats) {
        self.waits += o.waits;
        self.events += o.events;
        self.recorded += o.recorded;
        self.one_stream_checks += o.one_stream_checks;
    }
}

struct State {
    clock: Clock,
    seq: u64,
    stats: StreamStats,
    /// The backend stream; replaced when the device rebuilds a poisoned context.
    raw: Arc<RawStream>,
    /// The context epoch `raw` belongs to.
    epoch: u64,
    /// The stream's newest events. A commit refills one that nothing else holds any more in
    /// place, under this lock, so that steady state takes no pool lock at all; only when none
    /// is free does it take one from the pool, handing the first of these back.
    recent: SmallVec<[EventRef; RECENT]>,
    /// The solo strategy's state on this stream (see `solo`).
    solo: SoloStream,
}

/// Where and how a launch's commit marks its position.
#[derive(Clone, Copy)]
pub(crate) struct CommitAt {
    /// The context epoch the launch's work went to: nothing is recorded once the stream has
    /// left it, since an event of a new context cannot mark the end of work sent to the old.
    pub epoch: u64,
    /// Now, or lazily (see [`StreamSlot::commit_record`]).
    pub how: Record,
}

/// How many of its newest events a stream keeps for reuse: the previous op's event is still
/// held by its buffers when the next op commits, and with several streams each buffer's reads
/// keep one event per stream, so the few before it are the ones that come free.
const RECENT: usize = 4;

/// How many other devices' covered floors a stream remembers: a peer copy between a few GPUs
/// finds them all; beyond that a launch looks under the stream's lock, as it would anyway.
const PEER_FLOORS: usize = 4;

/// One stream of a device: its backend handle and its clock, under one lock.
pub(crate) struct StreamSlot {
    pub id: StreamId,
    /// The stream's process-wide index: the `stream` of its positions, its key in clocks.
    index: Arc<StreamIndex>,
    /// Off only on simulated devices built with [`FenceMutation::NoFences`], to prove the
    /// hazard checker can fail.
    fencing: bool,
    state: crate::sync::Ranked<Mutex<State>, { crate::sync::rank::STREAM }>,
    /// The lane that owns the stream, for traces; a dropped lane's stream passes to a later
    /// lane. Read only while tracing.
    lane: Mutex<Option<Arc<str>>>,
    /// Whether `lane` is set: a traced op on a stream no lane owns (every inline op) then
    /// skips the lock. The name is informational, so a trace racing `set_lane` may see either.
    has_lane: AtomicBool,
    /// The stream is past its device's solo mode: it waited on the floor, or took it as a
    /// fence candidate that cost nothing, or is the solo stream and the floor is recorded.
    floor_seen: AtomicBool,
    /// Launches that looked at the device's solo mode (`StreamStats::one_stream_checks`); counted
    /// off the fast path only.
    solo_checks: AtomicU64,
    /// Other devices (uid + 1; 0 is none) whose solo floor this stream's clock covers, so that a
    /// peer launch skips the stream's lock to look again (see [`StreamSlot::covers_peer_floor`]).
    /// Set and cleared under the stream's lock, cleared when the clock restarts.
    peer_floors: [AtomicU32; PEER_FLOORS],
    /// Whether the stream is lent to a graph recording (`lent_to` is set).
    lent: AtomicBool,
    /// The recording the stream is lent to (its type belongs to the recorder).
    lent_to: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
    /// The stream's graph-recording gate (see `recording`).
    recording: crate::sync::Ranked<Mutex<RecordingGate>, { crate::sync::rank::RECORDING_GATE }>,
}

impl StreamSlot {
    /// A stream of the device whose event pool is `pool`, which keeps the stream's process-wide
    /// index leased while events of the stream exist.
    pub(crate) fn new(
        id: StreamId,
        raw: RawStream,
        epoch: u64,
        mutation: Option<FenceMutation>,
        pool: &EventPool,
    ) -> Self {
        let index = StreamIndex::lease();
        pool.hold(index.clone());
        StreamSlot {
            id,
            fencing: mutation != Some(FenceMutation::NoFences),
            state: crate::sync::Ranked::new(Mutex::new(State {
                clock: Clock::default(),
                seq: index.first_seq(),
                stats: StreamStats::default(),
                raw: Arc::new(raw),
                epoch,
                recent: SmallVec::new(),
                solo: SoloStream::default(),
            })),
            lane: Mutex::new(None),
            has_lane: AtomicBool::new(false),
            floor_seen: AtomicBool::new(false),
            solo_checks: AtomicU64::new(0),
            peer_floors: [const { AtomicU32::new(0) }; PEER_FLOORS],
            lent: AtomicBool::new(false),
            lent_to: Mutex::new(None),
            recording: crate::sync::Ranked::new(Mutex::new(RecordingGate::default())),
            index,
        }
    }

    /// The lane that owns the stream now, if a lane does.
    pub(crate) fn lane(&self) -> Option<Arc<str>> {
        if !self.has_lane.load(Ordering::Acquire) {
            return None;
        }
        crate::sync::lock(&self.lane).clone()
    }

    /// Gives the stream to `lane` (or back to no lane), for traces and timelines.
    pub(crate) fn set_lane(&self, lane: Option<Arc<str>>) {
        let mut held = crate::sync::lock(&self.lane);
        self.has_lane.store(lane.is_some(), Ordering::Release);
        *held = lane;
    }

    /// The process-wide index (not the per-device `id.index`): the `stream` of its positions.
    pub(crate) fn index(&self) -> u32 {
        self.index.index()
    }

    /// The backend stream and the context epoch it belongs to, read together.
    pub(crate) fn raw_and_epoch(&self) -> (Arc<RawStream>, u64) {
        let st = crate::sync::lock(&self.state);
        (st.raw.clone(), st.epoch)
    }

    /// The backend stream.
    pub(crate) fn raw(&self) -> Arc<RawStream> {
        crate::sync::lock(&self.state).raw.clone()
    }

    /// Swaps in a stream of a rebuilt context. The clock restarts: nothing recorded in the old
    /// context can be waited on from the new one. The sequence keeps counting, so positions
    /// stay unique.
    pub(crate) fn replace(&self, raw: RawStream, epoch: u64) {
        let old = {
            let mut st = crate::sync::lock(&self.state);
            st.epoch = epoch;
            st.clock = Clock::default();
            // The new clock covers no other device's floor yet.
            for f in &self.peer_floors {
                f.store(0, Ordering::Relaxed);
            }
            let recent = std::mem::take(&mut st.recent);
            (std::mem::replace(&mut st.raw, Arc::new(raw)), recent)
        };
        // Dropped outside the lock: a simulated stream joins its thread on drop.
        drop(old);
    }

    /// Records the next pooled event on the stream: a new position covering all work so far.
    /// With `required`, only while the stream still belongs to that context epoch (checked under
    /// the stream lock): `None` once the device has moved to a new context, whose stream cannot
    /// mark the end of work sent to the old one.
    pub(crate) fn record_in(&self, pool: &EventPool, required: Option<u64>) -> Option<Result<EventRef>> {
        self.position(pool, required, Record::Now { bound: false })
    }

    /// A launch's commit: [`record_in`](Self::record_in) in context `at.epoch`, recorded as
    /// `at.how` says (see [`commit_record`](Self::commit_record)).
    pub(crate) fn commit_in(&self, pool: &EventPool, at: CommitAt) -> Option<Result<EventRef>> {
        self.position(pool, Some(at.epoch), at.how)
    }

    fn position(&self, pool: &EventPool, required: Option<u64>, how: Record) -> Option<Result<EventRef>> {
        let mut st = crate::sync::lock(&self.state);
        // The pooled event must belong to the stream's context too: during a rebuild the pool
        // moves to the new context before the streams do.
        if required.is_some_and(|required| required != st.epoch || pool.epoch() != st.epoch) {
            return None;
        }
        Some(self.position_locked(&mut st, pool, how))
    }

    /// A new position on the stream, under its lock (see [`position`](Self::position)).
    #[inline(always)]
    fn position_locked(&self, st: &mut State, pool: &EventPool, how: Record) -> Result<EventRef> {
        let index = self.index();
        let pos = Pos { stream: index, seq: st.seq + 1 };
        st.clock.set(index, pos.seq);
        // A plain load per entry: an entry only this stream holds can gain no other holder
        // while the stream's lock is held, since only this stream hands its entries out.
        let free = st.recent.iter().position(|e| Arc::strong_count(e) == 1);
        // Steady state: a free entry is refilled where it lies.
        if let Some(i) = free {
            let State { recent, raw, clock, .. } = &mut *st;
            match pool.refill(&mut recent[i], raw, pos, self.id.device, clock, how) {
                Some(Ok(())) => {
                    let ev = recent[i].clone();
                    Self::placed(st, pos, how);
                    return Ok(ev);
                }
                Some(Err(e)) => return Err(Self::unplaced(st, index, e)),
                None => {}
            }
        }
        let (reuse, back) = match free {
            // Order among recent events only picks which goes back when none is free, so the
            // cheaper swap does.
            Some(i) => (Some(st.recent.swap_remove(i)), None),
            None if st.recent.len() == RECENT => (None, Some(st.recent.remove(0))),
            None => (None, None),
        };
        match pool.commit(reuse, back, &st.raw, pos, self.id.device, &st.clock, how) {
            Ok(ev) => {
                Self::placed(st, pos, how);
                st.recent.push(ev.clone());
                Ok(ev)
            }
            Err(e) => Err(Self::unplaced(st, index, e)),
        }
    }

    /// The stream's counters once position `pos` is committed (recorded as `how` says).
    #[inline(always)]
    fn placed(st: &mut State, pos: Pos, how: Record) {
        st.seq = pos.seq;
        st.stats.events += 1;
        if how != Record::Lazily {
            st.stats.recorded += 1;
        }
    }

    /// A position that failed to record: the stream's own entry goes back to what it covered
    /// before.
    #[cold]
    fn unplaced(st: &mut State, index: u32, e: crate::error::Error) -> crate::error::Error {
        let seq = st.seq;
        st.clock.set(index, seq);
        e
    }

    /// The stream's counters so far.
    pub(crate) fn stats(&self) -> StreamStats {
        let stats = crate::sync::lock(&self.state).stats;
        StreamStats { one_stream_checks: self.solo_checks.load(Ordering::Relaxed), ..stats }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let seq = crate::sync::lock(&self.state).seq;
        self.index.retire(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimConfig;
    use crate::backend::sim::SimShared;
    use crate::backend::BackendCtx;

    #[test]
    fn an_index_stays_leased_while_an_event_names_it() {
        let ctx = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let pool = Arc::new(EventPool::new(ctx.clone(), 1));
        let slot = StreamSlot::new(StreamId { device: 9, index: 0 }, ctx.new_stream(0).unwrap(), 1, None, &pool);
        let ev = slot.record_in(&pool, None).unwrap().unwrap();
        drop(slot);
        drop(pool);
        // The stream is gone, but a buffer elsewhere may still hold its event: its index must
        // not name another stream yet.
        let leases: Vec<_> = (0..256).map(|_| StreamIndex::lease()).collect();
        use super::super::plan::FencePoint;
        assert!(leases.iter().all(|l| l.index() != ev.pos().stream), "an index was reused under a live event");
    }

    #[test]
    fn a_stream_forgets_the_peer_floors_it_covered_when_its_clock_restarts() {
        let ctx = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let pool = Arc::new(EventPool::new(ctx.clone(), 1));
        // Another device's stream (uid 7) and its floor; this stream (of device 9) waits on it.
        let other = StreamSlot::new(StreamId { device: 7, index: 0 }, ctx.new_stream(0).unwrap(), 1, None, &pool);
        let floor = other.record_in(&pool, None).unwrap().unwrap();
        let slot = StreamSlot::new(StreamId { device: 9, index: 0 }, ctx.new_stream(1).unwrap(), 1, None, &pool);
        assert!(!slot.covers_floor_of(7, &floor), "nothing waited on the floor yet");
        assert!(!slot.covers_peer_floor(7), "a floor not covered must not be remembered");
        slot.fence(std::slice::from_ref(&floor)).unwrap();
        assert!(slot.covers_floor_of(7, &floor));
        assert!(slot.covers_peer_floor(7), "a covered floor is remembered");
        assert!(!slot.covers_peer_floor(8), "only the device whose floor was covered");
        // A rebuild gives the stream a new backend stream that waited on nothing.
        slot.replace(ctx.new_stream(1).unwrap(), 2);
        assert!(!slot.covers_peer_floor(7), "a restarted clock must look at the floor again");
        assert!(!slot.covers_floor_of(7, &floor));
    }
}
