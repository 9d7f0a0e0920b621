//! cuBLASLt's matmul on the GPU and on the simulator with the same inputs: the two results
//! agree to the types' tolerance (the magnitudes from the shared f64 reference), for every
//! epilogue in f32, f16 and bf16, the layouts and batches, TF32, and FP8 with its scales and
//! D's amax. A combination cuBLASLt has no kernel for (`Unsupported` on the GPU) is skipped.

use crate::common::reference::blas_lt::{compare, Case, Fp8, Num, EPILOGUES};
use crate::common::*;
use cusched::blas_lt::{F8E4M3, F8E5M2};
use cusched::half::{bf16, f16};
use cusched::Device;

/// Runs `case` on the GPU and on a simulated device; compares them (`acc`: the accumulation's
/// relative error allowed). Returns whether the GPU ran it.
fn both<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(gpu: &Device, case: &Case, acc: f64) -> bool {
    let mut rng = Rng::new();
    let inp = case.inputs::<TA, TB, TC, E>(&mut rng);
    let on_gpu = match case.run::<TA, TB, TC, TD, E>(gpu, &inp) {
        Ok(out) => out,
        Err(cusched::Error::Unsupported { what, .. }) => {
            eprintln!("{case:?}: no cuBLASLt kernel ({what})");
            return false;
        }
        Err(cusched::Error::InvalidArgument { .. }) if case.fp8.is_some() => return false,
        Err(e) => panic!("{case:?} on the GPU: {e}"),
    };
    let on_sim = case.run::<TA, TB, TC, TD, E>(&sim(), &inp).unwrap_or_else(|e| panic!("{case:?} on the sim: {e}"));
    let (_, mags) = case.reference(&inp);
    compare::<TD, E>(&format!("{case:?}: GPU against sim"), &on_gpu, &on_sim, &mags, acc);
    true
}

fn every_epilogue<T: Num>() {
    let Some(dev) = gpu() else { return };
    let mut ran = 0;
    for epi in EPILOGUES {
        for row in [false, true] {
            let case = Case { ta: true, row, beta: 0.5, ..Case::new(37, 29, 23, epi) };
            ran += usize::from(both::<T, T, T, T, T>(&dev, &case, T::TOL * 4.0));
        }
    }
    assert!(ran > 20, "only {ran} combinations ran");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_and_sim_agree_on_every_epilogue_in_f32() {
    every_epilogue::<f32>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_and_sim_agree_on_every_epilogue_in_f16() {
    every_epilogue::<f16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_and_sim_agree_on_every_epilogue_in_bf16() {
    every_epilogue::<bf16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_and_sim_agree_on_layouts_batches_and_tf32() {
    let Some(dev) = gpu() else { return };
    let mut ran = 0;
    for row in [false, true] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for (count, epi) in [(1, "default"), (3, "bias"), (3, "gelu_aux_bias"), (2, "relu_aux_bias")] {
                let case = Case { ta, tb, row, pad: 3, count, alpha: -0.75, beta: 0.5, ..Case::new(19, 13, 11, epi) };
                ran += usize::from(both::<f32, f32, f32, f32, f32>(&dev, &case, 4e-5));
                ran +=
                    usize::from(both::<bf16, bf16, bf16, bf16, bf16>(&dev, &Case { separate_c: true, ..case }, 8e-2));
            }
        }
    }
    let case = Case { tf32: true, separate_c: true, beta: 2.0, pad: 1, ..Case::new(40, 24, 64, "gelu_bias") };
    ran += usize::from(both::<f32, f32, f32, f32, f32>(&dev, &case, 2e-3));
    assert!(ran > 40, "only {ran} combinations ran");
}

fn fp8<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(dev: &Device) -> usize {
    let fp8_d = TD::NAME.starts_with('e');
    let mut ran = 0;
    for epi in EPILOGUES {
        for row in [false, true] {
            if row && !matches!(epi, "default" | "bias") {
                continue;
            }
            for (sd, amax, beta) in [(None, false, 0.0f32), (Some(2.0f32), true, 0.5)] {
                let (sd, amax) = if fp8_d { (sd, amax) } else { (None, false) };
                let (ta, tb) = if row { (false, true) } else { (true, false) };
                let bgrad = epi.starts_with("bgrad");
                let f = Fp8 { sa: if bgrad { 1.0 } else { 0.5 }, sb: if bgrad { 1.0 } else { 0.25 }, sd, amax };
                let case = Case { ta, tb, row, beta, separate_c: true, fp8: Some(f), ..Case::new(64, 48, 96, epi) };
                ran += usize::from(both::<TA, TB, TC, TD, E>(dev, &case, 1e-2));
            }
        }
    }
    ran
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_and_sim_agree_on_fp8() {
    let Some(dev) = gpu() else { return };
    if dev.compute_capability().unwrap() < (8, 9) {
        eprintln!("skipped: FP8 needs compute capability 8.9");
        return;
    }
    let mut ran = 0;
    ran += fp8::<F8E4M3, F8E4M3, bf16, bf16, bf16>(&dev);
    ran += fp8::<F8E4M3, F8E4M3, f16, f16, f16>(&dev);
    ran += fp8::<F8E4M3, F8E4M3, f32, f32, bf16>(&dev);
    ran += fp8::<F8E4M3, F8E4M3, bf16, F8E4M3, bf16>(&dev);
    ran += fp8::<F8E4M3, F8E4M3, f16, F8E4M3, f16>(&dev);
    ran += fp8::<F8E4M3, F8E5M2, bf16, bf16, bf16>(&dev);
    ran += fp8::<F8E5M2, F8E4M3, f16, F8E5M2, f16>(&dev);
    ran += fp8::<F8E4M3, F8E5M2, bf16, F8E4M3, bf16>(&dev);
    assert!(ran > 40, "only {ran} FP8 combinations ran");
}
