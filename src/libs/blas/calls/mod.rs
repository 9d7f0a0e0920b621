//! The cuBLAS call layer: every cuBLAS call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cublas::sys`.
//!
//! Every wrapper that takes a handle needs the handle's context current on the calling thread
//! (the op path binds it) and the handle used by one thread at a time (`Blas` methods take
//! `&mut self`).

mod gemm;
mod level;

pub(super) use gemm::{
    ex_compute, ex_type, gemm_batched_ex, gemm_ex, gemm_ex_mixed, gemm_grouped_batched_ex, gemm_strided_batched_ex,
    GemmShape, GroupParams,
};
pub(super) use level::{
    axpy, copy, dgmm, dot, geam, gemv, ger, her2k, herk, index_of, reduce, rot, scal, swap, symm, syr2k, syrk, trmm,
    trsm, Mat, Norm, Strided,
};

use super::{Fill, MathMode, Transpose};
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cublas::sys::{self, cublasHandle_t as H};

/// A raw cuBLAS handle, as the wrappers take it.
pub(super) type Handle = H;

impl Status for sys::cublasStatus_t {
    const SUCCESS: Self = sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS;
}

/// Whether libcublas loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

// SAFETY: a cuBLAS handle may be used from any thread as long as one thread uses it at a time.
unsafe impl RawObject for H {
    const DESTROY: &'static str = "cublasDestroy";
    const SYNCHRONIZES: bool = true;
    type Status = sys::cublasStatus_t;

    /// NVIDIA: [`cublasDestroy_v2`](https://docs.nvidia.com/cuda/cublas/#cublasdestroy)
    unsafe fn destroy(self) -> sys::cublasStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cublasDestroy_v2(self) }
    }
}

/// An owned cuBLAS handle, destroyed on drop.
pub(crate) struct RawHandle(Owned<H>);

impl RawHandle {
    /// `cublasCreate` in the current context, then `cublasSetStream`.
    ///
    /// NVIDIA: [`cublasCreate_v2`](https://docs.nvidia.com/cuda/cublas/#cublascreate),
    /// [`cublasSetStream_v2`](https://docs.nvidia.com/cuda/cublas/#cublassetstream)
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the handle.
    pub(super) unsafe fn create(stream: crate::backend::cuda::CuStream) -> Result<RawHandle> {
        let mut h: H = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer.
        unsafe { sys::cublasCreate_v2(&mut h) }.check("cublasCreate")?;
        let h = RawHandle(Owned::new(h));
        // SAFETY: a live handle; the caller vouches for the stream.
        unsafe { sys::cublasSetStream_v2(h.get(), stream as _) }.check("cublasSetStream")?;
        Ok(h)
    }

    pub(super) fn get(&self) -> H {
        self.0.get()
    }

    /// `cublasSetWorkspace`: the handle's scratch from now on, in place of the memory cuBLAS
    /// would take from the stream's pool itself (which a graph capture turns into allocation
    /// nodes).
    ///
    /// NVIDIA: [`cublasSetWorkspace_v2`](https://docs.nvidia.com/cuda/cublas/#cublassetworkspace)
    ///
    /// # Safety
    /// `ptr` is `bytes` bytes of device memory of the handle's context, 256-byte aligned, that
    /// nothing but this handle's work touches and that outlives every op enqueued through it.
    pub(super) unsafe fn set_workspace(&self, ptr: u64, bytes: usize) -> Result<()> {
        // SAFETY: a live handle; the caller vouches for the memory.
        unsafe { sys::cublasSetWorkspace_v2(self.get(), ptr as *mut std::ffi::c_void, bytes) }
            .check("cublasSetWorkspace")
    }

    /// `cublasSetMathMode`: only changes a setting of the live handle.
    ///
    /// NVIDIA: [`cublasSetMathMode`](https://docs.nvidia.com/cuda/cublas/#cublassetmathmode)
    pub(super) fn set_math_mode(&self, mode: MathMode) -> Result<()> {
        let raw = match mode {
            MathMode::Default => sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            MathMode::Tf32Allowed => sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            MathMode::Pedantic => sys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
        };
        // SAFETY: a live handle, used by this thread only (`&self` of its one owner).
        unsafe { sys::cublasSetMathMode(self.get(), raw) }.check("cublasSetMathMode")
    }
}

/// `cublasSetPointerMode`: `device` for results written to device memory, else host.
///
/// NVIDIA: [`cublasSetPointerMode_v2`](https://docs.nvidia.com/cuda/cublas/#cublassetpointermode)
///
/// # Safety
/// `h` is a live handle.
pub(super) unsafe fn set_pointer_mode(h: H, device: bool) -> Result<()> {
    use sys::cublasPointerMode_t as M;
    let mode = if device { M::CUBLAS_POINTER_MODE_DEVICE } else { M::CUBLAS_POINTER_MODE_HOST };
    // SAFETY: the caller vouches for the handle.
    unsafe { sys::cublasSetPointerMode_v2(h, mode) }.check("cublasSetPointerMode")
}

pub(super) fn op(t: Transpose) -> sys::cublasOperation_t {
    match t {
        Transpose::No => sys::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
        Transpose::Conj => sys::cublasOperation_t::CUBLAS_OP_C,
    }
}

pub(super) fn fill(f: Fill) -> sys::cublasFillMode_t {
    match f {
        Fill::Lower => sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
        Fill::Upper => sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
    }
}

pub(crate) mod sealed {
    #![allow(unreachable_pub, missing_debug_implementations)]
    use cudarc::cublas::sys::{self, cublasHandle_t as H, cublasStatus_t as S};
    use std::ffi::c_int as I;

    /// How cuBLAS names an element type in its `Ex` entry points.
    pub trait GemmType {
        const DATA: sys::cudaDataType_t;
        const COMPUTE: sys::cublasComputeType_t;
    }

    type Op = sys::cublasOperation_t;

    /// The typed cuBLAS entry points of one element type: C signatures, spelled out, over its
    /// `sys` type `E` (`cuComplex` for `Complex<f32>`) and its real type `R`.
    #[allow(clippy::type_complexity)]
    pub struct Fns<E: 'static, R: 'static> {
        pub axpy: unsafe fn(H, I, *const E, *const E, I, *mut E, I) -> S,
        pub scal: unsafe fn(H, I, *const E, *mut E, I) -> S,
        pub dotu: unsafe fn(H, I, *const E, I, *const E, I, *mut E) -> S,
        pub dotc: unsafe fn(H, I, *const E, I, *const E, I, *mut E) -> S,
        pub nrm2: unsafe fn(H, I, *const E, I, *mut R) -> S,
        pub asum: unsafe fn(H, I, *const E, I, *mut R) -> S,
        pub iamax: unsafe fn(H, I, *const E, I, *mut I) -> S,
        pub iamin: unsafe fn(H, I, *const E, I, *mut I) -> S,
        pub copy: unsafe fn(H, I, *const E, I, *mut E, I) -> S,
        pub swap: unsafe fn(H, I, *mut E, I, *mut E, I) -> S,
        pub rot: unsafe fn(H, I, *mut E, I, *mut E, I, *const R, *const R) -> S,
        pub gemv: unsafe fn(H, Op, I, I, *const E, *const E, I, *const E, I, *const E, *mut E, I) -> S,
        pub geru: unsafe fn(H, I, I, *const E, *const E, I, *const E, I, *mut E, I) -> S,
        pub gerc: unsafe fn(H, I, I, *const E, *const E, I, *const E, I, *mut E, I) -> S,
        pub geam: unsafe fn(H, Op, Op, I, I, *const E, *const E, I, *const E, *const E, I, *mut E, I) -> S,
        pub syrk: unsafe fn(H, sys::cublasFillMode_t, Op, I, I, *const E, *const E, I, *const E, *mut E, I) -> S,
        pub trsm: unsafe fn(
            H,
            sys::cublasSideMode_t,
            sys::cublasFillMode_t,
            Op,
            sys::cublasDiagType_t,
            I,
            I,
            *const E,
            *const E,
            I,
            *mut E,
            I,
        ) -> S,
        pub symm: unsafe fn(H, Side, Fill, I, I, *const E, *const E, I, *const E, I, *const E, *mut E, I) -> S,
        pub hemm: unsafe fn(H, Side, Fill, I, I, *const E, *const E, I, *const E, I, *const E, *mut E, I) -> S,
        pub trmm: unsafe fn(H, Side, Fill, Op, Diag, I, I, *const E, *const E, I, *const E, I, *mut E, I) -> S,
        pub syr2k: unsafe fn(H, Fill, Op, I, I, *const E, *const E, I, *const E, I, *const E, *mut E, I) -> S,
        pub her2k: unsafe fn(H, Fill, Op, I, I, *const E, *const E, I, *const E, I, *const R, *mut E, I) -> S,
        pub herk: unsafe fn(H, Fill, Op, I, I, *const R, *const E, I, *const R, *mut E, I) -> S,
        pub dgmm: unsafe fn(H, Side, I, I, *const E, I, *const E, I, *mut E, I) -> S,
    }
    type Side = sys::cublasSideMode_t;
    type Fill = sys::cublasFillMode_t;
    type Diag = sys::cublasDiagType_t;

    /// Types with the full level 1 to 3 surface, and their `sys` forms.
    pub trait ScalarType: Copy + Sized + 'static {
        /// The `sys` element type: the same layout as `Self`, perhaps more aligned.
        type Sys: Copy + 'static;
        /// The `sys` real type of norms and rotations.
        type RealSys: Copy + 'static;
        fn fns() -> &'static Fns<Self::Sys, Self::RealSys>;
        /// The value as its `sys` type (for host scalars, which cuBLAS may read aligned).
        fn sys(self) -> Self::Sys;
        /// A real scalar (exactly representable in the real type) as the `sys` real type.
        fn real_sys(v: f64) -> Self::RealSys;
    }
}
