//! cuSPARSE's generic API: sparse matrices in CSR, CSC and COO with 32- or 64-bit indices and
//! `f32`, `f64`, `Complex<f32>` or `Complex<f64>` values ([`SparseMatrix`]), dense operands as
//! `GpuRef`s and [`DenseMatrix`] views, and the ops SpMV, SpMM, SpGEMM (also with a reusable
//! structure, [`SpGemmReuse`]), SpSV, SpSM, SDDMM, the conversions (dense ↔ CSR, dense → CSC
//! and COO, CSR ↔ CSC, CSR ↔ COO, and CSR ↔ BSR and dense ↔ BSR with `i32` indices, as
//! cuSPARSE's legacy BSR conversions take) and, on [`SparseVector`]s, axpby, gather and scatter.
//! BSR matrices take part in SpMV and SpMM, Blocked-ELL ones in SpMM.
//!
//! Mixed precision ([`Sparse::spmv_mixed`], [`Sparse::spmm_mixed`]): a matrix may also store
//! `f16`, `bf16` or `i8` ([`SparseStorage`]), read with dense operands of the same type into an
//! output of a wider one, computed in `f32` (or `i32`), as cuSPARSE's SpMV and SpMM tables list:
//! `f16` into `f16` or `f32`, `bf16` into `bf16` or `f32`, `i8` into `i32` (computed in `i32`) or,
//! for SpMV only, `f32` ([`MixedSpmv`], [`MixedSpmm`]), with CSR, CSC or COO and `i32` or `i64`
//! indices. Every other op is bounded by [`SparseValue`], so such a matrix cannot reach it: a
//! compile error, not a runtime refusal.
//!
//! Dense views are column-major, or row-major ([`DenseMatrix::row_major`]) for SpMM, SpSM (`B`
//! and `C` in one order), SDDMM and the dense conversions; SpMM takes `op(B)` too
//! ([`Sparse::spmm_ops`]) and runs strided batches ([`Sparse::spmm_batched`]; a batch of SpMVs
//! is one with one-column `B` and `C`).
//! [`Transpose::Conj`] (the conjugate transpose) goes to SpMV, SpMM, SpSV and SpSM.
//!
//! Not wrapped, and why:
//! - CSC, BSR and Blocked-ELL in SpSV and SpSM: cuSPARSE's triangular solves take CSR and COO
//!   (SpSV also Sliced-ELL, which cusched does not make), so such an `a` is refused there as
//!   [`Error::Unsupported`](crate::Error::Unsupported) naming `a`; convert a BSR one with
//!   [`Sparse::bsr_to_csr`] first.
//! - SpSM with `B` and `C` in different orders: refused as
//!   [`Error::Unsupported`](crate::Error::Unsupported) naming `c`, as only matching orders were
//!   checked on a GPU.
//! - Conjugate transposes of complex `A` or `B` in SDDMM: refused as
//!   [`Error::Unsupported`](crate::Error::Unsupported) naming `op_a` / `op_b`. They failed on an
//!   H100 (CUDA 13.0): cuSPARSE's SDDMM kernel read out of bounds under compute-sanitizer and
//!   returned wrong values. Conjugate the values first and pass [`Transpose::Yes`].
//! - SDDMM into a BSR `C`: refused as [`Error::Unsupported`](crate::Error::Unsupported) naming
//!   `c`. cuSPARSE documents BSR outputs, but its size query refused the ones it was given on an
//!   H100 (CUDA 13.0; it asks for `k` to be a multiple of the block size, and no BSR case has
//!   been seen computing right yet).
//! - The reusable SpGEMM ([`Sparse::spgemm_reuse`]) with `i64` indices: refused as
//!   [`Error::Unsupported`](crate::Error::Unsupported) naming `a`; cuSPARSE's reuse work
//!   estimation failed on an H100 (CUDA 13.0) with "only 32-bit indices are supported". The
//!   one-shot [`Sparse::spgemm`] takes `i64`.
//! - SpGEMM with BSR (or any non-CSR) factors, transposed factors, or `beta C` in the one-shot
//!   [`Sparse::spgemm`]: cuSPARSE's SpGEMM lists CSR, non-transposed, as its limitations, so
//!   other factors are rejected naming the argument; `beta C` needs a `C` whose pattern holds
//!   `A B`'s, which only the reusable structure has ([`Sparse::spgemm_reuse_compute`] takes a
//!   `beta`). Both factors take one index type, `i32` or `i64`, which `C` gets.
//! - BSR and Blocked-ELL in the mixed-precision products: rejected as an invalid `a`; cuSPARSE's
//!   low-precision rows were checked on the general formats only.
//! - The BSR conversions take `i32` indices only: cuSPARSE converts BSR only in its legacy
//!   API, which has no 64-bit form.
//!
//! Every op validates its arguments (lengths, shapes that chain, index widths the op takes),
//! records its uses on the stream's recorder, and enqueues. Descriptors are made once per
//! matrix or vector and cached (keyed on the buffers' identities and shapes); external buffers
//! are sized by the library's own `_bufferSize` query, cached per op and operands, and taken
//! from the stream's shared workspace, declared read-write. Descriptors and analyses are the
//! library's objects: evicted ones, and all of them when the state is dropped, go to the reaper.
//! A cached triangular-solve analysis holds for the matrix it was made from: a solve that
//! finds `A`'s values alone written since (checked while it holds its buffers) hands the
//! analysis the new values (cuSPARSE's `updateMatrix`), one that finds its offsets or indices
//! written analyses `A` anew. Making a matrix's first analysis ends the one-stream mode
//! described below, so that writes on that stream are seen too.
//!
//! Some ops block the calling thread by the library's nature, documented on each:
//! [`Sparse::spgemm`], [`Sparse::spgemm_reuse`] (making the reusable structure; its
//! [`compute`](Sparse::spgemm_reuse_compute) steps never block), the dense → sparse conversions
//! ([`Sparse::dense_to_csr`], [`dense_to_csc`](Sparse::dense_to_csc),
//! [`dense_to_coo`](Sparse::dense_to_coo), [`dense_to_bsr`](Sparse::dense_to_bsr)) and
//! [`Sparse::csr_to_bsr`] learn the result's number of nonzeros (or blocks) only from a phase
//! that cuSPARSE finishes on the GPU before returning it to the host. Their later launches
//! fill an output sized from that count, so they must read the inputs the count read: a write
//! of one (a sparse input's offsets or indices, a dense input) that another thread commits
//! between the launches fails the op with [`Error::InputChanged`](crate::Error::InputChanged)
//! before the fill is enqueued (order that write before or after the op, or retry it). On a
//! device that has run work on one stream only, they first end the mode in which launches
//! there skip the buffers' use states (as a launch on a second stream does), so that writes on
//! their own stream are seen too.
//!
//! Structure validation that costs a pass over the data is [`SparseMatrix::check`], not part of
//! every op.
//!
//! On the simulator ([`Device::sim`](crate::Device::sim)) every op computes its result on the
//! CPU, in plain loops, as a simulated kernel on the op's stream under the same declared uses
//! (the hazard checker sees its accesses): the same values as cuSPARSE to the type's rounding
//! (Blocked-ELL SpMM in `f32` is exact there, where the GPU rounds products as TF32), the same
//! output structures (SpGEMM's sorted column indices, every structural product kept), and the
//! same blocking steps (SpGEMM, its reusable form, dense → sparse and CSR → BSR wait for the
//! count before sizing the output). No descriptors, analyses or workspace are made there
//! ([`descriptors_made`](Sparse::descriptors_made) stays 0; [`analyses_made`](Sparse::analyses_made)
//! counts the analyses the GPU would make, by its rules, so that tests of the count run without
//! a GPU), and a structure that indexes outside its matrix fails the op's completion with
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the array, where cuSPARSE
//! would read out of bounds.
//!
//! Files: this one holds the public types and the state; `descr` the descriptor caches and
//! workspace-size keys, `mixed` the mixed-precision products, `convert` and `blocks` the
//! conversions, `args` what every op shares (host scalars, recording, operand checks), `sim` the
//! ops' host computation on the simulator.

mod args;
mod blocks;
mod cache;
mod calls;
mod convert;
mod descr;
mod matrix;
mod mixed;
mod ops;
mod phases;
mod reuse;
mod sim;
mod solve_many;
mod spgemm;
mod vector;

pub use matrix::{
    DenseMatrix, DenseOrder, Format, IndexKind, MixedSpmm, MixedSpmv, SparseIndex, SparseMatrix, SparseStorage,
    SparseValue,
};
pub use reuse::SpGemmReuse;
pub use vector::SparseVector;

use super::workspace::Workspace;
use super::{Library, OpStream, StreamLibrary};
use crate::error::Result;
use crate::libs::object::Owned;
use cache::Cache;
use calls::{DnMat, DnVec, SpMat, SpVec};
use std::sync::Arc;

use args::{not_in_matrix, output_access, output_access_if, record_matrix, takes, HostScalars};
use descr::{
    after_solve, analysed_inputs, analysis_step, dense_words, mat_key, mat_words, updatable, After, Analysis, DenseKey,
    ManyAnalysis, MatKey, SpVecKey, Step,
};

/// Whether a sparse operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `op(A) = A`.
    #[default]
    No,
    /// `op(A) = Aᵀ`.
    Yes,
    /// `op(A) = Aᴴ`, the conjugate transpose; on real values the same as [`Yes`](Self::Yes).
    Conj,
}

impl Transpose {
    /// Whether the operand is used transposed, plainly or conjugated.
    pub(in crate::libs::sparse) fn flips(self) -> bool {
        self != Transpose::No
    }

    /// What cuSPARSE is handed for values of `T`: [`Conj`](Self::Conj) on real values is a
    /// plain transpose (the library documents the conjugate transpose for complex types).
    pub(in crate::libs::sparse) fn on<T: SparseValue>(self) -> Transpose {
        if self == Transpose::Conj && !matrix::is_complex::<T>() {
            Transpose::Yes
        } else {
            self
        }
    }

    /// `v` as `op` reads it: conjugated under [`Conj`](Self::Conj).
    pub(in crate::libs::sparse) fn value<T: SparseValue>(self, v: T) -> T {
        if self == Transpose::Conj {
            v.conj()
        } else {
            v
        }
    }
}

/// A strided batch of SpMM products `C_i = alpha op(A_i) B_i + beta C_i`, `i < count`: each
/// operand's `i`-th matrix starts `i` strides (in elements) after its first, which is the
/// matrix or view handed to [`Sparse::spmm_batched`]. A stride of 0 shares that operand across
/// the batch (not for `C`, whose matrices must not overlap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SpmmBatch {
    /// Products in the batch (at least 1).
    pub count: usize,
    /// Between `A`'s row offsets (CSR: 0, the batch shares them) or row indices (COO: equal to
    /// `a_entries`).
    pub a_offsets: usize,
    /// Between `A`'s column indices and values.
    pub a_entries: usize,
    /// Between the `B`s.
    pub b: usize,
    /// Between the `C`s.
    pub c: usize,
}

/// Which triangle of the matrix a triangular solve reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fill {
    /// The lower triangle (entries above the diagonal are ignored).
    #[default]
    Lower,
    /// The upper triangle.
    Upper,
}

/// A triangular solve's shape: the triangle, whether the diagonal is taken as all ones, and
/// whether the matrix is used transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Triangle {
    /// The triangle read.
    pub fill: Fill,
    /// Whether the diagonal is implicitly 1 (and not read).
    pub unit_diagonal: bool,
    /// Whether `op(A) = Aᵀ`.
    pub transpose: Transpose,
}

/// The library objects a [`Sparse`] state holds, destroyed through the reaper.
pub(crate) struct SparseObjects {
    // Field order is drop order: descriptors before the handle.
    reuses: Vec<reuse::ReuseState>,
    analyses: Vec<Analysis>,
    many: Vec<ManyAnalysis>,
    spvecs: Vec<Owned<SpVec>>,
    mats: Vec<Owned<SpMat>>,
    vecs: Vec<Owned<DnVec>>,
    dense: Vec<Owned<DnMat>>,
    handle: Option<Owned<calls::Handle>>,
}

/// A stream's cuSPARSE handle, descriptor caches and workspace. Get it from
/// [`crate::Handles::sparse`].
pub struct Sparse {
    op: OpStream,
    raw: Option<Owned<calls::Handle>>,
    mats: Cache<MatKey, Owned<SpMat>>,
    vecs: Cache<DenseKey, Owned<DnVec>>,
    dense: Cache<DenseKey, Owned<DnMat>>,
    analyses: Cache<(MatKey, Triangle, u8), Analysis>,
    many: Cache<(MatKey, Triangle, [usize; 4]), ManyAnalysis>,
    /// On the simulator, in place of `analyses` and `many`: what each analysis the GPU would
    /// cache was made from, so that the simulator counts analyses as the GPU does.
    sim_analyses: Cache<(MatKey, Triangle, u8), Arc<phases::SameInputs>>,
    sim_many: Cache<(MatKey, Triangle, [usize; 4]), Arc<phases::SameInputs>>,
    spvecs: Cache<SpVecKey, Owned<SpVec>>,
    reuses: Vec<reuse::ReuseState>,
    sizes: Cache<(&'static str, Vec<u64>), usize>,
    work: Workspace,
}

impl StreamLibrary for Sparse {
    const LIBRARY: Library = Library {
        name: "cuSPARSE (libcusparse)",
        hint:
            "install the CUDA toolkit's cuSPARSE library (libcusparse.so.12: CUDA 12 and CUDA 13 both ship cuSPARSE 12)",
        present: calls::is_present,
        objects: "cuSPARSE descriptors and handle",
    };
    type Objects = SparseObjects;

    fn create(op: OpStream) -> Result<Sparse> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let s = op.bound_stream()?;
            // SAFETY: the stream is live in the bound context and outlives the handle: the
            // device keeps its streams until every library state is gone.
            Some(unsafe { calls::create_handle(s.cu_stream()) }?)
        };
        Ok(Sparse {
            op,
            raw,
            mats: Cache::new(64, "evicted cuSPARSE matrix descriptors"),
            vecs: Cache::new(64, "evicted cuSPARSE vector descriptors"),
            dense: Cache::new(32, "evicted cuSPARSE dense-matrix descriptors"),
            analyses: Cache::new(16, "evicted cuSPARSE triangular-solve analyses"),
            many: Cache::new(16, "evicted cuSPARSE multi-right-hand-side solve analyses"),
            sim_analyses: Cache::new(16, "the simulator's evicted triangular-solve analyses"),
            sim_many: Cache::new(16, "the simulator's evicted multi-right-hand-side solve analyses"),
            spvecs: Cache::new(64, "evicted cuSPARSE sparse-vector descriptors"),
            reuses: Vec::new(),
            sizes: Cache::new(256, "cuSPARSE buffer sizes"),
            work: Workspace::default(),
        })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<SparseObjects> {
        let objects = SparseObjects {
            reuses: std::mem::take(&mut self.reuses),
            analyses: self.analyses.take_all(),
            many: self.many.take_all(),
            spvecs: self.spvecs.take_all(),
            mats: self.mats.take_all(),
            vecs: self.vecs.take_all(),
            dense: self.dense.take_all(),
            handle: self.raw.take(),
        };
        let empty = objects.handle.is_none()
            && objects.analyses.is_empty()
            && objects.reuses.is_empty()
            && objects.many.is_empty()
            && objects.spvecs.is_empty()
            && objects.mats.is_empty()
            && objects.vecs.is_empty()
            && objects.dense.is_empty();
        (!empty).then_some(objects)
    }
}

impl std::fmt::Debug for Sparse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sparse({}, {} matrix descriptors cached)", self.op.stream, self.mats.len())
    }
}

impl Sparse {
    /// Refuses `what`, an op that makes its output matrix, on a stream a graph recording holds
    /// ([`Error::Recording`](crate::Error::Recording), which abandons the recording), before
    /// anything is recorded. Most of them size the output from a count the GPU makes: recorded,
    /// the count never runs, the host sizes the output from nothing, and every replay writes
    /// the real count's entries past its end.
    pub(super) fn refuse_in_graph(&self, what: &str) -> Result<()> {
        self.op.refuse_recording_as(
            what,
            "run it outside the recording (before recording, or between replays: a replay is one tracked op, ordered against it) and record the ops that use its output",
        )
    }
}

impl Sparse {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// Descriptors made since the handle was created (sparse, vector and dense-matrix; a
    /// cache hit makes none).
    pub fn descriptors_made(&self) -> u64 {
        self.mats.made() + self.vecs.made() + self.dense.made() + self.spvecs.made()
    }

    /// Triangular-solve analyses made so far (SpSV: one per matrix and [`Triangle`]; SpSM: one
    /// per matrix, [`Triangle`] and right-hand-side shape; reused after, also after a write of
    /// the matrix's values alone, which the analysis takes in; made anew after a write of its
    /// offsets or indices, or once evicted). The simulator makes none but counts the ones the
    /// GPU would make, by the same rules.
    pub fn analyses_made(&self) -> u64 {
        self.analyses.made() + self.many.made() + self.sim_analyses.made() + self.sim_many.made()
    }

    /// Bytes of the shared workspace.
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Drops the cached descriptors and analyses of `a`, to give back their memory (an
    /// analysis keeps a buffer on the device) once `a` is no longer solved with. Solves keep
    /// up with a tracked write of any of `a`'s arrays by themselves (the analysis takes new
    /// values, or is made anew for a new structure); call this after a write cusched does not
    /// see (through a raw pointer or raw cudarc), so that the next solve analyses `a` anew.
    pub fn forget<T: SparseStorage, I: SparseIndex>(&mut self, a: &SparseMatrix<T, I>) {
        let key = mat_key(a);
        self.analyses.forget(&self.op, |(k, _, _)| *k == key);
        self.many.forget(&self.op, |(k, _, _)| *k == key);
        self.sim_analyses.forget(&self.op, |(k, _, _)| *k == key);
        self.sim_many.forget(&self.op, |(k, _, _)| *k == key);
        self.mats.forget(&self.op, |k| *k == key);
    }

    /// The raw cuSPARSE handle, for calls cusched does not wrap. Declare their buffer uses on a
    /// [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current
    /// (`scope.cuda_stream()?.context().bind_to_thread()`, in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). Leave the handle's
    /// stream and pointer mode (host, which cusched's ops pass their scalars in) as they are;
    /// external buffers come from your own allocations (declared on the recorder), not cusched's
    /// shared workspace, and descriptors you make are yours to destroy. On the simulator it fails
    /// with [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable), as the ops do there.
    pub fn cusparse_handle(&self) -> Result<cudarc::cusparse::sys::cusparseHandle_t> {
        self.handle()
    }
}
