//! cuTENSOR 2: contractions in Einstein notation, reductions, permutations, and elementwise
//! ops of two and three operands with their unary and binary operators, in f32, f64, f16 and
//! bf16 (the half types compute in f32), with TF32 for f32 contractions, and in `Complex<f32>`
//! (computing in f32, or TF32 for contractions) and `Complex<f64>` (in f64).
//!
//! Complex data follow cuTENSOR 2's tables: their operands take only [`UnaryOp::Identity`]
//! and [`UnaryOp::Conj`] (contractions included, which apply no operator to real operands),
//! and complex numbers have no order, so [`BinaryOp::Max`] and [`BinaryOp::Min`] neither fold
//! nor combine them. Such ops are refused with
//! [`Error::Unsupported`](crate::Error::Unsupported) naming the argument, before anything is
//! recorded. Scalars (`alpha`, `beta`, `gamma`) are the element type's
//! [`TensorElement::Scalar`]: `f64` for real data, `Complex<f64>` for complex data, handed to
//! cuTENSOR in the op's scalar type (`CUDA_C_32F` / `CUDA_C_64F` for complex data).
//!
//! Operands are [`TensorRef`]s: a buffer with one extent (and stride) per mode. The ops name
//! their modes with a spec, one character per mode: `"bhqd,bhkd->bhqk"` contracts `d` of two
//! attention tensors into scores. Strides left out mean packed in row-major order: the last
//! mode is contiguous, as in NumPy.
//!
//! Plans are cached per full description (op, operators, element and compute types, every
//! operand's modes, extents, strides and alignment, JIT). Plan preferences default to no JIT
//! compilation; [`Tensor::set_jit`] turns it on for later plans. Workspace comes from the
//! stream's shared workspace, sized by cuTENSOR's own estimate and declared on the op's
//! recorder. The handle, plans and descriptors are destroyed by the reaper.
//!
//! On the simulator every op computes its result on the CPU, on the op's simulated stream,
//! with plain loops over the modes' index space: inputs read exactly as f64 (complex ones as
//! pairs), evaluated in f64 (complex f64 arithmetic for complex data),
//! each stored element rounded once to the element type; TF32 contractions round their inputs
//! to TF32 first. Results match the GPU's to the type's tolerance. The hazard checker sees the
//! op's accesses against its declared uses, as for any simulated kernel. No plans are made
//! there and no workspace is taken ([`Tensor::plans_made`] stays 0), and
//! [`Tensor::cutensor_handle`] has no handle to give.
//!
//! cuTENSOR is loaded at run time as `libcutensor.so` (a link to `libcutensor.so.2`), found on
//! the library path. Without it every op on a CUDA device fails with
//! [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable) naming `libcutensor.so.2`.

mod calls;
mod launch;
mod modes;
mod ops;
mod sim;
mod types;

pub use ops::{Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction};
use types::{compute_for, cuda_type};
pub use types::{BinaryOp, Compute, TensorElement, TensorRef, UnaryOp};

use super::dtype::CudaType;
use super::plan_cache::PlanCache;
use super::workspace::Workspace;
use super::{Library, OpStream, StreamLibrary};
use crate::error::Result;
use calls::{RawHandle, RawPlan};

/// Which op a plan is for, with its binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// Operands `[a, b, d]` (`d` is also `C`).
    Contraction,
    /// Operands `[a, d]` (`d` is also `C`), folding with the operator.
    Reduction(BinaryOp),
    /// Operands `[a, b]`.
    Permutation,
    /// Operands `[a, d]` (`C` has `d`'s descriptor), combining with the operator.
    Binary(BinaryOp),
    /// Operands `[a, b, d]` (`C` has `d`'s descriptor), combining `a` and `b`, then `c`.
    Trinary(BinaryOp, BinaryOp),
}

impl Kind {
    fn create_call(self) -> &'static str {
        match self {
            Kind::Contraction => "cutensorCreateContraction",
            Kind::Reduction(_) => "cutensorCreateReduction",
            Kind::Permutation => "cutensorCreatePermutation",
            Kind::Binary(_) => "cutensorCreateElementwiseBinary",
            Kind::Trinary(..) => "cutensorCreateElementwiseTrinary",
        }
    }
}

/// One tensor descriptor of a plan: the layout and the alignment (bytes) its buffers share.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OperandKey {
    layout: modes::Layout,
    align: u32,
}

/// Everything a plan depends on: the plan cache's key.
#[derive(Clone, Debug, PartialEq)]
struct PlanKey {
    kind: Kind,
    dtype: CudaType,
    compute: Compute,
    jit: bool,
    /// The descriptors, in the order [`Kind`] lists.
    operands: Vec<OperandKey>,
    /// The unary operators of the inputs, in spec order.
    unary: Vec<UnaryOp>,
}

/// What the reaper destroys: the plans, then the handle that made them.
pub(crate) struct Objects {
    _plans: Vec<RawPlan>,
    _handle: RawHandle,
}

/// A stream's cuTENSOR handle, plans and workspace. Get it from [`crate::Handles::tensor`].
pub struct Tensor {
    op: OpStream,
    raw: Option<RawHandle>,
    plans: PlanCache<PlanKey, RawPlan>,
    work: Workspace,
    jit: bool,
}

/// The name errors give: the file to install is part of it.
const NAME: &str = "cuTENSOR (libcutensor.so.2)";

impl StreamLibrary for Tensor {
    const LIBRARY: Library = Library {
        name: NAME,
        hint: "install cuTENSOR 2 (libcutensor.so.2, e.g. from the cutensor-cu13 wheel), put a \
               libcutensor.so link to it in a folder on LD_LIBRARY_PATH, and make sure the \
               libcublasLt.so.13 it links against is found too (tools/carry-cutensor does all three)",
        present: calls::is_present,
        objects: "a cuTENSOR handle and plans",
    };
    type Objects = Objects;

    fn create(op: OpStream) -> Result<Tensor> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            op.bound_stream()?;
            Some(RawHandle::create()?)
        };
        Ok(Tensor {
            op,
            raw,
            plans: PlanCache::new(32, "an evicted cuTENSOR plan"),
            work: Workspace::default(),
            jit: false,
        })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Objects> {
        let handle = self.raw.take()?;
        Some(Objects { _plans: self.plans.take_all().unwrap_or_default(), _handle: handle })
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.plans.capacity())
    }
}

impl Tensor {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// Plans currently cached.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    /// Plans made since the handle was created (a cache hit makes none).
    pub fn plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Bytes of the shared workspace (the largest plan's need so far).
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Bounds the plan cache (at least 1); the least recently used plans beyond it are freed.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        self.plans.set_capacity(capacity, &self.op)
    }

    /// Whether later plans may JIT-compile kernels for their exact layout (off by default:
    /// the first use of such a plan compiles for seconds, later ones can run faster).
    pub fn set_jit(&mut self, jit: bool) {
        self.jit = jit;
    }

    /// The raw cuTENSOR handle, for calls cusched does not wrap. Declare their buffer uses on a
    /// [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current
    /// (`scope.cuda_stream()?.context().bind_to_thread()`, in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). cuTENSOR takes the
    /// stream per call: pass that one (`scope.cuda_stream()?.cu_stream()`), and a workspace of your
    /// own (declared on the recorder), not cusched's shared one. Plans and descriptors you make are
    /// yours to destroy. On the simulator, which has no cuTENSOR (its ops compute on the host),
    /// it fails with [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable).
    pub fn cutensor_handle(&self) -> Result<cudarc::cutensor::sys::cutensorHandle_t> {
        self.raw.as_ref().map(|h| h.get()).ok_or_else(|| self.op.unavailable_on_sim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_library_the_error_names_libcutensor_so_2() {
        let lib = <Tensor as StreamLibrary>::LIBRARY;
        let msg = crate::libs::unavailable::<Tensor>().to_string();
        assert!(msg.contains("libcutensor.so.2"), "{msg}");
        assert!(lib.hint.contains("libcutensor.so.2") && lib.hint.contains("LD_LIBRARY_PATH"), "{}", lib.hint);
    }

    #[test]
    fn compute_types_match_the_data() {
        assert_eq!(compute_for::<f32>(None, true).unwrap(), Compute::F32);
        assert_eq!(compute_for::<f32>(Some(Compute::Tf32), true).unwrap(), Compute::Tf32);
        assert!(compute_for::<f32>(Some(Compute::Tf32), false).is_err());
        assert!(compute_for::<f32>(Some(Compute::F64), true).is_err());
        assert_eq!(compute_for::<f64>(None, false).unwrap(), Compute::F64);
        assert!(compute_for::<f64>(Some(Compute::F32), true).is_err());
        assert_eq!(compute_for::<half::f16>(None, true).unwrap(), Compute::F32);
        assert_eq!(compute_for::<half::bf16>(Some(Compute::Bf16), false).unwrap(), Compute::Bf16);
        assert!(compute_for::<half::bf16>(Some(Compute::F16), false).is_err());
        assert_eq!(cuda_type::<half::bf16>(), CudaType::R16BF);
        use crate::memory::Complex;
        assert_eq!(cuda_type::<Complex<f32>>(), CudaType::C32F);
        assert_eq!(cuda_type::<Complex<f64>>(), CudaType::C64F);
        assert_eq!(compute_for::<Complex<f32>>(None, false).unwrap(), Compute::F32);
        assert_eq!(compute_for::<Complex<f32>>(Some(Compute::Tf32), true).unwrap(), Compute::Tf32);
        assert!(compute_for::<Complex<f32>>(Some(Compute::Tf32), false).is_err());
        assert_eq!(compute_for::<Complex<f64>>(None, true).unwrap(), Compute::F64);
        assert!(compute_for::<Complex<f64>>(Some(Compute::Tf32), true).is_err());
    }
}
