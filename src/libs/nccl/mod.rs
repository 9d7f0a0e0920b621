//! NCCL: communicators across the GPUs of one process, and across processes and hosts, and
//! their collectives as tracked ops.
//!
//! # Shape
//!
//! A [`Communicator`] is one rank, bound to one device. Make all the ranks of one process at
//! once with [`Communicator::init_all`], or one rank per process with
//! [`Communicator::init_rank`] from a [`UniqueId`] that one process makes and hands to the
//! others (its bytes, through a file or any byte channel: [`UniqueId::write_to`],
//! [`UniqueId::read_from`]).
//!
//! The communicator is not per-stream state, so it is not a slot of [`crate::Handles`]: it is
//! made once and shared (it is `Clone`, `Send` and `Sync`). What is per stream is the op path:
//! [`Handles::nccl`](crate::Handles::nccl) gives this stream's [`Nccl`], whose methods take
//! the communicator. So a collective runs inline or in a lane job like any library op:
//!
//! ```
//! use cusched::{nccl::{Communicator, CommConfig, ReduceOp}, Device, Handles, SimConfig};
//! let gpus = Device::sim_group(SimConfig::default(), 2)?;
//! let comms = Communicator::init_all(&gpus, &CommConfig::default())?;
//! let done = cusched::nccl::group(|| {
//!     let mut done = Vec::new();
//!     for (gpu, comm) in gpus.iter().zip(&comms) {
//!         let mut h = Handles::new(gpu, gpu.default_stream())?;
//!         let x = gpu.upload(h.stream(), &[comm.rank() as f32 + 1.0; 4])?;
//!         done.push((h.nccl()?.all_reduce_in_place(comm, &x, ReduceOp::Sum)?, x, gpu));
//!     }
//!     Ok(done)
//! })?;
//! for (c, x, gpu) in done {
//!     c.wait()?;
//!     assert_eq!(x.download(gpu.default_stream())?, [3.0; 4]);
//! }
//! # Ok::<(), cusched::Error>(())
//! ```
//!
//! Each collective is one recorded op per rank, on the stream of the `Nccl` it is called on:
//! the send buffer is a read, the receive buffer a write, an in-place buffer a read-write. So a
//! collective waits for the kernel that produced its input on another lane, and the kernel
//! that reads its output waits for it, with no event written by hand. [`group`] enqueues
//! several ops (of one rank or of several, from one thread) as one NCCL group: every op is
//! validated and preflighted first, all are enqueued between `ncclGroupStart` and
//! `ncclGroupEnd`, and all commit, even when the group fails. A thread that drives several
//! ranks (the loop over devices above) must enqueue their ops in one group on CUDA: NCCL may
//! need every rank's call before one of them can be launched (ranks connect on first use), so
//! an op enqueued alone would wait for the others until the timeout. The simulator does not
//! need it; ranks on their own threads (lanes, processes) do not either.
//!
//! Make communicators on devices opened with [`Device::open`](crate::Device::open), on the
//! GPU's primary context, which NCCL uses itself: on a context of its own
//! ([`Device::open_isolated`](crate::Device::open_isolated), or the one a device makes after
//! its context was poisoned), NCCL 2.28 runs collectives, but a send to the rank itself fails
//! inside `ncclGroupEnd` ("invalid resource handle"), which aborts the communicator.
//!
//! # Faults
//!
//! Communicators are blocking by default (NCCL's calls return once launched, at raw NCCL's
//! cost) and non-blocking on request ([`CommConfig::blocking`]: every call returns at once and
//! cusched polls it, so the timeouts bound NCCL's own waits for peers too, at tens of
//! microseconds per op). Each CUDA communicator has a watchdog thread that, while
//! ops are pending, polls `ncclCommGetAsyncError`; on an error, or when an op has stayed
//! pending longer than [`CommConfig::timeout`] (a peer that died leaves its partners waiting
//! forever), it aborts the communicator (`ncclCommAbort`, which makes its kernels return),
//! and every op that was pending resolves with [`Error::Collective`](crate::Error::Collective)
//! naming the fault. Later ops on the communicator fail at once; the device stays usable.
//!
//! # Simulator
//!
//! On the devices of one [`Device::sim_group`](crate::Device::sim_group), communicators
//! compute on the host what NCCL computes: each rank's op is a simulated kernel under the op's
//! declared uses (the hazard checker sees it) that meets the other ranks' kernels at a
//! rendezvous (by the communicator's sequence number; the last to arrive computes, each rank
//! writes its own output). A rank that never arrives makes the others fail with
//! [`CollectiveFault::Timeout`](crate::CollectiveFault::Timeout) after the timeout.
//! [`Communicator::init_rank`] works there too, between threads, with a
//! [`UniqueId::simulated`] id.
//!
//! Files: this one holds the per-stream state and the element and op types; `comm` the
//! communicators, `unique_id` their ids, `watch` the CUDA watchdog, `slots` its record of the ops, `ops` the collectives and
//! their checks, `plan` their work, `launch` the op path and groups, `enqueue` the launch's enqueues, `calls` the NCCL calls,
//! `sim` and `reduce` the simulator's rendezvous and arithmetic.

mod calls;
mod comm;
mod enqueue;
mod launch;
mod ops;
mod plan;
mod reduce;
mod sim;
mod slots;
mod unique_id;
mod watch;

pub use comm::{Capabilities, CommConfig, Communicator};
pub use launch::group;
pub use unique_id::UniqueId;

use super::{Library, OpStream, StreamLibrary};
use crate::device::StreamId;
use crate::error::Result;
use crate::memory::Element;

/// A stream's NCCL op path. Get it from [`crate::Handles::nccl`]; its methods take the
/// [`Communicator`] of the stream's device.
pub struct Nccl {
    op: OpStream,
}

impl StreamLibrary for Nccl {
    const LIBRARY: Library = Library {
        name: "NCCL (libnccl)",
        hint: "install NCCL (the nvidia-nccl-cu13 package, say) and put its lib directory on LD_LIBRARY_PATH with a libnccl.so name (tools/cuda-libs-env does both)",
        present: calls::is_present,
        objects: "NCCL objects",
    };
    // Communicators are the user's, not the stream's: the per-stream state owns nothing.
    type Objects = ();

    fn create(op: OpStream) -> Result<Nccl> {
        Ok(Nccl { op })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<()> {
        None
    }
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nccl({})", self.op.stream)
    }
}

impl Nccl {
    /// The stream this op path enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }
}

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    /// The sum (integers wrap).
    Sum,
    /// The product (integers wrap).
    Prod,
    /// The maximum.
    Max,
    /// The minimum.
    Min,
    /// The sum divided by the number of ranks (integers divide, rounding toward zero).
    Avg,
    /// The sum of each rank's values multiplied by this scalar first
    /// (`ncclRedOpCreatePreMulSum`), converted to the element type (integers truncate). It
    /// must be finite.
    PreMulSum(f64),
}

/// The built-in NCCL reductions (every [`ReduceOp`] but `PreMulSum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuiltinOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

/// The element types NCCL reduces, as NCCL names them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    I32,
    F16,
    Bf16,
    F32,
    F64,
}

/// The element types of collectives: `u8`, `i32`, `f16`, `bf16`, `f32` and `f64`.
pub trait NcclType: Element + reduce::Arith {
    #[doc(hidden)]
    const DTYPE: DType;
}

impl NcclType for u8 {
    const DTYPE: DType = DType::U8;
}
impl NcclType for i32 {
    const DTYPE: DType = DType::I32;
}
impl NcclType for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl NcclType for half::bf16 {
    const DTYPE: DType = DType::Bf16;
}
impl NcclType for f32 {
    const DTYPE: DType = DType::F32;
}
impl NcclType for f64 {
    const DTYPE: DType = DType::F64;
}
