//! The CPU references of the complex cuBLAS ops, in f64 complex arithmetic, shared by the
//! simulator suite and the GPU suite: [`check_complex`] runs every op the complex types offer
//! (GEMM with every pair of no / plain / conjugate transposes, strided and pointer-array batches,
//! level 1, `gemv` in all three transposes, `geru`, `gerc`, `geam`, `syrk`, `trsm`) on fresh
//! random inputs, outputs poisoned (NaN) so unwritten elements show.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::Rng;
use cusched::blas::{
    BatchStrides, BlasComplex, Diag, Fill, Geam, Gemm, GemmBatched, Gemv, Side, Syrk, Transpose, Trsm, Vector,
};
use cusched::{Complex, Device, GpuRef, Handles};

/// A complex number in f64.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct C(pub f64, pub f64);

impl C {
    pub fn conj(self) -> C {
        C(self.0, -self.1)
    }
    pub fn abs(self) -> f64 {
        self.0.hypot(self.1)
    }
    pub fn abs1(self) -> f64 {
        self.0.abs() + self.1.abs()
    }
}
impl std::ops::Add for C {
    type Output = C;
    fn add(self, o: C) -> C {
        C(self.0 + o.0, self.1 + o.1)
    }
}
impl std::ops::Sub for C {
    type Output = C;
    fn sub(self, o: C) -> C {
        C(self.0 - o.0, self.1 - o.1)
    }
}
impl std::ops::Mul for C {
    type Output = C;
    fn mul(self, o: C) -> C {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
}

/// `Complex<f32>` and `Complex<f64>` as the references take them.
pub trait Cx: BlasComplex + std::fmt::Debug {
    fn of(c: C) -> Self;
    fn c(self) -> C;
    fn real(x: f64) -> Self::Real;
    fn re(v: Self::Real) -> f64;
    /// Relative tolerance against the sum of absolute terms.
    const TOL: f64;
}
impl Cx for Complex<f32> {
    fn of(c: C) -> Self {
        Complex::new(c.0 as f32, c.1 as f32)
    }
    fn c(self) -> C {
        C(self.re as f64, self.im as f64)
    }
    fn real(x: f64) -> f32 {
        x as f32
    }
    fn re(v: f32) -> f64 {
        v as f64
    }
    const TOL: f64 = 1e-5;
}
impl Cx for Complex<f64> {
    fn of(c: C) -> Self {
        Complex::new(c.0, c.1)
    }
    fn c(self) -> C {
        C(self.re, self.im)
    }
    fn real(x: f64) -> f64 {
        x
    }
    fn re(v: f64) -> f64 {
        v
    }
    const TOL: f64 = 1e-13;
}

fn random<T: Cx>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::of(C(rng.f32() as f64, rng.f32() as f64))).collect()
}

fn nan<T: Cx>(n: usize) -> Vec<T> {
    vec![T::of(C(f64::NAN, f64::NAN)); n]
}

fn up<T: Cx>(d: &Device, h: &Handles, v: &[T]) -> GpuRef<T> {
    d.upload(h.stream(), v).unwrap()
}

fn down<T: Cx>(h: &Handles, b: &GpuRef<T>) -> Vec<C> {
    b.download(h.stream()).unwrap().iter().map(|v| v.c()).collect()
}

/// `op(M)[i, j]` of a column-major `M` at `ld`.
pub fn at(t: Transpose, m: &[C], ld: usize, i: usize, j: usize) -> C {
    match t {
        Transpose::No => m[i + j * ld],
        Transpose::Yes => m[j + i * ld],
        Transpose::Conj => m[j + i * ld].conj(),
    }
}

#[track_caller]
fn close(what: &str, got: C, want: C, scale: f64, tol: f64) {
    let err = (got - want).abs();
    assert!(err <= tol * scale.max(1e-30) + 1e-30, "{what}: got {got:?}, want {want:?} (scale {scale}, tol {tol})");
}

/// `sum_l x_l y_l` and the sum of the terms' magnitudes.
fn sum(terms: impl Iterator<Item = C>) -> (C, f64) {
    terms.fold((C::default(), 0.0), |(s, a), t| (s + t, a + t.abs()))
}

const TRANSPOSES: [Transpose; 3] = [Transpose::No, Transpose::Yes, Transpose::Conj];

/// Every op the complex types offer, against the f64 references.
pub fn check_complex<T: Cx>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    check_gemm::<T>(d, h, rng);
    check_batches::<T>(d, h, rng);
    check_level1::<T>(d, h, rng);
    check_level23::<T>(d, h, rng);
}

fn check_gemm<T: Cx>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let (m, n, k) = (11, 7, 13);
    let (alpha, beta) = (C(0.75, -0.25), C(-0.5, 0.5));
    for ta in TRANSPOSES {
        for tb in TRANSPOSES {
            let (ar, ac) = if ta == Transpose::No { (m, k) } else { (k, m) };
            let (br, bc) = if tb == Transpose::No { (k, n) } else { (n, k) };
            let (lda, ldb, ldc) = (ar + 2, br + 1, m + 3);
            let (a, b, c0) = (random::<T>(rng, lda * ac), random::<T>(rng, ldb * bc), random::<T>(rng, ldc * n));
            let (da, db, dc) = (up(d, h, &a), up(d, h, &b), up(d, h, &c0));
            let g = Gemm::new(m, n, k, &da, &db, &dc)
                .transpose(ta, tb)
                .leading(lda, ldb, ldc)
                .scale(T::of(alpha), T::of(beta));
            h.blas().unwrap().gemm(&g).unwrap().wait().unwrap();
            let got = down(h, &dc);
            let (af, bf, cf): (Vec<C>, Vec<C>, Vec<C>) = (
                a.iter().map(|v| v.c()).collect(),
                b.iter().map(|v| v.c()).collect(),
                c0.iter().map(|v| v.c()).collect(),
            );
            for j in 0..n {
                for i in 0..m {
                    let (s, abs) = sum((0..k).map(|l| at(ta, &af, lda, i, l) * at(tb, &bf, ldb, l, j)));
                    let old = cf[i + j * ldc];
                    let want = alpha * s + beta * old;
                    let what = format!("{} gemm {ta:?}{tb:?} ({i},{j})", std::any::type_name::<T>());
                    close(&what, got[i + j * ldc], want, abs + old.abs(), T::TOL * k as f64);
                }
                for i in m..ldc {
                    assert_eq!(got[i + j * ldc], cf[i + j * ldc], "padding of C written");
                }
            }
        }
    }
}

fn check_batches<T: Cx>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let (m, n, k, batch) = (5, 4, 3, 3);
    // Strided: A shared (stride 0), B conjugate-transposed, B and C packed.
    let (a, b) = (random::<T>(rng, m * k), random::<T>(rng, n * k * batch));
    let (da, db, dc) = (up(d, h, &a), up(d, h, &b), up(d, h, &nan::<T>(m * n * batch)));
    let g = Gemm::new(m, n, k, &da, &db, &dc).transpose(Transpose::No, Transpose::Conj);
    let strides = BatchStrides { count: batch, a: Some(0), b: None, c: None };
    h.blas().unwrap().gemm_strided_batched(&g, strides).unwrap().wait().unwrap();
    let got = down(h, &dc);
    let (af, bf): (Vec<C>, Vec<C>) = (a.iter().map(|v| v.c()).collect(), b.iter().map(|v| v.c()).collect());
    for p in 0..batch {
        for j in 0..n {
            for i in 0..m {
                let (s, abs) = sum((0..k).map(|l| af[i + l * m] * bf[p * n * k + j + l * n].conj()));
                close("strided complex gemm", got[p * m * n + i + j * m], s, abs, T::TOL * k as f64);
            }
        }
    }
    // Pointer arrays.
    let host: Vec<(Vec<T>, Vec<T>)> = (0..batch).map(|_| (random(rng, m * k), random(rng, k * n))).collect();
    let a: Vec<GpuRef<T>> = host.iter().map(|(a, _)| up(d, h, a)).collect();
    let b: Vec<GpuRef<T>> = host.iter().map(|(_, b)| up(d, h, b)).collect();
    let c: Vec<GpuRef<T>> = (0..batch).map(|_| up(d, h, &nan::<T>(m * n))).collect();
    let alpha = C(0.5, 1.0);
    let req = GemmBatched {
        trans_a: Transpose::No,
        trans_b: Transpose::No,
        m,
        n,
        k,
        alpha: T::of(alpha),
        beta: T::of(C(0.0, 0.0)),
        a: &a,
        b: &b,
        c: &c,
    };
    h.blas().unwrap().gemm_batched(&req).unwrap().wait().unwrap();
    for (p, (ha, hb)) in host.iter().enumerate() {
        let got = down(h, &c[p]);
        for j in 0..n {
            for i in 0..m {
                let (s, abs) = sum((0..k).map(|l| ha[i + l * m].c() * hb[l + j * k].c()));
                close("batched complex gemm", got[i + j * m], alpha * s, abs * alpha.abs(), T::TOL * k as f64);
            }
        }
    }
}

fn check_level1<T: Cx>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let n = 300;
    let (x, y) = (random::<T>(rng, 2 * n), random::<T>(rng, n));
    let (dx, dy) = (up(d, h, &x), up(d, h, &y));
    let vx = Vector::strided(&dx, 2);
    let xs: Vec<C> = (0..n).map(|i| x[2 * i].c()).collect();
    let ys: Vec<C> = y.iter().map(|v| v.c()).collect();
    let tol = T::TOL * n as f64;
    let b = h.blas().unwrap();
    let dotu = b.dotu(n, vx, Vector::from(&dy)).unwrap().wait().unwrap().c();
    let (want, abs) = sum(xs.iter().zip(&ys).map(|(a, b)| *a * *b));
    close("dotu", dotu, want, abs, tol);
    let dotc = b.dotc(n, vx, Vector::from(&dy)).unwrap().wait().unwrap().c();
    let (want, abs) = sum(xs.iter().zip(&ys).map(|(a, b)| a.conj() * *b));
    close("dotc", dotc, want, abs, tol);
    let nrm = T::re(b.nrm2(n, vx).unwrap().wait().unwrap());
    let want = xs.iter().map(|v| v.abs() * v.abs()).sum::<f64>().sqrt();
    close("nrm2", C(nrm, 0.0), C(want, 0.0), want, tol);
    let asum = T::re(b.asum(n, vx).unwrap().wait().unwrap());
    let want = xs.iter().map(|v| v.abs1()).sum::<f64>();
    close("asum", C(asum, 0.0), C(want, 0.0), want, tol);
    let want_max = (0..n).fold(0, |best, i| if xs[i].abs1() > xs[best].abs1() { i } else { best });
    let want_min = (0..n).fold(0, |best, i| if xs[i].abs1() < xs[best].abs1() { i } else { best });
    assert_eq!(b.iamax(n, vx).unwrap().wait().unwrap(), want_max, "iamax");
    assert_eq!(b.iamin(n, vx).unwrap().wait().unwrap(), want_min, "iamin");
    // y = alpha x + y through a reversed y, then y *= s.
    let (alpha, s) = (C(0.5, -1.0), C(-2.0, 0.5));
    b.axpy(n, T::of(alpha), vx, Vector::strided(&dy, -1)).unwrap();
    b.scal(n, T::of(s), Vector::from(&dy)).unwrap();
    let got = down(h, &dy);
    for i in 0..n {
        let xi = xs[n - 1 - i];
        let want = s * (alpha * xi + ys[i]);
        close("axpy+scal", got[i], want, 3.0 * (xi.abs() + ys[i].abs()), T::TOL * 8.0);
    }
    // copy into poison, swap, rot (real c and s).
    let dz = up(d, h, &nan::<T>(n));
    let b = h.blas().unwrap();
    b.copy(n, vx, Vector::from(&dz)).unwrap();
    assert_eq!(down(h, &dz), xs, "copy");
    let (du, dv) = (up(d, h, &y), up(d, h, &dz.download(h.stream()).unwrap()));
    let b = h.blas().unwrap();
    b.swap(n, Vector::from(&du), Vector::from(&dv)).unwrap();
    assert_eq!((down(h, &du), down(h, &dv)), (xs.clone(), ys.clone()), "swap");
    let (c, sn) = (0.6, 0.8);
    h.blas().unwrap().rot(n, Vector::from(&du), Vector::from(&dv), T::real(c), T::real(sn)).unwrap().wait().unwrap();
    let (u, v) = (down(h, &du), down(h, &dv));
    let (cc, ss) = (C(c, 0.0), C(sn, 0.0));
    for i in 0..n {
        let scale = xs[i].abs() + ys[i].abs();
        close("rot x", u[i], cc * xs[i] + ss * ys[i], scale, T::TOL * 4.0);
        close("rot y", v[i], cc * ys[i] - ss * xs[i], scale, T::TOL * 4.0);
    }
}

fn check_level23<T: Cx>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let (m, n) = (9, 6);
    let a = random::<T>(rng, m * n);
    let af: Vec<C> = a.iter().map(|v| v.c()).collect();
    let da = up(d, h, &a);
    let alpha = C(1.5, -0.5);
    for trans in TRANSPOSES {
        let (xn, yn) = if trans == Transpose::No { (n, m) } else { (m, n) };
        let x = random::<T>(rng, xn);
        let (dx, dy) = (up(d, h, &x), up(d, h, &nan::<T>(yn)));
        let g = Gemv {
            trans,
            m,
            n,
            alpha: T::of(alpha),
            a: &da,
            lda: None,
            x: Vector::from(&dx),
            beta: T::of(C(0.0, 0.0)),
            y: Vector::from(&dy),
        };
        h.blas().unwrap().gemv(&g).unwrap().wait().unwrap();
        let got = down(h, &dy);
        for i in 0..yn {
            let (s, abs) = sum((0..xn).map(|l| at(trans, &af, m, i, l) * x[l].c()));
            close(&format!("gemv {trans:?}"), got[i], alpha * s, abs * alpha.abs(), T::TOL * 30.0);
        }
    }
    // geru and gerc: A + alpha x yᵀ and A + alpha x yᴴ.
    for conj in [false, true] {
        let (x, y) = (random::<T>(rng, m), random::<T>(rng, n));
        let da2 = up(d, h, &a);
        let (dx, dy) = (up(d, h, &x), up(d, h, &y));
        let b = h.blas().unwrap();
        if conj {
            b.gerc(m, n, T::of(alpha), Vector::from(&dx), Vector::from(&dy), &da2, None).unwrap();
        } else {
            b.geru(m, n, T::of(alpha), Vector::from(&dx), Vector::from(&dy), &da2, None).unwrap();
        }
        let got = down(h, &da2);
        for j in 0..n {
            for i in 0..m {
                let yj = if conj { y[j].c().conj() } else { y[j].c() };
                let want = alpha * x[i].c() * yj + af[i + j * m];
                close("ger", got[i + j * m], want, want.abs() + af[i + j * m].abs() + 2.0, T::TOL * 4.0);
            }
        }
    }
    // geam: C = alpha A + beta Bᴴ (B stored n x m).
    let b = random::<T>(rng, n * m);
    let bf: Vec<C> = b.iter().map(|v| v.c()).collect();
    let (db, dc) = (up(d, h, &b), up(d, h, &nan::<T>(m * n)));
    let beta = C(-1.0, 2.0);
    let g = Geam {
        trans_a: Transpose::No,
        trans_b: Transpose::Conj,
        m,
        n,
        alpha: T::of(alpha),
        a: &da,
        lda: None,
        beta: T::of(beta),
        b: &db,
        ldb: None,
        c: &dc,
        ldc: None,
    };
    h.blas().unwrap().geam(&g).unwrap();
    let got = down(h, &dc);
    for j in 0..n {
        for i in 0..m {
            let want = alpha * af[i + j * m] + beta * bf[j + i * n].conj();
            close("geam", got[i + j * m], want, want.abs() + 6.0, T::TOL * 4.0);
        }
    }
    // syrk (no conjugation), both transposes, upper triangle: the lower keeps its poison.
    for trans in [Transpose::No, Transpose::Yes] {
        let (order, k) = if trans == Transpose::No { (m, n) } else { (n, m) };
        let dcs = up(d, h, &nan::<T>(order * order));
        let sy = Syrk {
            fill: Fill::Upper,
            trans,
            n: order,
            k,
            alpha: T::of(alpha),
            a: &da,
            lda: None,
            beta: T::of(C(0.0, 0.0)),
            c: &dcs,
            ldc: None,
        };
        h.blas().unwrap().syrk(&sy).unwrap();
        let got = down(h, &dcs);
        for j in 0..order {
            for i in 0..order {
                let g = got[i + j * order];
                if i <= j {
                    let (s, abs) = sum((0..k).map(|l| at(trans, &af, m, i, l) * at(trans, &af, m, j, l)));
                    close("syrk", g, alpha * s, abs * alpha.abs(), T::TOL * k as f64);
                } else {
                    assert!(g.0.is_nan(), "syrk wrote the lower triangle at ({i},{j})");
                }
            }
        }
    }
    // trsm, both sides, every transpose of a well-conditioned lower-triangular A: check
    // op(A) X = alpha B (or X op(A) = alpha B).
    for side in [Side::Left, Side::Right] {
        for trans in TRANSPOSES {
            let order = if side == Side::Left { m } else { n };
            let mut t = random::<T>(rng, order * order);
            for i in 0..order {
                t[i + i * order] = T::of(C(4.0 + t[i + i * order].c().0, 0.5));
            }
            let tf: Vec<C> = t.iter().map(|v| v.c()).collect();
            let bb = random::<T>(rng, m * n);
            let (dt, dbb) = (up(d, h, &t), up(d, h, &bb));
            let req = Trsm {
                side,
                fill: Fill::Lower,
                trans,
                diag: Diag::NonUnit,
                m,
                n,
                alpha: T::of(alpha),
                a: &dt,
                lda: None,
                b: &dbb,
                ldb: None,
            };
            h.blas().unwrap().trsm(&req).unwrap().wait().unwrap();
            let xsol = down(h, &dbb);
            let lower: Vec<C> =
                (0..order * order).map(|e| if e % order >= e / order { tf[e] } else { C::default() }).collect();
            let opa = |i: usize, j: usize| at(trans, &lower, order, i, j);
            for j in 0..n {
                for i in 0..m {
                    let back = match side {
                        Side::Left => (0..m).fold(C::default(), |s, p| s + opa(i, p) * xsol[p + j * m]),
                        Side::Right => (0..n).fold(C::default(), |s, p| s + xsol[i + p * m] * opa(p, j)),
                    };
                    close(&format!("trsm {side:?} {trans:?}"), back, alpha * bb[i + j * m].c(), 10.0, T::TOL * 50.0);
                }
            }
        }
    }
}
