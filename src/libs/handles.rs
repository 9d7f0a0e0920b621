//! `Handles`: a stream and what work on it needs, the per-stream context both a lane's jobs
//! and the caller's own thread work through, with a lazily made slot and accessor per
//! registered library (generated from the registry). It lives with the libraries, below
//! `lane`, so that a library can add methods to it without importing the layer above.

use crate::completion::{Completion, KeepAlive, Shared};
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::recorder::LaunchRecorder;
use crate::track::reservation::{self, JobScope};
use crate::track::{EventRef, FenceError};
use std::sync::Arc;

/// A stream and what work on it needs: recorders bound to it, keep-alives, and (with the
/// library features) the library handles, created on first use and owned by this value's
/// thread.
///
/// One type serves both places: a lane's jobs receive the lane's `Handles`; on the caller's
/// own thread, make one with [`Handles::new`]
/// and use [`Handles::run`]. The library accessors (`blas`, `rng`, `fft` and the others, one
/// per library feature) are the same on both.
///
/// ```
/// use cusched::{Device, Handles, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let mut handles = Handles::new(&device, device.new_stream()?)?;
/// let x = device.upload(device.default_stream(), &[1u32, 2, 3])?;
/// // Runs on this thread; the completion resolves once the GPU work it enqueued is done.
/// let copy = handles
///     .run(|h| {
///         let y = h.device().alloc_zeros::<u32>(h.stream(), 3)?;
///         y.copy_from(h.stream(), &x)?;
///         Ok(y)
///     })
///     .wait()?;
/// assert_eq!(copy.download(device.default_stream())?, [1, 2, 3]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Handles {
    device: Device,
    stream: StreamId,
    keep: Vec<KeepAlive>,
    #[cfg_attr(not(feature = "_library"), allow(dead_code))]
    libs: Libraries,
}

/// Generates, from the library registry, every library's lazily made slot in [`Handles`] and
/// its accessor, named after the library's module.
macro_rules! library_slots {
    ($( #[cfg($gate:meta)] $vis:vis $name:ident: $ty:ident, )*) => {
        /// Each registered library's per-stream state, made on first use.
        #[derive(Default)]
        struct Libraries {
            $(
                #[cfg($gate)]
                $name: Option<crate::libs::$name::$ty>,
            )*
        }

        impl Handles {
            $(
                #[cfg($gate)]
                #[doc = concat!(
                    "This stream's [`", stringify!($ty), "`](crate::", stringify!($name), "::", stringify!($ty),
                    "), created on first use (and again after the device rebuilt a poisoned context) and owned",
                    " by this value."
                )]
                $vis fn $name(&mut self) -> Result<&mut crate::libs::$name::$ty> {
                    super::current(&mut self.libs.$name, &self.device, self.stream)
                }
            )*
        }
    };
}
super::registry!(library_slots);

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handles({})", self.stream)
    }
}

impl Handles {
    /// Handles for `stream` of `device`, used from the calling thread. Fails with
    /// [`Error::Shutdown`] once the device has shut down.
    pub fn new(device: &Device, stream: StreamId) -> Result<Handles> {
        if device.shared.is_shut_down() {
            return Err(Error::Shutdown);
        }
        device.shared.stream(stream)?;
        Ok(Handles { device: device.internal(), stream, keep: Vec::new(), libs: Libraries::default() })
    }

    /// The device. (Clones of it do not keep the device from shutting down.)
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The stream this context enqueues on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// A strict recorder on this stream.
    pub fn recorder(&self) -> LaunchRecorder {
        LaunchRecorder::new_strict(self.stream)
    }

    /// A permissive recorder on this stream.
    pub fn recorder_permissive(&self) -> LaunchRecorder {
        LaunchRecorder::new_permissive(self.stream)
    }

    /// Keeps `x` alive until the GPU has finished the current job (or, inline, the current
    /// [`run`](Self::run)).
    pub fn keep(&mut self, x: impl Send + 'static) {
        self.keep.push(Box::new(x));
    }

    /// Runs `f` now, on this thread, and returns a completion that resolves once the GPU work
    /// it enqueued has finished, on this stream and on any other it enqueued on. Only work
    /// committed on this thread while `f` runs counts: commits made by threads `f` starts, or
    /// a hand-paired [`Preflighted`](crate::Preflighted) committed after `f` returns, are not
    /// waited for.
    ///
    /// Like [`Lane::submit`](crate::Lane::submit), once the device has shut down this runs nothing and the
    /// completion resolves with [`Error::Shutdown`]. (Buffers stay usable until dropped, so
    /// their own methods, such as [`GpuRef::download`](crate::GpuRef::download), keep working
    /// after shutdown; completions made then are resolved on the caller's thread.)
    pub fn run<T: Send + 'static>(&mut self, f: impl FnOnce(&mut Handles) -> Result<T>) -> Completion<T> {
        let (completion, shared) = Completion::queued(&self.device.shared);
        if self.device.shared.is_shut_down() {
            shared.enqueued(Err(Error::Shutdown), None, Vec::new());
            return completion;
        }
        let scope = JobScope::new(None, None, None, self.stream);
        self.finish_job(&shared, f, scope);
        completion
    }

    /// Runs a job body as `scope` and hands its outcome, its end event and its keep-alives to
    /// `shared`. A job that fails leaves every buffer it wrote failed (see
    /// [`Error::FailedInput`]), before its completion resolves; its error comes back, for the
    /// lane to fail the job's declared writes too.
    pub(crate) fn finish_job<T: Send + 'static>(
        &mut self,
        shared: &Arc<Shared<T>>,
        f: impl FnOnce(&mut Handles) -> Result<T>,
        scope: JobScope,
    ) -> Option<Error> {
        self.keep.clear();
        // The context the job's work goes to: its end must be marked in that same context.
        let epoch = self.device.shared.epoch();
        let lane = scope.lane.clone();
        let ((value, ends), wrote) = crate::recorder::collect_writes(|| {
            reservation::in_job(scope, || {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *self))) {
                    Ok(v) => v,
                    Err(payload) => Err(Error::JobPanicked { message: panic_message(payload.as_ref()) }),
                }
            })
        });
        let failed = value.as_ref().err().cloned();
        if let Some(e) = &failed {
            wrote.fail(&job_name(lane.as_deref(), self.stream), e);
        }
        let keep = std::mem::take(&mut self.keep);
        // The job's last commit on this stream covers everything it enqueued here (every
        // enqueue is inside a launch, which commits even when it fails), so it is the job's end
        // unless the context moved since, or the job enqueued on other streams too; otherwise
        // one event after the job covers it all.
        let end = match ends.own {
            _ if !ends.others.is_empty() => self.join_streams(&ends.others, epoch),
            Some(ev) if ev.epoch() == epoch && !ev.context_replaced() => Ok(ev),
            _ => self.device.shared.record_since(self.stream, epoch),
        };
        match end {
            Ok(ev) => shared.enqueued(value, Some(ev), keep),
            Err(e) => {
                // Nothing to wait on: the stream is unusable. Keep-alives are leaked rather than
                // freed under work that may still run.
                log::error!("cusched: recording the end of a job on {} failed: {e}", self.stream);
                std::mem::forget(keep);
                shared.enqueued(value.and(Err(e)), None, Vec::new());
            }
        }
        failed
    }
}

/// How errors name a job whose failure a buffer carries: by its lane, or the stream of an
/// inline [`Handles::run`].
fn job_name(lane: Option<&str>, stream: StreamId) -> String {
    match lane {
        Some(lane) => format!("the job on lane `{lane}`"),
        None => format!("the Handles::run on {stream}"),
    }
}

impl Handles {
    /// The end of a job that also committed on other streams (`others`: each one's last
    /// commit), begun in context epoch `epoch`: this stream waits for those commits (only the
    /// waits its clock does not cover already), and an event recorded after the waits covers
    /// everything the job enqueued, on every stream, so its completion and keep-alives wait
    /// for all of it.
    #[cold]
    #[inline(never)]
    fn join_streams(&self, others: &[(StreamId, EventRef)], epoch: u64) -> Result<EventRef> {
        let shared = &self.device.shared;
        let events: Vec<EventRef> = others.iter().map(|(_, ev)| ev.clone()).collect();
        match shared.stream(self.stream)?.fence(&events) {
            Ok((_, fenced)) if fenced == epoch => shared.record_since(self.stream, epoch),
            // Part of the job's work went to a context the device has left since it began.
            Ok(_) | Err(FenceError::OtherContext { .. }) => Err(shared.poison_since(epoch)),
            Err(FenceError::Failed { error, stream_epoch }) => Err(shared.classify(error, stream_epoch)),
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
