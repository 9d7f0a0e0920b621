//! A launch against its device's solo mode (see `track::solo`): the solo preflight, and what a
//! marked launch elsewhere waits on for memory that solo launches used.

use super::{LaunchRecorder, Reserved, Use};
use crate::device::{Device, DeviceShared};
use crate::error::Result;
use crate::track::{Access, EventRef, StreamSlot};
use smallvec::SmallVec;

impl LaunchRecorder {
    /// The preflight of a solo launch (see `track::solo`): no mark, no candidate, only the
    /// stream and its context epoch, read under the stream's lock where the launch is counted
    /// in flight. `None` when solo mode closed meanwhile, or the stream or the device is not
    /// of `device_epoch` any more: the marked preflight then handles it.
    #[inline(always)]
    pub(super) fn reserve_solo(&self, shared: &DeviceShared, slot: &StreamSlot, device_epoch: u64) -> Option<Reserved> {
        #[cfg(test)]
        crate::device::rebuild_hooks::at(shared.uid, crate::device::rebuild_hooks::Stage::MarksTaken);
        let (raw, epoch, ticket) = slot.enter_solo(&shared.solo, solo_uses(&self.uses))?;
        if epoch == device_epoch && epoch == shared.epoch() {
            return Some(Reserved::solo(self.stream, raw, epoch, ticket));
        }
        slot.leave_solo(&shared.solo, &shared.events, ticket);
        None
    }

    /// For a launch with peers: closes the solo mode of every other device whose memory it
    /// uses, and adds that device's floor to `candidates` when a solo launch used one of its
    /// buffers here (a peer launch looks each time: the stream's own flag covers only its own
    /// device's floor).
    #[cold]
    #[inline(never)]
    pub(super) fn peer_floors(&self, device: &Device, candidates: &mut SmallVec<[EventRef; 8]>) -> Result<()> {
        let mut seen = SmallVec::<[u32; 2]>::new();
        for u in &self.uses {
            let other = &u.track().device;
            if other.uid == device.shared.uid || seen.contains(&other.uid) {
                continue;
            }
            seen.push(other.uid);
            other.close_solo();
            if let Some((Some(event), _)) = solo_cover(other, &self.uses)? {
                if !event.context_replaced() {
                    candidates.push(event);
                }
            }
        }
        Ok(())
    }
}

/// What a marked launch on `slot` with `uses` waits on for its device's solo mode: closes it
/// if it is open on another stream, and, when a solo launch used one of the buffers (the
/// others' states miss nothing), returns the event that covers those uses once no solo launch
/// in flight conflicts with this one (see `track::solo`), unless `slot` is the solo stream or
/// the event is of a context the device has left (whose buffers are all stale). Also whether
/// the stream needs never look again: it waits on the floor now, or there is none to wait on.
#[cold]
#[inline(never)]
pub(super) fn solo_floor(shared: &DeviceShared, slot: &StreamSlot, uses: &[Use]) -> Result<(Option<EventRef>, bool)> {
    slot.count_solo_check();
    shared.close_solo();
    if shared.solo.closed_on() == Some(slot.id.index) {
        return Ok((None, true));
    }
    if shared.fence_mutation == Some(crate::FenceMutation::NoSoloFloor) {
        return Ok((None, true));
    }
    let Some((event, done)) = solo_cover(shared, uses)? else {
        return Ok((None, false));
    };
    Ok((event.filter(|f| f.pos().stream != slot.index() && f.epoch() == shared.epoch()), done))
}

/// For a launch elsewhere with `uses`, once `device`'s solo mode is closing or closed: `None`
/// when no solo launch of `device` can have used one of its buffers of that device, else the
/// event that covers their solo uses, waited for until no solo launch in flight conflicts
/// (with whether it is the floor: see `DeviceShared::solo_wait`).
fn solo_cover(device: &DeviceShared, uses: &[Use]) -> Result<Option<(Option<EventRef>, bool)>> {
    let of_device = |u: &&Use| u.track().device.uid == device.uid;
    if !uses.iter().filter(of_device).any(|u| device.solo.maybe_used(u.id)) {
        return Ok(None);
    }
    device.solo_wait(uses.iter().filter(of_device).map(|u| (u.id, u.access)).collect()).map(Some)
}

/// A solo launch's uses as its stream lists them while it is in flight.
#[inline(always)]
fn solo_uses(uses: &[Use]) -> impl Iterator<Item = (u64, Access)> + '_ {
    uses.iter().map(|u| (u.id, u.access))
}
