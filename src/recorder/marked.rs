//! The marked strategy's preflight: every buffer takes a pending mark (a conflicting preflight
//! elsewhere waits for this launch's commit), the stream waits for the uses the launch must
//! follow, and the commit publishes the launch's event to the buffers.
//!
//! In three phases: before the marks (stale uses, declared lane jobs, solo launches and peer
//! devices the launch must follow), the marks themselves (in one global order), and the fence
//! with its check against the device's context.

use super::admission::{Admission, Survey};
use super::{failure, release, LaunchRecorder, Reserved};
use crate::device::{Device, DeviceShared};
use crate::error::Result;
use crate::track::order::Stamp;
use crate::track::{EventRef, HolderId, MarkRequest, StreamSlot};
use smallvec::SmallVec;

/// The events the stream must wait for, gathered before and while the marks are taken.
type Candidates = SmallVec<[EventRef; 8]>;

/// What the phase before the marks leaves for the others (besides the candidates it gathered).
struct BeforeMarks {
    /// The lane job making the launch, for the check of submit order (none outside jobs).
    stamp: Stamp,
    /// The fence makes the stream follow its device's solo floor: it is past solo mode then.
    past_solo: bool,
}

impl LaunchRecorder {
    /// The marked preflight (see [`admit`](Self::admit)).
    pub(super) fn admit_marked(
        &mut self,
        device: &Device,
        slot: &StreamSlot,
        survey: Survey,
        rebuilt_from: Option<u64>,
    ) -> Result<Reserved> {
        let shared = &device.shared;
        // Filled in place by both phases: moving it between them costs more than its few
        // (usually no) events.
        let mut candidates = Candidates::new();
        let before = self.before_marks(device, slot, survey, &mut candidates)?;
        let holder = HolderId::current();
        self.take_marks(shared, slot, holder, before.stamp, &mut candidates)?;
        #[cfg(test)]
        crate::device::rebuild_hooks::at(shared.uid, crate::device::rebuild_hooks::Stage::MarksTaken);
        // The stream and its context epoch come back read together with the fencing: if the
        // device rebuilt its context since the uses were checked, their memory belongs to the
        // old one and must not reach a stream of the new one.
        let (raw, epoch) = match slot.fence(&candidates) {
            Ok(fenced) => fenced,
            Err(e) => return self.fence_refused(device, holder, e, rebuilt_from),
        };
        if before.past_solo {
            slot.saw_floor();
        }
        // The device's epoch is read again: a rebuild that began while the marks were taken has
        // moved the device on, and maybe not this stream yet.
        let current = epoch == survey.device_epoch
            && epoch == shared.epoch()
            && (survey.of_device_context || super::context::of_context(shared, &self.uses, epoch));
        if !current {
            if let Some(refused) = self.context_refused(device, holder, epoch, rebuilt_from) {
                return refused;
            }
        }
        Ok(Reserved::new(self.stream, raw, epoch, Admission::Marked { holder, stamp: before.stamp }))
    }

    /// The phase before any mark is taken: stale uses go (an error, or dropped when
    /// permissive), so that only live ones are checked and waited for; the launch follows the
    /// solo launches of its device and of its peers; declared lane jobs submitted earlier are
    /// waited out.
    #[inline(always)]
    fn before_marks(
        &mut self,
        device: &Device,
        slot: &StreamSlot,
        survey: Survey,
        candidates: &mut Candidates,
    ) -> Result<BeforeMarks> {
        let shared = &device.shared;
        if !survey.nothing_before_marks {
            self.drop_stale()?;
        }
        // Before any mark is taken: closing a device's solo mode waits for launches that hold
        // none (see `track::solo`).
        let past_solo = super::solo::follow_solo_launches(shared, slot, &self.uses, candidates)?;
        if self.peers && !survey.peers_settled {
            self.check_peer_backends(device)?;
            self.peer_floors(device, slot, candidates)?;
        }
        let mut stamp = Stamp::NONE;
        if !survey.nothing_before_marks {
            stamp = self.await_jobs(shared)?;
        }
        Ok(BeforeMarks { stamp, past_solo })
    }

    /// Takes a pending mark on every buffer, gathering the events the stream must wait for;
    /// then the checks a mark makes visible (a failed input, an inversion of submit order). On
    /// error no mark stays taken.
    #[inline(always)]
    fn take_marks(
        &self,
        shared: &DeviceShared,
        slot: &StreamSlot,
        holder: HolderId,
        stamp: Stamp,
        candidates: &mut Candidates,
    ) -> Result<()> {
        // Reserving in one global order (buffer ids are process-wide, so this holds across
        // devices too) means two preflights never hold-and-wait in a cycle: `record` keeps the
        // uses sorted by id.
        debug_assert!(self.uses.windows(2).all(|w| w[0].id < w[1].id));
        let mark = MarkRequest { holder, timeout: shared.config.preflight_timeout, on: slot.index(), stamp };
        let mut inverted = None;
        let mut failed = false;
        for (n, u) in self.uses.iter().enumerate() {
            let t = u.track();
            if let Err(e) = t.acquire_stamped(u.access, mark, candidates, &mut inverted) {
                release(&self.uses[..n], holder);
                return Err(e);
            }
            // With the mark taken, a failure its writer set before publishing is visible.
            failed |= t.is_failed();
        }
        if failed {
            if let Some(e) = failure::failed_input(&self.uses) {
                release(&self.uses, holder);
                return Err(e);
            }
        }
        if let Some(inv) = inverted {
            if let Err(e) = crate::device::report_submit_order(shared, *inv, super::op_origin_name(&self.label)) {
                release(&self.uses, holder);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Beyond the common case, once stale uses are gone: the declared lane jobs submitted
    /// earlier are waited out and a declared job's undeclared uses are refused. Returns the
    /// lane job's stamp for the check of submit order.
    #[cold]
    #[inline(never)]
    fn await_jobs(&mut self, shared: &DeviceShared) -> Result<Stamp> {
        let timeout = shared.config.preflight_timeout;
        let seq = crate::track::reservation::before_use(
            self.uses.iter().map(|u| (u.track(), u.access)),
            self.strict,
            timeout,
        )?;
        let check = shared.config.submit_order != crate::track::SubmitOrderCheck::Off;
        Ok(if check && seq != 0 { Stamp::new(seq, self.stream) } else { Stamp::NONE })
    }

    /// Strict: the first stale use's error. Permissive: drops the stale uses.
    #[cold]
    #[inline(never)]
    fn drop_stale(&mut self) -> Result<()> {
        let mut i = 0;
        while i < self.uses.len() {
            match self.uses[i].track().check_fresh() {
                Ok(()) => i += 1,
                Err(e) if self.strict => return Err(e),
                Err(e) => {
                    log::debug!("cusched: permissive recorder skips a use: {e}");
                    self.uses.remove(i);
                }
            }
        }
        Ok(())
    }
}
