//! Symmetric and Hermitian ops on the typed entry points (every element type): the inverse
//! from a Cholesky factor (`potri`), Jacobi eigenvalues (`syevj`, `heevj` for complex) and the
//! generalized eigenproblem (`sygvd`, `hegvd` for complex).

use super::calls::{self, EigType, OwnedSyevj};
use super::eigen::JacobiRun;
use super::factor::{matrix, CheckStatus};
use super::info::Meaning;
use super::{Fill, SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

/// The inverse of the `n x n` Hermitian positive definite `A` from its Cholesky factor (from
/// [`Solver::potrf`] with the same `fill`), overwriting that triangle of `A`.
#[derive(Debug)]
pub struct Potri<'a, T: SolverElement> {
    /// The triangle holding the factor, and then the inverse.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// The factor, overwritten by the inverse.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
}

/// Jacobi eigenvalues (ascending, into `w`) and optionally eigenvectors (overwriting `A`) of
/// the `n x n` symmetric or Hermitian `A`. Tolerance and sweeps are [`Solver::set_jacobi`]'s.
#[derive(Debug)]
pub struct Syevj<'a, T: SolverElement> {
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle read.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// `A`, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` eigenvalues.
    pub w: &'a GpuRef<T::Real>,
}

/// Which generalized eigenproblem [`Solver::sygvd`] solves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Generalized {
    /// `A x = λ B x`.
    #[default]
    Ax,
    /// `A B x = λ x`.
    Abx,
    /// `B A x = λ x`.
    Bax,
}

/// The generalized symmetric (Hermitian, for complex) eigenproblem of the `n x n` `A` and the
/// positive definite `B`: eigenvalues (ascending) into `w`, eigenvectors (`B`-orthonormal)
/// overwriting `A` with `vectors`; `B` is overwritten by its Cholesky factor.
#[derive(Debug)]
pub struct Sygvd<'a, T: SolverElement> {
    /// The problem.
    pub problem: Generalized,
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle of `A` and `B` read.
    pub fill: Fill,
    /// Order of `A` and `B`.
    pub n: usize,
    /// `A`, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`, overwritten by its Cholesky factor.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// The `n` eigenvalues.
    pub w: &'a GpuRef<T::Real>,
}

fn eig_type(g: Generalized) -> EigType {
    match g {
        Generalized::Ax => EigType::CUSOLVER_EIG_TYPE_1,
        Generalized::Abx => EigType::CUSOLVER_EIG_TYPE_2,
        Generalized::Bax => EigType::CUSOLVER_EIG_TYPE_3,
    }
}

/// Workspace bytes for `lwork` elements of `T`.
pub(super) fn work_bytes<T>(lwork: i32) -> (usize, usize) {
    (lwork.max(0) as usize * std::mem::size_of::<T>(), 0)
}

impl Solver {
    /// The inverse from a Cholesky factor (see [`Potri`]); a zero on the factor's diagonal
    /// fails the completion with [`Error::Numerical`](crate::Error::Numerical).
    pub fn potri<T: SolverElement>(&mut self, p: &Potri<'_, T>) -> Result<Completion<()>> {
        let n = check::dim("n", p.n, false)?;
        let lda = matrix("a", "lda", p.a, p.n, p.n, p.lda)? as i32;
        let mut rec = self.op.recorder("potri");
        record(&mut rec, "a", p.a, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::potri(&self.op, rec, p, lda as usize);
        }
        let (h, _) = self.handle()?;
        let (a, u): (*mut c_void, _) = (dptr(p.a)?, calls::fill(p.fill));
        let key = SizeKey { op: "potri", dtype: T::CUDA as u32, dims: [n.into(), lda.into(), p.fill as i64, 0, 0, 0] };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle, context bound; the query reads nothing.
            unsafe { T::potri_size(h, u, n, a, lda, &mut lwork) }.check_status("cusolverDn<t>potri_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "potri",
            1,
            Meaning::Pivot,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a` covers n x n at lda, declared
                // read-write; (3) the workspace, declared, holds `lwork` elements; (4) `info` pinned.
                unsafe { T::potri(h, u, n, a, lda, work.device, lwork, pin.info()) }.check_status("cusolverDn<t>potri")
            },
            || (),
        )
    }

    /// Jacobi eigen decomposition (see [`Syevj`]); the completion's [`JacobiRun`] gives the
    /// residual and sweeps through [`jacobi_report`](Self::jacobi_report).
    pub fn syevj<T: SolverElement>(&mut self, e: &Syevj<'_, T>) -> Result<Completion<JacobiRun>> {
        let n = check::dim("n", e.n, false)?;
        let lda = matrix("a", "lda", e.a, e.n, e.n, e.lda)? as i32;
        check::covers("w", e.w, Some(e.n), "n eigenvalues")?;
        check::distinct("w", e.a, e.w)?;
        let mut rec = self.op.recorder("syevj");
        record(&mut rec, "a", e.a, Access::ReadWrite)?;
        record(&mut rec, "w", e.w, Access::Write)?;
        if self.op.device.is_simulated() {
            return Ok(super::sim::syevj(&self.op, rec, e, lda as usize, self.jacobi)?.map(JacobiRun::sim));
        }
        let (h, _) = self.handle()?;
        let (a, w): (*mut c_void, *mut c_void) = (dptr(e.a)?, dptr(e.w)?);
        let (mode, u) = (calls::eig_mode(e.vectors), calls::fill(e.fill));
        let info = OwnedSyevj::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let raw = info.raw();
        let key = SizeKey {
            op: "syevj",
            dtype: T::CUDA as u32,
            dims: [n.into(), lda.into(), e.vectors as i64, e.fill as i64, 0, 0],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::syevj_size(h, mode, u, n, a, lda, w, &mut lwork, raw) }
                .check_status("cusolverDn<t>syevj_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "syevj",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion, alive until the
                // op resolved); `a` and `w` cover their validated shapes and are distinct, declared
                // written; the workspace holds `lwork` elements; `info` pinned.
                unsafe { T::syevj(h, mode, u, n, a, lda, w, work.device, lwork, pin.info(), raw) }
                    .check_status("cusolverDn<t>syevj")
            },
            move || JacobiRun::syevj(info),
        )
    }

    /// The generalized symmetric or Hermitian eigenproblem (see [`Sygvd`]). A `B` that is not
    /// positive definite fails the completion with
    /// [`NotPositiveDefinite`](crate::NumericalFailure::NotPositiveDefinite) naming `B`'s
    /// leading minor; an eigensolver that did not converge with `NotConverged`.
    pub fn sygvd<T: SolverElement>(&mut self, g: &Sygvd<'_, T>) -> Result<Completion<()>> {
        let n = check::dim("n", g.n, false)?;
        let lda = matrix("a", "lda", g.a, g.n, g.n, g.lda)? as i32;
        let ldb = matrix("b", "ldb", g.b, g.n, g.n, g.ldb)? as i32;
        check::covers("w", g.w, Some(g.n), "n eigenvalues")?;
        check::distinct("b", g.a, g.b)?;
        check::distinct("w", g.a, g.w)?;
        check::distinct("w", g.b, g.w)?;
        let mut rec = self.op.recorder("sygvd");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "b", g.b, Access::ReadWrite)?;
        record(&mut rec, "w", g.w, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::sygvd(&self.op, rec, g, lda as usize, ldb as usize);
        }
        let (h, _) = self.handle()?;
        let (a, b, w): (*mut c_void, *mut c_void, *mut c_void) = (dptr(g.a)?, dptr(g.b)?, dptr(g.w)?);
        let (t, mode, u) = (eig_type(g.problem), calls::eig_mode(g.vectors), calls::fill(g.fill));
        let key = SizeKey {
            op: "sygvd",
            dtype: T::CUDA as u32,
            dims: [n.into(), lda.into(), ldb.into(), g.problem as i64, g.vectors as i64, g.fill as i64],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle, context bound; the query reads nothing.
            unsafe { T::sygvd_size(h, t, mode, u, n, a, lda, b, ldb, w, &mut lwork) }
                .check_status("cusolverDn<t>sygvd_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "sygvd",
            1,
            Meaning::Generalized(g.n),
            None,
            |pin| {
                // SAFETY: a live handle on this stream; `a`, `b` (n x n) and `w` (n) cover their
                // validated shapes, distinct, declared written; the workspace holds `lwork`
                // elements; `info` pinned.
                unsafe { T::sygvd(h, t, mode, u, n, a, lda, b, ldb, w, work.device, lwork, pin.info()) }
                    .check_status("cusolverDn<t>sygvd")
            },
            || (),
        )
    }

    /// The Hermitian generalized eigenproblem: [`sygvd`](Self::sygvd) under LAPACK's name for
    /// complex types (`cusolverDnChegvd`, `cusolverDnZhegvd`).
    pub fn hegvd<T: SolverElement>(&mut self, g: &Sygvd<'_, T>) -> Result<Completion<()>> {
        self.sygvd(g)
    }
}
