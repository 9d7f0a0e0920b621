//! Poisson counts: inversion for small means and for the quasi-random generators, Hörmann's
//! transformed rejection (PTRS) from a per-element Philox stream for large means.

use super::distributions::{normal_quantile, unit53};
use super::philox::{philox, Stream};
use super::sobol::{quasi_unit64, sobol_points};
use crate::libs::rng::Seed;
use crate::memory::SimMem;

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
pub(in crate::libs::rng) fn poisson(seed: Seed, out: SimMem<u32>, lambda: f64) -> impl FnOnce() + Send + 'static {
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
