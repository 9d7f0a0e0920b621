//! The status word path: every op gets pinned, device-mapped memory for its `devInfo` (one
//! `int` per matrix), and its completion reads it once the GPU has passed the op, turning a
//! nonzero status into a typed error. The op itself never synchronizes.

use super::Solver;
use crate::completion::{Completion, KeepAlive};
use crate::error::{Error, NumericalFailure, Result};
use crate::libs::scalars::PinnedArray;
use crate::recorder::LaunchRecorder;
use std::ffi::c_int;
use std::sync::Arc;

/// What a positive status word means for an op.
#[derive(Clone, Copy, Debug)]
pub(super) enum Meaning {
    /// Cholesky: the leading minor of that order is not positive definite.
    Minor,
    /// LU: that diagonal element of `U` is exactly zero.
    Pivot,
    /// An iteration did not converge.
    Converge,
    /// Only negative values (a rejected parameter) are possible.
    ParamsOnly,
    /// The generalized eigenproblem of order `n`: above `n`, `B`'s leading minor of order
    /// `info - n` is not positive definite; up to `n`, the eigensolver did not converge.
    Generalized(usize),
}

impl Meaning {
    fn failure(self, matrix: usize, info: usize) -> NumericalFailure {
        match self {
            Meaning::Minor => NumericalFailure::NotPositiveDefinite { matrix, minor: info },
            Meaning::Pivot => NumericalFailure::Singular { matrix, index: info },
            Meaning::Generalized(n) if info > n => NumericalFailure::NotPositiveDefinite { matrix, minor: info - n },
            Meaning::Converge | Meaning::ParamsOnly | Meaning::Generalized(_) => {
                NumericalFailure::NotConverged { matrix, count: info }
            }
        }
    }
}

/// The pinned memory of one op: its status words, and the device pointer array of a batched
/// call.
pub(super) struct Pinned {
    info: Arc<PinnedArray>,
    pub ptrs: Option<Arc<PinnedArray>>,
}

impl Pinned {
    /// The device address of the status words.
    pub(super) fn info(&self) -> *mut c_int {
        self.info.device_ptr()
    }
}

/// Turns the `batch` status words of op `op` into its result.
fn check(op: &'static str, batch: usize, meaning: Meaning, info: &PinnedArray) -> Result<()> {
    let mut failures = Vec::new();
    for i in 0..batch {
        let v: c_int = info.read(i);
        if v < 0 {
            // Validation rejects every argument the library would: a negative status is a bug.
            return Err(Error::Library { call: op, status: format!("rejected its parameter {}", -v) });
        }
        if v > 0 {
            failures.push(meaning.failure(i, v as usize));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Numerical { op, batch, failures })
    }
}

impl Solver {
    /// Runs op `op` over `batch` matrices: `enqueue` gets the pinned status words (and the
    /// pointer array made from `ptrs`, for batched calls) and enqueues; the completion
    /// resolves with `value()` once the GPU has passed the op, or with the error its status
    /// words say.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_info<V: Send + 'static>(
        &mut self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        op: &'static str,
        batch: usize,
        meaning: Meaning,
        ptrs: Option<Vec<u64>>,
        enqueue: impl FnOnce(&Pinned) -> Result<()>,
        value: impl FnOnce() -> V + Send + 'static,
    ) -> Result<Completion<V>> {
        self.handle()?;
        let prepare = |slots: &mut crate::libs::scalars::ScalarSlots, ctx: &Arc<_>| {
            // The GPU writes every word; zero them anyway, so a word it skipped reads "ok"
            // rather than a stale failure.
            let zeros = vec![0 as c_int; batch];
            let info = slots.take_array(ctx, batch * std::mem::size_of::<c_int>(), |a| a.write(&zeros))?;
            let ptrs = match &ptrs {
                Some(p) => Some(slots.take_array(ctx, std::mem::size_of_val(p.as_slice()), |a| a.write(p))?),
                None => None,
            };
            Ok(Pinned { info, ptrs })
        };
        self.op.run_deferred(rec, keep, prepare, enqueue, move |pinned: Pinned| {
            check(op, batch, meaning, &pinned.info)?;
            Ok(value())
        })
    }
}
