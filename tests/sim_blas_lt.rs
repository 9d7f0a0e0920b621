#![cfg(feature = "cublaslt")]
//! cuBLASLt bad input on the simulator: every rejection names its argument and records nothing.

mod common;
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
fn shapes_and_leading_dimensions_that_do_not_fit_are_rejected() {
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
    // Valid input reaches the library, which the simulator does not have.
    let ok = lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d));
    assert!(matches!(ok, Err(Error::LibraryUnavailable { .. })), "{ok:?}");
}

#[test]
fn epilogues_without_their_buffers_or_with_wrong_lengths_are_rejected() {
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
    rejected(&f.d, "batch", || lt.matmul(&batched.epilogue(Epilogue::BgradA(&bias))));
    let ok = lt.matmul(&mm().epilogue(Epilogue::GeluAuxBias { bias: &bias, aux: Aux { buf: &aux, ld: None } }));
    assert!(matches!(ok, Err(Error::LibraryUnavailable { .. })), "{ok:?}");
    let ok = lt.matmul(&mm().epilogue(Epilogue::<f32>::ReluAux(ReluMask { buf: &mask, ld: None })));
    assert!(matches!(ok, Err(Error::LibraryUnavailable { .. })), "{ok:?}");
}

#[test]
fn fp8_without_scales_in_the_wrong_layout_or_on_an_old_gpu_is_rejected() {
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
    let ok = lt.matmul(&tn().fp8(scales, true));
    assert!(matches!(ok, Err(Error::LibraryUnavailable { .. })), "{ok:?}");

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
fn foreign_and_stale_buffers_are_rejected_naming_the_argument() {
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
