//! cuTENSOR on a real GPU against a CPU einsum in f64: matrix and batched products, a 4-mode
//! contraction with a permuted output, strided operands, f16/bf16 inputs and TF32; reductions
//! and permutations compared exactly; elementwise ops; the plan cache and lanes; every op on
//! the GPU and on the simulator from the same inputs, compared; every op on complex f32 and
//! f64 data, conjugated or not, against direct loops (odd extents). Inputs are random per run (the seed is printed; `CUSCHED_SEED` replays it).
//!
//! Needs libcutensor.so.2 reachable as `libcutensor.so` on `LD_LIBRARY_PATH` (see
//! tools/carry-cutensor).

use crate::common::reference::tensor::{close, einsum, extents_of, packed};
use crate::common::reference::tensor_complex as cx;
use crate::common::*;
use cusched::half::{bf16, f16};
use cusched::tensor::{
    BinaryOp, Compute, Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction, TensorRef, UnaryOp,
};
use cusched::Complex;

/// Small integers: sums of them are exact in f32 and f64, whatever the order.
fn integers(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.below(17) as f64 - 8.0).collect()
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

fn back(v: Vec<f32>) -> Vec<f64> {
    v.into_iter().map(f64::from).collect()
}

/// Runs an f32 contraction of packed operands and checks it against the einsum.
fn check_contraction_f32(spec: &str, shapes: [&[usize]; 3], rng: &mut Rng) {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let ext = extents_of(spec, &shapes);
    let n = |sh: &[usize]| sh.iter().product::<usize>();
    let (a, b) = (random(rng, n(shapes[0])), random(rng, n(shapes[1])));
    let (da, db) = (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&b)).unwrap());
    let dd = d.upload(s, &vec![f32::NAN; n(shapes[2])]).unwrap();
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let want = einsum(spec, &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))], &ext);
    let sum_len =
        ext.iter().filter(|(c, _)| !spec.split_once("->").unwrap().1.contains(**c)).map(|(_, e)| e).product::<usize>();
    close(&back(dd.download(s).unwrap()), &want, 1e-6 * sum_len as f64, spec);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matrix_product_matches_einsum() {
    let mut rng = Rng::new();
    check_contraction_f32("ik,kj->ij", [&[33, 47], &[47, 29], &[33, 29]], &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_product_matches_einsum_in_f64_with_alpha_and_beta() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let spec = "bik,bkj->bij";
    let shapes: [&[usize]; 3] = [&[5, 12, 9], &[5, 9, 7], &[5, 12, 7]];
    let ext = extents_of(spec, &shapes);
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
    let ab = einsum(spec, &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))], &ext);
    let want: Vec<f64> = ab.iter().zip(&c).map(|(x, y)| 0.5 * x - 2.0 * y).collect();
    close(&dd.download(s).unwrap(), &want, 1e-12, spec);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn four_mode_contraction_with_a_permuted_output_matches_einsum() {
    let mut rng = Rng::new();
    // c and d are summed; the output takes the free modes in another order than the inputs.
    check_contraction_f32("abcd,cedf->fbea", [&[6, 5, 7, 8], &[7, 4, 8, 3], &[3, 5, 4, 6]], &mut rng);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn strided_inputs_and_a_column_major_output_match_einsum() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let (m, k, n) = (13usize, 11usize, 9usize);
    // a is column-major m x k inside a padded buffer (leading dimension 16); d column-major.
    let a = random(&mut rng, 16 * k);
    let b = random(&mut rng, k * n);
    let (da, db) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap());
    let dd = d.upload(s, &vec![0.0f64; m * n]).unwrap();
    let op = Contraction::new(
        "ik,kj->ij",
        TensorRef::strided(&da, &[m, k], &[1, 16]),
        TensorRef::new(&db, &[k, n]),
        TensorRef::strided(&dd, &[m, n], &[1, m]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let ext = extents_of("ik,kj->ij", &[&[m, k], &[k, n], &[m, n]]);
    // The einsum's output is row-major; the GPU's is column-major: compare through the transpose.
    let want = einsum("ik,kj->ji", &[(&a, &[1, 16]), (&b, &packed(&[k, n]))], &ext);
    close(&dd.download(s).unwrap(), &want, 1e-12, "strided");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn half_inputs_compute_in_f32_and_tf32_is_close() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let spec = "mk,nk->mn";
    let shapes: [&[usize]; 3] = [&[64, 96], &[48, 96], &[64, 48]];
    let ext = extents_of(spec, &shapes);
    let (a, b) = (random(&mut rng, 64 * 96), random(&mut rng, 48 * 96));
    // Round the inputs to each half type first, so the reference sees what the GPU sees.
    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f64(x)).collect();
    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f64(x)).collect();
    let (da, db) = (d.upload(s, &ah).unwrap(), d.upload(s, &bh).unwrap());
    let dd = d.alloc_zeros::<f16>(s, 64 * 48).unwrap();
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let a64: Vec<f64> = ah.iter().map(|x| x.to_f64()).collect();
    let b64: Vec<f64> = bh.iter().map(|x| x.to_f64()).collect();
    let want = einsum(spec, &[(&a64, &packed(shapes[0])), (&b64, &packed(shapes[1]))], &ext);
    let got: Vec<f64> = dd.download(s).unwrap().iter().map(|x| x.to_f64()).collect();
    close(&got, &want, 2e-3, "f16");

    let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f64(x)).collect();
    let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f64(x)).collect();
    let (da, db) = (d.upload(s, &ab).unwrap(), d.upload(s, &bb).unwrap());
    let dd = d.alloc_zeros::<bf16>(s, 64 * 48).unwrap();
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    );
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let a64: Vec<f64> = ab.iter().map(|x| x.to_f64()).collect();
    let b64: Vec<f64> = bb.iter().map(|x| x.to_f64()).collect();
    let want = einsum(spec, &[(&a64, &packed(shapes[0])), (&b64, &packed(shapes[1]))], &ext);
    let got: Vec<f64> = dd.download(s).unwrap().iter().map(|x| x.to_f64()).collect();
    close(&got, &want, 1e-2, "bf16");

    let (da, db) = (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&b)).unwrap());
    let dd = d.alloc_zeros::<f32>(s, 64 * 48).unwrap();
    let op = Contraction::new(
        spec,
        TensorRef::new(&da, shapes[0]),
        TensorRef::new(&db, shapes[1]),
        TensorRef::new(&dd, shapes[2]),
    )
    .compute(Compute::Tf32);
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let want = einsum(spec, &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))], &ext);
    close(&back(dd.download(s).unwrap()), &want, 5e-3, "tf32");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn reductions_are_exact() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let (i, j, k) = (7usize, 33usize, 5usize);
    let a = integers(&mut rng, i * j * k);
    let da = d.upload(s, &a).unwrap();
    let dd = d.upload(s, &vec![f64::NAN; k * i]).unwrap();
    h.tensor()
        .unwrap()
        .reduce(&Reduction::new("ijk->ki", TensorRef::new(&da, &[i, j, k]), TensorRef::new(&dd, &[k, i])))
        .unwrap()
        .wait()
        .unwrap();
    let got = dd.download(s).unwrap();
    for (x, y) in (0..k).flat_map(|z| (0..i).map(move |x| (z, x))) {
        let want: f64 = (0..j).map(|jj| a[(y * j + jj) * k + x]).sum();
        assert_eq!(got[x * i + y], want, "sum at k={x} i={y}");
    }
    // Max of arbitrary floats is exact too; into a scalar-free output of one mode.
    let r = random(&mut rng, i * j * k);
    let dr = d.upload(s, &f32s(&r)).unwrap();
    let dm = d.upload(s, &vec![f32::NAN; j]).unwrap();
    let op = Reduction::new("ijk->j", TensorRef::new(&dr, &[i, j, k]), TensorRef::new(&dm, &[j])).fold(BinaryOp::Max);
    h.tensor().unwrap().reduce(&op).unwrap().wait().unwrap();
    let got = dm.download(s).unwrap();
    for jj in 0..j {
        let want = (0..i)
            .flat_map(|x| (0..k).map(move |z| (x, z)))
            .map(|(x, z)| r[(x * j + jj) * k + z] as f32)
            .fold(f32::MIN, f32::max);
        assert_eq!(got[jj], want, "max at j={jj}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn permutations_are_exact() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let e = [4usize, 7, 3, 6];
    let a = random(&mut rng, e.iter().product());
    let da = d.upload(s, &f32s(&a)).unwrap();
    let db = d.upload(s, &vec![f32::NAN; a.len()]).unwrap();
    // b[l][j][i][k] = 2 · a[i][j][k][l] (a power of two: exact).
    let op = Permutation::new("ijkl->ljik", TensorRef::new(&da, &e), TensorRef::new(&db, &[e[3], e[1], e[0], e[2]]))
        .alpha(2.0);
    h.tensor().unwrap().permute(&op).unwrap().wait().unwrap();
    let got = db.download(s).unwrap();
    let sa = packed(&e);
    let sb = packed(&[e[3], e[1], e[0], e[2]]);
    for i in 0..e[0] {
        for j in 0..e[1] {
            for k in 0..e[2] {
                for l in 0..e[3] {
                    let x = a[i * sa[0] + j * sa[1] + k * sa[2] + l] as f32;
                    assert_eq!(got[l * sb[0] + j * sb[1] + i * sb[2] + k], 2.0 * x, "({i},{j},{k},{l})");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn elementwise_binary_and_trinary_match_the_cpu() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let (m, n) = (19usize, 23usize);
    let (a, c) = (random(&mut rng, m * n), random(&mut rng, m * n));
    let row = random(&mut rng, n);
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
    let f = |x: f64| x as f32 as f64;
    let want: Vec<f64> = a.iter().zip(&c).map(|(x, y)| (2.0 * f(*x).abs()).max(-0.5 * f(*y))).collect();
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
    let want: Vec<f64> = (0..m * n).map(|x| f(row[x % n]) * f(c[x])).collect();
    close(&back(dc.download(s).unwrap()), &want, 1e-6, "binary broadcast in place");

    // d = (a + 3·b) · c, with b read transposed.
    let b = random(&mut rng, n * m);
    let db = d.upload(s, &f32s(&b)).unwrap();
    let dc2 = d.upload(s, &f32s(&c)).unwrap();
    let op = ElementwiseTrinary::new(
        "ij,ji,ij->ij",
        TensorRef::new(&da, &[m, n]),
        TensorRef::new(&db, &[n, m]),
        TensorRef::new(&dc2, &[m, n]),
        TensorRef::new(&dd, &[m, n]),
    )
    .scales(1.0, 3.0, 1.0)
    .combine(BinaryOp::Add, BinaryOp::Mul);
    h.tensor().unwrap().elementwise_trinary(&op).unwrap().wait().unwrap();
    let want: Vec<f64> = (0..m * n).map(|x| (f(a[x]) + 3.0 * f(b[(x % n) * m + x / n])) * f(c[x])).collect();
    close(&back(dd.download(s).unwrap()), &want, 1e-6, "trinary");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn plans_are_cached_per_descriptor_and_lanes_work() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let a = random(&mut rng, 64 * 64);
    let (da, db) = (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&a)).unwrap());
    let dd = d.alloc_zeros::<f32>(s, 64 * 64).unwrap();
    let op = Contraction::new(
        "ik,kj->ij",
        TensorRef::new(&da, &[64, 64]),
        TensorRef::new(&db, &[64, 64]),
        TensorRef::new(&dd, &[64, 64]),
    );
    for _ in 0..3 {
        h.tensor().unwrap().contract(&op).unwrap();
    }
    h.tensor().unwrap().contract(&op.clone().alpha(2.0)).unwrap().wait().unwrap();
    assert_eq!(h.tensor().unwrap().plans_made(), 1, "scalars are not part of the plan");
    // Another layout of the same buffers is another plan.
    let t = Contraction::new(
        "ik,jk->ij",
        TensorRef::new(&da, &[64, 64]),
        TensorRef::new(&db, &[64, 64]),
        TensorRef::new(&dd, &[64, 64]),
    );
    h.tensor().unwrap().contract(&t).unwrap().wait().unwrap();
    assert_eq!(h.tensor().unwrap().plans_made(), 2);

    let lane = d.lane("tensor").unwrap();
    let (da2, dd2) = (da.clone(), d.alloc_zeros::<f32>(s, 64 * 64).unwrap());
    let out = dd2.clone();
    lane.submit(move |cx| {
        let op = Permutation::new("ij->ji", TensorRef::new(&da2, &[64, 64]), TensorRef::new(&dd2, &[64, 64]));
        cx.tensor()?.permute(&op)?.wait()
    })
    .wait()
    .unwrap();
    let got = out.download(s).unwrap();
    for x in 0..64 * 64 {
        assert_eq!(got[(x % 64) * 64 + x / 64], a[x] as f32);
    }
    drop(h);
    d.synchronize(s).unwrap();
}

/// The reference itself, on the CPU (runs in CI): a matrix product, its transpose through a
/// permuted output, and a strided input.
#[test]
fn the_cpu_einsum_is_a_matrix_product() {
    let mut rng = Rng::seeded(3);
    let (m, k, n) = (3usize, 4usize, 5usize);
    let (a, b) = (random(&mut rng, m * k), random(&mut rng, k * n));
    let ext = extents_of("ik,kj->ij", &[&[m, k], &[k, n], &[m, n]]);
    let c = einsum("ik,kj->ij", &[(&a, &[k, 1]), (&b, &[n, 1])], &ext);
    let ct = einsum("ik,kj->ji", &[(&a, &[k, 1]), (&b, &[n, 1])], &ext);
    // a read column-major: element (i, k) at k * m + i, i.e. the row-major k x m buffer aᵀ.
    let at = einsum("ik,kj->ij", &[(&a, &[1, m]), (&b, &[n, 1])], &ext);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|x| a[i * k + x] * b[x * n + j]).sum();
            assert!((c[i * n + j] - want).abs() < 1e-12);
            assert_eq!(ct[j * m + i], c[i * n + j]);
            let want_t: f64 = (0..k).map(|x| a[x * m + i] * b[x * n + j]).sum();
            assert!((at[i * n + j] - want_t).abs() < 1e-12);
        }
    }
}

/// The raw handle is a live cuTENSOR handle: it makes (and the test destroys) a tensor
/// descriptor of its own.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_cutensor_handle_makes_a_tensor_descriptor() {
    use cusched::cudarc::cutensor::sys;
    let Some((d, _, mut h)) = gpu_setup() else { return };
    let t = h.tensor().unwrap();
    let raw = t.cutensor_handle().unwrap();
    let (extents, strides) = ([4i64, 3], [3i64, 1]);
    let ok = sys::cutensorStatus_t::CUTENSOR_STATUS_SUCCESS;
    let (made, destroyed) = raw_launch(&d, cusched::LaunchRecorder::new_strict(t.stream()), |_| {
        let mut desc: sys::cutensorTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: 1. `raw` is the live handle of `t`, which outlives the launch, and its
        // context is current (`raw_launch` binds it); 2. `extents` and `strides` hold the 2
        // modes' entries and outlive the call (cuTENSOR copies them), and `desc` is a valid
        // out-pointer; 3. it enqueues nothing and touches no device memory, so the launch
        // declares no uses.
        let made = unsafe {
            sys::cutensorCreateTensorDescriptor(
                raw,
                &mut desc,
                2,
                extents.as_ptr(),
                strides.as_ptr(),
                sys::cudaDataType_t::CUDA_R_32F,
                256,
            )
        };
        // SAFETY: 1. `desc` was just made by the call above, which succeeded; 2. nothing else
        // holds it, and it is destroyed once.
        let destroyed = (made == ok).then(|| unsafe { sys::cutensorDestroyTensorDescriptor(desc) });
        (made, destroyed)
    });
    assert_eq!(made, ok);
    assert_eq!(destroyed, Some(ok));
}

/// Runs every op kind once on `d` from the inputs of `seed`: each output as f64, named, with
/// the tolerance (relative to its largest value) two correct backends agree to.
fn every_op(d: &cusched::Device, seed: u64) -> Vec<(&'static str, Vec<f64>, f64)> {
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(d, s).unwrap();
    let t = h.tensor().unwrap();
    let mut rng = Rng::seeded(seed);
    let mut out = Vec::new();
    let (a, b, c) = (random(&mut rng, 6 * 5 * 7 * 8), random(&mut rng, 7 * 4 * 8 * 3), random(&mut rng, 3 * 5 * 4 * 6));
    let (a32, b32, c32) =
        (d.upload(s, &f32s(&a)).unwrap(), d.upload(s, &f32s(&b)).unwrap(), d.upload(s, &f32s(&c)).unwrap());
    let (a64, b64) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap());
    let f32_out = |v: &cusched::GpuRef<f32>| back(v.download(s).unwrap());
    let f64_out = |v: &cusched::GpuRef<f64>| v.download(s).unwrap();

    // Contractions: 4 modes with a permuted output (f32, TF32), with alpha and beta (f64), a
    // strided column-major output (f64), and the half types.
    let (sa, sb, sd): (&[usize], &[usize], &[usize]) = (&[6, 5, 7, 8], &[7, 4, 8, 3], &[3, 5, 4, 6]);
    for (name, compute, tol) in [("contract f32", Compute::F32, 1e-5), ("contract tf32", Compute::Tf32, 5e-3)] {
        let dd = d.alloc_zeros::<f32>(s, 360).unwrap();
        let op = Contraction::new(
            "abcd,cedf->fbea",
            TensorRef::new(&a32, sa),
            TensorRef::new(&b32, sb),
            TensorRef::new(&dd, sd),
        )
        .compute(compute);
        t.contract(&op).unwrap().wait().unwrap();
        out.push((name, f32_out(&dd), tol));
    }
    let dd = d.upload(s, &c).unwrap();
    let op = Contraction::new(
        "abcd,cedf->fbea",
        TensorRef::new(&a64, sa),
        TensorRef::new(&b64, sb),
        TensorRef::new(&dd, sd),
    )
    .alpha(0.5)
    .beta(-2.0);
    t.contract(&op).unwrap().wait().unwrap();
    out.push(("contract f64 alpha beta", f64_out(&dd), 1e-12));
    let dd = d.alloc_zeros::<f64>(s, 13 * 9).unwrap();
    let op = Contraction::new(
        "ik,kj->ij",
        TensorRef::strided(&a64, &[13, 11], &[1, 16]),
        TensorRef::new(&b64, &[11, 9]),
        TensorRef::strided(&dd, &[13, 9], &[1, 13]),
    );
    t.contract(&op).unwrap().wait().unwrap();
    out.push(("contract f64 strided", f64_out(&dd), 1e-12));
    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f64(x)).collect();
    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f64(x)).collect();
    let (dah, dbh, ddh) = (d.upload(s, &ah).unwrap(), d.upload(s, &bh).unwrap(), d.alloc_zeros::<f16>(s, 360).unwrap());
    let op = Contraction::new(
        "abcd,cedf->fbea",
        TensorRef::new(&dah, sa),
        TensorRef::new(&dbh, sb),
        TensorRef::new(&ddh, sd),
    );
    t.contract(&op).unwrap().wait().unwrap();
    out.push(("contract f16", ddh.download(s).unwrap().iter().map(|x| x.to_f64()).collect(), 2e-3));
    let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f64(x)).collect();
    let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f64(x)).collect();
    let (dab, dbb, ddb) =
        (d.upload(s, &ab).unwrap(), d.upload(s, &bb).unwrap(), d.alloc_zeros::<bf16>(s, 360).unwrap());
    let op = Contraction::new(
        "abcd,cedf->fbea",
        TensorRef::new(&dab, sa),
        TensorRef::new(&dbb, sb),
        TensorRef::new(&ddb, sd),
    );
    t.contract(&op).unwrap().wait().unwrap();
    out.push(("contract bf16", ddb.download(s).unwrap().iter().map(|x| x.to_f64()).collect(), 1e-2));

    // Reductions: each fold, with a unary operator and beta.
    for (name, fold, op_a) in [
        ("reduce add", BinaryOp::Add, UnaryOp::Identity),
        ("reduce max", BinaryOp::Max, UnaryOp::Identity),
        ("reduce min abs", BinaryOp::Min, UnaryOp::Abs),
        ("reduce mul exp", BinaryOp::Mul, UnaryOp::Exp),
    ] {
        let dd = d.upload(s, &c[..6 * 8]).unwrap();
        let op = Reduction::new("abcd->da", TensorRef::new(&a64, sa), TensorRef::new(&dd, &[8, 6]))
            .fold(fold)
            .op_a(op_a)
            .alpha(1.5)
            .beta(0.25);
        t.reduce(&op).unwrap().wait().unwrap();
        out.push((name, f64_out(&dd), 1e-12));
    }

    // Permutations, through every unary operator (inputs made positive for √, ln and 1/x).
    let pos: Vec<f64> = a.iter().map(|x| 0.25 + x.abs()).collect();
    let dpos = d.upload(s, &f32s(&pos)).unwrap();
    for op_a in [
        UnaryOp::Identity,
        UnaryOp::Sqrt,
        UnaryOp::Relu,
        UnaryOp::Rcp,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Ceil,
        UnaryOp::Floor,
    ] {
        let db = d.alloc_zeros::<f32>(s, 6 * 5 * 7 * 8).unwrap();
        let op = Permutation::new("abcd->dbac", TensorRef::new(&dpos, sa), TensorRef::new(&db, &[8, 5, 6, 7]))
            .alpha(-2.0)
            .op_a(op_a);
        t.permute(&op).unwrap().wait().unwrap();
        out.push(("permute", f32_out(&db), 1e-5));
    }

    // Elementwise: binary with a broadcast operand, in place; trinary with a transposed operand.
    let dc = d.upload(s, &f32s(&c)).unwrap();
    let row = d.upload(s, &f32s(&b[..6])).unwrap();
    for combine in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min] {
        let dd = d.upload(s, &f32s(&c)).unwrap();
        let op = ElementwiseBinary::new(
            "a,fbea->fbea",
            TensorRef::new(&row, &[6]),
            TensorRef::new(&dd, sd),
            TensorRef::new(&dd, sd),
        )
        .scales(2.0, -0.5)
        .ops(UnaryOp::Tanh, UnaryOp::Abs)
        .combine(combine);
        t.elementwise_binary(&op).unwrap().wait().unwrap();
        out.push(("elementwise binary", f32_out(&dd), 1e-5));
    }
    let dd = d.alloc_zeros::<f32>(s, 360).unwrap();
    let op = ElementwiseTrinary::new(
        "fbea,aebf,fbea->fbea",
        TensorRef::new(&c32, sd),
        TensorRef::new(&dc, &[6, 4, 5, 3]),
        TensorRef::new(&dc, sd),
        TensorRef::new(&dd, sd),
    )
    .scales(1.0, 3.0, 0.5)
    .ops(UnaryOp::Identity, UnaryOp::Neg, UnaryOp::Sigmoid)
    .combine(BinaryOp::Max, BinaryOp::Mul);
    t.elementwise_trinary(&op).unwrap().wait().unwrap();
    out.push(("elementwise trinary", f32_out(&dd), 1e-5));
    drop(h);
    d.synchronize(s).unwrap();
    out
}

/// Every op kind on the GPU and on the simulator from the same inputs: the results agree to
/// the type's tolerance.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_matches_the_simulator() {
    let Some(gpu) = gpu() else { return };
    let seed = Rng::new().next();
    let (on_gpu, on_sim) = (every_op(&gpu, seed), every_op(&sim(), seed));
    assert_eq!(on_gpu.len(), on_sim.len());
    for ((name, g, tol), (_, s, _)) in on_gpu.iter().zip(&on_sim) {
        close(g, s, *tol, name);
    }
}

/// The comparison's own run on the simulator (runs in CI): every op against the einsum where
/// it is one, so the GPU test compares against results known right.
#[test]
fn every_op_on_the_simulator_matches_the_einsum() {
    let got = every_op(&sim(), 5);
    let mut rng = Rng::seeded(5);
    let (a, b, c) = (random(&mut rng, 6 * 5 * 7 * 8), random(&mut rng, 7 * 4 * 8 * 3), random(&mut rng, 3 * 5 * 4 * 6));
    let shapes: [&[usize]; 3] = [&[6, 5, 7, 8], &[7, 4, 8, 3], &[3, 5, 4, 6]];
    let ab = einsum(
        "abcd,cedf->fbea",
        &[(&a, &packed(shapes[0])), (&b, &packed(shapes[1]))],
        &extents_of("abcd,cedf->fbea", &shapes),
    );
    close(&got[0].1, &ab, 1e-5, "contract f32");
    let want: Vec<f64> = ab.iter().zip(&c).map(|(x, y)| 0.5 * x - 2.0 * y).collect();
    close(&got[2].1, &want, 1e-12, "contract f64 alpha beta");
    let sums = einsum("abcd->da", &[(&a, &packed(shapes[0]))], &extents_of("abcd->da", &[shapes[0], &[8, 6]]));
    let want: Vec<f64> = sums.iter().zip(&c).map(|(x, y)| 1.5 * x + 0.25 * y).collect();
    close(&got[6].1, &want, 1e-12, "reduce add");
}

/// Runs one of the complex cases (with `conj`) for both complex types on the GPU.
fn complex_case(
    f32_case: fn(&cusched::Device, cusched::StreamId, &mut cusched::Handles, &mut Rng, bool),
    f64_case: fn(&cusched::Device, cusched::StreamId, &mut cusched::Handles, &mut Rng, bool),
) {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    for conj in [false, true] {
        f32_case(&d, s, &mut h, &mut rng, conj);
        f64_case(&d, s, &mut h, &mut rng, conj);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_contractions_conjugated_or_not_match_direct_loops() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    for conj in [[false, false], [true, false], [false, true], [true, true]] {
        cx::contractions::<Complex<f32>>(&d, s, &mut h, &mut rng, conj);
        cx::contractions::<Complex<f64>>(&d, s, &mut h, &mut rng, conj);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_tf32_contraction_is_close() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let (a, b) = (cx::zrandom(&mut rng, 7 * 33), cx::zrandom(&mut rng, 33 * 5));
    let up = |v: &[cx::Z]| {
        d.upload(s, &v.iter().map(|&z| Complex::new(z.0 as f32, z.1 as f32)).collect::<Vec<_>>()).unwrap()
    };
    let (da, db) = (up(&a), up(&b));
    let dd = d.alloc_zeros::<Complex<f32>>(s, 35).unwrap();
    let op = Contraction::new(
        "ik,kj->ij",
        TensorRef::new(&da, &[7, 33]),
        TensorRef::new(&db, &[33, 5]),
        TensorRef::new(&dd, &[7, 5]),
    )
    .ops(UnaryOp::Conj, UnaryOp::Identity)
    .compute(Compute::Tf32);
    h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
    let ext = extents_of("ik,kj->ij", &[&[7, 33], &[33, 5]]);
    let ins = [(&a[..], &packed(&[7, 33])[..]), (&b[..], &packed(&[33, 5])[..])];
    let want = cx::zeinsum("ik,kj->ij", &ins, &[true, false], &ext, (0.0, 0.0), cx::zadd);
    let got: Vec<cx::Z> = dd.download(s).unwrap().into_iter().map(|z| (f64::from(z.re), f64::from(z.im))).collect();
    cx::zclose(&got, &want, 1e-2, "tf32");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_reductions_sum_and_multiply_conjugated_or_not() {
    complex_case(cx::reductions::<Complex<f32>>, cx::reductions::<Complex<f64>>);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_permutations_conjugated_or_not_match_direct_loops() {
    complex_case(cx::permutations::<Complex<f32>>, cx::permutations::<Complex<f64>>);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_elementwise_ops_conjugated_or_not_match_direct_loops() {
    complex_case(cx::elementwise::<Complex<f32>>, cx::elementwise::<Complex<f64>>);
}
