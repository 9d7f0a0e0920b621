//! The settings a device is opened with.

pub use crate::track::SubmitOrderCheck;
#[cfg(doc)]
use crate::{device::Device, error::Error};
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
    /// host), so back-to-back work stays fast; zero parks at once and saves CPU. A waiter on a
    /// lane job spins four times as long, twice (the worker's wake, then its job). Default 50 µs.
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
    /// What happens when a lane job's use of a buffer would take effect after a conflicting
    /// use by a job the same thread submitted after it on another lane (an undeclared job,
    /// ordered by commit, that came too late for the order the thread submitted them in; jobs
    /// that two threads submit have no such order, and are never compared). Default
    /// [`SubmitOrderCheck::Error`]: the op fails with [`Error::SubmitOrder`] naming both jobs
    /// and the buffer before it enqueues anything, since going on would compute with data the
    /// program did not mean (on the simulator the same finding is a
    /// [`HazardKind::SubmitOrder`](crate::HazardKind::SubmitOrder) hazard). The check costs a
    /// compare per use in lane jobs and one branch outside them. It cannot see waits: a job
    /// that waits inside its body for a job submitted after it, then uses what that job
    /// wrote, is reported although the wait ordered it; such a program sets
    /// [`SubmitOrderCheck::Log`] or [`SubmitOrderCheck::Off`] (or submits the two in the order
    /// they run).
    pub submit_order: SubmitOrderCheck,
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
            submit_order: SubmitOrderCheck::Error,
        }
    }
}
