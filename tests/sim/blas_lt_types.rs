//! cuBLASLt matmuls in f64, `Complex<f32>`, `Complex<f64>` and i8 (into i32) on the simulator:
//! every transpose, order, `beta C` and epilogue each type takes, against a direct complex-f64
//! loop; and their bad input, each refused naming its argument with nothing recorded.

use crate::common::reference::blas_lt_types::{cases, check, Input};
use crate::common::{sim, Rng};
use cusched::blas_lt::{Epilogue, Fp8Scales, Matmul, Order, Transpose};
use cusched::{Complex, Device, Error, GpuRef, Handles};

fn sweep<T: Input>(m: usize, n: usize, k: usize) {
    let dev = sim();
    let mut h = Handles::new(&dev, dev.new_stream().unwrap()).unwrap();
    let mut rng = Rng::new();
    let all = cases::<T>(m, n, k);
    assert!(!all.is_empty());
    for c in &all {
        check::<T>(&dev, &mut h, c, &mut rng);
    }
}

#[test]
fn f64_matmuls_match_a_direct_loop() {
    sweep::<f64>(5, 4, 3);
}

#[test]
fn complex_f32_matmuls_match_a_direct_loop() {
    sweep::<Complex<f32>>(5, 4, 3);
}

#[test]
fn complex_f64_matmuls_match_a_direct_loop() {
    sweep::<Complex<f64>>(5, 4, 3);
}

#[test]
fn i8_matmuls_accumulate_exactly_in_i32() {
    sweep::<i8>(8, 12, 16);
}

#[test]
fn i8_results_wrap_to_32_bits_as_the_integer_accumulator_does() {
    let dev = sim();
    let mut h = Handles::new(&dev, dev.new_stream().unwrap()).unwrap();
    let s = h.stream();
    // 4 x 1 x 4 (m and k multiples of 4): every element of D is 4 * 127 * 127 + i32::MAX.
    let (a, b) = (dev.upload(s, &[127i8; 16]).unwrap(), dev.upload(s, &[127i8; 4]).unwrap());
    let (c, d) = (dev.upload(s, &[i32::MAX; 4]).unwrap(), dev.upload(s, &[0i32; 4]).unwrap());
    let mm = Matmul::new(4, 1, 4, &a, &b, &d).transpose(Transpose::Yes, Transpose::No).scale(1, 1).with_c(&c, None);
    h.blas_lt().unwrap().matmul(&mm).unwrap().wait().unwrap();
    assert_eq!(d.download(s).unwrap(), vec![i32::MAX.wrapping_add(4 * 127 * 127); 4]);
}

/// Asserts `op` is refused naming `arg` (as an invalid argument, or as a combination cuBLASLt
/// has no kernel for), with nothing recorded on the device.
fn refused<T: std::fmt::Debug>(d: &Device, arg: &str, op: impl FnOnce() -> cusched::Result<T>) {
    let before = d.stats();
    let got = op();
    match &got {
        Err(Error::InvalidArgument { arg: a, .. }) if *a == arg => {}
        Err(Error::Unsupported { what, .. }) if what.contains(&format!("`{arg}`")) => {}
        other => panic!("expected `{arg}` refused, got {other:?}"),
    }
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "{arg}: something was recorded");
}

fn buf<T: cusched::Element>(d: &Device, n: usize) -> GpuRef<T> {
    d.alloc_zeros::<T>(d.default_stream(), n).unwrap()
}

#[test]
fn f64_matmul_rejects_other_types_tf32_and_epilogues_outside_the_table() {
    let d = sim();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    let (a, b, out, bias) = (buf::<f64>(&d, 6), buf::<f64>(&d, 12), buf::<f64>(&d, 8), buf::<f64>(&d, 2));
    let (b32, d32) = (buf::<f32>(&d, 12), buf::<f32>(&d, 8));
    let lt = h.blas_lt().unwrap();
    refused(&d, "b", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b32, &out)));
    refused(&d, "d", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d32)));
    refused(&d, "tf32", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).tf32(true)));
    refused(&d, "epilogue", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::GeluBias(&bias))));
    refused(&d, "epilogue", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::<f64>::Gelu)));
    let bias32 = buf::<f32>(&d, 2);
    refused(&d, "bias", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::Bias(&bias32))));
    lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::ReluBias(&bias))).unwrap().wait().unwrap();
}

#[test]
fn complex_f32_matmul_rejects_other_types_and_any_epilogue() {
    let d = sim();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    type C32 = Complex<f32>;
    let (a, b, out, bias) = (buf::<C32>(&d, 6), buf::<C32>(&d, 12), buf::<C32>(&d, 8), buf::<C32>(&d, 2));
    let (b64, d32) = (buf::<Complex<f64>>(&d, 12), buf::<f32>(&d, 8));
    let lt = h.blas_lt().unwrap();
    refused(&d, "b", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b64, &out)));
    refused(&d, "d", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &d32)));
    refused(&d, "epilogue", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::Bias(&bias))));
    refused(&d, "epilogue", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).epilogue(Epilogue::<C32>::Relu)));
    refused(&d, "tf32", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).tf32(true)));
    lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).transpose(Transpose::Conj, Transpose::No).leading(3, 3, 2))
        .unwrap()
        .wait()
        .unwrap();
}

#[test]
fn complex_f64_matmul_rejects_other_types_fp8_scales_and_any_epilogue() {
    let d = sim();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    type C64 = Complex<f64>;
    let (a, b, out, aux) = (buf::<C64>(&d, 6), buf::<C64>(&d, 12), buf::<C64>(&d, 8), buf::<C64>(&d, 8));
    let (c32, scale) = (buf::<Complex<f32>>(&d, 8), buf::<f32>(&d, 1));
    let lt = h.blas_lt().unwrap();
    refused(&d, "c", || lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).with_c(&c32, None)));
    refused(&d, "fp8", || {
        lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).fp8(Fp8Scales { a: &scale, b: &scale, c: None, d: None }, false))
    });
    refused(&d, "epilogue", || {
        lt.matmul(
            &Matmul::new(2, 4, 3, &a, &b, &out)
                .epilogue(Epilogue::GeluAux(cusched::blas_lt::Aux { buf: &aux, ld: None })),
        )
    });
    refused(&d, "lda", || {
        lt.matmul(&Matmul::new(2, 4, 3, &a, &b, &out).transpose(Transpose::Conj, Transpose::No).leading(2, 3, 2))
    });
}

#[test]
fn i8_matmul_rejects_layouts_shapes_and_types_outside_the_imma_rules() {
    let d = sim();
    let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    let (a, b, out) = (buf::<i8>(&d, 64), buf::<i8>(&d, 64), buf::<i32>(&d, 64));
    let (d8, a32, bias) = (buf::<i8>(&d, 64), buf::<i32>(&d, 64), buf::<i32>(&d, 8));
    let lt = h.blas_lt().unwrap();
    let tn = (Transpose::Yes, Transpose::No);
    // Not TN.
    refused(&d, "trans_a", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out)));
    refused(&d, "trans_b", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(Transpose::Yes, Transpose::Yes)));
    // Row-major: TN in the column-major problem is trans_a = No, trans_b = Yes.
    refused(&d, "trans_b", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(tn.0, tn.1).order(Order::Row)));
    // m and k multiples of 4 (the row-major m is the column-major n, unconstrained).
    refused(&d, "m", || lt.matmul(&Matmul::new(6, 4, 8, &a, &b, &out).transpose(tn.0, tn.1)));
    refused(&d, "k", || lt.matmul(&Matmul::new(4, 4, 6, &a, &b, &out).transpose(tn.0, tn.1)));
    refused(&d, "n", || {
        lt.matmul(&Matmul::new(4, 6, 8, &a, &b, &out).transpose(Transpose::No, Transpose::Yes).order(Order::Row))
    });
    // Leading dimensions multiples of 4.
    refused(&d, "lda", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(tn.0, tn.1).leading(10, 8, 4)));
    refused(&d, "ldd", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(tn.0, tn.1).leading(8, 8, 6)));
    // Types: an i32 D, i8 inputs.
    refused(&d, "d", || lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &d8).transpose(tn.0, tn.1)));
    refused(&d, "a", || lt.matmul(&Matmul::new(4, 4, 8, &a32, &a32, &out).transpose(tn.0, tn.1)));
    // No epilogue.
    refused(&d, "epilogue", || {
        lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(tn.0, tn.1).epilogue(Epilogue::Bias(&bias)))
    });
    lt.matmul(&Matmul::new(4, 4, 8, &a, &b, &out).transpose(tn.0, tn.1)).unwrap().wait().unwrap();
    // The column-major n (the row-major m) need not be a multiple of 4.
    lt.matmul(&Matmul::new(4, 5, 8, &a, &b, &out).transpose(tn.0, tn.1)).unwrap().wait().unwrap();
}
