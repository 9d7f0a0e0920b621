//! What a launch holds between preflight and commit, and the commit that ends it: the same
//! for a hand-paired [`Preflighted`](super::Preflighted) launch and for the closure form,
//! which keeps it on the stack and borrows the rest.

use super::admission::Admission;
use super::Use;
use crate::backend::RawStream;
use crate::device::{DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::track::{CommitAt, EventRef, StreamSlot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A launch admitted onto its stream, besides its uses and its device.
pub(super) struct Reserved {
    /// The stream the launch runs on.
    pub(super) stream: StreamId,
    /// The stream's backend handle as the preflight left it, for the enqueue and the commit.
    pub(super) raw: Arc<RawStream>,
    /// The context epoch of `raw`, which the enqueued work belongs to.
    pub(super) epoch: u64,
    /// The op's own enqueue made the stream's context current and ran only crate code after,
    /// so the commit's record needs no bind of its own.
    pub(super) bound: AtomicBool,
    /// How the launch was admitted, which decides how its commit ends it.
    pub(super) admission: Admission,
}

impl Reserved {
    /// A launch admitted on `stream` (backend handle `raw`, of context `epoch`).
    pub(super) fn new(stream: StreamId, raw: Arc<RawStream>, epoch: u64, admission: Admission) -> Self {
        Reserved { stream, raw, epoch, bound: AtomicBool::new(false), admission }
    }

    /// The launch's stream. It was looked up and validated at preflight, and the slot of an
    /// index handed out once is never replaced, so this is a plain index.
    #[inline(always)]
    fn slot<'d>(&self, device: &'d DeviceShared) -> Result<&'d StreamSlot> {
        device.slot_by_index(self.stream.index).map_or_else(|| device.stream(self.stream), Ok)
    }

    /// [`commit`](Self::commit), for a caller that hands no event out: a launch whose strategy
    /// needs none ends without one (see [`Admission::end_unrecorded`]), and `None` comes back
    /// only then.
    #[inline(always)]
    pub(super) fn commit_unobserved(&self, device: &DeviceShared, uses: &[Use]) -> Result<Option<EventRef>> {
        let slot = match self.slot(device) {
            Ok(slot) => slot,
            Err(e) => return Err(self.commit_failed(device, uses, e)),
        };
        match self.admission.end_unrecorded(device, slot, self.epoch) {
            None => self.commit_on(device, slot, uses).map(Some),
            Some(Ok(())) => Ok(None),
            Some(Err(e)) => Err(self.commit_failed(device, uses, e)),
        }
    }

    /// Records the launch's event on its stream and hands it to what the launch holds (see
    /// [`Admission::publish`]).
    pub(super) fn commit(&self, device: &DeviceShared, uses: &[Use]) -> Result<EventRef> {
        match self.slot(device) {
            Ok(slot) => self.commit_on(device, slot, uses),
            Err(e) => Err(self.commit_failed(device, uses, e)),
        }
    }

    /// [`commit`](Self::commit) on the launch's stream `slot`.
    #[inline(always)]
    fn commit_on(&self, device: &DeviceShared, slot: &StreamSlot, uses: &[Use]) -> Result<EventRef> {
        // Recorded even when no tracked buffer is used (a kernel with only scalar arguments, or
        // on external memory): the op's completion and keep-alives need a point on the stream
        // that covers its work.
        // Only in the context the work went to: after a rebuild, an event on the new stream
        // would mark work of the poisoned context as finished.
        let at =
            CommitAt { epoch: self.epoch, how: slot.commit_record(&device.solo, self.bound.load(Ordering::Relaxed)) };
        let recorded = self.admission.record(device, slot, at).unwrap_or_else(|| Err(device.poison_since(self.epoch)));
        match recorded {
            Ok(ev) => {
                crate::track::reservation::note_commit(self.stream, &ev);
                self.admission.publish(uses, &ev);
                Ok(ev)
            }
            Err(e) => Err(self.commit_failed(device, uses, e)),
        }
    }

    /// The commit's record failed: the error is classified against the launch's context
    /// (which may start a rebuild); since nothing marks the end of the launch's work, the
    /// stream is drained (see `unfenced`) before the launch lets go of what it holds.
    #[cold]
    #[inline(never)]
    fn commit_failed(&self, device: &DeviceShared, uses: &[Use], e: Error) -> Error {
        let err = device.classify(e, self.epoch);
        unfenced(device, &self.raw, self.epoch);
        self.admission.release(uses);
        err
    }
}

/// The record that would have fenced enqueued work failed, so nothing on the device marks where
/// that work ends and later users of its buffers would have nothing to wait on. This is already
/// an error path, so block until the stream has drained before the buffers are released. If
/// even that fails, the work cannot be proven finished: a sticky status has poisoned the
/// context (its buffers are stale), and any other makes every handle of the device stale, so
/// that no buffer is ever used unfenced.
pub(super) fn unfenced(device: &DeviceShared, raw: &RawStream, epoch: u64) {
    let Err(e) = raw.synchronize() else { return };
    match device.classify(e, epoch) {
        Error::ContextPoisoned { .. } => {}
        e => {
            log::error!(
                "cusched: the work of a failed commit on device {} cannot be proven finished ({e}); every handle made so far becomes stale",
                device.label()
            );
            device.advance_generation();
        }
    }
}
