//! The solo stream's side of solo mode (see `track::solo`): solo launches counted and listed in
//! flight under the stream's lock, the close, and the events that cover their uses.

use super::{State, StreamSlot};
use crate::backend::RawStream;
use crate::error::{Error, Result};
use crate::track::event::Record;
use crate::track::solo::Solo;
use crate::track::{Access, EventPool, EventRef};
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
        st.solo_in_flight += 1;
        st.solo_launches += 1;
        let ticket = st.solo_launches;
        for (id, access) in uses {
            st.solo_uses.push((ticket, id, access));
            st.solo_max_id = st.solo_max_id.max(id);
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
    /// [`commit_in`](Self::commit_in) does (`bound` and `lazy` as there). `None` once the
    /// stream has left context `required`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_solo(
        &self,
        solo: &Solo,
        pool: &EventPool,
        required: u64,
        bound: bool,
        lazy: bool,
        ticket: u64,
    ) -> Option<Result<EventRef>> {
        let mut st = crate::sync::lock(&self.state);
        let current = required == st.epoch && pool.epoch() == st.epoch;
        // The launch's position first: a floor recorded by this commit then comes after it.
        let position = current.then(|| {
            let how = if lazy { Record::Lazily } else { Record::Now { bound } };
            self.position_locked(&mut st, pool, how)
        });
        self.solo_done(&mut st, solo, pool, ticket);
        position
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
        st.solo_in_flight = st.solo_in_flight.saturating_sub(1);
        if st.solo_closing {
            return self.leave_closing(st, solo, pool, ticket);
        }
        if st.solo_in_flight == 0 {
            st.solo_uses.clear();
        } else {
            st.solo_uses.retain(|(t, _, _)| *t != ticket);
        }
    }

    /// A solo launch that was in flight at the close commits: the last one out records the
    /// floor; any other notes its buffers as late and records an event after its work, which
    /// a use elsewhere of those buffers waits on instead of the close's.
    #[cold]
    #[inline(never)]
    fn leave_closing(&self, st: &mut State, solo: &Solo, pool: &EventPool, ticket: u64) {
        for &(t, id, _) in &st.solo_uses {
            if t == ticket && !st.solo_late.contains(&id) {
                st.solo_late.push(id);
            }
        }
        st.solo_uses.retain(|(t, _, _)| *t != ticket);
        if st.solo_in_flight == 0 {
            return self.floor_or_log(st, solo, pool);
        }
        st.solo_late_cover = None;
        if st.epoch == pool.epoch() {
            match self.position_locked(st, pool, Record::Now { bound: false }) {
                Ok(ev) => st.solo_late_cover = Some(ev),
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
        solo.begin_closing(self.id.index, st.solo_max_id + 1);
        st.solo_closing = true;
        if st.solo_in_flight == 0 {
            return self.floor_or_log(&mut st, solo, pool);
        }
        if st.epoch == pool.epoch() {
            match self.position_locked(&mut st, pool, Record::Now { bound: false }) {
                Ok(ev) => st.solo_cover = Some(ev),
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

    /// For `uses` on another stream while solo mode closes on this stream: `None` while a solo
    /// launch in flight uses one of those buffers in a conflicting way (`held`: this thread
    /// holds one such launch, of device `device`), else the event that covers every solo use
    /// of its buffers. That is the floor, recorded now if no solo launch is in flight any more
    /// (with `true`), or else (`false`) the event of the close, or the event after the last
    /// solo launch to commit since, when one of those used a buffer of `uses`: never an event
    /// after work that solo launches did not enqueue before. No event (`None`) when this
    /// stream is behind its device's rebuild, as for the floor. A failed record comes with
    /// the stream's epoch.
    #[allow(clippy::type_complexity)]
    pub(crate) fn solo_cover(
        &self,
        solo: &Solo,
        pool: &EventPool,
        uses: &[(u64, Access)],
        device: u32,
        held: &mut bool,
    ) -> Option<std::result::Result<(Option<EventRef>, bool), (Error, u64)>> {
        let mut st = crate::sync::lock(&self.state);
        let epoch = st.epoch;
        if st.solo_in_flight == 0 {
            let floor = self.floor_locked(&mut st, solo, pool).map_err(|e| (e, epoch));
            return Some(floor.map(|()| (solo.closed_floor().flatten().cloned(), true)));
        }
        let mut conflicts = st.solo_uses.iter().filter(|&&(_, id, theirs)| conflicts_with(uses, id, theirs)).peekable();
        if conflicts.peek().is_some() {
            *held = conflicts.any(|&(ticket, _, _)| crate::track::solo::held_here(device, ticket));
            return None;
        }
        if epoch != pool.epoch() {
            return Some(Ok((None, false)));
        }
        // Every solo use of these buffers is before the close or by a launch noted late since.
        let late = uses.iter().any(|(id, _)| st.solo_late.contains(id));
        let kept = if late { &st.solo_late_cover } else { &st.solo_cover };
        if let Some(ev) = kept.as_ref().filter(|ev| ev.epoch() == epoch) {
            return Some(Ok((Some(ev.clone()), false)));
        }
        // Its record failed: one recorded now covers every launch no longer in flight.
        let covering = match self.position_locked(&mut st, pool, Record::Now { bound: false }) {
            Ok(ev) => ev,
            Err(e) => return Some(Err((e, epoch))),
        };
        let kept = if late { &mut st.solo_late_cover } else { &mut st.solo_cover };
        *kept = Some(covering.clone());
        Some(Ok((Some(covering), false)))
    }

    /// For a launch with `uses` that takes marks on this, the solo stream, while solo mode
    /// closes: `None` while a solo launch in flight that another thread holds uses one of
    /// those buffers in a conflicting way (once solo mode has closed, conflicting launches
    /// follow preflight order, as with marks), else whether no solo launch is in flight any
    /// more (the stream need not look again). Stream order orders the rest, and a
    /// conflicting solo launch of this thread's (device `device`) too: its enqueue, on this
    /// stream, is the thread's own.
    pub(crate) fn solo_settled(&self, uses: &[(u64, Access)], device: u32) -> Option<bool> {
        let st = crate::sync::lock(&self.state);
        if st.solo_in_flight == 0 {
            return Some(true);
        }
        let waits = st.solo_uses.iter().any(|&(ticket, id, theirs)| {
            conflicts_with(uses, id, theirs) && !crate::track::solo::held_here(device, ticket)
        });
        (!waits).then_some(false)
    }

    /// The floor, under the stream's lock with no solo launch in flight. Left out when the
    /// stream is behind its device's rebuild (the pool has moved on): every solo use was then
    /// of the old context, whose buffers are all stale, and an event of the new one cannot be
    /// recorded on this stream.
    fn floor_locked(&self, st: &mut State, solo: &Solo, pool: &EventPool) -> Result<()> {
        if !st.solo_closing {
            return Ok(());
        }
        let floor = if st.epoch == pool.epoch() {
            Some(self.position_locked(st, pool, Record::Now { bound: false })?)
        } else {
            None
        };
        st.solo_closing = false;
        st.solo_uses.clear();
        st.solo_cover = None;
        st.solo_late = Vec::new();
        st.solo_late_cover = None;
        // Before the state says closed: a launch here that sees it never needs the floor.
        self.floor_seen.store(true, Ordering::Relaxed);
        solo.finish(floor);
        Ok(())
    }

    /// Whether this stream's clock covers `ev` (its work already follows it).
    pub(crate) fn covers(&self, ev: &EventRef) -> bool {
        crate::sync::lock(&self.state).clock.covers(ev.pos())
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
