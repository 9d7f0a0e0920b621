//! The CPU references of the cuBLAS tests, in f64, shared by the simulator suite (which runs them
//! on a simulated device) and the GPU suite (on the GPU): each `check_*` runs ops on the device it
//! is given, on fresh random inputs with outputs poisoned (NaN) so unwritten elements show, and
//! checks them against the reference. [`every_op`] runs every op once from a seed and returns
//! the outputs, so that two backends can be compared on the same inputs.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::Rng;
use cusched::blas::{
    BatchStrides, Diag, Fill, Geam, Gemm, GemmBatched, GemmElement, Gemv, Side, Syrk, Transpose, Trsm, Vector,
};
use cusched::half::{bf16, f16};
use cusched::{Device, Element, GpuRef, Handles, StreamId};

pub trait Num: GemmElement {
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
    /// Relative tolerance against the sum of absolute terms.
    const TOL: f64;
    fn scalar(x: f64) -> Self::Scalar;
}
macro_rules! num {
    ($t:ty, $of:expr, $f:expr, $tol:expr, $sc:expr) => {
        impl Num for $t {
            fn of(x: f64) -> Self {
                $of(x)
            }
            fn f(self) -> f64 {
                $f(self)
            }
            const TOL: f64 = $tol;
            fn scalar(x: f64) -> Self::Scalar {
                $sc(x)
            }
        }
    };
}
num!(f32, |x| x as f32, |v: f32| v as f64, 1e-5, |x| x as f32);
num!(f64, |x| x, |v: f64| v, 1e-13, |x| x);
num!(f16, f16::from_f64, |v: f16| v.to_f64(), 2e-2, |x| x as f32);
num!(bf16, bf16::from_f64, |v: bf16| v.to_f64(), 2e-2, |x| x as f32);

pub fn nan<T: Num>() -> T {
    T::of(f64::NAN)
}

pub fn random<T: Num>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::of(rng.f32() as f64)).collect()
}

pub fn up<T: Element>(d: &Device, s: StreamId, v: &[T]) -> GpuRef<T> {
    d.upload(s, v).unwrap()
}

pub fn at(t: Transpose, m: &[f64], ld: usize, i: usize, j: usize) -> f64 {
    match t {
        Transpose::No => m[i + j * ld],
        Transpose::Yes | Transpose::Conj => m[j + i * ld],
    }
}

#[track_caller]
pub fn close(what: &str, got: f64, want: f64, scale: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * scale.max(1e-30) + 1e-30,
        "{what}: got {got}, want {want} (scale {scale}, tol {tol})"
    );
}

/// One GEMM of every transpose combination, with padded leading dimensions and beta != 0.
pub fn check_gemm<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let (m, n, k) = (37, 29, 53);
    for (ta, tb) in [
        (Transpose::No, Transpose::No),
        (Transpose::Yes, Transpose::No),
        (Transpose::No, Transpose::Yes),
        (Transpose::Yes, Transpose::Yes),
    ] {
        let s = h.stream();
        let (ar, ac) = if ta == Transpose::No { (m, k) } else { (k, m) };
        let (br, bc) = if tb == Transpose::No { (k, n) } else { (n, k) };
        let (lda, ldb, ldc) = (ar + 3, br + 1, m + 2);
        let a: Vec<T> = random(rng, lda * ac);
        let b: Vec<T> = random(rng, ldb * bc);
        let c0: Vec<T> = random(rng, ldc * n);
        let (alpha, beta) = (0.75, -0.5);
        let (da, db, dc) = (up(d, s, &a), up(d, s, &b), up(d, s, &c0));
        let g = Gemm::new(m, n, k, &da, &db, &dc)
            .transpose(ta, tb)
            .leading(lda, ldb, ldc)
            .scale(T::scalar(alpha), T::scalar(beta));
        h.blas().unwrap().gemm(&g).unwrap().wait().unwrap();
        let got = dc.download(s).unwrap();
        let (af, bf, cf): (Vec<f64>, Vec<f64>, Vec<f64>) =
            (a.iter().map(|x| x.f()).collect(), b.iter().map(|x| x.f()).collect(), c0.iter().map(|x| x.f()).collect());
        for j in 0..n {
            for i in 0..m {
                let (mut sum, mut abs) = (0.0, 0.0);
                for l in 0..k {
                    let p = at(ta, &af, lda, i, l) * at(tb, &bf, ldb, l, j);
                    sum += p;
                    abs += p.abs();
                }
                let want = alpha * sum + beta * cf[i + j * ldc];
                let scale = alpha.abs() * abs + beta.abs() * cf[i + j * ldc].abs();
                close(
                    &format!("{} gemm {ta:?}{tb:?} ({i},{j})", std::any::type_name::<T>()),
                    got[i + j * ldc].f(),
                    want,
                    scale,
                    T::TOL * k as f64,
                );
            }
            // The padding rows between m and ldc are not part of C: untouched.
            for i in m..ldc {
                assert_eq!(got[i + j * ldc].f().to_bits(), cf[i + j * ldc].to_bits(), "padding of C written");
            }
        }
    }
}

pub fn check_strided<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let s = h.stream();
    let (m, n, k, batch) = (9, 7, 5, 4);
    // A is shared by every GEMM (stride 0); B and C are packed.
    let a: Vec<T> = random(rng, m * k);
    let b: Vec<T> = random(rng, k * n * batch);
    let (da, db, dc) = (up(d, s, &a), up(d, s, &b), up(d, s, &vec![nan::<T>(); m * n * batch]));
    let g = Gemm::new(m, n, k, &da, &db, &dc);
    h.blas()
        .unwrap()
        .gemm_strided_batched(&g, BatchStrides { count: batch, a: Some(0), b: None, c: None })
        .unwrap()
        .wait()
        .unwrap();
    let got = dc.download(s).unwrap();
    for p in 0..batch {
        for j in 0..n {
            for i in 0..m {
                let (mut sum, mut abs) = (0.0, 0.0);
                for l in 0..k {
                    let x = a[i + l * m].f() * b[p * k * n + l + j * k].f();
                    sum += x;
                    abs += x.abs();
                }
                close("strided gemm", got[p * m * n + i + j * m].f(), sum, abs, T::TOL * k as f64);
            }
        }
    }
}

pub fn check_batched<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let s = h.stream();
    let (m, n, k) = (6, 5, 4);
    let host: Vec<(Vec<T>, Vec<T>)> = (0..3).map(|_| (random(rng, m * k), random(rng, k * n))).collect();
    let a: Vec<GpuRef<T>> = host.iter().map(|(a, _)| up(d, s, a)).collect();
    let b: Vec<GpuRef<T>> = host.iter().map(|(_, b)| up(d, s, b)).collect();
    let c: Vec<GpuRef<T>> = (0..3).map(|_| up(d, s, &vec![nan::<T>(); m * n])).collect();
    let req = GemmBatched {
        trans_a: Transpose::No,
        trans_b: Transpose::No,
        m,
        n,
        k,
        alpha: T::scalar(1.0),
        beta: T::scalar(0.0),
        a: &a,
        b: &b,
        c: &c,
    };
    h.blas().unwrap().gemm_batched(&req).unwrap().wait().unwrap();
    for (p, (ha, hb)) in host.iter().enumerate() {
        let got = c[p].download(s).unwrap();
        for j in 0..n {
            for i in 0..m {
                let (mut sum, mut abs) = (0.0, 0.0);
                for l in 0..k {
                    let x = ha[i + l * m].f() * hb[l + j * k].f();
                    sum += x;
                    abs += x.abs();
                }
                close("batched gemm", got[i + j * m].f(), sum, abs, T::TOL * k as f64);
            }
        }
    }
}

pub trait Real: Num<Scalar = Self> + cusched::blas::BlasReal {}
impl Real for f32 {}
impl Real for f64 {}

pub fn check_level1<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let s = h.stream();
    let n = 1000;
    let x: Vec<T> = random(rng, 2 * n);
    let y: Vec<T> = random(rng, n);
    let xf: Vec<f64> = x.iter().map(|v| v.f()).collect();
    let yf: Vec<f64> = y.iter().map(|v| v.f()).collect();
    let (dx, dy) = (up(d, s, &x), up(d, s, &y));
    let tol = T::TOL * n as f64;
    // x is read with stride 2 throughout.
    let vx = Vector::strided(&dx, 2);
    let xs: Vec<f64> = (0..n).map(|i| xf[2 * i]).collect();
    let b = h.blas().unwrap();
    let dot = b.dot(n, vx, Vector::from(&dy)).unwrap().wait().unwrap().f();
    close(
        "dot",
        dot,
        xs.iter().zip(&yf).map(|(a, b)| a * b).sum(),
        xs.iter().zip(&yf).map(|(a, b)| (a * b).abs()).sum(),
        tol,
    );
    let nrm = b.nrm2(n, vx).unwrap().wait().unwrap().f();
    close("nrm2", nrm, xs.iter().map(|v| v * v).sum::<f64>().sqrt(), nrm, tol);
    let asum = b.asum(n, vx).unwrap().wait().unwrap().f();
    close("asum", asum, xs.iter().map(|v| v.abs()).sum(), asum, tol);
    let want_max = (0..n).fold(0, |best, i| if xs[i].abs() > xs[best].abs() { i } else { best });
    let want_min = (0..n).fold(0, |best, i| if xs[i].abs() < xs[best].abs() { i } else { best });
    assert_eq!(b.iamax(n, vx).unwrap().wait().unwrap(), want_max);
    assert_eq!(b.iamin(n, vx).unwrap().wait().unwrap(), want_min);

    // y = 0.5 x + y over a negative increment of y (same elements, reversed walk: y[n-1-i] gets
    // x[i]), then y *= -2.
    b.axpy(n, T::of(0.5), vx, Vector::strided(&dy, -1)).unwrap();
    b.scal(n, T::of(-2.0), Vector::from(&dy)).unwrap();
    let got = dy.download(s).unwrap();
    for i in 0..n {
        let xi = xs[n - 1 - i];
        close("axpy+scal", got[i].f(), -2.0 * (0.5 * xi + yf[i]), 2.0 * (xi.abs() + yf[i].abs()), T::TOL * 4.0);
    }
    // copy into a poisoned buffer, swap, rot.
    let dz = up(d, s, &vec![nan::<T>(); n]);
    let b = h.blas().unwrap();
    b.copy(n, vx, Vector::from(&dz)).unwrap();
    let z = dz.download(s).unwrap();
    assert!((0..n).all(|i| z[i].f() == xs[i]), "copy");
    let (du, dv) = (up(d, s, &y), up(d, s, &z));
    let b = h.blas().unwrap();
    b.swap(n, Vector::from(&du), Vector::from(&dv)).unwrap();
    let (u, v) = (du.download(s).unwrap(), dv.download(s).unwrap());
    assert!((0..n).all(|i| u[i].f() == xs[i] && v[i].f() == yf[i]), "swap");
    let (c, sn) = (0.6, 0.8);
    h.blas().unwrap().rot(n, Vector::from(&du), Vector::from(&dv), T::of(c), T::of(sn)).unwrap().wait().unwrap();
    let (u, v) = (du.download(s).unwrap(), dv.download(s).unwrap());
    for i in 0..n {
        close("rot x", u[i].f(), c * xs[i] + sn * yf[i], xs[i].abs() + yf[i].abs(), T::TOL * 4.0);
        close("rot y", v[i].f(), c * yf[i] - sn * xs[i], xs[i].abs() + yf[i].abs(), T::TOL * 4.0);
    }
}

pub fn check_level23<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let s = h.stream();
    let (m, n) = (23, 17);
    let a: Vec<T> = random(rng, m * n);
    let af: Vec<f64> = a.iter().map(|v| v.f()).collect();
    let da = up(d, s, &a);
    // gemv, both transposes.
    for trans in [Transpose::No, Transpose::Yes] {
        let (xn, yn) = if trans == Transpose::No { (n, m) } else { (m, n) };
        let x: Vec<T> = random(rng, xn);
        let (dx, dy) = (up(d, s, &x), up(d, s, &vec![nan::<T>(); yn]));
        let g = Gemv {
            trans,
            m,
            n,
            alpha: T::of(1.5),
            a: &da,
            lda: None,
            x: Vector::from(&dx),
            beta: T::of(0.0),
            y: Vector::from(&dy),
        };
        h.blas().unwrap().gemv(&g).unwrap().wait().unwrap();
        let got = dy.download(s).unwrap();
        for i in 0..yn {
            let terms: Vec<f64> = (0..xn).map(|l| at(trans, &af, m, i, l) * x[l].f()).collect();
            close(
                "gemv",
                got[i].f(),
                1.5 * terms.iter().sum::<f64>(),
                1.5 * terms.iter().map(|t| t.abs()).sum::<f64>(),
                T::TOL * 30.0,
            );
        }
    }
    // ger: A2 = 2 x yᵀ + A.
    let (x, y): (Vec<T>, Vec<T>) = (random(rng, m), random(rng, n));
    let da2 = up(d, s, &a);
    h.blas()
        .unwrap()
        .ger(m, n, T::of(2.0), Vector::from(&up(d, s, &x)), Vector::from(&up(d, s, &y)), &da2, None)
        .unwrap();
    let got = da2.download(s).unwrap();
    for j in 0..n {
        for i in 0..m {
            let want = 2.0 * x[i].f() * y[j].f() + af[i + j * m];
            close("ger", got[i + j * m].f(), want, want.abs() + af[i + j * m].abs() + 1.0, T::TOL * 4.0);
        }
    }
    // geam: C = 0.5 A + 3 Bᵀ (B stored n x m).
    let b: Vec<T> = random(rng, n * m);
    let (db, dc) = (up(d, s, &b), up(d, s, &vec![nan::<T>(); m * n]));
    let g = Geam {
        trans_a: Transpose::No,
        trans_b: Transpose::Yes,
        m,
        n,
        alpha: T::of(0.5),
        a: &da,
        lda: None,
        beta: T::of(3.0),
        b: &db,
        ldb: None,
        c: &dc,
        ldc: None,
    };
    h.blas().unwrap().geam(&g).unwrap();
    let got = dc.download(s).unwrap();
    for j in 0..n {
        for i in 0..m {
            let want = 0.5 * af[i + j * m] + 3.0 * b[j + i * n].f();
            close("geam", got[i + j * m].f(), want, want.abs() + 4.0, T::TOL * 4.0);
        }
    }
    // syrk on the upper triangle: the strictly lower part keeps its poison.
    let k = n;
    let dcs = up(d, s, &vec![nan::<T>(); m * m]);
    let sy = Syrk {
        fill: Fill::Upper,
        trans: Transpose::No,
        n: m,
        k,
        alpha: T::of(1.0),
        a: &da,
        lda: None,
        beta: T::of(0.0),
        c: &dcs,
        ldc: None,
    };
    h.blas().unwrap().syrk(&sy).unwrap();
    let got = dcs.download(s).unwrap();
    for j in 0..m {
        for i in 0..m {
            let g = got[i + j * m].f();
            if i <= j {
                let terms: Vec<f64> = (0..k).map(|l| af[i + l * m] * af[j + l * m]).collect();
                close("syrk", g, terms.iter().sum(), terms.iter().map(|t| t.abs()).sum(), T::TOL * k as f64);
            } else {
                assert!(g.is_nan(), "syrk wrote the lower triangle at ({i},{j})");
            }
        }
    }
    // trsm, both sides: solve with a well-conditioned lower-triangular A, check A X = 2 B.
    for side in [Side::Left, Side::Right] {
        let order = if side == Side::Left { m } else { n };
        let mut t: Vec<T> = random(rng, order * order);
        for i in 0..order {
            t[i + i * order] = T::of(4.0 + t[i + i * order].f().abs());
        }
        let tf: Vec<f64> = t.iter().map(|v| v.f()).collect();
        let bb: Vec<T> = random(rng, m * n);
        let (dt, dbb) = (up(d, s, &t), up(d, s, &bb));
        let req = Trsm {
            side,
            fill: Fill::Lower,
            trans: Transpose::No,
            diag: Diag::NonUnit,
            m,
            n,
            alpha: T::of(2.0),
            a: &dt,
            lda: None,
            b: &dbb,
            ldb: None,
        };
        h.blas().unwrap().trsm(&req).unwrap().wait().unwrap();
        let xsol: Vec<f64> = dbb.download(s).unwrap().iter().map(|v| v.f()).collect();
        let l = |i: usize, j: usize| if i >= j { tf[i + j * order] } else { 0.0 };
        for j in 0..n {
            for i in 0..m {
                let back: f64 = match side {
                    Side::Left => (0..m).map(|p| l(i, p) * xsol[p + j * m]).sum(),
                    Side::Right => (0..n).map(|p| xsol[i + p * m] * l(p, j)).sum(),
                };
                close("trsm", back, 2.0 * bb[i + j * m].f(), 10.0, T::TOL * 50.0);
            }
        }
    }
}

/// One op's output, for comparing two backends: its name, its elements as f64, and the
/// tolerance relative to the output's largest magnitude.
pub type Output = (String, Vec<f64>, f64);

fn down<T: Num>(s: StreamId, buf: &GpuRef<T>) -> Vec<f64> {
    buf.download(s).unwrap().iter().map(|v| v.f()).collect()
}

/// GEMM of every transpose pair, padded leading dimensions, beta != 0; a strided batch sharing
/// `A`; a pointer-array batch.
fn gemm_outputs<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng, out: &mut Vec<Output>) {
    let s = h.stream();
    let name = std::any::type_name::<T>();
    let (m, n, k) = (19, 13, 27);
    for (ta, tb) in [(Transpose::No, Transpose::No), (Transpose::Yes, Transpose::Yes), (Transpose::Yes, Transpose::No)]
    {
        let (ar, ac) = if ta == Transpose::No { (m, k) } else { (k, m) };
        let (br, bc) = if tb == Transpose::No { (k, n) } else { (n, k) };
        let (lda, ldb, ldc) = (ar + 2, br + 1, m + 3);
        let (da, db, dc) = (
            up(d, s, &random::<T>(rng, lda * ac)),
            up(d, s, &random::<T>(rng, ldb * bc)),
            up(d, s, &random::<T>(rng, ldc * n)),
        );
        let g = Gemm::new(m, n, k, &da, &db, &dc)
            .transpose(ta, tb)
            .leading(lda, ldb, ldc)
            .scale(T::scalar(1.25), T::scalar(-0.5));
        h.blas().unwrap().gemm(&g).unwrap().wait().unwrap();
        out.push((format!("{name} gemm {ta:?}{tb:?}"), down(s, &dc), T::TOL * k as f64));
    }
    let batch = 3;
    let (da, db, dc) = (
        up(d, s, &random::<T>(rng, m * k)),
        up(d, s, &random::<T>(rng, k * n * batch)),
        up(d, s, &vec![nan::<T>(); m * n * batch]),
    );
    let g = Gemm::new(m, n, k, &da, &db, &dc);
    let strides = BatchStrides { count: batch, a: Some(0), b: None, c: None };
    h.blas().unwrap().gemm_strided_batched(&g, strides).unwrap().wait().unwrap();
    out.push((format!("{name} gemm_strided_batched"), down(s, &dc), T::TOL * k as f64));
    let a: Vec<GpuRef<T>> = (0..batch).map(|_| up(d, s, &random::<T>(rng, k * m))).collect();
    let b: Vec<GpuRef<T>> = (0..batch).map(|_| up(d, s, &random::<T>(rng, n * k))).collect();
    let c: Vec<GpuRef<T>> = (0..batch).map(|_| up(d, s, &random::<T>(rng, m * n))).collect();
    let req = GemmBatched {
        trans_a: Transpose::Yes,
        trans_b: Transpose::Yes,
        m,
        n,
        k,
        alpha: T::scalar(0.5),
        beta: T::scalar(2.0),
        a: &a,
        b: &b,
        c: &c,
    };
    h.blas().unwrap().gemm_batched(&req).unwrap().wait().unwrap();
    for (i, c) in c.iter().enumerate() {
        out.push((format!("{name} gemm_batched[{i}]"), down(s, c), T::TOL * k as f64));
    }
}

/// Every level 1, 2 and 3 op, with strided and negative increments, both transposes and both
/// sides where the op has them.
fn level_outputs<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng, out: &mut Vec<Output>) {
    let s = h.stream();
    let name = std::any::type_name::<T>();
    let n = 300;
    let tol = T::TOL * 8.0;
    let (dx, dy) = (up(d, s, &random::<T>(rng, 2 * n)), up(d, s, &random::<T>(rng, n)));
    let vx = Vector::strided(&dx, 2);
    let b = h.blas().unwrap();
    let dot = b.dot(n, vx, Vector::strided(&dy, -1)).unwrap().wait().unwrap().f();
    let nrm = b.nrm2(n, vx).unwrap().wait().unwrap().f();
    let asum = b.asum(n, vx).unwrap().wait().unwrap().f();
    let (imax, imin) = (b.iamax(n, vx).unwrap().wait().unwrap(), b.iamin(n, vx).unwrap().wait().unwrap());
    out.push((format!("{name} dot nrm2 asum"), vec![dot, nrm, asum], T::TOL * n as f64));
    out.push((format!("{name} iamax iamin"), vec![imax as f64, imin as f64], 0.0));
    b.axpy(n, T::of(0.5), vx, Vector::strided(&dy, -1)).unwrap();
    b.scal(n, T::of(-2.0), Vector::from(&dy)).unwrap();
    out.push((format!("{name} axpy scal"), down(s, &dy), tol));
    let dz = up(d, s, &vec![nan::<T>(); 2 * n]);
    let b = h.blas().unwrap();
    b.copy(n, Vector::from(&dy), Vector::strided(&dz, -2)).unwrap();
    out.push((format!("{name} copy"), down(s, &dz), 0.0));
    let (du, dv) = (up(d, s, &random::<T>(rng, n)), up(d, s, &random::<T>(rng, 3 * n)));
    let b = h.blas().unwrap();
    b.swap(n, Vector::from(&du), Vector::strided(&dv, 3)).unwrap();
    b.rot(n, Vector::strided(&dv, -3), Vector::from(&du), T::of(0.6), T::of(0.8)).unwrap();
    out.push((format!("{name} swap rot x"), down(s, &du), tol));
    out.push((format!("{name} swap rot y"), down(s, &dv), tol));

    let (m, n) = (21, 15);
    let lda = m + 2;
    let da = up(d, s, &random::<T>(rng, lda * n));
    for trans in [Transpose::No, Transpose::Yes] {
        let (xn, yn) = if trans == Transpose::No { (n, m) } else { (m, n) };
        let (dx, dy) = (up(d, s, &random::<T>(rng, 2 * xn)), up(d, s, &random::<T>(rng, yn)));
        let g = Gemv {
            trans,
            m,
            n,
            alpha: T::of(1.5),
            a: &da,
            lda: Some(lda),
            x: Vector::strided(&dx, 2),
            beta: T::of(-1.0),
            y: Vector::strided(&dy, -1),
        };
        h.blas().unwrap().gemv(&g).unwrap().wait().unwrap();
        out.push((format!("{name} gemv {trans:?}"), down(s, &dy), T::TOL * 30.0));
    }
    let (dx, dy, dg) =
        (up(d, s, &random::<T>(rng, m)), up(d, s, &random::<T>(rng, n)), up(d, s, &random::<T>(rng, lda * n)));
    h.blas().unwrap().ger(m, n, T::of(2.0), Vector::from(&dx), Vector::from(&dy), &dg, Some(lda)).unwrap();
    out.push((format!("{name} ger"), down(s, &dg), tol));
    let (db, dc) = (up(d, s, &random::<T>(rng, n * m)), up(d, s, &vec![nan::<T>(); lda * n]));
    let g = Geam {
        trans_a: Transpose::No,
        trans_b: Transpose::Yes,
        m,
        n,
        alpha: T::of(0.5),
        a: &da,
        lda: Some(lda),
        beta: T::of(3.0),
        b: &db,
        ldb: None,
        c: &dc,
        ldc: Some(lda),
    };
    h.blas().unwrap().geam(&g).unwrap();
    out.push((format!("{name} geam"), down(s, &dc), tol));
    for (fill, trans) in [(Fill::Upper, Transpose::No), (Fill::Lower, Transpose::Yes)] {
        let (order, k) = if trans == Transpose::No { (m, n) } else { (n, m) };
        let dcs = up(d, s, &random::<T>(rng, order * order));
        let sy = Syrk {
            fill,
            trans,
            n: order,
            k,
            alpha: T::of(0.75),
            a: &da,
            lda: Some(lda),
            beta: T::of(0.5),
            c: &dcs,
            ldc: None,
        };
        h.blas().unwrap().syrk(&sy).unwrap();
        out.push((format!("{name} syrk {fill:?} {trans:?}"), down(s, &dcs), T::TOL * k as f64));
    }
    for (side, fill, trans, diag) in [
        (Side::Left, Fill::Lower, Transpose::No, Diag::NonUnit),
        (Side::Left, Fill::Upper, Transpose::Yes, Diag::Unit),
        (Side::Right, Fill::Lower, Transpose::Yes, Diag::NonUnit),
        (Side::Right, Fill::Upper, Transpose::No, Diag::Unit),
    ] {
        let order = if side == Side::Left { m } else { n };
        // Off-diagonal entries small against the diagonal: well conditioned, unit diagonal too.
        let mut t: Vec<T> = random::<T>(rng, order * order).iter().map(|v| T::of(v.f() / order as f64)).collect();
        for i in 0..order {
            t[i + i * order] = T::of(if diag == Diag::Unit { f64::NAN } else { 2.0 + t[i + i * order].f().abs() });
        }
        let (dt, dbb) = (up(d, s, &t), up(d, s, &random::<T>(rng, lda * n)));
        let req = Trsm { side, fill, trans, diag, m, n, alpha: T::of(2.0), a: &dt, lda: None, b: &dbb, ldb: Some(lda) };
        h.blas().unwrap().trsm(&req).unwrap().wait().unwrap();
        out.push((format!("{name} trsm {side:?} {fill:?} {trans:?} {diag:?}"), down(s, &dbb), T::TOL * 50.0));
    }
}

/// Every cuBLAS op once on `h` (a stream of `d`), from inputs drawn from `seed`: the outputs,
/// named, for [`same_outputs`].
pub fn every_op(d: &Device, h: &mut Handles, seed: u64) -> Vec<Output> {
    let mut rng = Rng::seeded(seed);
    let mut out = Vec::new();
    gemm_outputs::<f32>(d, h, &mut rng, &mut out);
    gemm_outputs::<f64>(d, h, &mut rng, &mut out);
    gemm_outputs::<f16>(d, h, &mut rng, &mut out);
    gemm_outputs::<bf16>(d, h, &mut rng, &mut out);
    level_outputs::<f32>(d, h, &mut rng, &mut out);
    level_outputs::<f64>(d, h, &mut rng, &mut out);
    out
}

/// Asserts that two runs of [`every_op`] agree, each element to its op's tolerance relative to
/// the output's largest magnitude (NaN where both are NaN: elements left unwritten by both).
#[track_caller]
pub fn same_outputs(got: &[Output], want: &[Output]) {
    assert_eq!(got.len(), want.len(), "different op lists");
    for ((name, g, tol), (wname, w, _)) in got.iter().zip(want) {
        assert_eq!(name, wname);
        assert_eq!(g.len(), w.len(), "{name}: lengths");
        let scale = w.iter().filter(|v| v.is_finite()).fold(1.0f64, |a, v| a.max(v.abs()));
        for (i, (g, w)) in g.iter().zip(w).enumerate() {
            if g.is_nan() && w.is_nan() {
                continue;
            }
            close(&format!("{name} [{i}]"), *g, *w, scale, *tol);
        }
    }
}

/// `trsm` and `syrk` in every fill, transpose, diagonal and side, against the f64 reference:
/// `op(A) X = alpha B` (or `X op(A)`) multiplied back, and `syrk`'s triangle summed, the other
/// triangle untouched.
pub fn check_triangular<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    let s = h.stream();
    let (m, n) = (11, 7);
    for side in [Side::Left, Side::Right] {
        for fill in [Fill::Lower, Fill::Upper] {
            for trans in [Transpose::No, Transpose::Yes] {
                for diag in [Diag::NonUnit, Diag::Unit] {
                    let order = if side == Side::Left { m } else { n };
                    let mut t: Vec<f64> = (0..order * order).map(|_| rng.f32() as f64 / order as f64).collect();
                    for i in 0..order {
                        t[i + i * order] = if diag == Diag::Unit { f64::NAN } else { 2.0 + t[i + i * order].abs() };
                    }
                    let tt: Vec<T> = t.iter().map(|&v| T::of(v)).collect();
                    let bb: Vec<T> = random(rng, m * n);
                    let (dt, db) = (up(d, s, &tt), up(d, s, &bb));
                    let req =
                        Trsm { side, fill, trans, diag, m, n, alpha: T::of(2.0), a: &dt, lda: None, b: &db, ldb: None };
                    h.blas().unwrap().trsm(&req).unwrap().wait().unwrap();
                    let x: Vec<f64> = db.download(s).unwrap().iter().map(|v| v.f()).collect();
                    // op(A)[i, j] of the triangle the op reads.
                    let a = |i: usize, j: usize| {
                        let (r, c) = if trans == Transpose::No { (i, j) } else { (j, i) };
                        let stored = if fill == Fill::Lower { r >= c } else { r <= c };
                        if r == c && diag == Diag::Unit {
                            1.0
                        } else if stored {
                            t[r + c * order]
                        } else {
                            0.0
                        }
                    };
                    for j in 0..n {
                        for i in 0..m {
                            let back: f64 = match side {
                                Side::Left => (0..m).map(|p| a(i, p) * x[p + j * m]).sum(),
                                Side::Right => (0..n).map(|p| x[i + p * m] * a(p, j)).sum(),
                            };
                            let what = format!("trsm {side:?} {fill:?} {trans:?} {diag:?} ({i},{j})");
                            close(&what, back, 2.0 * bb[i + j * m].f(), 10.0, T::TOL * 50.0);
                        }
                    }
                }
            }
        }
    }
    for fill in [Fill::Lower, Fill::Upper] {
        for trans in [Transpose::No, Transpose::Yes] {
            let k = 5;
            let (ar, ac) = if trans == Transpose::No { (m, k) } else { (k, m) };
            let lda = ar + 1;
            let a: Vec<T> = random(rng, lda * ac);
            let c0: Vec<T> = random(rng, m * m);
            let (da, dc) = (up(d, s, &a), up(d, s, &c0));
            let sy = Syrk {
                fill,
                trans,
                n: m,
                k,
                alpha: T::of(0.5),
                a: &da,
                lda: Some(lda),
                beta: T::of(2.0),
                c: &dc,
                ldc: None,
            };
            h.blas().unwrap().syrk(&sy).unwrap().wait().unwrap();
            let got = dc.download(s).unwrap();
            let af: Vec<f64> = a.iter().map(|v| v.f()).collect();
            for j in 0..m {
                for i in 0..m {
                    let inside = if fill == Fill::Lower { i >= j } else { i <= j };
                    let g = got[i + j * m].f();
                    if inside {
                        let terms: Vec<f64> =
                            (0..k).map(|l| at(trans, &af, lda, i, l) * at(trans, &af, lda, j, l)).collect();
                        let want = 0.5 * terms.iter().sum::<f64>() + 2.0 * c0[i + j * m].f();
                        close("syrk", g, want, terms.iter().map(|t| t.abs()).sum::<f64>() + 2.0, T::TOL * k as f64);
                    } else {
                        assert_eq!(
                            g,
                            c0[i + j * m].f(),
                            "syrk {fill:?} {trans:?} wrote ({i},{j}) outside its triangle"
                        );
                    }
                }
            }
        }
    }
}

/// A grouped batched GEMM of two groups with their own shapes, transposes and scalars (the
/// second with beta != 0 and three problems), against f64.
pub fn check_grouped<T: Num<Scalar = f32> + cusched::blas::GroupedElement>(d: &Device, h: &mut Handles, rng: &mut Rng) {
    use cusched::blas::GemmGroup;
    let s = h.stream();
    // (trans_a, trans_b, m, n, k, alpha, beta, count)
    let specs =
        [(Transpose::No, Transpose::No, 5, 4, 3, 1.0, 0.0, 2), (Transpose::Yes, Transpose::No, 3, 6, 7, 0.5, -1.0, 3)];
    let mut host = Vec::new();
    let mut bufs = Vec::new();
    for &(ta, tb, m, n, k, _, _, count) in &specs {
        let a: Vec<Vec<T>> = (0..count).map(|_| random(rng, m * k)).collect();
        let b: Vec<Vec<T>> = (0..count).map(|_| random(rng, k * n)).collect();
        let c: Vec<Vec<T>> = (0..count).map(|_| random(rng, m * n)).collect();
        let up_all = |v: &Vec<Vec<T>>| v.iter().map(|x| up(d, s, x)).collect::<Vec<GpuRef<T>>>();
        bufs.push((up_all(&a), up_all(&b), up_all(&c)));
        host.push((ta, tb, a, b, c));
    }
    let groups: Vec<GemmGroup<'_, T>> = specs
        .iter()
        .zip(&bufs)
        .map(|(&(trans_a, trans_b, m, n, k, alpha, beta, _), (a, b, c))| GemmGroup {
            trans_a,
            trans_b,
            m,
            n,
            k,
            alpha: alpha as f32,
            beta: beta as f32,
            a,
            b,
            c,
        })
        .collect();
    h.blas().unwrap().gemm_grouped_batched(&groups).unwrap().wait().unwrap();
    for ((&(_, _, m, n, k, alpha, beta, count), (ta, tb, a, b, c)), (_, _, dc)) in specs.iter().zip(&host).zip(&bufs) {
        let (lda, ldb) = (if *ta == Transpose::No { m } else { k }, if *tb == Transpose::No { k } else { n });
        for p in 0..count {
            let got = dc[p].download(s).unwrap();
            let (af, bf): (Vec<f64>, Vec<f64>) =
                (a[p].iter().map(|x| x.f()).collect(), b[p].iter().map(|x| x.f()).collect());
            for j in 0..n {
                for i in 0..m {
                    let (mut sum, mut abs) = (0.0, 0.0);
                    for l in 0..k {
                        let x = at(*ta, &af, lda, i, l) * at(*tb, &bf, ldb, l, j);
                        sum += x;
                        abs += x.abs();
                    }
                    let old = c[p][i + j * m].f();
                    let want = alpha * sum + beta * old;
                    close("grouped gemm", got[i + j * m].f(), want, alpha.abs() * abs + old.abs(), T::TOL * k as f64);
                }
            }
        }
    }
}
