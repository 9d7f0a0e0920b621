//! Pinned host memory: its size classes, its allocation (or reuse of a freed block), its free
//! with the allocating context bound, and the host's views of it.

use super::Plain;
use crate::backend::cuda;
use crate::backend::sim_mem::SimMem;
use crate::backend::BackendCtx;
use crate::error::{Error, Result};
use cudarc::driver::CudaContext;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, MutexGuard};

/// Pinned host memory and the context that allocated it: holding the context keeps the memory
/// mapped even after the device moved to a new context.
pub(crate) struct Pinned<T> {
    pub(super) ptr: NonNull<T>,
    pub(super) len: usize,
    /// Bytes allocated: `len` elements rounded up to [`pinned_capacity`], so that the block can
    /// serve a later buffer of the same size class.
    capacity: usize,
    ctx: Arc<CudaContext>,
}

/// The bytes actually allocated for a pinned buffer of `bytes`: its size class. Classes are
/// powers of two up to a page, then a quarter of the enclosing power of two, page-aligned, so
/// a block kept for reuse serves every size in its class and wastes at most a quarter (or
/// less than a page).
pub(crate) fn pinned_capacity(bytes: usize) -> usize {
    const PAGE: usize = 4096;
    if bytes <= PAGE {
        return bytes.next_power_of_two().max(64);
    }
    let top = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
    let step = (top / 4).max(PAGE);
    bytes.div_ceil(step) * step
}

/// The memory of one host buffer: pinned on CUDA, a simulated buffer on the simulator.
pub(crate) enum HostMemory<T> {
    Pinned(Pinned<T>),
    Sim(SimMem<T>),
}

// SAFETY: the pinned pointer is owned exclusively by this value (allocated in `alloc`, freed
// through `take_free`); access through it is synchronized by its owner (the tracker's waits
// and `HostBuffer`'s borrow rules), and `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for HostMemory<T> {}
// SAFETY: as above; shared access only reads through `&[T]` after waiting for GPU writes.
unsafe impl<T: Send + Sync> Sync for HostMemory<T> {}

impl<T: Plain> HostMemory<T> {
    /// Allocates `len` elements (`bytes` bytes) in `backend`'s context: zeroed, or a copy of
    /// `init` (which has `len` elements). On CUDA, `reuse` (a block of this context whose GPU
    /// uses have all finished) serves instead of a new allocation when it is large enough; one
    /// that is not is freed.
    pub(crate) fn alloc(
        backend: &BackendCtx,
        len: usize,
        bytes: usize,
        init: Option<&[T]>,
        reuse: Option<PinnedFree>,
    ) -> Result<Self> {
        match backend {
            BackendCtx::Cuda(ctx) => {
                if init.is_some_and(|data| data.len() != len) {
                    return Err(Error::invalid("len", "the initial data has another length"));
                }
                let (ptr, capacity) = if bytes == 0 {
                    (NonNull::dangling(), 0)
                } else {
                    let (raw, capacity) = match reuse {
                        Some(block) if block.capacity >= bytes => block.into_raw(),
                        _ => {
                            let capacity = pinned_capacity(bytes);
                            (cuda::memory::malloc_host(ctx, capacity)?, capacity)
                        }
                    };
                    let ptr = raw.cast::<T>();
                    // SAFETY: 1. `ptr` points to `capacity >= bytes` bytes no one else
                    // references (fresh, or a block whose owner gave it up and whose GPU uses
                    // have finished); 2. zero is a valid `T` (`Plain` types are
                    // `ValidAsZeroBits`); 3. `init` (if any) has exactly `len` elements (checked
                    // above).
                    unsafe {
                        match init {
                            Some(data) => std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), len),
                            None => std::ptr::write_bytes(ptr.as_ptr(), 0, len),
                        }
                    }
                    (ptr, capacity)
                };
                Ok(HostMemory::Pinned(Pinned { ptr, len, capacity, ctx: ctx.clone() }))
            }
            BackendCtx::Sim(_) => SimMem::try_new(len, bytes, init).map(HostMemory::Sim),
        }
    }
}

impl<T> HostMemory<T> {
    /// Ties simulated memory to the tracked buffer `id`, so the checker sees its accesses.
    pub(crate) fn bind_buffer(&self, id: u64) {
        if let HostMemory::Sim(m) = self {
            m.bind(id);
        }
    }

    /// The contents, for reading on the host.
    ///
    /// # Safety
    /// While the view lives, no GPU work writes the memory and no `&mut` to it exists; every GPU
    /// write to it has finished.
    pub(crate) unsafe fn read(&self) -> HostReadView<'_, T>
    where
        T: Clone,
    {
        match self {
            // SAFETY: 1. the range is live (freed only through `take_free`) and holds `len`
            // initialised elements; 2. nothing writes it while the view lives (this function's
            // contract).
            HostMemory::Pinned(p) => HostReadView::Pinned(unsafe { std::slice::from_raw_parts(p.ptr.as_ptr(), p.len) }),
            HostMemory::Sim(m) => HostReadView::Sim(m.lock().clone()),
        }
    }

    /// The contents, for writing on the host.
    ///
    /// # Safety
    /// While the view lives, no GPU work uses the memory and no other reference to it exists;
    /// every GPU use of it has finished.
    pub(crate) unsafe fn write(&self) -> HostWriteView<'_, T> {
        match self {
            // SAFETY: 1. the range is live and holds `len` initialised elements; 2. nothing else
            // reads or writes it while the view lives (this function's contract).
            HostMemory::Pinned(p) => {
                HostWriteView::Pinned(unsafe { std::slice::from_raw_parts_mut(p.ptr.as_ptr(), p.len) })
            }
            HostMemory::Sim(m) => HostWriteView::Sim(m.lock()),
        }
    }

    /// For pinned memory that holds an allocation: its context and the value whose drop frees
    /// it (with that context bound).
    ///
    /// # Safety
    /// Called at most once, and the memory is not used after the returned value drops.
    pub(crate) unsafe fn take_free(&self) -> Option<(Arc<CudaContext>, PinnedFree)> {
        match self {
            HostMemory::Pinned(p) if p.capacity != 0 => {
                Some((p.ctx.clone(), PinnedFree { ptr: p.ptr.cast::<u8>(), capacity: p.capacity }))
            }
            _ => None,
        }
    }
}

/// A pinned allocation whose drop frees it; dropped with its context bound (the reaper binds
/// it), or handed to a new buffer ([`HostMemory::alloc`]'s `reuse`).
pub(crate) struct PinnedFree {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: the pointer is owned exclusively by this value (its owner gave it up in
// `take_free`), and only its drop or `into_raw` uses it.
unsafe impl Send for PinnedFree {}

impl PinnedFree {
    /// Bytes allocated.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Gives up ownership without freeing: the pointer and its capacity.
    fn into_raw(self) -> (NonNull<u8>, usize) {
        let this = std::mem::ManuallyDrop::new(self);
        (this.ptr, this.capacity)
    }
}

impl Drop for PinnedFree {
    fn drop(&mut self) {
        // SAFETY: 1. the pointer came from `malloc_host` in `HostMemory::alloc` and is freed
        // once, here (`take_free` is called once per owner, and `into_raw` hands ownership on
        // without running this); 2. whoever drops this has waited for every GPU use, and the
        // host buffer is gone; 3. the reaper drops this with the allocating context bound.
        unsafe { cuda::memory::free_host(self.ptr) }
    }
}

/// Host read access to a [`HostMemory`]: a shared slice of pinned memory, or a copy of
/// simulated memory taken under its lock (holding the lock instead would make a second read
/// guard, or a simulated copy out of the buffer, wait for the first guard to drop).
pub(crate) enum HostReadView<'a, T> {
    Pinned(&'a [T]),
    Sim(Vec<T>),
}

/// Host write access to a [`HostMemory`].
pub(crate) enum HostWriteView<'a, T> {
    Pinned(&'a mut [T]),
    Sim(MutexGuard<'a, Vec<T>>),
}

impl<T> Deref for HostReadView<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostReadView::Pinned(s) => s,
            HostReadView::Sim(v) => v,
        }
    }
}

impl<T> Deref for HostWriteView<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostWriteView::Pinned(s) => s,
            HostWriteView::Sim(g) => g,
        }
    }
}

impl<T> DerefMut for HostWriteView<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            HostWriteView::Pinned(s) => s,
            HostWriteView::Sim(g) => g,
        }
    }
}
