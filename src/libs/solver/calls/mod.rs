//! The cuSOLVER call layer: every cuSOLVER call cusched makes, each a thin wrapper returning
//! `Result` with the call named. The only code in the crate that touches
//! `cudarc::cusolver::sys` (and, for batched LU, `cudarc::cublas::sys`); the typed entry points
//! of all four element types are in [`typed`].
//!
//! Every wrapper that takes a handle needs the handle's context current on the calling thread
//! (the op path binds it) and the handle used by one thread at a time (`Solver` methods take
//! `&mut self`). The 64-bit generic API (`cusolverDnX...`) takes element types as
//! `cudaDataType`, so one wrapper serves every element type; the typed entry points go through
//! [`Typed`], which binds each of them for all four types.
//!
//! Files: this one holds the enum conversions; `handle` the owned handles, `jacobi` the
//! Jacobi info objects, `dense` the 64-bit API wrappers, `typed` the typed entry points, `irs`
//! the iterative-refinement solvers, `gesvda` the batched approximate SVD.

use super::{Fill, Side, Trans};
use crate::libs::Status;
use cudarc::cusolver::sys;

mod dense;
pub(super) mod gesvda;
mod handle;
pub(super) mod irs;
pub(super) mod irs_expert;
mod jacobi;
mod typed;
pub(super) use dense::{
    geev, geqrf, gesvd, gesvdr, getrf, getrs, potrf, potrs, syevd, syevdx, sytrf, sytrs, trtri, xsytrf, Randomized,
    Range, SvdJob, Work,
};
pub(super) use handle::{blas_check, BlasHandle, RawHandle};
pub(super) use jacobi::{OwnedJacobi, OwnedSyevj};
pub(super) use typed::{blas_trans, EigType, Typed};

pub(super) type Handle = sys::cusolverDnHandle_t;
pub(super) type Params = sys::cusolverDnParams_t;

impl Status for sys::cusolverStatus_t {
    const SUCCESS: Self = sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS;
}

/// Whether libcusolver loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

crate::libs::dtype::cuda_data_type!(pub(super) fn data_type -> sys::cudaDataType);

pub(super) fn fill(f: Fill) -> sys::cublasFillMode_t {
    match f {
        Fill::Lower => sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
        Fill::Upper => sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
    }
}

pub(super) fn trans(t: Trans) -> sys::cublasOperation_t {
    match t {
        Trans::No => sys::cublasOperation_t::CUBLAS_OP_N,
        Trans::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
        Trans::Conj => sys::cublasOperation_t::CUBLAS_OP_C,
    }
}

pub(super) fn side(s: Side) -> sys::cublasSideMode_t {
    match s {
        Side::Left => sys::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    }
}

pub(super) fn eig_mode(vectors: bool) -> sys::cusolverEigMode_t {
    if vectors {
        sys::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR
    } else {
        sys::cusolverEigMode_t::CUSOLVER_EIG_MODE_NOVECTOR
    }
}

/// `cusolverEigRange_t` for `kind`: 0 all, 1 a value interval, 2 an index range.
pub(super) fn eig_range(kind: i64) -> sys::cusolverEigRange_t {
    match kind {
        1 => sys::cusolverEigRange_t::CUSOLVER_EIG_RANGE_V,
        2 => sys::cusolverEigRange_t::CUSOLVER_EIG_RANGE_I,
        _ => sys::cusolverEigRange_t::CUSOLVER_EIG_RANGE_ALL,
    }
}
