//! The Jacobi info objects: the parameters (tolerance, sweeps) of the Jacobi SVD and the
//! symmetric Jacobi eigensolver, and their residual and sweeps after a run.

use super::Handle;
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cusolver::sys;
use std::ffi::c_int;

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
pub(crate) struct OwnedJacobi(pub(in crate::libs::solver) Owned<JacobiInfo>);

impl OwnedJacobi {
    /// `cusolverDnCreateGesvdjInfo` with `tol` and `max_sweeps` set.
    ///
    /// NVIDIA: [`cusolverDnCreateGesvdjInfo`](https://docs.nvidia.com/cuda/cusolver/#cusolverdncreategesvdjinfo),
    /// [`cusolverDnXgesvdjSetTolerance`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjsettolerance),
    /// [`cusolverDnXgesvdjSetMaxSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjsetmaxsweeps)
    pub(in crate::libs::solver) fn create(tol: f64, max_sweeps: u32) -> Result<OwnedJacobi> {
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

    pub(in crate::libs::solver) fn raw(&self) -> sys::gesvdjInfo_t {
        self.0.get().0
    }

    /// `cusolverDnXgesvdjGetResidual` and `...GetSweeps`.
    ///
    /// NVIDIA: [`cusolverDnXgesvdjGetResidual`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjgetresidual),
    /// [`cusolverDnXgesvdjGetSweeps`](https://docs.nvidia.com/cuda/cusolver/#cusolverdnxgesvdjgetsweeps)
    ///
    /// # Safety
    /// `h` is a live handle used by this thread only, and the SVD run with this info finished.
    pub(in crate::libs::solver) unsafe fn report(&self, h: Handle) -> Result<(f64, u32)> {
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
    pub(in crate::libs::solver) fn create(tol: f64, max_sweeps: u32) -> Result<OwnedSyevj> {
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

    pub(in crate::libs::solver) fn raw(&self) -> sys::syevjInfo_t {
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
    pub(in crate::libs::solver) unsafe fn report(&self, h: Handle) -> Result<(f64, u32)> {
        let (mut residual, mut sweeps) = (0f64, 0 as c_int);
        // SAFETY: the caller's contract; valid out-pointers.
        unsafe {
            sys::cusolverDnXsyevjGetResidual(h, self.raw(), &mut residual).check("cusolverDnXsyevjGetResidual")?;
            sys::cusolverDnXsyevjGetSweeps(h, self.raw(), &mut sweeps).check("cusolverDnXsyevjGetSweeps")?;
        }
        Ok((residual, sweeps.max(0) as u32))
    }
}
