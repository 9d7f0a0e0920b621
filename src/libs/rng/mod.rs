//! cuRAND: every host-API generator, the uniform (with bounds), normal, log-normal and
//! Poisson distributions, and raw 32- and 64-bit integers.
//!
//! Each call names its generator, seed and offset ([`Seed`]) and the generator is reset to
//! them, so the same `Seed` always gives the same numbers, whatever ran before on the handle.
//! To draw a continuing sequence, advance `offset` by the count drawn.
//!
//! A pseudo-random draw at a new seed or offset sets up its generator's state, and cuRAND's
//! set-up synchronizes the device: the call returns only once every stream's work has finished
//! (20 µs a draw when idle, for XORWOW 250 µs; see `bench-rng`). It also cannot run beside a
//! graph capture: so such a draw waits for the captures open on its GPU, on any thread, to
//! close (each is one op), and holds new ones back while it enqueues. A draw that continues
//! where the handle's last draw from that generator ended (the same seed, the offset advanced
//! by the count drawn) leaves the generator as it is and sets nothing up, where cuRAND's
//! sequence continues exactly: after `f32` uniforms (with or without bounds), `f32` normals and
//! log-normals, raw bits and Poisson counts of means up to 100,000 from
//! [`Generator::Philox4x32_10`], and after `f32` uniforms, raw bits and Poisson counts of means
//! up to 1,000 from XORWOW, MRG32k3a and the default generator; a Poisson draw continues only
//! a Poisson draw of the same mean (cuRAND sets up its tables per mean); none from a generator
//! handed out by [`Rng::curand_generator`], which is set before every draw. Draw continuing
//! sequences from those to keep the host and the other streams running. Inside a graph
//! recording a pseudo-random draw is refused ([`Error::Recording`]): the set-up cannot be
//! captured. Quasi-random draws set nothing up, and record as any op.
//!
//! On the simulator every draw is computed on the host, as a simulated kernel under the op's
//! declared uses. Philox4x32-10 gives cuRAND's numbers (bit for bit for raw words and `f32`
//! uniforms, see [`Generator::Philox4x32_10`]); the other generators give the right
//! distributions from well-defined host streams, not cuRAND's bits (each [`Generator`] says
//! which). [`Rng::curand_generator`] has no simulator form.
//!
//! Files: this one holds the state and the draws; `seed` the generators, seeds and their
//! checks, `calls` the cuRAND calls, `sim` the simulator's draws.

mod calls;
mod seed;
mod sim;

use seed::{check_generator, check_moments, check_seed, check_width};
pub use seed::{Generator, Seed};

use super::affine::Affine;
use super::{dptr, record, Library, OpStream, StreamLibrary};
use crate::completion::Completion;
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::track::Access;
use calls::{Next, RawGenerator};
use cudarc::driver::CudaStream;
use std::collections::HashMap;

mod sealed {
    /// The conversions the simulator's draws store their values with.
    pub trait Sealed {
        fn from_f32(v: f32) -> Self;
        fn from_f64(v: f64) -> Self;
    }
    impl Sealed for f32 {
        fn from_f32(v: f32) -> Self {
            v
        }
        fn from_f64(v: f64) -> Self {
            v as f32
        }
    }
    impl Sealed for f64 {
        fn from_f32(v: f32) -> Self {
            v as f64
        }
        fn from_f64(v: f64) -> Self {
            v
        }
    }
}

/// The float types cuRAND draws: `f32` and `f64`.
pub trait RandomFloat: Element + Into<f64> + sealed::Sealed {
    #[doc(hidden)]
    const KIND: FloatKind;
}
impl RandomFloat for f32 {
    const KIND: FloatKind = FloatKind::F32;
}
impl RandomFloat for f64 {
    const KIND: FloatKind = FloatKind::F64;
}

#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum FloatKind {
    F32,
    F64,
}

#[derive(Clone, Copy)]
enum Draw {
    Uniform,
    Normal { mean: f64, stddev: f64 },
    LogNormal { mean: f64, stddev: f64 },
}

/// A stream's cuRAND generators (one per [`Generator`] kind, made on first use). Get it from
/// [`crate::Handles::rng`].
pub struct Rng {
    op: OpStream,
    generators: HashMap<Generator, RawGenerator>,
    affine: Option<Affine>,
}

impl StreamLibrary for Rng {
    const LIBRARY: Library = Library {
        name: "cuRAND (libcurand)",
        hint: "install the CUDA toolkit's cuRAND library (libcurand.so.10)",
        present: calls::is_present,
        // Destroying a generator and unloading a module block.
        objects: "cuRAND generators",
    };
    type Objects = (Vec<RawGenerator>, Option<Affine>);

    fn create(op: OpStream) -> Result<Rng> {
        Ok(Rng { op, generators: HashMap::new(), affine: None })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Self::Objects> {
        if self.generators.is_empty() && self.affine.is_none() {
            return None;
        }
        Some((self.generators.drain().map(|(_, g)| g).collect(), self.affine.take()))
    }
}

impl std::fmt::Debug for Rng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rng({}, {} generators)", self.op.stream, self.generators.len())
    }
}

impl Rng {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }

    /// The raw cuRAND generator of `seed.generator` (made on first use, as a draw makes it),
    /// set to `seed`, for calls cusched does not wrap (`curandGeneratePoissonMethod`, say).
    /// Declare their buffer uses on a [`crate::LaunchRecorder`] on [`stream`](Self::stream)
    /// yourself and enqueue them inside its [`launch`](crate::LaunchRecorder::launch) closure,
    /// with the stream's context current (`scope.cuda_stream()?.context().bind_to_thread()`,
    /// in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists).
    /// Leave the generator's stream and ordering as they are; its seed, offset and dimensions
    /// you may change, as cusched sets them again before each of its draws. The generator
    /// stays this `Rng`'s, valid while it lives, except an MTGP32 one: the next MTGP32 draw or
    /// call here replaces it with a fresh generator. A pseudo-random generator's first draw
    /// after its seed or offset is set synchronizes the device, which breaks any graph
    /// capture open on that GPU (cusched's own draws wait for them to close): make such a draw
    /// outside recordings, and not while another thread records on the GPU. On the simulator
    /// it fails with [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable), as the
    /// draws do there.
    pub fn curand_generator(&mut self, seed: &Seed) -> Result<cudarc::curand::sys::curandGenerator_t> {
        check_generator(seed)?;
        let stream = self.op.bound_stream()?;
        let g = generator(&self.op, &mut self.generators, seed, Next::Other, stream.cu_stream())?;
        // The caller may draw with it: where its sequence stands is never known again.
        g.lend();
        Ok(g.get())
    }

    /// Fills `out` with uniform values in `(0, 1]`.
    pub fn uniform<T: RandomFloat>(&mut self, seed: &Seed, out: &GpuRef<T>) -> Result<Completion<()>> {
        self.draw(seed, out, Draw::Uniform, None)
    }

    /// Fills `out` with uniform values in `(low, high]`.
    pub fn uniform_range<T: RandomFloat>(
        &mut self,
        seed: &Seed,
        out: &GpuRef<T>,
        low: T,
        high: T,
    ) -> Result<Completion<()>> {
        let (lo, hi) = (low.into(), high.into());
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(Error::invalid("high", format!("the range ({lo}, {hi}] must be finite and non-empty")));
        }
        self.draw(seed, out, Draw::Uniform, Some((low, high)))
    }

    /// Fills `out` with normal values of `mean` and `stddev`.
    pub fn normal<T: RandomFloat>(
        &mut self,
        seed: &Seed,
        out: &GpuRef<T>,
        mean: T,
        stddev: T,
    ) -> Result<Completion<()>> {
        let (mean, stddev) = (mean.into(), stddev.into());
        check_moments(mean, stddev)?;
        self.draw(seed, out, Draw::Normal { mean, stddev }, None)
    }

    /// Fills `out` with log-normal values whose logarithm has `mean` and `stddev`.
    pub fn log_normal<T: RandomFloat>(
        &mut self,
        seed: &Seed,
        out: &GpuRef<T>,
        mean: T,
        stddev: T,
    ) -> Result<Completion<()>> {
        let (mean, stddev) = (mean.into(), stddev.into());
        check_moments(mean, stddev)?;
        self.draw(seed, out, Draw::LogNormal { mean, stddev }, None)
    }

    /// Fills `out` with Poisson counts of mean `lambda`.
    pub fn poisson(&mut self, seed: &Seed, out: &GpuRef<u32>, lambda: f64) -> Result<Completion<()>> {
        if !(lambda.is_finite() && lambda > 0.0) {
            return Err(Error::invalid("lambda", format!("{lambda} must be finite and positive")));
        }
        let n = check_seed(seed, out.len(), false)?;
        refuse_pseudo_in_recording(&self.op, seed)?;
        let mut rec = self.op.recorder("poisson");
        record(&mut rec, "out", out, Access::Write)?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), sim::poisson(*seed, out.sim_data()?, lambda));
        }
        let op = &self.op;
        with_generator(op, &mut self.generators, seed, Next::Poisson(lambda), |_, g| {
            op.run(rec, Vec::new(), || {
                // SAFETY: `out` is a live device buffer of `n` u32s, fenced by preflight; the
                // generator is set to this stream.
                unsafe { g.poisson(dptr(out)?, n, lambda) }
            })
        })
    }

    /// Fills `out` with raw 32-bit values (`curandGenerate`): uniform over all of `u32` from
    /// the pseudo-random generators, the sequence's points scaled to 32 bits from Sobol32 and
    /// scrambled Sobol32. Accepts every generator but the 64-bit quasi-random ones (Sobol64 and
    /// scrambled Sobol64), which draw with [`bits64`](Self::bits64).
    pub fn bits(&mut self, seed: &Seed, out: &GpuRef<u32>) -> Result<Completion<()>> {
        check_width(seed, false)?;
        let n = check_seed(seed, out.len(), false)?;
        refuse_pseudo_in_recording(&self.op, seed)?;
        let mut rec = self.op.recorder("bits");
        record(&mut rec, "out", out, Access::Write)?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), sim::bits(*seed, out.sim_data()?));
        }
        let op = &self.op;
        with_generator(op, &mut self.generators, seed, Next::Other, |_, g| {
            op.run(rec, Vec::new(), || {
                // SAFETY: `out` is a live device buffer of `n` u32s, fenced by preflight; the
                // generator is set to this stream, and is a 32-bit one (`check_width`).
                unsafe { g.bits(dptr(out)?, n) }
            })
        })
    }

    /// Fills `out` with raw 64-bit values (`curandGenerateLongLong`): the quasi-random
    /// sequence's points scaled to 64 bits. Accepts only the 64-bit quasi-random generators,
    /// Sobol64 and scrambled Sobol64; the others draw with [`bits`](Self::bits).
    pub fn bits64(&mut self, seed: &Seed, out: &GpuRef<u64>) -> Result<Completion<()>> {
        check_width(seed, true)?;
        let n = check_seed(seed, out.len(), false)?;
        let mut rec = self.op.recorder("bits64");
        record(&mut rec, "out", out, Access::Write)?;
        if self.op.device.is_simulated() {
            return self.op.run_sim(rec, Vec::new(), sim::bits64(*seed, out.sim_data()?));
        }
        let op = &self.op;
        with_generator(op, &mut self.generators, seed, Next::Other, |_, g| {
            op.run(rec, Vec::new(), || {
                // SAFETY: `out` is a live device buffer of `n` u64s, fenced by preflight; the
                // generator is set to this stream, and is a 64-bit Sobol one (`check_width`).
                unsafe { g.bits64(dptr(out)?, n) }
            })
        })
    }

    fn draw<T: RandomFloat>(
        &mut self,
        seed: &Seed,
        out: &GpuRef<T>,
        draw: Draw,
        range: Option<(T, T)>,
    ) -> Result<Completion<()>> {
        let n = check_seed(seed, out.len(), !matches!(draw, Draw::Uniform))?;
        let name = match (draw, range.is_some()) {
            (Draw::Uniform, false) => "uniform",
            (Draw::Uniform, true) => "uniform_range",
            (Draw::Normal { .. }, _) => "normal",
            (Draw::LogNormal { .. }, _) => "log_normal",
        };
        refuse_pseudo_in_recording(&self.op, seed)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "out", out, Access::Write)?;
        if self.op.device.is_simulated() {
            let range = range.map(|(low, high)| (low.into(), high.into()));
            return self.op.run_sim(rec, Vec::new(), sim::draw(*seed, out.sim_data()?, draw, range));
        }
        if range.is_some() && self.affine.is_none() {
            self.affine = Some(Affine::load()?);
        }
        let (op, affine) = (&self.op, self.affine.as_ref());
        with_generator(op, &mut self.generators, seed, Next::Other, |stream, g| {
            op.run(rec, Vec::new(), || {
                let p = out.raw_device_ptr()?;
                // SAFETY: `p` is a live device buffer of `n` elements of T, fenced by
                // preflight; the generator runs on this op's stream.
                unsafe { g.generate(T::KIND, draw, p, n) }?;
                if let (Some((low, high)), Some(affine)) = (range, affine) {
                    let (scale, shift): (f64, f64) = (high.into() - low.into(), low.into());
                    // SAFETY: the same `n` elements, just written on the same stream.
                    unsafe {
                        match T::KIND {
                            FloatKind::F32 => {
                                affine.launch::<f32>(stream.cu_stream(), p, n, scale as f32, shift as f32)
                            }
                            FloatKind::F64 => affine.launch::<f64>(stream.cu_stream(), p, n, scale, shift),
                        }
                    }?;
                }
                Ok(())
            })
        })
    }
}

/// Refuses a pseudo-random draw on a stream lent to a graph recording, on the GPU and the
/// simulator alike: its state set-up (see [`with_generator`]) synchronizes the
/// device, which fails inside a capture, invalidates it, and leaves the failure for the
/// thread's next cuRAND call (`CURAND_STATUS_PREEXISTING_FAILURE`). Quasi-random draws record.
fn refuse_pseudo_in_recording(op: &OpStream, seed: &Seed) -> Result<()> {
    if seed.generator.is_quasi() {
        return Ok(());
    }
    op.refuse_recording_as(
        &format!("a draw from the pseudo-random generator {:?}", seed.generator),
        "draw outside the recording (before it, into a buffer the graph reads), or record a quasi-random generator's draw",
    )
}

/// Runs `enqueue` (a draw) with the op's stream bound and the generator of `seed` set to it.
/// For a pseudo-random generator set to a new seed or offset, outside the GPU's graph captures:
/// its next draw then sets up the generator's state, which calls `cudaDeviceSynchronize`
/// (cuRAND of CUDA 13.0); beside a capture open on any thread that fails the draw with
/// `CURAND_STATUS_LAUNCH_FAILURE` and invalidates the capture. So such a draw waits for the
/// GPU's open captures (one op each) and holds new ones back while it enqueues. A draw that
/// continues where the generator's last draw ended (see `calls::RawGenerator`) sets nothing
/// and sets up nothing, as quasi-random generators never do.
fn with_generator<R>(
    op: &OpStream,
    generators: &mut HashMap<Generator, RawGenerator>,
    seed: &Seed,
    next: Next,
    enqueue: impl FnOnce(&CudaStream, &mut RawGenerator) -> Result<R>,
) -> Result<R> {
    let continuing = generators.get(&seed.generator).is_some_and(|g| g.continues(seed, next));
    let set_up_and_enqueue = || {
        let stream = op.bound_stream()?;
        let g = generator(op, generators, seed, next, stream.cu_stream())?;
        enqueue(&stream, g)
    };
    if seed.generator.is_quasi() || continuing {
        set_up_and_enqueue()
    } else {
        op.outside_captures(set_up_and_enqueue)
    }
}

/// The generator of `seed.generator`, made on first use on `stream`, and set to `seed`. A
/// generator replaced here goes to `op`'s reaper, destroyed only after the work enqueued so far
/// on the stream (its earlier draws, or a caller's raw calls) has finished.
fn generator<'a>(
    op: &OpStream,
    generators: &'a mut HashMap<Generator, RawGenerator>,
    seed: &Seed,
    next: Next,
    stream: crate::backend::cuda::CuStream,
) -> Result<&'a mut RawGenerator> {
    if seed.generator == Generator::Mtgp32 {
        // MTGP32 keeps its state across a re-seed with the same value, and has no offsets: a
        // fresh generator is the only way to restart its sequence.
        if let Some(old) = generators.remove(&Generator::Mtgp32) {
            op.retire("an MTGP32 generator", old);
        }
    }
    let g = match generators.entry(seed.generator) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            // SAFETY: the stream is live in the bound context and outlives the generator (the
            // device keeps its streams until every library state is gone).
            e.insert(unsafe { RawGenerator::create(seed.generator, stream) }?)
        }
    };
    g.reset(seed, next)?;
    Ok(g)
}
