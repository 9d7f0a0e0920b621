//! `Device`: a context (CUDA or simulated), its streams, configuration and generation.

mod poison;
#[cfg(test)]
pub(crate) use poison::rebuild_hooks;
#[cfg(test)]
mod rebuild_tests;

use crate::backend::sim::{FenceMutation, Hazard, SimConfig, SimShared};
use crate::backend::{cuda, BackendCtx};
use crate::completion::Completions;
use crate::error::{Error, Result};
pub use crate::track::StreamId;
use crate::track::{EventPool, EventRef, StreamSlot, StreamStats};
use crossbeam_channel::{Receiver, Sender};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Settings shared by both backends.
///
/// The defaults: `max_streams` 64, `preflight_timeout` 10 s, `spin` 50 µs, no on-disk kernel
/// cache, no watchdog, no limit on cached pinned memory.
///
/// ```
/// use cusched::{Device, DeviceConfig, SimConfig};
/// use std::time::Duration;
///
/// let config = DeviceConfig { watchdog: Some(Duration::from_secs(30)), ..DeviceConfig::default() };
/// assert_eq!(config.max_streams, 64);
/// let device = Device::sim_with(SimConfig::default(), config)?;
/// # drop(device);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Most streams the device will create (each is one entry of every vector clock).
    /// Default 64; `Device::new_stream` fails past it.
    pub max_streams: usize,
    /// Longest a preflight waits for another thread's uncommitted launch on the same buffer
    /// before failing with [`Error::BufferBusy`]. Default 10 s.
    pub preflight_timeout: Duration,
    /// How long lane workers, the completion thread and blocking waiters spin before they
    /// park. Waking a parked thread costs far more than a short spin (about 15 µs on an H100
    /// host), so back-to-back work stays fast; zero parks at once and saves CPU. Default 50 µs.
    pub spin: Duration,
    /// A directory where compiled kernels persist across runs (keyed on source, options, name
    /// expressions, architecture and NVRTC version; written atomically). `None`: memory only.
    #[cfg(feature = "nvrtc")]
    pub kernel_cache_dir: Option<std::path::PathBuf>,
    /// A watchdog: a job or op whose GPU work has not finished this long after it was enqueued
    /// resolves with [`Error::Timeout`]; its keep-alives stay held until the GPU really finishes.
    /// `None` (the default): completions wait as long as the GPU takes. With a watchdog every
    /// completion is watched by the completion thread, and `Completion::wait` waits for it
    /// rather than synchronizing on the event itself. Shutdown, too, gives up on the GPU after
    /// this long (see [`Device::shutdown`]).
    pub watchdog: Option<Duration>,
    /// Most bytes of pinned host memory kept for reuse after [`HostBuffer`](crate::HostBuffer)s
    /// drop. Freeing pinned memory (`cuMemFreeHost`) waits until the whole device is idle and
    /// holds up every other thread's CUDA calls meanwhile, so a dropped buffer's memory is kept
    /// and serves the next [`Device::alloc_host`] or [`Device::host_from_slice`] of its size
    /// class (sizes round up by at most a quarter, or to a whole page). Blocks past the limit are freed on the
    /// reaper thread, with that stall. `None` (the default): no limit; release memory with
    /// [`Device::trim_host_cache`]. Unused by the simulator, which has no pinned memory.
    pub host_cache_limit: Option<usize>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            max_streams: 64,
            preflight_timeout: Duration::from_secs(10),
            spin: Duration::from_micros(50),
            #[cfg(feature = "nvrtc")]
            kernel_cache_dir: None,
            watchdog: None,
            host_cache_limit: None,
        }
    }
}

/// State shared by a device's handles, buffers, recorders and (later) threads.
pub(crate) struct DeviceShared {
    pub uid: u32,
    pub ordinal: usize,
    /// The context; replaced when a poisoned one is rebuilt.
    backend: RwLock<BackendCtx>,
    is_sim: bool,
    pub config: DeviceConfig,
    generation: AtomicU64,
    /// Advances only when the context is rebuilt (the generation also advances on demand).
    epoch: AtomicU64,
    /// The first failure of the most recently poisoned context.
    poison: Mutex<Option<poison::Poison>>,
    /// The context is poisoned and could not be rebuilt: every new op fails fast.
    dead: AtomicBool,
    streams: Box<[OnceLock<StreamSlot>]>,
    stream_count: AtomicUsize,
    stream_create: Mutex<()>,
    /// Streams that dropped lanes gave back, for the next lanes to take.
    free_streams: Mutex<Vec<StreamId>>,
    pub events: Arc<EventPool>,
    /// The ordering rule the tracker breaks on purpose (simulated checker self-tests only).
    pub fence_mutation: Option<FenceMutation>,
    completions: Completions,
    /// Dropped at shutdown: every lane selects on its receiver, so dropping it wakes them all.
    shutdown_tx: Mutex<Option<Sender<()>>>,
    shutdown_rx: Receiver<()>,
    shut_down: AtomicBool,
    lanes: Mutex<Vec<LaneThread>>,
    /// Per-device state of the layers above (the NVRTC module cache), by type.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub libs: crate::sync::TypeSlots,
    pub tracer: crate::trace::Tracer,
    /// Destroys library handles, plans and pinned memory after the GPU is done with them.
    pub reaper: crate::reaper::Reaper,
    /// Pinned blocks of dropped host buffers, for reuse.
    pub host_cache: crate::host_cache::HostCache,
}

type LaneThread = Arc<Mutex<Option<std::thread::JoinHandle<()>>>>;

impl DeviceShared {
    pub(crate) fn new(
        ordinal: usize,
        backend: BackendCtx,
        config: DeviceConfig,
        fence_mutation: Option<FenceMutation>,
    ) -> Result<Arc<Self>> {
        static NEXT_UID: AtomicU32 = AtomicU32::new(1);
        if config.max_streams == 0 {
            return Err(Error::invalid("DeviceConfig::max_streams", "must be at least 1"));
        }
        let streams = (0..config.max_streams).map(|_| OnceLock::new()).collect();
        let (config_spin, watchdog, host_cache_limit) = (config.spin, config.watchdog, config.host_cache_limit);
        let (shutdown_tx, shutdown_rx) = crossbeam_channel::bounded(0);
        let uid = NEXT_UID.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(DeviceShared {
            uid,
            ordinal,
            events: Arc::new(EventPool::new(backend.clone(), 1)),
            is_sim: matches!(backend, BackendCtx::Sim(_)),
            backend: RwLock::new(backend),
            config,
            generation: AtomicU64::new(1),
            epoch: AtomicU64::new(1),
            poison: Mutex::new(None),
            dead: AtomicBool::new(false),
            streams,
            stream_count: AtomicUsize::new(0),
            stream_create: Mutex::new(()),
            free_streams: Mutex::new(Vec::new()),
            fence_mutation,
            completions: Completions::new(uid, config_spin, watchdog),
            shutdown_tx: Mutex::new(Some(shutdown_tx)),
            shutdown_rx,
            shut_down: AtomicBool::new(false),
            lanes: Mutex::new(Vec::new()),
            libs: Default::default(),
            tracer: Default::default(),
            reaper: Default::default(),
            host_cache: crate::host_cache::HostCache::new(host_cache_limit),
        });
        shared.create_stream()?;
        Ok(shared)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The context epoch: advances each time a poisoned context is rebuilt.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The current backend context.
    pub(crate) fn backend(&self) -> BackendCtx {
        crate::sync::read(&self.backend).clone()
    }

    /// The current backend context and its epoch, as one pair: `rebuild` replaces both under
    /// the backend's write lock, so what is made from the context is never labelled with the
    /// epoch of another one.
    pub(crate) fn backend_epoch(&self) -> (BackendCtx, u64) {
        let backend = crate::sync::read(&self.backend);
        (backend.clone(), self.epoch())
    }

    /// Blocks until the GPU has passed `ev`; a failure is classified for the event's epoch.
    pub(crate) fn wait_event(&self, ev: &EventRef) -> Result<()> {
        self.check(ev.synchronize(), ev.epoch())
    }

    pub(crate) fn completions(&self) -> &Completions {
        &self.completions
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// A receiver that disconnects at shutdown, or `None` once shut down.
    pub(crate) fn shutdown_signal(&self) -> Option<Receiver<()>> {
        (!self.is_shut_down()).then(|| self.shutdown_rx.clone())
    }

    pub(crate) fn register_lane(&self, thread: LaneThread) {
        let mut lanes = crate::sync::lock(&self.lanes);
        lanes.retain(|t| crate::sync::lock(t).is_some());
        lanes.push(thread);
    }

    /// Stops every lane (jobs not yet started resolve with `Error::Shutdown`), waits for the
    /// GPU work of every pending completion, and joins the threads. Idempotent.
    ///
    /// Called on a lane or completion thread (of any device: in a lane job or a callback), it
    /// only starts the shutdown: joining there could wait on this very thread, or on a lane waiting for a
    /// job queued behind it. The threads then finish on their own; a later call from any
    /// other thread (the last `Device` dropped, say) joins them.
    fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::AcqRel) {
            drop(crate::sync::lock(&self.shutdown_tx).take());
            self.host_cache.close(&self.reaper);
        }
        if crate::sync::role::on_device_thread() {
            self.completions.stop();
            return;
        }
        let lanes = std::mem::take(&mut *crate::sync::lock(&self.lanes));
        for t in lanes {
            let handle = crate::sync::lock(&t).take();
            if let Some(h) = handle {
                let _ = h.join();
            }
        }
        self.completions.shutdown();
        self.reaper.shutdown();
    }

    /// A stream for a new lane named `lane`: one a dropped lane gave back, or a new one.
    pub(crate) fn lane_stream(&self, lane: &str) -> Result<StreamId> {
        let reused = crate::sync::lock(&self.free_streams).pop();
        let id = match reused {
            Some(id) => id,
            None => self.create_stream()?,
        };
        self.stream(id)?.set_lane(Some(Arc::from(lane)));
        Ok(id)
    }

    /// Gives back the stream of a lane whose thread has finished with it. Work it enqueued may
    /// still run: the stream is in order, so the next owner's work follows it.
    pub(crate) fn release_stream(&self, id: StreamId) {
        if let Ok(slot) = self.stream(id) {
            slot.set_lane(None);
        }
        crate::sync::lock(&self.free_streams).push(id);
    }

    pub(crate) fn advance_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub(crate) fn label(&self) -> String {
        format!("#{} ({} {})", self.uid, if self.is_sim { "sim" } else { "cuda" }, self.ordinal)
    }

    fn create_stream(&self) -> Result<StreamId> {
        let _guard = crate::sync::lock(&self.stream_create);
        let index = self.stream_count.load(Ordering::Acquire);
        if index >= self.streams.len() {
            return Err(Error::invalid(
                "new_stream",
                format!("the device already has DeviceConfig::max_streams = {} streams", self.streams.len()),
            ));
        }
        let id = StreamId { device: self.uid, index: index as u32 };
        let (backend, epoch) = self.backend_epoch();
        let raw = backend.new_stream(id.index)?;
        // The slot is empty: indices are handed out once, under `stream_create`.
        let _ = self.streams[index].set(StreamSlot::new(id, raw, epoch, self.fence_mutation, &self.events));
        self.stream_count.store(index + 1, Ordering::Release);
        Ok(id)
    }

    /// The slot of `id`, after checking the id belongs to this device.
    pub(crate) fn stream(&self, id: StreamId) -> Result<&StreamSlot> {
        if self.dead.load(Ordering::Relaxed) {
            if let Some(e) = self.poisoned_now() {
                return Err(e);
            }
        }
        if id.device == self.uid {
            if let Some(slot) = self.streams.get(id.index as usize).and_then(|s| s.get()) {
                return Ok(slot);
            }
        }
        Err(self.no_stream(id))
    }

    /// [`poisoned`](Self::poisoned), out of line for the lookups that check it first.
    #[cold]
    #[inline(never)]
    fn poisoned_now(&self) -> Option<Error> {
        self.poisoned()
    }

    /// Why [`stream`](Self::stream) has no slot for `id`. Out of line: building the error
    /// would otherwise cost every lookup a larger frame.
    #[cold]
    #[inline(never)]
    fn no_stream(&self, id: StreamId) -> Error {
        if id.device != self.uid {
            return Error::ForeignDevice {
                what: id.to_string(),
                expected: self.label(),
                found: format!("#{}", id.device),
            };
        }
        Error::UnknownStream { stream: id.to_string(), device: self.label() }
    }

    /// The name of the lane that owns `stream`, if a lane does.
    pub(crate) fn lane_name(&self, stream: StreamId) -> Option<Arc<str>> {
        self.stream(stream).ok()?.lane()
    }

    pub(crate) fn slot_by_index(&self, index: u32) -> Option<&StreamSlot> {
        self.streams.get(index as usize).and_then(|s| s.get())
    }

    pub(crate) fn slots(&self) -> impl Iterator<Item = &StreamSlot> {
        self.streams.iter().map_while(|s| s.get())
    }

    /// Records an event on `stream` covering all work enqueued there so far.
    pub(crate) fn record(&self, stream: StreamId) -> Result<EventRef> {
        self.record_since(stream, self.epoch())
    }

    /// Records an event on `stream` covering work enqueued there since context epoch `epoch`
    /// (read when that work started): if the device has moved to a new context meanwhile, that
    /// work went to the poisoned one, and an event on the new stream would report it finished,
    /// so this fails with the poison instead. A failure is classified for `epoch`.
    pub(crate) fn record_since(&self, stream: StreamId, epoch: u64) -> Result<EventRef> {
        let recorded = self.stream(stream)?.record_in(&self.events, Some(epoch));
        match recorded {
            Some(r) => self.check(r, epoch),
            None => Err(self.poison_since(epoch)),
        }
    }

    pub(crate) fn cuda_ctx(&self, what: &'static str) -> Result<Arc<cudarc::driver::CudaContext>> {
        match self.backend() {
            BackendCtx::Cuda(ctx) => Ok(ctx),
            BackendCtx::Sim(_) => Err(Error::WrongBackend { what, needed: "cuda", actual: "sim" }),
        }
    }
}

/// A GPU (or its CPU simulation): the context, its streams and the tracker state.
///
/// Cheap to clone; all clones share one context.
///
/// ```
/// use cusched::{Device, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.new_stream()?;
/// let buf = device.upload(s, &[1.0f32, 2.0, 3.0])?;
/// assert_eq!(buf.download(device.default_stream())?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<DeviceShared>,
    /// Present on handles the user holds: when the last one drops, the device shuts down.
    /// Handles the crate gives out internally (to lane jobs, say) carry none, so they never
    /// keep a device from shutting down.
    _owner: Option<Arc<Owner>>,
}

struct Owner(Arc<DeviceShared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device{}", self.shared.label())
    }
}

impl Device {
    /// Opens CUDA device `ordinal` with the default configuration.
    ///
    /// Without a driver this returns [`Error::LibraryUnavailable`], without such a device
    /// [`Error::NoDevice`]; it never panics.
    pub fn open(ordinal: usize) -> Result<Device> {
        Device::open_with(ordinal, DeviceConfig::default())
    }

    /// Opens CUDA device `ordinal` with `config`.
    pub fn open_with(ordinal: usize, config: DeviceConfig) -> Result<Device> {
        let ctx = cuda::open(ordinal)?;
        Ok(Device::owned(DeviceShared::new(ordinal, BackendCtx::Cuda(ctx), config, None)?))
    }

    /// A simulated device: streams are CPU threads, kernels are host closures.
    pub fn sim(sim: SimConfig) -> Result<Device> {
        Device::sim_with(sim, DeviceConfig::default())
    }

    /// A simulated device with a device configuration.
    pub fn sim_with(sim: SimConfig, config: DeviceConfig) -> Result<Device> {
        let mutation = sim.fence_mutation;
        Ok(Device::owned(DeviceShared::new(0, BackendCtx::Sim(SimShared::new(sim)), config, mutation)?))
    }

    pub(crate) fn owned(shared: Arc<DeviceShared>) -> Device {
        Device { _owner: Some(Arc::new(Owner(shared.clone()))), shared }
    }

    /// A handle that does not keep the device from shutting down.
    pub(crate) fn internal(&self) -> Device {
        Device { shared: self.shared.clone(), _owner: None }
    }

    pub(crate) fn from_shared(shared: &Arc<DeviceShared>) -> Device {
        Device { shared: shared.clone(), _owner: None }
    }

    /// Shuts the device down now instead of when the last handle drops: lanes stop (jobs not
    /// yet started resolve with [`Error::Shutdown`]), pending completions resolve once their GPU
    /// work finishes, and every thread is joined. New work then fails with
    /// [`Error::Shutdown`], on lanes and through [`Handles`](crate::Handles) alike. Buffers stay
    /// valid until dropped.
    ///
    /// Shutdown waits for the GPU to finish the work of pending completions, as long as that
    /// takes; with [`DeviceConfig::watchdog`] set it gives up after the watchdog's limit,
    /// resolves what is left with [`Error::Timeout`] and leaks those jobs' keep-alives (logged)
    /// rather than freeing memory the GPU may still use.
    ///
    /// Called from a lane job or an `on_complete` callback (of any device), it only starts the
    /// shutdown and returns: joining there could wait on the calling thread itself. The threads
    /// then finish on their own, and a later call from another thread joins them.
    pub fn shutdown(&self) {
        self.shared.shutdown();
    }

    /// Whether this device is the CPU simulation.
    pub fn is_simulated(&self) -> bool {
        self.shared.is_sim
    }

    /// The compute capability `(major, minor)`: `(9, 0)` on an H100. A simulated device reports
    /// [`SimConfig::compute_capability`].
    pub fn compute_capability(&self) -> Result<(u32, u32)> {
        match self.shared.backend() {
            BackendCtx::Cuda(ctx) => {
                let (major, minor) = cuda::arch(&ctx)?;
                Ok((major.max(0) as u32, minor.max(0) as u32))
            }
            BackendCtx::Sim(sim) => Ok(sim.config.compute_capability),
        }
    }

    /// The device ordinal (0 for simulated devices).
    pub fn ordinal(&self) -> usize {
        self.shared.ordinal
    }

    /// `Some(Error::ContextPoisoned)`, naming the first failing call, while the device's context
    /// is poisoned and could not be rebuilt; every new op then fails with that error at once.
    ///
    /// A sticky fault (an illegal address, a trap) poisons the context; the device then makes a
    /// new one and carries on (old handles become [`Error::Stale`]). Current NVIDIA drivers,
    /// though, refuse every new context on the device for the rest of the process after such a
    /// fault; then this returns `Some` and only a new process can use the GPU again.
    pub fn poisoned(&self) -> Option<Error> {
        self.shared.poisoned()
    }

    /// The current context generation; buffers made in an earlier one are stale.
    pub fn generation(&self) -> u64 {
        self.shared.generation()
    }

    /// Makes every handle made so far (buffers, compiled kernels) stale: using one afterwards
    /// returns [`Error::Stale`] instead of touching its memory. Their memory is still freed,
    /// fenced, when their last handle drops.
    pub fn advance_generation(&self) -> u64 {
        self.shared.advance_generation()
    }

    /// The stream every device starts with (a created, non-blocking stream, not CUDA's legacy
    /// default stream).
    pub fn default_stream(&self) -> StreamId {
        StreamId { device: self.shared.uid, index: 0 }
    }

    /// Creates another stream.
    pub fn new_stream(&self) -> Result<StreamId> {
        self.shared.create_stream()
    }

    /// The cudarc context, for calls this crate does not wrap. After the device rebuilds a
    /// poisoned context this is a new one: fetch it again rather than keeping it.
    ///
    /// # Safety
    ///
    /// cusched turns cudarc's own event tracking off on the device's context: it orders work
    /// itself, through the recorder. cudarc's safe API relies on that tracking to order memory
    /// used from several streams and to keep it alive until the GPU is done with it, so these
    /// duties pass to the caller.
    /// 1. Every cudarc object made from the context (streams, slices, events, modules) must be
    ///    used so that its GPU work is ordered by the caller: memory on one stream only, or with
    ///    the caller's own events between streams, and freed only after the work that uses it
    ///    (cudarc's drop no longer waits for it).
    /// 2. Memory cusched owns is reached only inside a [`crate::LaunchRecorder`] launch that
    ///    declares the use, on that launch's stream.
    ///
    /// Calling it needs `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// fn context(device: &cusched::Device) {
    ///     let _ = device.cuda_context();
    /// }
    /// ```
    pub unsafe fn cuda_context(&self) -> Result<Arc<cudarc::driver::CudaContext>> {
        self.shared.cuda_ctx("Device::cuda_context")
    }

    /// The cudarc stream behind `stream`, for work cusched does not wrap. Inside a launch,
    /// prefer [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream).
    ///
    /// # Safety
    ///
    /// cusched turns cudarc's own event tracking off on the device's context: it orders work
    /// itself, through the recorder. cudarc's safe API relies on that tracking to order memory
    /// used from several streams and to keep it alive until the GPU is done with it, so these
    /// duties pass to the caller.
    /// 1. Work that touches memory cusched owns is enqueued on it only inside a
    ///    [`crate::LaunchRecorder`] launch on `stream` that declares each use.
    /// 2. cudarc memory made from it (or from its context) is ordered by the caller when used
    ///    from another stream, and freed only after the work that uses it.
    ///
    /// Calling it needs `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// fn stream(device: &cusched::Device) {
    ///     let _ = device.cuda_stream(device.default_stream());
    /// }
    /// ```
    pub unsafe fn cuda_stream(&self, stream: StreamId) -> Result<Arc<cudarc::driver::CudaStream>> {
        self.raw_cuda_stream(stream)
    }

    /// The cudarc stream behind `stream`, for crate code (which orders its own work).
    pub(crate) fn raw_cuda_stream(&self, stream: StreamId) -> Result<Arc<cudarc::driver::CudaStream>> {
        match &*self.shared.stream(stream)?.raw() {
            crate::backend::RawStream::Cuda(s) => Ok(s.clone()),
            crate::backend::RawStream::Sim(_) => {
                Err(Error::WrongBackend { what: "Device::cuda_stream", needed: "cuda", actual: "sim" })
            }
        }
    }

    /// Calls `hook` around every op from now on (see [`KernelTrace`](crate::KernelTrace)),
    /// replacing any hook set before. With [`TraceOptions::gpu_timing`](crate::TraceOptions)
    /// this records a reference event and waits for it once, so that GPU times map to host
    /// time.
    pub fn set_trace(&self, hook: std::sync::Arc<dyn crate::KernelTrace>, options: crate::TraceOptions) -> Result<()> {
        let slot = self.shared.stream(self.default_stream())?;
        self.shared.tracer.set(hook, options, &self.shared.backend(), &slot.raw())
    }

    /// Stops tracing: the op path goes back to one relaxed load per op. Ops already traced
    /// still get their completion hooks.
    pub fn clear_trace(&self) {
        self.shared.tracer.clear();
    }

    /// Blocks until all work enqueued on `stream` so far has finished.
    pub fn synchronize(&self, stream: StreamId) -> Result<()> {
        let ev = self.shared.record(stream)?;
        self.shared.wait_event(&ev)
    }

    /// Fences and events the tracker has issued on all streams.
    pub fn stats(&self) -> StreamStats {
        let mut total = StreamStats::default();
        for s in self.shared.slots() {
            total += s.stats();
        }
        total
    }

    /// Fences and events the tracker has issued on one stream.
    pub fn stream_stats(&self, stream: StreamId) -> Result<StreamStats> {
        Ok(self.shared.stream(stream)?.stats())
    }

    /// Backend events created so far; constant in steady state, since events are pooled.
    pub fn events_created(&self) -> u64 {
        self.shared.events.created()
    }

    /// On a simulated device, every pair of conflicting uses the checker found unordered.
    pub fn sim_hazards(&self) -> Result<Vec<Hazard>> {
        match self.shared.backend() {
            BackendCtx::Sim(s) => Ok(s.hazards()),
            BackendCtx::Cuda(_) => {
                Err(Error::WrongBackend { what: "Device::sim_hazards", needed: "sim", actual: "cuda" })
            }
        }
    }

    /// On a simulated device, how many simulated kernels (copies, frees and user closures) ran.
    pub fn sim_kernels_run(&self) -> Result<u64> {
        match self.shared.backend() {
            BackendCtx::Sim(s) => Ok(s.kernels_run()),
            BackendCtx::Cuda(_) => {
                Err(Error::WrongBackend { what: "Device::sim_kernels_run", needed: "sim", actual: "cuda" })
            }
        }
    }
}
