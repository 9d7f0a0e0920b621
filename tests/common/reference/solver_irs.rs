//! The CPU reference of cuSOLVER's expert iterative-refinement solves (`irs_gesv`,
//! `irs_gels`) in every element type, shared by the simulator suite and the GPU suite: each
//! setting runs on a random well-conditioned system (an ill-conditioned one where refinement
//! must fail, an inconsistent one where least squares cannot converge), and the solution, the
//! outcome, the iteration counts and the residual history are checked against direct loops in
//! complex `f64`.
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

fn cmul(p: Cf, q: Cf) -> Cf {
    (p.0 * q.0 - p.1 * q.1, p.0 * q.1 + p.1 * q.0)
}

/// A random `n x n` matrix `Q₁ Σ Q₂` with unitary `Q₁`, `Q₂` (products of `n` random
/// Householder reflectors each) and singular values spread geometrically from 1 down to
/// `1 / kappa`: its condition number is `kappa`, and a factorization in a low precision `u`
/// with `kappa u ≫ 1` is no preconditioner for it, so classical refinement from there diverges.
pub fn ill_conditioned(rng: &mut Rng, n: usize, complex: bool, kappa: f64) -> Vec<Cf> {
    let mut a = vec![(0.0, 0.0); n * n];
    for i in 0..n {
        a[i + i * n].0 = kappa.powf(-(i as f64) / (n.max(2) - 1) as f64);
    }
    for side in [true, false] {
        for _ in 0..n {
            let v: Vec<Cf> = (0..n).map(|_| random_c(rng, complex)).collect();
            let vv: f64 = v.iter().map(|c| c.0 * c.0 + c.1 * c.1).sum();
            if vv == 0.0 {
                continue;
            }
            let f = 2.0 / vv;
            if side {
                // A ← (I − f v vᴴ) A, column by column.
                for j in 0..n {
                    let s = (0..n).fold((0.0, 0.0), |s, i| {
                        let t = cmul((v[i].0, -v[i].1), a[i + j * n]);
                        (s.0 + t.0, s.1 + t.1)
                    });
                    for i in 0..n {
                        let t = cmul(v[i], s);
                        a[i + j * n].0 -= f * t.0;
                        a[i + j * n].1 -= f * t.1;
                    }
                }
            } else {
                // A ← A (I − f v vᴴ), row by row.
                for i in 0..n {
                    let s = (0..n).fold((0.0, 0.0), |s, l| {
                        let t = cmul(a[i + l * n], v[l]);
                        (s.0 + t.0, s.1 + t.1)
                    });
                    for l in 0..n {
                        let t = cmul(s, (v[l].0, -v[l].1));
                        a[i + l * n].0 -= f * t.0;
                        a[i + l * n].1 -= f * t.1;
                    }
                }
            }
        }
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

/// Whether `outcome` is acceptable for a consistent least-squares system in `T` (the answer's
/// accuracy is checked apart). A double main precision must converge from any lower factors. In
/// a single one (f32, `Complex<f32>`) refinement from half, bf16 or tf32 factors need not
/// contract (κ·u_low need not be below one), and cuSOLVER then falls back to the main
/// precision's own solve, whose answer is accurate. Only a fallback that tried the lower
/// precision counts: "not worth it" never refined.
pub fn consistent_gels_outcome_ok<T: IrsEl>(outcome: IrsOutcome) -> bool {
    let single = T::EPS > 1e-10;
    match outcome {
        IrsOutcome::Converged { .. } => true,
        IrsOutcome::FellBack(why) => single && why != Fallback::NotWorthIt,
        IrsOutcome::NotConverged(_) => false,
    }
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
        // Refinement from bf16 of a matrix with condition number 1e12 diverges (bf16's unit
        // roundoff is 2⁻⁸; even f32-accurate factors give a contraction bound of 6e4 an
        // iteration; with 1e7 the bound, 0.6, was too loose: cuSOLVER's factors converged in four
        // iterations for some seeds, e.g. 1795900255773491954 on an H200), so four iterations
        // cannot reach f64: with the fallback it falls back (X valid, A factored),
        // without it it reports the failure and keeps A. cuSOLVER may name the divergence rather
        // than the limit; any reason but "not worth it" (which never tried) stands. (Four: a limit
        // whose negation is no other failure's code.)
        let ic = ill_conditioned(rng, n, T::COMPLEX, 1e12);
        let i0 = up(&ic);
        let ic: Vec<Cf> = i0.iter().map(|&v| v.c()).collect();
        let ib0 = up(&cmatmul(&ic, &xc, n, n, nrhs));
        let ibc: Vec<Cf> = ib0.iter().map(|&v| v.c()).collect();
        for fallback in [true, false] {
            let s =
                IrsSettings { low: LowPrecision::Bf16, max_iterations: Some(4), fallback, ..IrsSettings::default() };
            let what = format!("{ty} max 4, fallback {fallback}");
            match gesv::<T>(d, st, h, &i0, &ib0, n, nrhs, &s) {
                Err(e) => failures.push(format!("{what}: {e}")),
                Ok((r, x, a_after)) => {
                    let back = backward(&ic, &x, &ibc, n, nrhs);
                    println!("{what}: {:?}, max {}, backward {back:.2e}", r.outcome, r.max_iterations);
                    let tried = |why: Fallback| why != Fallback::NotWorthIt;
                    let ok = match r.outcome {
                        IrsOutcome::FellBack(why) if fallback => tried(why) && back <= bound,
                        IrsOutcome::NotConverged(why) if !fallback => tried(why) && a_after == i0,
                        _ => false,
                    };
                    if !ok || r.max_iterations != 4 {
                        failures
                            .push(format!("{what}: {:?}, max {}, backward {back:.2e}", r.outcome, r.max_iterations));
                    }
                }
            }
        }
    }
    // Least squares, m x n, from every lower precision, of a consistent system (B = A X): the
    // refinement's test is on the residual `B − A X` (as gesv's), which then becomes small, so it
    // converges to X, and the normal equations hold.
    let gc: Vec<Cf> = (0..m * n).map(|_| random_c(rng, T::COMPLEX)).collect();
    let g0 = up(&gc);
    let gc: Vec<Cf> = g0.iter().map(|&v| v.c()).collect();
    let k = 2;
    let gxc: Vec<Cf> = (0..n * k).map(|_| random_c(rng, T::COMPLEX)).collect();
    let lb0 = up(&cmatmul(&gc, &gxc, m, n, k));
    let mut gels = |lb0: &[T], s: &IrsSettings| -> cusched::Result<(IrsReport, Vec<Cf>)> {
        let (a, b, x): (GpuRef<T>, GpuRef<T>, GpuRef<T>) =
            (d.upload(st, &g0)?, d.upload(st, lb0)?, d.upload(st, &vec![T::from_c((f64::NAN, f64::NAN)); n * k])?);
        let g = IrsGels { m, n, nrhs: k, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
        let r = h.solver()?.irs_gels(&g, s)?.wait()?;
        Ok((r, x.download(st)?.into_iter().map(T::c).collect()))
    };
    // ‖Aᴴ(AX − B)‖ relative to ‖A‖ ‖B‖ m ε: the least-squares answer in the main precision.
    let normal = |x: &[Cf], lbc: &[Cf]| {
        let ax = cmatmul(&gc, x, m, n, k);
        let res: Vec<Cf> = ax.iter().zip(lbc).map(|(p, q)| (p.0 - q.0, p.1 - q.1)).collect();
        let ne = cmatmul(&adjoint(&gc, m, n), &res, n, m, k);
        let fro = |v: &[Cf]| v.iter().map(|c| c.0 * c.0 + c.1 * c.1).sum::<f64>().sqrt();
        fro(&ne) / (fro(&gc) * fro(lbc) * m as f64 * T::EPS)
    };
    let lbc: Vec<Cf> = lb0.iter().map(|&v| v.c()).collect();
    // A random m x n with m well above n is well conditioned (κ of a few tens at most); the
    // residual test bounds the error through κ and the norms' dimension factors, hence the room.
    let forward_bound = 1e4 * (n as f64).sqrt() * T::EPS;
    for low in lows {
        let s = IrsSettings { low, residual_history: true, ..IrsSettings::default() };
        let what = format!("{ty} gels {low:?}");
        match gels(&lb0, &s) {
            Err(e) => failures.push(format!("{what}: {e}")),
            Ok((r, x)) => {
                let scaled = normal(&x, &lbc);
                let err = col_inf(&x.iter().zip(&gxc).map(|(p, q)| (p.0 - q.0, p.1 - q.1)).collect::<Vec<_>>(), n, k)
                    / col_inf(&gxc, n, k);
                println!(
                    "{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}, ‖X − X₀‖/‖X₀‖ {err:.2e}, history {:?}",
                    r.outcome, r.residual_history
                );
                if !(scaled < 100.0) || !(err <= forward_bound) || !consistent_gels_outcome_ok::<T>(r.outcome) {
                    failures.push(format!(
                        "{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}, ‖X − X₀‖/‖X₀‖ {err:.2e} (bound {forward_bound:.2e})",
                        r.outcome
                    ));
                }
            }
        }
    }
    // An inconsistent system (random B): the residual stays at the least-squares residual's
    // size, never below the test, so refinement runs to its limit and falls back; X is still the
    // least-squares answer (the normal equations hold).
    let rb0 = up(&(0..m * k).map(|_| random_c(rng, T::COMPLEX)).collect::<Vec<_>>());
    let rbc: Vec<Cf> = rb0.iter().map(|&v| v.c()).collect();
    let s = IrsSettings { low: LowPrecision::Bf16, ..IrsSettings::default() };
    let what = format!("{ty} gels inconsistent");
    match gels(&rb0, &s) {
        Err(e) => failures.push(format!("{what}: {e}")),
        Ok((r, x)) => {
            let scaled = normal(&x, &rbc);
            println!("{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}", r.outcome);
            // Refinement that cannot converge runs to its limit, or, when its residual grows
            // (cuSOLVER's complex f32 refinement from bf16 diverges), stops on an overflow
            // first: either way it falls back to the main precision's answer.
            let fell_back =
                matches!(r.outcome, IrsOutcome::FellBack(Fallback::IterationLimit | Fallback::ComputationOverflow));
            if !(scaled < 100.0) || !fell_back {
                failures.push(format!("{what}: {:?}, ‖Aᴴ(AX − B)‖ scaled {scaled:.2}", r.outcome));
            }
        }
    }
    failures
}
