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

/// An owned cuRAND generator, destroyed on drop.
pub(crate) struct RawGenerator(Owned<sys::curandGenerator_t>);

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
        let raw = RawGenerator(Owned::new(g));
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

    /// Sets the generator to `seed`: its seed (pseudo-random) or dimensions (quasi-random),
    /// and its offset (all but MTGP32, which has none). These only set generator state,
    /// applied at the next generate call on the generator's stream.
    ///
    /// NVIDIA: [`curandSetQuasiRandomGeneratorDimensions`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetPseudoRandomGeneratorSeed`](https://docs.nvidia.com/cuda/curand/group__HOST.html),
    /// [`curandSetGeneratorOffset`](https://docs.nvidia.com/cuda/curand/group__HOST.html)
    pub(super) fn reset(&mut self, seed: &Seed) -> Result<()> {
        let g = self.0.get();
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
        let g = self.0.get();
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
        status.check("curandGenerate")
    }

    /// The raw generator.
    pub(super) fn get(&self) -> sys::curandGenerator_t {
        self.0.get()
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
        unsafe { sys::curandGeneratePoisson(self.0.get(), out, n, lambda) }.check("curandGeneratePoisson")
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
        unsafe { sys::curandGenerate(self.0.get(), out, n) }.check("curandGenerate")
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
        unsafe { sys::curandGenerateLongLong(self.0.get(), out, n) }.check("curandGenerateLongLong")
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
