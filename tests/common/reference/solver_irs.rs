//! The CPU reference of cuSOLVER's expert iterative-refinement solves (`irs_gesv`,
//! `irs_gels`) in every element type, shared by the simulator suite and the GPU suite: each
//! setting runs on a random well-conditioned system, and the solution, the outcome, the
//! iteration counts and the residual history are checked against direct loops in complex `f64`.
#![allow(clippy::needless_range_loop)] // index loops mirror the math
// `!(x <= bound)` on purpose: a NaN fails the check.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use crate::common::Rng;
use cusched::solver::{
    Fallback, IrsGels, IrsGesv, IrsOutcome, IrsReport, IrsSettings, LowPrecision, RefinementSolver, SolverElement,
};
use cusched::{Complex, Device, GpuRef, Handles, StreamId};

/// A complex number in `f64`, as `(re, im)`.
pub type Cf = (f64, f64);

/// The element types as the reference takes them.
pub trait IrsEl: SolverElement + std::fmt::Debug {
    const COMPLEX: bool;
    /// The element type's precision.
    const EPS: f64;
    fn from_c(c: Cf) -> Self;
    fn c(self) -> Cf;
}
impl IrsEl for f32 {
    const COMPLEX: bool = false;
    const EPS: f64 = f32::EPSILON as f64;
    fn from_c(c: Cf) -> f32 {
        c.0 as f32
    }
    fn c(self) -> Cf {
        (self as f64, 0.0)
    }
}
impl IrsEl for f64 {
    const COMPLEX: bool = false;
    const EPS: f64 = f64::EPSILON;
    fn from_c(c: Cf) -> f64 {
        c.0
    }
    fn c(self) -> Cf {
        (self, 0.0)
    }
}
impl IrsEl for Complex<f32> {
    const COMPLEX: bool = true;
    const EPS: f64 = f32::EPSILON as f64;
    fn from_c(c: Cf) -> Self {
        Complex::new(c.0 as f32, c.1 as f32)
    }
    fn c(self) -> Cf {
        (self.re as f64, self.im as f64)
    }
}
impl IrsEl for Complex<f64> {
    const COMPLEX: bool = true;
    const EPS: f64 = f64::EPSILON;
    fn from_c(c: Cf) -> Self {
        Complex::new(c.0, c.1)
    }
    fn c(self) -> Cf {
        (self.re, self.im)
    }
}

fn random_c(rng: &mut Rng, complex: bool) -> Cf {
    (rng.f32() as f64 - 0.5, if complex { rng.f32() as f64 - 0.5 } else { 0.0 })
}

/// Column-major `A B` (`A` `m x k`, `B` `k x n`).
pub fn cmatmul(a: &[Cf], b: &[Cf], m: usize, k: usize, n: usize) -> Vec<Cf> {
    let mut c = vec![(0.0, 0.0); m * n];
    for j in 0..n {
        for l in 0..k {
            let q = b[l + j * k];
            for i in 0..m {
                let p = a[i + l * m];
                c[i + j * m].0 += p.0 * q.0 - p.1 * q.1;
                c[i + j * m].1 += p.0 * q.1 + p.1 * q.0;
            }
        }
    }
    c
}

/// `Aᴴ` of the column-major `m x n` `A`.
pub fn adjoint(a: &[Cf], m: usize, n: usize) -> Vec<Cf> {
    let mut t = vec![(0.0, 0.0); m * n];
    for j in 0..n {
        for i in 0..m {
            t[j + i * n] = (a[i + j * m].0, -a[i + j * m].1);
        }
    }
    t
}

fn abs1(c: Cf) -> f64 {
    c.0.abs() + c.1.abs()
}

/// The largest column's `max |re| + |im|` of the `rows x cols` `v`.
fn col_inf(v: &[Cf], rows: usize, cols: usize) -> f64 {
    (0..cols).map(|j| (0..rows).map(|i| abs1(v[i + j * rows])).fold(0.0, f64::max)).fold(0.0, f64::max)
}

/// `‖A‖∞` of the column-major `m x n` `A`.
fn norm_inf(a: &[Cf], m: usize, n: usize) -> f64 {
    (0..m).map(|i| (0..n).map(|j| abs1(a[i + j * m])).sum::<f64>()).fold(0.0, f64::max)
}

/// `‖B − A X‖∞ / (‖A‖∞ ‖X‖∞)` by columns, the worst: what the refinement's test bounds.
pub fn backward(a: &[Cf], x: &[Cf], b: &[Cf], n: usize, nrhs: usize) -> f64 {
    let ax = cmatmul(a, x, n, n, nrhs);
    let r: Vec<Cf> = ax.iter().zip(b).map(|(p, q)| (q.0 - p.0, q.1 - p.1)).collect();
    col_inf(&r, n, nrhs) / (norm_inf(a, n, n) * col_inf(x, n, nrhs)).max(f64::MIN_POSITIVE)
}

/// A random diagonally dominant `n x n` matrix: well conditioned.
pub fn dominant(rng: &mut Rng, n: usize, complex: bool) -> Vec<Cf> {
    let mut a: Vec<Cf> = (0..n * n).map(|_| random_c(rng, complex)).collect();
    for i in 0..n {
        a[i + i * n].0 += n as f64;
    }
    a
}

/// What one solve left: the report, `X`, `A` afterwards.
type Ran<T> = (IrsReport, Vec<Cf>, Vec<T>);

/// Runs `irs_gesv` on `(a, b)` under `s`.
#[allow(clippy::too_many_arguments)]
fn gesv<T: IrsEl>(
    d: &Device,
    st: StreamId,
    h: &mut Handles,
    a0: &[T],
    b0: &[T],
    n: usize,
    nrhs: usize,
    s: &IrsSettings,
) -> cusched::Result<Ran<T>> {
    let (a, b, x): (GpuRef<T>, GpuRef<T>, GpuRef<T>) =
        (d.upload(st, a0)?, d.upload(st, b0)?, d.upload(st, &vec![T::from_c((f64::NAN, f64::NAN)); n * nrhs])?);
    let g = IrsGesv { n, nrhs, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
    let r = h.solver()?.irs_gesv(&g, s)?.wait()?;
    Ok((r, x.download(st)?.into_iter().map(T::c).collect(), a.download(st)?))
}

/// Every setting of `irs_gesv` in `T` at order `n`, and of `irs_gels` at `m x n`: returns the
/// failures, one line each (the reports are printed).
pub fn check_every_setting<T: IrsEl + PartialEq>(
    d: &Device,
    st: StreamId,
    h: &mut Handles,
    rng: &mut Rng,
    n: usize,
    m: usize,
) -> Vec<String> {
    let ty = std::any::type_name::<T>();
    let mut failures = Vec::new();
    let up = |v: &[Cf]| -> Vec<T> { v.iter().map(|&c| T::from_c(c)).collect() };
    let ac = dominant(rng, n, T::COMPLEX);
    let a0 = up(&ac);
    // The matrix as the element type holds it: the reference for the residuals.
    let ac: Vec<Cf> = a0.iter().map(|&v| v.c()).collect();
    let nrhs = 3;
    let xc: Vec<Cf> = (0..n * nrhs).map(|_| random_c(rng, T::COMPLEX)).collect();
    let b0 = up(&cmatmul(&ac, &xc, n, n, nrhs));
    let bc: Vec<Cf> = b0.iter().map(|&v| v.c()).collect();
    let bound = 1e2 * (n as f64).sqrt() * T::EPS;
    let lows = [LowPrecision::Main, LowPrecision::F32, LowPrecision::F16, LowPrecision::Bf16, LowPrecision::Tf32];
    // Classical refinement, three right-hand sides, with the history; GMRES, one.
    for low in lows {
        for (refinement, k) in [(RefinementSolver::Classical, nrhs), (RefinementSolver::Gmres, 1)] {
            let s = IrsSettings { low, refinement, residual_history: true, ..IrsSettings::default() };
            let what = format!("{ty} gesv {low:?} {refinement:?}");
            let (bk, bck) = (&b0[..n * k], &bc[..n * k]);
            match gesv::<T>(d, st, h, &a0, bk, n, k, &s) {
                Err(e) => failures.push(format!("{what}: {e}")),
                Ok((r, x, a_after)) => {
                    println!("{what}: {:?}, outer {}, history {:?}", r.outcome, r.outer_iterations, r.residual_history);
                    let back = backward(&ac, &x, bck, n, k);
                    if !(back <= bound) {
                        failures.push(format!("{what}: backward error {back:.2e} above {bound:.2e}"));
                    }
                    match r.outcome {
                        IrsOutcome::Converged { .. } => {
                            // F32 is an f32 type's own precision: no lower factorization there.
                            let lower = !(low == LowPrecision::Main || low == LowPrecision::F32 && T::EPS > 1e-10);
                            if lower && a_after != a0 {
                                failures.push(format!("{what}: converged, yet A changed"));
                            }
                        }
                        other => failures.push(format!("{what}: a dominant matrix should converge, got {other:?}")),
                    }
                    let h = &r.residual_history;
                    if h.len() != r.outer_iterations as usize + 1
                        || h.windows(2).any(|w| w[1].iterations < w[0].iterations)
                        || h.iter().any(|s| !(s.residual >= 0.0 && s.residual.is_finite()))
                    {
                        failures.push(format!(
                            "{what}: implausible history {h:?} for {} outer iterations",
                            r.outer_iterations
                        ));
                    }
                }
            }
        }
    }
    // No refinement: one solve with the lowest-precision factors, as accurate as they are.
    let s = IrsSettings { low: LowPrecision::Bf16, refinement: RefinementSolver::None, ..IrsSettings::default() };
    match gesv::<T>(d, st, h, &a0, &b0, n, nrhs, &s) {
        Err(e) => failures.push(format!("{ty} gesv None: {e}")),
        Ok((r, x, _)) => {
            let back = backward(&ac, &x, &bc, n, nrhs);
            println!("{ty} gesv None: {:?}, backward {back:.2e}", r.outcome);
            if !matches!(r.outcome, IrsOutcome::Converged { iterations: 0 }) || !(back < 1e-1) {
                failures.push(format!("{ty} gesv None: {:?}, backward error {back:.2e}", r.outcome));
            }
        }
    }
    // A loose tolerance: no more iterations than the default, and the residual within it.
    if T::EPS < 1e-10 {
        let base = IrsSettings { low: LowPrecision::F16, ..IrsSettings::default() };
        let loose = IrsSettings { tolerance: Some(1e-6), ..base };
        match (gesv::<T>(d, st, h, &a0, &b0, n, nrhs, &base), gesv::<T>(d, st, h, &a0, &b0, n, nrhs, &loose)) {
            (Ok((rb, _, _)), Ok((rl, x, _))) => {
                let back = backward(&ac, &x, &bc, n, nrhs);
                println!("{ty} tolerance: default {:?}, 1e-6 {:?} (backward {back:.2e})", rb.outcome, rl.outcome);
                match (rb.outcome, rl.outcome) {
                    (IrsOutcome::Converged { iterations: i }, IrsOutcome::Converged { iterations: j })
                        if j <= i && back <= 1e-5 => {}
                    other => failures.push(format!("{ty} tolerance: {other:?}, backward {back:.2e}")),
                }
            }
            (e1, e2) => failures.push(format!("{ty} tolerance: {:?} / {:?}", e1.err(), e2.err())),
        }
        // Four iterations from bf16 cannot reach f64: with the fallback it falls back (X valid,
        // A factored), without it it reports the failure and keeps A. (Four: a limit whose
        // negation is no other failure's code.)
        for fallback in [true, false] {
            let s =
                IrsSettings { low: LowPrecision::Bf16, max_iterations: Some(4), fallback, ..IrsSettings::default() };
            let what = format!("{ty} max 4, fallback {fallback}");
            match gesv::<T>(d, st, h, &a0, &b0, n, nrhs, &s) {
                Err(e) => failures.push(format!("{what}: {e}")),
                Ok((r, x, a_after)) => {
                    println!("{what}: {:?}, max {}", r.outcome, r.max_iterations);
                    let ok = match r.outcome {
                        IrsOutcome::FellBack(Fallback::IterationLimit) if fallback => {
                            backward(&ac, &x, &bc, n, nrhs) <= bound
                        }
                        IrsOutcome::NotConverged(Fallback::IterationLimit) if !fallback => a_after == a0,
                        _ => false,
                    };
                    if !ok || r.max_iterations != 4 {
                        failures.push(format!("{what}: {:?}, max {}", r.outcome, r.max_iterations));
                    }
                }
            }
        }
    }
    // Least squares, m x n, from every lower precision: the normal equations hold.
    let gc: Vec<Cf> = (0..m * n).map(|_| random_c(rng, T::COMPLEX)).collect();
    let g0 = up(&gc);
    let gc: Vec<Cf> = g0.iter().map(|&v| v.c()).collect();
    let k = 2;
    let lb0 = up(&(0..m * k).map(|_| random_c(rng, T::COMPLEX)).collect::<Vec<_>>());
    let lbc: Vec<Cf> = lb0.iter().map(|&v| v.c()).collect();
    for low in lows {
        let s = IrsSettings { low, residual_history: true, ..IrsSettings::default() };
        let what = format!("{ty} gels {low:?}");
        let mut run = || -> cusched::Result<(IrsReport, Vec<Cf>)> {
            let (a, b, x): (GpuRef<T>, GpuRef<T>, GpuRef<T>) =
                (d.upload(st, &g0)?, d.upload(st, &lb0)?, d.upload(st, &vec![T::from_c((f64::NAN, f64::NAN)); n * k])?);
            let g = IrsGels { m, n, nrhs: k, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
            let r = h.solver()?.irs_gels(&g, &s)?.wait()?;
            Ok((r, x.download(st)?.into_iter().map(T::c).collect()))
        };
        match run() {
            Err(e) => failures.push(format!("{what}: {e}")),
            Ok((r, x)) => {
                let ax = cmatmul(&gc, &x, m, n, k);
                let res: Vec<Cf> = ax.iter().zip(&lbc).map(|(p, q)| (p.0 - q.0, p.1 - q.1)).collect();
                let normal = cmatmul(&adjoint(&gc, m, n), &res, n, m, k);
                let fro = |v: &[Cf]| v.iter().map(|c| c.0 * c.0 + c.1 * c.1).sum::<f64>().sqrt();
                let scaled = fro(&normal) / (fro(&gc) * fro(&lbc) * m as f64 * T::EPS);
                println!("{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}, history {:?}", r.outcome, r.residual_history);
                if !(scaled < 100.0) || !matches!(r.outcome, IrsOutcome::Converged { .. }) {
                    failures.push(format!("{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}", r.outcome));
                }
            }
        }
    }
    failures
}
