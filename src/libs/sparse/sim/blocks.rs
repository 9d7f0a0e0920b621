//! The simulator's BSR conversions: CSR → BSR in the GPU path's two phases (count the blocks
//! into the block-row offsets, the host waiting for the count; then fill the fresh arrays), and
//! BSR → CSR in one.

use super::host::HostMat;
use super::{at, span};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::matrix::IndexArith;
use crate::libs::sparse::phases::SameInputs;
use crate::libs::sparse::{Format, Sparse, SparseMatrix, SparseValue};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use std::collections::BTreeMap;

/// Each block row's blocks of a CSR matrix's entries: block column → the block's values
/// (row-major), in block-column order, as `cusparse?csr2bsr` lays them out.
type BlockRows<T> = Vec<BTreeMap<usize, Vec<T>>>;

fn block_rows<T: SparseValue>(entries: &[(usize, usize, T)], rows: usize, b: usize) -> BlockRows<T> {
    let mut out: BlockRows<T> = (0..rows / b).map(|_| BTreeMap::new()).collect();
    for &(r, c, v) in entries {
        let blk = out[r / b].entry(c / b).or_insert_with(|| vec![T::zero(); b * b]);
        let e = (r % b) * b + c % b;
        blk[e] = blk[e].plus(v);
    }
    out
}

impl Sparse {
    /// CSR → BSR's first phase: the block-row offsets into `offsets`, and the number of blocks,
    /// once the stream has run it (the host waits, as `cusparseXcsr2bsrNnz` makes it).
    pub(in crate::libs::sparse) fn sim_csr_to_bsr_count<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        block: usize,
        offsets: &GpuRef<i32>,
        inputs: &SameInputs,
    ) -> Result<usize> {
        // The count reads the structure only (the values are not declared for it).
        let (ao, ai, om) = (a.major.sim_data()?, a.minor.sim_data()?, offsets.sim_data()?);
        let (rows, cols, nnz) = (a.rows, a.cols, a.nnz);
        self.host_checked(
            rec,
            || inputs.note(),
            move || {
                let (offs, idx) = (ao.read().to_vec(), ai.read().to_vec());
                let mut counts = vec![0i32];
                let mut total = 0;
                for br in 0..rows / block {
                    let mut cols_of = std::collections::BTreeSet::new();
                    for r in br * block..(br + 1) * block {
                        for p in span("a.offsets", &offs, r, nnz)? {
                            cols_of.insert(at("a.indices", idx[p], cols)? / block);
                        }
                    }
                    total += cols_of.len();
                    counts.push(i32::from_usize(total));
                }
                om.lock().copy_from_slice(&counts);
                Ok(total)
            },
        )?
        .wait()
    }

    /// CSR → BSR's second phase (`out` BSR) or BSR → CSR (`out` CSR): `a`'s entries into
    /// `out`'s fresh arrays. `inputs`: the first phase's inputs, which must be unchanged (CSR
    /// → BSR).
    pub(in crate::libs::sparse) fn sim_block_convert<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        out: SparseMatrix<T, i32>,
        inputs: Option<&SameInputs>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let am = HostMat::of(a)?;
        let (oo, oi, ov) = (out.major.sim_data()?, out.minor.sim_data()?, out.values.sim_data()?);
        let (to_bsr, b) = (out.format == Format::Bsr, out.block.max(a.block));
        let check = || inputs.map_or(Ok(()), SameInputs::check);
        // The matrix is known now, the kernel fills it: the completion resolves with it as the
        // GPU path's does (a recorded one too).
        let done = self.host_checked(rec, check, move || {
            let e = am.entries()?;
            let (mut offs, mut idx, mut val) = (vec![0i32], Vec::new(), Vec::new());
            if to_bsr {
                for row in block_rows(&e, am.rows, b) {
                    for (bc, blk) in row {
                        idx.push(i32::from_usize(bc));
                        val.extend(blk);
                    }
                    offs.push(i32::from_usize(idx.len()));
                }
            } else {
                // BSR's entries come block by block; regrouped by row (stably), each row takes
                // its part of every block of its block row, in storage order.
                let mut rows: Vec<Vec<(usize, T)>> = vec![Vec::new(); am.rows];
                for (r, c, v) in e {
                    rows[r].push((c, v));
                }
                for row in rows {
                    for (c, v) in row {
                        idx.push(i32::from_usize(c));
                        val.push(v);
                    }
                    offs.push(i32::from_usize(idx.len()));
                }
            }
            // CSR → BSR's block-row offsets are the count's, declared read here.
            if !to_bsr {
                oo.lock()[..offs.len()].copy_from_slice(&offs);
            }
            oi.lock()[..idx.len()].copy_from_slice(&idx);
            ov.lock()[..val.len()].copy_from_slice(&val);
            Ok(())
        })?;
        Ok(done.map(move |()| out))
    }
}
