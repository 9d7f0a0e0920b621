//! A preflight against its device's context: a stream that a rebuild under way has not moved
//! yet is waited for, and memory of a context the device has left is refused.

use super::{release, LaunchRecorder, Reserved, Use};
use crate::device::BufferTrack;
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result};
use crate::track::{FenceError, HolderId};

impl LaunchRecorder {
    /// The fence failed: every mark is released. A stream that is only behind its device's
    /// rebuild is waited for; anything else is the error.
    #[cold]
    #[inline(never)]
    pub(super) fn fence_refused(
        &mut self,
        device: &Device,
        holder: HolderId,
        e: FenceError,
        rebuilt_from: Option<u64>,
    ) -> Result<Reserved> {
        let shared = &device.shared;
        if let FenceError::OtherContext { stream_epoch } = e {
            if stream_epoch < shared.epoch() {
                release(&self.uses, holder);
                return self.after_rebuild(device, stream_epoch, rebuilt_from);
            }
        }
        Err(fence_failed(shared, &self.uses, holder, e))
    }

    /// After a fence that returned a stream of context `epoch`, when the quick check could not
    /// clear it: `None` when the stream and every use are of that one current context. Else
    /// every mark is released and the outcome is returned: a stream behind its device's rebuild
    /// is waited for, whatever it is used with (a launch with no buffers too), and preflighted
    /// again; a use of memory of a context the device has left is the error.
    #[cold]
    #[inline(never)]
    pub(super) fn context_refused(
        &mut self,
        device: &Device,
        holder: HolderId,
        epoch: u64,
        rebuilt_from: Option<u64>,
    ) -> Option<Result<Reserved>> {
        let shared = &device.shared;
        if epoch < shared.epoch() {
            release(&self.uses, holder);
            return Some(self.after_rebuild(device, epoch, rebuilt_from));
        }
        if self.uses.iter().any(|u| outdated(shared, u.track(), epoch)) {
            return Some(Err(of_earlier_context(shared, &self.uses, holder, epoch)));
        }
        None
    }

    /// The stream is still of context `stream_epoch`, which its device has left: the rebuild
    /// under way moves it to the new one before it finishes. Waits for that, then preflights
    /// again. Each round needs the stream to have moved on since the last (`rebuilt_from`, the
    /// epoch it was of when the last round waited): a rebuild
    /// ends by moving every stream, so this repeats only while new faults keep rebuilding the
    /// device, and a stream that a rebuild left behind (one that unwound halfway) fails with
    /// the poison instead of waiting again.
    fn after_rebuild(&mut self, device: &Device, stream_epoch: u64, rebuilt_from: Option<u64>) -> Result<Reserved> {
        if rebuilt_from.is_some_and(|b| stream_epoch <= b) {
            return Err(device.shared.poison_since(stream_epoch));
        }
        device.shared.await_rebuild();
        // Marked: this may be a hand-paired preflight, which never takes the solo path.
        self.admit(device, super::admission::Choice::MarkedOnly, Some(stream_epoch))
    }
}

/// Releases every mark after a failed fence and says why it failed: a driver error classified
/// against the stream's context.
#[cold]
#[inline(never)]
fn fence_failed(shared: &DeviceShared, uses: &[Use], holder: HolderId, e: FenceError) -> Error {
    release(uses, holder);
    match e {
        // A candidate event belongs to an earlier context: its buffer is stale.
        FenceError::OtherContext { stream_epoch } => {
            let t = uses.iter().map(Use::track).find(|t| outdated(shared, t, stream_epoch));
            t.map_or_else(
                || Error::Stale { what: "a buffer".into(), made: 0, current: shared.generation() },
                of_old_context,
            )
        }
        // Against the context the stream was of: after a wait for a rebuild that is newer
        // than the one the launch began in, and a fault there is new.
        FenceError::Failed { error, stream_epoch } => shared.classify(error, stream_epoch),
    }
}

/// Releases every mark when a use's memory belongs to a context the stream has left.
#[cold]
#[inline(never)]
fn of_earlier_context(shared: &DeviceShared, uses: &[Use], holder: HolderId, epoch: u64) -> Error {
    let err = uses.iter().find(|u| outdated(shared, u.track(), epoch)).map(|u| of_old_context(u.track()));
    release(uses, holder);
    err.unwrap_or_else(|| Error::Stale { what: "a buffer".into(), made: 0, current: shared.generation() })
}

/// The error for a use of memory of an earlier context. Memory made while the device was
/// moving to a new context can carry the new generation with the old context's memory: it is
/// not stale in the generation's sense, but the poisoned context it lives in is the cause.
fn of_old_context(t: &BufferTrack) -> Error {
    let device = &t.device;
    let current = device.generation();
    if t.generation >= current {
        return device.poison_since(t.epoch);
    }
    Error::Stale { what: t.name(), made: t.generation, current }
}

/// Whether every use's memory belongs to the context it must (see [`outdated`]): the quick
/// check after a fence of a stream of the current context `epoch`, for a launch whose survey
/// could not clear its uses at once (one with peers).
#[inline(always)]
pub(super) fn of_context(stream_device: &DeviceShared, uses: &[Use], epoch: u64) -> bool {
    uses.iter().all(|u| !outdated(stream_device, u.track(), epoch))
}

/// Whether `t`'s memory belongs to a context its device has left: for the stream's own device
/// judged by `epoch`, the stream's epoch read under its lock; for a buffer of another device, by
/// that device's own epoch (epochs count per device).
#[inline(always)]
fn outdated(stream_device: &DeviceShared, t: &BufferTrack, epoch: u64) -> bool {
    if t.device.uid == stream_device.uid {
        t.epoch != epoch
    } else {
        t.epoch != t.device.epoch()
    }
}
