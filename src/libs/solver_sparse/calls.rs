//! The cuSOLVER sparse call layer: every `cusolverSp*` call cusched makes, and the cuSPARSE
//! matrix descriptor they take. The only code in the crate that touches `cudarc::cusolver::sys`
//! (and, for that descriptor, `cudarc::cusparse::sys`).

use crate::backend::cuda::CuStream;
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cusolver::sys;
use cudarc::cusparse::sys as sp;
use std::ffi::c_int;

// `cusolverStatus_t`'s `Status` is the dense solver's (same feature, same type).

// With the cuSPARSE library module on, it defines this one.
#[cfg(not(feature = "cusparse"))]
impl Status for sp::cusparseStatus_t {
    const SUCCESS: Self = sp::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS;
}

/// Whether libcusolver and the libcusparse it needs both load.
pub(super) fn is_present() -> bool {
    // SAFETY: only try to dlopen the libraries by name and drop the handles; no preconditions.
    unsafe { sys::is_culib_present() && sp::is_culib_present() }
}

/// A cuSOLVER sparse handle.
#[derive(Clone, Copy)]
pub(crate) struct Handle(pub(super) sys::cusolverSpHandle_t);

// SAFETY: a cuSOLVER handle may be used from any thread, one at a time.
unsafe impl RawObject for Handle {
    const DESTROY: &'static str = "cusolverSpDestroy";
    const SYNCHRONIZES: bool = true;
    type Status = sys::cusolverStatus_t;

    /// NVIDIA: [`cusolverSpDestroy`](https://docs.nvidia.com/cuda/cusolver/#cusolverspdestroy)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverSpDestroy(self.0) }
    }
}

/// A general, zero-based cuSPARSE matrix descriptor (the legacy kind cuSOLVER takes).
#[derive(Clone, Copy)]
pub(crate) struct MatDescr(sp::cusparseMatDescr_t);

// SAFETY: a matrix descriptor is plain host data, used one thread at a time.
unsafe impl RawObject for MatDescr {
    const DESTROY: &'static str = "cusparseDestroyMatDescr";
    type Status = sp::cusparseStatus_t;

    unsafe fn destroy(self) -> sp::cusparseStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sp::cusparseDestroyMatDescr(self.0) }
    }
}

/// The handle and descriptor a [`super::SolverSparse`] owns.
pub(crate) struct Raw {
    // Field order is drop order: the descriptor before the handle.
    pub descr: Owned<MatDescr>,
    pub handle: Owned<Handle>,
}

/// `cusolverSpCreate`, `cusolverSpSetStream` and `cusparseCreateMatDescr` (general, zero-based
/// by default).
///
/// NVIDIA: [`cusolverSpCreate`](https://docs.nvidia.com/cuda/cusolver/#cusolverspcreate),
/// [`cusolverSpSetStream`](https://docs.nvidia.com/cuda/cusolver/#cusolverspsetstream)
///
/// # Safety
/// `stream` is a live stream of the current context that outlives the handle.
pub(super) unsafe fn create(stream: CuStream) -> Result<Raw> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sp::cusparseCreateMatDescr(&mut d) }.check("cusparseCreateMatDescr")?;
    let descr = Owned::new(MatDescr(d));
    let mut h = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusolverSpCreate(&mut h) }.check("cusolverSpCreate")?;
    let handle = Owned::new(Handle(h));
    // SAFETY: a live handle; the caller vouches for the stream.
    unsafe { sys::cusolverSpSetStream(h, stream as _) }.check("cusolverSpSetStream")?;
    Ok(Raw { descr, handle })
}

/// The system `A x = b` of one solve, as raw device pointers; `R` is the tolerance's real type.
#[derive(Debug)]
pub struct System<T, R> {
    pub n: c_int,
    pub nnz: c_int,
    pub values: *const T,
    pub offsets: *const c_int,
    pub indices: *const c_int,
    pub b: *const T,
    pub x: *mut T,
    pub tol: R,
    pub reorder: c_int,
}

/// The two solvers.
#[derive(Clone, Copy, Debug)]
pub enum Method {
    Qr,
    Cholesky,
}

/// The element types cuSOLVER's sparse solvers take.
pub(crate) mod sealed {
    use super::*;

    pub trait SpScalar: Copy {
        /// The tolerance's type: the element's real type.
        type Tol: Copy;
        /// The call name of each solver for this type.
        const QR: &'static str;
        const CHOL: &'static str;

        /// # Safety
        /// As [`super::solve`].
        unsafe fn call(
            m: Method,
            h: sys::cusolverSpHandle_t,
            d: sys::cusparseMatDescr_t,
            s: &System<Self, Self::Tol>,
            singularity: &mut c_int,
        ) -> sys::cusolverStatus_t;
    }

    // `$raw` is the library's element type: `float`, `double`, `cuComplex`, `cuDoubleComplex`,
    // which `f32`, `f64`, `Complex<f32>` and `Complex<f64>` match in layout, so the pointers are
    // cast to it.
    macro_rules! sp_scalar {
        ($t:ty, $tol:ty, $raw:ty, $qr:ident, $chol:ident) => {
            impl SpScalar for $t {
                type Tol = $tol;
                const QR: &'static str = stringify!($qr);
                const CHOL: &'static str = stringify!($chol);

                unsafe fn call(
                    m: Method,
                    h: sys::cusolverSpHandle_t,
                    d: sys::cusparseMatDescr_t,
                    s: &System<Self, $tol>,
                    singularity: &mut c_int,
                ) -> sys::cusolverStatus_t {
                    let (values, b, x) = (s.values as *const $raw, s.b as *const $raw, s.x as *mut $raw);
                    // SAFETY: the caller keeps `solve`'s contract; the element types match
                    // `$raw` in layout.
                    unsafe {
                        match m {
                            Method::Qr => sys::$qr(
                                h,
                                s.n,
                                s.nnz,
                                d,
                                values,
                                s.offsets,
                                s.indices,
                                b,
                                s.tol,
                                s.reorder,
                                x,
                                singularity,
                            ),
                            Method::Cholesky => sys::$chol(
                                h,
                                s.n,
                                s.nnz,
                                d,
                                values,
                                s.offsets,
                                s.indices,
                                b,
                                s.tol,
                                s.reorder,
                                x,
                                singularity,
                            ),
                        }
                    }
                }
            }
        };
    }
    sp_scalar!(f32, f32, f32, cusolverSpScsrlsvqr, cusolverSpScsrlsvchol);
    sp_scalar!(f64, f64, f64, cusolverSpDcsrlsvqr, cusolverSpDcsrlsvchol);
    sp_scalar!(crate::memory::Complex<f32>, f32, sys::cuComplex, cusolverSpCcsrlsvqr, cusolverSpCcsrlsvchol);
    sp_scalar!(crate::memory::Complex<f64>, f64, sys::cuDoubleComplex, cusolverSpZcsrlsvqr, cusolverSpZcsrlsvchol);
}

/// `cusolverSp?csrlsvqr` or `cusolverSp?csrlsvchol`; returns the singularity index (`-1`: none).
/// Blocks until the solve is done (the library reports singularity on the host).
///
/// # Safety
/// (1) `raw` is live, its handle bound to the stream the op was fenced on, context current;
/// (2) the pointers in `s` are live device buffers of that context holding an `n x n` CSR matrix
/// with `nnz` nonzeros, and `n` entries of `b` and `x`; `x` is distinct from the others.
pub(super) unsafe fn solve<T: sealed::SpScalar>(raw: &Raw, m: Method, s: &System<T, T::Tol>) -> Result<c_int> {
    let mut singularity: c_int = -1;
    let d = raw.descr.get().0 as sys::cusparseMatDescr_t;
    let call = match m {
        Method::Qr => T::QR,
        Method::Cholesky => T::CHOL,
    };
    // SAFETY: the caller vouches for (1) and (2); the descriptor is live.
    unsafe { T::call(m, raw.handle.get().0, d, s, &mut singularity) }.check(call)?;
    Ok(singularity)
}
