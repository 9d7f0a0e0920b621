//! The handles: the cuSOLVER handle and its params object for the 64-bit API, owned together
//! as [`RawHandle`], and the cuBLAS handle the batched LU needs (cuSOLVER leaves it to cuBLAS).

use super::{Handle, Params};
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cusolver::sys;

// SAFETY: a cuSOLVER handle may be used from any thread, one thread at a time.
unsafe impl RawObject for Handle {
    const DESTROY: &'static str = "cusolverDnDestroy";
    const SYNCHRONIZES: bool = true;
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnDestroy`](https://docs.nvidia.com/cuda/cusolver/#cusolverdndestroy)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnDestroy(self) }
    }
}

// SAFETY: a params object is host data, used by one thread at a time through its handle's owner.
unsafe impl RawObject for Params {
    const DESTROY: &'static str = "cusolverDnDestroyParams";
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnDestroyParams`](https://docs.nvidia.com/cuda/cusolver/#cusolverdndestroyparams)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnDestroyParams(self) }
    }
}

/// A cuBLAS status (a newtype, so that this library's checks do not depend on the `cublas`
/// feature's).
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) struct BlasStatus(cudarc::cublas::sys::cublasStatus_t);

impl Status for BlasStatus {
    const SUCCESS: Self = BlasStatus(cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
}

/// A cuBLAS handle for the batched LU, which cuSOLVER leaves to cuBLAS.
#[derive(Clone, Copy)]
pub(crate) struct BlasHandle(pub(in crate::libs::solver) cudarc::cublas::sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time.
unsafe impl RawObject for BlasHandle {
    const DESTROY: &'static str = "cublasDestroy";
    const SYNCHRONIZES: bool = true;
    type Status = BlasStatus;
    /// NVIDIA: [`cublasDestroy_v2`](https://docs.nvidia.com/cuda/cublas/#cublasdestroy)
    unsafe fn destroy(self) -> BlasStatus {
        // SAFETY: the caller keeps `destroy`'s contract.
        BlasStatus(unsafe { cudarc::cublas::sys::cublasDestroy_v2(self.0) })
    }
}

/// Checks a cuBLAS status.
pub(in crate::libs::solver) fn blas_check(s: cudarc::cublas::sys::cublasStatus_t, call: &'static str) -> Result<()> {
    BlasStatus(s).check(call)
}

/// An owned handle on one stream, its params object for the 64-bit API, and the cuBLAS handle
/// of the batched LU once one was needed.
pub(crate) struct RawHandle {
    handle: Owned<Handle>,
    params: Owned<Params>,
    blas: Option<Owned<BlasHandle>>,
}

impl RawHandle {
    /// `cusolverDnCreate`, `cusolverDnSetStream`, `cusolverDnCreateParams`.
    ///
    /// NVIDIA: [`cusolverDnCreate`](https://docs.nvidia.com/cuda/cusolver/#cusolverdncreate),
    /// [`cusolverDnSetStream`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnsetstream),
    /// [`cusolverDnCreateParams`](https://docs.nvidia.com/cuda/cusolver/#cusolverdncreateparams)
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the handle.
    pub(in crate::libs::solver) unsafe fn create(stream: crate::backend::cuda::CuStream) -> Result<RawHandle> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cusolverDnCreate(&mut h) }.check("cusolverDnCreate")?;
        let handle = Owned::new(h);
        // SAFETY: a live handle; the caller vouches for the stream.
        unsafe { sys::cusolverDnSetStream(h, stream as _) }.check("cusolverDnSetStream")?;
        let mut p: Params = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cusolverDnCreateParams(&mut p) }.check("cusolverDnCreateParams")?;
        Ok(RawHandle { handle, params: Owned::new(p), blas: None })
    }

    /// The cuBLAS handle on `stream`, made on first use (`cublasCreate`, `cublasSetStream`).
    ///
    /// # Safety
    /// As [`RawHandle::create`]: `stream` is this handle's live stream of the current context.
    pub(in crate::libs::solver) unsafe fn blas(
        &mut self,
        stream: crate::backend::cuda::CuStream,
    ) -> Result<BlasHandle> {
        if let Some(b) = &self.blas {
            return Ok(b.get());
        }
        use cudarc::cublas::sys as blas;
        // cudarc panics on a call into a library that does not load: probe first, as every
        // library does before its first call.
        // SAFETY: only tries to dlopen the library by name and drops the handle.
        if !unsafe { blas::is_culib_present() } {
            return Err(crate::error::Error::LibraryUnavailable {
                library: "cuBLAS (libcublas)",
                hint: "install the CUDA toolkit's cuBLAS library (libcublas.so.13): cuSOLVER's batched LU calls it",
            });
        }
        let mut h: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        blas_check(unsafe { blas::cublasCreate_v2(&mut h) }, "cublasCreate")?;
        let owned = Owned::new(BlasHandle(h));
        // SAFETY: a live handle; the caller vouches for the stream.
        blas_check(unsafe { blas::cublasSetStream_v2(h, stream as _) }, "cublasSetStream")?;
        self.blas = Some(owned);
        Ok(BlasHandle(h))
    }

    pub(in crate::libs::solver) fn get(&self) -> (Handle, Params) {
        (self.handle.get(), self.params.get())
    }
}
