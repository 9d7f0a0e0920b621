//! cuSOLVER's expert iterative refinement (`irs_gesv`, `irs_gels`) on the simulator: every
//! element type under every setting against direct loops, and bad settings rejected before
//! anything is recorded, naming the argument.

use super::solver_validation::accepts;
use crate::common::fixture::{fx, rejects};
use crate::common::reference::solver_irs::{check_every_setting, consistent_gels_outcome_ok};
use crate::common::Rng;
use cusched::solver::{Fallback, IrsGels, IrsGesv, IrsOutcome, IrsSettings, LowPrecision, RefinementSolver};
use cusched::Complex;

/// Every element type, every lowest precision, classical and GMRES refinement, no refinement,
/// a looser tolerance, an iteration limit with and without the fallback, and least squares,
/// at odd sizes.
#[test]
fn irs_solves_every_type_under_every_setting() {
    let mut fx = fx();
    let mut rng = Rng::new();
    let (d, s) = (fx.device.clone(), fx.s);
    let mut failures = Vec::new();
    failures.extend(check_every_setting::<f32>(&d, s, &mut fx.h, &mut rng, 23, 31));
    failures.extend(check_every_setting::<f64>(&d, s, &mut fx.h, &mut rng, 23, 31));
    failures.extend(check_every_setting::<Complex<f32>>(&d, s, &mut fx.h, &mut rng, 17, 25));
    failures.extend(check_every_setting::<Complex<f64>>(&d, s, &mut fx.h, &mut rng, 17, 25));
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A consistent least-squares system in a single main precision may fall back (with an accurate
/// answer) from half, bf16 or tf32 factors, as cuSOLVER does for `Complex<f32>`; in a double
/// main precision it must converge.
#[test]
fn consistent_gels_accepts_a_fallback_only_in_single_precision() {
    let converged = IrsOutcome::Converged { iterations: 2 };
    let fell_back = IrsOutcome::FellBack(Fallback::IterationLimit);
    let not_converged = IrsOutcome::NotConverged(Fallback::IterationLimit);
    let never_tried = IrsOutcome::FellBack(Fallback::NotWorthIt);
    let single = [consistent_gels_outcome_ok::<f32>, consistent_gels_outcome_ok::<Complex<f32>>];
    let double = [consistent_gels_outcome_ok::<f64>, consistent_gels_outcome_ok::<Complex<f64>>];
    for (i, ok) in single.iter().enumerate() {
        assert!(ok(converged), "single {i}: converged");
        assert!(ok(fell_back), "single {i}: a fallback after the iteration limit");
        assert!(!ok(not_converged), "single {i}: not converged without the fallback");
        assert!(!ok(never_tried), "single {i}: a fallback that never refined");
    }
    for (i, ok) in double.iter().enumerate() {
        assert!(ok(converged), "double {i}: converged");
        assert!(!ok(fell_back), "double {i}: a fallback");
        assert!(!ok(not_converged), "double {i}: not converged");
    }
}

#[test]
fn irs_gesv_rejects_bad_settings_and_input() {
    let mut fx = fx();
    let (a, b, x) = (fx.buf::<f64>(9), fx.buf::<f64>(6), fx.buf::<f64>(6));
    let g = IrsGesv { n: 3, nrhs: 2, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
    let ok = IrsSettings::default();
    let gmres = IrsSettings { refinement: RefinementSolver::Gmres, ..ok };
    rejects(&mut fx, "settings.refinement", |fx| fx.h.solver()?.irs_gesv(&g, &gmres));
    let nan = IrsSettings { tolerance: Some(f64::NAN), ..ok };
    rejects(&mut fx, "settings.tolerance", |fx| fx.h.solver()?.irs_gesv(&g, &nan));
    let neg = IrsSettings { inner_tolerance: Some(-1.0), ..ok };
    rejects(&mut fx, "settings.inner_tolerance", |fx| fx.h.solver()?.irs_gesv(&g, &neg));
    let zero = IrsSettings { max_iterations: Some(0), ..ok };
    rejects(&mut fx, "settings.max_iterations", |fx| fx.h.solver()?.irs_gesv(&g, &zero));
    let huge = IrsSettings { max_inner_iterations: Some(u32::MAX), ..ok };
    rejects(&mut fx, "settings.max_inner_iterations", |fx| fx.h.solver()?.irs_gesv(&g, &huge));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.irs_gesv(&IrsGesv { x: &b, ..g }, &ok));
    rejects(&mut fx, "b", |fx| fx.h.solver()?.irs_gesv(&IrsGesv { nrhs: 3, ..g }, &ok));
    rejects(&mut fx, "lda", |fx| fx.h.solver()?.irs_gesv(&IrsGesv { lda: Some(2), ..g }, &ok));
    rejects(&mut fx, "n", |fx| fx.h.solver()?.irs_gesv(&IrsGesv { n: 0, ..g }, &ok));
    let f = fx.foreign::<f64>(9);
    rejects(&mut fx, "!foreign", |fx| fx.h.solver()?.irs_gesv(&IrsGesv { a: &f, ..g }, &ok));
    // GMRES with one right-hand side is fine.
    let one = IrsGesv { nrhs: 1, ..g };
    accepts(&mut fx, |fx| fx.h.solver()?.irs_gesv(&one, &gmres));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.solver()?.irs_gesv(&g, &ok));
}

#[test]
fn irs_gels_rejects_bad_settings_and_input() {
    let mut fx = fx();
    let (a, b, x) = (fx.buf::<Complex<f32>>(15), fx.buf::<Complex<f32>>(10), fx.buf::<Complex<f32>>(6));
    let g = IrsGels { m: 5, n: 3, nrhs: 2, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
    let ok = IrsSettings { low: LowPrecision::Bf16, ..IrsSettings::default() };
    let gmres = IrsSettings { refinement: RefinementSolver::GmresGmres, ..ok };
    rejects(&mut fx, "settings.refinement", |fx| fx.h.solver()?.irs_gels(&g, &gmres));
    let inf = IrsSettings { tolerance: Some(f64::INFINITY), ..ok };
    rejects(&mut fx, "settings.tolerance", |fx| fx.h.solver()?.irs_gels(&g, &inf));
    rejects(&mut fx, "m", |fx| fx.h.solver()?.irs_gels(&IrsGels { m: 2, ..g }, &ok));
    let short = fx.buf::<Complex<f32>>(5);
    rejects(&mut fx, "x", |fx| fx.h.solver()?.irs_gels(&IrsGels { x: &short, ..g }, &ok));
    rejects(&mut fx, "x", |fx| fx.h.solver()?.irs_gels(&IrsGels { x: &a, ..g }, &ok));
    accepts(&mut fx, |fx| fx.h.solver()?.irs_gels(&g, &ok));
}
