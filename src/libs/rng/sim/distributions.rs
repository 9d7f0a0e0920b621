//! The float distributions: uniforms from raw words, Box-Muller normals, the normal quantile the
//! quasi-random generators invert, and the float draw of every generator.

use super::philox::{double_block, Stream};
use super::sobol::{quasi_unit32, quasi_unit64, sobol_points};
use crate::libs::rng::{Draw, FloatKind, RandomFloat, Seed};
use crate::memory::SimMem;

const INV32: f32 = 2.328_306_4e-10; // 2^-32
const INV32_2PI: f32 = 2.328_306_4e-10 * std::f32::consts::TAU;
pub(super) const INV53: f64 = 1.0 / (1u64 << 53) as f64;

/// cuRAND's `(0, 1]` float of a word.
pub(super) fn unit32(x: u32) -> f32 {
    x as f32 * INV32 + INV32 / 2.0
}

/// cuRAND's `(0, 1]` double of a word pair.
pub(super) fn unit53(x: u32, y: u32) -> f64 {
    ((x as u64) ^ ((y as u64) << 21)) as f64 * INV53 + INV53 / 2.0
}

/// cuRAND's Box-Muller pair of two words, in `f32`.
fn box_muller32(x: u32, y: u32) -> (f32, f32) {
    let u = unit32(x);
    let v = y as f32 * INV32_2PI + INV32_2PI / 2.0;
    let s = (-2.0 * u.ln()).sqrt();
    (v.sin() * s, v.cos() * s)
}

/// cuRAND's Box-Muller pair of four words, in `f64`.
fn box_muller64(w: [u32; 4]) -> (f64, f64) {
    let u = unit53(w[0], w[1]);
    let v = ((w[2] as u64) ^ ((w[3] as u64) << 21)) as f64 * (INV53 * 2.0) + INV53;
    let s = (-2.0 * u.ln()).sqrt();
    let (sin, cos) = (v * std::f64::consts::PI).sin_cos();
    (sin * s, cos * s)
}

/// The standard normal quantile (Acklam's rational approximation, relative error below
/// 1.2e-9): the quasi-random generators' normals, by inversion as cuRAND makes them.
pub(super) fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let low = 0.024_25;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

/// A float draw: uniform in `(0, 1]` (then `x * (high - low) + low` when `range` is given, as
/// the GPU's affine kernel does), normal or log-normal.
pub(in crate::libs::rng) fn draw<T: RandomFloat>(
    seed: Seed,
    out: SimMem<T>,
    draw: Draw,
    range: Option<(f64, f64)>,
) -> impl FnOnce() + Send + 'static {
    move || {
        let n = out.read().len();
        let quasi = seed.generator.is_quasi();
        let values: Vec<T> = match T::KIND {
            FloatKind::F32 => {
                let mut v = if quasi { quasi_f32(&seed, n, draw) } else { philox_f32(&seed, n, draw) };
                if let Some((low, high)) = range {
                    let (scale, shift) = ((high - low) as f32, low as f32);
                    v.iter_mut().for_each(|x| *x = *x * scale + shift);
                }
                v.into_iter().map(T::from_f32).collect()
            }
            FloatKind::F64 => {
                let mut v = if quasi { quasi_f64(&seed, n, draw) } else { philox_f64(&seed, n, draw) };
                if let Some((low, high)) = range {
                    v.iter_mut().for_each(|x| *x = *x * (high - low) + low);
                }
                v.into_iter().map(T::from_f64).collect()
            }
        };
        out.lock().copy_from_slice(&values);
    }
}

/// `n` `f32` values of a quasi-random generator: its points as uniforms, or inverted through
/// the normal quantile.
fn quasi_f32(seed: &Seed, n: usize, draw: Draw) -> Vec<f32> {
    let g = seed.generator;
    let pts = sobol_points(seed, n);
    match draw {
        Draw::Uniform => pts.iter().map(|&x| quasi_unit32(x)).collect(),
        Draw::Normal { mean, stddev } => {
            pts.iter().map(|&x| (mean + stddev * normal_quantile(quasi_unit64(g, x))) as f32).collect()
        }
        Draw::LogNormal { mean, stddev } => {
            pts.iter().map(|&x| (mean + stddev * normal_quantile(quasi_unit64(g, x))).exp() as f32).collect()
        }
    }
}

/// `n` `f32` values of a pseudo-random generator: one word per uniform, cuRAND's Box-Muller
/// pairs (on even-aligned word pairs) for normals.
fn philox_f32(seed: &Seed, n: usize, draw: Draw) -> Vec<f32> {
    let s = Stream::of(seed);
    let word = |i: usize| s.word(seed.offset + i as u64);
    let pair = |i: usize| {
        let p = seed.offset + i as u64;
        let (a, b) = box_muller32(s.word(p & !1), s.word(p | 1));
        if p % 2 == 0 {
            a
        } else {
            b
        }
    };
    match draw {
        Draw::Uniform => (0..n).map(|i| unit32(word(i))).collect(),
        Draw::Normal { mean, stddev } => {
            let (m, sd) = (mean as f32, stddev as f32);
            (0..n).map(|i| pair(i) * sd + m).collect()
        }
        Draw::LogNormal { mean, stddev } => {
            let (m, sd) = (mean as f32, stddev as f32);
            (0..n).map(|i| (pair(i) * sd + m).exp()).collect()
        }
    }
}

/// `n` `f64` values of a quasi-random generator: its points as uniforms, or inverted through
/// the normal quantile.
fn quasi_f64(seed: &Seed, n: usize, draw: Draw) -> Vec<f64> {
    let g = seed.generator;
    let pts = sobol_points(seed, n);
    let u = pts.iter().map(|&x| quasi_unit64(g, x));
    match draw {
        Draw::Uniform => u.collect(),
        Draw::Normal { mean, stddev } => u.map(|u| mean + stddev * normal_quantile(u)).collect(),
        Draw::LogNormal { mean, stddev } => u.map(|u| (mean + stddev * normal_quantile(u)).exp()).collect(),
    }
}

/// `n` `f64` values of a pseudo-random generator: a word pair per uniform, Box-Muller pairs of
/// whole blocks for normals.
fn philox_f64(seed: &Seed, n: usize, draw: Draw) -> Vec<f64> {
    let s = Stream::of(seed);
    let at = |i: usize| double_block(&s, seed.offset, i as u64);
    let normal = |i: usize| {
        let (w, j) = at(i);
        let (a, b) = box_muller64(w);
        if j == 0 {
            a
        } else {
            b
        }
    };
    match draw {
        Draw::Uniform => (0..n)
            .map(|i| {
                let (w, j) = at(i);
                unit53(w[2 * j], w[2 * j + 1])
            })
            .collect(),
        Draw::Normal { mean, stddev } => (0..n).map(|i| normal(i) * stddev + mean).collect(),
        Draw::LogNormal { mean, stddev } => (0..n).map(|i| (normal(i) * stddev + mean).exp()).collect(),
    }
}
