//! The CPU reference of cuSOLVER's sparse direct solves in every element type, shared by the
//! simulator suite and the GPU suite: a random sparse system (general, or Hermitian positive
//! definite stored whole or as its lower triangle), its product with a known `x` in complex
//! `f64`, and [`check_every_type`], which solves it with every storage and reordering.

use crate::common::Rng;
use cusched::solver_sparse::{CsrSystem, Reorder, SparseSolverElement, Stored};
use cusched::{Complex, Device, Error, GpuRef, Handles, StreamId};

/// A complex number in `f64`, as `(re, im)`.
pub type Cf = (f64, f64);

fn mul(a: Cf, b: Cf) -> Cf {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// A CSR matrix: offsets, column indices, values (complex `f64`; real types keep `re`).
pub type Csr = (Vec<i32>, Vec<i32>, Vec<Cf>);

/// A random sparse matrix of order `n`, row-major dense: a band plus a few far entries (so
/// the reorderings have something to move), diagonally dominant with a positive real
/// diagonal, so it is nonsingular; `hermitian` makes it Hermitian (and so positive
/// definite), `complex` gives the entries imaginary parts.
pub fn sparse_dense(rng: &mut Rng, n: usize, complex: bool, hermitian: bool) -> Vec<Cf> {
    let mut d = vec![(0.0, 0.0); n * n];
    let entry = |rng: &mut Rng| {
        let im = if complex { rng.f32() as f64 - 0.5 } else { 0.0 };
        (-(rng.f32() as f64) - 0.1, im)
    };
    for r in 0..n {
        for c in 0..r {
            if r - c <= 2 || rng.below(5) == 0 {
                let v = entry(rng);
                d[r * n + c] = v;
                d[c * n + r] = if hermitian { (v.0, -v.1) } else { entry(rng) };
            }
        }
    }
    for r in 0..n {
        let off: f64 = (0..n).filter(|&c| c != r).map(|c| d[r * n + c].0.hypot(d[r * n + c].1)).sum();
        d[r * n + r] = (off + 1.0, 0.0);
    }
    d
}

/// The CSR arrays of the row-major dense `d`: every nonzero, or the lower triangle only.
pub fn to_csr(d: &[Cf], n: usize, lower_only: bool) -> Csr {
    let (mut off, mut idx, mut val) = (vec![0i32], Vec::new(), Vec::new());
    for r in 0..n {
        for c in 0..n {
            if d[r * n + c] != (0.0, 0.0) && (!lower_only || c <= r) {
                idx.push(c as i32);
                val.push(d[r * n + c]);
            }
        }
        off.push(idx.len() as i32);
    }
    (off, idx, val)
}

/// `A x` for the row-major dense `d`.
pub fn dense_apply(d: &[Cf], n: usize, x: &[Cf]) -> Vec<Cf> {
    (0..n).map(|r| (0..n).map(|c| mul(d[r * n + c], x[c])).fold((0.0, 0.0), |s, p| (s.0 + p.0, s.1 + p.1))).collect()
}

/// The element types as the reference takes them.
pub trait SpEl: SparseSolverElement + std::fmt::Debug {
    const COMPLEX: bool;
    /// The precision the solve computes in.
    const EPS: f64;
    /// The tolerance the solves are given: a pivot below it is singular.
    fn tol() -> Self::Real;
    fn from_c(c: Cf) -> Self;
    fn c(self) -> Cf;
}
impl SpEl for f32 {
    const COMPLEX: bool = false;
    const EPS: f64 = f32::EPSILON as f64;
    fn tol() -> f32 {
        1e-6
    }
    fn from_c(c: Cf) -> f32 {
        c.0 as f32
    }
    fn c(self) -> Cf {
        (self as f64, 0.0)
    }
}
impl SpEl for f64 {
    const COMPLEX: bool = false;
    const EPS: f64 = f64::EPSILON;
    fn tol() -> f64 {
        1e-12
    }
    fn from_c(c: Cf) -> f64 {
        c.0
    }
    fn c(self) -> Cf {
        (self, 0.0)
    }
}
impl SpEl for Complex<f32> {
    const COMPLEX: bool = true;
    const EPS: f64 = f32::EPSILON as f64;
    fn tol() -> f32 {
        1e-6
    }
    fn from_c(c: Cf) -> Self {
        Complex::new(c.0 as f32, c.1 as f32)
    }
    fn c(self) -> Cf {
        (self.re as f64, self.im as f64)
    }
}
impl SpEl for Complex<f64> {
    const COMPLEX: bool = true;
    const EPS: f64 = f64::EPSILON;
    fn tol() -> f64 {
        1e-12
    }
    fn from_c(c: Cf) -> Self {
        Complex::new(c.0, c.1)
    }
    fn c(self) -> Cf {
        (self.re, self.im)
    }
}

/// `‖got − want‖ / (‖want‖ · n · ε)`: a few tens at most for these well-conditioned systems.
pub fn scaled_error(got: &[Cf], want: &[Cf], eps: f64) -> f64 {
    let norm = |v: &mut dyn Iterator<Item = Cf>| v.map(|c| c.0 * c.0 + c.1 * c.1).sum::<f64>().sqrt();
    let diff = norm(&mut got.iter().zip(want).map(|(g, w)| (g.0 - w.0, g.1 - w.1)));
    diff / (norm(&mut want.iter().copied()).max(1.0) * got.len() as f64 * eps)
}

/// Solves a random system of order `n` in `T` by QR (a general matrix, and the Hermitian one)
/// and by Cholesky (the Hermitian positive definite matrix stored whole, and as its lower
/// triangle), with every reordering: each solve is within `bound` of the known `x` in units
/// of [`scaled_error`], and a lower-triangle-only matrix with a reordering is rejected naming
/// `reorder` before anything is recorded. Returns the failures, one line each.
pub fn check_every_type<T: SpEl>(
    d: &Device,
    s: StreamId,
    h: &mut Handles,
    rng: &mut Rng,
    n: usize,
    bound: f64,
) -> Vec<String> {
    let up = |v: &[Cf]| -> GpuRef<T> { d.upload(s, &v.iter().map(|&c| T::from_c(c)).collect::<Vec<_>>()).unwrap() };
    let x0: Vec<Cf> =
        (0..n).map(|_| (rng.f32() as f64 - 0.5, if T::COMPLEX { rng.f32() as f64 - 0.5 } else { 0.0 })).collect();
    let general = sparse_dense(rng, n, T::COMPLEX, false);
    let hpd = sparse_dense(rng, n, T::COMPLEX, true);
    let mut failures = Vec::new();
    let ty = std::any::type_name::<T>();
    // (what, dense, stored, Cholesky)
    let cases: [(&str, &Vec<Cf>, Stored, bool); 4] = [
        ("qr general", &general, Stored::Full, false),
        ("qr hermitian", &hpd, Stored::Full, false),
        ("chol full", &hpd, Stored::Full, true),
        ("chol lower", &hpd, Stored::Lower, true),
    ];
    for (what, dense, stored, chol) in cases {
        let csr = to_csr(dense, n, stored == Stored::Lower);
        let b = up(&dense_apply(dense, n, &x0));
        let (o, i, v) = (d.upload(s, &csr.0).unwrap(), d.upload(s, &csr.1).unwrap(), up(&csr.2));
        let sys = CsrSystem { n, nnz: csr.1.len(), offsets: &o, indices: &i, values: &v };
        for reorder in [Reorder::None, Reorder::Symrcm, Reorder::Symamd, Reorder::Metis] {
            let x = up(&vec![(f64::NAN, f64::NAN); n]);
            let before = d.stats();
            let solver = h.solver_sparse().unwrap();
            let done = if chol {
                solver.csrlsvchol(sys, stored, &b, &x, T::tol(), reorder)
            } else {
                solver.csrlsvqr(sys, &b, &x, T::tol(), reorder)
            };
            match done {
                Err(Error::InvalidArgument { arg: "reorder", .. })
                    if stored == Stored::Lower && reorder != Reorder::None =>
                {
                    let after = d.stats();
                    if (after.events, after.waits) != (before.events, before.waits) {
                        failures.push(format!("{ty} {what} {reorder:?}: rejected, but recorded"));
                    }
                }
                Err(e) => failures.push(format!("{ty} {what} {reorder:?}: {e}")),
                Ok(done) => match done.wait() {
                    Err(e) => failures.push(format!("{ty} {what} {reorder:?}: {e}")),
                    Ok(()) => {
                        let got: Vec<Cf> = x.download(s).unwrap().into_iter().map(T::c).collect();
                        let err = scaled_error(&got, &x0, T::EPS);
                        if err.is_nan() || err > bound {
                            failures.push(format!("{ty} {what} {reorder:?}: scaled error {err:.2e}"));
                        }
                    }
                },
            }
        }
    }
    failures
}
