//! Triangular inverse: `trtri`, on the 64-bit generic API (every element type).

use super::calls;
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::{Fill, SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::record;
use crate::libs::validate as check;
use crate::memory::GpuRef;
use crate::track::Access;

/// The inverse of the `n x n` triangular `A`, overwriting the `fill` triangle of `A`; the
/// other triangle is neither read nor written. With `unit_diagonal`, `A`'s diagonal is taken
/// as ones and not read; cuSOLVER may write it (it did on an H100), so its stored values
/// afterwards are not defined (the inverse's diagonal is ones).
#[derive(Debug)]
pub struct Trtri<'a, T: SolverElement> {
    /// The triangle holding `A`, and then its inverse.
    pub fill: Fill,
    /// Whether `A` has ones on its diagonal (the stored diagonal is then not referenced).
    pub unit_diagonal: bool,
    /// Order of `A`.
    pub n: usize,
    /// `A`, overwritten by its inverse.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
}

impl Solver {
    /// Triangular inverse (see [`Trtri`]); an exactly zero diagonal element (of a non-unit
    /// `A`) fails the completion with
    /// [`NumericalFailure::Singular`](crate::NumericalFailure::Singular) naming it (1-based),
    /// and `A` is then left as it was.
    pub fn trtri<T: SolverElement>(&mut self, t: &Trtri<'_, T>) -> Result<Completion<()>> {
        let n = check::dim64("n", t.n)?;
        let lda = matrix("a", "lda", t.a, t.n, t.n, t.lda)?;
        let mut rec = self.op.recorder("trtri");
        record(&mut rec, "a", t.a, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::trtri(&self.op, rec, t, lda as usize);
        }
        let (h, _) = self.handle()?;
        let (a, dt, fill, unit) = (vptr(t.a)?, calls::data_type(T::CUDA), t.fill, t.unit_diagonal);
        let key = SizeKey { op: "trtri", dtype: T::CUDA as u32, dims: [n, lda, fill as i64, unit as i64, 0, 0] };
        // SAFETY: a live handle, context bound by `sizes`; the query reads nothing.
        let sizes = self.sizes(key, || unsafe { calls::trtri(h, fill, unit, n, dt, a, lda, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "trtri",
            1,
            Meaning::Pivot,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a` covers n x n at lda, declared
                // read-write; (3) the workspace, declared, holds the queried sizes, the host part
                // kept alive with the op; (4) `info` is pinned mapped memory kept until the
                // completion reads it.
                unsafe { calls::trtri(h, fill, unit, n, dt, a, lda, Some((work, pin.info()))) }.map(drop)
            },
            || (),
        )
    }
}
