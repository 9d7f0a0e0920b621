//! cuTENSOR plans: the descriptors, operation, preference and plan of one op, made together,
//! destroyed together, and executed.

use super::{binary, compute_desc, data_type, unary, RawHandle};
use crate::error::{Error, Result};
use crate::libs::object::Owned;
use crate::libs::tensor::{BinaryOp, Kind, PlanKey, UnaryOp};
use crate::libs::Status;
use crate::memory::Complex;
use cudarc::cutensor::sys;
use std::ffi::c_void;

/// The element type of the op's scalars (`alpha`, `beta`, `gamma`), as cuTENSOR reports it.
#[derive(Clone, Copy, Debug)]
enum ScalarType {
    F16,
    Bf16,
    F32,
    F64,
    C32,
    C64,
}

/// A scalar in the op's scalar type, as the bytes cuTENSOR reads through a host pointer.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(in crate::libs::tensor) struct Scalar([u8; 16]);

impl Scalar {
    pub(in crate::libs::tensor) fn ptr(&self) -> *const c_void {
        self.0.as_ptr().cast()
    }
}

/// A plan and everything made for it: its tensor descriptors, operation descriptor and plan
/// preference, destroyed on drop in that reverse order (fields drop in declaration order).
pub(crate) struct RawPlan {
    plan: Owned<sys::cutensorPlan_t>,
    _pref: Owned<sys::cutensorPlanPreference_t>,
    _op: Owned<sys::cutensorOperationDescriptor_t>,
    _descs: Vec<Owned<sys::cutensorTensorDescriptor_t>>,
    scalar: ScalarType,
    /// Workspace bytes the plan needs (cuTENSOR's own figure, at most its estimate).
    pub work_bytes: usize,
}

impl RawPlan {
    /// Makes the descriptors, the operation, a plan preference (JIT as `key.jit` says) and the
    /// plan for `key`, with the workspace limit cuTENSOR estimates for it.
    ///
    /// NVIDIA: [`cutensorCreateTensorDescriptor`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreatetensordescriptor),
    /// [`cutensorCreateContraction`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreatecontraction),
    /// [`cutensorCreateReduction`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreatereduction),
    /// [`cutensorCreatePermutation`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreatepermutation),
    /// [`cutensorCreateElementwiseBinary`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreateelementwisebinary),
    /// [`cutensorCreateElementwiseTrinary`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreateelementwisetrinary),
    /// [`cutensorCreatePlanPreference`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreateplanpreference),
    /// [`cutensorEstimateWorkspaceSize`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorestimateworkspacesize),
    /// [`cutensorCreatePlan`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcreateplan),
    /// [`cutensorPlanGetAttribute`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorplangetattribute)
    pub(in crate::libs::tensor) fn make(handle: &RawHandle, key: &PlanKey) -> Result<RawPlan> {
        let h = handle.get();
        let descs = descriptors(h, key)?;
        let op = operation(h, key, &descs)?;
        let scalar = scalar_type(h, op.get())?;
        let pref = preference(h, key.jit)?;
        let (plan, work_bytes) = plan(h, &op, &pref)?;
        Ok(RawPlan { plan, _pref: pref, _op: op, _descs: descs, scalar, work_bytes })
    }

    /// `v` in the plan's scalar type.
    /// Real scalar types take the real part (real data have no other).
    pub(in crate::libs::tensor) fn scalar(&self, v: Complex<f64>) -> Scalar {
        let mut b = [0u8; 16];
        match self.scalar {
            ScalarType::F16 => b[..2].copy_from_slice(&half::f16::from_f64(v.re).to_ne_bytes()),
            ScalarType::Bf16 => b[..2].copy_from_slice(&half::bf16::from_f64(v.re).to_ne_bytes()),
            ScalarType::F32 => b[..4].copy_from_slice(&(v.re as f32).to_ne_bytes()),
            ScalarType::F64 => b[..8].copy_from_slice(&v.re.to_ne_bytes()),
            // `cuComplex`: the real part, then the imaginary part.
            ScalarType::C32 => {
                b[..4].copy_from_slice(&(v.re as f32).to_ne_bytes());
                b[4..8].copy_from_slice(&(v.im as f32).to_ne_bytes());
            }
            ScalarType::C64 => {
                b[..8].copy_from_slice(&v.re.to_ne_bytes());
                b[8..].copy_from_slice(&v.im.to_ne_bytes());
            }
        }
        Scalar(b)
    }

    /// Enqueues the plan's op on `stream`.
    ///
    /// NVIDIA: [`cutensorContract`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorcontract),
    /// [`cutensorReduce`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorreduce),
    /// [`cutensorPermute`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorpermute),
    /// [`cutensorElementwiseBinaryExecute`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorelementwisebinaryexecute),
    /// [`cutensorElementwiseTrinaryExecute`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensorelementwisetrinaryexecute)
    ///
    /// # Safety
    /// (1) `handle` made the plan and its context is current; (2) `ptrs` holds the device
    /// addresses of the op's operands in [`PlanKey::operands`]'s order (for contractions and
    /// reductions, the output is `C` and `D` both), live, laid out as the key says and fenced
    /// on `stream`; (3) `scalars` are `alpha`, `beta`, `gamma` as the kind takes them;
    /// (4) `work` is a device buffer of at least `work_bytes` bytes used by nothing else while
    /// the op runs (or null when `work_bytes` is 0).
    pub(in crate::libs::tensor) unsafe fn exec(
        &self,
        handle: &RawHandle,
        kind: Kind,
        ptrs: &[*mut c_void],
        scalars: [Scalar; 3],
        work: *mut c_void,
        stream: crate::backend::cuda::CuStream,
    ) -> Result<()> {
        let (h, p, s) = (handle.get(), self.plan.get(), stream as sys::cudaStream_t);
        let [alpha, beta, gamma] = scalars;
        let w = self.work_bytes as u64;
        // SAFETY: the caller vouches for (1) to (4); each entry point gets the operands its
        // kind's plan was made for, in order.
        unsafe {
            match kind {
                Kind::Contraction => {
                    sys::cutensorContract(h, p, alpha.ptr(), ptrs[0], ptrs[1], beta.ptr(), ptrs[2], ptrs[2], work, w, s)
                        .check("cutensorContract")
                }
                Kind::Reduction(_) => {
                    sys::cutensorReduce(h, p, alpha.ptr(), ptrs[0], beta.ptr(), ptrs[1], ptrs[1], work, w, s)
                        .check("cutensorReduce")
                }
                Kind::Permutation => {
                    sys::cutensorPermute(h, p, alpha.ptr(), ptrs[0], ptrs[1], s).check("cutensorPermute")
                }
                Kind::Binary(_) => {
                    sys::cutensorElementwiseBinaryExecute(h, p, alpha.ptr(), ptrs[0], gamma.ptr(), ptrs[1], ptrs[2], s)
                        .check("cutensorElementwiseBinaryExecute")
                }
                Kind::Trinary(..) => sys::cutensorElementwiseTrinaryExecute(
                    h,
                    p,
                    alpha.ptr(),
                    ptrs[0],
                    beta.ptr(),
                    ptrs[1],
                    gamma.ptr(),
                    ptrs[2],
                    ptrs[3],
                    s,
                )
                .check("cutensorElementwiseTrinaryExecute"),
            }
        }
    }
}

/// `CUTENSOR_OPERATION_DESCRIPTOR_SCALAR_TYPE` of `op`.
///
/// NVIDIA: [`cutensorOperationDescriptorGetAttribute`](https://docs.nvidia.com/cuda/cutensor/latest/api/cutensor.html#cutensoroperationdescriptorgetattribute)
fn scalar_type(h: sys::cutensorHandle_t, op: sys::cutensorOperationDescriptor_t) -> Result<ScalarType> {
    let mut t = sys::cutensorDataType_t::CUDA_R_32F;
    // SAFETY: a live handle and operation; `t` is a `cudaDataType_t`, the attribute's type, and
    // its size is passed.
    unsafe {
        sys::cutensorOperationDescriptorGetAttribute(
            h,
            op,
            sys::cutensorOperationDescriptorAttribute_t::CUTENSOR_OPERATION_DESCRIPTOR_SCALAR_TYPE,
            (&mut t as *mut sys::cutensorDataType_t).cast(),
            std::mem::size_of::<sys::cutensorDataType_t>(),
        )
    }
    .check("cutensorOperationDescriptorGetAttribute")?;
    use sys::cutensorDataType_t as D;
    match t {
        D::CUDA_R_16F => Ok(ScalarType::F16),
        D::CUDA_R_16BF => Ok(ScalarType::Bf16),
        D::CUDA_R_32F => Ok(ScalarType::F32),
        D::CUDA_R_64F => Ok(ScalarType::F64),
        D::CUDA_C_32F => Ok(ScalarType::C32),
        D::CUDA_C_64F => Ok(ScalarType::C64),
        other => Err(Error::Library {
            call: "cutensorOperationDescriptorGetAttribute",
            status: format!("an unexpected scalar type {other:?}"),
        }),
    }
}

/// The tensor descriptors of `key`'s operands, in `PlanKey::operands`' order.
fn descriptors(h: sys::cutensorHandle_t, key: &PlanKey) -> Result<Vec<Owned<sys::cutensorTensorDescriptor_t>>> {
    let dt = data_type(key.dtype);
    let mut descs = Vec::with_capacity(key.operands.len());
    for l in &key.operands {
        let mut d: sys::cutensorTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: (1) a live handle, context current; (2) `extents` and `strides` hold
        // `modes.len()` entries each and outlive the call (cuTENSOR copies them).
        unsafe {
            sys::cutensorCreateTensorDescriptor(
                h,
                &mut d,
                l.layout.modes.len() as u32,
                l.layout.extents.as_ptr(),
                l.layout.strides.as_ptr(),
                dt,
                l.align,
            )
        }
        .check("cutensorCreateTensorDescriptor")?;
        descs.push(Owned::new(d));
    }
    Ok(descs)
}

/// The operation descriptor of `key`'s kind on `descs`.
fn operation(
    h: sys::cutensorHandle_t,
    key: &PlanKey,
    descs: &[Owned<sys::cutensorTensorDescriptor_t>],
) -> Result<Owned<sys::cutensorOperationDescriptor_t>> {
    let compute = compute_desc(key.compute)?;
    let mut op: sys::cutensorOperationDescriptor_t = std::ptr::null_mut();
    // SAFETY: (1) a live handle, and the descriptors `descriptors` made for `key`; (2) `op` is
    // a valid out-pointer.
    unsafe { create_operation(h, key, descs, compute, &mut op) }.check(key.kind.create_call())?;
    Ok(Owned::new(op))
}

/// The `cutensorCreate...` call of `key`'s kind; returns its status.
///
/// # Safety
/// (1) `h` is a live handle, context current, and `descs` the descriptors made for `key`'s
/// operands; (2) `op` is a valid out-pointer.
unsafe fn create_operation(
    h: sys::cutensorHandle_t,
    key: &PlanKey,
    descs: &[Owned<sys::cutensorTensorDescriptor_t>],
    compute: sys::cutensorComputeDescriptor_t,
    op: &mut sys::cutensorOperationDescriptor_t,
) -> sys::cutensorStatus_t {
    let d = |i: usize| descs[i].get();
    let m = |i: usize| key.operands[i].layout.modes.as_ptr();
    let ops = &key.unary;
    // SAFETY: (1) the caller's live handle and descriptors; (2) each mode array holds as many
    // labels as its descriptor has modes, and outlives the call; (3) the operand order is the
    // one `PlanKey::operands` documents for each kind.
    unsafe {
        match key.kind {
            Kind::Contraction => sys::cutensorCreateContraction(
                h,
                op,
                d(0),
                m(0),
                unary(ops[0]),
                d(1),
                m(1),
                unary(ops[1]),
                d(2),
                m(2),
                unary(UnaryOp::Identity),
                d(2),
                m(2),
                compute,
            ),
            Kind::Reduction(reduce) => sys::cutensorCreateReduction(
                h,
                op,
                d(0),
                m(0),
                unary(ops[0]),
                d(1),
                m(1),
                unary(UnaryOp::Identity),
                d(1),
                m(1),
                binary(reduce),
                compute,
            ),
            Kind::Permutation => sys::cutensorCreatePermutation(h, op, d(0), m(0), unary(ops[0]), d(1), m(1), compute),
            Kind::Binary(ac) => create_elementwise(h, key, descs, compute, op, (ac, None)),
            Kind::Trinary(ab, abc) => create_elementwise(h, key, descs, compute, op, (ab, Some(abc))),
        }
    }
}

/// The `cutensorCreateElementwise...` call of an elementwise kind: binary with `(ac, None)`,
/// trinary with `(ab, Some(abc))`; returns its status.
///
/// # Safety
/// As [`create_operation`]'s.
unsafe fn create_elementwise(
    h: sys::cutensorHandle_t,
    key: &PlanKey,
    descs: &[Owned<sys::cutensorTensorDescriptor_t>],
    compute: sys::cutensorComputeDescriptor_t,
    op: &mut sys::cutensorOperationDescriptor_t,
    (first, second): (BinaryOp, Option<BinaryOp>),
) -> sys::cutensorStatus_t {
    let d = |i: usize| descs[i].get();
    let m = |i: usize| key.operands[i].layout.modes.as_ptr();
    let ops = &key.unary;
    // SAFETY: as in `create_operation`: the caller's live handle and descriptors, mode arrays
    // as long as their descriptors' modes, and the operand order `PlanKey::operands` documents.
    unsafe {
        match second {
            None => sys::cutensorCreateElementwiseBinary(
                h,
                op,
                d(0),
                m(0),
                unary(ops[0]),
                d(1),
                m(1),
                unary(ops[1]),
                d(1),
                m(1),
                binary(first),
                compute,
            ),
            Some(abc) => sys::cutensorCreateElementwiseTrinary(
                h,
                op,
                d(0),
                m(0),
                unary(ops[0]),
                d(1),
                m(1),
                unary(ops[1]),
                d(2),
                m(2),
                unary(ops[2]),
                d(2),
                m(2),
                binary(first),
                binary(abc),
                compute,
            ),
        }
    }
}

/// A plan preference: the default algorithm, JIT compiled when `jit`.
fn preference(h: sys::cutensorHandle_t, jit: bool) -> Result<Owned<sys::cutensorPlanPreference_t>> {
    let mut pref: sys::cutensorPlanPreference_t = std::ptr::null_mut();
    let jit = if jit {
        sys::cutensorJitMode_t::CUTENSOR_JIT_MODE_DEFAULT
    } else {
        sys::cutensorJitMode_t::CUTENSOR_JIT_MODE_NONE
    };
    // SAFETY: a live handle; `pref` is a valid out-pointer.
    unsafe { sys::cutensorCreatePlanPreference(h, &mut pref, sys::cutensorAlgo_t::CUTENSOR_ALGO_DEFAULT, jit) }
        .check("cutensorCreatePlanPreference")?;
    Ok(Owned::new(pref))
}

/// The plan of `op` with the workspace limit cuTENSOR estimates for it, and the workspace
/// bytes the plan needs (cuTENSOR's own figure, at most its estimate).
fn plan(
    h: sys::cutensorHandle_t,
    op: &Owned<sys::cutensorOperationDescriptor_t>,
    pref: &Owned<sys::cutensorPlanPreference_t>,
) -> Result<(Owned<sys::cutensorPlan_t>, usize)> {
    let mut estimate = 0u64;
    // SAFETY: a live handle, operation and preference; `estimate` is a valid out-pointer.
    unsafe {
        sys::cutensorEstimateWorkspaceSize(
            h,
            op.get(),
            pref.get(),
            sys::cutensorWorksizePreference_t::CUTENSOR_WORKSPACE_DEFAULT,
            &mut estimate,
        )
    }
    .check("cutensorEstimateWorkspaceSize")?;
    let mut plan: sys::cutensorPlan_t = std::ptr::null_mut();
    // SAFETY: as above; `plan` is a valid out-pointer.
    unsafe { sys::cutensorCreatePlan(h, &mut plan, op.get(), pref.get(), estimate) }.check("cutensorCreatePlan")?;
    let plan = Owned::new(plan);
    let mut need = 0u64;
    // SAFETY: a live plan; `need` is a u64, the attribute's type, and its size is passed.
    unsafe {
        sys::cutensorPlanGetAttribute(
            h,
            plan.get(),
            sys::cutensorPlanAttribute_t::CUTENSOR_PLAN_REQUIRED_WORKSPACE,
            (&mut need as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    }
    .check("cutensorPlanGetAttribute")?;
    let work_bytes = usize::try_from(need.min(estimate)).map_err(|_| Error::Library {
        call: "cutensorPlanGetAttribute",
        status: format!("a workspace of {need} bytes"),
    })?;
    Ok((plan, work_bytes))
}
