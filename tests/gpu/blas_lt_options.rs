//! cuBLASLt's matmul options on a real GPU, against the shared f64 reference (the direct
//! complex-f64 loop for f64, complex and i8 inputs), over the whole cross product of each
//! option with the types and layouts it takes, on odd sizes (multiples of 16 for FP8): an FP8
//! GELU aux matrix with its scale and amax; an order per matrix; `alpha` and `beta` from device
//! memory; bias gradients of strided batches. A combination cuBLASLt has no kernel for
//! (`Unsupported`) is listed and skipped; every option must have run in most of its combinations.

use crate::common::reference::blas_lt::{compare, AuxFp8, Case, Fp8, Num, EPILOGUES};
use crate::common::reference::blas_lt_types::{self as wide, order_cases, Input};
use crate::common::{gpu, Rng};
use cusched::blas_lt::{F8E4M3, F8E5M2};
use cusched::half::{bf16, f16};
use cusched::{Complex, Device, Handles};

/// Runs `case` on the GPU and compares it with the reference (`acc`: the accumulation's
/// relative error allowed). Returns whether it ran (false: cuBLASLt has no kernel for it).
fn run<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(dev: &Device, case: &Case, acc: f64) -> bool {
    let mut rng = Rng::new();
    let inp = case.inputs::<TA, TB, TC, E>(&mut rng);
    let got = match case.run::<TA, TB, TC, TD, E>(dev, &inp) {
        Ok(out) => out,
        Err(cusched::Error::Unsupported { what, .. }) => {
            eprintln!("{case:?}: no cuBLASLt kernel ({what})");
            return false;
        }
        Err(e) => panic!("{case:?} ({}, {}, {}, {}, {}): {e}", TA::NAME, TB::NAME, TC::NAME, TD::NAME, E::NAME),
    };
    let (want, mags) = case.reference(&inp);
    compare::<TD, E>(&format!("{case:?}"), &got, &want, &mags, acc);
    true
}

fn fp8_device(dev: &Device) -> bool {
    let ok = dev.compute_capability().unwrap() >= (8, 9);
    if !ok {
        eprintln!("skipped: FP8 needs compute capability 8.9");
    }
    ok
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fp8_gelu_aux_in_e4m3_with_every_scale_amax_layout_and_batch() {
    let Some(dev) = gpu() else { return };
    if !fp8_device(&dev) {
        return;
    }
    let (mut ran, mut all) = (0, 0);
    for row in [false, true] {
        let (ta, tb) = if row { (false, true) } else { (true, false) };
        for count in [1, 2] {
            for scale in [1.0f32, 2.0, 0.25] {
                for amax in [false, true] {
                    for (sd, amax_d, beta) in [(None, false, 0.0f32), (Some(0.5f32), true, 0.5)] {
                        let case = Case {
                            ta,
                            tb,
                            row,
                            count,
                            beta,
                            separate_c: true,
                            fp8: Some(Fp8 { sa: 0.5, sb: 0.25, sd, amax: amax_d }),
                            aux_fp8: Some(AuxFp8 { scale, amax }),
                            ..Case::new(48, 80, 64, "gelu_aux")
                        };
                        all += 1;
                        ran += usize::from(run::<F8E4M3, F8E4M3, f16, F8E4M3, F8E4M3>(&dev, &case, 1e-2));
                    }
                }
            }
        }
    }
    assert_eq!(ran, all, "only {ran} of {all} FP8 aux combinations ran");
}

/// Every epilogue of `T`, every transpose, every mix of orders of A, B and C/D, one matmul and
/// a batch of 2.
fn every_order<T: Num>(dev: &Device, acc: f64) -> (usize, usize) {
    let (mut ran, mut all) = (0, 0);
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    for epi in EPILOGUES {
                        for count in [1, 2] {
                            let case = Case {
                                ta,
                                tb,
                                row,
                                row_a: Some(row_a),
                                row_b: Some(row_b),
                                pad: 1,
                                count,
                                alpha: -0.75,
                                beta: 0.5,
                                ..Case::new(37, 29, 23, epi)
                            };
                            all += 1;
                            ran += usize::from(run::<T, T, T, T, T>(dev, &case, acc));
                        }
                    }
                }
            }
        }
    }
    (ran, all)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_mix_of_orders_in_f32_f16_and_bf16() {
    let Some(dev) = gpu() else { return };
    for (name, (ran, all)) in [
        ("f32", every_order::<f32>(&dev, 4e-5)),
        ("f16", every_order::<f16>(&dev, f16::TOL * 4.0)),
        ("bf16", every_order::<bf16>(&dev, 8e-2)),
    ] {
        eprintln!("{name}: {ran} of {all} order combinations ran");
        // BGRADA / BGRADB have no f32 kernel in some layouts: most of the rest must run.
        assert!(ran * 10 >= all * 8, "{name}: only {ran} of {all} ran");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_mix_of_orders_in_tf32() {
    let Some(dev) = gpu() else { return };
    let mut ran = 0;
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                for (ta, tb) in [(false, false), (true, true)] {
                    let case = Case {
                        ta,
                        tb,
                        row,
                        row_a: Some(row_a),
                        row_b: Some(row_b),
                        tf32: true,
                        beta: 0.5,
                        ..Case::new(37, 29, 64, "gelu_bias")
                    };
                    ran += usize::from(run::<f32, f32, f32, f32, f32>(&dev, &case, 2e-3));
                }
            }
        }
    }
    assert_eq!(ran, 16);
}

/// FP8 inputs `TA x TB` into (C, D, E), every mix of orders with the transposes that make TN,
/// and the epilogues the pair takes (a refused one is an invalid argument: skipped).
fn fp8_orders<TA: Num, TB: Num, TC: Num, TD: Num, E: Num>(dev: &Device) -> usize {
    let fp8_d = TD::NAME.starts_with('e');
    let mut ran = 0;
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                for epi in ["default", "bias", "gelu_aux_bias", "relu_aux"] {
                    let (sd, amax) = if fp8_d { (Some(2.0), true) } else { (None, false) };
                    let case = Case {
                        ta: !row_a,
                        tb: row_b,
                        row,
                        row_a: Some(row_a),
                        row_b: Some(row_b),
                        beta: 0.5,
                        separate_c: true,
                        fp8: Some(Fp8 { sa: 0.5, sb: 0.25, sd, amax }),
                        ..Case::new(48, 32, 80, epi)
                    };
                    let mut rng = Rng::new();
                    let inp = case.inputs::<TA, TB, TC, E>(&mut rng);
                    match case.run::<TA, TB, TC, TD, E>(dev, &inp) {
                        Ok(got) => {
                            let (want, mags) = case.reference(&inp);
                            compare::<TD, E>(&format!("{case:?}"), &got, &want, &mags, 1e-2);
                            ran += 1;
                        }
                        Err(cusched::Error::InvalidArgument { .. }) => {}
                        Err(cusched::Error::Unsupported { what, .. }) => eprintln!("{case:?}: {what}"),
                        Err(e) => panic!("{case:?}: {e}"),
                    }
                }
            }
        }
    }
    ran
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_mix_of_orders_in_fp8() {
    let Some(dev) = gpu() else { return };
    if !fp8_device(&dev) {
        return;
    }
    let mut ran = 0;
    ran += fp8_orders::<F8E4M3, F8E4M3, bf16, bf16, bf16>(&dev);
    ran += fp8_orders::<F8E4M3, F8E4M3, f16, f16, f16>(&dev);
    ran += fp8_orders::<F8E4M3, F8E4M3, f32, f32, bf16>(&dev);
    ran += fp8_orders::<F8E4M3, F8E4M3, bf16, F8E4M3, bf16>(&dev);
    ran += fp8_orders::<F8E4M3, F8E5M2, bf16, bf16, bf16>(&dev);
    ran += fp8_orders::<F8E5M2, F8E4M3, f16, F8E5M2, f16>(&dev);
    assert!(ran >= 100, "only {ran} FP8 order combinations ran");
}

fn wide_sweep<T: Input>(dev: &Device, m: usize, n: usize, k: usize, device_scalars: bool) {
    let mut h = Handles::new(dev, dev.new_stream().unwrap()).unwrap();
    let mut rng = Rng::new();
    let all = order_cases::<T>(m, n, k, device_scalars);
    for c in &all {
        wide::check::<T>(dev, &mut h, c, &mut rng);
    }
    eprintln!("{}: {} cases", T::NAME, all.len());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_mix_of_orders_in_f64_complex_and_i8() {
    let Some(dev) = gpu() else { return };
    wide_sweep::<f64>(&dev, 37, 29, 53, false);
    wide_sweep::<Complex<f32>>(&dev, 37, 29, 53, false);
    wide_sweep::<Complex<f64>>(&dev, 37, 29, 53, false);
    wide_sweep::<i8>(&dev, 36, 28, 52, false);
}

/// `alpha` and `beta` from device memory: every epilogue of `T` in both orders, C being D or
/// separate, one matmul and a batch of 3.
fn device_scalars<T: Num>(dev: &Device, acc: f64) -> (usize, usize) {
    let (mut ran, mut all) = (0, 0);
    for row in [false, true] {
        for epi in EPILOGUES {
            for (separate_c, count) in [(false, 1), (true, 3)] {
                let case = Case {
                    ta: true,
                    row,
                    separate_c,
                    count,
                    alpha: -1.5,
                    beta: 0.5,
                    device_scalars: true,
                    ..Case::new(37, 29, 23, epi)
                };
                all += 1;
                ran += usize::from(run::<T, T, T, T, T>(dev, &case, acc));
            }
        }
    }
    (ran, all)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn alpha_and_beta_from_device_memory_in_every_type() {
    let Some(dev) = gpu() else { return };
    for (name, (ran, all)) in [
        ("f32", device_scalars::<f32>(&dev, 4e-5)),
        ("f16", device_scalars::<f16>(&dev, f16::TOL * 4.0)),
        ("bf16", device_scalars::<bf16>(&dev, 8e-2)),
    ] {
        eprintln!("{name}: {ran} of {all} device-scalar combinations ran");
        assert!(ran * 10 >= all * 8, "{name}: only {ran} of {all} ran");
    }
    let tf32 = Case { tf32: true, separate_c: true, beta: 2.0, device_scalars: true, ..Case::new(40, 24, 64, "bias") };
    assert!(run::<f32, f32, f32, f32, f32>(&dev, &tf32, 2e-3));
    if fp8_device(&dev) {
        for row in [false, true] {
            let (ta, tb) = if row { (false, true) } else { (true, false) };
            let f = Fp8 { sa: 0.5, sb: 0.25, sd: Some(2.0), amax: true };
            let case = Case {
                ta,
                tb,
                row,
                beta: 0.5,
                separate_c: true,
                device_scalars: true,
                fp8: Some(f),
                ..Case::new(48, 32, 80, "bias")
            };
            assert!(run::<F8E4M3, F8E4M3, bf16, F8E4M3, bf16>(&dev, &case, 1e-2));
            let case = Case { fp8: Some(Fp8 { sd: None, amax: false, ..f }), ..case };
            assert!(run::<F8E4M3, F8E5M2, f16, f16, f16>(&dev, &case, 1e-2));
            assert!(run::<F8E4M3, F8E4M3, f32, f32, bf16>(&dev, &case, 1e-2));
        }
    }
    wide_sweep::<f64>(&dev, 37, 29, 53, true);
    wide_sweep::<Complex<f32>>(&dev, 37, 29, 53, true);
    wide_sweep::<Complex<f64>>(&dev, 37, 29, 53, true);
    wide_sweep::<i8>(&dev, 36, 28, 52, true);
}

/// A copy into `alpha` on another stream is fenced before the matmul reads it on the GPU.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_alpha_written_on_another_stream_is_fenced() {
    let Some(dev) = gpu() else { return };
    let (s1, s2) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let mut h = Handles::new(&dev, s1).unwrap();
    let n = 1 << 20;
    let (a, b) = (dev.upload(s1, &vec![1.0f32; n]).unwrap(), dev.upload(s1, &[3.0f32]).unwrap());
    let d = dev.alloc_zeros::<f32>(s1, n).unwrap();
    let (alpha, beta) = (dev.upload(s2, &[1.0f32]).unwrap(), dev.upload(s2, &[0.0f32]).unwrap());
    // A long copy ahead of the small one on s2, so an unfenced matmul would read alpha early.
    let (big, big_src) = (dev.alloc_zeros::<f32>(s2, 64 << 20).unwrap(), dev.alloc_zeros::<f32>(s2, 64 << 20).unwrap());
    let four = dev.upload(s2, &[4.0f32]).unwrap();
    big.copy_from(s2, &big_src).unwrap();
    alpha.copy_from(s2, &four).unwrap();
    let mm = cusched::blas_lt::Matmul::new(n, 1, 1, &a, &b, &d).scale_device(&alpha, &beta);
    h.blas_lt().unwrap().matmul(&mm).unwrap().wait().unwrap();
    assert!(d.download(s1).unwrap().iter().all(|&x| x == 12.0));
}

/// Bias gradients of strided batches: every gradient epilogue of `T`, every transpose, both
/// orders, batches of 2 and 3.
fn batched_grads<T: Num>(dev: &Device, acc: f64) -> (usize, usize) {
    let (mut ran, mut all) = (0, 0);
    for epi in ["bgrada", "bgradb", "drelu_bgrad", "dgelu_bgrad"] {
        for row in [false, true] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for count in [2, 3] {
                    let case = Case { ta, tb, row, pad: 1, count, beta: 0.5, ..Case::new(37, 29, 23, epi) };
                    all += 1;
                    ran += usize::from(run::<T, T, T, T, T>(dev, &case, acc));
                }
            }
        }
    }
    (ran, all)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bias_gradients_of_strided_batches() {
    let Some(dev) = gpu() else { return };
    let mut total = 0;
    for (name, (ran, all)) in [
        ("f32", batched_grads::<f32>(&dev, 4e-5)),
        ("f16", batched_grads::<f16>(&dev, f16::TOL * 4.0)),
        ("bf16", batched_grads::<bf16>(&dev, 8e-2)),
    ] {
        eprintln!("{name}: {ran} of {all} batched bias-gradient combinations ran");
        total += ran;
    }
    assert!(total >= 48, "only {total} batched bias-gradient combinations ran");
    if fp8_device(&dev) {
        for epi in ["drelu_bgrad", "dgelu_bgrad"] {
            let f = Fp8 { sa: 0.5, sb: 0.25, sd: None, amax: false };
            let case = Case { ta: true, count: 3, separate_c: true, fp8: Some(f), ..Case::new(48, 32, 80, epi) };
            run::<F8E4M3, F8E4M3, bf16, bf16, bf16>(&dev, &case, 1e-2);
            run::<F8E4M3, F8E5M2, f16, f16, f16>(&dev, &case, 1e-2);
        }
    }
}
