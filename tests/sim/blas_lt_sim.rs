//! cuBLASLt's matmul computed on the simulator, against the shared f64 reference: every
//! epilogue in f32, f16 and bf16, transposes, row-major, leading dimensions, strided batches,
//! alpha and beta with C (D itself or a separate C), TF32, and the FP8 combinations with their
//! scales and D's amax. Inputs are fresh random values (the seed is printed).

use crate::common::reference::blas_lt::{compare, Case, Fp8, Num, EPILOGUES};
use crate::common::{sim, Rng};
use cusched::blas_lt::{F8E4M3, F8E5M2};
use cusched::half::{bf16, f16};

/// Runs `case` on a simulated device (whose hazard checker fails any undeclared access) and
/// compares it with the reference: `acc` is the accumulation's relative error allowed.
fn check<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(case: &Case, acc: f64) {
    let dev = sim();
    let mut rng = Rng::new();
    let inp = case.inputs::<TA, TB, TC, E>(&mut rng);
    let got = case.run::<TA, TB, TC, TD, E>(&dev, &inp).unwrap_or_else(|e| panic!("{case:?}: {e}"));
    let (want, mags) = case.reference(&inp);
    compare::<TD, E>(&format!("{case:?}"), &got, &want, &mags, acc);
    let hazards = dev.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "{case:?}: {hazards:?}");
}

fn every_epilogue<T: Num>() {
    for epi in EPILOGUES {
        for row in [false, true] {
            let case = Case { ta: true, row, beta: 0.5, ..Case::new(37, 29, 23, epi) };
            check::<T, T, T, T, T>(&case, 1e-5);
        }
    }
}

#[test]
fn matmul_computes_every_epilogue_in_f32() {
    every_epilogue::<f32>();
}

#[test]
fn matmul_computes_every_epilogue_in_f16() {
    every_epilogue::<f16>();
}

#[test]
fn matmul_computes_every_epilogue_in_bf16() {
    every_epilogue::<bf16>();
}

#[test]
fn matmul_computes_transposes_orders_leading_dimensions_and_batches() {
    for row in [false, true] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (count, epi) in [(1, "default"), (3, "bias"), (3, "gelu_aux_bias"), (2, "relu_aux_bias")] {
                let case = Case { ta, tb, row, pad: 3, count, alpha: -0.75, beta: 0.5, ..Case::new(19, 13, 11, epi) };
                check::<f32, f32, f32, f32, f32>(&case, 1e-5);
                check::<bf16, bf16, bf16, bf16, bf16>(&Case { separate_c: true, ..case }, 1e-5);
            }
        }
    }
}

#[test]
fn matmul_computes_tf32_and_a_separate_c() {
    let case = Case { tf32: true, separate_c: true, beta: 2.0, pad: 1, ..Case::new(40, 24, 64, "gelu_bias") };
    check::<f32, f32, f32, f32, f32>(&case, 1e-5);
}

/// A 512³ f32 matmul by the identity gives A back exactly (the reference would be slow in a
/// debug build); its time is printed (release: well under a second on one core).
#[test]
fn matmul_computes_a_512_cubed_gemm() {
    let n = 512;
    let dev = sim();
    let s = dev.new_stream().unwrap();
    let mut h = cusched::Handles::new(&dev, s).unwrap();
    let mut rng = Rng::new();
    let ha: Vec<f32> = (0..n * n).map(|_| rng.f32()).collect();
    let eye: Vec<f32> = (0..n * n).map(|ij| if ij % n == ij / n { 1.0 } else { 0.0 }).collect();
    let (a, b) = (dev.upload(s, &ha).unwrap(), dev.upload(s, &eye).unwrap());
    let d = dev.alloc_zeros::<f32>(s, n * n).unwrap();
    let t = std::time::Instant::now();
    h.blas_lt().unwrap().matmul(&cusched::blas_lt::Matmul::new(n, n, n, &a, &b, &d)).unwrap().wait().unwrap();
    eprintln!("512^3 f32 matmul on the simulator: {:?}", t.elapsed());
    assert_eq!(d.download(s).unwrap(), ha);
}

/// One FP8 input pair with (C, D, E) types, over the epilogues and scale options cuBLASLt
/// takes for it (a rejected combination is skipped: `lib_validation` checks those).
fn fp8<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>() {
    let fp8_d = TD::NAME.starts_with('e');
    for epi in EPILOGUES {
        for row in [false, true] {
            // Row-major swaps A and B: the plain and bias epilogues show it.
            if row && !matches!(epi, "default" | "bias") {
                continue;
            }
            for (sd, amax, beta) in [(None, false, 0.0f32), (Some(2.0f32), true, 0.5)] {
                let (sd, amax) = if fp8_d { (sd, amax) } else { (None, false) };
                let (ta, tb) = if row { (false, true) } else { (true, false) };
                let bgrad = epi.starts_with("bgrad");
                let f = Fp8 { sa: if bgrad { 1.0 } else { 0.5 }, sb: if bgrad { 1.0 } else { 0.25 }, sd, amax };
                let case = Case { ta, tb, row, beta, separate_c: true, fp8: Some(f), ..Case::new(64, 48, 32, epi) };
                let dev = sim();
                let mut rng = Rng::new();
                let inp = case.inputs::<TA, TB, TC, E>(&mut rng);
                let got = match case.run::<TA, TB, TC, TD, E>(&dev, &inp) {
                    Ok(got) => got,
                    Err(cusched::Error::InvalidArgument { .. }) => continue,
                    Err(e) => panic!("{case:?}: {e}"),
                };
                let (want, mags) = case.reference(&inp);
                compare::<TD, E>(&format!("{case:?}"), &got, &want, &mags, 1e-2);
            }
        }
    }
}

#[test]
fn matmul_computes_fp8_e4m3_inputs_with_scales_and_amax() {
    fp8::<F8E4M3, F8E4M3, bf16, bf16, bf16>();
    fp8::<F8E4M3, F8E4M3, f16, f16, f16>();
    fp8::<F8E4M3, F8E4M3, f32, f32, bf16>();
    fp8::<F8E4M3, F8E4M3, bf16, F8E4M3, bf16>();
    fp8::<F8E4M3, F8E4M3, f16, F8E4M3, f16>();
}

#[test]
fn matmul_computes_fp8_mixed_inputs_with_scales_and_amax() {
    fp8::<F8E4M3, F8E5M2, bf16, bf16, bf16>();
    fp8::<F8E5M2, F8E4M3, f16, F8E5M2, f16>();
    fp8::<F8E4M3, F8E5M2, bf16, F8E4M3, bf16>();
}
