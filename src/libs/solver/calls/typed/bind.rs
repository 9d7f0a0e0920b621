//! The bindings of [`Typed`](super::Typed) for `f32`, `f64`, `Complex<f32>` and
//! `Complex<f64>`: one macro, written once, naming each type's cuSOLVER and cuBLAS symbols.
#![allow(clippy::too_many_arguments, unreachable_pub)]

use super::{Itype, Jacobi, Mode, Op, Side, Typed, Uplo, H, I, S, V};
use cudarc::cublas::sys as blas;
use cudarc::cusolver::sys;

macro_rules! typed {
    ($t:ty: $potri_size:ident, $potri:ident, $syevj_size:ident, $syevj:ident, $sygvd_size:ident, $sygvd:ident,
     $orgqr_size:ident, $orgqr:ident, $ormqr_size:ident, $ormqr:ident, $gesvdj_size:ident, $gesvdj:ident,
     $potrf_batched:ident, $potrs_batched:ident, $gesvdj_batched_size:ident, $gesvdj_batched:ident,
     $syevj_batched_size:ident, $syevj_batched:ident, $getrf_batched:ident, $getrs_batched:ident) => {
        // SAFETY (of every call below): the trait's contract; the casts change only the
        // pointee type, to one of the same layout.
        impl Typed for $t {
            unsafe fn potri_size(h: H, u: Uplo, n: I, a: V, lda: I, lwork: *mut I) -> S {
                unsafe { sys::$potri_size(h, u, n, a as _, lda, lwork) }
            }
            unsafe fn potri(h: H, u: Uplo, n: I, a: V, lda: I, work: V, lwork: I, info: *mut I) -> S {
                unsafe { sys::$potri(h, u, n, a as _, lda, work as _, lwork, info) }
            }
            unsafe fn syevj_size(
                h: H,
                j: Mode,
                u: Uplo,
                n: I,
                a: V,
                lda: I,
                w: V,
                lwork: *mut I,
                p: sys::syevjInfo_t,
            ) -> S {
                unsafe { sys::$syevj_size(h, j, u, n, a as _, lda, w as _, lwork, p) }
            }
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
            ) -> S {
                unsafe { sys::$syevj(h, j, u, n, a as _, lda, w as _, work as _, lwork, info, p) }
            }
            unsafe fn sygvd_size(
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
                lwork: *mut I,
            ) -> S {
                unsafe { sys::$sygvd_size(h, t, j, u, n, a as _, lda, b as _, ldb, w as _, lwork) }
            }
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
            ) -> S {
                unsafe { sys::$sygvd(h, t, j, u, n, a as _, lda, b as _, ldb, w as _, work as _, lwork, info) }
            }
            unsafe fn orgqr_size(h: H, m: I, n: I, k: I, a: V, lda: I, tau: V, lwork: *mut I) -> S {
                unsafe { sys::$orgqr_size(h, m, n, k, a as _, lda, tau as _, lwork) }
            }
            unsafe fn orgqr(h: H, m: I, n: I, k: I, a: V, lda: I, tau: V, work: V, lwork: I, info: *mut I) -> S {
                unsafe { sys::$orgqr(h, m, n, k, a as _, lda, tau as _, work as _, lwork, info) }
            }
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
            ) -> S {
                unsafe { sys::$ormqr_size(h, side, t, m, n, k, a as _, lda, tau as _, c as _, ldc, lwork) }
            }
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
            ) -> S {
                unsafe { sys::$ormqr(h, side, t, m, n, k, a as _, lda, tau as _, c as _, ldc, work as _, lwork, info) }
            }
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
            ) -> S {
                unsafe { sys::$gesvdj_size(h, j, econ, m, n, a as _, lda, s as _, u as _, ldu, v as _, ldv, lwork, p) }
            }
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
            ) -> S {
                unsafe {
                    sys::$gesvdj(
                        h, j, econ, m, n, a as _, lda, s as _, u as _, ldu, v as _, ldv, work as _, lwork, info, p,
                    )
                }
            }
            unsafe fn potrf_batched(h: H, u: Uplo, n: I, a: *mut V, lda: I, info: *mut I, batch: I) -> S {
                unsafe { sys::$potrf_batched(h, u, n, a as _, lda, info, batch) }
            }
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
            ) -> S {
                unsafe { sys::$potrs_batched(h, u, n, nrhs, a as _, lda, b as _, ldb, info, batch) }
            }
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
            ) -> S {
                unsafe {
                    sys::$gesvdj_batched_size(
                        h, j, m, n, a as _, lda, s as _, u as _, ldu, v as _, ldv, lwork, p, batch,
                    )
                }
            }
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
            ) -> S {
                unsafe {
                    sys::$gesvdj_batched(
                        h, j, m, n, a as _, lda, s as _, u as _, ldu, v as _, ldv, work as _, lwork, info, p, batch,
                    )
                }
            }
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
            ) -> S {
                unsafe { sys::$syevj_batched_size(h, j, u, n, a as _, lda, w as _, lwork, p, batch) }
            }
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
            ) -> S {
                unsafe { sys::$syevj_batched(h, j, u, n, a as _, lda, w as _, work as _, lwork, info, p, batch) }
            }
            unsafe fn getrf_batched(
                h: blas::cublasHandle_t,
                n: I,
                a: *mut V,
                lda: I,
                piv: *mut I,
                info: *mut I,
                batch: I,
            ) -> blas::cublasStatus_t {
                unsafe { blas::$getrf_batched(h, n, a as _, lda, piv, info, batch) }
            }
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
            ) -> blas::cublasStatus_t {
                unsafe { blas::$getrs_batched(h, t, n, nrhs, a as _, lda, piv, b as _, ldb, info, batch) }
            }
        }
    };
}

typed!(f32: cusolverDnSpotri_bufferSize, cusolverDnSpotri, cusolverDnSsyevj_bufferSize, cusolverDnSsyevj,
    cusolverDnSsygvd_bufferSize, cusolverDnSsygvd, cusolverDnSorgqr_bufferSize, cusolverDnSorgqr,
    cusolverDnSormqr_bufferSize, cusolverDnSormqr, cusolverDnSgesvdj_bufferSize, cusolverDnSgesvdj,
    cusolverDnSpotrfBatched, cusolverDnSpotrsBatched, cusolverDnSgesvdjBatched_bufferSize, cusolverDnSgesvdjBatched,
    cusolverDnSsyevjBatched_bufferSize, cusolverDnSsyevjBatched, cublasSgetrfBatched, cublasSgetrsBatched);
typed!(f64: cusolverDnDpotri_bufferSize, cusolverDnDpotri, cusolverDnDsyevj_bufferSize, cusolverDnDsyevj,
    cusolverDnDsygvd_bufferSize, cusolverDnDsygvd, cusolverDnDorgqr_bufferSize, cusolverDnDorgqr,
    cusolverDnDormqr_bufferSize, cusolverDnDormqr, cusolverDnDgesvdj_bufferSize, cusolverDnDgesvdj,
    cusolverDnDpotrfBatched, cusolverDnDpotrsBatched, cusolverDnDgesvdjBatched_bufferSize, cusolverDnDgesvdjBatched,
    cusolverDnDsyevjBatched_bufferSize, cusolverDnDsyevjBatched, cublasDgetrfBatched, cublasDgetrsBatched);
typed!(crate::memory::Complex<f32>: cusolverDnCpotri_bufferSize, cusolverDnCpotri, cusolverDnCheevj_bufferSize,
    cusolverDnCheevj, cusolverDnChegvd_bufferSize, cusolverDnChegvd, cusolverDnCungqr_bufferSize, cusolverDnCungqr,
    cusolverDnCunmqr_bufferSize, cusolverDnCunmqr, cusolverDnCgesvdj_bufferSize, cusolverDnCgesvdj,
    cusolverDnCpotrfBatched, cusolverDnCpotrsBatched, cusolverDnCgesvdjBatched_bufferSize, cusolverDnCgesvdjBatched,
    cusolverDnCheevjBatched_bufferSize, cusolverDnCheevjBatched, cublasCgetrfBatched, cublasCgetrsBatched);
typed!(crate::memory::Complex<f64>: cusolverDnZpotri_bufferSize, cusolverDnZpotri, cusolverDnZheevj_bufferSize,
    cusolverDnZheevj, cusolverDnZhegvd_bufferSize, cusolverDnZhegvd, cusolverDnZungqr_bufferSize, cusolverDnZungqr,
    cusolverDnZunmqr_bufferSize, cusolverDnZunmqr, cusolverDnZgesvdj_bufferSize, cusolverDnZgesvdj,
    cusolverDnZpotrfBatched, cusolverDnZpotrsBatched, cusolverDnZgesvdjBatched_bufferSize, cusolverDnZgesvdjBatched,
    cusolverDnZheevjBatched_bufferSize, cusolverDnZheevjBatched, cublasZgetrfBatched, cublasZgetrsBatched);
