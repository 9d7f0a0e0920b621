//! The state a device's handles, buffers, recorders and threads share.

use super::{poison, DeviceConfig};
use crate::backend::sim::FenceMutation;
use crate::backend::BackendCtx;
use crate::completion_thread::Completions;
use crate::error::{Error, Result};
use crate::track::StreamId;
use crate::track::{EventPool, EventRef, Solo, StreamSlot};
use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// State shared by a device's handles, buffers, recorders and (later) threads.
pub(crate) struct DeviceShared {
    pub uid: u32,
    pub ordinal: usize,
    /// The context; replaced when a poisoned one is rebuilt.
    pub(super) backend: crate::sync::Ranked<RwLock<BackendCtx>, { crate::sync::rank::BACKEND }>,
    pub(super) is_sim: bool,
    pub config: DeviceConfig,
    pub(super) generation: AtomicU64,
    /// Advances only when the context is rebuilt (the generation also advances on demand).
    pub(super) epoch: AtomicU64,
    /// The first failure of the most recently poisoned context.
    pub(super) poison: crate::sync::Ranked<Mutex<Option<poison::Poison>>, { crate::sync::rank::POISON }>,
    /// The context is poisoned and could not be rebuilt: every new op fails fast.
    pub(super) dead: AtomicBool,
    pub(super) streams: Box<[OnceLock<StreamSlot>]>,
    pub(super) stream_count: AtomicUsize,
    pub(super) stream_create: crate::sync::Ranked<Mutex<()>, { crate::sync::rank::STREAM_CREATE }>,
    /// Streams that dropped lanes gave back, for the next lanes to take.
    pub(super) free_streams: Mutex<Vec<StreamId>>,
    pub events: Arc<EventPool>,
    /// Whether only one stream has run tracked work yet, and the floor once several have.
    pub solo: Solo,
    /// The ordering rule the tracker breaks on purpose (simulated checker self-tests only).
    pub fence_mutation: Option<FenceMutation>,
    pub(super) completions: Completions,
    /// Dropped at shutdown: every lane selects on its receiver, so dropping it wakes them all.
    pub(super) shutdown_tx: Mutex<Option<Sender<()>>>,
    pub(super) shutdown_rx: Receiver<()>,
    pub(super) shut_down: AtomicBool,
    pub(super) lanes: crate::sync::Ranked<Mutex<Vec<LaneThread>>, { crate::sync::rank::LANES }>,
    /// Per-device state of the layers above (the NVRTC module cache), by type.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub libs: crate::sync::TypeSlots,
    pub tracer: crate::trace::Tracer,
    /// Completion hooks of traced ops that return no completion.
    pub(crate) backlog: super::Backlog,
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
            // The checker's other mutations break rules of the marked path: every launch
            // takes it on those devices.
            solo: Solo::new(fence_mutation.is_none_or(|m| m == FenceMutation::NoSoloFloor)),
            is_sim: matches!(backend, BackendCtx::Sim(_)),
            backend: crate::sync::Ranked::new(RwLock::new(backend)),
            config,
            generation: AtomicU64::new(1),
            epoch: AtomicU64::new(1),
            poison: crate::sync::Ranked::new(Mutex::new(None)),
            dead: AtomicBool::new(false),
            streams,
            stream_count: AtomicUsize::new(0),
            stream_create: crate::sync::Ranked::new(Mutex::new(())),
            free_streams: Mutex::new(Vec::new()),
            fence_mutation,
            completions: Completions::new(uid, config_spin, watchdog),
            shutdown_tx: Mutex::new(Some(shutdown_tx)),
            shutdown_rx,
            shut_down: AtomicBool::new(false),
            lanes: crate::sync::Ranked::new(Mutex::new(Vec::new())),
            libs: Default::default(),
            tracer: Default::default(),
            backlog: Default::default(),
            reaper: Default::default(),
            host_cache: crate::host_cache::HostCache::new(host_cache_limit),
        });
        shared.create_stream()?;
        Ok(shared)
    }

    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

impl crate::track::BufferOwner for DeviceShared {
    #[inline]
    fn generation(&self) -> u64 {
        DeviceShared::generation(self)
    }

    #[inline]
    fn fence_mutation(&self) -> Option<crate::backend::sim::FenceMutation> {
        self.fence_mutation
    }
}

impl DeviceShared {
    /// Whether the device is simulated ([`Device::is_simulated`](crate::Device::is_simulated)).
    #[inline(always)]
    pub(crate) fn is_simulated(&self) -> bool {
        self.is_sim
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
    pub(super) fn shutdown(&self) {
        if !self.shut_down.swap(true, Ordering::AcqRel) {
            drop(crate::sync::lock(&self.shutdown_tx).take());
            self.host_cache.close(&self.reaper);
        }
        // Nor may a thread with a graph capture open, or inside a destroy that keeps captures
        // from opening: a lane of this device may be waiting for that to end.
        if crate::sync::role::on_device_thread() || crate::backend::cuda::captures::must_not_join() {
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

    pub(super) fn create_stream(&self) -> Result<StreamId> {
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
    #[inline]
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

    #[inline]
    pub(crate) fn slot_by_index(&self, index: u32) -> Option<&StreamSlot> {
        self.streams.get(index as usize).and_then(|s| s.get())
    }

    pub(crate) fn slots(&self) -> impl Iterator<Item = &StreamSlot> {
        self.streams.iter().map_while(|s| s.get())
    }

    /// Closes solo mode (see [`Solo`]) if it is open. Never waits.
    pub(crate) fn close_solo(&self) {
        self.solo.close(|i| self.slot_by_index(i), &self.events);
    }

    /// Closes solo mode if it is open and returns the event a use on another stream waits on
    /// before it uses memory that solo launches used: once no solo launch in flight conflicts
    /// with its `uses` (buffer ids and accesses of this device), waiting for that bounded
    /// by `DeviceConfig::preflight_timeout`; past solo mode when that event is the floor (the
    /// stream need not look again); no event when none is needed. On the solo
    /// stream itself (`on_solo_stream`) only the wait is needed (see `Solo::await_uses`).
    #[cold]
    #[inline(never)]
    pub(crate) fn solo_wait(&self, uses: crate::track::IdUses, on_solo_stream: bool) -> Result<crate::track::Cover> {
        self.close_solo();
        let timeout = self.config.preflight_timeout;
        let slot = |i| self.slot_by_index(i);
        let covered = self.solo.await_uses(slot, &self.events, self.uid, timeout, &uses, on_solo_stream);
        covered.map_err(|(e, epoch)| match epoch {
            Some(epoch) => self.classify(e, epoch),
            None => e,
        })
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
