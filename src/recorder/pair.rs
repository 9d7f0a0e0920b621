//! A launch that reads one buffer and writes another (a peer copy), admitted the marked way
//! without a recorder when nothing unusual is in play: the same marks, fence, commit and
//! publication as [`LaunchRecorder::launch`](super::LaunchRecorder::launch) on the marked
//! path, on the two buffers' tracks borrowed from the caller instead of uses it would clone
//! into a recorder, and with none of the closure form's general machinery (strategy choice,
//! survey, graph recording, trace, lane jobs) that such a launch never needs.
//!
//! The path is taken only when every check the general path would make before its marks
//! comes out plain: the stream follows its device's solo launches already (it is past solo
//! mode, or is the solo stream while solo mode is open on it) and is not lent to a graph
//! recording, no trace hook is set, the caller is in no lane job and no graph's recording
//! closure, both buffers are of their device's generation with no declared job's reservation,
//! a buffer of the stream's device is of its current context, and a buffer of another device
//! is of the stream's backend with that device's solo floor already followed by the stream.
//! Anything else, and a fence or context check that does not come out plain after the marks
//! (which are then released with nothing enqueued), sends the launch to the general path,
//! which handles it as any launch.

use super::failure;
use crate::backend::memory::{Enqueue, SimUses};
use crate::backend::RawStream;
use crate::device::{BufferTrack, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::trace::{NvtxRange, OpLabel};
use crate::track::order::Stamp;
use crate::track::{Access, CommitAt, EventRef, HolderId, MarkRequest, StreamSlot};
use smallvec::SmallVec;
use std::sync::Arc;

/// A launch that reads `read` and writes `write` (two distinct buffers), between its marks and
/// its commit. Its work is enqueued on it ([`Enqueue`]); [`commit`](Self::commit) ends it,
/// and a drop without commit (an unwinding enqueue) commits it too, leaving `write` failed,
/// so that enqueued work never stays unfenced.
pub(crate) struct PairLaunch<'a> {
    device: &'a DeviceShared,
    slot: &'a StreamSlot,
    stream: StreamId,
    /// The stream's backend handle as the fence left it, for the enqueue.
    raw: Arc<RawStream>,
    /// The context epoch of `raw`, which the enqueued work belongs to.
    epoch: u64,
    holder: HolderId,
    read: &'a BufferTrack,
    write: &'a BufferTrack,
    label: &'a OpLabel,
    /// Whether the drop still has to commit (cleared by [`commit`](Self::commit)).
    armed: bool,
    _nvtx: NvtxRange,
}

/// The events the stream must wait for, gathered while the marks are taken.
type Candidates = SmallVec<[EventRef; 8]>;

impl<'a> PairLaunch<'a> {
    /// Admits the launch on `stream` of `device` (see the module docs): `None` when the
    /// general path must take it (nothing is then held or enqueued); an error when a mark
    /// cannot be taken or the read buffer's last writer failed, as the general path would
    /// report it.
    ///
    /// Out of line, as is [`record`](Self::record): inlined into the copy, the two bloat its
    /// frame with spills (callgrind counts about 70 instructions more per copy).
    #[inline(never)]
    pub(crate) fn admit(
        device: &'a DeviceShared,
        stream: StreamId,
        read: &'a BufferTrack,
        write: &'a BufferTrack,
        label: &'a OpLabel,
    ) -> Option<Result<Self>> {
        let slot = device.stream(stream).ok()?;
        // Read before the buffers are looked at, as the general path's survey does: a rebuild
        // that begins meanwhile is caught after the fence.
        let device_epoch = device.epoch();
        // The stream follows its device's solo launches already: it is past solo mode, or is
        // the solo stream while solo mode is open there (stream order orders them).
        let plain = !device.solo.needs_floor(stream.index, slot.floor_seen())
            & !device.tracer.is_on()
            & !slot.is_lent()
            & crate::track::reservation::outside_lane_jobs()
            & plain_use(device, slot, read, device_epoch)
            & plain_use(device, slot, write, device_epoch);
        if !plain || read.id.0 == write.id.0 || super::rebind::in_recording_closure() {
            return None;
        }
        let _nvtx = NvtxRange::push(label.library, label.op());
        let holder = HolderId::current();
        let mut candidates = Candidates::new();
        if let Err(e) = mark_both(device, slot, holder, read, write, &mut candidates) {
            return Some(Err(device.classify(e, device_epoch)));
        }
        #[cfg(test)]
        crate::device::rebuild_hooks::at(device.uid, crate::device::rebuild_hooks::Stage::MarksTaken);
        // With the marks taken, a failure the read buffer's writer set before publishing is
        // visible. A plain write replaces the contents: only the read sees a failure.
        if read.is_failed() | write.is_failed() {
            if let Some(e) = read.failed_input() {
                release(read, write, holder);
                return Some(Err(e));
            }
        }
        let Ok((raw, epoch)) = slot.fence(&candidates) else {
            release(read, write, holder);
            return None;
        };
        drop(candidates);
        // The buffers' memory must belong to the contexts the stream and their devices are of
        // now: a rebuild that began meanwhile is left to the general path, which waits it out.
        let current = epoch == device_epoch
            && epoch == device.epoch()
            && of_context(device, read, epoch)
            && of_context(device, write, epoch);
        if !current {
            release(read, write, holder);
            return None;
        }
        Some(Ok(PairLaunch { device, slot, stream, raw, epoch, holder, read, write, label, armed: true, _nvtx }))
    }

    /// Commits the launch whose enqueue returned `out`: settles the written buffer's failure
    /// state, records the launch's event on its stream and publishes it to both buffers.
    /// Returns `out`'s error, classified against the launch's context, else the commit's.
    #[inline(always)]
    pub(crate) fn commit(mut self, out: Result<()>) -> Result<()> {
        self.armed = false;
        match &out {
            Ok(()) => self.write.clear_failure(),
            Err(e) => self.write.fail(&failure::op_name(self.device, self.stream, self.label), e, false),
        }
        let committed = self.record();
        match out {
            Ok(()) => committed,
            Err(e) => Err(self.device.classify(e, self.epoch)),
        }
    }

    /// Records the launch's event and hands it to both buffers; on failure, drains the stream
    /// before the marks are released (see `reserved::unfenced`).
    #[inline(never)]
    fn record(&self) -> Result<()> {
        let at = CommitAt { epoch: self.epoch, how: self.slot.commit_record(&self.device.solo, false) };
        let recorded = match self.slot.commit_in(&self.device.events, at) {
            Some(recorded) => recorded,
            None => Err(self.device.poison_since(self.epoch)),
        };
        match recorded {
            Ok(ev) => {
                crate::track::reservation::note_commit(self.stream, &ev);
                self.read.publish_stamped(Access::Read, self.holder, Some(&ev), Stamp::NONE);
                self.write.publish_stamped(Access::Write, self.holder, Some(&ev), Stamp::NONE);
                Ok(())
            }
            Err(e) => Err(self.record_failed(e)),
        }
    }

    #[cold]
    #[inline(never)]
    fn record_failed(&self, e: Error) -> Error {
        let err = self.device.classify(e, self.epoch);
        super::reserved::unfenced(self.device, &self.raw, self.epoch);
        release(self.read, self.write, self.holder);
        err
    }
}

/// On a simulated device, names the kernels enqueued until the guard drops (the op, its lane
/// and the buffers' labels) for the checker's hazards; `None` on CUDA. Held by the caller
/// around the whole launch, outside [`PairLaunch`], which it would only make larger to move.
#[inline(always)]
pub(crate) fn sim_naming(
    device: &DeviceShared,
    stream: StreamId,
    label: &OpLabel,
    buffers: [&BufferTrack; 2],
) -> Option<crate::backend::sim::Naming> {
    device.is_simulated().then(|| super::launch::sim_naming(device, stream, label, buffers))
}

impl Drop for PairLaunch<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        log::error!(
            "cusched: a launch on {} unwound before its commit; committing it so its work stays fenced",
            self.stream
        );
        let unwound = Error::JobPanicked { message: "the launch's enqueue closure panicked".into() };
        self.write.fail(&failure::op_name(self.device, self.stream, self.label), &unwound, false);
        if let Err(e) = self.record() {
            log::error!("cusched: committing the unwound launch failed: {e}");
        }
    }
}

impl Enqueue for PairLaunch<'_> {
    fn raw_stream(&self) -> &RawStream {
        &self.raw
    }

    /// In id order, as a recorder keeps its uses.
    fn declared_uses(&self) -> SimUses {
        let (r, w) = ((self.read.id.0, Access::Read), (self.write.id.0, Access::Write));
        if r.0 < w.0 {
            smallvec::smallvec![r, w]
        } else {
            smallvec::smallvec![w, r]
        }
    }
}

/// Whether a use of `t` on `slot` of `device` needs none of the checks before the marks: of
/// the device's generation, reserved by no declared job, and either of `device`'s context as
/// of `epoch`, or of another device of the same backend whose solo floor the stream follows.
#[inline(always)]
fn plain_use(device: &DeviceShared, slot: &StreamSlot, t: &BufferTrack, epoch: u64) -> bool {
    let other = &t.device;
    let placed = if other.uid == device.uid {
        t.epoch == epoch
    } else {
        (other.is_simulated() == device.is_simulated()) & slot.covers_peer_floor(other.uid)
    };
    t.is_fresh() & t.reservations.is_empty() & placed
}

/// Whether `t`'s memory belongs to its device's context: judged by `epoch` (read with the
/// stream under its lock) for the stream's own device, by that device's own epoch otherwise.
#[inline(always)]
fn of_context(device: &DeviceShared, t: &BufferTrack, epoch: u64) -> bool {
    if t.device.uid == device.uid {
        t.epoch == epoch
    } else {
        t.epoch == t.device.epoch()
    }
}

/// Takes pending marks on both buffers in id order (the global order that keeps two
/// preflights from waiting on each other in a cycle), gathering the events the stream must
/// wait for; on error no mark stays taken.
#[inline(always)]
fn mark_both(
    device: &DeviceShared,
    slot: &StreamSlot,
    holder: HolderId,
    read: &BufferTrack,
    write: &BufferTrack,
    candidates: &mut Candidates,
) -> Result<()> {
    let mark = MarkRequest { holder, timeout: device.config.preflight_timeout, on: slot.index(), stamp: Stamp::NONE };
    // Outside lane jobs nothing can invert submit order: `Stamp::NONE` makes no check.
    let mut inverted = None;
    let (first, second) = if read.id.0 < write.id.0 {
        ((read, Access::Read), (write, Access::Write))
    } else {
        ((write, Access::Write), (read, Access::Read))
    };
    first.0.acquire_stamped(first.1, mark, candidates, &mut inverted)?;
    if let Err(e) = second.0.acquire_stamped(second.1, mark, candidates, &mut inverted) {
        first.0.publish(first.1, holder, None);
        return Err(e);
    }
    Ok(())
}

/// Releases both marks without an event.
#[cold]
#[inline(never)]
fn release(read: &BufferTrack, write: &BufferTrack, holder: HolderId) {
    read.publish(Access::Read, holder, None);
    write.publish(Access::Write, holder, None);
}
