//! What a draw starts from: the generator ([`Generator`]) and its seed, offset and dimensions
//! ([`Seed`]), and the checks of a seed against its generator and the output it fills.

use crate::error::{Error, Result};
use crate::libs::validate as check;

/// The cuRAND generators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Generator {
    /// cuRAND's default pseudo-random generator (XORWOW today). On the simulator: XORWOW's.
    #[default]
    Default,
    /// XORWOW. The simulator matches its distributions, not its bits (it draws from a Philox
    /// stream keyed by the seed).
    Xorwow,
    /// MRG32k3a. The simulator matches its distributions, not its bits.
    Mrg32k3a,
    /// MTGP32 (Mersenne Twister for GPUs); offsets are not supported, and each call restarts
    /// the sequence with a new generator (so it is the slowest to start). The simulator matches
    /// its distributions, not its bits.
    Mtgp32,
    /// Philox4x32-10 (counter-based; cheapest to seed), in cuRAND's legacy ordering
    /// (`CURAND_ORDERING_PSEUDO_LEGACY`, set by cusched). The simulator draws the same raw
    /// words and `f32` uniforms bit for bit, and the same other draws to the rounding of the
    /// GPU's math functions, except Poisson counts (matched in distribution).
    Philox4x32_10,
    /// Sobol32 quasi-random. The simulator computes the Sobol sequence of Joe and Kuo's
    /// direction numbers for the first 21 dimensions (cuRAND's own come from the library, and
    /// are not reproduced bit for bit here); further dimensions reuse those with a digital shift.
    Sobol32,
    /// Scrambled Sobol32 quasi-random. The simulator scrambles with digital shifts of its own,
    /// not cuRAND's constants: the distribution, not the bits.
    ScrambledSobol32,
    /// Sobol64 quasi-random (on the simulator as [`Sobol32`](Self::Sobol32), in 64 bits).
    Sobol64,
    /// Scrambled Sobol64 quasi-random (on the simulator as
    /// [`ScrambledSobol32`](Self::ScrambledSobol32), in 64 bits).
    ScrambledSobol64,
}

impl Generator {
    /// Every generator, for tests and sweeps.
    pub const ALL: [Generator; 9] = [
        Generator::Default,
        Generator::Xorwow,
        Generator::Mrg32k3a,
        Generator::Mtgp32,
        Generator::Philox4x32_10,
        Generator::Sobol32,
        Generator::ScrambledSobol32,
        Generator::Sobol64,
        Generator::ScrambledSobol64,
    ];

    /// Whether this is a quasi-random (low-discrepancy) generator.
    pub fn is_quasi(self) -> bool {
        matches!(
            self,
            Generator::Sobol32 | Generator::ScrambledSobol32 | Generator::Sobol64 | Generator::ScrambledSobol64
        )
    }
}

/// Which generator a call draws from and where in its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed {
    /// The generator.
    pub generator: Generator,
    /// The seed (pseudo-random generators; quasi-random ones have none and ignore it).
    pub seed: u64,
    /// How many values of the sequence to skip (must be 0 for MTGP32).
    pub offset: u64,
    /// Dimensions of a quasi-random sequence (at least 1; the output length must be a multiple).
    /// Pseudo-random generators ignore it.
    pub dimensions: u32,
}

impl Seed {
    /// `generator` at `seed`, offset 0, one dimension.
    pub fn new(generator: Generator, seed: u64) -> Self {
        Seed { generator, seed, offset: 0, dimensions: 1 }
    }

    /// The same seed at `offset`.
    pub fn at(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }
}

pub(super) fn check_moments(mean: f64, stddev: f64) -> Result<()> {
    if !mean.is_finite() {
        return Err(Error::invalid("mean", format!("{mean} must be finite")));
    }
    if !(stddev.is_finite() && stddev > 0.0) {
        return Err(Error::invalid("stddev", format!("{stddev} must be finite and positive")));
    }
    Ok(())
}

/// Checks that `seed.generator` draws raw integers of the width asked for: 64-bit ones
/// (`curandGenerateLongLong`) only from Sobol64 and scrambled Sobol64, 32-bit ones
/// (`curandGenerate`) from every other generator.
pub(super) fn check_width(seed: &Seed, wide: bool) -> Result<()> {
    let g = seed.generator;
    match (wide, matches!(g, Generator::Sobol64 | Generator::ScrambledSobol64)) {
        (false, true) => Err(Error::invalid("seed.generator", format!("{g:?} draws 64-bit values: use bits64"))),
        (true, false) => Err(Error::invalid(
            "seed.generator",
            format!("{g:?} draws 32-bit values (bits64 needs Sobol64 or ScrambledSobol64): use bits"),
        )),
        _ => Ok(()),
    }
}

/// Checks the seed's offset and dimensions against its generator.
pub(super) fn check_generator(seed: &Seed) -> Result<()> {
    if seed.generator == Generator::Mtgp32 && seed.offset != 0 {
        return Err(Error::invalid("seed.offset", "MTGP32 does not support offsets; use 0 or another generator"));
    }
    if seed.generator.is_quasi() {
        check::dim("seed.dimensions", seed.dimensions as usize, false)?;
        if seed.dimensions > 20_000 {
            return Err(Error::invalid("seed.dimensions", "cuRAND supports at most 20,000 quasi-random dimensions"));
        }
    }
    Ok(())
}

/// Checks the seed against an output of `len` elements and returns the count to draw.
pub(super) fn check_seed(seed: &Seed, len: usize, pairs: bool) -> Result<usize> {
    if len == 0 {
        return Err(Error::invalid("out", "is empty: there is nothing to draw"));
    }
    check_generator(seed)?;
    if seed.generator.is_quasi() {
        if len % seed.dimensions as usize != 0 {
            return Err(Error::invalid(
                "out",
                format!("{len} elements are not a multiple of the {} quasi-random dimensions", seed.dimensions),
            ));
        }
    } else if pairs && len % 2 != 0 {
        // Box-Muller makes values in pairs.
        return Err(Error::invalid("out", format!("{len} elements: pseudo-random normals need an even count")));
    }
    Ok(len)
}
