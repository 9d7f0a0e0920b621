//! cuFFT: complex-to-complex, real-to-complex and complex-to-real transforms in half
//! (`half::f16`), bfloat16 (`half::bf16`), single and double precision, 1D to 3D, batched, with
//! strides, distances and embeddings.
//!
//! Half and bfloat16 transforms go through cuFFT's Xt API (`cufftXtMakePlanMany` with
//! `CUDA_R_16F` / `CUDA_C_16F` or `CUDA_R_16BF` / `CUDA_C_16BF`, `cufftXtExec`); cuFFT's rules
//! for them (power-of-two sizes, the real side of a real transform at unit stride, at most 2^32
//! elements a side, compute capability 5.3 for half and 8.0 for bfloat16) are checked before
//! anything is recorded. Their complex values are [`Complex<f16>`](Complex) /
//! [`Complex<bf16>`](Complex), laid out as CUDA's `half2` / `nv_bfloat162`.
//!
//! Plans live in a bounded least-recently-used cache keyed on the whole layout (kind, sizes,
//! batch, both embeddings, strides and distances), so a plan is never reused for another
//! layout. Plans do not allocate their own work areas: the handle keeps one workspace, grown
//! to the largest plan's need, and every transform declares it on its recorder.
//!
//! Transforms are unnormalized, as in cuFFT: a forward then inverse transform multiplies by
//! the number of elements of one transform.
//!
//! On the simulator every transform is computed on the host with `rustfft` (half and bfloat16
//! values widened to `f32`, transformed, and rounded back to nearest), with the same
//! layouts and unnormalized results, as a simulated kernel under the op's declared uses (the
//! hazard checker sees it as it sees a user's kernel). Complex-to-real transforms read the
//! Hermitian half spectrum as cuFFT does (the imaginary parts of the bins a real signal has
//! real, DC and Nyquist, are ignored); cuFFT may overwrite their input, the simulator leaves it
//! as it was. The simulator makes no plans ([`plans_made`](Fft::plans_made) stays 0) and no
//! work area. A 2^20-point transform takes a fraction of a second in release builds.
//!
//! Files: this one holds the state and the transforms; `layout` the layouts and their
//! checks, `calls` the cuFFT calls, `sim` the simulator's transforms.

mod calls;
mod layout;
mod sim;

pub use layout::{DataLayout, FftLayout};
use layout::{Kind, PlanKey};

use super::plan_cache::PlanCache;
use super::workspace::Workspace;
use super::{dptr, record, Library, OpStream, StreamLibrary};
use crate::completion::Completion;
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::memory::{Complex, Element, GpuRef};
use crate::track::Access;
use calls::RawPlan;

/// The direction of a complex-to-complex transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `exp(-2πi jk/n)`.
    Forward,
    /// `exp(+2πi jk/n)`, unnormalized.
    Inverse,
}

/// The precision of a transform's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE half (`half::f16`, `CUDA_R_16F` / `CUDA_C_16F`).
    Half,
    /// bfloat16 (`half::bf16`, `CUDA_R_16BF` / `CUDA_C_16BF`).
    BFloat16,
    /// `f32` (`CUFFT_C2C`, `CUFFT_R2C`, `CUFFT_C2R`).
    Single,
    /// `f64` (`CUFFT_Z2Z`, `CUFFT_D2Z`, `CUFFT_Z2D`).
    Double,
}

mod sealed {
    /// The simulator's arithmetic for a float type: `rustfft` computes in `Compute`, and values
    /// are widened to it and rounded back.
    pub trait Sealed: Copy + Send + Sync + 'static {
        type Compute: rustfft::FftNum;
        fn widen(self) -> Self::Compute;
        fn narrow(v: Self::Compute) -> Self;
    }
    impl Sealed for f32 {
        type Compute = f32;
        fn widen(self) -> f32 {
            self
        }
        fn narrow(v: f32) -> f32 {
            v
        }
    }
    impl Sealed for f64 {
        type Compute = f64;
        fn widen(self) -> f64 {
            self
        }
        fn narrow(v: f64) -> f64 {
            v
        }
    }
    impl Sealed for half::f16 {
        type Compute = f32;
        fn widen(self) -> f32 {
            self.to_f32()
        }
        fn narrow(v: f32) -> half::f16 {
            half::f16::from_f32(v)
        }
    }
    impl Sealed for half::bf16 {
        type Compute = f32;
        fn widen(self) -> f32 {
            self.to_f32()
        }
        fn narrow(v: f32) -> half::bf16 {
            half::bf16::from_f32(v)
        }
    }
}

/// The float types cuFFT transforms: `half::f16`, `half::bf16`, `f32` and `f64`.
pub trait FftFloat: Element + sealed::Sealed
where
    Complex<Self>: Element,
{
    /// The precision of the transform of these elements.
    const PRECISION: Precision;
}
impl FftFloat for half::f16 {
    const PRECISION: Precision = Precision::Half;
}
impl FftFloat for half::bf16 {
    const PRECISION: Precision = Precision::BFloat16;
}
impl FftFloat for f32 {
    const PRECISION: Precision = Precision::Single;
}
impl FftFloat for f64 {
    const PRECISION: Precision = Precision::Double;
}

type Plans = PlanCache<PlanKey, RawPlan>;

/// A stream's cuFFT plans and work area. Get it from [`crate::Handles::fft`].
pub struct Fft {
    op: OpStream,
    plans: Plans,
    work: Workspace,
}

impl StreamLibrary for Fft {
    const LIBRARY: Library = Library {
        name: "cuFFT (libcufft)",
        hint: "install the CUDA toolkit's cuFFT library (libcufft.so.12)",
        present: calls::is_present,
        // cufftDestroy frees the plans' device data with a synchronizing free.
        objects: "cuFFT plans",
    };
    type Objects = Vec<RawPlan>;

    fn create(op: OpStream) -> Result<Fft> {
        Ok(Fft { op, plans: PlanCache::new(16, "an evicted cuFFT plan"), work: Workspace::default() })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Self::Objects> {
        self.plans.take_all()
    }
}

impl std::fmt::Debug for Fft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fft({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.plans.capacity())
    }
}

impl Fft {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }

    /// Plans currently cached.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    /// Plans made since the handle was created (a cache hit makes none).
    pub fn plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Bytes of the shared work area (the largest cached plan's need so far).
    pub fn work_area_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Bounds the plan cache (at least 1); the least recently used plans beyond it are freed.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        self.plans.set_capacity(capacity, &self.op)
    }

    /// A complex-to-complex transform (`C2C` for `f32`, `Z2Z` for `f64`, the Xt API's
    /// `CUDA_C_16F` / `CUDA_C_16BF` for `f16` / `bf16`). `input` and `output` may be the same
    /// buffer (in place) when both layouts are equal.
    pub fn c2c<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<Complex<T>>,
        direction: Direction,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let in_place = input.same_buffer(output);
        let key = self.key(Kind::C2C, T::PRECISION, layout, input.len(), output.len())?;
        if in_place && key.input != key.output {
            return Err(Error::invalid("output", "an in-place transform needs equal input and output layouts"));
        }
        let sim = |key: &PlanKey| Ok(sim::c2c(key.clone(), input.sim_data()?, output.sim_data()?, direction));
        self.exec(key, input, output, Access::Read, "c2c", direction, sim)
    }

    /// A real-to-complex forward transform (`R2C` / `D2Z`, or the Xt API's for `f16` / `bf16`);
    /// the output holds `dims[last]/2 + 1`
    /// complex values in the last dimension.
    pub fn r2c<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<T>,
        output: &GpuRef<Complex<T>>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let key = self.key(Kind::R2C, T::PRECISION, layout, input.len(), output.len())?;
        let sim = |key: &PlanKey| Ok(sim::r2c(key.clone(), input.sim_data()?, output.sim_data()?));
        self.exec(key, input, output, Access::Read, "r2c", Direction::Forward, sim)
    }

    /// A complex-to-real inverse transform (`C2R` / `Z2D`, or the Xt API's for `f16` / `bf16`).
    /// cuFFT overwrites the input of
    /// these, so `input` is declared as written too.
    pub fn c2r<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<T>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let key = self.key(Kind::C2R, T::PRECISION, layout, input.len(), output.len())?;
        let sim = |key: &PlanKey| Ok(sim::c2r(key.clone(), input.sim_data()?, output.sim_data()?));
        self.exec(key, input, output, Access::ReadWrite, "c2r", Direction::Inverse, sim)
    }

    /// Records the uses, finds or makes the plan, sizes the work area, and enqueues the
    /// transform. On the simulator, `sim` gives the transform computed on the host instead, run
    /// under the same uses; it has no plan and no work area.
    #[allow(clippy::too_many_arguments)]
    fn exec<I: Element, O: Element, K: FnOnce() + Send + 'static>(
        &mut self,
        key: PlanKey,
        input: &GpuRef<I>,
        output: &GpuRef<O>,
        input_access: Access,
        name: &'static str,
        direction: Direction,
        sim: impl FnOnce(&PlanKey) -> Result<K>,
    ) -> Result<Completion<()>> {
        let mut rec = self.op.recorder(name);
        record(&mut rec, "input", input, input_access)?;
        record(&mut rec, "output", output, Access::Write)?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), sim(&key)?);
        }
        let stream = self.op.bound_stream()?;
        // SAFETY: the stream is live in the bound context and outlives the plan (the device
        // keeps its streams until every library state is gone).
        let plan = self.plans.get_or_make(key, &self.op, |key| unsafe { RawPlan::make(key, stream.cu_stream()) })?;
        // The old area is retired on the device timeline, after the transforms that used it.
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the plan was made for exactly these buffers' validated layout, on this
            // stream; the buffers are live and fenced by preflight, and `c2r` declared its input
            // as written; (2) the work area, declared read-write, holds at least the plan's
            // work size and serves one transform at a time (the stream is in order).
            unsafe {
                if let Some(w) = work {
                    plan.set_work_area(w)?;
                }
                plan.exec(dptr(input)?, dptr(output)?, direction)
            }
        })
    }
}
