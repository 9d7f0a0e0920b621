//! BSR conversions: CSR → BSR (`cusparseXcsr2bsrNnz`, then `cusparse?csr2bsr`), BSR → CSR
//! (`cusparse?bsr2csr`), and dense ↔ BSR through CSR on the stream.
//!
//! cuSPARSE converts BSR only in its legacy API, with `i32` indices: the ops take and make
//! `SparseMatrix<T, i32>`. Blocks are row-major inside, as everywhere in cusched; CSR → BSR
//! keeps every block holding a stored entry (zeros fill the rest of the block), BSR → CSR
//! keeps every value of every block, zeros included.

use super::convert::Converted;
use super::matrix::ValueType;
use super::phases::SameInputs;
use super::{calls, record_matrix, DenseMatrix, Format, Sparse, SparseMatrix, SparseValue};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

impl Sparse {
    /// The CSR matrix `a` as a BSR matrix of `block x block` blocks (`a`'s rows and columns
    /// multiples of `block`), freshly allocated, returned through the completion: every block
    /// that holds a stored entry of `a`, its other values zero. `a`'s column indices are sorted
    /// within each row, as the legacy conversion assumes (duplicates add up on the simulator).
    ///
    /// **Blocks** the calling thread until the GPU has counted the blocks:
    /// `cusparseXcsr2bsrNnz` hands the count to the host, and the output is sized from it. For
    /// the same reason it is not recorded into a graph ([`Error::Recording`]).
    pub fn csr_to_bsr<T: SparseValue>(
        &mut self,
        a: &SparseMatrix<T, i32>,
        block: usize,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        self.csr_to_bsr_parts(a, block, "csr_to_bsr").map(|(_, done)| done)
    }

    /// The BSR matrix `a` in CSR form, freshly allocated, returned through the completion: every
    /// value of every block is an entry (zeros too), column indices sorted within each row when
    /// `a`'s block-column indices are sorted within each block row. Never blocks.
    pub fn bsr_to_csr<T: SparseValue>(&mut self, a: &SparseMatrix<T, i32>) -> Result<Completion<SparseMatrix<T, i32>>> {
        self.bsr_to_csr_parts(a).map(|(_, done)| done)
    }

    /// The nonzeros of the dense `dense` (column- or row-major) as a BSR matrix of
    /// `block x block` blocks: every block holding a nonzero, its other values zero. Converts
    /// through CSR on the stream.
    ///
    /// **Blocks** the calling thread twice: until the GPU has counted the nonzeros, and then the
    /// blocks (as [`dense_to_csr`](Self::dense_to_csr) and [`csr_to_bsr`](Self::csr_to_bsr) do),
    /// and for the same reason is not recorded into a graph ([`Error::Recording`]).
    pub fn dense_to_bsr<T: SparseValue>(
        &mut self,
        dense: DenseMatrix<'_, T>,
        block: usize,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        // The block shape is checked before anything is recorded.
        block_grid("block", dense.rows, dense.cols, block)?;
        let (csr, counted) = self.dense_to_sparse::<T, i32>(dense, Format::Csr, "dense_to_bsr")?;
        let (_, done) = self.csr_to_bsr_parts(&csr, block, "dense_to_bsr")?;
        // The conversion's own failure (the first phase's completion) is the op's too.
        Ok(self.op.device.join([counted.map(|_| None), done.map(Some)]).try_map(|v| {
            v.into_iter().flatten().next().ok_or_else(|| Error::invalid("dense", "the BSR conversion made no matrix"))
        }))
    }

    /// Writes the BSR matrix `a` into the dense `out`, column- or row-major (zeros where `a`
    /// stores nothing). Converts through CSR on the stream ([`bsr_to_csr`](Self::bsr_to_csr),
    /// then [`sparse_to_dense`](Self::sparse_to_dense)). Never blocks.
    pub fn bsr_to_dense<T: SparseValue>(
        &mut self,
        a: &SparseMatrix<T, i32>,
        out: DenseMatrix<'_, T>,
    ) -> Result<Completion<()>> {
        if a.format != Format::Bsr {
            return Err(Error::invalid("a", format!("is {:?}; bsr_to_dense takes BSR", a.format)));
        }
        // Everything sparse_to_dense checks, before the first phase records anything.
        out.check("out", "out.ld")?;
        if (out.rows, out.cols) != (a.rows, a.cols) {
            return Err(Error::invalid("out", format!("is {}x{}; A is {}x{}", out.rows, out.cols, a.rows, a.cols)));
        }
        super::not_in_matrix("out", out.buf, a)?;
        // The buffers' devices and generations, checked on a recorder that never runs.
        let mut probe = self.op.recorder("bsr_to_dense");
        record_matrix(&mut probe, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut probe, "out", out.buf, Access::Write)?;
        drop(probe);
        let (csr, converted) = self.bsr_to_csr_parts(a)?;
        let written = self.sparse_to_dense(&csr, out)?;
        // The conversion's own failure is the op's too.
        Ok(self.op.device.join([converted.map(|_| ()), written]).map(|_| ()))
    }

    /// CSR → BSR, returning the output at once too (for ops that go on using it).
    fn csr_to_bsr_parts<T: SparseValue>(
        &mut self,
        a: &SparseMatrix<T, i32>,
        block: usize,
        name: &'static str,
    ) -> Result<Converted<T, i32>> {
        if a.format != Format::Csr {
            return Err(Error::invalid("a", format!("is {:?}; csr_to_bsr takes CSR", a.format)));
        }
        let (brows, _) = block_grid("block", a.rows, a.cols, block)?;
        self.refuse_in_graph("a CSR to BSR conversion, whose output the host sizes from a count the GPU makes,")?;
        // SparseMatrix keeps rows, cols and nnz within i32 for i32 indices; block divides rows.
        let shape = calls::BlockShape { rows: a.rows as i32, cols: a.cols as i32, block: block as i32 };
        let mut rec = self.op.recorder(if name == "csr_to_bsr" { "csr_to_bsr.count" } else { "dense_to_bsr.count" });
        record(&mut rec, "a.offsets", &a.major, Access::Read)?;
        record(&mut rec, "a.indices", &a.minor, Access::Read)?;
        let dev = self.op.device.clone();
        let offsets: GpuRef<i32> = dev.alloc(self.op.stream, brows + 1)?;
        record(&mut rec, "out.offsets", &offsets, Access::Write)?;
        // The blocks depend on the structure only: the fill must see the one counted.
        let inputs = SameInputs::new(name, &dev).input("a.offsets", &a.major).input("a.indices", &a.minor);
        let blocks = if self.simulated() {
            self.sim_csr_to_bsr_count(rec, a, block, &offsets, &inputs)?
        } else {
            let h = self.handle()?;
            let (ao, ai, oo) = (dptr(&a.major)?, dptr(&a.minor)?, dptr(&offsets)?);
            let mut total = 0i32;
            self.op.run(rec, Vec::new(), || {
                inputs.note()?;
                // SAFETY: (1) a live handle on the fenced stream, its context current; (2) `a`'s
                // arrays hold rows + 1 offsets and nnz indices (validated when `a` was made),
                // `offsets` rows / block + 1 entries, recorded as written. The count's return to
                // the host waits for the GPU: the documented blocking step.
                total = unsafe { calls::csr2bsr_nnz(h, shape, ao, ai, oo) }?;
                Ok(())
            })?;
            usize::try_from(total).map_err(|_| Error::invalid("a", format!("cuSPARSE counted {total} blocks")))?
        };
        let area = block * block;
        let need = blocks.checked_mul(area).filter(|&n| i32::try_from(n).is_ok()).ok_or_else(|| {
            Error::invalid("a", format!("its {blocks} blocks of {block}x{block} values do not fit i32 indices"))
        })?;
        let indices: GpuRef<i32> = dev.alloc(self.op.stream, blocks.max(1))?;
        let values: GpuRef<T> = dev.alloc(self.op.stream, need.max(1))?;
        let out = SparseMatrix::bsr(a.rows, a.cols, block, blocks, &offsets, &indices, &values)?;
        let made = out.clone();
        let mut rec =
            self.op.recorder(if name == "csr_to_bsr" { "csr_to_bsr.convert" } else { "dense_to_bsr.convert" });
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        record(&mut rec, "out.offsets", &offsets, Access::Read)?;
        record(&mut rec, "out.indices", &indices, Access::Write)?;
        record(&mut rec, "out.values", &values, Access::Write)?;
        if self.simulated() {
            let done = self.sim_block_convert(rec, a, out, Some(&inputs))?;
            return Ok((made, done));
        }
        let h = self.handle()?;
        let from = calls::Arrays { offsets: dptr(&a.major)?, indices: dptr(&a.minor)?, values: dptr(&a.values)? };
        let to = calls::Arrays { offsets: dptr(&offsets)?, indices: dptr(&indices)?, values: dptr(&values)? };
        let done = self.op.run(rec, Vec::new(), || {
            inputs.check()?;
            // SAFETY: (1) and (2) as above; (3) `offsets` holds the block-row offsets the count
            // wrote, `indices` and `values` the counted blocks and their block x block values,
            // recorded as written; (4) `a`'s structure is the one counted: no write of it
            // committed since the count read it (checked just above, under this launch's
            // marks, which no write can pass until it commits).
            unsafe { calls::block_convert(h, true, T::CUDA_TYPE, shape, from, to) }?;
            Ok(out)
        });
        self.trim();
        Ok((made, done?))
    }

    /// BSR → CSR, returning the output at once too (for ops that go on using it).
    pub(super) fn bsr_to_csr_parts<T: SparseValue>(&mut self, a: &SparseMatrix<T, i32>) -> Result<Converted<T, i32>> {
        if a.format != Format::Bsr {
            return Err(Error::invalid("a", format!("is {:?}; bsr_to_csr takes BSR", a.format)));
        }
        let block = a.block;
        // SparseMatrix::bsr kept blocks * block * block within i32.
        let nnz = a
            .nnz
            .checked_mul(block * block)
            .filter(|&n| i32::try_from(n).is_ok())
            .ok_or_else(|| Error::invalid("a", "its values do not fit i32 indices"))?;
        let mut rec = self.op.recorder("bsr_to_csr");
        record_matrix(&mut rec, ["a.offsets", "a.indices", "a.values"], a)?;
        let dev = self.op.device.clone();
        let offsets: GpuRef<i32> = dev.alloc(self.op.stream, a.rows + 1)?;
        let indices: GpuRef<i32> = dev.alloc(self.op.stream, nnz.max(1))?;
        let values: GpuRef<T> = dev.alloc(self.op.stream, nnz.max(1))?;
        record(&mut rec, "out.offsets", &offsets, Access::Write)?;
        record(&mut rec, "out.indices", &indices, Access::Write)?;
        record(&mut rec, "out.values", &values, Access::Write)?;
        let out = SparseMatrix::csr(a.rows, a.cols, nnz, &offsets, &indices, &values)?;
        let made = out.clone();
        if self.simulated() {
            let done = self.sim_block_convert(rec, a, out, None)?;
            return Ok((made, done));
        }
        let h = self.handle()?;
        let shape = calls::BlockShape { rows: a.rows as i32, cols: a.cols as i32, block: block as i32 };
        let from = calls::Arrays { offsets: dptr(&a.major)?, indices: dptr(&a.minor)?, values: dptr(&a.values)? };
        let to = calls::Arrays { offsets: dptr(&offsets)?, indices: dptr(&indices)?, values: dptr(&values)? };
        let done = self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle on the fenced stream, its context current; (2) `a`'s
            // arrays hold rows / block + 1 offsets, its blocks' indices and values (validated
            // when `a` was made); (3) the output's arrays hold rows + 1 offsets and one index
            // and value per value of every block, recorded as written.
            unsafe { calls::block_convert(h, false, T::CUDA_TYPE, shape, from, to) }?;
            Ok(out)
        });
        self.trim();
        Ok((made, done?))
    }
}

/// The block grid of a `rows x cols` matrix of `block x block` blocks, or the error naming
/// `arg`.
fn block_grid(arg: &'static str, rows: usize, cols: usize, block: usize) -> Result<(usize, usize)> {
    if block == 0 || rows % block != 0 || cols % block != 0 {
        return Err(Error::invalid(arg, format!("{block} does not divide the {rows}x{cols} matrix into blocks")));
    }
    Ok((rows / block, cols / block))
}
