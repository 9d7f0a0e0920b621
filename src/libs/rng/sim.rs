//! The simulator's cuRAND: every generator and distribution computed on the host.
//!
//! - Philox4x32-10 follows cuRAND's legacy ordering (which cusched sets on the GPU too): value
//!   `p` of the sequence (`p` = offset + index) is word `p % 4` of the Philox block at
//!   subsequence `(p / 4) % 65536`, counter `(p / 4) / 65536`, keyed by the seed's two halves.
//!   Raw bits and `f32` uniforms are bit for bit cuRAND's; `f64` uniforms take a word pair per
//!   value, normals and log-normals cuRAND's Box-Muller pairs, and agree with the GPU to its
//!   math functions' rounding (the GPU uses fast sine and cosine).
//! - XORWOW (the default), MRG32k3a and MTGP32 produce their distributions from a Philox stream
//!   keyed by the seed and the generator, not cuRAND's bits (their host-API orders interleave
//!   thousands of skipped-ahead subsequences).
//! - Sobol32 and Sobol64 are the Sobol sequences of the Joe and Kuo direction numbers (the
//!   family cuRAND uses) for the first dimensions, gray-code ordered from point 0, dimension by
//!   dimension as cuRAND lays them out; whether they equal cuRAND's points is not checked
//!   (cuRAND's own direction vectors come from the library). Dimensions past the table reuse a
//!   table dimension with a digital shift, and the scrambled forms use digital shifts of their
//!   own: uniform in distribution, not cuRAND's scrambling constants.
//! - Poisson counts come from inversion (small means) or transformed rejection (large means):
//!   the distribution, not cuRAND's values.

use super::{Draw, FloatKind, Generator, RandomFloat, Seed};
use crate::memory::SimMem;

/// Philox4x32-10 of `ctr` under `key` (Salmon et al., SC'11; cuRAND's constants).
fn philox(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(0x9E37_79B9);
            key[1] = key[1].wrapping_add(0xBB67_AE85);
        }
        let p0 = M0 * ctr[0] as u64;
        let p1 = M1 * ctr[2] as u64;
        ctr = [((p1 >> 32) as u32) ^ ctr[1] ^ key[0], p1 as u32, ((p0 >> 32) as u32) ^ ctr[3] ^ key[1], p0 as u32];
    }
    ctr
}

/// A pseudo-random generator as a counter-based stream of 4-word blocks.
#[derive(Clone, Copy)]
struct Stream {
    key: [u32; 2],
    /// cuRAND's legacy Philox ordering (blocks spread over 65,536 subsequences), or one
    /// plain counter sequence.
    legacy: bool,
}

impl Stream {
    fn of(seed: &Seed) -> Stream {
        let s = seed.seed;
        match seed.generator {
            Generator::Philox4x32_10 => Stream { key: [s as u32, (s >> 32) as u32], legacy: true },
            g => {
                // The other generators: a Philox stream keyed by the seed mixed with the generator.
                let tag = match g {
                    Generator::Default | Generator::Xorwow => 0x584f_5257u64,
                    Generator::Mrg32k3a => 0x4d52_4733,
                    _ => 0x4d54_4750,
                };
                let k = splitmix(s ^ tag.rotate_left(32));
                Stream { key: [k as u32, (k >> 32) as u32], legacy: false }
            }
        }
    }

    /// Block `b` of the sequence.
    fn block(&self, b: u64) -> [u32; 4] {
        let (sub, ctr) = if self.legacy { (b % 65_536, b / 65_536) } else { (0, b) };
        philox([ctr as u32, (ctr >> 32) as u32, sub as u32, (sub >> 32) as u32], self.key)
    }

    /// Word `p` of the sequence.
    fn word(&self, p: u64) -> u32 {
        self.block(p / 4)[(p % 4) as usize]
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const INV32: f32 = 2.328_306_4e-10; // 2^-32
const INV32_2PI: f32 = 2.328_306_4e-10 * std::f32::consts::TAU;
const INV53: f64 = 1.0 / (1u64 << 53) as f64;

/// cuRAND's `(0, 1]` float of a word.
fn unit32(x: u32) -> f32 {
    x as f32 * INV32 + INV32 / 2.0
}

/// cuRAND's `(0, 1]` double of a word pair.
fn unit53(x: u32, y: u32) -> f64 {
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

/// The block of `f64` value `d` (offset `offset` in words): four doubles per block pair, as
/// cuRAND's double draws take two blocks per four values.
fn double_block(stream: &Stream, offset: u64, d: u64) -> ([u32; 4], usize) {
    let t = offset / 4 + d / 4;
    let (sub, ctr) = if stream.legacy { (t % 65_536, t / 65_536) } else { (0, t * 2) };
    let ctr = ctr + (d % 4) / 2;
    let block = philox([ctr as u32, (ctr >> 32) as u32, sub as u32, (sub >> 32) as u32], stream.key);
    (block, (d % 2) as usize)
}

/// The Joe-Kuo direction numbers of dimensions 2 to 21 (`s`, `a`, `m_1..m_s`); dimension 1 is
/// the van der Corput sequence.
const JOE_KUO: [(u32, u32, &[u32]); 20] = [
    (1, 0, &[1]),
    (2, 1, &[1, 3]),
    (3, 1, &[1, 3, 1]),
    (3, 2, &[1, 1, 1]),
    (4, 1, &[1, 1, 3, 3]),
    (4, 4, &[1, 3, 5, 13]),
    (5, 2, &[1, 1, 5, 5, 17]),
    (5, 4, &[1, 1, 5, 5, 5]),
    (5, 7, &[1, 1, 7, 11, 19]),
    (5, 11, &[1, 1, 5, 1, 1]),
    (5, 13, &[1, 1, 1, 3, 11]),
    (5, 14, &[1, 3, 5, 5, 31]),
    (6, 1, &[1, 3, 3, 9, 7, 49]),
    (6, 13, &[1, 1, 1, 15, 21, 21]),
    (6, 16, &[1, 3, 1, 13, 27, 49]),
    (6, 19, &[1, 1, 1, 15, 7, 5]),
    (6, 22, &[1, 3, 1, 15, 13, 25]),
    (6, 25, &[1, 1, 5, 5, 19, 61]),
    (7, 1, &[1, 3, 7, 11, 23, 15, 103]),
    (7, 4, &[1, 3, 7, 13, 13, 15, 69]),
];

/// The 64 direction numbers of `dim` (0-based), as 64-bit fractions, and the digital shift
/// applied to its points (0 for the table's dimensions of an unscrambled sequence).
fn directions(dim: u32, scrambled: bool) -> ([u64; 64], u64) {
    let table = JOE_KUO.len() as u32 + 1;
    let base = dim % table;
    let mut v = [0u64; 64];
    if base == 0 {
        for (b, x) in v.iter_mut().enumerate() {
            *x = 1u64 << (63 - b);
        }
    } else {
        let (s, a, m) = JOE_KUO[base as usize - 1];
        let s = s as usize;
        for b in 0..64 {
            v[b] = if b < s {
                (m[b] as u64) << (63 - b)
            } else {
                let mut x = v[b - s] ^ (v[b - s] >> s);
                for k in 1..s {
                    if (a >> (s - 1 - k)) & 1 == 1 {
                        x ^= v[b - k];
                    }
                }
                x
            };
        }
    }
    let shift =
        if scrambled || dim >= table { splitmix(0x5342_4f4c ^ ((dim as u64) << 1 | scrambled as u64)) } else { 0 };
    (v, shift)
}

/// Point `k` (gray-code order) of one dimension, as a 64-bit fraction.
fn sobol(v: &[u64; 64], shift: u64, k: u64) -> u64 {
    let mut g = k ^ (k >> 1);
    let mut x = 0;
    let mut b = 0;
    while g != 0 {
        if g & 1 == 1 {
            x ^= v[b];
        }
        g >>= 1;
        b += 1;
    }
    x ^ shift
}

/// Every Sobol point a draw of `n` values fills, 64-bit fractions: `n / dimensions` points of
/// dimension 0, then of dimension 1, and so on, from point `offset`.
fn sobol_points(seed: &Seed, n: usize) -> Vec<u64> {
    let scrambled = matches!(seed.generator, Generator::ScrambledSobol32 | Generator::ScrambledSobol64);
    let dims = seed.dimensions.max(1) as usize;
    let per = n / dims;
    let mut out = Vec::with_capacity(n);
    for d in 0..dims {
        let (v, shift) = directions(d as u32, scrambled);
        // 32-bit Sobol keeps the top 32 bits of each number and of the shift.
        let (v, shift) = if matches!(seed.generator, Generator::Sobol32 | Generator::ScrambledSobol32) {
            (v.map(|x| x & 0xFFFF_FFFF_0000_0000), shift & 0xFFFF_FFFF_0000_0000)
        } else {
            (v, shift)
        };
        out.extend((0..per as u64).map(|i| sobol(&v, shift, seed.offset + i)));
    }
    out
}

fn is_sobol64(g: Generator) -> bool {
    matches!(g, Generator::Sobol64 | Generator::ScrambledSobol64)
}

/// A quasi-random point as cuRAND's `f32` and `f64` uniforms.
fn quasi_unit32(x: u64) -> f32 {
    unit32((x >> 32) as u32)
}

fn quasi_unit64(g: Generator, x: u64) -> f64 {
    if is_sobol64(g) {
        (x >> 11) as f64 * INV53 + INV53 / 2.0
    } else {
        (x >> 32) as f64 * 2.328_306_436_538_696_3e-10 + 1.164_153_218_269_348_1e-10
    }
}

/// The standard normal quantile (Acklam's rational approximation, relative error below
/// 1.2e-9): the quasi-random generators' normals, by inversion as cuRAND makes them.
fn normal_quantile(p: f64) -> f64 {
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

/// `n` raw 32-bit values (`curandGenerate`).
pub(super) fn bits(seed: Seed, out: SimMem<u32>) -> impl FnOnce() + Send + 'static {
    move || {
        let mut dst = out.lock();
        let n = dst.len();
        if seed.generator.is_quasi() {
            for (o, x) in dst.iter_mut().zip(sobol_points(&seed, n)) {
                *o = (x >> 32) as u32;
            }
        } else {
            let stream = Stream::of(&seed);
            for (i, o) in dst.iter_mut().enumerate() {
                *o = stream.word(seed.offset + i as u64);
            }
        }
    }
}

/// `n` raw 64-bit values (`curandGenerateLongLong`, the 64-bit Sobol generators only).
pub(super) fn bits64(seed: Seed, out: SimMem<u64>) -> impl FnOnce() + Send + 'static {
    move || {
        let mut dst = out.lock();
        let n = dst.len();
        dst.copy_from_slice(&sobol_points(&seed, n));
    }
}

/// A float draw: uniform in `(0, 1]` (then `x * (high - low) + low` when `range` is given, as
/// the GPU's affine kernel does), normal or log-normal.
pub(super) fn draw<T: RandomFloat>(
    seed: Seed,
    out: SimMem<T>,
    draw: Draw,
    range: Option<(f64, f64)>,
) -> impl FnOnce() + Send + 'static {
    move || {
        let n = out.read().len();
        let g = seed.generator;
        let values: Vec<T> = match T::KIND {
            FloatKind::F32 => {
                let mut v: Vec<f32> = if g.is_quasi() {
                    let pts = sobol_points(&seed, n);
                    match draw {
                        Draw::Uniform => pts.iter().map(|&x| quasi_unit32(x)).collect(),
                        Draw::Normal { mean, stddev } => {
                            pts.iter().map(|&x| (mean + stddev * normal_quantile(quasi_unit64(g, x))) as f32).collect()
                        }
                        Draw::LogNormal { mean, stddev } => pts
                            .iter()
                            .map(|&x| (mean + stddev * normal_quantile(quasi_unit64(g, x))).exp() as f32)
                            .collect(),
                    }
                } else {
                    let s = Stream::of(&seed);
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
                };
                if let Some((low, high)) = range {
                    let (scale, shift) = ((high - low) as f32, low as f32);
                    v.iter_mut().for_each(|x| *x = *x * scale + shift);
                }
                v.into_iter().map(T::from_f32).collect()
            }
            FloatKind::F64 => {
                let mut v: Vec<f64> = if g.is_quasi() {
                    let pts = sobol_points(&seed, n);
                    let u = pts.iter().map(|&x| quasi_unit64(g, x));
                    match draw {
                        Draw::Uniform => u.collect(),
                        Draw::Normal { mean, stddev } => u.map(|u| mean + stddev * normal_quantile(u)).collect(),
                        Draw::LogNormal { mean, stddev } => {
                            u.map(|u| (mean + stddev * normal_quantile(u)).exp()).collect()
                        }
                    }
                } else {
                    let s = Stream::of(&seed);
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
                };
                if let Some((low, high)) = range {
                    v.iter_mut().for_each(|x| *x = *x * (high - low) + low);
                }
                v.into_iter().map(T::from_f64).collect()
            }
        };
        out.lock().copy_from_slice(&values);
    }
}

/// `ln(k!)`: exact sums for small `k`, Stirling's series above.
fn ln_factorial(k: u64) -> f64 {
    if k < 16 {
        return (2..=k).map(|i| (i as f64).ln()).sum();
    }
    let x = k as f64 + 1.0;
    (x - 0.5) * x.ln() - x + 0.5 * std::f64::consts::TAU.ln() + 1.0 / (12.0 * x) - 1.0 / (360.0 * x.powi(3))
        + 1.0 / (1260.0 * x.powi(5))
}

/// Poisson counts of mean `lambda`: inversion of one uniform for means below 64 (and for the
/// quasi-random generators, of their point, with a normal approximation above 64), Hörmann's
/// transformed rejection (PTRS) from a per-element Philox stream above.
pub(super) fn poisson(seed: Seed, out: SimMem<u32>, lambda: f64) -> impl FnOnce() + Send + 'static {
    move || {
        let n = out.read().len();
        let invert = |u: f64| {
            let (mut k, mut p) = (0u32, (-lambda).exp());
            let mut cdf = p;
            while u > cdf && k < 10_000 {
                k += 1;
                p *= lambda / k as f64;
                cdf += p;
            }
            k
        };
        let counts: Vec<u32> = if seed.generator.is_quasi() {
            let g = seed.generator;
            sobol_points(&seed, n)
                .into_iter()
                .map(|x| {
                    let u = quasi_unit64(g, x);
                    if lambda < 64.0 {
                        invert(u)
                    } else {
                        (lambda + lambda.sqrt() * normal_quantile(u) + 0.5).floor().max(0.0) as u32
                    }
                })
                .collect()
        } else {
            let s = Stream::of(&seed);
            let key = [s.key[0] ^ 0x504f_4953, s.key[1]];
            (0..n as u64)
                .map(|i| {
                    let p = seed.offset + i;
                    let mut draws = (0u32..).map(|j| philox([p as u32, (p >> 32) as u32, j, 0x504f_4953], key));
                    if lambda < 64.0 {
                        let w = draws.next().unwrap_or_default();
                        return invert(unit53(w[0], w[1]));
                    }
                    let (sl, ll) = (lambda.sqrt(), lambda.ln());
                    let b = 0.931 + 2.53 * sl;
                    let a = -0.059 + 0.02483 * b;
                    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
                    let vr = 0.9277 - 3.6224 / (b - 2.0);
                    for w in draws.by_ref().take(1000) {
                        let u = unit53(w[0], w[1]) - 0.5;
                        let v = unit53(w[2], w[3]);
                        let us = 0.5 - u.abs();
                        let k = ((2.0 * a / us + b) * u + lambda + 0.43).floor();
                        if us >= 0.07 && v <= vr {
                            return k as u32;
                        }
                        if k < 0.0 || (us < 0.013 && v > us) {
                            continue;
                        }
                        if v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln()
                            <= -lambda + k * ll - ln_factorial(k as u64)
                        {
                            return k as u32;
                        }
                    }
                    lambda.round() as u32
                })
                .collect()
        };
        out.lock().copy_from_slice(&counts);
    }
}
