//! [`OpStream`]: the stream a library's state enqueues on, and the op path every library op
//! takes (record, preflight, enqueue, commit).

use super::scalars::ScalarSlots;
use crate::backend::cuda;
use crate::completion::{Completion, KeepAlive};
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::recorder::{LaunchRecorder, Launched};
use crate::trace::OpLabel;
use crate::track::Access;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// The stream a library's state enqueues on, and the op path shared by every library.
pub(crate) struct OpStream {
    pub device: Device,
    pub stream: StreamId,
    /// The library's display name, for errors (`"cuBLAS (libcublas)"`).
    pub library: &'static str,
    /// The name traces give the library (`"cuBLAS"`), cut from `library` once.
    label: &'static str,
    /// The context epoch the library's objects were made in.
    pub epoch: u64,
    /// Pinned slots for scalar results the GPU writes (none until a scalar op runs).
    pub(super) scalars: ScalarSlots,
}

impl OpStream {
    pub(crate) fn new(device: &Device, stream: StreamId, library: &'static str) -> Self {
        OpStream {
            device: device.internal(),
            stream,
            library,
            // Traces name the library without the file name errors add (`cuBLAS (libcublas)`).
            label: library.split(" (").next().unwrap_or(library),
            epoch: device.shared.epoch(),
            scalars: ScalarSlots::default(),
        }
    }

    /// Whether the device still runs on the context this library's objects were made in.
    pub(crate) fn is_current(&self) -> bool {
        self.epoch == self.device.shared.epoch()
    }

    /// A strict recorder on this stream for op `op`, for its uses.
    pub(crate) fn recorder(&self, op: &'static str) -> LaunchRecorder {
        LaunchRecorder::new_strict(self.stream).labelled(OpLabel::new(self.label, op))
    }

    /// The raw stream when the device runs on CUDA, else the error a library op gives on the
    /// simulator.
    #[cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
    pub(crate) fn cuda_stream(&self) -> Result<Arc<CudaStream>> {
        if self.device.is_simulated() {
            return Err(self.unavailable_on_sim());
        }
        self.device.raw_cuda_stream(self.stream)
    }

    /// The raw stream, with its context made current on this thread: for library calls made
    /// outside [`run`](Self::run) (making a plan or a generator for the op).
    #[cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
    pub(crate) fn bound_stream(&self) -> Result<Arc<CudaStream>> {
        let stream = self.cuda_stream()?;
        cuda::bind(stream.context())?;
        Ok(stream)
    }

    /// Hands `object` (a library handle, plan or workspace made for this stream) to the
    /// device's reaper, which destroys it on the right context once the stream's work enqueued
    /// so far (which may use it) has finished; the caller never blocks. An object of a context
    /// the device has since replaced is abandoned: calling the library on it could only fail.
    /// On a stream a graph recording holds, the object goes to the recording instead: the
    /// graph's nodes may use it (a plan's tables, a handle's workspace) for the graph's life.
    pub(crate) fn retire(&self, what: &'static str, object: impl Send + 'static) {
        if !self.is_current() {
            std::mem::forget(object);
            return;
        }
        let object: crate::completion::KeepAlive = Box::new(object);
        let object = match self.device.shared.stream(self.stream).map(|slot| slot.recording()) {
            Ok(Some(lent)) => match crate::recorder::keep_for_recording(lent, object) {
                None => return,
                Some(object) => object,
            },
            _ => object,
        };
        let shared = &self.device.shared;
        let after = match shared.record(self.stream) {
            Ok(ev) => ev,
            Err(e) => {
                log::error!("cusched: {what} on {} is abandoned: its stream failed ({e})", self.stream);
                std::mem::forget(object);
                return;
            }
        };
        let ctx = shared.cuda_ctx(what).ok();
        shared.reaper.defer(crate::reaper::Retired { what, after: vec![after], ctx, object });
    }

    /// The scalar slots, moved out to go with the library's objects to the reaper.
    pub(super) fn take_scalars(&mut self) -> ScalarSlots {
        std::mem::take(&mut self.scalars)
    }

    /// Refuses `what` on a stream lent to a graph recording: a graph replays the op's GPU work
    /// only, so a result the host would read after it (a scalar, a status word) would be read
    /// once, from nothing, and never again.
    #[allow(dead_code)]
    pub(crate) fn refuse_recording(&self, what: &str) -> Result<()> {
        self.refuse_recording_as(
            what,
            "run it outside the recording, or use a form of the op that writes its result to a device buffer",
        )
    }

    /// [`refuse_recording`](Self::refuse_recording) with `hint` saying what to do instead.
    #[allow(dead_code)]
    pub(crate) fn refuse_recording_as(&self, what: &str, hint: &'static str) -> Result<()> {
        crate::recorder::refuse_if_recording(&self.device.shared, self.stream, || Error::Recording {
            what: format!("{what} cannot be recorded ({})", self.library),
            hint,
        })
    }

    /// Runs `f` (an op's library calls) while no graph capture is open on the device's GPU,
    /// opening none meanwhile: for calls that, made beside a capture on any thread, fail and
    /// invalidate it (see [`crate::backend::cuda::captures`]). At once on a stream lent to a
    /// graph recording, where the op is captured itself.
    #[cfg_attr(not(feature = "curand"), allow(dead_code))]
    pub(crate) fn outside_captures<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.device.shared.stream(self.stream).is_ok_and(|slot| slot.is_lent()) {
            return f();
        }
        cuda::captures::outside_captures(self.device.ordinal(), f)
    }

    #[cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
    pub(crate) fn unavailable_on_sim(&self) -> Error {
        unavailable_on_sim(self.library)
    }

    /// Preflights `rec`, runs `enqueue` (a library call on a handle bound to this stream) with
    /// the stream's context current, commits, and returns a completion for the op whose value
    /// is `enqueue`'s result. `keep` stays alive until the GPU is done.
    // Most libraries enqueue through it, not all (the cuSOLVERs read status words back): with
    // one library feature alone it may be unused, and no list of libraries is kept here.
    #[allow(dead_code)]
    pub(crate) fn run<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        enqueue: impl FnOnce() -> Result<R>,
    ) -> Result<Completion<R>> {
        Ok(self.launch_cuda(rec, |_| enqueue())?.complete(&self.device, keep))
    }

    /// Like [`run`](Self::run), for blocking library calls whose outcome is known on the host
    /// once `enqueue` returns: the completion resolves with `enqueue`'s inner result (an error
    /// the call reported, say) once the GPU passes the op's event. The outer error is an
    /// enqueue failure, as for `run`.
    #[cfg(feature = "cusolver")]
    pub(crate) fn run_outcome<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        enqueue: impl FnOnce() -> Result<Result<R>>,
    ) -> Result<Completion<R>> {
        self.refuse_recording(HOST_READS_OUTCOME)?;
        let Launched { value, event, trace, .. } = self.launch_cuda(rec, |_| enqueue())?;
        let (completion, shared) = Completion::queued(&self.device.shared);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        shared.enqueued(value, event, Vec::new());
        Ok(completion)
    }

    /// Like [`run`](Self::run), for ops that enqueue on the launch's scope themselves, on
    /// either backend (a simulated kernel, say): no library handle, no context to bind.
    #[cfg(test)]
    pub(crate) fn run_in_scope<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        enqueue: impl FnOnce(&crate::recorder::LaunchScope<'_>) -> Result<R>,
    ) -> Result<Completion<R>> {
        Ok(rec.launch_event(&self.device, enqueue)?.complete(&self.device, keep))
    }

    /// The simulator's form of a library op: preflights `rec`, enqueues `kernel` (the op
    /// computed on the host, from the simulated memory of the buffers `rec` declared) as a
    /// simulated kernel on the op's stream, and commits. The hazard checker sees the kernel's
    /// accesses against the declared uses, as for a user's simulated kernel. The completion
    /// resolves with what `kernel` returns once the simulated stream has run it: a
    /// `Result` for ops whose outcome the computation decides (a factorization that meets a
    /// singular matrix, say), a plain value otherwise. `keep` stays alive until then.
    #[cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
    pub(crate) fn run_sim<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        kernel: impl FnOnce() -> R + Send + 'static,
    ) -> Result<Completion<R>> {
        self.run_sim_checked(rec, keep, || Ok(()), kernel)
    }

    /// [`run_sim`](Self::run_sim) for an op whose result the host reads back (a scalar, status
    /// words, an outcome): refused in a graph recording as `what`, as its CUDA form is, so that
    /// a recording tried on the simulator fails where it would fail on a GPU.
    #[cfg_attr(not(any(feature = "cublas", feature = "cusolver")), allow(dead_code))]
    pub(crate) fn run_sim_read_back<R: Send + 'static>(
        &self,
        what: &str,
        rec: LaunchRecorder,
        kernel: impl FnOnce() -> R + Send + 'static,
    ) -> Result<Completion<R>> {
        self.refuse_recording(what)?;
        self.run_sim(rec, Vec::new(), kernel)
    }

    /// [`run_sim`](Self::run_sim), running `check` first once the launch holds its buffers
    /// (between its preflight and the kernel's enqueue): an error there enqueues nothing and
    /// is the op's error.
    #[cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
    pub(crate) fn run_sim_checked<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        check: impl FnOnce() -> Result<()>,
        kernel: impl FnOnce() -> R + Send + 'static,
    ) -> Result<Completion<R>> {
        let out = Arc::new(std::sync::Mutex::new(None));
        let slot = out.clone();
        let done = rec.launch_event(&self.device, |scope| {
            check()?;
            scope.sim_kernel(move || {
                let value = kernel();
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
            })
        })?;
        let library = self.library;
        if done.recorded.is_some() {
            // Recorded into a graph: the host computation runs when the graph replays. As on
            // CUDA, where a recorded op's completion resolves at once with what its enqueue
            // returned, a kernel with nothing to return resolves at once; a value only the
            // computation makes belongs to no completion.
            return Ok(done.complete(&self.device, keep).try_map(move |()| {
                recorded_value::<R>().ok_or_else(|| Error::Recording {
                    what: format!("the {library} op was recorded into a graph, not run: it has no result of its own"),
                    hint: "replay the graph and read its output buffers",
                })
            }));
        }
        Ok(done.complete(&self.device, keep).try_map(move |()| {
            // The simulated stream ran the kernel before the op's event passed, so the value is
            // there; a kernel that panicked (a defect of its host computation) left none.
            let value = out.lock().unwrap_or_else(|e| e.into_inner()).take();
            value.ok_or_else(|| Error::JobPanicked {
                message: format!("the simulated {library} op's host computation panicked (see the log)"),
            })
        }))
    }

    /// The launch path of ops that need CUDA: refused on the simulator before preflight.
    pub(super) fn launch_cuda<R>(
        &self,
        rec: LaunchRecorder,
        enqueue: impl FnOnce(&Arc<CudaStream>) -> Result<R>,
    ) -> Result<Launched<R>> {
        Self::launch_cuda_on(&self.device, self.library, rec, enqueue)
    }

    /// [`launch_cuda`](Self::launch_cuda) without an `OpStream`, for a launch that borrows its
    /// device (a kernel launch) rather than keeping library state on a stream; `library` names
    /// what the simulator cannot run.
    pub(crate) fn launch_cuda_on<R>(
        device: &Device,
        library: &'static str,
        rec: LaunchRecorder,
        enqueue: impl FnOnce(&Arc<CudaStream>) -> Result<R>,
    ) -> Result<Launched<R>> {
        if device.is_simulated() {
            return Err(unavailable_on_sim(library));
        }
        // Library calls go to the current context; the handle was given this stream. Bound once
        // here for the op: the library call and the commit's record both run with it.
        rec.launch_event(device, |scope| enqueue(scope.bound_cuda_stream()?))
    }
}

/// What a refused recording names, for an op whose scalar result the GPU writes for the host.
#[cfg(any(feature = "cublas", feature = "cublaslt"))]
pub(crate) const HOST_READS_RESULT: &str = "an op whose result the GPU writes for the host to read";
/// What a refused recording names, for an op whose status words the GPU writes for the host.
#[cfg(feature = "cusolver")]
pub(crate) const HOST_READS_STATUS: &str = "an op whose status words the GPU writes for the host to read";
/// What a refused recording names, for a blocking library call whose outcome the host reads
/// when it returns.
#[cfg(feature = "cusolver")]
pub(crate) const HOST_READS_OUTCOME: &str = "a blocking library call whose outcome the host reads";

/// What a recorded simulated op's completion resolves with, as its CUDA form's would: `()` for a
/// kernel that returns nothing, `Ok(())` for one that returns only whether it succeeded; `None`
/// for a kernel with a value of its own.
fn recorded_value<R: 'static>() -> Option<R> {
    let unit: Box<dyn std::any::Any> = Box::new(());
    if let Ok(v) = unit.downcast::<R>() {
        return Some(*v);
    }
    let ok: Box<dyn std::any::Any> = Box::new(Ok::<(), Error>(()));
    ok.downcast::<R>().ok().map(|v| *v)
}

/// What a library op returns on the simulator, which has no NVIDIA libraries.
fn unavailable_on_sim(library: &'static str) -> Error {
    Error::LibraryUnavailable {
        library,
        hint: "the simulated backend has no NVIDIA libraries; open a CUDA device with Device::open",
    }
}

/// Records `buf` as argument `arg` of an op; a rejection names the argument.
pub(crate) fn record<T: Element>(
    rec: &mut LaunchRecorder,
    arg: &'static str,
    buf: &GpuRef<T>,
    access: Access,
) -> Result<()> {
    rec.access(buf, access).map(drop).map_err(|e| match e {
        Error::ForeignDevice { what, expected, found } => {
            Error::ForeignDevice { what: format!("argument `{arg}` ({what})"), expected, found }
        }
        Error::Stale { what, made, current } => {
            Error::Stale { what: format!("argument `{arg}` ({what})"), made, current }
        }
        other => other,
    })
}

/// The device address of `buf` as a typed pointer for a library call.
pub(crate) fn dptr<T: Element, P>(buf: &GpuRef<T>) -> Result<*mut P> {
    Ok(buf.raw_device_ptr()? as *mut P)
}
