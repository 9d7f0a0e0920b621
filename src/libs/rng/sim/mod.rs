//! The simulator's cuRAND: every generator and distribution computed on the host.
//!
//! - Philox4x32-10 follows cuRAND's legacy ordering (which cusched sets on the GPU too): value
//!   `p` of the sequence (`p` = offset + index) is word `p % 4` of the Philox block at
//!   subsequence `(p / 4) % 65536`, counter `(p / 4) / 65536`, keyed by the seed's two halves.
//!   Raw bits and `f32` uniforms are bit for bit cuRAND's; `f64` uniforms take a word pair per
//!   value (a double draw's offset counts doubles), normals and log-normals cuRAND's Box-Muller pairs, and agree with the GPU to its
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
//!
//! The parts: [`philox`] (the Philox core and the stream of a seed), [`sobol`] (the
//! quasi-random points), [`distributions`] (uniforms, normals and the float draws) and
//! [`poisson`]; this module holds the raw-bits draws.

mod distributions;
mod philox;
mod poisson;
mod sobol;

pub(super) use self::distributions::draw;
pub(super) use self::poisson::poisson;

use self::philox::Stream;
use self::sobol::sobol_points;
use super::Seed;
use crate::memory::SimMem;

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
