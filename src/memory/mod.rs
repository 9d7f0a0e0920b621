//! Device buffers (`GpuRef<T>`), pinned host buffers (`HostBuffer<T>`) and the copies between
//! them. Every allocation, copy and free goes through the tracker like a kernel does; the
//! backend ([`crate::backend::memory`]) performs them, on CUDA or simulated.
//!
//! - [`element`]: the element types;
//! - [`device_buffer`]: `GpuRef`, allocation, adoption and the fenced free;
//! - [`host_buffer`]: `HostBuffer` and its guards;
//! - [`copies`]: uploads, downloads and copies.

mod copies;
mod device_buffer;
mod element;
mod host_buffer;

pub use crate::backend::sim_mem::{SimMem, SimRead};
pub use device_buffer::GpuRef;
// Module globals: only NVRTC's modules make them.
#[cfg(feature = "nvrtc")]
pub(crate) use device_buffer::{ModuleOwner, WeakGpuRef};
pub use element::{Complex, Element};
#[cfg(feature = "_fp8")]
pub use element::{F8E4M3, F8E5M2};
pub use host_buffer::{HostBuffer, HostRead, HostWrite};

use crate::device::BufferTrack;
use crate::error::{Error, Result};

fn bytes_of<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid("len", format!("{len} elements overflow the address space")))
}

/// A tracked buffer's name in logs, `kind #id`.
struct LogName<'a>(&'a BufferTrack);

impl std::fmt::Display for LogName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{}", self.0.kind, self.0.id.0)?;
        match self.0.label() {
            Some(l) => write!(f, " \"{l}\""),
            None => Ok(()),
        }
    }
}
