//! The cuRAND call layer: every cuRAND call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::curand::sys`.
//!
//! Every wrapper needs the generator's context current on the calling thread (the op path binds
//! it) and the generator used by one thread at a time (`Rng` methods take `&mut self`).

use super::{Draw, FloatKind, Generator, Seed};
use crate::error::Result;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::curand::sys;

impl Status for sys::curandStatus_t {
    const SUCCESS: Self = sys::curandStatus_t::CURAND_STATUS_SUCCESS;
}

/// Whether libcurand loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

// SAFETY: a cuRAND generator may be used from any thread, one at a time.
unsafe impl RawObject for sys::curandGenerator_t {
    const DESTROY: &'static str = "curandDestroyGenerator";
    const SYNCHRONIZES: bool = true;
    type Status = sys::curandStatus_t;

    /// NVIDIA: [`curandDestroyGenerator`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    unsafe fn destroy(self) -> sys::curandStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::curandDestroyGenerator(self) }
    }
}

/// An owned cuRAND generator, destroyed on drop, with where its sequence stands.
///
/// Setting a pseudo-random generator's seed or offset makes its next draw set up its state,
/// which synchronizes the device (`cudaDeviceSynchronize`, cuRAND of CUDA 13.0): the host waits
/// for every stream's work. A draw that asks for exactly where the generator's last draw left
/// it (the same seed, the offset advanced by the count drawn) needs no set-up, for the draws
/// whose consumption of the sequence cuRAND keeps exact: there the generator is left as it is.
pub(crate) struct RawGenerator {
    raw: Owned<sys::curandGenerator_t>,
    kind: Generator,
    /// Where the sequence stands (seed and offset of its next value) after the last draw, when
    /// that draw consumed exactly its count from a known start; `None` once unknown.
    at: Option<(u64, u64)>,
    /// Where the next draw starts: set by [`reset`](Self::reset), taken by the draw. A reset
    /// whose draw never came leaves it set and `at` unknown, so its pending set-up is done by
    /// a later draw that resets again (and waits for captures), never by a continuing one.
    from: Option<(u64, u64)>,
    /// Handed out raw: its caller may draw on it, so where it stands is never known again.
    lent: bool,
    /// The mean of the last draw, if it was a Poisson draw that succeeded: cuRAND sets up its
    /// tables for a mean, which only a Poisson draw of the same mean finds in place.
    poisson_mean: Option<f64>,
}

/// The draw a generator is set for, where it decides whether the draw may continue the last
/// one without a set-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Next {
    /// Poisson counts of this mean: they continue only a Poisson draw of the same mean.
    Poisson(f64),
    /// Any other draw.
    Other,
}

/// What a draw took from its generator's sequence, for [`RawGenerator::drew`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drawn {
    Uniform32,
    Uniform64,
    /// Normal or log-normal `f32` values.
    Normal32,
    /// Normal or log-normal `f64` values.
    Normal64,
    /// Poisson counts of a mean up to [`Drawn::SMALL_MEAN`].
    PoissonSmall,
    /// Poisson counts of a mean over [`Drawn::SMALL_MEAN`], up to [`Drawn::LARGE_MEAN`].
    PoissonLarge,
    /// Poisson counts of a larger mean.
    PoissonHuge,
    Bits,
}

impl Drawn {
    /// The largest Poisson mean after which XORWOW and MRG32k3a were found to continue exactly.
    pub(super) const SMALL_MEAN: f64 = 1_000.0;
    /// The largest Poisson mean after which Philox4x32-10 was found to continue exactly.
    pub(super) const LARGE_MEAN: f64 = 100_000.0;

    /// What a Poisson draw of mean `lambda` took.
    pub(super) fn poisson(lambda: f64) -> Drawn {
        if lambda <= Self::SMALL_MEAN {
            Drawn::PoissonSmall
        } else if lambda <= Self::LARGE_MEAN {
            Drawn::PoissonLarge
        } else {
            Drawn::PoissonHuge
        }
    }

    /// Whether `kind`, after drawing `n` values this way from offset `o`, stands exactly at
    /// offset `o + n` of its sequence: what a fresh generator set there would draw next, of any
    /// kind. Found on an H200 with cuRAND of CUDA 13.0 by drawing on and comparing with a fresh
    /// generator set to the advanced offset (GPU tests
    /// `rng_continuing::continuing_draws_give_the_numbers_of_fresh_draws_at_their_offsets`,
    /// counts from 1 to 1,048,581, odd and even, at odd and even offsets,
    /// `rng_continuing::a_draw_of_any_kind_continues_one_of_any_other_kind` and
    /// `rng_continuing::poisson_draws_continue_at_every_mean`): Philox continues exactly after
    /// `f32` uniforms, normals and log-normals, raw bits and Poisson counts of means up to
    /// 100,000 (not after `f64` draws of a million values); XORWOW and MRG32k3a after `f32`
    /// uniforms, raw bits and Poisson counts of means up to 1,000 (their normal draws make
    /// values in pairs, as do their Poisson draws of means of 2,000 and more, and XORWOW's
    /// `f64` uniforms were off after a large draw).
    fn continues_exactly(self, kind: Generator) -> bool {
        match kind {
            Generator::Philox4x32_10 => matches!(
                self,
                Drawn::Uniform32 | Drawn::Normal32 | Drawn::Bits | Drawn::PoissonSmall | Drawn::PoissonLarge
            ),
            Generator::Default | Generator::Xorwow | Generator::Mrg32k3a => {
                matches!(self, Drawn::Uniform32 | Drawn::Bits | Drawn::PoissonSmall)
            }
            // MTGP32 has no offsets; the quasi-random generators set up nothing that waits.
            _ => false,
        }
    }
}

impl RawGenerator {
    /// `curandCreateGenerator` of `kind` in the current context, then `curandSetStream`, and
    /// for Philox4x32-10 `curandSetGeneratorOrdering` to `CURAND_ORDERING_PSEUDO_LEGACY`.
    ///
    /// NVIDIA: [`curandCreateGenerator`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetStream`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetGeneratorOrdering`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the generator.
    pub(super) unsafe fn create(kind: Generator, stream: crate::backend::cuda::CuStream) -> Result<RawGenerator> {
        let mut g = std::ptr::null_mut();
        // SAFETY: `g` is a valid out-pointer.
        unsafe { sys::curandCreateGenerator(&mut g, rng_type(kind)) }.check("curandCreateGenerator")?;
        let raw = RawGenerator { raw: Owned::new(g), kind, at: None, from: None, lent: false, poisson_mean: None };
        // SAFETY: a live generator; the caller vouches for the stream.
        unsafe { sys::curandSetStream(g, stream as _) }.check("curandSetStream")?;
        if kind == Generator::Philox4x32_10 {
            // The documented, stable order (the simulator computes the same numbers), rather
            // than a default a cuRAND release may change. A cuRAND that refuses it still
            // generates, in its default order: only the match with the simulator is lost, so
            // that is logged, not returned.
            // SAFETY: a live generator, not yet used.
            let set =
                unsafe { sys::curandSetGeneratorOrdering(g, sys::curandOrdering_t::CURAND_ORDERING_PSEUDO_LEGACY) }
                    .check("curandSetGeneratorOrdering");
            if let Err(e) = set {
                log::warn!(
                    "cusched: cuRAND refused the legacy order for Philox4x32-10 ({e}); it keeps its default order, which the simulator may not match bit for bit"
                );
            }
        }
        Ok(raw)
    }

    /// Whether the generator stands exactly at `seed` already (a pseudo-random one whose last
    /// draw ended there) for `next`: [`reset`](Self::reset) then sets nothing, and the next
    /// draw sets nothing up.
    pub(super) fn continues(&self, seed: &Seed, next: Next) -> bool {
        let ready = match next {
            Next::Poisson(mean) => self.poisson_mean == Some(mean),
            Next::Other => true,
        };
        ready && !self.lent && !seed.generator.is_quasi() && self.at == Some((seed.seed, seed.offset))
    }

    /// Hands the generator out raw (`Rng::curand_generator`): from now on every draw resets
    /// it, whatever its caller draws on it meanwhile.
    pub(super) fn lend(&mut self) {
        self.lent = true;
        self.at = None;
    }

    /// Records a draw of `n` values (`drawn`) that succeeded (`ok`) or not: the sequence
    /// stands `n` past the draw's start if the draw consumes exactly that much, else nowhere
    /// known.
    fn drew(&mut self, drawn: Drawn, n: usize, ok: bool) {
        self.poisson_mean = None;
        let exact = ok && !self.lent && drawn.continues_exactly(self.kind);
        let from = self.from.take().filter(|_| exact);
        self.at = from.and_then(|(seed, o)| Some((seed, o.checked_add(u64::try_from(n).ok()?)?)));
    }

    /// Sets the generator to `seed`: its seed (pseudo-random) or dimensions (quasi-random),
    /// and its offset (all but MTGP32, which has none), unless it [`continues`](Self::continues)
    /// there. These only set generator state, applied at the next generate call on the
    /// generator's stream.
    ///
    /// NVIDIA: [`curandSetQuasiRandomGeneratorDimensions`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetPseudoRandomGeneratorSeed`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetGeneratorOffset`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    pub(super) fn reset(&mut self, seed: &Seed, next: Next) -> Result<()> {
        if self.continues(seed, next) {
            self.from = self.at;
            return Ok(());
        }
        (self.at, self.from) = (None, None);
        let g = self.raw.get();
        // SAFETY: a live generator, used by this thread only (`&mut self`).
        unsafe {
            if seed.generator.is_quasi() {
                sys::curandSetQuasiRandomGeneratorDimensions(g, seed.dimensions)
                    .check("curandSetQuasiRandomGeneratorDimensions")?;
            } else {
                sys::curandSetPseudoRandomGeneratorSeed(g, seed.seed).check("curandSetPseudoRandomGeneratorSeed")?;
            }
            if seed.generator != Generator::Mtgp32 {
                sys::curandSetGeneratorOffset(g, seed.offset).check("curandSetGeneratorOffset")?;
            }
        }
        self.from = Some((seed.seed, seed.offset));
        Ok(())
    }

    /// `curandGenerate<draw>` of `n` floats of `kind` at `out`.
    ///
    /// NVIDIA: [`curandGenerateUniform`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandGenerateUniformDouble`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandGenerateNormal`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandGenerateNormalDouble`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandGenerateLogNormal`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandGenerateLogNormalDouble`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    ///
    /// # Safety
    /// `out` is a live device buffer of the current context holding `n` elements of `kind`,
    /// fenced on the generator's stream.
    pub(super) unsafe fn generate(&mut self, kind: FloatKind, draw: Draw, out: u64, n: usize) -> Result<()> {
        let g = self.raw.get();
        let (f32p, f64p) = (out as *mut f32, out as *mut f64);
        // SAFETY: the caller vouches for the buffer; `kind` picks the entry point of its type.
        let status = unsafe {
            match (kind, draw) {
                (FloatKind::F32, Draw::Uniform) => sys::curandGenerateUniform(g, f32p, n),
                (FloatKind::F64, Draw::Uniform) => sys::curandGenerateUniformDouble(g, f64p, n),
                (FloatKind::F32, Draw::Normal { mean, stddev }) => {
                    sys::curandGenerateNormal(g, f32p, n, mean as f32, stddev as f32)
                }
                (FloatKind::F64, Draw::Normal { mean, stddev }) => {
                    sys::curandGenerateNormalDouble(g, f64p, n, mean, stddev)
                }
                (FloatKind::F32, Draw::LogNormal { mean, stddev }) => {
                    sys::curandGenerateLogNormal(g, f32p, n, mean as f32, stddev as f32)
                }
                (FloatKind::F64, Draw::LogNormal { mean, stddev }) => {
                    sys::curandGenerateLogNormalDouble(g, f64p, n, mean, stddev)
                }
            }
        };
        let drawn = match (kind, draw) {
            (FloatKind::F32, Draw::Uniform) => Drawn::Uniform32,
            (FloatKind::F64, Draw::Uniform) => Drawn::Uniform64,
            (FloatKind::F32, Draw::Normal { .. } | Draw::LogNormal { .. }) => Drawn::Normal32,
            (FloatKind::F64, Draw::Normal { .. } | Draw::LogNormal { .. }) => Drawn::Normal64,
        };
        let checked = status.check("curandGenerate");
        self.drew(drawn, n, checked.is_ok());
        checked
    }

    /// The raw generator.
    pub(super) fn get(&self) -> sys::curandGenerator_t {
        self.raw.get()
    }

    /// `curandGeneratePoisson`: `n` counts of mean `lambda` at `out`.
    ///
    /// NVIDIA: [`curandGeneratePoisson`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    ///
    /// # Safety
    /// `out` is a live device buffer of the current context holding `n` `u32`s, fenced on the
    /// generator's stream.
    pub(super) unsafe fn poisson(&mut self, out: *mut u32, n: usize, lambda: f64) -> Result<()> {
        // SAFETY: a live generator; the caller vouches for the buffer.
        let checked =
            unsafe { sys::curandGeneratePoisson(self.raw.get(), out, n, lambda) }.check("curandGeneratePoisson");
        self.drew(Drawn::poisson(lambda), n, checked.is_ok());
        self.poisson_mean = checked.is_ok().then_some(lambda);
        checked
    }

    /// `curandGenerate`: `n` raw 32-bit values at `out`. cuRAND refuses it for the 64-bit
    /// quasi-random generators (Sobol64 and scrambled Sobol64).
    ///
    /// NVIDIA: [`curandGenerate`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    ///
    /// # Safety
    /// `out` is a live device buffer of the current context holding `n` `u32`s, fenced on the
    /// generator's stream.
    pub(super) unsafe fn bits(&mut self, out: *mut u32, n: usize) -> Result<()> {
        // SAFETY: a live generator; the caller vouches for the buffer.
        let checked = unsafe { sys::curandGenerate(self.raw.get(), out, n) }.check("curandGenerate");
        self.drew(Drawn::Bits, n, checked.is_ok());
        checked
    }

    /// `curandGenerateLongLong`: `n` raw 64-bit values at `out`. cuRAND accepts it only for the
    /// 64-bit quasi-random generators (Sobol64 and scrambled Sobol64).
    ///
    /// NVIDIA: [`curandGenerateLongLong`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    ///
    /// # Safety
    /// `out` is a live device buffer of the current context holding `n` `u64`s, fenced on the
    /// generator's stream.
    pub(super) unsafe fn bits64(&mut self, out: *mut u64, n: usize) -> Result<()> {
        // SAFETY: a live generator; the caller vouches for the buffer.
        let checked = unsafe { sys::curandGenerateLongLong(self.raw.get(), out, n) }.check("curandGenerateLongLong");
        self.drew(Drawn::Bits, n, checked.is_ok());
        checked
    }
}

fn rng_type(g: Generator) -> sys::curandRngType_t {
    use sys::curandRngType_t as R;
    match g {
        Generator::Default => R::CURAND_RNG_PSEUDO_DEFAULT,
        Generator::Xorwow => R::CURAND_RNG_PSEUDO_XORWOW,
        Generator::Mrg32k3a => R::CURAND_RNG_PSEUDO_MRG32K3A,
        Generator::Mtgp32 => R::CURAND_RNG_PSEUDO_MTGP32,
        Generator::Philox4x32_10 => R::CURAND_RNG_PSEUDO_PHILOX4_32_10,
        Generator::Sobol32 => R::CURAND_RNG_QUASI_SOBOL32,
        Generator::ScrambledSobol32 => R::CURAND_RNG_QUASI_SCRAMBLED_SOBOL32,
        Generator::Sobol64 => R::CURAND_RNG_QUASI_SOBOL64,
        Generator::ScrambledSobol64 => R::CURAND_RNG_QUASI_SCRAMBLED_SOBOL64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Poisson draw's mean picks what it took; the boundaries belong to the lower class.
    #[test]
    fn a_poisson_draws_mean_decides_whether_its_generator_continues() {
        assert_eq!(Drawn::poisson(0.1), Drawn::PoissonSmall);
        assert_eq!(Drawn::poisson(Drawn::SMALL_MEAN), Drawn::PoissonSmall);
        assert_eq!(Drawn::poisson(1_000.5), Drawn::PoissonLarge);
        assert_eq!(Drawn::poisson(Drawn::LARGE_MEAN), Drawn::PoissonLarge);
        assert_eq!(Drawn::poisson(100_000.5), Drawn::PoissonHuge);
        assert_eq!(Drawn::poisson(f64::NAN), Drawn::PoissonHuge);
        let philox = Generator::Philox4x32_10;
        assert!(Drawn::PoissonLarge.continues_exactly(philox));
        assert!(!Drawn::PoissonHuge.continues_exactly(philox));
        for g in [Generator::Xorwow, Generator::Mrg32k3a, Generator::Default] {
            assert!(Drawn::PoissonSmall.continues_exactly(g));
            assert!(!Drawn::PoissonLarge.continues_exactly(g));
        }
        assert!(!Drawn::PoissonSmall.continues_exactly(Generator::Mtgp32));
    }
}
