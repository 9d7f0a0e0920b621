//! Cholesky and LU: `potrf`, `potrs`, batched `potrf`, `getrf` (with or without pivoting),
//! `getrs`.

use super::calls::{self, data_type};
use super::info::Meaning;
use super::{Fill, SizeKey, Solver, SolverElement, Trans};
use crate::completion::{Completion, KeepAlive};
use crate::error::{Error, Result};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// Cholesky factorization `A = L Lᴴ` (or `Uᴴ U`) of the `n x n` Hermitian positive definite
/// `A`, overwriting the `fill` triangle of `A`.
#[derive(Debug)]
pub struct Potrf<'a, T: SolverElement> {
    /// The triangle read and written.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
}

/// Solves `A X = B` with `A`'s Cholesky factor from [`Solver::potrf`]; `X` overwrites `B`
/// (`n x nrhs`).
#[derive(Debug)]
pub struct Potrs<'a, T: SolverElement> {
    /// The triangle holding the factor.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// Right-hand sides.
    pub nrhs: usize,
    /// The factor.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`, overwritten by `X`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
}

/// LU factorization `P A = L U` of the `m x n` matrix `A` (overwritten by `L` and `U`), with
/// partial pivoting when `ipiv` is given (its `min(m, n)` 1-based row swaps are written
/// there), without it otherwise.
#[derive(Debug)]
pub struct Getrf<'a, T: SolverElement> {
    /// Rows of `A`.
    pub m: usize,
    /// Columns of `A`.
    pub n: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The pivots (`min(m, n)` of them); `None`: no pivoting.
    pub ipiv: Option<&'a GpuRef<i64>>,
}

/// Solves `op(A) X = B` with the LU factors of the `n x n` matrix `A` from [`Solver::getrf`];
/// `X` overwrites `B`.
#[derive(Debug)]
pub struct Getrs<'a, T: SolverElement> {
    /// How `A` is applied.
    pub trans: Trans,
    /// Order of `A`.
    pub n: usize,
    /// Right-hand sides.
    pub nrhs: usize,
    /// The factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The pivots `getrf` wrote; `None`: it did not pivot.
    pub ipiv: Option<&'a GpuRef<i64>>,
    /// `B`, overwritten by `X`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
}

/// Cholesky factorizations `A_i = L_i L_iᴴ` (or `U_iᴴ U_i`) of `batch` Hermitian (for real
/// types, symmetric) positive definite matrices of order `n`, stored one after another in `a`,
/// `stride` elements apart (`None`: `lda * n`). Each matrix's status is its own: one that is
/// not positive definite fails the completion with every bad index listed, and the others'
/// factors are valid.
#[derive(Debug)]
pub struct PotrfBatched<'a, T: SolverElement> {
    /// The triangle read and written.
    pub fill: Fill,
    /// Order of each matrix.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one matrix to the next; `None`: `lda * n`.
    pub stride: Option<usize>,
}

/// Checks the `rows x cols` matrix `buf` (argument `arg`, its leading dimension `ld_arg`);
/// returns the leading dimension as `i64`.
pub(super) fn matrix<T: SolverElement>(
    arg: &'static str,
    ld_arg: &'static str,
    buf: &GpuRef<T>,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
) -> Result<i64> {
    let m = check::matrix(arg, ld_arg, rows, cols, ld)?;
    check::covers(arg, buf, Some(m.span), &format!("a {rows}x{cols} matrix with leading dimension {}", m.ld))?;
    Ok(i64::from(m.ld))
}

/// `A` as the calls take it.
pub(super) fn vptr<T: SolverElement>(buf: &GpuRef<T>) -> Result<*mut c_void> {
    dptr(buf)
}

impl Solver {
    /// Declares the workspace `sizes` asks for on `rec` and returns it (and the host
    /// workspace, kept alive with the op).
    pub(super) fn workspace(
        &mut self,
        rec: &mut LaunchRecorder,
        (device, host): (usize, usize),
    ) -> Result<(calls::Work, Vec<KeepAlive>)> {
        let device_ptr = match self.work.use_on(&self.op, rec, device)? {
            Some(w) if device > 0 => w.raw_device_ptr()? as *mut c_void,
            _ => std::ptr::null_mut(),
        };
        let mut keep: Vec<KeepAlive> = Vec::new();
        let mut host_ptr = std::ptr::null_mut();
        if host > 0 {
            let mut v = vec![0u8; host];
            // The heap block does not move with the Vec, which lives until the op resolves.
            host_ptr = v.as_mut_ptr().cast();
            keep.push(Box::new(v));
        }
        Ok((calls::Work { device: device_ptr, device_bytes: device, host: host_ptr, host_bytes: host }, keep))
    }

    /// Cholesky factorization (see [`Potrf`]); a matrix that is not positive definite fails
    /// the completion with [`Error::Numerical`].
    pub fn potrf<T: SolverElement>(&mut self, p: &Potrf<'_, T>) -> Result<Completion<()>> {
        let n = check::dim64("n", p.n)?;
        let lda = matrix("a", "lda", p.a, p.n, p.n, p.lda)?;
        let mut rec = self.op.recorder("potrf");
        record(&mut rec, "a", p.a, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::potrf(&self.op, rec, p, lda as usize);
        }
        let (h, params) = self.handle()?;
        let dt = data_type(T::CUDA);
        let a = vptr(p.a)?;
        let key = SizeKey { op: "potrf", dtype: T::CUDA as u32, dims: [n, lda, p.fill as i64, 0, 0, 0] };
        // SAFETY: a live handle and params, context bound by `sizes`; the query reads nothing.
        let sizes = self.sizes(key, || unsafe { calls::potrf(h, params, p.fill, n, dt, a, lda, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        let fill = p.fill;
        self.run_info(
            rec,
            keep,
            "potrf",
            1,
            Meaning::Minor,
            None,
            |pin| {
                // SAFETY: (1) live handle and params on this stream; (2) `a` covers n x n at lda,
                // declared read-write; (3) the workspace, declared read-write, holds the queried
                // sizes, the host part kept alive with the op; (4) `info` is pinned mapped memory
                // kept until the completion reads it.
                unsafe { calls::potrf(h, params, fill, n, dt, a, lda, Some((work, pin.info()))) }.map(drop)
            },
            || (),
        )
    }

    /// Solves with a Cholesky factor (see [`Potrs`]).
    pub fn potrs<T: SolverElement>(&mut self, p: &Potrs<'_, T>) -> Result<Completion<()>> {
        let (n, nrhs) = (check::dim64("n", p.n)?, check::dim64("nrhs", p.nrhs)?);
        let lda = matrix("a", "lda", p.a, p.n, p.n, p.lda)?;
        let ldb = matrix("b", "ldb", p.b, p.n, p.nrhs, p.ldb)?;
        check::distinct("b", p.a, p.b)?;
        let mut rec = self.op.recorder("potrs");
        record(&mut rec, "a", p.a, Access::Read)?;
        record(&mut rec, "b", p.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::potrs(&self.op, rec, p, lda as usize, ldb as usize);
        }
        let (h, params) = self.handle()?;
        let (a, b, fill, dt) = (vptr(p.a)?, vptr(p.b)?, p.fill, data_type(T::CUDA));
        self.run_info(
            rec,
            Vec::new(),
            "potrs",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: live handle and params; `a` (read) and `b` (read-write) cover their
                // validated shapes and are distinct; `info` is pinned mapped memory.
                unsafe { calls::potrs(h, params, fill, n, nrhs, dt, a, lda, b, ldb, pin.info()) }
            },
            || (),
        )
    }

    /// LU factorization (see [`Getrf`]); an exactly singular `U` fails the completion with
    /// [`Error::Numerical`] (the factors are still written).
    pub fn getrf<T: SolverElement>(&mut self, g: &Getrf<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim64("m", g.m)?, check::dim64("n", g.n)?);
        let lda = matrix("a", "lda", g.a, g.m, g.n, g.lda)?;
        if let Some(ipiv) = g.ipiv {
            check::covers("ipiv", ipiv, Some(g.m.min(g.n)), "min(m, n) pivots")?;
        }
        let mut rec = self.op.recorder("getrf");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        if let Some(ipiv) = g.ipiv {
            record(&mut rec, "ipiv", ipiv, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            return super::sim::getrf(&self.op, rec, g, lda as usize);
        }
        let (h, params) = self.handle()?;
        let (a, dt) = (vptr(g.a)?, data_type(T::CUDA));
        let ipiv: *mut i64 = match g.ipiv {
            Some(p) => dptr(p)?,
            None => std::ptr::null_mut(),
        };
        let key = SizeKey { op: "getrf", dtype: T::CUDA as u32, dims: [m, n, lda, 0, 0, 0] };
        // SAFETY: a live handle and params, context bound; the query reads nothing.
        let sizes = self.sizes(key, || unsafe { calls::getrf(h, params, m, n, dt, a, lda, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "getrf",
            1,
            Meaning::Pivot,
            None,
            |pin| {
                // SAFETY: live handle and params; `a` covers m x n at lda (read-write); `ipiv`
                // holds min(m, n) pivots (written) or is null; the workspace holds the queried
                // sizes; `info` is pinned mapped memory.
                unsafe { calls::getrf(h, params, m, n, dt, a, lda, Some((ipiv, work, pin.info()))) }.map(drop)
            },
            || (),
        )
    }

    /// Solves with LU factors (see [`Getrs`]).
    pub fn getrs<T: SolverElement>(&mut self, g: &Getrs<'_, T>) -> Result<Completion<()>> {
        let (n, nrhs) = (check::dim64("n", g.n)?, check::dim64("nrhs", g.nrhs)?);
        let lda = matrix("a", "lda", g.a, g.n, g.n, g.lda)?;
        let ldb = matrix("b", "ldb", g.b, g.n, g.nrhs, g.ldb)?;
        check::distinct("b", g.a, g.b)?;
        if let Some(ipiv) = g.ipiv {
            check::covers("ipiv", ipiv, Some(g.n), "n pivots")?;
        }
        let mut rec = self.op.recorder("getrs");
        record(&mut rec, "a", g.a, Access::Read)?;
        if let Some(ipiv) = g.ipiv {
            record(&mut rec, "ipiv", ipiv, Access::Read)?;
        }
        record(&mut rec, "b", g.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::getrs(&self.op, rec, g, lda as usize, ldb as usize);
        }
        let (h, params) = self.handle()?;
        let (a, b, t, dt) = (vptr(g.a)?, vptr(g.b)?, g.trans, data_type(T::CUDA));
        let ipiv: *const i64 = match g.ipiv {
            Some(p) => dptr(p)?,
            None => std::ptr::null(),
        };
        self.run_info(
            rec,
            Vec::new(),
            "getrs",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: live handle and params; `a`, `ipiv` (read) and `b` (read-write) cover
                // their validated shapes; `info` is pinned mapped memory.
                unsafe { calls::getrs(h, params, t, n, nrhs, dt, a, lda, ipiv, b, ldb, pin.info()) }
            },
            || (),
        )
    }

    /// Batched Cholesky (see [`PotrfBatched`]).
    pub fn potrf_batched<T: SolverElement>(&mut self, p: &PotrfBatched<'_, T>) -> Result<Completion<()>> {
        let n = check::dim("n", p.n, false)?;
        let batch = check::dim("batch", p.batch, false)?;
        let m = check::matrix("a", "lda", p.n, p.n, p.lda)?;
        let one = (m.ld as usize) * p.n;
        let stride = p.stride.unwrap_or(one);
        if stride < one {
            return Err(Error::invalid("stride", format!("{stride} makes matrices overlap (each spans {one})")));
        }
        let span = stride.checked_mul(p.batch - 1).and_then(|s| s.checked_add(m.span));
        check::covers("a", p.a, span, &format!("{} matrices {}x{} {stride} apart", p.batch, p.n, p.n))?;
        let mut rec = self.op.recorder("potrfBatched");
        record(&mut rec, "a", p.a, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::potrf_batched(&self.op, rec, p, m.ld as usize, stride);
        }
        self.handle()?;
        let base = p.a.raw_device_ptr()?;
        let size = std::mem::size_of::<T>() as u64;
        let ptrs: Vec<u64> = (0..p.batch as u64).map(|i| base + i * stride as u64 * size).collect();
        let (h, _) = self.handle()?;
        let (fill, lda) = (calls::fill(p.fill), m.ld);
        self.run_info(
            rec,
            Vec::new(),
            "potrfBatched",
            p.batch,
            Meaning::Minor,
            Some(ptrs),
            |pin| {
                let array = pin.ptrs.as_ref().map(|a| a.device_ptr::<*mut c_void>()).unwrap_or(std::ptr::null_mut());
                // SAFETY: (1) a live handle on this stream; (2) the pointer array, in pinned mapped
                // memory kept until the completion reads, holds `batch` pointers to distinct n x n
                // matrices of `T` at lda inside `a` (validated, declared read-write), and
                // `T::potrf_batched` is the entry point of `T` itself; (3) `info` holds `batch`
                // words.
                unsafe { T::potrf_batched(h, fill, n, array, lda, pin.info(), batch) }
                    .check_status("cusolverDn<t>potrfBatched")
            },
            || (),
        )
    }
}

/// A cuSOLVER status, checked (the typed entry points return the raw status).
pub(super) trait CheckStatus {
    fn check_status(self, call: &'static str) -> Result<()>;
}

impl CheckStatus for cudarc::cusolver::sys::cusolverStatus_t {
    fn check_status(self, call: &'static str) -> Result<()> {
        crate::libs::Status::check(self, call)
    }
}
