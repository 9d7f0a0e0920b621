//! cuSPARSE's mixed-precision SpMV and SpMM on the simulator: every row of the tables with both
//! index types, CSR / CSC / COO, transposes and dense orders against the CPU reference of
//! tests/common/reference/sparse_mixed.rs (bit for bit: inputs exact, one rounding), a result
//! worked by hand, the single rounding into a half output, and bad input rejected before
//! anything is recorded, naming the argument.

use crate::common::fixture::{fx, rejects, runs, Fx};
use crate::common::reference::sparse::Cx;
use crate::common::reference::sparse_mixed::every_mixed_row;
use crate::common::{sim, Rng};
use cusched::half::{bf16, f16};
use cusched::sparse::{DenseMatrix, SparseMatrix, Transpose};

#[test]
fn every_mixed_row_index_type_and_format_matches_the_reference() {
    every_mixed_row(&mut Cx::new(sim(), Rng::new()));
}

/// The 3x4 `[[1 0 0 2] [0 0 0 0] [0 3 4 5]]` in CSR, stored in `X`.
fn csr<X: cusched::sparse::SparseStorage>(fx: &Fx, v: [X; 5]) -> SparseMatrix<X> {
    let offsets = fx.upload(&[0i32, 2, 2, 5]);
    let indices = fx.upload(&[0i32, 3, 1, 2, 3]);
    SparseMatrix::csr(3, 4, 5, &offsets, &indices, &fx.upload(&v)).unwrap()
}

/// `i8` into `i32` by hand, `Aᵀ x` under a conjugate transpose (a plain one: the types are
/// real), and `i8` into `f32`.
#[test]
fn i8_products_worked_by_hand() {
    let mut fx = fx();
    let s = fx.s;
    let a = csr(&fx, [1i8, 2, 3, 4, 5]);
    let x = fx.upload(&[1i8, -1, 2, 3]);
    let y = fx.upload(&[10i32, 20, 30]);
    // A x = [7, 0, 20]; 2 A x - y = [4, -20, 10].
    runs(&mut fx, |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 2, &a, &x, -1, &y));
    assert_eq!(y.download(s).unwrap(), [4, -20, 10]);
    let x3 = fx.upload(&[1i8, 7, -1]);
    let y4 = fx.upload(&[f32::NAN; 4]);
    // Aᵀ [1 7 -1] = [1, -3, -4, -3]; beta 0 leaves the NaNs unread.
    runs(&mut fx, |fx| fx.h.sparse()?.spmv_mixed(Transpose::Conj, 1.0f32, &a, &x3, 0.0, &y4));
    assert_eq!(y4.download(s).unwrap(), [1.0, -3.0, -4.0, -3.0]);
}

/// A half output is rounded once, from the exact sum: 2048 + 1 + 0.5 (2049.5) is 2050 in
/// `f16`, where rounding each partial sum would give 2048 (2048 + 1 ties to 2048).
#[test]
fn half_outputs_round_once_from_the_exact_sum() {
    let mut fx = fx();
    let s = fx.s;
    let h = f16::from_f64;
    let offsets = fx.upload(&[0i32, 3]);
    let indices = fx.upload(&[0i32, 1, 2]);
    let a = SparseMatrix::csr(1, 3, 3, &offsets, &indices, &fx.upload(&[h(2048.0), h(1.0), h(0.5)])).unwrap();
    let x = fx.upload(&[h(1.0); 3]);
    let y = fx.upload(&[h(0.0)]);
    runs(&mut fx, |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0f32, &a, &x, 0.0, &y));
    assert_eq!(y.download(s).unwrap(), [h(2050.0)]);
    let b = bf16::from_f64;
    let a = SparseMatrix::csr(1, 3, 3, &offsets, &indices, &fx.upload(&[b(256.0), b(1.0), b(0.5)])).unwrap();
    let x = fx.upload(&[b(1.0); 3]);
    let y = fx.upload(&[0.0f32]);
    runs(&mut fx, |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0f32, &a, &x, 0.0, &y));
    assert_eq!(y.download(s).unwrap(), [257.5]);
}

#[test]
fn spmv_mixed_rejects_bad_input() {
    let mut fx = fx();
    let h = f16::from_f64;
    let a = csr(&fx, [h(1.0); 5]); // 3x4
    let (x, y) = (fx.buf::<f16>(4), fx.buf::<f32>(3));
    let short_x = fx.buf::<f16>(3);
    rejects(&mut fx, "x", |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0, &a, &short_x, 0.0, &y));
    let short_y = fx.buf::<f32>(2);
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0, &a, &x, 0.0, &short_y));
    // Transposed, x must hold 3 and y 4.
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv_mixed(Transpose::Yes, 1.0, &a, &short_x, 0.0, &y));
    let foreign = fx.foreign::<f32>(3);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0, &a, &x, 0.0, &foreign));
    // A BSR A: the mixed products take CSR, CSC and COO.
    let offsets = fx.upload(&[0i32, 1]);
    let indices = fx.upload(&[0i32]);
    let bsr = SparseMatrix::bsr(2, 2, 2, 1, &offsets, &indices, &fx.upload(&[h(1.0); 4])).unwrap();
    let (x2, y2) = (fx.buf::<f16>(2), fx.buf::<f32>(2));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spmv_mixed(Transpose::No, 1.0, &bsr, &x2, 0.0, &y2));
}

#[test]
fn spmm_mixed_rejects_bad_input() {
    let mut fx = fx();
    let a = csr(&fx, [1i8; 5]); // 3x4
    let (b, c) = (fx.buf::<i8>(8), fx.buf::<i32>(6));
    let sp = |fx: &mut Fx, b: DenseMatrix<'_, i8>, c: DenseMatrix<'_, i32>| {
        fx.h.sparse()?.spmm_mixed(Transpose::No, 1, &a, b, 0, c)
    };
    rejects(&mut fx, "b", |fx| sp(fx, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 2, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 1)));
    rejects(&mut fx, "c.ld", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2).ld(2)));
    rejects(&mut fx, "b", |fx| sp(fx, DenseMatrix::new(&b, 4, 3), DenseMatrix::new(&c, 3, 3)));
}
