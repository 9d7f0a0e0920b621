//! The cuTENSOR call layer: every cuTENSOR call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cutensor::sys`.
//!
//! Every wrapper that takes the handle needs the device's context current on the calling
//! thread (the op path binds it) and the handle and plans used by one thread at a time
//! (`Tensor` methods take `&mut self`).

mod plan;

pub(crate) use plan::RawPlan;

use super::{BinaryOp, Compute, UnaryOp};
use crate::error::{Error, Result};
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cutensor::sys;

impl Status for sys::cutensorStatus_t {
    const SUCCESS: Self = sys::cutensorStatus_t::CUTENSOR_STATUS_SUCCESS;
}

/// Whether cudarc's loader finds cuTENSOR (it looks for `libcutensor.so`, not `.so.2`).
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

macro_rules! raw_objects {
    ($($t:ty => $destroy:ident $(, $synchronizes:literal)?;)*) => {$(
        // SAFETY: cuTENSOR's handles, descriptors and plans may be used from any thread, one at
        // a time.
        unsafe impl RawObject for $t {
            const DESTROY: &'static str = stringify!($destroy);
            $(const SYNCHRONIZES: bool = $synchronizes;)?
            type Status = sys::cutensorStatus_t;

            unsafe fn destroy(self) -> sys::cutensorStatus_t {
                // SAFETY: the caller keeps `destroy`'s contract.
                unsafe { sys::$destroy(self) }
            }
        }
    )*};
}
raw_objects! {
    sys::cutensorHandle_t => cutensorDestroy, true;
    sys::cutensorTensorDescriptor_t => cutensorDestroyTensorDescriptor;
    sys::cutensorOperationDescriptor_t => cutensorDestroyOperationDescriptor;
    sys::cutensorPlanPreference_t => cutensorDestroyPlanPreference;
    sys::cutensorPlan_t => cutensorDestroyPlan;
}

/// An owned cuTENSOR handle, destroyed on drop (after the plans made with it: see
/// [`super::Objects`]).
pub(crate) struct RawHandle(Owned<sys::cutensorHandle_t>);

impl RawHandle {
    /// `cutensorCreate` in the current context.
    ///
    /// NVIDIA: [`cutensorCreate`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreate)
    pub(super) fn create() -> Result<RawHandle> {
        let mut h: sys::cutensorHandle_t = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; the op path made the device's context current.
        unsafe { sys::cutensorCreate(&mut h) }.check("cutensorCreate")?;
        Ok(RawHandle(Owned::new(h)))
    }

    pub(super) fn get(&self) -> sys::cutensorHandle_t {
        self.0.get()
    }
}

/// The value of one of cuTENSOR's `CUTENSOR_COMPUTE_DESC_*` globals (exported data, not
/// functions, so cudarc's `sys` has no binding for them).
fn compute_desc(c: Compute) -> Result<sys::cutensorComputeDescriptor_t> {
    let name: &[u8] = match c {
        Compute::F16 => b"CUTENSOR_COMPUTE_DESC_16F\0",
        Compute::Bf16 => b"CUTENSOR_COMPUTE_DESC_16BF\0",
        Compute::Tf32 => b"CUTENSOR_COMPUTE_DESC_TF32\0",
        Compute::F32 => b"CUTENSOR_COMPUTE_DESC_32F\0",
        Compute::F64 => b"CUTENSOR_COMPUTE_DESC_64F\0",
    };
    // SAFETY: (1) the library is loaded (the registry probed it before the state was made);
    // (2) the symbol is a `const cutensorComputeDescriptor_t` variable, so its address read as
    // a pointer to one is that variable, initialized when the library loaded and never written.
    unsafe {
        let sym = sys::culib()
            .get::<*const sys::cutensorComputeDescriptor_t>(name)
            .map_err(|e| Error::Library { call: "dlsym(CUTENSOR_COMPUTE_DESC_*)", status: e.to_string() })?;
        Ok(**sym)
    }
}

fn unary(op: UnaryOp) -> sys::cutensorOperator_t {
    use sys::cutensorOperator_t as O;
    match op {
        UnaryOp::Identity => O::CUTENSOR_OP_IDENTITY,
        UnaryOp::Sqrt => O::CUTENSOR_OP_SQRT,
        UnaryOp::Relu => O::CUTENSOR_OP_RELU,
        UnaryOp::Rcp => O::CUTENSOR_OP_RCP,
        UnaryOp::Sigmoid => O::CUTENSOR_OP_SIGMOID,
        UnaryOp::Tanh => O::CUTENSOR_OP_TANH,
        UnaryOp::Exp => O::CUTENSOR_OP_EXP,
        UnaryOp::Log => O::CUTENSOR_OP_LOG,
        UnaryOp::Abs => O::CUTENSOR_OP_ABS,
        UnaryOp::Neg => O::CUTENSOR_OP_NEG,
        UnaryOp::Sin => O::CUTENSOR_OP_SIN,
        UnaryOp::Cos => O::CUTENSOR_OP_COS,
        UnaryOp::Ceil => O::CUTENSOR_OP_CEIL,
        UnaryOp::Floor => O::CUTENSOR_OP_FLOOR,
        UnaryOp::Conj => O::CUTENSOR_OP_CONJ,
    }
}

fn binary(op: BinaryOp) -> sys::cutensorOperator_t {
    use sys::cutensorOperator_t as O;
    match op {
        BinaryOp::Add => O::CUTENSOR_OP_ADD,
        BinaryOp::Mul => O::CUTENSOR_OP_MUL,
        BinaryOp::Max => O::CUTENSOR_OP_MAX,
        BinaryOp::Min => O::CUTENSOR_OP_MIN,
    }
}

crate::libs::dtype::cuda_data_type!(fn data_type -> sys::cutensorDataType_t);
