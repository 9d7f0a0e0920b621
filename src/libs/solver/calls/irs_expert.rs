//! The expert iterative-refinement interface: `cusolverDnIRSXgesv` and `cusolverDnIRSXgels`,
//! their parameter object (`cusolverDnIRSParams_t`: precisions, refinement solver, tolerances,
//! iteration limits, fallback) and their per-call report (`cusolverDnIRSInfos_t`: iterations,
//! outer iterations, residual history).

use super::Handle;
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::object::{Owned, RawObject};
use crate::libs::solver::expert::RefinementSolver;
use crate::libs::solver::refine::LowPrecision;
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::{c_int, c_void};

/// A parameter object.
#[derive(Clone, Copy)]
pub(crate) struct Params(sys::cusolverDnIRSParams_t);

// SAFETY: host data, used by one thread at a time (its one owner).
unsafe impl RawObject for Params {
    const DESTROY: &'static str = "cusolverDnIRSParamsDestroy";
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnIRSParamsDestroy`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsparamsdestroy)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnIRSParamsDestroy(self.0) }
    }
}

/// A per-call report object.
#[derive(Clone, Copy)]
pub(crate) struct Infos(sys::cusolverDnIRSInfos_t);

// SAFETY: host data, used by one thread at a time (its one owner).
unsafe impl RawObject for Infos {
    const DESTROY: &'static str = "cusolverDnIRSInfosDestroy";
    type Status = sys::cusolverStatus_t;
    /// NVIDIA: [`cusolverDnIRSInfosDestroy`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosdestroy)
    unsafe fn destroy(self) -> sys::cusolverStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cusolverDnIRSInfosDestroy(self.0) }
    }
}

/// The settings a parameter object is made with, already checked to fit their C types.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::solver) struct Settings {
    /// The element type: the main precision.
    pub main: CudaType,
    pub low: LowPrecision,
    pub refinement: RefinementSolver,
    pub tol: Option<f64>,
    pub tol_inner: Option<f64>,
    pub max_iters: Option<c_int>,
    pub max_iters_inner: Option<c_int>,
    pub fallback: bool,
}

fn refinement(r: RefinementSolver) -> sys::cusolverIRSRefinement_t {
    use sys::cusolverIRSRefinement_t as R;
    match r {
        RefinementSolver::None => R::CUSOLVER_IRS_REFINE_NONE,
        RefinementSolver::Classical => R::CUSOLVER_IRS_REFINE_CLASSICAL,
        RefinementSolver::ClassicalGmres => R::CUSOLVER_IRS_REFINE_CLASSICAL_GMRES,
        RefinementSolver::Gmres => R::CUSOLVER_IRS_REFINE_GMRES,
        RefinementSolver::GmresGmres => R::CUSOLVER_IRS_REFINE_GMRES_GMRES,
        RefinementSolver::GmresNoPreconditioner => R::CUSOLVER_IRS_REFINE_GMRES_NOPCOND,
    }
}

/// The main and lowest precisions of element type `main` and `low`.
fn precisions(main: CudaType, low: LowPrecision) -> (sys::cusolverPrecType_t, sys::cusolverPrecType_t) {
    use sys::cusolverPrecType_t as P;
    use LowPrecision as L;
    let complex = matches!(main, CudaType::C32F | CudaType::C64F);
    let main = match main {
        CudaType::R64F => P::CUSOLVER_R_64F,
        CudaType::C64F => P::CUSOLVER_C_64F,
        CudaType::C32F => P::CUSOLVER_C_32F,
        _ => P::CUSOLVER_R_32F,
    };
    let lowest = match (low, complex) {
        (L::Main, _) => main,
        (L::F32, false) => P::CUSOLVER_R_32F,
        (L::F32, true) => P::CUSOLVER_C_32F,
        (L::F16, false) => P::CUSOLVER_R_16F,
        (L::F16, true) => P::CUSOLVER_C_16F,
        (L::Bf16, false) => P::CUSOLVER_R_16BF,
        (L::Bf16, true) => P::CUSOLVER_C_16BF,
        (L::Tf32, false) => P::CUSOLVER_R_TF32,
        (L::Tf32, true) => P::CUSOLVER_C_TF32,
    };
    (main, lowest)
}

/// `cusolverDnIRSParamsCreate` with every setting of `s` applied (those left `None` keep
/// cuSOLVER's defaults).
///
/// NVIDIA: [`cusolverDnIRSParamsCreate`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsparamscreate)
/// and the `cusolverDnIRSParamsSet*` / `EnableFallback` / `DisableFallback` helpers.
pub(in crate::libs::solver) fn params(s: &Settings) -> Result<Owned<Params>> {
    let mut raw: sys::cusolverDnIRSParams_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusolverDnIRSParamsCreate(&mut raw) }.check("cusolverDnIRSParamsCreate")?;
    let owned = Owned::new(Params(raw));
    let (main, lowest) = precisions(s.main, s.low);
    // SAFETY: a live parameter object, used by this thread only; host-only calls.
    unsafe {
        sys::cusolverDnIRSParamsSetSolverPrecisions(raw, main, lowest)
            .check("cusolverDnIRSParamsSetSolverPrecisions")?;
        sys::cusolverDnIRSParamsSetRefinementSolver(raw, refinement(s.refinement))
            .check("cusolverDnIRSParamsSetRefinementSolver")?;
        if let Some(t) = s.tol {
            sys::cusolverDnIRSParamsSetTol(raw, t).check("cusolverDnIRSParamsSetTol")?;
        }
        if let Some(t) = s.tol_inner {
            sys::cusolverDnIRSParamsSetTolInner(raw, t).check("cusolverDnIRSParamsSetTolInner")?;
        }
        if let Some(m) = s.max_iters {
            sys::cusolverDnIRSParamsSetMaxIters(raw, m).check("cusolverDnIRSParamsSetMaxIters")?;
        }
        if let Some(m) = s.max_iters_inner {
            sys::cusolverDnIRSParamsSetMaxItersInner(raw, m).check("cusolverDnIRSParamsSetMaxItersInner")?;
        }
        if s.fallback {
            sys::cusolverDnIRSParamsEnableFallback(raw).check("cusolverDnIRSParamsEnableFallback")?;
        } else {
            sys::cusolverDnIRSParamsDisableFallback(raw).check("cusolverDnIRSParamsDisableFallback")?;
        }
    }
    Ok(owned)
}

/// `cusolverDnIRSInfosCreate`, and `cusolverDnIRSInfosRequestResidual` when `history`.
///
/// NVIDIA: [`cusolverDnIRSInfosCreate`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfoscreate),
/// [`cusolverDnIRSInfosRequestResidual`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosrequestresidual)
pub(in crate::libs::solver) fn infos(history: bool) -> Result<Owned<Infos>> {
    let mut raw: sys::cusolverDnIRSInfos_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusolverDnIRSInfosCreate(&mut raw) }.check("cusolverDnIRSInfosCreate")?;
    let owned = Owned::new(Infos(raw));
    if history {
        // SAFETY: a live infos object, used by this thread only.
        unsafe { sys::cusolverDnIRSInfosRequestResidual(raw) }.check("cusolverDnIRSInfosRequestResidual")?;
    }
    Ok(owned)
}

/// What an infos object says after its call.
#[derive(Clone, Debug, Default)]
pub(in crate::libs::solver) struct Report {
    pub niters: c_int,
    pub outer: c_int,
    pub max_iters: c_int,
    /// `(iterations so far, residual norm)` per outer iteration, when it was requested.
    pub history: Vec<(f64, f64)>,
}

/// Reads `infos` after its call: the iteration counts and, when `history` was requested, the
/// residual history, a column-major `(max_iters + 1) x 2` matrix of the main precision's real
/// type (`f32` when `single`) whose first `outer + 1` rows are filled.
///
/// NVIDIA: [`cusolverDnIRSInfosGetNiters`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosgetniters),
/// [`cusolverDnIRSInfosGetOuterNiters`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosgetouterniters),
/// [`cusolverDnIRSInfosGetMaxIters`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosgetmaxiters),
/// [`cusolverDnIRSInfosGetResidualHistory`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsinfosgetresidualhistory)
///
/// # Safety
/// `infos` is live (its owner keeps it), used by this thread only, and the IRS call made with
/// it has returned.
pub(in crate::libs::solver) unsafe fn report(infos: Infos, history: bool, single: bool) -> Result<Report> {
    let raw = infos.0;
    let mut r = Report::default();
    // SAFETY: the caller vouches for the object; valid out-pointers.
    unsafe {
        sys::cusolverDnIRSInfosGetNiters(raw, &mut r.niters).check("cusolverDnIRSInfosGetNiters")?;
        sys::cusolverDnIRSInfosGetOuterNiters(raw, &mut r.outer).check("cusolverDnIRSInfosGetOuterNiters")?;
        sys::cusolverDnIRSInfosGetMaxIters(raw, &mut r.max_iters).check("cusolverDnIRSInfosGetMaxIters")?;
    }
    if history {
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: as above; the history was requested before the call.
        unsafe { sys::cusolverDnIRSInfosGetResidualHistory(raw, &mut h) }
            .check("cusolverDnIRSInfosGetResidualHistory")?;
        let ld = usize::try_from(r.max_iters).unwrap_or(0).saturating_add(1);
        let rows = (r.outer.unsigned_abs() as usize).min(ld - 1) + 1;
        if !h.is_null() {
            for i in 0..rows {
                // SAFETY: cuSOLVER keeps a host matrix of `ld x 2` elements of the main
                // precision's real type behind `h` while the infos object lives; `i < ld`.
                let (it, res) = unsafe {
                    if single {
                        let p = h as *const f32;
                        (f64::from(*p.add(i)), f64::from(*p.add(ld + i)))
                    } else {
                        let p = h as *const f64;
                        (*p.add(i), *p.add(ld + i))
                    }
                };
                r.history.push((it, res));
            }
        }
    }
    Ok(r)
}

/// `cusolverDnIRSXgesv_bufferSize`: the workspace bytes.
///
/// NVIDIA: [`cusolverDnIRSXgesv_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsxgesv-buffersize)
///
/// # Safety
/// `h` is a live handle bound to the current context, used by this thread only; `p` is live.
pub(in crate::libs::solver) unsafe fn gesv_size(h: Handle, p: Params, n: c_int, nrhs: c_int) -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: the caller vouches for the handle and the parameter object; a valid out-pointer.
    unsafe { sys::cusolverDnIRSXgesv_bufferSize(h, p.0, n, nrhs, &mut bytes) }
        .check("cusolverDnIRSXgesv_bufferSize")?;
    Ok(bytes)
}

/// `cusolverDnIRSXgels_bufferSize`: the workspace bytes.
///
/// NVIDIA: [`cusolverDnIRSXgels_bufferSize`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsxgels-buffersize)
///
/// # Safety
/// As [`gesv_size`].
pub(in crate::libs::solver) unsafe fn gels_size(
    h: Handle,
    p: Params,
    m: c_int,
    n: c_int,
    nrhs: c_int,
) -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: the caller vouches for the handle and the parameter object; a valid out-pointer.
    unsafe { sys::cusolverDnIRSXgels_bufferSize(h, p.0, m, n, nrhs, &mut bytes) }
        .check("cusolverDnIRSXgels_bufferSize")?;
    Ok(bytes)
}

/// The matrices and workspace of one expert IRS call: `(pointer, leading dimension)` each.
pub(in crate::libs::solver) struct Operands {
    pub a: (*mut c_void, c_int),
    pub b: (*mut c_void, c_int),
    pub x: (*mut c_void, c_int),
    pub work: (*mut c_void, usize),
}

/// `cusolverDnIRSXgesv` (`m` unused) or `cusolverDnIRSXgels`: blocks until the solve is done
/// (the iteration count is returned on the host).
///
/// NVIDIA: [`cusolverDnIRSXgesv`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsxgesv),
/// [`cusolverDnIRSXgels`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnirsxgels)
///
/// # Safety
/// (1) `h` is a live handle bound to the current context, used by this thread only; (2) the
/// operands are live device buffers of that context, of the main precision's element type,
/// holding the shapes the arguments describe, `x` distinct from `a` and `b`, fenced on the
/// handle's stream; (3) the workspace holds the bytes the query returned for these parameters
/// and shape; (4) `info` is device-writable memory for one `int` alive until the work finished;
/// (5) `p` and `i` are live until the work finished, `i` made for this call only.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::solver) unsafe fn solve(
    gels: bool,
    h: Handle,
    p: Params,
    i: Infos,
    (m, n, nrhs): (c_int, c_int, c_int),
    o: &Operands,
    info: *mut c_int,
) -> Result<c_int> {
    let mut niters: c_int = 0;
    let (p, i) = (p.0, i.0);
    // SAFETY: the caller vouches for (1) to (5).
    unsafe {
        if gels {
            sys::cusolverDnIRSXgels(
                h,
                p,
                i,
                m,
                n,
                nrhs,
                o.a.0,
                o.a.1,
                o.b.0,
                o.b.1,
                o.x.0,
                o.x.1,
                o.work.0,
                o.work.1,
                &mut niters,
                info,
            )
            .check("cusolverDnIRSXgels")?;
        } else {
            sys::cusolverDnIRSXgesv(
                h,
                p,
                i,
                n,
                nrhs,
                o.a.0,
                o.a.1,
                o.b.0,
                o.b.1,
                o.x.0,
                o.x.1,
                o.work.0,
                o.work.1,
                &mut niters,
                info,
            )
            .check("cusolverDnIRSXgesv")?;
        }
    }
    Ok(niters)
}
