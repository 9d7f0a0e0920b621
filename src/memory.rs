//! Device buffers (`GpuRef<T>`), pinned host buffers (`HostBuffer<T>`) and the copies between
//! them. Every allocation, copy and free goes through the tracker like a kernel does.

use crate::backend::{cuda, RawStream};
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{DriverResultExt, Error, Result};
use crate::recorder::{LaunchRecorder, LaunchScope, Resource, ResourceKind, ResourceRef, ResourceSealed, Tracked};
use crate::trace::OpLabel;
use crate::track::{Access, BufferTrack};
use cudarc::driver::{result, CudaSlice, DeviceRepr, ValidAsZeroBits};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

mod sealed {
    pub trait Sealed {}
}

/// Element types of buffers: plain numeric values, valid for every bit pattern, so that
/// uninitialised device memory and raw copies are sound to read.
pub trait Element:
    DeviceRepr + ValidAsZeroBits + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
}

macro_rules! elements {
    ($($t:ty),*) => {$( impl sealed::Sealed for $t {} impl Element for $t {} )*};
}
elements!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);
#[cfg(feature = "cublas")]
elements!(half::f16, half::bf16);
elements!(Complex<f32>, Complex<f64>);

/// A complex number laid out as CUDA's `cuComplex` / `cuDoubleComplex` (real part first).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex<T> {
    /// Real part.
    pub re: T,
    /// Imaginary part.
    pub im: T,
}

impl<T> Complex<T> {
    /// `re + i im`.
    pub const fn new(re: T, im: T) -> Self {
        Complex { re, im }
    }
}

// SAFETY: `Complex<f32>` and `Complex<f64>` are `repr(C)` pairs of floats with no padding, the
// layout of `cuComplex` / `cuDoubleComplex`; copying their bytes to the device is sound.
unsafe impl DeviceRepr for Complex<f32> {}
// SAFETY: as above.
unsafe impl DeviceRepr for Complex<f64> {}
// SAFETY: all-zero bits are `0.0 + 0.0i`, and every bit pattern of two floats is valid.
unsafe impl ValidAsZeroBits for Complex<f32> {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for Complex<f64> {}

/// Host-side contents of a simulated buffer, shared with the simulated kernels that use it.
///
/// Accesses from inside a simulated kernel are reported to the hazard checker, which flags
/// any the kernel's recorder did not declare ([`crate::HazardKind::Undeclared`]): use
/// [`read`](Self::read) where the kernel only reads, [`lock`](Self::lock) where it writes.
pub struct SimMem<T>(Arc<SimInner<T>>);

struct SimInner<T> {
    data: Mutex<Vec<T>>,
    /// The id of the tracked buffer this memory belongs to, once it has one; scratch memory
    /// that no recorder tracks has none, and its accesses are not checked.
    buffer: OnceLock<u64>,
}

impl<T> Clone for SimMem<T> {
    fn clone(&self) -> Self {
        SimMem(self.0.clone())
    }
}

impl<T> fmt::Debug for SimMem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.buffer.get() {
            Some(id) => write!(f, "SimMem(buffer #{id})"),
            None => f.write_str("SimMem"),
        }
    }
}

impl<T> SimMem<T> {
    fn new(v: Vec<T>) -> Self {
        SimMem(Arc::new(SimInner { data: Mutex::new(v), buffer: OnceLock::new() }))
    }

    /// `len` copies of `T::default()` (or `init`), failing with `OutOfMemory` instead of
    /// aborting when the host cannot hold them.
    fn try_new(len: usize, bytes: usize, init: Option<&[T]>) -> Result<Self>
    where
        T: Clone + Default,
    {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory { requested: bytes, free: 0 })?;
        match init {
            Some(data) => v.extend_from_slice(data),
            None => v.resize(len, T::default()),
        }
        Ok(SimMem::new(v))
    }

    fn bind(&self, buffer: u64) {
        // Bound once, right after the buffer's tracking is made.
        let _ = self.0.buffer.set(buffer);
    }

    fn report(&self, access: Access) {
        if let Some(&id) = self.0.buffer.get() {
            crate::backend::sim::kernel_access(id, access);
        }
    }

    /// Locks the contents for writing. Call it inside a simulated kernel whose recorder
    /// declared a write (or read-write) of the buffer, where the recorder's fences order it
    /// against other uses; the checker reports any other kernel access.
    pub fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.report(Access::Write);
        crate::sync::lock(&self.0.data)
    }

    /// Locks the contents for reading. Call it inside a simulated kernel whose recorder
    /// declared any use of the buffer.
    pub fn read(&self) -> SimRead<'_, T> {
        self.report(Access::Read);
        SimRead(crate::sync::lock(&self.0.data))
    }
}

/// Read access to a [`SimMem`]'s contents, from [`SimMem::read`].
pub struct SimRead<'a, T>(MutexGuard<'a, Vec<T>>);

impl<T> Deref for SimRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for SimRead<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

enum DevStorage<T: Element> {
    Cuda(CudaSlice<T>),
    Sim(SimMem<T>),
}

struct BufferInner<T: Element> {
    track: BufferTrack,
    len: usize,
    /// Index of the stream the memory was allocated on, and is freed on.
    home: u32,
    storage: Option<DevStorage<T>>,
}

impl<T: Element> Tracked for BufferInner<T> {
    fn track(&self) -> &BufferTrack {
        &self.track
    }
}

/// A tracked device buffer of `len` elements of `T`.
///
/// Clones share one allocation. Dropping the last handle frees the memory on the device
/// timeline after every outstanding use, without blocking the host.
pub struct GpuRef<T: Element> {
    inner: Arc<BufferInner<T>>,
}

impl<T: Element> Clone for GpuRef<T> {
    fn clone(&self) -> Self {
        GpuRef { inner: self.inner.clone() }
    }
}

impl<T: Element> fmt::Debug for GpuRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuRef<{}>({}, len {})", std::any::type_name::<T>(), self.inner.track.name(), self.inner.len)
    }
}

impl<T: Element> ResourceSealed for GpuRef<T> {
    fn resource(&self) -> ResourceRef {
        ResourceRef(ResourceKind::Tracked(self.inner.clone()))
    }
}
impl<T: Element> Resource for GpuRef<T> {}

fn bytes_of<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid("len", format!("{len} elements overflow the address space")))
}

enum Init<'a, T> {
    Uninit,
    Zero,
    Copy(&'a [T]),
}

impl Device {
    /// Allocates `len` elements on `stream` without initialising them (their values are
    /// unspecified, but every bit pattern is a valid `T`). The allocation counts as a write on
    /// `stream`, so a first use on another stream waits for it.
    pub fn alloc<T: Element>(&self, stream: StreamId, len: usize) -> Result<GpuRef<T>> {
        self.new_buffer(stream, len, Init::Uninit)
    }

    /// Allocates `len` zeroed elements on `stream`.
    pub fn alloc_zeros<T: Element>(&self, stream: StreamId, len: usize) -> Result<GpuRef<T>> {
        self.new_buffer(stream, len, Init::Zero)
    }

    /// Allocates a buffer on `stream` and copies `data` into it. `data` may be reused as
    /// soon as this returns.
    pub fn upload<T: Element>(&self, stream: StreamId, data: &[T]) -> Result<GpuRef<T>> {
        self.new_buffer(stream, data.len(), Init::Copy(data))
    }

    fn new_buffer<T: Element>(&self, stream: StreamId, len: usize, init: Init<'_, T>) -> Result<GpuRef<T>> {
        let slot = self.shared.stream(stream)?;
        let bytes = bytes_of::<T>(len)?;
        let (raw, epoch) = slot.current();
        let storage = match &*raw {
            RawStream::Cuda(s) => {
                // SAFETY: `Element` types are valid for every bit pattern, so unset memory is
                // never an invalid `T`; the write recorded below orders the allocation before
                // any use on another stream.
                let slice = unsafe { s.alloc::<T>(len) }
                    .map_err(|e| cuda::alloc_error(s.context(), "cuMemAllocAsync", bytes, e))?;
                DevStorage::Cuda(slice)
            }
            RawStream::Sim(_) => DevStorage::Sim(SimMem::try_new(len, bytes, None)?),
        };
        let buf = GpuRef::from_storage(&self.shared, storage, len, stream.index, epoch);
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "alloc"));
        rec.write(&buf)?;
        let target = buf.clone();
        rec.launch(self, move |scope| match init {
            Init::Uninit => sim_only(scope, || {}),
            Init::Zero => target.enqueue_zero(scope),
            Init::Copy(data) => target.enqueue_from_slice(scope, data),
        })?;
        Ok(buf)
    }

    /// Takes a slice allocated elsewhere through cudarc and tracks it from now on. Work already
    /// queued on the slice's own stream is waited for once; later frees happen on `stream`.
    pub fn adopt<T: Element>(&self, stream: StreamId, slice: CudaSlice<T>) -> Result<GpuRef<T>> {
        let slot = self.shared.stream(stream)?;
        let (raw, epoch) = slot.current();
        let RawStream::Cuda(ours) = &*raw else {
            return Err(Error::WrongBackend { what: "Device::adopt", needed: "cuda", actual: "sim" });
        };
        if slice.context().cu_ctx() != ours.context().cu_ctx() {
            return Err(Error::ForeignDevice {
                what: "the adopted slice".into(),
                expected: self.shared.label(),
                found: format!("CUDA context of ordinal {}", slice.ordinal()),
            });
        }
        let len = slice.len();
        let theirs = slice.stream().clone();
        let ptr = slice.leak();
        let done = theirs.record_event(None).call("cuEventRecord")?;
        cuda::wait(ours, &done)?;
        // SAFETY: `ptr` came from `leak`, so this is now its only owner; it holds `len`
        // elements of `T` allocated in the same context as `ours`; every bit pattern is a
        // valid `T`.
        let slice = unsafe { ours.upgrade_device_ptr::<T>(ptr, len) };
        let buf = GpuRef::from_storage(&self.shared, DevStorage::Cuda(slice), len, stream.index, epoch);
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "adopt"));
        rec.write(&buf)?;
        rec.launch(self, |_| Ok(()))?;
        Ok(buf)
    }

    /// Allocates `len` zeroed elements of pinned host memory, for asynchronous copies.
    pub fn alloc_host<T: Element>(&self, len: usize) -> Result<HostBuffer<T>> {
        HostBuffer::new(&self.shared, len, None)
    }

    /// Allocates pinned host memory holding a copy of `data`.
    pub fn host_from_slice<T: Element>(&self, data: &[T]) -> Result<HostBuffer<T>> {
        HostBuffer::new(&self.shared, data.len(), Some(data))
    }
}

/// A simulated copy kernel. The source is copied out before the destination is locked, so a
/// copy never holds two buffer locks at once.
fn sim_copy<T: Element>(from: &SimMem<T>, to: &SimMem<T>) -> impl FnOnce() + Send + 'static {
    let (from, to) = (from.clone(), to.clone());
    move || {
        let v = from.read().to_vec();
        to.lock().copy_from_slice(&v)
    }
}

/// Enqueues a no-op simulated kernel so the checker sees the use; nothing on CUDA.
fn sim_only(scope: &LaunchScope<'_>, f: impl FnOnce() + Send + 'static) -> Result<()> {
    match scope.cuda_stream() {
        Ok(_) => Ok(()),
        Err(_) => scope.sim_kernel(f),
    }
}

impl<T: Element> GpuRef<T> {
    fn from_storage(device: &Arc<DeviceShared>, storage: DevStorage<T>, len: usize, home: u32, epoch: u64) -> Self {
        let track = BufferTrack::new("buffer", device.clone(), epoch);
        if let DevStorage::Sim(m) = &storage {
            m.bind(track.id.0);
        }
        GpuRef { inner: Arc::new(BufferInner { track, len, home, storage: Some(storage) }) }
    }

    fn storage(&self) -> &DevStorage<T> {
        match &self.inner.storage {
            Some(s) => s,
            None => unreachable!("storage is only taken in Drop"),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The ordinal of the device the buffer lives on.
    pub fn device_id(&self) -> usize {
        self.inner.track.device.ordinal
    }

    /// The device generation the buffer was made in.
    pub fn generation(&self) -> u64 {
        self.inner.track.generation
    }

    /// Process-unique id, shown in errors as `buffer #N`.
    pub fn id(&self) -> u64 {
        self.inner.track.id.0
    }

    /// Whether `other` is a handle to the same allocation.
    pub fn same_buffer(&self, other: &GpuRef<T>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The cudarc slice, for raw launches (validated: not stale). Declare the launch's uses on
    /// a [`LaunchRecorder`]; cudarc's own tracking is off for it.
    pub fn cuda_slice(&self) -> Result<&CudaSlice<T>> {
        self.inner.track.check_fresh()?;
        match self.storage() {
            DevStorage::Cuda(s) => Ok(s),
            DevStorage::Sim(_) => {
                Err(Error::WrongBackend { what: "GpuRef::cuda_slice", needed: "cuda", actual: "sim" })
            }
        }
    }

    /// The raw device address, for foreign calls (TensorRT and the like), validated first.
    /// The caller declares the call's use on a recorder.
    pub fn raw_device_ptr(&self) -> Result<u64> {
        use cudarc::driver::DevicePtr;
        let slice = self.cuda_slice()?;
        let (ptr, _sync) = slice.device_ptr(slice.stream());
        Ok(ptr)
    }

    /// The contents of a simulated buffer, for simulated kernels.
    pub fn sim_data(&self) -> Result<SimMem<T>> {
        self.inner.track.check_fresh()?;
        match self.storage() {
            DevStorage::Sim(m) => Ok(m.clone()),
            DevStorage::Cuda(_) => Err(Error::WrongBackend { what: "GpuRef::sim_data", needed: "sim", actual: "cuda" }),
        }
    }

    fn device(&self) -> Device {
        Device::from_shared(&self.inner.track.device)
    }

    fn enqueue_zero(&self, scope: &LaunchScope<'_>) -> Result<()> {
        match self.storage() {
            DevStorage::Cuda(slice) => {
                let s = scope.cuda_stream()?;
                cuda::bind(s.context())?;
                let bytes = self.len() * std::mem::size_of::<T>();
                let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(slice, s);
                // SAFETY: `ptr` addresses `bytes` bytes owned by this buffer, which outlives the
                // memset (frees are fenced after every use); all-zero is a valid `T`.
                unsafe { result::memset_d8_async(ptr, 0, bytes, s.cu_stream()) }.call("cuMemsetD8Async")
            }
            DevStorage::Sim(m) => {
                let m = m.clone();
                scope.sim_kernel(move || m.lock().iter_mut().for_each(|x| *x = T::default()))
            }
        }
    }

    fn enqueue_from_slice(&self, scope: &LaunchScope<'_>, data: &[T]) -> Result<()> {
        match self.storage() {
            DevStorage::Cuda(slice) => {
                let s = scope.cuda_stream()?;
                cuda::bind(s.context())?;
                let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(slice, s);
                // SAFETY: `data.len() == self.len()` (checked by callers), so the copy stays in
                // bounds; `data` is pageable, and a pageable host-to-device copy has consumed
                // its source by the time the call returns, so `data` may be reused afterwards.
                unsafe { result::memcpy_htod_async(ptr, data, s.cu_stream()) }.call("cuMemcpyHtoDAsync")
            }
            DevStorage::Sim(m) => {
                let (m, data) = (m.clone(), data.to_vec());
                scope.sim_kernel(move || m.lock().copy_from_slice(&data))
            }
        }
    }

    fn check_len(&self, arg: &'static str, other: usize) -> Result<()> {
        if other != self.len() {
            return Err(Error::invalid(arg, format!("has {other} elements, the buffer has {}", self.len())));
        }
        Ok(())
    }

    /// Copies `data` into the buffer on `stream`; `data` may be reused when this returns.
    pub fn copy_from_slice(&self, stream: StreamId, data: &[T]) -> Result<()> {
        self.check_len("data", data.len())?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from_slice"));
        rec.write(self)?;
        rec.launch(&self.device(), |scope| self.enqueue_from_slice(scope, data))
    }

    /// Copies the buffer to a new `Vec`, blocking until the copy (and every write it must
    /// follow) has finished.
    pub fn download(&self, stream: StreamId) -> Result<Vec<T>> {
        let device = self.device();
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "download"));
        rec.read(self)?;
        match self.storage() {
            DevStorage::Cuda(slice) => {
                let mut out = vec![T::default(); self.len()];
                let (_, ev) = rec
                    .launch_event(&device, |scope| {
                        let s = scope.cuda_stream()?;
                        cuda::bind(s.context())?;
                        let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(slice, s);
                        // SAFETY: `out` has exactly `len` elements and is not touched until the
                        // event recorded after the copy has been synchronized below.
                        unsafe { result::memcpy_dtoh_async(&mut out, ptr, s.cu_stream()) }.call("cuMemcpyDtoHAsync")
                    })?
                    .untracked(&device);
                if let Some(ev) = ev {
                    ev.synchronize()?;
                }
                Ok(out)
            }
            DevStorage::Sim(m) => {
                let (src, slot) = (m.clone(), SimMem::new(Vec::new()));
                let out = slot.clone();
                let (_, ev) = rec
                    .launch_event(&device, |scope| scope.sim_kernel(move || *out.lock() = src.read().to_vec()))?
                    .untracked(&device);
                if let Some(ev) = ev {
                    ev.synchronize()?;
                }
                let v = std::mem::take(&mut *slot.lock());
                Ok(v)
            }
        }
    }

    /// Copies all of `src` into this buffer on `stream` (device to device).
    pub fn copy_from(&self, stream: StreamId, src: &GpuRef<T>) -> Result<()> {
        self.check_len("src", src.len())?;
        if self.same_buffer(src) {
            return Err(Error::invalid("src", "is the destination buffer itself"));
        }
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from"));
        rec.read(src)?.write(self)?;
        rec.launch(&self.device(), |scope| match (self.storage(), src.storage()) {
            (DevStorage::Cuda(dst), DevStorage::Cuda(from)) => {
                let s = scope.cuda_stream()?;
                cuda::bind(s.context())?;
                let (d, _a) = cudarc::driver::DevicePtr::device_ptr(dst, s);
                let (f, _b) = cudarc::driver::DevicePtr::device_ptr(from, s);
                let bytes = self.len() * std::mem::size_of::<T>();
                // SAFETY: both ranges are `bytes` long, owned by live buffers whose frees are
                // fenced after this copy, and distinct allocations (checked above).
                unsafe { result::memcpy_dtod_async(d, f, bytes, s.cu_stream()) }.call("cuMemcpyDtoDAsync")
            }
            (DevStorage::Sim(dst), DevStorage::Sim(from)) => scope.sim_kernel(sim_copy(from, dst)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        })
    }

    /// Copies pinned host memory into this buffer, asynchronously: `src` stays readable, and
    /// writing it through [`HostBuffer::write`] waits for this copy.
    pub fn copy_from_host(&self, stream: StreamId, src: &HostBuffer<T>) -> Result<()> {
        self.check_len("src", src.len())?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from_host"));
        rec.read(src)?.write(self)?;
        rec.launch(&self.device(), |scope| match (self.storage(), &src.inner.storage) {
            (DevStorage::Cuda(dst), HostStorage::Pinned(p, _)) => {
                let s = scope.cuda_stream()?;
                cuda::bind(s.context())?;
                let (d, _a) = cudarc::driver::DevicePtr::device_ptr(dst, s);
                // SAFETY: the pinned range holds `len` elements and stays allocated until every
                // tracked use (this copy included) has finished: HostBuffer's drop waits for them.
                let host = unsafe { std::slice::from_raw_parts(p.as_ptr(), src.len()) };
                // SAFETY: equal lengths (checked), live allocations, pinned source.
                unsafe { result::memcpy_htod_async(d, host, s.cu_stream()) }.call("cuMemcpyHtoDAsync")
            }
            (DevStorage::Sim(dst), HostStorage::Sim(from)) => scope.sim_kernel(sim_copy(from, dst)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        })
    }

    /// Copies this buffer into pinned host memory, asynchronously: reading `dst` through
    /// [`HostBuffer::read`] waits for the copy.
    pub fn copy_to_host(&self, stream: StreamId, dst: &mut HostBuffer<T>) -> Result<()> {
        self.check_len("dst", dst.len())?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_to_host"));
        rec.read(self)?.write(&*dst)?;
        rec.launch(&self.device(), |scope| match (self.storage(), &dst.inner.storage) {
            (DevStorage::Cuda(from), HostStorage::Pinned(p, _)) => {
                let s = scope.cuda_stream()?;
                cuda::bind(s.context())?;
                let (f, _a) = cudarc::driver::DevicePtr::device_ptr(from, s);
                // SAFETY: the pinned range holds `len` elements; no Rust reference to it exists
                // (`dst` is borrowed mutably here, and `read`/`write` wait for this copy before
                // handing one out); it stays allocated until the copy finishes.
                let host = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), dst.len()) };
                // SAFETY: equal lengths (checked), live allocations, pinned destination.
                unsafe { result::memcpy_dtoh_async(host, f, s.cu_stream()) }.call("cuMemcpyDtoHAsync")
            }
            (DevStorage::Sim(from), HostStorage::Sim(to)) => scope.sim_kernel(sim_copy(from, to)),
            _ => unreachable!("the recorder rejected buffers of another device"),
        })
    }
}

impl<T: Element> Drop for BufferInner<T> {
    fn drop(&mut self) {
        let Some(storage) = self.storage.take() else { return };
        let device = &self.track.device;
        if self.track.epoch != device.epoch() {
            // Memory of a poisoned context: no new work can reach it, and fencing its free on a
            // stream of the new context is impossible. cudarc's drop queues the free in the old
            // context, where it fails harmlessly; the context's teardown releases the memory.
            drop(storage);
            return;
        }
        let Some(slot) = device.slot_by_index(self.home) else { return };
        // Free on the home stream after every outstanding use; the host never blocks.
        let uses = self.track.all_uses();
        let raw = match slot.fence(&uses) {
            Ok((raw, _)) => raw,
            Err(e) => {
                // Freeing now could hand the memory to a new owner while a kernel still uses
                // it; leaking it is the safe failure.
                log::error!("cusched: could not fence the free of {}: {e}; leaking it", self.track.name());
                std::mem::forget(storage);
                return;
            }
        };
        match (storage, &*raw) {
            // cudarc's drop enqueues cuMemFreeAsync on the slice's stream, which is `slot`'s.
            (DevStorage::Cuda(slice), _) => drop(slice),
            (DevStorage::Sim(mem), RawStream::Sim(s)) => {
                s.run(smallvec::smallvec![(self.track.id.0, Access::Write)], Box::new(move || drop(mem)))
            }
            (DevStorage::Sim(_), RawStream::Cuda(_)) => {}
        }
    }
}

enum HostStorage<T> {
    /// Pinned memory and the context that allocated it: holding the context keeps the memory
    /// mapped even after the device moved to a new context.
    Pinned(NonNull<T>, Arc<cudarc::driver::CudaContext>),
    Sim(SimMem<T>),
}

struct HostInner<T> {
    track: BufferTrack,
    len: usize,
    storage: HostStorage<T>,
}

// SAFETY: the pinned pointer is owned exclusively by this struct (allocated in `new`, freed in
// `drop`); access through it is synchronized by the tracker's waits and by `HostBuffer`'s
// borrow rules, and `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for HostInner<T> {}
// SAFETY: as above; shared access only reads through `&[T]` after waiting for GPU writes.
unsafe impl<T: Send + Sync> Sync for HostInner<T> {}

impl<T: Element> Tracked for HostInner<T> {
    fn track(&self) -> &BufferTrack {
        &self.track
    }
}

/// Pinned (page-locked) host memory for asynchronous copies. Host access waits for the GPU
/// uses still pending: [`read`](Self::read) for writes, [`write`](Self::write) for all.
pub struct HostBuffer<T: Element> {
    inner: Arc<HostInner<T>>,
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

/// Read access to a [`HostBuffer`].
pub struct HostRead<'a, T>(HostGuard<'a, T>);
/// Write access to a [`HostBuffer`].
pub struct HostWrite<'a, T>(HostGuard<'a, T>);

impl<T: fmt::Debug> fmt::Debug for HostRead<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl<T: fmt::Debug> fmt::Debug for HostWrite<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

enum HostGuard<'a, T> {
    Pinned(&'a mut [T]),
    Sim(MutexGuard<'a, Vec<T>>),
}

impl<T> Deref for HostGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            HostGuard::Pinned(s) => s,
            HostGuard::Sim(g) => g,
        }
    }
}

impl<T> DerefMut for HostGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            HostGuard::Pinned(s) => s,
            HostGuard::Sim(g) => g,
        }
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

impl<T: Element> HostBuffer<T> {
    fn new(device: &Arc<DeviceShared>, len: usize, init: Option<&[T]>) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?;
        let backend = device.backend();
        let epoch = device.epoch();
        let storage = match &backend {
            crate::backend::BackendCtx::Cuda(ctx) => {
                let ptr = if bytes == 0 {
                    NonNull::dangling()
                } else {
                    cuda::bind(ctx)?;
                    // SAFETY: plain allocation call with a non-zero size; the context is bound.
                    let raw = unsafe { result::malloc_host(bytes, 0) }.call("cuMemHostAlloc")?;
                    let ptr = NonNull::new(raw.cast::<T>()).ok_or(Error::OutOfMemory { requested: bytes, free: 0 })?;
                    // SAFETY: `ptr` points to `bytes` fresh bytes no one else references; zero
                    // is a valid `T`, and `init` (if any) has exactly `len` elements.
                    unsafe {
                        match init {
                            Some(data) => std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), len),
                            None => std::ptr::write_bytes(ptr.as_ptr(), 0, len),
                        }
                    }
                    ptr
                };
                HostStorage::Pinned(ptr, ctx.clone())
            }
            crate::backend::BackendCtx::Sim(_) => HostStorage::Sim(SimMem::try_new(len, bytes, init)?),
        };
        let track = BufferTrack::new("host buffer", device.clone(), epoch);
        if let HostStorage::Sim(m) = &storage {
            m.bind(track.id.0);
        }
        Ok(HostBuffer { inner: Arc::new(HostInner { track, len, storage }) })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    fn guard(&self, access: Access) -> Result<HostGuard<'_, T>> {
        let t = &self.inner.track;
        if t.epoch != t.device.epoch() {
            // Pinned memory of a poisoned context: still mapped, but the copies that would have
            // filled it never ran.
            return Err(Error::Stale { what: t.name(), made: t.generation, current: t.device.generation() });
        }
        for ev in t.host_dependencies(access, t.device.config.preflight_timeout)? {
            ev.synchronize()?;
        }
        Ok(match &self.inner.storage {
            // SAFETY: the range is live and holds `len` initialised elements; the GPU uses that
            // conflict with this access have finished (synchronized above), and no new one can
            // start while the guard borrows the buffer (`read` borrows `&self`, which copies
            // into the buffer cannot take; `write` borrows `&mut self`).
            HostStorage::Pinned(p, _) => {
                HostGuard::Pinned(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.len()) })
            }
            // Host code, not a kernel: the checker does not see this access.
            HostStorage::Sim(m) => HostGuard::Sim(crate::sync::lock(&m.0.data)),
        })
    }

    /// Reads the contents, first waiting for pending GPU writes to this buffer.
    pub fn read(&self) -> Result<HostRead<'_, T>> {
        self.guard(Access::Read).map(HostRead)
    }

    /// Writes the contents, first waiting for every pending GPU use of this buffer.
    pub fn write(&mut self) -> Result<HostWrite<'_, T>> {
        self.guard(Access::Write).map(HostWrite)
    }
}

impl<T> Drop for HostInner<T> {
    fn drop(&mut self) {
        let HostStorage::Pinned(p, ctx) = &self.storage else { return };
        if self.len == 0 || std::mem::size_of::<T>() == 0 {
            return;
        }
        // Pinned memory is freed at once, so wait for the copies that still use it. (In a
        // poisoned context nothing runs any more, and its events only report the poison.)
        if self.track.epoch == self.track.device.epoch() {
            for ev in self.track.all_uses() {
                if let Err(e) = ev.synchronize() {
                    log::error!("cusched: waiting for the uses of {} failed: {e}; leaking it", self.track.name());
                    return;
                }
            }
        }
        {
            let p = *p;
            let freed = cuda::bind(ctx).and_then(|_| {
                // SAFETY: `p` came from `malloc_host` in `new` and every GPU use has finished.
                unsafe { result::free_host(p.as_ptr().cast()) }.call("cuMemFreeHost")
            });
            if let Err(e) = freed {
                log::error!("cusched: freeing {} failed: {e}", self.track.name());
            }
        }
    }
}
