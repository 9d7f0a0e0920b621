//! SpGEMM, `C = alpha A B` for CSR matrices with 32- or 64-bit indices: cuSPARSE's three-phase
//! protocol (work estimation, compute, copy), each phase a recorded launch on the stream.
//!
//! The number of nonzeros of `C` is known only after the compute phase, and cuSPARSE hands it
//! to the host (`cusparseSpMatGetSize`) by finishing that phase first, so `spgemm` blocks the
//! calling thread until the GPU has computed `C`'s structure; the copy phase, which fills `C`,
//! is then enqueued without waiting, and `C` comes back through the completion.

use super::matrix::ValueType;
use super::phases::SameInputs;
use super::{calls, not_in_matrix, record_matrix, Format, HostScalars, Sparse, SparseIndex, SparseMatrix, SparseValue};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::object::Owned;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;

/// The library objects an SpGEMM makes: its descriptor and `C`'s. Retired, not dropped, once
/// a phase reached the stream (its work may still use them).
type Objects = (Owned<calls::SpGemm>, Owned<calls::SpMat>);

/// One SpGEMM between its phases: the factors, the call's arguments, the host scalars they
/// point to (kept in place by the caller) and the factors' structure the estimation saw.
struct Product<'a, T: SparseValue, I: SparseIndex> {
    a: &'a SparseMatrix<T, I>,
    b: &'a SparseMatrix<T, I>,
    g: calls::SpGemmArgs,
    sc: &'a HostScalars<T>,
    inputs: &'a SameInputs,
}

/// The factors' structure arrays, which size every buffer of the product and `C` itself: each
/// phase after the first must see the ones the first saw.
pub(super) fn factor_structure<T: SparseValue, I: SparseIndex>(
    op: &'static str,
    device: &crate::device::Device,
    a: &SparseMatrix<T, I>,
    b: &SparseMatrix<T, I>,
) -> SameInputs {
    SameInputs::new(op, device)
        .input("a.offsets", &a.major)
        .input("a.indices", &a.minor)
        .input("b.offsets", &b.major)
        .input("b.indices", &b.minor)
}

/// Checks that `a` and `b` are CSR matrices that multiply.
pub(super) fn check_factors<T: SparseValue, I: SparseIndex>(
    a: &SparseMatrix<T, I>,
    b: &SparseMatrix<T, I>,
) -> Result<()> {
    if a.format != Format::Csr {
        return Err(Error::invalid("a", format!("is {:?}; SpGEMM takes CSR matrices", a.format)));
    }
    if b.format != Format::Csr {
        return Err(Error::invalid("b", format!("is {:?}; SpGEMM takes CSR matrices", b.format)));
    }
    if a.cols != b.rows {
        return Err(Error::invalid("b", format!("has {} rows; A has {} columns", b.rows, a.cols)));
    }
    Ok(())
}

/// Records the buffers of both factors as read.
pub(super) fn record_factors<T: SparseValue, I: SparseIndex>(
    rec: &mut LaunchRecorder,
    a: &SparseMatrix<T, I>,
    b: &SparseMatrix<T, I>,
) -> Result<()> {
    record_matrix(rec, ["a.offsets", "a.indices", "a.values"], a)?;
    record_matrix(rec, ["b.offsets", "b.indices", "b.values"], b)
}

/// The descriptor of the product `C` (`rows x cols`, CSR, indices of `I`) before its structure
/// is known: `offsets` only, the other arrays set before the copy phase.
pub(super) fn product_descr<T: SparseValue, I: SparseIndex>(
    rows: usize,
    cols: usize,
    offsets: &GpuRef<I>,
) -> Result<Owned<calls::SpMat>> {
    let parts = calls::SpMatParts {
        format: Format::Csr,
        rows: rows as i64,
        cols: cols as i64,
        nnz: 0,
        major: dptr(offsets)?,
        minor: std::ptr::null_mut(),
        values: std::ptr::null_mut(),
        index: I::KIND,
        value: T::CUDA_TYPE,
        block: 0,
    };
    // SAFETY: the offsets hold rows + 1 entries; the other arrays are set before the copy.
    unsafe { calls::create_sp_mat(&parts) }
}

impl Sparse {
    /// `C = alpha A B` (SpGEMM) for CSR matrices with `i32` or `i64` indices (both factors
    /// alike); returns `C` (CSR, indices of the factors' type) through the completion, with its
    /// buffers freshly allocated.
    ///
    /// **Blocks** the calling thread until the GPU has finished A and B's work estimation and
    /// `C`'s structure: cuSPARSE gives `C`'s number of nonzeros to the host only after that
    /// phase, and `C`'s buffers are sized from it. Do not call it where the thread must not
    /// wait (a completion callback). For the same reason it is not recorded into a graph: on a
    /// stream a [`Graph`](crate::Graph) recording holds it fails with [`Error::Recording`].
    pub fn spgemm<T: SparseValue, I: SparseIndex>(
        &mut self,
        alpha: T,
        a: &SparseMatrix<T, I>,
        b: &SparseMatrix<T, I>,
    ) -> Result<Completion<SparseMatrix<T, I>>> {
        check_factors(a, b)?;
        self.refuse_in_graph("SpGEMM, whose product the host sizes from a count the GPU makes,")?;
        let mut rec = self.op.recorder("spgemm.work_estimation");
        record_factors(&mut rec, a, b)?;
        // After every check of the arguments: a refused op leaves solo mode as it was.
        let inputs = factor_structure("spgemm", &self.op.device, a, b);
        if self.simulated() {
            return self.sim_spgemm(rec, alpha, a, b, &inputs);
        }
        let h = self.handle()?;
        let (rows, cols) = (a.rows, b.cols);
        let (da, db) = (self.mat(a)?, self.mat(b)?);
        let offsets: GpuRef<I> = self.op.device.alloc(self.op.stream, rows + 1)?;
        let dc = product_descr::<T, I>(rows, cols, &offsets)?;
        let descr = calls::spgemm_descr()?;
        let beta = T::zero();
        let sc = HostScalars::new(alpha, beta);
        let g = calls::SpGemmArgs { h, s: sc.raw(), a: da, b: db, c: dc.get(), d: descr.get() };
        let p = Product { a, b, g, sc: &sc, inputs: &inputs };
        let (objects, buf1, size2) = self.spgemm_estimate(&p, rec, (descr, dc))?;
        let (objects, buf2, nnz) = self.spgemm_compute(&p, &buf1, size2, objects)?;

        let indices: GpuRef<I> = self.op.device.alloc(self.op.stream, nnz.max(1))?;
        let values: GpuRef<T> = self.op.device.alloc(self.op.stream, nnz.max(1))?;
        let c = SparseMatrix::new(Format::Csr, rows, cols, nnz, &offsets, &indices, &values)?;
        not_in_matrix("c", &offsets, a)?;
        let mut rec = self.op.recorder("spgemm.copy");
        record_factors(&mut rec, a, b)?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        record(&mut rec, "compute buffer", &buf2, Access::ReadWrite)?;
        record(&mut rec, "c.offsets", &offsets, Access::Write)?;
        record(&mut rec, "c.indices", &indices, Access::Write)?;
        record(&mut rec, "c.values", &values, Access::Write)?;
        let ptrs = (dptr(&offsets)?, dptr(&indices)?, dptr(&values)?);
        let done = self.op.run(rec, Vec::new(), || {
            inputs.check()?;
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as in the phases before; C's arrays hold rows + 1 offsets and nnz indices
            // and values, and are recorded as written; the factors' structure is the one the
            // phases before saw (checked just above, under this launch's marks).
            unsafe {
                calls::csr_set_pointers(g.c, ptrs.0, ptrs.1, ptrs.2)?;
                calls::spgemm_copy(g)
            }?;
            Ok(c)
        });
        // After the copy: the reaper destroys them once it has run.
        self.op.retire("a cuSPARSE SpGEMM", objects);
        self.trim();
        done
    }

    /// The work estimation phase, and the compute phase's size query after it; returns the
    /// estimation's buffer and the compute phase's size.
    fn spgemm_estimate<T: SparseValue, I: SparseIndex>(
        &mut self,
        p: &Product<'_, T, I>,
        rec: LaunchRecorder,
        objects: Objects,
    ) -> Result<(Objects, GpuRef<u8>, usize)> {
        let mut rec = rec;
        let (g, sc) = (p.g, p.sc);
        let mut size1 = 0;
        // SAFETY: (1) a live handle and descriptors of validated, live buffers; (2) a null
        // buffer: a size query; (3) host scalars of T, 16-byte aligned (`HostScalars`), in place.
        unsafe { calls::spgemm_work_estimation(g, &mut size1, std::ptr::null_mut()) }?;
        let buf1: GpuRef<u8> = self.op.device.alloc_scratch(self.op.stream, size1.max(1))?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        let p1 = buf1.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut size2 = 0;
        let estimated = self.op.run(rec, Vec::new(), || {
            p.inputs.note()?;
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as above, with the buffer of the size queried; the compute phase's size
            // query follows the estimation on the stream.
            unsafe {
                calls::spgemm_work_estimation(g, &mut size1, p1)?;
                calls::spgemm_compute(g, &mut size2, std::ptr::null_mut())
            }
        });
        if let Err(e) = estimated {
            self.op.retire("a cuSPARSE SpGEMM", objects);
            return Err(e);
        }
        Ok((objects, buf1, size2))
    }

    /// The compute phase, which finds `C`'s structure; returns its buffer and `C`'s number of
    /// nonzeros, which the host learns by waiting for the phase.
    fn spgemm_compute<T: SparseValue, I: SparseIndex>(
        &mut self,
        p: &Product<'_, T, I>,
        buf1: &GpuRef<u8>,
        size2: usize,
        objects: Objects,
    ) -> Result<(Objects, GpuRef<u8>, usize)> {
        let (g, sc) = (p.g, p.sc);
        let mut size2 = size2;
        let buf2: GpuRef<u8> = self.op.device.alloc_scratch(self.op.stream, size2.max(1))?;
        let mut rec = self.op.recorder("spgemm.compute");
        record_factors(&mut rec, p.a, p.b)?;
        record(&mut rec, "work estimation buffer", buf1, Access::ReadWrite)?;
        record(&mut rec, "compute buffer", &buf2, Access::ReadWrite)?;
        let p2 = buf2.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut nnz = 0i64;
        let computed = self.op.run(rec, Vec::new(), || {
            p.inputs.check()?;
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as above; the estimation ran with `buf1`, still live and recorded, on the
            // factors' structure this phase sees (checked just above, under this launch's
            // marks), which sized `buf2`. Getting the size waits for the phase inside cuSPARSE:
            // the documented blocking step.
            unsafe { calls::spgemm_compute(g, &mut size2, p2) }?;
            nnz = calls::sp_mat_size(g.c)?.2;
            Ok(())
        });
        if let Err(e) = computed {
            self.op.retire("a cuSPARSE SpGEMM", objects);
            return Err(e);
        }
        let nnz = usize::try_from(nnz).map_err(|_| Error::invalid("c", format!("cuSPARSE reported {nnz} nonzeros")))?;
        if nnz > I::MAX {
            self.op.retire("a cuSPARSE SpGEMM", objects);
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond {:?} indices", I::KIND)));
        }
        Ok((objects, buf2, nnz))
    }
}
