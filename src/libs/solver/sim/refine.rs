//! The simulated iterative-refinement solves `gesv` and `gels`: the matrix rounded to the
//! lower precision (its significand only; an entry beyond the precision's range falls back as
//! cuSOLVER does), factored in f64 with the factors rounded again, and the solution refined
//! against the unrounded matrix until LAPACK's `dsgesv` test on the residual passes (`gels`:
//! corrections from the semi-normal equations, under the same residual test, which an
//! inconsistent system never passes), at most 50 iterations; otherwise the whole solve runs in
//! the element type's precision. The outcome is reported as cuSOLVER's iteration count is.
//!
//! The expert forms (`irs_gesv`, `irs_gels`) run the same loop under their settings: the
//! tolerance replaces `√n ε` in the stopping test, the iteration limit replaces 50, the
//! classical loop stands in for every refinement solver (GMRES-based refinement converges at
//! least as fast, so the iteration count stays plausible) and `RefinementSolver::None` solves
//! once without refining; with the fallback off, a refinement that fails leaves `A` as it was
//! and reports that it did not converge; the residual history records `‖b − A x‖` (the largest
//! column's) before each correction.

use super::linalg::{self, Mat, C};
use super::{load, outcome, run, store};
use crate::backend::sim_mem::SimMem;
use crate::completion::Completion;
use crate::error::{NumericalFailure, Result};
use crate::libs::solver::expert::{IrsGels, IrsGesv, IrsOutcome};
use crate::libs::solver::refine::{Fallback, Gels, Gesv, Refinement};
use crate::libs::solver::SolverElement;
use crate::libs::OpStream;
use crate::recorder::LaunchRecorder;

/// cuSOLVER's default iteration limit.
pub(in crate::libs::solver) const MAX_ITERATIONS: u32 = 50;

/// How a simulated refinement runs.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::solver) struct Irs {
    /// The lower precision (`None`: the element type's).
    pub low: Option<(u32, f64)>,
    /// The stopping test's tolerance (`None`: `√n ε` of the element type).
    pub tol: Option<f64>,
    /// The most corrections.
    pub max_iters: u32,
    /// Whether to refine at all (`false`: one solve with the lower-precision factors).
    pub refine: bool,
    /// Whether a failed refinement falls back to the element type's precision.
    pub fallback: bool,
}

impl Irs {
    /// The simple `gesv`/`gels`: cuSOLVER's defaults.
    fn defaults(low: Option<(u32, f64)>) -> Irs {
        Irs { low, tol: None, max_iters: MAX_ITERATIONS, refine: true, fallback: true }
    }
}

/// What a simulated refinement did: the outcome, the outer iterations, and the residual
/// history (`(iterations so far, residual norm)` per outer iteration).
pub(in crate::libs::solver) type Ran = (IrsOutcome, u32, Vec<(f64, f64)>);

/// The simple forms' outcome from the expert one (with the fallback on, it never fails).
fn simple(o: IrsOutcome) -> Refinement {
    match o {
        IrsOutcome::Converged { iterations } => Refinement::Converged { iterations },
        IrsOutcome::FellBack(why) | IrsOutcome::NotConverged(why) => Refinement::FellBack(why),
    }
}

/// `x` rounded to `bits` significand bits (round half away from zero).
fn round_bits(x: f64, bits: u32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.abs().log2().floor() as i32;
    let scale = 2f64.powi(bits as i32 - 1 - e);
    (x * scale).round() / scale
}

/// `m` in the lower precision `low` (`None`: as it is); `None` when an entry overflows it.
fn lower(m: &Mat, low: Option<(u32, f64)>) -> Option<Mat> {
    let Some((bits, max)) = low else { return Some(m.clone()) };
    let mut out = m.clone();
    for v in out.data.iter_mut() {
        if v.re.abs() > max || v.im.abs() > max {
            return None;
        }
        *v = C::new(round_bits(v.re, bits), round_bits(v.im, bits));
    }
    Some(out)
}

/// The largest `|re| + |im|` of each column.
fn col_norms(m: &Mat) -> Vec<f64> {
    (0..m.cols).map(|j| (0..m.rows).map(|i| m.at(i, j).abs1()).fold(0.0, f64::max)).collect()
}

/// `B − A X`.
fn residual(a: &Mat, x: &Mat, b: &Mat) -> Mat {
    let ax = a.mul(x);
    let mut r = b.clone();
    for (o, v) in r.data.iter_mut().zip(&ax.data) {
        *o -= *v;
    }
    r
}

fn add(x: &mut Mat, d: &Mat) {
    for (o, v) in x.data.iter_mut().zip(&d.data) {
        *o += *v;
    }
}

/// Refines `x` with `solve` (the lower-precision factors applied to a residual) until `done`
/// says the residual or correction is small enough, at most `max` corrections; the iterations
/// it took, or `None`. Each residual's largest column norm goes to `history`.
fn refine(
    a: &Mat,
    b: &Mat,
    x: &mut Mat,
    max: u32,
    history: &mut Vec<(f64, f64)>,
    solve: impl Fn(&mut Mat),
    done: impl Fn(&Mat, &Mat, &Mat) -> bool,
) -> Option<u32> {
    for it in 0..=max {
        let mut d = residual(a, x, b);
        let r = d.clone();
        history.push((f64::from(it), col_norms(&r).into_iter().fold(0.0, f64::max)));
        solve(&mut d);
        if done(&r, &d, x) {
            return Some(it);
        }
        if it < max {
            add(x, &d);
        }
    }
    None
}

pub(in crate::libs::solver) fn gesv<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gesv<'_, T>,
    dims: (usize, usize, usize),
    low: Option<(u32, f64)>,
) -> Result<Completion<Refinement>> {
    let (a, ipiv, b, x) = (g.a.sim_data()?, g.ipiv.sim_data()?, g.b.sim_data()?, g.x.sim_data()?);
    let (n, nrhs) = (g.n, g.nrhs);
    run(op, rec, move || {
        gesv_core::<T>((n, nrhs), (a, Some(ipiv), b, x), dims, Irs::defaults(low)).map(|r| simple(r.0))
    })
}

pub(in crate::libs::solver) fn irs_gesv<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &IrsGesv<'_, T>,
    dims: (usize, usize, usize),
    irs: Irs,
) -> Result<Completion<Ran>> {
    let (a, b, x) = (g.a.sim_data()?, g.b.sim_data()?, g.x.sim_data()?);
    let (n, nrhs) = (g.n, g.nrhs);
    run(op, rec, move || gesv_core::<T>((n, nrhs), (a, None, b, x), dims, irs))
}

type GesvData<T> = (SimMem<T>, Option<SimMem<i32>>, SimMem<T>, SimMem<T>);

fn gesv_core<T: SolverElement>(
    (n, nrhs): (usize, usize),
    (a, ipiv, b, x): GesvData<T>,
    (lda, ldb, ldx): (usize, usize, usize),
    irs: Irs,
) -> Result<Ran> {
    let low = irs.low;
    let am = load(&a.read(), 0, n, n, lda);
    let bm = load(&b.read(), 0, n, nrhs, ldb);
    let anorm = (0..n).map(|i| (0..n).map(|j| am.at(i, j).abs1()).sum::<f64>()).fold(0.0, f64::max);
    let tol = irs.tol.unwrap_or(T::EPS * (n as f64).sqrt());
    // LAPACK's dsgesv test: ‖r‖ ≤ ‖x‖ ‖A‖ ε √n per column.
    let done =
        |r: &Mat, _: &Mat, x: &Mat| col_norms(r).iter().zip(col_norms(x)).all(|(rn, xn)| *rn <= xn * anorm * tol);
    let mut history = Vec::new();
    let mut last = None;
    let mut attempt = |low: Option<(u32, f64)>| -> std::result::Result<(Mat, Vec<usize>, u32), Fallback> {
        let mut f = lower(&am, low).ok_or(Fallback::Overflow)?;
        let (piv, info) = linalg::lu(&mut f, true);
        if info.is_some() {
            return Err(Fallback::FactorizationFailed);
        }
        let f = lower(&f, low).ok_or(Fallback::ComputationOverflow)?;
        let solve = |m: &mut Mat| linalg::lu_solve(&f, Some(&piv), linalg::Op::No, m);
        let mut xm = bm.clone();
        solve(&mut xm);
        if !irs.refine {
            return Ok((xm, piv, 0));
        }
        let it = refine(&am, &bm, &mut xm, irs.max_iters, &mut history, solve, done);
        match it {
            Some(it) => Ok((xm, piv, it)),
            None => {
                last = Some(xm);
                Err(Fallback::IterationLimit)
            }
        }
    };
    let store_pivots = |piv: &[usize]| {
        if let Some(ipiv) = &ipiv {
            for (o, p) in ipiv.lock().iter_mut().zip(piv) {
                *o = *p as i32 + 1;
            }
        }
    };
    let refined = if low.is_some() || !irs.refine { attempt(low) } else { Err(Fallback::NotWorthIt) };
    let outer = |h: &Vec<(f64, f64)>| h.len().saturating_sub(1) as u32;
    let (xm, result) = match refined {
        Ok((xm, piv, it)) => {
            store_pivots(&piv);
            (xm, IrsOutcome::Converged { iterations: it })
        }
        Err(why) if !irs.fallback && low.is_some() => {
            // No fallback: A stays as it was; X gets the last iterate, if refinement got that far.
            if let Some(xm) = last {
                store(&mut x.lock(), 0, ldx, &xm);
            }
            let o = outer(&history);
            return Ok((IrsOutcome::NotConverged(why), o, history));
        }
        Err(why) => {
            // The element type's own precision: its LU overwrites A.
            let mut f = am.clone();
            let (piv, info) = linalg::lu(&mut f, true);
            store(&mut a.lock(), 0, lda, &f);
            store_pivots(&piv);
            if let Some(index) = info {
                outcome("gesv", 1, vec![NumericalFailure::Singular { matrix: 0, index }])?;
            }
            let mut xm = bm.clone();
            let solve = |m: &mut Mat| linalg::lu_solve(&f, Some(&piv), linalg::Op::No, m);
            solve(&mut xm);
            history.clear();
            let it = refine(&am, &bm, &mut xm, irs.max_iters, &mut history, solve, done);
            // With no lower precision asked for, the main-precision solve is the refined one.
            let result = match (low, it) {
                (None, Some(it)) => IrsOutcome::Converged { iterations: it },
                (None, None) if !irs.fallback => IrsOutcome::NotConverged(Fallback::IterationLimit),
                _ => IrsOutcome::FellBack(why),
            };
            (xm, result)
        }
    };
    store(&mut x.lock(), 0, ldx, &xm);
    let o = outer(&history);
    Ok((result, o, history))
}

/// The least-squares solve with the QR factor `f` (`m x n`, reflectors below `R`) and `tau`:
/// `R⁻¹ (Qᴴ r)[..n]`, in place of the `m x k` `r`'s first `n` rows (returned `n x k`).
fn qr_solve(f: &Mat, tau: &[C], r: &Mat) -> Mat {
    let (m, n) = (f.rows, f.cols);
    let mut c = r.clone();
    linalg::ormqr(f, m, tau, true, true, &mut c);
    let mut y = Mat::zeros(n, r.cols);
    for j in 0..r.cols {
        for i in 0..n {
            *y.at_mut(i, j) = c.at(i, j);
        }
    }
    linalg::solve_upper(&upper(f), &mut y, false);
    y
}

/// The `n x n` `R` of the QR factor `f`.
fn upper(f: &Mat) -> Mat {
    let n = f.cols;
    let mut rr = Mat::zeros(n, n);
    for j in 0..n {
        for i in 0..=j {
            *rr.at_mut(i, j) = f.at(i, j);
        }
    }
    rr
}

pub(in crate::libs::solver) fn gels<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Gels<'_, T>,
    dims: (usize, usize, usize),
    low: Option<(u32, f64)>,
) -> Result<Completion<Refinement>> {
    let (a, b, x) = (g.a.sim_data()?, g.b.sim_data()?, g.x.sim_data()?);
    let shape = (g.m, g.n, g.nrhs);
    run(op, rec, move || gels_core::<T>(shape, (a, b, x), dims, Irs::defaults(low)).map(|r| simple(r.0)))
}

pub(in crate::libs::solver) fn irs_gels<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &IrsGels<'_, T>,
    dims: (usize, usize, usize),
    irs: Irs,
) -> Result<Completion<Ran>> {
    let (a, b, x) = (g.a.sim_data()?, g.b.sim_data()?, g.x.sim_data()?);
    let shape = (g.m, g.n, g.nrhs);
    run(op, rec, move || gels_core::<T>(shape, (a, b, x), dims, irs))
}

fn gels_core<T: SolverElement>(
    (m, n, nrhs): (usize, usize, usize),
    (a, b, x): (SimMem<T>, SimMem<T>, SimMem<T>),
    (lda, ldb, ldx): (usize, usize, usize),
    irs: Irs,
) -> Result<Ran> {
    let low = irs.low;
    let am = load(&a.read(), 0, m, n, lda);
    let bm = load(&b.read(), 0, m, nrhs, ldb);
    let anorm = (0..m).map(|i| (0..n).map(|j| am.at(i, j).abs1()).sum::<f64>()).fold(0.0, f64::max);
    let tol = irs.tol.unwrap_or(T::EPS * (n as f64).sqrt());
    // cuSOLVER's test, as gesv's: ‖r‖ ≤ ‖x‖ ‖A‖ tol per column. The residual of an inconsistent
    // system stays at the least-squares residual's size, so such a system never passes it: the
    // refinement runs to its limit and falls back, with X the least-squares answer.
    let done =
        |r: &Mat, _: &Mat, x: &Mat| col_norms(r).iter().zip(col_norms(x)).all(|(rn, xn)| *rn <= xn * anorm * tol);
    let solve_with = |low: Option<(u32, f64)>,
                      refine_it: bool,
                      history: &mut Vec<(f64, f64)>|
     -> std::result::Result<(Mat, Option<u32>, Mat), Fallback> {
        let mut f = lower(&am, low).ok_or(Fallback::Overflow)?;
        let tau = linalg::geqrf(&mut f);
        if (0..n).any(|i| f.at(i, i).is_zero()) {
            return Err(Fallback::FactorizationFailed);
        }
        let f = lower(&f, low).ok_or(Fallback::ComputationOverflow)?;
        // Corrections from the semi-normal equations Rᴴ R d = Aᴴ r: their fixed point is
        // Aᴴ r = 0, the least-squares solution of A itself (Q's rounding cancels out).
        let rr = upper(&f);
        let radj = rr.adjoint();
        let ah = am.adjoint();
        let solve = |r: &mut Mat| {
            let mut g = ah.mul(r);
            linalg::solve_lower(&radj, &mut g, false);
            linalg::solve_upper(&rr, &mut g, false);
            *r = g;
        };
        let mut xm = qr_solve(&f, &tau, &bm);
        if !refine_it {
            return Ok((xm, Some(0), f));
        }
        let it = refine(&am, &bm, &mut xm, irs.max_iters, history, solve, done);
        Ok((xm, it, f))
    };
    let mut history = Vec::new();
    let outer = |h: &Vec<(f64, f64)>| h.len().saturating_sub(1) as u32;
    let mut last = None;
    let refined = match low {
        Some(_) => solve_with(low, irs.refine, &mut history).and_then(|(xm, it, _)| match it {
            Some(it) => Ok((xm, it)),
            None => {
                last = Some(xm);
                Err(Fallback::IterationLimit)
            }
        }),
        None if !irs.refine => solve_with(None, false, &mut history).map(|(xm, _, _)| (xm, 0)),
        None => Err(Fallback::NotWorthIt),
    };
    let (xm, result) = match refined {
        Ok((xm, it)) => (xm, IrsOutcome::Converged { iterations: it }),
        Err(why) if !irs.fallback && low.is_some() => {
            // No fallback: A stays as it was; X gets the last iterate, if refinement got that far.
            if let Some(xm) = last {
                store(&mut x.lock(), 0, ldx, &xm);
            }
            let o = outer(&history);
            return Ok((IrsOutcome::NotConverged(why), o, history));
        }
        Err(why) => {
            // The element type's own precision: its QR factor overwrites A. A rank-deficient
            // A has no unique solution; the solve then divides by zero, as LAPACK's would.
            history.clear();
            let (xm, it, f) = match solve_with(None, true, &mut history) {
                Ok(v) => v,
                Err(_) => {
                    let mut f = am.clone();
                    let tau = linalg::geqrf(&mut f);
                    (qr_solve(&f, &tau, &bm), None, f)
                }
            };
            store(&mut a.lock(), 0, lda, &f);
            let result = match (low, it) {
                (None, Some(it)) => IrsOutcome::Converged { iterations: it },
                (None, None) if !irs.fallback => IrsOutcome::NotConverged(Fallback::IterationLimit),
                // The main precision's own refinement ran to its limit, as cuSOLVER reports it.
                (None, None) => IrsOutcome::FellBack(Fallback::IterationLimit),
                _ => IrsOutcome::FellBack(why),
            };
            (xm, result)
        }
    };
    store(&mut x.lock(), 0, ldx, &xm);
    let o = outer(&history);
    Ok((result, o, history))
}
