//! cuTENSOR on the simulator computes every op on the CPU: contractions (packed, batched with
//! alpha and beta, strided with a column-major output, 4 modes with a permuted output, f16,
//! bf16 and TF32), reductions (each fold, a unary operator, beta), permutations, and the
//! elementwise ops of two and three operands (broadcast, in place, every unary operator),
//! each checked against the CPU einsum of tests/common/reference/tensor.rs; every op on
//! complex f32 and f64 data, conjugated or not, against the direct loops of
//! tests/common/reference/tensor_complex.rs.

use crate::common::reference::tensor::{close, einsum, einsum_fold, extents_of, packed};
use crate::common::reference::tensor_complex as cx;
use crate::common::*;
use cusched::half::{bf16, f16};
use cusched::tensor::{
    BinaryOp, Compute, Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction, TensorRef, UnaryOp,
};
use cusched::{Complex, Device, Handles, StreamId};

fn setup() -> (Device, StreamId, Handles) {
    let d = sim();
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    (d, s, h)
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn back(v: Vec<f32>) -> Vec<f64> {
    v.into_iter().map(f64::from).collect()
}

/// The number of terms each output element of `spec` sums (its folded modes' extents).
fn sum_len(spec: &str, shapes: &[&[usize]]) -> usize {
    let out = spec.split_once("->").unwrap().1;
    extents_of(spec, shapes).iter().filter(|(c, _)| !out.contains(**c)).map(|(_, e)| e).product()
}

#[track_caller]
fn contraction_f32(spec: &str, shapes: [&[usize]; 3]) {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let n = |sh: &[usize]| sh.iter().product::<usize>();
    let (a, b) = (random(&mut rng, n(shapes[0])), random(&mut rng, n(shapes[1])));
    let (da, db) = (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&b)).unwrap());
    // NaN in the output: beta is 0, so the old value must not be read.
    let dd = d.upload(s, &vec![f32::NAN; n(shapes[2])]).unwrap();
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let want = einsum(spec, &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))], &extents_of(spec, &shapes));
    close(&back(dd.download(s).unwrap()), &want, 1e-6 * sum_len(spec, &shapes) as f64, spec);
}

#[test]
fn contractions_match_the_einsum() {
    contraction_f32("ik,kj->ij", [&[33, 47], &[47, 29], &[33, 29]]);
    // c and d are summed; the output takes the free modes in another order than the inputs.
    contraction_f32("abcd,cedf->fbea", [&[6, 5, 7, 8], &[7, 4, 8, 3], &[3, 5, 4, 6]]);
    // An outer product: nothing summed.
    contraction_f32("i,j->ij", [&[5], &[7], &[5, 7]]);
}

#[test]
fn a_batched_f64_contraction_takes_alpha_and_beta() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let spec = "bik,bkj->bij";
    let shapes: [&[usize]; 3] = [&[5, 12, 9], &[5, 9, 7], &[5, 12, 7]];
    let (a, b, c) = (random(&mut rng, 540), random(&mut rng, 315), random(&mut rng, 420));
    let (da, db, dd) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.upload(s, &c).unwrap());
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    )
    .alpha(0.5)
    .beta(-2.0);
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let ab = einsum(spec, &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))], &extents_of(spec, &shapes));
    let want: Vec<f64> = ab.iter().zip(&c).map(|(x, y)| 0.5 * x - 2.0 * y).collect();
    close(&dd.download(s).unwrap(), &want, 1e-12, spec);
}

#[test]
fn strided_inputs_and_a_column_major_output() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let (m, k, n) = (13usize, 11usize, 9usize);
    // a is column-major m x k inside a padded buffer (leading dimension 16); d column-major.
    let (a, b) = (random(&mut rng, 16 * k), random(&mut rng, k * n));
    let (da, db) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap());
    let dd = d.upload(s, &vec![f64::NAN; m * n]).unwrap();
    let op = Contraction::new(
        "ik,kj->ij",
        TensorRef::strided(&da, &[m, k], &[1, 16]),
        TensorRef::new(&db, &[k, n]),
        TensorRef::strided(&dd, &[m, n], &[1, m]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let ext = extents_of("ik,kj->ij", &[&[m, k], &[k, n], &[m, n]]);
    // The einsum's output is row-major: its transpose is the column-major result.
    let want = einsum("ik,kj->ji", &[(&a, &[1, 16]), (&b, &packed(&[k, n]))], &ext);
    close(&dd.download(s).unwrap(), &want, 1e-12, "strided");
}

#[test]
fn half_inputs_round_once_and_tf32_rounds_the_inputs() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let spec = "mk,nk->mn";
    let shapes: [&[usize]; 3] = [&[16, 96], &[12, 96], &[16, 12]];
    let ext = extents_of(spec, &shapes);
    let (a, b) = (random(&mut rng, 16 * 96), random(&mut rng, 12 * 96));
    let strides = [packed(shapes[0]), packed(shapes[1])];

    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f64(x)).collect();
    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f64(x)).collect();
    let (da, db, dd) =
        (d.upload(s, &ah).unwrap(), d.upload(s, &bh).unwrap(), d.alloc_zeros::<f16>(s, 16 * 12).unwrap());
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let (a64, b64): (Vec<f64>, Vec<f64>) =
        (ah.iter().map(|x| x.to_f64()).collect(), bh.iter().map(|x| x.to_f64()).collect());
    let want = einsum(spec, &[(&a64, &strides[0]), (&b64, &strides[1])], &ext);
    let got: Vec<f64> = dd.download(s).unwrap().iter().map(|x| x.to_f64()).collect();
    // One rounding of each stored element: within an f16 ulp of the value.
    close(&got, &want, 1e-3, "f16");

    let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f64(x)).collect();
    let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f64(x)).collect();
    let (da, db, dd) =
        (d.upload(s, &ab).unwrap(), d.upload(s, &bb).unwrap(), d.alloc_zeros::<bf16>(s, 16 * 12).unwrap());
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    )
    .compute(Compute::Bf16);
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let (a64, b64): (Vec<f64>, Vec<f64>) =
        (ab.iter().map(|x| x.to_f64()).collect(), bb.iter().map(|x| x.to_f64()).collect());
    let want = einsum(spec, &[(&a64, &strides[0]), (&b64, &strides[1])], &ext);
    let got: Vec<f64> = dd.download(s).unwrap().iter().map(|x| x.to_f64()).collect();
    close(&got, &want, 1e-2, "bf16");

    // TF32 keeps 10 mantissa bits of each input: close to the f32 product, and not equal to
    // it where an input has more.
    let (da, db) = (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&b)).unwrap());
    let (tf, full) = (d.alloc_zeros::<f32>(s, 16 * 12).unwrap(), d.alloc_zeros::<f32>(s, 16 * 12).unwrap());
    for (out, compute) in [(&tf, Compute::Tf32), (&full, Compute::F32)] {
        let op = Contraction::new(
            spec,
            TensorRef::new(&da, shapes[0]),
            TensorRef::new(&db, shapes[1]),
            TensorRef::new(out, shapes[2]),
        )
        .compute(compute);
        h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    }
    let want = einsum(spec, &[(&a, &strides[0]), (&b, &strides[1])], &ext);
    let (tf, full) = (back(tf.download(s).unwrap()), back(full.download(s).unwrap()));
    close(&tf, &want, 5e-3, "tf32");
    close(&full, &want, 1e-5, "f32");
    assert_ne!(tf, full, "TF32 rounds its inputs");
}

#[test]
fn reductions_fold_with_each_operator() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let (i, j, k) = (7usize, 33usize, 5usize);
    let shapes: [&[usize]; 2] = [&[i, j, k], &[k, i]];
    let a = random(&mut rng, i * j * k);
    let old = random(&mut rng, k * i);
    let (da, dd) = (d.upload(s, &a).unwrap(), d.upload(s, &old).unwrap());
    let ext = extents_of("ijk->ki", &shapes);
    let inputs = [(&a[..], &packed(shapes[0])[..])];
    // Sum, scaled, plus beta times the old value.
    let op =
        Reduction::new("ijk->ki", TensorRef::new(&da, shapes[0]), TensorRef::new(&dd, shapes[1])).alpha(2.0).beta(0.5);
    h.tensor().unwrap().reduce(&op).unwrap().wait().unwrap();
    let sum = einsum("ijk->ki", &inputs, &ext);
    let want: Vec<f64> = sum.iter().zip(&old).map(|(x, y)| 2.0 * x + 0.5 * y).collect();
    close(&dd.download(s).unwrap(), &want, 1e-12, "sum");
    // Max and min are exact; min of |a|; the product of values near 1.
    for (fold, op_a, init, f) in [
        (BinaryOp::Max, UnaryOp::Identity, f64::NEG_INFINITY, f64::max as fn(f64, f64) -> f64),
        (BinaryOp::Min, UnaryOp::Abs, f64::INFINITY, f64::min),
        (BinaryOp::Mul, UnaryOp::Exp, 1.0, |x: f64, y: f64| x * y),
    ] {
        let op = Reduction::new("ijk->ki", TensorRef::new(&da, shapes[0]), TensorRef::new(&dd, shapes[1]))
            .fold(fold)
            .op_a(op_a);
        h.tensor().unwrap().reduce(&op).unwrap().wait().unwrap();
        let mapped: Vec<f64> = a
            .iter()
            .map(|&x| match op_a {
                UnaryOp::Abs => x.abs(),
                UnaryOp::Exp => x.exp(),
                _ => x,
            })
            .collect();
        let want = einsum_fold("ijk->ki", &[(&mapped, &packed(shapes[0]))], &ext, init, f);
        close(&dd.download(s).unwrap(), &want, 1e-12, &format!("{fold:?} of {op_a:?}"));
    }
}

#[test]
fn permutations_are_exact() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let e = [4usize, 7, 3, 6];
    let eb = [e[3], e[1], e[0], e[2]];
    let a = random(&mut rng, e.iter().product());
    let da = d.upload(s, &f32s(&a)).unwrap();
    let db = d.upload(s, &vec![f32::NAN; a.len()]).unwrap();
    let op = Permutation::new("ijkl->ljik", TensorRef::new(&da, &e), TensorRef::new(&db, &eb)).alpha(2.0);
    h.tensor().unwrap().permute(&op).unwrap().wait().unwrap();
    let want = einsum("ijkl->ljik", &[(&a, &packed(&e))], &extents_of("ijkl->ljik", &[&e, &eb]));
    let want: Vec<f64> = want.iter().map(|x| 2.0 * x).collect();
    assert_eq!(back(db.download(s).unwrap()), want);
}

/// A unary operator's meaning on the CPU.
type Unary = fn(f64) -> f64;

#[test]
fn every_unary_operator_applies_as_documented() {
    let (d, s, mut h) = setup();
    // Positive inputs, so that √, ln and 1/x are defined.
    let a: Vec<f64> = (0..24).map(|i| 0.25 + i as f64 / 8.0).collect();
    let da = d.upload(s, &a).unwrap();
    let db = d.alloc_zeros::<f64>(s, 24).unwrap();
    let ops: [(UnaryOp, Unary); 14] = [
        (UnaryOp::Identity, |x| x),
        (UnaryOp::Sqrt, f64::sqrt),
        (UnaryOp::Relu, |x| x.max(0.0)),
        (UnaryOp::Rcp, |x| 1.0 / x),
        (UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (UnaryOp::Tanh, f64::tanh),
        (UnaryOp::Exp, f64::exp),
        (UnaryOp::Log, f64::ln),
        (UnaryOp::Abs, f64::abs),
        (UnaryOp::Neg, |x| -x),
        (UnaryOp::Sin, f64::sin),
        (UnaryOp::Cos, f64::cos),
        (UnaryOp::Ceil, f64::ceil),
        (UnaryOp::Floor, f64::floor),
    ];
    for (op, f) in ops {
        let p = Permutation::new("ij->ji", TensorRef::new(&da, &[4, 6]), TensorRef::new(&db, &[6, 4])).op_a(op);
        h.tensor().unwrap().permute(&p).unwrap().wait().unwrap();
        let want: Vec<f64> = (0..24).map(|x| f(a[(x % 4) * 6 + x / 4])).collect();
        close(&db.download(s).unwrap(), &want, 1e-15, &format!("{op:?}"));
    }
}

#[test]
fn elementwise_binary_and_trinary_match_the_cpu() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let (m, n) = (19usize, 23usize);
    let (a, c, row) = (random(&mut rng, m * n), random(&mut rng, m * n), random(&mut rng, n));
    let (da, dc, drow) =
        (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&c)).unwrap(), d.upload(s, &f32s(&row)).unwrap());
    let dd = d.upload(s, &vec![f32::NAN; m * n]).unwrap();
    // d = max(2·|a|, -0.5·c).
    let op = ElementwiseBinary::new(
        "ij,ij->ij",
        TensorRef::new(&da, &[m, n]),
        TensorRef::new(&dc, &[m, n]),
        TensorRef::new(&dd, &[m, n]),
    )
    .scales(2.0, -0.5)
    .ops(UnaryOp::Abs, UnaryOp::Identity)
    .combine(BinaryOp::Max);
    h.tensor().unwrap().elementwise_binary(&op).unwrap().wait().unwrap();
    let want: Vec<f64> = a.iter().zip(&c).map(|(x, y)| (2.0 * x.abs()).max(-0.5 * y)).collect();
    close(&back(dd.download(s).unwrap()), &want, 1e-6, "binary max");
    // In place with a broadcast row: c = row · c.
    let op = ElementwiseBinary::new(
        "j,ij->ij",
        TensorRef::new(&drow, &[n]),
        TensorRef::new(&dc, &[m, n]),
        TensorRef::new(&dc, &[m, n]),
    )
    .combine(BinaryOp::Mul);
    h.tensor().unwrap().elementwise_binary(&op).unwrap().wait().unwrap();
    let want: Vec<f64> = (0..m * n).map(|x| row[x % n] * c[x]).collect();
    close(&back(dc.download(s).unwrap()), &want, 1e-6, "binary broadcast in place");

    // d = min(a + 3·b, c), b read transposed.
    let b = random(&mut rng, n * m);
    let (db, dc2) = (d.upload(s, &f32s(&b)).unwrap(), d.upload(s, &f32s(&c)).unwrap());
    let op = ElementwiseTrinary::new(
        "ij,ji,ij->ij",
        TensorRef::new(&da, &[m, n]),
        TensorRef::new(&db, &[n, m]),
        TensorRef::new(&dc2, &[m, n]),
        TensorRef::new(&dd, &[m, n]),
    )
    .scales(1.0, 3.0, 1.0)
    .combine(BinaryOp::Add, BinaryOp::Min);
    h.tensor().unwrap().elementwise_trinary(&op).unwrap().wait().unwrap();
    let want: Vec<f64> = (0..m * n).map(|x| (a[x] + 3.0 * b[(x % n) * m + x / n]).min(c[x])).collect();
    close(&back(dd.download(s).unwrap()), &want, 1e-6, "trinary");
}

/// The op's uses are the checker's: a tensor op on another stream that reads a buffer a host
/// closure is still writing is ordered after it (no hazard, the right value), like any kernel.
#[test]
fn ops_on_a_lane_are_ordered_by_their_declared_uses() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let x = d.upload(s, &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let y = d.alloc_zeros::<f64>(s, 6).unwrap();
    let lane = d.lane("tensor").unwrap();
    let (x2, y2) = (x.clone(), y.clone());
    lane.submit(move |cx| {
        let op = Permutation::new("ij->ji", TensorRef::new(&x2, &[2, 3]), TensorRef::new(&y2, &[3, 2]));
        cx.tensor()?.permute(&op)
    })
    .wait()
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(y.download(s).unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// Runs one of the complex cases (with `conj`) on a fresh simulator.
fn on_sim(f: fn(&Device, StreamId, &mut Handles, &mut Rng, bool), conj: bool) {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    f(&d, s, &mut h, &mut rng, conj);
}

#[test]
fn complex_contractions_conjugated_or_not_match_direct_loops() {
    for conj in [[false, false], [true, false], [false, true], [true, true]] {
        let (d, s, mut h) = setup();
        let mut rng = Rng::new();
        cx::contractions::<Complex<f32>>(&d, s, &mut h, &mut rng, conj);
        cx::contractions::<Complex<f64>>(&d, s, &mut h, &mut rng, conj);
    }
}

#[test]
fn complex_reductions_sum_and_multiply_conjugated_or_not() {
    for conj in [false, true] {
        on_sim(cx::reductions::<Complex<f32>>, conj);
        on_sim(cx::reductions::<Complex<f64>>, conj);
    }
}

#[test]
fn complex_permutations_conjugated_or_not_match_direct_loops() {
    for conj in [false, true] {
        on_sim(cx::permutations::<Complex<f32>>, conj);
        on_sim(cx::permutations::<Complex<f64>>, conj);
    }
}

#[test]
fn complex_elementwise_ops_conjugated_or_not_match_direct_loops() {
    for conj in [false, true] {
        on_sim(cx::elementwise::<Complex<f32>>, conj);
        on_sim(cx::elementwise::<Complex<f64>>, conj);
    }
}

/// TF32 on complex f32 contractions rounds each part of the inputs.
#[test]
fn complex_tf32_contractions_round_the_inputs() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let (a, b) = (cx::zrandom(&mut rng, 7 * 33), cx::zrandom(&mut rng, 33 * 5));
    let up = |v: &[cx::Z]| {
        d.upload(s, &v.iter().map(|&z| Complex::new(z.0 as f32, z.1 as f32)).collect::<Vec<_>>()).unwrap()
    };
    let (da, db) = (up(&a), up(&b));
    let (tf, full) = (d.alloc_zeros::<Complex<f32>>(s, 35).unwrap(), d.alloc_zeros::<Complex<f32>>(s, 35).unwrap());
    for (out, compute) in [(&tf, Compute::Tf32), (&full, Compute::F32)] {
        let op = Contraction::new(
            "ik,kj->ij",
            TensorRef::new(&da, &[7, 33]),
            TensorRef::new(&db, &[33, 5]),
            TensorRef::new(out, &[7, 5]),
        )
        .compute(compute);
        h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    }
    let ext = extents_of("ik,kj->ij", &[&[7, 33], &[33, 5]]);
    let want = cx::zeinsum(
        "ik,kj->ij",
        &[(&a, &packed(&[7, 33])), (&b, &packed(&[33, 5]))],
        &[false, false],
        &ext,
        (0.0, 0.0),
        cx::zadd,
    );
    let parts = |v: Vec<Complex<f32>>| v.into_iter().map(|z| (f64::from(z.re), f64::from(z.im))).collect::<Vec<_>>();
    let (tf, full) = (parts(tf.download(s).unwrap()), parts(full.download(s).unwrap()));
    cx::zclose(&tf, &want, 1e-2, "tf32");
    cx::zclose(&full, &want, 1e-5, "f32");
    assert_ne!(tf, full, "TF32 rounds its inputs");
}
