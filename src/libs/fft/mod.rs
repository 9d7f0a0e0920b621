//! cuFFT: complex-to-complex, real-to-complex and complex-to-real transforms in single and
//! double precision, 1D to 3D, batched, with strides, distances and embeddings.
//!
//! Plans live in a bounded least-recently-used cache keyed on the whole layout (kind, sizes,
//! batch, both embeddings, strides and distances), so a plan is never reused for another
//! layout. Plans do not allocate their own work areas: the handle keeps one workspace, grown
//! to the largest plan's need, and every transform declares it on its recorder.
//!
//! Transforms are unnormalized, as in cuFFT: a forward then inverse transform multiplies by
//! the number of elements of one transform.
//!
//! On the simulator every transform is computed on the host with `rustfft`, with the same
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

mod sealed {
    /// `rustfft`'s float trait too: the simulator computes transforms with it.
    pub trait Sealed: rustfft::FftNum {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The float types cuFFT transforms: `f32` and `f64`.
pub trait FftFloat: Element + sealed::Sealed
where
    Complex<Self>: Element,
{
    #[doc(hidden)]
    const DOUBLE: bool;
}
impl FftFloat for f32 {
    const DOUBLE: bool = false;
}
impl FftFloat for f64 {
    const DOUBLE: bool = true;
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

    /// A complex-to-complex transform (`C2C` for `f32`, `Z2Z` for `f64`). `input` and `output`
    /// may be the same buffer (in place) when both layouts are equal.
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
        let kind = if T::DOUBLE { Kind::Z2Z } else { Kind::C2C };
        let in_place = input.same_buffer(output);
        let key = self.key(kind, layout, input.len(), output.len())?;
        if in_place && key.input != key.output {
            return Err(Error::invalid("output", "an in-place transform needs equal input and output layouts"));
        }
        let sim = |key: &PlanKey| Ok(sim::c2c(key.clone(), input.sim_data()?, output.sim_data()?, direction));
        self.exec(key, input, output, Access::Read, "c2c", direction, sim)
    }

    /// A real-to-complex forward transform (`R2C` / `D2Z`); the output holds `dims[last]/2 + 1`
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
        let kind = if T::DOUBLE { Kind::D2Z } else { Kind::R2C };
        let key = self.key(kind, layout, input.len(), output.len())?;
        let sim = |key: &PlanKey| Ok(sim::r2c(key.clone(), input.sim_data()?, output.sim_data()?));
        self.exec(key, input, output, Access::Read, "r2c", Direction::Forward, sim)
    }

    /// A complex-to-real inverse transform (`C2R` / `Z2D`). cuFFT overwrites the input of
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
        let kind = if T::DOUBLE { Kind::Z2D } else { Kind::C2R };
        let key = self.key(kind, layout, input.len(), output.len())?;
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
