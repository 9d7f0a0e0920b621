//! SpGEMM, `C = alpha A B` for CSR matrices with 32-bit indices: cuSPARSE's three-phase
//! protocol (work estimation, compute, copy), each phase a recorded launch on the stream.
//!
//! The number of nonzeros of `C` is known only after the compute phase, and cuSPARSE hands it
//! to the host (`cusparseSpMatGetSize`) by finishing that phase first, so `spgemm` blocks the
//! calling thread until the GPU has computed `C`'s structure; the copy phase, which fills `C`,
//! is then enqueued without waiting, and `C` comes back through the completion.

use super::matrix::ValueType;
use super::{calls, not_in_matrix, record_matrix, Format, HostScalars, Sparse, SparseMatrix, SparseValue};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

impl Sparse {
    /// `C = alpha A B` (SpGEMM) for CSR matrices with `i32` indices; returns `C` (CSR, `i32`)
    /// through the completion, with its buffers freshly allocated.
    ///
    /// **Blocks** the calling thread until the GPU has finished A and B's work estimation and
    /// `C`'s structure: cuSPARSE gives `C`'s number of nonzeros to the host only after that
    /// phase, and `C`'s buffers are sized from it. Do not call it where the thread must not
    /// wait (a completion callback).
    pub fn spgemm<T: SparseValue>(
        &mut self,
        alpha: T,
        a: &SparseMatrix<T, i32>,
        b: &SparseMatrix<T, i32>,
    ) -> Result<Completion<SparseMatrix<T, i32>>> {
        if a.format != Format::Csr {
            return Err(Error::invalid("a", format!("is {:?}; SpGEMM takes CSR matrices", a.format)));
        }
        if b.format != Format::Csr {
            return Err(Error::invalid("b", format!("is {:?}; SpGEMM takes CSR matrices", b.format)));
        }
        if a.cols != b.rows {
            return Err(Error::invalid("b", format!("has {} rows; A has {} columns", b.rows, a.cols)));
        }
        let names = ["a.offsets", "a.indices", "a.values"];
        let bnames = ["b.offsets", "b.indices", "b.values"];
        let mut rec = self.op.recorder("spgemm.work_estimation");
        record_matrix(&mut rec, names, a)?;
        record_matrix(&mut rec, bnames, b)?;
        let h = self.handle()?;
        let (rows, cols) = (a.rows, b.cols);
        let (da, db) = (self.mat(a)?, self.mat(b)?);
        let offsets: GpuRef<i32> = self.op.device.alloc(self.op.stream, rows + 1)?;
        let parts = calls::SpMatParts {
            format: Format::Csr,
            rows: rows as i64,
            cols: cols as i64,
            nnz: 0,
            major: dptr(&offsets)?,
            minor: std::ptr::null_mut(),
            values: std::ptr::null_mut(),
            index: super::IndexKind::I32,
            value: T::CUDA_TYPE,
            block: 0,
        };
        // SAFETY: the offsets hold rows + 1 entries; the other arrays are set before the copy.
        let dc = unsafe { calls::create_sp_mat(&parts) }?;
        let descr = calls::spgemm_descr()?;
        let beta = T::zero();
        let sc = HostScalars::new(alpha, beta);
        let g = calls::SpGemmArgs { h, s: sc.raw(), a: da, b: db, c: dc.get(), d: descr.get() };
        let mut size1 = 0;
        // SAFETY: (1) a live handle and descriptors of validated, live buffers; (2) a null
        // buffer: a size query; (3) host scalars of T, 16-byte aligned (`HostScalars`), in place.
        unsafe { calls::spgemm_work_estimation(g, &mut size1, std::ptr::null_mut()) }?;
        let buf1: GpuRef<u8> = self.op.device.alloc_scratch(self.op.stream, size1.max(1))?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        let p1 = buf1.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut size2 = 0;
        let estimated = self.op.run(rec, Vec::new(), || {
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as above, with the buffer of the size queried; the compute phase's size
            // query follows the estimation on the stream.
            unsafe {
                calls::spgemm_work_estimation(g, &mut size1, p1)?;
                calls::spgemm_compute(g, &mut size2, std::ptr::null_mut())
            }
        });
        if let Err(e) = estimated {
            self.op.retire("a cuSPARSE SpGEMM", (descr, dc));
            return Err(e);
        }

        let buf2: GpuRef<u8> = self.op.device.alloc_scratch(self.op.stream, size2.max(1))?;
        let mut rec = self.op.recorder("spgemm.compute");
        record_matrix(&mut rec, names, a)?;
        record_matrix(&mut rec, bnames, b)?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        record(&mut rec, "compute buffer", &buf2, Access::ReadWrite)?;
        let p2 = buf2.raw_device_ptr()? as *mut std::ffi::c_void;
        let mut nnz = 0i64;
        let computed = self.op.run(rec, Vec::new(), || {
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as above; the estimation ran with `buf1`, still live and recorded. Getting
            // the size waits for the phase inside cuSPARSE: the documented blocking step.
            unsafe { calls::spgemm_compute(g, &mut size2, p2) }?;
            nnz = calls::sp_mat_size(g.c)?.2;
            Ok(())
        });
        if let Err(e) = computed {
            self.op.retire("a cuSPARSE SpGEMM", (descr, dc));
            return Err(e);
        }

        let nnz = usize::try_from(nnz).map_err(|_| Error::invalid("c", format!("cuSPARSE reported {nnz} nonzeros")))?;
        if nnz > i32::MAX as usize {
            self.op.retire("a cuSPARSE SpGEMM", (descr, dc));
            return Err(Error::invalid("c", format!("A B has {nnz} nonzeros, beyond 32-bit indices")));
        }
        let indices: GpuRef<i32> = self.op.device.alloc(self.op.stream, nnz.max(1))?;
        let values: GpuRef<T> = self.op.device.alloc(self.op.stream, nnz.max(1))?;
        let c = SparseMatrix::new(Format::Csr, rows, cols, nnz, &offsets, &indices, &values)?;
        not_in_matrix("c", &offsets, a)?;
        let mut rec = self.op.recorder("spgemm.copy");
        record_matrix(&mut rec, names, a)?;
        record_matrix(&mut rec, bnames, b)?;
        record(&mut rec, "work estimation buffer", &buf1, Access::ReadWrite)?;
        record(&mut rec, "compute buffer", &buf2, Access::ReadWrite)?;
        record(&mut rec, "c.offsets", &offsets, Access::Write)?;
        record(&mut rec, "c.indices", &indices, Access::Write)?;
        record(&mut rec, "c.values", &values, Access::Write)?;
        let ptrs = (dptr(&offsets)?, dptr(&indices)?, dptr(&values)?);
        let done = self.op.run(rec, Vec::new(), || {
            let g = calls::SpGemmArgs { s: sc.raw(), ..g };
            // SAFETY: as above; C's arrays hold rows + 1 offsets and nnz indices and values, and
            // are recorded as written.
            unsafe {
                calls::csr_set_pointers(g.c, ptrs.0, ptrs.1, ptrs.2)?;
                calls::spgemm_copy(g)
            }?;
            Ok(c)
        });
        // After the copy: the reaper destroys them once it has run.
        self.op.retire("a cuSPARSE SpGEMM", (descr, dc));
        self.trim();
        done
    }
}
