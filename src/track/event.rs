//! Fence events: one per committed launch, shared by all of its buffers, recycled in place.
//!
//! # The slab
//!
//! Every event lives in an `Arc<FenceEvent>` that is handed out again once nothing else holds
//! it: each stream keeps its few newest events and refills one that only it still holds (no
//! pool lock in steady state); the others sit in the pool's slab, where an entry whose only
//! reference is the slab's is free. Taking one
//! rewrites its position and clock in place and keeps its backend event, so steady state
//! allocates nothing and creates no event, and dropping the last outside reference is one
//! atomic decrement (no lock, no return trip to a free list).
//!
//! Re-recording a recycled event is safe even if a `cuStreamWaitEvent` on it is still queued: a
//! wait captures the event's state when it is enqueued, and recording the event later does not
//! change waits enqueued before.
//!
//! # Lazy events
//!
//! While a device is in solo mode (only one stream has run tracked work: see `solo`), no
//! stream of the device waits on its events, so commits record none: the event's position and clock are set,
//! and its backend event is recorded on the producing stream the first time something needs
//! it (a host wait, a query, a free or a wait from a second stream). Recorded later on the
//! same stream, it marks a point at or after the position, so it covers everything the
//! position covers (and maybe more work after it, which only makes waiters wait a little
//! longer); a stream of another device that waits on one (a peer launch) records it the same
//! way. Once solo mode closes, commits record at once, so that a cross-stream wait never
//! waits for more than it must.

use super::plan::FencePoint;
use super::registry::StreamIndex;
use super::{Clock, Pos};
use crate::backend::{BackendCtx, RawEvent, RawStream};
use crate::error::Result;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many slab entries a take looks at before it makes a new event instead: keeps a take
/// bounded when most events are held (many buffers, each holding its last write).
const PROBES: usize = 32;

/// Process-wide stream indices that keep a done watermark; streams past it always ask the
/// driver.
const WATERMARKS: usize = 1024;

/// Per process-wide stream index, the highest sequence number the GPU is known to have passed.
///
/// A stream's events are recorded in sequence order (under its slot lock, at commit; a lazy
/// event later still), so once the event of position `s` is seen done, every position up to `s`
/// of that stream is done too, and waiting on one of those needs no driver call: waiting on a
/// batch newest first costs one synchronize per stream. An index passes to a new stream only
/// after every event naming it is gone, and the new holder's sequence numbers go on after the
/// old one's, so a mark never covers a position it has not passed. Positions of a replaced
/// (poisoned) context neither read nor set marks, so their failure still comes from the driver.
static DONE: [AtomicU64; WATERMARKS] = [const { AtomicU64::new(0) }; WATERMARKS];

/// What every event of a pool refers back to.
struct PoolShared {
    /// `PoolState::epoch`, readable without the lock: a stream of another device checks it
    /// before waiting on one of these events.
    epoch: AtomicU64,
    /// The process-wide indices of the device's streams: every event keeps this alive, so no
    /// index is reused while an event that names it exists.
    indices: Mutex<Vec<Arc<StreamIndex>>>,
}

/// The device's fence events.
pub(crate) struct EventPool {
    shared: Arc<PoolShared>,
    state: crate::sync::Ranked<Mutex<PoolState>, { crate::sync::rank::EVENT }>,
    /// Events ever created; read by tests and benches to prove steady state creates none.
    created: AtomicU64,
}

struct PoolState {
    backend: BackendCtx,
    /// The context epoch of `backend`; events of older epochs are not handed out again.
    epoch: u64,
    slab: Vec<EventRef>,
    /// Where the next take starts looking, so that takes go round the slab.
    cursor: usize,
}

impl EventPool {
    pub(crate) fn new(backend: BackendCtx, epoch: u64) -> Self {
        EventPool {
            shared: Arc::new(PoolShared { epoch: AtomicU64::new(epoch), indices: Mutex::new(Vec::new()) }),
            state: crate::sync::Ranked::new(Mutex::new(PoolState { backend, epoch, slab: Vec::new(), cursor: 0 })),
            created: AtomicU64::new(0),
        }
    }

    /// The epoch events are made in now.
    pub(crate) fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// A free event of the current epoch, owned by the caller alone (so it can be filled in
    /// place); made only when none of the entries looked at is free. `back` is an event the
    /// caller held until now, returned to the slab under the same lock.
    fn take(&self, back: Option<EventRef>) -> Result<EventRef> {
        let (backend, epoch) = {
            let mut st = crate::sync::lock(&self.state);
            let epoch = st.epoch;
            if let Some(ev) = back.filter(|ev| ev.epoch == epoch) {
                st.slab.push(ev);
            }
            let mut probes = PROBES.min(st.slab.len());
            while probes > 0 {
                probes -= 1;
                let i = st.cursor % st.slab.len();
                // Plain loads: no event is ever downgraded, and under the pool's lock nothing
                // can clone an entry that only the slab holds; `commit`'s `get_mut` then
                // succeeds and synchronizes with the last holder's drop.
                if Arc::strong_count(&st.slab[i]) == 1 && Arc::weak_count(&st.slab[i]) == 0 {
                    st.cursor = i;
                    return Ok(st.slab.swap_remove(i));
                }
                st.cursor = i + 1;
            }
            (st.backend.clone(), epoch)
        };
        let raw = backend.new_event()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(FenceEvent {
            pos: Pos { stream: 0, seq: 0 },
            device: 0,
            clock: Clock::default(),
            raw,
            epoch,
            lazy: crate::sync::Ranked::new(Mutex::new(None)),
            recorded: AtomicBool::new(false),
            pool: self.shared.clone(),
        }))
    }

    /// Returns an event taken but not handed out (its record failed).
    fn put(&self, ev: EventRef) {
        let mut st = crate::sync::lock(&self.state);
        if ev.epoch == st.epoch {
            st.slab.push(ev);
        }
    }

    /// Starts handing out events of a rebuilt context. Events of the old one are dropped (each
    /// destroyed in its own, still living, context) once nothing holds them.
    pub(crate) fn reset(&self, backend: BackendCtx, epoch: u64) {
        let old = {
            let mut st = crate::sync::lock(&self.state);
            st.backend = backend;
            st.epoch = epoch;
            st.cursor = 0;
            self.shared.epoch.store(epoch, Ordering::Release);
            std::mem::take(&mut st.slab)
        };
        drop(old);
    }

    pub(crate) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// Keeps a stream's index leased for as long as events of this pool may name it.
    pub(crate) fn hold(&self, index: Arc<StreamIndex>) {
        crate::sync::lock(&self.shared.indices).push(index);
    }
}

/// A committed position: where it sits on its stream, what that point covers, and the backend
/// event that marks it (recorded at commit, or lazily on first need).
pub(crate) struct FenceEvent {
    pos: Pos,
    /// The uid of the device whose stream recorded it.
    device: u32,
    clock: Clock,
    raw: RawEvent,
    /// The context epoch `raw` belongs to.
    epoch: u64,
    /// The stream to record `raw` on when it is first needed (lazy commits only); kept after
    /// the record, so that refilling the entry for the same stream clones nothing.
    lazy: crate::sync::Ranked<Mutex<Option<Arc<RawStream>>>, { crate::sync::rank::EVENT }>,
    /// Whether `raw` marks this position: recorded at commit, or since by [`FenceEvent::raw`].
    recorded: AtomicBool,
    pool: Arc<PoolShared>,
}

/// Shared handle to a committed position; free for reuse once only the pool's slab holds it.
pub(crate) type EventRef = Arc<FenceEvent>;

/// How [`EventPool::commit`] marks a new position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// Record the backend event now; `bound`: the stream's context is current on this thread.
    Now { bound: bool },
    /// Leave the backend event for the first one who needs it.
    Lazily,
}

impl EventPool {
    /// A new position `pos` with clock `clock` on `stream`, recorded now or lazily, in `reuse`
    /// (an event of the stream that only the caller holds) or else in one from the slab; `back`
    /// is an event the stream hands back to the slab. On a failed record the event goes back
    /// to the slab and the error is returned.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit(
        &self,
        reuse: Option<EventRef>,
        back: Option<EventRef>,
        stream: &Arc<RawStream>,
        pos: Pos,
        device: u32,
        clock: &Clock,
        how: Record,
    ) -> Result<EventRef> {
        // An event of an earlier context is not refilled (dropping it destroys it).
        let mut ev = match reuse.filter(|ev| ev.epoch == self.epoch()) {
            Some(ev) => ev,
            None => self.take(back)?,
        };
        let Some(e) = Arc::get_mut(&mut ev) else { unreachable!("a taken event is held by its taker alone") };
        if let Err(err) = e.fill(stream, pos, device, clock, how) {
            self.put(ev);
            return Err(err);
        }
        Ok(ev)
    }

    /// [`commit`](Self::commit) into `ev`, an event of the stream that only the caller holds,
    /// where it lies (no move in or out of the stream's list). `None`, with `ev` untouched,
    /// when it cannot be refilled (it is of an earlier context, or held elsewhere after all):
    /// `commit` then. On a failed record `ev` stays the caller's, unrecorded, free to refill.
    #[inline]
    pub(crate) fn refill(
        &self,
        ev: &mut EventRef,
        stream: &Arc<RawStream>,
        pos: Pos,
        device: u32,
        clock: &Clock,
        how: Record,
    ) -> Option<Result<()>> {
        if ev.epoch != self.epoch() {
            return None;
        }
        Some(Arc::get_mut(ev)?.fill(stream, pos, device, clock, how))
    }
}

impl FenceEvent {
    /// Makes this event position `pos` (clock `clock`, device `device`) on `stream`, recorded
    /// as `how` says; on a failed record it is left unrecorded.
    #[inline]
    fn fill(&mut self, stream: &Arc<RawStream>, pos: Pos, device: u32, clock: &Clock, how: Record) -> Result<()> {
        self.pos = pos;
        self.device = device;
        self.clock.copy_from(clock);
        *self.recorded.get_mut() = false;
        let lazy = self.lazy.inner_mut().get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if how == Record::Lazily {
            if !lazy.as_ref().is_some_and(|s| Arc::ptr_eq(s, stream)) {
                *lazy = Some(stream.clone());
            }
        } else if lazy.is_some() {
            // Only an unrecorded event needs its stream; holding one longer would keep a
            // replaced stream (and a simulated stream's thread) alive.
            *lazy = None;
        }
        if let Record::Now { bound } = how {
            stream.record_as(&self.raw, bound)?;
            *self.recorded.get_mut() = true;
        }
        Ok(())
    }
}

impl FenceEvent {
    /// The uid of the device whose stream recorded the event.
    pub(crate) fn device(&self) -> u32 {
        self.device
    }

    /// Whether the event's device has moved to a new context since the event was recorded:
    /// its work went to a poisoned context, and nothing can wait on it any more.
    pub(crate) fn context_replaced(&self) -> bool {
        replaced(self.epoch, &self.pool)
    }

    /// The context epoch the event was recorded in.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(crate) fn pos(&self) -> Pos {
        self.pos
    }

    /// The backend event, recorded first if its commit left that for later. Recording it now,
    /// on the stream that committed the position, marks a point at or after the position.
    pub(crate) fn raw(&self) -> Result<&RawEvent> {
        if !self.recorded.load(Ordering::Acquire) {
            let lazy = crate::sync::lock(&self.lazy);
            if !self.recorded.load(Ordering::Acquire) {
                if let Some(stream) = lazy.as_ref() {
                    stream.record(&self.raw)?;
                }
                self.recorded.store(true, Ordering::Release);
            }
        }
        Ok(&self.raw)
    }

    /// [`raw`](Self::raw) for a fence on `waiter`, whose context the caller has bound: binds
    /// `waiter`'s context again if recording a lazy producer had to bind the producer's.
    pub(crate) fn raw_in(&self, waiter: &RawStream) -> Result<&RawEvent> {
        if self.recorded.load(Ordering::Acquire) {
            return Ok(&self.raw);
        }
        let raw = self.raw()?;
        waiter.bind()?;
        Ok(raw)
    }

    /// Whether the GPU has passed this event.
    pub(crate) fn is_done(&self) -> Result<bool> {
        if self.known_done() {
            return Ok(true);
        }
        let done = self.raw()?.query()?;
        if done {
            self.note_done();
        }
        Ok(done)
    }

    /// Blocks the calling thread until the GPU has passed this event.
    pub(crate) fn synchronize(&self) -> Result<()> {
        if self.known_done() {
            return Ok(());
        }
        self.raw()?.synchronize()?;
        self.note_done();
        Ok(())
    }

    /// Whether a later position of the same stream has been seen done (no driver call).
    pub(crate) fn known_done(&self) -> bool {
        passed(self.pos, self.epoch, &self.pool)
    }

    /// This position without its event, for a follower that keeps many positions and asks the
    /// driver about few of them (see [`PassMark`]).
    #[cfg(feature = "nccl")]
    pub(crate) fn pass_mark(&self) -> PassMark {
        PassMark { pos: self.pos, epoch: self.epoch, pool: self.pool.clone() }
    }

    /// Publishes that the GPU passed this position, and so every earlier one of its stream.
    fn note_done(&self) {
        if self.pos.seq != 0 && !self.context_replaced() {
            if let Some(w) = DONE.get(self.pos.stream as usize) {
                w.fetch_max(self.pos.seq, Ordering::AcqRel);
            }
        }
    }
}

/// Whether `pool`'s device has moved past the context of epoch `epoch`.
fn replaced(epoch: u64, pool: &PoolShared) -> bool {
    pool.epoch.load(Ordering::Acquire) != epoch
}

/// Whether position `pos` of a context of epoch `epoch` is known passed through its stream's
/// watermark.
fn passed(pos: Pos, epoch: u64, pool: &PoolShared) -> bool {
    // Positions of a replaced context report its failure from the driver instead.
    pos.seq != 0
        && !replaced(epoch, pool)
        && DONE.get(pos.stream as usize).is_some_and(|w| pos.seq <= w.load(Ordering::Acquire))
}

/// A committed position kept without its event: it reads as passed once a later position of
/// its stream has been seen passed (the watermark), with no driver call. Keeping marks instead
/// of events lets the events go back to their streams for reuse, while a follower of many
/// positions keeps the events of a few (a later one of the same stream passes every earlier
/// one). It holds the position's pool, which keeps its stream's index from passing to another
/// stream meanwhile.
#[cfg(feature = "nccl")]
#[derive(Clone)]
pub(crate) struct PassMark {
    pos: Pos,
    epoch: u64,
    pool: Arc<PoolShared>,
}

#[cfg(feature = "nccl")]
impl PassMark {
    /// Whether a later position of the same stream has been seen done (no driver call).
    pub(crate) fn known_done(&self) -> bool {
        passed(self.pos, self.epoch, &self.pool)
    }

    /// Whether the position's device has moved to a new context since: nothing marks it passed
    /// any more, and its work went to the poisoned context.
    pub(crate) fn context_replaced(&self) -> bool {
        replaced(self.epoch, &self.pool)
    }

    /// Whether passing `later` passes this position too, and shows through the watermark: it
    /// is this one or a later one of the same stream, in the same context, of a stream that
    /// keeps a watermark (past them, or without a sequence number, a mark never reads passed).
    pub(crate) fn covered_by(&self, later: &FenceEvent) -> bool {
        self.pos.seq != 0
            && (self.pos.stream as usize) < WATERMARKS
            && later.pos.stream == self.pos.stream
            && later.pos.seq >= self.pos.seq
            && later.epoch == self.epoch
            && Arc::ptr_eq(&later.pool, &self.pool)
    }
}

#[cfg(feature = "nccl")]
impl std::fmt::Debug for PassMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mark(stream {}, seq {})", self.pos.stream, self.pos.seq)
    }
}

impl FencePoint for EventRef {
    fn pos(&self) -> Pos {
        self.pos
    }
    fn clock(&self) -> &Clock {
        &self.clock
    }
}

impl std::fmt::Debug for FenceEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event(device #{}, stream {}, seq {})", self.device, self.pos.stream, self.pos.seq)
    }
}

#[cfg(test)]
mod watermark_tests;
