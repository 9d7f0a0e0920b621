//! Validation never panics and never wraps: deterministic sweeps of adversarial sizes (0, 1,
//! i32::MAX + 1, 2^32, 2^63, usize::MAX, huge strides and leading dimensions on tiny buffers)
//! through every cuFFT, cuBLAS, cuBLASLt and cuSOLVER validation path on the simulator. Each
//! case is either rejected as an `InvalidArgument` with nothing recorded, or accepted (the
//! simulator computes it, or reaches its `LibraryUnavailable`); an accepted case must fit its buffers and the
//! library's integer types by an independent model computed in `u128`.
// Each library's sweep uses part of the shared helpers; with one feature on, the rest is unused.
#![allow(clippy::type_complexity, dead_code, unused_imports)]

use crate::common;
use crate::common::fixture::{fx, Fx};
use cusched::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The adversarial values.
const V: [usize; 8] = [0, 1, 2, 3, i32::MAX as usize + 1, 1 << 32, 1 << 63, usize::MAX];
/// Elements in every buffer: tiny, so anything accepted must be small where it counts.
const LEN: usize = 64;
const I32: u128 = i32::MAX as u128;
const I64: u128 = i64::MAX as u128;

/// Runs one case: `Some(true)` accepted, `Some(false)` rejected. Panics (naming the case) when
/// the op panicked, failed in another way, or recorded something while rejecting.
fn run<T: std::fmt::Debug>(fx: &mut Fx, case: &dyn std::fmt::Debug, op: impl FnOnce(&mut Fx) -> Result<T>) -> bool {
    let before = fx.device.stats();
    let got = catch_unwind(AssertUnwindSafe(|| op(fx))).unwrap_or_else(|_| panic!("validation panicked on {case:?}"));
    match got {
        Err(Error::InvalidArgument { .. }) => {
            let after = fx.device.stats();
            assert_eq!((after.events, after.waits), (before.events, before.waits), "{case:?}: a rejection recorded");
            false
        }
        // Accepted: computed on the simulator, or refused there by a library it does not run.
        Ok(_) | Err(Error::LibraryUnavailable { .. }) => true,
        other => panic!("{case:?}: unexpected {other:?}"),
    }
}

/// Span of a column-major `rows x cols` matrix with leading dimension `ld`, in `u128`.
fn span(rows: usize, cols: usize, ld: usize) -> u128 {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld as u128 * (cols as u128 - 1) + rows as u128
    }
}

#[test]
#[cfg(feature = "cufft")]
fn fft_rejects_what_does_not_fit_without_panicking() {
    use cusched::fft::{DataLayout, Direction, FftLayout};
    use cusched::Complex;
    let mut fx = fx();
    let (c, c2, r) = (fx.buf::<Complex<f32>>(LEN), fx.buf::<Complex<f32>>(LEN), fx.buf::<f32>(LEN));
    let small = [1usize, 2, 4];
    let mut shapes: Vec<Vec<usize>> = V.iter().map(|&v| vec![v]).collect();
    shapes.extend(V.iter().flat_map(|&x| V.iter().map(move |&y| vec![x, y])));
    shapes.extend(small.iter().flat_map(|&x| V.iter().flat_map(move |&y| V.iter().map(move |&z| vec![x, y, z]))));
    let mut layouts: Vec<Option<DataLayout>> = vec![None];
    for &e in &V {
        for &stride in &V {
            for &dist in &V {
                layouts.push(Some(DataLayout { embed: vec![e], stride, dist }));
            }
        }
    }
    // (kind, input complex, output complex): 0 = C2C, 1 = R2C, 2 = C2R.
    let (mut accepted, mut cases) = (0, 0);
    let mut case = |fx: &mut Fx, kind: usize, layout: &FftLayout| {
        cases += 1;
        let ok = run(fx, &(kind, layout), |fx| match kind {
            0 => fx.h.fft()?.c2c(layout, &c, &c2, Direction::Forward),
            1 => fx.h.fft()?.r2c(layout, &r, &c),
            _ => fx.h.fft()?.c2r(layout, &c, &r),
        });
        if !ok {
            return;
        }
        accepted += 1;
        // The model: each side's extent in u128, and every value cuFFT takes within i64.
        let sides = [(kind != 1, &layout.input), (kind != 2, &layout.output)];
        let last = layout.dims.len() - 1;
        let real = kind != 0;
        assert!(layout.dims.iter().chain([&layout.batch]).all(|&v| (v as u128) <= I64), "{layout:?}");
        for (complex, given) in sides {
            let mut dims = layout.dims.clone();
            if real && complex {
                dims[last] = dims[last] / 2 + 1;
            }
            let l = given.clone().unwrap_or_else(|| DataLayout {
                embed: dims.clone(),
                stride: 1,
                dist: dims.iter().product(),
            });
            assert!(l.embed.iter().chain([&l.stride, &l.dist]).all(|&v| (v as u128) <= I64), "{layout:?}");
            let mut extent = (layout.batch as u128 - 1) * l.dist as u128 + 1;
            for (i, &n) in dims.iter().enumerate() {
                let stride: u128 = l.embed[i + 1..].iter().fold(l.stride as u128, |a, &e| a * e as u128);
                assert!(stride <= I64, "{layout:?}");
                extent += (n as u128 - 1) * stride;
            }
            assert!(extent <= LEN as u128, "{layout:?}: accepted an extent of {extent}");
        }
    };
    for kind in 0..3 {
        for dims in &shapes {
            for &batch in &V {
                case(&mut fx, kind, &FftLayout { dims: dims.clone(), batch, input: None, output: None });
            }
        }
        for dims in [vec![1usize], vec![4]] {
            for &batch in &V {
                for l in &layouts {
                    let packed = FftLayout { dims: dims.clone(), batch, input: None, output: None };
                    case(&mut fx, kind, &FftLayout { input: l.clone(), ..packed.clone() });
                    case(&mut fx, kind, &FftLayout { output: l.clone(), ..packed });
                }
            }
        }
    }
    println!("fft: {accepted} of {cases} accepted");
    assert!(accepted > 0);
}

#[test]
#[cfg(feature = "cublas")]
fn blas_rejects_what_does_not_fit_without_panicking() {
    use cusched::blas::{BatchStrides, Gemm, Transpose, Vector};
    let mut fx = fx();
    let (a, b, c) = (fx.buf::<f32>(LEN), fx.buf::<f32>(LEN), fx.buf::<f32>(LEN));
    let lds: Vec<Option<usize>> = std::iter::once(None).chain(V.iter().map(|&v| Some(v))).collect();
    let trans = [Transpose::No, Transpose::Yes];
    let mut accepted = 0;
    for &m in &V {
        for &n in &V {
            for &k in &V {
                for &ld in &lds {
                    for (ta, tb) in [(0, 0), (1, 1), (0, 1)] {
                        let g = Gemm {
                            trans_a: trans[ta],
                            trans_b: trans[tb],
                            lda: ld,
                            ldb: ld,
                            ldc: ld,
                            ..Gemm::new(m, n, k, &a, &b, &c)
                        };
                        if !run(&mut fx, &(m, n, k, ld, ta, tb), |fx| fx.h.blas()?.gemm(&g)) {
                            continue;
                        }
                        accepted += 1;
                        let (ar, ac) = if ta == 1 { (k, m) } else { (m, k) };
                        let (br, bc) = if tb == 1 { (n, k) } else { (k, n) };
                        let l = |rows: usize| ld.unwrap_or(rows);
                        for v in [m, n, k, l(ar), l(br), l(m)] {
                            assert!(v as u128 <= I32, "gemm {m} {n} {k} {ld:?}");
                        }
                        assert!(span(ar, ac, l(ar)) <= LEN as u128 && span(br, bc, l(br)) <= LEN as u128);
                        assert!(span(m, n, l(m)) <= LEN as u128, "gemm {m} {n} {k} {ld:?}");
                    }
                }
            }
        }
    }
    // Strided batches: counts and strides on one small GEMM.
    let strides: Vec<Option<usize>> = std::iter::once(None).chain(V.iter().map(|&v| Some(v))).collect();
    for &count in &V {
        for &sa in &strides {
            for &sc in &strides {
                let g = Gemm::new(2, 2, 2, &a, &b, &c);
                let batch = BatchStrides { count, a: sa, b: sa, c: sc };
                if run(&mut fx, &(count, sa, sc), |fx| fx.h.blas()?.gemm_strided_batched(&g, batch)) {
                    accepted += 1;
                    assert!(count as u128 <= I32);
                    for s in [sa.unwrap_or(4), sc.unwrap_or(4)] {
                        assert!((count as u128 - 1) * s as u128 + 4 <= LEN as u128, "{count} {sa:?} {sc:?}");
                    }
                }
            }
        }
    }
    // Level 1: lengths and increments.
    let incs = [0isize, 1, -1, 2, i32::MAX as isize + 1, isize::MAX, isize::MIN];
    for &n in &V {
        for &incx in &incs {
            for &incy in &incs {
                let (x, y) = (Vector { buf: &a, inc: incx }, Vector { buf: &b, inc: incy });
                if run(&mut fx, &(n, incx, incy), |fx| fx.h.blas()?.axpy(n, 1.0f32, x, y)) {
                    accepted += 1;
                    assert!(
                        n as u128 <= I32 && incx.unsigned_abs() as u128 <= I32 && incy.unsigned_abs() as u128 <= I32
                    );
                    for inc in [incx, incy] {
                        assert!(n == 0 || (n as u128 - 1) * (inc.unsigned_abs() as u128) < LEN as u128);
                    }
                }
            }
        }
    }
    assert!(accepted > 0);
}

#[test]
#[cfg(feature = "cublaslt")]
fn blas_lt_rejects_what_does_not_fit_without_panicking() {
    use cusched::blas_lt::{LtBatch, Matmul, Order};
    let d = cusched::Device::sim(cusched::SimConfig { compute_capability: (9, 0), ..Default::default() }).unwrap();
    let s = d.new_stream().unwrap();
    let mut fx = Fx { h: cusched::Handles::new(&d, s).unwrap(), other: common::sim(), device: d, s };
    let (a, b, c) = (fx.buf::<f32>(LEN), fx.buf::<f32>(LEN), fx.buf::<f32>(LEN));
    let lds: Vec<Option<usize>> = std::iter::once(None).chain(V.iter().map(|&v| Some(v))).collect();
    let mut accepted = 0;
    for &m in &V {
        for &n in &V {
            for &k in &V {
                for &ld in &lds {
                    for order in [Order::Col, Order::Row] {
                        let mm = Matmul { lda: ld, ldb: ld, ldd: ld, ..Matmul::new(m, n, k, &a, &b, &c).order(order) };
                        if !run(&mut fx, &(m, n, k, ld, order), |fx| fx.h.blas_lt()?.matmul(&mm)) {
                            continue;
                        }
                        accepted += 1;
                        // Column-major: A m x k (ld >= m), B k x n, D m x n; row-major: the
                        // transposes.
                        let shapes =
                            if order == Order::Col { [(m, k), (k, n), (m, n)] } else { [(k, m), (n, k), (n, m)] };
                        for (rows, cols) in shapes {
                            let l = ld.unwrap_or(rows);
                            assert!(
                                l as u128 <= I64 && span(rows, cols, l) <= LEN as u128,
                                "{m} {n} {k} {ld:?} {order:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    let strides: Vec<Option<usize>> = std::iter::once(None).chain(V.iter().map(|&v| Some(v))).collect();
    for &count in &V {
        for &sa in &strides {
            for &sd in &strides {
                let mm = Matmul::new(2, 2, 2, &a, &b, &c).batched(LtBatch {
                    a: sa,
                    b: sa,
                    c: sd,
                    d: sd,
                    ..LtBatch::packed(count)
                });
                if run(&mut fx, &(count, sa, sd), |fx| fx.h.blas_lt()?.matmul(&mm)) {
                    accepted += 1;
                    assert!(count as u128 <= I32);
                    for st in [sa.unwrap_or(4), sd.unwrap_or(4)] {
                        assert!(st as u128 <= I64 && (count as u128 - 1) * st as u128 + 4 <= LEN as u128);
                    }
                }
            }
        }
    }
    assert!(accepted > 0);
}

#[test]
#[cfg(feature = "cusolver")]
fn solver_rejects_what_does_not_fit_without_panicking() {
    use cusched::solver::{Fill, Gesvdj, Getrf, Potrf, Syevd};
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    let (a, u, v, w) = (fx.buf::<f32>(LEN), fx.buf::<f32>(LEN), fx.buf::<f32>(LEN), fx.buf::<f32>(LEN));
    let lds: Vec<Option<usize>> = std::iter::once(None).chain(V.iter().map(|&v| Some(v))).collect();
    let mut accepted = 0;
    for &m in &V {
        for &ld in &lds {
            let l = ld.unwrap_or(m);
            let p = Potrf { fill: Fill::Lower, n: m, a: &a, lda: ld };
            if run(&mut fx, &("potrf", m, ld), |fx| fx.h.solver()?.potrf(&p)) {
                accepted += 1;
                assert!(l as u128 <= I64 && span(m, m, l) <= LEN as u128, "potrf {m} {ld:?}");
            }
            let e = Syevd { vectors: true, fill: Fill::Lower, n: m, a: &a, lda: ld, w: &w };
            if run(&mut fx, &("syevd", m, ld), |fx| fx.h.solver()?.syevd(&e)) {
                accepted += 1;
                assert!(l as u128 <= I64 && span(m, m, l) <= LEN as u128, "syevd {m} {ld:?}");
            }
            for &n in &V {
                let g = Getrf { m, n, a: &a, lda: ld, ipiv: None };
                if run(&mut fx, &("getrf", m, n, ld), |fx| fx.h.solver()?.getrf(&g)) {
                    accepted += 1;
                    assert!(l as u128 <= I64 && span(m, n, l) <= LEN as u128, "getrf {m} {n} {ld:?}");
                }
                let j = Gesvdj { vectors: true, m, n, a: &a, lda: ld, s: &w, u: &u, ldu: None, v: &v, ldv: None };
                if run(&mut fx, &("gesvdj", m, n, ld), |fx| fx.h.solver()?.gesvdj(&j)) {
                    accepted += 1;
                    assert!(l as u128 <= I32 && span(m, n, l) <= LEN as u128, "gesvdj {m} {n} {ld:?}");
                }
            }
        }
    }
    // Sparse solves: sizes and nonzero counts on tiny arrays.
    let (o, i, x, b) = (fx.buf::<i32>(LEN), fx.buf::<i32>(LEN), fx.buf::<f64>(LEN), fx.buf::<f64>(LEN));
    let vals = fx.buf::<f64>(LEN);
    for &n in &V {
        for &nnz in &V {
            let sys = CsrSystem { n, nnz, offsets: &o, indices: &i, values: &vals };
            let chol = |fx: &mut Fx| fx.h.solver_sparse()?.csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, Reorder::None);
            let qr = |fx: &mut Fx| fx.h.solver_sparse()?.csrlsvqr(sys, &b, &x, 1e-12, Reorder::Symrcm);
            for ok in [run(&mut fx, &("chol", n, nnz), chol), run(&mut fx, &("qr", n, nnz), qr)] {
                if ok {
                    accepted += 1;
                    assert!(n as u128 <= I32 && nnz as u128 <= I32 && n < LEN && nnz <= LEN, "csrlsv {n} {nnz}");
                }
            }
        }
    }
    assert!(accepted > 0);
}
