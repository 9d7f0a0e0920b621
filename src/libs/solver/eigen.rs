//! Eigenvalues and singular values: `syevd` and `syevdx` (any element type; Hermitian for
//! complex), `gesvd` (full or economy) and Jacobi `gesvdj` (any).

use super::calls::{self, data_type, OwnedJacobi, OwnedSyevj, SvdJob};
use super::factor::{matrix, vptr, CheckStatus};
use super::info::Meaning;
use super::sim::Scalar;
use super::symmetric::work_bytes;
use super::{Fill, SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::DataTypes;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

/// Eigenvalues (ascending, into `w`) and optionally eigenvectors (overwriting `A`, one per
/// column) of the `n x n` symmetric or Hermitian `A`.
#[derive(Debug)]
pub struct Syevd<'a, T: SolverElement> {
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle read.
    pub fill: Fill,
    /// Order of `A`.
    pub n: usize,
    /// `A`, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` eigenvalues.
    pub w: &'a GpuRef<T::Real>,
}

/// SVD `A = U Σ Vᴴ` of the `m x n` matrix `A` (`m >= n`, as cuSOLVER's `gesvd` requires; pass
/// `Aᴴ` otherwise), destroying `A`: singular values (descending) into `s`, and with `vectors`
/// all of `U` (`m x m`) and `Vᴴ` (`n x n`); [`GesvdEconomy`] computes the thin `m x n` `U`.
#[derive(Debug)]
pub struct Gesvd<'a, T: SolverElement> {
    /// Whether `U` and `Vᴴ` are computed.
    pub vectors: bool,
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// `A`, destroyed.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` singular values.
    pub s: &'a GpuRef<T::Real>,
    /// `U` (`m x m`), written with `vectors`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of `U`; `None`: packed.
    pub ldu: Option<usize>,
    /// `Vᴴ` (`n x n`), written with `vectors`.
    pub vt: &'a GpuRef<T>,
    /// Leading dimension of `Vᴴ`; `None`: packed.
    pub ldvt: Option<usize>,
}

/// Economy-size SVD `A = U Σ Vᴴ` of the `m x n` matrix `A` (`m >= n`, as cuSOLVER's `gesvd`
/// requires; pass `Aᴴ` otherwise), destroying `A`: singular values (descending) into `s`, and
/// with `vectors` the first `n` columns of `U` (`m x n`) and `Vᴴ` (`n x n`, all of it since
/// `n = min(m, n)`). cuSOLVER's `jobu = jobvt = 'S'`.
#[derive(Debug)]
pub struct GesvdEconomy<'a, T: SolverElement> {
    /// Whether `U` and `Vᴴ` are computed.
    pub vectors: bool,
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// `A`, destroyed.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` singular values.
    pub s: &'a GpuRef<T::Real>,
    /// `U` (`m x n`), written with `vectors`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of `U`; `None`: packed.
    pub ldu: Option<usize>,
    /// `Vᴴ` (`n x n`), written with `vectors`.
    pub vt: &'a GpuRef<T>,
    /// Leading dimension of `Vᴴ`; `None`: packed.
    pub ldvt: Option<usize>,
}

/// Which eigenvalues [`Solver::syevdx`] computes.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum EigRange<R> {
    /// All `n`.
    #[default]
    All,
    /// Those in the half-open interval `(low, high]`, as LAPACK's `range = 'V'`.
    Values {
        /// Lower bound, excluded.
        low: R,
        /// Upper bound, included.
        high: R,
    },
    /// Those at these positions in ascending order, 0-based, the end excluded: `0..k` is the
    /// `k` smallest (LAPACK's `range = 'I'` with `il = start + 1`, `iu = end`).
    Indices(std::ops::Range<usize>),
}

/// Selected eigenvalues (ascending, into the first entries of `w`) and optionally their
/// eigenvectors (overwriting the first columns of `A`) of the `n x n` symmetric or Hermitian
/// `A`; the completion gives how many were found. The rest of `A` is destroyed.
///
/// cuSOLVER writes the count into host memory, so the library may wait for the GPU inside this
/// call (the op itself does not synchronize).
#[derive(Debug)]
pub struct Syevdx<'a, T: SolverElement> {
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle read.
    pub fill: Fill,
    /// Which eigenvalues.
    pub range: EigRange<T::Real>,
    /// Order of `A`.
    pub n: usize,
    /// `A`, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// Room for `n` eigenvalues (cuSOLVER's size, whatever the range); the first ones found
    /// are written.
    pub w: &'a GpuRef<T::Real>,
}

/// Jacobi SVD `A = U Σ Vᴴ` (`Vᵀ` for real types) of the `m x n` matrix `A` (overwritten),
/// economy size: `s` holds `min(m, n)` real values, `U` is `m x min(m, n)`, `V` (not
/// transposed) `n x min(m, n)`. Tolerance and sweeps are [`Solver::set_jacobi`]'s settings.
#[derive(Debug)]
pub struct Gesvdj<'a, T: SolverElement> {
    /// Whether `U` and `V` are computed.
    pub vectors: bool,
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// `A`, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// Singular values, `min(m, n)`, real for every element type.
    pub s: &'a GpuRef<T::Real>,
    /// `U`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of `U`; `None`: packed.
    pub ldu: Option<usize>,
    /// `V`.
    pub v: &'a GpuRef<T>,
    /// Leading dimension of `V`; `None`: packed.
    pub ldv: Option<usize>,
}

/// A finished Jacobi SVD or eigen decomposition: ask [`Solver::jacobi_report`] for its residual and sweeps.
pub struct JacobiRun {
    info: RunInfo,
}

/// The info object a Jacobi run was made with.
enum RunInfo {
    Svd(OwnedJacobi),
    Eig(OwnedSyevj),
    /// A run on the simulator, which reports as it finishes.
    Sim(JacobiReport),
}

impl JacobiRun {
    pub(super) fn sim(report: JacobiReport) -> JacobiRun {
        JacobiRun { info: RunInfo::Sim(report) }
    }

    pub(super) fn syevj(info: OwnedSyevj) -> JacobiRun {
        JacobiRun { info: RunInfo::Eig(info) }
    }
}

impl std::fmt::Debug for JacobiRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JacobiRun")
    }
}

/// What a Jacobi method achieved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JacobiReport {
    /// The residual `‖Σ - Uᴴ A V‖_F` it reached.
    pub residual: f64,
    /// Sweeps it ran.
    pub sweeps: u32,
}

impl Solver {
    /// Symmetric or Hermitian eigen decomposition (see [`Syevd`]).
    pub fn syevd<T: SolverElement>(&mut self, e: &Syevd<'_, T>) -> Result<Completion<()>> {
        let n = check::dim64("n", e.n)?;
        let lda = matrix("a", "lda", e.a, e.n, e.n, e.lda)?;
        check::covers("w", e.w, Some(e.n), "n eigenvalues")?;
        check::distinct("w", e.a, e.w)?;
        let mut rec = self.op.recorder("syevd");
        record(&mut rec, "a", e.a, Access::ReadWrite)?;
        record(&mut rec, "w", e.w, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::syevd(&self.op, rec, e, lda as usize);
        }
        let (h, params) = self.handle()?;
        let (a, w, dt, wt) = (vptr(e.a)?, dptr(e.w)?, data_type(T::CUDA), data_type(T::Real::CUDA));
        let (vectors, fill) = (e.vectors, e.fill);
        let key = SizeKey { op: "syevd", dtype: T::CUDA as u32, dims: [n, lda, vectors as i64, fill as i64, 0, 0] };
        // SAFETY: a live handle and params, context bound; the query reads nothing.
        let sizes =
            self.sizes(key, || unsafe { calls::syevd(h, params, vectors, fill, n, dt, a, lda, wt, w, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "syevd",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: live handle and params; `a` (n x n at lda) and `w` (n) cover their shapes,
                // distinct, declared written; the workspace holds the queried sizes; `info` pinned.
                unsafe { calls::syevd(h, params, vectors, fill, n, dt, a, lda, wt, w, Some((work, pin.info()))) }
                    .map(drop)
            },
            || (),
        )
    }

    /// SVD through QR iteration (see [`Gesvd`]).
    pub fn gesvd<T: SolverElement>(&mut self, g: &Gesvd<'_, T>) -> Result<Completion<()>> {
        self.gesvd_job(g, if g.vectors { SvdJob::All } else { SvdJob::None })
    }

    /// Economy-size SVD through QR iteration (see [`GesvdEconomy`]).
    pub fn gesvd_economy<T: SolverElement>(&mut self, g: &GesvdEconomy<'_, T>) -> Result<Completion<()>> {
        let full = Gesvd {
            vectors: g.vectors,
            m: g.m,
            n: g.n,
            a: g.a,
            lda: g.lda,
            s: g.s,
            u: g.u,
            ldu: g.ldu,
            vt: g.vt,
            ldvt: g.ldvt,
        };
        self.gesvd_job(&full, if g.vectors { SvdJob::Thin } else { SvdJob::None })
    }

    /// `gesvd` with `job`'s vectors; `U` is `m x n` for the thin job, `m x m` otherwise.
    fn gesvd_job<T: SolverElement>(&mut self, g: &Gesvd<'_, T>, job: SvdJob) -> Result<Completion<()>> {
        let (m, n) = (check::dim64("m", g.m)?, check::dim64("n", g.n)?);
        if g.m < g.n {
            return Err(Error::invalid("m", format!("{} is below n = {}: gesvd needs m >= n (pass Aᴴ)", g.m, g.n)));
        }
        let lda = matrix("a", "lda", g.a, g.m, g.n, g.lda)?;
        check::covers("s", g.s, Some(g.n), "n singular values")?;
        let (ldu, ldvt) = if g.vectors {
            (
                matrix("u", "ldu", g.u, g.m, if job == SvdJob::Thin { g.n } else { g.m }, g.ldu)?,
                matrix("vt", "ldvt", g.vt, g.n, g.n, g.ldvt)?,
            )
        } else {
            (i64::try_from(g.m).unwrap_or(i64::MAX), i64::try_from(g.n).unwrap_or(i64::MAX))
        };
        check::distinct("u", g.a, g.u)?;
        check::distinct("vt", g.a, g.vt)?;
        check::distinct("vt", g.u, g.vt)?;
        check::no_aliasing(&[
            ("a", g.a.id(), false),
            ("u", g.u.id(), false),
            ("vt", g.vt.id(), false),
            ("s", g.s.id(), true),
        ])?;
        let mut rec = self.op.recorder("gesvd");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "vt", g.vt, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::gesvd(
                &self.op,
                rec,
                g,
                job == SvdJob::Thin,
                (lda as usize, ldu as usize, ldvt as usize),
            );
        }
        let (h, params) = self.handle()?;
        let (a, s, u, vt) = (vptr(g.a)?, dptr(g.s)?, vptr(g.u)?, vptr(g.vt)?);
        let (dt, st) = (data_type(T::CUDA), data_type(T::Real::CUDA));
        let key = SizeKey { op: "gesvd", dtype: T::CUDA as u32, dims: [m, n, lda, ldu, ldvt, job as i64] };
        // SAFETY: a live handle and params, context bound; the query reads nothing.
        let sizes = self.sizes(key, || unsafe {
            calls::gesvd(h, params, job, m, n, dt, (a, lda), st, s, (u, ldu), (vt, ldvt), None)
        })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvd",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: live handle and params; `a`, `s`, `u`, `vt` cover their validated
                // shapes and are distinct; the workspace holds the queried sizes; `info` pinned.
                unsafe {
                    calls::gesvd(
                        h,
                        params,
                        job,
                        m,
                        n,
                        dt,
                        (a, lda),
                        st,
                        s,
                        (u, ldu),
                        (vt, ldvt),
                        Some((work, pin.info())),
                    )
                }
                .map(drop)
            },
            || (),
        )
    }

    /// Jacobi SVD (see [`Gesvdj`]); the completion's [`JacobiRun`] gives the residual and
    /// sweeps through [`jacobi_report`](Self::jacobi_report). Complex types run
    /// `cusolverDn{C,Z}gesvdj`, with complex `U`, `V` and real singular values.
    pub fn gesvdj<T: SolverElement>(&mut self, g: &Gesvdj<'_, T>) -> Result<Completion<JacobiRun>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let p = g.m.min(g.n);
        let lda = matrix("a", "lda", g.a, g.m, g.n, g.lda)? as i32;
        check::covers("s", g.s, Some(p), "min(m, n) singular values")?;
        let (ldu, ldv) = if g.vectors {
            (matrix("u", "ldu", g.u, g.m, p, g.ldu)? as i32, matrix("v", "ldv", g.v, g.n, p, g.ldv)? as i32)
        } else {
            (m, n)
        };
        check::distinct("s", g.a, g.s)?;
        check::distinct("u", g.a, g.u)?;
        check::distinct("v", g.a, g.v)?;
        check::distinct("v", g.u, g.v)?;
        check::no_aliasing(&[("u", g.u.id(), false), ("v", g.v.id(), false), ("s", g.s.id(), true)])?;
        let mut rec = self.op.recorder("gesvdj");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "v", g.v, Access::Write)?;
        if self.op.device.is_simulated() {
            return Ok(super::sim::gesvdj(&self.op, rec, g, (lda as usize, ldu as usize, ldv as usize), self.jacobi)?
                .map(JacobiRun::sim));
        }
        let (h, _) = self.handle()?;
        let (a, s, u, v) = (vptr(g.a)?, vptr(g.s)?, vptr(g.u)?, vptr(g.v)?);
        let info = OwnedJacobi::create(self.jacobi.tolerance, self.jacobi.max_sweeps)?;
        let (mode, raw) = (calls::eig_mode(g.vectors), info.raw());
        let key = SizeKey {
            op: "gesvdj",
            dtype: T::CUDA as u32,
            dims: [m.into(), n.into(), lda.into(), ldu.into(), ldv.into(), g.vectors as i64],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle and info, context bound; the query reads nothing.
            unsafe { T::gesvdj_size(h, mode, 1, m, n, a, lda, s, u, ldu, v, ldv, &mut lwork, raw) }
                .check_status("cusolverDn<t>gesvdj_bufferSize")?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvdj",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: a live handle and info object (moved into the completion, so alive until
                // the op resolved); `a`, `u`, `v` (of `T`) and `s` (of `T::Real`, the type the
                // entry point writes) cover their validated shapes and are distinct; the workspace
                // holds `lwork` elements; `info` pinned.
                unsafe { T::gesvdj(h, mode, 1, m, n, a, lda, s, u, ldu, v, ldv, work.device, lwork, pin.info(), raw) }
                    .check_status("cusolverDn<t>gesvdj")
            },
            move || JacobiRun { info: RunInfo::Svd(info) },
        )
    }

    /// The residual and sweeps of a finished Jacobi run, asked of the library on this
    /// handle's thread.
    pub fn jacobi_report(&mut self, run: &JacobiRun) -> Result<JacobiReport> {
        if let RunInfo::Sim(report) = run.info {
            return Ok(report);
        }
        let (h, _) = self.handle()?;
        self.op.bound_stream()?;
        // SAFETY: a live handle used by this thread (`&mut self`); the run's completion
        // resolved, so its work finished.
        let (residual, sweeps) = match &run.info {
            RunInfo::Svd(i) => unsafe { i.report(h) }?,
            RunInfo::Eig(i) => unsafe { i.report(h) }?,
            RunInfo::Sim(report) => return Ok(*report),
        };
        Ok(JacobiReport { residual, sweeps })
    }
}

/// `range` as f64 bounds (values) or 1-based `il`, `iu` (indices), validated against `n`.
enum Checked {
    All,
    Values(f64, f64),
    Indices(i64, i64),
}

fn check_range<R: SolverElement>(range: &EigRange<R>, n: usize) -> Result<Checked> {
    match range {
        EigRange::All => Ok(Checked::All),
        EigRange::Values { low, high } => {
            let (lo, hi) = (low.to_c().re, high.to_c().re);
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return Err(Error::invalid(
                    "range",
                    format!("the interval ({lo}, {hi}] must have finite bounds, low below high"),
                ));
            }
            Ok(Checked::Values(lo, hi))
        }
        EigRange::Indices(r) => {
            if r.start >= r.end || r.end > n {
                return Err(Error::invalid(
                    "range",
                    format!("indices {}..{} must be a non-empty range within 0..{n} (n = {n})", r.start, r.end),
                ));
            }
            // Both fit: `n` passed `dim64`.
            Ok(Checked::Indices(r.start as i64 + 1, r.end as i64))
        }
    }
}

impl Solver {
    /// Selected eigenvalues of a symmetric or Hermitian matrix (see [`Syevdx`]); the
    /// completion gives how many were found (`0` when none lies in a value range).
    pub fn syevdx<T: SolverElement>(&mut self, e: &Syevdx<'_, T>) -> Result<Completion<usize>> {
        let n = check::dim64("n", e.n)?;
        let lda = matrix("a", "lda", e.a, e.n, e.n, e.lda)?;
        check::covers("w", e.w, Some(e.n), "n eigenvalues")?;
        check::distinct("w", e.a, e.w)?;
        let range = check_range(&e.range, e.n)?;
        let mut rec = self.op.recorder("syevdx");
        record(&mut rec, "a", e.a, Access::ReadWrite)?;
        record(&mut rec, "w", e.w, Access::Write)?;
        if self.op.device.is_simulated() {
            let select = match range {
                Checked::All => super::sim::Select::Indices(0, e.n),
                Checked::Values(lo, hi) => super::sim::Select::Values(lo, hi),
                Checked::Indices(il, iu) => super::sim::Select::Indices(il as usize - 1, iu as usize),
            };
            return super::sim::syevdx(&self.op, rec, e, lda as usize, select);
        }
        let (h, params) = self.handle()?;
        let (a, w, dt, wt) = (vptr(e.a)?, dptr(e.w)?, data_type(T::CUDA), data_type(T::Real::CUDA));
        let (vectors, fill) = (e.vectors, e.fill);
        // The bounds as the eigenvalues' own type, read by the library from host memory.
        let (mut vl, mut vu, kind, il, iu) = match (&e.range, &range) {
            (EigRange::Values { low, high }, _) => (*low, *high, 1, 0, 0),
            (_, Checked::Indices(il, iu)) => (T::Real::from_c(C0), T::Real::from_c(C0), 2, *il, *iu),
            _ => (T::Real::from_c(C0), T::Real::from_c(C0), 0, 0, 0),
        };
        let r = calls::Range {
            range: calls::eig_range(kind),
            vl: (&mut vl as *mut T::Real).cast(),
            vu: (&mut vu as *mut T::Real).cast(),
            il,
            iu,
        };
        let key = SizeKey {
            op: "syevdx",
            dtype: T::CUDA as u32,
            dims: [n, lda, vectors as i64 | (fill as i64) << 1 | kind << 2, il, iu, 0],
        };
        let mut probe = 0i64;
        // SAFETY: a live handle and params, context bound; `r`'s bounds and `probe` are live
        // host values; the query reads no buffer.
        let sizes = self.sizes(key, || unsafe {
            calls::syevdx(h, params, vectors, r, fill, n, dt, (a, lda), (wt, w), &mut probe, None)
        })?;
        let (work, mut keep) = self.workspace(&mut rec, sizes)?;
        let meig = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
        keep.push(Box::new(meig.clone()));
        let count = meig.clone();
        self.run_info(
            rec,
            keep,
            "syevdx",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: (1) live handle and params on this stream; (2) `a` (n x n at lda) and
                // `w` (n) cover their shapes, distinct, declared written; (3) the workspace holds
                // the queried sizes, the host part kept alive with the op; (4) `r`'s bounds live
                // on this frame for the call, and `meig` (an `i64`, kept alive with the op) is
                // the host word the library writes the count to; (5) `info` pinned.
                unsafe {
                    calls::syevdx(
                        h,
                        params,
                        vectors,
                        r,
                        fill,
                        n,
                        dt,
                        (a, lda),
                        (wt, w),
                        meig.as_ptr(),
                        Some((work, pin.info())),
                    )
                }
                .map(drop)
            },
            move || usize::try_from(count.load(std::sync::atomic::Ordering::Acquire)).unwrap_or(0),
        )
    }
}

const C0: crate::libs::solver::sim::linalg::C = crate::libs::solver::sim::linalg::C::real(0.0);
