//! cuBLASLt matmuls in f64, `Complex<f32>`, `Complex<f64>` and i8 (into i32) on a real GPU:
//! the whole cross product of transposes (N, T, C; TN for i8), order, `beta C` and the
//! epilogues each type takes, on odd sizes, against a direct complex-f64 loop.

use crate::common::reference::blas_lt_types::{cases, check, Input};
use crate::common::{gpu, Rng};
use cusched::{Complex, Handles};

fn sweep<T: Input>(m: usize, n: usize, k: usize) {
    let Some(dev) = gpu() else { return };
    let mut h = Handles::new(&dev, dev.new_stream().unwrap()).unwrap();
    let mut rng = Rng::new();
    let all = cases::<T>(m, n, k);
    for c in &all {
        check::<T>(&dev, &mut h, c, &mut rng);
    }
    eprintln!("{}: {} cases", T::NAME, all.len());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_matmuls_every_transpose_beta_and_epilogue() {
    sweep::<f64>(37, 29, 53);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_f32_matmuls_every_transpose_and_beta() {
    sweep::<Complex<f32>>(37, 29, 53);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn complex_f64_matmuls_every_transpose_and_beta() {
    sweep::<Complex<f64>>(37, 29, 53);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn i8_matmuls_tn_into_i32() {
    sweep::<i8>(36, 28, 52);
}
