//! One module per CUDA library, each behind its cargo feature, and the one path every library
//! op takes: validate every argument, record the uses on a strict [`LaunchRecorder`],
//! preflight, enqueue, commit.
//!
//! Validation happens in the op before [`OpStream::run`] is reached, so a rejected op has
//! neither recorded nor enqueued anything. The simulated backend has no NVIDIA libraries: ops
//! validate there too (so bad input is testable without a GPU), then return
//! [`Error::LibraryUnavailable`] before preflight.

#![cfg_attr(not(any(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]

#[cfg(feature = "curand")]
pub(crate) mod affine;
#[cfg(feature = "cublas")]
pub mod blas;
#[cfg(feature = "cufft")]
pub mod fft;
#[cfg(feature = "curand")]
pub mod rng;
#[cfg(feature = "nvrtc")]
pub(crate) mod rtc;
#[cfg(feature = "cublas")]
pub(crate) mod scalars;
pub(crate) mod validate;

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

/// The stream a library handle enqueues on, and the op path shared by every library.
pub(crate) struct OpStream {
    pub device: Device,
    pub stream: StreamId,
    /// The library's display name, for errors (`"cuBLAS"`).
    pub library: &'static str,
    /// The context epoch the library's handles were made in.
    pub epoch: u64,
}

impl OpStream {
    pub(crate) fn new(device: &Device, stream: StreamId, library: &'static str) -> Self {
        OpStream { device: device.internal(), stream, library, epoch: device.shared.epoch() }
    }

    /// Whether the device still runs on the context this library's handles were made in.
    pub(crate) fn is_current(&self) -> bool {
        self.epoch == self.device.shared.epoch()
    }

    /// A strict recorder on this stream for op `op`, for its uses.
    pub(crate) fn recorder(&self, op: &'static str) -> LaunchRecorder {
        // Traces name the library without the file name errors add (`cuBLAS (libcublas)`).
        let library = self.library.split(" (").next().unwrap_or(self.library);
        LaunchRecorder::new_strict(self.stream).labelled(OpLabel::new(library, op))
    }

    /// The raw stream when the device runs on CUDA, else the error a library op gives on the
    /// simulator.
    pub(crate) fn cuda_stream(&self) -> Result<Arc<CudaStream>> {
        if self.device.is_simulated() {
            return Err(self.unavailable_on_sim());
        }
        self.device.cuda_stream(self.stream)
    }

    /// Hands `object` (a library handle or plan made for this stream) to the device's reaper,
    /// which destroys it on the right context once the stream's work enqueued so far (which may
    /// use it) has finished; the caller never blocks. An object of a context the device has
    /// since replaced is abandoned: calling the library on it could only fail.
    pub(crate) fn retire(&self, what: &'static str, object: impl Send + 'static) {
        if !self.is_current() {
            std::mem::forget(object);
            return;
        }
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
        shared.reaper.defer(crate::reaper::Retired { what, after: vec![after], ctx, object: Box::new(object) });
    }

    pub(crate) fn unavailable_on_sim(&self) -> Error {
        Error::LibraryUnavailable {
            library: self.library,
            hint: "the simulated backend has no NVIDIA libraries; open a CUDA device with Device::open",
        }
    }

    /// Preflights `rec`, runs `enqueue` on the stream, commits, and returns a completion for
    /// the op whose value is `enqueue`'s result. `keep` stays alive until the GPU is done.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        enqueue: impl FnOnce() -> Result<R>,
    ) -> Result<Completion<R>> {
        Ok(self.launch(rec, |_| enqueue())?.complete(&self.device, keep))
    }

    #[cfg(feature = "cublas")]
    /// Like [`run`](Self::run), for ops whose value the GPU writes: `enqueue` returns how to
    /// read it, and the completion reads it once the GPU has passed the op's event.
    pub(crate) fn run_deferred<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        keep: Vec<KeepAlive>,
        enqueue: impl FnOnce() -> Result<crate::completion::Deferred<R>>,
    ) -> Result<Completion<R>> {
        let Launched { value: read, event, trace } = self.launch(rec, |_| enqueue())?;
        let (completion, shared) = Completion::queued(&self.device.shared);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        match event {
            Some(ev) => shared.enqueued_deferred(read, ev, keep),
            None => shared.enqueued(read(), None, keep),
        }
        Ok(completion)
    }

    /// Like [`run`](Self::run), for ops that enqueue on the scope's stream themselves (kernel
    /// launches) rather than through a library handle bound to it.
    #[cfg(feature = "nvrtc")]
    pub(crate) fn run_scoped<R: Send + 'static>(
        &self,
        rec: LaunchRecorder,
        enqueue: impl FnOnce(&Arc<CudaStream>) -> Result<R>,
    ) -> Result<Completion<R>> {
        Ok(self.launch(rec, enqueue)?.complete(&self.device, Vec::new()))
    }

    fn launch<R>(
        &self,
        rec: LaunchRecorder,
        enqueue: impl FnOnce(&Arc<CudaStream>) -> Result<R>,
    ) -> Result<Launched<R>> {
        if self.device.is_simulated() {
            return Err(self.unavailable_on_sim());
        }
        rec.launch_event(&self.device, |scope| {
            let stream = scope.cuda_stream()?;
            // Library calls go to the current context; the handle was given this stream.
            cuda::bind(stream.context())?;
            enqueue(stream)
        })
    }
}

/// A library's per-stream state as [`crate::Handles`] keeps it: made on first use, and made
/// anew once the device has rebuilt a poisoned context.
pub(crate) trait StreamLibrary: Sized {
    fn create(device: &Device, stream: StreamId) -> Result<Self>;
    fn op_stream(&self) -> &OpStream;
    /// Drops state of a poisoned context without calling the library on it (its memory goes
    /// with that context).
    fn abandon(self);
}

/// The library state in `slot`, made (or remade, after a context rebuild) as needed.
#[cfg_attr(not(any(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]
pub(crate) fn current<'a, L: StreamLibrary>(
    slot: &'a mut Option<L>,
    device: &Device,
    stream: StreamId,
) -> Result<&'a mut L> {
    let made = match slot.take() {
        Some(lib) if lib.op_stream().is_current() => lib,
        Some(stale) => {
            stale.abandon();
            L::create(device, stream)?
        }
        None => L::create(device, stream)?,
    };
    Ok(slot.insert(made))
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
