//! cuTENSOR ops reject bad input before anything is recorded, with a typed error naming the
//! argument, without recording anything; valid input runs on the simulator (the results are
//! checked in `tensor_sim`).

use crate::common;
use crate::common::fixture::{fx, Fx};
use crate::common::*;
use cusched::tensor::{Compute, Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction, TensorRef};
use cusched::GpuRef;

use common::fixture::{rejects, runs};

fn t<'a>(buf: &'a GpuRef<f32>, extents: &[usize]) -> TensorRef<'a, f32> {
    TensorRef::new(buf, extents)
}

#[test]
fn contraction_rejects_bad_modes_extents_strides_and_buffers() {
    let mut fx = fx();
    let (a, b, d) = (fx.buf(6), fx.buf(12), fx.buf(8));
    // a: 2x3 (ik), b: 3x4 (kj), d: 2x4 (ij).
    let ok = |fx: &mut Fx, spec: &str| {
        fx.h.tensor()?.contract(&Contraction::new(spec, t(&a, &[2, 3]), t(&b, &[3, 4]), t(&d, &[2, 4])))
    };
    rejects(&mut fx, "spec", |fx| ok(fx, "ik,kj"));
    rejects(&mut fx, "spec", |fx| ok(fx, "ik,kj,jl->ij"));
    // A mode in one operand only, and a repeated mode.
    rejects(&mut fx, "spec", |fx| ok(fx, "ix,kj->ij"));
    rejects(&mut fx, "spec", |fx| ok(fx, "ii,kj->ij"));
    // Mode labels that do not match between operands: `k` of a meets `j` of b's extent 3.
    rejects(&mut fx, "b", |fx| ok(fx, "ik,jk->ij"));
    // Extents that disagree: k is 3 in a, 4 in b.
    rejects(&mut fx, "b", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a, &[2, 3]), t(&b, &[4, 3]), t(&d, &[2, 3])))
    });
    // More extents than modes.
    rejects(&mut fx, "a", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a, &[2, 3, 1]), t(&b, &[3, 4]), t(&d, &[2, 4])))
    });
    // A buffer too small for its extents, or for its strides.
    rejects(&mut fx, "d", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a, &[2, 3]), t(&b, &[3, 4]), t(&a, &[2, 4])))
    });
    rejects(&mut fx, "b", |fx| {
        let b = TensorRef::strided(&b, &[3, 4], &[5, 1]);
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a, &[2, 3]), b, t(&d, &[2, 4])))
    });
    // Output strides that write two elements to one place.
    rejects(&mut fx, "d", |fx| {
        let d = TensorRef::strided(&d, &[2, 4], &[1, 1]);
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a, &[2, 3]), t(&b, &[3, 4]), d))
    });
    // The output may not be an input.
    let big = fx.buf(12);
    rejects(&mut fx, "d", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&big, &[2, 3]), t(&b, &[3, 4]), t(&big, &[2, 4])))
    });
    // f32 data computes in f32 or TF32 only.
    rejects(&mut fx, "compute", |fx| {
        let op = Contraction::new("ik,kj->ij", t(&a, &[2, 3]), t(&b, &[3, 4]), t(&d, &[2, 4])).compute(Compute::F64);
        fx.h.tensor()?.contract(&op)
    });
    let f = fx.foreign(6);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&f, &[2, 3]), t(&b, &[3, 4]), t(&d, &[2, 4])))
    });
    runs(&mut fx, |fx| ok(fx, "ik,kj->ij"));
    let tf32 = Contraction::new("ik,kj->ij", t(&a, &[2, 3]), t(&b, &[3, 4]), t(&d, &[2, 4])).compute(Compute::Tf32);
    runs(&mut fx, |fx| fx.h.tensor()?.contract(&tf32));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| ok(fx, "ik,kj->ij"));
}

#[test]
fn reduction_rejects_bad_input() {
    let mut fx = fx();
    let (a, d) = (fx.buf(24), fx.buf(8));
    let red = |fx: &mut Fx, spec: &str, ae: &[usize], de: &[usize]| {
        fx.h.tensor()?.reduce(&Reduction::new(spec, t(&a, ae), t(&d, de)))
    };
    // d has a mode a lacks.
    rejects(&mut fx, "spec", |fx| red(fx, "ijk->ix", &[2, 3, 4], &[2, 4]));
    rejects(&mut fx, "spec", |fx| red(fx, "ijk,ij->i", &[2, 3, 4], &[2]));
    // k is 4 in a, 3 in d.
    rejects(&mut fx, "d", |fx| red(fx, "ijk->ik", &[2, 3, 4], &[2, 3]));
    // a does not hold 2x3x5.
    rejects(&mut fx, "a", |fx| red(fx, "ijk->ik", &[2, 3, 5], &[2, 5]));
    rejects(&mut fx, "d", |fx| {
        fx.h.tensor()?.reduce(&Reduction::new("ijk->ik", t(&a, &[2, 3, 4]), TensorRef::strided(&d, &[2, 4], &[0, 1])))
    });
    rejects(&mut fx, "d", |fx| fx.h.tensor()?.reduce(&Reduction::new("ijk->ik", t(&a, &[2, 3, 4]), t(&a, &[2, 4]))));
    let f = fx.foreign(8);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.tensor()?.reduce(&Reduction::new("ijk->ik", t(&a, &[2, 3, 4]), t(&f, &[2, 4])))
    });
    runs(&mut fx, |fx| red(fx, "ijk->ik", &[2, 3, 4], &[2, 4]));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| red(fx, "ijk->ik", &[2, 3, 4], &[2, 4]));
}

#[test]
fn permutation_rejects_bad_input() {
    let mut fx = fx();
    let (a, b) = (fx.buf(24), fx.buf(24));
    let perm = |fx: &mut Fx, spec: &str, be: &[usize]| {
        fx.h.tensor()?.permute(&Permutation::new(spec, t(&a, &[2, 3, 4]), t(&b, be)))
    };
    // A mode of a missing from b, and one of b missing from a.
    rejects(&mut fx, "spec", |fx| perm(fx, "ijk->ki", &[4, 2]));
    rejects(&mut fx, "spec", |fx| perm(fx, "ijk->kixj", &[4, 2, 1, 3]));
    // Extents that disagree after the permutation.
    rejects(&mut fx, "b", |fx| perm(fx, "ijk->kij", &[2, 3, 4]));
    rejects(&mut fx, "b", |fx| {
        fx.h.tensor()?.permute(&Permutation::new(
            "ijk->kij",
            t(&a, &[2, 3, 4]),
            TensorRef::strided(&b, &[4, 2, 3], &[1, 1, 1]),
        ))
    });
    let small = fx.buf(23);
    rejects(&mut fx, "b", |fx| {
        fx.h.tensor()?.permute(&Permutation::new("ijk->kij", t(&a, &[2, 3, 4]), t(&small, &[4, 2, 3])))
    });
    rejects(&mut fx, "b", |fx| {
        fx.h.tensor()?.permute(&Permutation::new("ijk->kij", t(&a, &[2, 3, 4]), t(&a, &[4, 2, 3])))
    });
    let f = fx.foreign(24);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.tensor()?.permute(&Permutation::new("ijk->kij", t(&f, &[2, 3, 4]), t(&b, &[4, 2, 3])))
    });
    runs(&mut fx, |fx| perm(fx, "ijk->kij", &[4, 2, 3]));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| perm(fx, "ijk->kij", &[4, 2, 3]));
}

#[test]
fn elementwise_binary_rejects_bad_input() {
    let mut fx = fx();
    let (a, c, d) = (fx.buf(12), fx.buf(12), fx.buf(12));
    let bin = |fx: &mut Fx, spec: &str, ce: &[usize]| {
        fx.h.tensor()?.elementwise_binary(&ElementwiseBinary::new(spec, t(&a, &[3, 4]), t(&c, ce), t(&d, &[3, 4])))
    };
    // a has a mode d lacks; c's modes are not d's.
    rejects(&mut fx, "spec", |fx| bin(fx, "ix,ij->ij", &[3, 4]));
    rejects(&mut fx, "c", |fx| bin(fx, "ij,ji->ij", &[4, 3]));
    // Extents that disagree.
    rejects(&mut fx, "c", |fx| bin(fx, "ij,ij->ij", &[4, 3]));
    rejects(&mut fx, "d", |fx| {
        let d = TensorRef::strided(&d, &[3, 4], &[1, 2]);
        fx.h.tensor()?.elementwise_binary(&ElementwiseBinary::new("ij,ij->ij", t(&a, &[3, 4]), t(&c, &[3, 4]), d))
    });
    rejects(&mut fx, "d", |fx| {
        fx.h.tensor()?.elementwise_binary(&ElementwiseBinary::new(
            "ij,ij->ij",
            t(&a, &[3, 4]),
            t(&c, &[3, 4]),
            t(&a, &[3, 4]),
        ))
    });
    let f = fx.foreign(12);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.tensor()?.elementwise_binary(&ElementwiseBinary::new(
            "ij,ij->ij",
            t(&a, &[3, 4]),
            t(&c, &[3, 4]),
            t(&f, &[3, 4]),
        ))
    });
    runs(&mut fx, |fx| bin(fx, "ij,ij->ij", &[3, 4]));
    // c may be d itself (in place), and a may broadcast along a mode it lacks.
    runs(&mut fx, |fx| {
        fx.h.tensor()?.elementwise_binary(&ElementwiseBinary::new(
            "j,ij->ij",
            t(&a, &[4]),
            t(&d, &[3, 4]),
            t(&d, &[3, 4]),
        ))
    });
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| bin(fx, "ij,ij->ij", &[3, 4]));
}

#[test]
fn elementwise_trinary_rejects_bad_input() {
    let mut fx = fx();
    let (a, b, c, d) = (fx.buf(12), fx.buf(12), fx.buf(12), fx.buf(12));
    let tri = |fx: &mut Fx, spec: &str, be: &[usize]| {
        let op = ElementwiseTrinary::new(spec, t(&a, &[3, 4]), t(&b, be), t(&c, &[3, 4]), t(&d, &[3, 4]));
        fx.h.tensor()?.elementwise_trinary(&op)
    };
    rejects(&mut fx, "spec", |fx| tri(fx, "ij,ij->ij", &[3, 4]));
    rejects(&mut fx, "spec", |fx| tri(fx, "ij,ix,ij->ij", &[3, 4]));
    rejects(&mut fx, "b", |fx| tri(fx, "ij,ji,ij->ij", &[3, 4]));
    rejects(&mut fx, "b", |fx| {
        let big = TensorRef::strided(&b, &[3, 4], &[5, 1]);
        fx.h.tensor()?.elementwise_trinary(&ElementwiseTrinary::new(
            "ij,ij,ij->ij",
            t(&a, &[3, 4]),
            big,
            t(&c, &[3, 4]),
            t(&d, &[3, 4]),
        ))
    });
    rejects(&mut fx, "d", |fx| {
        fx.h.tensor()?.elementwise_trinary(&ElementwiseTrinary::new(
            "ij,ij,ij->ij",
            t(&a, &[3, 4]),
            t(&b, &[3, 4]),
            t(&c, &[3, 4]),
            t(&b, &[3, 4]),
        ))
    });
    let f = fx.foreign(12);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.tensor()?.elementwise_trinary(&ElementwiseTrinary::new(
            "ij,ij,ij->ij",
            t(&a, &[3, 4]),
            t(&f, &[3, 4]),
            t(&c, &[3, 4]),
            t(&d, &[3, 4]),
        ))
    });
    runs(&mut fx, |fx| tri(fx, "ij,ij,ij->ij", &[3, 4]));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| tri(fx, "ij,ij,ij->ij", &[3, 4]));
}

#[test]
fn lane_job_runs_like_inline() {
    let device = sim();
    let s = device.default_stream();
    let (a, b) = (device.alloc_zeros::<f64>(s, 6).unwrap(), device.alloc_zeros::<f64>(s, 6).unwrap());
    let lane = device.lane("tensor").unwrap();
    lane.submit(move |cx| {
        let op = Permutation::new("ij->ji", TensorRef::new(&a, &[2, 3]), TensorRef::new(&b, &[3, 2]));
        cx.tensor()?.permute(&op)?.wait()
    })
    .wait_timeout(std::time::Duration::from_secs(60))
    .unwrap();
}
