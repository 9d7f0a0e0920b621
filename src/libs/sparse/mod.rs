//! cuSPARSE's generic API: sparse matrices in CSR, CSC and COO with 32- or 64-bit indices and
//! `f32`, `f64`, `Complex<f32>` or `Complex<f64>` values ([`SparseMatrix`]), dense operands as
//! `GpuRef`s and column-major [`DenseMatrix`] views, and the ops SpMV, SpMM, SpGEMM (also with
//! a reusable structure, [`SpGemmReuse`]), SpSV, SpSM, SDDMM, the conversions (dense ↔ CSR,
//! CSR ↔ CSC) and, on [`SparseVector`]s, axpby, gather and scatter. BSR matrices take part in
//! SpMV and SpMM, Blocked-ELL ones in SpMM.
//!
//! Every op validates its arguments (lengths, shapes that chain, index widths the op takes),
//! records its uses on the stream's recorder, and enqueues. Descriptors are made once per
//! matrix or vector and cached (keyed on the buffers' identities and shapes); external buffers
//! are sized by the library's own `_bufferSize` query, cached per op and operands, and taken
//! from the stream's shared workspace, declared read-write. Descriptors and analyses are the
//! library's objects: evicted ones, and all of them when the state is dropped, go to the reaper.
//!
//! Three ops block the calling thread by the library's nature, documented on each:
//! [`Sparse::spgemm`], [`Sparse::spgemm_reuse`] (making the reusable structure; its
//! [`compute`](Sparse::spgemm_reuse_compute) steps never block) and [`Sparse::dense_to_csr`]
//! learn the result's number of nonzeros only from a phase that cuSPARSE finishes on the GPU
//! before returning it to the host.
//!
//! Structure validation that costs a pass over the data is [`SparseMatrix::check`], not part of
//! every op.

mod cache;
mod calls;
mod convert;
mod matrix;
mod ops;
mod reuse;
mod solve_many;
mod spgemm;
mod vector;

pub use matrix::{DenseMatrix, Format, IndexKind, SparseIndex, SparseMatrix, SparseValue};
pub use reuse::SpGemmReuse;
pub use vector::SparseVector;

use super::workspace::Workspace;
use super::{dptr, Library, OpStream, StreamLibrary};
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::object::Owned;
use crate::memory::{Element, GpuRef};
use cache::Cache;
use calls::{DnMat, DnVec, SpMat, SpVec};
use matrix::ValueType;

/// Whether a sparse operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `op(A) = A`.
    #[default]
    No,
    /// `op(A) = Aᵀ`.
    Yes,
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

/// What a sparse matrix descriptor is made for.
#[derive(Clone, Debug, PartialEq)]
struct MatKey {
    format: Format,
    shape: [usize; 3],
    ids: [u64; 3],
    index: IndexKind,
    value: CudaType,
    block: usize,
}

/// What a dense descriptor is made for: a buffer, its shape (`[n, 1, n]` for a vector) and type.
#[derive(Clone, Debug, PartialEq)]
struct DenseKey {
    id: u64,
    shape: [usize; 3],
    value: CudaType,
}

/// A cached triangular-solve analysis: the descriptor and the buffer it keeps using.
struct Analysis {
    descr: Owned<calls::SpSv>,
    buffer: GpuRef<u8>,
}

/// A cached analysis of a triangular solve with several right-hand sides.
struct ManyAnalysis {
    descr: Owned<calls::SpSm>,
    buffer: GpuRef<u8>,
}

/// What a sparse-vector descriptor is made for: size, nonzeros, buffer ids and types.
#[derive(Clone, Debug, PartialEq)]
struct SpVecKey {
    shape: [usize; 2],
    ids: [u64; 2],
    index: IndexKind,
    value: CudaType,
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
    many: Cache<(MatKey, Triangle, [usize; 3]), ManyAnalysis>,
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
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::StreamId {
        self.op.stream
    }

    /// Descriptors made since the handle was created (sparse, vector and dense-matrix; a
    /// cache hit makes none).
    pub fn descriptors_made(&self) -> u64 {
        self.mats.made() + self.vecs.made() + self.dense.made() + self.spvecs.made()
    }

    /// Triangular-solve analyses made so far (SpSV: one per matrix and [`Triangle`]; SpSM: one
    /// per matrix, [`Triangle`] and right-hand-side shape; reused after).
    pub fn analyses_made(&self) -> u64 {
        self.analyses.made() + self.many.made()
    }

    /// Bytes of the shared workspace.
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Drops the cached descriptors and analyses of `a`. Call it after changing `a`'s values
    /// in place when it was used in a triangular solve: the analysis depends on them.
    pub fn forget<T: SparseValue, I: SparseIndex>(&mut self, a: &SparseMatrix<T, I>) {
        let key = mat_key(a);
        self.analyses.forget(&self.op, |(k, _, _)| *k == key);
        self.many.forget(&self.op, |(k, _, _)| *k == key);
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

    fn handle(&self) -> Result<calls::H> {
        self.raw.as_ref().map(|h| h.get().0).ok_or_else(|| self.op.unavailable_on_sim())
    }

    /// The descriptor of `a` (made on first use).
    fn mat<T: SparseValue, I: SparseIndex>(&mut self, a: &SparseMatrix<T, I>) -> Result<SpMat> {
        let key = mat_key(a);
        let parts = calls::SpMatParts {
            format: a.format,
            rows: a.rows as i64,
            cols: a.cols as i64,
            nnz: a.nnz as i64,
            major: dptr(&a.major)?,
            minor: dptr(&a.minor)?,
            values: dptr(&a.values)?,
            index: I::KIND,
            value: T::CUDA_TYPE,
            block: a.block as i64,
        };
        // SAFETY: the matrix's buffers were checked against its sizes when it was made, and are
        // live device buffers of this context (recorded on this op, so not stale).
        Ok(self.mats.get_or_make(key, |_| unsafe { calls::create_sp_mat(&parts) })?.get())
    }

    /// The descriptor of the first `n` elements of `x`.
    fn vec<T: SparseValue>(&mut self, x: &GpuRef<T>, n: usize) -> Result<DnVec> {
        let key = DenseKey { id: x.id(), shape: [n, 1, n], value: T::CUDA_TYPE };
        let ptr = dptr(x)?;
        // SAFETY: `x` holds at least `n` elements (validated) and is live in this context.
        Ok(self.vecs.get_or_make(key, |_| unsafe { calls::create_dn_vec(n as i64, ptr, T::CUDA_TYPE) })?.get())
    }

    /// The descriptor of the sparse vector `x` (made on first use).
    fn spvec<T: SparseValue, I: SparseIndex>(&mut self, x: &SparseVector<T, I>) -> Result<SpVec> {
        let key = SpVecKey {
            shape: [x.size, x.nnz],
            ids: [x.indices.id(), x.values.id()],
            index: I::KIND,
            value: T::CUDA_TYPE,
        };
        let (idx, val) = (dptr(&x.indices)?, dptr(&x.values)?);
        let (size, nnz) = (x.size as i64, x.nnz as i64);
        // SAFETY: the vector's buffers were checked against its sizes when it was made, and are
        // live device buffers of this context.
        Ok(self
            .spvecs
            .get_or_make(key, |_| unsafe { calls::create_sp_vec(size, nnz, idx, val, I::KIND, T::CUDA_TYPE) })?
            .get())
    }

    /// The descriptor of the dense view `m` with leading dimension `ld`.
    fn dense<T: SparseValue>(&mut self, m: &DenseMatrix<'_, T>, ld: i64) -> Result<DnMat> {
        let key = DenseKey { id: m.buf.id(), shape: [m.rows, m.cols, ld as usize], value: T::CUDA_TYPE };
        let ptr = dptr(m.buf)?;
        let (r, c) = (m.rows as i64, m.cols as i64);
        // SAFETY: the view was checked against its buffer, live in this context.
        Ok(self.dense.get_or_make(key, |_| unsafe { calls::create_dn_mat(r, c, ld, ptr, T::CUDA_TYPE) })?.get())
    }

    /// The external buffer size of op `name` on `operands`, from `query` on first use. The key
    /// holds every argument of the library's size query that can change the size: the op's
    /// options, every field of each operand's descriptor ([`mat_words`], [`dense_words`]) and
    /// the scalars; the handle, compute type (the value type) and algorithm are fixed per state
    /// and op.
    fn size(&mut self, name: &'static str, operands: Vec<u64>, query: impl FnOnce() -> Result<usize>) -> Result<usize> {
        Ok(*self.sizes.get_or_make((name, operands), |_| query())?)
    }

    /// Retires what the caches hold beyond capacity; called after each op's enqueue.
    fn trim(&mut self) {
        self.mats.trim(&self.op);
        self.vecs.trim(&self.op);
        self.dense.trim(&self.op);
        self.analyses.trim(&self.op);
        self.many.trim(&self.op);
        self.spvecs.trim(&self.op);
        self.sizes.trim(&self.op);
        reuse::trim(&self.op, &mut self.reuses);
    }
}

fn mat_key<T: SparseValue, I: SparseIndex>(a: &SparseMatrix<T, I>) -> MatKey {
    MatKey {
        format: a.format,
        shape: [a.rows, a.cols, a.nnz],
        ids: [a.major.id(), a.minor.id(), a.values.id()],
        index: I::KIND,
        value: T::CUDA_TYPE,
        block: a.block,
    }
}

/// A host value aligned as CUDA's vector types: `cuDoubleComplex` is a 16-byte aligned
/// `double2`, and cuSPARSE reads host scalars of that type with aligned loads, which fault on
/// a `Complex<f64>` (8-byte aligned) that happens to sit at 8 mod 16.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Aligned<T>(T);

/// The host scalars `alpha` and `beta` of an op, kept where the library may read them as its
/// own types. Make one per op, and keep it in place (not moved) while calls use [`Self::raw`].
struct HostScalars<T> {
    alpha: Aligned<T>,
    beta: Aligned<T>,
}

impl<T: SparseValue> HostScalars<T> {
    fn new(alpha: T, beta: T) -> Self {
        HostScalars { alpha: Aligned(alpha), beta: Aligned(beta) }
    }

    /// The pointers the call layer passes: valid, and 16-byte aligned, while `self` stays put.
    fn raw(&self) -> calls::Scalars {
        calls::Scalars {
            alpha: (&self.alpha.0 as *const T).cast(),
            beta: (&self.beta.0 as *const T).cast(),
            t: T::CUDA_TYPE,
        }
    }

    /// The scalars' bytes, for a workspace-size key: the library's size query takes them.
    fn words(&self) -> [u64; 4] {
        let ([a0, a1], [b0, b1]) = (matrix::value_bits(self.alpha.0), matrix::value_bits(self.beta.0));
        [a0, a1, b0, b1]
    }
}

/// Every field of a sparse operand's descriptor, as workspace-size key words.
fn mat_words(k: &MatKey) -> [u64; 10] {
    let [r, c, n] = k.shape;
    let [i0, i1, i2] = k.ids;
    [k.format as u64, r as u64, c as u64, n as u64, i0, i1, i2, k.index as u64, k.value as u64, k.block as u64]
}

/// Every field of a dense operand's descriptor (`[n, 1, n]` for a vector), as key words.
fn dense_words(id: u64, shape: [usize; 3], value: CudaType) -> [u64; 5] {
    [id, shape[0] as u64, shape[1] as u64, shape[2] as u64, value as u64]
}

/// `Write` when `beta` is zero (the output is not read), else `ReadWrite`.
fn output_access<T: SparseValue>(beta: T) -> crate::track::Access {
    if beta == T::zero() {
        crate::track::Access::Write
    } else {
        crate::track::Access::ReadWrite
    }
}

/// Records the three buffers of `a` as read.
fn record_matrix<T: SparseValue, I: SparseIndex>(
    rec: &mut crate::recorder::LaunchRecorder,
    arg: [&'static str; 3],
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    use crate::track::Access::Read;
    // Blocked-ELL keeps its one index array in both slots.
    if a.major.id() != a.minor.id() {
        super::record(rec, arg[0], &a.major, Read)?;
    }
    super::record(rec, arg[1], &a.minor, Read)?;
    super::record(rec, arg[2], &a.values, Read)
}

/// Rejects an output that is one of `a`'s buffers.
fn not_in_matrix<T: SparseValue, I: SparseIndex, U: Element>(
    arg: &'static str,
    out: &GpuRef<U>,
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    if [a.major.id(), a.minor.id(), a.values.id()].contains(&out.id()) {
        return Err(crate::Error::invalid(arg, "must not be one of the sparse matrix's own buffers"));
    }
    Ok(())
}

/// Rejects a matrix whose format `op` does not take, or a blocked one used transposed (the
/// blocked kernels multiply by `A` as stored).
fn takes<T: SparseValue, I: SparseIndex>(
    op: &str,
    allowed: &[Format],
    t: Transpose,
    a: &SparseMatrix<T, I>,
) -> Result<()> {
    if !allowed.contains(&a.format) {
        return Err(crate::Error::invalid("a", format!("is {:?}; {op} takes {allowed:?}", a.format)));
    }
    if matches!(a.format, Format::Bsr | Format::BlockedEll) && t == Transpose::Yes {
        return Err(crate::Error::invalid("a", format!("is {:?}; {op} takes it untransposed only", a.format)));
    }
    // cuSPARSE's Blocked-ELL kernels take 32-bit indices and real f32 / f64 values only.
    if a.format == Format::BlockedEll
        && (I::KIND != IndexKind::I32 || !matches!(T::CUDA_TYPE, CudaType::R32F | CudaType::R64F))
    {
        return Err(crate::Error::invalid(
            "a",
            format!("is Blocked-ELL with {:?} indices and {:?} values; cuSPARSE multiplies Blocked-ELL with I32 indices and f32 or f64 values only", I::KIND, T::CUDA_TYPE),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Complex;

    /// A `Complex<f64>` may sit at 8 mod 16; the pointers handed to cuSPARSE never do.
    #[test]
    fn host_scalars_are_16_byte_aligned_wherever_the_values_were() {
        #[repr(C, align(16))]
        struct Misplaced {
            _pad: f64,
            v: [Complex<f64>; 2],
        }
        let m = Misplaced { _pad: 0.0, v: [Complex::new(1.0, 2.0), Complex::new(3.0, 4.0)] };
        assert_eq!(&m.v[0] as *const _ as usize % 16, 8, "the setup places the values at 8 mod 16");
        let sc = HostScalars::new(m.v[0], m.v[1]);
        let raw = sc.raw();
        assert_eq!(raw.alpha as usize % 16, 0);
        assert_eq!(raw.beta as usize % 16, 0);
        // SAFETY: the pointers point into `sc`, alive and in place, at `Complex<f64>` values.
        let (a, b) = unsafe { (*(raw.alpha as *const Complex<f64>), *(raw.beta as *const Complex<f64>)) };
        assert_eq!((a, b), (m.v[0], m.v[1]));
        assert_eq!(raw.t, CudaType::C64F);
    }

    /// A workspace-size key holds every descriptor field and the scalars.
    #[test]
    fn size_key_words_cover_every_descriptor_field() {
        let k = MatKey {
            format: Format::Csr,
            shape: [2, 3, 4],
            ids: [5, 6, 7],
            index: IndexKind::I64,
            value: CudaType::C64F,
            block: 0,
        };
        let w = mat_words(&k);
        let mut other = k.clone();
        other.shape[0] = 64;
        assert_ne!(w, mat_words(&other), "rows");
        other = k.clone();
        other.value = CudaType::R32F;
        assert_ne!(w, mat_words(&other), "value type");
        other = k.clone();
        other.index = IndexKind::I32;
        assert_ne!(w, mat_words(&other), "index type");
        assert_ne!(dense_words(1, [2, 3, 2], CudaType::R64F), dense_words(1, [2, 3, 5], CudaType::R64F), "ld");
        let (s0, s1) = (HostScalars::new(1.0f64, 0.0), HostScalars::new(1.0f64, 1.0));
        assert_ne!(s0.words(), s1.words(), "beta");
    }
}
