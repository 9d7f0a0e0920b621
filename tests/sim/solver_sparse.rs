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
