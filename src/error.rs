//! The crate's error type.
//!
//! Every error names what failed (the driver call, the argument, the buffer) and, where there
//! is one, what the caller can do about it. Errors are `Clone` so that one failure can resolve
//! several waiters (every completion pending when a context is poisoned, say).
//!
//! This file holds the error enum and the helpers that build it; [`numerical`] what a solver's
//! status word says about each matrix, and `debug` the `Debug` that prints without a driver.

mod collective;
mod debug;
mod numerical;

pub use collective::CollectiveFault;
use cudarc::driver::DriverError;
use numerical::describe_failures;
pub use numerical::NumericalFailure;
use std::time::Duration;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in cusched.
///
/// Each variant names what failed. Match on the variants a caller can act on:
///
/// ```
/// use cusched::{Device, Error, LaunchRecorder, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let other = Device::sim(SimConfig::default())?;
/// let foreign = other.alloc_zeros::<u32>(other.default_stream(), 4)?;
/// // A strict recorder rejects a buffer of another device, naming it.
/// match LaunchRecorder::new_strict(device.default_stream()).read(&foreign).map(|_| ()) {
///     Err(e @ Error::ForeignDevice { .. }) => assert!(e.to_string().contains("buffer #")),
///     other => panic!("expected ForeignDevice, got {other:?}"),
/// }
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA shared library could not be loaded (no driver, or the library is not installed).
    #[error("{library} is not available on this machine: {hint}")]
    LibraryUnavailable {
        /// The library that failed to load (`"CUDA driver"`, `"NVRTC"`, ...).
        library: &'static str,
        /// What to install or set to make it available.
        hint: &'static str,
    },

    /// The CUDA driver loaded but there is no device with the requested ordinal.
    #[error("no CUDA device with ordinal {ordinal} ({count} present); pick an ordinal below {count}")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },

    /// A driver call returned an error status.
    #[error("{call} failed: {}", status_name(status))]
    Driver {
        /// The driver entry point, e.g. `"cuEventRecord"`.
        call: &'static str,
        /// The status it returned.
        status: DriverError,
    },

    /// A handle from an earlier device generation was used after a context rebuild.
    #[error("{what} is stale: it was made in device generation {made}, the device is now at {current}; make it again")]
    Stale {
        /// The handle, e.g. `"buffer #12"`.
        what: String,
        /// The generation the handle was made in.
        made: u64,
        /// The device's current generation.
        current: u64,
    },

    /// A buffer or stream of one device was used with another device.
    #[error("{what} belongs to device {found}, but was used on device {expected}")]
    ForeignDevice {
        /// The buffer or stream.
        what: String,
        /// The device it was used with.
        expected: String,
        /// The device it belongs to.
        found: String,
    },

    /// A stream id that this device did not create.
    #[error("stream {stream} was not created by device {device}; use Device::new_stream on this device")]
    UnknownStream {
        /// The stream id as displayed.
        stream: String,
        /// The device it was used with.
        device: String,
    },

    /// A strict recorder was given memory that cusched does not track.
    #[error("{what} is not tracked by cusched, so its uses cannot be fenced; adopt it with Device::adopt or use a permissive recorder")]
    Untracked {
        /// The memory, e.g. `"external pointer 0x7f00..."`.
        what: String,
    },

    /// A wait that could never end: on a buffer held by an uncommitted launch of the same
    /// thread, on a job queued behind the current one on its own lane, on its own full queue.
    #[error("{what}")]
    WouldDeadlock {
        /// What would never finish, and what to do instead.
        what: String,
    },

    /// A use read a buffer whose last writer failed: a lane job that returned an error,
    /// panicked or never ran (its declared writes, and the writes it committed), or a launch or
    /// library op whose enqueue failed. Nothing was enqueued for the use (a download returns
    /// no data). The failure stays with the buffer until a successful write (a plain write,
    /// not `read_write`) replaces its contents.
    #[error("{buffer} holds no valid data: its last writer, {op}, failed ({cause}); rewrite the buffer (a successful write clears this) or handle the failure of {op}")]
    FailedInput {
        /// The buffer, as errors name it (`buffer #N "label"`).
        buffer: String,
        /// The label the user gave it ([`GpuRef::label`](crate::GpuRef::label)), if any.
        label: Option<String>,
        /// The op that failed: `the job on lane `upload``, or a launch such as `user::scale`.
        op: String,
        /// Why it failed.
        cause: Box<Error>,
    },

    /// A use waited too long for a declared lane job submitted earlier to finish with the
    /// buffer (its reservation).
    #[error("{buffer} stayed reserved by a declared lane job submitted earlier for {waited:?}; that job must run and end first (is it queued behind work that waits for this thread?). DeviceConfig::preflight_timeout bounds this wait")]
    BufferReserved {
        /// The buffer.
        buffer: String,
        /// How long the use waited.
        waited: Duration,
    },

    /// A job submitted with declared uses (`Lane::job`) used a buffer it did not declare, or
    /// wrote one it declared only as read, through a strict recorder. (Buffers the job made on
    /// its own thread and the libraries' own scratch need no declaration.)
    #[error("a declared job on lane `{lane}` used {buffer} ({access}) without declaring it; add .{access_call}(&buffer) to the lane.job() builder, or submit the job undeclared with Lane::submit")]
    UndeclaredUse {
        /// The buffer.
        buffer: String,
        /// The lane the job ran on.
        lane: String,
        /// How the job used it: `"read"`, `"write"` or `"read and write"`.
        access: &'static str,
        /// The builder call that declares it.
        access_call: &'static str,
    },

    /// An op found one of the inputs its buffers or output were sized from written since it
    /// read them. Either an op of several launches with a host step between them (it counts,
    /// the host sizes the output from the count, and a later launch fills it) saw the write
    /// between its first launch and a later one, or a compute with a reusable plan (cuSPARSE's
    /// `SpGemmReuse`) saw a write of a structure array since the plan's setup. Either way the
    /// launch would have read contents its buffers were not sized for; nothing was enqueued
    /// for it (and an output sized from the count was freed).
    #[error("{op}: {buffer} (argument `{arg}`) {what}")]
    InputChanged {
        /// The op called (`"csr_to_bsr"`, `"spgemm"`, `"spgemm_reuse_compute"`).
        op: &'static str,
        /// The argument that was written.
        arg: &'static str,
        /// The buffer, as errors name it (`buffer #N "label"`).
        buffer: String,
        /// When it was written, and what to do.
        what: &'static str,
    },

    /// A preflight waited too long for another thread's launch on the same buffer to commit.
    #[error("{buffer} stayed held by another thread's uncommitted launch for {waited:?}; that thread must commit its recorder (DeviceConfig::preflight_timeout bounds this wait)")]
    BufferBusy {
        /// The buffer.
        buffer: String,
        /// How long the preflight waited.
        waited: Duration,
    },

    /// An argument was rejected before anything was enqueued.
    #[error("invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument's name.
        arg: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// An operation needs the other backend (a raw CUDA stream on the simulator, say).
    #[error("{what} needs the {needed} backend, but this device runs on the {actual} backend")]
    WrongBackend {
        /// The operation.
        what: &'static str,
        /// The backend it needs.
        needed: &'static str,
        /// The device's backend.
        actual: &'static str,
    },

    /// An allocation did not fit in device memory.
    #[error("out of device memory: {requested} bytes requested, {free} bytes free")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes the driver reported free.
        free: usize,
    },

    /// The device, lane or completion thread has shut down.
    #[error("the device has shut down; the job never ran")]
    Shutdown,

    /// `try_submit` found the lane's queue full.
    #[error("the lane's queue is full; retry later or use submit, which blocks")]
    QueueFull,

    /// A bounded wait expired.
    #[error("timed out after {waited:?}")]
    Timeout {
        /// How long was waited.
        waited: Duration,
    },

    /// A job closure panicked; the lane kept running.
    #[error("job panicked: {message}")]
    JobPanicked {
        /// The panic payload, if it was a string.
        message: String,
    },

    /// The completion's value was already taken (by `try_take`, `wait_timeout` or a poll).
    #[error("the completion's value was already taken")]
    AlreadyTaken,

    /// A CUDA library has no kernel for this combination of arguments on this GPU (its
    /// heuristic found none): the arguments are valid, the combination is not implemented.
    /// Raised before anything was recorded or enqueued.
    #[error("{library} has no kernel for {what}; {hint}")]
    Unsupported {
        /// The library, e.g. `"cuBLASLt (libcublasLt)"`.
        library: &'static str,
        /// The combination, in the caller's terms (epilogue, element types, transposes, order).
        what: String,
        /// What to try instead.
        hint: String,
    },

    /// Something a graph recording cannot take: an op that cannot be captured (it
    /// synchronizes with the host, allocates, or reads a result back), a hand-paired
    /// preflight on a recording stream, a stream already lent to another recording. The
    /// recording is abandoned and nothing stays capturing; [`Graph::record`](crate::Graph::record)
    /// returns this error.
    #[error("graph recording: {what}; {hint}")]
    Recording {
        /// What could not be recorded.
        what: String,
        /// What to do instead.
        hint: &'static str,
    },

    /// A rebinding the executable graph could not take in place
    /// ([`GraphExec::rebind`](crate::GraphExec::rebind)): the executable graph and its
    /// buffers are left as they were. Nothing is instantiated again behind the caller's back.
    #[error("the executable graph cannot rebind {what}: {reason}")]
    GraphUpdate {
        /// The rebinding (old buffer → new buffer).
        what: String,
        /// Why the driver (or the recording) refused it.
        reason: String,
    },

    /// A CUDA library call (cuBLAS, cuRAND, cuFFT, NVRTC...) returned an error status.
    #[error("{call} failed: {status}")]
    Library {
        /// The library entry point, e.g. `"cublasGemmEx"`.
        call: &'static str,
        /// The status it returned, as the library names it.
        status: String,
    },

    /// A solver op ran, and its status word says the input was unfit: a matrix not positive
    /// definite, a singular `U`, an iteration that did not converge. For a batched op,
    /// `failures` lists every bad matrix of the batch (the others' results are valid).
    #[error("{op}: {}", describe_failures(*batch, failures))]
    Numerical {
        /// The op (`"potrf"`, `"getrfBatched"`).
        op: &'static str,
        /// Matrices in the op (1 unless batched).
        batch: usize,
        /// What failed, per bad matrix.
        failures: Vec<NumericalFailure>,
    },

    /// NVRTC rejected the source.
    #[error("NVRTC compile failed ({status}); the compiler's log:\n{log}")]
    CompileFailed {
        /// NVRTC's status.
        status: String,
        /// The compiler's log: the errors with their source lines.
        log: String,
    },

    /// A sticky CUDA error poisoned the context.
    #[error(
        "the CUDA context was poisoned by {call} ({}); handles made before are stale, and the device makes a new context if the driver allows one (Device::poisoned says when it does not: restart the process)",
        status_name(status)
    )]
    ContextPoisoned {
        /// The first call that failed.
        call: &'static str,
        /// Its status.
        status: DriverError,
    },

    /// A lane job's use of a buffer would take effect after a conflicting use by a job the
    /// same thread submitted after it on another lane: undeclared jobs are ordered by commit,
    /// and this one came too late for the order the thread submitted them in. Nothing of the op was
    /// enqueued. See [`DeviceConfig::submit_order`](crate::DeviceConfig::submit_order).
    #[error(
        "{buffer}: job #{older_submit} on {older_lane} would use it after job #{younger_submit} on {younger_lane}, which the same thread submitted after it, already made a conflicting use ({order} out of submit order); declare both jobs' uses with lane.job().read(..)/.write(..), or wait for the first job's Completion::wait_committed before submitting the second"
    )]
    SubmitOrder {
        /// The buffer, as errors name it (`buffer #N "label"`).
        buffer: String,
        /// The order the program submitted the uses in: `"read-after-write"`,
        /// `"write-after-read"` or `"write-after-write"`.
        order: &'static str,
        /// The lane of the job submitted first, whose use came too late.
        older_lane: String,
        /// Its submit number.
        older_submit: u64,
        /// The lane of the job submitted after it, whose use came first.
        younger_lane: String,
        /// Its submit number.
        younger_submit: u64,
    },

    /// A collective or a communicator call failed: NCCL reported an error (synchronously, or
    /// asynchronously on the communicator), or a collective made no progress within the
    /// communicator's timeout (a peer that died or stopped answering). Unless `fault` is
    /// [`CollectiveFault::InvalidArgument`] raised by the call itself (an argument NCCL rejected
    /// before launching anything), the communicator is aborted: every op still pending on it
    /// fails with this error, later ops fail at once, and the device stays usable. Make a new
    /// communicator to go on.
    #[error("{call} failed: {fault} ({detail})")]
    Collective {
        /// The NCCL entry point (`"ncclAllReduce"`), or the cusched step that gave up
        /// (`"the communicator's watchdog"`).
        call: &'static str,
        /// What kind of failure it was.
        fault: CollectiveFault,
        /// NCCL's own message where it gave one, else what cusched saw.
        detail: String,
    },

    /// The simulator's checker found a hazard (see [`SimConfig::fail_on_hazard`]): two uses of
    /// a buffer that nothing ordered, or a kernel's access it did not declare. The message
    /// names both kernels, their lanes and the buffer.
    ///
    /// [`SimConfig::fail_on_hazard`]: crate::SimConfig::fail_on_hazard
    #[error("{hazard}{}", more_hazards(*more))]
    Hazard {
        /// The hazard (the first one, from [`Device::shutdown`](crate::Device::shutdown)).
        hazard: Box<crate::hazard::Hazard>,
        /// How many more the device found ([`Device::shutdown`](crate::Device::shutdown)
        /// only; [`Device::sim_hazards`](crate::Device::sim_hazards) lists them all).
        more: usize,
    },
}

/// The tail of a hazard error's message that counts the others.
fn more_hazards(more: usize) -> String {
    match more {
        0 => String::new(),
        n => format!(" (and {n} more: Device::sim_hazards lists them)"),
    }
}

impl Error {
    /// Wraps a driver status with the name of the call that returned it.
    pub(crate) fn driver(call: &'static str, status: DriverError) -> Self {
        Error::Driver { call, status }
    }

    /// Wraps a library status (anything that prints as the library's status name).
    #[allow(dead_code)]
    pub(crate) fn library(call: &'static str, status: impl std::fmt::Debug) -> Self {
        Error::Library { call, status: format!("{status:?}") }
    }

    pub(crate) fn invalid(arg: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument { arg, reason: reason.into() }
    }
}

/// The status's name (`CUDA_ERROR_ILLEGAL_ADDRESS`). `DriverError`'s own `Debug` asks the driver
/// for a description, and cudarc panics when no driver library can be loaded: formatting an
/// error must work on the simulator too.
fn status_name(status: &DriverError) -> String {
    format!("{:?}", status.0)
}

/// Adds `.call("cuXxx")` to driver results so every error names its call.
pub(crate) trait DriverResultExt<T> {
    fn call(self, call: &'static str) -> Result<T>;
}

impl<T> DriverResultExt<T> for std::result::Result<T, DriverError> {
    fn call(self, call: &'static str) -> Result<T> {
        self.map_err(|status| Error::driver(call, status))
    }
}
