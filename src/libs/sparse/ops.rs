//! SpMV, SpMM and SpSV: one enqueue each, no host synchronization.

use super::matrix::ValueType;
use super::{
    analysed_inputs, calls, dense_words, mat_key, mat_words, not_in_matrix, output_access, record_matrix, takes, After,
    Analysis, DenseMatrix, Format, HostScalars, Sparse, SparseIndex, SparseMatrix, SparseValue, Step, Transpose,
    Triangle,
};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{record, validate as check};
use crate::memory::GpuRef;
use crate::track::Access;
use std::cell::Cell;
use std::ffi::c_void;

/// `(rows, cols)` of `op(A)`.
pub(super) fn op_shape<T: super::SparseStorage, I: SparseIndex>(
    t: Transpose,
    a: &SparseMatrix<T, I>,
) -> (usize, usize) {
    match t {
        Transpose::No => (a.rows, a.cols),
        Transpose::Yes | Transpose::Conj => (a.cols, a.rows),
    }
}

impl Sparse {
    /// `y = alpha op(A) x + beta y` (SpMV). `x` holds at least `op(A)`'s columns, `y` at least
    /// its rows; `y` is only written when `beta` is zero.
    #[allow(clippy::too_many_arguments)]
    pub fn spmv<T: SparseValue, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        takes("SpMV", &[Format::Csr, Format::Csc, Format::Coo, Format::Bsr], op_a, a)?;
        let op_a = op_a.on::<T>();
        let (m, n) = op_shape(op_a, a);
        check::covers("x", x, Some(n), &format!("op(A) with {n} columns"))?;
        check::covers("y", y, Some(m), &format!("op(A) with {m} rows"))?;
        check::distinct("y", x, y)?;
        not_in_matrix("y", y, a)?;
        let mut rec = self.op.recorder("spmv");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "x", x, Access::Read)?;
        record(&mut rec, "y", y, output_access(beta))?;
        if self.simulated() {
            return self.sim_spmv(rec, op_a, alpha, a, x, beta, y);
        }
        let h = self.handle()?;
        let (da, dx, dy) = (self.mat(a)?, self.vec(x, n)?, self.vec(y, m)?);
        let sc = HostScalars::new(alpha, beta);
        let s = sc.raw();
        let key = [&[op_a as u64][..], &mat_words(&mat_key(a)), &dense_words(x.id(), [n, 1, n], T::CUDA_TYPE)]
            .into_iter()
            .chain([&dense_words(y.id(), [m, 1, m], T::CUDA_TYPE)[..], &sc.words()])
            .flatten()
            .copied()
            .collect();
        // SAFETY: (1) a live handle; (2) the descriptors point at the validated, live buffers;
        // (3) the scalars are host values of T, 16-byte aligned
        // (`HostScalars`), in place until the call returns.
        let bytes = self.size("spmv", key, || unsafe { calls::spmv_size(h, op_a, s, da, dx, dy) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw();
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried.
            unsafe { calls::spmv(h, op_a, s, da, dx, dy, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }

    /// `C = alpha op(A) B + beta C` (SpMM), with `B` (`op(A)`'s columns x `C`'s columns) and `C`
    /// dense, each column- or row-major ([`DenseMatrix::row_major`]). [`spmm_ops`](Self::spmm_ops)
    /// takes `op(B)` too.
    ///
    /// A Blocked-ELL `A` takes `i32` indices and `f32` or `f64` values (what cuSPARSE supports;
    /// others are rejected as an invalid `a`), and runs on Tensor Cores: in `f32`, products are
    /// rounded as TF32 (on an H100, results about 1e-4 off an exact product of unit values).
    pub fn spmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: DenseMatrix<'_, T>,
        beta: T,
        c: DenseMatrix<'_, T>,
    ) -> Result<Completion<()>> {
        self.spmm_ops(op_a, Transpose::No, alpha, a, b, beta, c)
    }

    /// `C = alpha op(A) op(B) + beta C` (SpMM with `B` transposed or conjugate-transposed as
    /// `op_b` says): `op(B)` is `op(A)`'s columns x `C`'s columns. A transposed `B` takes a CSR,
    /// CSC or COO `A` (cuSPARSE's BSR and Blocked-ELL kernels read `B` as stored; others are
    /// refused as [`Error::Unsupported`] naming `op_b`). [`Transpose::Conj`] on real values is
    /// a plain transpose.
    #[allow(clippy::too_many_arguments)]
    pub fn spmm_ops<T: SparseValue, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        op_b: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: DenseMatrix<'_, T>,
        beta: T,
        c: DenseMatrix<'_, T>,
    ) -> Result<Completion<()>> {
        takes("SpMM", &[Format::Csr, Format::Csc, Format::Coo, Format::Bsr, Format::BlockedEll], op_a, a)?;
        let (op_a, op_b) = (op_a.on::<T>(), op_b.on::<T>());
        if op_b.flips() && matches!(a.format, Format::Bsr | Format::BlockedEll) {
            return Err(super::args::unsupported(
                "op_b",
                format!("a transposed B with a {:?} A in SpMM", a.format),
                "transpose B into a dense buffer first, or convert A to CSR",
            ));
        }
        let (m, k) = op_shape(op_a, a);
        let ldb = b.check("b", "b.ld")?;
        let ldc = c.check("c", "c.ld")?;
        let (kb, n) = if op_b.flips() { (b.cols, b.rows) } else { (b.rows, b.cols) };
        if op_b == Transpose::Conj && b.rows == 1 {
            // cuSPARSE: "opB == OPERATION_CONJUGATE_TRANSPOSE is unsupported when B is a single
            // row" (seen on an H100).
            return Err(super::args::unsupported(
                "op_b",
                "a conjugate-transposed B of one row in SpMM".to_string(),
                "store conj(B) as a one-column B and pass Transpose::No, or use SpMV",
            ));
        }
        if kb != k {
            return Err(Error::invalid("b", format!("op(B) has {kb} rows; op(A) has {k} columns")));
        }
        if c.rows != m || c.cols != n {
            return Err(Error::invalid("c", format!("is {}x{}; op(A) op(B) is {m}x{n}", c.rows, c.cols)));
        }
        check::distinct("c", b.buf, c.buf)?;
        not_in_matrix("c", c.buf, a)?;
        let mut rec = self.op.recorder("spmm");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "b", b.buf, Access::Read)?;
        record(&mut rec, "c", c.buf, output_access(beta))?;
        if self.simulated() {
            return self.sim_spmm(rec, [op_a, op_b], alpha, a, (b, ldb), beta, (c, ldc));
        }
        let h = self.handle()?;
        let (da, db, dc) = (self.mat(a)?, self.dense(&b, ldb)?, self.dense(&c, ldc)?);
        let t = [op_a, op_b];
        let sc = HostScalars::new(alpha, beta);
        let s = sc.raw();
        let key = [
            &[op_a as u64, op_b as u64, b.order as u64, c.order as u64][..],
            &mat_words(&mat_key(a)),
            &dense_words(b.buf.id(), [b.rows, b.cols, ldb as usize], T::CUDA_TYPE),
        ]
        .into_iter()
        .chain([&dense_words(c.buf.id(), [c.rows, c.cols, ldc as usize], T::CUDA_TYPE)[..], &sc.words()])
        .flatten()
        .copied()
        .collect();
        // SAFETY: (1) a live handle; (2) the descriptors point at the validated, live buffers;
        // (3) the scalars are host values of T, 16-byte aligned
        // (`HostScalars`), in place until the call returns.
        let bytes = self.size("spmm", key, || unsafe { calls::spmm_size(h, t, s, da, db, dc) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw();
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried.
            unsafe { calls::spmm(h, t, s, da, db, dc, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }

    /// A strided batch of SpMMs, `C_i = alpha op(A_i) B_i + beta C_i` for `i < batch.count`
    /// (cuSPARSE's batched SpMM): `a`, `b` and `c` describe the first matrices, `batch` the
    /// strides to the others. `A` is CSR or COO (what cuSPARSE batches), every `A_i` with
    /// `a.nnz()` entries: a CSR `A`'s offsets array holds one matrix's offsets
    /// ([`SparseMatrix::csr`] keeps it exact), so its batch shares the row offsets (`a_offsets`
    /// 0) and strides the column indices and values; a COO `A` takes one stride for all its
    /// arrays (`a_offsets == a_entries`). Each buffer must hold its whole batch; `C`'s matrices
    /// must not overlap. A batch of SpMVs is this with one-column `B` and `C` (cuSPARSE batches
    /// dense matrices, not dense vectors).
    #[allow(clippy::too_many_arguments)]
    pub fn spmm_batched<T: SparseValue, I: SparseIndex>(
        &mut self,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: DenseMatrix<'_, T>,
        beta: T,
        c: DenseMatrix<'_, T>,
        batch: super::SpmmBatch,
    ) -> Result<Completion<()>> {
        takes("batched SpMM", &[Format::Csr, Format::Coo], op_a, a)?;
        let op_a = op_a.on::<T>();
        let count = i32::try_from(batch.count).ok().filter(|&n| n >= 1).ok_or_else(|| {
            Error::invalid("batch.count", format!("is {}; it must be 1 to {}", batch.count, i32::MAX))
        })?;
        let coo = a.format == Format::Coo;
        if coo && batch.a_offsets != batch.a_entries {
            return Err(Error::invalid(
                "batch.a_offsets",
                format!("is {}; a COO batch has one stride, a_entries ({})", batch.a_offsets, batch.a_entries),
            ));
        }
        let (m, k) = op_shape(op_a, a);
        let ldb = b.check("b", "b.ld")?;
        let ldc = c.check("c", "c.ld")?;
        if b.rows != k {
            return Err(Error::invalid("b", format!("has {} rows; op(A) has {k} columns", b.rows)));
        }
        if c.rows != m || c.cols != b.cols {
            return Err(Error::invalid("c", format!("is {}x{}; op(A) B is {m}x{}", c.rows, c.cols, b.cols)));
        }
        let last = batch.count - 1;
        // Elements the batch spans in a buffer whose first matrix spans `first`.
        let spans = |stride: usize, first: usize| stride.checked_mul(last).and_then(|s| s.checked_add(first));
        let major_len = if coo { a.nnz } else { a.rows + 1 };
        let what = |n: usize| format!("{} matrices {n} apart", batch.count);
        check::covers("a.offsets", &a.major, spans(batch.a_offsets, major_len), &what(batch.a_offsets))?;
        check::covers("a.indices", &a.minor, spans(batch.a_entries, a.nnz), &what(batch.a_entries))?;
        check::covers("a.values", &a.values, spans(batch.a_entries, a.nnz), &what(batch.a_entries))?;
        check::covers("b", b.buf, spans(batch.b, b.span(ldb)), &what(batch.b))?;
        check::covers("c", c.buf, spans(batch.c, c.span(ldc)), &what(batch.c))?;
        if batch.count > 1 && batch.c < c.span(ldc) {
            return Err(Error::invalid(
                "batch.c",
                format!("is {}; the Cs would overlap (each spans {} elements)", batch.c, c.span(ldc)),
            ));
        }
        let strides = [batch.a_offsets, batch.a_entries, batch.b, batch.c];
        let strides: [i64; 4] = [0, 1, 2, 3].map(|i| i64::try_from(strides[i]).unwrap_or(i64::MAX));
        if strides.contains(&i64::MAX) {
            return Err(Error::invalid("batch", "a stride does not fit i64"));
        }
        check::distinct("c", b.buf, c.buf)?;
        not_in_matrix("c", c.buf, a)?;
        let mut rec = self.op.recorder("spmm_batched");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "b", b.buf, Access::Read)?;
        record(&mut rec, "c", c.buf, output_access(beta))?;
        if self.simulated() {
            return self.sim_spmm_batched(rec, op_a, alpha, a, (b, ldb), beta, (c, ldc), batch);
        }
        let h = self.handle()?;
        // Descriptors of their own, not the cached ones: the batch is a property of the
        // descriptor, and the cached ones serve single products.
        let parts = calls::SpMatParts {
            format: a.format,
            rows: a.rows as i64,
            cols: a.cols as i64,
            nnz: a.nnz as i64,
            major: crate::libs::dptr(&a.major)?,
            minor: crate::libs::dptr(&a.minor)?,
            values: crate::libs::dptr(&a.values)?,
            index: I::KIND,
            value: T::CUDA_TYPE,
            block: 0,
        };
        // SAFETY: the matrix's buffers were checked against its sizes and the batch's, and are
        // live device buffers of this context (recorded on this op).
        let da = unsafe { calls::create_sp_mat(&parts) }?;
        let (pb, pc) = (crate::libs::dptr(b.buf)?, crate::libs::dptr(c.buf)?);
        // SAFETY: the views were checked against their buffers for the whole batch.
        let db =
            unsafe { calls::create_dn_mat(b.rows as i64, b.cols as i64, ldb, pb, T::CUDA_TYPE, b.is_row_major()) }?;
        // SAFETY: as for `db`.
        let dc =
            unsafe { calls::create_dn_mat(c.rows as i64, c.cols as i64, ldc, pc, T::CUDA_TYPE, c.is_row_major()) }?;
        let (ra, rb, rc) = (da.get(), db.get(), dc.get());
        // SAFETY: every matrix of each batch lies in its buffer (checked above).
        let batched = unsafe {
            calls::sp_mat_batch(ra, coo, count, strides[0], strides[1])
                .and_then(|()| calls::dn_mat_batch(rb, count, strides[2]))
                .and_then(|()| calls::dn_mat_batch(rc, count, strides[3]))
        };
        let done = batched.and_then(|()| {
            let t = [op_a, Transpose::No];
            let sc = HostScalars::new(alpha, beta);
            let s = sc.raw();
            let key = [
                &[op_a as u64, b.order as u64, c.order as u64, batch.count as u64][..],
                &strides.map(|v| v as u64),
                &mat_words(&mat_key(a)),
                &dense_words(b.buf.id(), [b.rows, b.cols, ldb as usize], T::CUDA_TYPE),
            ]
            .into_iter()
            .chain([&dense_words(c.buf.id(), [c.rows, c.cols, ldc as usize], T::CUDA_TYPE)[..], &sc.words()])
            .flatten()
            .copied()
            .collect();
            // SAFETY: (1) a live handle; (2) the descriptors point at the validated, live
            // buffers; (3) host scalars of T, 16-byte aligned (`HostScalars`), in place.
            let bytes = self.size("spmm_batched", key, || unsafe { calls::spmm_size(h, t, s, ra, rb, rc) })?;
            let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
            self.op.run(rec, Vec::new(), || {
                let s = sc.raw();
                // SAFETY: as above; (4) the workspace, declared read-write, holds the size
                // queried.
                unsafe { calls::spmm(h, t, s, ra, rb, rc, work.map_or(std::ptr::null_mut(), |w| w as _)) }
            })
        });
        self.op.retire("a batched cuSPARSE matrix descriptor", da);
        self.op.retire("a batched cuSPARSE dense-matrix descriptor", db);
        self.op.retire("a batched cuSPARSE dense-matrix descriptor", dc);
        self.trim();
        done
    }

    /// Solves `op(A) y = alpha x` for `y` (SpSV), `A` square, CSR or COO, and triangular as
    /// `tri` says (`op(A)` may be the conjugate transpose, [`Transpose::Conj`]). A CSC, BSR or
    /// Blocked-ELL `A` is refused as [`Error::Unsupported`] naming `a`: cuSPARSE does not solve
    /// them.
    ///
    /// The analysis is made on the first solve with `A` and `tri` and cached with its buffer:
    /// later solves with the same matrix run the solve phase only. cuSPARSE's analysis holds
    /// for the matrix it saw, so a solve checks `A`'s arrays for writes since (by any thread, on
    /// any stream, tracked by cusched): after a write of its values alone (offsets and indices
    /// as analysed), the analysis takes the new values (`cusparseSpSV_updateMatrix`, enqueued
    /// on this stream before the solve phase) and no new analysis is made
    /// ([`analyses_made`](Self::analyses_made) stays); after a write of its offsets or indices,
    /// `A` is analysed anew. Either way the solve solves the system `A` holds when it runs.
    /// Where the loaded cuSPARSE has no `cusparseSpSV_updateMatrix` (the cuSPARSE of CUDA 12.0),
    /// or the update or the solve after it fails, the solve runs again on a new analysis.
    ///
    /// A solve is not recorded into a graph: on a stream a [`Graph`](crate::Graph) recording
    /// holds it fails with [`Error::Recording`] and abandons the recording, since cuSPARSE's
    /// analysis runs partly on the host, where a captured analysis would leave nothing for the
    /// captured solve. Solve before or after the graph's replays, which order against it.
    pub fn spsv<T: SparseValue, I: SparseIndex>(
        &mut self,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        if a.rows != a.cols {
            return Err(Error::invalid(
                "a",
                format!("is {}x{}; a triangular solve needs a square matrix", a.rows, a.cols),
            ));
        }
        super::args::solvable(a)?;
        let tri = Triangle { transpose: tri.transpose.on::<T>(), ..tri };
        let n = a.rows;
        check::covers("x", x, Some(n), &format!("{n} right-hand-side entries"))?;
        check::covers("y", y, Some(n), &format!("{n} solution entries"))?;
        check::distinct("y", x, y)?;
        not_in_matrix("y", y, a)?;
        // cuSPARSE's analysis leaves data on the host that its solve reads: captured into a
        // graph, the analysis never runs before the solve is captured, which then reads
        // nothing (the process dies of a division by zero inside `cusparseSpSV_solve`).
        self.op.refuse_recording_as(
            "a cuSPARSE triangular solve, whose analysis must run on the host before its solve,",
            "solve outside the recording, before or after a replay: the graph's replay is one tracked op, so the solve is ordered against it",
        )?;
        let mut rec = self.op.recorder("spsv");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "x", x, Access::Read)?;
        record(&mut rec, "y", y, Access::Write)?;
        if self.simulated() {
            return self.sim_spsv(rec, tri, alpha, a, x, y);
        }
        let h = self.handle()?;
        let (da, dx, dy) = (self.mat(a)?, self.vec(x, n)?, self.vec(y, n)?);
        calls::set_triangle(da, tri.fill, tri.unit_diagonal)?;
        let beta = T::zero();
        let sc = HostScalars::new(alpha, beta);
        let s = sc.raw();
        let (op, stream) = (&self.op, self.op.stream);
        let mut fresh = false;
        let analysis = self.analyses.get_or_make((mat_key(a), tri, 0), |_| {
            let descr = calls::spsv_descr()?;
            // SAFETY: (1) a live handle; (2) the descriptors point at the validated buffers;
            // (3) host scalars of T, 16-byte aligned (`HostScalars`).
            let bytes = unsafe { calls::spsv_size(h, tri.transpose, s, da, dx, dy, descr.get()) }?;
            let buffer = op.device.alloc_scratch::<u8>(stream, bytes.max(1))?;
            fresh = true;
            let inputs = analysed_inputs("spsv", &op.device, a);
            Ok(Analysis { descr, buffer, inputs })
        })?;
        let (descr, buffer, inputs) = (analysis.descr.get(), analysis.buffer.clone(), analysis.inputs.clone());
        record(&mut rec, "analysis buffer", &buffer, Access::ReadWrite)?;
        let buf_ptr = buffer.raw_device_ptr()?;
        let values = crate::libs::dptr::<T, c_void>(&a.values)?;
        let updatable = super::updatable(a.format) && calls::has_spsv_update();
        let step = Cell::new(None);
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw();
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
                    Step::Analyse => calls::spsv_analysis(h, tri.transpose, s, da, dx, dy, descr, buf_ptr as _)?,
                    Step::Update => {
                        calls::spsv_update(h, descr, values)?;
                        inputs.note_again();
                    }
                    Step::Solve => {}
                }
                calls::spsv_solve(h, tri.transpose, s, da, dx, dy, descr)
            }
        });
        let after = super::after_solve(&done, fresh, step.get());
        if after != After::Keep {
            let key = mat_key(a);
            self.analyses.forget(&self.op, |(k, t, _)| *k == key && *t == tri);
        }
        if after == After::Redo {
            return self.spsv(tri, alpha, a, x, y);
        }
        self.trim();
        done
    }
}
