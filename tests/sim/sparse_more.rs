//! cuSPARSE's second set of ops on the simulator (SpGEMM reuse, SDDMM, SpSM, the sparse-vector
//! ops, BSR and Blocked-ELL matrices): bad input is rejected before anything is recorded,
//! naming the argument; valid input runs (the simulator computes it on the host).

use crate::common::fixture::runs;
use crate::common::fixture::{fx, rejects, unsupported, Fx};
use cusched::sparse::{DenseMatrix, Fill, SparseMatrix, SparseVector, Transpose, Triangle};
use cusched::{Error, GpuRef, Result};

#[track_caller]
fn bad<T: std::fmt::Debug>(r: Result<T>, arg: &str) {
    match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => {}
        other => panic!("expected a rejection of `{arg}`, got {other:?}"),
    }
}

#[test]
fn blocked_matrix_rejects_buffers_that_do_not_fit_its_shape() {
    let fx = fx();
    let (o3, i3, v12) = (fx.buf::<i32>(3), fx.buf::<i32>(3), fx.buf::<f64>(12));
    bad(SparseMatrix::bsr(4, 6, 4, 3, &o3, &i3, &v12), "block");
    bad(SparseMatrix::bsr(4, 6, 0, 3, &o3, &i3, &v12), "block");
    bad(SparseMatrix::bsr(4, 6, 2, 3, &fx.buf::<i32>(4), &i3, &v12), "offsets");
    bad(SparseMatrix::bsr(4, 6, 2, 3, &o3, &fx.buf::<i32>(2), &v12), "indices");
    bad(SparseMatrix::bsr(4, 6, 2, 3, &o3, &i3, &fx.buf::<f64>(11)), "values");
    bad(SparseMatrix::bsr(4, 6, 2, 7, &o3, &fx.buf::<i32>(7), &fx.buf::<f64>(28)), "nnz");
    assert!(SparseMatrix::bsr(4, 6, 2, 3, &o3, &i3, &v12).is_ok());
    let (i4, v16) = (fx.buf::<i32>(4), fx.buf::<f64>(16));
    bad(SparseMatrix::blocked_ell(4, 6, 2, 3, &i4, &v16), "ell_cols");
    bad(SparseMatrix::blocked_ell(4, 6, 2, 8, &i4, &fx.buf::<f64>(32)), "ell_cols");
    bad(SparseMatrix::blocked_ell(4, 6, 2, 4, &fx.buf::<i32>(3), &v16), "col_indices");
    bad(SparseMatrix::blocked_ell(4, 6, 2, 4, &i4, &fx.buf::<f64>(15)), "values");
    bad(SparseMatrix::blocked_ell(5, 6, 2, 4, &i4, &v16), "block");
    assert!(SparseMatrix::blocked_ell(4, 6, 2, 4, &i4, &v16).is_ok());
}

#[test]
fn checked_mode_rejects_malformed_blocked_matrices_and_sparse_vectors() {
    let fx = fx();
    assert!(fx.bsr().check(fx.s).is_ok());
    assert!(fx.ell().check(fx.s).is_ok());
    assert!(fx.spvec().check(fx.s).is_ok());
    let bsr = SparseMatrix::bsr(4, 6, 2, 3, &fx.upload(&[0i32, 2, 3]), &fx.upload(&[0i32, 3, 1]), &fx.buf::<f64>(12))
        .unwrap();
    assert!(matches!(bsr.check(fx.s), Err(Error::InvalidArgument { arg: "indices", .. })));
    let ell = SparseMatrix::blocked_ell(4, 6, 2, 4, &fx.upload(&[0i32, 3, 1, -1]), &fx.buf::<f64>(16)).unwrap();
    assert!(matches!(ell.check(fx.s), Err(Error::InvalidArgument { arg: "col_indices", .. })));
    let vals = fx.buf::<f64>(2);
    for idx in [[3i32, 1], [1, 1], [1, 5]] {
        let v = SparseVector::new(5, 2, &fx.upload(&idx), &vals).unwrap();
        assert!(matches!(v.check(fx.s), Err(Error::InvalidArgument { arg: "indices", .. })), "{idx:?}");
    }
}

#[test]
fn op_rejects_blocked_formats_it_does_not_take() {
    let mut fx = fx();
    let (bsr, ell) = (fx.bsr(), fx.ell());
    let (x, y) = (fx.buf::<f64>(6), fx.buf::<f64>(4));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &ell, &x, 0.0, &y));
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spmv(Transpose::Yes, 1.0, &bsr, &y, 0.0, &x));
    rejects(&mut fx, "x", |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &bsr, &y, 0.0, &y));
    runs(&mut fx, |fx| fx.h.sparse()?.spmv(Transpose::No, 1.0, &bsr, &x, 0.0, &y));
    let (b, c) = (fx.buf::<f64>(12), fx.buf::<f64>(8));
    let mm = |fx: &mut Fx, t, a: &SparseMatrix<f64>, b: &GpuRef<f64>| {
        fx.h.sparse()?.spmm(t, 1.0, a, DenseMatrix::new(b, 6, 2), 0.0, DenseMatrix::new(&c, 4, 2))
    };
    rejects(&mut fx, "a", |fx| mm(fx, Transpose::Yes, &ell, &b));
    rejects(&mut fx, "a", |fx| mm(fx, Transpose::Yes, &bsr, &b));
    let b11 = fx.buf::<f64>(11);
    rejects(&mut fx, "b", |fx| mm(fx, Transpose::No, &ell, &b11));
    runs(&mut fx, |fx| mm(fx, Transpose::No, &ell, &b));
    runs(&mut fx, |fx| mm(fx, Transpose::No, &bsr, &b));
    let sq =
        SparseMatrix::bsr(4, 4, 2, 2, &fx.upload(&[0i32, 1, 2]), &fx.upload(&[0i32, 1]), &fx.buf::<f64>(8)).unwrap();
    let (x4, y4) = (fx.buf::<f64>(4), fx.buf::<f64>(4));
    unsupported(&mut fx, "a", |fx| fx.h.sparse()?.spsv(Triangle::default(), 1.0, &sq, &x4, &y4));
    let d = fx.buf::<f64>(24);
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.sparse_to_dense(&ell, DenseMatrix::new(&d, 4, 6)));
}

/// The reusable SpGEMM refuses `i64` factors as unsupported, naming `a`, with nothing recorded:
/// cuSPARSE's reuse work estimation takes 32-bit indices only (it refused `i64` on an H100,
/// CUDA 13.0). The one-shot product takes them.
#[test]
fn spgemm_reuse_refuses_i64_factors() {
    let mut fx = fx();
    let (o, i) = (fx.upload(&[0i64, 1, 2]), fx.upload(&[0i64, 1]));
    let v = fx.upload(&[2.0f64, 3.0]);
    let d = SparseMatrix::csr(2, 2, 2, &o, &i, &v).unwrap();
    unsupported(&mut fx, "a", |fx| fx.h.sparse()?.spgemm_reuse(&d, &d));
    let c = runs(&mut fx, |fx| fx.h.sparse()?.spgemm(1.0, &d, &d));
    assert_eq!(c.values().download(fx.s).unwrap(), [4.0, 9.0]);
}

#[test]
fn spgemm_reuse_rejects_bad_input() {
    let mut fx = fx();
    let (a, l) = (fx.csr(), fx.lower());
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm_reuse(&a, &a));
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm_reuse(&a, &l));
    let coo = SparseMatrix::coo(3, 3, 6, &fx.buf(6), &fx.buf(6), l.values()).unwrap();
    rejects(&mut fx, "a", |fx| fx.h.sparse()?.spgemm_reuse(&coo, &l));
    rejects(&mut fx, "b", |fx| fx.h.sparse()?.spgemm_reuse(&l, &coo));
    let o = fx.other.upload(fx.other.default_stream(), &[0i32, 1, 3, 6]).unwrap();
    let foreign = SparseMatrix::csr(3, 3, 6, &o, &fx.foreign::<i32>(6), &fx.foreign::<f64>(6)).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.spgemm_reuse(&l, &foreign));
    fx.h.sparse().unwrap().spgemm_reuse(&l, &l).unwrap();
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.spgemm_reuse(&l, &l));
}

#[test]
fn sddmm_rejects_bad_input() {
    let mut fx = fx();
    let c = fx.csr(); // 3x4
    let (a, b) = (fx.buf::<f64>(6), fx.buf::<f64>(8)); // A 3x2, B 2x4
    let run = |fx: &mut Fx, ta, tb, a: DenseMatrix<'_, f64>, b: DenseMatrix<'_, f64>, c: &SparseMatrix<f64>| {
        fx.h.sparse()?.sddmm(ta, tb, 1.0, a, b, 0.0, c)
    };
    let (n, t) = (Transpose::No, Transpose::Yes);
    rejects(&mut fx, "b", |fx| run(fx, n, n, DenseMatrix::new(&a, 3, 2), DenseMatrix::new(&b, 4, 2), &c));
    rejects(&mut fx, "c", |fx| run(fx, t, n, DenseMatrix::new(&a, 3, 2), DenseMatrix::new(&a, 3, 2), &c));
    let a5 = fx.buf::<f64>(5);
    rejects(&mut fx, "a", |fx| run(fx, n, n, DenseMatrix::new(&a5, 3, 2), DenseMatrix::new(&b, 2, 4), &c));
    rejects(&mut fx, "a.ld", |fx| run(fx, n, n, DenseMatrix::new(&a, 3, 2).ld(2), DenseMatrix::new(&b, 2, 4), &c));
    rejects(&mut fx, "a", |fx| run(fx, n, n, DenseMatrix::new(c.values(), 3, 1), DenseMatrix::new(&b, 1, 4), &c));
    let coo = SparseMatrix::coo(3, 4, 5, &fx.buf(5), &fx.buf(5), c.values()).unwrap();
    rejects(&mut fx, "c", |fx| run(fx, n, n, DenseMatrix::new(&a, 3, 2), DenseMatrix::new(&b, 2, 4), &coo));
    let f = fx.foreign::<f64>(8);
    rejects(&mut fx, "!foreign", |fx| run(fx, n, n, DenseMatrix::new(&a, 3, 2), DenseMatrix::new(&f, 2, 4), &c));
    // Transposed: A stored 2x3, B stored 4x2.
    runs(&mut fx, |fx| run(fx, t, t, DenseMatrix::new(&a, 2, 3), DenseMatrix::new(&b, 4, 2), &c));
}

#[test]
fn spsm_rejects_bad_input() {
    let mut fx = fx();
    let (a, l) = (fx.csr(), fx.lower());
    let (b, c) = (fx.buf::<f64>(6), fx.buf::<f64>(6));
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let run = |fx: &mut Fx, a: &SparseMatrix<f64>, b: DenseMatrix<'_, f64>, c: DenseMatrix<'_, f64>| {
        fx.h.sparse()?.spsm(tri, 1.0, a, b, c)
    };
    rejects(&mut fx, "a", |fx| run(fx, &a, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2)));
    rejects(&mut fx, "b", |fx| run(fx, &l, DenseMatrix::new(&b, 2, 3), DenseMatrix::new(&c, 2, 3)));
    rejects(&mut fx, "c", |fx| run(fx, &l, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 1)));
    rejects(&mut fx, "c", |fx| run(fx, &l, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&b, 3, 2)));
    rejects(&mut fx, "c", |fx| run(fx, &l, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(l.values(), 3, 2)));
    let c5 = fx.buf::<f64>(5);
    rejects(&mut fx, "c", |fx| run(fx, &l, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c5, 3, 2)));
    let csc = SparseMatrix::csc(3, 3, 6, l.offsets(), l.indices(), l.values()).unwrap();
    unsupported(&mut fx, "a", |fx| run(fx, &csc, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2)));
    let f = fx.foreign::<f64>(6);
    rejects(&mut fx, "!foreign", |fx| run(fx, &l, DenseMatrix::new(&f, 3, 2), DenseMatrix::new(&c, 3, 2)));
    runs(&mut fx, |fx| run(fx, &l, DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2)));
    assert_eq!(fx.h.sparse().unwrap().analyses_made(), 1, "the one the GPU would make: none for a rejected solve");
}

#[test]
fn sparse_vector_rejects_buffers_that_do_not_fit() {
    let fx = fx();
    let (i2, v2) = (fx.buf::<i32>(2), fx.buf::<f64>(2));
    bad(SparseVector::new(0, 0, &i2, &v2), "size");
    bad(SparseVector::new(1, 2, &i2, &v2), "nnz");
    bad(SparseVector::new(5, 3, &i2, &fx.buf::<f64>(3)), "indices");
    bad(SparseVector::new(5, 2, &i2, &fx.buf::<f64>(1)), "values");
    assert!(SparseVector::<f64, i64>::new(5, 2, &fx.buf(2), &v2).is_ok());
}

#[test]
fn axpby_gather_scatter_rejects_bad_input() {
    let mut fx = fx();
    let x = fx.spvec();
    let (y, short) = (fx.buf::<f64>(5), fx.buf::<f64>(4));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.axpby(1.0, &x, 1.0, &short));
    let values = x.values().clone();
    let (xi, xv) = (x.indices().clone(), x.values().clone());
    let long = SparseVector::new(2, 2, &xi, &xv).unwrap();
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.axpby(1.0, &long, 1.0, &values));
    let f = fx.foreign::<f64>(5);
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.axpby(1.0, &x, 0.0, &f));
    runs(&mut fx, |fx| fx.h.sparse()?.axpby(1.0, &x, 0.5, &y));

    rejects(&mut fx, "y", |fx| fx.h.sparse()?.gather(&short, &x));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.gather(&values, &long));
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.gather(&f, &x));
    runs(&mut fx, |fx| fx.h.sparse()?.gather(&y, &x));

    rejects(&mut fx, "y", |fx| fx.h.sparse()?.scatter(&x, &short));
    rejects(&mut fx, "y", |fx| fx.h.sparse()?.scatter(&long, &values));
    rejects(&mut fx, "!foreign", |fx| fx.h.sparse()?.scatter(&x, &f));
    runs(&mut fx, |fx| fx.h.sparse()?.scatter(&x, &y));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.sparse()?.scatter(&x, &y));
}
