//! The lane job a thread runs: its ticket, what it declared, and the last event it committed
//! on each stream (see the module docs of `reservation`).

use super::{Declared, Ticket};
use crate::track::{EventRef, StreamId};
use std::cell::{Cell, RefCell};

/// The ticket of the lane job this thread runs, if any: the job that owns buffers made now.
pub(crate) fn current_ticket() -> Option<Ticket> {
    if !in_any_job() {
        return None;
    }
    JOB.try_with(|j| j.try_borrow().ok().and_then(|j| j.as_ref().and_then(|s| s.ticket))).ok().flatten()
}

/// The job a lane thread is running (or an inline [`Handles::run`](crate::Handles::run)): its
/// ticket, what it declared, and the last event it committed on each stream.
pub(crate) struct JobScope {
    /// `None` inline: uses there follow every reservation present.
    pub ticket: Option<Ticket>,
    /// `None` for an undeclared job.
    pub declared: Option<Declared>,
    /// The lane's name, for errors; `None` inline.
    pub lane: Option<std::sync::Arc<str>>,
    /// The stream the job's end is recorded on.
    pub stream: StreamId,
    /// The lane job's submit number (0 inline), raised to that of each job it submits:
    /// what its uses are checked and stamped with for submit order (`order`).
    pub submit: u64,
    /// What the job committed so far.
    end: JobEnd,
}

impl JobScope {
    /// A job on `stream` that has committed nothing yet.
    pub(crate) fn new(
        ticket: Option<Ticket>,
        declared: Option<Declared>,
        lane: Option<std::sync::Arc<str>>,
        stream: StreamId,
    ) -> Self {
        JobScope { ticket, declared, lane, stream, submit: 0, end: JobEnd::default() }
    }

    /// The scope of lane job number `submit`.
    pub(crate) fn submitted(mut self, submit: u64) -> Self {
        self.submit = submit;
        self
    }
}

/// The last event a job committed on its own stream, and on each other stream it enqueued on.
#[derive(Default)]
pub(crate) struct JobEnd {
    /// On the job's own stream: covers everything the job enqueued there.
    pub own: Option<EventRef>,
    /// On every other stream, one entry per stream. Empty (and unallocated) for the common job
    /// that enqueues only on its own stream.
    pub others: Vec<(StreamId, EventRef)>,
}

impl JobEnd {
    /// Notes `ev`, committed on the job's stream when `own`, else on `stream`. A thread's
    /// commits on one stream come in stream order, so the newest replaces the older.
    fn note(&mut self, own: bool, stream: StreamId, ev: &EventRef) {
        if own {
            self.own = Some(ev.clone());
        } else if let Some(entry) = self.others.iter_mut().find(|(s, _)| *s == stream) {
            entry.1 = ev.clone();
        } else {
            self.others.push((stream, ev.clone()));
        }
    }
}

thread_local!(pub(super) static JOB: RefCell<Option<JobScope>> = const { RefCell::new(None) });

// How many job scopes this thread is inside. Every op checks it before `JOB`: a slot with no
// destructor is one load, where `JOB`'s access also checks its destructor's registration.
thread_local!(static JOB_DEPTH: Cell<u32> = const { Cell::new(0) });

/// Whether this thread runs inside a job scope.
#[inline]
pub(super) fn in_any_job() -> bool {
    JOB_DEPTH.with(|d| d.get() > 0)
}

/// Puts the previous scope (none outside jobs) back, also when the job unwinds.
struct Restore {
    prev: Option<JobScope>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        JOB_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        let prev = self.prev.take();
        // `try_with`: during thread teardown the slot may be gone; nothing to restore then.
        let _ = JOB.try_with(|j| *j.borrow_mut() = prev);
    }
}

/// Runs `f` as the job `scope`; returns its value and the last events it committed. An inline
/// scope (no ticket) inside a job keeps the job's ticket and declarations: it runs as part of
/// that job.
pub(crate) fn in_job<R>(mut scope: JobScope, f: impl FnOnce() -> R) -> (R, JobEnd) {
    let stream = scope.stream;
    let prev = JOB.with(|j| {
        let mut j = j.borrow_mut();
        if scope.ticket.is_none() {
            if let Some(outer) = j.as_ref() {
                scope.ticket = outer.ticket;
                scope.declared = outer.declared.clone();
                scope.lane = outer.lane.clone();
                scope.submit = outer.submit;
            }
        }
        j.replace(scope)
    });
    JOB_DEPTH.with(|d| d.set(d.get() + 1));
    let restore = Restore { prev };
    let value = f();
    let end = JOB.with(|j| j.borrow_mut().as_mut().map(|s| std::mem::take(&mut s.end))).unwrap_or_default();
    drop(restore);
    // Work an inline run inside a job enqueued is the job's work too, on whichever stream.
    if let Some(ev) = &end.own {
        note_commit(stream, ev);
    }
    for (s, ev) in &end.others {
        note_commit(*s, ev);
    }
    (value, end)
}

/// Notes that this thread submitted lane job number `submit`: the job it runs (if any) uses
/// buffers after that submit from now on, so its uses are never reported against that job's
/// (their order is commit order, which only the job's own waits decide).
#[inline]
pub(crate) fn note_submitted(submit: u64) {
    if in_any_job() {
        let _ = JOB.try_with(|j| {
            if let Ok(mut j) = j.try_borrow_mut() {
                if let Some(scope) = j.as_mut() {
                    // Only a later number of the job's own submitting thread: a nested
                    // submit from a lane's thread is never compared with the job's uses.
                    if crate::track::order::same_thread(scope.submit, submit) {
                        scope.submit = scope.submit.max(submit);
                    }
                }
            }
        });
    }
}

/// Notes a commit on `stream`: the job running on this thread (if any) ends after it.
#[inline]
pub(crate) fn note_commit(stream: StreamId, ev: &EventRef) {
    if in_any_job() {
        note_job_commit(stream, ev);
    }
}

/// The job's part of [`note_commit`], out of line: outside jobs it is never reached.
#[inline(never)]
fn note_job_commit(stream: StreamId, ev: &EventRef) {
    let _ = JOB.try_with(|j| {
        if let Ok(mut j) = j.try_borrow_mut() {
            if let Some(scope) = j.as_mut() {
                scope.end.note(scope.stream == stream, stream, ev);
            }
        }
    });
}
