//! cuSPARSE's dense layouts and transposes on the simulator: row-major dense operands (SpMM,
//! SDDMM, the dense conversions), SpMM with `B` transposed or conjugate-transposed, conjugate
//! transposes of complex `A`, with results worked by hand; bad input rejected (or refused as unsupported, where cuSPARSE or
//! cusched does not take the combination) before anything is recorded, naming the argument.
//! The reference harness (tests/common/reference/sparse.rs) covers every value and index type.

use crate::common::fixture::{fx, rejects, runs, unsupported, Fx};
use cusched::sparse::{DenseMatrix, Fill, SparseMatrix, SpmmBatch, Transpose, Triangle};
use cusched::Complex;

type C64 = Complex<f64>;

/// The 1x2 complex CSR matrix `[[1+2i, 3-i]]`.
fn complex_row(fx: &Fx) -> SparseMatrix<C64> {
    let offsets = fx.upload(&[0i32, 2]);
    let indices = fx.upload(&[0i32, 1]);
    let values = fx.upload(&[C64::new(1.0, 2.0), C64::new(3.0, -1.0)]);
    SparseMatrix::csr(1, 2, 2, &offsets, &indices, &values).unwrap()
}

/// The fixture's `[[1 0 0 2] [0 0 0 0] [0 3 4 5]]` times `B = [[1 2] [2 4] [3 6] [4 8]]`, with
/// `B` and `C` row-major (padding kept), then `B` given transposed.
#[test]
fn spmm_with_row_major_operands_and_a_transposed_b() {
    let mut fx = fx();
    let a = fx.csr();
    let s = fx.s;
    let b = fx.upload(&[1.0f64, 2.0, 2.0, 4.0, 3.0, 6.0, 4.0, 8.0]);
    let c = fx.upload(&[-1.0f64; 9]);
    let (bv, cv) = (DenseMatrix::new(&b, 4, 2).row_major(), DenseMatrix::new(&c, 3, 2).ld(3).row_major());
    runs(&mut fx, |fx| fx.h.sparse()?.spmm(Transpose::No, 1.0, &a, bv, 0.0, cv));
    assert_eq!(c.download(s).unwrap(), [9.0, 18.0, -1.0, 0.0, 0.0, -1.0, 38.0, 76.0, -1.0]);
    // The same buffer read column-major as the 2x4 Bᵀ: op(B) = B again.
    let c2 = fx.upload(&[0.5f64; 6]);
    let (bt, cv) = (DenseMatrix::new(&b, 2, 4), DenseMatrix::new(&c2, 3, 2));
    runs(&mut fx, |fx| fx.h.sparse()?.spmm_ops(Transpose::No, Transpose::Yes, 1.0, &a, bt, 2.0, cv));
    assert_eq!(c2.download(s).unwrap(), [10.0, 1.0, 39.0, 19.0, 1.0, 77.0]);
    // Transposes of real values: a conjugate transpose is a plain one.
    let c3 = fx.upload(&[0.0f64; 6]);
    let (bt, cv) = (DenseMatrix::new(&b, 2, 4), DenseMatrix::new(&c3, 3, 2));
    runs(&mut fx, |fx| fx.h.sparse()?.spmm_ops(Transpose::No, Transpose::Conj, 1.0, &a, bt, 0.0, cv));
    assert_eq!(c3.download(s).unwrap(), [9.0, 0.0, 38.0, 18.0, 0.0, 76.0]);
}

/// `Aᴴ x` and `Aᴴ B` of the complex `[[1+2i, 3-i]]`: the values conjugated, not only moved.
#[test]
fn conjugate_transposes_conjugate_complex_values() {
    let mut fx = fx();
    let a = complex_row(&fx);
    let s = fx.s;
    let x = fx.upload(&[C64::new(2.0, 0.0)]);
    let y = fx.buf::<C64>(2);
    runs(&mut fx, |fx| fx.h.sparse()?.spmv(Transpose::Conj, C64::new(1.0, 0.0), &a, &x, C64::new(0.0, 0.0), &y));
    assert_eq!(y.download(s).unwrap(), [C64::new(2.0, -4.0), C64::new(6.0, 2.0)]);
    runs(&mut fx, |fx| fx.h.sparse()?.spmv(Transpose::Yes, C64::new(1.0, 0.0), &a, &x, C64::new(0.0, 0.0), &y));
    assert_eq!(y.download(s).unwrap(), [C64::new(2.0, 4.0), C64::new(6.0, -2.0)]);
    // op(B) = Bᴴ with the stored 2x1 B = [i; 2]: op(B) = [-i, 2]; C = Aᴴ op(B), row-major.
    let b = fx.upload(&[C64::new(0.0, 1.0), C64::new(2.0, 0.0)]);
    let c = fx.buf::<C64>(4);
    let (bv, cv) = (DenseMatrix::new(&b, 2, 1), DenseMatrix::new(&c, 2, 2).row_major());
    let one = C64::new(1.0, 0.0);
    let zero = C64::new(0.0, 0.0);
    runs(&mut fx, |fx| fx.h.sparse()?.spmm_ops(Transpose::Conj, Transpose::Conj, one, &a, bv, zero, cv));
    let want = [C64::new(-2.0, -1.0), C64::new(2.0, -4.0), C64::new(1.0, -3.0), C64::new(6.0, 2.0)];
    assert_eq!(c.download(s).unwrap(), want);
    // cuSPARSE takes no conjugate transpose of a one-row B: refused, nothing recorded.
    let b1 = fx.upload(&[C64::new(0.0, 1.0)]);
    let c1 = fx.buf::<C64>(2);
    let (bv, cv) = (DenseMatrix::new(&b1, 1, 1), DenseMatrix::new(&c1, 2, 1));
    unsupported(&mut fx, "op_b", |fx| fx.h.sparse()?.spmm_ops(Transpose::Conj, Transpose::Conj, one, &a, bv, zero, cv));
}

#[test]
fn spmm_ops_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.csr(); // 3x4
    let (b, c) = (fx.buf::<f64>(8), fx.buf::<f64>(6));
    let sp = |fx: &mut Fx, tb, b: DenseMatrix<'_, f64>, c: DenseMatrix<'_, f64>| {
        fx.h.sparse()?.spmm_ops(Transpose::No, tb, 1.0, &a, b, 0.0, c)
    };
    let (n, t) = (Transpose::No, Transpose::Yes);
    // A stored 4x2 B transposed is 2x4: op(A) has 4 columns.
    rejects(&mut fx, "b", |fx| sp(fx, t, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2)));
    // Bᵀ of a 2x4 B is 4x2, so C must be 3x2, not 3x4 (in a buffer of 12 for the shape).
    let c12 = fx.buf::<f64>(12);
    rejects(&mut fx, "c", |fx| sp(fx, t, DenseMatrix::new(&b, 2, 4), DenseMatrix::new(&c12, 3, 4)));
    // Row-major: the leading dimension is at least the columns, and the span fits the buffer.
    rejects(&mut fx, "c.ld", |fx| sp(fx, n, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2).ld(1).row_major()));
    rejects(&mut fx, "b", |fx| sp(fx, n, DenseMatrix::new(&b, 4, 2).ld(3).row_major(), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, n, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2).ld(3).row_major()));
    // A blocked A reads B as stored.
    let bsr = fx.bsr(); // 4x6
    let (b12, c8) = (fx.buf::<f64>(12), fx.buf::<f64>(8));
    unsupported(&mut fx, "op_b", |fx| {
        fx.h.sparse()?.spmm_ops(n, t, 1.0, &bsr, DenseMatrix::new(&b12, 2, 6), 0.0, DenseMatrix::new(&c8, 4, 2))
    });
    let ell = fx.ell();
    unsupported(&mut fx, "op_b", |fx| {
        fx.h.sparse()?.spmm_ops(n, t, 1.0, &ell, DenseMatrix::new(&b12, 2, 6), 0.0, DenseMatrix::new(&c8, 4, 2))
    });
}

/// SpSM with row-major `B` and `C` (padding kept) and with a conjugate-transposed complex `A`,
/// worked by hand; SpSM with `B` and `C` in different orders is refused, naming `c`, with
/// nothing recorded.
#[test]
fn spsm_takes_row_major_operands_and_conjugate_transposes() {
    let mut fx = fx();
    let s = fx.s;
    let tri = Triangle { fill: Fill::Lower, unit_diagonal: false, transpose: Transpose::No };
    // L = [[2 0] [1 4]], B = [[2 4] [9 10]] row-major with ld 3: C = [[1 2] [2 2]].
    let (lo, li, lv) = (fx.upload(&[0i32, 1, 3]), fx.upload(&[0i32, 0, 1]), fx.upload(&[2.0f64, 1.0, 4.0]));
    let l = SparseMatrix::csr(2, 2, 3, &lo, &li, &lv).unwrap();
    let b = fx.upload(&[2.0f64, 4.0, f64::NAN, 9.0, 10.0, f64::NAN]);
    let c = fx.upload(&[-1.0f64; 6]);
    let (bv, cv) = (DenseMatrix::new(&b, 2, 2).ld(3).row_major(), DenseMatrix::new(&c, 2, 2).ld(3).row_major());
    runs(&mut fx, |fx| fx.h.sparse()?.spsm(tri, 1.0, &l, bv, cv));
    assert_eq!(c.download(s).unwrap(), [1.0, 2.0, -1.0, 2.0, 2.0, -1.0]);
    let c2 = fx.upload(&[0.0f64; 4]);
    unsupported(&mut fx, "c", |fx| {
        fx.h.sparse()?.spsm(tri, 1.0, &l, DenseMatrix::new(&b, 2, 2).ld(3).row_major(), DenseMatrix::new(&c2, 2, 2))
    });
    // L = [[1+i 0] [2 1]]: Lᴴ c = [4 1] gives c = [1+i, 1]; Lᵀ c = [4 1] gives [1-i, 1].
    let one = C64::new(1.0, 0.0);
    let lv = fx.upload(&[C64::new(1.0, 1.0), C64::new(2.0, 0.0), one]);
    let lc = SparseMatrix::csr(2, 2, 3, &lo, &li, &lv).unwrap();
    let rhs = fx.upload(&[C64::new(4.0, 0.0), one]);
    let x = fx.buf::<C64>(2);
    for (t, want) in [(Transpose::Conj, C64::new(1.0, 1.0)), (Transpose::Yes, C64::new(1.0, -1.0))] {
        let tri = Triangle { transpose: t, ..tri };
        runs(&mut fx, |fx| {
            fx.h.sparse()?.spsm(tri, one, &lc, DenseMatrix::new(&rhs, 2, 1), DenseMatrix::new(&x, 2, 1))
        });
        assert_eq!(x.download(s).unwrap(), [want, one], "{t:?}");
    }
}

/// SDDMM refuses a conjugate transpose of complex `A` or `B` as unsupported, naming `op_a` or
/// `op_b`, with nothing recorded: cuSPARSE's SDDMM kernel read out of bounds and returned wrong
/// values with either on an H100 (CUDA 13.0). On real values a conjugate transpose is a plain
/// one, and runs.
#[test]
fn sddmm_refuses_conjugate_transposes_of_complex_operands() {
    let mut fx = fx();
    let (one, zero) = (C64::new(1.0, 0.0), C64::new(0.0, 0.0));
    let (co, ci) = (fx.upload(&[0i32, 1, 2]), fx.upload(&[0i32, 1]));
    let cvals = fx.upload(&[zero; 2]);
    let cm = SparseMatrix::csr(2, 2, 2, &co, &ci, &cvals).unwrap();
    let a = fx.upload(&[C64::new(0.0, 1.0), C64::new(2.0, 0.0)]);
    let bb = fx.upload(&[one, C64::new(0.0, 1.0)]);
    let n = Transpose::No;
    unsupported(&mut fx, "op_a", |fx| {
        let (av, bv) = (DenseMatrix::new(&a, 1, 2), DenseMatrix::new(&bb, 1, 2));
        fx.h.sparse()?.sddmm(Transpose::Conj, n, one, av, bv, zero, &cm)
    });
    unsupported(&mut fx, "op_b", |fx| {
        let (av, bv) = (DenseMatrix::new(&a, 2, 1), DenseMatrix::new(&bb, 2, 1));
        fx.h.sparse()?.sddmm(n, Transpose::Conj, one, av, bv, zero, &cm)
    });
    // Real: A = [[1 2]] stored 1x2 used transposed is [1; 2], B = [[1 1]]: diagonal [1 2].
    let s = fx.s;
    let rv = fx.upload(&[0.0f64; 2]);
    let rc = SparseMatrix::csr(2, 2, 2, &co, &ci, &rv).unwrap();
    let (ra, rb) = (fx.upload(&[1.0f64, 2.0]), fx.upload(&[1.0f64, 1.0]));
    runs(&mut fx, |fx| {
        let (av, bv) = (DenseMatrix::new(&ra, 1, 2), DenseMatrix::new(&rb, 1, 2));
        fx.h.sparse()?.sddmm(Transpose::Conj, n, 1.0, av, bv, 0.0, &rc)
    });
    assert_eq!(rv.download(s).unwrap(), [1.0, 2.0]);
}

/// The fixture matrix to a row-major dense matrix (padding kept) and back, and SDDMM of
/// row-major operands at its pattern.
#[test]
fn row_major_conversions_and_sddmm() {
    let mut fx = fx();
    let a = fx.csr(); // [[1 0 0 2] [0 0 0 0] [0 3 4 5]]
    let s = fx.s;
    let d = fx.upload(&[-1.0f64; 15]);
    runs(&mut fx, |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4).ld(5).row_major()));
    let want = [1.0, 0.0, 0.0, 2.0, -1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 3.0, 4.0, 5.0, -1.0];
    assert_eq!(d.download(s).unwrap(), want);
    let back =
        runs(&mut fx, |fx| fx.h.sparse()?.dense_to_csr::<f64, i32>(DenseMatrix::new(&d, 3, 4).ld(5).row_major()));
    assert_eq!(back.offsets().download(s).unwrap(), [0, 2, 2, 5]);
    assert_eq!(back.indices().download(s).unwrap(), [0, 3, 1, 2, 3]);
    assert_eq!(back.values().download(s).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
    // (A B) at A's pattern, A = [[1] [2] [3]] row-major 3x1, B = [[1 2 3 4]] row-major 1x4:
    // A B = [[1 2 3 4] [2 4 6 8] [3 6 9 12]], sampled at (0,0) (0,3) (2,1) (2,2) (2,3).
    let (da, db) = (fx.upload(&[1.0f64, 2.0, 3.0]), fx.upload(&[1.0f64, 2.0, 3.0, 4.0]));
    let (av, bv) = (DenseMatrix::new(&da, 3, 1).row_major(), DenseMatrix::new(&db, 1, 4).row_major());
    runs(&mut fx, |fx| fx.h.sparse()?.sddmm(Transpose::No, Transpose::No, 1.0, av, bv, 0.0, &a));
    assert_eq!(a.values().download(s).unwrap(), [1.0, 4.0, 6.0, 9.0, 12.0]);
}

#[test]
fn row_major_views_reject_bad_input() {
    let mut fx = fx();
    let a = fx.csr(); // 3x4
    let d = fx.buf::<f64>(12);
    // Row-major: the leading dimension is at least the columns, and the rows fit the buffer.
    rejects(&mut fx, "out.ld", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4).ld(3).row_major()));
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4).ld(5).row_major()));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_csr::<f64, i32>(DenseMatrix::new(&d, 4, 4).row_major()));
    let (da, db) = (fx.buf::<f64>(6), fx.buf::<f64>(8)); // A 3x2, B 2x4
    let n = Transpose::No;
    rejects(&mut fx, "a.ld", |fx| {
        let (av, bv) = (DenseMatrix::new(&da, 3, 2).ld(1).row_major(), DenseMatrix::new(&db, 2, 4));
        fx.h.sparse()?.sddmm(n, n, 1.0, av, bv, 0.0, &a)
    });
    rejects(&mut fx, "b", |fx| {
        let (av, bv) = (DenseMatrix::new(&da, 3, 2), DenseMatrix::new(&db, 2, 4).ld(5).row_major());
        fx.h.sparse()?.sddmm(n, n, 1.0, av, bv, 0.0, &a)
    });
}

/// The fixture's CSR `[[1 0 0 2] [0 0 0 0] [0 3 4 5]]` to COO (row indices expanded, columns
/// and values shared) and back.
#[test]
fn csr_to_coo_and_back() {
    let mut fx = fx();
    let a = fx.csr();
    let s = fx.s;
    let coo = runs(&mut fx, |fx| fx.h.sparse()?.csr_to_coo(&a));
    assert_eq!((coo.rows(), coo.cols(), coo.nnz()), (3, 4, 5));
    assert_eq!(coo.offsets().download(s).unwrap(), [0, 0, 2, 2, 2]);
    assert_eq!(coo.indices().id(), a.indices().id(), "the column indices are shared");
    let csr = runs(&mut fx, |fx| fx.h.sparse()?.coo_to_csr(&coo));
    assert_eq!(csr.offsets().download(s).unwrap(), [0, 2, 2, 5]);
    assert_eq!(csr.values().download(s).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn csr_to_coo_and_coo_to_csr_reject_bad_input() {
    let mut fx = fx();
    let (csr, bsr) = (fx.csr(), fx.bsr());
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.csr_to_coo(&bsr));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.coo_to_csr(&csr));
    let csc = runs(&mut fx, |fx| fx.h.sparse()?.convert_compressed(&csr));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.csr_to_coo(&csc));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.coo_to_csr(&csc));
    let (o, i, v) = (fx.foreign::<i32>(4), fx.foreign::<i32>(5), fx.foreign::<f64>(5));
    let foreign = SparseMatrix::csr(3, 4, 5, &o, &i, &v).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.csr_to_coo(&foreign));
}

/// Two products of the fixture's pattern sharing its row offsets, the second with its values
/// doubled, each with its own `B` and `C`.
#[test]
fn spmm_batched_strides_every_operand() {
    let mut fx = fx();
    let a = fx.csr(); // [[1 0 0 2] [0 0 0 0] [0 3 4 5]]
    let s = fx.s;
    let indices = fx.upload(&[0i32, 3, 1, 2, 3, -7, 0, 3, 1, 2, 3]);
    let values = fx.upload(&[1.0f64, 2.0, 3.0, 4.0, 5.0, f64::NAN, 2.0, 4.0, 6.0, 8.0, 10.0]);
    let batched = SparseMatrix::csr(3, 4, 5, a.offsets(), &indices, &values).unwrap();
    // B_0 = (1 2 3 4)ᵀ, B_1 = (1 1 1 1)ᵀ, 5 apart; C 3 apart.
    let b = fx.upload(&[1.0f64, 2.0, 3.0, 4.0, -1.0, 1.0, 1.0, 1.0, 1.0]);
    let c = fx.upload(&[0.0f64; 6]);
    let batch = SpmmBatch { count: 2, a_offsets: 0, a_entries: 6, b: 5, c: 3 };
    let (bv, cv) = (DenseMatrix::new(&b, 4, 1), DenseMatrix::new(&c, 3, 1));
    runs(&mut fx, |fx| fx.h.sparse()?.spmm_batched(Transpose::No, 1.0, &batched, bv, 0.0, cv, batch));
    assert_eq!(c.download(s).unwrap(), [9.0, 0.0, 38.0, 6.0, 0.0, 24.0]);
}

#[test]
fn spmm_batched_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.csr(); // 3x4, 5 entries
    let (b, c) = (fx.buf::<f64>(8), fx.buf::<f64>(6));
    let one = SpmmBatch { count: 2, a_offsets: 0, a_entries: 0, b: 4, c: 3 };
    let sp = |fx: &mut Fx, a: &SparseMatrix<f64>, batch: SpmmBatch| {
        fx.h.sparse()?.spmm_batched(
            Transpose::No,
            1.0,
            a,
            DenseMatrix::new(&b, 4, 1),
            0.0,
            DenseMatrix::new(&c, 3, 1),
            batch,
        )
    };
    assert!(sp(&mut fx, &a, one).is_ok(), "a valid batch runs");
    rejects(&mut fx, "batch.count", |fx| sp(fx, &a, SpmmBatch { count: 0, ..one }));
    // A CSR offsets array holds one matrix: its batch shares it.
    rejects(&mut fx, "a.offsets", |fx| sp(fx, &a, SpmmBatch { a_offsets: 4, ..one }));
    rejects(&mut fx, "a.indices", |fx| sp(fx, &a, SpmmBatch { a_entries: 1, ..one }));
    rejects(&mut fx, "b", |fx| sp(fx, &a, SpmmBatch { b: 5, ..one }));
    rejects(&mut fx, "batch.c", |fx| sp(fx, &a, SpmmBatch { c: 2, ..one }));
    rejects(&mut fx, "c", |fx| sp(fx, &a, SpmmBatch { count: 3, b: 0, ..one }));
    let (r, ci, v) = (fx.upload(&[0i32, 0, 2, 2, 2]), fx.upload(&[0i32, 3, 1, 2, 3]), fx.buf::<f64>(5));
    let coo = SparseMatrix::coo(3, 4, 5, &r, &ci, &v).unwrap();
    rejects(&mut fx, "batch.a_offsets", |fx| sp(fx, &coo, SpmmBatch { a_offsets: 1, ..one }));
    let bsr = fx.bsr();
    let (b12, c8) = (fx.buf::<f64>(12), fx.buf::<f64>(8));
    rejects(&mut fx, "a", |fx| {
        let (bv, cv) = (DenseMatrix::new(&b12, 6, 1), DenseMatrix::new(&c8, 4, 1));
        fx.h.sparse()?.spmm_batched(Transpose::No, 1.0, &bsr, bv, 0.0, cv, SpmmBatch { count: 1, ..one })
    });
}

/// Triangular solves of a square BSR, Blocked-ELL or CSC `a` are refused as unsupported by
/// cuSPARSE (its SpSV and SpSM take CSR and COO), naming `a`, with nothing recorded.
#[test]
fn triangular_solves_refuse_formats_cusparse_does_not_solve() {
    let mut fx = fx();
    let (o, i) = (fx.upload(&[0i32, 1, 2]), fx.upload(&[0i32, 1]));
    let v = fx.upload(&[1.0f64, 1.0]);
    let bsr = SparseMatrix::bsr(2, 2, 1, 2, &o, &i, &v).unwrap();
    let ell = SparseMatrix::blocked_ell(2, 2, 1, 1, &i, &v).unwrap();
    let csc = SparseMatrix::csc(2, 2, 2, &o, &i, &v).unwrap();
    let (x, y) = (fx.upload(&[1.0f64, 1.0]), fx.buf::<f64>(2));
    let tri = Triangle::default();
    for a in [&bsr, &ell, &csc] {
        unsupported(&mut fx, "a", |fx| fx.h.sparse()?.spsv(tri, 1.0, a, &x, &y));
        unsupported(&mut fx, "a", |fx| {
            fx.h.sparse()?.spsm(tri, 1.0, a, DenseMatrix::new(&x, 2, 1), DenseMatrix::new(&y, 2, 1))
        });
    }
}

/// SDDMM into a BSR `C` is refused as unsupported, naming `c`, with nothing recorded:
/// cuSPARSE's SDDMM size query refused the BSR outputs it was given on an H100 (CUDA 13.0); a
/// CSC `C` stays rejected, naming `c`.
#[test]
fn sddmm_refuses_a_bsr_output() {
    let mut fx = fx();
    let a = fx.upload(&[1.0f64, 2.0, 3.0, 4.0]);
    let b = fx.upload(&[1.0f64, 10.0, 100.0, 1000.0]);
    let (o, i) = (fx.upload(&[0i32, 0, 1]), fx.upload(&[0i32]));
    let v = fx.upload(&[1.0f64; 4]);
    let c = SparseMatrix::bsr(4, 4, 2, 1, &o, &i, &v).unwrap();
    let (av, bv) = (DenseMatrix::new(&a, 4, 1), DenseMatrix::new(&b, 1, 4));
    unsupported(&mut fx, "c", |fx| fx.h.sparse()?.sddmm(Transpose::No, Transpose::No, 2.0, av, bv, 0.5, &c));
    let (a2, b2) = (fx.upload(&[1.0f64; 8]), fx.upload(&[1.0f64; 8]));
    let (av2, bv2) = (DenseMatrix::new(&a2, 4, 2), DenseMatrix::new(&b2, 2, 4));
    unsupported(&mut fx, "c", |fx| fx.h.sparse()?.sddmm(Transpose::No, Transpose::No, 1.0, av2, bv2, 0.0, &c));
    let csc = SparseMatrix::csc(4, 4, 1, &fx.upload(&[0i32, 1, 1, 1, 1]), &i, &v).unwrap();
    rejects(&mut fx, "c", |fx| fx.h.sparse()?.sddmm(Transpose::No, Transpose::No, 1.0, av, bv, 0.0, &csc));
}
