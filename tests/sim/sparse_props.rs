//! Property tests of cuSPARSE validation on the simulator: every constructor and op, fed
//! adversarial sizes (0, 1, `i32::MAX + 1`, 2^32, 2^63, `usize::MAX`, huge leading dimensions on
//! tiny buffers), never panics and never wraps, and whatever it accepts fits its buffers and the
//! library's integer types (the index type, and `i64` for every size cuSPARSE takes). An op
//! accepted by validation runs on the simulator (on buffers of zeros); one it rejects fails
//! with `InvalidArgument`. Deterministic loops, so a failure names its case.

use crate::common::fixture::{fx, Fx};
use cusched::sparse::{DenseMatrix, SparseIndex, SparseMatrix, SparseVector, Transpose, Triangle};
use cusched::{Complex, Error, GpuRef, Result};

/// The adversarial sizes.
const SIZES: [usize; 14] = [
    0,
    1,
    2,
    3,
    4,
    i32::MAX as usize,
    i32::MAX as usize + 1,
    1 << 32,
    (1 << 32) + 2,
    1 << 62,
    1 << 63,
    (1 << 63) + 2,
    usize::MAX - 1,
    usize::MAX,
];

/// Whether validation accepted the op (on the simulator: it was enqueued, and computes);
/// panics on any answer other than acceptance or a rejection naming an argument.
#[track_caller]
fn accepted<T: std::fmt::Debug>(r: Result<T>, case: &str) -> bool {
    match r {
        Ok(_) => true,
        Err(Error::InvalidArgument { .. }) => false,
        other => panic!("{case}: expected acceptance or a typed rejection, got {other:?}"),
    }
}

/// Whether a constructor accepted its input.
#[track_caller]
fn made<T>(r: &Result<T>, case: &str) -> bool {
    match r {
        Ok(_) => true,
        Err(Error::InvalidArgument { .. }) => false,
        Err(e) => panic!("{case}: expected a typed rejection, got {e:?}"),
    }
}

/// `v` fits index type `I` and `i64`.
fn fits<I: SparseIndex>(v: u128) -> bool {
    v <= I::MAX as u128 && v <= i64::MAX as u128
}

/// `a * b` exactly, or `None` past `u128` (no buffer is that long).
fn mul(a: usize, b: usize) -> Option<u128> {
    (a as u128).checked_mul(b as u128)
}

/// Elements a column-major view spans, exactly (`None`: beyond any buffer).
fn span(rows: usize, cols: usize, ld: usize) -> Option<u128> {
    if rows == 0 || cols == 0 {
        Some(0)
    } else {
        mul(ld, cols - 1)?.checked_add(rows as u128)
    }
}

/// Buffers of small lengths, reused across cases (index lengths 0 to 8, value lengths 0 to 16).
struct Pool<T: cusched::Element, I: cusched::Element> {
    idx: Vec<GpuRef<I>>,
    val: Vec<GpuRef<T>>,
}

impl<T: cusched::Element, I: cusched::Element> Pool<T, I> {
    fn new(fx: &Fx) -> Self {
        Pool { idx: (0..=8).map(|n| fx.buf::<I>(n)).collect(), val: (0..=16).map(|n| fx.buf::<T>(n)).collect() }
    }
    /// An index buffer of exactly `want` entries where that is small, else of 2.
    fn idx(&self, want: Option<u128>) -> &GpuRef<I> {
        &self.idx[want.filter(|&w| w <= 8).unwrap_or(2) as usize]
    }
    /// A value buffer of exactly `want` entries where that is small, else of 1.
    fn val(&self, want: Option<u128>) -> &GpuRef<T> {
        &self.val[want.filter(|&w| w <= 16).unwrap_or(1) as usize]
    }
}

fn compressed_and_coo<I: SparseIndex>(fx: &Fx) {
    let pool = Pool::<f32, I>::new(fx);
    for &rows in &SIZES {
        for &cols in &SIZES {
            for &nnz in &SIZES {
                let case = format!("{:?} {rows}x{cols} nnz {nnz}", I::KIND);
                let check = |m: &SparseMatrix<f32, I>, major: u128| {
                    assert!(fits::<I>(rows as u128) && fits::<I>(cols as u128) && fits::<I>(nnz as u128), "{case}");
                    assert!(mul(rows, cols).is_some_and(|all| nnz as u128 <= all), "{case}");
                    assert!(m.offsets().len() as u128 >= major, "{case}");
                    assert!(m.indices().len() >= nnz && m.values().len() >= nnz, "{case}");
                };
                let (r1, c1) = (rows as u128 + 1, cols as u128 + 1);
                let (mi, vi) = (pool.idx(Some(nnz as u128)), pool.val(Some(nnz as u128)));
                let csr = SparseMatrix::<f32, I>::csr(rows, cols, nnz, pool.idx(Some(r1)), mi, vi);
                if made(&csr, &case) {
                    check(csr.as_ref().unwrap(), r1);
                }
                let csc = SparseMatrix::<f32, I>::csc(rows, cols, nnz, pool.idx(Some(c1)), mi, vi);
                if made(&csc, &case) {
                    check(csc.as_ref().unwrap(), c1);
                }
                let coo = SparseMatrix::<f32, I>::coo(rows, cols, nnz, mi, mi, vi);
                if made(&coo, &case) {
                    check(coo.as_ref().unwrap(), nnz as u128);
                }
            }
        }
    }
}

#[test]
fn csr_csc_coo_rejects_sizes_without_wrapping() {
    let fx = fx();
    compressed_and_coo::<i32>(&fx);
    compressed_and_coo::<i64>(&fx);
}

fn bsr<I: SparseIndex>(fx: &Fx) {
    let pool = Pool::<f32, I>::new(fx);
    for &rows in &SIZES {
        for &cols in &SIZES {
            for &block in &SIZES {
                for &blocks in &SIZES[..8] {
                    let case = format!("{:?} bsr {rows}x{cols} block {block} blocks {blocks}", I::KIND);
                    let brows = (block != 0).then(|| rows as u128 / block as u128);
                    let need = mul(blocks, block).and_then(|x| x.checked_mul(block as u128));
                    let offsets = pool.idx(brows.map(|b| b + 1));
                    let r = SparseMatrix::<f32, I>::bsr(
                        rows,
                        cols,
                        block,
                        blocks,
                        offsets,
                        pool.idx(Some(blocks as u128)),
                        pool.val(need),
                    );
                    if !made(&r, &case) {
                        continue;
                    }
                    let m = r.unwrap();
                    assert!(block > 0 && rows % block == 0 && cols % block == 0, "{case}");
                    let need = need.unwrap_or(u128::MAX);
                    for v in [rows as u128, cols as u128, block as u128, blocks as u128, need] {
                        assert!(fits::<I>(v), "{case}: {v} does not fit");
                    }
                    assert!(m.values().len() as u128 >= need, "{case}: values hold {}", m.values().len());
                    assert_eq!(m.offsets().len() as u128, rows as u128 / block as u128 + 1, "{case}");
                    assert!(m.indices().len() >= blocks, "{case}");
                    assert!(mul(rows / block, cols / block).is_some_and(|all| blocks as u128 <= all), "{case}");
                }
            }
        }
    }
}

#[test]
fn bsr_rejects_sizes_without_wrapping() {
    let fx = fx();
    bsr::<i32>(&fx);
    bsr::<i64>(&fx);
}

/// The two cases a fuzzer found, by themselves.
#[test]
fn bsr_rejects_a_wrapping_block_area_and_columns_beyond_i64() {
    let fx = fx();
    let (o2, i1, v1) = (fx.upload(&[0i64, 1]), fx.upload(&[0i64]), fx.buf::<f32>(1));
    let big = 1usize << 32;
    let r = SparseMatrix::<f32, i64>::bsr(big, big, big, 1, &o2, &i1, &v1);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let o21 = fx.buf::<i64>(21);
    let r = SparseMatrix::<f32, i64>::bsr(40, 1 << 63, 2, 0, &o21, &fx.buf::<i64>(0), &fx.buf::<f32>(0));
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "cols", .. })), "{r:?}");
}

fn blocked_ell<I: SparseIndex>(fx: &Fx) {
    let pool = Pool::<f32, I>::new(fx);
    for &rows in &SIZES {
        for &cols in &SIZES {
            for &block in &SIZES {
                for &ell_cols in &SIZES {
                    let case = format!("{:?} ell {rows}x{cols} block {block} ell_cols {ell_cols}", I::KIND);
                    let slots = (block != 0).then(|| mul(rows / block, ell_cols / block)).flatten();
                    let need = mul(rows, ell_cols);
                    let r = SparseMatrix::<f32, I>::blocked_ell(
                        rows,
                        cols,
                        block,
                        ell_cols,
                        pool.idx(slots),
                        pool.val(need),
                    );
                    if !made(&r, &case) {
                        continue;
                    }
                    let m = r.unwrap();
                    assert!(block > 0 && rows % block == 0 && cols % block == 0 && ell_cols % block == 0, "{case}");
                    assert!(ell_cols > 0 && ell_cols <= cols, "{case}");
                    for v in [rows as u128, cols as u128, block as u128, ell_cols as u128] {
                        assert!(fits::<I>(v), "{case}: {v} does not fit");
                    }
                    assert!(m.indices().len() as u128 >= slots.unwrap_or(u128::MAX), "{case}");
                    assert!(m.values().len() as u128 >= need.unwrap_or(u128::MAX), "{case}");
                }
            }
        }
    }
}

#[test]
fn blocked_ell_rejects_sizes_without_panicking_or_wrapping() {
    let fx = fx();
    blocked_ell::<i32>(&fx);
    blocked_ell::<i64>(&fx);
}

#[test]
fn blocked_ell_rejects_rows_of_2_pow_63_without_a_panic() {
    let fx = fx();
    let r = SparseMatrix::<f32, i64>::blocked_ell(1 << 63, 4, 1, 3, &fx.buf::<i64>(4), &fx.buf::<f32>(4));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
}

fn sparse_vectors<I: SparseIndex>(fx: &Fx) {
    let pool = Pool::<f32, I>::new(fx);
    for &size in &SIZES {
        for &nnz in &SIZES {
            let case = format!("{:?} vector {size} nnz {nnz}", I::KIND);
            let r = SparseVector::<f32, I>::new(size, nnz, pool.idx(Some(nnz as u128)), pool.val(Some(nnz as u128)));
            if made(&r, &case) {
                let v = r.unwrap();
                assert!(fits::<I>(size as u128) && nnz <= size && size > 0, "{case}");
                assert!(v.indices().len() >= nnz && v.values().len() >= nnz, "{case}");
            }
        }
    }
}

#[test]
fn sparse_vector_rejects_sizes_without_wrapping() {
    let fx = fx();
    sparse_vectors::<i32>(&fx);
    sparse_vectors::<i64>(&fx);
}

/// Dense views of every adversarial shape and leading dimension on an 8-element buffer, in every
/// op that takes one: accepted ones fit the buffer and `i64`.
#[test]
fn sparse_op_rejects_dense_views_without_wrapping() {
    let mut fx = fx();
    let off = fx.upload(&[0i32, 1, 2]);
    let idx = fx.upload(&[0i32, 1]);
    let val = fx.upload(&[1.0f32, 2.0]);
    // A 2x2 CSR matrix (the diagonal), square for the solves.
    let a = SparseMatrix::csr(2, 2, 2, &off, &idx, &val).unwrap();
    let (b, c) = (fx.buf::<f32>(8), fx.buf::<f32>(8));
    let fits_view = |v: &DenseMatrix<'_, f32>| {
        let ld = v.ld.unwrap_or(v.rows);
        span(v.rows, v.cols, ld).is_some_and(|n| n <= v.buf.len() as u128)
            && ld as u128 <= i64::MAX as u128
            && ld >= v.rows
    };
    for &n in &SIZES {
        for &ldb in &SIZES {
            for &ldc in &SIZES {
                let case = format!("n {n} ldb {ldb} ldc {ldc}");
                let bv = DenseMatrix::new(&b, 2, n).ld(ldb);
                let cv = DenseMatrix::new(&c, 2, n).ld(ldc);
                let sp = fx.h.sparse().unwrap();
                if accepted(sp.spmm(Transpose::No, 1.0, &a, bv, 0.0, cv), &case) {
                    assert!(fits_view(&bv) && fits_view(&cv), "spmm {case}");
                }
                if accepted(sp.spsm(Triangle::default(), 1.0, &a, bv, cv), &case) {
                    assert!(fits_view(&bv) && fits_view(&cv), "spsm {case}");
                }
                // SDDMM: op(A) is 2 x n, op(B) is n x 2.
                let at = DenseMatrix::new(&b, 2, n).ld(ldb);
                let bt = DenseMatrix::new(&c, n, 2).ld(ldc);
                if accepted(sp.sddmm(Transpose::No, Transpose::No, 1.0, at, bt, 0.0, &a), &case) {
                    assert!(fits_view(&at) && fits_view(&bt), "sddmm {case}");
                }
            }
        }
    }
    for &rows in &SIZES {
        for &cols in &SIZES {
            for &ld in &SIZES {
                let case = format!("{rows}x{cols} ld {ld}");
                let v = DenseMatrix::new(&b, rows, cols).ld(ld);
                let sp = fx.h.sparse().unwrap();
                if accepted(sp.dense_to_csr::<f32, i32>(v), &case) {
                    assert!(
                        fits_view(&v) && fits::<i32>(rows as u128) && fits::<i32>(cols as u128),
                        "dense_to_csr {case}"
                    );
                }
                if accepted(sp.dense_to_csr::<f32, i64>(v), &case) {
                    assert!(
                        fits_view(&v) && fits::<i64>(rows as u128) && fits::<i64>(cols as u128),
                        "dense_to_csr {case}"
                    );
                }
                if accepted(sp.sparse_to_dense(&a, v), &case) {
                    assert!(fits_view(&v) && (rows, cols) == (2, 2), "sparse_to_dense {case}");
                }
                if accepted(sp.dense_to_csc::<f32, i32>(v), &case) {
                    assert!(
                        fits_view(&v) && fits::<i32>(rows as u128) && fits::<i32>(cols as u128),
                        "dense_to_csc {case}"
                    );
                }
                if accepted(sp.dense_to_coo::<f32, i64>(v), &case) {
                    assert!(
                        fits_view(&v) && fits::<i64>(rows as u128) && fits::<i64>(cols as u128),
                        "dense_to_coo {case}"
                    );
                }
                for &block in &SIZES {
                    let blocked = |b: usize| b != 0 && rows % b == 0 && cols % b == 0;
                    if accepted(sp.dense_to_bsr(v, block), &format!("{case} block {block}")) {
                        assert!(fits_view(&v) && blocked(block) && fits::<i32>(rows as u128), "dense_to_bsr {case}");
                    }
                }
            }
        }
    }
    // The BSR conversions on the 2x2 diagonal: only a block dividing it is taken.
    for &block in &SIZES {
        let sp = fx.h.sparse().unwrap();
        let case = format!("block {block}");
        if accepted(sp.csr_to_bsr(&a, block), &case) {
            assert!(block == 1 || block == 2, "csr_to_bsr {case}");
        }
    }
}

/// Blocked-ELL SpMM takes only 32-bit indices and real `f32` / `f64` values (cuSPARSE's table):
/// the other combinations are rejected before anything is recorded.
#[test]
fn blocked_ell_spmm_rejects_what_cusparse_does_not_support() {
    let mut fx = fx();
    let (b, c) = (fx.buf::<Complex<f64>>(12), fx.buf::<Complex<f64>>(8));
    let ell =
        SparseMatrix::<Complex<f64>, i32>::blocked_ell(4, 6, 2, 4, &fx.upload(&[0i32, 2, 1, -1]), &fx.buf(16)).unwrap();
    let one = Complex::new(1.0, 0.0);
    let zero = Complex::new(0.0, 0.0);
    let r = fx.h.sparse().unwrap().spmm(
        Transpose::No,
        one,
        &ell,
        DenseMatrix::new(&b, 6, 2),
        zero,
        DenseMatrix::new(&c, 4, 2),
    );
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a", .. })), "{r:?}");
    let ell64 = SparseMatrix::<f64, i64>::blocked_ell(4, 6, 2, 4, &fx.upload(&[0i64, 2, 1, -1]), &fx.buf(16)).unwrap();
    let (b, c) = (fx.buf::<f64>(12), fx.buf::<f64>(8));
    let r = fx.h.sparse().unwrap().spmm(
        Transpose::No,
        1.0,
        &ell64,
        DenseMatrix::new(&b, 6, 2),
        0.0,
        DenseMatrix::new(&c, 4, 2),
    );
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a", .. })), "{r:?}");
    let ell32 = SparseMatrix::<f64, i32>::blocked_ell(4, 6, 2, 4, &fx.upload(&[0i32, 2, 1, -1]), &fx.buf(16)).unwrap();
    let r = fx.h.sparse().unwrap().spmm(
        Transpose::No,
        1.0,
        &ell32,
        DenseMatrix::new(&b, 6, 2),
        0.0,
        DenseMatrix::new(&c, 4, 2),
    );
    assert!(r.is_ok(), "{r:?}");
}
