//! The quasi-random generators: Sobol points from the Joe and Kuo direction numbers, in
//! cuRAND's layout, and their conversion to uniforms.

use super::distributions::{unit32, INV53};
use super::philox::splitmix;
use crate::libs::rng::{Generator, Seed};

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
pub(super) fn sobol_points(seed: &Seed, n: usize) -> Vec<u64> {
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
pub(super) fn quasi_unit32(x: u64) -> f32 {
    unit32((x >> 32) as u32)
}

pub(super) fn quasi_unit64(g: Generator, x: u64) -> f64 {
    if is_sobol64(g) {
        (x >> 11) as f64 * INV53 + INV53 / 2.0
    } else {
        (x >> 32) as f64 * 2.328_306_436_538_696_3e-10 + 1.164_153_218_269_348_1e-10
    }
}
