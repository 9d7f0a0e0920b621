//! cuSPARSE and cuSOLVER sparse on the simulator: bad input is rejected before anything is
//! recorded, naming the argument; valid input runs (the simulator computes it on the host);
//! the checked mode finds malformed structure.

use crate::common::fixture::{fx, rejects, runs, Fx};
use cusched::sparse::{DenseMatrix, SparseMatrix, Transpose, Triangle};
use cusched::{Error, Result};

#[test]
fn matrix_rejects_buffers_that_do_not_fit_its_shape() {
    let fx = fx();
    let (o4, o5, i5, v5, i3) =
        (fx.buf::<i32>(4), fx.buf::<i32>(5), fx.buf::<i32>(5), fx.buf::<f32>(5), fx.buf::<i32>(3));
    let bad = |r: Result<SparseMatrix<f32>>, arg: &str| match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => {}
        other => panic!("expected a rejection of `{arg}`, got {other:?}"),
    };
    bad(SparseMatrix::csr(3, 4, 5, &o5, &i5, &v5), "offsets");
    bad(SparseMatrix::csr(3, 4, 5, &o4, &i3, &v5), "indices");
    bad(SparseMatrix::csr(3, 4, 5, &o4, &i5, &fx.buf::<f32>(4)), "values");
    bad(SparseMatrix::csr(0, 4, 0, &fx.buf::<i32>(1), &i5, &v5), "rows");
    bad(SparseMatrix::csr(1, 2, 3, &fx.buf::<i32>(2), &i5, &v5), "nnz");
    bad(SparseMatrix::csc(3, 4, 5, &o4, &i5, &v5), "offsets");
    bad(SparseMatrix::coo(3, 4, 5, &i3, &i5, &v5), "row_indices");
    assert!(SparseMatrix::csr(3, 4, 5, &o4, &i5, &v5).is_ok());
    assert!(SparseMatrix::<f32, i64>::coo(3, 4, 5, &fx.buf(5), &fx.buf(5), &v5).is_ok());
}

#[test]
fn checked_mode_rejects_malformed_structure() {
    let fx = fx();
    assert!(fx.csr().check(fx.s).is_ok());
    let values = fx.upload(&[1.0f64; 5]);
    let case = |offsets: &[i32], indices: &[i32], arg: &str| {
        let m = SparseMatrix::csr(3, 4, 5, &fx.upload(offsets), &fx.upload(indices), &values).unwrap();
        match m.check(fx.s) {
            Err(Error::InvalidArgument { arg: a, reason }) if a == arg => reason,
            other => panic!("expected `{arg}` to be rejected, got {other:?}"),
        }
    };
    assert!(case(&[0, 3, 2, 5], &[0, 1, 2, 0, 1], "offsets").contains("decrease"));
    assert!(case(&[1, 2, 3, 5], &[0, 1, 2, 0, 1], "offsets").contains("start"));
    assert!(case(&[0, 2, 3, 4], &[0, 1, 2, 0, 1], "offsets").contains("end"));
    assert!(case(&[0, 2, 3, 5], &[0, 1, 4, 0, 1], "indices").contains("outside"));
    assert!(case(&[0, 2, 3, 5], &[0, -1, 2, 0, 1], "indices").contains("outside"));
    let coo = SparseMatrix::coo(3, 4, 2, &fx.upload(&[2i32, 1]), &fx.upload(&[0i32, 0]), &values).unwrap();
    assert!(matches!(coo.check(fx.s), Err(Error::InvalidArgument { arg: "row_indices", .. })));
}

#[test]
fn spmv_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.csr();
    let (x, y) = (fx.buf::<f64>(4), fx.buf::<f64>(3));
    let (x3, y2) = (fx.buf::<f64>(3), fx.buf::<f64>(2));
    rejects(&mut fx, "x", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x3, 0.0, &y));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &y2));
    // Transposed, A is 4x3: x needs 3 entries, y 4.
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv(Transpose::Yes, 1.0, &a, &y, 0.0, &y));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &x));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, a.values()));
    let f = fx.foreign::<f64>(4);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &f, 0.0, &y));
    runs(&mut fx, |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &y));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &y));
}

#[test]
fn spmm_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.csr();
    let (b, c) = (fx.buf::<f64>(8), fx.buf::<f64>(6));
    let sp = |fx: &mut Fx, b: DenseMatrix<'_, f64>, c: DenseMatrix<'_, f64>| {
        fx.h.sparse()?.spmm(Transpose::No, 1.0, &a, b, 0.0, c)
    };
    rejects(&mut fx, "b", |fx| sp(fx, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 2, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 1)));
    let b7 = fx.buf::<f64>(7);
    rejects(&mut fx, "b", |fx| sp(fx, DenseMatrix::new(&b7, 4, 2), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "b.ld", |fx| sp(fx, DenseMatrix::new(&b, 4, 2).ld(3), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "c", |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&b, 3, 2)));
    let f = fx.foreign::<f64>(8);
    rejects(&mut fx, "!foreign", |fx| sp(fx, DenseMatrix::new(&f, 4, 2), DenseMatrix::new(&c, 3, 2)));
    runs(&mut fx, |fx| sp(fx, DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2)));
}

#[test]
fn spsv_rejects_bad_input() {
    let mut fx = fx();
    let (a, l) = (fx.csr(), fx.lower());
    let (x, y) = (fx.buf::<f64>(3), fx.buf::<f64>(3));
    let t = Triangle::default();
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spsv(t, 1.0, &a, &x, &y));
    let short = fx.buf::<f64>(2);
    rejects(&mut fx, "x", |fx| fx.h.sparse()?.spsv(t, 1.0, &l, &short, &y));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spsv(t, 1.0, &l, &x, &short));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.spsv(t, 1.0, &l, &x, &x));
    let f = fx.foreign::<f64>(3);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.spsv(t, 1.0, &l, &x, &f));
    runs(&mut fx, |fx| fx.h.sparse()?.spsv(t, 1.0, &l, &x, &y));
    assert_eq!(fx.h.sparse().unwrap().analyses_made(), 1, "the one the GPU would make: none for a rejected solve");
}

#[test]
fn spgemm_rejects_bad_input() {
    let mut fx = fx();
    let (a, l) = (fx.csr(), fx.lower());
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm(1.0, &a, &a));
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm(1.0, &a, &l));
    let coo = SparseMatrix::coo(3, 3, 6, &fx.buf(6), &fx.buf(6), l.values()).unwrap();
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spgemm(1.0, &coo, &l));
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm(1.0, &l, &coo));
    let o = fx.other.upload(fx.other.default_stream(), &[0i32, 1, 3, 6]).unwrap();
    let (oi, ov) = (fx.foreign::<i32>(6), fx.foreign::<f64>(6));
    let foreign = SparseMatrix::csr(3, 3, 6, &o, &oi, &ov).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.spgemm(1.0, &l, &foreign));
    runs(&mut fx, |fx| fx.h.sparse()?.spgemm(1.0, &l, &l));
}

#[test]
fn conversion_rejects_bad_input() {
    let mut fx = fx();
    let a = fx.csr();
    let d = fx.buf::<f64>(12);
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 4, 3)));
    let d11 = fx.buf::<f64>(11);
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d11, 3, 4)));
    rejects(&mut fx, "out.ld", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4).ld(2)));
    rejects(&mut fx, "out", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(a.values(), 1, 5)));
    runs(&mut fx, |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4)));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_csr::<f64, i32>(DenseMatrix::new(&d11, 3, 4)));
    rejects(&mut fx, "dense.ld", |fx| fx.h.sparse()?.dense_to_csr::<f64, i32>(DenseMatrix::new(&d, 3, 4).ld(1)));
    rejects(&mut fx, "dense", |fx| fx.h.sparse()?.dense_to_csr::<f64, i32>(DenseMatrix::new(&d, 0, 4)));
    runs(&mut fx, |fx| fx.h.sparse()?.dense_to_csr::<f64, i64>(DenseMatrix::new(&d, 3, 4)));
    let coo = SparseMatrix::coo(3, 4, 5, &fx.buf(5), &fx.buf(5), a.values()).unwrap();
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.convert_compressed(&coo));
    let f = fx.foreign::<f64>(12);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.sparse_to_dense(&a, DenseMatrix::new(&f, 3, 4)));
    runs(&mut fx, |fx| fx.h.sparse()?.convert_compressed(&a));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.convert_compressed(&a));
}
