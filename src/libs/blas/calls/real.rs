//! cuBLAS's typed level 1 to 3 entry points of the real types (`cublas<t>axpy` ...).

use super::sealed::{self, RealType};
use super::{fill, op, H};
use crate::error::Result;
use crate::libs::blas::{Diag, Fill, Side, Transpose};
use crate::libs::Status;
use cudarc::cublas::sys;
use std::ffi::c_int;

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

/// A vector argument of a level 1 to 3 call: its device address and increment.
pub(in crate::libs::blas) type Strided<T> = (*mut T, c_int);

/// `cublas<t>axpy`: `y = alpha x + y`.
///
/// # Safety
/// (1) `h` is a live handle; (2) `x` and `y` are live device buffers of the current context
/// covering `n` elements at their increments, distinct; (3) host pointer mode.
pub(in crate::libs::blas) unsafe fn axpy<T: RealType>(
    h: H,
    n: c_int,
    alpha: &T,
    x: Strided<T>,
    y: Strided<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (3).
    unsafe { (T::fns().axpy)(h, n, alpha, x.0, x.1, y.0, y.1) }.check("cublas<t>axpy")
}

/// `cublas<t>scal`: `x = alpha x`.
///
/// # Safety
/// As [`axpy`], for `x` alone.
pub(in crate::libs::blas) unsafe fn scal<T: RealType>(h: H, n: c_int, alpha: &T, x: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffer.
    unsafe { (T::fns().scal)(h, n, alpha, x.0, x.1) }.check("cublas<t>scal")
}

/// `cublas<t>copy`: `y = x`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn copy<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().copy)(h, n, x.0, x.1, y.0, y.1) }.check("cublas<t>copy")
}

/// `cublas<t>swap`: exchanges `x` and `y`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn swap<T: RealType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().swap)(h, n, x.0, x.1, y.0, y.1) }.check("cublas<t>swap")
}

/// `cublas<t>rot`: applies the plane rotation `[c s; -s c]`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn rot<T: RealType>(
    h: H,
    n: c_int,
    x: Strided<T>,
    y: Strided<T>,
    c: &T,
    s: &T,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers; `c` and `s` are host scalars.
    unsafe { (T::fns().rot)(h, n, x.0, x.1, y.0, y.1, c, s) }.check("cublas<t>rot")
}

/// `cublas<t>dot` into `out`.
///
/// # Safety
/// (1) `h` is a live handle in device pointer mode; (2) `x` and `y` are live device buffers
/// covering `n` elements at their increments; (3) `out` is a device-visible slot for one `T`.
pub(in crate::libs::blas) unsafe fn dot<T: RealType>(
    h: H,
    n: c_int,
    x: Strided<T>,
    y: Strided<T>,
    out: *mut T,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (3).
    unsafe { (T::fns().dot)(h, n, x.0, x.1, y.0, y.1, out) }.check("cublas<t>dot")
}

/// Which norm [`reduce`] computes.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::blas) enum Norm {
    /// `cublas<t>nrm2`: the Euclidean norm.
    Two,
    /// `cublas<t>asum`: the sum of absolute values.
    AbsSum,
}

/// `cublas<t>nrm2` or `cublas<t>asum` into `out`.
///
/// # Safety
/// As [`dot`], for `x` alone.
pub(in crate::libs::blas) unsafe fn reduce<T: RealType>(
    h: H,
    norm: Norm,
    n: c_int,
    x: Strided<T>,
    out: *mut T,
) -> Result<()> {
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
pub(in crate::libs::blas) unsafe fn index_of<T: RealType>(
    h: H,
    max: bool,
    n: c_int,
    x: Strided<T>,
    out: *mut c_int,
) -> Result<()> {
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
pub(in crate::libs::blas) unsafe fn gemv<T: RealType>(
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
pub(in crate::libs::blas) unsafe fn ger<T: RealType>(
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
pub(in crate::libs::blas) type Mat<T> = (*mut T, c_int);

/// `cublas<t>geam`: `C = alpha op(A) + beta op(B)`, `C` `m x n`.
///
/// # Safety
/// (1) `h` is a live handle; (2) the matrices are live device buffers covering their shapes at
/// their leading dimensions; (3) `c` is distinct from `a` and `b`; (4) host pointer mode.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn geam<T: RealType>(
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
pub(in crate::libs::blas) unsafe fn syrk<T: RealType>(
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
pub(in crate::libs::blas) unsafe fn trsm<T: RealType>(
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
