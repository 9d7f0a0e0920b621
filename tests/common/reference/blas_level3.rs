//! The CPU references of `symm`, `hemm`, `trmm`, `syr2k`, `her2k`, `herk` and `dgmm`, in f64
//! complex arithmetic (a real value is `re + 0i`), for f32, f64 and both complex types; shared
//! by the simulator suite and the GPU suite. [`check_level3`] runs each op over its sides, fill
//! modes, transposes and diagonals on random inputs with padded leading dimensions.
#![allow(clippy::needless_range_loop)]

use crate::common::reference::blas_complex::{at, C};
use crate::common::Rng;
use cusched::blas::{BlasScalar, Diag, Fill, Herk, Side, Symm, Syr2k, Transpose, Trmm, Vector};
use cusched::{Complex, Device, GpuRef, Handles};

pub trait Any: BlasScalar + std::fmt::Debug {
    const IS_COMPLEX: bool;
    const TOL: f64;
    fn of(c: C) -> Self;
    fn c(self) -> C;
    fn real(x: f64) -> Self::Real;
}
macro_rules! real {
    ($t:ty, $tol:expr) => {
        impl Any for $t {
            const IS_COMPLEX: bool = false;
            const TOL: f64 = $tol;
            fn of(c: C) -> Self {
                c.0 as $t
            }
            fn c(self) -> C {
                C(self as f64, 0.0)
            }
            fn real(x: f64) -> $t {
                x as $t
            }
        }
    };
}
real!(f32, 1e-5);
real!(f64, 1e-13);
macro_rules! complex {
    ($t:ty, $tol:expr) => {
        impl Any for Complex<$t> {
            const IS_COMPLEX: bool = true;
            const TOL: f64 = $tol;
            fn of(c: C) -> Self {
                Complex::new(c.0 as $t, c.1 as $t)
            }
            fn c(self) -> C {
                C(self.re as f64, self.im as f64)
            }
            fn real(x: f64) -> $t {
                x as $t
            }
        }
    };
}
complex!(f32, 1e-5);
complex!(f64, 1e-13);

fn random<T: Any>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::of(C(rng.f32() as f64 - 0.5, rng.f32() as f64 - 0.5))).collect()
}

fn up<T: Any>(d: &Device, h: &Handles, v: &[T]) -> GpuRef<T> {
    d.upload(h.stream(), v).unwrap()
}

fn down<T: Any>(h: &Handles, b: &GpuRef<T>) -> Vec<C> {
    b.download(h.stream()).unwrap().iter().map(|v| v.c()).collect()
}

fn cs<T: Any>(v: &[T]) -> Vec<C> {
    v.iter().map(|x| x.c()).collect()
}

#[track_caller]
fn close(what: &str, got: C, want: C, scale: f64, tol: f64) {
    let err = (got - want).0.hypot((got - want).1);
    assert!(err <= tol * scale.max(1.0), "{what}: got {got:?}, want {want:?} (scale {scale})");
}

/// The scalar as the type holds it (a real type drops the imaginary part).
fn held<T: Any>(c: C) -> C {
    T::of(c).c()
}

/// `A[i, j]` of a symmetric / Hermitian matrix from its stored triangle.
fn sym(a: &[C], lda: usize, upper: bool, herm: bool, i: usize, j: usize) -> C {
    if i == j {
        return if herm { C(a[i + i * lda].0, 0.0) } else { a[i + i * lda] };
    }
    if upper == (i < j) {
        a[i + j * lda]
    } else if herm {
        a[j + i * lda].conj()
    } else {
        a[j + i * lda]
    }
}

pub fn check_level3<T: Any>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let (m, n) = (7, 5);
    let name = std::any::type_name::<T>();
    let (alpha, beta) = (held::<T>(C(0.75, 0.5)), held::<T>(C(-0.5, 0.25)));
    let transposes: &[Transpose] = if T::IS_COMPLEX {
        &[Transpose::No, Transpose::Yes, Transpose::Conj]
    } else {
        &[Transpose::No, Transpose::Yes]
    };
    // symm and hemm, both sides and triangles; C padded, beta != 0.
    for herm in [false, true] {
        for side in [Side::Left, Side::Right] {
            for fill in [Fill::Lower, Fill::Upper] {
                let order = if side == Side::Left { m } else { n };
                let (lda, ldb, ldc) = (order + 1, m + 2, m + 1);
                let (a, b, c0) = (random::<T>(rng, lda * order), random::<T>(rng, ldb * n), random::<T>(rng, ldc * n));
                let (da, db, dc) = (up(d, h, &a), up(d, h, &b), up(d, h, &c0));
                let s = Symm {
                    side,
                    fill,
                    m,
                    n,
                    alpha: T::of(alpha),
                    a: &da,
                    lda: Some(lda),
                    b: &db,
                    ldb: Some(ldb),
                    beta: T::of(beta),
                    c: &dc,
                    ldc: Some(ldc),
                };
                let bl = h.blas().unwrap();
                if herm { bl.hemm(&s) } else { bl.symm(&s) }.unwrap().wait().unwrap();
                let (af, bf, cf, got) = (cs(&a), cs(&b), cs(&c0), down(h, &dc));
                let upper = fill == Fill::Upper;
                for j in 0..n {
                    for i in 0..m {
                        let mut sum = C::default();
                        if side == Side::Left {
                            for l in 0..m {
                                sum = sum + sym(&af, lda, upper, herm, i, l) * bf[l + j * ldb];
                            }
                        } else {
                            for l in 0..n {
                                sum = sum + bf[i + l * ldb] * sym(&af, lda, upper, herm, l, j);
                            }
                        }
                        let want = alpha * sum + beta * cf[i + j * ldc];
                        let what = format!("{name} {} {side:?} {fill:?} ({i},{j})", if herm { "hemm" } else { "symm" });
                        close(&what, got[i + j * ldc], want, 4.0, T::TOL * 20.0);
                    }
                    assert_eq!(got[m + j * ldc], cf[m + j * ldc], "padding of C written");
                }
            }
        }
    }
    // trmm, every side, triangle, transpose and diagonal.
    for side in [Side::Left, Side::Right] {
        for fill in [Fill::Lower, Fill::Upper] {
            for &trans in transposes {
                for diag in [Diag::NonUnit, Diag::Unit] {
                    let order = if side == Side::Left { m } else { n };
                    let (a, b) = (random::<T>(rng, order * order), random::<T>(rng, m * n));
                    let (da, db, dc) = (up(d, h, &a), up(d, h, &b), up(d, h, &vec![T::of(C(f64::NAN, 0.0)); m * n]));
                    let t = Trmm {
                        side,
                        fill,
                        trans,
                        diag,
                        m,
                        n,
                        alpha: T::of(alpha),
                        a: &da,
                        lda: None,
                        b: &db,
                        ldb: None,
                        c: &dc,
                        ldc: None,
                    };
                    h.blas().unwrap().trmm(&t).unwrap().wait().unwrap();
                    let (af, bf, got) = (cs(&a), cs(&b), down(h, &dc));
                    // The stored triangle, the rest zero, the diagonal one when unit; then op().
                    let tri: Vec<C> = (0..order * order)
                        .map(|e| {
                            let (i, j) = (e % order, e / order);
                            if i == j && diag == Diag::Unit {
                                C(1.0, 0.0)
                            } else if (fill == Fill::Lower) == (i >= j) || i == j {
                                af[e]
                            } else {
                                C::default()
                            }
                        })
                        .collect();
                    for j in 0..n {
                        for i in 0..m {
                            let mut sum = C::default();
                            if side == Side::Left {
                                for l in 0..m {
                                    sum = sum + at(trans, &tri, order, i, l) * bf[l + j * m];
                                }
                            } else {
                                for l in 0..n {
                                    sum = sum + bf[i + l * m] * at(trans, &tri, order, l, j);
                                }
                            }
                            let what = format!("{name} trmm {side:?} {fill:?} {trans:?} {diag:?} ({i},{j})");
                            close(&what, got[i + j * m], alpha * sum, 4.0, T::TOL * 20.0);
                        }
                    }
                }
            }
        }
    }
    // syr2k, her2k and herk, both triangles, every transpose each takes; the other triangle keeps
    // its poison.
    let k = 4;
    for herm in [false, true] {
        for fill in [Fill::Lower, Fill::Upper] {
            for &trans in transposes {
                if T::IS_COMPLEX && trans == (if herm { Transpose::Yes } else { Transpose::Conj }) {
                    continue;
                }
                let (ar, ac) = if trans == Transpose::No { (n, k) } else { (k, n) };
                let (a, b) = (random::<T>(rng, ar * ac), random::<T>(rng, ar * ac));
                let c0: Vec<T> = (0..n * n)
                    .map(|e| {
                        let (i, j) = (e % n, e / n);
                        if (fill == Fill::Upper) == (i <= j) || i == j {
                            T::of(C(0.25 * i as f64, 0.5 * j as f64))
                        } else {
                            T::of(C(f64::NAN, 0.0))
                        }
                    })
                    .collect();
                let (da, db) = (up(d, h, &a), up(d, h, &b));
                let (af, bf, cf) = (cs(&a), cs(&b), cs(&c0));
                let hc = |v: C| if herm { v.conj() } else { v };
                let beta_r = C(beta.0, 0.0);
                // rank 2k.
                let dc = up(d, h, &c0);
                let s = Syr2k {
                    fill,
                    trans,
                    n,
                    k,
                    alpha: T::of(alpha),
                    a: &da,
                    lda: None,
                    b: &db,
                    ldb: None,
                    beta: T::of(if herm { beta_r } else { beta }),
                    c: &dc,
                    ldc: None,
                };
                let bl = h.blas().unwrap();
                if herm { bl.her2k(&s) } else { bl.syr2k(&s) }.unwrap().wait().unwrap();
                let got2 = down(h, &dc);
                // herk (only the Hermitian pass; syrk is tested elsewhere).
                let dk = up(d, h, &c0);
                if herm {
                    let hk = Herk {
                        fill,
                        trans,
                        n,
                        k,
                        alpha: T::real(alpha.0),
                        a: &da,
                        lda: None,
                        beta: T::real(beta.0),
                        c: &dk,
                        ldc: None,
                    };
                    h.blas().unwrap().herk(&hk).unwrap().wait().unwrap();
                }
                let gotk = down(h, &dk);
                for j in 0..n {
                    for i in 0..n {
                        let written = (fill == Fill::Upper) == (i <= j) || i == j;
                        let what =
                            format!("{name} {} {fill:?} {trans:?} ({i},{j})", if herm { "her2k" } else { "syr2k" });
                        if !written {
                            assert!(got2[i + j * n].0.is_nan(), "{what}: wrote the other triangle");
                            continue;
                        }
                        let (mut s1, mut s2, mut sk) = (C::default(), C::default(), C::default());
                        for l in 0..k {
                            s1 = s1 + at(trans, &af, ar, i, l) * hc(at(trans, &bf, ar, j, l));
                            s2 = s2 + at(trans, &bf, ar, i, l) * hc(at(trans, &af, ar, j, l));
                            sk = sk + at(trans, &af, ar, i, l) * hc(at(trans, &af, ar, j, l));
                        }
                        let old = cf[i + j * n];
                        let mut want = alpha * s1 + hc(alpha) * s2 + if herm { beta_r } else { beta } * old;
                        let mut wantk = C(alpha.0, 0.0) * sk + beta_r * old;
                        if herm && i == j {
                            want.1 = 0.0;
                            wantk.1 = 0.0;
                        }
                        close(&what, got2[i + j * n], want, 4.0, T::TOL * 20.0);
                        if herm {
                            close(
                                &format!("{name} herk {fill:?} {trans:?} ({i},{j})"),
                                gotk[i + j * n],
                                wantk,
                                4.0,
                                T::TOL * 20.0,
                            );
                        }
                    }
                }
            }
        }
    }
    // dgmm, both sides, out of place and in place, x strided.
    for side in [Side::Left, Side::Right] {
        let xn = if side == Side::Left { m } else { n };
        let (a, x) = (random::<T>(rng, (m + 1) * n), random::<T>(rng, 2 * xn));
        let (da, dx, dc) = (up(d, h, &a), up(d, h, &x), up(d, h, &vec![T::of(C(f64::NAN, 0.0)); m * n]));
        let bl = h.blas().unwrap();
        bl.dgmm(side, m, n, &da, Some(m + 1), Vector::strided(&dx, 2), &dc, None).unwrap();
        bl.dgmm(side, m, n, &da, Some(m + 1), Vector::strided(&dx, 2), &da, Some(m + 1)).unwrap().wait().unwrap();
        let (af, xf, got, inplace) = (cs(&a), cs(&x), down(h, &dc), down(h, &da));
        for j in 0..n {
            for i in 0..m {
                let want = af[i + j * (m + 1)] * xf[2 * if side == Side::Left { i } else { j }];
                close(&format!("{name} dgmm {side:?}"), got[i + j * m], want, 1.0, T::TOL * 4.0);
                close(&format!("{name} dgmm {side:?} in place"), inplace[i + j * (m + 1)], want, 1.0, T::TOL * 4.0);
            }
        }
    }
}
