//! CPU reference of the fused matmul + bias + activation graph in f64, and the runner the
//! simulator's and the GPU's tests share.

use super::cudnn::{close, from_el, round, to_el, Bench, El};
use crate::common::{random, Rng};
use cusched::cudnn::{MatmulActivation, MatmulBiasAct};

/// `erf` by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7): another method than
/// the simulator's.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    x.signum() * (1.0 - poly * (-x * x).exp())
}

fn act(a: MatmulActivation, x: f64) -> f64 {
    match a {
        MatmulActivation::Identity => x,
        MatmulActivation::Relu => x.max(0.0),
        MatmulActivation::Gelu => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        MatmulActivation::GeluTanh => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
    }
}

/// `act(a·b + bias)` per matrix of the batch, row-major.
pub fn matmul_bias_act(mm: &MatmulBiasAct, a: &[f64], b: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let mut c = vec![0.0; mm.batch * mm.m * mm.n];
    for p in 0..mm.batch {
        for i in 0..mm.m {
            for l in 0..mm.k {
                let av = a[(p * mm.m + i) * mm.k + l];
                for j in 0..mm.n {
                    c[(p * mm.m + i) * mm.n + j] += av * b[(p * mm.k + l) * mm.n + j];
                }
            }
        }
    }
    for (idx, v) in c.iter_mut().enumerate() {
        *v = act(mm.act, *v + bias.map_or(0.0, |b| b[idx % mm.n]));
    }
    c
}

/// Every activation, with and without a bias, against the reference.
pub fn check_matmul_act<T: El>(b: &mut Bench<'_>, shape: (usize, usize, usize, usize), rng: &mut Rng) {
    let (batch, m, n, k) = shape;
    let acts = [MatmulActivation::Identity, MatmulActivation::Relu, MatmulActivation::Gelu, MatmulActivation::GeluTanh];
    for a_fn in acts {
        for with_bias in [true, false] {
            let mm = MatmulBiasAct { batch, m, n, k, act: a_fn };
            let what = format!("{} {mm:?} bias {with_bias}", T::NAME);
            let av = round::<T>(&random(rng, batch * m * k));
            let bv = round::<T>(&random(rng, batch * k * n));
            let biasv = round::<T>(&random(rng, n));
            let up = |v: &[f64]| b.d.upload(b.s, &to_el::<T>(v)).unwrap();
            let (ba, bb, bbias) = (up(&av), up(&bv), up(&biasv));
            let bc = b.d.upload(b.s, &vec![T::cast(f64::NAN); batch * m * n]).unwrap();
            let dnn = b.h.cudnn().unwrap();
            dnn.matmul_bias_act(&mm, &ba, &bb, with_bias.then_some(&bbias), &bc).unwrap().wait().unwrap();
            let want = matmul_bias_act(&mm, &av, &bv, with_bias.then_some(&biasv[..]));
            let got = from_el(&bc.download(b.s).unwrap());
            if T::NAME == "f32" {
                tf32_close(&mm, &av, &bv, &got, &want, &what);
            } else {
                close(&got, &want, T::REL * b.slack, &what);
            }
        }
    }
}

/// f32 matmuls may run on TF32 tensor cores, which keep 10 bits of each input's mantissa: each
/// product is then off by up to 2^-9 of its size (either rounding), so an element whose terms
/// cancel is held to that bound over the sum of the terms' sizes (times the activations'
/// largest slope, under 1.13), not to a tolerance relative to the result.
fn tf32_close(mm: &MatmulBiasAct, a: &[f64], b: &[f64], got: &[f64], want: &[f64], what: &str) {
    let (aa, ba): (Vec<f64>, Vec<f64>) = (a.iter().map(|v| v.abs()).collect(), b.iter().map(|v| v.abs()).collect());
    let plain = MatmulBiasAct { act: MatmulActivation::Identity, ..*mm };
    let size = matmul_bias_act(&plain, &aa, &ba, None);
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(&size).enumerate() {
        let tol = 1.13 * 2f64.powi(-9) * m + 1e-5 * w.abs() + 1e-6;
        assert!((g - w).abs() <= tol, "{what}: element {i} is {g}, want {w} (TF32 bound {tol})");
    }
}
