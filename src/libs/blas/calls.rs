//! The cuBLAS call layer: every cuBLAS call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cublas::sys`.
//!
//! Every wrapper that takes a handle needs the handle's context current on the calling thread
//! (the op path binds it) and the handle used by one thread at a time (`Blas` methods take
//! `&mut self`).

use super::{Diag, Fill, MathMode, Side, Transpose};
use crate::error::Result;
use crate::libs::dtype::{required, BlasCompute, CudaType, DataTypes};
use crate::libs::Status;
use cudarc::cublas::sys::{self, cublasHandle_t as H};
use std::ffi::{c_int, c_void};

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

/// An owned cuBLAS handle, destroyed on drop.
pub(crate) struct RawHandle(H);

// SAFETY: a cuBLAS handle may be used from any thread as long as one thread uses it at a time;
// the owner (`Blas`) takes `&mut self` for every call that uses it.
unsafe impl Send for RawHandle {}

impl Drop for RawHandle {
    fn drop(&mut self) {
        // SAFETY: (1) the handle came from `cublasCreate` and is destroyed once, here; (2) on the
        // reaper, with its context bound, after the work enqueued with it has finished.
        if let Err(e) = unsafe { sys::cublasDestroy_v2(self.0) }.check("cublasDestroy") {
            log::error!("cusched: {e}");
        }
    }
}

impl RawHandle {
    /// `cublasCreate` in the current context, then `cublasSetStream`.
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the handle.
    pub(super) unsafe fn create(stream: cudarc::driver::sys::CUstream) -> Result<RawHandle> {
        let mut h: H = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer.
        unsafe { sys::cublasCreate_v2(&mut h) }.check("cublasCreate")?;
        let h = RawHandle(h);
        // SAFETY: a live handle; the caller vouches for the stream.
        unsafe { sys::cublasSetStream_v2(h.0, stream as _) }.check("cublasSetStream")?;
        Ok(h)
    }

    pub(super) fn get(&self) -> H {
        self.0
    }

    /// `cublasSetMathMode`: only changes a setting of the live handle.
    pub(super) fn set_math_mode(&self, mode: MathMode) -> Result<()> {
        let raw = match mode {
            MathMode::Default => sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            MathMode::Tf32Allowed => sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            MathMode::Pedantic => sys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
        };
        // SAFETY: a live handle, used by this thread only (`&self` of its one owner).
        unsafe { sys::cublasSetMathMode(self.0, raw) }.check("cublasSetMathMode")
    }
}

/// `cublasSetPointerMode`: `device` for results written to device memory, else host.
///
/// # Safety
/// `h` is a live handle.
pub(super) unsafe fn set_pointer_mode(h: H, device: bool) -> Result<()> {
    use sys::cublasPointerMode_t as M;
    let mode = if device { M::CUBLAS_POINTER_MODE_DEVICE } else { M::CUBLAS_POINTER_MODE_HOST };
    // SAFETY: the caller vouches for the handle.
    unsafe { sys::cublasSetPointerMode_v2(h, mode) }.check("cublasSetPointerMode")
}

fn op(t: Transpose) -> sys::cublasOperation_t {
    match t {
        Transpose::No => sys::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
    }
}

fn fill(f: Fill) -> sys::cublasFillMode_t {
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

    /// The typed cuBLAS entry points of one real type: C signatures, spelled out.
    #[allow(clippy::type_complexity)]
    pub struct RealFns<T: 'static> {
        pub axpy: unsafe fn(H, I, *const T, *const T, I, *mut T, I) -> S,
        pub scal: unsafe fn(H, I, *const T, *mut T, I) -> S,
        pub dot: unsafe fn(H, I, *const T, I, *const T, I, *mut T) -> S,
        pub nrm2: unsafe fn(H, I, *const T, I, *mut T) -> S,
        pub asum: unsafe fn(H, I, *const T, I, *mut T) -> S,
        pub iamax: unsafe fn(H, I, *const T, I, *mut I) -> S,
        pub iamin: unsafe fn(H, I, *const T, I, *mut I) -> S,
        pub copy: unsafe fn(H, I, *const T, I, *mut T, I) -> S,
        pub swap: unsafe fn(H, I, *mut T, I, *mut T, I) -> S,
        pub rot: unsafe fn(H, I, *mut T, I, *mut T, I, *const T, *const T) -> S,
        pub gemv: unsafe fn(H, Op, I, I, *const T, *const T, I, *const T, I, *const T, *mut T, I) -> S,
        pub ger: unsafe fn(H, I, I, *const T, *const T, I, *const T, I, *mut T, I) -> S,
        pub geam: unsafe fn(H, Op, Op, I, I, *const T, *const T, I, *const T, *const T, I, *mut T, I) -> S,
        pub syrk: unsafe fn(H, sys::cublasFillMode_t, Op, I, I, *const T, *const T, I, *const T, *mut T, I) -> S,
        pub trsm: unsafe fn(
            H,
            sys::cublasSideMode_t,
            sys::cublasFillMode_t,
            Op,
            sys::cublasDiagType_t,
            I,
            I,
            *const T,
            *const T,
            I,
            *mut T,
            I,
        ) -> S,
    }

    /// Real types with the full level 1 to 3 surface.
    pub trait RealType: Sized + 'static {
        fn fns() -> &'static RealFns<Self>;
    }
}
use sealed::{GemmType, RealType};

/// The data-type table's CUDA column as cuBLAS's `sys` enum.
const fn data_type(t: CudaType) -> sys::cudaDataType_t {
    use sys::cudaDataType_t as C;
    match t {
        CudaType::R16F => C::CUDA_R_16F,
        CudaType::R16BF => C::CUDA_R_16BF,
        CudaType::R32F => C::CUDA_R_32F,
        CudaType::R64F => C::CUDA_R_64F,
        CudaType::C32F => C::CUDA_C_32F,
        CudaType::C64F => C::CUDA_C_64F,
        CudaType::R8I => C::CUDA_R_8I,
        CudaType::R8U => C::CUDA_R_8U,
        CudaType::R16I => C::CUDA_R_16I,
        CudaType::R16U => C::CUDA_R_16U,
        CudaType::R32I => C::CUDA_R_32I,
        CudaType::R32U => C::CUDA_R_32U,
        CudaType::R64I => C::CUDA_R_64I,
        CudaType::R64U => C::CUDA_R_64U,
    }
}

/// The data-type table's cuBLAS column as cuBLAS's `sys` enum.
const fn compute_type(c: BlasCompute) -> sys::cublasComputeType_t {
    use sys::cublasComputeType_t as C;
    match c {
        BlasCompute::F32 => C::CUBLAS_COMPUTE_32F,
        BlasCompute::F64 => C::CUBLAS_COMPUTE_64F,
        BlasCompute::I32 => C::CUBLAS_COMPUTE_32I,
    }
}

macro_rules! gemm_type {
    ($($t:ty),*) => {$(
        impl GemmType for $t {
            const DATA: sys::cudaDataType_t = data_type(<$t as DataTypes>::CUDA);
            const COMPUTE: sys::cublasComputeType_t = compute_type(required(<$t as DataTypes>::BLAS_COMPUTE));
        }
    )*};
}
gemm_type!(f32, f64, half::f16, half::bf16);

macro_rules! real_type {
    ($t:ty, $table:ident: $($field:ident = $f:ident),* $(,)?) => {
        static $table: sealed::RealFns<$t> = sealed::RealFns { $($field: sys::$f),* };
        impl RealType for $t {
            fn fns() -> &'static sealed::RealFns<$t> {
                &$table
            }
        }
    };
}
real_type!(f32, F32_FNS: axpy = cublasSaxpy_v2, scal = cublasSscal_v2, dot = cublasSdot_v2, nrm2 = cublasSnrm2_v2,
    asum = cublasSasum_v2, iamax = cublasIsamax_v2, iamin = cublasIsamin_v2, copy = cublasScopy_v2,
    swap = cublasSswap_v2, rot = cublasSrot_v2, gemv = cublasSgemv_v2, ger = cublasSger_v2, geam = cublasSgeam,
    syrk = cublasSsyrk_v2, trsm = cublasStrsm_v2);
real_type!(f64, F64_FNS: axpy = cublasDaxpy_v2, scal = cublasDscal_v2, dot = cublasDdot_v2, nrm2 = cublasDnrm2_v2,
    asum = cublasDasum_v2, iamax = cublasIdamax_v2, iamin = cublasIdamin_v2, copy = cublasDcopy_v2,
    swap = cublasDswap_v2, rot = cublasDrot_v2, gemv = cublasDgemv_v2, ger = cublasDger_v2, geam = cublasDgeam,
    syrk = cublasDsyrk_v2, trsm = cublasDtrsm_v2);

/// The shape arguments every GEMM entry point takes.
pub(super) struct GemmShape {
    pub trans_a: Transpose,
    pub trans_b: Transpose,
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub lda: c_int,
    pub ldb: c_int,
    pub ldc: c_int,
}

/// `cublasGemmEx`.
///
/// # Safety
/// (1) `h` is a live handle whose stream the op was fenced on; (2) `a`, `b` and `c` are live
/// device buffers of the current context covering `op(A)`, `op(B)` and `C` of shape `s`;
/// (3) `c` does not alias `a` or `b`; (4) `alpha` and `beta` point to host scalars of `T`'s
/// compute type (host pointer mode).
pub(super) unsafe fn gemm_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const c_void,
    b: *const c_void,
    beta: *const c_void,
    c: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (4).
    unsafe {
        sys::cublasGemmEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            b,
            T::DATA,
            s.ldb,
            beta,
            c,
            T::DATA,
            s.ldc,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmEx")
}

/// `cublasGemmStridedBatchedEx`: `count` GEMMs whose operands lie `strides` elements apart.
///
/// # Safety
/// As [`gemm_ex`], for every one of the `count` GEMMs: the buffers cover
/// `stride * (count - 1)` plus one operand's span, and no two GEMMs write the same element of
/// `c`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_strided_batched_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const c_void,
    b: *const c_void,
    beta: *const c_void,
    c: *mut c_void,
    strides: [i64; 3],
    count: c_int,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe {
        sys::cublasGemmStridedBatchedEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            strides[0],
            b,
            T::DATA,
            s.ldb,
            strides[1],
            beta,
            c,
            T::DATA,
            s.ldc,
            strides[2],
            count,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmStridedBatchedEx")
}

/// `cublasGemmBatchedEx`: one GEMM per entry of the device arrays of pointers `a`, `b`, `c`.
///
/// # Safety
/// As [`gemm_ex`], for each entry: the three device arrays hold `count` pointers to live
/// buffers that cover one operand each; every `C` is distinct.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_batched_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const *const c_void,
    b: *const *const c_void,
    beta: *const c_void,
    c: *const *mut c_void,
    count: c_int,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the arrays, the buffers and the scalars.
    unsafe {
        sys::cublasGemmBatchedEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            b,
            T::DATA,
            s.ldb,
            beta,
            c,
            T::DATA,
            s.ldc,
            count,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmBatchedEx")
}

/// A vector argument of a level 1 to 3 call: its device address and increment.
pub(super) type Strided<T> = (*mut T, c_int);

/// `cublas<t>axpy`: `y = alpha x + y`.
///
/// # Safety
/// (1) `h` is a live handle; (2) `x` and `y` are live device buffers of the current context
/// covering `n` elements at their increments, distinct; (3) host pointer mode.
pub(super) unsafe fn axpy<T: RealType>(h: H, n: c_int, alpha: &T, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (3).
    unsafe { (T::fns().axpy)(h, n, alpha, x.0, x.1, y.0, y.1) }.check("cublas<t>axpy")
}

/// `cublas<t>scal`: `x = alpha x`.
///
/// # Safety
/// As [`axpy`], for `x` alone.
pub(super) unsafe fn scal<T: RealType>(h: H, n: c_int, alpha: &T, x: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffer.
    unsafe { (T::fns().scal)(h, n, alpha, x.0, x.1) }.check("cublas<t>scal")
}

/// `cublas<t>copy`: `y = x`.
///
/// # Safety
/// As [`axpy`].
pub(super) unsafe fn copy<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().copy)(h, n, x.0, x.1, y.0, y.1) }.check("cublas<t>copy")
}

/// `cublas<t>swap`: exchanges `x` and `y`.
///
/// # Safety
/// As [`axpy`].
pub(super) unsafe fn swap<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().swap)(h, n, x.0, x.1, y.0, y.1) }.check("cublas<t>swap")
}

/// `cublas<t>rot`: applies the plane rotation `[c s; -s c]`.
///
/// # Safety
/// As [`axpy`].
pub(super) unsafe fn rot<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>, c: &T, s: &T) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers; `c` and `s` are host scalars.
    unsafe { (T::fns().rot)(h, n, x.0, x.1, y.0, y.1, c, s) }.check("cublas<t>rot")
}

/// `cublas<t>dot` into `out`.
///
/// # Safety
/// (1) `h` is a live handle in device pointer mode; (2) `x` and `y` are live device buffers
/// covering `n` elements at their increments; (3) `out` is a device-visible slot for one `T`.
pub(super) unsafe fn dot<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>, out: *mut T) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (3).
    unsafe { (T::fns().dot)(h, n, x.0, x.1, y.0, y.1, out) }.check("cublas<t>dot")
}

/// Which norm [`reduce`] computes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Norm {
    /// `cublas<t>nrm2`: the Euclidean norm.
    Two,
    /// `cublas<t>asum`: the sum of absolute values.
    AbsSum,
}

/// `cublas<t>nrm2` or `cublas<t>asum` into `out`.
///
/// # Safety
/// As [`dot`], for `x` alone.
pub(super) unsafe fn reduce<T: RealType>(h: H, norm: Norm, n: c_int, x: Strided<T>, out: *mut T) -> Result<()> {
    let (f, call) = match norm {
        Norm::Two => (T::fns().nrm2, "cublas<t>nrm2"),
        Norm::AbsSum => (T::fns().asum, "cublas<t>asum"),
    };
    // SAFETY: the caller vouches for the handle, the buffer and the slot.
    unsafe { f(h, n, x.0, x.1, out) }.check(call)
}

/// `cublasI<t>amax` (`max`) or `cublasI<t>amin` into `out`: a 1-based index.
///
/// # Safety
/// As [`dot`], for `x` alone.
pub(super) unsafe fn index_of<T: RealType>(h: H, max: bool, n: c_int, x: Strided<T>, out: *mut c_int) -> Result<()> {
    let (f, call) = if max { (T::fns().iamax, "cublasI<t>amax") } else { (T::fns().iamin, "cublasI<t>amin") };
    // SAFETY: the caller vouches for the handle, the buffer and the slot.
    unsafe { f(h, n, x.0, x.1, out) }.check(call)
}

/// `cublas<t>gemv`: `y = alpha op(A) x + beta y`, `A` stored `m x n`.
///
/// # Safety
/// (1) `h` is a live handle; (2) `a`, `x`, `y` are live device buffers covering `A` at `lda`
/// and the vectors at their increments; (3) `y` is distinct from `a` and `x`; (4) host pointer
/// mode.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemv<T: RealType>(
    h: H,
    trans: Transpose,
    m: c_int,
    n: c_int,
    alpha: &T,
    a: *const T,
    lda: c_int,
    x: Strided<T>,
    beta: &T,
    y: Strided<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (4).
    unsafe { (T::fns().gemv)(h, op(trans), m, n, alpha, a, lda, x.0, x.1, beta, y.0, y.1) }.check("cublas<t>gemv")
}

/// `cublas<t>ger`: `A = alpha x yᵀ + A`.
///
/// # Safety
/// As [`gemv`], with `a` distinct from `x` and `y`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn ger<T: RealType>(
    h: H,
    m: c_int,
    n: c_int,
    alpha: &T,
    x: Strided<T>,
    y: Strided<T>,
    a: *mut T,
    lda: c_int,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().ger)(h, m, n, alpha, x.0, x.1, y.0, y.1, a, lda) }.check("cublas<t>ger")
}

/// A matrix argument of a level 2 or 3 call: its device address and leading dimension.
pub(super) type Mat<T> = (*mut T, c_int);

/// `cublas<t>geam`: `C = alpha op(A) + beta op(B)`, `C` `m x n`.
///
/// # Safety
/// (1) `h` is a live handle; (2) the matrices are live device buffers covering their shapes at
/// their leading dimensions; (3) `c` is distinct from `a` and `b`; (4) host pointer mode.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn geam<T: RealType>(
    h: H,
    trans: [Transpose; 2],
    m: c_int,
    n: c_int,
    alpha: &T,
    a: Mat<T>,
    beta: &T,
    b: Mat<T>,
    c: Mat<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (4).
    unsafe { (T::fns().geam)(h, op(trans[0]), op(trans[1]), m, n, alpha, a.0, a.1, beta, b.0, b.1, c.0, c.1) }
        .check("cublas<t>geam")
}

/// `cublas<t>syrk`: `C = alpha op(A) op(A)ᵀ + beta C` on the `fill` triangle.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn syrk<T: RealType>(
    h: H,
    fill_mode: Fill,
    trans: Transpose,
    n: c_int,
    k: c_int,
    alpha: &T,
    a: Mat<T>,
    beta: &T,
    c: Mat<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe { (T::fns().syrk)(h, fill(fill_mode), op(trans), n, k, alpha, a.0, a.1, beta, c.0, c.1) }
        .check("cublas<t>syrk")
}

/// `cublas<t>trsm`: solves for `X`, which overwrites `B` (`m x n`).
///
/// # Safety
/// As [`geam`], with `b` distinct from `a`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn trsm<T: RealType>(
    h: H,
    side: Side,
    fill_mode: Fill,
    trans: Transpose,
    diag: Diag,
    m: c_int,
    n: c_int,
    alpha: &T,
    a: Mat<T>,
    b: Mat<T>,
) -> Result<()> {
    let side = match side {
        Side::Left => sys::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    };
    let diag = match diag {
        Diag::NonUnit => sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
        Diag::Unit => sys::cublasDiagType_t::CUBLAS_DIAG_UNIT,
    };
    // SAFETY: the caller vouches for the handle, the buffers and the scalar.
    unsafe { (T::fns().trsm)(h, side, fill(fill_mode), op(trans), diag, m, n, alpha, a.0, a.1, b.0, b.1) }
        .check("cublas<t>trsm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_mirrors_carry_the_sys_discriminants() {
        use CudaType::*;
        for t in [R16F, R16BF, R32F, R64F, C32F, C64F, R8I, R8U, R16I, R16U, R32I, R32U, R64I, R64U] {
            assert_eq!(t as u32, data_type(t) as u32, "{t:?}");
        }
        for c in [BlasCompute::F32, BlasCompute::F64, BlasCompute::I32] {
            assert_eq!(c as u32, compute_type(c) as u32, "{c:?}");
        }
    }
}
