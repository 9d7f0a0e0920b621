//! Bad input to every library op is rejected before anything is recorded or enqueued, with a
//! typed error naming the argument. Runs on the simulated backend (validation needs no GPU);
//! valid input there computes on the host (every library the simulator computes) or reaches
//! the backend check and fails with `LibraryUnavailable`, also without recording anything.

use crate::common::fixture::{fx, rejects};
#[cfg(feature = "curand")]
use crate::common::fixture::{rejection, runs};
#[cfg(feature = "cublas")]
use crate::common::{fixture::Fx, sim};
#[cfg(feature = "cublas")]
use cusched::blas::{BatchStrides, Fill, Geam, Gemm, GemmBatched, Gemv, Side, Syrk, Transpose, Trsm, Vector};
#[cfg(feature = "cufft")]
use cusched::fft::{DataLayout, Direction, FftLayout};
#[cfg(feature = "curand")]
use cusched::rng::{Generator, Seed};
#[cfg(any(feature = "cublas", feature = "curand"))]
use cusched::Error;
#[cfg(feature = "cublas")]
use cusched::{GpuRef, Result};

#[test]
#[cfg(feature = "cublas")]
fn gemm_rejects_bad_shapes() {
    let mut fx = fx();
    let (a, b, c) = (fx.buf::<f32>(6), fx.buf::<f32>(12), fx.buf::<f32>(8));
    rejects(&mut fx, "m", |fx| fx.h.blas()?.gemm(&Gemm::new(0, 4, 3, &a, &b, &c)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 4, &a, &b, &c)));
    rejects(&mut fx, "lda", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c).leading(1, 3, 2)));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &a)));
    rejects(&mut fx, "ldc", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c).leading(2, 3, 1)));
    // Transposed A is stored k x m = 3 x 2: lda must be at least 3.
    rejects(&mut fx, "lda", |fx| {
        fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c).transpose(Transpose::Yes, Transpose::No).leading(2, 3, 2))
    });
    let f = fx.foreign::<f32>(6);
    rejects(&mut fx, "!foreign", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &f, &b, &c)));
    // Valid input computes on the simulator.
    fx.h.blas().unwrap().gemm(&Gemm::new(2, 4, 3, &a, &b, &c)).unwrap().wait().unwrap();
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c)));
}

#[test]
#[cfg(feature = "cublas")]
fn gemm_rejects_bad_shapes_in_half_types() {
    let mut fx = fx();
    let (a, b, c) =
        (fx.buf::<cusched::half::bf16>(4), fx.buf::<cusched::half::bf16>(4), fx.buf::<cusched::half::bf16>(3));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 2, 2, &a, &b, &c)));
    rejects(&mut fx, "k", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 2, 0, &a, &b, &c)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 2, 3, &a, &b, &c)));
}

#[test]
#[cfg(feature = "cublas")]
fn strided_batched_gemm_rejects_bad_batches() {
    let mut fx = fx();
    let (a, b, c) = (fx.buf::<f64>(4 * 3), fx.buf::<f64>(4 * 3), fx.buf::<f64>(4 * 3));
    let g = Gemm::new(2, 2, 2, &a, &b, &c);
    rejects(&mut fx, "batch.count", |fx| fx.h.blas()?.gemm_strided_batched(&g, BatchStrides::packed(0)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm_strided_batched(&g, BatchStrides::packed(4)));
    rejects(&mut fx, "batch.c", |fx| {
        fx.h.blas()?.gemm_strided_batched(&g, BatchStrides { count: 3, a: None, b: None, c: Some(2) })
    });
    // A stride of zero for A broadcasts one matrix: valid (computes on the simulator).
    let broadcast = BatchStrides { count: 3, a: Some(0), b: None, c: None };
    fx.h.blas().unwrap().gemm_strided_batched(&g, broadcast).unwrap().wait().unwrap();
}

#[test]
#[cfg(feature = "cublas")]
fn batched_gemm_rejects_mismatched_arrays() {
    let mut fx = fx();
    let m: Vec<GpuRef<f32>> = (0..3).map(|_| fx.buf::<f32>(4)).collect();
    let short = [fx.buf::<f32>(3)];
    fn batched<'a>(a: &'a [GpuRef<f32>], b: &'a [GpuRef<f32>], c: &'a [GpuRef<f32>]) -> GemmBatched<'a, f32> {
        GemmBatched {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            m: 2,
            n: 2,
            k: 2,
            alpha: 1.0f32,
            beta: 0.0,
            a,
            b,
            c,
        }
    }
    let (one, two) = (m[..1].to_vec(), m[1..3].to_vec());
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm_batched(&batched(&[], &[], &[])));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_batched(&batched(&one, &one, &two)));
    let (twice, last) = ([m[0].clone(), m[0].clone()], [m[2].clone()]);
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_batched(&batched(&two, &two, &twice)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm_batched(&batched(&short, &one, &last)));
}

#[test]
#[cfg(feature = "cublas")]
fn level1_rejects_bad_vectors() {
    let mut fx = fx();
    let (x, y) = (fx.buf::<f32>(8), fx.buf::<f32>(8));
    let (vx, vy) = (Vector::from(&x), Vector::from(&y));
    rejects(&mut fx, "n", |fx| fx.h.blas()?.axpy(0, 1.0, vx, vy));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.axpy(9, 1.0, vx, vy));
    rejects(&mut fx, "y.inc", |fx| fx.h.blas()?.axpy(4, 1.0, vx, Vector::strided(&y, 0)));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.axpy(4, 1.0, vx, Vector::strided(&y, 3)));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.axpy(4, 1.0, vx, vx));
    rejects(&mut fx, "n", |fx| fx.h.blas()?.scal(0, 2.0, vx));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.scal(5, 2.0, Vector::strided(&x, 2)));
    rejects(&mut fx, "x.inc", |fx| fx.h.blas()?.scal(4, 2.0, Vector::strided(&x, -2)));
    rejects(&mut fx, "x.inc", |fx| fx.h.blas()?.nrm2(4, Vector::strided(&x, -1)));
    rejects(&mut fx, "x.inc", |fx| fx.h.blas()?.scal(5, 2.0, Vector::strided(&x, 0)));
    for op in 0..5 {
        let run = |fx: &mut Fx, n: usize, v: Vector<'_, f32>| -> Result<()> {
            let b = fx.h.blas()?;
            match op {
                0 => b.dot(n, v, vy).map(drop),
                1 => b.nrm2(n, v).map(drop),
                2 => b.asum(n, v).map(drop),
                3 => b.iamax(n, v).map(drop),
                _ => b.iamin(n, v).map(drop),
            }
        };
        rejects(&mut fx, "n", |fx| run(fx, 0, vx));
        rejects(&mut fx, "x", |fx| run(fx, 9, vx));
        rejects(&mut fx, "x.inc", |fx| run(fx, 2, Vector::strided(&x, 0)));
        run(&mut fx, 8, vx).unwrap();
    }
    rejects(&mut fx, "y", |fx| fx.h.blas()?.copy(4, vx, vx));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.copy(9, vx, vy));
    rejects(&mut fx, "n", |fx| fx.h.blas()?.copy(0, vx, vy));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.swap(4, vx, vx));
    rejects(&mut fx, "y.inc", |fx| fx.h.blas()?.swap(4, vx, Vector::strided(&y, 0)));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.swap(5, Vector::strided(&x, 2), vy));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.rot(4, vx, vx, 1.0, 0.0));
    rejects(&mut fx, "n", |fx| fx.h.blas()?.rot(0, vx, vy, 1.0, 0.0));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.rot(8, vx, Vector::strided(&y, 2), 1.0, 0.0));
}

#[test]
#[cfg(feature = "cublas")]
fn level2_level3_rejects_bad_shapes() {
    let mut fx = fx();
    let (a, x, y) = (fx.buf::<f64>(12), fx.buf::<f64>(4), fx.buf::<f64>(3));
    // Output candidates are picked by index: closures cannot tie a parameter's lifetime to
    // their result's.
    let outs = [&y, &x];
    let gemv = |trans, m, n, lda, out: usize| Gemv {
        trans,
        m,
        n,
        alpha: 1.0,
        a: &a,
        lda,
        x: Vector::from(&x),
        beta: 0.0,
        y: Vector::from(outs[out]),
    };
    rejects(&mut fx, "m", |fx| fx.h.blas()?.gemv(&gemv(Transpose::No, 0, 4, None, 0)));
    rejects(&mut fx, "lda", |fx| fx.h.blas()?.gemv(&gemv(Transpose::No, 3, 4, Some(2), 0)));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.gemv(&gemv(Transpose::No, 2, 6, None, 0)));
    rejects(&mut fx, "y", |fx| fx.h.blas()?.gemv(&gemv(Transpose::No, 3, 4, None, 1)));

    rejects(&mut fx, "y", |fx| fx.h.blas()?.ger(2, 6, 1.0, Vector::from(&y), Vector::from(&x), &a, None));
    rejects(&mut fx, "lda", |fx| fx.h.blas()?.ger(3, 4, 1.0, Vector::from(&y), Vector::from(&x), &a, Some(2)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.ger(4, 4, 1.0, Vector::from(&x), Vector::from(&x), &a, None));

    let (b, c) = (fx.buf::<f64>(12), fx.buf::<f64>(12));
    let mats = [&c, &b, &y, &a];
    let geam = |m, n, ldc, out: usize| Geam {
        trans_a: Transpose::No,
        trans_b: Transpose::Yes,
        m,
        n,
        alpha: 1.0,
        a: &a,
        lda: None,
        beta: 1.0,
        b: &b,
        ldb: None,
        c: mats[out],
        ldc,
    };
    rejects(&mut fx, "n", |fx| fx.h.blas()?.geam(&geam(3, 0, None, 0)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.geam(&geam(4, 4, None, 0)));
    rejects(&mut fx, "ldc", |fx| fx.h.blas()?.geam(&geam(3, 4, Some(2), 0)));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.geam(&geam(3, 4, None, 1)));

    let syrk = |n, k, lda, out: usize| Syrk {
        fill: Fill::Upper,
        trans: Transpose::No,
        n,
        k,
        alpha: 1.0,
        a: &a,
        lda,
        beta: 0.0,
        c: mats[out],
        ldc: None,
    };
    rejects(&mut fx, "k", |fx| fx.h.blas()?.syrk(&syrk(3, 0, None, 0)));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.syrk(&syrk(4, 3, None, 2)));
    rejects(&mut fx, "lda", |fx| fx.h.blas()?.syrk(&syrk(3, 4, Some(1), 0)));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.syrk(&syrk(3, 4, None, 3)));

    let trsm = |side, m, n, out: usize| Trsm {
        side,
        fill: Fill::Lower,
        trans: Transpose::No,
        diag: cusched::blas::Diag::NonUnit,
        m,
        n,
        alpha: 1.0,
        a: &a,
        lda: None,
        b: mats[out],
        ldb: None,
    };
    rejects(&mut fx, "m", |fx| fx.h.blas()?.trsm(&trsm(Side::Left, 0, 2, 1)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.trsm(&trsm(Side::Right, 2, 4, 1)));
    rejects(&mut fx, "b", |fx| fx.h.blas()?.trsm(&trsm(Side::Left, 3, 5, 1)));
    rejects(&mut fx, "b", |fx| fx.h.blas()?.trsm(&trsm(Side::Left, 3, 3, 3)));
}

#[test]
#[cfg(feature = "curand")]
fn rng_rejects_bad_requests() {
    let mut fx = fx();
    let (f, odd, d, u) = (fx.buf::<f32>(16), fx.buf::<f32>(15), fx.buf::<f64>(12), fx.buf::<u32>(8));
    let empty = fx.buf::<f32>(0);
    let philox = Seed::new(Generator::Philox4x32_10, 42);
    rejects(&mut fx, "out", |fx| fx.h.rng()?.uniform(&philox, &empty));
    rejects(&mut fx, "seed.offset", |fx| fx.h.rng()?.uniform(&Seed::new(Generator::Mtgp32, 1).at(5), &f));
    rejects(&mut fx, "high", |fx| fx.h.rng()?.uniform_range(&philox, &f, 2.0, 1.0));
    rejects(&mut fx, "out", |fx| fx.h.rng()?.normal(&philox, &odd, 0.0, 1.0));
    rejects(&mut fx, "stddev", |fx| fx.h.rng()?.normal(&philox, &f, 0.0, -1.0));
    rejects(&mut fx, "mean", |fx| fx.h.rng()?.log_normal(&philox, &d, f64::NAN, 1.0));
    rejects(&mut fx, "lambda", |fx| fx.h.rng()?.poisson(&philox, &u, 0.0));
    let mut sobol = Seed::new(Generator::Sobol32, 0);
    sobol.dimensions = 5;
    rejects(&mut fx, "out", |fx| fx.h.rng()?.uniform(&sobol, &f));
    sobol.dimensions = 0;
    rejects(&mut fx, "seed.dimensions", |fx| fx.h.rng()?.uniform(&sobol, &f));
    runs(&mut fx, |fx| fx.h.rng()?.uniform(&philox, &f));
}

#[test]
#[cfg(feature = "curand")]
fn rng_bits_rejects_bad_requests() {
    let mut fx = fx();
    let (u, w) = (fx.buf::<u32>(16), fx.buf::<u64>(16));
    let (empty32, empty64) = (fx.buf::<u32>(0), fx.buf::<u64>(0));
    let philox = Seed::new(Generator::Philox4x32_10, 42);
    let sobol64 = Seed::new(Generator::Sobol64, 0);
    rejects(&mut fx, "out", |fx| fx.h.rng()?.bits(&philox, &empty32));
    rejects(&mut fx, "out", |fx| fx.h.rng()?.bits64(&sobol64, &empty64));
    // Each width has its own generators: 64-bit values only from the 64-bit Sobols.
    for g in Generator::ALL {
        let wide = matches!(g, Generator::Sobol64 | Generator::ScrambledSobol64);
        if wide {
            rejects(&mut fx, "seed.generator", |fx| fx.h.rng()?.bits(&Seed::new(g, 7), &u));
            runs(&mut fx, |fx| fx.h.rng()?.bits64(&Seed::new(g, 7), &w));
        } else {
            runs(&mut fx, |fx| fx.h.rng()?.bits(&Seed::new(g, 7), &u));
            rejects(&mut fx, "seed.generator", |fx| fx.h.rng()?.bits64(&Seed::new(g, 7), &w));
        }
    }
    let got = rejection(&mut fx, "seed.generator", |fx| fx.h.rng()?.bits(&sobol64, &u));
    assert!(matches!(&got, Err(Error::InvalidArgument { reason, .. }) if reason.contains("bits64")), "{got:?}");
    let got = rejection(&mut fx, "seed.generator", |fx| fx.h.rng()?.bits64(&philox, &w));
    assert!(matches!(&got, Err(Error::InvalidArgument { reason, .. }) if reason.contains("use bits")), "{got:?}");
    // The seed is checked as a draw's is.
    rejects(&mut fx, "seed.offset", |fx| fx.h.rng()?.bits(&Seed::new(Generator::Mtgp32, 1).at(5), &u));
    let mut sobol32 = Seed::new(Generator::Sobol32, 0);
    sobol32.dimensions = 5;
    rejects(&mut fx, "out", |fx| fx.h.rng()?.bits(&sobol32, &u));
    let mut sobol = sobol64;
    sobol.dimensions = 3;
    rejects(&mut fx, "out", |fx| fx.h.rng()?.bits64(&sobol, &w));
    sobol.dimensions = 0;
    rejects(&mut fx, "seed.dimensions", |fx| fx.h.rng()?.bits64(&sobol, &w));
    sobol.dimensions = 4;
    runs(&mut fx, |fx| fx.h.rng()?.bits64(&sobol, &w));
    // Foreign and stale buffers.
    let (fu, fw) = (fx.foreign::<u32>(16), fx.foreign::<u64>(16));
    rejects(&mut fx, "!foreign", |fx| fx.h.rng()?.bits(&philox, &fu));
    rejects(&mut fx, "!foreign", |fx| fx.h.rng()?.bits64(&sobol64, &fw));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.rng()?.bits(&philox, &u));
    rejects(&mut fx, "!stale", |fx| fx.h.rng()?.bits64(&sobol64, &w));
}

#[test]
#[cfg(feature = "cufft")]
fn fft_rejects_layouts_the_buffers_do_not_fit() {
    let mut fx = fx();
    let c = fx.buf::<cusched::Complex<f32>>(64);
    let c2 = fx.buf::<cusched::Complex<f32>>(64);
    let r = fx.buf::<f32>(64);
    let half = fx.buf::<cusched::Complex<f32>>(32);
    let fwd = Direction::Forward;
    rejects(&mut fx, "input", |fx| fx.h.fft()?.c2c(&FftLayout::d1(65), &c, &c2, fwd));
    rejects(&mut fx, "layout.dims", |fx| fx.h.fft()?.c2c(&FftLayout::d1(0), &c, &c2, fwd));
    rejects(&mut fx, "layout.dims", |fx| {
        fx.h.fft()?.c2c(&FftLayout { dims: vec![2; 4], ..FftLayout::d1(2) }, &c, &c2, fwd)
    });
    rejects(&mut fx, "layout.batch", |fx| fx.h.fft()?.c2c(&FftLayout::d1(8).batched(0), &c, &c2, fwd));
    rejects(&mut fx, "output", |fx| fx.h.fft()?.c2c(&FftLayout::d1(16).batched(3), &c, &half, fwd));
    // R2C of 64 reals needs 33 complex outputs.
    rejects(&mut fx, "output", |fx| fx.h.fft()?.r2c(&FftLayout::d1(64), &r, &half));
    rejects(&mut fx, "input", |fx| fx.h.fft()?.c2r(&FftLayout::d2(8, 8), &half, &r));
    let strided = DataLayout { embed: vec![8], stride: 2, dist: 8 };
    let overlapping = DataLayout { embed: vec![8], stride: 1, dist: 4 };
    rejects(&mut fx, "layout.output", |fx| {
        fx.h.fft()?.c2c(&FftLayout::d1(8).batched(2).with_layouts(strided.clone(), overlapping.clone()), &c, &c2, fwd)
    });
    rejects(&mut fx, "layout.input", |fx| {
        let bad = DataLayout { embed: vec![8, 4], stride: 1, dist: 32 };
        fx.h.fft()?.c2c(&FftLayout::d1(8).with_layouts(bad, overlapping.clone()), &c, &c2, fwd)
    });
    rejects(&mut fx, "output", |fx| {
        fx.h.fft()?.c2c(
            &FftLayout::d1(8).with_layouts(strided.clone(), DataLayout { embed: vec![8], stride: 1, dist: 8 }),
            &c,
            &c,
            fwd,
        )
    });
    // Valid input computes on the simulator, which makes no cuFFT plans.
    fx.h.fft().unwrap().c2c(&FftLayout::d1(64), &c, &c2, fwd).unwrap().wait().unwrap();
    assert_eq!(fx.h.fft().unwrap().plans_made(), 0);
}

#[test]
#[cfg(feature = "cufft")]
fn fft_rejects_half_layouts_cufft_cannot_run() {
    use cusched::half::{bf16, f16};
    use cusched::Complex;
    let mut fx = fx();
    let (c, c2) = (fx.buf::<Complex<f16>>(128), fx.buf::<Complex<f16>>(128));
    let (r, rb) = (fx.buf::<f16>(128), fx.buf::<bf16>(128));
    let cb = fx.buf::<Complex<bf16>>(128);
    let fwd = Direction::Forward;
    let unit = |n: usize, dist| DataLayout { embed: vec![n], stride: 1, dist };
    // C2C: a size that is not a power of two, in 1D and in one dimension of 2D; a side past
    // 2^32 elements; a buffer short of the layout.
    rejects(&mut fx, "layout.dims", |fx| fx.h.fft()?.c2c(&FftLayout::d1(48), &c, &c2, fwd));
    rejects(&mut fx, "layout.dims", |fx| fx.h.fft()?.c2c(&FftLayout::d2(8, 12), &c, &c2, fwd));
    rejects(&mut fx, "layout.input", |fx| {
        let far = FftLayout::d1(2).batched(2).with_layouts(unit(2, 1 << 32), unit(2, 2));
        fx.h.fft()?.c2c(&far, &c, &c2, fwd)
    });
    rejects(&mut fx, "input", |fx| fx.h.fft()?.c2c(&FftLayout::d1(256), &c, &c2, fwd));
    // R2C: a size that is not a power of two, the real input strided, the output short.
    rejects(&mut fx, "layout.dims", |fx| fx.h.fft()?.r2c(&FftLayout::d1(24), &rb, &cb));
    rejects(&mut fx, "layout.input", |fx| {
        let strided = DataLayout { embed: vec![16], stride: 2, dist: 32 };
        fx.h.fft()?.r2c(&FftLayout::d1(16).with_layouts(strided, unit(9, 9)), &rb, &cb)
    });
    let short = fx.buf::<Complex<bf16>>(32);
    rejects(&mut fx, "output", |fx| fx.h.fft()?.r2c(&FftLayout::d1(64), &rb, &short));
    // C2R: a size that is not a power of two, the real output strided, the input short.
    rejects(&mut fx, "layout.dims", |fx| fx.h.fft()?.c2r(&FftLayout::d3(4, 4, 6), &c, &r));
    rejects(&mut fx, "layout.output", |fx| {
        let strided = DataLayout { embed: vec![16], stride: 4, dist: 64 };
        fx.h.fft()?.c2r(&FftLayout::d1(16).with_layouts(unit(9, 9), strided), &c, &r)
    });
    rejects(&mut fx, "input", |fx| fx.h.fft()?.c2r(&FftLayout::d2(16, 16), &c, &r));
    // Valid input computes on the simulator.
    fx.h.fft().unwrap().c2c(&FftLayout::d1(128), &c, &c2, fwd).unwrap().wait().unwrap();
    fx.h.fft().unwrap().r2c(&FftLayout::d1(128), &rb, &cb).unwrap().wait().unwrap();
}

#[test]
#[cfg(feature = "cufft")]
fn fft_refuses_half_types_below_their_compute_capability() {
    use cusched::half::{bf16, f16};
    use cusched::{Complex, Device, Error, Handles, SimConfig};
    // A C2R of bfloat16 and an R2C of half on a device of compute capability `cc`: what it gives,
    // after checking that it recorded nothing.
    let run = |cc: (u32, u32), bf: bool| {
        let d = Device::sim(SimConfig { compute_capability: cc, ..SimConfig::default() }).unwrap();
        let s = d.new_stream().unwrap();
        let mut h = Handles::new(&d, s).unwrap();
        let (cb, rb) = (d.alloc_zeros::<Complex<bf16>>(s, 64).unwrap(), d.alloc_zeros::<bf16>(s, 64).unwrap());
        let (r, c) = (d.alloc_zeros::<f16>(s, 64).unwrap(), d.alloc_zeros::<Complex<f16>>(s, 64).unwrap());
        let before = d.stats();
        let got = if bf {
            h.fft().unwrap().c2r(&FftLayout::d1(64), &cb, &rb).and_then(|c| c.wait())
        } else {
            h.fft().unwrap().r2c(&FftLayout::d1(64), &r, &c).and_then(|c| c.wait())
        };
        if got.is_err() {
            let after = d.stats();
            assert_eq!((after.events, after.waits), (before.events, before.waits), "{cc:?}: recorded something");
        }
        got
    };
    for (cc, bf) in [((7, 5), true), ((8, 6), true), ((5, 2), false), ((5, 3), false)] {
        let supported = if bf { cc >= (8, 0) } else { cc >= (5, 3) };
        match run(cc, bf) {
            Ok(()) if supported => {}
            Err(Error::Unsupported { what, hint, .. }) if !supported => {
                assert!(hint.contains("compute capability"), "{what}: {hint}")
            }
            other => panic!("{cc:?} (bfloat16: {bf}): got {other:?}"),
        }
    }
}

#[test]
#[cfg(feature = "cufft")]
fn fft_rejects_callbacks_it_cannot_run() {
    use cusched::fft::{FftCallback, FftCallbacks};
    use cusched::{Complex, Error};
    let mut fx = fx();
    let (c, c2) = (fx.buf::<Complex<f32>>(64), fx.buf::<Complex<f32>>(64));
    let (r, rc) = (fx.buf::<f32>(64), fx.buf::<Complex<f32>>(33));
    let fwd = Direction::Forward;
    let id = |_: usize, v: Complex<f64>, _: &[f32]| v;
    let with = |cb: FftCallback<'static, f32>| FftCallbacks::new().on_load(cb);
    // A symbol that names no function, a source with a NUL, a foreign data buffer: each named.
    rejects(&mut fx, "callbacks.load", |fx| {
        fx.h.fft()?.c2c_with(&FftLayout::d1(64), &c, &c2, fwd, &with(FftCallback::new("", "a b").sim(id)))
    });
    rejects(&mut fx, "callbacks.store", |fx| {
        let cb = FftCallback::new("", "").sim(id);
        fx.h.fft()?.r2c_with(&FftLayout::d1(64), &r, &rc, &FftCallbacks::new().on_store(cb))
    });
    rejects(&mut fx, "callbacks.load", |fx| {
        fx.h.fft()?.c2r_with(&FftLayout::d1(64), &rc, &r, &with(FftCallback::new("\0", "f").sim(id)))
    });
    let foreign = fx.foreign::<f32>(64);
    rejects(&mut fx, "!foreign", |fx| {
        let cb = FftCallback::new("", "f").data(&foreign).sim(id);
        fx.h.fft()?.c2c_with(&FftLayout::d1(64), &c, &c2, fwd, &FftCallbacks::new().on_load(cb))
    });
    // A bad layout is still named first.
    rejects(&mut fx, "layout.dims", |fx| {
        fx.h.fft()?.c2c_with(&FftLayout::d1(0), &c, &c2, fwd, &with(FftCallback::new("", "f").sim(id)))
    });
    // Without a host form the simulator cannot compute a callback; cuFFT has no half callbacks.
    let (h16, h16b) = (fx.buf::<Complex<cusched::half::f16>>(64), fx.buf::<Complex<cusched::half::f16>>(64));
    for case in 0..2 {
        let before = fx.device.stats();
        let got = if case == 0 {
            fx.h.fft().unwrap().c2c_with(&FftLayout::d1(64), &c, &c2, fwd, &with(FftCallback::new("", "f")))
        } else {
            fx.h.fft().unwrap().c2c_with(&FftLayout::d1(64), &h16, &h16b, fwd, &with(FftCallback::new("", "f").sim(id)))
        };
        assert!(matches!(got, Err(Error::Unsupported { .. })), "case {case}: {got:?}");
        let after = fx.device.stats();
        assert_eq!((after.events, after.waits), (before.events, before.waits), "case {case} recorded something");
    }
}

#[test]
#[cfg(feature = "cublas")]
fn lane_job_rejects_like_inline() {
    let device = sim();
    let lane = device.lane("libs").unwrap();
    let got = lane
        .submit(|cx| {
            let (a, b) =
                (cx.device().alloc_zeros::<f32>(cx.stream(), 4)?, cx.device().alloc_zeros::<f32>(cx.stream(), 4)?);
            let err = cx.blas()?.axpy(5, 1.0, Vector::from(&a), Vector::from(&b)).map(drop).unwrap_err();
            Ok(err)
        })
        .wait()
        .unwrap();
    assert!(matches!(got, Error::InvalidArgument { arg: "x", .. }), "{got:?}");
}

#[test]
#[cfg(feature = "cublas")]
fn complex_syrk_rejects_a_conjugate_transpose() {
    use cusched::Complex;
    let mut fx = fx();
    let (a, c) = (fx.buf::<Complex<f32>>(6), fx.buf::<Complex<f32>>(9));
    let sy = |trans| Syrk {
        fill: Fill::Upper,
        trans,
        n: 3,
        k: 2,
        alpha: Complex::new(1.0, 0.0),
        a: &a,
        lda: None,
        beta: Complex::new(0.0, 0.0),
        c: &c,
        ldc: None,
    };
    rejects(&mut fx, "trans", |fx| fx.h.blas()?.syrk(&sy(Transpose::Conj)));
    // The real syrk takes it, as its transpose.
    let (ar, cr) = (fx.buf::<f32>(6), fx.buf::<f32>(9));
    let real = Syrk {
        fill: Fill::Upper,
        trans: Transpose::Conj,
        n: 3,
        k: 2,
        alpha: 1.0f32,
        a: &ar,
        lda: None,
        beta: 0.0,
        c: &cr,
        ldc: None,
    };
    fx.h.blas().unwrap().syrk(&real).unwrap().wait().unwrap();
    // Complex operands are validated as the real ones are.
    let (b, cc) = (fx.buf::<Complex<f64>>(12), fx.buf::<Complex<f64>>(8));
    let a64 = fx.buf::<Complex<f64>>(6);
    rejects(&mut fx, "a", |fx| fx.h.blas()?.gemm(&Gemm::new(2, 4, 4, &a64, &b, &cc)));
    rejects(&mut fx, "x", |fx| fx.h.blas()?.dotc(7, Vector::from(&a64), Vector::from(&cc)));
    rejects(&mut fx, "a", |fx| {
        fx.h.blas()?.gerc(3, 3, Complex::new(1.0, 0.0), Vector::from(&b), Vector::from(&b), &a64, None)
    });
}

#[test]
#[cfg(feature = "cublas")]
fn gemm_ex_rejects_what_cublas_refuses() {
    use cusched::blas::{ComputeType, GemmEx};
    let mut fx = fx();
    let (a, b, c) = (fx.buf::<i8>(16 * 8), fx.buf::<i8>(16 * 8), fx.buf::<i32>(64));
    let (f, fo) = (fx.buf::<f32>(64), fx.buf::<half::f16>(64));
    // lda 6 is not a multiple of 4: int8 needs it.
    let before = fx.device.stats();
    let got = fx.h.blas().unwrap().gemm_ex(&GemmEx::new(6, 8, 4, &a, &b, &c, ComputeType::I32).leading(6, 4, 6));
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
    // i8 into i32 needs the I32 compute type.
    let got = fx.h.blas().unwrap().gemm_ex(&GemmEx::new(8, 8, 4, &a, &b, &c, ComputeType::F32));
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
    let got = fx.h.blas().unwrap().gemm_ex(&GemmEx::new(8, 8, 8, &f, &f, &fo, ComputeType::F32));
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
    let after = fx.device.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a refused op recorded something");
    rejects(&mut fx, "alpha", |fx| {
        fx.h.blas()?.gemm_ex(&GemmEx::new(8, 8, 4, &a, &b, &c, ComputeType::I32).scale(0.5, 0.0))
    });
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_ex(&GemmEx::new(8, 9, 8, &a, &b, &c, ComputeType::I32)));
    rejects(&mut fx, "m", |fx| fx.h.blas()?.gemm_ex(&GemmEx::new(0, 8, 4, &a, &b, &c, ComputeType::I32)));
    let fo2 = fx.buf::<f32>(64);
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_ex(&GemmEx::new(8, 8, 8, &f, &f, &f, ComputeType::F32Pedantic)));
    fx.h.blas()
        .unwrap()
        .gemm_ex(&GemmEx::new(8, 8, 8, &f, &f, &fo2, ComputeType::F32FastTf32))
        .unwrap()
        .wait()
        .unwrap();
}

#[test]
#[cfg(feature = "cublas")]
fn level3_rejects_bad_transposes_scalars_and_aliases() {
    use cusched::blas::{Diag, Herk, Symm, Syr2k, Trmm};
    use cusched::Complex;
    type Z = Complex<f64>;
    let mut fx = fx();
    let (a, b, c) = (fx.buf::<Z>(12), fx.buf::<Z>(12), fx.buf::<Z>(9));
    let one = Complex::new(1.0, 0.0);
    let r2k = |trans, beta: Z, w: usize| Syr2k {
        fill: Fill::Lower,
        trans,
        n: 3,
        k: 4,
        alpha: one,
        a: &a,
        lda: None,
        b: &b,
        ldb: None,
        beta,
        c: [&a, &b, &c][w],
        ldc: None,
    };
    rejects(&mut fx, "trans", |fx| fx.h.blas()?.syr2k(&r2k(Transpose::Conj, one, 2)));
    rejects(&mut fx, "trans", |fx| fx.h.blas()?.her2k(&r2k(Transpose::Yes, one, 2)));
    rejects(&mut fx, "beta", |fx| fx.h.blas()?.her2k(&r2k(Transpose::No, Complex::new(1.0, 0.5), 2)));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.syr2k(&r2k(Transpose::No, one, 0)));
    let hk = |trans, k| Herk {
        fill: Fill::Upper,
        trans,
        n: 3,
        k,
        alpha: 1.0,
        a: &a,
        lda: None,
        beta: 0.0,
        c: &c,
        ldc: None,
    };
    rejects(&mut fx, "trans", |fx| fx.h.blas()?.herk(&hk(Transpose::Yes, 4)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.herk(&hk(Transpose::No, 5)));
    let sy = |m, w: usize| Symm {
        side: Side::Left,
        fill: Fill::Upper,
        m,
        n: 3,
        alpha: one,
        a: &a,
        lda: None,
        b: &b,
        ldb: None,
        beta: one,
        c: [&a, &b, &c][w],
        ldc: None,
    };
    rejects(&mut fx, "c", |fx| fx.h.blas()?.hemm(&sy(3, 1)));
    rejects(&mut fx, "a", |fx| fx.h.blas()?.symm(&sy(4, 2)));
    rejects(&mut fx, "m", |fx| fx.h.blas()?.symm(&sy(0, 2)));
    let tm = |w: usize, ldb| Trmm {
        side: Side::Right,
        fill: Fill::Lower,
        trans: Transpose::Conj,
        diag: Diag::Unit,
        m: 3,
        n: 3,
        alpha: one,
        a: &a,
        lda: None,
        b: &b,
        ldb,
        c: [&a, &b, &c][w],
        ldc: None,
    };
    rejects(&mut fx, "c", |fx| fx.h.blas()?.trmm(&tm(1, None)));
    rejects(&mut fx, "ldb", |fx| fx.h.blas()?.trmm(&tm(2, Some(2))));
    let x = fx.buf::<Z>(3);
    rejects(&mut fx, "x", |fx| fx.h.blas()?.dgmm(Side::Right, 3, 4, &a, None, Vector::from(&x), &b, None));
    rejects(&mut fx, "ldc", |fx| fx.h.blas()?.dgmm(Side::Left, 3, 3, &a, Some(4), Vector::from(&x), &a, None));
    rejects(&mut fx, "c", |fx| fx.h.blas()?.dgmm(Side::Left, 3, 3, &a, None, Vector::from(&x), &x, None));
}

#[test]
#[cfg(feature = "cublas")]
fn grouped_gemm_rejects_empty_uneven_and_racing_groups() {
    use cusched::blas::GemmGroup;
    // A group as indices into `bufs` (A's, B's, C's) and its m.
    type Spec = (&'static [usize], &'static [usize], &'static [usize], usize);
    type Owned = (Vec<GpuRef<f32>>, Vec<GpuRef<f32>>, Vec<GpuRef<f32>>);
    let mut fx = fx();
    let bufs: Vec<GpuRef<f32>> = (0..6).map(|_| fx.buf::<f32>(16)).collect();
    let g = |a: &'static [usize], b: &'static [usize], c: &'static [usize], m: usize| (a, b, c, m);
    let run = |fx: &mut Fx, specs: &[Spec]| -> Result<cusched::Completion<()>> {
        let owned: Vec<Owned> = specs
            .iter()
            .map(|(a, b, c, _)| {
                let pick = |ix: &[usize]| ix.iter().map(|&i| bufs[i].clone()).collect::<Vec<_>>();
                (pick(a), pick(b), pick(c))
            })
            .collect();
        let groups: Vec<GemmGroup<'_, f32>> = specs
            .iter()
            .zip(&owned)
            .map(|((_, _, _, m), (a, b, c))| GemmGroup {
                trans_a: Transpose::No,
                trans_b: Transpose::No,
                m: *m,
                n: 4,
                k: 4,
                alpha: 1.0,
                beta: 0.0,
                a,
                b,
                c,
            })
            .collect();
        fx.h.blas()?.gemm_grouped_batched(&groups)
    };
    rejects(&mut fx, "groups", |fx| run(fx, &[]));
    rejects(&mut fx, "groups", |fx| run(fx, &[g(&[0], &[1], &[], 4)]));
    rejects(&mut fx, "groups", |fx| run(fx, &[g(&[0], &[1], &[2], 4), g(&[3], &[4], &[2], 4)]));
    rejects(&mut fx, "groups", |fx| run(fx, &[g(&[0], &[1], &[2], 4), g(&[2], &[4], &[5], 4)]));
    rejects(&mut fx, "a", |fx| run(fx, &[g(&[0], &[1], &[2], 4), g(&[3], &[4], &[5], 5)]));
    rejects(&mut fx, "m", |fx| run(fx, &[g(&[0], &[1], &[2], 0)]));
    run(&mut fx, &[g(&[0], &[1], &[2], 4), g(&[3], &[3], &[5], 2)]).unwrap().wait().unwrap();
}
