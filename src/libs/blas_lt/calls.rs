//! The cuBLASLt call layer: every cuBLASLt call cusched makes, each a thin wrapper returning
//! `Result` with the call named. The only code in the crate that touches `cudarc::cublaslt::sys`.
//!
//! Calls on a handle need its context current on the calling thread (the op path binds it) and
//! the handle and descriptors used by one thread at a time (`BlasLt` methods take `&mut self`).

use super::check::{EpiKind, Operand, Problem};
use super::types::sealed::Kind;
use super::types::Transpose;
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cublaslt::sys::{self, cublasLtMatmulDescAttributes_t as A};
use std::ffi::c_void;

/// A raw cuBLASLt handle, as the wrappers take it.
pub(super) type Handle = sys::cublasLtHandle_t;

impl Status for sys::cublasStatus_t {
    const SUCCESS: Self = sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS;
}

/// Whether libcublasLt loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

macro_rules! raw_object {
    ($t:ty, $destroy:ident, $synchronizes:literal) => {
        // SAFETY: cuBLASLt handles and descriptors may be used from any thread as long as one
        // thread uses them at a time.
        unsafe impl RawObject for $t {
            const DESTROY: &'static str = stringify!($destroy);
            const SYNCHRONIZES: bool = $synchronizes;
            type Status = sys::cublasStatus_t;

            unsafe fn destroy(self) -> sys::cublasStatus_t {
                // SAFETY: the caller keeps `destroy`'s contract.
                unsafe { sys::$destroy(self) }
            }
        }
    };
}
raw_object!(sys::cublasLtHandle_t, cublasLtDestroy, true);
raw_object!(sys::cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy, false);
raw_object!(sys::cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy, false);
raw_object!(sys::cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy, false);

/// An owned cuBLASLt handle, destroyed on drop.
pub(crate) struct RawHandle(Owned<Handle>);

impl RawHandle {
    /// `cublasLtCreate` in the current context.
    ///
    /// NVIDIA: [`cublasLtCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltcreate)
    pub(super) fn create() -> Result<RawHandle> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; the caller bound the context.
        unsafe { sys::cublasLtCreate(&mut h) }.check("cublasLtCreate")?;
        Ok(RawHandle(Owned::new(h)))
    }

    pub(super) fn get(&self) -> Handle {
        self.0.get()
    }
}

/// A cached matmul: its descriptor, the four layouts and the algorithm the heuristic chose.
pub(crate) struct Plan {
    desc: Owned<sys::cublasLtMatmulDesc_t>,
    layouts: [Owned<sys::cublasLtMatrixLayout_t>; 4],
    algo: sys::cublasLtMatmulAlgo_t,
    /// Workspace bytes the algorithm needs.
    pub workspace: usize,
}

crate::libs::dtype::cuda_data_type!(fn data_type -> sys::cudaDataType_t);

fn epilogue(e: EpiKind) -> sys::cublasLtEpilogue_t {
    use sys::cublasLtEpilogue_t as L;
    match e {
        EpiKind::Default => L::CUBLASLT_EPILOGUE_DEFAULT,
        EpiKind::Relu => L::CUBLASLT_EPILOGUE_RELU,
        EpiKind::Gelu => L::CUBLASLT_EPILOGUE_GELU,
        EpiKind::Bias => L::CUBLASLT_EPILOGUE_BIAS,
        EpiKind::ReluBias => L::CUBLASLT_EPILOGUE_RELU_BIAS,
        EpiKind::GeluBias => L::CUBLASLT_EPILOGUE_GELU_BIAS,
        EpiKind::ReluAux => L::CUBLASLT_EPILOGUE_RELU_AUX,
        EpiKind::GeluAux => L::CUBLASLT_EPILOGUE_GELU_AUX,
        EpiKind::ReluAuxBias => L::CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
        EpiKind::GeluAuxBias => L::CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        EpiKind::DRelu => L::CUBLASLT_EPILOGUE_DRELU,
        EpiKind::DGelu => L::CUBLASLT_EPILOGUE_DGELU,
        EpiKind::DReluBgrad => L::CUBLASLT_EPILOGUE_DRELU_BGRAD,
        EpiKind::DGeluBgrad => L::CUBLASLT_EPILOGUE_DGELU_BGRAD,
        EpiKind::BgradA => L::CUBLASLT_EPILOGUE_BGRADA,
        EpiKind::BgradB => L::CUBLASLT_EPILOGUE_BGRADB,
    }
}

/// Sets attribute `attr` of `desc` to `value`.
///
/// NVIDIA: [`cublasLtMatmulDescSetAttribute`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmuldescsetattribute)
///
/// # Safety
/// `desc` is a live descriptor and `T` is the attribute's type.
unsafe fn set<T>(desc: sys::cublasLtMatmulDesc_t, attr: A, value: &T) -> Result<()> {
    // SAFETY: the caller vouches for the descriptor and the type; `value` is readable.
    unsafe { sys::cublasLtMatmulDescSetAttribute(desc, attr, (value as *const T).cast(), std::mem::size_of::<T>()) }
        .check("cublasLtMatmulDescSetAttribute")
}

/// NVIDIA: [`cublasLtMatrixLayoutCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltmatrixlayoutcreate),
/// [`cublasLtMatrixLayoutSetAttribute`](https://docs.nvidia.com/cuda/cublas/#cublasltmatrixlayoutsetattribute)
fn layout(kind: Kind, o: &Operand, count: i32) -> Result<Owned<sys::cublasLtMatrixLayout_t>> {
    let mut l: sys::cublasLtMatrixLayout_t = std::ptr::null_mut();
    // SAFETY: `l` is a valid out-pointer; the call only allocates a host descriptor.
    unsafe { sys::cublasLtMatrixLayoutCreate(&mut l, data_type(kind.cuda()), o.rows, o.cols, o.ld) }
        .check("cublasLtMatrixLayoutCreate")?;
    let l = Owned::new(l);
    if count > 1 {
        use sys::cublasLtMatrixLayoutAttribute_t as L;
        for (attr, ptr, size) in [
            (L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (&count as *const i32).cast::<c_void>(), 4),
            (L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (&o.stride as *const i64).cast::<c_void>(), 8),
        ] {
            // SAFETY: a live layout; `ptr` points to `size` bytes of the attribute's type (int32
            // count, int64 stride).
            unsafe { sys::cublasLtMatrixLayoutSetAttribute(l.get(), attr, ptr, size) }
                .check("cublasLtMatrixLayoutSetAttribute")?;
        }
    }
    Ok(l)
}

/// The device pointers a matmul's descriptor carries (null: not used).
#[derive(Clone, Copy, Debug)]
pub(super) struct Pointers {
    pub bias: *const c_void,
    pub aux: *const c_void,
    pub scales: [*const c_void; 4],
    pub amax: *const c_void,
    /// The aux matrix's FP8 scale, and where its amax goes.
    pub aux_scale: *const c_void,
    pub aux_amax: *const c_void,
}

/// Sets the pointer attributes `p` has (the plan's key fixes which those are).
///
/// # Safety
/// `desc` is a live descriptor.
unsafe fn set_pointers(desc: sys::cublasLtMatmulDesc_t, p: &Pointers) -> Result<()> {
    let attrs = [
        (A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias),
        (A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux),
        (A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.scales[0]),
        (A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.scales[1]),
        (A::CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, p.scales[2]),
        (A::CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, p.scales[3]),
        (A::CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, p.amax),
        (A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, p.aux_scale),
        (A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, p.aux_amax),
    ];
    for (attr, ptr) in attrs {
        if !ptr.is_null() {
            // SAFETY: a live descriptor; pointer attributes are `void*`.
            unsafe { set(desc, attr, &ptr) }?;
        }
    }
    Ok(())
}

/// The matmul descriptor of `p`: compute type, transposes, epilogue and its attributes, and
/// the pointers `ptrs` sets.
///
/// NVIDIA: [`cublasLtMatmulDescCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmuldesccreate)
fn descriptor(p: &Problem, tf32: bool, ptrs: &Pointers) -> Result<Owned<sys::cublasLtMatmulDesc_t>> {
    use sys::cublasComputeType_t as Ct;
    use sys::cudaDataType_t as Dt;
    let [ka, _, _, kd, ke] = p.kinds;
    // The compute and scale types of cuBLASLt's type table for the inputs' type.
    let (compute, scale) = match ka {
        Kind::F64 => (Ct::CUBLAS_COMPUTE_64F, Dt::CUDA_R_64F),
        Kind::C32 => (Ct::CUBLAS_COMPUTE_32F, Dt::CUDA_C_32F),
        Kind::C64 => (Ct::CUBLAS_COMPUTE_64F, Dt::CUDA_C_64F),
        Kind::I8 | Kind::I32 => (Ct::CUBLAS_COMPUTE_32I, Dt::CUDA_R_32I),
        _ if tf32 => (Ct::CUBLAS_COMPUTE_32F_FAST_TF32, Dt::CUDA_R_32F),
        _ => (Ct::CUBLAS_COMPUTE_32F, Dt::CUDA_R_32F),
    };
    let mut desc: sys::cublasLtMatmulDesc_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; host-side allocation only.
    unsafe { sys::cublasLtMatmulDescCreate(&mut desc, compute, scale) }.check("cublasLtMatmulDescCreate")?;
    let desc = Owned::new(desc);
    let d = desc.get();
    // cublasOperation_t as its int32: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2.
    let op = |t: Transpose| -> i32 {
        match t {
            Transpose::No => 0,
            Transpose::Yes => 1,
            Transpose::Conj => 2,
        }
    };
    // SAFETY (every `set` below): a live descriptor, and each value has its attribute's type
    // (cublasOperation_t as int32, cublasLtPointerMode_t as int32, cublasLtEpilogue_t, int8
    // fast accumulation, int64, cudaDataType as int32).
    unsafe {
        if p.device_scalars {
            let mode = sys::cublasLtPointerMode_t::CUBLASLT_POINTER_MODE_DEVICE as i32;
            set(d, A::CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode)?;
        }
        set(d, A::CUBLASLT_MATMUL_DESC_TRANSA, &op(p.trans_a))?;
        set(d, A::CUBLASLT_MATMUL_DESC_TRANSB, &op(p.trans_b))?;
        set(d, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue(p.epi))?;
        if p.fast_accum {
            set(d, A::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &1i8)?;
        }
        if p.epi.bias().is_some() {
            set(d, A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &(data_type(ke.cuda()) as i32))?;
            if p.count > 1 {
                set(d, A::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &p.bias_stride)?;
            }
        }
        if let Some((ld, stride)) = p.aux {
            set(d, A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld)?;
            if p.count > 1 {
                set(d, A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride)?;
            }
            let gelu = p.epi.aux().is_some_and(|u| !u.relu);
            // An FP8 aux is D's type here, the default; set anyway, as the table lists it.
            if gelu && (ke != kd || ke.is_fp8()) {
                set(d, A::CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &(data_type(ke.cuda()) as i32))?;
            }
        }
        set_pointers(d, ptrs)?;
    }
    Ok(desc)
}

/// The heuristic's preference: at most `max_workspace` bytes, operands aligned to `align`.
///
/// NVIDIA: [`cublasLtMatmulPreferenceCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmulpreferencecreate),
/// [`cublasLtMatmulPreferenceSetAttribute`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmulpreferencesetattribute)
fn preference(max_workspace: usize, align: u32) -> Result<Owned<sys::cublasLtMatmulPreference_t>> {
    let mut pref: sys::cublasLtMatmulPreference_t = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; host-side allocation only.
    unsafe { sys::cublasLtMatmulPreferenceCreate(&mut pref) }.check("cublasLtMatmulPreferenceCreate")?;
    let pref = Owned::new(pref);
    use sys::cublasLtMatmulPreferenceAttributes_t as P;
    let ws = max_workspace as u64;
    let set_pref = |attr: P, ptr: *const c_void, size: usize| {
        // SAFETY: a live preference; `ptr` points to `size` bytes of the attribute's type.
        unsafe { sys::cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, ptr, size) }
            .check("cublasLtMatmulPreferenceSetAttribute")
    };
    set_pref(P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (&ws as *const u64).cast(), 8)?;
    for attr in [
        P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
    ] {
        set_pref(attr, (&align as *const u32).cast(), 4)?;
    }
    Ok(pref)
}

/// The most candidates the heuristic is asked for, and so the bound of a chosen algorithm's
/// index.
pub(crate) const MAX_CANDIDATES: usize = 64;

/// How a plan's heuristic is asked: TF32, the pointers the matmul sets, the workspace limit and
/// the operands' alignment.
#[derive(Clone, Copy, Debug)]
pub(super) struct Query {
    pub tf32: bool,
    pub ptrs: Pointers,
    pub max_workspace: usize,
    pub align: u32,
}

/// A matmul's descriptor and layouts, and the heuristic's candidates for it, best first.
struct Answer {
    desc: Owned<sys::cublasLtMatmulDesc_t>,
    layouts: [Owned<sys::cublasLtMatrixLayout_t>; 4],
    results: Vec<sys::cublasLtMatmulHeuristicResult_t>,
}

/// Asks the heuristic for at most `count` (1 to [`MAX_CANDIDATES`]) algorithms for `p`, within
/// `q.max_workspace` bytes for operands aligned to `q.align` bytes.
///
/// NVIDIA: [`cublasLtMatmulDescCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmuldesccreate),
/// [`cublasLtMatmulPreferenceCreate`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmulpreferencecreate),
/// [`cublasLtMatmulPreferenceSetAttribute`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmulpreferencesetattribute),
/// [`cublasLtMatmulAlgoGetHeuristic`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmulalgogetheuristic)
///
/// A heuristic that finds no algorithm is `Error::Unsupported`, describing the problem.
///
/// # Safety
/// (1) `h` is a live handle of the current context; (2) `q.ptrs` set the pointers the matmul
/// sets (the heuristic may look at which are set; it reads none of them).
unsafe fn heuristic(h: Handle, p: &Problem, q: &Query, count: usize) -> Result<Answer> {
    let desc = descriptor(p, q.tf32, &q.ptrs)?;
    let d = desc.get();
    let [ka, kb, kc, kd, _] = p.kinds;
    let layouts = [
        layout(ka, &p.a, p.count)?,
        layout(kb, &p.b, p.count)?,
        layout(kc, &p.c, p.count)?,
        layout(kd, &p.d, p.count)?,
    ];
    let pref = preference(q.max_workspace, q.align)?;
    let count = count.clamp(1, MAX_CANDIDATES);
    // SAFETY: the result is plain data; all-zero is a valid (unused) value.
    let zero: sys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
    let mut results = vec![zero; count];
    let mut found = 0i32;
    // SAFETY: (1) a live handle (the caller's contract), live descriptor, layouts and
    // preference; (2) `results` holds the `count` results asked for (at most 64, so the
    // conversion is exact), `found` is an out-pointer.
    let status = unsafe {
        sys::cublasLtMatmulAlgoGetHeuristic(
            h,
            d,
            layouts[0].get(),
            layouts[1].get(),
            layouts[2].get(),
            layouts[3].get(),
            pref.get(),
            count as i32,
            results.as_mut_ptr(),
            &mut found,
        )
    };
    if !has_algorithm(status, found)? {
        return Err(super::unsupported::error(p, q.tf32, q.align));
    }
    results.truncate(usize::try_from(found).unwrap_or(0).min(count));
    Ok(Answer { desc, layouts, results })
}

/// Makes the plan for `p`: descriptor, layouts, and the heuristic's candidate `index` (0: its
/// best). An index beyond the candidates the heuristic offers is refused naming `algorithm`.
///
/// # Safety
/// As [`heuristic`]'s.
pub(super) unsafe fn make_plan(h: Handle, p: &Problem, q: &Query, index: usize) -> Result<Plan> {
    // SAFETY: the caller keeps `heuristic`'s contract.
    let Answer { desc, layouts, results } = unsafe { heuristic(h, p, q, index.saturating_add(1)) }?;
    let Some(result) = results.get(index) else {
        return Err(crate::error::Error::invalid(
            "algorithm",
            format!(
                "the heuristic offers {} candidates for this matmul (indices 0 to {}): list them with BlasLt::candidates",
                results.len(),
                results.len().saturating_sub(1)
            ),
        ));
    };
    Ok(Plan { desc, layouts, algo: result.algo, workspace: result.workspaceSize })
}

/// The heuristic's candidates for `p`, best first, at most `max`: each one's workspace bytes
/// and its waves count.
///
/// # Safety
/// As [`heuristic`]'s.
pub(super) unsafe fn candidates(h: Handle, p: &Problem, q: &Query, max: usize) -> Result<Vec<(usize, f32)>> {
    // SAFETY: the caller keeps `heuristic`'s contract.
    let answer = unsafe { heuristic(h, p, q, max) }?;
    Ok(answer.results.iter().map(|r| (r.workspaceSize, r.wavesCount)).collect())
}

/// What the heuristic's answer means: an algorithm (`true`), none for this problem (`false`:
/// cuBLASLt says `NOT_SUPPORTED`, or succeeds with no result), or a failure.
fn has_algorithm(status: sys::cublasStatus_t, found: i32) -> Result<bool> {
    if status == sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED {
        return Ok(false);
    }
    status.check("cublasLtMatmulAlgoGetHeuristic")?;
    Ok(found > 0)
}

/// The operands' device addresses.
#[derive(Clone, Copy, Debug)]
pub(super) struct Operands {
    pub a: *const c_void,
    pub b: *const c_void,
    pub c: *const c_void,
    pub d: *mut c_void,
    pub workspace: *mut c_void,
    pub workspace_bytes: usize,
}

/// `cublasLtMatmul` with `plan`, after setting this call's pointers on its descriptor.
///
/// NVIDIA: [`cublasLtMatmul`](https://docs.nvidia.com/cuda/cublas/#cublasltmatmul)
///
/// # Safety
/// (1) `h` is a live handle of the current context, `stream` a live stream of it, and the op is
/// fenced on it; (2) the operands and `ptrs` are live device memory covering what the plan's
/// problem reads and writes (checked by the op), `d` distinct from `a` and `b`; (3) the
/// workspace holds `workspace_bytes` >= the plan's need, used by nothing else meanwhile;
/// (4) `alpha` and `beta` point to scalars of the plan's scale type: host ones living through
/// the call, or, where the plan reads them from the device, live device memory ordered before
/// the call and kept alive until it completes.
pub(super) unsafe fn matmul(
    h: Handle,
    plan: &Plan,
    ptrs: &Pointers,
    alpha: *const c_void,
    beta: *const c_void,
    o: &Operands,
    stream: crate::backend::cuda::CuStream,
) -> Result<()> {
    let d = plan.desc.get();
    // SAFETY: a live descriptor, owned by the plan the caller borrows exclusively.
    unsafe { set_pointers(d, ptrs) }?;
    let l = &plan.layouts;
    // SAFETY: the caller vouches for (1) to (4); the descriptor and layouts are live.
    unsafe {
        sys::cublasLtMatmul(
            h,
            d,
            alpha,
            o.a,
            l[0].get(),
            o.b,
            l[1].get(),
            beta,
            o.c,
            l[2].get(),
            o.d,
            l[3].get(),
            &plan.algo,
            o.workspace,
            o.workspace_bytes,
            stream as _,
        )
    }
    .check("cublasLtMatmul")
}

#[cfg(test)]
mod tests {
    use super::has_algorithm;
    use crate::error::Error;
    use cudarc::cublaslt::sys::cublasStatus_t as S;

    #[test]
    fn a_heuristic_without_an_algorithm_is_unsupported_and_other_statuses_are_failures() {
        assert!(has_algorithm(S::CUBLAS_STATUS_SUCCESS, 1).unwrap());
        assert!(!has_algorithm(S::CUBLAS_STATUS_SUCCESS, 0).unwrap());
        assert!(!has_algorithm(S::CUBLAS_STATUS_NOT_SUPPORTED, 0).unwrap());
        let e = has_algorithm(S::CUBLAS_STATUS_INVALID_VALUE, 0).unwrap_err();
        assert!(
            matches!(&e, Error::Library { call: "cublasLtMatmulAlgoGetHeuristic", status } if status == "CUBLAS_STATUS_INVALID_VALUE"),
            "{e:?}"
        );
    }
}
