//! `Lane`: a worker thread that owns one stream, a bounded job queue and the library handles it
//! creates lazily; and `Handles`, the per-stream context both a lane's jobs and the caller's own
//! thread work through.

use crate::completion::{Completion, KeepAlive, Shared};
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::recorder::LaunchRecorder;
use crossbeam_channel::{bounded, select, Receiver, Sender, TryRecvError, TrySendError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// A stream and what work on it needs: recorders bound to it, keep-alives, and (with the
/// library features) the library handles, created on first use and owned by this value's
/// thread.
///
/// One type serves both places: a lane's jobs receive the lane's `Handles` (spelled
/// [`LaneCtx`] in job signatures); on the caller's own thread, make one with [`Handles::new`]
/// and use [`Handles::run`]. The library accessors ([`blas`](Self::blas), [`rng`](Self::rng),
/// [`fft`](Self::fft), with their features) are the same on both.
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
    #[cfg_attr(
        not(any(feature = "cublas", feature = "cublaslt", feature = "curand", feature = "cufft")),
        allow(dead_code)
    )]
    libs: Libraries,
}

/// What a lane job receives: the lane's [`Handles`]. The same type, not a wrapper: a job body
/// written for a lane runs unchanged through [`Handles::run`] on the caller's thread.
pub type LaneCtx = Handles;

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
                    crate::libs::current(&mut self.libs.$name, &self.device, self.stream)
                }
            )*
        }
    };
}
crate::libs::registry!(library_slots);

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
    /// it enqueued on this stream has finished.
    ///
    /// Like [`Lane::submit`], once the device has shut down this runs nothing and the
    /// completion resolves with [`Error::Shutdown`]. (Buffers stay usable until dropped, so
    /// their own methods, such as [`GpuRef::download`](crate::GpuRef::download), keep working
    /// after shutdown; completions made then are resolved on the caller's thread.)
    pub fn run<T: Send + 'static>(&mut self, f: impl FnOnce(&mut Handles) -> Result<T>) -> Completion<T> {
        let (completion, shared) = Completion::queued(&self.device.shared);
        if self.device.shared.is_shut_down() {
            shared.enqueued(Err(Error::Shutdown), None, Vec::new());
            return completion;
        }
        self.finish_job(&shared, f);
        completion
    }

    /// Runs a job body and hands its outcome, its end event and its keep-alives to `shared`.
    fn finish_job<T: Send + 'static>(&mut self, shared: &Arc<Shared<T>>, f: impl FnOnce(&mut Handles) -> Result<T>) {
        self.keep.clear();
        // The context the job's work goes to: its end must be marked in that same context.
        let epoch = self.device.shared.epoch();
        let value = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))) {
            Ok(v) => v,
            Err(payload) => Err(Error::JobPanicked { message: panic_message(payload.as_ref()) }),
        };
        let keep = std::mem::take(&mut self.keep);
        // One event after the job covers every kernel and copy it enqueued on this stream,
        // including any it enqueued before failing.
        match self.device.shared.record_since(self.stream, epoch) {
            Ok(ev) => shared.enqueued(value, Some(ev), keep),
            Err(e) => {
                // Nothing to wait on: the stream is unusable. Keep-alives are leaked rather than
                // freed under work that may still run.
                log::error!("cusched: recording the end of a job on {} failed: {e}", self.stream);
                std::mem::forget(keep);
                shared.enqueued(value.and(Err(e)), None, Vec::new());
            }
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

enum Call<'a> {
    Run(&'a mut Handles),
    /// Resolve the job's completion with this error, unrun.
    Cancel(Error),
}

type Job = Box<dyn FnOnce(Call<'_>) + Send>;

/// Per-lane options.
#[derive(Clone, Debug)]
pub struct LaneOptions {
    /// Jobs the queue holds before `submit` blocks and `try_submit` fails.
    pub capacity: usize,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions { capacity: 1024 }
    }
}

struct LaneInner {
    /// Unique in the process, never 0: what the lane's thread records as its role, so that
    /// waits that only this lane could end are refused on it.
    id: u64,
    name: String,
    stream: StreamId,
    device: Arc<DeviceShared>,
    tx: Option<Sender<Job>>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// A worker thread owning one stream. Cheap to clone; the last clone dropped runs the jobs
/// still queued and joins the thread, and the stream passes to the next lane the device
/// starts (a stream is in order, so that lane's work follows this one's), so that lanes can be
/// started and dropped without running out of [`DeviceConfig::max_streams`](crate::DeviceConfig).
///
/// ```
/// use cusched::{Device, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let lane = device.lane("upload")?;
/// // The job runs on the lane's thread, with the lane's stream and handles.
/// let buf = lane.submit(|cx| cx.device().upload(cx.stream(), &[7u8; 16])).wait()?;
/// assert_eq!(buf.download(lane.stream())?, [7u8; 16]);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone)]
pub struct Lane {
    inner: Arc<LaneInner>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lane({}, {})", self.inner.name, self.inner.stream)
    }
}

impl Device {
    /// Starts a lane named `name` on a stream of its own: a new one, or one a dropped lane gave
    /// back.
    pub fn lane(&self, name: &str) -> Result<Lane> {
        self.lane_with(name, LaneOptions::default())
    }

    /// Starts a lane with options.
    pub fn lane_with(&self, name: &str, options: LaneOptions) -> Result<Lane> {
        if options.capacity == 0 {
            return Err(Error::invalid("LaneOptions::capacity", "must be at least 1"));
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let shutdown = self.shared.shutdown_signal().ok_or(Error::Shutdown)?;
        // A stream a dropped lane gave back, or a new one.
        let stream = self.shared.lane_stream(name)?;
        let handles = match Handles::new(self, stream) {
            Ok(h) => h,
            Err(e) => {
                self.shared.release_stream(stream);
                return Err(e);
            }
        };
        let (tx, rx) = bounded::<Job>(options.capacity);
        let spin = self.shared.config.spin;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let device = self.shared.clone();
        let spawned = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            crate::sync::role::set_lane(id);
            lane_loop(handles, rx, shutdown, spin);
            // The lane's handles are gone and it enqueues nothing more: a later lane may take
            // the stream (it is in order, so that lane's work follows this one's).
            device.release_stream(stream);
        });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                self.shared.release_stream(stream);
                return Err(Error::invalid("name", format!("could not spawn the lane thread: {e}")));
            }
        };
        let thread = Arc::new(Mutex::new(Some(thread)));
        self.shared.register_lane(thread.clone());
        Ok(Lane {
            inner: Arc::new(LaneInner {
                id,
                name: name.to_string(),
                stream,
                device: self.shared.clone(),
                tx: Some(tx),
                thread,
            }),
        })
    }
}

fn lane_loop(mut handles: Handles, jobs: Receiver<Job>, shutdown: Receiver<()>, spin: std::time::Duration) {
    loop {
        // Spin briefly before parking: waking a parked thread costs far more than a short spin.
        // Measured as elapsed time, so that no spin overflows `Instant`; shutdown ends it.
        let spin_start = Instant::now();
        let mut job = None;
        while spin_start.elapsed() < spin && !handles.device.shared.is_shut_down() {
            match jobs.try_recv() {
                Ok(j) => {
                    job = Some(Ok(j));
                    break;
                }
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
        let next = match job {
            Some(j) => j,
            None => select! {
                recv(jobs) -> j => j.map_err(|_| ()),
                recv(shutdown) -> _ => Err(()),
            },
        };
        match next {
            Ok(job) if !handles.device.shared.is_shut_down() => job(Call::Run(&mut handles)),
            Ok(job) => {
                job(Call::Cancel(Error::Shutdown));
                drain(&jobs);
                return;
            }
            Err(()) if handles.device.shared.is_shut_down() => {
                drain(&jobs);
                return;
            }
            Err(()) => return,
        }
    }
}

fn drain(jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.try_recv() {
        job(Call::Cancel(Error::Shutdown));
    }
}

impl Lane {
    /// The lane's stream.
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }

    /// The lane's name (also its thread's name).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    fn job<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut LaneCtx) -> Result<T> + Send + 'static,
    ) -> (Completion<T>, Job) {
        let (completion, shared) = Completion::queued_on(&self.inner.device, self.inner.id);
        let guard = CancelOnDrop(Some(shared));
        let job: Job = Box::new(move |call| {
            let mut guard = guard;
            let Some(shared) = guard.0.take() else { return };
            match call {
                Call::Run(h) => h.finish_job(&shared, f),
                Call::Cancel(e) => shared.enqueued(Err(e), None, Vec::new()),
            }
        });
        (completion, job)
    }

    /// Queues `f` to run on the lane's thread, blocking while the queue is full. The
    /// completion resolves with `f`'s value once the GPU work `f` enqueued has finished, with
    /// `f`'s error, with [`Error::JobPanicked`] if it panicked, or with [`Error::Shutdown`] if the
    /// device shut down before it ran. From a job on this same lane, a full queue could never
    /// drain: the job is not queued and the completion resolves with [`Error::WouldDeadlock`].
    pub fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut LaneCtx) -> Result<T> + Send + 'static,
    ) -> Completion<T> {
        let (completion, job) = self.job(f);
        if self.inner.device.is_shut_down() {
            job(Call::Cancel(Error::Shutdown));
            return completion;
        }
        let Some(tx) = &self.inner.tx else { return completion };
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) if crate::sync::role::lane() == self.inner.id => {
                job(Call::Cancel(Error::WouldDeadlock {
                    what: format!(
                        "a job on lane `{}` submitted to the lane's own full queue, which only drains after the job returns; use try_submit, a larger LaneOptions::capacity, or another lane",
                        self.inner.name
                    ),
                }));
            }
            Err(TrySendError::Full(job)) => {
                if let Err(e) = tx.send(job) {
                    (e.0)(Call::Cancel(Error::Shutdown));
                }
            }
            Err(TrySendError::Disconnected(job)) => job(Call::Cancel(Error::Shutdown)),
        }
        completion
    }

    /// Like [`submit`](Self::submit) but fails with [`Error::QueueFull`] instead of blocking.
    pub fn try_submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut LaneCtx) -> Result<T> + Send + 'static,
    ) -> Result<Completion<T>> {
        if self.inner.device.is_shut_down() {
            return Err(Error::Shutdown);
        }
        let (completion, job) = self.job(f);
        match self.inner.tx.as_ref().map(|tx| tx.try_send(job)) {
            Some(Ok(())) => Ok(completion),
            Some(Err(TrySendError::Full(_))) => Err(Error::QueueFull),
            Some(Err(TrySendError::Disconnected(_))) | None => Err(Error::Shutdown),
        }
    }
}

/// Resolves a job's completion with [`Error::Shutdown`] if the job is dropped unrun (a queue
/// torn down with jobs still in it), so that no waiter hangs.
struct CancelOnDrop<T: Send + 'static>(Option<Arc<Shared<T>>>);

impl<T: Send + 'static> Drop for CancelOnDrop<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.enqueued(Err(Error::Shutdown), None, Vec::new());
        }
    }
}

impl Drop for LaneInner {
    fn drop(&mut self) {
        // Disconnecting the queue lets the worker run what is queued, then exit.
        drop(self.tx.take());
        let handle = crate::sync::lock(&self.thread).take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}
