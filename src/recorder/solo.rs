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
    /// device's floor). A device whose solo mode has closed with no floor, or with a floor
    /// `slot` already covers, needs nothing more: the floor covers every solo launch, so this
    /// costs one load and one clock compare per peer device in steady state.
    #[cold]
    #[inline(never)]
    pub(super) fn peer_floors(
        &self,
        device: &Device,
        slot: &StreamSlot,
        candidates: &mut SmallVec<[EventRef; 8]>,
    ) -> Result<()> {
        let mut seen = SmallVec::<[u32; 2]>::new();
        for u in &self.uses {
            let other = &u.track().device;
            if other.uid == device.shared.uid || seen.contains(&other.uid) {
                continue;
            }
            seen.push(other.uid);
            match other.solo.closed_floor() {
                Some(None) => continue,
                Some(Some(floor)) if slot.covers(floor) => continue,
                _ => {}
            }
            other.close_solo();
            if let Some((Some(event), _)) = solo_cover(other, &self.uses, false)? {
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
/// in flight conflicts with this one (see `track::solo`), unless `slot` is the solo stream
/// (which only waits for conflicting solo launches of other threads while solo mode closes)
/// or the event is of a context the device has left (whose buffers are all stale). Also
/// whether the stream needs never look again: it waits on the floor now, or there is none to
/// wait on (see [`past_floor`] for a launch that used none of that memory).
#[cold]
#[inline(never)]
pub(super) fn solo_floor(shared: &DeviceShared, slot: &StreamSlot, uses: &[Use]) -> Result<(Option<EventRef>, bool)> {
    let checks = slot.count_solo_check();
    shared.close_solo();
    if shared.fence_mutation == Some(crate::FenceMutation::NoSoloFloor) {
        return Ok((None, true));
    }
    let on_solo_stream = shared.solo.closed_on() == Some(slot.id.index);
    let (event, done) = match solo_cover(shared, uses, on_solo_stream)? {
        Some(covered) => covered,
        None => match past_floor(shared, slot, checks) {
            Some(floor) => (floor, true),
            None => return Ok((None, false)),
        },
    };
    Ok((event.filter(|f| f.pos().stream != slot.index() && f.epoch() == shared.epoch()), done))
}

/// For a launch on `slot` that used no memory a solo launch used, once solo mode has closed:
/// whether the stream may stop looking at solo mode by taking the floor as a candidate now
/// (`Some`, with the floor if there is one), so that any later use of that memory there
/// follows it. Only when that costs nothing on the GPU: the stream's clock covers the floor
/// (no wait), or the GPU is known to have passed it (a wait on finished work), or there is
/// none to follow (none recorded, or one of a context the device has left). Otherwise the
/// stream goes on looking, and asks the driver whether the floor is done on every 64th look
/// only (`checks` counts them), since that costs a query.
fn past_floor(shared: &DeviceShared, slot: &StreamSlot, checks: u64) -> Option<Option<EventRef>> {
    let floor = shared.solo.closed_floor()?;
    let Some(floor) = floor.filter(|f| f.epoch() == shared.epoch()) else {
        return Some(None);
    };
    let adopt = floor.known_done() || slot.covers(floor) || (checks % 64 == 63 && floor.is_done().unwrap_or(false));
    adopt.then(|| Some(floor.clone()))
}

/// For a launch elsewhere with `uses`, once `device`'s solo mode is closing or closed: `None`
/// when no solo launch of `device` can have used one of its buffers of that device, else the
/// event that covers their solo uses, waited for until no solo launch in flight conflicts
/// (with whether it is the floor: see `DeviceShared::solo_wait`); on the solo stream itself
/// (`on_solo_stream`), only the wait.
fn solo_cover(device: &DeviceShared, uses: &[Use], on_solo_stream: bool) -> Result<Option<(Option<EventRef>, bool)>> {
    let of_device = |u: &&Use| u.track().device.uid == device.uid;
    if !uses.iter().filter(of_device).any(|u| device.solo.maybe_used(u.id)) {
        return Ok(None);
    }
    let uses = uses.iter().filter(of_device).map(|u| (u.id, u.access)).collect();
    device.solo_wait(uses, on_solo_stream).map(Some)
}

/// A solo launch's uses as its stream lists them while it is in flight.
#[inline(always)]
fn solo_uses(uses: &[Use]) -> impl Iterator<Item = (u64, Access)> + '_ {
    uses.iter().map(|u| (u.id, u.access))
}
