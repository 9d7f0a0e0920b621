//! Symmetric indefinite factorization: `sytrf` (Bunch–Kaufman) and its solve `sytrs`, on the
//! 64-bit generic API (every element type; complex symmetric, not Hermitian, for complex).

use super::calls;
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::{Fill, SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

/// Bunch–Kaufman factorization `A = U D Uᵀ` (or `L D Lᵀ`) of the `n x n` symmetric `A` (for
/// complex types, complex symmetric: transposed, not conjugated), overwriting the `fill`
/// triangle of `A` with `D` (1x1 and 2x2 blocks) and the multipliers, and `ipiv` with the
/// interchanges in LAPACK's convention: `ipiv[k] > 0` a 1x1 block with rows `k` and `ipiv[k]`
/// swapped, a pair of equal negative entries a 2x2 block (1-based).
#[derive(Debug)]
pub struct Sytrf<'a, T: SolverElement> {
    /// The triangle read and written.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// `A`, overwritten by its factor.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` pivots.
    pub ipiv: &'a GpuRef<i64>,
}

/// Solves `A X = B` with the factor and pivots from [`Solver::sytrf`] (the same `fill`); `X`
/// overwrites `B` (`n x nrhs`).
#[derive(Debug)]
pub struct Sytrs<'a, T: SolverElement> {
    /// The triangle holding the factor.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// Right-hand sides.
    pub nrhs: usize,
    /// The factor.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The pivots `sytrf` wrote.
    pub ipiv: &'a GpuRef<i64>,
    /// `B`, overwritten by `X`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
}

impl Solver {
    /// Symmetric indefinite factorization (see [`Sytrf`]), through `cusolverDnXsytrf`, which
    /// cuSOLVER has from CUDA 13.4 on: an older libcusolver refuses the op with
    /// [`Error::Unsupported`](crate::Error::Unsupported) before anything is recorded. An exactly
    /// zero diagonal block of `D` fails the completion with
    /// [`NumericalFailure::Singular`](crate::NumericalFailure::Singular) naming it (1-based;
    /// the factorization is still complete, but `D`, and so `A`, is singular).
    pub fn sytrf<T: SolverElement>(&mut self, f: &Sytrf<'_, T>) -> Result<Completion<()>> {
        let n = check::dim64("n", f.n)?;
        let lda = matrix("a", "lda", f.a, f.n, f.n, f.lda)?;
        check::covers("ipiv", f.ipiv, Some(f.n), "n pivots")?;
        if !self.op.device.is_simulated() {
            calls::xsytrf()?;
        }
        let mut rec = self.op.recorder("sytrf");
        record(&mut rec, "a", f.a, Access::ReadWrite)?;
        record(&mut rec, "ipiv", f.ipiv, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::sytrf(&self.op, rec, f, lda as usize);
        }
        let (h, params) = self.handle()?;
        let (a, ipiv, dt, fill) = (vptr(f.a)?, dptr(f.ipiv)?, calls::data_type(T::CUDA), f.fill);
        let key = SizeKey { op: "sytrf", dtype: T::CUDA as u32, dims: [n, lda, fill as i64, 0, 0, 0] };
        // SAFETY: a live handle and params, context bound by `sizes`; the query reads nothing.
        let sizes = self.sizes(key, || unsafe { calls::sytrf(h, params, fill, n, dt, (a, lda), ipiv, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "sytrf",
            1,
            Meaning::Pivot,
            None,
            |pin| {
                // SAFETY: (1) live handle and params on this stream; (2) `a` covers n x n at lda
                // (read-write) and `ipiv` n pivots (written), both declared; (3) the workspace,
                // declared, holds the queried sizes, the host part kept alive with the op; (4)
                // `info` is pinned mapped memory kept until the completion reads it.
                unsafe { calls::sytrf(h, params, fill, n, dt, (a, lda), ipiv, Some((work, pin.info()))) }.map(drop)
            },
            || (),
        )
    }

    /// Solves with a symmetric indefinite factor (see [`Sytrs`]).
    pub fn sytrs<T: SolverElement>(&mut self, s: &Sytrs<'_, T>) -> Result<Completion<()>> {
        let (n, nrhs) = (check::dim64("n", s.n)?, check::dim64("nrhs", s.nrhs)?);
        let lda = matrix("a", "lda", s.a, s.n, s.n, s.lda)?;
        let ldb = matrix("b", "ldb", s.b, s.n, s.nrhs, s.ldb)?;
        check::covers("ipiv", s.ipiv, Some(s.n), "n pivots")?;
        check::distinct("b", s.a, s.b)?;
        let mut rec = self.op.recorder("sytrs");
        record(&mut rec, "a", s.a, Access::Read)?;
        record(&mut rec, "ipiv", s.ipiv, Access::Read)?;
        record(&mut rec, "b", s.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::sytrs(&self.op, rec, s, lda as usize, ldb as usize);
        }
        let (h, _) = self.handle()?;
        let (a, b, dt, fill) = (vptr(s.a)?, vptr(s.b)?, calls::data_type(T::CUDA), s.fill);
        let ipiv: *const i64 = dptr(s.ipiv)?;
        let key = SizeKey { op: "sytrs", dtype: T::CUDA as u32, dims: [n, nrhs, lda, ldb, fill as i64, 0] };
        // SAFETY: a live handle, context bound by `sizes`; the query reads nothing.
        let sizes =
            self.sizes(key, || unsafe { calls::sytrs(h, fill, n, nrhs, dt, (a, lda), ipiv, (b, ldb), None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "sytrs",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a`, `ipiv` (read) and `b`
                // (read-write) cover their validated shapes, distinct and declared; (3) the
                // workspace, declared, holds the queried sizes; (4) `info` pinned.
                unsafe { calls::sytrs(h, fill, n, nrhs, dt, (a, lda), ipiv, (b, ldb), Some((work, pin.info()))) }
                    .map(drop)
            },
            || (),
        )
    }
}
