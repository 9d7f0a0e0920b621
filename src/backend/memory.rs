//! Buffer memory on either backend, and the operations on it: allocations, memsets, copies
//! and frees, each a CUDA driver call or a simulated kernel. The layer above decides when an
//! operation may run (its recorder fences it); this layer only enqueues it.
//!
//! This file holds what both kinds share (the launch an operation is enqueued on, the element
//! bound, the simulated kernels); [`device`] holds device memory and its operations, [`host`]
//! pinned host memory, its size classes and its host views.

mod device;
mod host;

pub(crate) use device::DeviceMemory;
pub(crate) use host::{pinned_capacity, HostMemory, HostReadView, HostWriteView, PinnedFree};

use super::sim_mem::SimMem;
use super::RawStream;
use crate::access::Access;
use crate::error::Result;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use smallvec::SmallVec;
use std::sync::Arc;

/// The uses a launch declared, as the simulator's checker takes them.
pub(crate) type SimUses = SmallVec<[(u64, Access); 4]>;

/// Where an operation is enqueued: the stream of a launch between its preflight and commit.
pub(crate) trait Enqueue {
    /// The launch's stream.
    fn raw_stream(&self) -> &RawStream;
    /// The uses the launch declared, for the simulator's checker (not called on CUDA).
    fn declared_uses(&self) -> SimUses;
}

/// Runs `f` as a simulated kernel of the launch `on`.
fn sim_kernel(on: &impl Enqueue, f: impl FnOnce() + Send + 'static) -> Result<()> {
    match on.raw_stream() {
        RawStream::Sim(s) => {
            s.run(on.declared_uses(), Box::new(f));
            Ok(())
        }
        RawStream::Cuda(_) => unreachable!("simulated memory is only used on simulated streams"),
    }
}

/// The CUDA stream of the launch `on`.
fn cuda_stream(on: &impl Enqueue) -> &Arc<cudarc::driver::CudaStream> {
    match on.raw_stream() {
        RawStream::Cuda(s) => s,
        RawStream::Sim(_) => unreachable!("CUDA memory is only used on CUDA streams"),
    }
}

/// Element types the backends can hold: plain values the driver may copy bytewise, valid as
/// all-zero bytes.
pub(crate) trait Plain: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static {}
impl<T: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static> Plain for T {}

/// A simulated copy kernel. The source is copied out before the destination is locked, so a
/// copy never holds two buffer locks at once.
fn sim_copy<T: Plain>(from: &SimMem<T>, to: &SimMem<T>) -> impl FnOnce() + Send + 'static {
    let (from, to) = (from.clone(), to.clone());
    move || {
        let v = from.read().to_vec();
        to.lock().copy_from_slice(&v)
    }
}
