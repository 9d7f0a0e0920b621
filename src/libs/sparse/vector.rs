//! [`SparseVector`] and the sparse-vector ops: axpby, gather and scatter, one enqueue each,
//! no external buffer.

use super::{calls, output_access, HostScalars, Sparse, SparseIndex, SparseValue};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{record, validate as check};
use crate::memory::{Element, GpuRef};
use crate::track::Access;

/// A sparse vector of `size` entries with `nnz` stored ones: zero-based `indices` (increasing,
/// each at most once, as cuSPARSE assumes) and their `values`, owning clones of the buffers.
#[derive(Clone, Debug)]
pub struct SparseVector<T: SparseValue, I: SparseIndex = i32> {
    pub(super) size: usize,
    pub(super) nnz: usize,
    pub(super) indices: GpuRef<I>,
    pub(super) values: GpuRef<T>,
}

impl<T: SparseValue, I: SparseIndex> SparseVector<T, I> {
    /// A vector of `size` entries whose `nnz` nonzeros sit at `indices` with `values` (each
    /// holding at least `nnz` elements). Index ranges are not checked here (a pass over the
    /// data): see [`check`](Self::check).
    pub fn new(size: usize, nnz: usize, indices: &GpuRef<I>, values: &GpuRef<T>) -> Result<Self> {
        if size == 0 || size > I::MAX || i64::try_from(size).is_err() {
            return Err(Error::invalid(
                "size",
                format!("{size} is not a positive count that fits {:?} indices", I::KIND),
            ));
        }
        if nnz > size {
            return Err(Error::invalid("nnz", format!("{nnz} nonzeros do not fit {size} entries")));
        }
        if indices.len() < nnz {
            return Err(Error::invalid(
                "indices",
                format!("holds {} entries, fewer than the {nnz} nonzeros", indices.len()),
            ));
        }
        if values.len() < nnz {
            return Err(Error::invalid(
                "values",
                format!("holds {} entries, fewer than the {nnz} nonzeros", values.len()),
            ));
        }
        if indices.device_id() != values.device_id() {
            return Err(Error::invalid("values", "the vector's buffers are on different devices"));
        }
        Ok(SparseVector { size, nnz, indices: indices.clone(), values: values.clone() })
    }

    /// Entries, stored or not.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.nnz
    }

    /// The stored entries' positions.
    pub fn indices(&self) -> &GpuRef<I> {
        &self.indices
    }

    /// The stored entries' values.
    pub fn values(&self) -> &GpuRef<T> {
        &self.values
    }

    /// The checked mode: reads the indices back on `stream` (blocking until they arrive) and
    /// checks that they increase strictly and stay below `size`.
    pub fn check(&self, stream: crate::track::StreamId) -> Result<()> {
        let idx = self.indices.download(stream)?;
        let idx = &idx[..self.nnz];
        if let Some(i) = idx.iter().position(|&x| x.to_i64() < 0 || x.to_i64() as u64 >= self.size as u64) {
            return Err(Error::invalid(
                "indices",
                format!("entry {i} is {}, outside 0..{}", idx[i].to_i64(), self.size),
            ));
        }
        if let Some(i) = idx.windows(2).position(|w| w[1].to_i64() <= w[0].to_i64()) {
            return Err(Error::invalid("indices", format!("do not increase from entry {i} to entry {}", i + 1)));
        }
        Ok(())
    }

    /// Rejects `y` when it is not a dense vector this one fits, or is one of its buffers.
    fn fits<U: Element>(&self, arg: &'static str, y: &GpuRef<U>) -> Result<()> {
        check::covers(arg, y, Some(self.size), &format!("a vector of {} entries", self.size))?;
        if [self.indices.id(), self.values.id()].contains(&y.id()) {
            return Err(Error::invalid(arg, "must not be one of the sparse vector's own buffers"));
        }
        Ok(())
    }
}

impl Sparse {
    /// `y = alpha x + beta y` for a sparse `x` and a dense `y` of at least `x.size()` entries
    /// (`cusparseAxpby`); `y` is only written when `beta` is zero.
    pub fn axpby<T: SparseValue, I: SparseIndex>(
        &mut self,
        alpha: T,
        x: &SparseVector<T, I>,
        beta: T,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        x.fits("y", y)?;
        let mut rec = self.op.recorder("axpby");
        record(&mut rec, "x.indices", &x.indices, Access::Read)?;
        record(&mut rec, "x.values", &x.values, Access::Read)?;
        record(&mut rec, "y", y, output_access(beta))?;
        if self.simulated() {
            return self.sim_axpby(rec, alpha, x, beta, y);
        }
        let h = self.handle()?;
        let (dx, dy) = (self.spvec(x)?, self.vec(y, x.size)?);
        let sc = HostScalars::new(alpha, beta);
        let done = self.op.run(rec, Vec::new(), || {
            let s = sc.raw();
            // SAFETY: (1) a live handle; (2) descriptors of the validated, live buffers, recorded
            // on this op; (3) host scalars of T, 16-byte aligned (`HostScalars`).
            unsafe { calls::axpby(h, s, dx, dy) }
        });
        self.trim();
        done
    }

    /// `x.values[i] = y[x.indices[i]]`: reads the entries of the dense `y` at `x`'s positions
    /// into `x`'s values (`cusparseGather`).
    pub fn gather<T: SparseValue, I: SparseIndex>(
        &mut self,
        y: &GpuRef<T>,
        x: &SparseVector<T, I>,
    ) -> Result<Completion<()>> {
        x.fits("y", y)?;
        let mut rec = self.op.recorder("gather");
        record(&mut rec, "y", y, Access::Read)?;
        record(&mut rec, "x.indices", &x.indices, Access::Read)?;
        record(&mut rec, "x.values", &x.values, Access::Write)?;
        if self.simulated() {
            return self.sim_gather(rec, y, x);
        }
        let h = self.handle()?;
        let (dx, dy) = (self.spvec(x)?, self.vec(y, x.size)?);
        // SAFETY: (1) a live handle; (2) descriptors of the validated, live buffers, recorded.
        let done = self.op.run(rec, Vec::new(), || unsafe { calls::gather(h, dy, dx) });
        self.trim();
        done
    }

    /// `y[x.indices[i]] = x.values[i]`: writes `x`'s stored entries into the dense `y`, leaving
    /// its other entries as they are (`cusparseScatter`).
    pub fn scatter<T: SparseValue, I: SparseIndex>(
        &mut self,
        x: &SparseVector<T, I>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        x.fits("y", y)?;
        let mut rec = self.op.recorder("scatter");
        record(&mut rec, "x.indices", &x.indices, Access::Read)?;
        record(&mut rec, "x.values", &x.values, Access::Read)?;
        // Entries outside x's positions keep their values: read-write, not write.
        record(&mut rec, "y", y, Access::ReadWrite)?;
        if self.simulated() {
            return self.sim_scatter(rec, x, y);
        }
        let h = self.handle()?;
        let (dx, dy) = (self.spvec(x)?, self.vec(y, x.size)?);
        // SAFETY: (1) a live handle; (2) descriptors of the validated, live buffers, recorded.
        let done = self.op.run(rec, Vec::new(), || unsafe { calls::scatter(h, dx, dy) });
        self.trim();
        done
    }
}
