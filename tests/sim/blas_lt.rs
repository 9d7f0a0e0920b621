//! cuBLASLt bad input on the simulator: every rejection names its argument and records nothing.

use cusched::blas_lt::{Aux, Epilogue, Fp8Scales, LtBatch, Matmul, Order, ReluMask, Transpose, F8E4M3, F8E5M2};
use cusched::half::bf16;
use cusched::{Device, Error, GpuRef, Handles, SimConfig};

fn sim(cc: (u32, u32)) -> Device {
    Device::sim(SimConfig { compute_capability: cc, ..SimConfig::default() }).unwrap()
}

fn buf<T: cusched::Element>(d: &Device, n: usize) -> GpuRef<T> {
    d.alloc_zeros::<T>(d.default_stream(), n).unwrap()
}

/// Asserts `got` is `InvalidArgument` naming `arg` (or the given other error), and that nothing
/// was recorded on the device.
fn rejected<T: std::fmt::Debug>(d: &Device, arg: &str, op: impl FnOnce() -> cusched::Result<T>) {
    let before = d.stats();
    let got = op();
    match &got {
        Err(Error::InvalidArgument { arg: a, .. }) if *a == arg => {}
        other => panic!("expected `{arg}` rejected, got {other:?}"),
    }
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "{arg}: something was recorded");
}

struct F {
    d: Device,
    h: Handles,
}

fn fixture(cc: (u32, u32)) -> F {
    let d = sim(cc);
    let h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    F { d, h }
}

#[test]
fn matmul_rejects_shapes_and_leading_dimensions_that_do_not_fit() {
    let mut f = fixture((9, 0));
    let (a, b, d) = (buf::<f32>(&f.d, 6), buf::<f32>(&f.d, 12), buf::<f32>(&f.d, 8));
    let lt = f.h.blas_lt().unwrap();
    rejected(&f.d, "m", || lt.matmul(&Matmul::new(0, 4, 3, &a, &b, &d)));
    rejected(&f.d, "a", || lt.matmul(&Matmul::new(3, 4, 3, &a, &b, &d)));
    rejected(&f.d, "lda", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).leading(1, 3, 2)));
    rejected(&f.d, "b", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).leading(2, 4, 2)));
    rejected(&f.d, "d", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).leading(2, 3, 3)));
    rejected(&f.d, "d", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &b)));
    // Row-major: A is 2x3 with ld >= 3 (the columns).
    rejected(&f.d, "lda", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).order(Order::Row).leading(2, 4, 4)));
    rejected(&f.d, "batch.d", || {
        lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).batched(LtBatch { d: Some(4), ..LtBatch::packed(2) }))
    });
    rejected(&f.d, "a", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).batched(LtBatch::packed(2))));
    let (ha, hb, hd) = (buf::<bf16>(&f.d, 6), buf::<bf16>(&f.d, 12), buf::<bf16>(&f.d, 8));
    rejected(&f.d, "tf32", || lt.matmul(&Matmul::new(2, 4, 3, &ha, &hb, &hd).tf32(true)));
    // Valid input runs (on the simulator, computed on the host).
    let ok = lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d));
    ok.unwrap().wait().unwrap();
}

#[test]
fn matmul_rejects_epilogues_without_their_buffers_or_with_wrong_lengths() {
    let mut f = fixture((9, 0));
    let (a, b, d) = (buf::<f32>(&f.d, 6), buf::<f32>(&f.d, 12), buf::<f32>(&f.d, 8));
    let short = buf::<f32>(&f.d, 1);
    let bias = buf::<f32>(&f.d, 2);
    let lt = f.h.blas_lt().unwrap();
    let mm = || Matmul::new(2, 4, 3, &a, &b, &d);
    rejected(&f.d, "bias", || lt.matmul(&mm().epilogue(Epilogue::Bias(&short))));
    rejected(&f.d, "bias", || lt.matmul(&mm().epilogue(Epilogue::GeluBias(&d))));
    // BGRADB has one entry per column of op(B): n = 4.
    rejected(&f.d, "bias_grad", || lt.matmul(&mm().epilogue(Epilogue::BgradB(&bias))));
    let bias16 = buf::<bf16>(&f.d, 2);
    rejected(&f.d, "bias", || lt.matmul(&mm().epilogue(Epilogue::Bias(&bias16))));
    // ReLU masks are bit-masks: ld a multiple of 128 bits, 16 bytes per column here.
    let mask = buf::<u8>(&f.d, 16 * 4);
    rejected(&f.d, "mask.ld", || {
        lt.matmul(&mm().epilogue(Epilogue::<f32>::ReluAux(ReluMask { buf: &mask, ld: Some(64) })))
    });
    let mask_short = buf::<u8>(&f.d, 63);
    rejected(&f.d, "mask", || {
        lt.matmul(&mm().epilogue(Epilogue::<f32>::DRelu(ReluMask { buf: &mask_short, ld: None })))
    });
    let aux = buf::<f32>(&f.d, 8 * 4);
    rejected(&f.d, "aux.ld", || lt.matmul(&mm().epilogue(Epilogue::GeluAux(Aux { buf: &aux, ld: Some(4) }))));
    let aux_short = buf::<f32>(&f.d, 8 * 3);
    rejected(&f.d, "aux", || lt.matmul(&mm().epilogue(Epilogue::DGelu(Aux { buf: &aux_short, ld: None }))));
    let d2 = buf::<f32>(&f.d, 16);
    let batched = Matmul::new(2, 4, 3, &a, &b, &d2).batched(LtBatch { a: Some(0), b: Some(0), ..LtBatch::packed(2) });
    // A bias gradient per matmul needs a stride of at least one gradient; the default is 0.
    rejected(&f.d, "batch.bias", || lt.matmul(&batched.epilogue(Epilogue::BgradA(&bias))));
    let ok = lt.matmul(&mm().epilogue(Epilogue::GeluAuxBias { bias: &bias, aux: Aux { buf: &aux, ld: None } }));
    ok.unwrap().wait().unwrap();
    let ok = lt.matmul(&mm().epilogue(Epilogue::<f32>::ReluAux(ReluMask { buf: &mask, ld: None })));
    ok.unwrap().wait().unwrap();
}

#[test]
fn matmul_rejects_fp8_without_scales_in_the_wrong_layout_or_on_an_old_gpu() {
    let mut f = fixture((9, 0));
    let (a, b) = (buf::<F8E4M3>(&f.d, 16 * 16), buf::<F8E4M3>(&f.d, 16 * 16));
    let d = buf::<bf16>(&f.d, 16 * 16);
    let s = buf::<f32>(&f.d, 1);
    let scales = Fp8Scales { a: &s, b: &s, c: None, d: None };
    let t = Transpose::Yes;
    let lt = f.h.blas_lt().unwrap();
    let tn = || Matmul::new(16, 16, 16, &a, &b, &d).transpose(t, Transpose::No);
    rejected(&f.d, "fp8", || lt.matmul(&tn()));
    rejected(&f.d, "trans_a", || lt.matmul(&Matmul::new(16, 16, 16, &a, &b, &d).fp8(scales, false)));
    rejected(&f.d, "fp8.d", || lt.matmul(&tn().fp8(Fp8Scales { d: Some(&s), ..scales }, false)));
    let empty = buf::<f32>(&f.d, 0);
    rejected(&f.d, "fp8.a", || lt.matmul(&tn().fp8(Fp8Scales { a: &empty, ..scales }, false)));
    let e5 = buf::<F8E5M2>(&f.d, 256);
    rejected(&f.d, "b", || {
        lt.matmul(&Matmul::new(16, 16, 16, &e5, &e5, &d).transpose(t, Transpose::No).fp8(scales, false))
    });
    let d8 = buf::<F8E4M3>(&f.d, 256);
    rejected(&f.d, "c", || lt.matmul(&tn().fp8(scales, false).epilogue::<bf16>(Epilogue::Default).with_c(&d8, None)));
    rejected(&f.d, "c", || {
        lt.matmul(&Matmul::new(16, 16, 16, &a, &b, &d8).transpose(t, Transpose::No).fp8(scales, true))
    });
    let d4 = buf::<f32>(&f.d, 4);
    rejected(&f.d, "amax_d", || lt.matmul(&Matmul { amax_d: true, ..Matmul::new(2, 2, 2, &s, &s, &d4) }));
    // cuBLASLt computes D's amax for an FP8 D only: a bf16 D with amax asked for failed inside
    // the heuristic with CUBLAS_STATUS_INVALID_VALUE.
    rejected(&f.d, "amax_d", || lt.matmul(&tn().fp8(scales, true)));
    let ok = lt.matmul(&tn().fp8(scales, false));
    ok.unwrap().wait().unwrap();

    // An Ampere GPU (8.0) has no FP8 tensor cores.
    let mut old = fixture((8, 0));
    let (a, b, d, s) =
        (buf::<F8E4M3>(&old.d, 256), buf::<F8E4M3>(&old.d, 256), buf::<bf16>(&old.d, 256), buf::<f32>(&old.d, 1));
    let scales = Fp8Scales { a: &s, b: &s, c: None, d: None };
    let got = old
        .h
        .blas_lt()
        .unwrap()
        .matmul(&Matmul::new(16, 16, 16, &a, &b, &d).transpose(t, Transpose::No).fp8(scales, false));
    rejected(&old.d, "a", || got);
}

#[test]
fn matmul_takes_fp8_fast_accumulation_on_fp8_inputs_only() {
    let mut f = fixture((9, 0));
    let s = f.h.stream();
    let mut rng = crate::common::Rng::new();
    let q: Vec<F8E4M3> = (0..256).map(|_| F8E4M3(rng.below(0x78) as u8 | (rng.below(2) as u8) << 7)).collect();
    let (a, b) = (f.d.upload(s, &q).unwrap(), f.d.upload(s, &q[..].iter().rev().copied().collect::<Vec<_>>()).unwrap());
    let (d_slow, d_fast) = (buf::<bf16>(&f.d, 256), buf::<bf16>(&f.d, 256));
    let one = f.d.upload(s, &[1.0f32]).unwrap();
    let scales = Fp8Scales { a: &one, b: &one, c: None, d: None };
    let (x, y, out) = (buf::<f32>(&f.d, 6), buf::<f32>(&f.d, 12), buf::<f32>(&f.d, 8));
    let (hx, hy, hout) = (buf::<bf16>(&f.d, 6), buf::<bf16>(&f.d, 12), buf::<bf16>(&f.d, 8));
    let lt = f.h.blas_lt().unwrap();
    rejected(&f.d, "fp8_fast_accum", || lt.matmul(&Matmul::new(2, 4, 3, &x, &y, &out).fp8_fast_accum(true)));
    rejected(&f.d, "fp8_fast_accum", || lt.matmul(&Matmul::new(2, 4, 3, &hx, &hy, &hout).fp8_fast_accum(true)));
    let tn = |d| Matmul::new(16, 16, 16, &a, &b, d).transpose(Transpose::Yes, Transpose::No).fp8(scales, false);
    assert!(!tn(&d_slow).fp8_fast_accum, "off by default");
    lt.matmul(&tn(&d_slow)).unwrap().wait().unwrap();
    lt.matmul(&tn(&d_fast).fp8_fast_accum(true)).unwrap().wait().unwrap();
    // The simulator accumulates in f32 either way.
    assert_eq!(d_fast.download(s).unwrap(), d_slow.download(s).unwrap());
    assert_eq!(lt.plans_made(), 0);
}

#[test]
fn matmul_rejects_algorithms_the_simulator_does_not_have() {
    let mut f = fixture((9, 0));
    let (a, b, d) = (buf::<f32>(&f.d, 6), buf::<f32>(&f.d, 12), buf::<f32>(&f.d, 8));
    let lt = f.h.blas_lt().unwrap();
    let mm = || Matmul::new(2, 4, 3, &a, &b, &d);
    rejected(&f.d, "algorithm", || lt.matmul(&mm().algorithm(1)));
    rejected(&f.d, "algorithm", || lt.matmul(&mm().algorithm(64)));
    rejected(&f.d, "max", || lt.candidates(&mm(), 0));
    rejected(&f.d, "max", || lt.candidates(&mm(), 65));
    rejected(&f.d, "a", || lt.candidates(&Matmul::new(2, 4, 4, &a, &b, &d), 4));
    let one = lt.candidates(&mm(), 8).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].index, 0);
    lt.matmul(&mm().algorithm(0)).unwrap().wait().unwrap();
}

#[test]
fn autotune_rejects_an_accumulating_c_and_a_chosen_algorithm() {
    let mut f = fixture((9, 0));
    let s = f.h.stream();
    let (a, b) = (f.d.upload(s, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(), f.d.upload(s, &[1.0f32; 12]).unwrap());
    let (d, c) = (buf::<f32>(&f.d, 8), f.d.upload(s, &[1.0f32; 8]).unwrap());
    let lt = f.h.blas_lt().unwrap();
    let mm = || Matmul::new(2, 4, 3, &a, &b, &d);
    rejected(&f.d, "beta", || lt.autotune(&mm().scale(1.0, 1.0), 4));
    rejected(&f.d, "algorithm", || lt.autotune(&mm().algorithm(0), 4));
    rejected(&f.d, "max", || lt.autotune(&mm(), 0));
    // With a separate C the runs repeat: D = A B + C, whatever the number of runs.
    let t = lt.autotune(&mm().scale(1.0, 1.0).with_c(&c, None), 4).unwrap();
    assert_eq!((t.best, t.times.len()), (0, 1));
    assert_eq!(d.download(s).unwrap(), vec![10.0, 13.0, 10.0, 13.0, 10.0, 13.0, 10.0, 13.0]);
    assert_eq!(lt.plans_made(), 0);
}

#[test]
fn matmul_rejects_foreign_and_stale_buffers() {
    let mut f = fixture((9, 0));
    let other = sim((9, 0));
    let a = buf::<f32>(&f.d, 6);
    let foreign = buf::<f32>(&other, 12);
    let bias_foreign = buf::<f32>(&other, 2);
    f.d.advance_generation();
    let fresh_b = buf::<f32>(&f.d, 12);
    let fresh_d = buf::<f32>(&f.d, 8);
    let fresh_out = buf::<f32>(&f.d, 8);
    let lt = f.h.blas_lt().unwrap();
    let before = f.d.stats();
    let got = lt.matmul(&Matmul::new(2, 4, 3, &fresh_d, &foreign, &fresh_b));
    assert!(matches!(&got, Err(Error::ForeignDevice { what, .. }) if what.contains("`b`")), "{got:?}");
    let got = lt.matmul(&Matmul::new(2, 4, 3, &fresh_d, &fresh_b, &fresh_out).epilogue(Epilogue::Bias(&bias_foreign)));
    assert!(matches!(&got, Err(Error::ForeignDevice { what, .. }) if what.contains("`bias`")), "{got:?}");
    let got = lt.matmul(&Matmul::new(2, 4, 3, &a, &fresh_b, &fresh_d));
    assert!(matches!(&got, Err(Error::Stale { what, .. }) if what.contains("`a`")), "{got:?}");
    let after = f.d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a rejected op recorded something");
}

/// Every FP8 combination NVIDIA's cublasLtMatmul table leaves out is a typed error naming the
/// argument, before anything is recorded.
#[test]
fn matmul_rejects_fp8_combinations_cublaslt_does_not_support() {
    let mut f = fixture((9, 0));
    let (m, n, k) = (64, 48, 96);
    let (a, b) = (buf::<F8E4M3>(&f.d, k * m), buf::<F8E4M3>(&f.d, k * n));
    let b5 = buf::<F8E5M2>(&f.d, k * n);
    let (d16, c16) = (buf::<bf16>(&f.d, m * n), buf::<bf16>(&f.d, m * n));
    let (bias16, aux16) = (buf::<bf16>(&f.d, m), buf::<bf16>(&f.d, m * n));
    let (d32, d8, d5) = (buf::<f32>(&f.d, m * n), buf::<F8E4M3>(&f.d, m * n), buf::<F8E5M2>(&f.d, m * n));
    let s = buf::<f32>(&f.d, 1);
    let scales = Fp8Scales { a: &s, b: &s, c: None, d: None };
    let t = Transpose::Yes;
    let lt = f.h.blas_lt().unwrap();
    macro_rules! tn {
        ($d:expr) => {
            Matmul::new(m, n, k, &a, &b, $d).transpose(t, Transpose::No).fp8(scales, false)
        };
    }

    // The case: E4M3 x E4M3, bf16 C and D, bias, amax of D asked for.
    rejected(&f.d, "amax_d", || {
        lt.matmul(&Matmul { amax_d: true, ..tn!(&d16).with_c(&c16, None).epilogue(Epilogue::Bias(&bias16)) })
    });
    // cuBLASLt scales C only when C is FP8, which no FP8 row of the table has.
    rejected(&f.d, "fp8.c", || lt.matmul(&tn!(&d16).fp8(Fp8Scales { c: Some(&s), ..scales }, false)));
    // An E5M2 D needs an E5M2 input.
    rejected(&f.d, "d", || lt.matmul(&tn!(&d5).epilogue::<bf16>(Epilogue::Default).with_c(&c16, None)));
    let ok = lt.matmul(
        &Matmul::new(m, n, k, &a, &b5, &d5)
            .transpose(t, Transpose::No)
            .fp8(scales, true)
            .epilogue::<bf16>(Epilogue::Default)
            .with_c(&c16, None),
    );
    ok.unwrap().wait().unwrap();
    // A GELU aux matrix of another type than D: only GELU_AUX with an E4M3 D from E4M3 inputs.
    let aux = |buf| Aux { buf, ld: None };
    rejected(&f.d, "aux", || {
        lt.matmul(&tn!(&d8).epilogue(Epilogue::GeluAuxBias { bias: &bias16, aux: aux(&aux16) }).with_c(&c16, None))
    });
    rejected(&f.d, "aux", || lt.matmul(&tn!(&d8).epilogue(Epilogue::DGelu(aux(&aux16))).with_c(&c16, None)));
    rejected(&f.d, "aux", || lt.matmul(&tn!(&d32).epilogue(Epilogue::GeluAux(aux(&aux16)))));
    let ok = lt.matmul(&tn!(&d8).epilogue(Epilogue::GeluAux(aux(&aux16))).with_c(&c16, None));
    ok.unwrap().wait().unwrap();
}

/// The FP8 gradient epilogues that cuBLASLt has no kernel for on sm_90 (the GPU sweep in
/// `gpu_blas_lt_fp8.rs` found them accepted, then failing in the heuristic) are rejected as an
/// invalid `epilogue` before anything is recorded; their bf16 forms still pass validation.
#[test]
fn matmul_rejects_fp8_gradient_epilogues_without_a_kernel() {
    let mut f = fixture((9, 0));
    let (m, n, k) = (64, 48, 96);
    let (a, b) = (buf::<F8E4M3>(&f.d, k * m), buf::<F8E4M3>(&f.d, k * n));
    let (d16, c16, d32, d8) =
        (buf::<bf16>(&f.d, m * n), buf::<bf16>(&f.d, m * n), buf::<f32>(&f.d, m * n), buf::<F8E4M3>(&f.d, m * n));
    let (grad_m, grad_n) = (buf::<bf16>(&f.d, m), buf::<bf16>(&f.d, n));
    let mask = buf::<u8>(&f.d, 128 / 8 * n);
    let s = buf::<f32>(&f.d, 1);
    let scales = Fp8Scales { a: &s, b: &s, c: None, d: None };
    let lt = f.h.blas_lt().unwrap();
    macro_rules! tn {
        ($d:expr) => {
            Matmul::new(m, n, k, &a, &b, $d).transpose(Transpose::Yes, Transpose::No).fp8(scales, false)
        };
    }
    let relu = || ReluMask { buf: &mask, ld: None };
    rejected(&f.d, "epilogue", || lt.matmul(&tn!(&d16).epilogue(Epilogue::BgradA(&grad_m))));
    rejected(&f.d, "epilogue", || lt.matmul(&tn!(&d16).epilogue(Epilogue::BgradB(&grad_n))));
    rejected(&f.d, "epilogue", || lt.matmul(&tn!(&d8).epilogue::<bf16>(Epilogue::DRelu(relu())).with_c(&c16, None)));
    rejected(&f.d, "epilogue", || {
        lt.matmul(&tn!(&d8).epilogue(Epilogue::DReluBgrad { mask: relu(), bias_grad: &grad_m }).with_c(&c16, None))
    });
    rejected(&f.d, "epilogue", || {
        lt.matmul(&tn!(&d32).epilogue(Epilogue::DReluBgrad { mask: relu(), bias_grad: &grad_m }))
    });
    let ok = lt.matmul(&tn!(&d16).epilogue(Epilogue::DReluBgrad { mask: relu(), bias_grad: &grad_m }));
    ok.unwrap().wait().unwrap();
}

/// An epilogue output may not be another operand: the library reads one while writing the
/// other.
#[test]
fn matmul_rejects_epilogue_outputs_aliasing_another_operand() {
    let mut f = fixture((9, 0));
    let (a, b, d) = (buf::<f32>(&f.d, 6), buf::<f32>(&f.d, 12), buf::<f32>(&f.d, 8));
    let c = buf::<f32>(&f.d, 8 * 4);
    let shared = buf::<f32>(&f.d, 8 * 4);
    let lt = f.h.blas_lt().unwrap();
    let mm = || Matmul::new(2, 4, 3, &a, &b, &d);
    let aux = |buf| Aux { buf, ld: None };
    // aux = bias
    rejected(&f.d, "aux", || lt.matmul(&mm().epilogue(Epilogue::GeluAuxBias { bias: &shared, aux: aux(&shared) })));
    // bias gradient = aux
    rejected(&f.d, "bias_grad", || {
        lt.matmul(&mm().epilogue(Epilogue::DGeluBgrad { aux: aux(&shared), bias_grad: &shared }))
    });
    // aux = a separate C
    rejected(&f.d, "aux", || lt.matmul(&mm().with_c(&c, None).epilogue(Epilogue::GeluAux(aux(&c)))));
    // bias gradient = a separate C
    rejected(&f.d, "bias_grad", || lt.matmul(&mm().with_c(&c, None).epilogue(Epilogue::BgradA(&c))));
    // D = a scale of an FP8 matmul with an f32 D.
    let (a8, b8) = (buf::<F8E4M3>(&f.d, 16 * 16), buf::<F8E4M3>(&f.d, 16 * 16));
    let d32 = buf::<f32>(&f.d, 16 * 16);
    let s = buf::<f32>(&f.d, 1);
    rejected(&f.d, "d", || {
        lt.matmul(
            &Matmul::new(16, 16, 16, &a8, &b8, &d32)
                .transpose(Transpose::Yes, Transpose::No)
                .fp8(Fp8Scales { a: &d32, b: &s, c: None, d: None }, false),
        )
    });
    let ok = lt.matmul(&mm().with_c(&c, None).epilogue(Epilogue::GeluAux(aux(&shared))));
    ok.unwrap().wait().unwrap();
}

/// One buffer as both factors (`D = A·A`), which cuBLASLt allows: the simulator computes it
/// (it took both read locks at once and hung).
#[test]
fn a_matmul_of_a_matrix_with_itself() {
    let done = crate::common::bounded(std::time::Duration::from_secs(20), || {
        let mut f = fixture((9, 0));
        let s = f.h.stream();
        // Column-major [[1, 3], [2, 4]]; its square is [[7, 15], [10, 22]].
        let a = f.d.upload(s, &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let d = buf::<f32>(&f.d, 4);
        f.h.blas_lt().unwrap().matmul(&Matmul::new(2, 2, 2, &a, &a, &d)).unwrap().wait().unwrap();
        d.download(s).unwrap()
    });
    assert_eq!(done, [7.0, 10.0, 15.0, 22.0]);
}

/// An autotune on a stream a graph recording holds is refused with [`Error::Recording`]: its
/// timed runs would be captured, not run, and its choice would outlive the recording.
#[test]
fn autotune_is_refused_in_a_graph_recording() {
    let f = fixture((9, 0));
    let s = f.h.stream();
    let (a, b, d) = (f.d.upload(s, &[1.0f32; 6]).unwrap(), f.d.upload(s, &[1.0f32; 12]).unwrap(), buf::<f32>(&f.d, 8));
    let err = cusched::Graph::record(&f.d, move |rec| {
        rec.handles(0)?.blas_lt()?.autotune(&Matmul::new(2, 4, 3, &a, &b, &d), 4).map(drop)
    });
    assert!(matches!(err, Err(Error::Recording { .. })), "{:?}", err.err());
}
