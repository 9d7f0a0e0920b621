//! cuDNN's backend descriptors, owned: the graph API's one object type, made with
//! `cudnnBackendCreateDescriptor`, filled with `cudnnBackendSetAttribute`, frozen with
//! `cudnnBackendFinalize` and destroyed once on drop. With `calls`, `builder` and `plan`, the
//! only code of the crate that touches `cudarc::cudnn::sys`; every error names the attribute
//! or descriptor.
//!
//! A descriptor is a host object; one that another holds (a tensor in an operation, an
//! operation in a graph) is copied or referenced by cuDNN until the holder is finalized, so
//! the builder keeps every descriptor alive until the execution plan is made, and the plan
//! keeps nothing but itself.

use crate::error::{Error, Result};
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::c_void;

pub(crate) use sys::cudnnBackendAttributeName_t as Attr;
pub(crate) use sys::cudnnBackendAttributeType_t as AttrType;
pub(crate) use sys::cudnnBackendDescriptorType_t as Kind;

/// A raw backend descriptor (a newtype: other libraries' raw pointers are objects too).
#[derive(Clone, Copy)]
pub(crate) struct RawDesc(sys::cudnnBackendDescriptor_t);

// SAFETY: a backend descriptor is a host object cuDNN lets any thread use, one at a time.
unsafe impl RawObject for RawDesc {
    const DESTROY: &'static str = "cudnnBackendDestroyDescriptor";
    type Status = sys::cudnnStatus_t;

    unsafe fn destroy(self) -> sys::cudnnStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract: made once, destroyed once.
        unsafe { sys::cudnnBackendDestroyDescriptor(self.0) }
    }
}

/// An owned backend descriptor of one [`Kind`].
pub(crate) struct Desc {
    raw: Owned<RawDesc>,
    kind: Kind,
}

/// The error of a backend call, naming what it did.
fn failed(call: &'static str, status: sys::cudnnStatus_t, what: String) -> Error {
    Error::Library { call, status: format!("{status:?} ({what})") }
}

impl Desc {
    /// `cudnnBackendCreateDescriptor(kind)`.
    ///
    /// NVIDIA: [`cudnnBackendCreateDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnbackendcreatedescriptor)
    pub(crate) fn new(kind: Kind) -> Result<Desc> {
        let mut d: sys::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer; creating a descriptor touches no device state.
        let status = unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut d) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(failed("cudnnBackendCreateDescriptor", status, format!("{kind:?}")));
        }
        Ok(Desc { raw: Owned::new(RawDesc(d)), kind })
    }

    /// The raw descriptor, for another descriptor's attribute or an execute call.
    pub(crate) fn get(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw.get().0
    }

    /// `cudnnBackendSetAttribute` with `vals`, each of `ty`'s C type.
    ///
    /// # Safety
    /// `V` is the C type cuDNN reads for `ty` (`i64` for `INT64`, `f64` for `DOUBLE`, a raw
    /// descriptor for `BACKEND_DESCRIPTOR`, an enum of `repr(u32)` for the enum types...).
    unsafe fn set<V: Copy>(&self, attr: Attr, ty: AttrType, vals: &[V]) -> Result<()> {
        let n = i64::try_from(vals.len()).map_err(|_| Error::invalid("graph", "too many attribute values"))?;
        // SAFETY: (1) a live descriptor; (2) `vals` holds `n` values of the C type of `ty` (the
        // caller vouches for it) and outlives the call, which copies them.
        let status = unsafe { sys::cudnnBackendSetAttribute(self.get(), attr, ty, n, vals.as_ptr() as *const c_void) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(failed("cudnnBackendSetAttribute", status, format!("{attr:?} of {:?}", self.kind)));
        }
        Ok(())
    }

    pub(crate) fn set_i64(&self, attr: Attr, vals: &[i64]) -> Result<()> {
        // SAFETY: `INT64` values are read as `int64_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_INT64, vals) }
    }

    pub(crate) fn set_f64(&self, attr: Attr, v: f64) -> Result<()> {
        // SAFETY: `DOUBLE` values are read as `double`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_DOUBLE, &[v]) }
    }

    pub(crate) fn set_bool(&self, attr: Attr, v: bool) -> Result<()> {
        // SAFETY: `BOOLEAN` values are read as C's `bool`, one byte, as Rust's.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_BOOLEAN, &[v]) }
    }

    pub(crate) fn set_dtype(&self, attr: Attr, t: sys::cudnnDataType_t) -> Result<()> {
        // SAFETY: `DATA_TYPE` values are read as `cudnnDataType_t`, which `t` is.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_DATA_TYPE, &[t]) }
    }

    pub(crate) fn set_pointwise_mode(&self, attr: Attr, m: sys::cudnnPointwiseMode_t) -> Result<()> {
        // SAFETY: `POINTWISE_MODE` values are read as `cudnnPointwiseMode_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_POINTWISE_MODE, &[m]) }
    }

    pub(crate) fn set_reduction(&self, attr: Attr, m: sys::cudnnReduceTensorOp_t) -> Result<()> {
        // SAFETY: `REDUCTION_OPERATOR_TYPE` values are read as `cudnnReduceTensorOp_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &[m]) }
    }

    pub(crate) fn set_heur_mode(&self, attr: Attr, m: sys::cudnnBackendHeurMode_t) -> Result<()> {
        // SAFETY: `HEUR_MODE` values are read as `cudnnBackendHeurMode_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_HEUR_MODE, &[m]) }
    }

    pub(crate) fn set_rng(&self, attr: Attr, m: sys::cudnnRngDistribution_t) -> Result<()> {
        // SAFETY: `RNG_DISTRIBUTION` values are read as `cudnnRngDistribution_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_RNG_DISTRIBUTION, &[m]) }
    }

    pub(crate) fn set_norm_mode(&self, attr: Attr, m: sys::cudnnBackendNormMode_t) -> Result<()> {
        // SAFETY: `NORM_MODE` values are read as `cudnnBackendNormMode_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_NORM_MODE, &[m]) }
    }

    pub(crate) fn set_norm_phase(&self, attr: Attr, m: sys::cudnnBackendNormFwdPhase_t) -> Result<()> {
        // SAFETY: `NORM_FWD_PHASE` values are read as `cudnnBackendNormFwdPhase_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_NORM_FWD_PHASE, &[m]) }
    }

    /// Other descriptors as the attribute's values.
    pub(crate) fn set_descs(&self, attr: Attr, descs: &[&Desc]) -> Result<()> {
        let raw: Vec<sys::cudnnBackendDescriptor_t> = descs.iter().map(|d| d.get()).collect();
        // SAFETY: `BACKEND_DESCRIPTOR` values are read as `cudnnBackendDescriptor_t`, live here.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw) }
    }

    /// The cuDNN handle as the attribute's value.
    pub(crate) fn set_handle(&self, attr: Attr, h: sys::cudnnHandle_t) -> Result<()> {
        // SAFETY: `HANDLE` values are read as `cudnnHandle_t`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_HANDLE, &[h]) }
    }

    /// Raw pointers (device buffers, or host values of by-value tensors) as the values.
    pub(crate) fn set_ptrs(&self, attr: Attr, ptrs: &[*mut c_void]) -> Result<()> {
        // SAFETY: `VOID_PTR` values are read as `void*`.
        unsafe { self.set(attr, AttrType::CUDNN_TYPE_VOID_PTR, ptrs) }
    }

    /// `cudnnBackendFinalize`: the descriptor's attributes are checked and frozen.
    ///
    /// NVIDIA: [`cudnnBackendFinalize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnbackendfinalize)
    pub(crate) fn finalize(&self) -> Result<()> {
        // SAFETY: a live descriptor whose attributes reference live descriptors.
        let status = unsafe { sys::cudnnBackendFinalize(self.get()) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(failed("cudnnBackendFinalize", status, format!("{:?}", self.kind)));
        }
        Ok(())
    }

    /// One `INT64` attribute of a finalized descriptor.
    pub(crate) fn get_i64(&self, attr: Attr) -> Result<i64> {
        let (mut v, mut n) = (0i64, 0i64);
        // SAFETY: (1) a live, finalized descriptor; (2) room for one `int64_t` at `v`, the count
        // at `n`.
        let status = unsafe {
            sys::cudnnBackendGetAttribute(
                self.get(),
                attr,
                AttrType::CUDNN_TYPE_INT64,
                1,
                &mut n,
                &mut v as *mut i64 as *mut c_void,
            )
        };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(failed("cudnnBackendGetAttribute", status, format!("{attr:?} of {:?}", self.kind)));
        }
        Ok(v)
    }

    /// The engine configurations a finalized heuristics descriptor proposes, best first, at
    /// most `max` of them.
    pub(crate) fn engine_configs(&self, max: usize) -> Result<Vec<Desc>> {
        let configs: Vec<Desc> =
            (0..max).map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)).collect::<Result<_>>()?;
        let mut raw: Vec<sys::cudnnBackendDescriptor_t> = configs.iter().map(|d| d.get()).collect();
        let mut n = 0i64;
        // SAFETY: (1) a finalized heuristics descriptor; (2) `raw` holds `max` live engine
        // configuration descriptors cuDNN fills in place; `n` receives how many it filled.
        let status = unsafe {
            sys::cudnnBackendGetAttribute(
                self.get(),
                Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                max as i64,
                &mut n,
                raw.as_mut_ptr() as *mut c_void,
            )
        };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(failed("cudnnBackendGetAttribute", status, "CUDNN_ATTR_ENGINEHEUR_RESULTS".into()));
        }
        let n = usize::try_from(n).unwrap_or(0).min(max);
        Ok(configs.into_iter().take(n).collect())
    }
}

/// `cudnnBackendExecute`: runs `plan` with `pack` on the handle's stream.
///
/// NVIDIA: [`cudnnBackendExecute`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnbackendexecute)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current, the plan made with it;
/// (2) the pack's pointers are live device buffers holding the plan's tensors (host values for
/// by-value tensors), all fenced on the stream, and its workspace holds the plan's need.
pub(crate) unsafe fn execute(handle: sys::cudnnHandle_t, plan: &Desc, pack: &Desc) -> Result<()> {
    // SAFETY: the caller vouches for (1) and (2).
    unsafe { sys::cudnnBackendExecute(handle, plan.get(), pack.get()) }.check("cudnnBackendExecute")
}
