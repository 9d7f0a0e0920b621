//! The simulator's sparse-vector ops: axpby, gather and scatter between a sparse vector and a
//! dense one, with the vector's indices checked against its size.

use super::at;
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::{Sparse, SparseIndex, SparseValue, SparseVector};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;

impl Sparse {
    pub(in crate::libs::sparse) fn sim_axpby<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        x: &SparseVector<T, I>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, val) = (xi.read().to_vec(), xv.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut y = ym.lock();
            for v in &mut y[..size] {
                *v = if beta.is_zero() { T::zero() } else { beta.times(*v) };
            }
            for (k, &i) in pos.iter().enumerate() {
                y[i] = y[i].plus(alpha.times(val[k]));
            }
            Ok(())
        })
    }

    pub(in crate::libs::sparse) fn sim_gather<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        y: &GpuRef<T>,
        x: &SparseVector<T, I>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, y) = (xi.read().to_vec(), ym.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut out = xv.lock();
            for (k, i) in pos.into_iter().enumerate() {
                out[k] = y[i];
            }
            Ok(())
        })
    }

    pub(in crate::libs::sparse) fn sim_scatter<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        x: &SparseVector<T, I>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (xi, xv, ym) = (x.indices.sim_data()?, x.values.sim_data()?, y.sim_data()?);
        let (size, nnz) = (x.size, x.nnz);
        self.host(rec, move || {
            let (idx, val) = (xi.read().to_vec(), xv.read().to_vec());
            let pos = idx[..nnz].iter().map(|&i| at("x.indices", i, size)).collect::<Result<Vec<_>>>()?;
            let mut y = ym.lock();
            for (k, i) in pos.into_iter().enumerate() {
                y[i] = val[k];
            }
            Ok(())
        })
    }
}
