//! The batched Cholesky solves and the batched LU factorization and solves (cuBLAS's).

use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::solver::calls::{self, blas_check};
use crate::libs::solver::factor::CheckStatus;
use crate::libs::solver::info::Meaning;
use crate::libs::solver::{Solver, SolverElement};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::track::Access;
use std::ffi::{c_int, c_void};

use super::{pointers, strided, GetrfBatched, GetrsBatched, PotrsBatched};

impl Solver {
    /// Batched Cholesky solves (see [`PotrsBatched`]).
    pub fn potrs_batched<T: SolverElement>(&mut self, p: &PotrsBatched<'_, T>) -> Result<Completion<()>> {
        let n = check::dim("n", p.n, false)?;
        let batch = check::dim("batch", p.batch, false)?;
        if p.nrhs != 1 {
            return Err(Error::invalid("nrhs", format!("is {}, but cuSOLVER's potrsBatched takes exactly 1", p.nrhs)));
        }
        let (lda, sa) = strided(("a", "lda", "stride_a"), p.a, p.n, p.n, p.lda, p.stride_a, p.batch)?;
        let (ldb, sb) = strided(("b", "ldb", "stride_b"), p.b, p.n, 1, p.ldb, p.stride_b, p.batch)?;
        check::distinct("b", p.a, p.b)?;
        let mut rec = self.op.recorder("potrsBatched");
        record(&mut rec, "a", p.a, Access::Read)?;
        record(&mut rec, "b", p.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return crate::libs::solver::sim::potrs_batched(&self.op, rec, p, (lda as usize, sa), (ldb as usize, sb));
        }
        let (h, _) = self.handle()?;
        let mut ptrs = pointers(p.a, sa, p.batch)?;
        ptrs.extend(pointers(p.b, sb, p.batch)?);
        let (u, count) = (calls::fill(p.fill), p.batch);
        self.run_info(
            rec,
            Vec::new(),
            "potrsBatched",
            1,
            Meaning::ParamsOnly,
            Some(ptrs),
            |pin| {
                let array = pin.ptrs.as_ref().map(|a| a.device_ptr::<*mut c_void>()).unwrap_or(std::ptr::null_mut());
                // SAFETY: (1) a live handle on this stream; (2) the pointer array, pinned mapped
                // memory kept until the completion reads, holds `batch` pointers into `a` (read)
                // then `batch` into `b` (read-write), each at its validated shape; `wrapping_add`
                // stays inside the array; (3) `info` holds a word.
                unsafe { T::potrs_batched(h, u, n, 1, array, lda, array.wrapping_add(count), ldb, pin.info(), batch) }
                    .check_status("cusolverDn<t>potrsBatched")
            },
            || (),
        )
    }

    /// Batched LU through cuBLAS (see [`GetrfBatched`]).
    pub fn getrf_batched<T: SolverElement>(&mut self, g: &GetrfBatched<'_, T>) -> Result<Completion<()>> {
        let n = check::dim("n", g.n, false)?;
        let batch = check::dim("batch", g.batch, false)?;
        let (lda, stride) = strided(("a", "lda", "stride"), g.a, g.n, g.n, g.lda, g.stride, g.batch)?;
        if let Some(ipiv) = g.ipiv {
            check::covers("ipiv", ipiv, g.n.checked_mul(g.batch), "n * batch pivots")?;
        }
        let mut rec = self.op.recorder("getrfBatched");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        if let Some(ipiv) = g.ipiv {
            record(&mut rec, "ipiv", ipiv, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            return crate::libs::solver::sim::getrf_batched(&self.op, rec, g, lda as usize, stride);
        }
        let bh = self.blas_handle()?;
        let piv: *mut c_int = match g.ipiv {
            Some(p) => dptr(p)?,
            None => std::ptr::null_mut(),
        };
        let ptrs = pointers(g.a, stride, g.batch)?;
        self.run_info(
            rec,
            Vec::new(),
            "getrfBatched",
            g.batch,
            Meaning::Pivot,
            Some(ptrs),
            |pin| {
                let array = pin.ptrs.as_ref().map(|a| a.device_ptr::<*mut c_void>()).unwrap_or(std::ptr::null_mut());
                // SAFETY: (1) a live cuBLAS handle on this stream; (2) the pointer array, pinned
                // mapped memory kept until the completion reads, holds `batch` pointers to the n x n
                // matrices at lda inside `a` (read-write); (3) `piv` holds n * batch ints or is null
                // (no pivoting, as cuBLAS documents); (4) `info` holds `batch` words.
                blas_check(
                    unsafe { T::getrf_batched(bh.0, n, array, lda, piv, pin.info(), batch) },
                    "cublas<t>getrfBatched",
                )
            },
            || (),
        )
    }

    /// Batched LU solves through cuBLAS (see [`GetrsBatched`]).
    pub fn getrs_batched<T: SolverElement>(&mut self, g: &GetrsBatched<'_, T>) -> Result<Completion<()>> {
        let (n, nrhs) = (check::dim("n", g.n, false)?, check::dim("nrhs", g.nrhs, false)?);
        let batch = check::dim("batch", g.batch, false)?;
        let (lda, sa) = strided(("a", "lda", "stride_a"), g.a, g.n, g.n, g.lda, g.stride_a, g.batch)?;
        let (ldb, sb) = strided(("b", "ldb", "stride_b"), g.b, g.n, g.nrhs, g.ldb, g.stride_b, g.batch)?;
        check::covers("ipiv", g.ipiv, g.n.checked_mul(g.batch), "n * batch pivots")?;
        check::distinct("b", g.a, g.b)?;
        let mut rec = self.op.recorder("getrsBatched");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "ipiv", g.ipiv, Access::Read)?;
        record(&mut rec, "b", g.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return crate::libs::solver::sim::getrs_batched(&self.op, rec, g, (lda as usize, sa), (ldb as usize, sb));
        }
        let bh = self.blas_handle()?;
        let piv: *const c_int = dptr(g.ipiv)?;
        let mut ptrs = pointers(g.a, sa, g.batch)?;
        ptrs.extend(pointers(g.b, sb, g.batch)?);
        let (t, count) = (calls::blas_trans(g.trans), g.batch);
        self.run_info(
            rec,
            Vec::new(),
            "getrsBatched",
            1,
            Meaning::ParamsOnly,
            Some(ptrs),
            |pin| {
                let array = pin.ptrs.as_ref().map(|a| a.device_ptr::<*mut c_void>()).unwrap_or(std::ptr::null_mut());
                // cuBLAS checks the parameters on the host and reports through a host word.
                let mut info: c_int = 0;
                // SAFETY: (1) a live cuBLAS handle on this stream; (2) the pointer array, pinned
                // mapped memory kept until the completion reads, holds `batch` pointers into `a`
                // (read) then `batch` into `b` (read-write) at their validated shapes; (3) `piv`
                // holds n * batch ints; (4) `info` is a host word, written before the call returns.
                let status = unsafe {
                    T::getrs_batched(
                        bh.0,
                        t,
                        n,
                        nrhs,
                        array,
                        lda,
                        piv,
                        array.wrapping_add(count),
                        ldb,
                        &mut info,
                        batch,
                    )
                };
                blas_check(status, "cublas<t>getrsBatched")?;
                if info != 0 {
                    return Err(Error::Library {
                        call: "cublas<t>getrsBatched",
                        status: format!("rejected its parameter {}", -info),
                    });
                }
                Ok(())
            },
            || (),
        )
    }
}
