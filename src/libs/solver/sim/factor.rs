//! The simulated Cholesky, LU and triangular ops: `potrf` (single and batched), `potrs`,
//! `potri`, `getrf` and `getrs` (single and batched), `trtri`, and the symmetric indefinite
//! `sytrf`/`sytrs`, their numerical failures reported as the GPU path does.

use super::linalg::{self, Lower, Mat};
use super::{load, lower, outcome, run, store, store_triangle, Scalar};
use crate::completion::Completion;
use crate::error::{NumericalFailure, Result};
use crate::libs::solver::batched::{GetrfBatched, GetrsBatched, PotrsBatched};
use crate::libs::solver::factor::{Getrf, Getrs, Potrf, PotrfBatched, Potrs};
use crate::libs::solver::indefinite::{Sytrf, Sytrs};
use crate::libs::solver::symmetric::Potri;
use crate::libs::solver::triangular::Trtri;
use crate::libs::solver::{SolverElement, Trans};
use crate::libs::OpStream;
use crate::recorder::LaunchRecorder;

pub(in crate::libs::solver) fn potrf<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    p: &Potrf<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (n, lo, a) = (p.n, lower(p.fill), p.a.sim_data()?);
    run(op, rec, move || {
        let m = load(&a.read(), 0, n, n, lda);
        let fail = cholesky_into::<T>(&mut a.lock(), 0, lda, m, lo);
        outcome(
            "potrf",
            1,
            fail.map(|minor| NumericalFailure::NotPositiveDefinite { matrix: 0, minor }).into_iter().collect(),
        )
    })
}

/// Factors the Hermitian matrix whose `lo` triangle `m` holds and writes the factor into that
/// triangle at `off`; returns the failing minor.
fn cholesky_into<T: Scalar>(data: &mut [T], off: usize, ld: usize, m: Mat, lo: Lower) -> Option<usize> {
    match linalg::cholesky(&linalg::hermitian(&m, lo)) {
        Ok(l) => {
            let mut out = m;
            linalg::put_factor(&mut out, &l, lo);
            store_triangle(data, off, ld, &out, lo);
            None
        }
        Err(minor) => Some(minor),
    }
}

pub(in crate::libs::solver) fn potrf_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    p: &PotrfBatched<'_, T>,
    lda: usize,
    stride: usize,
) -> Result<Completion<()>> {
    let (n, batch, lo, a) = (p.n, p.batch, lower(p.fill), p.a.sim_data()?);
    run(op, rec, move || {
        let mut failures = Vec::new();
        for i in 0..batch {
            let m = load(&a.read(), i * stride, n, n, lda);
            if let Some(minor) = cholesky_into::<T>(&mut a.lock(), i * stride, lda, m, lo) {
                failures.push(NumericalFailure::NotPositiveDefinite { matrix: i, minor });
            }
        }
        outcome("potrfBatched", batch, failures)
    })
}

pub(in crate::libs::solver) fn potrs<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    p: &Potrs<'_, T>,
    lda: usize,
    ldb: usize,
) -> Result<Completion<()>> {
    let (n, nrhs, lo, a, b) = (p.n, p.nrhs, lower(p.fill), p.a.sim_data()?, p.b.sim_data()?);
    run(op, rec, move || {
        let l = linalg::factor_lower(&load(&a.read(), 0, n, n, lda), lo);
        let mut x = load(&b.read(), 0, n, nrhs, ldb);
        linalg::cholesky_solve(&l, &mut x);
        store(&mut b.lock(), 0, ldb, &x);
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) fn potrs_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    p: &PotrsBatched<'_, T>,
    (lda, sa): (usize, usize),
    (ldb, sb): (usize, usize),
) -> Result<Completion<()>> {
    let (n, batch, lo, a, b) = (p.n, p.batch, lower(p.fill), p.a.sim_data()?, p.b.sim_data()?);
    run(op, rec, move || {
        for i in 0..batch {
            let l = linalg::factor_lower(&load(&a.read(), i * sa, n, n, lda), lo);
            let mut x = load(&b.read(), i * sb, n, 1, ldb);
            linalg::cholesky_solve(&l, &mut x);
            store(&mut b.lock(), i * sb, ldb, &x);
        }
        Ok(())
    })
}

pub(in crate::libs::solver) fn potri<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    p: &Potri<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (n, lo, a) = (p.n, lower(p.fill), p.a.sim_data()?);
    run(op, rec, move || {
        let l = linalg::factor_lower(&load(&a.read(), 0, n, n, lda), lo);
        if let Some(j) = (0..n).find(|&j| l.at(j, j).is_zero()) {
            return outcome("potri", 1, vec![NumericalFailure::Singular { matrix: 0, index: j + 1 }]);
        }
        let mut linv = Mat::identity(n, n);
        linalg::solve_lower(&l, &mut linv, false);
        let inv = linv.adjoint().mul(&linv);
        store_triangle(&mut a.lock(), 0, lda, &inv, lo);
        Ok(())
    })
}

pub(in crate::libs::solver) fn getrf<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Getrf<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (m, n, a) = (g.m, g.n, g.a.sim_data()?);
    let ipiv = g.ipiv.map(|p| p.sim_data()).transpose()?;
    run(op, rec, move || {
        let mut f = load(&a.read(), 0, m, n, lda);
        let (piv, info) = linalg::lu(&mut f, ipiv.is_some());
        store(&mut a.lock(), 0, lda, &f);
        if let Some(ipiv) = ipiv {
            for (o, p) in ipiv.lock().iter_mut().zip(&piv) {
                *o = *p as i64 + 1;
            }
        }
        outcome("getrf", 1, info.map(|index| NumericalFailure::Singular { matrix: 0, index }).into_iter().collect())
    })
}

/// 1-based pivots as 0-based rows; one out of range swaps nothing.
fn pivots<I: Copy + TryInto<usize>>(p: &[I]) -> Vec<usize> {
    p.iter().map(|&v| v.try_into().ok().and_then(|v: usize| v.checked_sub(1)).unwrap_or(usize::MAX)).collect()
}

fn lu_op(t: Trans) -> linalg::Op {
    match t {
        Trans::No => linalg::Op::No,
        Trans::Yes => linalg::Op::Trans,
        Trans::Conj => linalg::Op::Conj,
    }
}

pub(in crate::libs::solver) fn getrs<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Getrs<'_, T>,
    lda: usize,
    ldb: usize,
) -> Result<Completion<()>> {
    let (n, nrhs, t, a, b) = (g.n, g.nrhs, lu_op(g.trans), g.a.sim_data()?, g.b.sim_data()?);
    let ipiv = g.ipiv.map(|p| p.sim_data()).transpose()?;
    run(op, rec, move || {
        let f = load(&a.read(), 0, n, n, lda);
        let piv = ipiv.map(|p| pivots(&p.read()[..n]));
        let mut x = load(&b.read(), 0, n, nrhs, ldb);
        linalg::lu_solve(&f, piv.as_deref(), t, &mut x);
        store(&mut b.lock(), 0, ldb, &x);
        Ok(())
    })
}

pub(in crate::libs::solver) fn getrf_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &GetrfBatched<'_, T>,
    lda: usize,
    stride: usize,
) -> Result<Completion<()>> {
    let (n, batch, a) = (g.n, g.batch, g.a.sim_data()?);
    let ipiv = g.ipiv.map(|p| p.sim_data()).transpose()?;
    run(op, rec, move || {
        let mut failures = Vec::new();
        for i in 0..batch {
            let mut f = load(&a.read(), i * stride, n, n, lda);
            let (piv, info) = linalg::lu(&mut f, ipiv.is_some());
            store(&mut a.lock(), i * stride, lda, &f);
            if let Some(ipiv) = &ipiv {
                for (o, p) in ipiv.lock()[i * n..(i + 1) * n].iter_mut().zip(&piv) {
                    *o = *p as i32 + 1;
                }
            }
            if let Some(index) = info {
                failures.push(NumericalFailure::Singular { matrix: i, index });
            }
        }
        outcome("getrfBatched", batch, failures)
    })
}

pub(in crate::libs::solver) fn getrs_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &GetrsBatched<'_, T>,
    (lda, sa): (usize, usize),
    (ldb, sb): (usize, usize),
) -> Result<Completion<()>> {
    let (n, nrhs, batch, t) = (g.n, g.nrhs, g.batch, lu_op(g.trans));
    let (a, ipiv, b) = (g.a.sim_data()?, g.ipiv.sim_data()?, g.b.sim_data()?);
    run(op, rec, move || {
        for i in 0..batch {
            let f = load(&a.read(), i * sa, n, n, lda);
            let piv = pivots(&ipiv.read()[i * n..(i + 1) * n]);
            let mut x = load(&b.read(), i * sb, n, nrhs, ldb);
            linalg::lu_solve(&f, Some(&piv), t, &mut x);
            store(&mut b.lock(), i * sb, ldb, &x);
        }
        Ok(())
    })
}

pub(in crate::libs::solver) fn trtri<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    t: &Trtri<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (n, lo, unit, a) = (t.n, lower(t.fill), t.unit_diagonal, t.a.sim_data()?);
    run(op, rec, move || {
        let m = load(&a.read(), 0, n, n, lda);
        if !unit {
            if let Some(j) = (0..n).find(|&j| m.at(j, j).is_zero()) {
                return outcome("trtri", 1, vec![NumericalFailure::Singular { matrix: 0, index: j + 1 }]);
            }
        }
        // The solves read only the `lo` triangle (and the diagonal unless `unit`).
        let mut inv = Mat::identity(n, n);
        if lo {
            linalg::solve_lower(&m, &mut inv, unit);
        } else {
            linalg::solve_upper(&m, &mut inv, unit);
        }
        let mut data = a.lock();
        for j in 0..n {
            let rows = if lo { j..n } else { 0..j + 1 };
            for i in rows.filter(|&i| !(unit && i == j)) {
                data[i + j * lda] = T::from_c(inv.at(i, j));
            }
        }
        Ok(())
    })
}

pub(in crate::libs::solver) fn sytrf<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    f: &Sytrf<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (n, lo, a, ipiv) = (f.n, lower(f.fill), f.a.sim_data()?, f.ipiv.sim_data()?);
    run(op, rec, move || {
        let mut m = load(&a.read(), 0, n, n, lda);
        let (piv, info) = linalg::sytrf(&mut m, lo);
        store_triangle(&mut a.lock(), 0, lda, &m, lo);
        ipiv.lock()[..n].copy_from_slice(&piv);
        outcome("sytrf", 1, info.map(|index| NumericalFailure::Singular { matrix: 0, index }).into_iter().collect())
    })
}

pub(in crate::libs::solver) fn sytrs<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    s: &Sytrs<'_, T>,
    lda: usize,
    ldb: usize,
) -> Result<Completion<()>> {
    let (n, nrhs, lo) = (s.n, s.nrhs, lower(s.fill));
    let (a, ipiv, b) = (s.a.sim_data()?, s.ipiv.sim_data()?, s.b.sim_data()?);
    run(op, rec, move || {
        let f = load(&a.read(), 0, n, n, lda);
        let piv = ipiv.read()[..n].to_vec();
        let mut x = load(&b.read(), 0, n, nrhs, ldb);
        linalg::sytrs(&f, &piv, lo, &mut x);
        store(&mut b.lock(), 0, ldb, &x);
        Ok(())
    })
}
