//! The CPU reference of the mixed-precision GEMM (`gemm_ex`), in f64, shared by the simulator
//! suite and the GPU suite: [`check_gemm_ex`] runs every combination of cuBLAS's table once
//! (padded leading dimensions, a transpose, beta != 0) and a strided int8 batch.
#![allow(clippy::needless_range_loop)]

use crate::common::Rng;
use cusched::blas::{BatchStrides, ComputeType, ExElement, GemmEx, Transpose};
use cusched::half::{bf16, f16};
use cusched::{Device, Handles};

pub trait Ex: ExElement + std::fmt::Debug {
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
}
impl Ex for i8 {
    fn of(x: f64) -> Self {
        x as i8
    }
    fn f(self) -> f64 {
        self as f64
    }
}
impl Ex for i32 {
    fn of(x: f64) -> Self {
        x as i32
    }
    fn f(self) -> f64 {
        self as f64
    }
}
impl Ex for f16 {
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
}
impl Ex for bf16 {
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
}
impl Ex for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
}

/// One GEMM of `AB` into `Out` in `compute`, against f64 within `tol` of the terms' magnitude
/// (zero: exact).
pub fn one<AB: Ex, Out: Ex>(d: &Device, h: &mut Handles, rng: &mut Rng, compute: ComputeType, tol: f64) {
    let s = h.stream();
    let (m, n, k) = (12, 9, 20);
    let int = compute == ComputeType::I32;
    let val =
        |rng: &mut Rng| if int { (rng.f32() as f64 * 200.0 - 100.0).round() } else { rng.f32() as f64 * 2.0 - 1.0 };
    // A transposed (stored k x m), B as is; lda and ldb multiples of 4 as int8 needs.
    let (lda, ldb, ldc) = (k + 4, k + 8, m + 1);
    let a: Vec<AB> = (0..lda * m).map(|_| AB::of(val(rng))).collect();
    let b: Vec<AB> = (0..ldb * n).map(|_| AB::of(val(rng))).collect();
    let c0: Vec<Out> = (0..ldc * n).map(|_| Out::of(val(rng))).collect();
    // Integer scalars of 1: old cuBLAS documented the int8 path for alpha and beta of 0 or 1 only.
    let (alpha, beta) = if int { (1.0, 1.0) } else { (0.75, -0.5) };
    let (da, db, dc) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.upload(s, &c0).unwrap());
    let g = GemmEx::new(m, n, k, &da, &db, &dc, compute)
        .transpose(Transpose::Yes, Transpose::No)
        .leading(lda, ldb, ldc)
        .scale(alpha as f32, beta as f32);
    h.blas().unwrap().gemm_ex(&g).unwrap().wait().unwrap();
    let got = dc.download(s).unwrap();
    let what = format!("gemm_ex {} -> {} in {compute:?}", std::any::type_name::<AB>(), std::any::type_name::<Out>());
    for j in 0..n {
        for i in 0..m {
            let (mut sum, mut abs) = (0.0, 0.0);
            for l in 0..k {
                let p = a[l + i * lda].f() * b[l + j * ldb].f();
                sum += p;
                abs += p.abs();
            }
            let old = c0[i + j * ldc].f();
            let want = alpha * sum + beta * old;
            let scale = alpha.abs() * abs + beta.abs() * old.abs();
            let g = got[i + j * ldc].f();
            assert!((g - want).abs() <= tol * scale, "{what} ({i},{j}): got {g}, want {want} (scale {scale})");
        }
        for i in m..ldc {
            assert_eq!(got[i + j * ldc].f(), c0[i + j * ldc].f(), "{what}: padding of C written");
        }
    }
}

/// Every combination of the table, then a strided int8 batch.
pub fn check_gemm_ex(d: &Device, h: &mut Handles, rng: &mut Rng) {
    use ComputeType as K;
    one::<i8, i32>(d, h, rng, K::I32, 0.0);
    for k in [K::F32, K::F32Pedantic] {
        one::<f16, f32>(d, h, rng, k, 1e-5);
        one::<bf16, f32>(d, h, rng, k, 1e-5);
        one::<f16, f16>(d, h, rng, k, 2e-3);
        one::<bf16, bf16>(d, h, rng, k, 1e-2);
        one::<f32, f32>(d, h, rng, k, 1e-5);
    }
    one::<f16, f16>(d, h, rng, K::F16, 2e-2);
    one::<f32, f32>(d, h, rng, K::F32FastTf32, 2e-3);
    one::<f32, f32>(d, h, rng, K::F32Fast16F, 2e-3);
    one::<f32, f32>(d, h, rng, K::F32Fast16BF, 1e-2);
    // Strided int8: A shared, B and C packed.
    let s = h.stream();
    let (m, n, k, count) = (8, 4, 16, 3);
    let a: Vec<i8> = (0..m * k).map(|i| (i % 7) as i8 - 3).collect();
    let b: Vec<i8> = (0..k * n * count).map(|i| (i % 5) as i8 - 2).collect();
    let (da, db, dc) =
        (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.upload(s, &vec![i32::MIN; m * n * count]).unwrap());
    let g = GemmEx::new(m, n, k, &da, &db, &dc, K::I32);
    h.blas()
        .unwrap()
        .gemm_ex_strided_batched(&g, BatchStrides { count, a: Some(0), b: None, c: None })
        .unwrap()
        .wait()
        .unwrap();
    let got = dc.download(s).unwrap();
    for p in 0..count {
        for j in 0..n {
            for i in 0..m {
                let want: i32 = (0..k).map(|l| a[i + l * m] as i32 * b[p * k * n + l + j * k] as i32).sum();
                assert_eq!(got[p * m * n + i + j * m], want, "strided int8 gemm_ex ({p}: {i},{j})");
            }
        }
    }
}
