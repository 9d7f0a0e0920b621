//! A launch against its device's solo mode (see `track::solo`): the solo preflight, and what a
//! marked launch elsewhere waits on for memory that solo launches used.

use super::admission::Admission;
use super::{failure, LaunchRecorder, Reserved, Use};
use crate::device::{Device, DeviceShared};
use crate::error::Result;
use crate::track::{Access, Cover, EventRef, Floor, StreamSlot};
use smallvec::SmallVec;

impl LaunchRecorder {
    /// The solo strategy's preflight (see `track::solo`): no mark, no candidate, only the
    /// stream and its context epoch, read under the stream's lock where the launch is counted
    /// in flight. `None` when solo mode closed meanwhile, or the stream or the device is not
    /// of `device_epoch` any more: the marked preflight then handles it. A read of a failed
    /// buffer takes the launch out of flight again, enqueueing nothing.
    #[inline(always)]
    pub(super) fn admit_solo(
        &self,
        shared: &DeviceShared,
        slot: &StreamSlot,
        device_epoch: u64,
    ) -> Option<Result<Reserved>> {
        #[cfg(test)]
        crate::device::rebuild_hooks::at(shared.uid, crate::device::rebuild_hooks::Stage::MarksTaken);
        let (raw, epoch, ticket) = slot.enter_solo(&shared.solo, solo_uses(&self.uses))?;
        if epoch != device_epoch || epoch != shared.epoch() {
            slot.leave_solo(&shared.solo, &shared.events, ticket);
            return None;
        }
        if let Some(e) = failure::failed_input(&self.uses) {
            slot.leave_solo(&shared.solo, &shared.events, ticket);
            return Some(Err(e));
        }
        Some(Ok(Reserved::new(self.stream, raw, epoch, Admission::Solo { ticket })))
    }

    /// For a launch with peers: closes the solo mode of every other device whose memory it
    /// uses, and adds that device's floor to `candidates` when a solo launch used one of its
    /// buffers here (a peer launch looks each time: the stream's own flag covers only its own
    /// device's floor). A device whose solo mode has closed with no floor, or with a floor
    /// `slot` already covers, needs nothing more: the floor covers every solo launch. The
    /// stream remembers such devices (until its clock restarts), so that in steady state the
    /// launch's survey finds them with a load each and this is not called at all.
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
            if other.uid == device.shared.uid || slot.covers_peer_floor(other.uid) || seen.contains(&other.uid) {
                continue;
            }
            seen.push(other.uid);
            match other.solo.closed_floor() {
                Floor::Unneeded => {
                    slot.no_peer_floor(other.uid);
                    continue;
                }
                Floor::Recorded(floor) if slot.covers_floor_of(other.uid, floor) => continue,
                Floor::Recorded(_) | Floor::NotYet => {}
            }
            other.close_solo();
            let event = solo_cover(other, &self.uses, false)?.and_then(|cover| cover.event);
            if let Some(event) = event.filter(|ev| !ev.context_replaced()) {
                candidates.push(event);
            }
        }
        Ok(())
    }
}

/// What a marked launch on `slot` must follow of its device's solo launches, before it takes
/// any mark: nothing once the stream is past solo mode (one load in steady state), else see
/// [`solo_floor`]; the event (if any) joins `candidates`. Returns whether the stream is past
/// solo mode once its fence has followed it.
#[inline(always)]
pub(super) fn follow_solo_launches(
    shared: &DeviceShared,
    slot: &StreamSlot,
    uses: &[Use],
    candidates: &mut SmallVec<[EventRef; 8]>,
) -> Result<bool> {
    if !shared.solo.needs_floor(slot.id.index, slot.floor_seen()) {
        return Ok(false);
    }
    let cover = solo_floor(shared, slot, uses)?;
    candidates.extend(cover.event);
    Ok(cover.past_solo)
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
fn solo_floor(shared: &DeviceShared, slot: &StreamSlot, uses: &[Use]) -> Result<Cover> {
    let checks = slot.count_solo_check();
    shared.close_solo();
    if shared.fence_mutation == Some(crate::backend::sim::FenceMutation::NoSoloFloor) {
        return Ok(Cover { event: None, past_solo: true });
    }
    let on_solo_stream = shared.solo.closed_on() == Some(slot.id.index);
    let cover = match solo_cover(shared, uses, on_solo_stream)? {
        Some(cover) => cover,
        None => past_floor(shared, slot, checks).unwrap_or(Cover { event: None, past_solo: false }),
    };
    let event = cover.event.filter(|f| f.pos().stream != slot.index() && f.epoch() == shared.epoch());
    Ok(Cover { event, past_solo: cover.past_solo })
}

/// For a launch on `slot` that used no memory a solo launch used, once solo mode has closed:
/// whether the stream may stop looking at solo mode by taking the floor as a candidate now
/// (`Some`, with the floor if there is one to follow), so that any later use of that memory
/// there follows it. Only when that costs nothing on the GPU: the stream's clock covers the
/// floor (no wait), or the GPU is known to have passed it (a wait on finished work), or there
/// is none to follow (none recorded, or one of a context the device has left). Otherwise the
/// stream goes on looking, and asks the driver whether the floor is done on every 64th look
/// only (`checks` counts them), since that costs a query.
fn past_floor(shared: &DeviceShared, slot: &StreamSlot, checks: u64) -> Option<Cover> {
    let floor = match shared.solo.closed_floor() {
        Floor::NotYet => return None,
        Floor::Recorded(floor) if floor.epoch() == shared.epoch() => floor,
        Floor::Unneeded | Floor::Recorded(_) => return Some(Cover { event: None, past_solo: true }),
    };
    let adopt = floor.known_done() || slot.covers(floor) || (checks % 64 == 63 && floor.is_done().unwrap_or(false));
    adopt.then(|| Cover { event: Some(floor.clone()), past_solo: true })
}

/// For a launch elsewhere with `uses`, once `device`'s solo mode is closing or closed: `None`
/// when no solo launch of `device` can have used one of its buffers of that device, else what
/// covers their solo uses, waited for until no solo launch in flight conflicts (see
/// `DeviceShared::solo_wait`); on the solo stream itself (`on_solo_stream`), only the wait.
fn solo_cover(device: &DeviceShared, uses: &[Use], on_solo_stream: bool) -> Result<Option<Cover>> {
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
