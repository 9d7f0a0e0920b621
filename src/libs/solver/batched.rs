//! Batched ops on the typed entry points (every element type): Cholesky solves
//! (`potrsBatched`), LU through cuBLAS (`getrfBatched`, `getrsBatched`), and the small-matrix
//! Jacobi methods (`gesvdjBatched`, `syevjBatched`, at most 32 x 32). Every matrix's status is
//! its own: bad ones fail the completion with each index listed, and the others are valid.

use super::calls::{self, blas_check, OwnedJacobi, OwnedSyevj};
use super::factor::CheckStatus;
use super::info::Meaning;
use super::symmetric::work_bytes;
use super::{Fill, SizeKey, Solver, SolverElement, Trans};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::{Element, GpuRef};
use crate::track::Access;
use std::ffi::{c_int, c_void};

/// The largest order the batched Jacobi methods take.
const JACOBI_MAX: usize = 32;

/// Solves `A_i X_i = B_i` for `batch` systems with Cholesky factors from
/// [`Solver::potrf_batched`]; each `X_i` overwrites `B_i`. cuSOLVER takes one right-hand side
/// per system (`nrhs` = 1).
#[derive(Debug)]
pub struct PotrsBatched<'a, T: SolverElement> {
    /// The triangle holding the factors.
    pub fill: Fill,
    /// Order of each `A_i`.
    pub n: usize,
    /// Right-hand sides per system: 1.
    pub nrhs: usize,
    /// Systems.
    pub batch: usize,
    /// The factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each `A_i`; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one `A_i` to the next; `None`: `lda * n`.
    pub stride_a: Option<usize>,
    /// The right-hand sides, overwritten by the solutions.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of each `B_i`; `None`: packed.
    pub ldb: Option<usize>,
    /// Elements from one `B_i` to the next; `None`: `ldb * nrhs`.
    pub stride_b: Option<usize>,
}

/// LU factorizations `P_i A_i = L_i U_i` of `batch` matrices of order `n` (cuBLAS), with
/// partial pivoting when `ipiv` is given (`n` 1-based row swaps per matrix, one after another),
/// without it otherwise. A singular `U_i` fails the completion naming the matrix and the zero.
#[derive(Debug)]
pub struct GetrfBatched<'a, T: SolverElement> {
    /// Order of each matrix.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten by their factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one matrix to the next; `None`: `lda * n`.
    pub stride: Option<usize>,
    /// The pivots, `n * batch`; `None`: no pivoting.
    pub ipiv: Option<&'a GpuRef<i32>>,
}

/// Solves `op(A_i) X_i = B_i` for `batch` systems with LU factors and pivots from
/// [`Solver::getrf_batched`] (cuBLAS); each `X_i` overwrites `B_i`.
#[derive(Debug)]
pub struct GetrsBatched<'a, T: SolverElement> {
    /// How each `A_i` is applied.
    pub trans: Trans,
    /// Order of each `A_i`.
    pub n: usize,
    /// Right-hand sides per system.
    pub nrhs: usize,
    /// Systems.
    pub batch: usize,
    /// The factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each `A_i`; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one `A_i` to the next; `None`: `lda * n`.
    pub stride_a: Option<usize>,
    /// The pivots `getrf_batched` wrote, `n * batch`.
    pub ipiv: &'a GpuRef<i32>,
    /// The right-hand sides, overwritten by the solutions.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of each `B_i`; `None`: packed.
    pub ldb: Option<usize>,
    /// Elements from one `B_i` to the next; `None`: `ldb * nrhs`.
    pub stride_b: Option<usize>,
}

/// Jacobi SVDs `A_i = U_i Σ_i V_iᴴ` of `batch` `m x n` matrices (`m, n <= 32`), stored one
/// after another `lda * n` apart and overwritten: singular values (`min(m, n)` per matrix, one
/// after another) into `s`, with `vectors` the full `U_i` (`m x m`, `ldu * m` apart) and `V_i`
/// (`n x n`, not transposed, `ldv * n` apart). Tolerance and sweeps are
/// [`Solver::set_jacobi`]'s; cuSOLVER reports no residual for batches.
#[derive(Debug)]
pub struct GesvdjBatched<'a, T: SolverElement> {
    /// Whether `U_i` and `V_i` are computed.
    pub vectors: bool,
    /// Rows of each.
    pub m: usize,
    /// Columns of each.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Singular values.
    pub s: &'a GpuRef<T::Real>,
    /// The `U_i`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of each `U_i`; `None`: packed.
    pub ldu: Option<usize>,
    /// The `V_i`.
    pub v: &'a GpuRef<T>,
    /// Leading dimension of each `V_i`; `None`: packed.
    pub ldv: Option<usize>,
}

/// Jacobi eigen decompositions of `batch` symmetric or Hermitian matrices of order `n <= 32`,
/// stored one after another `lda * n` apart: eigenvalues (ascending, `n` per matrix) into `w`,
/// eigenvectors overwriting the matrices with `vectors`. Tolerance and sweeps are
/// [`Solver::set_jacobi`]'s; cuSOLVER reports no residual for batches.
#[derive(Debug)]
pub struct SyevjBatched<'a, T: SolverElement> {
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle read.
    pub fill: Fill,
    /// Order of each.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// The eigenvalues.
    pub w: &'a GpuRef<T::Real>,
}

/// Checks `batch` `rows x cols` matrices in `buf`, `stride` elements apart (`None`: `ld *
/// cols`); returns the leading dimension and the stride.
#[allow(clippy::too_many_arguments)]
fn strided<T: Element>(
    (arg, ld_arg, stride_arg): (&'static str, &'static str, &'static str),
    buf: &GpuRef<T>,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
    stride: Option<usize>,
    batch: usize,
) -> Result<(i32, usize)> {
    let m = check::matrix(arg, ld_arg, rows, cols, ld)?;
    let one = m.ld as usize * cols;
    let stride = stride.unwrap_or(one);
    if stride < one {
        return Err(Error::invalid(stride_arg, format!("{stride} makes matrices overlap (each spans {one})")));
    }
    let span = stride.checked_mul(batch.saturating_sub(1)).and_then(|s| s.checked_add(m.span));
    check::covers(arg, buf, span, &format!("{batch} matrices {rows}x{cols} {stride} apart"))?;
    Ok((m.ld, stride))
}

/// The device addresses of `batch` matrices `stride` elements apart in `buf`.
fn pointers<T: Element>(buf: &GpuRef<T>, stride: usize, batch: usize) -> Result<Vec<u64>> {
    let (base, size) = (buf.raw_device_ptr()?, std::mem::size_of::<T>() as u64);
    Ok((0..batch as u64).map(|i| base + i * stride as u64 * size).collect())
}

/// A Jacobi order: at least 1, at most 32.
fn jacobi_dim(arg: &'static str, v: usize) -> Result<i32> {
    if v > JACOBI_MAX {
        return Err(Error::invalid(arg, format!("{v} is above {JACOBI_MAX}, the batched Jacobi methods' limit")));
    }
    check::dim(arg, v, false)
}

impl Solver {
    fn blas_handle(&mut self) -> Result<calls::BlasHandle> {
        self.handle()?;
        let s = self.op.bound_stream()?;
        let raw = self.raw.as_mut().ok_or_else(|| self.op.unavailable_on_sim())?;
        // SAFETY: the op stream is live in the bound context and outlives the handles (the
        // device keeps its streams until after every lane and `Handles`).
        unsafe { raw.blas(s.cu_stream()) }
    }

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

    /// Batched Jacobi SVD (see [`GesvdjBatched`]).
    pub fn gesvdj_batched<T: SolverElement>(&mut self, g: &GesvdjBatched<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (jacobi_dim("m", g.m)?, jacobi_dim("n", g.n)?);
        let batch = check::dim("batch", g.batch, false)?;
        let (lda, _) = strided(("a", "lda", "stride"), g.a, g.m, g.n, g.lda, None, g.batch)?;
        let p = g.m.min(g.n);
        check::covers("s", g.s, p.checked_mul(g.batch), "min(m, n) * batch singular values")?;
        let (ldu, ldv) = if g.vectors {
            let (ldu, _) = strided(("u", "ldu", "stride"), g.u, g.m, g.m, g.ldu, None, g.batch)?;
            let (ldv, _) = strided(("v", "ldv", "stride"), g.v, g.n, g.n, g.ldv, None, g.batch)?;
            (ldu, ldv)
        } else {
            (m, n)
        };
        check::distinct("s", g.a, g.s)?;
        check::distinct("u", g.a, g.u)?;
        check::distinct("v", g.a, g.v)?;
        check::distinct("v", g.u, g.v)?;
        check::no_aliasing(&[("u", g.u.id(), false), ("v", g.v.id(), false), ("s", g.s.id(), true)])?;
        let mut rec = self.op.recorder("gesvdjBatched");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "v", g.v, Access::Write)?;
        let (h, _) = self.handle()?;
        let (a, s, u, v): (*mut c_void, *mut c_void, *mut c_void, *mut c_void) =
            (dptr(g.a)?, dptr(g.s)?, dptr(g.u)?, dptr(g.v)?);
        let info = OwnedJacobi::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let (mode, raw) = (calls::eig_mode(g.vectors), info.raw());
        let key = SizeKey {
            op: "gesvdjBatched",
            dtype: T::CUDA as u32,
            dims: [m.into(), n.into(), lda.into(), ldu.into(), ldv.into(), (i64::from(batch) << 1) | g.vectors as i64],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::gesvdj_batched_size(h, mode, m, n, a, lda, s, u, ldu, v, ldv, &mut lwork, raw, batch) }
                .check_status("cusolverDn<t>gesvdjBatched_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvdjBatched",
            g.batch,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion, alive until the
                // op resolved); `a`, `s`, `u`, `v` cover `batch` of their validated shapes and are
                // distinct; the workspace holds `lwork` elements; `info` holds `batch` words.
                unsafe {
                    T::gesvdj_batched(
                        h,
                        mode,
                        m,
                        n,
                        a,
                        lda,
                        s,
                        u,
                        ldu,
                        v,
                        ldv,
                        work.device,
                        lwork,
                        pin.info(),
                        raw,
                        batch,
                    )
                }
                .check_status("cusolverDn<t>gesvdjBatched")
            },
            move || drop(info),
        )
    }

    /// Batched Jacobi eigen decomposition (see [`SyevjBatched`]).
    pub fn syevj_batched<T: SolverElement>(&mut self, e: &SyevjBatched<'_, T>) -> Result<Completion<()>> {
        let n = jacobi_dim("n", e.n)?;
        let batch = check::dim("batch", e.batch, false)?;
        let (lda, _) = strided(("a", "lda", "stride"), e.a, e.n, e.n, e.lda, None, e.batch)?;
        check::covers("w", e.w, e.n.checked_mul(e.batch), "n * batch eigenvalues")?;
        check::distinct("w", e.a, e.w)?;
        let mut rec = self.op.recorder("syevjBatched");
        record(&mut rec, "a", e.a, Access::ReadWrite)?;
        record(&mut rec, "w", e.w, Access::Write)?;
        let (h, _) = self.handle()?;
        let (a, w): (*mut c_void, *mut c_void) = (dptr(e.a)?, dptr(e.w)?);
        let (mode, u) = (calls::eig_mode(e.vectors), calls::fill(e.fill));
        let info = OwnedSyevj::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let raw = info.raw();
        let key = SizeKey {
            op: "syevjBatched",
            dtype: T::CUDA as u32,
            dims: [n.into(), lda.into(), e.vectors as i64, e.fill as i64, batch.into(), 0],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::syevj_batched_size(h, mode, u, n, a, lda, w, &mut lwork, raw, batch) }
                .check_status("cusolverDn<t>syevjBatched_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "syevjBatched",
            e.batch,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion); `a` and `w`
                // cover `batch` of their validated shapes and are distinct; the workspace holds
                // `lwork` elements; `info` holds `batch` words.
                unsafe { T::syevj_batched(h, mode, u, n, a, lda, w, work.device, lwork, pin.info(), raw, batch) }
                    .check_status("cusolverDn<t>syevjBatched")
            },
            move || drop(info),
        )
    }
}
