//! `SimConfig`, the settings of a simulated device, and `FenceMutation`, the checker's
//! self-test switch.

use std::time::Duration;

/// Settings of a simulated device.
///
/// The defaults: delays uniform in 0..50 µs, a fixed seed, fencing on, hazards fail.
///
/// ```
/// use cusched::{Device, SimConfig};
/// use std::time::Duration;
///
/// // Slower simulated kernels widen the windows in which a missing fence would show.
/// let config = SimConfig { max_delay: Duration::from_millis(1), ..SimConfig::default() };
/// let device = Device::sim(config)?;
/// assert!(device.is_simulated());
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Shortest time a simulated kernel takes before it runs. Default zero.
    pub min_delay: Duration,
    /// Longest time a simulated kernel takes; each takes a uniform random time in between.
    /// Default 50 µs.
    pub max_delay: Duration,
    /// Seed of the delay generator, for reproducible interleavings. Default `0x5eed`.
    pub seed: u64,
    /// Checker self-test switch: `Some` makes the tracker break one ordering rule on purpose,
    /// so that tests can prove the hazard checker reports the races that result. Leave it
    /// `None` everywhere else.
    pub fence_mutation: Option<FenceMutation>,
    /// The compute capability the simulated device reports through
    /// [`Device::compute_capability`](crate::Device::compute_capability), for testing what
    /// ops refuse on older GPUs. Default `(9, 0)` (Hopper).
    pub compute_capability: (u32, u32),
    /// Whether a hazard fails the program, not only the log. Every hazard is logged at
    /// `error` when the checker finds it and listed by
    /// [`Device::sim_hazards`](crate::Device::sim_hazards); with this on (the default), it
    /// also fails the first wait that observes the stream's work after the kernel that caused
    /// it (a completion, a download, [`Device::synchronize`](crate::Device::synchronize)) with
    /// [`Error::Hazard`](crate::Error::Hazard), and [`Device::shutdown`](crate::Device::shutdown)
    /// returns the first hazard of the device's life. Turn it off only for tests that make
    /// hazards on purpose (checker self-tests with a [`FenceMutation`]) and read them from
    /// `sim_hazards`.
    pub fail_on_hazard: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            min_delay: Duration::ZERO,
            max_delay: Duration::from_micros(50),
            seed: 0x5eed,
            fence_mutation: None,
            compute_capability: (9, 0),
            fail_on_hazard: true,
        }
    }
}

/// An ordering rule the tracker breaks on purpose ([`SimConfig::fence_mutation`]), to prove
/// that the hazard checker catches each rule's violation with the expected [`HazardKind`](crate::HazardKind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceMutation {
    /// No stream ever waits: every cross-stream pair of conflicting uses is left unordered.
    NoFences,
    /// A write waits only for the most recent read since the last write, not for the newest
    /// read of every stream (a single read event per buffer). Breaks write-after-read.
    LatestReaderOnly,
    /// A buffer's allocation (or adoption) is not recorded as a write, so a first use on
    /// another stream does not wait for it. Breaks read-after-write (and write-after-write).
    NoAllocationWrite,
    /// A free does not wait for the buffer's outstanding uses. Breaks write-after-read (and
    /// write-after-write) against the free.
    NoFreeFence,
    /// A read does not wait for the last write when that write was on another stream.
    /// Breaks read-after-write across streams.
    NoCrossStreamRaw,
    /// When a device that has used one stream so far starts using a second, the second does
    /// not wait for the first stream's work (whose launches left the buffer states out).
    /// Breaks read-after-write (and write-after-read) against that earlier work.
    NoSoloFloor,
    /// A graph replayed on the simulator ([`GraphExec::replay`](crate::GraphExec::replay))
    /// runs its recorded ops without the edges between them: each waits only for the replay's
    /// start. Breaks every ordering inside the graph that the declared uses call for.
    NoGraphEdges,
}
