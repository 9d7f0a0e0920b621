//! The descriptor caches: what each sparse, dense and sparse-vector descriptor is made for
//! (its key), the cached triangular-solve analyses, making a descriptor on first use, and the
//! workspace-size keys, which hold every field of an operand's descriptor.

use super::calls::{DnMat, DnVec, SpMat, SpVec};
use super::matrix::ValueType;
use super::phases::SameInputs;
use super::{
    calls, reuse, DenseMatrix, Format, IndexKind, Sparse, SparseIndex, SparseMatrix, SparseStorage, SparseValue,
    SparseVector,
};
use crate::error::{Error, Result};
use crate::libs::dptr;
use crate::libs::dtype::CudaType;
use crate::libs::object::Owned;
use crate::memory::{Element, GpuRef};
use std::sync::Arc;

/// What a sparse matrix descriptor is made for.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct MatKey {
    format: Format,
    shape: [usize; 3],
    ids: [u64; 3],
    index: IndexKind,
    value: CudaType,
    block: usize,
}

/// What a dense descriptor is made for: a buffer, its shape (`[n, 1, n]` for a vector), type
/// and order.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct DenseKey {
    id: u64,
    shape: [usize; 3],
    value: CudaType,
    row_major: bool,
}

/// A cached triangular-solve analysis: the descriptor, the buffer it keeps using, and the
/// matrix's arrays at the last writes the analysis saw (a solve that finds the values alone
/// written since refreshes them, one that finds the structure written analyses anew: see
/// [`analysis_step`]).
pub(super) struct Analysis {
    pub(super) descr: Owned<calls::SpSv>,
    pub(super) buffer: GpuRef<u8>,
    pub(super) inputs: Arc<SameInputs>,
}

/// A cached analysis of a triangular solve with several right-hand sides.
pub(super) struct ManyAnalysis {
    pub(super) descr: Owned<calls::SpSm>,
    pub(super) buffer: GpuRef<u8>,
    pub(super) inputs: Arc<SameInputs>,
}

/// The arrays of `a` that op `op`'s analysis is made from: the offsets (or COO's row
/// indices), the column indices, and the values, which cuSPARSE's analysis keeps what it saw
/// of (`cusparseSpSV_updateMatrix` and `cusparseSpSM_updateMatrix` change them); closes the
/// device's solo mode (see `phases`).
pub(super) fn analysed_inputs<T: SparseStorage, I: SparseIndex>(
    op: &'static str,
    device: &crate::device::Device,
    a: &SparseMatrix<T, I>,
) -> Arc<SameInputs> {
    let inputs = SameInputs::new(op, device).input("a.offsets", &a.major).input("a.indices", &a.minor);
    Arc::new(inputs.input(VALUES, &a.values))
}

/// The argument name of the one array of `A` an analysis can be brought up to date with.
const VALUES: &str = "a.values";

/// What a triangular solve enqueues before its solve phase, decided under its launch's marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The analysis was made for this solve: it analyses.
    Analyse,
    /// No array of `A` was written since the analysis: the solve phase alone.
    Solve,
    /// Only `A`'s values were written: the analysis takes them (`updateMatrix`), then the solve.
    Update,
}

/// The step of a solve with an analysis of `inputs`, made for this solve (`fresh`) or cached,
/// decided while the launch holds its marks (no write of `A` can commit between this and the
/// enqueue): a fresh analysis notes `A`'s arrays; a cached one whose values alone were written
/// takes them where `updatable` ([`Step::Update`]: the caller notes the arrays anew with
/// [`SameInputs::note_again`] once the update is enqueued, so that an update that never got
/// there leaves the analysis noted as holding the old values). [`Error::InputChanged`] where
/// the analysis must be made anew: `A`'s offsets or indices written, or its values where not
/// `updatable`.
pub(super) fn analysis_step(inputs: &SameInputs, fresh: bool, updatable: bool) -> Result<Step> {
    if fresh {
        inputs.note()?;
        return Ok(Step::Analyse);
    }
    let written = inputs.written();
    if written.none() {
        return Ok(Step::Solve);
    }
    if updatable && written.only(&[VALUES]) {
        return Ok(Step::Update);
    }
    written.refuse().map(|()| Step::Solve)
}

/// Whether a cached analysis of a `format` matrix takes new values in place of a new analysis:
/// cuSPARSE's `updateMatrix` serves the analyses of its triangular solves, which cusched makes
/// for CSR and COO matrices (SpSV's Sliced-ELL is not made here), with the one algorithm they
/// have (`*_ALG_DEFAULT`).
pub(super) fn updatable(format: Format) -> bool {
    matches!(format, Format::Csr | Format::Coo)
}

/// What becomes of a cached analysis after a solve's launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum After {
    /// It holds for `A` as the launch left it.
    Keep,
    /// It was never made (its launch failed): it goes.
    Forget,
    /// It holds for another `A`, or failed to take `A`'s new values: it goes, and the solve
    /// runs again, making it anew (so it cannot come back here).
    Redo,
}

/// [`After`] a solve's launch returned `done`, its analysis made for it (`fresh`) or cached,
/// after the launch decided `step` (`None`: it decided nothing, or refused in deciding).
pub(super) fn after_solve<R>(done: &Result<R>, fresh: bool, step: Option<Step>) -> After {
    match done {
        Ok(_) => After::Keep,
        Err(_) if fresh => After::Forget,
        // Refused before enqueueing anything: the analysis holds for another matrix.
        Err(Error::InputChanged { .. }) if step.is_none() => After::Redo,
        // The update failed (or the solve after it): the analysis may hold the old values.
        Err(e) if step == Some(Step::Update) => {
            log::warn!(
                "cusched: a cuSPARSE triangular solve after a write of A's values failed ({e}); analysing A anew"
            );
            After::Redo
        }
        Err(_) => After::Keep,
    }
}

/// What a sparse-vector descriptor is made for: size, nonzeros, buffer ids and types.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SpVecKey {
    shape: [usize; 2],
    ids: [u64; 2],
    index: IndexKind,
    value: CudaType,
}

impl Sparse {
    pub(super) fn handle(&self) -> Result<calls::H> {
        self.raw.as_ref().map(|h| h.get().0).ok_or_else(|| self.op.unavailable_on_sim())
    }

    /// The descriptor of `a` (made on first use).
    pub(super) fn mat<T: SparseStorage, I: SparseIndex>(&mut self, a: &SparseMatrix<T, I>) -> Result<SpMat> {
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
    pub(super) fn vec<T: SparseValue>(&mut self, x: &GpuRef<T>, n: usize) -> Result<DnVec> {
        self.vec_of(x, n, T::CUDA_TYPE)
    }

    /// The descriptor of the first `n` elements of `x`, whose elements are of type `t`.
    pub(super) fn vec_of<T: Element>(&mut self, x: &GpuRef<T>, n: usize, t: CudaType) -> Result<DnVec> {
        let key = DenseKey { id: x.id(), shape: [n, 1, n], value: t, row_major: false };
        let ptr = dptr(x)?;
        // SAFETY: `x` holds at least `n` elements (validated), of type `t` (the caller's row of
        // the data-type table), and is live in this context.
        Ok(self.vecs.get_or_make(key, |_| unsafe { calls::create_dn_vec(n as i64, ptr, t) })?.get())
    }

    /// The descriptor of the sparse vector `x` (made on first use).
    pub(super) fn spvec<T: SparseValue, I: SparseIndex>(&mut self, x: &SparseVector<T, I>) -> Result<SpVec> {
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
    pub(super) fn dense<T: SparseValue>(&mut self, m: &DenseMatrix<'_, T>, ld: i64) -> Result<DnMat> {
        self.dense_of(m, ld, T::CUDA_TYPE)
    }

    /// The descriptor of the dense view `m`, whose elements are of type `t`.
    pub(super) fn dense_of<T: Element>(&mut self, m: &DenseMatrix<'_, T>, ld: i64, t: CudaType) -> Result<DnMat> {
        let row_major = m.is_row_major();
        let key = DenseKey { id: m.buf.id(), shape: [m.rows, m.cols, ld as usize], value: t, row_major };
        let ptr = dptr(m.buf)?;
        let (r, c) = (m.rows as i64, m.cols as i64);
        // SAFETY: the view was checked against its buffer (in its order), its elements are of
        // type `t` (the caller's row of the data-type table), and it is live in this context.
        let make = |_: &DenseKey| unsafe { calls::create_dn_mat(r, c, ld, ptr, t, row_major) };
        Ok(self.dense.get_or_make(key, make)?.get())
    }

    /// The external buffer size of op `name` on `operands`, from `query` on first use. The key
    /// holds every argument of the library's size query that can change the size: the op's
    /// options, every field of each operand's descriptor ([`mat_words`], [`dense_words`]) and
    /// the scalars; the handle, compute type (the value type) and algorithm are fixed per state
    /// and op.
    pub(super) fn size(
        &mut self,
        name: &'static str,
        operands: Vec<u64>,
        query: impl FnOnce() -> Result<usize>,
    ) -> Result<usize> {
        Ok(*self.sizes.get_or_make((name, operands), |_| query())?)
    }

    /// Retires what the caches hold beyond capacity; called after each op's enqueue.
    pub(super) fn trim(&mut self) {
        self.mats.trim(&self.op);
        self.vecs.trim(&self.op);
        self.dense.trim(&self.op);
        self.analyses.trim(&self.op);
        self.many.trim(&self.op);
        self.sim_analyses.trim(&self.op);
        self.sim_many.trim(&self.op);
        self.spvecs.trim(&self.op);
        self.sizes.trim(&self.op);
        reuse::trim(&self.op, &mut self.reuses);
    }
}

pub(super) fn mat_key<T: SparseStorage, I: SparseIndex>(a: &SparseMatrix<T, I>) -> MatKey {
    MatKey {
        format: a.format,
        shape: [a.rows, a.cols, a.nnz],
        ids: [a.major.id(), a.minor.id(), a.values.id()],
        index: I::KIND,
        value: T::CUDA_TYPE,
        block: a.block,
    }
}

/// Every field of a sparse operand's descriptor, as workspace-size key words.
pub(super) fn mat_words(k: &MatKey) -> [u64; 10] {
    let [r, c, n] = k.shape;
    let [i0, i1, i2] = k.ids;
    [k.format as u64, r as u64, c as u64, n as u64, i0, i1, i2, k.index as u64, k.value as u64, k.block as u64]
}

/// Every field of a dense operand's descriptor (`[n, 1, n]` for a vector), as key words.
pub(super) fn dense_words(id: u64, shape: [usize; 3], value: CudaType) -> [u64; 5] {
    [id, shape[0] as u64, shape[1] as u64, shape[2] as u64, value as u64]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libs::sparse::HostScalars;

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

    /// What becomes of a cached analysis after each outcome of its solve's launch: an analysis
    /// that may hold values no launch noted (its update or the solve after it failed) never
    /// stays, and no path that analyses anew can come back for another round.
    #[test]
    fn a_solve_keeps_its_analysis_only_where_it_holds_what_was_noted() {
        let changed = || -> Result<()> {
            Err(Error::InputChanged { op: "spsv", arg: VALUES, buffer: "buffer #1".into(), what: "" })
        };
        let failed = || -> Result<()> { Err(Error::invalid("a", "refused")) };
        for step in [Step::Analyse, Step::Solve, Step::Update] {
            assert_eq!(after_solve(&Ok(()), false, Some(step)), After::Keep, "{step:?} succeeded");
            assert_eq!(after_solve(&Ok(()), true, Some(step)), After::Keep, "{step:?} succeeded, fresh");
            // A fresh analysis that failed goes, and the error is the caller's: never a new round.
            assert_eq!(after_solve(&failed(), true, Some(step)), After::Forget, "{step:?} failed, fresh");
            assert_eq!(after_solve(&changed(), true, None), After::Forget, "fresh, refused");
        }
        // Refused before anything was enqueued: the analysis holds for another matrix.
        assert_eq!(after_solve(&changed(), false, None), After::Redo);
        // The update (or the solve after it) failed: the analysis may hold the old values.
        assert_eq!(after_solve(&failed(), false, Some(Step::Update)), After::Redo);
        // The solve phase alone failed: the analysis still holds what was noted.
        assert_eq!(after_solve(&failed(), false, Some(Step::Solve)), After::Keep);
    }
}
