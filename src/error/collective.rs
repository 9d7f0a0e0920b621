//! [`CollectiveFault`]: what kind of failure a collective met, in NCCL's classes.

/// The kind of failure an [`Error::Collective`](crate::Error::Collective) reports, after
/// NCCL's result classes, plus the two cusched adds (a timeout, an aborted communicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CollectiveFault {
    /// A peer failed, or reported a failure (`ncclRemoteError`): a rank that died, a remote
    /// network error.
    Remote,
    /// A system call failed (`ncclSystemError`): a socket, the network, shared memory.
    System,
    /// A CUDA call inside NCCL failed (`ncclUnhandledCudaError`).
    Cuda,
    /// NCCL met an internal error (`ncclInternalError`).
    Internal,
    /// NCCL refused an argument (`ncclInvalidArgument`). The call had no effect; the
    /// communicator is still usable.
    InvalidArgument,
    /// The ranks used the communicator inconsistently (`ncclInvalidUsage`): different ops,
    /// counts or types on different ranks, or a call out of order.
    InvalidUsage,
    /// The op made no progress within the communicator's timeout: a peer stopped answering.
    Timeout,
    /// The communicator had been aborted before (by its watchdog after a fault, by
    /// `Communicator::abort`, or after an op it had enqueued failed to launch).
    Aborted,
}

impl std::fmt::Display for CollectiveFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CollectiveFault::Remote => "a peer failed",
            CollectiveFault::System => "a system call or the network failed",
            CollectiveFault::Cuda => "a CUDA call inside NCCL failed",
            CollectiveFault::Internal => "NCCL met an internal error",
            CollectiveFault::InvalidArgument => "NCCL refused an argument",
            CollectiveFault::InvalidUsage => "the ranks used the communicator inconsistently",
            CollectiveFault::Timeout => "no progress within the communicator's timeout (a peer stopped answering?)",
            CollectiveFault::Aborted => "the communicator was aborted",
        })
    }
}
