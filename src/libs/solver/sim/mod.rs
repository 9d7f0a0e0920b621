//! The simulator's cuSOLVER: every dense op (and the sparse direct solves) computed on the
//! host, as a simulated kernel on the op's stream under the uses the op declared.
//!
//! All four element types compute in complex `f64` ([`linalg`]), each result rounded to the
//! element type once when stored. The algorithms are plain loops, not cuSOLVER's: Cholesky, LU
//! with LAPACK's partial pivoting (pivots 1-based, as cuSOLVER writes them), Householder QR
//! with LAPACK's reflector conventions (`tau`, `v[0] = 1`), cyclic Jacobi for every symmetric
//! or Hermitian eigenproblem and one-sided Jacobi for every SVD. Eigenvalues come out
//! ascending, singular values descending; eigen and singular vectors may differ from the
//! GPU's by a sign (a phase, for complex types) per vector. Numerical failures are reported
//! as the GPU path reports them: the same [`Error::Numerical`] with the same
//! [`NumericalFailure`] and index.

pub(crate) mod linalg;

use self::linalg::{Lower, Mat, C};
use super::batched::{GesvdjBatched, GetrfBatched, GetrsBatched, PotrsBatched, SyevjBatched};
use super::eigen::{Gesvd, Gesvdj, JacobiReport};
use super::factor::{Getrf, Getrs, Potrf, PotrfBatched, Potrs};
use super::qr::{Geqrf, Orgqr, Ormqr};
use super::symmetric::{Generalized, Potri, Syevj, Sygvd};
use super::{Fill, JacobiSettings, Side, SolverElement, Trans};
use crate::completion::Completion;
use crate::error::{Error, NumericalFailure, Result};
use crate::libs::OpStream;
use crate::memory::Complex;
use crate::recorder::LaunchRecorder;

/// An element type the simulated solvers compute with: converted to and from complex `f64`.
pub(crate) trait Scalar: Copy + Send + Sync + 'static {
    /// The precision of the type (its machine epsilon): the Jacobi methods' default tolerance.
    const EPS: f64;
    fn to_c(self) -> C;
    /// Rounds `c` to the type (a real type keeps the real part).
    fn from_c(c: C) -> Self;
}

impl Scalar for f32 {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> C {
        C::real(self.into())
    }
    fn from_c(c: C) -> f32 {
        c.re as f32
    }
}
impl Scalar for f64 {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> C {
        C::real(self)
    }
    fn from_c(c: C) -> f64 {
        c.re
    }
}
impl Scalar for Complex<f32> {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> C {
        C::new(self.re.into(), self.im.into())
    }
    fn from_c(c: C) -> Self {
        Complex::new(c.re as f32, c.im as f32)
    }
}
impl Scalar for Complex<f64> {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> C {
        C::new(self.re, self.im)
    }
    fn from_c(c: C) -> Self {
        Complex::new(c.re, c.im)
    }
}

/// The `rows x cols` matrix at `off` in `data`, leading dimension `ld`.
pub(crate) fn load<T: Scalar>(data: &[T], off: usize, rows: usize, cols: usize, ld: usize) -> Mat {
    let mut m = Mat::zeros(rows, cols);
    for j in 0..cols {
        for i in 0..rows {
            m.data[i + j * rows] = data[off + i + j * ld].to_c();
        }
    }
    m
}

/// Stores `m` at `off` in `data`, leading dimension `ld`.
pub(crate) fn store<T: Scalar>(data: &mut [T], off: usize, ld: usize, m: &Mat) {
    for j in 0..m.cols {
        for i in 0..m.rows {
            data[off + i + j * ld] = T::from_c(m.at(i, j));
        }
    }
}

/// Stores the `lower` (or upper) triangle of `m`, the diagonal included, leaving the other.
fn store_triangle<T: Scalar>(data: &mut [T], off: usize, ld: usize, m: &Mat, lower: Lower) {
    for j in 0..m.cols {
        let rows = if lower { j..m.rows } else { 0..j + 1 };
        for i in rows {
            data[off + i + j * ld] = T::from_c(m.at(i, j));
        }
    }
}

fn store_real<R: Scalar>(data: &mut [R], off: usize, values: &[f64]) {
    for (o, &v) in data[off..off + values.len()].iter_mut().zip(values) {
        *o = R::from_c(C::real(v));
    }
}

fn lower(fill: Fill) -> Lower {
    fill == Fill::Lower
}

/// The op's failures as the GPU path reports them (nothing: `Ok`).
fn outcome(op: &'static str, batch: usize, failures: Vec<NumericalFailure>) -> Result<()> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Numerical { op, batch, failures })
    }
}

/// Runs `kernel` as the op's simulated kernel; its error becomes the completion's.
fn run<V: Send + 'static>(
    op: &OpStream,
    rec: LaunchRecorder,
    kernel: impl FnOnce() -> Result<V> + Send + 'static,
) -> Result<Completion<V>> {
    Ok(op.run_sim(rec, Vec::new(), kernel)?.try_map(|r| r))
}

/// A Jacobi method's tolerance: the settings', or the type's precision for 0.
fn tolerance<T: Scalar>(j: JacobiSettings) -> f64 {
    if j.tolerance > 0.0 {
        j.tolerance
    } else {
        T::EPS
    }
}

pub(super) fn potrf<T: SolverElement>(
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

pub(super) fn potrf_batched<T: SolverElement>(
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

pub(super) fn potrs<T: SolverElement>(
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
pub(super) fn potrs_batched<T: SolverElement>(
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

pub(super) fn potri<T: SolverElement>(
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

pub(super) fn getrf<T: SolverElement>(
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

pub(super) fn getrs<T: SolverElement>(
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

pub(super) fn getrf_batched<T: SolverElement>(
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

pub(super) fn getrs_batched<T: SolverElement>(
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

pub(super) fn geqrf<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Geqrf<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (m, n, a, tau) = (g.m, g.n, g.a.sim_data()?, g.tau.sim_data()?);
    run(op, rec, move || {
        let mut f = load(&a.read(), 0, m, n, lda);
        let t = linalg::geqrf(&mut f);
        store(&mut a.lock(), 0, lda, &f);
        for (o, v) in tau.lock().iter_mut().zip(&t) {
            *o = T::from_c(*v);
        }
        Ok(())
    })
}

fn load_tau<T: Scalar>(data: &[T], k: usize) -> Vec<C> {
    data[..k].iter().map(|v| v.to_c()).collect()
}

pub(super) fn orgqr<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    o: &Orgqr<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (m, n, k, a, tau) = (o.m, o.n, o.k, o.a.sim_data()?, o.tau.sim_data()?);
    run(op, rec, move || {
        let f = load(&a.read(), 0, m, n, lda);
        let t = load_tau(&tau.read(), k);
        let q = linalg::orgqr(&f, n, &t);
        store(&mut a.lock(), 0, lda, &q);
        Ok(())
    })
}

pub(super) fn ormqr<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    o: &Ormqr<'_, T>,
    lda: usize,
    ldc: usize,
) -> Result<Completion<()>> {
    let (m, n, k, left, adjoint) = (o.m, o.n, o.k, o.side == Side::Left, o.trans != Trans::No);
    let order = if left { m } else { n };
    let (a, tau, c) = (o.a.sim_data()?, o.tau.sim_data()?, o.c.sim_data()?);
    run(op, rec, move || {
        let f = load(&a.read(), 0, order, k, lda);
        let t = load_tau(&tau.read(), k);
        let mut x = load(&c.read(), 0, m, n, ldc);
        linalg::ormqr(&f, order, &t, left, adjoint, &mut x);
        store(&mut c.lock(), 0, ldc, &x);
        Ok(())
    })
}

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

pub(super) fn syevd<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    e: &super::Syevd<'_, T>,
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

pub(super) fn syevj<T: SolverElement>(
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

pub(super) fn syevj_batched<T: SolverElement>(
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

pub(super) fn sygvd<T: SolverElement>(
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

pub(super) fn gesvd<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gesvd<'_, T>,
    (lda, ldu, ldvt): (usize, usize, usize),
) -> Result<Completion<()>> {
    let (m, n, vectors) = (g.m, g.n, g.vectors);
    let (a, s, u, vt) = (g.a.sim_data()?, g.s.sim_data()?, g.u.sim_data()?, g.vt.sim_data()?);
    run(op, rec, move || {
        let am = load(&a.read(), 0, m, n, lda);
        let (values, um, vm, _) = linalg::svd(&am, f64::EPSILON, 100);
        store_real(&mut s.lock(), 0, &values);
        if vectors {
            store(&mut u.lock(), 0, ldu, &linalg::square(&um));
            store(&mut vt.lock(), 0, ldvt, &vm.adjoint());
        }
        Ok(())
    })
}

pub(super) fn gesvdj<T: SolverElement>(
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

pub(super) fn gesvdj_batched<T: SolverElement>(
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

/// The sparse direct solves: `A x = b` for the `n x n` CSR matrix, by QR or (`cholesky`) by
/// Cholesky of the Hermitian matrix its lower triangle holds. `Ok(Some(row))`: singular to
/// `tol` at `row` (0-based), `x` not written.
pub(crate) fn sparse_solve<T: Scalar>(
    n: usize,
    (offsets, indices, values): (&[i32], &[i32], &[T]),
    b: &[T],
    tol: f64,
    cholesky: bool,
) -> std::result::Result<Vec<T>, usize> {
    let mut a = Mat::zeros(n, n);
    for row in 0..n {
        let (start, end) = (offsets[row].max(0) as usize, offsets[row + 1].max(0) as usize);
        for k in start..end.min(indices.len()).min(values.len()) {
            let col = indices[k];
            if col < 0 || col as usize >= n || (cholesky && col as usize > row) {
                continue;
            }
            *a.at_mut(row, col as usize) += values[k].to_c();
        }
    }
    let mut x = load(b, 0, n, 1, n);
    if cholesky {
        let l = linalg::cholesky(&linalg::hermitian(&a, true)).map_err(|minor| minor - 1)?;
        if let Some(j) = (0..n).find(|&j| l.at(j, j).re <= tol) {
            return Err(j);
        }
        linalg::cholesky_solve(&l, &mut x);
    } else {
        let tau = linalg::geqrf(&mut a);
        if let Some(j) = (0..n).find(|&j| a.at(j, j).abs() <= tol) {
            return Err(j);
        }
        linalg::ormqr(&a, n, &tau, true, true, &mut x);
        linalg::solve_upper(&a, &mut x, false);
    }
    Ok(x.data.iter().map(|&v| T::from_c(v)).collect())
}
