//! cuSPARSE on the simulator computes every op on the host: the harness of
//! tests/common/reference/sparse.rs (every op, value type, index type, format, transpose and
//! layout against the CPU reference), the fixture matrices through each op with results worked
//! by hand, the blocking ops' sizes, and a malformed structure failing the op's completion.

use crate::common::fixture::fx;
use crate::common::reference::sparse::{all_index_types, solves_after_writes, Cx};
use crate::common::{sim, Rng};
use cusched::sparse::{DenseMatrix, Fill, SparseMatrix, SparseVector, Transpose, Triangle};
use cusched::{Complex, Error};

#[test]
fn every_op_in_f32_matches_the_cpu_reference() {
    all_index_types::<f32>(&mut Cx::new(sim(), Rng::new()));
}

#[test]
fn every_op_in_f64_matches_the_cpu_reference() {
    all_index_types::<f64>(&mut Cx::new(sim(), Rng::new()));
}

#[test]
fn every_op_in_complex_f32_matches_the_cpu_reference() {
    all_index_types::<Complex<f32>>(&mut Cx::new(sim(), Rng::new()));
}

#[test]
fn every_op_in_complex_f64_matches_the_cpu_reference() {
    all_index_types::<Complex<f64>>(&mut Cx::new(sim(), Rng::new()));
}

/// The simulator counts the analyses the GPU would make, by its rules: after a write of `A`'s
/// values alone the triangular solves take the new values with no new analysis, after a write
/// of its offsets or indices they analyse anew; either way they solve the system `A` holds.
#[test]
fn solves_after_writes_of_a_count_analyses_as_the_gpu_does() {
    let mut cx = Cx::new(sim(), Rng::new());
    solves_after_writes::<f32, i32>(&mut cx);
    solves_after_writes::<f64, i64>(&mut cx);
    solves_after_writes::<Complex<f32>, i32>(&mut cx);
    solves_after_writes::<Complex<f64>, i64>(&mut cx);
}

/// The fixture's 3x4 CSR matrix `[[1 0 0 2] [0 0 0 0] [0 3 4 5]]` through SpMV, SpMM, the
/// conversions and SpGEMM, with results worked by hand.
#[test]
fn fixture_matrix_through_spmv_spmm_conversions_and_spgemm() {
    let mut fx = fx();
    let a = fx.csr();
    let s = fx.s;
    let (x, y) = (fx.upload(&[1.0f64, 2.0, 3.0, 4.0]), fx.upload(&[1.0f64, 1.0, 1.0]));
    fx.h.sparse().unwrap().spmv(Transpose::No, 2.0, &a, &x, 0.5, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [18.5, 0.5, 76.5]);
    let yt = fx.upload(&[f64::NAN; 4]);
    let x3 = fx.upload(&[1.0f64, 2.0, 3.0]);
    fx.h.sparse().unwrap().spmv(Transpose::Yes, 1.0, &a, &x3, 0.0, &yt).unwrap().wait().unwrap();
    assert_eq!(yt.download(s).unwrap(), [1.0, 9.0, 12.0, 17.0], "beta 0: y is not read");
    // C (3x2, ld 4) = A B, B's columns x and 2x.
    let b = fx.upload(&[1.0f64, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0]);
    let c = fx.upload(&[-1.0f64; 8]);
    let (bv, cv) = (DenseMatrix::new(&b, 4, 2), DenseMatrix::new(&c, 3, 2).ld(4));
    fx.h.sparse().unwrap().spmm(Transpose::No, 1.0, &a, bv, 0.0, cv).unwrap().wait().unwrap();
    assert_eq!(c.download(s).unwrap(), [9.0, 0.0, 38.0, -1.0, 18.0, 0.0, 76.0, -1.0], "padding kept");
    let d = fx.buf::<f64>(12);
    fx.h.sparse().unwrap().sparse_to_dense(&a, DenseMatrix::new(&d, 3, 4)).unwrap().wait().unwrap();
    assert_eq!(d.download(s).unwrap(), [1.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 4.0, 2.0, 0.0, 5.0]);
    let back = fx.h.sparse().unwrap().dense_to_csr::<f64, i64>(DenseMatrix::new(&d, 3, 4)).unwrap().wait().unwrap();
    assert_eq!((back.nnz(), back.offsets().download(s).unwrap()), (5, vec![0i64, 2, 2, 5]));
    assert_eq!(back.indices().download(s).unwrap(), [0i64, 3, 1, 2, 3]);
    assert_eq!(back.values().download(s).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
    let csc = fx.h.sparse().unwrap().convert_compressed(&a).unwrap().wait().unwrap();
    assert_eq!(csc.offsets().download(s).unwrap(), [0, 1, 2, 3, 5]);
    assert_eq!(csc.indices().download(s).unwrap(), [0, 2, 2, 0, 2]);
    assert_eq!(csc.values().download(s).unwrap(), [1.0, 3.0, 4.0, 2.0, 5.0]);
    // A Aᵀ (3x3): [[5 0 10] [0 0 0] [10 0 50]], structure from the two stored rows.
    let at = SparseMatrix::csr(4, 3, 5, csc.offsets(), csc.indices(), csc.values()).unwrap();
    let aat = fx.h.sparse().unwrap().spgemm(1.0, &a, &at).unwrap().wait().unwrap();
    assert_eq!((aat.rows(), aat.cols(), aat.nnz()), (3, 3, 4));
    assert_eq!(aat.offsets().download(s).unwrap(), [0, 2, 2, 4]);
    assert_eq!(aat.indices().download(s).unwrap(), [0, 2, 0, 2]);
    assert_eq!(aat.values().download(s).unwrap(), [5.0, 10.0, 10.0, 50.0]);
    let plan = fx.h.sparse().unwrap().spgemm_reuse(&a, &at).unwrap();
    assert_eq!(plan.c().nnz(), 4);
    fx.h.sparse().unwrap().spgemm_reuse_compute(&plan, 2.0, 0.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().values().download(s).unwrap(), [10.0, 20.0, 20.0, 100.0]);
    // C = A Aᵀ + 2 C, on C's values as the last compute left them, then as written.
    fx.h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 2.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().values().download(s).unwrap(), [25.0, 50.0, 50.0, 250.0]);
    plan.c().values().copy_from_slice(s, &[1.0, -1.0, 0.5, 0.0]).unwrap();
    fx.h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 2.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().values().download(s).unwrap(), [7.0, 8.0, 11.0, 50.0]);
    // The same product with 64-bit indices, one-shot; the reusable form refuses them.
    let (o64, i64s) = (fx.upload(&[0i64, 1, 2, 3, 5]), fx.upload(&[0i64, 2, 2, 0, 2]));
    let at64 = SparseMatrix::csr(4, 3, 5, &o64, &i64s, csc.values()).unwrap();
    let aat = fx.h.sparse().unwrap().spgemm(1.0, &back, &at64).unwrap().wait().unwrap();
    assert_eq!(aat.offsets().download(s).unwrap(), [0i64, 2, 2, 4]);
    assert_eq!(aat.indices().download(s).unwrap(), [0i64, 2, 0, 2]);
    assert_eq!(aat.values().download(s).unwrap(), [5.0, 10.0, 10.0, 50.0]);
    let refused = fx.h.sparse().unwrap().spgemm_reuse(&back, &at64);
    assert!(matches!(&refused, Err(Error::Unsupported { what, .. }) if what.contains("`a`")), "{refused:?}");
}

/// The fixture's lower-triangular `[[1 0 0] [2 3 0] [4 5 6]]` through SpSV and SpSM in each
/// fill mode, diagonal type and transpose.
#[test]
fn fixture_triangle_through_spsv_and_spsm() {
    let mut fx = fx();
    let l = fx.lower();
    let s = fx.s;
    let solve = |fx: &mut crate::common::fixture::Fx, tri: Triangle, rhs: &[f64]| {
        let (x, y) = (fx.upload(rhs), fx.buf::<f64>(3));
        fx.h.sparse().unwrap().spsv(tri, 1.0, &l, &x, &y).unwrap().wait().unwrap();
        let (b, c) = (fx.upload(&[rhs, rhs].concat()), fx.buf::<f64>(6));
        let (bv, cv) = (DenseMatrix::new(&b, 3, 2), DenseMatrix::new(&c, 3, 2));
        fx.h.sparse().unwrap().spsm(tri, 1.0, &l, bv, cv).unwrap().wait().unwrap();
        let (y, c) = (y.download(s).unwrap(), c.download(s).unwrap());
        assert_eq!((&c[..3], &c[3..]), (&y[..], &y[..]), "SpSM's columns are SpSV's solution");
        y
    };
    let lower = Triangle::default();
    // L y = [1, 8, 32]: y = [1, 2, 3].
    assert_eq!(solve(&mut fx, lower, &[1.0, 8.0, 32.0]), [1.0, 2.0, 3.0]);
    // Lᵀ y = [17, 21, 18]: y = [1, 2, 3].
    assert_eq!(solve(&mut fx, Triangle { transpose: Transpose::Yes, ..lower }, &[17.0, 21.0, 18.0]), [1.0, 2.0, 3.0]);
    // Unit diagonal: [[1 0 0] [2 1 0] [4 5 1]] y = [1, 4, 17]: y = [1, 2, 3].
    assert_eq!(solve(&mut fx, Triangle { unit_diagonal: true, ..lower }, &[1.0, 4.0, 17.0]), [1.0, 2.0, 3.0]);
    // Upper: only the diagonal of L is in its upper triangle.
    assert_eq!(solve(&mut fx, Triangle { fill: Fill::Upper, ..lower }, &[1.0, 6.0, 18.0]), [1.0, 2.0, 3.0]);
}

/// The fixture's BSR (with values set) and Blocked-ELL matrices through SpMV and SpMM, and the
/// fixture's sparse vector through axpby, gather and scatter.
#[test]
fn fixture_blocked_matrices_and_sparse_vector() {
    let mut fx = fx();
    let s = fx.s;
    let bsr = fx.bsr();
    // Blocks [[1 2] [3 4]] at (0, 0), [[5 6] [7 8]] at (0, 2), [[9 10] [11 12]] at (1, 1).
    bsr.values().copy_from_slice(s, &(1..=12).map(f64::from).collect::<Vec<_>>()).unwrap();
    let (x, y) = (fx.upload(&[1.0f64; 6]), fx.buf::<f64>(4));
    fx.h.sparse().unwrap().spmv(Transpose::No, 1.0, &bsr, &x, 0.0, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [14.0, 22.0, 19.0, 23.0]);
    let ell = fx.ell();
    // Block row 0: column blocks 0 and 2; block row 1: column block 1 and an empty slot.
    ell.values().copy_from_slice(s, &(1..=16).map(f64::from).collect::<Vec<_>>()).unwrap();
    let (b, c) = (fx.upload(&[1.0f64; 6]), fx.buf::<f64>(4));
    let (bv, cv) = (DenseMatrix::new(&b, 6, 1), DenseMatrix::new(&c, 4, 1));
    fx.h.sparse().unwrap().spmm(Transpose::No, 1.0, &ell, bv, 0.0, cv).unwrap().wait().unwrap();
    assert_eq!(c.download(s).unwrap(), [10.0, 26.0, 19.0, 27.0]);
    let v: SparseVector<f64> = fx.spvec(); // 5 entries, 1.0 at 1 and 2.0 at 3
    let y = fx.upload(&[1.0f64; 5]);
    fx.h.sparse().unwrap().axpby(2.0, &v, 3.0, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [3.0, 5.0, 3.0, 7.0, 3.0]);
    fx.h.sparse().unwrap().scatter(&v, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [3.0, 1.0, 3.0, 2.0, 3.0]);
    let src = fx.upload(&[0.0f64, 10.0, 20.0, 30.0, 40.0]);
    fx.h.sparse().unwrap().gather(&src, &v).unwrap().wait().unwrap();
    assert_eq!(v.values().download(s).unwrap(), [10.0, 30.0]);
}

/// A structure that points outside its matrix fails the op's completion with a typed error
/// naming the array (cuSPARSE would read out of bounds); the process and the stream go on.
#[test]
fn a_malformed_structure_fails_the_op_with_a_typed_error() {
    let mut fx = fx();
    let a = SparseMatrix::csr(2, 2, 2, &fx.upload(&[0i32, 1, 2]), &fx.upload(&[0i32, 7]), &fx.upload(&[1.0f64, 1.0]))
        .unwrap();
    let (x, y) = (fx.upload(&[1.0f64, 1.0]), fx.buf::<f64>(2));
    let r = fx.h.sparse().unwrap().spmv(Transpose::No, 1.0, &a, &x, 0.0, &y).unwrap().wait();
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a.indices", .. })), "{r:?}");
    let r = fx.h.sparse().unwrap().spgemm(1.0, &a, &a).and_then(|c| c.wait());
    assert!(matches!(r, Err(Error::InvalidArgument { arg: "a.indices", .. })), "{r:?}");
    let good = fx.lower();
    let (x, y) = (fx.upload(&[1.0f64; 3]), fx.buf::<f64>(3));
    fx.h.sparse().unwrap().spmv(Transpose::No, 1.0, &good, &x, 0.0, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(fx.s).unwrap(), [1.0, 5.0, 15.0]);
}
