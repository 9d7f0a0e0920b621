//! cuSOLVER's sparse solves on the simulator: bad input is rejected before anything is
//! recorded, naming the argument; valid input reaches the backend check and fails with
//! `LibraryUnavailable`, also without recording.
#![cfg(feature = "cusolver")]

mod common;
use common::fixture::{fx, rejects};

#[test]
fn sparse_solves_reject_bad_input() {
    use cusched::solver_sparse::{CsrSystem, Reorder};
    let mut fx = fx();
    let (o, i, v) = (fx.upload(&[0i32, 1, 3, 6]), fx.upload(&[0i32, 0, 1, 0, 1, 2]), fx.buf::<f64>(6));
    let (b, x) = (fx.buf::<f64>(3), fx.buf::<f64>(3));
    let sys = |n, nnz, o, i, v| CsrSystem { n, nnz, offsets: o, indices: i, values: v };
    let r = Reorder::None;
    let (v5, b2, o1) = (fx.buf::<f64>(5), fx.buf::<f64>(2), fx.buf::<i32>(1));
    rejects(&mut fx, "a.offsets", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(4, 6, &o, &i, &v), &b, &x, 1e-12, r));
    rejects(&mut fx, "a.indices", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 7, &o, &i, &v), &b, &x, 1e-12, r));
    rejects(&mut fx, "a.values", |fx| fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &o, &i, &v5), &b, &x, 1e-12, r));
    rejects(&mut fx, "b", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b2, &x, 1e-12, r));
    rejects(&mut fx, "x", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b, &b, 1e-12, r));
    rejects(&mut fx, "a.n", |fx| fx.h.solver_sparse()?.csrlsvchol(sys(0, 0, &o1, &i, &v), &b, &x, 1e-12, r));
    let f = fx.foreign::<f64>(3);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &f, &x, 1e-12, r));
    rejects(&mut fx, "!unavailable", |fx| fx.h.solver_sparse()?.csrlsvqr(sys(3, 6, &o, &i, &v), &b, &x, 1e-12, r));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.solver_sparse()?.csrlsvchol(sys(3, 6, &o, &i, &v), &b, &x, 1e-12, r));
}
