//! The buffer's use state and its pending marks: acquire (a preflight's mark and the events
//! the use must follow), publish (a commit, which folds the use in and clears the mark), and
//! the host's uses.

use super::fold::fold;
use super::{BufferOwner, BufferTrack, HolderId};
use crate::backend::sim::FenceMutation;
use crate::error::{Error, Result};
use crate::sync::Guard;
use crate::track::order::{Inversion, Stamp};
use crate::track::wait::{ConflictWait, TimedOut};
use crate::track::{Access, EventRef};
use smallvec::SmallVec;
use std::time::Duration;

/// What a launch asks of each buffer it takes a pending mark on: the same for all of them.
#[derive(Clone, Copy)]
pub(crate) struct MarkRequest {
    /// Who takes the mark (the thread, or its lane job).
    pub holder: HolderId,
    /// How long to wait for a conflicting mark (`DeviceConfig::preflight_timeout`).
    pub timeout: Duration,
    /// The process-wide index of the launch's stream: its own events need no wait.
    pub on: u32,
    /// The lane job making the launch, for the check of submit order.
    pub stamp: Stamp,
}

/// A buffer's uses: the committed ones (as events) and the pending marks.
#[derive(Default)]
pub(super) struct State {
    pub(super) last_write: Option<EventRef>,
    /// Newest read per stream since `last_write`.
    pub(super) reads: SmallVec<[EventRef; 2]>,
    pub(super) pending_writer: Option<HolderId>,
    pub(super) pending_readers: SmallVec<[HolderId; 2]>,
    /// Preflights blocked on a pending mark; `publish` notifies only when non-zero.
    pub(super) waiters: u32,
    /// The next committed use is the allocation's write (device buffers are allocated through
    /// a recorder before anyone else can see them); only [`FenceMutation::NoAllocationWrite`]
    /// reads it.
    pub(super) allocation_next: bool,
    /// The lane jobs of the last write and of the youngest read since it, for the check of
    /// submit order (`order`).
    pub(super) stamps: crate::track::order::Stamps,
}

impl<D: BufferOwner> BufferTrack<D> {
    /// Waits until no conflicting recorder is pending, marks `holder` pending with `access`, and
    /// appends the events this use must follow to `out`, leaving out those of stream `on` (the
    /// process-wide index of the stream the use runs on): stream order covers them, and not
    /// cloning them saves two atomic operations each on the op path. `me` is the lane job
    /// making the use: one that would invert submit order against a committed use (see
    /// `order`) is left in `found`, the mark taken all the same, for the caller to report once
    /// no lock is held.
    ///
    /// Inlined into the preflight's loop over its uses: a call per buffer costs more there
    /// than the mark itself.
    #[inline(always)]
    pub(crate) fn acquire_stamped(
        &self,
        access: Access,
        mark: MarkRequest,
        out: &mut SmallVec<[EventRef; 8]>,
        found: &mut Option<Box<Inversion>>,
    ) -> Result<()> {
        self.acquire_as(access, mark, out, self.device.fence_mutation(), found)
    }

    /// `acquire_stamped`, breaking `mutation`'s rule when one is given (stream uses only: the host's
    /// own waits are not what the checker observes).
    ///
    /// Kept small on purpose: waiting for a conflicting holder and the checker's mutations are
    /// out of line, so the common case (no conflict, no mutation) is one lock, a few loads and
    /// pushes, and one unlock.
    #[inline(always)]
    fn acquire_as(
        &self,
        access: Access,
        mark: MarkRequest,
        out: &mut SmallVec<[EventRef; 8]>,
        mutation: Option<FenceMutation>,
        found: &mut Option<Box<Inversion>>,
    ) -> Result<()> {
        let MarkRequest { holder, timeout, on, stamp: me } = mark;
        let mut st = crate::sync::lock(&self.state);
        if st.pending_writer.is_some() || (access.writes() && !st.pending_readers.is_empty()) {
            st = self.wait_unpending(st, access, holder, timeout)?;
        }
        // Outside lane jobs one branch; in a job, a compare or two.
        if me.seq != 0 {
            if let Some((theirs, wrote)) = st.stamps.check(access, me) {
                self.inverted(access, me, theirs, wrote, found);
            }
        }
        if mutation.is_some() {
            self.mark_mutated(&mut st, access, holder, on, out, mutation);
            return Ok(());
        }
        // Plain pushes, not `extend`: its reserve-then-fill costs more than the few (usually
        // no) events it adds. Events of stream `on` are ordered by stream order already.
        if access.writes() {
            st.pending_writer = Some(holder);
            for ev in &st.reads {
                if ev.pos().stream != on {
                    out.push(ev.clone());
                }
            }
        } else {
            st.pending_readers.push(holder);
        }
        if let Some(ev) = &st.last_write {
            if ev.pos().stream != on {
                out.push(ev.clone());
            }
        }
        Ok(())
    }

    /// Notes an inversion of submit order (the first of the launch's).
    #[cold]
    #[inline(never)]
    fn inverted(&self, access: Access, mine: Stamp, theirs: Stamp, wrote: bool, found: &mut Option<Box<Inversion>>) {
        if found.is_none() {
            *found = Some(Box::new(Inversion {
                buffer: self.id,
                label: self.label(),
                name: self.name(),
                mine,
                access,
                theirs,
                theirs_wrote: wrote,
            }));
        }
    }

    /// Waits, bounded by `timeout`, until no recorder holds a mark conflicting with `access`.
    #[cold]
    #[inline(never)]
    fn wait_unpending<'a>(
        &self,
        mut st: Guard<'a, State>,
        access: Access,
        holder: HolderId,
        timeout: Duration,
    ) -> Result<Guard<'a, State>> {
        let mut wait = None;
        loop {
            let conflict = st.pending_writer.is_some() || (access.writes() && !st.pending_readers.is_empty());
            if !conflict {
                return Ok(st);
            }
            if st.pending_writer == Some(holder) || st.pending_readers.contains(&holder) {
                return Err(Error::WouldDeadlock {
                    what: format!(
                        "{} is held by an uncommitted launch on this same thread; commit that recorder before preflighting another that uses it",
                        self.name()
                    ),
                });
            }
            let wait = wait.get_or_insert_with(|| ConflictWait::start(timeout));
            st = wait
                .block(&self.cv, st, |st| &mut st.waiters)
                .map_err(|TimedOut| Error::BufferBusy { buffer: self.name(), waited: timeout })?;
        }
    }

    /// The pending mark and candidates under one of the checker's mutations.
    #[cold]
    #[inline(never)]
    fn mark_mutated(
        &self,
        st: &mut State,
        access: Access,
        holder: HolderId,
        on: u32,
        out: &mut SmallVec<[EventRef; 8]>,
        mutation: Option<FenceMutation>,
    ) {
        let mut push_elsewhere = |ev: &EventRef| {
            if ev.pos().stream != on {
                out.push(ev.clone());
            }
        };
        if access.writes() {
            st.pending_writer = Some(holder);
            if mutation == Some(FenceMutation::LatestReaderOnly) {
                // `fold` keeps the reads in commit order under this mutation.
                st.reads.last().into_iter().for_each(&mut push_elsewhere);
            } else {
                st.reads.iter().for_each(&mut push_elsewhere);
            }
        } else {
            st.pending_readers.push(holder);
        }
        if access.writes() || mutation != Some(FenceMutation::NoCrossStreamRaw) {
            // (A last write on the reader's own stream is ordered by stream order anyway.)
            st.last_write.iter().for_each(&mut push_elsewhere);
        }
    }

    /// Clears `holder`'s pending mark; with `event`, first folds the committed use into the
    /// state.
    pub(crate) fn publish(&self, access: Access, holder: HolderId, event: Option<&EventRef>) {
        self.publish_stamped(access, holder, event, Stamp::NONE)
    }

    /// [`publish`](Self::publish) for a use by lane job `me`, which the buffer remembers for
    /// the check of submit order.
    pub(crate) fn publish_stamped(&self, access: Access, holder: HolderId, event: Option<&EventRef>, me: Stamp) {
        let mut st = crate::sync::lock(&self.state);
        if event.is_some() {
            st.stamps.fold(access, me);
        }
        if access.writes() {
            debug_assert_eq!(st.pending_writer, Some(holder));
            st.pending_writer = None;
        } else if let Some(i) = st.pending_readers.iter().position(|h| *h == holder) {
            st.pending_readers.swap_remove(i);
        }
        if let Some(ev) = event {
            let mutation = self.device.fence_mutation();
            if mutation.is_none() {
                st.allocation_next = false;
                fold(&mut st, access, ev, false);
            } else {
                let allocation = std::mem::take(&mut st.allocation_next);
                if !(allocation && mutation == Some(FenceMutation::NoAllocationWrite)) {
                    fold(&mut st, access, ev, mutation == Some(FenceMutation::LatestReaderOnly));
                }
            }
        }
        if st.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Events a host access must wait for: the last write, plus every read if the host writes.
    /// Waits out conflicting pending recorders first, like a preflight.
    pub(crate) fn host_dependencies(&self, access: Access, timeout: Duration) -> Result<SmallVec<[EventRef; 8]>> {
        crate::track::reservation::before_host_use(self, access, timeout)?;
        let holder = HolderId::current();
        let mut out = SmallVec::new();
        // The host is no stream: every use counts.
        let mark = MarkRequest { holder, timeout, on: u32::MAX, stamp: Stamp::NONE };
        self.acquire_as(access, mark, &mut out, None, &mut None)?;
        self.publish(access, holder, None);
        Ok(out)
    }

    /// Every use still outstanding, for a free: last write and all reads. Needs no pending
    /// check: a recorder holding the buffer also holds a reference, so it cannot be freed then.
    pub(crate) fn all_uses(&self) -> SmallVec<[EventRef; 8]> {
        if self.device.fence_mutation() == Some(FenceMutation::NoFreeFence) {
            return SmallVec::new();
        }
        let st = crate::sync::lock(&self.state);
        st.last_write.iter().chain(st.reads.iter()).cloned().collect()
    }
}
