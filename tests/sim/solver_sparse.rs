//! cuSOLVER's sparse solves on the simulator: bad input is rejected before anything is
//! recorded, naming the argument; valid input is accepted, and the simulator computes it.

use super::solver_validation::accepts;
use crate::common::fixture::{fx, rejects};

#[test]
fn csrlsv_rejects_bad_input() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    let (o, i, v) = (fx.upload(&[0i32, 1, 3, 6]), fx.upload(&[0i32, 0, 1, 0, 1, 2]), fx.buf::<f64>(6));
    let (b, x) = (fx.buf::<f64>(3), fx.buf::<f64>(3));
    let sys = |n, nnz, o, i, v| CsrSystem { n, nnz, offsets: o, indices: i, values: v };
    let r = Reorder::None;
    let (v5, b2, o1) = (fx.buf::<f64>(5), fx.buf::<f64>(2), fx.buf::<i32>(1));
    rejects(&mut fx, "a.offsets", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(4, 6, &o, &i, &v), &b, &x, 1e-12, r));
    rejects(&mut fx, "a.indices", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 7, &o, &i, &v), &b, &x, 1e-12, r));
    rejects(&mut fx, "a.values", |fx| {
        fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &o, &i, &v5), Stored::Full, &b, &x, 1e-12, r)
    });
    rejects(&mut fx, "b", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b2, &x, 1e-12, r));
    rejects(&mut fx, "x", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b, &b, 1e-12, r));
    rejects(&mut fx, "a.n", |fx| {
        fx.h.solver_sparse()?.csrlsvchol(sys(0, 0, &o1, &i, &v), Stored::Full, &b, &x, 1e-12, r)
    });
    let f = fx.foreign::<f64>(3);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &f, &x, 1e-12, r));
    accepts(&mut fx, |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b, &x, 1e-12, r));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| {
        fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &o, &i, &v), Stored::Lower, &b, &x, 1e-12, r)
    });
}

/// A tolerance that is not a finite number at least zero (NaN, infinite, negative) decides
/// nothing: it is rejected naming `tol` before anything is recorded, in both solves and both
/// real element types; zero is a valid tolerance.
#[test]
fn csrlsv_rejects_a_tolerance_that_is_not_finite_and_non_negative() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    let (o, i) = (fx.upload(&[0i32, 1, 3]), fx.upload(&[0i32, 0, 1]));
    let (v64, b64, x64) = (fx.upload(&[4.0f64, 1.0, 3.0]), fx.buf::<f64>(2), fx.buf::<f64>(2));
    let (v32, b32, x32) = (fx.upload(&[4.0f32, 1.0, 3.0]), fx.buf::<f32>(2), fx.buf::<f32>(2));
    let r = Reorder::None;
    for tol in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1e-12] {
        let a = CsrSystem { n: 2, nnz: 3, offsets: &o, indices: &i, values: &v64 };
        rejects(&mut fx, "tol", |fx| fx.h.solver_sparse()?.csrlsvqr(a, &b64, &x64, tol, r));
        rejects(&mut fx, "tol", |fx| fx.h.solver_sparse()?.csrlsvchol(a, Stored::Lower, &b64, &x64, tol, r));
        let a = CsrSystem { n: 2, nnz: 3, offsets: &o, indices: &i, values: &v32 };
        rejects(&mut fx, "tol", |fx| fx.h.solver_sparse()?.csrlsvqr(a, &b32, &x32, tol as f32, r));
    }
    let a = CsrSystem { n: 2, nnz: 3, offsets: &o, indices: &i, values: &v64 };
    accepts(&mut fx, |fx| fx.h.solver_sparse()?.csrlsvchol(a, Stored::Lower, &b64, &x64, 0.0, r));
}

/// A lower-triangle-only matrix with a reordering was solved silently wrong (cuSOLVER reads
/// the lower triangle of the permuted matrix): it is rejected naming `reorder`, before
/// anything is recorded; every other storage and reordering reaches the library.
#[test]
fn csrlsvchol_rejects_a_lower_triangle_with_a_reordering() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    // [[4, 1], [1, 3]]: lower triangle and full.
    let (lo, li, lv) = (fx.upload(&[0i32, 1, 3]), fx.upload(&[0i32, 0, 1]), fx.upload(&[4.0f64, 1.0, 3.0]));
    let (fo, fi, fv) = (fx.upload(&[0i32, 2, 4]), fx.upload(&[0i32, 1, 0, 1]), fx.upload(&[4.0f64, 1.0, 1.0, 3.0]));
    let (b, x) = (fx.buf::<f64>(2), fx.buf::<f64>(2));
    let lower = CsrSystem { n: 2, nnz: 3, offsets: &lo, indices: &li, values: &lv };
    let full = CsrSystem { n: 2, nnz: 4, offsets: &fo, indices: &fi, values: &fv };
    for r in [Reorder::None, Reorder::Symrcm, Reorder::Symamd, Reorder::Metis] {
        if r == Reorder::None {
            accepts(&mut fx, |fx| fx.h.solver_sparse()?.csrlsvchol(lower, Stored::Lower, &b, &x, 1e-12, r));
        } else {
            rejects(&mut fx, "reorder", |fx| fx.h.solver_sparse()?.csrlsvchol(lower, Stored::Lower, &b, &x, 1e-12, r));
        }
        accepts(&mut fx, |fx| fx.h.solver_sparse()?.csrlsvchol(full, Stored::Full, &b, &x, 1e-12, r));
    }
}

/// Every element type (`f32`, `f64`, `Complex<f32>`, `Complex<f64>`), every storage and every
/// reordering, at odd orders: the simulator's QR and Cholesky solve the system to the type's
/// precision against the known `x`, and a lower triangle with a reordering is rejected.
#[test]
fn csrlsv_solves_every_type_storage_and_reordering() {
    use crate::common::reference::solver_sparse::check_every_type;
    use cusched::Complex;
    let mut fx = fx();
    let mut rng = crate::common::Rng::new();
    let mut failures = Vec::new();
    for n in [1, 7, 13] {
        let (d, s) = (fx.device.clone(), fx.s);
        failures.extend(check_every_type::<f32>(&d, s, &mut fx.h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<f64>(&d, s, &mut fx.h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<Complex<f32>>(&d, s, &mut fx.h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<Complex<f64>>(&d, s, &mut fx.h, &mut rng, n, 1e3));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A complex Hermitian matrix is read from its lower triangle only (the upper triangle's
/// entries, here garbage, change nothing), and the complex solves report a singular matrix
/// with the row and the call, as the real ones do.
#[test]
fn complex_csrlsv_reads_the_lower_triangle_and_reports_a_singular_matrix() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    use cusched::{Complex, Error, NumericalFailure};
    let mut fx = fx();
    // [[4, 1 - i], [1 + i, 3]] (Hermitian positive definite), x = (1 + i, -2): b = A x.
    let c = Complex::new;
    let a = [[c(4.0, 0.0), c(1.0, -1.0)], [c(1.0, 1.0), c(3.0, 0.0)]];
    let x0 = [c(1.0, 1.0), c(-2.0, 0.0)];
    let mul = |p: Complex<f64>, q: Complex<f64>| c(p.re * q.re - p.im * q.im, p.re * q.im + p.im * q.re);
    let b0: Vec<Complex<f64>> = (0..2)
        .map(|r| {
            let (s, t) = (mul(a[r][0], x0[0]), mul(a[r][1], x0[1]));
            c(s.re + t.re, s.im + t.im)
        })
        .collect();
    // Row-major CSR with the upper entry stored as garbage (Stored::Lower ignores it; the lower
    // triangle is what defines the matrix).
    let (o, i) = (fx.upload(&[0i32, 2, 4]), fx.upload(&[0i32, 1, 0, 1]));
    let v = fx.upload(&[a[0][0], c(99.0, 99.0), a[1][0], a[1][1]]);
    let (b, x) = (fx.upload(&b0), fx.buf::<Complex<f64>>(2));
    let sys = CsrSystem { n: 2, nnz: 4, offsets: &o, indices: &i, values: &v };
    fx.h.solver_sparse().unwrap().csrlsvchol(sys, Stored::Lower, &b, &x, 1e-12, Reorder::None).unwrap().wait().unwrap();
    for (g, w) in x.download(fx.s).unwrap().iter().zip(&x0) {
        assert!((g.re - w.re).abs() < 1e-12 && (g.im - w.im).abs() < 1e-12, "{g:?} != {w:?}");
    }
    // Row 1 zero: singular there, for QR and Cholesky, in Complex<f32> too.
    let vz = fx.upload(&[a[0][0], a[0][1], c(0.0, 0.0), c(0.0, 0.0)]);
    let sys = CsrSystem { values: &vz, ..sys };
    for chol in [false, true] {
        let solver = fx.h.solver_sparse().unwrap();
        let done = if chol {
            solver.csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, Reorder::None)
        } else {
            solver.csrlsvqr(sys, &b, &x, 1e-12, Reorder::None)
        };
        match done.unwrap().wait() {
            Err(Error::Numerical { op, failures, .. }) => {
                assert_eq!(op, if chol { "cusolverSpZcsrlsvchol" } else { "cusolverSpZcsrlsvqr" });
                assert!(
                    matches!(failures[..], [NumericalFailure::SingularToTolerance { matrix: 0, row: 1 }]),
                    "{failures:?}"
                );
            }
            other => panic!("{chol}: {other:?}"),
        }
    }
    let vz32 = fx.upload(&[
        Complex::new(4.0f32, 0.0),
        Complex::new(1.0, -1.0),
        Complex::new(0.0, 0.0),
        Complex::new(0.0, 0.0),
    ]);
    let (b32, x32) = (fx.upload(&[Complex::new(1.0f32, 0.0), Complex::new(1.0, 0.0)]), fx.buf::<Complex<f32>>(2));
    let sys32 = CsrSystem { n: 2, nnz: 4, offsets: &o, indices: &i, values: &vz32 };
    match fx.h.solver_sparse().unwrap().csrlsvqr(sys32, &b32, &x32, 1e-6, Reorder::Symrcm).unwrap().wait() {
        Err(Error::Numerical { op: "cusolverSpCcsrlsvqr", .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn complex_csrlsv_rejects_bad_input() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    use cusched::Complex;
    let mut fx = fx();
    let (o, i) = (fx.upload(&[0i32, 1, 3, 6]), fx.upload(&[0i32, 0, 1, 0, 1, 2]));
    let (v, b, x) = (fx.buf::<Complex<f32>>(6), fx.buf::<Complex<f32>>(3), fx.buf::<Complex<f32>>(3));
    let (v5, b2) = (fx.buf::<Complex<f64>>(5), fx.buf::<Complex<f32>>(2));
    let sys = |n, nnz, v| CsrSystem { n, nnz, offsets: &o, indices: &i, values: v };
    let r = Reorder::None;
    rejects(&mut fx, "a.offsets", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(5, 6, &v), &b, &x, 1e-6, r));
    rejects(&mut fx, "b", |fx| fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &v), Stored::Full, &b2, &x, 1e-6, r));
    rejects(&mut fx, "x", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &v), &b, &v, 1e-6, r));
    let (b64, x64) = (fx.buf::<Complex<f64>>(3), fx.buf::<Complex<f64>>(3));
    let short = CsrSystem { n: 3, nnz: 6, offsets: &o, indices: &i, values: &v5 };
    rejects(&mut fx, "a.values", |fx| fx.h.solver_sparse()?.csrlsvqr(short, &b64, &x64, 1e-12, r));
    rejects(&mut fx, "reorder", |fx| {
        fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &v), Stored::Lower, &b, &x, 1e-6, Reorder::Metis)
    });
    accepts(&mut fx, |fx| fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &v), Stored::Lower, &b, &x, 1e-6, r));
}

/// `csrlsvqr` and `csrlsvchol` return when their solve is done, and the host reads whether it
/// met a singular matrix: both are refused in a graph recording with `Error::Recording`, as on
/// a GPU, and run outside it.
#[test]
fn sparse_solves_are_refused_in_a_graph_recording() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    let (o, i, v) = (fx.upload(&[0i32, 1, 2]), fx.upload(&[0i32, 1]), fx.upload(&[1.0f64, 4.0]));
    let (b, x) = (fx.upload(&[1.0f64, 8.0]), fx.buf::<f64>(2));
    for chol in [false, true] {
        let (o, i, v, b, x) = (o.clone(), i.clone(), v.clone(), b.clone(), x.clone());
        let got = cusched::Graph::record(&fx.device, move |rec| {
            let a = CsrSystem { n: 2, nnz: 2, offsets: &o, indices: &i, values: &v };
            let s = rec.handles(0)?.solver_sparse()?;
            if chol {
                s.csrlsvchol(a, Stored::Full, &b, &x, 1e-12, Reorder::None).map(drop)
            } else {
                s.csrlsvqr(a, &b, &x, 1e-12, Reorder::None).map(drop)
            }
        });
        assert!(matches!(got, Err(cusched::Error::Recording { .. })), "chol {chol}: {:?}", got.err());
    }
    let a = CsrSystem { n: 2, nnz: 2, offsets: &o, indices: &i, values: &v };
    fx.h.solver_sparse().unwrap().csrlsvchol(a, Stored::Full, &b, &x, 1e-12, Reorder::None).unwrap().wait().unwrap();
    assert_eq!(x.download(fx.s).unwrap(), [1.0, 2.0]);
}
