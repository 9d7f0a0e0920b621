//! cuBLASLt: `D = epilogue(alpha op(A) op(B) + beta C)` with fused epilogues (ReLU, GELU,
//! bias, their `_AUX` forms, their backward forms and the bias gradients), in f32 (with or
//! without TF32), f16 and bf16 (f32 accumulation), and FP8 (E4M3, E5M2) with per-tensor scales
//! and the amax of `D` returned through the op's completion. Also, as cuBLASLt's type table
//! lists them: f64 (f64 accumulation; ReLU and an f64 bias its only epilogues), `Complex<f32>`
//! and `Complex<f64>` (with conjugate transposes, [`Transpose::Conj`]; no epilogue), and i8 x i8
//! into i32 (IMMA: the TN layout, `m`, `k` and the leading dimensions multiples of 4; no
//! epilogue). `alpha` and `beta` have A's scale type ([`LtElement::Scale`]).
//!
//! Matrices are column-major by default; [`Order::Row`] makes all four row-major (computed as
//! the transposed column-major problem, so vectors the epilogue broadcasts or reduces run along
//! the contiguous dimension: see [`Epilogue`]). [`Matmul::orders`] gives `A` and `B` orders of
//! their own (`C` shares `D`'s): a matrix in the other order than `D` is handed to cuBLASLt as
//! its transpose in `D`'s order, the same memory, so every kernel of the column-major layouts
//! serves every mix (`CUBLASLT_MATRIX_LAYOUT_ORDER` is left at its default, which more kernels
//! take). A conjugated complex matrix has no such form and is refused; FP8 and i8 need the TN
//! layout once the orders are folded in. `alpha` and `beta` may be read from device memory
//! ([`Matmul::scale_device`], `CUBLASLT_POINTER_MODE_DEVICE`, part of the plan's key). Bias
//! gradients of a strided batch go one per matmul at the batch's bias stride
//! (`CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE`). An FP8 GELU aux matrix (E4M3, the one case
//! cuBLASLt's table lists) takes its own scale and returns its amax through the completion as
//! `D`'s does ([`Matmul::fp8_aux`]).
//!
//! Not wrapped, and why: a `C` in another order than `D` (no transposed form exists: `C` is
//! added element by element), per-row alpha vectors (`CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST`,
//! whose kernels cover few epilogues), and an FP8 aux beside a bias (`GELU_AUX_BIAS`: the
//! epilogue's one vector type `E` would have to be both the bias's f16 and the aux's E4M3).
//! The algorithm cuBLASLt's heuristic picks is
//! cached per stream with its descriptors, keyed on the whole problem (shape, layouts, types,
//! epilogue, alignment); a repeated matmul makes no descriptor and asks no heuristic. The
//! heuristic's other candidates can be listed ([`BlasLt::candidates`]) and one picked by index
//! ([`Matmul::algorithm`]), or timed on the caller's buffers with the fastest stored as the
//! matmul's plan ([`BlasLt::autotune`]). The workspace is the stream's shared one, 32 MiB on
//! Hopper and later (4 MiB before), declared on every op's recorder.
//!
//! On the simulator, a matmul computes its result on the CPU, as a simulated kernel on the
//! handle's stream under the op's declared uses (the hazard checker sees it as any kernel): the
//! same checks, every type combination and epilogue, inputs read exactly, f32 accumulation
//! (TF32 computes in f32), the epilogue in f32, each stored element rounded once to its type (FP8
//! to nearest even, saturating at its largest finite value, as the GPU's `SATFINITE`), the ReLU
//! mask in cuBLASLt's bit layout, `D`'s amax returned as on the GPU. It makes no plan and takes
//! no workspace ([`BlasLt::plans_made`] stays 0); a 512³ f32 matmul takes well under a second on
//! one core in release builds. f64, complex and i8 matmuls compute in complex f64 instead,
//! straight from the definition (`sim_wide`).
//!
//! Files: this one holds the handle; `types` the public description of a matmul, `check` its
//! checks, `matmul` the GPU op, `calls` the library calls, `tune` the algorithm choice,
//! `unsupported` the error for a problem cuBLASLt has no kernel for, `sim` the simulator's
//! computation (`sim_wide` for f64, complex and i8 inputs; the FP8 conversions are `libs::fp8`, shared
//! with cuDNN).

mod calls;
mod check;
mod matmul;
mod sim;
mod sim_wide;
mod tune;
mod types;
mod unsupported;

pub use crate::memory::{F8E4M3, F8E5M2};
pub use tune::{Candidate, Tuning};
pub use types::{
    Aux, Epilogue, Fp8Scales, LtBatch, LtElement, LtScale, Matmul, MatmulOutput, Order, ReluMask, Transpose,
};

use super::plan_cache::PlanCache;
use super::workspace::Workspace;
use super::{Library, OpStream, StreamLibrary};
use crate::error::Result;
use crate::memory::GpuRef;

/// The library's objects on one stream: the cached plans (descriptors and layouts), then the
/// handle they were queried on. Only held, to be dropped (destroyed) in that order.
pub(crate) struct LtObjects {
    _plans: Vec<calls::Plan>,
    _handle: Option<calls::RawHandle>,
}

/// A cuBLASLt handle bound to one stream, with its plan cache and workspace. Get it from
/// [`crate::Handles::blas_lt`] (on a lane or inline).
pub struct BlasLt {
    op: OpStream,
    raw: Option<calls::RawHandle>,
    plans: PlanCache<matmul::PlanKey, calls::Plan>,
    work: Workspace,
    /// Where the GPU writes `D`'s amax before it is copied to a pinned slot for the completion.
    amax_stage: Option<GpuRef<f32>>,
    /// Where the GPU writes the aux matrix's amax, as `amax_stage`.
    aux_amax_stage: Option<GpuRef<f32>>,
}

impl StreamLibrary for BlasLt {
    const LIBRARY: Library = Library {
        name: "cuBLASLt (libcublasLt)",
        hint: "install the CUDA toolkit's cuBLASLt library (libcublasLt.so.13)",
        present: calls::is_present,
        objects: "a cuBLASLt handle and its matmul plans",
    };
    type Objects = LtObjects;

    fn create(op: OpStream) -> Result<BlasLt> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let _bound = op.bound_stream()?;
            Some(calls::RawHandle::create()?)
        };
        Ok(BlasLt {
            op,
            raw,
            plans: PlanCache::new(64, "an evicted cuBLASLt plan"),
            work: Workspace::default(),
            amax_stage: None,
            aux_amax_stage: None,
        })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<LtObjects> {
        let plans = self.plans.take_all().unwrap_or_default();
        let handle = self.raw.take();
        (handle.is_some() || !plans.is_empty()).then_some(LtObjects { _plans: plans, _handle: handle })
    }
}

impl std::fmt::Debug for BlasLt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlasLt({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.plans.capacity())
    }
}

impl BlasLt {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// Plans (descriptors plus a heuristic query) made so far; a matmul whose problem was seen
    /// before makes none.
    pub fn plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Plans cached now.
    pub fn plans_cached(&self) -> usize {
        self.plans.len()
    }

    /// Bytes of the stream's workspace (grown to the largest need of an algorithm so far).
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Bounds the plan cache (at least 1); plans beyond it go to the reaper.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        self.plans.set_capacity(capacity, &self.op)
    }

    /// The raw cuBLASLt handle, for calls cusched does not wrap. Declare their buffer uses on a
    /// [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current
    /// (`scope.cuda_stream()?.context().bind_to_thread()`, in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). cuBLASLt takes the
    /// stream per call: pass that one (`scope.cuda_stream()?.cu_stream()`), and a workspace of your
    /// own (declared on the recorder), not cusched's shared one. Descriptors, layouts and
    /// preferences you make are yours to destroy; cusched's cached plans are not reachable through
    /// the handle. On the simulator it fails with
    /// [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable), as the ops do there.
    pub fn cublaslt_handle(&self) -> Result<cudarc::cublaslt::sys::cublasLtHandle_t> {
        self.handle()
    }

    fn handle(&self) -> Result<calls::Handle> {
        self.raw.as_ref().map(|h| h.get()).ok_or_else(|| self.op.unavailable_on_sim())
    }
}
