//! Validation of the cuFFT, cuBLAS and cuSOLVER ops against adversarial input on the
//! simulator: sizes that overflow, values that do not fit the library's integer types, batches
//! that overlap, and outputs that alias another operand. Each is rejected before anything is
//! recorded, naming the argument, and no check panics or wraps.

#[cfg(feature = "cufft")]
use crate::common::fixture::runs;
use crate::common::fixture::{fx, rejects};

#[test]
#[cfg(feature = "cufft")]
fn fft_rejects_layouts_that_overflow_or_do_not_fit_i64() {
    use cusched::fft::{DataLayout, Direction, FftLayout};
    use cusched::Complex;
    let mut fx = fx();
    let (c, c2) = (fx.buf::<Complex<f32>>(64), fx.buf::<Complex<f32>>(64));
    let fwd = Direction::Forward;
    // The packed layout's product overflowed (a panic in debug builds).
    rejects(&mut fx, "layout.input", |fx| {
        fx.h.fft()?.c2c(&FftLayout { dims: vec![4, i64::MAX as usize], ..FftLayout::d1(1) }, &c, &c2, fwd)
    });
    // Values past i64::MAX multiplied by zero elsewhere (dims of 1, batch 1) reached
    // cufftMakePlanMany64 as negative numbers.
    let packed = DataLayout { embed: vec![4], stride: 1, dist: 4 };
    rejects(&mut fx, "layout.input", |fx| {
        let huge = DataLayout { embed: vec![1 << 63], ..packed.clone() };
        fx.h.fft()?.c2c(&FftLayout::d1(4).with_layouts(huge, packed.clone()), &c, &c2, fwd)
    });
    rejects(&mut fx, "layout.input", |fx| {
        let far = DataLayout { dist: usize::MAX, ..packed.clone() };
        fx.h.fft()?.c2c(&FftLayout::d1(4).with_layouts(far, packed.clone()), &c, &c2, fwd)
    });
    rejects(&mut fx, "layout.output", |fx| {
        let wide = DataLayout { embed: vec![1], stride: 1 << 63, dist: 1 };
        fx.h.fft()?.c2c(&FftLayout::d1(1).with_layouts(packed.clone(), wide), &c, &c2, fwd)
    });
    runs(&mut fx, |fx| fx.h.fft()?.c2c(&FftLayout::d1(4).with_layouts(packed.clone(), packed.clone()), &c, &c2, fwd));
}

#[test]
#[cfg(feature = "cufft")]
fn fft_c2r_rejects_overlapping_input_batches() {
    use cusched::fft::{DataLayout, FftLayout};
    use cusched::Complex;
    let mut fx = fx();
    let (c, r) = (fx.buf::<Complex<f32>>(64), fx.buf::<f32>(64));
    // C2R overwrites its input: two transforms reading (and writing) elements 1 and 2.
    let overlapping = DataLayout { embed: vec![3], stride: 1, dist: 1 };
    let out = DataLayout { embed: vec![4], stride: 1, dist: 4 };
    rejects(&mut fx, "layout.input", |fx| {
        fx.h.fft()?.c2r(&FftLayout::d1(4).batched(2).with_layouts(overlapping.clone(), out.clone()), &c, &r)
    });
    let (z, d) = (fx.buf::<Complex<f64>>(64), fx.buf::<f64>(64));
    rejects(&mut fx, "layout.input", |fx| {
        fx.h.fft()?.c2r(&FftLayout::d1(4).batched(2).with_layouts(overlapping.clone(), out.clone()), &z, &d)
    });
    // Interleaved batches do not overlap.
    let interleaved = DataLayout { embed: vec![3], stride: 2, dist: 1 };
    runs(&mut fx, |fx| {
        fx.h.fft()?.c2r(&FftLayout::d1(4).batched(2).with_layouts(interleaved.clone(), out.clone()), &c, &r)
    });
    // R2C reads its input only: overlapping input batches are fine.
    let r_in = DataLayout { embed: vec![4], stride: 1, dist: 1 };
    let c_out = DataLayout { embed: vec![3], stride: 1, dist: 3 };
    runs(&mut fx, |fx| fx.h.fft()?.r2c(&FftLayout::d1(4).batched(2).with_layouts(r_in.clone(), c_out.clone()), &r, &c));
}

#[test]
#[cfg(feature = "cublas")]
fn gemm_batched_rejects_outputs_aliasing_an_input() {
    use cusched::blas::{GemmBatched, Transpose};
    use cusched::GpuRef;
    let mut fx = fx();
    let m: Vec<GpuRef<f32>> = (0..4).map(|_| fx.buf::<f32>(4)).collect();
    fn batched<'a>(a: &'a [GpuRef<f32>], b: &'a [GpuRef<f32>], c: &'a [GpuRef<f32>]) -> GemmBatched<'a, f32> {
        GemmBatched { trans_a: Transpose::No, trans_b: Transpose::No, m: 2, n: 2, k: 2, alpha: 1.0, beta: 0.0, a, b, c }
    }
    let (x, y, z, w) = (&m[0], &m[1], &m[2], &m[3]);
    // c[0] is a[1]: the second GEMM reads what the first writes.
    let (a, b, c) = ([x.clone(), y.clone()], [z.clone(), z.clone()], [y.clone(), w.clone()]);
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_batched(&batched(&a, &b, &c)));
    // c[1] is b[0].
    let (a, b, c) = ([x.clone(), x.clone()], [z.clone(), y.clone()], [w.clone(), z.clone()]);
    rejects(&mut fx, "c", |fx| fx.h.blas()?.gemm_batched(&batched(&a, &b, &c)));
    // Shared inputs are fine.
    let (a, b, c) = ([x.clone(), x.clone()], [y.clone(), y.clone()], [z.clone(), w.clone()]);
    fx.h.blas().unwrap().gemm_batched(&batched(&a, &b, &c)).unwrap().wait().unwrap();
}

#[test]
#[cfg(feature = "cusolver")]
fn svd_rejects_singular_values_aliasing_another_operand() {
    use cusched::solver::{Gesvd, Gesvdj, GesvdjBatched};
    let mut fx = fx();
    let (a, u, v, s) = (fx.buf::<f32>(16), fx.buf::<f32>(16), fx.buf::<f32>(16), fx.buf::<f32>(4));
    let svd = |s, u, vt| Gesvd { vectors: true, m: 4, n: 4, a: &a, lda: None, s, u, ldu: None, vt, ldvt: None };
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvd(&svd(&a, &u, &v)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvd(&svd(&u, &u, &v)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvd(&svd(&v, &u, &v)));
    crate::solver_validation::accepts(&mut fx, |fx| fx.h.solver()?.gesvd(&svd(&s, &u, &v)));
    let j = |s, u, v| Gesvdj { vectors: true, m: 4, n: 4, a: &a, lda: None, s, u, ldu: None, v, ldv: None };
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj(&j(&u, &u, &v)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj(&j(&v, &u, &v)));
    crate::solver_validation::accepts(&mut fx, |fx| fx.h.solver()?.gesvdj(&j(&s, &u, &v)));
    let jb = |s, u, v| GesvdjBatched {
        vectors: true,
        m: 4,
        n: 4,
        batch: 1,
        a: &a,
        lda: None,
        s,
        u,
        ldu: None,
        v,
        ldv: None,
    };
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj_batched(&jb(&u, &u, &v)));
    rejects(&mut fx, "s", |fx| fx.h.solver()?.gesvdj_batched(&jb(&v, &u, &v)));
    crate::solver_validation::accepts(&mut fx, |fx| fx.h.solver()?.gesvdj_batched(&jb(&s, &u, &v)));
}
