//! The expert iterative-refinement interface, `cusolverDnIRSXgesv` and `cusolverDnIRSXgels`:
//! the mixed-precision solves of [`Solver::gesv`] and [`Solver::gels`] with their settings in
//! the caller's hands ([`IrsSettings`]: lowest precision, refinement solver, tolerances,
//! iteration limits, fallback) and a fuller report ([`IrsReport`]: the outcome, outer
//! iterations, and the residual history when asked for).
//!
//! cuSOLVER returns the iteration count on the host, so the library waits for the GPU inside
//! these calls (the op itself does not synchronize), as with `gesv` and `gels`. The residual
//! history is read from the call's report object right after the call, as cuSOLVER lays it out:
//! a column-major `(max_iterations + 1) x 2` matrix (iterations so far, residual norm) whose
//! first `outer_iterations + 1` rows are filled; cusched reads its entries as the main
//! precision's real type (`f32` for `f32` and `Complex<f32>`, else `f64`), since the pointer
//! cuSOLVER returns is untyped.
//!
//! On the simulator the refinement is cusched's own loop (see the simulator's `refine` module):
//! classical refinement for every refinement solver, the tolerance replacing `√n ε` in the
//! stopping test, so the answer meets the same tolerance and the iteration counts are plausible,
//! not the GPU's own.

use super::calls::irs_expert as calls;
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::refine::{Fallback, LowPrecision, Refinement};
use super::{SizeKey, Solver, SolverElement};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::CudaType;
use crate::libs::record;
use crate::libs::validate as check;
use crate::memory::GpuRef;
use crate::track::Access;
use std::sync::{Arc, Mutex};

/// The refinement solver of an expert iterative-refinement solve (`cusolverIRSRefinement_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RefinementSolver {
    /// No refinement: one solve with the lowest-precision factors (iterations 0).
    None,
    /// Classical iterative refinement, as LAPACK's (what [`Solver::gesv`] uses).
    #[default]
    Classical,
    /// Classical refinement with GMRES solving each correction (two levels).
    ClassicalGmres,
    /// GMRES preconditioned by the lowest-precision factors; NVIDIA's recommended choice.
    Gmres,
    /// GMRES with an inner GMRES (two levels).
    GmresGmres,
    /// GMRES without preconditioning.
    GmresNoPreconditioner,
}

impl RefinementSolver {
    fn gmres(self) -> bool {
        !matches!(self, RefinementSolver::None | RefinementSolver::Classical)
    }
}

/// The settings of an expert iterative-refinement solve. `None` keeps cuSOLVER's default.
///
/// The simulator honours the lowest precision, tolerance, iteration limit, fallback and
/// history, and runs classical refinement for every refinement solver but
/// [`RefinementSolver::None`] (the inner settings do not apply there).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IrsSettings {
    /// The lowest precision the factorization runs in.
    pub low: LowPrecision,
    /// The refinement solver. The GMRES-based ones take one right-hand side only.
    pub refinement: RefinementSolver,
    /// The refinement's stopping tolerance (finite, above 0). cuSOLVER's default stops when
    /// every column satisfies `‖r‖∞ < √n ‖x‖∞ ‖A‖∞ ε` (ε of the element type).
    pub tolerance: Option<f64>,
    /// The inner solver's tolerance, for the two-level solvers (cuSOLVER's default: 1e-4).
    pub inner_tolerance: Option<f64>,
    /// The most refinement iterations (at least 1; cuSOLVER's default: 50). A stop at the
    /// limit is [`Fallback::IterationLimit`], read from cuSOLVER's `-50` or from the negated
    /// limit; limits of 1, 2, 3 and 5 share their negation with other codes, which win.
    pub max_iterations: Option<u32>,
    /// The most inner iterations of the two-level solvers (at least 1).
    pub max_inner_iterations: Option<u32>,
    /// Whether a refinement that does not converge falls back to factoring in the element
    /// type's precision (cuSOLVER's default: yes). Without it, such a solve reports
    /// [`IrsOutcome::NotConverged`] and `X` is not a solution.
    pub fallback: bool,
    /// Whether to return the residual history ([`IrsReport::residual_history`]).
    pub residual_history: bool,
}

impl Default for IrsSettings {
    fn default() -> Self {
        IrsSettings {
            low: LowPrecision::Main,
            refinement: RefinementSolver::Classical,
            tolerance: None,
            inner_tolerance: None,
            max_iterations: None,
            max_inner_iterations: None,
            fallback: true,
            residual_history: false,
        }
    }
}

/// What an expert iterative-refinement solve did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrsOutcome {
    /// The refinement reached the tolerance after this many iterations.
    Converged {
        /// Refinement iterations (all levels).
        iterations: u32,
    },
    /// It factored in the element type's precision instead, for this reason; `X` is valid.
    FellBack(Fallback),
    /// The refinement failed for this reason and the fallback was off: `X` is not a solution.
    NotConverged(Fallback),
}

/// One row of the residual history: after `iterations` iterations in all, the residual norm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResidualStep {
    /// Iterations so far (all levels).
    pub iterations: u32,
    /// The residual norm then.
    pub residual: f64,
}

/// The report of an expert iterative-refinement solve.
#[derive(Clone, Debug, PartialEq)]
pub struct IrsReport {
    /// What happened.
    pub outcome: IrsOutcome,
    /// Iterations of the outer loop (the same as the total for one-level solvers).
    pub outer_iterations: u32,
    /// The iteration limit the call ran under.
    pub max_iterations: u32,
    /// One row per outer iteration, the first before any correction; empty unless
    /// [`IrsSettings::residual_history`] asked for it.
    pub residual_history: Vec<ResidualStep>,
}

impl IrsOutcome {
    /// The outcome cuSOLVER's iteration count `iter` means under the limit `max` (a stop at
    /// the limit reads `-max` or cuSOLVER's `-50`), with the fallback on or off.
    fn from_iter(iter: i32, max: i32, fallback: bool) -> IrsOutcome {
        let limit = iter < 0 && iter == max.saturating_neg() && !matches!(iter, -1 | -2 | -3 | -5);
        let r = if limit { Refinement::FellBack(Fallback::IterationLimit) } else { Refinement::from_iter(iter) };
        match r {
            Refinement::Converged { iterations } => IrsOutcome::Converged { iterations },
            Refinement::FellBack(why) if fallback => IrsOutcome::FellBack(why),
            Refinement::FellBack(why) => IrsOutcome::NotConverged(why),
        }
    }
}

/// `A X = B` for the `n x n` `A` by LU in the settings' lowest precision and iterative
/// refinement (`cusolverDnIRSXgesv`). `B` is read; `X` is written; `A` is left as it was when
/// refinement converged, and overwritten (its LU factors) after a fallback. An exactly singular
/// `U` (in the element type's precision) fails the completion with
/// [`NumericalFailure::Singular`](crate::NumericalFailure::Singular).
#[derive(Debug)]
pub struct IrsGesv<'a, T: SolverElement> {
    /// Order of `A`.
    pub n: usize,
    /// Right-hand sides (1 with a GMRES-based refinement solver).
    pub nrhs: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B` (`n x nrhs`), read.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `X` (`n x nrhs`), written.
    pub x: &'a GpuRef<T>,
    /// Leading dimension of `X`; `None`: packed.
    pub ldx: Option<usize>,
}

/// The least-squares `X` minimizing `‖A X − B‖` for the `m x n` `A` of full rank, `m >= n`,
/// by QR in the settings' lowest precision and iterative refinement (`cusolverDnIRSXgels`).
/// `B` (`m x nrhs`) is read; `X` (`n x nrhs`) is written; `A` is left as it was when
/// refinement converged, and overwritten after a fallback.
///
/// The stopping test is on the residual `B − A X`, so refinement converges only for a
/// consistent system (`B` in `A`'s range, up to rounding); an inconsistent one runs to the
/// iteration limit and falls back ([`Fallback::IterationLimit`]) with the least-squares `X`, or
/// reports [`IrsOutcome::NotConverged`] with the fallback off.
#[derive(Debug)]
pub struct IrsGels<'a, T: SolverElement> {
    /// Rows of `A`.
    pub m: usize,
    /// Columns of `A`.
    pub n: usize,
    /// Right-hand sides (1 with a GMRES-based refinement solver).
    pub nrhs: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B` (`m x nrhs`), read.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `X` (`n x nrhs`), written.
    pub x: &'a GpuRef<T>,
    /// Leading dimension of `X`; `None`: packed.
    pub ldx: Option<usize>,
}

/// A matrix as the call takes it: its pointer and leading dimension.
type Operand = (*mut std::ffi::c_void, i32);

/// A dimension or leading dimension as the `int` the IRS calls take.
fn int(arg: &'static str, v: i64) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit the 32-bit int these calls take")))
}

/// The settings checked, as the call layer takes them, and as the simulator runs them.
fn checked<T: SolverElement>(s: &IrsSettings, nrhs: usize) -> Result<(calls::Settings, super::sim::Irs)> {
    let tol = |arg: &'static str, t: Option<f64>| match t {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            Err(Error::invalid(arg, format!("{v} is not a finite tolerance above 0")))
        }
        _ => Ok(t),
    };
    let iters = |arg: &'static str, m: Option<u32>| match m {
        None => Ok(None),
        Some(0) => Err(Error::invalid(arg, "must be at least 1")),
        Some(v) => i32::try_from(v)
            .map(Some)
            .map_err(|_| Error::invalid(arg, format!("{v} does not fit the 32-bit int cuSOLVER takes"))),
    };
    if s.refinement.gmres() && nrhs > 1 {
        return Err(Error::invalid(
            "settings.refinement",
            format!(
                "{:?} takes one right-hand side, and nrhs is {nrhs}: use RefinementSolver::Classical or None, \
                 or solve the columns one at a time",
                s.refinement
            ),
        ));
    }
    let (tolerance, inner) =
        (tol("settings.tolerance", s.tolerance)?, tol("settings.inner_tolerance", s.inner_tolerance)?);
    let max_iters = iters("settings.max_iterations", s.max_iterations)?;
    let max_inner = iters("settings.max_inner_iterations", s.max_inner_iterations)?;
    let raw = calls::Settings {
        main: T::CUDA,
        low: s.low,
        refinement: s.refinement,
        tol: tolerance,
        tol_inner: inner,
        max_iters,
        max_iters_inner: max_inner,
        fallback: s.fallback,
    };
    let sim = super::sim::Irs {
        low: super::refine::low_bits::<T>(s.low),
        tol: tolerance,
        max_iters: s.max_iterations.unwrap_or(super::sim::MAX_ITERATIONS),
        refine: s.refinement != RefinementSolver::None,
        fallback: s.fallback,
    };
    Ok((raw, sim))
}

/// Everything of the settings that shapes the workspace, packed in one key entry.
fn packed(s: &calls::Settings) -> i64 {
    (s.low as i64) << 16 | (s.refinement as i64) << 8 | i64::from(s.fallback)
}

/// The two iteration limits in one key entry, each as its 32 bits (`-1`: the default).
fn limits(s: &calls::Settings) -> i64 {
    let bits = |v: Option<i32>| i64::from(v.unwrap_or(-1) as u32);
    bits(s.max_iters) << 32 | bits(s.max_iters_inner)
}

/// The report from the simulator's run.
fn sim_report(settings: &IrsSettings, (outcome, outer, history): super::sim::Ran) -> IrsReport {
    IrsReport {
        outcome,
        outer_iterations: outer,
        max_iterations: settings.max_iterations.unwrap_or(super::sim::MAX_ITERATIONS),
        residual_history: if settings.residual_history {
            history.into_iter().map(|(i, r)| ResidualStep { iterations: i as u32, residual: r }).collect()
        } else {
            Vec::new()
        },
    }
}

impl Solver {
    /// Mixed-precision LU solve with iterative refinement under `settings` (see [`IrsGesv`]).
    pub fn irs_gesv<T: SolverElement>(
        &mut self,
        g: &IrsGesv<'_, T>,
        settings: &IrsSettings,
    ) -> Result<Completion<IrsReport>> {
        let (n, nrhs) = (check::dim("n", g.n, false)?, check::dim("nrhs", g.nrhs, false)?);
        let lda = int("lda", matrix("a", "lda", g.a, g.n, g.n, g.lda)?)?;
        let ldb = int("ldb", matrix("b", "ldb", g.b, g.n, g.nrhs, g.ldb)?)?;
        let ldx = int("ldx", matrix("x", "ldx", g.x, g.n, g.nrhs, g.ldx)?)?;
        let (raw, sim) = checked::<T>(settings, g.nrhs)?;
        let rec = self.irs_recorder("irs_gesv", g.a, g.b, g.x)?;
        if self.op.device.is_simulated() {
            let dims = (lda as usize, ldb as usize, ldx as usize);
            let s = *settings;
            return Ok(super::sim::irs_gesv(&self.op, rec, g, dims, sim)?.map(move |r| sim_report(&s, r)));
        }
        let key = irs_key("irs_gesv", T::CUDA as u32, n.into(), nrhs, &raw);
        let operands = ((vptr(g.a)?, lda), (vptr(g.b)?, ldb), (vptr(g.x)?, ldx));
        self.irs(rec, key, raw, settings, (0, n, nrhs), operands, false)
    }

    /// Mixed-precision least squares with iterative refinement under `settings` (see
    /// [`IrsGels`]).
    pub fn irs_gels<T: SolverElement>(
        &mut self,
        g: &IrsGels<'_, T>,
        settings: &IrsSettings,
    ) -> Result<Completion<IrsReport>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let nrhs = check::dim("nrhs", g.nrhs, false)?;
        if g.m < g.n {
            return Err(Error::invalid(
                "m",
                format!("{} is below n = {}: cuSOLVER's gels solves only m >= n (overdetermined) systems", g.m, g.n),
            ));
        }
        let lda = int("lda", matrix("a", "lda", g.a, g.m, g.n, g.lda)?)?;
        let ldb = int("ldb", matrix("b", "ldb", g.b, g.m, g.nrhs, g.ldb)?)?;
        let ldx = int("ldx", matrix("x", "ldx", g.x, g.n, g.nrhs, g.ldx)?)?;
        let (raw, sim) = checked::<T>(settings, g.nrhs)?;
        let rec = self.irs_recorder("irs_gels", g.a, g.b, g.x)?;
        if self.op.device.is_simulated() {
            let dims = (lda as usize, ldb as usize, ldx as usize);
            let s = *settings;
            return Ok(super::sim::irs_gels(&self.op, rec, g, dims, sim)?.map(move |r| sim_report(&s, r)));
        }
        let key = irs_key("irs_gels", T::CUDA as u32, i64::from(m) << 32 | i64::from(n), nrhs, &raw);
        let operands = ((vptr(g.a)?, lda), (vptr(g.b)?, ldb), (vptr(g.x)?, ldx));
        self.irs(rec, key, raw, settings, (m, n, nrhs), operands, true)
    }

    /// The GPU path of both: the parameter and report objects made, the workspace queried
    /// (cached under `key`) and declared, the call run, its report read right after it.
    #[allow(clippy::too_many_arguments)]
    fn irs(
        &mut self,
        mut rec: crate::recorder::LaunchRecorder,
        key: SizeKey,
        raw: calls::Settings,
        settings: &IrsSettings,
        shape: (i32, i32, i32),
        (a, b, x): (Operand, Operand, Operand),
        gels: bool,
    ) -> Result<Completion<IrsReport>> {
        let (h, _) = self.handle()?;
        let (op, meaning) = if gels { ("irs_gels", Meaning::ParamsOnly) } else { ("irs_gesv", Meaning::Pivot) };
        let params = calls::params(&raw)?;
        let infos = calls::infos(settings.residual_history)?;
        let (p, i) = (params.get(), infos.get());
        let (m, n, nrhs) = shape;
        let sizes = self.sizes(key, || {
            // SAFETY: a live handle, context bound by `sizes`, and a live parameter object; the
            // query reads no buffer.
            let bytes = unsafe {
                if gels {
                    calls::gels_size(h, p, m, n, nrhs)
                } else {
                    calls::gesv_size(h, p, n, nrhs)
                }
            }?;
            Ok((bytes, 0))
        })?;
        let (work, mut keep) = self.workspace(&mut rec, sizes)?;
        // The objects live until the op's work finished, as the workspace does.
        keep.push(Box::new(params));
        keep.push(Box::new(infos));
        let report = Arc::new(Mutex::new(None::<Result<calls::Report>>));
        let filled = report.clone();
        let (history, fallback) = (settings.residual_history, settings.fallback);
        let single = matches!(raw.main, CudaType::R32F | CudaType::C32F);
        let operands = calls::Operands { a, b, x, work: (work.device, work.device_bytes) };
        let done = self.run_info(
            rec,
            keep,
            op,
            1,
            meaning,
            None,
            move |pin| {
                // SAFETY: (1) a live handle on this stream, context bound by the op path; (2) `a`,
                // `b`, `x` (of the main precision's type) cover their validated shapes, are
                // distinct and declared; (3) the workspace, declared, holds the bytes queried
                // for these parameters and shape; (4) `info` is pinned mapped memory; (5) the
                // parameter and infos objects are kept alive with the op, the infos made for
                // this call.
                let niters = unsafe { calls::solve(gels, h, p, i, (m, n, nrhs), &operands, pin.info()) }?;
                // SAFETY: the infos object is live (kept with the op) and its call has returned.
                let read = unsafe { calls::report(i, history, single) }.map(|mut r| {
                    r.niters = niters;
                    r
                });
                if let Ok(mut slot) = filled.lock() {
                    *slot = Some(read);
                }
                Ok(())
            },
            move || -> Result<IrsReport> {
                let read = report.lock().ok().and_then(|mut s| s.take());
                // The enqueue fills the slot before the op can complete; only a poisoned lock
                // leaves it empty.
                let r = read.ok_or_else(|| Error::Library {
                    call: "cusolverDnIRSInfosGetNiters",
                    status: "the report of the call was lost (a thread panicked holding it)".into(),
                })??;
                Ok(IrsReport {
                    outcome: IrsOutcome::from_iter(r.niters, r.max_iters, fallback),
                    outer_iterations: r.outer.unsigned_abs(),
                    max_iterations: r.max_iters.unsigned_abs(),
                    residual_history: r
                        .history
                        .into_iter()
                        .map(|(i, res)| ResidualStep { iterations: i.max(0.0) as u32, residual: res })
                        .collect(),
                })
            },
        )?;
        Ok(done.try_map(|r| r))
    }
}

impl Solver {
    /// The recorder of an expert refinement solve: `a`, `b` and `x` distinct, `A` read and
    /// written (a fallback overwrites it), `B` read, `X` written.
    fn irs_recorder<T: SolverElement>(
        &self,
        name: &'static str,
        a: &GpuRef<T>,
        b: &GpuRef<T>,
        x: &GpuRef<T>,
    ) -> Result<crate::recorder::LaunchRecorder> {
        check::distinct("b", a, b)?;
        check::distinct("x", a, x)?;
        check::distinct("x", b, x)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "a", a, Access::ReadWrite)?;
        record(&mut rec, "b", b, Access::Read)?;
        record(&mut rec, "x", x, Access::Write)?;
        Ok(rec)
    }
}

/// The workspace-size key of an expert refinement solve: its shape (`shape`: `n`, or `m` and
/// `n` packed) and right-hand sides, and every setting the size can depend on.
fn irs_key(op: &'static str, dtype: u32, shape: i64, nrhs: i32, raw: &calls::Settings) -> SizeKey {
    let tol = |t: Option<f64>| t.map_or(-1, |t| t.to_bits() as i64);
    SizeKey { op, dtype, dims: [shape, nrhs.into(), packed(raw), limits(raw), tol(raw.tol), tol(raw.tol_inner)] }
}
