//! `cusolverDn<t>gesvdaStridedBatched`: the approximate SVD of a batch of tall matrices, typed
//! per element type (it has no 64-bit generic form).
#![allow(clippy::too_many_arguments)]

use super::Handle;
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::{c_int as I, c_longlong as L, c_void};

type V = *mut c_void;

/// A batch of strided matrices: the pointer, its leading dimension and its stride.
pub(in crate::libs::solver) type Strided = (V, I, L);

// The wrappers below share one contract.
//
// # Safety (of both wrappers)
// (1) `h` is a live handle bound to the current context, used by this thread only; (2) every
// device pointer is a live buffer of the current context of element type `dt` (real parts for
// `s`), holding `batch` matrices of the shapes the arguments describe (validated by the caller)
// and fenced on the handle's stream; (3) the workspace holds `lwork` elements of `dt`; (4)
// `info` holds `batch` device-writable `int`s and `residuals` `batch` host `f64`s, alive until
// the call's work finished. The query reads no buffer. The casts change only the pointee type,
// to one of the same layout.

macro_rules! by_type {
    ($dt:expr, |$f:ident| $call:expr; $s:ident, $d:ident, $c:ident, $z:ident) => {
        match $dt {
            CudaType::R32F => {
                use sys::$s as $f;
                $call
            }
            CudaType::R64F => {
                use sys::$d as $f;
                $call
            }
            CudaType::C32F => {
                use sys::$c as $f;
                $call
            }
            _ => {
                use sys::$z as $f;
                $call
            }
        }
    };
}

/// `cusolverDn<t>gesvdaStridedBatched_bufferSize`: the workspace in elements.
pub(in crate::libs::solver) unsafe fn size(
    h: Handle,
    dt: CudaType,
    vectors: bool,
    (rank, m, n, batch): (I, I, I, I),
    (a, lda, sa): Strided,
    (s, ss): (V, L),
    (u, ldu, su): Strided,
    (v, ldv, sv): Strided,
) -> Result<I> {
    let mode = super::eig_mode(vectors);
    let mut lwork: I = 0;
    // SAFETY: the contract above.
    let status = unsafe {
        by_type!(dt, |f| f(h, mode, rank, m, n, a as _, lda, sa, s as _, ss, u as _, ldu, su, v as _, ldv, sv, &mut lwork, batch);
            cusolverDnSgesvdaStridedBatched_bufferSize, cusolverDnDgesvdaStridedBatched_bufferSize,
            cusolverDnCgesvdaStridedBatched_bufferSize, cusolverDnZgesvdaStridedBatched_bufferSize)
    };
    status.check("cusolverDn<t>gesvdaStridedBatched_bufferSize")?;
    Ok(lwork)
}

/// `cusolverDn<t>gesvdaStridedBatched`.
pub(in crate::libs::solver) unsafe fn run(
    h: Handle,
    dt: CudaType,
    vectors: bool,
    (rank, m, n, batch): (I, I, I, I),
    (a, lda, sa): Strided,
    (s, ss): (V, L),
    (u, ldu, su): Strided,
    (v, ldv, sv): Strided,
    (work, lwork): (V, I),
    info: *mut I,
    residuals: *mut f64,
) -> Result<()> {
    let mode = super::eig_mode(vectors);
    // SAFETY: the contract above.
    let status = unsafe {
        by_type!(dt, |f| f(h, mode, rank, m, n, a as _, lda, sa, s as _, ss, u as _, ldu, su, v as _, ldv, sv, work as _, lwork, info, residuals, batch);
            cusolverDnSgesvdaStridedBatched, cusolverDnDgesvdaStridedBatched,
            cusolverDnCgesvdaStridedBatched, cusolverDnZgesvdaStridedBatched)
    };
    status.check("cusolverDn<t>gesvdaStridedBatched")
}
