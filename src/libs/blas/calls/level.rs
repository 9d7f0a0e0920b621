//! cuBLAS's typed level 1 to 3 entry points (`cublas<t>axpy` ...) of f32, f64 and their complex
//! forms. cusched's `Complex<f32>` has `cuComplex`'s layout (two f32, real part first) with a
//! smaller alignment: device pointers are passed cast, host scalars as `sys` copies.

use super::sealed::{self, ScalarType};
use super::{fill, op, H};
use crate::error::Result;
use crate::libs::blas::{Diag, Fill, Side, Transpose};
use crate::libs::Status;
use crate::memory::Complex;
use cudarc::cublas::sys;
use std::ffi::c_int;

macro_rules! scalar_type {
    ($t:ty, $sys:ty, $real:ty, $table:ident, |$v:ident| $conv:expr; $($field:ident = $f:ident),* $(,)?) => {
        static $table: sealed::Fns<$sys, $real> = sealed::Fns { $($field: sys::$f),* };
        impl ScalarType for $t {
            type Sys = $sys;
            type RealSys = $real;
            fn fns() -> &'static sealed::Fns<$sys, $real> {
                &$table
            }
            fn sys(self) -> $sys {
                let $v = self;
                $conv
            }
            fn real_sys(v: f64) -> $real {
                v as $real
            }
        }
    };
}
// A real type's `dotu` and `dotc` are its `dot`, its `geru` and `gerc` its `ger`; its Hermitian
// forms (`hemm`, `herk`, `her2k`) are the symmetric ones, with its own type as the real type.
scalar_type!(f32, f32, f32, F32_FNS, |v| v; axpy = cublasSaxpy_v2, scal = cublasSscal_v2, dotu = cublasSdot_v2,
    dotc = cublasSdot_v2, nrm2 = cublasSnrm2_v2, asum = cublasSasum_v2, iamax = cublasIsamax_v2,
    iamin = cublasIsamin_v2, copy = cublasScopy_v2, swap = cublasSswap_v2, rot = cublasSrot_v2,
    gemv = cublasSgemv_v2, geru = cublasSger_v2, gerc = cublasSger_v2, geam = cublasSgeam, syrk = cublasSsyrk_v2,
    trsm = cublasStrsm_v2, symm = cublasSsymm_v2, hemm = cublasSsymm_v2, trmm = cublasStrmm_v2,
    syr2k = cublasSsyr2k_v2, her2k = cublasSsyr2k_v2, herk = cublasSsyrk_v2, dgmm = cublasSdgmm);
scalar_type!(f64, f64, f64, F64_FNS, |v| v; axpy = cublasDaxpy_v2, scal = cublasDscal_v2, dotu = cublasDdot_v2,
    dotc = cublasDdot_v2, nrm2 = cublasDnrm2_v2, asum = cublasDasum_v2, iamax = cublasIdamax_v2,
    iamin = cublasIdamin_v2, copy = cublasDcopy_v2, swap = cublasDswap_v2, rot = cublasDrot_v2,
    gemv = cublasDgemv_v2, geru = cublasDger_v2, gerc = cublasDger_v2, geam = cublasDgeam, syrk = cublasDsyrk_v2,
    trsm = cublasDtrsm_v2, symm = cublasDsymm_v2, hemm = cublasDsymm_v2, trmm = cublasDtrmm_v2,
    syr2k = cublasDsyr2k_v2, her2k = cublasDsyr2k_v2, herk = cublasDsyrk_v2, dgmm = cublasDdgmm);
// The complex `rot` is cuBLAS's `csrot`/`zdrot`: a real cosine and sine.
scalar_type!(Complex<f32>, sys::cuComplex, f32, C32_FNS, |v| sys::cuComplex { x: v.re, y: v.im };
    axpy = cublasCaxpy_v2, scal = cublasCscal_v2, dotu = cublasCdotu_v2, dotc = cublasCdotc_v2,
    nrm2 = cublasScnrm2_v2, asum = cublasScasum_v2, iamax = cublasIcamax_v2, iamin = cublasIcamin_v2,
    copy = cublasCcopy_v2, swap = cublasCswap_v2, rot = cublasCsrot_v2, gemv = cublasCgemv_v2,
    geru = cublasCgeru_v2, gerc = cublasCgerc_v2, geam = cublasCgeam, syrk = cublasCsyrk_v2, trsm = cublasCtrsm_v2,
    symm = cublasCsymm_v2, hemm = cublasChemm_v2, trmm = cublasCtrmm_v2, syr2k = cublasCsyr2k_v2,
    her2k = cublasCher2k_v2, herk = cublasCherk_v2, dgmm = cublasCdgmm);
scalar_type!(Complex<f64>, sys::cuDoubleComplex, f64, C64_FNS, |v| sys::cuDoubleComplex { x: v.re, y: v.im };
    axpy = cublasZaxpy_v2, scal = cublasZscal_v2, dotu = cublasZdotu_v2, dotc = cublasZdotc_v2,
    nrm2 = cublasDznrm2_v2, asum = cublasDzasum_v2, iamax = cublasIzamax_v2, iamin = cublasIzamin_v2,
    copy = cublasZcopy_v2, swap = cublasZswap_v2, rot = cublasZdrot_v2, gemv = cublasZgemv_v2,
    geru = cublasZgeru_v2, gerc = cublasZgerc_v2, geam = cublasZgeam, syrk = cublasZsyrk_v2, trsm = cublasZtrsm_v2,
    symm = cublasZsymm_v2, hemm = cublasZhemm_v2, trmm = cublasZtrmm_v2, syr2k = cublasZsyr2k_v2,
    her2k = cublasZher2k_v2, herk = cublasZherk_v2, dgmm = cublasZdgmm);

/// A vector argument of a level 1 to 3 call: its device address and increment.
pub(in crate::libs::blas) type Strided<T> = (*mut T, c_int);

/// The device address as the `sys` type (same layout; device memory is never read here).
fn d<T: ScalarType>(p: *mut T) -> *mut T::Sys {
    p.cast()
}

/// `cublas<t>axpy`: `y = alpha x + y`.
///
/// # Safety
/// (1) `h` is a live handle; (2) `x` and `y` are live device buffers of the current context
/// covering `n` elements at their increments, distinct; (3) host pointer mode.
pub(in crate::libs::blas) unsafe fn axpy<T: ScalarType>(
    h: H,
    n: c_int,
    alpha: T,
    x: Strided<T>,
    y: Strided<T>,
) -> Result<()> {
    let alpha = alpha.sys();
    // SAFETY: the caller vouches for (1) to (3); `alpha` is a live host scalar of the sys type.
    unsafe { (T::fns().axpy)(h, n, &alpha, d(x.0), x.1, d(y.0), y.1) }.check("cublas<t>axpy")
}

/// `cublas<t>scal`: `x = alpha x`.
///
/// # Safety
/// As [`axpy`], for `x` alone.
pub(in crate::libs::blas) unsafe fn scal<T: ScalarType>(h: H, n: c_int, alpha: T, x: Strided<T>) -> Result<()> {
    let alpha = alpha.sys();
    // SAFETY: the caller vouches for the handle and the buffer; `alpha` is a host scalar.
    unsafe { (T::fns().scal)(h, n, &alpha, d(x.0), x.1) }.check("cublas<t>scal")
}

/// `cublas<t>copy`: `y = x`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn copy<T: ScalarType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().copy)(h, n, d(x.0), x.1, d(y.0), y.1) }.check("cublas<t>copy")
}

/// `cublas<t>swap`: exchanges `x` and `y`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn swap<T: ScalarType>(h: H, n: c_int, x: Strided<T>, y: Strided<T>) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().swap)(h, n, d(x.0), x.1, d(y.0), y.1) }.check("cublas<t>swap")
}

/// `cublas<t>rot` (`csrot`/`zdrot` for the complex types): applies the plane rotation
/// `[c s; -s c]` with a real `c` and `s`.
///
/// # Safety
/// As [`axpy`].
pub(in crate::libs::blas) unsafe fn rot<T: ScalarType>(
    h: H,
    n: c_int,
    x: Strided<T>,
    y: Strided<T>,
    c: T::RealSys,
    s: T::RealSys,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers; `c` and `s` are host scalars.
    unsafe { (T::fns().rot)(h, n, d(x.0), x.1, d(y.0), y.1, &c, &s) }.check("cublas<t>rot")
}

/// `cublas<t>dot` (`dotc` when `conj`: `x` conjugated; `dotu` otherwise) into `out`.
///
/// # Safety
/// (1) `h` is a live handle in device pointer mode; (2) `x` and `y` are live device buffers
/// covering `n` elements at their increments; (3) `out` is a device-visible slot for one `T`.
pub(in crate::libs::blas) unsafe fn dot<T: ScalarType>(
    h: H,
    conj: bool,
    n: c_int,
    x: Strided<T>,
    y: Strided<T>,
    out: *mut T,
) -> Result<()> {
    let (f, call) = if conj { (T::fns().dotc, "cublas<t>dotc") } else { (T::fns().dotu, "cublas<t>dotu") };
    // SAFETY: the caller vouches for (1) to (3).
    unsafe { f(h, n, d(x.0), x.1, d(y.0), y.1, d(out)) }.check(call)
}

/// Which norm [`reduce`] computes.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::blas) enum Norm {
    /// `cublas<t>nrm2`: the Euclidean norm.
    Two,
    /// `cublas<t>asum`: the sum of absolute values (`|re| + |im|` for complex elements).
    AbsSum,
}

/// `cublas<t>nrm2` or `cublas<t>asum` into `out`.
///
/// # Safety
/// As [`dot`], for `x` alone, with `out` a slot for one of the real type.
pub(in crate::libs::blas) unsafe fn reduce<T: ScalarType>(
    h: H,
    norm: Norm,
    n: c_int,
    x: Strided<T>,
    out: *mut T::RealSys,
) -> Result<()> {
    let (f, call) = match norm {
        Norm::Two => (T::fns().nrm2, "cublas<t>nrm2"),
        Norm::AbsSum => (T::fns().asum, "cublas<t>asum"),
    };
    // SAFETY: the caller vouches for the handle, the buffer and the slot.
    unsafe { f(h, n, d(x.0), x.1, out) }.check(call)
}

/// `cublasI<t>amax` (`max`) or `cublasI<t>amin` into `out`: a 1-based index.
///
/// # Safety
/// As [`dot`], for `x` alone.
pub(in crate::libs::blas) unsafe fn index_of<T: ScalarType>(
    h: H,
    max: bool,
    n: c_int,
    x: Strided<T>,
    out: *mut c_int,
) -> Result<()> {
    let (f, call) = if max { (T::fns().iamax, "cublasI<t>amax") } else { (T::fns().iamin, "cublasI<t>amin") };
    // SAFETY: the caller vouches for the handle, the buffer and the slot.
    unsafe { f(h, n, d(x.0), x.1, out) }.check(call)
}

/// `cublas<t>gemv`: `y = alpha op(A) x + beta y`, `A` stored `m x n`.
///
/// # Safety
/// (1) `h` is a live handle; (2) `a`, `x`, `y` are live device buffers covering `A` at `lda`
/// and the vectors at their increments; (3) `y` is distinct from `a` and `x`; (4) host pointer
/// mode.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn gemv<T: ScalarType>(
    h: H,
    trans: Transpose,
    m: c_int,
    n: c_int,
    alpha: T,
    a: Mat<T>,
    x: Strided<T>,
    beta: T,
    y: Strided<T>,
) -> Result<()> {
    let (alpha, beta) = (alpha.sys(), beta.sys());
    // SAFETY: the caller vouches for (1) to (4).
    unsafe { (T::fns().gemv)(h, op(trans), m, n, &alpha, d(a.0), a.1, d(x.0), x.1, &beta, d(y.0), y.1) }
        .check("cublas<t>gemv")
}

/// `cublas<t>ger` (`geru`, or `gerc` when `conj`): `A = alpha x yᵀ + A` (`yᴴ` when `conj`).
///
/// # Safety
/// As [`gemv`], with `a` distinct from `x` and `y`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn ger<T: ScalarType>(
    h: H,
    conj: bool,
    m: c_int,
    n: c_int,
    alpha: T,
    x: Strided<T>,
    y: Strided<T>,
    a: Mat<T>,
) -> Result<()> {
    let alpha = alpha.sys();
    let (f, call) = if conj { (T::fns().gerc, "cublas<t>gerc") } else { (T::fns().geru, "cublas<t>geru") };
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { f(h, m, n, &alpha, d(x.0), x.1, d(y.0), y.1, d(a.0), a.1) }.check(call)
}

/// A matrix argument of a level 2 or 3 call: its device address and leading dimension.
pub(in crate::libs::blas) type Mat<T> = (*mut T, c_int);

/// `cublas<t>geam`: `C = alpha op(A) + beta op(B)`, `C` `m x n`.
///
/// # Safety
/// (1) `h` is a live handle; (2) the matrices are live device buffers covering their shapes at
/// their leading dimensions; (3) `c` is distinct from `a` and `b`; (4) host pointer mode.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn geam<T: ScalarType>(
    h: H,
    trans: [Transpose; 2],
    m: c_int,
    n: c_int,
    alpha: T,
    a: Mat<T>,
    beta: T,
    b: Mat<T>,
    c: Mat<T>,
) -> Result<()> {
    let (alpha, beta) = (alpha.sys(), beta.sys());
    // SAFETY: the caller vouches for (1) to (4).
    unsafe {
        (T::fns().geam)(h, op(trans[0]), op(trans[1]), m, n, &alpha, d(a.0), a.1, &beta, d(b.0), b.1, d(c.0), c.1)
    }
    .check("cublas<t>geam")
}

/// `cublas<t>syrk`: `C = alpha op(A) op(A)ᵀ + beta C` on the `fill` triangle.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn syrk<T: ScalarType>(
    h: H,
    fill_mode: Fill,
    trans: Transpose,
    n: c_int,
    k: c_int,
    alpha: T,
    a: Mat<T>,
    beta: T,
    c: Mat<T>,
) -> Result<()> {
    let (alpha, beta) = (alpha.sys(), beta.sys());
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe { (T::fns().syrk)(h, fill(fill_mode), op(trans), n, k, &alpha, d(a.0), a.1, &beta, d(c.0), c.1) }
        .check("cublas<t>syrk")
}

/// `cublas<t>trsm`: solves for `X`, which overwrites `B` (`m x n`).
///
/// # Safety
/// As [`geam`], with `b` distinct from `a`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn trsm<T: ScalarType>(
    h: H,
    side: Side,
    fill_mode: Fill,
    trans: Transpose,
    diag: Diag,
    m: c_int,
    n: c_int,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
) -> Result<()> {
    let (side, diag) = (side_mode(side), diag_type(diag));
    let alpha = alpha.sys();
    // SAFETY: the caller vouches for the handle, the buffers and the scalar.
    unsafe { (T::fns().trsm)(h, side, fill(fill_mode), op(trans), diag, m, n, &alpha, d(a.0), a.1, d(b.0), b.1) }
        .check("cublas<t>trsm")
}

fn side_mode(side: Side) -> sys::cublasSideMode_t {
    match side {
        Side::Left => sys::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    }
}

fn diag_type(diag: Diag) -> sys::cublasDiagType_t {
    match diag {
        Diag::NonUnit => sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
        Diag::Unit => sys::cublasDiagType_t::CUBLAS_DIAG_UNIT,
    }
}

/// `cublas<t>symm`, or `cublas<t>hemm` when `herm`: `C = alpha A B + beta C` (`Left`) or
/// `alpha B A + beta C`, `A` symmetric (Hermitian) stored in its `fill` triangle.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn symm<T: ScalarType>(
    h: H,
    herm: bool,
    side: Side,
    fill_mode: Fill,
    m: c_int,
    n: c_int,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    beta: T,
    c: Mat<T>,
) -> Result<()> {
    let (f, call) = if herm { (T::fns().hemm, "cublas<t>hemm") } else { (T::fns().symm, "cublas<t>symm") };
    let (alpha, beta) = (alpha.sys(), beta.sys());
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe { f(h, side_mode(side), fill(fill_mode), m, n, &alpha, d(a.0), a.1, d(b.0), b.1, &beta, d(c.0), c.1) }
        .check(call)
}

/// `cublas<t>trmm`: `C = alpha op(A) B` (`Left`) or `alpha B op(A)`, `A` triangular.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn trmm<T: ScalarType>(
    h: H,
    side: Side,
    fill_mode: Fill,
    trans: Transpose,
    diag: Diag,
    m: c_int,
    n: c_int,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    c: Mat<T>,
) -> Result<()> {
    let alpha = alpha.sys();
    // SAFETY: the caller vouches for the handle, the buffers and the scalar.
    unsafe {
        (T::fns().trmm)(
            h,
            side_mode(side),
            fill(fill_mode),
            op(trans),
            diag_type(diag),
            m,
            n,
            &alpha,
            d(a.0),
            a.1,
            d(b.0),
            b.1,
            d(c.0),
            c.1,
        )
    }
    .check("cublas<t>trmm")
}

/// `cublas<t>syr2k`: `C = alpha (op(A) op(B)ᵀ + op(B) op(A)ᵀ) + beta C` on the `fill` triangle.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn syr2k<T: ScalarType>(
    h: H,
    fill_mode: Fill,
    trans: Transpose,
    n: c_int,
    k: c_int,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    beta: T,
    c: Mat<T>,
) -> Result<()> {
    let (alpha, beta) = (alpha.sys(), beta.sys());
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe {
        (T::fns().syr2k)(h, fill(fill_mode), op(trans), n, k, &alpha, d(a.0), a.1, d(b.0), b.1, &beta, d(c.0), c.1)
    }
    .check("cublas<t>syr2k")
}

/// `cublas<t>her2k`: `C = alpha op(A) op(B)ᴴ + conj(alpha) op(B) op(A)ᴴ + beta C`, `beta` real.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn her2k<T: ScalarType>(
    h: H,
    fill_mode: Fill,
    trans: Transpose,
    n: c_int,
    k: c_int,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    beta: T::RealSys,
    c: Mat<T>,
) -> Result<()> {
    let alpha = alpha.sys();
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe {
        (T::fns().her2k)(h, fill(fill_mode), op(trans), n, k, &alpha, d(a.0), a.1, d(b.0), b.1, &beta, d(c.0), c.1)
    }
    .check("cublas<t>her2k")
}

/// `cublas<t>herk`: `C = alpha op(A) op(A)ᴴ + beta C`, `alpha` and `beta` real.
///
/// # Safety
/// As [`geam`], with `c` distinct from `a`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn herk<T: ScalarType>(
    h: H,
    fill_mode: Fill,
    trans: Transpose,
    n: c_int,
    k: c_int,
    alpha: T::RealSys,
    a: Mat<T>,
    beta: T::RealSys,
    c: Mat<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe { (T::fns().herk)(h, fill(fill_mode), op(trans), n, k, &alpha, d(a.0), a.1, &beta, d(c.0), c.1) }
        .check("cublas<t>herk")
}

/// `cublas<t>dgmm`: `C = A diag(x)` (`Right`) or `diag(x) A` (`Left`), `A` and `C` `m x n`.
///
/// # Safety
/// As [`geam`], `x` covering its length at its increment, `c` distinct from `x`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn dgmm<T: ScalarType>(
    h: H,
    side: Side,
    m: c_int,
    n: c_int,
    a: Mat<T>,
    x: Strided<T>,
    c: Mat<T>,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle and the buffers.
    unsafe { (T::fns().dgmm)(h, side_mode(side), m, n, d(a.0), a.1, d(x.0), x.1, d(c.0), c.1) }.check("cublas<t>dgmm")
}
