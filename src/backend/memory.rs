//! Buffer memory on either backend, and the operations on it: allocations, memsets, copies
//! and frees, each a CUDA driver call or a simulated kernel. The layer above decides when an
//! operation may run (its recorder fences it); this layer only enqueues it.

use super::cuda;
use super::sim_mem::SimMem;
use super::{BackendCtx, RawStream};
use crate::access::Access;
use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaSlice, DeviceRepr, ValidAsZeroBits};
use smallvec::SmallVec;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, MutexGuard};

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

/// The memory of one device buffer.
pub(crate) enum DeviceMemory<T> {
    Cuda(CudaSlice<T>),
    Sim(SimMem<T>),
}

impl<T: Plain> DeviceMemory<T> {
    /// Allocates `len` elements (`bytes` bytes) on `raw`, uninitialised on CUDA and
    /// `T::default()` on the simulator.
    ///
    /// # Safety
    /// Every bit pattern must be a valid `T`, and the caller must order the allocation before
    /// any use on another stream.
    pub(crate) unsafe fn alloc(raw: &RawStream, len: usize, bytes: usize) -> Result<Self> {
        match raw {
            // SAFETY: this function's contract is `cuda::memory::alloc`'s.
            RawStream::Cuda(s) => unsafe { cuda::memory::alloc::<T>(s, len) }.map(DeviceMemory::Cuda),
            RawStream::Sim(_) => SimMem::try_new(len, bytes, None).map(DeviceMemory::Sim),
        }
    }

    /// Takes over `slice`, allocated elsewhere in `raw`'s context: `raw` waits for the work
    /// queued on the slice's own stream. `foreign` makes the error for a slice of another
    /// context, given its device ordinal.
    pub(crate) fn adopt(raw: &RawStream, slice: CudaSlice<T>, foreign: impl FnOnce(usize) -> Error) -> Result<Self> {
        let RawStream::Cuda(ours) = raw else {
            return Err(Error::WrongBackend { what: "Device::adopt", needed: "cuda", actual: "sim" });
        };
        if !cuda::memory::same_context(&slice, ours) {
            return Err(foreign(slice.ordinal()));
        }
        // SAFETY: the slice is of `ours`'s context (checked above).
        unsafe { cuda::memory::adopt(ours, slice) }.map(DeviceMemory::Cuda)
    }

    /// Ties simulated memory to the tracked buffer `id`, so the checker sees its accesses.
    pub(crate) fn bind_buffer(&self, id: u64) {
        if let DeviceMemory::Sim(m) = self {
            m.bind(id);
        }
    }

    pub(crate) fn cuda_slice(&self) -> Option<&CudaSlice<T>> {
        match self {
            DeviceMemory::Cuda(s) => Some(s),
            DeviceMemory::Sim(_) => None,
        }
    }

    pub(crate) fn sim_mem(&self) -> Option<&SimMem<T>> {
        match self {
            DeviceMemory::Sim(m) => Some(m),
            DeviceMemory::Cuda(_) => None,
        }
    }

    /// Shows the allocation to the simulator's checker as a write (a kernel that does
    /// nothing); nothing is enqueued on CUDA, where the allocation itself is stream-ordered.
    pub(crate) fn announce(&self, on: &impl Enqueue) -> Result<()> {
        match self {
            DeviceMemory::Cuda(_) => Ok(()),
            DeviceMemory::Sim(_) => sim_kernel(on, || {}),
        }
    }

    /// Enqueues setting every byte to zero.
    ///
    /// # Safety
    /// 1. All-zero bytes must be a valid `T`;
    /// 2. the launch `on` is fenced against the other uses of this memory, and its free is fenced
    ///    after the launch.
    pub(crate) unsafe fn zero(&self, on: &impl Enqueue) -> Result<()> {
        match self {
            // SAFETY: this function's contract is `memset_zero`'s.
            DeviceMemory::Cuda(slice) => unsafe { cuda::memory::memset_zero(cuda_stream(on), slice) },
            DeviceMemory::Sim(m) => {
                let m = m.clone();
                sim_kernel(on, move || m.lock().iter_mut().for_each(|x| *x = T::default()))
            }
        }
    }

    /// Enqueues the copy of `data` (host memory of any kind) into this memory. Returns whether
    /// the copy still reads `data` after this returns (pinned, registered or managed memory).
    ///
    /// # Safety
    /// 1. On `Ok(true)`, `data` stays allocated and unwritten until the launch's work has finished;
    /// 2. the launch `on` is fenced against the other uses of this memory, and its free is fenced
    ///    after the launch.
    pub(crate) unsafe fn copy_from_host(&self, on: &impl Enqueue, data: &[T]) -> Result<bool> {
        match self {
            DeviceMemory::Cuda(slice) => {
                let s = cuda_stream(on);
                let bytes = std::mem::size_of_val(data);
                let in_flight = cuda::memory::is_driver_host_memory(s.context(), data.as_ptr().cast(), bytes)?;
                // SAFETY: 1. `data` is readable now and, where the driver reads it after this
                // returns (`in_flight`), until the launch finishes (contract 1); 2. this
                // memory is fenced and kept alive (contract 2).
                unsafe { cuda::memory::copy_htod(s, slice, data.as_ptr(), data.len()) }?;
                Ok(in_flight)
            }
            DeviceMemory::Sim(m) => {
                let (m, data) = (m.clone(), data.to_vec());
                sim_kernel(on, move || m.lock().copy_from_slice(&data)).map(|()| false)
            }
        }
    }

    /// Enqueues a copy of this memory into host memory that [`Staging::into_vec`] hands out.
    ///
    /// # Safety
    /// 1. The staging is kept (not dropped) until the launch's work has finished or can no longer
    ///    run, and read only after it finished;
    /// 2. the launch `on` is fenced after the writes of this memory, and its free is fenced after
    ///    the launch.
    pub(crate) unsafe fn copy_to_staging(&self, on: &impl Enqueue, len: usize) -> Result<Staging<T>> {
        match self {
            DeviceMemory::Cuda(slice) => {
                let mut out = vec![T::default(); len];
                // SAFETY: 1. `out` holds `len` elements; its heap allocation does not move with
                // the `Vec`, and the caller keeps it untouched until the copy finished
                // (contract 1); 2. this memory is fenced and kept alive (contract 2).
                unsafe { cuda::memory::copy_dtoh(cuda_stream(on), out.as_mut_ptr(), len, slice) }?;
                Ok(Staging(StagingInner::Cuda(out)))
            }
            DeviceMemory::Sim(m) => {
                let (src, slot) = (m.clone(), SimMem::new(Vec::new()));
                let out = slot.clone();
                sim_kernel(on, move || *out.lock() = src.read().to_vec())?;
                Ok(Staging(StagingInner::Sim(slot)))
            }
        }
    }

    /// Enqueues a copy of all of `src` into this memory, on the same device.
    ///
    /// # Safety
    /// 1. `src` is another allocation of the same length;
    /// 2. the launch `on` is fenced against the other uses of both, and both frees are fenced after
    ///    the launch.
    pub(crate) unsafe fn copy_from_device(&self, on: &impl Enqueue, src: &DeviceMemory<T>) -> Result<()> {
        match (self, src) {
            // SAFETY: this function's contract is `copy_dtod`'s.
            (DeviceMemory::Cuda(dst), DeviceMemory::Cuda(from)) => unsafe {
                cuda::memory::copy_dtod(cuda_stream(on), dst, from)
            },
            (DeviceMemory::Sim(dst), DeviceMemory::Sim(from)) => sim_kernel(on, sim_copy(from, dst)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        }
    }

    /// Enqueues a copy of all of `src`, memory of another device of the process, into this
    /// memory: `cuMemcpyPeerAsync` on CUDA (staged through the host by the driver where the
    /// GPUs have no peer access), a host copy on the simulator.
    ///
    /// # Safety
    /// 1. `src` is another allocation of the same length;
    /// 2. the launch `on` is fenced against the other uses of both, on both devices, and both
    ///    frees are fenced after the launch.
    pub(crate) unsafe fn copy_from_peer(&self, on: &impl Enqueue, src: &DeviceMemory<T>) -> Result<()> {
        match (self, src) {
            // SAFETY: this function's contract is `copy_peer`'s.
            (DeviceMemory::Cuda(dst), DeviceMemory::Cuda(from)) => unsafe {
                cuda::memory::copy_peer(cuda_stream(on), dst, from)
            },
            (DeviceMemory::Sim(dst), DeviceMemory::Sim(from)) => sim_kernel(on, sim_copy(from, dst)),
            // The recorder's preflight rejects buffers of another backend.
            _ => Err(Error::WrongBackend { what: "Device::copy_peer", needed: "one backend", actual: "two" }),
        }
    }

    /// The CUDA contexts of this memory and `other`, where both are CUDA memory: what peer
    /// access is enabled between before a peer copy. Simulated memory needs none.
    pub(crate) fn peer_contexts<'a>(&'a self, other: &'a DeviceMemory<T>) -> Option<[&'a Arc<CudaContext>; 2]> {
        match (self, other) {
            (DeviceMemory::Cuda(a), DeviceMemory::Cuda(b)) => Some([a.context(), b.context()]),
            _ => None,
        }
    }

    /// Enqueues a copy of all of the host memory `src` into this memory.
    ///
    /// # Safety
    /// 1. `src` has this memory's length;
    /// 2. the launch `on` is fenced against the other uses of both, and both frees are fenced after
    ///    the launch.
    pub(crate) unsafe fn copy_from_pinned(&self, on: &impl Enqueue, src: &HostMemory<T>) -> Result<()> {
        match (self, src) {
            (DeviceMemory::Cuda(dst), HostMemory::Pinned(p)) => {
                // SAFETY: 1. the pinned range holds `p.len` elements and stays allocated and
                // unwritten until the copy has read it (contract 2: its free and host writes
                // wait for the launch); 2. this memory is fenced and kept alive (contract 2).
                unsafe { cuda::memory::copy_htod(cuda_stream(on), dst, p.ptr.as_ptr(), p.len) }
            }
            (DeviceMemory::Sim(dst), HostMemory::Sim(from)) => sim_kernel(on, sim_copy(from, dst)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        }
    }

    /// Enqueues a copy of all of this memory into the host memory `dst`.
    ///
    /// # Safety
    /// 1. `dst` has this memory's length, and no Rust reference to its contents is used until the
    ///    launch's work has finished;
    /// 2. the launch `on` is fenced against the other uses of both, and both frees are fenced after
    ///    the launch.
    pub(crate) unsafe fn copy_to_pinned(&self, on: &impl Enqueue, dst: &HostMemory<T>) -> Result<()> {
        match (self, dst) {
            (DeviceMemory::Cuda(from), HostMemory::Pinned(p)) => {
                // SAFETY: 1. the pinned range holds `p.len` elements, stays allocated until the
                // copy finished and is not referenced meanwhile (contracts 1 and 2); 2. this
                // memory is fenced and kept alive (contract 2).
                unsafe { cuda::memory::copy_dtoh(cuda_stream(on), p.ptr.as_ptr(), p.len, from) }
            }
            (DeviceMemory::Sim(from), HostMemory::Sim(to)) => sim_kernel(on, sim_copy(from, to)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        }
    }

    /// Frees the memory on `raw`, the stream it was allocated on, after the work enqueued
    /// there so far (the caller has fenced `raw` after every use). `buffer` is the tracked
    /// buffer's id, `what` its name for the log.
    pub(crate) fn free_on(self, raw: &RawStream, buffer: u64, what: &dyn std::fmt::Display) {
        match (self, raw) {
            // cudarc's drop enqueues cuMemFreeAsync on the slice's stream, which is `raw`, but
            // on whatever context is current: `free` binds the slice's own.
            (DeviceMemory::Cuda(slice), _) => cuda::memory::free(slice, what),
            (DeviceMemory::Sim(mem), RawStream::Sim(s)) => {
                let _names = super::sim::naming("memory", super::sim::OpText::Static("free"), None, Default::default());
                s.run(smallvec::smallvec![(buffer, Access::Write)], Box::new(move || drop(mem)))
            }
            (DeviceMemory::Sim(_), RawStream::Cuda(_)) => {}
        }
    }

    /// Frees memory of a poisoned context: no new work can reach it, and fencing its free on a
    /// stream of the new context is impossible. cudarc's drop queues the free in the old
    /// context (bound here), where it fails harmlessly; the context's teardown releases the
    /// memory.
    pub(crate) fn free_in_old_context(self, what: &dyn std::fmt::Display) {
        match self {
            DeviceMemory::Cuda(slice) => cuda::memory::free(slice, what),
            DeviceMemory::Sim(mem) => drop(mem),
        }
    }
}

/// Host memory a device-to-host copy writes, read once the copy has finished.
pub(crate) struct Staging<T>(StagingInner<T>);

enum StagingInner<T> {
    Cuda(Vec<T>),
    Sim(SimMem<T>),
}

impl<T> Staging<T> {
    /// The copied contents.
    ///
    /// # Safety
    /// The copy into the staging has finished.
    pub(crate) unsafe fn into_vec(self) -> Vec<T> {
        match self.0 {
            StagingInner::Cuda(v) => v,
            StagingInner::Sim(slot) => std::mem::take(&mut *slot.lock()),
        }
    }
}

/// Pinned host memory and the context that allocated it: holding the context keeps the memory
/// mapped even after the device moved to a new context.
pub(crate) struct Pinned<T> {
    ptr: NonNull<T>,
    len: usize,
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
