//! Pooled events: one per committed launch, shared by all of its buffers.

use super::plan::FencePoint;
use super::registry::StreamIndex;
use super::{Clock, Pos};
use crate::backend::{BackendCtx, RawEvent};
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Recycles backend events so that steady-state commits create none.
///
/// An event returns to the pool when the last [`EventRef`] to it drops. That is safe even if a
/// `cuStreamWaitEvent` on it is still queued: a wait captures the event's state when it is
/// enqueued, and re-recording the event later does not change waits enqueued before.
pub(crate) struct EventPool {
    state: Mutex<PoolState>,
    /// Events ever created; read by tests and benches to prove steady state creates none.
    created: AtomicU64,
    /// `PoolState::epoch`, readable without the lock: a stream of another device checks it
    /// before waiting on one of these events.
    epoch: AtomicU64,
    /// The process-wide indices of the device's streams: every event keeps the pool alive, so
    /// no index is reused while an event that names it exists.
    indices: Mutex<Vec<Arc<StreamIndex>>>,
}

struct PoolState {
    backend: BackendCtx,
    /// The context epoch of `backend`; events of older epochs are not pooled again.
    epoch: u64,
    free: Vec<RawEvent>,
}

impl EventPool {
    pub(crate) fn new(backend: BackendCtx, epoch: u64) -> Self {
        EventPool {
            state: Mutex::new(PoolState { backend, epoch, free: Vec::new() }),
            created: AtomicU64::new(0),
            epoch: AtomicU64::new(epoch),
            indices: Mutex::new(Vec::new()),
        }
    }

    /// A free event and its context epoch, created only when the pool is empty.
    pub(crate) fn take(&self) -> Result<(RawEvent, u64)> {
        let (backend, epoch) = {
            let mut st = crate::sync::lock(&self.state);
            if let Some(ev) = st.free.pop() {
                return Ok((ev, st.epoch));
            }
            (st.backend.clone(), st.epoch)
        };
        let ev = backend.new_event()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok((ev, epoch))
    }

    pub(crate) fn put(&self, ev: RawEvent, epoch: u64) {
        let mut st = crate::sync::lock(&self.state);
        if st.epoch == epoch {
            st.free.push(ev);
        }
        // An event of a replaced context is dropped (destroyed in its own, still living,
        // context), never handed to the new one.
    }

    /// Starts pooling events of a rebuilt context.
    pub(crate) fn reset(&self, backend: BackendCtx, epoch: u64) {
        let old = {
            let mut st = crate::sync::lock(&self.state);
            st.backend = backend;
            st.epoch = epoch;
            self.epoch.store(epoch, Ordering::Release);
            std::mem::take(&mut st.free)
        };
        drop(old);
    }

    pub(crate) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// Keeps a stream's index leased for as long as events of this pool may name it.
    pub(crate) fn hold(&self, index: Arc<StreamIndex>) {
        crate::sync::lock(&self.indices).push(index);
    }
}

/// A recorded event: where it sits on its stream and what that point covers.
pub(crate) struct FenceEvent {
    pos: Pos,
    /// The uid of the device whose stream recorded it.
    device: u32,
    clock: Clock,
    raw: Option<RawEvent>,
    epoch: u64,
    pool: Arc<EventPool>,
}

/// Shared handle to a recorded event; the last one returns the event to its pool.
pub(crate) type EventRef = Arc<FenceEvent>;

impl FenceEvent {
    pub(crate) fn new(
        pos: Pos,
        device: u32,
        clock: Clock,
        raw: RawEvent,
        epoch: u64,
        pool: Arc<EventPool>,
    ) -> EventRef {
        Arc::new(FenceEvent { pos, device, clock, raw: Some(raw), epoch, pool })
    }

    /// The uid of the device whose stream recorded the event.
    pub(crate) fn device(&self) -> u32 {
        self.device
    }

    /// Whether the event's device has moved to a new context since the event was recorded:
    /// its work went to a poisoned context, and nothing can wait on it any more.
    pub(crate) fn context_replaced(&self) -> bool {
        self.pool.epoch.load(Ordering::Acquire) != self.epoch
    }

    /// The context epoch the event was recorded in.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(crate) fn raw(&self) -> &RawEvent {
        // `raw` is only taken in `drop`, so it is always present while `&self` exists.
        match &self.raw {
            Some(raw) => raw,
            None => unreachable!("FenceEvent::raw is only taken in Drop"),
        }
    }

    pub(crate) fn pos(&self) -> Pos {
        self.pos
    }

    /// Whether the GPU has passed this event.
    pub(crate) fn is_done(&self) -> Result<bool> {
        self.raw().query()
    }

    /// Blocks the calling thread until the GPU has passed this event.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.raw().synchronize()
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

impl Drop for FenceEvent {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.pool.put(raw, self.epoch);
        }
    }
}

impl std::fmt::Debug for FenceEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event(device #{}, stream {}, seq {})", self.device, self.pos.stream, self.pos.seq)
    }
}
