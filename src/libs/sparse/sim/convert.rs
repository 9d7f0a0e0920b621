//! The simulator's format conversions: sparse → dense, CSR ↔ CSC, CSR ↔ COO, and dense → CSR,
//! CSC or COO in the GPU path's two phases (count, then fill the freshly allocated arrays).

use super::host::{HostDense, HostMat};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::matrix::IndexArith;
use crate::libs::sparse::phases::SameInputs;
use crate::libs::sparse::{DenseMatrix, Format, Sparse, SparseIndex, SparseMatrix, SparseValue};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;

impl Sparse {
    pub(in crate::libs::sparse) fn sim_sparse_to_dense<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, I>,
        (out, ld): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, om) = (HostMat::of(a)?, HostDense::of(&out, ld)?);
        self.host(rec, move || {
            let e = am.entries()?;
            let mut d = om.mem.lock();
            for r in 0..om.rows {
                for c in 0..om.cols {
                    d[om.at(r, c)] = T::zero();
                }
            }
            for (r, c, v) in e {
                let o = om.at(r, c);
                d[o] = d[o].plus(v);
            }
            Ok(())
        })
    }

    /// CSR ↔ COO: `a`'s row structure into `out`'s fresh one (offsets expanded into one row
    /// index per entry, or row indices counted into offsets); the rest is shared.
    pub(in crate::libs::sparse) fn sim_rows_convert<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        out: SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let (src, dst) = (a.major.sim_data()?, out.major.sim_data()?);
        let (rows, nnz, to_coo) = (a.rows, a.nnz, a.format == Format::Csr);
        // The matrix is known now, the kernel fills it: the completion resolves with it as the
        // GPU path's does (a recorded one too).
        let done = self.host(rec, move || {
            let s = src.read().to_vec();
            let mut d = dst.lock();
            if to_coo {
                for r in 0..rows {
                    for p in super::span("a.offsets", &s, r, nnz)? {
                        d[p] = i32::from_usize(r);
                    }
                }
            } else {
                let mut counts = vec![0usize; rows + 1];
                for &r in &s[..nnz] {
                    counts[super::at("a.row_indices", r, rows)? + 1] += 1;
                }
                for r in 0..rows {
                    counts[r + 1] += counts[r];
                }
                for (o, c) in d.iter_mut().zip(&counts) {
                    *o = i32::from_usize(*c);
                }
            }
            drop(d);
            Ok(())
        })?;
        Ok(done.map(move |()| out))
    }

    /// CSR ↔ CSC: the stored entries regrouped by the other dimension (stable, so indices come
    /// out sorted within each group), into `out`'s fresh buffers.
    pub(in crate::libs::sparse) fn sim_convert_compressed<T: SparseValue>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, i32>,
        out: SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        let am = HostMat::of(a)?;
        let (oo, oi, ov) = (out.major.sim_data()?, out.minor.sim_data()?, out.values.sim_data()?);
        // Groups of the output: its columns for CSC out, its rows for CSR out.
        let groups = if a.format == Format::Csr { a.cols } else { a.rows };
        self.host(rec, move || {
            let e = am.entries()?;
            let key = |&(r, c, _): &(usize, usize, T)| if am.format == Format::Csr { (c, r) } else { (r, c) };
            let mut counts = vec![0usize; groups + 1];
            for t in &e {
                counts[key(t).0 + 1] += 1;
            }
            for g in 0..groups {
                counts[g + 1] += counts[g];
            }
            let mut next = counts.clone();
            let (mut idx, mut val) = (vec![0i32; e.len()], vec![T::zero(); e.len()]);
            for t in &e {
                let (g, other) = key(t);
                idx[next[g]] = i32::from_usize(other);
                val[next[g]] = t.2;
                next[g] += 1;
            }
            for (d, s) in oo.lock().iter_mut().zip(&counts) {
                *d = i32::from_usize(*s);
            }
            oi.lock()[..idx.len()].copy_from_slice(&idx);
            ov.lock()[..val.len()].copy_from_slice(&val);
            Ok(out)
        })
    }

    /// Dense → CSR, CSC or COO on the host, in the GPU path's two phases: the analysis counts
    /// the nonzeros (into `offsets` for the compressed formats, recorded on `rec`) and the host
    /// waits for the count; the output's arrays are then allocated and the conversion fills
    /// them.
    pub(in crate::libs::sparse) fn sim_dense_to_sparse<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        format: Format,
        offsets: Option<GpuRef<I>>,
        convert: &'static str,
        inputs: &SameInputs,
    ) -> Result<crate::libs::sparse::convert::Converted<T, I>> {
        use crate::track::Access;
        let nnz = self.sim_dense_count(rec, (dense, ld), format == Format::Csc, offsets.clone(), inputs)?;
        let compressed = offsets.is_some();
        let (major, indices, values) = self.sparse_arrays::<T, I>(offsets, nnz)?;
        let out = SparseMatrix::new(format, dense.rows, dense.cols, nnz, &major, &indices, &values)?;
        let mut rec = self.op.recorder(convert);
        crate::libs::record(&mut rec, "dense", dense.buf, Access::Read)?;
        if compressed {
            crate::libs::record(&mut rec, "out.offsets", &major, Access::ReadWrite)?;
        } else {
            crate::libs::record(&mut rec, "out.row_indices", &major, Access::Write)?;
        }
        crate::libs::record(&mut rec, "out.indices", &indices, Access::Write)?;
        crate::libs::record(&mut rec, "out.values", &values, Access::Write)?;
        let made = out.clone();
        Ok((made, self.sim_dense_fill(rec, (dense, ld), out, inputs)?))
    }

    /// Dense → sparse's first phase: counts the nonzeros of each row (each column, `by_col`)
    /// into `offsets` where there are any and returns the total, once the stream has run it
    /// (the host waits, as cuSPARSE's analysis makes it).
    fn sim_dense_count<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        by_col: bool,
        offsets: Option<GpuRef<I>>,
        inputs: &SameInputs,
    ) -> Result<usize> {
        let dm = HostDense::of(&dense, ld)?;
        let om = offsets.map(|o| o.sim_data()).transpose()?;
        self.host_checked(
            rec,
            || inputs.note(),
            move || {
                let d = dm.mem.read().to_vec();
                let (outer, inner) = if by_col { (dm.cols, dm.rows) } else { (dm.rows, dm.cols) };
                let at = |o: usize, i: usize| if by_col { dm.at(i, o) } else { dm.at(o, i) };
                let mut counts = vec![I::from_usize(0)];
                let mut total = 0usize;
                for o in 0..outer {
                    total += (0..inner).filter(|&i| !d[at(o, i)].is_zero()).count();
                    counts.push(I::from_usize(total));
                }
                if let Some(om) = om {
                    om.lock().copy_from_slice(&counts);
                }
                Ok(total)
            },
        )?
        .wait()
    }

    /// Dense → sparse's second phase: the nonzeros into `out`'s fresh arrays, row by row (CSR,
    /// COO: column indices, and COO's row indices) or column by column (CSC: row indices).
    fn sim_dense_fill<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        (dense, ld): (DenseMatrix<'_, T>, i64),
        out: SparseMatrix<T, I>,
        inputs: &SameInputs,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        let dm = HostDense::of(&dense, ld)?;
        let (oi, ov) = (out.minor.sim_data()?, out.values.sim_data()?);
        let rows_out = (out.format == Format::Coo).then(|| out.major.sim_data()).transpose()?;
        let (nnz, by_col) = (out.nnz, out.format == Format::Csc);
        self.host_checked(
            rec,
            || inputs.check(),
            move || {
                let d = dm.mem.read().to_vec();
                let (outer, inner) = if by_col { (dm.cols, dm.rows) } else { (dm.rows, dm.cols) };
                let at = |o: usize, i: usize| if by_col { dm.at(i, o) } else { dm.at(o, i) };
                let (mut idx, mut val) = (oi.lock(), ov.lock());
                let mut rows = rows_out.as_ref().map(|r| r.lock());
                let mut p = 0;
                for o in 0..outer {
                    for i in 0..inner {
                        let v = d[at(o, i)];
                        if !v.is_zero() && p < nnz {
                            (idx[p], val[p]) = (I::from_usize(i), v);
                            if let Some(r) = rows.as_mut() {
                                r[p] = I::from_usize(o);
                            }
                            p += 1;
                        }
                    }
                }
                drop((idx, val, rows));
                Ok(out)
            },
        )
    }
}
