//! cuBLAS ops on a real GPU against CPU references in f64, on fresh random inputs, with
//! outputs poisoned (NaN) before each op so unwritten elements show. Both call paths: inline
//! `Handles` and lane jobs.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::*;
use cusched::blas::{
    BatchStrides, Diag, Fill, Geam, Gemm, GemmBatched, GemmElement, Gemv, MathMode, Side, Syrk, Transpose, Trsm, Vector,
};
use cusched::half::{bf16, f16};
use cusched::{Device, Element, GpuRef, Handles, StreamId};

trait Num: GemmElement {
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

fn nan<T: Num>() -> T {
    T::of(f64::NAN)
}

fn random<T: Num>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::of(rng.f32() as f64)).collect()
}

fn up<T: Element>(d: &Device, s: StreamId, v: &[T]) -> GpuRef<T> {
    d.upload(s, v).unwrap()
}

fn at(t: Transpose, m: &[f64], ld: usize, i: usize, j: usize) -> f64 {
    match t {
        Transpose::No => m[i + j * ld],
        Transpose::Yes => m[j + i * ld],
    }
}

#[track_caller]
fn close(what: &str, got: f64, want: f64, scale: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * scale.max(1e-30) + 1e-30,
        "{what}: got {got}, want {want} (scale {scale}, tol {tol})"
    );
}

/// One GEMM of every transpose combination, with padded leading dimensions and beta != 0.
fn check_gemm<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemm_all_types_and_transposes_inline() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_gemm::<f32>(&d, &mut h, &mut rng);
    check_gemm::<f64>(&d, &mut h, &mut rng);
    check_gemm::<f16>(&d, &mut h, &mut rng);
    check_gemm::<bf16>(&d, &mut h, &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemm_on_a_lane_and_tf32_math_mode() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    lane.submit(move |cx| {
        let mut rng = Rng::new();
        check_gemm::<f32>(&dd, cx, &mut rng);
        check_gemm::<bf16>(&dd, cx, &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
    // TF32: same GEMM, tolerance of TF32's 10-bit mantissa.
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    h.blas().unwrap().set_math_mode(MathMode::Tf32Allowed).unwrap();
    assert_eq!(h.blas().unwrap().math_mode(), MathMode::Tf32Allowed);
    let mut rng = Rng::new();
    let (m, n, k) = (64, 64, 64);
    let a: Vec<f32> = random(&mut rng, m * k);
    let b: Vec<f32> = random(&mut rng, k * n);
    let (da, db, dc) = (up(&d, s, &a), up(&d, s, &b), up(&d, s, &vec![f32::NAN; m * n]));
    h.blas().unwrap().gemm(&Gemm::new(m, n, k, &da, &db, &dc)).unwrap().wait().unwrap();
    let got = dc.download(s).unwrap();
    for j in 0..n {
        for i in 0..m {
            let (mut sum, mut abs) = (0.0f64, 0.0f64);
            for l in 0..k {
                let p = a[i + l * m] as f64 * b[l + j * k] as f64;
                sum += p;
                abs += p.abs();
            }
            close("tf32 gemm", got[i + j * m] as f64, sum, abs, 2e-3);
        }
    }
}

fn check_strided<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
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

fn check_batched<T: Num>(d: &Device, h: &mut Handles, rng: &mut Rng) {
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn strided_and_pointer_array_batches() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_strided::<f32>(&d, &mut h, &mut rng);
    check_strided::<f64>(&d, &mut h, &mut rng);
    check_strided::<bf16>(&d, &mut h, &mut rng);
    check_batched::<f32>(&d, &mut h, &mut rng);
    check_batched::<f64>(&d, &mut h, &mut rng);
    check_batched::<f16>(&d, &mut h, &mut rng);
}

trait Real: Num<Scalar = Self> + cusched::blas::BlasReal {}
impl Real for f32 {}
impl Real for f64 {}

fn check_level1<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng) {
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

fn check_level23<T: Real>(d: &Device, h: &mut Handles, rng: &mut Rng) {
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

#[test]
#[ignore = "needs a CUDA GPU"]
fn level1_2_3_inline() {
    let Some(d) = gpu() else { return };
    let mut rng = Rng::new();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    check_level1::<f32>(&d, &mut h, &mut rng);
    check_level1::<f64>(&d, &mut h, &mut rng);
    check_level23::<f32>(&d, &mut h, &mut rng);
    check_level23::<f64>(&d, &mut h, &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn level1_2_3_on_a_lane_with_scalars_through_the_job() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("blas").unwrap();
    let dd = d.clone();
    let dot = lane
        .submit(move |cx| {
            let mut rng = Rng::new();
            check_level1::<f64>(&dd, cx, &mut rng);
            check_level23::<f32>(&dd, cx, &mut rng);
            // A scalar result produced inside a job comes back as the job's value.
            let ones = dd.upload(cx.stream(), &vec![1.0f32; 300])?;
            let dot = cx.blas()?.dot(300, Vector::from(&ones), Vector::from(&ones))?;
            Ok(dot)
        })
        .wait()
        .unwrap();
    assert_eq!(dot.wait().unwrap(), 300.0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_rejects_bad_input_without_recording() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let (a, b, c) = (
        d.alloc_zeros::<f32>(s, 6).unwrap(),
        d.alloc_zeros::<f32>(s, 12).unwrap(),
        d.alloc_zeros::<f32>(s, 8).unwrap(),
    );
    let before = d.stats();
    for g in [
        Gemm::new(2, 4, 4, &a, &b, &c),
        Gemm::new(2, 4, 3, &a, &b, &c).leading(1, 3, 2),
        Gemm::new(0, 4, 3, &a, &b, &c),
    ] {
        assert!(matches!(h.blas().unwrap().gemm(&g), Err(cusched::Error::InvalidArgument { .. })));
    }
    let after = d.stats();
    assert_eq!((before.events, before.waits), (after.events, after.waits));
}

/// The raw handle is the live cuBLAS handle of the `Blas`, bound to the stream it enqueues on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_cublas_handle_is_live_on_the_blas_stream() {
    use cusched::cudarc::cublas::sys;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let lib = h.blas().unwrap();
    let raw = lib.cublas_handle().unwrap();
    let (status, got, want) = raw_launch(&d, cusched::LaunchRecorder::new_strict(lib.stream()), |stream| {
        let mut got: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: 1. `raw` is the live handle of `lib`, which outlives the launch, and its
        // context is current (`raw_launch` binds it); 2. `got` is a valid out-pointer for one
        // stream; 3. the query enqueues nothing and touches no device memory, so the launch
        // declares no uses.
        let status = unsafe { sys::cublasGetStream_v2(raw, &mut got) };
        (status, got as usize, stream as usize)
    });
    assert_eq!(status, sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
    assert_ne!(want, 0, "the handles' stream is one of its own, not the legacy default stream");
    assert_eq!(got, want, "the raw handle is not bound to the stream of its Blas");
}
