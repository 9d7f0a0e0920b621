//! The buffer's failure flag: a failed last writer, which later reads report as
//! [`Error::FailedInput`] until a successful write.

use super::{BufferOwner, BufferTrack};
use crate::error::Error;
use std::sync::atomic::Ordering;

/// The failed last writer of a buffer: the op as errors name it, and its error.
pub(super) struct Failure {
    op: String,
    cause: Error,
}

impl<D: BufferOwner> BufferTrack<D> {
    /// Whether the buffer's last writer failed: one relaxed load. A failure is set before the
    /// failed op releases the buffer (its pending mark, its reservation, the solo stream's lock,
    /// its job's completion), so a use that checks after acquiring the buffer the same way sees
    /// it; a use racing the failed op unordered may not, as it may not see its data either.
    #[inline(always)]
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// [`Error::FailedInput`] for a read of the buffer, when its last writer failed.
    #[cold]
    #[inline(never)]
    pub(crate) fn failed_input(&self) -> Option<Error> {
        // The failure mutex is a leaf: the buffer is named (its label lock) after releasing it.
        let (op, cause) = {
            let failure = crate::sync::lock(&self.failure);
            let f = failure.as_ref()?;
            (f.op.clone(), f.cause.clone())
        };
        Some(Error::FailedInput {
            buffer: self.name(),
            label: self.label().map(|l| l.to_string()),
            op,
            cause: Box::new(cause),
        })
    }

    /// Marks the buffer's contents as left by `op`, which failed with `cause`: later reads fail
    /// with [`Error::FailedInput`] until a successful write. With `keep`, an earlier failure
    /// stays as it is (a job's failure does not rename the launch inside it that failed first).
    #[cold]
    #[inline(never)]
    pub(crate) fn fail(&self, op: &str, cause: &Error, keep: bool) {
        let mut failure = crate::sync::lock(&self.failure);
        if keep && failure.is_some() {
            return;
        }
        *failure = Some(Failure { op: op.to_string(), cause: cause.clone() });
        self.failed.store(true, Ordering::Relaxed);
    }

    /// A successful write replaced the contents: clears a failure. One relaxed load when there
    /// is none.
    #[inline(always)]
    pub(crate) fn clear_failure(&self) {
        if self.is_failed() {
            self.clear_failure_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn clear_failure_slow(&self) {
        let mut failure = crate::sync::lock(&self.failure);
        *failure = None;
        self.failed.store(false, Ordering::Relaxed);
    }
}
