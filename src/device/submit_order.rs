//! Reporting an inversion of submit order that `track::order` found: as an error, a log line,
//! or on the simulator a hazard, as the device's [`SubmitOrderCheck`] says, naming the lanes
//! of both jobs.

use super::DeviceShared;
use crate::access::Access;
use crate::error::{Error, Result};
use crate::hazard::{Hazard, HazardKind, OpOrigin, SimOp};
use crate::track::order::{shown, Inversion, Stamp};
use crate::track::SubmitOrderCheck;
use std::sync::Arc;

fn stream_lane(device: &DeviceShared, s: Stamp) -> String {
    let lane = (s.device == device.uid).then(|| device.slot_by_index(s.stream).and_then(|slot| slot.lane())).flatten();
    match lane {
        Some(l) => format!("lane \"{l}\""),
        None => format!("stream {} of device #{}", s.stream, s.device),
    }
}

/// The intended order's name: the older use first.
fn intended(mine_writes: bool, theirs_wrote: bool) -> &'static str {
    match (mine_writes, theirs_wrote) {
        (true, false) => "read-after-write",
        (true, true) => "write-after-write",
        _ => "write-after-read",
    }
}

/// Reports `inv`, found by a launch on `device` (op `op`): `Err` when the launch must fail,
/// `Ok` when it goes on (logged, and on the simulator listed as a hazard).
#[cold]
#[inline(never)]
pub(crate) fn report(device: &DeviceShared, inv: Inversion, op: Option<Arc<str>>) -> Result<()> {
    let older_lane = stream_lane(device, inv.mine);
    let younger_lane = stream_lane(device, inv.theirs);
    let lane_of = |s: Stamp| {
        (s.device == device.uid).then(|| device.slot_by_index(s.stream).and_then(|slot| slot.lane())).flatten()
    };
    if let crate::backend::BackendCtx::Sim(sim) = device.backend() {
        let hazard = Hazard {
            buffer: inv.buffer.0,
            label: inv.label.clone(),
            kind: HazardKind::SubmitOrder,
            earlier: SimOp { stream: inv.theirs.stream, op: shown(inv.theirs.seq) },
            later: SimOp { stream: inv.mine.stream, op: shown(inv.mine.seq) },
            earlier_origin: OpOrigin { kernel: None, lane: lane_of(inv.theirs) },
            later_origin: OpOrigin { kernel: op, lane: lane_of(inv.mine) },
            access: if inv.theirs_wrote { inv.access } else { Access::Write },
        };
        log::error!("cusched: simulator: {hazard}");
        let fail = sim.note_hazard(hazard.clone()) && device.config.submit_order == SubmitOrderCheck::Error;
        return if fail { Err(Error::Hazard { hazard: Box::new(hazard), more: 0 }) } else { Ok(()) };
    }
    let err = Error::SubmitOrder {
        buffer: inv.name,
        order: intended(inv.access.writes(), inv.theirs_wrote),
        older_lane,
        older_submit: shown(inv.mine.seq),
        younger_lane,
        younger_submit: shown(inv.theirs.seq),
    };
    if device.config.submit_order == SubmitOrderCheck::Error {
        return Err(err);
    }
    log::error!("cusched: {err}");
    Ok(())
}
