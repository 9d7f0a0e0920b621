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
//! Plans live in a bounded least-recently-used cache keyed on the whole layout (kind,
//! precision, sizes, batch, both embeddings, strides and distances) and the callbacks, so a
//! plan is never reused for another layout. Plans do not allocate their own work areas: the handle keeps one workspace, grown
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
//! Load and store callbacks ([`FftCallbacks`], the `*_with` transforms) are CUDA C++ compiled
//! by NVRTC to LTO-IR and linked into the plan by cuFFT; on the simulator they compute with
//! their host closures (see `callback`).
//!
//! Files: this one holds the state and the transforms; `layout` the layouts and their
//! checks, `callback` the callbacks, `calls` the cuFFT calls, `sim` the simulator's
//! transforms.

mod callback;
mod calls;
mod layout;
mod sim;

use callback::CallbackKey;
pub use callback::{FftCallback, FftCallbacks, SimCallback};
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
        /// The callbacks' host forms compute in f64.
        fn compute_to_f64(v: Self::Compute) -> f64;
        fn compute_from_f64(v: f64) -> Self::Compute;
    }
    impl Sealed for f32 {
        type Compute = f32;
        fn compute_to_f64(v: f32) -> f64 {
            v as f64
        }
        fn compute_from_f64(v: f64) -> f32 {
            v as f32
        }
        fn widen(self) -> f32 {
            self
        }
        fn narrow(v: f32) -> f32 {
            v
        }
    }
    impl Sealed for f64 {
        type Compute = f64;
        fn compute_to_f64(v: f64) -> f64 {
            v
        }
        fn compute_from_f64(v: f64) -> f64 {
            v
        }
        fn widen(self) -> f64 {
            self
        }
        fn narrow(v: f64) -> f64 {
            v
        }
    }
    impl Sealed for half::f16 {
        type Compute = f32;
        fn compute_to_f64(v: f32) -> f64 {
            v as f64
        }
        fn compute_from_f64(v: f64) -> f32 {
            v as f32
        }
        fn widen(self) -> f32 {
            self.to_f32()
        }
        fn narrow(v: f32) -> half::f16 {
            half::f16::from_f32(v)
        }
    }
    impl Sealed for half::bf16 {
        type Compute = f32;
        fn compute_to_f64(v: f32) -> f64 {
            v as f64
        }
        fn compute_from_f64(v: f64) -> f32 {
            v as f32
        }
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
        self.c2c_with(layout, input, output, direction, &FftCallbacks::<f32>::new())
    }

    /// [`c2c`](Self::c2c) with load and store callbacks (single and double precision; their
    /// values are `float2` / `double2`).
    pub fn c2c_with<T: FftFloat, D: Element>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<Complex<T>>,
        direction: Direction,
        callbacks: &FftCallbacks<'_, D>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let in_place = input.same_buffer(output);
        let key = self.key(Kind::C2C, T::PRECISION, layout, input.len(), output.len())?;
        if in_place && key.input != key.output {
            return Err(Error::invalid("output", "an in-place transform needs equal input and output layouts"));
        }
        let sim =
            |key: &PlanKey, hooks| Ok(sim::c2c(key.clone(), input.sim_data()?, output.sim_data()?, direction, hooks));
        self.exec(key, input, output, Access::Read, "c2c", direction, callbacks, sim)
    }

    /// A real-to-complex forward transform (`R2C` / `D2Z`, or the Xt API's for `f16` / `bf16`);
    /// the output holds `dims[last]/2 + 1` complex values in the last dimension.
    pub fn r2c<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<T>,
        output: &GpuRef<Complex<T>>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        self.r2c_with(layout, input, output, &FftCallbacks::<f32>::new())
    }

    /// [`r2c`](Self::r2c) with load callbacks on the real input (`float` / `double`) and store
    /// callbacks on the complex output (`float2` / `double2`).
    pub fn r2c_with<T: FftFloat, D: Element>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<T>,
        output: &GpuRef<Complex<T>>,
        callbacks: &FftCallbacks<'_, D>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let key = self.key(Kind::R2C, T::PRECISION, layout, input.len(), output.len())?;
        let sim = |key: &PlanKey, hooks| Ok(sim::r2c(key.clone(), input.sim_data()?, output.sim_data()?, hooks));
        self.exec(key, input, output, Access::Read, "r2c", Direction::Forward, callbacks, sim)
    }

    /// A complex-to-real inverse transform (`C2R` / `Z2D`, or the Xt API's for `f16` / `bf16`).
    /// cuFFT overwrites the input of these, so `input` is declared as written too.
    pub fn c2r<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<T>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        self.c2r_with(layout, input, output, &FftCallbacks::<f32>::new())
    }

    /// [`c2r`](Self::c2r) with load callbacks on the complex input (`float2` / `double2`) and
    /// store callbacks on the real output (`float` / `double`).
    pub fn c2r_with<T: FftFloat, D: Element>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<T>,
        callbacks: &FftCallbacks<'_, D>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let key = self.key(Kind::C2R, T::PRECISION, layout, input.len(), output.len())?;
        let sim = |key: &PlanKey, hooks| Ok(sim::c2r(key.clone(), input.sim_data()?, output.sim_data()?, hooks));
        self.exec(key, input, output, Access::ReadWrite, "c2r", Direction::Inverse, callbacks, sim)
    }

    /// Refuses callbacks cuFFT or the simulator cannot run, naming the argument, before
    /// anything is recorded.
    fn check_callbacks<D: Element>(&self, precision: Precision, callbacks: &FftCallbacks<'_, D>) -> Result<()> {
        if callbacks.is_empty() {
            return Ok(());
        }
        if matches!(precision, Precision::Half | Precision::BFloat16) {
            return Err(Error::Unsupported {
                library: Fft::LIBRARY.name,
                what: format!("load or store callbacks on a {precision:?} transform"),
                hint: "cuFFT's callbacks take single and double precision transforms only; transform in f32".into(),
            });
        }
        for (arg, cb) in [("callbacks.load", &callbacks.load), ("callbacks.store", &callbacks.store)] {
            let Some(cb) = cb else { continue };
            let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
            if cb.symbol.is_empty() || !cb.symbol.chars().all(identifier) {
                return Err(Error::invalid(
                    arg,
                    format!("symbol {:?} is not a device function's name (declare it extern \"C\")", cb.symbol),
                ));
            }
            if cb.source.contains('\0') {
                return Err(Error::invalid(arg, "the source contains a NUL byte"));
            }
            if self.op.device.is_simulated() && cb.sim.is_none() {
                return Err(Error::Unsupported {
                    library: Fft::LIBRARY.name,
                    what: format!("the {arg} callback `{}` on the simulator, which runs no device code", cb.symbol),
                    hint: "give the callback its host form with FftCallback::sim".into(),
                });
            }
        }
        Ok(())
    }

    /// Records the uses, finds or makes the plan (with its callbacks linked in), sizes the
    /// work area, and enqueues the transform. On the simulator, `sim` gives the transform
    /// computed on the host instead, with the callbacks' host forms, run under the same uses;
    /// it has no plan and no work area.
    #[allow(clippy::too_many_arguments)]
    fn exec<I: Element, O: Element, D: Element, K: FnOnce() + Send + 'static>(
        &mut self,
        mut key: PlanKey,
        input: &GpuRef<I>,
        output: &GpuRef<O>,
        input_access: Access,
        name: &'static str,
        direction: Direction,
        callbacks: &FftCallbacks<'_, D>,
        sim: impl FnOnce(&PlanKey, sim::Hooks<D>) -> Result<K>,
    ) -> Result<Completion<()>> {
        self.check_callbacks(key.precision, callbacks)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "input", input, input_access)?;
        record(&mut rec, "output", output, Access::Write)?;
        for (arg, cb) in [("callbacks.load.data", &callbacks.load), ("callbacks.store.data", &callbacks.store)] {
            if let Some(data) = cb.as_ref().and_then(|cb| cb.data) {
                record(&mut rec, arg, data, Access::Read)?;
            }
        }
        if self.op.device.is_simulated() {
            let hook = |cb: &Option<FftCallback<'_, D>>| -> Result<Option<sim::Hook<D>>> {
                let Some(cb) = cb else { return Ok(None) };
                // `check_callbacks` refused a callback without a host form on the simulator.
                let Some(f) = cb.sim.clone() else { return Ok(None) };
                Ok(Some(sim::Hook { f, data: cb.data.map(|d| d.sim_data()).transpose()? }))
            };
            let hooks = sim::Hooks { load: hook(&callbacks.load)?, store: hook(&callbacks.store)? };
            return self.op.run_sim(rec, Vec::new(), sim(&key, hooks)?);
        }
        let callback_key = |cb: &Option<FftCallback<'_, D>>| -> Result<Option<CallbackKey>> {
            let Some(cb) = cb else { return Ok(None) };
            let data = cb.data.map(|d| d.raw_device_ptr()).transpose()?.unwrap_or(0);
            Ok(Some(CallbackKey { source: cb.source.clone(), symbol: cb.symbol.clone(), data }))
        };
        key.load = callback_key(&callbacks.load)?;
        key.store = callback_key(&callbacks.store)?;
        let cc = if callbacks.is_empty() { (0, 0) } else { self.op.device.compute_capability()? };
        let stream = self.op.bound_stream()?;
        let plan = self.plans.get_or_make(key, &self.op, |key| {
            let lto = |cb: &Option<CallbackKey>, store: bool| -> Result<Option<calls::JitCallback>> {
                let Some(cb) = cb else { return Ok(None) };
                let ir = lto_ir(&cb.source, cc)?;
                calls::JitCallback::new(ir, &cb.symbol, key.kind, key.precision, store, cb.data).map(Some)
            };
            let jit: Vec<calls::JitCallback> =
                [lto(&key.load, false)?, lto(&key.store, true)?].into_iter().flatten().collect();
            // SAFETY: (1) the stream is live in the bound context and outlives the plan (the
            // device keeps its streams until every library state is gone); (2) each callback's
            // data address is a buffer this op declared as read, and every op that runs the
            // plan declares the buffer at that address (the address is part of the key).
            unsafe { RawPlan::make(key, stream.cu_stream(), jit) }
        })?;
        // The old area is retired on the device timeline, after the transforms that used it.
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the plan was made for exactly these buffers' validated layout, on this
            // stream; the buffers are live and fenced by preflight, and `c2r` declared its input
            // as written; (2) the work area, declared read-write, holds at least the plan's
            // work size and serves one transform at a time (the stream is in order); (3) the
            // callbacks' data buffers, at the addresses linked into the plan, are declared read.
            unsafe {
                if let Some(w) = work {
                    plan.set_work_area(w)?;
                }
                plan.exec(dptr(input)?, dptr(output)?, direction)
            }
        })
    }
}

/// Compiles a callback's source to LTO-IR for compute capability `cc`.
fn lto_ir(source: &str, cc: (u32, u32)) -> Result<Vec<u8>> {
    #[cfg(feature = "nvrtc")]
    {
        crate::libs::rtc::compile_lto_ir(source, cc)
    }
    #[cfg(not(feature = "nvrtc"))]
    {
        let _ = (source, cc);
        Err(Error::LibraryUnavailable {
            library: "NVRTC (libnvrtc)",
            hint: "cuFFT callbacks are compiled with NVRTC: build cusched with the nvrtc feature",
        })
    }
}
