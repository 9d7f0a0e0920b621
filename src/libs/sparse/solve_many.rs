//! SpSM (triangular solves with several right-hand sides, analysis cached per matrix) and SDDMM
//! (a dense product sampled at a sparse matrix's pattern): one enqueue each, no host
//! synchronization.

use super::matrix::ValueType;
use super::{
    analysed_inputs, calls, dense_words, mat_key, mat_words, not_in_matrix, output_access, record_matrix, After,
    DenseMatrix, Format, HostScalars, ManyAnalysis, Sparse, SparseIndex, SparseMatrix, SparseValue, Step, Transpose,
    Triangle,
};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{record, validate as check};
use crate::track::Access;
use std::cell::Cell;
use std::ffi::c_void;

/// `(rows, cols)` of `op(M)` for a dense `M`.
fn dense_op<T: SparseValue>(t: Transpose, m: &DenseMatrix<'_, T>) -> (usize, usize) {
    match t {
        Transpose::No => (m.rows, m.cols),
        Transpose::Yes | Transpose::Conj => (m.cols, m.rows),
    }
}

/// What an SpSM analysis is made for besides the matrix and triangle: the right-hand sides'
/// columns, the leading dimensions of `B` and `C`, and their order.
pub(super) fn rhs_shape<T: SparseValue>(b: &DenseMatrix<'_, T>, ldb: i64, ldc: i64) -> [usize; 4] {
    [b.cols, ldb as usize, ldc as usize, b.order as usize]
}

impl Sparse {
    /// Solves `op(A) C = alpha B` for the dense `C` (SpSM), `A` square, CSR or COO, triangular as
    /// `tri` says (`op(A)` may be the conjugate transpose, [`Transpose::Conj`]), `B` and `C` of
    /// `A`'s size in rows and as many columns as right-hand sides, both column-major or both
    /// row-major ([`DenseMatrix::row_major`]; `B` and `C` in different orders are refused as
    /// [`Error::Unsupported`] naming `c`). A CSC, BSR or Blocked-ELL `A` is refused as
    /// [`Error::Unsupported`] naming `a`: cuSPARSE does not solve them.
    ///
    /// The analysis is made on the first solve with `A`, `tri` and the right-hand sides' shape
    /// (columns, leading dimensions and order) and cached with its buffer: later solves run the
    /// solve phase only. As for [`spsv`](Self::spsv), a solve after a write of `A`'s values
    /// alone has the analysis take them (`cusparseSpSM_updateMatrix`, before the solve phase on
    /// this stream) and makes no new analysis; after a write of `A`'s offsets or indices it
    /// analyses `A` anew; either way it solves the system `A` holds when it runs. Where the
    /// loaded cuSPARSE has no `cusparseSpSM_updateMatrix` (the cuSPARSE of CUDA 12.3 or
    /// earlier), or the update or the solve after it fails, the solve runs again on a new
    /// analysis. It is not recorded into a graph (it fails with [`Error::Recording`]), as
    /// [`spsv`](Self::spsv) says.
    pub fn spsm<T: SparseValue, I: SparseIndex>(
        &mut self,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: DenseMatrix<'_, T>,
        c: DenseMatrix<'_, T>,
    ) -> Result<Completion<()>> {
        if a.rows != a.cols {
            return Err(Error::invalid(
                "a",
                format!("is {}x{}; a triangular solve needs a square matrix", a.rows, a.cols),
            ));
        }
        super::args::solvable(a)?;
        let tri = Triangle { transpose: tri.transpose.on::<T>(), ..tri };
        if b.order != c.order {
            // SpSM is checked on the GPU with B and C in one order (both column- or both
            // row-major), not with one of each.
            return Err(super::args::unsupported(
                "c",
                format!("B {:?} and C {:?} in SpSM", b.order, c.order),
                "pass B and C in the same order",
            ));
        }
        let ldb = b.check("b", "b.ld")?;
        let ldc = c.check("c", "c.ld")?;
        if b.rows != a.rows {
            return Err(Error::invalid("b", format!("has {} rows; A has {}", b.rows, a.rows)));
        }
        if (c.rows, c.cols) != (b.rows, b.cols) {
            return Err(Error::invalid("c", format!("is {}x{}; B is {}x{}", c.rows, c.cols, b.rows, b.cols)));
        }
        check::distinct("c", b.buf, c.buf)?;
        not_in_matrix("c", c.buf, a)?;
        // cuSPARSE's analysis leaves data on the host that its solve reads: captured into a
        // graph, the analysis never runs before the solve is captured, which then reads
        // nothing (SpSV's died of a division by zero inside `cusparseSpSV_solve`).
        self.op.refuse_recording_as(
            "a cuSPARSE triangular solve, whose analysis must run on the host before its solve,",
            "solve outside the recording, before or after a replay: the graph's replay is one tracked op, so the solve is ordered against it",
        )?;
        let mut rec = self.op.recorder("spsm");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "b", b.buf, Access::Read)?;
        record(&mut rec, "c", c.buf, Access::Write)?;
        if self.simulated() {
            return self.sim_spsm(rec, tri, alpha, a, (b, ldb), (c, ldc));
        }
        let h = self.handle()?;
        let (da, db, dc) = (self.mat(a)?, self.dense(&b, ldb)?, self.dense(&c, ldc)?);
        calls::set_triangle(da, tri.fill, tri.unit_diagonal)?;
        let beta = T::zero();
        let sc = HostScalars::new(alpha, beta);
        let s = sc.raw();
        let (op, stream) = (&self.op, self.op.stream);
        let mut fresh = false;
        let shape = rhs_shape(&b, ldb, ldc);
        let analysis = self.many.get_or_make((mat_key(a), tri, shape), |_| {
            let descr = calls::spsm_descr()?;
            let p = calls::Spsm { h, t: tri.transpose, s, a: da, b: db, c: dc, d: descr.get() };
            // SAFETY: (1) a live handle; (2) descriptors of the validated buffers; (3) host
            // scalars of T, 16-byte aligned (`HostScalars`).
            let bytes = unsafe { calls::spsm_size(p) }?;
            let buffer = op.device.alloc_scratch::<u8>(stream, bytes.max(1))?;
            fresh = true;
            let inputs = analysed_inputs("spsm", &op.device, a);
            Ok(ManyAnalysis { descr, buffer, inputs })
        })?;
        let (descr, buffer, inputs) = (analysis.descr.get(), analysis.buffer.clone(), analysis.inputs.clone());
        record(&mut rec, "analysis buffer", &buffer, Access::ReadWrite)?;
        let buf_ptr = buffer.raw_device_ptr()?;
        let values = crate::libs::dptr::<T, c_void>(&a.values)?;
        let updatable = super::updatable(a.format) && calls::has_spsm_update();
        let step = Cell::new(None);
        let done = self.op.run(rec, Vec::new(), || {
            let p = calls::Spsm { h, t: tri.transpose, s: sc.raw(), a: da, b: db, c: dc, d: descr };
            // Under this launch's marks: what the analysis holds for A's arrays as they are now.
            let now = super::analysis_step(&inputs, fresh, updatable)?;
            step.set(Some(now));
            // SAFETY: as above; (4) the analysis buffer, declared read-write, holds the size
            // queried and lives with the analysis in the cache; (5) the solve phase runs an
            // analysis of A's arrays as they are now: made here, or made from A's offsets and
            // indices, which no write changed since, and holding the values that the analysis
            // or the update before it read, which no write changed since either (all checked
            // just above, under this launch's marks); (6) an update reads A's values array,
            // declared read, the nonzeros of the structure analysed in its layout and type,
            // and runs only where the loaded library has the entry point (`updatable`).
            unsafe {
                match now {
                    Step::Analyse => calls::spsm_analysis(p, buf_ptr as _)?,
                    Step::Update => {
                        calls::spsm_update(h, descr, values)?;
                        inputs.note_again();
                    }
                    Step::Solve => {}
                }
                calls::spsm_solve(p)
            }
        });
        let after = super::after_solve(&done, fresh, step.get());
        if after != After::Keep {
            let key = mat_key(a);
            self.many.forget(&self.op, |(k, t, sh)| *k == key && *t == tri && *sh == shape);
        }
        if after == After::Redo {
            return self.spsm(tri, alpha, a, b, c);
        }
        self.trim();
        done
    }

    /// `C = alpha (op(A) op(B)) ∘ spy(C) + beta C` (SDDMM): the dense product of
    /// `op(A)` (`m x k`) and `op(B)` (`k x n`), computed only at the stored
    /// positions of the `m x n` CSR matrix `C`, whose values it updates (only written when
    /// `beta` is zero; its structure is read). `A` and `B` may each be column- or row-major, and
    /// each used as stored or transposed.
    ///
    /// Refused as [`Error::Unsupported`]: a conjugate transpose ([`Transpose::Conj`]) of complex
    /// values, naming `op_a` or `op_b` (cuSPARSE's SDDMM kernel read out of bounds and returned
    /// wrong values with either, on an H100 under CUDA 13.0; conjugate the values first), and a
    /// BSR `C`, naming `c` (cuSPARSE's SDDMM refused the BSR outputs it was given there). On
    /// real values [`Transpose::Conj`] is a plain transpose.
    #[allow(clippy::too_many_arguments)]
    pub fn sddmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        op_b: Transpose,
        alpha: T,
        a: DenseMatrix<'_, T>,
        b: DenseMatrix<'_, T>,
        beta: T,
        c: &SparseMatrix<T, I>,
    ) -> Result<Completion<()>> {
        if c.format == Format::Bsr {
            // cusparseSDDMM_bufferSize refused BSR outputs on an H100 (CUDA 13.0).
            return Err(super::args::unsupported(
                "c",
                "a BSR output in SDDMM".to_string(),
                "sample into a CSR matrix of the blocks' entries, then convert it with csr_to_bsr",
            ));
        }
        if c.format != Format::Csr {
            return Err(Error::invalid("c", format!("is {:?}; SDDMM writes a CSR matrix", c.format)));
        }
        let (op_a, op_b) = (op_a.on::<T>(), op_b.on::<T>());
        // cuSPARSE's SDDMM kernel read out of bounds (compute-sanitizer) and returned wrong
        // values with a conjugate transpose of complex values, on an H100 under CUDA 13.0.
        super::args::no_conj("op_a", op_a, "SDDMM")?;
        super::args::no_conj("op_b", op_b, "SDDMM")?;
        let lda = a.check("a", "a.ld")?;
        let ldb = b.check("b", "b.ld")?;
        let ((m, k), (kb, n)) = (dense_op(op_a, &a), dense_op(op_b, &b));
        if kb != k {
            return Err(Error::invalid("b", format!("op(B) has {kb} rows; op(A) has {k} columns")));
        }
        if (c.rows, c.cols) != (m, n) {
            return Err(Error::invalid("c", format!("is {}x{}; op(A) op(B) is {m}x{n}", c.rows, c.cols)));
        }
        not_in_matrix("a", a.buf, c)?;
        not_in_matrix("b", b.buf, c)?;
        let mut rec = self.op.recorder("sddmm");
        record(&mut rec, "a", a.buf, Access::Read)?;
        if b.buf.id() != a.buf.id() {
            record(&mut rec, "b", b.buf, Access::Read)?;
        }
        record(&mut rec, "c.offsets", &c.major, Access::Read)?;
        record(&mut rec, "c.indices", &c.minor, Access::Read)?;
        record(&mut rec, "c.values", &c.values, output_access(beta))?;
        if self.simulated() {
            return self.sim_sddmm(rec, [op_a, op_b], alpha, (a, lda), (b, ldb), beta, c);
        }
        let h = self.handle()?;
        let (da, db, dc) = (self.dense(&a, lda)?, self.dense(&b, ldb)?, self.mat(c)?);
        let t = [op_a, op_b];
        let sc = HostScalars::new(alpha, beta);
        let p = calls::Sddmm { h, t, s: sc.raw(), a: da, b: db, c: dc };
        let key = [
            &[op_a as u64, op_b as u64, a.order as u64, b.order as u64][..],
            &dense_words(a.buf.id(), [a.rows, a.cols, lda as usize], T::CUDA_TYPE),
        ]
        .into_iter()
        .chain([
            &dense_words(b.buf.id(), [b.rows, b.cols, ldb as usize], T::CUDA_TYPE)[..],
            &mat_words(&mat_key(c)),
            &sc.words(),
        ])
        .flatten()
        .copied()
        .collect();
        // SAFETY: (1) a live handle; (2) descriptors of the validated, live buffers; (3) host
        // scalars of T, 16-byte aligned (`HostScalars`).
        let bytes = self.size("sddmm", key, || unsafe { calls::sddmm_size(p) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            let p = calls::Sddmm { s: sc.raw(), ..p };
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried;
            // the preprocess step leaves its state there for the product right after it.
            unsafe { calls::sddmm(p, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }
}
