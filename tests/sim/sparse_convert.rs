//! cuSPARSE's dense → CSC / COO and BSR conversions on the simulator: the fixture matrices
//! through each with results worked by hand, every bad input rejected before anything is
//! recorded, and a malformed structure failing the op with a typed error. The harness of
//! tests/common/reference/sparse.rs runs them in every value and index type (sparse_sim).

use crate::common::fixture::{fx, rejects, runs};
use cusched::sparse::{DenseMatrix, SparseMatrix};
use cusched::Error;

/// The fixture's 3x4 `[[1 0 0 2] [0 0 0 0] [0 3 4 5]]`, column-major, into CSC and COO.
#[test]
fn fixture_matrix_through_dense_to_csc_and_dense_to_coo() {
    let mut fx = fx();
    let s = fx.s;
    let d = fx.upload(&[1.0f64, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 4.0, 2.0, 0.0, 5.0]);
    let csc = runs(&mut fx, |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&d, 3, 4)));
    assert_eq!((csc.rows(), csc.cols(), csc.nnz()), (3, 4, 5));
    assert_eq!(csc.offsets().download(s).unwrap(), [0, 1, 2, 3, 5]);
    assert_eq!(csc.indices().download(s).unwrap(), [0, 2, 2, 0, 2]);
    assert_eq!(csc.values().download(s).unwrap(), [1.0, 3.0, 4.0, 2.0, 5.0]);
    let coo = runs(&mut fx, |fx| fx.h.sparse()?.dense_to_coo::<f64, i64>(DenseMatrix::new(&d, 3, 4)));
    assert_eq!(coo.nnz(), 5);
    assert_eq!(coo.offsets().download(s).unwrap(), [0i64, 0, 2, 2, 2]);
    assert_eq!(coo.indices().download(s).unwrap(), [0i64, 3, 1, 2, 3]);
    assert_eq!(coo.values().download(s).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
    // All zeros: no nonzeros, offsets all 0, one-element arrays behind them.
    let z = fx.buf::<f64>(12);
    let empty = runs(&mut fx, |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&z, 3, 4)));
    assert_eq!((empty.nnz(), empty.offsets().download(s).unwrap()), (0, vec![0; 5]));
    let empty = runs(&mut fx, |fx| fx.h.sparse()?.dense_to_coo::<f64, i32>(DenseMatrix::new(&z, 3, 4)));
    assert_eq!(empty.nnz(), 0);
}

/// The fixture's 4x6 BSR matrix (blocks `[[1 2] [3 4]]` at (0, 0), `[[5 6] [7 8]]` at (0, 2),
/// `[[9 10] [11 12]]` at (1, 1)) into CSR and dense, and back to BSR from both.
#[test]
fn fixture_bsr_through_bsr_to_csr_csr_to_bsr_and_dense() {
    let mut fx = fx();
    let s = fx.s;
    let bsr = fx.bsr();
    bsr.values().copy_from_slice(s, &(1..=12).map(f64::from).collect::<Vec<_>>()).unwrap();
    let csr = runs(&mut fx, |fx| fx.h.sparse()?.bsr_to_csr(&bsr));
    assert_eq!((csr.rows(), csr.cols(), csr.nnz()), (4, 6, 12));
    assert_eq!(csr.offsets().download(s).unwrap(), [0, 4, 8, 10, 12]);
    assert_eq!(csr.indices().download(s).unwrap(), [0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 2, 3]);
    let want = [1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
    assert_eq!(csr.values().download(s).unwrap(), want);
    let again = runs(&mut fx, |fx| fx.h.sparse()?.csr_to_bsr(&csr, 2));
    assert_eq!((again.nnz(), again.block()), (3, 2));
    assert_eq!(again.offsets().download(s).unwrap(), [0, 2, 3]);
    assert_eq!(again.indices().download(s).unwrap(), [0, 2, 1]);
    assert_eq!(again.values().download(s).unwrap(), (1..=12).map(f64::from).collect::<Vec<_>>());
    // Row-major dense 4x6 with ld 7 (padding NaN, kept).
    let d = fx.upload(&[f64::NAN; 28]);
    runs(&mut fx, |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(&d, 4, 6).ld(7).row_major()));
    let got = d.download(s).unwrap();
    let rows: Vec<&[f64]> = got.chunks(7).collect();
    assert_eq!(rows[0][..6], [1.0, 2.0, 0.0, 0.0, 5.0, 6.0]);
    assert_eq!(rows[1][..6], [3.0, 4.0, 0.0, 0.0, 7.0, 8.0]);
    assert_eq!(rows[2][..6], [0.0, 0.0, 9.0, 10.0, 0.0, 0.0]);
    assert_eq!(rows[3][..6], [0.0, 0.0, 11.0, 12.0, 0.0, 0.0]);
    assert!(rows.iter().all(|r| r[6].is_nan()), "padding kept");
    // Whole blocks of 3 over the same dense: (0, 0) and (0, 1) hold values, (1, 0) and (1, 1) too.
    let b3 = runs(&mut fx, |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d, 4, 6).ld(7).row_major(), 2));
    assert_eq!(b3.values().download(s).unwrap(), (1..=12).map(f64::from).collect::<Vec<_>>());
    let one = runs(&mut fx, |fx| fx.h.sparse()?.csr_to_bsr(&csr, 1));
    assert_eq!((one.nnz(), one.indices().download(s).unwrap()), (12, vec![0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 2, 3]));
}

#[test]
fn dense_to_csc_and_coo_rejects_bad_input() {
    let mut fx = fx();
    let (d, d11) = (fx.buf::<f64>(12), fx.buf::<f64>(11));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&d11, 3, 4)));
    rejects(&mut fx, "dense.ld", |fx| fx.h.sparse()?.dense_to_csc::<f64, i64>(DenseMatrix::new(&d, 3, 4).ld(2)));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&d, 3, 0)));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_coo::<f64, i32>(DenseMatrix::new(&d11, 4, 3)));
    rejects(&mut fx, "dense.ld", |fx| fx.h.sparse()?.dense_to_coo::<f64, i32>(DenseMatrix::new(&d, 3, 4).ld(1)));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_coo::<f64, i64>(DenseMatrix::new(&d, 4, 4).row_major()));
    let f = fx.foreign::<f64>(12);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.dense_to_coo::<f64, i32>(DenseMatrix::new(&f, 3, 4)));
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&f, 3, 4)));
    runs(&mut fx, |fx| fx.h.sparse()?.dense_to_coo::<f64, i32>(DenseMatrix::new(&d, 3, 4)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.dense_to_csc::<f64, i32>(DenseMatrix::new(&d, 3, 4)));
}

#[test]
fn csr_to_bsr_rejects_bad_input() {
    let mut fx = fx();
    let (csr, bsr) = (fx.csr(), fx.bsr());
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.csr_to_bsr(&bsr, 2));
    let csc = runs(&mut fx, |fx| fx.h.sparse()?.convert_compressed(&csr));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.csr_to_bsr(&csc, 1));
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.csr_to_bsr(&csr, 0));
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.csr_to_bsr(&csr, 2)); // 3 rows
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.csr_to_bsr(&csr, usize::MAX));
    let (o, i, v) = (fx.foreign::<i32>(4), fx.foreign::<i32>(5), fx.foreign::<f64>(5));
    let foreign = SparseMatrix::csr(3, 4, 5, &o, &i, &v).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.csr_to_bsr(&foreign, 1));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.csr_to_bsr(&csr, 1));
}

#[test]
fn bsr_to_csr_and_bsr_to_dense_rejects_bad_input() {
    let mut fx = fx();
    let (csr, bsr) = (fx.csr(), fx.bsr());
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.bsr_to_csr(&csr));
    let d = fx.buf::<f64>(24);
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.bsr_to_dense(&csr, DenseMatrix::new(&d, 3, 4)));
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(&d, 6, 4)));
    let d23 = fx.buf::<f64>(23);
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(&d23, 4, 6)));
    rejects(&mut fx, "out.ld", |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(&d, 4, 6).ld(3)));
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(bsr.values(), 2, 6)));
    let (o, i, v) = (fx.foreign::<i32>(3), fx.foreign::<i32>(3), fx.foreign::<f64>(12));
    let foreign = SparseMatrix::bsr(4, 6, 2, 3, &o, &i, &v).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.bsr_to_csr(&foreign));
    let f = fx.foreign::<f64>(24);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.bsr_to_dense(&bsr, DenseMatrix::new(&f, 4, 6)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.bsr_to_csr(&bsr));
}

#[test]
fn dense_to_bsr_rejects_bad_input() {
    let mut fx = fx();
    let (d, d23) = (fx.buf::<f64>(24), fx.buf::<f64>(23));
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d, 4, 6), 0));
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d, 4, 6), 4));
    rejects(&mut fx, "block", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d, 4, 6), usize::MAX));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d23, 4, 6), 2));
    rejects(&mut fx, "dense.ld", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&d, 4, 6).ld(3), 2));
    let f = fx.foreign::<f64>(24);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.dense_to_bsr(DenseMatrix::new(&f, 4, 6), 2));
}

/// A CSR structure pointing outside its matrix fails the BSR conversions with a typed error
/// naming the array (CSR → BSR in its blocking count, BSR → CSR through its completion); the
/// stream goes on.
#[test]
fn a_malformed_structure_fails_the_bsr_conversions_with_a_typed_error() {
    let mut fx = fx();
    let a = SparseMatrix::csr(2, 2, 2, &fx.upload(&[0i32, 1, 2]), &fx.upload(&[0i32, 7]), &fx.upload(&[1.0f64, 1.0]))
        .unwrap();
    let r = fx.h.sparse().unwrap().csr_to_bsr(&a, 1).and_then(|c| c.wait());
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a.indices", .. })), "{r:?}");
    let b =
        SparseMatrix::bsr(2, 2, 1, 1, &fx.upload(&[0i32, 1, 1]), &fx.upload(&[5i32]), &fx.upload(&[1.0f64])).unwrap();
    let r = fx.h.sparse().unwrap().bsr_to_csr(&b).unwrap().wait();
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a.indices", .. })), "{r:?}");
    let d = fx.buf::<f64>(4);
    let r = fx.h.sparse().unwrap().bsr_to_dense(&b, DenseMatrix::new(&d, 2, 2)).unwrap().wait();
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a.indices", .. })), "{r:?}");
    let good = fx.bsr();
    runs(&mut fx, |fx| fx.h.sparse()?.bsr_to_csr(&good));
}
