//! The 64-bit generic API (`cusolverDnX...`): one wrapper per call, serving every element type
//! through its `cudaDataType`; each returns the workspace sizes its query asks for, or runs.

use super::{eig_mode, fill, trans, Handle, Params};
use crate::error::Result;
use crate::libs::solver::{Fill, Trans};
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::{c_int, c_void};

/// Device and host workspace bytes a 64-bit API call asks for.
pub(in crate::libs::solver) type Sizes = (usize, usize);

/// Workspace pointers for a 64-bit API call: device, its bytes, host, its bytes.
#[derive(Clone, Copy)]
pub(in crate::libs::solver) struct Work {
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
pub(in crate::libs::solver) unsafe fn potrf(
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
pub(in crate::libs::solver) unsafe fn potrs(
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
pub(in crate::libs::solver) unsafe fn getrf(
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
pub(in crate::libs::solver) unsafe fn getrs(
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
pub(in crate::libs::solver) unsafe fn geqrf(
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
pub(in crate::libs::solver) unsafe fn syevd(
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

/// Which singular vectors `cusolverDnXgesvd` computes (its `jobu` and `jobvt`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(in crate::libs::solver) enum SvdJob {
    /// None (`'N'`).
    None,
    /// All of `U` and `Vᵀ` (`'A'`).
    All,
    /// The first `min(m, n)` columns of `U` and rows of `Vᵀ` (`'S'`).
    Thin,
}

impl SvdJob {
    fn char(self) -> i8 {
        match self {
            SvdJob::None => b'N' as i8,
            SvdJob::All => b'A' as i8,
            SvdJob::Thin => b'S' as i8,
        }
    }
}

/// `cusolverDnXgesvd_bufferSize` or `cusolverDnXgesvd`, computing the singular vectors `job`
/// says.
///
/// NVIDIA: [`cusolverDnXgesvd_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvd),
/// [`cusolverDnXgesvd`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvd)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn gesvd(
    h: Handle,
    p: Params,
    job: SvdJob,
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
    let job = job.char();
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

/// `cusolverDnXtrtri_bufferSize` or `cusolverDnXtrtri` (the call takes no params object).
///
/// NVIDIA: [`cusolverDnXtrtri_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxtrtri),
/// [`cusolverDnXtrtri`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxtrtri)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn trtri(
    h: Handle,
    uplo: Fill,
    unit_diagonal: bool,
    n: i64,
    dt: Dt,
    a: V,
    lda: i64,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let u = fill(uplo);
    let diag = if unit_diagonal {
        sys::cublasDiagType_t::CUBLAS_DIAG_UNIT
    } else {
        sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT
    };
    // SAFETY: the contract above.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXtrtri_bufferSize(h, u, diag, n, dt, a, lda, &mut d, &mut hb)
                    .check("cusolverDnXtrtri_bufferSize")?;
                Ok((d, hb))
            }
            Some((w, info)) => {
                sys::cusolverDnXtrtri(h, u, diag, n, dt, a, lda, w.device, w.device_bytes, w.host, w.host_bytes, info)
                    .check("cusolverDnXtrtri")?;
                Ok((0, 0))
            }
        }
    }
}

/// The eigenvalues `cusolverDnXsyevdx` computes: its `range`, with `vl`/`vu` (host values of
/// the eigenvalues' type) and the 1-based `il`/`iu`.
#[derive(Clone, Copy)]
pub(in crate::libs::solver) struct Range {
    pub range: sys::cusolverEigRange_t,
    pub vl: V,
    pub vu: V,
    pub il: i64,
    pub iu: i64,
}

/// `cusolverDnXsyevdx_bufferSize` or `cusolverDnXsyevdx` (`wt`: the real type of the
/// eigenvalues). `meig` is host memory for the count of eigenvalues found, written by the call.
///
/// NVIDIA: [`cusolverDnXsyevdx_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevdx),
/// [`cusolverDnXsyevdx`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsyevdx)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn syevdx(
    h: Handle,
    p: Params,
    vectors: bool,
    r: Range,
    uplo: Fill,
    n: i64,
    dt: Dt,
    (a, lda): (V, i64),
    (wt, w): (Dt, V),
    meig: *mut i64,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let (j, u) = (eig_mode(vectors), fill(uplo));
    // SAFETY: the contract above; `vl`, `vu` point to host values of `wt` and `meig` to a
    // host `i64`, all alive for the call.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXsyevdx_bufferSize(
                    h, p, j, r.range, u, n, dt, a, lda, r.vl, r.vu, r.il, r.iu, meig, wt, w, dt, &mut d, &mut hb,
                )
                .check("cusolverDnXsyevdx_bufferSize")?;
                Ok((d, hb))
            }
            Some((wk, info)) => {
                sys::cusolverDnXsyevdx(
                    h,
                    p,
                    j,
                    r.range,
                    u,
                    n,
                    dt,
                    a,
                    lda,
                    r.vl,
                    r.vu,
                    r.il,
                    r.iu,
                    meig,
                    wt,
                    w,
                    dt,
                    wk.device,
                    wk.device_bytes,
                    wk.host,
                    wk.host_bytes,
                    info,
                )
                .check("cusolverDnXsyevdx")?;
                Ok((0, 0))
            }
        }
    }
}

type XsytrfSize = unsafe extern "C" fn(
    Handle,
    Params,
    sys::cublasFillMode_t,
    i64,
    Dt,
    *const c_void,
    i64,
    *const i64,
    Dt,
    *mut usize,
    *mut usize,
) -> sys::cusolverStatus_t;
type Xsytrf = unsafe extern "C" fn(
    Handle,
    Params,
    sys::cublasFillMode_t,
    i64,
    Dt,
    V,
    i64,
    *mut i64,
    Dt,
    V,
    usize,
    V,
    usize,
    *mut c_int,
) -> sys::cusolverStatus_t;

/// `cusolverDnXsytrf_bufferSize` and `cusolverDnXsytrf` from the loaded libcusolver: cuSOLVER
/// added them in CUDA 13.4, after the headers cusched builds against, so they are looked up by
/// name (their signatures are NVIDIA's header's), and their absence is an
/// [`Error::Unsupported`](crate::Error::Unsupported).
pub(in crate::libs::solver) fn xsytrf() -> Result<(XsytrfSize, Xsytrf)> {
    static FNS: std::sync::OnceLock<Option<(XsytrfSize, Xsytrf)>> = std::sync::OnceLock::new();
    let found = FNS.get_or_init(|| {
        // SAFETY: (1) libcusolver is loaded (the registry probed it before any handle was made);
        // (2) the two symbols, where present, have exactly these C signatures (cusolverDn.h of
        // CUDA 13.4); the pointers are copied out and the library stays loaded for the process.
        unsafe {
            let lib = sys::culib();
            let size = lib.get::<XsytrfSize>(b"cusolverDnXsytrf_bufferSize\0").ok().map(|f| *f)?;
            let call = lib.get::<Xsytrf>(b"cusolverDnXsytrf\0").ok().map(|f| *f)?;
            Some((size, call))
        }
    });
    found.ok_or_else(|| crate::error::Error::Unsupported {
        library: "cuSOLVER (libcusolver)",
        what: "the 64-bit Bunch-Kaufman factorization cusolverDnXsytrf".into(),
        hint: "it is in cuSOLVER from CUDA 13.4 on: install that toolkit's libcusolver".into(),
    })
}

/// `cusolverDnXsytrf_bufferSize` or `cusolverDnXsytrf` (Bunch–Kaufman; complex symmetric, not
/// Hermitian, for complex types), through the entry points [`xsytrf`] found.
///
/// NVIDIA: [`cusolverDnXsytrf_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsytrf),
/// [`cusolverDnXsytrf`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsytrf)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn sytrf(
    h: Handle,
    p: Params,
    uplo: Fill,
    n: i64,
    dt: Dt,
    (a, lda): (V, i64),
    ipiv: *mut i64,
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let (size_fn, call_fn) = xsytrf()?;
    let u = fill(uplo);
    // SAFETY: the contract above; `ipiv` holds `n` pivots.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                size_fn(h, p, u, n, dt, a, lda, ipiv, dt, &mut d, &mut hb).check("cusolverDnXsytrf_bufferSize")?;
                Ok((d, hb))
            }
            Some((w, info)) => {
                call_fn(h, p, u, n, dt, a, lda, ipiv, dt, w.device, w.device_bytes, w.host, w.host_bytes, info)
                    .check("cusolverDnXsytrf")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXsytrs_bufferSize` or `cusolverDnXsytrs` (the call takes no params object).
///
/// NVIDIA: [`cusolverDnXsytrs_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsytrs),
/// [`cusolverDnXsytrs`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxsytrs)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn sytrs(
    h: Handle,
    uplo: Fill,
    n: i64,
    nrhs: i64,
    dt: Dt,
    (a, lda): (V, i64),
    ipiv: *const i64,
    (b, ldb): (V, i64),
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let u = fill(uplo);
    // SAFETY: the contract above; `ipiv` holds the `n` pivots sytrf wrote.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXsytrs_bufferSize(h, u, n, nrhs, dt, a, lda, ipiv, dt, b, ldb, &mut d, &mut hb)
                    .check("cusolverDnXsytrs_bufferSize")?;
                Ok((d, hb))
            }
            Some((w, info)) => {
                sys::cusolverDnXsytrs(
                    h,
                    u,
                    n,
                    nrhs,
                    dt,
                    a,
                    lda,
                    ipiv,
                    dt,
                    b,
                    ldb,
                    w.device,
                    w.device_bytes,
                    w.host,
                    w.host_bytes,
                    info,
                )
                .check("cusolverDnXsytrs")?;
                Ok((0, 0))
            }
        }
    }
}

/// `cusolverDnXgeev_bufferSize` or `cusolverDnXgeev`: eigenvalues into `w` of type `dtw` (the
/// element type: for a real type `2n` of them, the real parts then the imaginary parts; or, for
/// a real type, its complex type: `n` of them) and, with `vectors`, the right eigenvectors into
/// `vr`; no left eigenvectors (cuSOLVER supports only `jobvl` = no vectors).
///
/// NVIDIA: [`cusolverDnXgeev_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgeev),
/// [`cusolverDnXgeev`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgeev)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn geev(
    h: Handle,
    p: Params,
    vectors: bool,
    n: i64,
    dt: Dt,
    (a, lda): (V, i64),
    (w, dtw): (V, Dt),
    (vr, ldvr): (V, i64),
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let (jl, jr) = (eig_mode(false), eig_mode(vectors));
    let vl = std::ptr::null_mut();
    // SAFETY: the contract above; with jobvl 'N' the null `vl` (leading dimension 1) is not
    // referenced, and with jobvr 'N' neither is `vr`.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXgeev_bufferSize(
                    h, p, jl, jr, n, dt, a, lda, dtw, w, dt, vl, 1, dt, vr, ldvr, dt, &mut d, &mut hb,
                )
                .check("cusolverDnXgeev_bufferSize")?;
                Ok((d, hb))
            }
            Some((wk, info)) => {
                sys::cusolverDnXgeev(
                    h,
                    p,
                    jl,
                    jr,
                    n,
                    dt,
                    a,
                    lda,
                    dtw,
                    w,
                    dt,
                    vl,
                    1,
                    dt,
                    vr,
                    ldvr,
                    dt,
                    wk.device,
                    wk.device_bytes,
                    wk.host,
                    wk.host_bytes,
                    info,
                )
                .check("cusolverDnXgeev")?;
                Ok((0, 0))
            }
        }
    }
}

/// The shape of a `cusolverDnXgesvdr` call: rank `k`, oversampling `p`, power iterations.
#[derive(Clone, Copy)]
pub(in crate::libs::solver) struct Randomized {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub p: i64,
    pub iters: i64,
}

/// `cusolverDnXgesvdr_bufferSize` or `cusolverDnXgesvdr` (`jobu = jobv = 'S'` with `vectors`,
/// `'N'` otherwise; `st`: the real type of the singular values).
///
/// NVIDIA: [`cusolverDnXgesvdr_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdr),
/// [`cusolverDnXgesvdr`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdr)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn gesvdr(
    h: Handle,
    p: Params,
    vectors: bool,
    r: Randomized,
    dt: Dt,
    (a, lda): (V, i64),
    st: Dt,
    s: V,
    (u, ldu): (V, i64),
    (v, ldv): (V, i64),
    call: Option<(Work, *mut c_int)>,
) -> Result<Sizes> {
    let job = if vectors { b'S' as i8 } else { b'N' as i8 };
    // SAFETY: the contract above; with job 'N', `u` and `v` are not referenced.
    unsafe {
        match call {
            None => {
                let (mut d, mut hb) = (0, 0);
                sys::cusolverDnXgesvdr_bufferSize(
                    h, p, job, job, r.m, r.n, r.k, r.p, r.iters, dt, a, lda, st, s, dt, u, ldu, dt, v, ldv, dt, &mut d,
                    &mut hb,
                )
                .check("cusolverDnXgesvdr_bufferSize")?;
                Ok((d, hb))
            }
            Some((wk, info)) => {
                sys::cusolverDnXgesvdr(
                    h,
                    p,
                    job,
                    job,
                    r.m,
                    r.n,
                    r.k,
                    r.p,
                    r.iters,
                    dt,
                    a,
                    lda,
                    st,
                    s,
                    dt,
                    u,
                    ldu,
                    dt,
                    v,
                    ldv,
                    dt,
                    wk.device,
                    wk.device_bytes,
                    wk.host,
                    wk.host_bytes,
                    info,
                )
                .check("cusolverDnXgesvdr")?;
                Ok((0, 0))
            }
        }
    }
}
