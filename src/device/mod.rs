//! `Device`: a context (CUDA or simulated), its streams, configuration and generation.

mod backlog;
mod config;
mod poison;
mod shared;
mod submit_order;
#[cfg(test)]
pub(crate) use poison::rebuild_hooks;
#[cfg(test)]
mod rebuild_tests;

use crate::backend::sim::{Hazard, SimConfig, SimShared};
use crate::backend::{cuda, BackendCtx};
use crate::error::{Error, Result};
pub use crate::track::StreamId;
use crate::track::StreamStats;
pub(crate) use backlog::Backlog;
pub use config::{DeviceConfig, SubmitOrderCheck};
pub(crate) use shared::DeviceShared;
/// A buffer's tracking, owned by a device: `track`'s buffer state with its owner named here,
/// where the device is known.
pub(crate) type BufferTrack = crate::track::BufferTrack<DeviceShared>;
use std::fmt;
use std::sync::Arc;
pub(crate) use submit_order::report as report_submit_order;

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
        // Dropping cannot return the hazards `shutdown` would: say so in the log, once more.
        if let Some(e) = sim_hazard_error(&self.0) {
            log::error!("cusched: simulated device {} dropped after a hazard: {e}", self.0.label());
        }
    }
}

/// [`Error::Hazard`] with the first hazard a simulated device found, when its configuration
/// fails on hazards.
fn sim_hazard_error(shared: &DeviceShared) -> Option<Error> {
    let BackendCtx::Sim(sim) = shared.backend() else { return None };
    if !sim.config.fail_on_hazard {
        return None;
    }
    let mut hazards = sim.hazards().into_iter();
    let first = hazards.next()?;
    Some(Error::Hazard { hazard: Box::new(first), more: hazards.count() })
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

    /// CUDA device 0 if this machine has a GPU, else the CPU simulation with
    /// [`SimConfig::default()`] (its checker on, and failing on hazards): the usual start of
    /// a program or test that should run anywhere. It logs at `info` which one it chose, and
    /// why; [`is_simulated`](Self::is_simulated) tells the program.
    ///
    /// Only "no GPU here" falls back: no driver library ([`Error::LibraryUnavailable`]) or no
    /// device ([`Error::NoDevice`]). A GPU that is present but fails to open returns its
    /// error, rather than running on the simulator unnoticed.
    ///
    /// ```
    /// use cusched::Device;
    /// let device = Device::open_or_sim()?;
    /// let x = device.upload(device.default_stream(), &[1.0f32, 2.0])?;
    /// assert_eq!(x.download(device.default_stream())?, vec![1.0, 2.0]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn open_or_sim() -> Result<Device> {
        match Device::open(0) {
            Ok(device) => {
                log::info!("cusched: running on CUDA device 0");
                Ok(device)
            }
            Err(e @ (Error::LibraryUnavailable { .. } | Error::NoDevice { .. })) => {
                log::info!("cusched: no CUDA GPU ({e}); running on the CPU simulation with SimConfig::default()");
                Device::sim(SimConfig::default())
            }
            Err(e) => Err(e),
        }
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
    ///
    /// On a simulated device with [`SimConfig::fail_on_hazard`] (the default), it returns
    /// [`Error::Hazard`] with the first hazard the checker found in the device's life (on
    /// any device of its `sim_group`), whether or not a wait reported it already; otherwise
    /// `Ok`. Dropping the last handle instead logs that error.
    pub fn shutdown(&self) -> Result<()> {
        self.shared.shutdown();
        match sim_hazard_error(&self.shared) {
            Some(e) => Err(e),
            None => Ok(()),
        }
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
    pub fn set_trace(
        &self,
        hook: std::sync::Arc<dyn crate::trace::KernelTrace>,
        options: crate::trace::TraceOptions,
    ) -> Result<()> {
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

    /// On a simulated device, every hazard the checker found so far: pairs of conflicting
    /// uses left unordered, and kernels' accesses they did not declare. Each was also logged
    /// at `error` when found (and, with [`SimConfig::fail_on_hazard`], failed a wait).
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
