//! The simulator's SpGEMM, one-shot and reusable: the CSR product with its symbolic structure
//! (sorted column indices, every structural product kept), computed in the GPU path's phases so
//! the host learns `C`'s size before allocating it.

use super::host::HostMat;
use super::{at, blend, span};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::sparse::phases::SameInputs;
use crate::libs::sparse::{Format, Sparse, SparseIndex, SparseMatrix, SparseValue};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;

/// `C = alpha A B` for CSR factors: `C`'s row offsets, sorted column indices and values. Every
/// structural product is kept, whatever its value (cuSPARSE's structure is symbolic).
type Product<T> = (Vec<usize>, Vec<usize>, Vec<T>);

fn product<T: SparseValue, I: SparseIndex>(alpha: T, a: &HostMat<T, I>, b: &HostMat<T, I>) -> Result<Product<T>> {
    let (ar, ac, av) = a.csr(["a.offsets", "a.indices"])?;
    let (br, bc, bv) = b.csr(["b.offsets", "b.indices"])?;
    let n = b.cols;
    let (mut mark, mut acc) = (vec![usize::MAX; n], vec![T::zero(); n]);
    let (mut offsets, mut cols, mut vals) = (vec![0usize], Vec::new(), Vec::new());
    let mut touched = Vec::new();
    for (i, row) in ar.iter().enumerate() {
        touched.clear();
        for p in row.clone() {
            let k = ac[p];
            for q in br[k].clone() {
                let j = bc[q];
                if mark[j] != i {
                    mark[j] = i;
                    acc[j] = T::zero();
                    touched.push(j);
                }
                acc[j] = acc[j].plus(av[p].times(bv[q]));
            }
        }
        touched.sort_unstable();
        for &j in &touched {
            cols.push(j);
            vals.push(alpha.times(acc[j]));
        }
        offsets.push(cols.len());
    }
    Ok((offsets, cols, vals))
}

impl Sparse {
    /// SpGEMM's work estimation on the host, waited for: the factors' structure checked, and
    /// the inputs noted while the launch holds its buffers.
    fn sim_spgemm_estimate<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
        inputs: &SameInputs,
    ) -> Result<()> {
        let (am, bm) = (HostMat::of(a)?, HostMat::of(b)?);
        self.host_checked(
            rec,
            || inputs.note(),
            move || {
                am.csr(["a.offsets", "a.indices"])?;
                bm.csr(["b.offsets", "b.indices"]).map(drop)
            },
        )?
        .wait()
    }

    /// SpGEMM's phases on the host: the work estimation (a pass over the factors' structure),
    /// the compute phase (the product, which the host waits for to learn `C`'s nonzeros), then
    /// `C`'s arrays allocated and the copy phase that fills them.
    pub(in crate::libs::sparse) fn sim_spgemm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
        inputs: &SameInputs,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        self.sim_spgemm_estimate(rec, a, b, inputs)?;
        let mut rec = self.op.recorder("spgemm.compute");
        crate::libs::sparse::spgemm::record_factors(&mut rec, a, b)?;
        let (am, bm) = (HostMat::of(a)?, HostMat::of(b)?);
        let (offsets, cols, vals) =
            self.host_checked(rec, || inputs.check(), move || product(alpha, &am, &bm))?.wait()?;
        let nnz = cols.len();
        if nnz > I::MAX {
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond {:?} indices", I::KIND)));
        }
        let dev = self.op.device.clone();
        let o: GpuRef<I> = dev.alloc(self.op.stream, a.rows + 1)?;
        let (i, v): (GpuRef<I>, GpuRef<T>) =
            (dev.alloc(self.op.stream, nnz.max(1))?, dev.alloc(self.op.stream, nnz.max(1))?);
        let c = SparseMatrix::new(Format::Csr, a.rows, b.cols, nnz, &o, &i, &v)?;
        let mut rec = self.op.recorder("spgemm.copy");
        crate::libs::sparse::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", &o, crate::track::Access::Write)?;
        crate::libs::record(&mut rec, "c.indices", &i, crate::track::Access::Write)?;
        crate::libs::record(&mut rec, "c.values", &v, crate::track::Access::Write)?;
        let (om, im, vm) = (o.sim_data()?, i.sim_data()?, v.sim_data()?);
        self.host_checked(
            rec,
            || inputs.check(),
            move || {
                for (d, s) in om.lock().iter_mut().zip(&offsets) {
                    *d = I::from_usize(*s);
                }
                for (d, s) in im.lock().iter_mut().zip(&cols) {
                    *d = I::from_usize(*s);
                }
                vm.lock()[..vals.len()].copy_from_slice(&vals);
                Ok(c)
            },
        )
    }

    /// The reusable SpGEMM's setup on the host, after its work estimation was recorded on
    /// `rec`: the nnz phase writes `C`'s offsets and returns its column indices (the host waits
    /// for it), the copy phase writes them into `C`'s fresh arrays. `C`'s values are left to
    /// the first compute, as on the GPU.
    pub(in crate::libs::sparse) fn sim_spgemm_structure<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
        offsets: &GpuRef<I>,
        inputs: &SameInputs,
    ) -> Result<SparseMatrix<T, I>> {
        use crate::track::Access;
        self.sim_spgemm_estimate(rec, a, b, inputs)?;
        let mut rec = self.op.recorder("spgemm_reuse.nnz");
        crate::libs::sparse::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", offsets, Access::Write)?;
        let (am, bm, om) = (HostMat::of(a)?, HostMat::of(b)?, offsets.sim_data()?);
        let cols = self
            .host_checked(
                rec,
                || inputs.check(),
                move || {
                    let (o, cols, _) = product(T::one(), &am, &bm)?;
                    for (d, s) in om.lock().iter_mut().zip(&o) {
                        *d = I::from_usize(*s);
                    }
                    Ok(cols)
                },
            )?
            .wait()?;
        let nnz = cols.len();
        if nnz > I::MAX {
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond {:?} indices", I::KIND)));
        }
        let dev = self.op.device.clone();
        let (i, v): (GpuRef<I>, GpuRef<T>) =
            (dev.alloc(self.op.stream, nnz.max(1))?, dev.alloc(self.op.stream, nnz.max(1))?);
        let c = SparseMatrix::new(Format::Csr, a.rows, b.cols, nnz, offsets, &i, &v)?;
        let mut rec = self.op.recorder("spgemm_reuse.copy");
        crate::libs::sparse::spgemm::record_factors(&mut rec, a, b)?;
        crate::libs::record(&mut rec, "c.offsets", offsets, Access::ReadWrite)?;
        crate::libs::record(&mut rec, "c.indices", &i, Access::Write)?;
        crate::libs::record(&mut rec, "c.values", &v, Access::Write)?;
        let im = i.sim_data()?;
        // The first compute waits for the copy on the stream (it reads C's structure).
        drop(self.host_checked(
            rec,
            || inputs.check(),
            move || {
                for (d, s) in im.lock().iter_mut().zip(&cols) {
                    *d = I::from_usize(*s);
                }
                Ok(())
            },
        )?);
        Ok(c)
    }

    /// The reusable SpGEMM's compute on the host: `C = alpha A B + beta C` at `C`'s structure,
    /// from `A` and `B`'s current values (`C`'s read only when `beta` is not zero), once the
    /// launch found `structure` (the plan's structure arrays) unchanged since the setup.
    pub(in crate::libs::sparse) fn sim_spgemm_values<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        alpha: T,
        beta: T,
        [a, b, c]: [&SparseMatrix<T, I>; 3],
        structure: &SameInputs,
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostMat::of(b)?, HostMat::of(c)?);
        self.host_checked(
            rec,
            || structure.check(),
            move || {
                let (o, cols, vals) = product(T::one(), &am, &bm)?;
                let (major, minor) = (cm.major.read().to_vec(), cm.minor.as_ref().map(|m| m.read().to_vec()));
                let minor = minor.unwrap_or_else(|| major.clone());
                let mut out = cm.values.lock();
                for r in 0..cm.rows {
                    let row = o[r]..o[r + 1];
                    for p in span("c.offsets", &major, r, cm.nnz)? {
                        let j = at("c.indices", minor[p], cm.cols)?;
                        // C's columns are sorted within the row, as the product's are.
                        let ab = match cols[row.clone()].binary_search(&j) {
                            Ok(q) => vals[row.start + q],
                            Err(_) => T::zero(),
                        };
                        out[p] = blend(alpha, ab, beta, || out[p]);
                    }
                }
                Ok(())
            },
        )
    }
}
