//! The simulated eigen and SVD ops: `syevd`, `syevj` (single and batched), the generalized
//! `sygvd`, the selected eigenvalues of `syevdx`, `gesvd` (full and economy) and `gesvdj`
//! (single and batched), all by the Jacobi methods of
//! [`linalg`](super::linalg).

use super::linalg::{self, Lower};
use super::{load, lower, outcome, run, store, store_real, store_triangle, tolerance};
use crate::completion::Completion;
use crate::error::{Error, NumericalFailure, Result};
use crate::libs::solver::batched::{GesvdaBatched, GesvdjBatched, SyevjBatched};
use crate::libs::solver::eigen::{Gesvd, Gesvdj, JacobiReport, Syevdx};
use crate::libs::solver::general::{Geev, GeevComplexW};
use crate::libs::solver::is_complex;
use crate::libs::solver::randomized::Gesvdr;
use crate::libs::solver::symmetric::{Generalized, Syevj, Sygvd};
use crate::libs::solver::{JacobiSettings, SolverElement, SolverReal};
use crate::libs::OpStream;
use crate::recorder::LaunchRecorder;

/// A Hermitian eigen decomposition of the `n x n` matrix at `off`: eigenvalues into `w` at
/// `woff`, eigenvectors over the matrix with `vectors`. Returns the Jacobi outcome.
#[allow(clippy::too_many_arguments)]
fn eig_one<T: SolverElement>(
    a: &crate::memory::SimMem<T>,
    w: &crate::memory::SimMem<T::Real>,
    (off, woff): (usize, usize),
    n: usize,
    lda: usize,
    lo: Lower,
    vectors: bool,
    (tol, sweeps): (f64, u32),
) -> linalg::Jacobi {
    let h = linalg::hermitian(&load(&a.read(), off, n, n, lda), lo);
    let (values, v, j) = linalg::eigh(h, vectors, tol, sweeps);
    store_real(&mut w.lock(), woff, &values);
    if let Some(v) = v {
        store(&mut a.lock(), off, lda, &v);
    }
    j
}

pub(in crate::libs::solver) fn syevd<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    e: &crate::libs::solver::Syevd<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (n, lo, vectors, a, w) = (e.n, lower(e.fill), e.vectors, e.a.sim_data()?, e.w.sim_data()?);
    run(op, rec, move || {
        // Converged as far as f64 goes, whatever the type: the decomposition LAPACK's would be.
        let j = eig_one::<T>(&a, &w, (0, 0), n, lda, lo, vectors, (f64::EPSILON, 100));
        let failures = if j.converged { vec![] } else { vec![NumericalFailure::NotConverged { matrix: 0, count: n }] };
        outcome("syevd", 1, failures)
    })
}

pub(in crate::libs::solver) fn syevj<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    e: &Syevj<'_, T>,
    lda: usize,
    settings: JacobiSettings,
) -> Result<Completion<JacobiReport>> {
    let (n, lo, vectors, a, w) = (e.n, lower(e.fill), e.vectors, e.a.sim_data()?, e.w.sim_data()?);
    let limits = (tolerance::<T>(settings), settings.max_sweeps);
    run(op, rec, move || {
        let j = eig_one::<T>(&a, &w, (0, 0), n, lda, lo, vectors, limits);
        // cuSOLVER: info = n + 1 when the sweeps ran out before the tolerance was met.
        if !j.converged {
            return Err(Error::Numerical {
                op: "syevj",
                batch: 1,
                failures: vec![NumericalFailure::NotConverged { matrix: 0, count: n + 1 }],
            });
        }
        Ok(JacobiReport { residual: j.residual, sweeps: j.sweeps })
    })
}

pub(in crate::libs::solver) fn syevj_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    e: &SyevjBatched<'_, T>,
    lda: usize,
    settings: JacobiSettings,
) -> Result<Completion<()>> {
    let (n, batch, lo, vectors, a, w) = (e.n, e.batch, lower(e.fill), e.vectors, e.a.sim_data()?, e.w.sim_data()?);
    let limits = (tolerance::<T>(settings), settings.max_sweeps);
    run(op, rec, move || {
        let mut failures = Vec::new();
        for i in 0..batch {
            let j = eig_one::<T>(&a, &w, (i * lda * n, i * n), n, lda, lo, vectors, limits);
            if !j.converged {
                failures.push(NumericalFailure::NotConverged { matrix: i, count: n + 1 });
            }
        }
        outcome("syevjBatched", batch, failures)
    })
}

pub(in crate::libs::solver) fn sygvd<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Sygvd<'_, T>,
    lda: usize,
    ldb: usize,
) -> Result<Completion<()>> {
    let (n, lo, vectors, problem) = (g.n, lower(g.fill), g.vectors, g.problem);
    let (a, b, w) = (g.a.sim_data()?, g.b.sim_data()?, g.w.sim_data()?);
    run(op, rec, move || {
        let bm = load(&b.read(), 0, n, n, ldb);
        let l = match linalg::cholesky(&linalg::hermitian(&bm, lo)) {
            Ok(l) => l,
            Err(minor) => {
                return outcome("sygvd", 1, vec![NumericalFailure::NotPositiveDefinite { matrix: 0, minor }]);
            }
        };
        let mut factor = bm;
        linalg::put_factor(&mut factor, &l, lo);
        store_triangle(&mut b.lock(), 0, ldb, &factor, lo);
        let am = linalg::hermitian(&load(&a.read(), 0, n, n, lda), lo);
        let c = match problem {
            Generalized::Ax => {
                // L⁻¹ A L⁻ᴴ = L⁻¹ (L⁻¹ A)ᴴ, A being Hermitian.
                let mut x = am;
                linalg::solve_lower(&l, &mut x, false);
                let mut c = x.adjoint();
                linalg::solve_lower(&l, &mut c, false);
                c
            }
            Generalized::Abx | Generalized::Bax => l.adjoint().mul(&am).mul(&l),
        };
        let (values, y, j) = linalg::eigh(linalg::hermitian(&c, true), vectors, f64::EPSILON, 100);
        store_real(&mut w.lock(), 0, &values);
        if let Some(y) = y {
            let z = match problem {
                Generalized::Ax | Generalized::Abx => {
                    let mut z = y;
                    linalg::solve_upper(&l.adjoint(), &mut z, false);
                    z
                }
                Generalized::Bax => l.mul(&y),
            };
            store(&mut a.lock(), 0, lda, &z);
        }
        let failures = if j.converged { vec![] } else { vec![NumericalFailure::NotConverged { matrix: 0, count: n }] };
        outcome("sygvd", 1, failures)
    })
}

pub(in crate::libs::solver) fn gesvd<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gesvd<'_, T>,
    thin: bool,
    (lda, ldu, ldvt): (usize, usize, usize),
) -> Result<Completion<()>> {
    let (m, n, vectors) = (g.m, g.n, g.vectors);
    let (a, s, u, vt) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.vt.sim_data()?);
    run(op, rec, move || {
        let am = load(&a.read(), 0, m, n, lda);
        let (values, um, vm, _) = linalg::svd(&am, f64::EPSILON, 100);
        store_real(&mut s.lock(), 0, &values);
        if vectors {
            // `um` is the thin `m x n` factor (`m >= n`); the full one completes its basis.
            store(&mut u.lock(), 0, ldu, &if thin { um } else { linalg::square(&um) });
            store(&mut vt.lock(), 0, ldvt, &vm.adjoint());
        }
        Ok(())
    })
}

pub(in crate::libs::solver) fn gesvdj<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gesvdj<'_, T>,
    (lda, ldu, ldv): (usize, usize, usize),
    settings: JacobiSettings,
) -> Result<Completion<JacobiReport>> {
    let (m, n, vectors, p) = (g.m, g.n, g.vectors, g.m.min(g.n));
    let (a, s, u, v) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.v.sim_data()?);
    let (tol, sweeps) = (tolerance::<T>(settings), settings.max_sweeps);
    run(op, rec, move || {
        let am = load(&a.read(), 0, m, n, lda);
        let (values, um, vm, j) = linalg::svd(&am, tol, sweeps);
        store_real(&mut s.lock(), 0, &values);
        if vectors {
            store(&mut u.lock(), 0, ldu, &um);
            store(&mut v.lock(), 0, ldv, &vm);
        }
        // cuSOLVER: info = min(m, n) + 1 when the sweeps ran out before the tolerance was met.
        if !j.converged {
            return Err(Error::Numerical {
                op: "gesvdj",
                batch: 1,
                failures: vec![NumericalFailure::NotConverged { matrix: 0, count: p + 1 }],
            });
        }
        Ok(JacobiReport { residual: j.residual, sweeps: j.sweeps })
    })
}

pub(in crate::libs::solver) fn gesvdj_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &GesvdjBatched<'_, T>,
    (lda, ldu, ldv): (usize, usize, usize),
    settings: JacobiSettings,
) -> Result<Completion<()>> {
    let (m, n, batch, vectors, p) = (g.m, g.n, g.batch, g.vectors, g.m.min(g.n));
    let (a, s, u, v) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.v.sim_data()?);
    let (tol, sweeps) = (tolerance::<T>(settings), settings.max_sweeps);
    run(op, rec, move || {
        let mut failures = Vec::new();
        for i in 0..batch {
            let am = load(&a.read(), i * lda * n, m, n, lda);
            let (values, um, vm, j) = linalg::svd(&am, tol, sweeps);
            store_real(&mut s.lock(), i * p, &values);
            if vectors {
                store(&mut u.lock(), i * ldu * m, ldu, &linalg::square(&um));
                store(&mut v.lock(), i * ldv * n, ldv, &linalg::square(&vm));
            }
            if !j.converged {
                failures.push(NumericalFailure::NotConverged { matrix: i, count: p + 1 });
            }
        }
        outcome("gesvdjBatched", batch, failures)
    })
}

/// The eigenvalues `syevdx` selects, resolved by the op: the ascending positions
/// `from..to`, or the values in `(low, high]`.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::solver) enum Select {
    Indices(usize, usize),
    Values(f64, f64),
}

pub(in crate::libs::solver) fn syevdx<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    e: &Syevdx<'_, T>,
    lda: usize,
    select: Select,
) -> Result<Completion<usize>> {
    let (n, lo, vectors, a, w) = (e.n, lower(e.fill), e.vectors, e.a.sim_data()?, e.w.sim_data()?);
    run(op, rec, move || {
        let h = linalg::hermitian(&load(&a.read(), 0, n, n, lda), lo);
        let (values, v, j) = linalg::eigh(h, vectors, f64::EPSILON, 100);
        if !j.converged {
            return outcome("syevdx", 1, vec![NumericalFailure::NotConverged { matrix: 0, count: n }]).map(|()| 0);
        }
        let chosen: Vec<usize> = match select {
            Select::Indices(from, to) => (from..to.min(n)).collect(),
            Select::Values(low, high) => (0..n).filter(|&i| values[i] > low && values[i] <= high).collect(),
        };
        let picked: Vec<f64> = chosen.iter().map(|&i| values[i]).collect();
        store_real(&mut w.lock(), 0, &picked);
        if let Some(v) = v {
            let mut out = linalg::Mat::zeros(n, chosen.len());
            for (k, &i) in chosen.iter().enumerate() {
                for r in 0..n {
                    *out.at_mut(r, k) = v.at(r, i);
                }
            }
            store(&mut a.lock(), 0, lda, &out);
        }
        Ok(chosen.len())
    })
}

pub(in crate::libs::solver) fn geev<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Geev<'_, T>,
    lda: usize,
    ldvr: usize,
) -> Result<Completion<()>> {
    let (n, vectors, complex) = (g.n, g.vectors, is_complex::<T>());
    let (a, w, vr) = (g.a.sim_data()?, g.w.sim_data()?, g.vr.sim_data()?);
    run(op, rec, move || {
        let am = load(&a.read(), 0, n, n, lda);
        let Some((values, v)) = linalg::eig(&am, vectors) else {
            return outcome("geev", 1, vec![NumericalFailure::NotConverged { matrix: 0, count: n }]);
        };
        if complex {
            let mut wm = linalg::Mat::zeros(n, 1);
            wm.data.copy_from_slice(&values);
            store(&mut w.lock(), 0, n, &wm);
            if let Some(v) = v {
                store(&mut vr.lock(), 0, ldvr, &v);
            }
            return Ok(());
        }
        let (pairs, vm) = real_layout(&am, &values, v.as_ref());
        let mut wm = linalg::Mat::zeros(2 * n, 1);
        for (slot, &(re, im)) in pairs.iter().enumerate() {
            wm.data[slot] = linalg::C::real(re);
            wm.data[n + slot] = linalg::C::real(im);
        }
        store(&mut w.lock(), 0, 2 * n, &wm);
        if vectors {
            store(&mut vr.lock(), 0, ldvr, &vm);
        }
        Ok(())
    })
}

/// `geev` of a real matrix with complex `W`: the eigenvalues in LAPACK's order as complex
/// numbers (both of each conjugate pair), the eigenvectors as the real layout has them.
pub(in crate::libs::solver) fn geev_complex_w<T: SolverReal>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &GeevComplexW<'_, T>,
    lda: usize,
    ldvr: usize,
) -> Result<Completion<()>>
where
    crate::memory::Complex<T>: SolverElement,
{
    let (n, vectors) = (g.n, g.vectors);
    let (a, w, vr) = (g.a.sim_data()?, g.w.sim_data()?, g.vr.sim_data()?);
    run(op, rec, move || {
        let am = load(&a.read(), 0, n, n, lda);
        let Some((values, v)) = linalg::eig(&am, vectors) else {
            return outcome("geev", 1, vec![NumericalFailure::NotConverged { matrix: 0, count: n }]);
        };
        let (pairs, vm) = real_layout(&am, &values, v.as_ref());
        let mut wm = linalg::Mat::zeros(n, 1);
        for (slot, &(re, im)) in pairs.iter().enumerate() {
            wm.data[slot] = linalg::C::new(re, im);
        }
        store(&mut w.lock(), 0, n, &wm);
        if vectors {
            store(&mut vr.lock(), 0, ldvr, &vm);
        }
        Ok(())
    })
}

/// The eigenvalues `values` (with eigenvectors `v`) of the real `am` in LAPACK's real layout:
/// each eigenvalue with a positive imaginary part followed by its conjugate, the rest real to
/// rounding; the `(re, im)` of each slot, and the eigenvector matrix (a pair's real part in
/// its first column, imaginary part in its second).
fn real_layout(am: &linalg::Mat, values: &[linalg::C], v: Option<&linalg::Mat>) -> (Vec<(f64, f64)>, linalg::Mat) {
    let n = values.len();
    let scale = am.data.iter().map(|c| c.norm2()).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    let tol = 1e3 * f64::EPSILON * scale * n as f64;
    let mut used = vec![false; n];
    let mut order: Vec<(usize, i8)> = Vec::with_capacity(n);
    for k in 0..n {
        if used[k] {
            continue;
        }
        used[k] = true;
        if values[k].im.abs() <= tol {
            order.push((k, 0));
            continue;
        }
        let want = values[k].conj();
        let partner =
            (0..n).filter(|&j| !used[j]).min_by(|&p, &q| (values[p] - want).abs().total_cmp(&(values[q] - want).abs()));
        let (pos, _neg) = match partner {
            Some(j) if values[k].im > 0.0 => (k, j),
            Some(j) => (j, k),
            None => {
                order.push((k, 0));
                continue;
            }
        };
        if let Some(j) = partner {
            used[j] = true;
        }
        order.push((pos, 1));
        order.push((pos, -1));
    }
    let mut pairs = Vec::with_capacity(n);
    let mut vm = linalg::Mat::zeros(n, n);
    for (slot, &(k, sign)) in order.iter().enumerate() {
        let lam = values[k];
        pairs.push((lam.re, if sign == 0 { 0.0 } else { f64::from(sign) * lam.im.abs() }));
        if let Some(v) = v {
            for r in 0..n {
                let x = v.at(r, k);
                *vm.at_mut(r, slot) = linalg::C::real(match sign {
                    -1 => x.im,
                    _ => x.re,
                });
            }
        }
    }
    (pairs, vm)
}

pub(in crate::libs::solver) fn gesvdr<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gesvdr<'_, T>,
    (lda, ldu, ldv): (usize, usize, usize),
) -> Result<Completion<()>> {
    let (m, n, k, vectors) = (g.m, g.n, g.k, g.vectors);
    let (a, s, u, v) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.v.sim_data()?);
    run(op, rec, move || {
        let am = load(&a.read(), 0, m, n, lda);
        let (values, um, vm, _) = linalg::svd(&am, f64::EPSILON, 100);
        store_real(&mut s.lock(), 0, &values[..k]);
        if vectors {
            let first = |x: &linalg::Mat| {
                let mut out = linalg::Mat::zeros(x.rows, k);
                out.data.copy_from_slice(&x.data[..x.rows * k]);
                out
            };
            store(&mut u.lock(), 0, ldu, &first(&um));
            store(&mut v.lock(), 0, ldv, &first(&vm));
        }
        Ok(())
    })
}

pub(in crate::libs::solver) fn gesvda_batched<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &GesvdaBatched<'_, T>,
    (lda, ldu, ldv): (usize, usize, usize),
    [sa, ss, su, sv]: [usize; 4],
) -> Result<Completion<()>> {
    let (m, n, rank, batch, vectors) = (g.m, g.n, g.rank, g.batch, g.vectors);
    let (a, s, u, v) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.v.sim_data()?);
    run(op, rec, move || {
        for i in 0..batch {
            let am = load(&a.read(), i * sa, m, n, lda);
            let (values, um, vm, _) = linalg::svd(&am, f64::EPSILON, 100);
            store_real(&mut s.lock(), i * ss, &values[..rank]);
            if vectors {
                let first = |x: &linalg::Mat| {
                    let mut out = linalg::Mat::zeros(x.rows, rank);
                    out.data.copy_from_slice(&x.data[..x.rows * rank]);
                    out
                };
                store(&mut u.lock(), i * su, ldu, &first(&um));
                store(&mut v.lock(), i * sv, ldv, &first(&vm));
            }
        }
        Ok(())
    })
}
