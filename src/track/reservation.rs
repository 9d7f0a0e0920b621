//! Reservations: a lane job that declares its buffers at submit holds each one's next position
//! from submit until the job ends, so that uses made after the submit, on any lane or inline,
//! follow the job even when they commit first.
//!
//! # Tickets
//!
//! Every lane submit takes the next process-wide ticket, under its lane's submit lock and
//! together with the push onto the lane's queue, so that on every lane queue order is ticket
//! order. (Until the process's first declared job, undeclared submits skip the lock and carry
//! [`Ticket::FIRST`], which follows no reservation: see [`note_declared`].) A declared job adds an entry `(ticket, writes)` to each declared buffer's
//! reservations before it is queued, and removes them when it ends, runs or not (the entries
//! live in a guard that the queued job owns: a job that returns, fails, panics, or is dropped
//! unrun by a shutdown or a closed queue releases them).
//!
//! Before a preflight (or a host access) takes any pending mark, each of its buffers waits until
//! no *conflicting* reservation is left among those it must follow: a write conflicts with every
//! reservation, a read only with write reservations. Which reservations a use must follow
//! depends on where it runs:
//!
//! - in a lane job with ticket `t` (declared or not): the reservations with tickets below `t`,
//!   the jobs submitted before it. Its own reservation is not below `t`, so a declared job never
//!   waits for itself, and a job's uses made after it submitted a declared job (or while a job
//!   submitted after it runs) do not wait for that job: they are ordered by commit, since the
//!   later job may be queued behind it;
//! - anywhere else (inline, on the caller's thread): every reservation present, all of which
//!   were made by submits that happened before the use.
//!
//! # Why reservations cannot deadlock
//!
//! Call a job *unfinished* while it holds reservations or sits in a lane queue. A job carrying
//! [`Ticket::FIRST`] waits for no reservation, so once it runs it ends. Take the unfinished job
//! `J` with the smallest ticket among the others. Every job before `J` in its lane's queue has a
//! smaller ticket (queue order is ticket order among them) and so has finished, or carries
//! `FIRST` and ends once run: `J` runs.
//! `J` waits only for reservations with smaller tickets, and those belong to finished jobs,
//! which released them: `J` waits for no reservation. Waits on pending marks are bounded by the
//! commit of a launch already past its reservation waits (a preflight waits for all of its
//! reservations before taking its first mark, so no thread holds a mark while it waits for a
//! reservation). So `J` ends, and by induction on tickets every job does. Inline uses wait only
//! for jobs, never the reverse, so they add no cycle either.
//!
//! What the argument cannot cover is a job that blocks on something else that only a later job
//! provides (waiting inside a job for the completion of a job submitted after it, or holding an
//! uncommitted [`Preflighted`](crate::Preflighted) across another preflight): such a wait is
//! bounded by `DeviceConfig::preflight_timeout` and fails with [`Error::BufferReserved`].

mod job;

pub(crate) use job::{current_ticket, in_job, note_commit, note_submitted, JobScope};
use job::{in_any_job, JOB};

use super::buffer::BufferId;
use super::wait::{ConflictWait, TimedOut};
use super::Access;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A submit's place in the process-wide submit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket(u64);

impl Ticket {
    /// The next ticket. Callers that need queue order to equal ticket order take it under the
    /// lock that orders their queue.
    pub(crate) fn next() -> Ticket {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Ticket(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Ticket {
    /// Before every issued ticket: a job carrying it follows no reservation.
    pub(crate) const FIRST: Ticket = Ticket(0);
}

/// Whether any declared job was ever submitted in this process. Until one is, undeclared
/// submits skip the submit lock and carry [`Ticket::FIRST`]: with no reservation made before
/// them they have none to follow, and since they follow none, where a declared job submitted
/// concurrently lands in their queue cannot make either wait for the other. A declared submit
/// sets it before taking its ticket, so an undeclared submit that happens after it sees it (it
/// then takes a ticket under the lock like any other).
static DECLARED_SEEN: AtomicBool = AtomicBool::new(false);

/// Notes that a declared lane job is being submitted: from now on every submit takes its ticket
/// under the submit lock.
pub(crate) fn note_declared() {
    if !DECLARED_SEEN.load(Ordering::Relaxed) {
        DECLARED_SEEN.store(true, Ordering::Release);
    }
}

/// Whether a declared lane job was ever submitted in this process.
pub(crate) fn declared_seen() -> bool {
    DECLARED_SEEN.load(Ordering::Acquire)
}

#[derive(Clone, Copy)]
struct Entry {
    ticket: Ticket,
    writes: bool,
}

#[derive(Default)]
struct Held {
    entries: SmallVec<[Entry; 2]>,
    /// Uses blocked on an entry; `release` notifies only when non-zero.
    waiters: u32,
}

/// One buffer's outstanding reservations.
#[derive(Default)]
pub(crate) struct Reservations {
    /// Entries held, readable without the lock: the common case (nothing reserved) costs one
    /// load. A reservation made before a use in program order happens before that use, so the
    /// `Acquire` load sees its `Release` increment.
    count: AtomicUsize,
    held: Mutex<Held>,
    cv: Condvar,
}

impl Reservations {
    /// Adds `ticket`'s claim on the buffer's next use, with `access`.
    pub(crate) fn reserve(&self, ticket: Ticket, access: Access) {
        let mut h = crate::sync::lock(&self.held);
        h.entries.push(Entry { ticket, writes: access.writes() });
        self.count.fetch_add(1, Ordering::Release);
    }

    /// Removes `ticket`'s claim: its job committed or will not run.
    pub(crate) fn release(&self, ticket: Ticket) {
        let mut h = crate::sync::lock(&self.held);
        if let Some(i) = h.entries.iter().position(|e| e.ticket == ticket) {
            h.entries.swap_remove(i);
            self.count.fetch_sub(1, Ordering::Release);
        }
        if h.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Whether no reservation is held: every use of every op asks, so this stays inline.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// Waits until no reservation before `before` (all, with `None`) conflicts with `access`.
    fn await_turn(
        &self,
        name: impl Fn() -> String,
        access: Access,
        before: Option<Ticket>,
        timeout: Duration,
    ) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let conflicts = |e: &Entry| before.is_none_or(|b| e.ticket < b) && (e.writes || access.writes());
        let mut h = crate::sync::lock(&self.held);
        let mut wait = None;
        while h.entries.iter().any(conflicts) {
            let wait = wait.get_or_insert_with(|| ConflictWait::start(timeout));
            h = wait
                .block(&self.cv, h, |h| &mut h.waiters)
                .map_err(|TimedOut| Error::BufferReserved { buffer: name(), waited: timeout })?;
        }
        Ok(())
    }
}

/// What a declared job may use without failing a strict recorder.
#[derive(Clone)]
pub(crate) struct Declared {
    /// The buffers declared at submit, with their access.
    pub uses: SmallVec<[(BufferId, Access); 4]>,
}

impl Declared {
    /// A job that declared `uses`.
    pub(crate) fn new(uses: SmallVec<[(BufferId, Access); 4]>) -> Self {
        Declared { uses }
    }

    /// Whether job `ticket` may make this use of `t` without having declared it.
    ///
    /// Buffers the job itself made (on its own thread, inline runs included) and the crate's
    /// own scratch are exempt. The exemption only skips the declaration check, never a
    /// reservation wait, so the job still follows every job submitted before it. What an
    /// undeclared use gives up is a reservation that later submits follow, and these buffers
    /// need none:
    /// - a buffer the job made did not exist at its submit, so no earlier submit can hold it;
    ///   a later submit can reach it only through a handle the job passed on, and the job's
    ///   uses after that are ordered with that submit's by commit, as for any buffer a job
    ///   hands out while it still uses it;
    /// - scratch is seen only by the crate's ops of the library state that owns it, each of
    ///   which declares it on its own recorder and so is fenced after the previous one, and no
    ///   user can name it to reserve it.
    ///
    /// A buffer made on another thread is not exempt, even if made after the job started: a
    /// later submit may have reserved it before it reached the job, and only a declaration
    /// orders the job before that submit.
    fn exempts<D: super::BufferOwner>(
        &self,
        t: &super::BufferTrack<D>,
        access: Access,
        ticket: Option<Ticket>,
    ) -> bool {
        t.scratch
            || (ticket.is_some() && t.made_in == ticket)
            || self.uses.iter().any(|(id, d)| *id == t.id && (d.writes() || !access.writes()))
    }
}

fn access_words(a: Access) -> (&'static str, &'static str) {
    match a {
        Access::Read => ("read", "read"),
        Access::Write => ("write", "write"),
        Access::ReadWrite => ("read and write", "read_write"),
    }
}

/// Whether [`before_use`] has nothing to do for uses of buffers with no reservation: true
/// outside lane jobs (one thread-local load).
#[inline]
pub(crate) fn outside_lane_jobs() -> bool {
    !in_any_job()
}

/// What every use does before it takes a pending mark: in a declared job, checks that a strict
/// use was declared or is exempt (see [`Declared::exempts`]; the error names the buffer); then
/// waits for the reservations the use must follow (see the module docs). Returns the lane
/// job's submit number (0 outside lane jobs).
pub(crate) fn before_use<'a, D: super::BufferOwner>(
    uses: impl Iterator<Item = (&'a super::BufferTrack<D>, Access)> + Clone,
    strict: bool,
    timeout: Duration,
) -> Result<u64> {
    let (before, submit) = if !in_any_job() {
        (None, 0)
    } else {
        JOB.with(|j| -> Result<(Option<Ticket>, u64)> {
            let j = j.borrow();
            let Some(scope) = j.as_ref() else { return Ok((None, 0)) };
            if let Some(declared) = &scope.declared {
                for (t, access) in uses.clone() {
                    if declared.exempts(t, access, scope.ticket) {
                        continue;
                    }
                    let (words, call) = access_words(access);
                    let err = Error::UndeclaredUse {
                        buffer: t.name(),
                        lane: scope.lane.as_deref().unwrap_or("?").to_string(),
                        access: words,
                        access_call: call,
                    };
                    if strict {
                        return Err(err);
                    }
                    log::debug!("cusched: permissive recorder in a declared job: {err}");
                }
            }
            Ok((scope.ticket, scope.submit))
        })?
    };
    for (t, access) in uses {
        if !t.reservations.is_empty() {
            t.reservations.await_turn(|| t.name(), access, before, timeout)?;
        }
    }
    Ok(submit)
}

/// Host access to a buffer (reading or filling pinned memory on the host) follows the
/// reservations like a use; it is not a launch, so declaration is not checked.
pub(crate) fn before_host_use<D: super::BufferOwner>(
    t: &super::BufferTrack<D>,
    access: Access,
    timeout: Duration,
) -> Result<()> {
    let before = if in_any_job() { JOB.with(|j| j.borrow().as_ref().and_then(|s| s.ticket)) } else { None };
    t.reservations.await_turn(|| t.name(), access, before, timeout)
}

/// Waits until no reservation taken before `ticket` conflicts with a use `access` of `t`: a
/// declared job that failed without using `t` takes its turn before it marks `t` failed, so
/// that jobs submitted before it still see the contents they were ordered after.
pub(crate) fn await_before<D: super::BufferOwner>(
    t: &super::BufferTrack<D>,
    access: Access,
    ticket: Ticket,
    timeout: Duration,
) -> Result<()> {
    t.reservations.await_turn(|| t.name(), access, Some(ticket), timeout)
}
