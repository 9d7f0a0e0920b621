//! Scalar results read through the completion, for every library: the GPU writes the op's
//! result (a dot product, a norm, an index) into a pinned, device-mapped slot, and the host
//! reads it once the op's completion resolves. No host synchronization inside the op, and no
//! allocation per op: slots come from 4 KiB slabs kept per stream.

// cuBLAS reads results through device addresses, cuBLASLt copies into host slots, cuSOLVER
// reads status arrays: with some of them off, part of the API is unused.
#![cfg_attr(not(feature = "cublas"), allow(dead_code))]

use super::OpStream;
use crate::backend::cuda;
use crate::error::Result;
use cudarc::driver::CudaContext;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

const SLOT_BYTES: usize = 8;
const SLAB_SLOTS: usize = 512;

/// One page of pinned host memory mapped into the device's address space.
struct Slab {
    /// The context that allocated the slab, bound for its free.
    ctx: Arc<CudaContext>,
    host: NonNull<u8>,
    device: u64,
    free: Mutex<Vec<usize>>,
}

// SAFETY: (1) the slab's memory is only reached through `Slot`s, each of which owns one
// disjoint 8-byte slot exclusively; (2) the pointers themselves are plain addresses.
unsafe impl Send for Slab {}
// SAFETY: as above; (3) the free list is behind a mutex.
unsafe impl Sync for Slab {}

impl Drop for Slab {
    fn drop(&mut self) {
        if let Err(e) = cuda::bind(&self.ctx) {
            log::error!("cusched: a scalar slab is leaked: its context could not be bound ({e})");
            return;
        }
        // Freeing pinned memory synchronizes the device: kept out of captures (see `captures`).
        cuda::captures::outside_captures(self.ctx.ordinal(), || {
            // SAFETY: (1) every `Slot` holds an `Arc<Slab>`, so no slot (and no pending GPU
            // write to one) outlives this; (2) `host` came from `malloc_host_mapped` in this
            // context, which is bound, and is freed once, here.
            unsafe { cuda::memory::free_host(self.host) }
        });
    }
}

/// A stream's scalar slots, and its arrays of them.
#[derive(Default)]
pub(crate) struct ScalarSlots {
    slabs: Vec<Arc<Slab>>,
    #[cfg_attr(not(feature = "cusolver"), allow(dead_code))]
    arrays: Vec<Arc<PinnedArray>>,
}

/// One 8-byte slot, returned to its slab on drop.
pub(crate) struct Slot {
    slab: Arc<Slab>,
    index: usize,
}

impl ScalarSlots {
    /// A free slot, from an existing slab or a new one made in `ctx`, which must be current on
    /// the calling thread.
    pub(crate) fn take(&mut self, ctx: &Arc<CudaContext>) -> Result<Slot> {
        for slab in &self.slabs {
            if let Some(index) = crate::sync::lock(&slab.free).pop() {
                return Ok(Slot { slab: slab.clone(), index });
            }
        }
        let (host, device) = cuda::memory::malloc_host_mapped(ctx, SLOT_BYTES * SLAB_SLOTS)?;
        let slab = Arc::new(Slab { ctx: ctx.clone(), host, device, free: Mutex::new((1..SLAB_SLOTS).rev().collect()) });
        self.slabs.push(slab.clone());
        Ok(Slot { slab, index: 0 })
    }
}

/// A run of pinned, device-mapped memory for ops that write (or read) one scalar per matrix of
/// a batch: status words, or the pointer arrays of batched calls. Pooled per stream: an array is
/// handed out again only once every op that used it has resolved (its holders dropped their
/// `Arc`s), so the host never writes one the GPU may still read.
#[cfg_attr(not(feature = "cusolver"), allow(dead_code))]
pub(crate) struct PinnedArray {
    ctx: Arc<CudaContext>,
    host: NonNull<u8>,
    device: u64,
    bytes: usize,
}

// SAFETY: (1) the memory is written by the host only while one op holds the array, before it
// is enqueued, and read only after the op's event; (2) the pointers are plain addresses.
unsafe impl Send for PinnedArray {}
// SAFETY: as above.
unsafe impl Sync for PinnedArray {}

impl Drop for PinnedArray {
    fn drop(&mut self) {
        if let Err(e) = cuda::bind(&self.ctx) {
            log::error!("cusched: a pinned scalar array is leaked: its context could not be bound ({e})");
            return;
        }
        // Freeing pinned memory synchronizes the device: kept out of captures (see `captures`).
        cuda::captures::outside_captures(self.ctx.ordinal(), || {
            // SAFETY: (1) the last holder drops it after the ops that used it resolved (or, for
            // the pool's copy, via the reaper after the stream's work); (2) `host` came from
            // `malloc_host_mapped` in this context, which is bound, and is freed once, here.
            unsafe { cuda::memory::free_host(self.host) }
        });
    }
}

#[cfg_attr(not(feature = "cusolver"), allow(dead_code))]
impl PinnedArray {
    /// The array's device address, as `*mut T`.
    pub(crate) fn device_ptr<T>(&self) -> *mut T {
        self.device as *mut T
    }

    /// Reads element `i` of the array seen as `[T]`. Call only after the writing op's event has
    /// completed.
    pub(crate) fn read<T: Copy>(&self, i: usize) -> T {
        assert!((i + 1) * std::mem::size_of::<T>() <= self.bytes, "pinned array read out of bounds");
        // SAFETY: (1) in bounds (checked) and aligned (page-aligned base, `T` a primitive);
        // (2) the GPU's writes completed before the event the caller waited for. Volatile: the
        // write came from outside this program's view.
        unsafe { std::ptr::read_volatile(self.host.as_ptr().cast::<T>().add(i)) }
    }

    /// Writes `values` at the start of the array seen as `[T]`, for the GPU to read.
    pub(crate) fn write<T: Copy>(&mut self, values: &[T]) {
        assert!(std::mem::size_of_val(values) <= self.bytes, "pinned array write out of bounds");
        // SAFETY: (1) in bounds (checked), page-aligned; (2) `&mut self`: the array was just
        // taken from the pool, unshared, so no op that may read it is in flight.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.host.as_ptr().cast::<T>(), values.len()) }
    }
}

#[cfg_attr(not(feature = "cusolver"), allow(dead_code))]
impl ScalarSlots {
    /// A free pinned array of at least `bytes` (reused when one is free, else made in `ctx`,
    /// current on the calling thread), written with `init`, then shared.
    pub(crate) fn take_array(
        &mut self,
        ctx: &Arc<CudaContext>,
        bytes: usize,
        init: impl FnOnce(&mut PinnedArray),
    ) -> Result<Arc<PinnedArray>> {
        let bytes = bytes.max(SLOT_BYTES * SLAB_SLOTS).next_power_of_two();
        // The pool's `Arc` is the only one left once every op that used the array resolved.
        let free = self.arrays.iter().position(|a| a.bytes >= bytes && Arc::strong_count(a) == 1);
        let mut array = match free {
            Some(i) => self.arrays.swap_remove(i),
            None => {
                let (host, device) = cuda::memory::malloc_host_mapped(ctx, bytes)?;
                Arc::new(PinnedArray { ctx: ctx.clone(), host, device, bytes })
            }
        };
        match Arc::get_mut(&mut array) {
            Some(a) => init(a),
            None => unreachable!("a pooled array is handed out unshared"),
        }
        self.arrays.push(array.clone());
        Ok(array)
    }
}

impl Slot {
    /// The slot's device address, for the library to write `T` to.
    pub(crate) fn device_ptr<T>(&self) -> *mut T {
        debug_assert!(std::mem::size_of::<T>() <= SLOT_BYTES);
        (self.slab.device + (self.index * SLOT_BYTES) as u64) as *mut T
    }

    /// The slot's host address, for an asynchronous copy into it.
    #[cfg(feature = "cublaslt")]
    pub(crate) fn host_ptr<T>(&self) -> *mut T {
        debug_assert!(std::mem::size_of::<T>() <= SLOT_BYTES);
        // SAFETY: the offset stays inside the slab (index < SLAB_SLOTS).
        unsafe { self.slab.host.as_ptr().add(self.index * SLOT_BYTES).cast::<T>() }
    }

    /// Reads the `T` the GPU wrote. Call only after the writing op's event has completed.
    pub(crate) fn read<T: Copy>(&self) -> T {
        debug_assert!(std::mem::size_of::<T>() <= SLOT_BYTES && std::mem::align_of::<T>() <= SLOT_BYTES);
        // SAFETY: (1) the slot is 8 bytes, 8-aligned (the slab is page-aligned) and owned by
        // `self`; (2) the GPU's write to it completed before the event the caller waited for.
        // Volatile, because the write came from outside this program's view.
        unsafe { std::ptr::read_volatile(self.slab.host.as_ptr().add(self.index * SLOT_BYTES).cast::<T>()) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::sync::lock(&self.slab.free).push(self.index);
    }
}

impl OpStream {
    /// Runs an op whose result the GPU writes: `enqueue` gets the device address of a pinned
    /// slot to write one `R` to, and the completion resolves with `convert` of what was
    /// written, read once the GPU has passed the op's event.
    #[cfg(feature = "cublas")]
    pub(crate) fn run_scalar<R: Copy + Send + 'static, V: Send + 'static>(
        &mut self,
        rec: crate::recorder::LaunchRecorder,
        enqueue: impl FnOnce(*mut R) -> Result<()>,
        convert: fn(R) -> V,
    ) -> Result<crate::completion::Completion<V>> {
        self.run_with_slot(rec, Vec::new(), |slot, _| enqueue(slot.device_ptr::<R>()), convert)
    }

    /// Like [`run_scalar`](Self::run_scalar), with the slot itself (its device or host
    /// address) and the raw stream given to `enqueue`; `keep` stays alive until the GPU is
    /// done.
    #[cfg(any(feature = "cublas", feature = "cublaslt"))]
    pub(crate) fn run_with_slot<R: Copy + Send + 'static, V: Send + 'static>(
        &mut self,
        rec: crate::recorder::LaunchRecorder,
        keep: Vec<crate::completion::KeepAlive>,
        enqueue: impl FnOnce(&Slot, &Arc<cudarc::driver::CudaStream>) -> Result<()>,
        convert: fn(R) -> V,
    ) -> Result<crate::completion::Completion<V>> {
        self.refuse_recording(crate::libs::op::HOST_READS_RESULT)?;
        let stream = self.bound_stream()?;
        let slot = self.scalars.take(stream.context())?;
        let crate::recorder::Launched { value: (), event, trace, .. } = self.launch_cuda(rec, |s| enqueue(&slot, s))?;
        let read: crate::completion::Deferred<V> = Box::new(move || Ok(convert(slot.read::<R>())));
        let (completion, shared) = crate::completion::Completion::queued(&self.device.shared);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        match event {
            Some(ev) => shared.enqueued_deferred(read, ev, keep),
            None => shared.enqueued(read(), None, keep),
        }
        Ok(completion)
    }
}

impl OpStream {
    /// Runs an op whose status (or result) the GPU writes to pinned memory it is given by
    /// `prepare`: `enqueue` gets what `prepare` made, and the completion resolves with `read`
    /// of it once the GPU has passed the op's event (`read` may fail: a status word that says
    /// the op failed). `keep` stays alive until then.
    #[cfg(feature = "cusolver")]
    pub(crate) fn run_deferred<P: Send + 'static, V: Send + 'static>(
        &mut self,
        rec: crate::recorder::LaunchRecorder,
        keep: Vec<crate::completion::KeepAlive>,
        prepare: impl FnOnce(&mut ScalarSlots, &Arc<CudaContext>) -> Result<P>,
        enqueue: impl FnOnce(&P) -> Result<()>,
        read: impl FnOnce(P) -> Result<V> + Send + 'static,
    ) -> Result<crate::completion::Completion<V>> {
        self.refuse_recording(crate::libs::op::HOST_READS_STATUS)?;
        let stream = self.bound_stream()?;
        let pinned = prepare(&mut self.scalars, stream.context())?;
        let crate::recorder::Launched { value: (), event, trace, .. } = self.launch_cuda(rec, |_| enqueue(&pinned))?;
        let deferred: crate::completion::Deferred<V> = Box::new(move || read(pinned));
        let (completion, shared) = crate::completion::Completion::queued(&self.device.shared);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        match event {
            Some(ev) => shared.enqueued_deferred(deferred, ev, keep),
            None => shared.enqueued(deferred(), None, keep),
        }
        Ok(completion)
    }
}
