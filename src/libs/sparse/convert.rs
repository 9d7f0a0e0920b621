//! Conversions: CSR ↔ CSC (`cusparseCsr2cscEx2`), CSR ↔ COO (`cusparseXcsr2coo`,
//! `cusparseXcoo2csr`), sparse → dense and dense → CSR, CSC or COO.

use super::matrix::ValueType;
use super::phases::SameInputs;
use super::{
    calls, dense_words, mat_key, mat_words, not_in_matrix, record_matrix, DenseMatrix, Format, Sparse, SparseIndex,
    SparseMatrix, SparseValue,
};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

/// A conversion's output at once (for ops that go on converting it on the stream) and the
/// completion that delivers it.
pub(super) type Converted<T, I> = (SparseMatrix<T, I>, Completion<SparseMatrix<T, I>>);

impl Sparse {
    /// The CSR matrix `a` in COO form: its row offsets expanded into one row index per stored
    /// entry, in a fresh array; the COO matrix shares `a`'s column indices and values (`i32`
    /// indices, as `cusparseXcsr2coo` takes). It comes back through the completion. Never blocks.
    pub fn csr_to_coo<T: SparseValue>(&mut self, a: &SparseMatrix<T, i32>) -> Result<Completion<SparseMatrix<T, i32>>> {
        self.rows_convert(a, Format::Csr)
    }

    /// The COO matrix `a`, sorted by row, in CSR form: its row indices compressed into
    /// `rows + 1` offsets, in a fresh array; the CSR matrix shares `a`'s column indices and
    /// values (`i32` indices, as `cusparseXcoo2csr` takes). Unsorted row indices give offsets
    /// that do not describe `a` ([`SparseMatrix::check`] finds them). Never blocks.
    pub fn coo_to_csr<T: SparseValue>(&mut self, a: &SparseMatrix<T, i32>) -> Result<Completion<SparseMatrix<T, i32>>> {
        self.rows_convert(a, Format::Coo)
    }

    /// CSR ↔ COO: `a` in format `from` into the other, its row structure converted.
    fn rows_convert<T: SparseValue>(
        &mut self,
        a: &SparseMatrix<T, i32>,
        from: Format,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let (name, to) = if from == Format::Csr { ("csr_to_coo", Format::Coo) } else { ("coo_to_csr", Format::Csr) };
        if a.format != from {
            return Err(Error::invalid("a", format!("is {:?}; {name} takes {from:?}", a.format)));
        }
        // The row structure out: one index per entry (COO) or rows + 1 offsets (CSR).
        let len = if to == Format::Coo {
            a.nnz.max(1)
        } else {
            a.rows.checked_add(1).ok_or_else(|| Error::invalid("a", "has too many rows"))?
        };
        let mut rec = self.op.recorder(name);
        let arg = if from == Format::Csr { "a.offsets" } else { "a.row_indices" };
        record(&mut rec, arg, &a.major, Access::Read)?;
        record(&mut rec, "a.indices", &a.minor, Access::Read)?;
        record(&mut rec, "a.values", &a.values, Access::Read)?;
        let dev = self.op.device.clone();
        let rows_out: GpuRef<i32> = dev.alloc(self.op.stream, len)?;
        record(&mut rec, "out.rows", &rows_out, Access::Write)?;
        let out = SparseMatrix::new(to, a.rows, a.cols, a.nnz, &rows_out, &a.minor, &a.values)?;
        if self.simulated() {
            return self.sim_rows_convert(rec, a, out);
        }
        let h = self.handle()?;
        // SparseMatrix keeps rows and nnz within i32 for i32 indices.
        let (nnz, rows) = (a.nnz as i32, a.rows as i32);
        let (src, dst) = (dptr(&a.major)? as *const i32, dptr(&rows_out)?);
        let to_csr = to == Format::Csr;
        let done = self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle on the fenced stream, its context current; (2) `src`
            // holds a's row structure (rows + 1 offsets or nnz indices, validated when `a` was
            // made) and `dst` the fresh array of the other's length, recorded as written.
            unsafe { calls::rows_convert(h, to_csr, src, nnz, rows, dst) }?;
            Ok(out)
        });
        self.trim();
        done
    }

    /// The same matrix in the other compressed format: CSR in, CSC out, or CSC in, CSR out
    /// (`i32` indices, as `cusparseCsr2cscEx2` takes). The output's buffers are freshly
    /// allocated; it comes back through the completion. Never blocks. Not recorded into a graph
    /// ([`Error::Recording`]): `cusparseCsr2cscEx2` copies a value from the device into the
    /// caller's stack midway, and captured, that copy becomes a graph node that writes to a
    /// stack frame long gone at every replay (cuSPARSE of CUDA 13.0).
    pub fn convert_compressed<T: SparseValue>(
        &mut self,
        a: &SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        // A CSC matrix is the CSR matrix of its transpose: one call serves both directions.
        let (m, n, out_format) = match a.format {
            Format::Csr => (a.rows, a.cols, Format::Csc),
            Format::Csc => (a.cols, a.rows, Format::Csr),
            other => return Err(Error::invalid("a", format!("is {other:?}; convert_compressed takes CSR or CSC"))),
        };
        // Captured, the call leaves a device-to-host copy into its own stack frame in the graph
        // (tools/probes/csr2csc_capture.c): every replay then writes to dead stack memory
        // (`cudaErrorIllegalAddress` in plain C as here).
        self.refuse_in_graph("a compressed-format conversion (cusparseCsr2cscEx2)")?;
        let nnz = a.nnz;
        let mut rec = self.op.recorder("csr2csc");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        let dev = self.op.device.clone();
        let offsets: GpuRef<i32> = dev.alloc(self.op.stream, n + 1)?;
        let indices: GpuRef<i32> = dev.alloc(self.op.stream, nnz.max(1))?;
        let values: GpuRef<T> = dev.alloc(self.op.stream, nnz.max(1))?;
        let out = SparseMatrix::new(out_format, a.rows, a.cols, nnz, &offsets, &indices, &values)?;
        record(&mut rec, "out.offsets", &offsets, Access::Write)?;
        record(&mut rec, "out.indices", &indices, Access::Write)?;
        record(&mut rec, "out.values", &values, Access::Write)?;
        if self.simulated() {
            return self.sim_convert_compressed(rec, a, out);
        }
        let h = self.handle()?;
        let p = calls::Csr2Csc {
            m: m as i32,
            n: n as i32,
            nnz: nnz as i32,
            csr: [dptr(&a.major)?, dptr(&a.minor)?, dptr(&a.values)?],
            csc: [dptr(&offsets)?, dptr(&indices)?, dptr(&values)?],
            t: T::CUDA_TYPE,
        };
        // The query takes m, n, nnz, the arrays, the value type and fixed options: A's
        // descriptor words hold all but the fresh output arrays (allocations, aligned alike).
        let key = mat_words(&mat_key(a)).to_vec();
        // SAFETY: (1) a live handle; (2) the arrays are live and sized for m, n and nnz
        // (validated when the matrices were made); (3) a size query.
        let bytes = self.size("csr2csc", key, || {
            let mut size = 0;
            unsafe { calls::csr2csc(h, &p, Some(&mut size), std::ptr::null_mut()) }.map(|()| size)
        })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            // SAFETY: as above; (4) the workspace, declared read-write, holds the size queried.
            unsafe { calls::csr2csc(h, &p, None, work.map_or(std::ptr::null_mut(), |w| w as _)) }?;
            Ok(out)
        });
        self.trim();
        done
    }

    /// Writes `a` into the dense `out`, column- or row-major (zeros where `a` stores nothing).
    pub fn sparse_to_dense<T: SparseValue, I: SparseIndex>(
        &mut self,
        a: &SparseMatrix<T, I>,
        out: DenseMatrix<'_, T>,
    ) -> Result<Completion<()>> {
        if matches!(a.format, Format::Bsr | Format::BlockedEll) {
            return Err(Error::invalid("a", format!("is {:?}; sparse_to_dense takes CSR, CSC or COO", a.format)));
        }
        let ld = out.check("out", "out.ld")?;
        if (out.rows, out.cols) != (a.rows, a.cols) {
            return Err(Error::invalid("out", format!("is {}x{}; A is {}x{}", out.rows, out.cols, a.rows, a.cols)));
        }
        not_in_matrix("out", out.buf, a)?;
        let mut rec = self.op.recorder("sparse_to_dense");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "out", out.buf, Access::Write)?;
        if self.simulated() {
            return self.sim_sparse_to_dense(rec, a, (out, ld));
        }
        let h = self.handle()?;
        let (da, db) = (self.mat(a)?, self.dense(&out, ld)?);
        let key = mat_words(&mat_key(a))
            .into_iter()
            .chain(dense_words(out.buf.id(), [out.rows, out.cols, ld as usize], T::CUDA_TYPE))
            .chain([out.order as u64])
            .collect();
        // SAFETY: (1) a live handle; (2) descriptors of validated, live buffers.
        let bytes = self.size("sparse_to_dense", key, || unsafe { calls::sparse_to_dense_size(h, da, db) })?;
        let work = self.work.use_on(&self.op, &mut rec, bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        let done = self.op.run(rec, Vec::new(), || {
            // SAFETY: as above; (3) the workspace, declared read-write, holds the size queried.
            unsafe { calls::sparse_to_dense(h, da, db, work.map_or(std::ptr::null_mut(), |w| w as _)) }
        });
        self.trim();
        done
    }

    /// The nonzeros of the dense `dense` (column- or row-major) as a CSR matrix with index type `I`,
    /// freshly allocated, returned through the completion.
    ///
    /// **Blocks** the calling thread until the GPU has counted the nonzeros: cuSPARSE's
    /// analysis phase hands the count to the host, and the output is sized from it. For the
    /// same reason it is not recorded into a graph: on a stream a [`Graph`](crate::Graph)
    /// recording holds it fails with [`Error::Recording`].
    pub fn dense_to_csr<T: SparseValue, I: SparseIndex>(
        &mut self,
        dense: DenseMatrix<'_, T>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        self.dense_to_sparse(dense, Format::Csr, "dense_to_csr").map(|(_, done)| done)
    }

    /// The nonzeros of the dense `dense` (column- or row-major) as a CSC matrix with index type
    /// `I` (row indices sorted within each column), freshly allocated, returned through the
    /// completion.
    ///
    /// **Blocks** the calling thread until the GPU has counted the nonzeros, and is not recorded
    /// into a graph, as [`dense_to_csr`](Self::dense_to_csr) says.
    pub fn dense_to_csc<T: SparseValue, I: SparseIndex>(
        &mut self,
        dense: DenseMatrix<'_, T>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        self.dense_to_sparse(dense, Format::Csc, "dense_to_csc").map(|(_, done)| done)
    }

    /// The nonzeros of the dense `dense` (column- or row-major) as a COO matrix with index type
    /// `I`, sorted by row, freshly allocated, returned through the completion.
    ///
    /// **Blocks** the calling thread until the GPU has counted the nonzeros, and is not recorded
    /// into a graph, as [`dense_to_csr`](Self::dense_to_csr) says.
    pub fn dense_to_coo<T: SparseValue, I: SparseIndex>(
        &mut self,
        dense: DenseMatrix<'_, T>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        self.dense_to_sparse(dense, Format::Coo, "dense_to_coo").map(|(_, done)| done)
    }

    /// Dense → CSR, CSC or COO (`cusparseDenseToSparse_*`): the analysis counts the nonzeros
    /// (and writes the offsets of the compressed formats), the host waits for the count, the
    /// output's other arrays are allocated, and the conversion fills them. The output comes
    /// back at once too, for ops that go on converting it on the stream. `op`: the op called,
    /// which its errors name (`dense_to_bsr` converts through CSR).
    pub(super) fn dense_to_sparse<T: SparseValue, I: SparseIndex>(
        &mut self,
        dense: DenseMatrix<'_, T>,
        format: Format,
        op: &'static str,
    ) -> Result<Converted<T, I>> {
        let ld = dense.check("dense", "dense.ld")?;
        if dense.rows > I::MAX || dense.cols > I::MAX {
            return Err(Error::invalid(
                "dense",
                format!("{}x{} does not fit {:?} indices", dense.rows, dense.cols, I::KIND),
            ));
        }
        let names = match format {
            Format::Csr => ["dense_to_csr.analysis", "dense_to_csr.convert"],
            Format::Csc => ["dense_to_csc.analysis", "dense_to_csc.convert"],
            _ => ["dense_to_coo.analysis", "dense_to_coo.convert"],
        };
        // The compressed formats' offsets, written by the analysis; COO has none until counted.
        let outer = match format {
            Format::Csr => Some(dense.rows),
            Format::Csc => Some(dense.cols),
            _ => None,
        };
        self.refuse_in_graph("a dense to sparse conversion, whose output the host sizes from a count the GPU makes,")?;
        let mut rec = self.op.recorder(names[0]);
        record(&mut rec, "dense", dense.buf, Access::Read)?;
        let dev = self.op.device.clone();
        let offsets = match outer {
            Some(n) => {
                let len = n.checked_add(1).ok_or_else(|| Error::invalid("dense", "has too many rows or columns"))?;
                let o: GpuRef<I> = dev.alloc(self.op.stream, len)?;
                record(&mut rec, "out.offsets", &o, Access::Write)?;
                Some(o)
            }
            None => None,
        };
        // The nonzeros counted are the dense matrix's: the conversion must see the same one.
        let inputs = SameInputs::new(op, &dev).input("dense", dense.buf);
        if self.simulated() {
            return self.sim_dense_to_sparse(rec, (dense, ld), format, offsets, names[1], &inputs);
        }
        let h = self.handle()?;
        let parts = calls::SpMatParts {
            format,
            rows: dense.rows as i64,
            cols: dense.cols as i64,
            nnz: 0,
            major: offsets.as_ref().map(dptr).transpose()?.unwrap_or(std::ptr::null_mut()),
            minor: std::ptr::null_mut(),
            values: std::ptr::null_mut(),
            index: I::KIND,
            value: T::CUDA_TYPE,
            block: 0,
        };
        // SAFETY: (1) the offsets (CSR, CSC) hold rows + 1 or cols + 1 entries; (2) the other
        // arrays are null until set, before converting.
        let db = unsafe { calls::create_sp_mat(&parts) }?;
        let da = self.dense(&dense, ld)?;
        // SAFETY: (1) a live handle; (2) descriptors of validated, live buffers.
        let bytes = unsafe { calls::dense_to_sparse_size(h, da, db.get()) }?;
        // Its own buffer: the analysis leaves state in it for the conversion.
        let buffer: GpuRef<u8> = dev.alloc_scratch(self.op.stream, bytes.max(1))?;
        record(&mut rec, "conversion buffer", &buffer, Access::ReadWrite)?;
        let bp = buffer.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut nnz = 0i64;
        let analysed = self.op.run(rec, Vec::new(), || {
            inputs.note()?;
            // SAFETY: as above; (3) the buffer holds the size queried. Getting the size waits
            // for the analysis inside cuSPARSE: the documented blocking step.
            unsafe { calls::dense_to_sparse(h, da, db.get(), bp, false) }?;
            nnz = calls::sp_mat_size(db.get())?.2;
            Ok(())
        });
        if let Err(e) = analysed {
            self.op.retire("a cuSPARSE conversion descriptor", db);
            return Err(e);
        }
        let nnz =
            usize::try_from(nnz).map_err(|_| Error::invalid("dense", format!("cuSPARSE counted {nnz} nonzeros")))?;
        let (major, indices, values) = self.sparse_arrays::<T, I>(offsets, nnz)?;
        let out = SparseMatrix::new(format, dense.rows, dense.cols, nnz, &major, &indices, &values)?;
        let made = out.clone();
        let mut rec = self.op.recorder(names[1]);
        record(&mut rec, "dense", dense.buf, Access::Read)?;
        record(&mut rec, "conversion buffer", &buffer, Access::ReadWrite)?;
        let major_use = if outer.is_some() { Access::ReadWrite } else { Access::Write };
        record(&mut rec, if outer.is_some() { "out.offsets" } else { "out.row_indices" }, &major, major_use)?;
        record(&mut rec, "out.indices", &indices, Access::Write)?;
        record(&mut rec, "out.values", &values, Access::Write)?;
        let arrays = calls::Arrays { offsets: dptr(&major)?, indices: dptr(&indices)?, values: dptr(&values)? };
        let done = self.op.run(rec, Vec::new(), || {
            inputs.check()?;
            // SAFETY: (1) to (3) as above; (4) the output's arrays hold its offsets (or nnz row
            // indices) and nnz indices and values, recorded as written; (5) `dense` holds the
            // nonzeros counted: no write of it committed since the analysis read it (checked
            // just above, under this launch's marks, which no write can pass until it
            // commits).
            unsafe {
                match format {
                    Format::Csr => calls::csr_set_pointers(db.get(), arrays.offsets, arrays.indices, arrays.values)?,
                    _ => calls::set_pointers(db.get(), format == Format::Csc, arrays)?,
                }
                calls::dense_to_sparse(h, da, db.get(), bp, true)
            }?;
            Ok(out)
        });
        self.op.retire("a cuSPARSE conversion descriptor", db);
        self.trim();
        Ok((made, done?))
    }

    /// The arrays of a dense → sparse conversion's output of `nnz` counted nonzeros: the
    /// offsets the analysis wrote (or, for COO, fresh row indices), fresh indices and values.
    pub(super) fn sparse_arrays<T: SparseValue, I: SparseIndex>(
        &mut self,
        offsets: Option<GpuRef<I>>,
        nnz: usize,
    ) -> Result<(GpuRef<I>, GpuRef<I>, GpuRef<T>)> {
        let dev = self.op.device.clone();
        let major = match offsets {
            Some(o) => o,
            None => dev.alloc(self.op.stream, nnz.max(1))?,
        };
        Ok((major, dev.alloc(self.op.stream, nnz.max(1))?, dev.alloc(self.op.stream, nnz.max(1))?))
    }
}
