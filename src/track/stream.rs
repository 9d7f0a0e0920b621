//! Per-stream clock state, and the one place that issues `cuStreamWaitEvent` and
//! `cuEventRecord` for tracked work.

use super::event::Record;
use super::registry::StreamIndex;
use super::Access;
use super::{plan_waits, Clock, EventPool, EventRef, Pos};
use crate::backend::sim::FenceMutation;
use crate::backend::RawStream;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod solo;

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
    /// Solo launches preflighted on this stream and not yet committed (see `solo`).
    solo_in_flight: u32,
    /// Solo mode is closing on this stream: the last solo launch out records the floor.
    solo_closing: bool,
    /// The uses of the solo launches in flight: (launch number, buffer id, access). Kept
    /// with its capacity, so steady state allocates nothing.
    solo_uses: Vec<(u64, u64, Access)>,
    /// Solo launches started so far (the last launch number).
    solo_launches: u64,
    /// The highest buffer id a solo launch has used.
    solo_max_id: u64,
    /// While solo mode closes on this stream: an event after the work of every solo launch
    /// that was not in flight at the close (recorded at the close, or at the first use that
    /// needs it if that record failed).
    solo_cover: Option<EventRef>,
    /// While solo mode closes: the buffers used by solo launches that committed since the
    /// close began (they were in flight then).
    solo_late: Vec<u64>,
    /// An event after the work of every such launch (recorded at each one's commit, or at the
    /// first use that needs it if that record failed).
    solo_late_cover: Option<EventRef>,
}

/// How many of its newest events a stream keeps for reuse: the previous op's event is still
/// held by its buffers when the next op commits, and with several streams each buffer's reads
/// keep one event per stream, so the few before it are the ones that come free.
const RECENT: usize = 4;

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
                solo_in_flight: 0,
                solo_closing: false,
                solo_uses: Vec::new(),
                solo_launches: 0,
                solo_max_id: 0,
                solo_cover: None,
                solo_late: Vec::new(),
                solo_late_cover: None,
            })),
            lane: Mutex::new(None),
            has_lane: AtomicBool::new(false),
            floor_seen: AtomicBool::new(false),
            solo_checks: AtomicU64::new(0),
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
    pub(crate) fn current(&self) -> (Arc<RawStream>, u64) {
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
            let recent = std::mem::take(&mut st.recent);
            (std::mem::replace(&mut st.raw, Arc::new(raw)), recent)
        };
        // Dropped outside the lock: a simulated stream joins its thread on drop.
        drop(old);
    }

    /// Queues the minimal waits so that every candidate happens before the stream's next work,
    /// and returns the stream and its context epoch as they were under the same lock. A
    /// candidate of another context epoch of this device fails the whole fence with
    /// [`FenceError::OtherContext`] before anything is queued.
    pub(crate) fn fence(&self, candidates: &[EventRef]) -> std::result::Result<(Arc<RawStream>, u64), FenceError> {
        let mut st = crate::sync::lock(&self.state);
        // A candidate of an earlier context was recorded on a stream that is gone (and may have
        // faulted): waiting on it from this context could never be satisfied, and its buffer
        // is stale. Checked under the lock that a rebuild takes to swap the stream, before any
        // wait is queued. Epochs count per device: a candidate of another device is checked
        // against that device's current context instead.
        for ev in candidates {
            if ev.device() == self.id.device {
                if ev.epoch() != st.epoch {
                    return Err(FenceError::OtherContext { stream_epoch: st.epoch });
                }
            } else if ev.context_replaced() {
                return Err(FenceError::Failed { error: peer_context_lost(ev), stream_epoch: st.epoch });
            }
        }
        if !candidates.is_empty() && self.fencing {
            let stream_epoch = st.epoch;
            let failed = |error| FenceError::Failed { error, stream_epoch };
            let plan = plan_waits(self.index(), &st.clock, candidates);
            if !plan.is_empty() {
                st.raw.bind().map_err(failed)?;
            }
            for ev in plan {
                // A lazily recorded producer is recorded on its own stream now (no tracker lock
                // of that stream is taken: only its backend handle, which the event holds).
                // Recording a lazy producer may bind another context (a peer's): bind again
                // only then.
                let raw = ev.raw_in(&st.raw).map_err(failed)?;
                st.raw.wait_current(raw).map_err(failed)?;
                use super::plan::FencePoint;
                st.clock.join(ev.clock());
                st.stats.waits += 1;
            }
        }
        Ok((st.raw.clone(), st.epoch))
    }

    /// Records the next pooled event on the stream: a new position covering all work so far.
    /// With `required`, only while the stream still belongs to that context epoch (checked under
    /// the stream lock): `None` once the device has moved to a new context, whose stream cannot
    /// mark the end of work sent to the old one.
    pub(crate) fn record_in(&self, pool: &EventPool, required: Option<u64>) -> Option<Result<EventRef>> {
        self.position(pool, required, Record::Now { bound: false })
    }

    /// A launch's commit: [`record_in`](Self::record_in) with `required`, leaving the backend
    /// record for later when `lazy` (its device is still in solo mode on this stream: no other
    /// stream has waited on anything yet). `bound`: the stream's context is current on this
    /// thread (the op's enqueue bound it).
    pub(crate) fn commit_in(
        &self,
        pool: &EventPool,
        required: u64,
        bound: bool,
        lazy: bool,
    ) -> Option<Result<EventRef>> {
        let how = if lazy { Record::Lazily } else { Record::Now { bound } };
        self.position(pool, Some(required), how)
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
        let (reuse, back) = match st.recent.iter().position(|e| Arc::strong_count(e) == 1) {
            // Order among recent events only picks which goes back when none is free, so the
            // cheaper swap does.
            Some(i) => (Some(st.recent.swap_remove(i)), None),
            None if st.recent.len() == RECENT => (None, Some(st.recent.remove(0))),
            None => (None, None),
        };
        match pool.commit(reuse, back, &st.raw, pos, self.id.device, &st.clock, how) {
            Ok(ev) => {
                st.seq = pos.seq;
                st.stats.events += 1;
                if how != Record::Lazily {
                    st.stats.recorded += 1;
                }
                st.recent.push(ev.clone());
                Ok(ev)
            }
            Err(e) => {
                // The stream's own entry goes back to what it covered before.
                let seq = st.seq;
                st.clock.set(index, seq);
                Err(e)
            }
        }
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

/// Why a fence queued no wait.
#[derive(Debug)]
pub(crate) enum FenceError {
    /// A candidate was recorded in another context of this device than the stream's
    /// (`stream_epoch`). Either an earlier one: the buffer belongs to that context, and a wait
    /// from this one could never be satisfied. Or a later one: a rebuild is moving the streams
    /// and has not reached this one yet.
    OtherContext { stream_epoch: u64 },
    /// Any other failure: a driver error, or a peer device's context that was replaced; the
    /// stream was of context `stream_epoch`, which a driver error is classified against.
    Failed { error: Error, stream_epoch: u64 },
}

/// A use on another device whose context was poisoned and replaced since: the work went to a
/// context where nothing runs any more, so whether it touched the buffer is unknown and no
/// stream can wait for it. The buffer cannot be ordered after it, so it is not used again
/// (its free leaks it rather than risk freeing memory still in use).
fn peer_context_lost(ev: &EventRef) -> Error {
    log::error!(
        "cusched: a buffer was used by device #{} in a context that was poisoned since; it cannot be fenced any more",
        ev.device()
    );
    Error::ContextPoisoned {
        call: "a use on another device whose context was poisoned",
        status: crate::backend::cuda::CONTEXT_IS_DESTROYED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimShared;
    use crate::backend::BackendCtx;
    use crate::SimConfig;

    #[test]
    fn a_fence_on_an_event_of_an_earlier_context_queues_nothing_and_fails() {
        let old = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let pool = Arc::new(EventPool::new(old.clone(), 1));
        let producer = StreamSlot::new(StreamId { device: 1, index: 1 }, old.new_stream(1).unwrap(), 1, None, &pool);
        let ev = producer.record_in(&pool, None).unwrap().unwrap();
        // The consumer already runs on the rebuilt context (epoch 2).
        let fresh = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let consumer = StreamSlot::new(StreamId { device: 1, index: 0 }, fresh.new_stream(0).unwrap(), 2, None, &pool);
        let r = consumer.fence(&[ev]);
        assert!(matches!(r, Err(FenceError::OtherContext { stream_epoch: 2 })), "a fence across contexts must fail");
        assert_eq!(consumer.stats().waits, 0, "no wait may be queued on an event of a dead context");
    }

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
}
