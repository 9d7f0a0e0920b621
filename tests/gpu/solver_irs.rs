//! cuSOLVER's expert iterative refinement (`cusolverDnIRSXgesv`, `cusolverDnIRSXgels`) on a
//! real GPU: every element type under every setting, checked by the same references as the
//! simulator (the reports are printed, residual histories included).

use crate::common::reference::solver_irs::check_every_setting;
use crate::common::*;
use cusched::{Complex, Handles};

#[test]
#[ignore = "needs a CUDA GPU"]
fn irs_solves_every_type_under_every_setting() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut failures = Vec::new();
    failures.extend(check_every_setting::<f32>(&d, s, &mut h, &mut rng, 101, 131));
    failures.extend(check_every_setting::<f64>(&d, s, &mut h, &mut rng, 101, 131));
    failures.extend(check_every_setting::<Complex<f32>>(&d, s, &mut h, &mut rng, 67, 93));
    failures.extend(check_every_setting::<Complex<f64>>(&d, s, &mut h, &mut rng, 67, 93));
    // The workspace sizes were cached per shape and setting: a second run queries no more.
    let cached = h.solver().unwrap().cached_sizes();
    failures.extend(check_every_setting::<f64>(&d, s, &mut h, &mut rng, 101, 131));
    assert_eq!(h.solver().unwrap().cached_sizes(), cached, "the same shapes and settings queried again");
    assert!(failures.is_empty(), "{failures:#?}");
}
