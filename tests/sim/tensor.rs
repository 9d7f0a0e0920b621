//! cuTENSOR ops reject bad input before anything is recorded, with a typed error naming the
//! argument, without recording anything; valid input runs on the simulator (the results are
//! checked in `tensor_sim`). Complex data are refused the operators cuTENSOR does not define
//! on them (max, min, every unary operator but the conjugate) with `Error::Unsupported`.

use crate::common;
use crate::common::fixture::{fx, Fx};
use crate::common::*;
use cusched::tensor::{
    BinaryOp, Compute, Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction, TensorElement,
    TensorRef, UnaryOp,
};
use cusched::{Complex, Error, GpuRef, Result};

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

type C32 = Complex<f32>;
type C64 = Complex<f64>;

fn z<'a, T: TensorElement>(buf: &'a GpuRef<T>, extents: &[usize]) -> TensorRef<'a, T> {
    TensorRef::new(buf, extents)
}

/// Asserts `op` is refused with [`Error::Unsupported`] naming argument `arg`, before anything
/// was recorded.
#[track_caller]
fn unsupported<T: std::fmt::Debug>(fx: &mut Fx, arg: &str, op: impl FnOnce(&mut Fx) -> Result<T>) {
    let before = fx.device.stats();
    let got = op(fx);
    match &got {
        Err(Error::Unsupported { what, .. }) if what.contains(&format!("argument `{arg}`")) => {}
        _ => panic!("expected cuTENSOR to refuse `{arg}` as unsupported, got {got:?}"),
    }
    let after = fx.device.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a refused op recorded something");
}

#[test]
fn complex_contraction_rejects_operators_and_compute_types_cutensor_lacks() {
    let mut fx = fx();
    let (a, b, d) = (fx.buf::<C32>(6), fx.buf::<C32>(12), fx.buf::<C32>(8));
    let (a64, b64, d64) = (fx.buf::<C64>(6), fx.buf::<C64>(12), fx.buf::<C64>(8));
    let (ar, br, dr) = (fx.buf::<f32>(6), fx.buf::<f32>(12), fx.buf::<f32>(8));
    let c32 = || Contraction::new("ik,kj->ij", z(&a, &[2, 3]), z(&b, &[3, 4]), z(&d, &[2, 4]));
    let c64 = || Contraction::new("ik,kj->ij", z(&a64, &[2, 3]), z(&b64, &[3, 4]), z(&d64, &[2, 4]));
    let real = || Contraction::new("ik,kj->ij", z(&ar, &[2, 3]), z(&br, &[3, 4]), z(&dr, &[2, 4]));
    // Complex operands take only the identity and the conjugate.
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.contract(&c32().ops(UnaryOp::Neg, UnaryOp::Identity)));
    unsupported(&mut fx, "op_b", |fx| fx.h.tensor()?.contract(&c64().ops(UnaryOp::Conj, UnaryOp::Exp)));
    // Real operands take no operator at all, the conjugate included.
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.contract(&real().ops(UnaryOp::Conj, UnaryOp::Identity)));
    unsupported(&mut fx, "op_b", |fx| fx.h.tensor()?.contract(&real().ops(UnaryOp::Identity, UnaryOp::Abs)));
    // Complex f64 computes in f64 only; TF32 is for complex f32.
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.contract(&c64().compute(Compute::Tf32)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.contract(&c64().compute(Compute::F32)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.contract(&c32().compute(Compute::F64)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.contract(&c32().compute(Compute::F16)));
    // The checks real data get hold for complex data too.
    rejects(&mut fx, "b", |fx| {
        fx.h.tensor()?.contract(&Contraction::new("ik,kj->ij", z(&a, &[2, 3]), z(&b, &[4, 3]), z(&d, &[2, 3])))
    });
    runs(&mut fx, |fx| fx.h.tensor()?.contract(&c32().ops(UnaryOp::Conj, UnaryOp::Conj).compute(Compute::Tf32)));
    runs(&mut fx, |fx| fx.h.tensor()?.contract(&c64().ops(UnaryOp::Identity, UnaryOp::Conj)));
}

#[test]
fn complex_reduction_rejects_max_min_and_operators_cutensor_lacks() {
    let mut fx = fx();
    let (a, d) = (fx.buf::<C32>(12), fx.buf::<C32>(3));
    let (a64, d64) = (fx.buf::<C64>(12), fx.buf::<C64>(3));
    let r32 = || Reduction::new("ij->i", z(&a, &[3, 4]), z(&d, &[3]));
    let r64 = || Reduction::new("ij->i", z(&a64, &[3, 4]), z(&d64, &[3]));
    // Complex numbers have no order.
    unsupported(&mut fx, "fold", |fx| fx.h.tensor()?.reduce(&r32().fold(BinaryOp::Max)));
    unsupported(&mut fx, "fold", |fx| fx.h.tensor()?.reduce(&r64().fold(BinaryOp::Min)));
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.reduce(&r64().op_a(UnaryOp::Abs)));
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.reduce(&r32().op_a(UnaryOp::Sqrt)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.reduce(&r32().compute(Compute::Tf32)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.reduce(&r64().compute(Compute::F32)));
    // A real reduction refuses the conjugate.
    let (ar, dr) = (fx.buf::<f64>(12), fx.buf::<f64>(3));
    unsupported(&mut fx, "op_a", |fx| {
        fx.h.tensor()?.reduce(&Reduction::new("ij->i", z(&ar, &[3, 4]), z(&dr, &[3])).op_a(UnaryOp::Conj))
    });
    runs(&mut fx, |fx| fx.h.tensor()?.reduce(&r32().fold(BinaryOp::Mul).op_a(UnaryOp::Conj)));
    runs(&mut fx, |fx| fx.h.tensor()?.reduce(&r64().op_a(UnaryOp::Conj)));
}

#[test]
fn complex_permutation_rejects_operators_and_compute_types_cutensor_lacks() {
    let mut fx = fx();
    let (a, b) = (fx.buf::<C32>(6), fx.buf::<C32>(6));
    let (a64, b64) = (fx.buf::<C64>(6), fx.buf::<C64>(6));
    let p32 = || Permutation::new("ij->ji", z(&a, &[2, 3]), z(&b, &[3, 2]));
    let p64 = || Permutation::new("ij->ji", z(&a64, &[2, 3]), z(&b64, &[3, 2]));
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.permute(&p32().op_a(UnaryOp::Relu)));
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.permute(&p64().op_a(UnaryOp::Neg)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.permute(&p64().compute(Compute::Tf32)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.permute(&p32().compute(Compute::Bf16)));
    let (ar, br) = (fx.buf::<f32>(6), fx.buf::<f32>(6));
    unsupported(&mut fx, "op_a", |fx| {
        fx.h.tensor()?.permute(&Permutation::new("ij->ji", z(&ar, &[2, 3]), z(&br, &[3, 2])).op_a(UnaryOp::Conj))
    });
    runs(&mut fx, |fx| fx.h.tensor()?.permute(&p32().op_a(UnaryOp::Conj)));
    runs(&mut fx, |fx| fx.h.tensor()?.permute(&p64()));
}

#[test]
fn complex_elementwise_binary_rejects_max_min_and_operators_cutensor_lacks() {
    let mut fx = fx();
    let (a, c, d) = (fx.buf::<C64>(12), fx.buf::<C64>(12), fx.buf::<C64>(12));
    let e = || ElementwiseBinary::new("ij,ij->ij", z(&a, &[3, 4]), z(&c, &[3, 4]), z(&d, &[3, 4]));
    unsupported(&mut fx, "op_ac", |fx| fx.h.tensor()?.elementwise_binary(&e().combine(BinaryOp::Max)));
    unsupported(&mut fx, "op_ac", |fx| fx.h.tensor()?.elementwise_binary(&e().combine(BinaryOp::Min)));
    unsupported(&mut fx, "op_a", |fx| fx.h.tensor()?.elementwise_binary(&e().ops(UnaryOp::Exp, UnaryOp::Identity)));
    unsupported(&mut fx, "op_c", |fx| fx.h.tensor()?.elementwise_binary(&e().ops(UnaryOp::Conj, UnaryOp::Sigmoid)));
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.elementwise_binary(&e().compute(Compute::F32)));
    let (ar, cr, dr) = (fx.buf::<f32>(12), fx.buf::<f32>(12), fx.buf::<f32>(12));
    unsupported(&mut fx, "op_c", |fx| {
        let e = ElementwiseBinary::new("ij,ij->ij", z(&ar, &[3, 4]), z(&cr, &[3, 4]), z(&dr, &[3, 4]));
        fx.h.tensor()?.elementwise_binary(&e.ops(UnaryOp::Identity, UnaryOp::Conj))
    });
    runs(&mut fx, |fx| {
        fx.h.tensor()?.elementwise_binary(&e().ops(UnaryOp::Conj, UnaryOp::Conj).combine(BinaryOp::Mul))
    });
}

#[test]
fn complex_elementwise_trinary_rejects_max_min_and_operators_cutensor_lacks() {
    let mut fx = fx();
    let (a, b, c, d) = (fx.buf::<C32>(12), fx.buf::<C32>(12), fx.buf::<C32>(12), fx.buf::<C32>(12));
    let e = || ElementwiseTrinary::new("ij,ij,ij->ij", z(&a, &[3, 4]), z(&b, &[3, 4]), z(&c, &[3, 4]), z(&d, &[3, 4]));
    unsupported(&mut fx, "op_ab", |fx| fx.h.tensor()?.elementwise_trinary(&e().combine(BinaryOp::Max, BinaryOp::Add)));
    unsupported(&mut fx, "op_abc", |fx| fx.h.tensor()?.elementwise_trinary(&e().combine(BinaryOp::Mul, BinaryOp::Min)));
    unsupported(&mut fx, "op_b", |fx| {
        fx.h.tensor()?.elementwise_trinary(&e().ops(UnaryOp::Conj, UnaryOp::Tanh, UnaryOp::Identity))
    });
    unsupported(&mut fx, "op_c", |fx| {
        fx.h.tensor()?.elementwise_trinary(&e().ops(UnaryOp::Identity, UnaryOp::Conj, UnaryOp::Floor))
    });
    rejects(&mut fx, "compute", |fx| fx.h.tensor()?.elementwise_trinary(&e().compute(Compute::F64)));
    runs(&mut fx, |fx| fx.h.tensor()?.elementwise_trinary(&e().ops(UnaryOp::Conj, UnaryOp::Identity, UnaryOp::Conj)));
}
