//! cuBLASLt's matmul options beyond the plain problem, on the simulator: an FP8 GELU aux matrix
//! with its scale and amax, an order per matrix, `alpha` and `beta` from device memory, and bias
//! gradients of strided batches. Each is computed against the shared f64 reference (or the
//! direct complex-f64 loop for f64, complex and i8 inputs) for every type it takes, and its bad
//! input refused naming its argument with nothing recorded.

use crate::common::reference::blas_lt::{compare, AuxFp8, Case, Fp8, Num};
use crate::common::reference::blas_lt_types::{self as wide, order_cases, Input};
use crate::common::{sim, Rng};
use cusched::blas_lt::{Aux, Epilogue, Fp8Scales, LtBatch, Matmul, Order, Transpose, F8E4M3, F8E5M2};
use cusched::half::{bf16, f16};
use cusched::{Complex, Device, Error, GpuRef, Handles};

/// Runs `case` on a simulated device and compares it with the reference (`acc`: the
/// accumulation's relative error allowed); the hazard checker must have seen nothing.
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

/// Asserts `op` is refused naming `arg` (an invalid argument, or a combination cuBLASLt has no
/// kernel for), with nothing recorded on the device.
fn refused<T: std::fmt::Debug>(d: &Device, arg: &str, op: impl FnOnce() -> cusched::Result<T>) {
    let before = d.stats();
    let got = op();
    match &got {
        Err(Error::InvalidArgument { arg: a, .. }) if *a == arg => {}
        Err(Error::Unsupported { what, .. }) if what.contains(&format!("(argument `{arg}`)")) => {}
        other => panic!("expected `{arg}` refused, got {other:?}"),
    }
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "{arg}: something was recorded");
}

fn buf<T: cusched::Element>(d: &Device, n: usize) -> GpuRef<T> {
    d.alloc_zeros::<T>(d.default_stream(), n).unwrap()
}

fn fp8(sd: Option<f32>, amax: bool) -> Fp8 {
    Fp8 { sa: 0.5, sb: 0.25, sd, amax }
}

// An FP8 GELU aux matrix, its scale and its amax.

#[test]
fn fp8_gelu_aux_is_stored_scaled_in_e4m3_with_its_amax() {
    for row in [false, true] {
        let (ta, tb) = if row { (false, true) } else { (true, false) };
        for (scale, amax, sd, amax_d) in
            [(1.0f32, false, None, false), (2.0, true, Some(0.5f32), true), (0.25, true, None, false)]
        {
            let case = Case {
                ta,
                tb,
                row,
                beta: 0.5,
                separate_c: true,
                fp8: Some(fp8(sd, amax_d)),
                aux_fp8: Some(AuxFp8 { scale, amax }),
                ..Case::new(48, 32, 64, "gelu_aux")
            };
            check::<F8E4M3, F8E4M3, f16, F8E4M3, F8E4M3>(&case, 1e-2);
        }
    }
}

#[test]
fn fp8_aux_rejects_what_cublaslt_does_not_list() {
    let d = sim();
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    let (a, b) = (buf::<F8E4M3>(&d, 256), buf::<F8E4M3>(&d, 256));
    let (d8, c16, cb16) = (buf::<F8E4M3>(&d, 256), buf::<f16>(&d, 256), buf::<bf16>(&d, 256));
    let (aux8, aux16, one, empty) = (buf::<F8E4M3>(&d, 256), buf::<f16>(&d, 256), buf::<f32>(&d, 1), buf::<f32>(&d, 0));
    let scales = Fp8Scales { a: &one, b: &one, c: None, d: None };
    let mm = || Matmul::new(16, 16, 16, &a, &b, &d8).transpose(Transpose::Yes, Transpose::No).fp8(scales, false);
    let lt = h.blas_lt().unwrap();
    // The listed case passes validation.
    lt.matmul(
        &mm().with_c(&c16, None).epilogue(Epilogue::GeluAux(Aux { buf: &aux8, ld: None })).fp8_aux(Some(&one), true),
    )
    .unwrap()
    .wait()
    .unwrap();
    // An E4M3 aux beside a bf16 C.
    refused(&d, "aux", || {
        lt.matmul(&mm().with_c(&cb16, None).epilogue(Epilogue::GeluAux(Aux { buf: &aux8, ld: None })))
    });
    // An E4M3 aux read by the backward epilogue.
    refused(&d, "aux", || lt.matmul(&mm().with_c(&c16, None).epilogue(Epilogue::DGelu(Aux { buf: &aux8, ld: None }))));
    // A scale, or the amax, of an aux matrix that is not FP8.
    let f16_aux = || mm().with_c(&c16, None).epilogue(Epilogue::GeluAux(Aux { buf: &aux16, ld: None }));
    refused(&d, "aux_scale", || lt.matmul(&f16_aux().fp8_aux(Some(&one), false)));
    refused(&d, "amax_aux", || lt.matmul(&f16_aux().fp8_aux(None, true)));
    // A scale that holds no element.
    let e4m3_aux = || mm().with_c(&c16, None).epilogue(Epilogue::GeluAux(Aux { buf: &aux8, ld: None }));
    refused(&d, "aux_scale", || lt.matmul(&e4m3_aux().fp8_aux(Some(&empty), false)));
    // An FP8 aux in a matmul of other inputs, and an aux scale without an aux matrix.
    let (fa, fb, fd) = (buf::<f32>(&d, 256), buf::<f32>(&d, 256), buf::<f32>(&d, 256));
    refused(&d, "aux", || {
        lt.matmul(&Matmul::new(16, 16, 16, &fa, &fb, &fd).epilogue(Epilogue::GeluAux(Aux { buf: &aux8, ld: None })))
    });
    refused(&d, "amax_aux", || lt.matmul(&Matmul::new(16, 16, 16, &fa, &fb, &fd).fp8_aux(None, true)));
}

// An order per matrix.

fn every_order<T: Num>(epis: &[&'static str], count: usize) {
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    for &epi in epis {
                        let case = Case {
                            ta,
                            tb,
                            row,
                            row_a: Some(row_a),
                            row_b: Some(row_b),
                            pad: 2,
                            count,
                            alpha: -0.75,
                            beta: 0.5,
                            ..Case::new(13, 11, 7, epi)
                        };
                        check::<T, T, T, T, T>(&case, 1e-5);
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_computes_every_mix_of_orders_in_f32() {
    every_order::<f32>(&["default", "gelu_aux_bias", "bgrada", "bgradb"], 1);
    every_order::<f32>(&["relu_aux_bias"], 2);
}

#[test]
fn matmul_computes_every_mix_of_orders_in_f16_and_bf16() {
    every_order::<f16>(&["bias", "bgradb"], 2);
    every_order::<bf16>(&["dgelu_bgrad", "bgrada"], 1);
}

#[test]
fn matmul_computes_fp8_with_orders_that_give_the_tn_layout() {
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                // TN once the orders are folded in: A transposed exactly when column-major, B
                // when row-major.
                let case = Case {
                    ta: !row_a,
                    tb: row_b,
                    row,
                    row_a: Some(row_a),
                    row_b: Some(row_b),
                    beta: 0.5,
                    separate_c: true,
                    fp8: Some(fp8(Some(2.0), true)),
                    ..Case::new(32, 48, 16, "bias")
                };
                check::<F8E4M3, F8E5M2, bf16, F8E4M3, bf16>(&case, 1e-2);
                let case = Case { fp8: Some(fp8(None, false)), ..case };
                check::<F8E4M3, F8E4M3, f32, f32, bf16>(&case, 1e-2);
            }
        }
    }
}

fn wide_sweep<T: Input>(m: usize, n: usize, k: usize, device_scalars: bool) {
    let dev = sim();
    let mut h = Handles::new(&dev, dev.new_stream().unwrap()).unwrap();
    let mut rng = Rng::new();
    let all = order_cases::<T>(m, n, k, device_scalars);
    assert!(all.len() >= 8);
    for c in &all {
        wide::check::<T>(&dev, &mut h, c, &mut rng);
    }
    let hazards = dev.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "{hazards:?}");
}

#[test]
fn matmul_computes_every_mix_of_orders_in_f64_complex_and_i8() {
    wide_sweep::<f64>(5, 4, 3, false);
    wide_sweep::<Complex<f32>>(5, 4, 3, false);
    wide_sweep::<Complex<f64>>(5, 4, 3, false);
    wide_sweep::<i8>(8, 12, 16, false);
}

#[test]
fn matmul_rejects_orders_cublaslt_has_no_form_for() {
    let d = sim();
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    let lt = h.blas_lt().unwrap();
    let (ca, cb, cd) = (buf::<Complex<f32>>(&d, 6), buf::<Complex<f32>>(&d, 12), buf::<Complex<f32>>(&d, 8));
    let cm = || Matmul::new(2, 4, 3, &ca, &cb, &cd);
    // A conjugated complex matrix in another order than D's.
    refused(&d, "order_a", || {
        lt.matmul(&cm().transpose(Transpose::Conj, Transpose::No).orders(Order::Row, Order::Col, Order::Col))
    });
    refused(&d, "order_b", || {
        lt.matmul(&cm().transpose(Transpose::No, Transpose::Conj).orders(Order::Row, Order::Col, Order::Row))
    });
    // The same orders without a conjugate run.
    lt.matmul(&cm().transpose(Transpose::Yes, Transpose::No).orders(Order::Row, Order::Col, Order::Col))
        .unwrap()
        .wait()
        .unwrap();
    // A row-major A (2x3) of a column-major D: its ld counts columns, at least 3.
    let (a, b, dd) = (buf::<f32>(&d, 6), buf::<f32>(&d, 12), buf::<f32>(&d, 8));
    refused(&d, "lda", || {
        lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &dd).orders(Order::Row, Order::Col, Order::Col).leading(2, 3, 2))
    });
    // FP8 outside the TN layout once the orders are folded in: A row-major and transposed.
    let (a8, b8, d8, one) = (buf::<F8E4M3>(&d, 256), buf::<F8E4M3>(&d, 256), buf::<bf16>(&d, 256), buf::<f32>(&d, 1));
    let scales = Fp8Scales { a: &one, b: &one, c: None, d: None };
    let m8 = || Matmul::new(16, 16, 16, &a8, &b8, &d8).fp8(scales, false);
    refused(&d, "trans_a", || {
        lt.matmul(&m8().transpose(Transpose::Yes, Transpose::No).orders(Order::Row, Order::Col, Order::Col))
    });
    refused(&d, "trans_b", || {
        lt.matmul(&m8().transpose(Transpose::Yes, Transpose::No).orders(Order::Col, Order::Row, Order::Col))
    });
    // i8 likewise (IMMA's TN rule), refused as unsupported.
    let (i8a, i8b, i32d) = (buf::<i8>(&d, 256), buf::<i8>(&d, 256), buf::<i32>(&d, 256));
    refused(&d, "trans_a", || {
        lt.matmul(&Matmul::new(16, 16, 16, &i8a, &i8b, &i32d).transpose(Transpose::Yes, Transpose::No).orders(
            Order::Row,
            Order::Col,
            Order::Col,
        ))
    });
}

// `alpha` and `beta` from device memory.

#[test]
fn matmul_reads_alpha_and_beta_from_device_memory_in_every_type() {
    let case =
        |epi| Case { ta: true, pad: 1, alpha: -1.5, beta: 0.5, device_scalars: true, ..Case::new(17, 9, 5, epi) };
    check::<f32, f32, f32, f32, f32>(&case("gelu_bias"), 1e-5);
    check::<f32, f32, f32, f32, f32>(&Case { separate_c: true, row: true, count: 2, ..case("bias") }, 1e-5);
    check::<f16, f16, f16, f16, f16>(&case("relu_aux_bias"), 1e-5);
    check::<bf16, bf16, bf16, bf16, bf16>(&Case { separate_c: true, ..case("dgelu") }, 1e-5);
    let f8 = Case { ta: true, separate_c: true, fp8: Some(fp8(Some(0.5), true)), ..case("default") };
    check::<F8E4M3, F8E4M3, bf16, F8E4M3, bf16>(&Case { m: 32, n: 16, k: 16, ..f8 }, 1e-2);
    wide_sweep::<f64>(5, 4, 3, true);
    wide_sweep::<Complex<f32>>(5, 4, 3, true);
    wide_sweep::<Complex<f64>>(5, 4, 3, true);
    wide_sweep::<i8>(8, 12, 16, true);
}

/// A copy into `alpha` on another stream is fenced before the matmul reads it: the matmul sees
/// the copied value, and the hazard checker nothing.
#[test]
fn a_device_alpha_written_on_another_stream_is_fenced() {
    let dev = sim();
    let (s1, s2) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let mut h = Handles::new(&dev, s1).unwrap();
    let (a, b) = (dev.upload(s1, &[1.0f32, 2.0]).unwrap(), dev.upload(s1, &[3.0f32]).unwrap());
    let d = dev.alloc_zeros::<f32>(s1, 2).unwrap();
    let (alpha, beta) = (dev.upload(s2, &[1.0f32]).unwrap(), dev.upload(s2, &[0.0f32]).unwrap());
    let four = dev.upload(s2, &[4.0f32]).unwrap();
    alpha.copy_from(s2, &four).unwrap();
    let mm = Matmul::new(2, 1, 1, &a, &b, &d).scale(1.0, 0.0).scale_device(&alpha, &beta);
    h.blas_lt().unwrap().matmul(&mm).unwrap().wait().unwrap();
    assert_eq!(d.download(s1).unwrap(), vec![12.0, 24.0]);
    let hazards = dev.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "{hazards:?}");
}

#[test]
fn device_scalars_reject_wrong_lengths_aliasing_and_autotuning_into_d() {
    let d = sim();
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    let (a, b, out) = (buf::<f32>(&d, 6), buf::<f32>(&d, 12), buf::<f32>(&d, 8));
    let (one, empty) = (buf::<f32>(&d, 1), buf::<f32>(&d, 0));
    let lt = h.blas_lt().unwrap();
    let mm = || Matmul::new(2, 4, 3, &a, &b, &out);
    refused(&d, "alpha", || lt.matmul(&mm().scale_device(&empty, &one)));
    refused(&d, "beta", || lt.matmul(&mm().scale_device(&one, &empty)));
    // D written while alpha is read from it.
    refused(&d, "d", || lt.matmul(&mm().scale_device(&out, &one)));
    // Autotuning reruns the matmul: with C being D, an unknown beta could accumulate.
    refused(&d, "beta", || lt.autotune(&mm().scale_device(&one, &one), 4));
    // f64 scalars for f64 inputs: the type is A's scale type (a compile-time check); lengths
    // are checked the same way.
    let (fa, fb, fd, fe) = (buf::<f64>(&d, 6), buf::<f64>(&d, 12), buf::<f64>(&d, 8), buf::<f64>(&d, 0));
    refused(&d, "alpha", || lt.matmul(&Matmul::new(2, 4, 3, &fa, &fb, &fd).scale_device(&fe, &fe)));
}

// Bias gradients of strided batches.

#[test]
fn matmul_computes_batched_bias_gradients() {
    for epi in ["bgrada", "bgradb", "drelu_bgrad", "dgelu_bgrad"] {
        for row in [false, true] {
            let case = Case { ta: true, row, pad: 1, count: 3, beta: 0.5, ..Case::new(13, 11, 7, epi) };
            check::<f32, f32, f32, f32, f32>(&case, 1e-5);
            check::<f16, f16, f16, f16, f16>(&case, 1e-5);
            check::<bf16, bf16, bf16, bf16, bf16>(&Case { separate_c: true, ..case }, 1e-5);
        }
    }
    // FP8: the gradient epilogues cuBLASLt has FP8 kernels for (into a bf16 or f16 D).
    for epi in ["drelu_bgrad", "dgelu_bgrad"] {
        let case =
            Case { ta: true, count: 2, separate_c: true, fp8: Some(fp8(None, false)), ..Case::new(32, 16, 16, epi) };
        check::<F8E4M3, F8E4M3, bf16, bf16, bf16>(&case, 1e-2);
        check::<F8E4M3, F8E5M2, f16, f16, f16>(&case, 1e-2);
    }
}

#[test]
fn batched_bias_gradients_reject_strides_and_buffers_that_do_not_hold_every_gradient() {
    let d = sim();
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    let (a, b, out) = (buf::<f32>(&d, 6 * 3), buf::<f32>(&d, 12 * 3), buf::<f32>(&d, 8 * 3));
    let grad = buf::<f32>(&d, 4 * 3);
    let lt = h.blas_lt().unwrap();
    let mm = |bias: usize| Matmul::new(2, 4, 3, &a, &b, &out).batched(LtBatch { bias, ..LtBatch::packed(3) });
    // One shared gradient (stride 0), and a stride below one gradient's length (BGRADB: n = 4).
    refused(&d, "batch.bias", || lt.matmul(&mm(0).epilogue(Epilogue::BgradB(&grad))));
    refused(&d, "batch.bias", || lt.matmul(&mm(3).epilogue(Epilogue::BgradB(&grad))));
    // A buffer short of the last gradient.
    refused(&d, "bias_grad", || lt.matmul(&mm(5).epilogue(Epilogue::BgradB(&grad))));
    let short = buf::<f32>(&d, 5);
    refused(&d, "bias_grad", || lt.matmul(&mm(2).epilogue(Epilogue::BgradA(&short))));
    // Packed gradients fit.
    lt.matmul(&mm(4).epilogue(Epilogue::BgradB(&grad))).unwrap().wait().unwrap();
}

/// An amax is read back on the host: a matmul that asks for one is refused in a graph recording
/// with `Error::Recording`, as on a GPU, while the same matmul without it records; outside a
/// recording it runs and reports its amax.
#[test]
fn a_matmul_asking_for_an_amax_is_refused_in_a_graph_recording() {
    let d = sim();
    let (a, b) = (buf::<F8E4M3>(&d, 256), buf::<F8E4M3>(&d, 256));
    let (d8, c16, one) =
        (buf::<F8E4M3>(&d, 256), buf::<f16>(&d, 256), d.upload(d.default_stream(), &[1.0f32]).unwrap());
    for amax in [true, false] {
        let (a, b, d8, c16, one) = (a.clone(), b.clone(), d8.clone(), c16.clone(), one.clone());
        let got = cusched::Graph::record(&d, move |rec| {
            let scales = Fp8Scales { a: &one, b: &one, c: None, d: Some(&one) };
            let mm = Matmul::new(16, 16, 16, &a, &b, &d8).transpose(Transpose::Yes, Transpose::No);
            rec.handles(0)?.blas_lt()?.matmul(&mm.with_c(&c16, None).fp8(scales, amax)).map(drop)
        });
        match got {
            Err(Error::Recording { .. }) if amax => {}
            Ok(_) if !amax => {}
            other => panic!("amax {amax}: {:?}", other.err()),
        }
    }
    let mut h = Handles::new(&d, d.default_stream()).unwrap();
    let scales = Fp8Scales { a: &one, b: &one, c: None, d: Some(&one) };
    let mm = Matmul::new(16, 16, 16, &a, &b, &d8).transpose(Transpose::Yes, Transpose::No);
    let out = h.blas_lt().unwrap().matmul(&mm.with_c(&c16, None).fp8(scales, true)).unwrap().wait().unwrap();
    assert_eq!(out.amax_d, Some(0.0));
}
