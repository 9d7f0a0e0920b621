//! Pinned, device-mapped slots for scalar results that the GPU writes (a cuBLAS `dot` in
//! device pointer mode, say) and the host reads once the op's completion resolves. No host
//! synchronization inside the op, and no allocation per op.

use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::sync::{Arc, Mutex};

const SLOT_BYTES: usize = 8;
const SLAB_SLOTS: usize = 512;

/// One page of pinned host memory mapped into the device's address space.
struct Slab {
    /// The context that allocated the slab, bound for its free.
    ctx: Arc<CudaContext>,
    host: *mut u8,
    device: u64,
    free: Mutex<Vec<usize>>,
}

// SAFETY: the slab's memory is only reached through `Slot`s, each of which owns one disjoint
// 8-byte slot exclusively; the pointers themselves are plain addresses.
unsafe impl Send for Slab {}
// SAFETY: as above; the free list is behind a mutex.
unsafe impl Sync for Slab {}

impl Drop for Slab {
    fn drop(&mut self) {
        if let Err(e) = crate::backend::cuda::bind(&self.ctx) {
            log::error!("cusched: a scalar slab is leaked: its context could not be bound ({e})");
            return;
        }
        // SAFETY: every `Slot` holds an `Arc<Slab>`, so no slot (and no pending GPU write to one)
        // outlives this; `host` came from `cuMemHostAlloc` in the bound context.
        if let Err(e) = unsafe { result::free_host(self.host.cast()) } {
            log::error!("cusched: cuMemFreeHost of a scalar slab failed: {:?}", e.0);
        }
    }
}

/// A handle's scalar slots. The context must be current on the calling thread.
#[derive(Default)]
pub(crate) struct ScalarSlots {
    /// The context slabs are allocated in (`None` on the simulator, which has no cuBLAS).
    ctx: Option<Arc<CudaContext>>,
    slabs: Vec<Arc<Slab>>,
}

/// One 8-byte slot, returned to its slab on drop.
pub(crate) struct Slot {
    slab: Arc<Slab>,
    index: usize,
}

impl ScalarSlots {
    pub(crate) fn new(ctx: Option<Arc<CudaContext>>) -> Self {
        ScalarSlots { ctx, slabs: Vec::new() }
    }

    /// A free slot, from an existing slab or a new one.
    pub(crate) fn take(&mut self) -> Result<Slot> {
        for slab in &self.slabs {
            if let Some(index) = crate::sync::lock(&slab.free).pop() {
                return Ok(Slot { slab: slab.clone(), index });
            }
        }
        let ctx = self.ctx.clone().ok_or(Error::WrongBackend {
            what: "scalar result slots",
            needed: "cuda",
            actual: "sim",
        })?;
        let bytes = SLOT_BYTES * SLAB_SLOTS;
        // SAFETY: plain allocation call; the context is current (the caller bound it).
        let host = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }.call("cuMemHostAlloc")?;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a live mapped allocation; `device` is a valid out-pointer.
        let got = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }.result();
        if let Err(e) = got {
            // SAFETY: `host` came from `cuMemHostAlloc` above and nothing else refers to it.
            let _ = unsafe { result::free_host(host) };
            return Err(Error::driver("cuMemHostGetDevicePointer", e));
        }
        let slab = Arc::new(Slab { ctx, host: host.cast(), device, free: Mutex::new((1..SLAB_SLOTS).rev().collect()) });
        self.slabs.push(slab.clone());
        Ok(Slot { slab, index: 0 })
    }
}

impl Slot {
    /// The slot's device address, for the library to write `T` to.
    pub(crate) fn device_ptr<T>(&self) -> *mut T {
        debug_assert!(std::mem::size_of::<T>() <= SLOT_BYTES);
        (self.slab.device + (self.index * SLOT_BYTES) as u64) as *mut T
    }

    /// Reads the `T` the GPU wrote. Call only after the writing op's event has completed.
    pub(crate) fn read<T: Copy>(&self) -> T {
        debug_assert!(std::mem::size_of::<T>() <= SLOT_BYTES && std::mem::align_of::<T>() <= SLOT_BYTES);
        // SAFETY: the slot is 8 bytes, 8-aligned (the slab is page-aligned), owned by `self`, and
        // the GPU's write to it completed before the event the caller waited for. Volatile,
        // because the write came from outside this program's view.
        unsafe { std::ptr::read_volatile(self.slab.host.add(self.index * SLOT_BYTES).cast::<T>()) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::sync::lock(&self.slab.free).push(self.index);
    }
}
