//! The batched Jacobi methods on small matrices (at most 32 x 32): the SVD and the symmetric
//! (Hermitian) eigensolver.

use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::solver::calls::{self, OwnedJacobi, OwnedSyevj};
use crate::libs::solver::factor::CheckStatus;
use crate::libs::solver::info::Meaning;
use crate::libs::solver::symmetric::work_bytes;
use crate::libs::solver::{SizeKey, Solver, SolverElement};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::track::Access;
use std::ffi::c_void;

use super::{strided, GesvdjBatched, SyevjBatched};

/// The largest order the batched Jacobi methods take.
const JACOBI_MAX: usize = 32;

/// A Jacobi order: at least 1, at most 32.
fn jacobi_dim(arg: &'static str, v: usize) -> Result<i32> {
    if v > JACOBI_MAX {
        return Err(Error::invalid(arg, format!("{v} is above {JACOBI_MAX}, the batched Jacobi methods' limit")));
    }
    check::dim(arg, v, false)
}

impl Solver {
    /// Batched Jacobi SVD (see [`GesvdjBatched`]).
    pub fn gesvdj_batched<T: SolverElement>(&mut self, g: &GesvdjBatched<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (jacobi_dim("m", g.m)?, jacobi_dim("n", g.n)?);
        let batch = check::dim("batch", g.batch, false)?;
        let (lda, _) = strided(("a", "lda", "stride"), g.a, g.m, g.n, g.lda, None, g.batch)?;
        let p = g.m.min(g.n);
        check::covers("s", g.s, p.checked_mul(g.batch), "min(m, n) * batch singular values")?;
        let (ldu, ldv) = if g.vectors {
            let (ldu, _) = strided(("u", "ldu", "stride"), g.u, g.m, g.m, g.ldu, None, g.batch)?;
            let (ldv, _) = strided(("v", "ldv", "stride"), g.v, g.n, g.n, g.ldv, None, g.batch)?;
            (ldu, ldv)
        } else {
            (m, n)
        };
        check::distinct("s", g.a, g.s)?;
        check::distinct("u", g.a, g.u)?;
        check::distinct("v", g.a, g.v)?;
        check::distinct("v", g.u, g.v)?;
        check::no_aliasing(&[("u", g.u.id(), false), ("v", g.v.id(), false), ("s", g.s.id(), true)])?;
        let mut rec = self.op.recorder("gesvdjBatched");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "v", g.v, Access::Write)?;
        if self.op.device.is_simulated() {
            return crate::libs::solver::sim::gesvdj_batched(
                &self.op,
                rec,
                g,
                (lda as usize, ldu as usize, ldv as usize),
                self.jacobi,
            );
        }
        let (h, _) = self.handle()?;
        let (a, s, u, v): (*mut c_void, *mut c_void, *mut c_void, *mut c_void) =
            (dptr(g.a)?, dptr(g.s)?, dptr(g.u)?, dptr(g.v)?);
        let info = OwnedJacobi::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let (mode, raw) = (calls::eig_mode(g.vectors), info.raw());
        let key = SizeKey {
            op: "gesvdjBatched",
            dtype: T::CUDA as u32,
            dims: [m.into(), n.into(), lda.into(), ldu.into(), ldv.into(), (i64::from(batch) << 1) | g.vectors as i64],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::gesvdj_batched_size(h, mode, m, n, a, lda, s, u, ldu, v, ldv, &mut lwork, raw, batch) }
                .check_status("cusolverDn<t>gesvdjBatched_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvdjBatched",
            g.batch,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion, alive until the
                // op resolved); `a`, `s`, `u`, `v` cover `batch` of their validated shapes and are
                // distinct; the workspace holds `lwork` elements; `info` holds `batch` words.
                unsafe {
                    T::gesvdj_batched(
                        h,
                        mode,
                        m,
                        n,
                        a,
                        lda,
                        s,
                        u,
                        ldu,
                        v,
                        ldv,
                        work.device,
                        lwork,
                        pin.info(),
                        raw,
                        batch,
                    )
                }
                .check_status("cusolverDn<t>gesvdjBatched")
            },
            move || drop(info),
        )
    }

    /// Batched Jacobi eigen decomposition (see [`SyevjBatched`]).
    pub fn syevj_batched<T: SolverElement>(&mut self, e: &SyevjBatched<'_, T>) -> Result<Completion<()>> {
        let n = jacobi_dim("n", e.n)?;
        let batch = check::dim("batch", e.batch, false)?;
        let (lda, _) = strided(("a", "lda", "stride"), e.a, e.n, e.n, e.lda, None, e.batch)?;
        check::covers("w", e.w, e.n.checked_mul(e.batch), "n * batch eigenvalues")?;
        check::distinct("w", e.a, e.w)?;
        let mut rec = self.op.recorder("syevjBatched");
        record(&mut rec, "a", e.a, Access::ReadWrite)?;
        record(&mut rec, "w", e.w, Access::Write)?;
        if self.op.device.is_simulated() {
            return crate::libs::solver::sim::syevj_batched(&self.op, rec, e, lda as usize, self.jacobi);
        }
        let (h, _) = self.handle()?;
        let (a, w): (*mut c_void, *mut c_void) = (dptr(e.a)?, dptr(e.w)?);
        let (mode, u) = (calls::eig_mode(e.vectors), calls::fill(e.fill));
        let info = OwnedSyevj::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let raw = info.raw();
        let key = SizeKey {
            op: "syevjBatched",
            dtype: T::CUDA as u32,
            dims: [n.into(), lda.into(), e.vectors as i64, e.fill as i64, batch.into(), 0],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::syevj_batched_size(h, mode, u, n, a, lda, w, &mut lwork, raw, batch) }
                .check_status("cusolverDn<t>syevjBatched_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "syevjBatched",
            e.batch,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion); `a` and `w`
                // cover `batch` of their validated shapes and are distinct; the workspace holds
                // `lwork` elements; `info` holds `batch` words.
                unsafe { T::syevj_batched(h, mode, u, n, a, lda, w, work.device, lwork, pin.info(), raw, batch) }
                    .check_status("cusolverDn<t>syevjBatched")
            },
            move || drop(info),
        )
    }
}
