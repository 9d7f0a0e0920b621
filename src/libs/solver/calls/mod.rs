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

use super::{Fill, Side, Trans};
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::{c_int, c_void};

mod typed;
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

// SAFETY: a cuSOLVER handle may be used from any thread, one thread at a time.
unsafe impl RawObject for Handle {
    const DESTROY: &'static str = "cusolverDnDestroy";
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

/// A Jacobi SVD's parameters and, after it ran, its residual and sweeps.
#[derive(Clone, Copy)]
pub(crate) struct JacobiInfo(sys::gesvdjInfo_t);

// SAFETY: host data, used by one thread at a time (its one owner).
unsafe impl RawObject for JacobiInfo {
    const DESTROY: &'static str = "cusolverDnDestroyGesvdjInfo";
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnDestroyGesvdjInfo`](https://docs.nvidia.com/cuda/cusolver/#cusolverdndestroygesvdjinfo)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnDestroyGesvdjInfo(self.0) }
    }
}

/// An owned Jacobi info object.
pub(crate) struct OwnedJacobi(pub(super) Owned<JacobiInfo>);

impl OwnedJacobi {
    /// `cusolverDnCreateGesvdjInfo` with `tol` and `max_sweeps` set.
    ///
    /// NVIDIA: [`cusolverDnCreateGesvdjInfo`](https://docs.nvidia.com/cuda/cusolver/#cusolverdncreategesvdjinfo),
    /// [`cusolverDnXgesvdjSetTolerance`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjsettolerance),
    /// [`cusolverDnXgesvdjSetMaxSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjsetmaxsweeps)
    pub(super) fn create(tol: f64, max_sweeps: u32) -> Result<OwnedJacobi> {
        let mut raw: sys::gesvdjInfo_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; host-only calls on the fresh object.
        unsafe { sys::cusolverDnCreateGesvdjInfo(&mut raw) }.check("cusolverDnCreateGesvdjInfo")?;
        let info = OwnedJacobi(Owned::new(JacobiInfo(raw)));
        // SAFETY: a live info object.
        unsafe {
            sys::cusolverDnXgesvdjSetTolerance(raw, tol).check("cusolverDnXgesvdjSetTolerance")?;
            sys::cusolverDnXgesvdjSetMaxSweeps(raw, max_sweeps.min(c_int::MAX as u32) as c_int)
                .check("cusolverDnXgesvdjSetMaxSweeps")?;
        }
        Ok(info)
    }

    pub(super) fn raw(&self) -> sys::gesvdjInfo_t {
        self.0.get().0
    }

    /// `cusolverDnXgesvdjGetResidual` and `...GetSweeps`.
    ///
    /// NVIDIA: [`cusolverDnXgesvdjGetResidual`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjgetresidual),
    /// [`cusolverDnXgesvdjGetSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjgetsweeps)
    ///
    /// # Safety
    /// `h` is a live handle used by this thread only, and the SVD run with this info finished.
    pub(super) unsafe fn report(&self, h: Handle) -> Result<(f64, u32)> {
        let (mut residual, mut sweeps) = (0f64, 0 as c_int);
        // SAFETY: the caller's contract; valid out-pointers.
        unsafe {
            sys::cusolverDnXgesvdjGetResidual(h, self.raw(), &mut residual).check("cusolverDnXgesvdjGetResidual")?;
            sys::cusolverDnXgesvdjGetSweeps(h, self.raw(), &mut sweeps).check("cusolverDnXgesvdjGetSweeps")?;
        }
        Ok((residual, sweeps.max(0) as u32))
    }
}

/// A symmetric Jacobi eigensolver's parameters and, after it ran, its residual and sweeps.
#[derive(Clone, Copy)]
pub(crate) struct SyevjInfo(sys::syevjInfo_t);

// SAFETY: host data, used by one thread at a time (its one owner).
unsafe impl RawObject for SyevjInfo {
    const DESTROY: &'static str = "cusolverDnDestroySyevjInfo";
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnDestroySyevjInfo`](https://docs.nvidia.com/cuda/cusolver/#cusolverdndestroysyevjinfo)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnDestroySyevjInfo(self.0) }
    }
}

/// An owned symmetric Jacobi info object.
pub(crate) struct OwnedSyevj(Owned<SyevjInfo>);

impl OwnedSyevj {
    /// `cusolverDnCreateSyevjInfo` with `tol` and `max_sweeps` set.
    ///
    /// NVIDIA: [`cusolverDnCreateSyevjInfo`](https://docs.nvidia.com/cuda/cusolver/#cusolverdncreatesyevjinfo),
    /// [`cusolverDnXsyevjSetTolerance`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevjsettolerance),
    /// [`cusolverDnXsyevjSetMaxSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevjsetmaxsweeps)
    pub(super) fn create(tol: f64, max_sweeps: u32) -> Result<OwnedSyevj> {
        let mut raw: sys::syevjInfo_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cusolverDnCreateSyevjInfo(&mut raw) }.check("cusolverDnCreateSyevjInfo")?;
        let info = OwnedSyevj(Owned::new(SyevjInfo(raw)));
        // SAFETY: a live info object; host-only calls.
        unsafe {
            sys::cusolverDnXsyevjSetTolerance(raw, tol).check("cusolverDnXsyevjSetTolerance")?;
            sys::cusolverDnXsyevjSetMaxSweeps(raw, max_sweeps.min(c_int::MAX as u32) as c_int)
                .check("cusolverDnXsyevjSetMaxSweeps")?;
        }
        Ok(info)
    }

    pub(super) fn raw(&self) -> sys::syevjInfo_t {
        self.0.get().0
    }

    /// `cusolverDnXsyevjGetResidual` and `...GetSweeps`.
    ///
    /// NVIDIA: [`cusolverDnXsyevjGetResidual`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevjgetresidual),
    /// [`cusolverDnXsyevjGetSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevjgetsweeps)
    ///
    /// # Safety
    /// `h` is a live handle used by this thread only, and the (non-batched) run with this info
    /// finished.
    pub(super) unsafe fn report(&self, h: Handle) -> Result<(f64, u32)> {
        let (mut residual, mut sweeps) = (0f64, 0 as c_int);
        // SAFETY: the caller's contract; valid out-pointers.
        unsafe {
            sys::cusolverDnXsyevjGetResidual(h, self.raw(), &mut residual).check("cusolverDnXsyevjGetResidual")?;
            sys::cusolverDnXsyevjGetSweeps(h, self.raw(), &mut sweeps).check("cusolverDnXsyevjGetSweeps")?;
        }
        Ok((residual, sweeps.max(0) as u32))
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
pub(crate) struct BlasHandle(pub(super) cudarc::cublas::sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one thread at a time.
unsafe impl RawObject for BlasHandle {
    const DESTROY: &'static str = "cublasDestroy";
    type Status = BlasStatus;
    /// NVIDIA: [`cublasDestroy_v2`](https://docs.nvidia.com/cuda/cublas/#cublasdestroy)
    unsafe fn destroy(self) -> BlasStatus {
        // SAFETY: the caller keeps `destroy`'s contract.
        BlasStatus(unsafe { cudarc::cublas::sys::cublasDestroy_v2(self.0) })
    }
}

/// Checks a cuBLAS status.
pub(super) fn blas_check(s: cudarc::cublas::sys::cublasStatus_t, call: &'static str) -> Result<()> {
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
    pub(super) unsafe fn create(stream: crate::backend::cuda::CuStream) -> Result<RawHandle> {
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
    pub(super) unsafe fn blas(&mut self, stream: crate::backend::cuda::CuStream) -> Result<BlasHandle> {
        if let Some(b) = &self.blas {
            return Ok(b.get());
        }
        use cudarc::cublas::sys as blas;
        // cudarc panics on a call into a library that does not load: probe first, as every
        // library does before its first call.
        // SAFETY: only tries to dlopen the library by name and drops the handle.
        if !unsafe { blas::is_culib_present() } {
            return Err(crate::Error::LibraryUnavailable {
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

    pub(super) fn get(&self) -> (Handle, Params) {
        (self.handle.get(), self.params.get())
    }
}

/// Device and host workspace bytes a 64-bit API call asks for.
pub(super) type Sizes = (usize, usize);

/// Workspace pointers for a 64-bit API call: device, its bytes, host, its bytes.
#[derive(Clone, Copy)]
pub(super) struct Work {
    pub device: *mut c_void,
    pub device_bytes: usize,
    pub host: *mut c_void,
    pub host_bytes: usize,
}

type V = *mut c_void;
type Dt = sys::cudaDataType;

// The 64-bit API wrappers below share one contract.
//
// # Safety (of every wrapper below)
// (1) `h`/`p` are a live handle and its params, bound to the current context, used by this
// thread only; (2) every pointer is a live device buffer of the current context holding the
// shape the arguments describe (validated by the caller), fenced on the handle's stream; (3)
// the workspace holds the sizes the query returned for exactly these arguments, and stays
// alive until the call's work finished; (4) `info` is device-writable memory for one `int`
// that stays alive until the call's work finished. The queries read no buffer.

/// `cusolverDnXpotrf_bufferSize` (`call` none) or `cusolverDnXpotrf`.
///
/// NVIDIA: [`cusolverDnXpotrf_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxpotrf),
/// [`cusolverDnXpotrf`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxpotrf)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn potrf(
    h: Handle,
    p: Params,
    uplo: Fill,
    n: i64,
    dt: Dt,
    a: V,
    lda: i64,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let u = fill(uplo);
    // SAFETY: the contract above.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXpotrf_bufferSize(h, p, u, n, dt, a, lda, dt, &mut d, &mut hb)
                    .check("cusolverDnXpotrf_bufferSize")?;
                Ok((d, hb))
            }
            Some((w, info)) => {
                sys::cusolverDnXpotrf(h, p, u, n, dt, a, lda, dt, w.device, w.device_bytes, w.host, w.host_bytes, info)
                    .check("cusolverDnXpotrf")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXpotrs`.
///
/// NVIDIA: [`cusolverDnXpotrs`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxpotrs)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn potrs(
    h: Handle,
    p: Params,
    uplo: Fill,
    n: i64,
    nrhs: i64,
    dt: Dt,
    a: V,
    lda: i64,
    b: V,
    ldb: i64,
    info: *mut c_int,
) -> Result<()> {
    // SAFETY: the contract above.
    unsafe { sys::cusolverDnXpotrs(h, p, fill(uplo), n, nrhs, dt, a, lda, dt, b, ldb, info) }.check("cusolverDnXpotrs")
}

/// `cusolverDnXgetrf_bufferSize` or `cusolverDnXgetrf` (`ipiv` null: no pivoting).
///
/// NVIDIA: [`cusolverDnXgetrf_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgetrf),
/// [`cusolverDnXgetrf`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgetrf)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn getrf(
    h: Handle,
    p: Params,
    m: i64,
    n: i64,
    dt: Dt,
    a: V,
    lda: i64,
    call: Option<(*mut i64, Work, *mut c_int)>,
) -> Result<Sizes> {
    // SAFETY: the contract above; a null `ipiv` is documented as "no pivoting".
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXgetrf_bufferSize(h, p, m, n, dt, a, lda, dt, &mut d, &mut hb)
                    .check("cusolverDnXgetrf_bufferSize")?;
                Ok((d, hb))
            }
            Some((ipiv, w, info)) => {
                sys::cusolverDnXgetrf(
                    h,
                    p,
                    m,
                    n,
                    dt,
                    a,
                    lda,
                    ipiv,
                    dt,
                    w.device,
                    w.device_bytes,
                    w.host,
                    w.host_bytes,
                    info,
                )
                .check("cusolverDnXgetrf")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXgetrs` (`ipiv` null: the factorization was not pivoted).
///
/// NVIDIA: [`cusolverDnXgetrs`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgetrs)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn getrs(
    h: Handle,
    p: Params,
    t: Trans,
    n: i64,
    nrhs: i64,
    dt: Dt,
    a: V,
    lda: i64,
    ipiv: *const i64,
    b: V,
    ldb: i64,
    info: *mut c_int,
) -> Result<()> {
    // SAFETY: the contract above.
    unsafe { sys::cusolverDnXgetrs(h, p, trans(t), n, nrhs, dt, a, lda, ipiv, dt, b, ldb, info) }
        .check("cusolverDnXgetrs")
}

/// `cusolverDnXgeqrf_bufferSize` or `cusolverDnXgeqrf`.
///
/// NVIDIA: [`cusolverDnXgeqrf_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgeqrf),
/// [`cusolverDnXgeqrf`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgeqrf)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn geqrf(
    h: Handle,
    p: Params,
    m: i64,
    n: i64,
    dt: Dt,
    a: V,
    lda: i64,
    tau: V,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    // SAFETY: the contract above.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXgeqrf_bufferSize(h, p, m, n, dt, a, lda, dt, tau, dt, &mut d, &mut hb)
                    .check("cusolverDnXgeqrf_bufferSize")?;
                Ok((d, hb))
            }
            Some((w, info)) => {
                sys::cusolverDnXgeqrf(
                    h,
                    p,
                    m,
                    n,
                    dt,
                    a,
                    lda,
                    dt,
                    tau,
                    dt,
                    w.device,
                    w.device_bytes,
                    w.host,
                    w.host_bytes,
                    info,
                )
                .check("cusolverDnXgeqrf")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXsyevd_bufferSize` or `cusolverDnXsyevd` (`wt`: the real type of the
/// eigenvalues).
///
/// NVIDIA: [`cusolverDnXsyevd_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevd),
/// [`cusolverDnXsyevd`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevd)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn syevd(
    h: Handle,
    p: Params,
    vectors: bool,
    uplo: Fill,
    n: i64,
    dt: Dt,
    a: V,
    lda: i64,
    wt: Dt,
    w: V,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let (j, u) = (eig_mode(vectors), fill(uplo));
    // SAFETY: the contract above.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXsyevd_bufferSize(h, p, j, u, n, dt, a, lda, wt, w, dt, &mut d, &mut hb)
                    .check("cusolverDnXsyevd_bufferSize")?;
                Ok((d, hb))
            }
            Some((wk, info)) => {
                sys::cusolverDnXsyevd(
                    h,
                    p,
                    j,
                    u,
                    n,
                    dt,
                    a,
                    lda,
                    wt,
                    w,
                    dt,
                    wk.device,
                    wk.device_bytes,
                    wk.host,
                    wk.host_bytes,
                    info,
                )
                .check("cusolverDnXsyevd")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXgesvd_bufferSize` or `cusolverDnXgesvd`, computing all of `U` and `Vᵀ` (`'A'`)
/// or none (`'N'`).
///
/// NVIDIA: [`cusolverDnXgesvd_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvd),
/// [`cusolverDnXgesvd`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvd)
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gesvd(
    h: Handle,
    p: Params,
    vectors: bool,
    m: i64,
    n: i64,
    dt: Dt,
    (a, lda): (V, i64),
    st: Dt,
    s: V,
    (u, ldu): (V, i64),
    (vt, ldvt): (V, i64),
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let job = if vectors { b'A' as i8 } else { b'N' as i8 };
    // SAFETY: the contract above; with job 'N', `u` and `vt` are not referenced.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXgesvd_bufferSize(
                    h, p, job, job, m, n, dt, a, lda, st, s, dt, u, ldu, dt, vt, ldvt, dt, &mut d, &mut hb,
                )
                .check("cusolverDnXgesvd_bufferSize")?;
                Ok((d, hb))
            }
            Some((wk, info)) => {
                sys::cusolverDnXgesvd(
                    h,
                    p,
                    job,
                    job,
                    m,
                    n,
                    dt,
                    a,
                    lda,
                    st,
                    s,
                    dt,
                    u,
                    ldu,
                    dt,
                    vt,
                    ldvt,
                    dt,
                    wk.device,
                    wk.device_bytes,
                    wk.host,
                    wk.host_bytes,
                    info,
                )
                .check("cusolverDnXgesvd")?;
                Ok((0, 0))
            }
        }
    }
}
