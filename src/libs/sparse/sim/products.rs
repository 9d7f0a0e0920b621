//! The simulator's products of a sparse and dense operands: SpMV, SpMM and SDDMM, each the
//! plain sum over the stored entries, blended into the output with `alpha` / `beta`.

use super::host::{HostDense, HostMat};
use super::{at, blend, span};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::{DenseMatrix, Sparse, SparseIndex, SparseMatrix, SparseValue, Transpose};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;

impl Sparse {
    #[allow(clippy::too_many_arguments)]
    pub(in crate::libs::sparse) fn sim_spmv<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (am, xm, ym) = (HostMat::of(a)?, x.sim_data()?, y.sim_data()?);
        let (m, _) = super::super::ops::op_shape(op_a, a);
        self.host(rec, move || {
            let e = am.entries()?;
            let x = xm.read().to_vec();
            let mut acc = vec![T::zero(); m];
            for (r, c, v) in e {
                let (i, j) = if op_a.flips() { (c, r) } else { (r, c) };
                acc[i] = acc[i].plus(op_a.value(v).times(x[j]));
            }
            let mut y = ym.lock();
            for (i, s) in acc.into_iter().enumerate() {
                y[i] = blend(alpha, s, beta, || y[i]);
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::libs::sparse) fn sim_spmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        [op_a, op_b]: [Transpose; 2],
        alpha: T,
        a: &SparseMatrix<T, I>,
        (b, ldb): (DenseMatrix<'_, T>, i64),
        beta: T,
        (c, ldc): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        self.host(rec, move || {
            let e = am.entries()?;
            let b = bm.mem.read().to_vec();
            // op(B)[l, j].
            let eb = |l: usize, j: usize| if op_b.flips() { op_b.value(b[bm.at(j, l)]) } else { b[bm.at(l, j)] };
            let (m, n) = (cm.rows, cm.cols);
            let mut acc = vec![T::zero(); m * n];
            for (r, col, v) in e {
                let (i, l) = if op_a.flips() { (col, r) } else { (r, col) };
                let v = op_a.value(v);
                for j in 0..n {
                    acc[i + j * m] = acc[i + j * m].plus(v.times(eb(l, j)));
                }
            }
            let mut out = cm.mem.lock();
            for j in 0..n {
                for i in 0..m {
                    let o = cm.at(i, j);
                    out[o] = blend(alpha, acc[i + j * m], beta, || out[o]);
                }
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::libs::sparse) fn sim_spmm_batched<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        alpha: T,
        a: &SparseMatrix<T, I>,
        (b, ldb): (DenseMatrix<'_, T>, i64),
        beta: T,
        (c, ldc): (DenseMatrix<'_, T>, i64),
        batch: crate::libs::sparse::SpmmBatch,
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        self.host(rec, move || {
            let (major, minor, values) = am.arrays();
            let bv = bm.mem.read().to_vec();
            let (m, n) = (cm.rows, cm.cols);
            for i in 0..batch.count {
                let (so, se) = (i * batch.a_offsets, i * batch.a_entries);
                let e = am.entries_in(&major[so..], &minor[se..], &values[se..])?;
                let (bo, co) = (i * batch.b, i * batch.c);
                let mut acc = vec![T::zero(); m * n];
                for (r, col, v) in e {
                    let (row, l) = if op_a.flips() { (col, r) } else { (r, col) };
                    let v = op_a.value(v);
                    for j in 0..n {
                        acc[row + j * m] = acc[row + j * m].plus(v.times(bv[bo + bm.at(l, j)]));
                    }
                }
                let mut out = cm.mem.lock();
                for j in 0..n {
                    for r in 0..m {
                        let o = co + cm.at(r, j);
                        out[o] = blend(alpha, acc[r + j * m], beta, || out[o]);
                    }
                }
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::libs::sparse) fn sim_sddmm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        [op_a, op_b]: [Transpose; 2],
        alpha: T,
        (a, lda): (DenseMatrix<'_, T>, i64),
        (b, ldb): (DenseMatrix<'_, T>, i64),
        beta: T,
        c: &SparseMatrix<T, I>,
    ) -> Result<Completion<()>> {
        let (am, bm) = (HostDense::of(&a, lda)?, HostDense::of(&b, ldb)?);
        let k = if op_a.flips() { a.rows } else { a.cols };
        let same = a.buf.id() == b.buf.id();
        let (c_off, c_idx, c_val) = (c.major.sim_data()?, c.minor.sim_data()?, c.values.sim_data()?);
        let (rows, cols, nnz) = (c.rows, c.cols, c.nnz);
        // `sddmm` admits CSR outputs only (it refuses BSR, which cuSPARSE does not sample into).
        self.host(rec, move || {
            let av = am.mem.read().to_vec();
            let bv = if same { av.clone() } else { bm.mem.read().to_vec() };
            let offsets = c_off.read().to_vec();
            let idx = c_idx.read().to_vec();
            // op(A)[i, l] and op(B)[l, j].
            let ea = |i: usize, l: usize| op_a.value(if op_a.flips() { av[am.at(l, i)] } else { av[am.at(i, l)] });
            let eb = |l: usize, j: usize| op_b.value(if op_b.flips() { bv[bm.at(j, l)] } else { bv[bm.at(l, j)] });
            let mut out = c_val.lock();
            for i in 0..rows {
                for p in span("c.offsets", &offsets, i, nnz)? {
                    let j = at("c.indices", idx[p], cols)?;
                    let mut s = T::zero();
                    for l in 0..k {
                        s = s.plus(ea(i, l).times(eb(l, j)));
                    }
                    out[p] = blend(alpha, s, beta, || out[p]);
                }
            }
            Ok(())
        })
    }
}
