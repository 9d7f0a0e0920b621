//! The simulator's mixed-precision SpMV and SpMM: the inputs read exactly, the products summed
//! in the row's accumulator (`f64`, or `i64` for the integer row) and the result rounded once
//! into the output type ([`MixedArith`]).

use super::host::{HostDense, HostMat};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::matrix::MixedArith;
use crate::libs::sparse::{DenseMatrix, Sparse, SparseIndex, SparseMatrix, SparseStorage, Transpose};
use crate::memory::{Element, GpuRef};
use crate::recorder::LaunchRecorder;

impl Sparse {
    pub(in crate::libs::sparse) fn sim_spmv_mixed<X, Y, I>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        (alpha, beta): (X::Compute, X::Compute),
        a: &SparseMatrix<X, I>,
        x: &GpuRef<X>,
        y: &GpuRef<Y>,
    ) -> Result<Completion<()>>
    where
        X: SparseStorage + MixedArith<Y>,
        Y: Element,
        I: SparseIndex,
    {
        let (am, xm, ym) = (HostMat::of(a)?, x.sim_data()?, y.sim_data()?);
        let (m, _) = crate::libs::sparse::ops::op_shape(op_a, a);
        self.host(rec, move || {
            let e = am.entries()?;
            let x = xm.read().to_vec();
            let mut acc = vec![X::acc_zero(); m];
            for (r, c, v) in e {
                let (i, j) = if op_a.flips() { (c, r) } else { (r, c) };
                acc[i] = X::mul_add(acc[i], v, x[j]);
            }
            let mut y = ym.lock();
            for (i, s) in acc.into_iter().enumerate() {
                y[i] = X::finish(alpha, s, beta, || y[i]);
            }
            Ok(())
        })
    }

    pub(in crate::libs::sparse) fn sim_spmm_mixed<X, Y, I>(
        &mut self,
        rec: LaunchRecorder,
        op_a: Transpose,
        (alpha, beta): (X::Compute, X::Compute),
        a: &SparseMatrix<X, I>,
        (b, ldb): (DenseMatrix<'_, X>, i64),
        (c, ldc): (DenseMatrix<'_, Y>, i64),
    ) -> Result<Completion<()>>
    where
        X: SparseStorage + MixedArith<Y>,
        Y: Element,
        I: SparseIndex,
    {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        self.host(rec, move || {
            let e = am.entries()?;
            let b = bm.mem.read().to_vec();
            let (m, n) = (cm.rows, cm.cols);
            let mut acc = vec![X::acc_zero(); m * n];
            for (r, col, v) in e {
                let (i, l) = if op_a.flips() { (col, r) } else { (r, col) };
                for j in 0..n {
                    acc[i + j * m] = X::mul_add(acc[i + j * m], v, b[bm.at(l, j)]);
                }
            }
            let mut out = cm.mem.lock();
            for j in 0..n {
                for i in 0..m {
                    let o = cm.at(i, j);
                    out[o] = X::finish(alpha, acc[i + j * m], beta, || out[o]);
                }
            }
            Ok(())
        })
    }
}
