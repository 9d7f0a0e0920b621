//! The typed entry points (`cusolverDn<t>...`, and cuBLAS's batched LU) that exist for all
//! four element types and have no 64-bit generic form in the CUDA version cusched builds
//! against: `potri`, `syevj`/`heevj`, `sygvd`/`hegvd`, `orgqr`/`ungqr`, `ormqr`/`unmqr`,
//! `gesvdj`, `potrfBatched`, `potrsBatched`, `gesvdjBatched`, `syevjBatched`/`heevjBatched`,
//! cuBLAS `getrfBatched`/`getrsBatched`. Where LAPACK names the complex form differently (the
//! unitary `ungqr`/`unmqr`, the Hermitian `heevj`/`hegvd`), the complex types bind that form.
//!
//! Every wrapper takes element pointers untyped (`*mut c_void`) and casts them to the call's
//! own type: `f32`, `f64`, `Complex<f32>` and `Complex<f64>` have the layout of `float`,
//! `double`, `cuComplex` and `cuDoubleComplex`.
#![allow(clippy::too_many_arguments, unreachable_pub)]

use cudarc::cublas::sys as blas;
use cudarc::cusolver::sys::{self, cusolverDnHandle_t as H, cusolverStatus_t as S};
use std::ffi::{c_int as I, c_void};

type V = *mut c_void;
type Uplo = sys::cublasFillMode_t;
type Mode = sys::cusolverEigMode_t;
type Itype = sys::cusolverEigType_t;
type Side = sys::cublasSideMode_t;
type Op = sys::cublasOperation_t;
type Jacobi = sys::gesvdjInfo_t;

/// The typed entry points of one element type.
///
/// # Safety (of every function)
/// `h` is a live handle of the current context used by this thread only; every pointer is
/// device memory of the current context holding the shape the arguments describe, of this
/// element type (real parts for `w` and `s`); workspaces hold the sizes their queries returned.
pub trait Typed: Sized + 'static {
    unsafe fn potri_size(h: H, u: Uplo, n: I, a: V, lda: I, lwork: *mut I) -> S;
    unsafe fn potri(h: H, u: Uplo, n: I, a: V, lda: I, work: V, lwork: I, info: *mut I) -> S;
    unsafe fn syevj_size(h: H, j: Mode, u: Uplo, n: I, a: V, lda: I, w: V, lwork: *mut I, p: sys::syevjInfo_t) -> S;
    unsafe fn syevj(
        h: H,
        j: Mode,
        u: Uplo,
        n: I,
        a: V,
        lda: I,
        w: V,
        work: V,
        lwork: I,
        info: *mut I,
        p: sys::syevjInfo_t,
    ) -> S;
    unsafe fn sygvd_size(h: H, t: Itype, j: Mode, u: Uplo, n: I, a: V, lda: I, b: V, ldb: I, w: V, lwork: *mut I) -> S;
    unsafe fn sygvd(
        h: H,
        t: Itype,
        j: Mode,
        u: Uplo,
        n: I,
        a: V,
        lda: I,
        b: V,
        ldb: I,
        w: V,
        work: V,
        lwork: I,
        info: *mut I,
    ) -> S;
    unsafe fn orgqr_size(h: H, m: I, n: I, k: I, a: V, lda: I, tau: V, lwork: *mut I) -> S;
    unsafe fn orgqr(h: H, m: I, n: I, k: I, a: V, lda: I, tau: V, work: V, lwork: I, info: *mut I) -> S;
    unsafe fn ormqr_size(
        h: H,
        side: Side,
        t: Op,
        m: I,
        n: I,
        k: I,
        a: V,
        lda: I,
        tau: V,
        c: V,
        ldc: I,
        lwork: *mut I,
    ) -> S;
    unsafe fn ormqr(
        h: H,
        side: Side,
        t: Op,
        m: I,
        n: I,
        k: I,
        a: V,
        lda: I,
        tau: V,
        c: V,
        ldc: I,
        work: V,
        lwork: I,
        info: *mut I,
    ) -> S;
    unsafe fn gesvdj_size(
        h: H,
        j: Mode,
        econ: I,
        m: I,
        n: I,
        a: V,
        lda: I,
        s: V,
        u: V,
        ldu: I,
        v: V,
        ldv: I,
        lwork: *mut I,
        p: Jacobi,
    ) -> S;
    unsafe fn gesvdj(
        h: H,
        j: Mode,
        econ: I,
        m: I,
        n: I,
        a: V,
        lda: I,
        s: V,
        u: V,
        ldu: I,
        v: V,
        ldv: I,
        work: V,
        lwork: I,
        info: *mut I,
        p: Jacobi,
    ) -> S;
    unsafe fn potrf_batched(h: H, u: Uplo, n: I, a: *mut V, lda: I, info: *mut I, batch: I) -> S;
    unsafe fn potrs_batched(
        h: H,
        u: Uplo,
        n: I,
        nrhs: I,
        a: *mut V,
        lda: I,
        b: *mut V,
        ldb: I,
        info: *mut I,
        batch: I,
    ) -> S;
    unsafe fn gesvdj_batched_size(
        h: H,
        j: Mode,
        m: I,
        n: I,
        a: V,
        lda: I,
        s: V,
        u: V,
        ldu: I,
        v: V,
        ldv: I,
        lwork: *mut I,
        p: sys::gesvdjInfo_t,
        batch: I,
    ) -> S;
    unsafe fn gesvdj_batched(
        h: H,
        j: Mode,
        m: I,
        n: I,
        a: V,
        lda: I,
        s: V,
        u: V,
        ldu: I,
        v: V,
        ldv: I,
        work: V,
        lwork: I,
        info: *mut I,
        p: sys::gesvdjInfo_t,
        batch: I,
    ) -> S;
    unsafe fn syevj_batched_size(
        h: H,
        j: Mode,
        u: Uplo,
        n: I,
        a: V,
        lda: I,
        w: V,
        lwork: *mut I,
        p: sys::syevjInfo_t,
        batch: I,
    ) -> S;
    unsafe fn syevj_batched(
        h: H,
        j: Mode,
        u: Uplo,
        n: I,
        a: V,
        lda: I,
        w: V,
        work: V,
        lwork: I,
        info: *mut I,
        p: sys::syevjInfo_t,
        batch: I,
    ) -> S;
    unsafe fn getrf_batched(
        h: blas::cublasHandle_t,
        n: I,
        a: *mut V,
        lda: I,
        piv: *mut I,
        info: *mut I,
        batch: I,
    ) -> blas::cublasStatus_t;
    unsafe fn getrs_batched(
        h: blas::cublasHandle_t,
        t: blas::cublasOperation_t,
        n: I,
        nrhs: I,
        a: *mut V,
        lda: I,
        piv: *const I,
        b: *mut V,
        ldb: I,
        info: *mut I,
        batch: I,
    ) -> blas::cublasStatus_t;
}

mod bind;

pub(crate) use sys::cusolverEigType_t as EigType;

/// cuBLAS's operation for `t` (its own binding of the enum).
pub(in crate::libs::solver) fn blas_trans(t: super::super::Trans) -> blas::cublasOperation_t {
    match t {
        super::super::Trans::No => blas::cublasOperation_t::CUBLAS_OP_N,
        super::super::Trans::Yes => blas::cublasOperation_t::CUBLAS_OP_T,
        super::super::Trans::Conj => blas::cublasOperation_t::CUBLAS_OP_C,
    }
}
