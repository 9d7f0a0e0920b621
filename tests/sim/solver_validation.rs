//! Bad input to every cuSOLVER op is rejected before anything is recorded, with a typed error
//! naming the argument; valid input is accepted, and the simulator computes it.

use crate::common::fixture::{fx, rejection, rejects};
use cusched::solver::{
    EigRange, Fill, Geev, Gels, Generalized, Geqrf, Gesv, Gesvd, GesvdEconomy, GesvdaBatched, Gesvdj, GesvdjBatched,
    Gesvdr, Getrf, GetrfBatched, Getrs, GetrsBatched, LowPrecision, Orgqr, Ormqr, Potrf, PotrfBatched, Potri, Potrs,
    PotrsBatched, Side, Syevd, Syevdx, Syevj, SyevjBatched, Sygvd, Sytrf, Sytrs, Trans, Trtri,
};
use cusched::{Complex, Error, GpuRef, Result};

/// Runs a valid op and asserts that it was accepted (the simulator computes it; what it
/// computes on these zero-filled buffers is not the point here, so the completion is dropped).
#[track_caller]
pub(crate) fn accepts<T: std::fmt::Debug>(
    fx: &mut crate::common::fixture::Fx,
    op: impl FnOnce(&mut crate::common::fixture::Fx) -> Result<T>,
) {
    let got = op(fx);
    assert!(got.is_ok(), "expected the op to be accepted, got {got:?}");
}

#[track_caller]
fn potrf<'a, T: cusched::solver::SolverElement>(n: usize, a: &'a GpuRef<T>, lda: Option<usize>) -> Potrf<'a, T> {
    Potrf { fill: Fill::Lower, n, a, lda }
}

#[test]
fn potrf_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.buf::<f64>(9);
    rejects(&mut fx, "n", |fx| fx.h.solver()?.potrf(&potrf(0, &a, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrf(&potrf(4, &a, None)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.potrf(&potrf(3, &a, Some(2))));
    let f = fx.foreign::<f64>(9);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.potrf(&potrf(3, &f, None)));
    let c = fx.buf::<Complex<f32>>(9);
    accepts(&mut fx, |fx| fx.h.solver()?.potrf(&potrf(3, &c, None)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.solver()?.potrf(&potrf(3, &a, None)));
}

#[test]
fn potrs_rejects_bad_input() {
    let mut fx = fx();
    let (a, b) = (fx.buf::<f32>(9), fx.buf::<f32>(6));
    let p = |n, nrhs, b| Potrs { fill: Fill::Upper, n, nrhs, a: &a, lda: None, b, ldb: None };
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.potrs(&p(3, 0, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.potrs(&p(3, 3, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.potrs(&p(3, 2, &a)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrs(&p(4, 1, &b)));
    accepts(&mut fx, |fx| fx.h.solver()?.potrs(&p(3, 2, &b)));
}

#[test]
fn getrf_getrs_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, ipiv, short) = (fx.buf::<f32>(12), fx.buf::<f32>(4), fx.buf::<i64>(3), fx.buf::<i64>(2));
    let g = |m, n, ipiv| Getrf { m, n, a: &a, lda: None, ipiv };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.getrf(&g(0, 3, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.getrf(&g(4, 4, None)));
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.getrf(&g(4, 3, Some(&short))));
    accepts(&mut fx, |fx| fx.h.solver()?.getrf(&g(4, 3, Some(&ipiv))));
    accepts(&mut fx, |fx| fx.h.solver()?.getrf(&g(3, 4, None)));
    let s = |n, nrhs, ipiv| Getrs { trans: Trans::No, n, nrhs, a: &a, lda: None, ipiv, b: &b, ldb: None };
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.getrs(&s(3, 1, Some(&short))));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.getrs(&s(3, 2, Some(&ipiv))));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.getrs(&s(0, 1, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.getrs(&s(3, 1, Some(&ipiv))));
}

#[test]
fn qr_rejects_bad_input() {
    let mut fx = fx();
    let (a, tau, c) = (fx.buf::<f64>(12), fx.buf::<f64>(3), fx.buf::<f64>(8));
    let g = |m, n, lda, tau| Geqrf { m, n, a: &a, lda, tau };
    let short = fx.buf::<f64>(2);
    rejects(&mut fx, "tau", |fx| fx.h.solver()?.geqrf(&g(4, 3, None, &short)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.geqrf(&g(4, 3, Some(3), &tau)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.geqrf(&g(4, 4, None, &tau)));
    accepts(&mut fx, |fx| fx.h.solver()?.geqrf(&g(4, 3, None, &tau)));
    let o = |m, n, k| Orgqr { m, n, k, a: &a, lda: None, tau: &tau };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.orgqr(&o(3, 4, 3)));
    rejects(&mut fx, "k", |fx| fx.h.solver()?.orgqr(&o(4, 2, 3)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.orgqr(&o(5, 3, 3)));
    accepts(&mut fx, |fx| fx.h.solver()?.orgqr(&o(4, 3, 3)));
    let q = |m, n, k, cc| Ormqr {
        side: Side::Left,
        trans: Trans::Yes,
        m,
        n,
        k,
        a: &a,
        lda: None,
        tau: &tau,
        c: cc,
        ldc: None,
    };
    rejects(&mut fx, "k", |fx| fx.h.solver()?.ormqr(&q(2, 4, 3, &c)));
    rejects(&mut fx, "c", |fx| fx.h.solver()?.ormqr(&q(4, 3, 3, &c)));
    rejects(&mut fx, "c", |fx| fx.h.solver()?.ormqr(&q(4, 2, 3, &a)));
    accepts(&mut fx, |fx| fx.h.solver()?.ormqr(&q(4, 2, 3, &c)));
}

#[test]
fn complex_qr_rejects_like_real_qr() {
    let mut fx = fx();
    let (a, tau) = (fx.buf::<Complex<f32>>(12), fx.buf::<Complex<f32>>(3));
    let short = fx.buf::<Complex<f32>>(2);
    let o = |m, n, k, tau| Orgqr { m, n, k, a: &a, lda: None, tau };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.orgqr(&o(3, 4, 3, &tau)));
    rejects(&mut fx, "k", |fx| fx.h.solver()?.orgqr(&o(4, 2, 3, &tau)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.orgqr(&o(5, 3, 3, &tau)));
    rejects(&mut fx, "tau", |fx| fx.h.solver()?.orgqr(&o(4, 3, 3, &short)));
    rejects(&mut fx, "tau", |fx| fx.h.solver()?.orgqr(&o(4, 3, 3, &a)));
    accepts(&mut fx, |fx| fx.h.solver()?.orgqr(&o(4, 3, 3, &tau)));
    let (a, tau, c) = (fx.buf::<Complex<f64>>(12), fx.buf::<Complex<f64>>(3), fx.buf::<Complex<f64>>(8));
    let q = |side, trans, m, n, k, cc| Ormqr { side, trans, m, n, k, a: &a, lda: None, tau: &tau, c: cc, ldc: None };
    rejects(&mut fx, "k", |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::Conj, 2, 4, 3, &c)));
    rejects(&mut fx, "c", |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::Conj, 4, 3, 3, &c)));
    rejects(&mut fx, "c", |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::No, 4, 2, 3, &a)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.ormqr(&q(Side::Right, Trans::Conj, 2, 5, 3, &c)));
    // unmqr has no plain transpose: `Yes` on a complex Q is refused whatever the side, and
    // before anything is recorded.
    let e = rejection(&mut fx, "trans", |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::Yes, 4, 2, 3, &c)));
    assert!(e.unwrap_err().to_string().contains("Conj"));
    rejects(&mut fx, "trans", |fx| fx.h.solver()?.ormqr(&q(Side::Right, Trans::Yes, 2, 4, 3, &c)));
    accepts(&mut fx, |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::Conj, 4, 2, 3, &c)));
    accepts(&mut fx, |fx| fx.h.solver()?.ormqr(&q(Side::Left, Trans::No, 4, 2, 3, &c)));
    accepts(&mut fx, |fx| fx.h.solver()?.ormqr(&q(Side::Right, Trans::Conj, 2, 4, 3, &c)));
    // A real Q keeps taking `Yes` and `Conj` alike (both are Qᵀ).
    let (ra, rtau, rc) = (fx.buf::<f32>(12), fx.buf::<f32>(3), fx.buf::<f32>(8));
    for trans in [Trans::Yes, Trans::Conj] {
        let r = Ormqr { side: Side::Left, trans, m: 4, n: 2, k: 3, a: &ra, lda: None, tau: &rtau, c: &rc, ldc: None };
        accepts(&mut fx, |fx| fx.h.solver()?.ormqr(&r));
    }
}

#[test]
fn complex_gesvdj_rejects_like_real_gesvdj() {
    let mut fx = fx();
    // 6x4 takes U 6x4 and V 4x4; 4x6 takes U 4x4 and V 6x4; both take 4 real singular values.
    let (a, big, small) = (fx.buf::<Complex<f64>>(24), fx.buf::<Complex<f64>>(24), fx.buf::<Complex<f64>>(16));
    let (sv, short) = (fx.buf::<f64>(4), fx.buf::<f64>(3));
    let j = |m, n, s, u, v| Gesvdj { vectors: true, m, n, a: &a, lda: None, s, u, ldu: None, v, ldv: None };
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesvdj(&j(6, 5, &sv, &big, &small)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.gesvdj(&j(6, 0, &sv, &big, &small)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj(&j(6, 4, &short, &big, &small)));
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvdj(&j(6, 4, &sv, &small, &big)));
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdj(&j(4, 6, &sv, &small, &small)));
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvdj(&j(6, 4, &sv, &a, &small)));
    rejects(&mut fx, "ldu", |fx| {
        let g = Gesvdj { ldu: Some(5), ..j(6, 4, &sv, &big, &small) };
        fx.h.solver()?.gesvdj(&g)
    });
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdj(&j(6, 4, &sv, &big, &small)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdj(&j(4, 6, &sv, &small, &big)));
    let (a, sv, u, v) =
        (fx.buf::<Complex<f32>>(24), fx.buf::<f32>(4), fx.buf::<Complex<f32>>(16), fx.buf::<Complex<f32>>(24));
    let j = |m, n, v| Gesvdj { vectors: true, m, n, a: &a, lda: None, s: &sv, u: &u, ldu: None, v, ldv: None };
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdj(&j(4, 6, &u)));
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdj(&j(4, 6, &a)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdj(&j(4, 6, &v)));
}

#[test]
fn eigen_svd_rejects_bad_input() {
    let mut fx = fx();
    let (a, w, u, v) = (fx.buf::<f32>(16), fx.buf::<f32>(4), fx.buf::<f32>(16), fx.buf::<f32>(16));
    let e = |n, w| Syevd { vectors: true, fill: Fill::Lower, n, a: &a, lda: None, w };
    rejects(&mut fx, "a", |fx| fx.h.solver()?.syevd(&e(5, &w)));
    let short = fx.buf::<f32>(3);
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevd(&e(4, &short)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevd(&e(4, &a)));
    accepts(&mut fx, |fx| fx.h.solver()?.syevd(&e(4, &w)));
    let s = |m, n, s| Gesvd { vectors: true, m, n, a: &a, lda: None, s, u: &u, ldu: None, vt: &v, ldvt: None };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.gesvd(&s(2, 4, &w)));
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvd(&s(5, 3, &w)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesvd(&s(6, 3, &w)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvd(&s(4, 4, &w)));
    let j = |m, n, vv| Gesvdj { vectors: true, m, n, a: &a, lda: None, s: &w, u: &u, ldu: None, v: vv, ldv: None };
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdj(&j(4, 4, &u)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesvdj(&j(4, 5, &v)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.gesvdj(&j(4, 0, &v)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdj(&j(4, 4, &v)));
}

#[test]
fn batched_potrf_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.buf::<f64>(4 * 9);
    let p = |n, batch, stride| PotrfBatched { fill: Fill::Lower, n, batch, a: &a, lda: None, stride };
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.potrf_batched(&p(3, 0, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrf_batched(&p(3, 5, None)));
    rejects(&mut fx, "stride", |fx| fx.h.solver()?.potrf_batched(&p(3, 2, Some(4))));
    accepts(&mut fx, |fx| fx.h.solver()?.potrf_batched(&p(3, 4, None)));
}

#[test]
fn complex_batched_potrf_rejects_like_real_batched_potrf() {
    let mut fx = fx();
    // Four packed 3x3 matrices fit; a fifth, a 4x4, or matrices 4 elements apart do not.
    let a = fx.buf::<Complex<f32>>(4 * 9);
    let p = |n, batch, lda, stride| PotrfBatched { fill: Fill::Upper, n, batch, a: &a, lda, stride };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.potrf_batched(&p(0, 4, None, None)));
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.potrf_batched(&p(3, 0, None, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrf_batched(&p(3, 5, None, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrf_batched(&p(4, 3, None, None)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.potrf_batched(&p(3, 4, Some(2), None)));
    rejects(&mut fx, "stride", |fx| fx.h.solver()?.potrf_batched(&p(3, 2, None, Some(4))));
    accepts(&mut fx, |fx| fx.h.solver()?.potrf_batched(&p(3, 4, None, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.potrf_batched(&p(3, 2, None, Some(18))));
    let z = fx.buf::<Complex<f64>>(4 * 9);
    let q = |n, batch, stride| PotrfBatched { fill: Fill::Lower, n, batch, a: &z, lda: None, stride };
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.potrf_batched(&q(3, 0, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potrf_batched(&q(3, 5, None)));
    rejects(&mut fx, "stride", |fx| fx.h.solver()?.potrf_batched(&q(3, 2, Some(8))));
    let f = fx.foreign::<Complex<f64>>(4 * 9);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.solver()?.potrf_batched(&PotrfBatched {
            fill: Fill::Lower,
            n: 3,
            batch: 4,
            a: &f,
            lda: None,
            stride: None,
        })
    });
    accepts(&mut fx, |fx| fx.h.solver()?.potrf_batched(&q(3, 4, None)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.solver()?.potrf_batched(&q(3, 4, None)));
}

#[test]
fn jacobi_rejects_bad_settings() {
    let mut fx = fx();
    let bad = cusched::solver::JacobiSettings { tolerance: -1.0, max_sweeps: 10 };
    assert!(matches!(
        fx.h.solver().unwrap().set_jacobi(bad),
        Err(Error::InvalidArgument { arg: "settings.tolerance", .. })
    ));
    let bad = cusched::solver::JacobiSettings { tolerance: 1e-7, max_sweeps: 0 };
    assert!(matches!(
        fx.h.solver().unwrap().set_jacobi(bad),
        Err(Error::InvalidArgument { arg: "settings.max_sweeps", .. })
    ));
}

#[test]
fn numerical_errors_say_what_happened() {
    use cusched::NumericalFailure as F;
    let one =
        Error::Numerical { op: "potrf", batch: 1, failures: vec![F::NotPositiveDefinite { matrix: 0, minor: 5 }] };
    assert_eq!(one.to_string(), "potrf: leading minor 5 is not positive definite");
    let lu = Error::Numerical { op: "getrf", batch: 1, failures: vec![F::Singular { matrix: 0, index: 3 }] };
    assert_eq!(lu.to_string(), "getrf: U(3,3) is exactly zero: the matrix is singular");
    let batch = Error::Numerical {
        op: "potrfBatched",
        batch: 8,
        failures: vec![F::NotPositiveDefinite { matrix: 3, minor: 2 }],
    };
    assert!(batch.to_string().contains("1 of 8 matrices failed (matrix 3: leading minor 2"), "{batch}");
}

#[test]
fn potri_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.buf::<f64>(9);
    let p = |n, lda| Potri { fill: Fill::Lower, n, a: &a, lda };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.potri(&p(0, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.potri(&p(4, None)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.potri(&p(3, Some(2))));
    let f = fx.foreign::<f64>(9);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.potri(&Potri { fill: Fill::Upper, n: 3, a: &f, lda: None }));
    accepts(&mut fx, |fx| fx.h.solver()?.potri(&p(3, None)));
}

#[test]
fn syevj_rejects_bad_input() {
    let mut fx = fx();
    let (a, w, short) = (fx.buf::<Complex<f64>>(16), fx.buf::<f64>(4), fx.buf::<f64>(3));
    let e = |n, w| Syevj { vectors: true, fill: Fill::Lower, n, a: &a, lda: None, w };
    rejects(&mut fx, "a", |fx| fx.h.solver()?.syevj(&e(5, &w)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevj(&e(4, &short)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.syevj(&e(0, &w)));
    rejects(&mut fx, "lda", |fx| {
        fx.h.solver()?.syevj(&Syevj { vectors: false, fill: Fill::Upper, n: 4, a: &a, lda: Some(3), w: &w })
    });
    accepts(&mut fx, |fx| fx.h.solver()?.syevj(&e(4, &w)));
}

#[test]
fn sygvd_hegvd_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, w, short) = (fx.buf::<f32>(9), fx.buf::<f32>(9), fx.buf::<f32>(3), fx.buf::<f32>(4));
    let g = |n, b, w| Sygvd {
        problem: Generalized::Ax,
        vectors: true,
        fill: Fill::Lower,
        n,
        a: &a,
        lda: None,
        b,
        ldb: None,
        w,
    };
    rejects(&mut fx, "b", |fx| fx.h.solver()?.sygvd(&g(3, &a, &w)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.sygvd(&g(3, &short, &w)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.sygvd(&g(3, &b, &a)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.sygvd(&g(4, &b, &w)));
    accepts(&mut fx, |fx| fx.h.solver()?.sygvd(&g(3, &b, &w)));
    let (ca, cb, cw) = (fx.buf::<Complex<f32>>(9), fx.buf::<Complex<f32>>(9), fx.buf::<f32>(2));
    let h = |n, lda, w| Sygvd {
        problem: Generalized::Bax,
        vectors: false,
        fill: Fill::Upper,
        n,
        a: &ca,
        lda,
        b: &cb,
        ldb: None,
        w,
    };
    rejects(&mut fx, "w", |fx| fx.h.solver()?.hegvd(&h(3, None, &cw)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.hegvd(&h(3, Some(1), &w)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.hegvd(&h(0, None, &w)));
    accepts(&mut fx, |fx| fx.h.solver()?.hegvd(&h(3, None, &w)));
}

#[test]
fn potrs_batched_rejects_bad_input() {
    let mut fx = fx();
    let (a, b) = (fx.buf::<f64>(4 * 9), fx.buf::<f64>(4 * 3));
    let p = |nrhs, batch, stride_b, b| PotrsBatched {
        fill: Fill::Lower,
        n: 3,
        nrhs,
        batch,
        a: &a,
        lda: None,
        stride_a: None,
        b,
        ldb: None,
        stride_b,
    };
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.potrs_batched(&p(2, 4, None, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.potrs_batched(&p(1, 4, Some(4), &b)));
    rejects(&mut fx, "stride_b", |fx| fx.h.solver()?.potrs_batched(&p(1, 4, Some(2), &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.potrs_batched(&p(1, 4, None, &a)));
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.potrs_batched(&p(1, 0, None, &b)));
    accepts(&mut fx, |fx| fx.h.solver()?.potrs_batched(&p(1, 4, None, &b)));
}

#[test]
fn getrf_getrs_batched_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, ipiv, short) = (fx.buf::<f32>(4 * 9), fx.buf::<f32>(4 * 6), fx.buf::<i32>(12), fx.buf::<i32>(11));
    let g = |n, batch, stride, ipiv| GetrfBatched { n, batch, a: &a, lda: None, stride, ipiv };
    rejects(&mut fx, "a", |fx| fx.h.solver()?.getrf_batched(&g(3, 5, None, None)));
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.getrf_batched(&g(3, 4, None, Some(&short))));
    rejects(&mut fx, "stride", |fx| fx.h.solver()?.getrf_batched(&g(3, 2, Some(8), None)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.getrf_batched(&g(0, 4, None, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.getrf_batched(&g(3, 4, None, Some(&ipiv))));
    let s = |nrhs, ipiv, b| GetrsBatched {
        trans: Trans::Yes,
        n: 3,
        nrhs,
        batch: 4,
        a: &a,
        lda: None,
        stride_a: None,
        ipiv,
        b,
        ldb: None,
        stride_b: None,
    };
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.getrs_batched(&s(2, &short, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.getrs_batched(&s(3, &ipiv, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.getrs_batched(&s(2, &ipiv, &a)));
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.getrs_batched(&s(0, &ipiv, &b)));
    accepts(&mut fx, |fx| fx.h.solver()?.getrs_batched(&s(2, &ipiv, &b)));
}

#[test]
fn batched_jacobi_rejects_bad_input() {
    let mut fx = fx();
    let (a, s, u, v) = (fx.buf::<f64>(3 * 16), fx.buf::<f64>(3 * 4), fx.buf::<f64>(3 * 16), fx.buf::<f64>(3 * 16));
    let big = fx.buf::<f64>(33 * 33);
    let g = |m, n, batch, a, s| GesvdjBatched {
        vectors: true,
        m,
        n,
        batch,
        a,
        lda: None,
        s,
        u: &u,
        ldu: None,
        v: &v,
        ldv: None,
    };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.gesvdj_batched(&g(33, 33, 1, &big, &s)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesvdj_batched(&g(4, 4, 4, &a, &s)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj_batched(&g(4, 4, 3, &a, &a)));
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvdj_batched(&g(5, 3, 3, &a, &s)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdj_batched(&g(4, 4, 3, &a, &s)));
    let e = |n, batch, a, w| SyevjBatched { vectors: true, fill: Fill::Lower, n, batch, a, lda: None, w };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.syevj_batched(&e(33, 1, &big, &s)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.syevj_batched(&e(4, 4, &a, &s)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevj_batched(&e(4, 3, &a, &a)));
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.syevj_batched(&e(4, 0, &a, &s)));
    accepts(&mut fx, |fx| fx.h.solver()?.syevj_batched(&e(4, 3, &a, &s)));
}

#[test]
fn trtri_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.buf::<f64>(9);
    let t = |n, a, lda| Trtri { fill: Fill::Upper, unit_diagonal: false, n, a, lda };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.trtri(&t(0, &a, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.trtri(&t(4, &a, None)));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.trtri(&t(3, &a, Some(2))));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.trtri(&t(2, &a, Some(8))));
    let f = fx.foreign::<f64>(9);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.trtri(&t(3, &f, None)));
    let c = fx.buf::<Complex<f32>>(9);
    accepts(&mut fx, |fx| {
        fx.h.solver()?.trtri(&Trtri { fill: Fill::Lower, unit_diagonal: true, n: 3, a: &c, lda: None })
    });
}

#[test]
fn gesvd_economy_rejects_bad_input() {
    let mut fx = fx();
    let (a, s, u, vt) = (fx.buf::<f64>(15), fx.buf::<f64>(3), fx.buf::<f64>(15), fx.buf::<f64>(9));
    let g = |m, n, s, u, ldu| GesvdEconomy { vectors: true, m, n, a: &a, lda: None, s, u, ldu, vt: &vt, ldvt: None };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.gesvd_economy(&g(2, 3, &s, &u, None)));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.gesvd_economy(&g(5, 0, &s, &u, None)));
    // Economy U is m x n: 5 x 3 fits in 15, but not at ldu 6.
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvd_economy(&g(5, 3, &s, &u, Some(6))));
    rejects(&mut fx, "ldu", |fx| fx.h.solver()?.gesvd_economy(&g(5, 3, &s, &u, Some(4))));
    let short = fx.buf::<f64>(2);
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvd_economy(&g(5, 3, &short, &u, None)));
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvd_economy(&g(5, 3, &s, &a, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvd_economy(&g(5, 3, &s, &u, None)));
    // The full gesvd still wants an m x m U.
    let full = Gesvd { vectors: true, m: 5, n: 3, a: &a, lda: None, s: &s, u: &u, ldu: None, vt: &vt, ldvt: None };
    rejects(&mut fx, "u", |fx| fx.h.solver()?.gesvd(&full));
}

#[test]
fn syevdx_rejects_bad_input() {
    let mut fx = fx();
    let (a, w, short) = (fx.buf::<f64>(16), fx.buf::<f64>(4), fx.buf::<f64>(2));
    let e = |range, w| Syevdx { vectors: true, fill: Fill::Lower, range, n: 4, a: &a, lda: None, w };
    rejects(&mut fx, "range", |fx| fx.h.solver()?.syevdx(&e(EigRange::Indices(2..2), &w)));
    rejects(&mut fx, "range", |fx| fx.h.solver()?.syevdx(&e(EigRange::Indices(1..5), &w)));
    rejects(&mut fx, "range", |fx| fx.h.solver()?.syevdx(&e(EigRange::Values { low: 1.0, high: 1.0 }, &w)));
    rejects(&mut fx, "range", |fx| fx.h.solver()?.syevdx(&e(EigRange::Values { low: f64::NAN, high: 1.0 }, &w)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevdx(&e(EigRange::Indices(0..1), &short)));
    rejects(&mut fx, "w", |fx| fx.h.solver()?.syevdx(&e(EigRange::All, &a)));
    let big = fx.buf::<f64>(4);
    rejects(&mut fx, "a", |fx| {
        fx.h.solver()?.syevdx(&Syevdx {
            vectors: false,
            fill: Fill::Upper,
            range: EigRange::All,
            n: 4,
            a: &big,
            lda: None,
            w: &w,
        })
    });
    accepts(&mut fx, |fx| fx.h.solver()?.syevdx(&e(EigRange::Indices(1..4), &w)));
    let (c, cw) = (fx.buf::<Complex<f64>>(16), fx.buf::<f64>(4));
    accepts(&mut fx, |fx| {
        fx.h.solver()?.syevdx(&Syevdx {
            vectors: true,
            fill: Fill::Upper,
            range: EigRange::Values { low: -1.0, high: 1.0 },
            n: 4,
            a: &c,
            lda: None,
            w: &cw,
        })
    });
}

#[test]
fn gesv_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, x, ipiv, short) =
        (fx.buf::<f64>(16), fx.buf::<f64>(8), fx.buf::<f64>(8), fx.buf::<i32>(4), fx.buf::<i32>(3));
    let g = |n, nrhs, ipiv, b, x, ldx| Gesv {
        low: LowPrecision::F32,
        n,
        nrhs,
        a: &a,
        lda: None,
        ipiv,
        b,
        ldb: None,
        x,
        ldx,
    };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.gesv(&g(0, 2, &ipiv, &b, &x, None)));
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.gesv(&g(4, 0, &ipiv, &b, &x, None)));
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.gesv(&g(4, 2, &short, &b, &x, None)));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.gesv(&g(4, 2, &ipiv, &b, &b, None)));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.gesv(&g(4, 3, &ipiv, &a, &x, None)));
    rejects(&mut fx, "ldx", |fx| fx.h.solver()?.gesv(&g(4, 2, &ipiv, &b, &x, Some(3))));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.gesv(&g(4, 2, &ipiv, &a, &x, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesv(&g(5, 1, &ipiv, &b, &x, None)));
    // A leading dimension beyond the 32-bit int the IRS calls take.
    let big = Gesv { lda: Some(1 << 31), ..g(1, 1, &ipiv, &b, &x, None) };
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.gesv(&big));
    accepts(&mut fx, |fx| fx.h.solver()?.gesv(&g(4, 2, &ipiv, &b, &x, None)));
}

#[test]
fn gels_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, x) = (fx.buf::<Complex<f32>>(15), fx.buf::<Complex<f32>>(10), fx.buf::<Complex<f32>>(6));
    let g =
        |m, n, nrhs, b, x| Gels { low: LowPrecision::F16, m, n, nrhs, a: &a, lda: None, b, ldb: None, x, ldx: None };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.gels(&g(3, 5, 1, &b, &x)));
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.gels(&g(5, 3, 0, &b, &x)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.gels(&g(5, 3, 3, &b, &x)));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.gels(&g(5, 3, 2, &b, &b)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gels(&g(6, 3, 1, &b, &x)));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.gels(&g(5, 3, 2, &b, &a)));
    accepts(&mut fx, |fx| fx.h.solver()?.gels(&g(5, 3, 2, &b, &x)));
}

#[test]
fn sytrf_sytrs_reject_bad_input() {
    let mut fx = fx();
    let (a, b, ipiv, short) = (fx.buf::<f64>(16), fx.buf::<f64>(8), fx.buf::<i64>(4), fx.buf::<i64>(3));
    let f = |n, a, ipiv| Sytrf { fill: Fill::Lower, n, a, lda: None, ipiv };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.sytrf(&f(0, &a, &ipiv)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.sytrf(&f(5, &a, &ipiv)));
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.sytrf(&f(4, &a, &short)));
    let foreign = fx.foreign::<f64>(16);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.sytrf(&f(4, &foreign, &ipiv)));
    accepts(&mut fx, |fx| fx.h.solver()?.sytrf(&f(4, &a, &ipiv)));
    let s = |n, nrhs, ipiv, b| Sytrs { fill: Fill::Upper, n, nrhs, a: &a, lda: None, ipiv, b, ldb: None };
    rejects(&mut fx, "nrhs", |fx| fx.h.solver()?.sytrs(&s(4, 0, &ipiv, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.sytrs(&s(4, 3, &ipiv, &b)));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.sytrs(&s(4, 2, &ipiv, &a)));
    rejects(&mut fx, "ipiv", |fx| fx.h.solver()?.sytrs(&s(4, 2, &short, &b)));
    accepts(&mut fx, |fx| fx.h.solver()?.sytrs(&s(4, 2, &ipiv, &b)));
}

#[test]
fn geev_rejects_bad_input() {
    let mut fx = fx();
    let (a, w, wc, vr) = (fx.buf::<f64>(16), fx.buf::<f64>(8), fx.buf::<f64>(4), fx.buf::<f64>(16));
    let g = |n, w, vr, ldvr| Geev { vectors: true, n, a: &a, lda: None, w, vr, ldvr };
    rejects(&mut fx, "n", |fx| fx.h.solver()?.geev(&g(0, &w, &vr, None)));
    // A real type needs 2n values in w.
    rejects(&mut fx, "w", |fx| fx.h.solver()?.geev(&g(4, &wc, &vr, None)));
    rejects(&mut fx, "ldvr", |fx| fx.h.solver()?.geev(&g(4, &w, &vr, Some(3))));
    rejects(&mut fx, "vr", |fx| fx.h.solver()?.geev(&g(4, &w, &a, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.geev(&g(5, &vr, &w, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.geev(&g(4, &w, &vr, None)));
    // A complex type needs n, and without vectors VR is not checked for size.
    let (c, cw, cv) = (fx.buf::<Complex<f32>>(16), fx.buf::<Complex<f32>>(4), fx.buf::<Complex<f32>>(1));
    accepts(&mut fx, |fx| {
        fx.h.solver()?.geev(&Geev { vectors: false, n: 4, a: &c, lda: None, w: &cw, vr: &cv, ldvr: None })
    });
    rejects(&mut fx, "vr", |fx| {
        fx.h.solver()?.geev(&Geev { vectors: true, n: 4, a: &c, lda: None, w: &cw, vr: &cv, ldvr: None })
    });
}

#[test]
fn gesvdr_rejects_bad_input() {
    let mut fx = fx();
    let (a, s, u, v) = (fx.buf::<f64>(30), fx.buf::<f64>(5), fx.buf::<f64>(30), fx.buf::<f64>(25));
    let g = |k, oversampling, iterations, u, v| Gesvdr {
        vectors: true,
        m: 6,
        n: 5,
        k,
        oversampling,
        iterations,
        a: &a,
        lda: None,
        s: &s,
        u,
        ldu: None,
        v,
        ldv: None,
    };
    rejects(&mut fx, "k", |fx| fx.h.solver()?.gesvdr(&g(0, 1, 2, &u, &v)));
    rejects(&mut fx, "oversampling", |fx| fx.h.solver()?.gesvdr(&g(3, 3, 2, &u, &v)));
    rejects(&mut fx, "oversampling", |fx| fx.h.solver()?.gesvdr(&g(2, usize::MAX, 2, &u, &v)));
    rejects(&mut fx, "iterations", |fx| fx.h.solver()?.gesvdr(&g(2, 1, 0, &u, &v)));
    // V needs room for n x n whatever k is.
    let short = fx.buf::<f64>(24);
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdr(&g(2, 1, 2, &u, &short)));
    rejects(&mut fx, "v", |fx| fx.h.solver()?.gesvdr(&g(2, 1, 2, &u, &u)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvdr(&g(2, 3, 2, &u, &v)));
}

#[test]
fn gesvda_batched_rejects_bad_input() {
    let mut fx = fx();
    let (a, s, u, v) = (fx.buf::<f32>(3 * 12), fx.buf::<f32>(3 * 2), fx.buf::<f32>(3 * 8), fx.buf::<f32>(3 * 6));
    let g = |m, n, rank, batch, s, stride_u| GesvdaBatched {
        vectors: true,
        rank,
        m,
        n,
        batch,
        a: &a,
        lda: None,
        stride_a: None,
        s,
        stride_s: None,
        u: &u,
        ldu: None,
        stride_u,
        v: &v,
        ldv: None,
        stride_v: None,
    };
    rejects(&mut fx, "m", |fx| fx.h.solver()?.gesvda_batched(&g(3, 4, 2, 3, &s, None)));
    rejects(&mut fx, "rank", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 0, 3, &s, None)));
    rejects(&mut fx, "rank", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 4, 3, &s, None)));
    rejects(&mut fx, "batch", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 2, 0, &s, None)));
    rejects(&mut fx, "a", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 2, 4, &s, None)));
    rejects(&mut fx, "stride_u", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 2, 3, &s, Some(7))));
    let short = fx.buf::<f32>(5);
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 2, 3, &short, None)));
    accepts(&mut fx, |fx| fx.h.solver()?.gesvda_batched(&g(4, 3, 2, 3, &s, None)));
}

#[test]
fn geev_complex_w_rejects_bad_input() {
    use cusched::solver::GeevComplexW;
    let mut fx = fx();
    let (a, w, vr) = (fx.buf::<f64>(9), fx.buf::<Complex<f64>>(3), fx.buf::<f64>(9));
    let g = GeevComplexW { vectors: true, n: 3, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
    let short = fx.buf::<Complex<f64>>(2);
    rejects(&mut fx, "w", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { w: &short, ..g }));
    rejects(&mut fx, "vr", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { vr: &a, ..g }));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { lda: Some(2), ..g }));
    rejects(&mut fx, "ldvr", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { ldvr: Some(1), ..g }));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { n: 0, ..g }));
    let f = fx.foreign::<f64>(9);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { a: &f, ..g }));
    // Without vectors VR is not read.
    let none = fx.buf::<f64>(1);
    accepts(&mut fx, |fx| fx.h.solver()?.geev_complex_w(&GeevComplexW { vectors: false, vr: &none, ..g }));
}
