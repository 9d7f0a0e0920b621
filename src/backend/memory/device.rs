//! Device memory: allocation, adoption, memsets, copies and frees, each a CUDA driver call or a
//! simulated kernel on the launch's stream.

use super::{cuda_stream, sim_copy, sim_kernel, Enqueue, HostMemory, Plain};
use crate::access::Access;
use crate::backend::cuda;
use crate::backend::sim_mem::SimMem;
use crate::backend::RawStream;
use crate::error::{Error, Result};
use cudarc::driver::{CudaContext, CudaSlice};
use std::sync::Arc;

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

    /// Lets go of memory another owner frees (a module's global): nothing is freed or
    /// enqueued. On CUDA the slice's handle is taken apart without `cuMemFreeAsync`.
    pub(crate) fn release_unowned(self) {
        match self {
            DeviceMemory::Cuda(slice) => {
                let _address = slice.leak();
            }
            DeviceMemory::Sim(mem) => drop(mem),
        }
    }

    /// Wraps `len` elements at `address`, memory of `raw`'s context that something else owns
    /// (a module's global); [`release_unowned`](Self::release_unowned) lets go of it.
    ///
    /// # Safety
    /// 1. `address` holds `len` elements of `T` in `raw`'s context, valid for every bit pattern,
    ///    and stays allocated until `release_unowned`;
    /// 2. the memory is released only through `release_unowned`, never dropped or freed.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) unsafe fn unowned_cuda(raw: &RawStream, address: u64, len: usize) -> Result<Self> {
        let RawStream::Cuda(s) = raw else {
            return Err(Error::WrongBackend { what: "a module global", needed: "cuda", actual: "sim" });
        };
        // SAFETY: 1. the caller vouches that `address` holds `len` elements of `T` of this
        // context; 2. the slice is taken apart with `leak` (contract 2), so cudarc never frees it.
        Ok(DeviceMemory::Cuda(unsafe { s.upgrade_device_ptr::<T>(address, len) }))
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
                let _names = crate::backend::sim::naming(
                    "memory",
                    crate::backend::sim::OpText::Static("free"),
                    None,
                    Default::default(),
                );
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
