//! The solo stream's side of solo mode (see `track::solo`): solo launches counted and listed in
//! flight under the stream's lock, the close, and the events that cover their uses.

use super::{CommitAt, State, StreamSlot};
use crate::backend::RawStream;
use crate::error::Result;
use crate::track::event::Record;
use crate::track::solo::{Cover, Look, Solo};
use crate::track::{Access, EventPool, EventRef};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The solo strategy's state on one stream, under the stream's lock: the solo launches in
/// flight there, and, while solo mode closes on it, the events that cover their uses.
#[derive(Default)]
pub(super) struct SoloStream {
    /// Solo launches preflighted on this stream and not yet committed.
    in_flight: u32,
    /// Solo mode is closing on this stream: the last solo launch out records the floor.
    closing: bool,
    /// The uses of the solo launches in flight: (launch number, buffer id, access). Kept
    /// with its capacity, so steady state allocates nothing.
    uses: Vec<(u64, u64, Access)>,
    /// Solo launches started so far (the last launch number).
    launches: u64,
    /// The highest buffer id a solo launch has used.
    max_id: u64,
    /// While solo mode closes on this stream: an event after the work of every solo launch
    /// that was not in flight at the close (recorded at the close, or at the first use that
    /// needs it if that record failed).
    cover: Option<EventRef>,
    /// While solo mode closes: the buffers used by solo launches that committed since the
    /// close began (they were in flight then).
    late: Vec<u64>,
    /// An event after the work of every such launch (recorded at each one's commit, or at the
    /// first use that needs it if that record failed).
    late_cover: Option<EventRef>,
}

impl StreamSlot {
    /// Starts a solo launch with `uses` (see `solo`) if the device still admits them on this
    /// stream: counts it in flight and lists its uses, and returns the stream and its context
    /// epoch, read together, and the launch's number.
    #[inline(always)]
    pub(crate) fn enter_solo(
        &self,
        solo: &Solo,
        uses: impl Iterator<Item = (u64, Access)>,
    ) -> Option<(Arc<RawStream>, u64, u64)> {
        let mut st = crate::sync::lock(&self.state);
        if !solo.admits(self.id.index) {
            return None;
        }
        st.solo.in_flight += 1;
        st.solo.launches += 1;
        let ticket = st.solo.launches;
        for (id, access) in uses {
            st.solo.uses.push((ticket, id, access));
            st.solo.max_id = st.solo.max_id.max(id);
        }
        Some((st.raw.clone(), st.epoch, ticket))
    }

    /// Takes back solo launch `ticket` that [`enter_solo`](Self::enter_solo) counted and that
    /// will not commit (its preflight went the marked way after all).
    pub(crate) fn leave_solo(&self, solo: &Solo, pool: &EventPool, ticket: u64) {
        let mut st = crate::sync::lock(&self.state);
        self.solo_done(&mut st, solo, pool, ticket);
    }

    /// A solo launch's commit: takes launch `ticket` out of flight and commits a position as
    /// [`commit_in`](Self::commit_in) does. `None` once the stream has left context `at.epoch`.
    #[inline(always)]
    pub(crate) fn commit_solo(
        &self,
        solo: &Solo,
        pool: &EventPool,
        at: CommitAt,
        ticket: u64,
    ) -> Option<Result<EventRef>> {
        let mut st = crate::sync::lock(&self.state);
        let in_context = at.epoch == st.epoch && pool.epoch() == st.epoch;
        // The launch's position first: a floor recorded by this commit then comes after it.
        let position = in_context.then(|| self.position_locked(&mut st, pool, at.how));
        self.solo_done(&mut st, solo, pool, ticket);
        position
    }

    /// How a commit on this stream records its event, `bound` as in [`Record::Now`]: lazily
    /// while solo mode is open on the stream (no other stream has waited on anything yet). A
    /// close racing this read records its floor after the commit, and a lazy event is
    /// recorded whenever a stream needs it: either way nothing waits for less than it must.
    #[inline(always)]
    pub(crate) fn commit_record(&self, solo: &Solo, bound: bool) -> Record {
        if !self.floor_seen() && solo.admits(self.id.index) {
            Record::Lazily
        } else {
            Record::Now { bound }
        }
    }

    /// A solo launch's commit without a position: takes launch `ticket` out of flight and
    /// marks nothing
    /// (stream order orders its work, and a later position covers it). False once the stream
    /// has left context `required`.
    #[inline(always)]
    pub(crate) fn end_solo(&self, solo: &Solo, pool: &EventPool, required: u64, ticket: u64) -> bool {
        let mut st = crate::sync::lock(&self.state);
        self.solo_done(&mut st, solo, pool, ticket);
        required == st.epoch && pool.epoch() == st.epoch
    }

    /// Takes solo launch `ticket` out of flight, with its uses; while solo mode closes, see
    /// [`leave_closing`](Self::leave_closing).
    #[inline(always)]
    fn solo_done(&self, st: &mut State, solo: &Solo, pool: &EventPool, ticket: u64) {
        st.solo.in_flight = st.solo.in_flight.saturating_sub(1);
        if st.solo.closing {
            return self.leave_closing(st, solo, pool, ticket);
        }
        if st.solo.in_flight == 0 {
            st.solo.uses.clear();
        } else {
            st.solo.uses.retain(|(t, _, _)| *t != ticket);
        }
    }

    /// A solo launch that was in flight at the close commits: the last one out records the
    /// floor; any other notes its buffers as late and records an event after its work, which
    /// a use elsewhere of those buffers waits on instead of the close's.
    #[cold]
    #[inline(never)]
    fn leave_closing(&self, st: &mut State, solo: &Solo, pool: &EventPool, ticket: u64) {
        for &(t, id, _) in &st.solo.uses {
            if t == ticket && !st.solo.late.contains(&id) {
                st.solo.late.push(id);
            }
        }
        st.solo.uses.retain(|(t, _, _)| *t != ticket);
        if st.solo.in_flight == 0 {
            return self.floor_or_log(st, solo, pool);
        }
        st.solo.late_cover = None;
        if st.epoch == pool.epoch() {
            match self.position_locked(st, pool, Record::Now { bound: false }) {
                Ok(ev) => st.solo.late_cover = Some(ev),
                Err(e) => log::warn!(
                    "cusched: recording an event after a solo launch on {} failed ({e}); the first use elsewhere that needs one records it again",
                    self.id
                ),
            }
        }
    }

    /// Closes its device's solo mode on this, the solo stream (see `solo`): under the lock
    /// where solo launches count themselves, so none starts after; records the floor now if
    /// none is in flight, else an event after the work of every solo launch that is not,
    /// which uses elsewhere of memory the launches in flight do not use wait on meanwhile.
    pub(crate) fn close_solo(&self, solo: &Solo, pool: &EventPool) {
        let mut st = crate::sync::lock(&self.state);
        if !solo.admits(self.id.index) {
            // Another close got here first.
            return;
        }
        solo.begin_closing(self.id.index, st.solo.max_id + 1);
        st.solo.closing = true;
        if st.solo.in_flight == 0 {
            return self.floor_or_log(&mut st, solo, pool);
        }
        if st.epoch == pool.epoch() {
            match self.position_locked(&mut st, pool, Record::Now { bound: false }) {
                Ok(ev) => st.solo.cover = Some(ev),
                Err(e) => log::warn!(
                    "cusched: recording the close of solo mode on {} failed ({e}); the first use elsewhere that needs it records it again",
                    self.id
                ),
            }
        }
    }

    /// [`floor_locked`](Self::floor_locked) where nobody waits for the outcome: a failure is
    /// logged, and the first launch that needs the floor records it again.
    #[cold]
    #[inline(never)]
    fn floor_or_log(&self, st: &mut State, solo: &Solo, pool: &EventPool) {
        if let Err(e) = self.floor_locked(st, solo, pool) {
            log::warn!(
                "cusched: recording the solo floor on {} failed ({e}); the first launch that needs it tries again",
                self.id
            );
        }
    }

    /// For `uses` on another stream while solo mode closes on this stream: a conflict while a
    /// solo launch in flight uses one of those buffers in a conflicting way (`held_here`: this
    /// thread holds one such launch, of device `device`), else the event that covers every solo
    /// use of its buffers. That is the floor, recorded now if no solo launch is in flight any
    /// more (past solo mode), or else the event of the close, or the event after the last solo
    /// launch to commit since, when one of those used a buffer of `uses`: never an event after
    /// work that solo launches did not enqueue before. No event when this stream is behind its
    /// device's rebuild, as for the floor. A failed record comes with the stream's epoch.
    pub(crate) fn solo_cover(&self, solo: &Solo, pool: &EventPool, uses: &[(u64, Access)], device: u32) -> Look {
        let mut st = crate::sync::lock(&self.state);
        let epoch = st.epoch;
        if st.solo.in_flight == 0 {
            if let Err(e) = self.floor_locked(&mut st, solo, pool) {
                return Look::Failed(e, epoch);
            }
            return Look::Covered(Cover { event: solo.closed_floor().event().cloned(), past_solo: true });
        }
        let mut conflicts = st.solo.uses.iter().filter(|&&(_, id, theirs)| conflicts_with(uses, id, theirs)).peekable();
        if conflicts.peek().is_some() {
            let held_here = conflicts.any(|&(ticket, _, _)| crate::track::solo::held_here(device, ticket));
            return Look::Conflict { held_here };
        }
        if epoch != pool.epoch() {
            return Look::Covered(Cover { event: None, past_solo: false });
        }
        // Every solo use of these buffers is before the close or by a launch noted late since.
        let late = uses.iter().any(|(id, _)| st.solo.late.contains(id));
        let kept = if late { &st.solo.late_cover } else { &st.solo.cover };
        if let Some(ev) = kept.as_ref().filter(|ev| ev.epoch() == epoch) {
            return Look::Covered(Cover { event: Some(ev.clone()), past_solo: false });
        }
        // Its record failed: one recorded now covers every launch no longer in flight.
        let covering = match self.position_locked(&mut st, pool, Record::Now { bound: false }) {
            Ok(ev) => ev,
            Err(e) => return Look::Failed(e, epoch),
        };
        let kept = if late { &mut st.solo.late_cover } else { &mut st.solo.cover };
        *kept = Some(covering.clone());
        Look::Covered(Cover { event: Some(covering), past_solo: false })
    }

    /// For a launch with `uses` that takes marks on this, the solo stream, while solo mode
    /// closes: a conflict while a solo launch in flight that another thread holds uses one of
    /// those buffers in a conflicting way (once solo mode has closed, conflicting launches
    /// follow preflight order, as with marks), else covered with no event, past solo mode once
    /// no solo launch is in flight any more (the stream need not look again). Stream order
    /// orders the rest, and a conflicting solo launch of this thread's (device `device`) too:
    /// its enqueue, on this stream, is the thread's own.
    pub(crate) fn solo_settled(&self, uses: &[(u64, Access)], device: u32) -> Look {
        let st = crate::sync::lock(&self.state);
        if st.solo.in_flight == 0 {
            return Look::Covered(Cover { event: None, past_solo: true });
        }
        let waits = st.solo.uses.iter().any(|&(ticket, id, theirs)| {
            conflicts_with(uses, id, theirs) && !crate::track::solo::held_here(device, ticket)
        });
        if waits {
            return Look::Conflict { held_here: false };
        }
        Look::Covered(Cover { event: None, past_solo: false })
    }

    /// The floor, under the stream's lock with no solo launch in flight. Left out when the
    /// stream is behind its device's rebuild (the pool has moved on): every solo use was then
    /// of the old context, whose buffers are all stale, and an event of the new one cannot be
    /// recorded on this stream.
    fn floor_locked(&self, st: &mut State, solo: &Solo, pool: &EventPool) -> Result<()> {
        if !st.solo.closing {
            return Ok(());
        }
        let floor = if st.epoch == pool.epoch() {
            Some(self.position_locked(st, pool, Record::Now { bound: false })?)
        } else {
            None
        };
        st.solo.closing = false;
        st.solo.uses.clear();
        st.solo.cover = None;
        st.solo.late = Vec::new();
        st.solo.late_cover = None;
        // Before the state says closed: a launch here that sees it never needs the floor.
        self.floor_seen.store(true, Ordering::Relaxed);
        solo.finish(floor);
        Ok(())
    }

    /// Whether this stream's clock covers `ev` (its work already follows it).
    pub(crate) fn covers(&self, ev: &EventRef) -> bool {
        crate::sync::lock(&self.state).clock.covers(ev.pos())
    }

    /// Whether this stream's clock is known to cover the solo floor of device `uid` (another
    /// device): one load per remembered device, no lock. A device's floor never changes once
    /// recorded and the clock only grows until a rebuild restarts it (which forgets them all),
    /// so what [`covers_floor_of`](Self::covers_floor_of) found stays true.
    #[inline(always)]
    pub(crate) fn covers_peer_floor(&self, uid: u32) -> bool {
        let key = uid.wrapping_add(1);
        key != 0 && self.peer_floors.iter().any(|f| f.load(Ordering::Relaxed) == key)
    }

    /// [`covers`](Self::covers) for `floor`, the solo floor of device `uid` (another device),
    /// remembering a yes for [`covers_peer_floor`](Self::covers_peer_floor). Under the lock, so
    /// that a rebuild restarting the clock cannot be followed by a stale yes.
    pub(crate) fn covers_floor_of(&self, uid: u32, floor: &EventRef) -> bool {
        let st = crate::sync::lock(&self.state);
        let covered = st.clock.covers(floor.pos());
        if covered {
            self.remember_peer_floor(uid);
        }
        drop(st);
        covered
    }

    /// Notes that device `uid` (another device) closed its solo mode with no floor: nothing of
    /// its solo mode is left to follow, whatever this stream's clock says.
    pub(crate) fn no_peer_floor(&self, uid: u32) {
        self.remember_peer_floor(uid);
    }

    /// Remembers device `uid` for [`covers_peer_floor`](Self::covers_peer_floor), in a free
    /// entry or else in place of one.
    fn remember_peer_floor(&self, uid: u32) {
        let key = uid.wrapping_add(1);
        if key == 0 {
            return;
        }
        let slots = &self.peer_floors;
        if slots.iter().any(|f| f.load(Ordering::Relaxed) == key) {
            return;
        }
        let free = slots.iter().position(|f| f.load(Ordering::Relaxed) == 0);
        slots[free.unwrap_or(uid as usize % slots.len())].store(key, Ordering::Relaxed);
    }

    /// Whether the stream has waited on its device's solo floor, or needs not (or is the solo
    /// stream and solo mode has closed).
    #[inline(always)]
    pub(crate) fn floor_seen(&self) -> bool {
        self.floor_seen.load(Ordering::Relaxed)
    }

    /// Counts a launch on the stream that looked at its device's solo mode.
    pub(crate) fn count_solo_check(&self) -> u64 {
        self.solo_checks.fetch_add(1, Ordering::Relaxed)
    }

    /// Notes that the stream's work now follows its device's solo floor.
    pub(crate) fn saw_floor(&self) {
        self.floor_seen.store(true, Ordering::Relaxed);
    }
}

/// Whether a use of buffer `id` with `theirs` and one of `uses` conflict (see `solo::conflict`).
fn conflicts_with(uses: &[(u64, Access)], id: u64, theirs: Access) -> bool {
    uses.iter().any(|&(mine, access)| mine == id && crate::track::solo::conflict(access, theirs))
}
