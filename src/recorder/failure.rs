//! Failures along the data: a launch whose enqueue failed leaves the buffers it writes failed
//! (see `BufferTrack::fail`), a successful write clears them, and a later use that reads a
//! failed buffer fails at its preflight with [`Error::FailedInput`], enqueueing nothing.
//!
//! A lane job (or [`Handles::run`](crate::Handles::run)) that fails fails what it wrote too:
//! while one runs, every write it commits is listed here (on its thread), so that the job's end
//! can mark them.

use super::{Tracked, Use};
use crate::device::{DeviceShared, StreamId};
use crate::error::Error;
use crate::trace::OpLabel;
use crate::track::Access;
use std::cell::RefCell;
use std::sync::Arc;

/// The error for the first use in `uses` that reads a failed buffer. Cheap when none is: one
/// relaxed load per use. Called once the uses are acquired (marks taken, or counted in flight
/// on the solo stream), after which a failure set by the writer they follow is visible.
#[inline(always)]
pub(super) fn failed_input(uses: &[Use]) -> Option<Error> {
    if uses.iter().any(|u| u.track().is_failed()) {
        return first_failed_read(uses);
    }
    None
}

#[cold]
#[inline(never)]
fn first_failed_read(uses: &[Use]) -> Option<Error> {
    // A plain write replaces the contents: only reads (read_write included) see the failure.
    uses.iter().filter(|u| u.access != Access::Write).find_map(|u| u.track().failed_input())
}

/// Settles the failure state of the buffers a launch writes, before its commit releases them:
/// a successful enqueue clears their failures, a failed one marks them failed by the op. A
/// read-only use is left as it was. Inside a lane job, the written buffers are listed for the
/// job's end.
#[inline(always)]
pub(super) fn settle(uses: &[Use], failed: Option<&Error>, op: impl FnOnce() -> String) {
    match failed {
        None => {
            for u in uses {
                if u.access.writes() {
                    u.track().clear_failure();
                }
            }
        }
        Some(e) => mark(uses, &op(), e),
    }
    if !crate::track::reservation::outside_lane_jobs() {
        note_job_writes(uses);
    }
}

#[cold]
#[inline(never)]
fn mark(uses: &[Use], op: &str, e: &Error) {
    for u in uses.iter().filter(|u| u.access.writes()) {
        u.track().fail(op, e, false);
    }
}

/// How errors name a launch: its label, and the lane or stream it ran on.
#[cold]
#[inline(never)]
pub(super) fn op_name(shared: &DeviceShared, stream: StreamId, label: &OpLabel) -> String {
    match shared.lane_name(stream) {
        Some(lane) => format!("`{}::{}` on lane `{lane}`", label.library, label.op()),
        None => format!("`{}::{}` on {stream}", label.library, label.op()),
    }
}

thread_local!(static JOB_WRITES: RefCell<Option<Vec<Arc<dyn Tracked>>>> = const { RefCell::new(None) });

/// Lists the buffers `uses` writes for the job this thread runs, once each.
#[cold]
#[inline(never)]
fn note_job_writes(uses: &[Use]) {
    let _ = JOB_WRITES.try_with(|w| {
        let Ok(mut w) = w.try_borrow_mut() else { return };
        let Some(list) = w.as_mut() else { return };
        for u in uses.iter().filter(|u| u.access.writes()) {
            if !list.iter().any(|b| b.track().id.0 == u.id) {
                list.push(u.buf.clone());
            }
        }
    });
}

/// The buffers a job wrote, for its end to mark failed if it fails (see [`collect_writes`]).
pub(crate) struct JobWrites(Vec<Arc<dyn Tracked>>);

impl JobWrites {
    /// Marks every listed buffer failed by `op` with `cause`, unless an op inside the job
    /// already marked it (that one names the failure more precisely).
    #[cold]
    #[inline(never)]
    pub(crate) fn fail(&self, op: &str, cause: &Error) {
        for b in &self.0 {
            b.track().fail(op, cause, true);
        }
    }
}

/// Runs `f` (a job) listing the buffers its commits on this thread write; a job nested in
/// another (an inline [`Handles::run`](crate::Handles::run) in a lane job) lists them for the
/// outer job too, which writes them as well.
pub(crate) fn collect_writes<R>(f: impl FnOnce() -> R) -> (R, JobWrites) {
    type List = Option<Vec<Arc<dyn Tracked>>>;
    /// Puts the outer job's list back if the job unwinds.
    struct Restore(Option<List>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(prev) = self.0.take() {
                let _ = JOB_WRITES.try_with(|w| w.try_borrow_mut().map(|mut w| *w = prev));
            }
        }
    }
    let mut restore = Restore(Some(JOB_WRITES.with(|w| w.borrow_mut().replace(Vec::new()))));
    let value = f();
    let prev = restore.0.take().flatten();
    let mine = JOB_WRITES.with(|w| std::mem::replace(&mut *w.borrow_mut(), prev)).unwrap_or_default();
    if !mine.is_empty() {
        JOB_WRITES.with(|w| {
            if let Some(outer) = w.borrow_mut().as_mut() {
                for b in &mine {
                    if !outer.iter().any(|o| o.track().id == b.track().id) {
                        outer.push(b.clone());
                    }
                }
            }
        });
    }
    (value, JobWrites(mine))
}
