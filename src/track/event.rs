//! Pooled events: one per committed launch, shared by all of its buffers.

use super::plan::FencePoint;
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
    backend: BackendCtx,
    free: Mutex<Vec<RawEvent>>,
    /// Events ever created; read by tests and benches to prove steady state creates none.
    created: AtomicU64,
}

impl EventPool {
    pub(crate) fn new(backend: BackendCtx) -> Self {
        EventPool { backend, free: Mutex::new(Vec::new()), created: AtomicU64::new(0) }
    }

    /// A free event, created only when the pool is empty.
    pub(crate) fn take(&self) -> Result<RawEvent> {
        if let Some(ev) = crate::sync::lock(&self.free).pop() {
            return Ok(ev);
        }
        let ev = self.backend.new_event()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(ev)
    }

    pub(crate) fn put(&self, ev: RawEvent) {
        crate::sync::lock(&self.free).push(ev);
    }

    pub(crate) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }
}

/// A recorded event: where it sits on its stream and what that point covers.
pub(crate) struct FenceEvent {
    pos: Pos,
    clock: Clock,
    raw: Option<RawEvent>,
    pool: Arc<EventPool>,
}

/// Shared handle to a recorded event; the last one returns the event to its pool.
pub(crate) type EventRef = Arc<FenceEvent>;

impl FenceEvent {
    pub(crate) fn new(pos: Pos, clock: Clock, raw: RawEvent, pool: Arc<EventPool>) -> EventRef {
        Arc::new(FenceEvent { pos, clock, raw: Some(raw), pool })
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
            self.pool.put(raw);
        }
    }
}

impl std::fmt::Debug for FenceEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event(stream {}, seq {})", self.pos.stream, self.pos.seq)
    }
}
