//! A stream lent to a graph recording: whether it is lent, whether it is capturing an op now,
//! and the frees that arrived while it was.
//!
//! While a stream captures, whatever is enqueued on it goes into the graph instead of running,
//! whoever enqueues it. The crate's own work that can land on a recording stream from another
//! thread is a buffer's free on its home stream: the free holds this gate while it fences and
//! frees, and a free that finds the stream capturing is kept here and run once the capture
//! ends. An allocation on a capturing stream is refused (it would become a graph node).

use super::StreamSlot;
use std::any::Any;
use std::sync::Arc;

/// Work kept back while the stream captured.
pub(crate) type Deferred = Box<dyn FnOnce(&StreamSlot) + Send>;

/// The recording state of one stream, under [`StreamSlot`]'s gate lock.
#[derive(Default)]
pub(crate) struct RecordingGate {
    /// An op's capture is open on the stream.
    capturing: bool,
    /// Frees that found the stream capturing.
    deferred: Vec<Deferred>,
}

/// Why a stream cannot be lent to a recording.
#[derive(Debug)]
pub(crate) struct AlreadyLent;

impl StreamSlot {
    /// The recording the stream is lent to, if any: one relaxed load when none is.
    #[inline(always)]
    pub(crate) fn recording(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        if !self.lent.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        crate::sync::lock(&self.lent_to).clone()
    }

    /// Whether the stream is lent to a graph recording: one load, as in
    /// [`recording`](Self::recording).
    #[inline(always)]
    pub(crate) fn is_lent(&self) -> bool {
        self.lent.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Lends the stream to `recording`: every launch on it records into that recording's graph
    /// until [`end_recording`](Self::end_recording).
    pub(crate) fn lend_to_recording(&self, recording: Arc<dyn Any + Send + Sync>) -> Result<(), AlreadyLent> {
        let mut lent_to = crate::sync::lock(&self.lent_to);
        if lent_to.is_some() {
            return Err(AlreadyLent);
        }
        *lent_to = Some(recording);
        self.lent.store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Takes the stream back from its recording.
    pub(crate) fn end_recording(&self) {
        let gone = {
            let mut lent_to = crate::sync::lock(&self.lent_to);
            self.lent.store(false, std::sync::atomic::Ordering::Release);
            lent_to.take()
        };
        // Dropped after the leaf lock is released.
        drop(gone);
    }

    /// Opens or closes an op's capture on the stream. Closing runs the frees that waited for
    /// it (after the gate is released).
    pub(crate) fn set_capturing(&self, on: bool) {
        let deferred = {
            let mut gate = crate::sync::lock(&self.recording);
            gate.capturing = on;
            if on {
                return;
            }
            std::mem::take(&mut gate.deferred)
        };
        for free in deferred {
            let free = std::cell::Cell::new(Some(free));
            self.free_outside_capture(
                |slot| {
                    if let Some(f) = free.take() {
                        f(slot)
                    }
                },
                || free.take().unwrap_or_else(|| Box::new(|_| {})),
            );
        }
    }

    /// Runs `f` with the gate held, so that no capture opens meanwhile; `None` if a capture
    /// is open now.
    pub(crate) fn outside_capture<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let gate = crate::sync::lock(&self.recording);
        if gate.capturing {
            return None;
        }
        let out = f();
        drop(gate);
        Some(out)
    }

    /// Runs `now` (a buffer's fence and free on this, its home stream) with the gate held, so
    /// that no capture opens meanwhile; if a capture is open, keeps what `later` makes (the
    /// same free, owning what it needs) to run once the capture ends. Only the deferred form
    /// allocates.
    pub(crate) fn free_outside_capture(&self, now: impl FnOnce(&StreamSlot), later: impl FnOnce() -> Deferred) {
        let mut gate = crate::sync::lock(&self.recording);
        if gate.capturing {
            gate.deferred.push(later());
            return;
        }
        now(self);
        drop(gate);
    }
}
