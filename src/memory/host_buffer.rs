//! Pinned host buffers: [`HostBuffer`] and its read and write guards.

use super::{bytes_of, Element};
use crate::backend::memory::{pinned_capacity, HostMemory, HostReadView, HostWriteView};
use crate::backend::BackendCtx;
use crate::device::BufferTrack;
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result};
use crate::host_cache::{HostCacheStats, ParkedBlock};
use crate::recorder::{Resource, ResourceKind, ResourceRef, ResourceSealed, Tracked};
use crate::track::{Access, BufferKind};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

pub(super) struct HostInner<T> {
    track: BufferTrack,
    len: usize,
    pub(super) memory: HostMemory<T>,
}

impl<T: Element> Tracked for HostInner<T> {
    fn track(&self) -> &BufferTrack {
        &self.track
    }
}

/// Pinned (page-locked) host memory for asynchronous copies. Host access waits for the GPU
/// uses still pending: [`read`](Self::read) for writes, [`write`](Self::write) for all.
///
/// ```
/// use cusched::{Device, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let src = device.host_from_slice(&[1u64, 2, 3])?;
/// let gpu = device.alloc_zeros::<u64>(s, 3)?;
/// gpu.copy_from_host(s, &src)?; // asynchronous: returns once enqueued
/// let mut dst = device.alloc_host::<u64>(3)?;
/// gpu.copy_to_host(s, &mut dst)?;
/// assert_eq!(&*dst.read()?, &[1, 2, 3]); // waits for the copy into `dst`
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct HostBuffer<T: Element> {
    pub(super) inner: Arc<HostInner<T>>,
}

impl<T: Element> fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer<{}>({}, len {})", std::any::type_name::<T>(), self.inner.track.name(), self.inner.len)
    }
}

impl<T: Element> ResourceSealed for HostBuffer<T> {
    fn resource(&self) -> ResourceRef {
        ResourceRef(ResourceKind::Tracked(self.inner.clone()))
    }
}
impl<T: Element> Resource for HostBuffer<T> {}

/// Read access to a [`HostBuffer`]: a shared slice, so any number of read guards may be held
/// at once, on any threads. It never hands out `&mut`:
///
/// ```compile_fail,E0596
/// # use cusched::{Device, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// let host = device.alloc_host::<f32>(4)?;
/// let mut g = host.read()?;
/// g[0] = 1.0;
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct HostRead<'a, T>(HostReadView<'a, T>);
/// Write access to a [`HostBuffer`]: the only reference to its contents while it lives.
pub struct HostWrite<'a, T>(HostWriteView<'a, T>);

impl<T: fmt::Debug> fmt::Debug for HostRead<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: fmt::Debug> fmt::Debug for HostWrite<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> Deref for HostRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> Deref for HostWrite<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> DerefMut for HostWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl Device {
    /// Allocates `len` zeroed elements of pinned host memory, for asynchronous copies.
    pub fn alloc_host<T: Element>(&self, len: usize) -> Result<HostBuffer<T>> {
        HostBuffer::new(&self.shared, len, None)
    }

    /// Allocates pinned host memory holding a copy of `data`.
    pub fn host_from_slice<T: Element>(&self, data: &[T]) -> Result<HostBuffer<T>> {
        HostBuffer::new(&self.shared, data.len(), Some(data))
    }

    /// Frees the pinned memory that dropped host buffers left for reuse (see
    /// [`DeviceConfig::host_cache_limit`](crate::DeviceConfig::host_cache_limit)) and returns
    /// how many bytes that is. The frees run on the device's reaper thread, after the copies
    /// that used each block; each waits until the whole device is idle and holds up other
    /// threads' CUDA calls meanwhile, so call this between phases of work, not during them.
    pub fn trim_host_cache(&self) -> usize {
        self.shared.host_cache.trim(&self.shared.reaper)
    }

    /// How much pinned memory the device keeps for reuse, and how often host buffers reused it.
    pub fn host_cache_stats(&self) -> HostCacheStats {
        self.shared.host_cache.stats()
    }
}

impl<T: Element> HostBuffer<T> {
    fn new(device: &Arc<DeviceShared>, len: usize, init: Option<&[T]>) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?;
        if let Some(poisoned) = device.poisoned() {
            return Err(poisoned);
        }
        let (backend, epoch) = device.backend_epoch();
        let reuse = match backend {
            BackendCtx::Cuda(_) if bytes != 0 => {
                device.host_cache.take(pinned_capacity(bytes), epoch, &device.reaper).map(|parked| parked.block)
            }
            _ => None,
        };
        let memory = device.check(HostMemory::alloc(&backend, len, bytes, init, reuse), epoch)?;
        let track = BufferTrack::new(BufferKind::Host, device.clone(), epoch, false);
        memory.bind_buffer(track.id.0);
        Ok(HostBuffer { inner: Arc::new(HostInner { track, len, memory }) })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Names the buffer: errors show it beside the id, as `host buffer #N "name"`.
    pub fn label(&self, name: &str) -> &Self {
        self.inner.track.set_label(name);
        self
    }

    /// Checks that the buffer is of the current context and generation, then waits for the GPU
    /// uses that conflict with a host `access`.
    fn settle(&self, access: Access) -> Result<()> {
        let t = &self.inner.track;
        if t.epoch != t.device.epoch() {
            // Pinned memory of a poisoned context: still mapped, but the copies that would have
            // filled it never ran.
            return Err(Error::Stale { what: t.name(), made: t.generation, current: t.device.generation() });
        }
        t.check_fresh()?;
        for ev in t.host_dependencies(access, t.device.config.preflight_timeout)? {
            t.device.wait_event(&ev)?;
        }
        // After the GPU uses it follows: a failed writer among them set its failure before
        // releasing the buffer. A host write replaces the contents.
        if access == Access::Write {
            t.clear_failure();
        } else if t.is_failed() {
            if let Some(e) = t.failed_input() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads the contents, first waiting for pending GPU writes to this buffer.
    ///
    /// Fails with [`Error::Stale`] once the device's generation has advanced past the buffer's,
    /// and with [`Error::FailedInput`] when the buffer's last writer failed (until
    /// [`write`](Self::write) or a successful GPU write replaces the contents).
    pub fn read(&self) -> Result<HostRead<'_, T>> {
        self.settle(Access::Read)?;
        // SAFETY: 1. every tracked GPU write to the memory has finished (waited for above);
        // 2. no tracked write can start while the view lives: the safe writers (`copy_to_host`,
        // `write`) take `&mut self`, which this `&self` borrow excludes, and a GPU write declared
        // on a recorder comes from a user launch, whose `unsafe` contract forbids writing memory
        // Rust holds a shared reference to; 3. the view is shared, so read guards on several
        // threads never alias a `&mut`.
        Ok(HostRead(unsafe { self.inner.memory.read() }))
    }

    /// Writes the contents, first waiting for every pending GPU use of this buffer.
    ///
    /// Fails with [`Error::Stale`] once the device's generation has advanced past the buffer's.
    pub fn write(&mut self) -> Result<HostWrite<'_, T>> {
        self.settle(Access::Write)?;
        // SAFETY: 1. every tracked GPU use of the memory has finished (waited for above);
        // 2. `&mut self` excludes every other Rust reference and every safe op that would queue
        // a new GPU use, for as long as the view lives.
        Ok(HostWrite(unsafe { self.inner.memory.write() }))
    }
}

impl<T> Drop for HostInner<T> {
    fn drop(&mut self) {
        // SAFETY: 1. called once, in the drop of the memory's only owner; 2. nothing uses the
        // memory after the free: the buffer is gone, and the reaper frees it only after the GPU
        // uses listed below.
        let Some((ctx, free)) = (unsafe { self.memory.take_free() }) else { return };
        // Reuse or free must follow every copy that still uses the memory: the cache hands the
        // block out again only once these events passed, and the reaper frees it only then, so
        // this thread never blocks. (In a poisoned context nothing runs any more, and its events
        // only report the poison: there is nothing to wait for.)
        let device = &self.track.device;
        let current = device.epoch();
        let after = if self.track.epoch == current { self.track.all_uses().into_vec() } else { Vec::new() };
        let parked = ParkedBlock { ctx, block: free, epoch: self.track.epoch, after };
        device.host_cache.put(parked, current, &device.reaper);
    }
}

#[cfg(test)]
mod tests {
    use crate::{backend::sim::SimConfig, device::Device};

    #[test]
    fn a_host_buffer_is_named_as_one_in_errors_and_logs() -> crate::error::Result<()> {
        let device = Device::sim(SimConfig::default())?;
        let host = device.alloc_host::<f32>(4)?;
        host.label("staging");
        let track = &host.inner.track;
        let expected = format!("host buffer #{} \"staging\"", track.id.0);
        assert_eq!(track.name(), expected);
        assert_eq!(super::super::LogName(track).to_string(), expected);
        Ok(())
    }
}
