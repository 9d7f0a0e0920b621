//! Device buffers (`GpuRef<T>`), pinned host buffers (`HostBuffer<T>`) and the copies between
//! them. Every allocation, copy and free goes through the tracker like a kernel does.

use crate::backend::{cuda, RawStream};
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{DriverResultExt, Error, Result};
use crate::recorder::{LaunchRecorder, LaunchScope, Resource, ResourceKind, ResourceRef, ResourceSealed, Tracked};
use crate::trace::OpLabel;
use crate::track::{Access, BufferTrack, EventRef};
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

pub(crate) enum DevStorage<T: Element> {
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
///
/// ```
/// use cusched::{Device, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let (s1, s2) = (device.default_stream(), device.new_stream()?);
/// let a = device.upload(s1, &[1.5f32, 2.5])?; // a write on s1
/// let b = device.alloc_zeros::<f32>(s2, 2)?;
/// b.copy_from(s2, &a)?; // s2 waits for the upload on s1 first
/// assert_eq!(b.download(s1)?, [1.5, 2.5]); // and s1 for the copy on s2
/// drop(a); // freed after the copy that reads it, without blocking
/// # Ok::<(), cusched::Error>(())
/// ```
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
    ///
    /// From pageable memory (a `Vec`, say) the copy is queued and the call returns once the
    /// driver has staged `data`. From memory the driver copies asynchronously, pinned,
    /// registered or managed (a [`HostBuffer`] read guard, say), it waits for the copy to finish,
    /// and so for the work queued on `stream` before it; [`GpuRef::copy_from_host`] is the
    /// asynchronous path for pinned data.
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
                    .map_err(|e| cuda::alloc_error(s.context(), "cuMemAllocAsync", bytes, e));
                // A sticky fault can surface first at an allocation: classify it like any other.
                let slice = self.shared.check(slice, epoch)?;
                DevStorage::Cuda(slice)
            }
            RawStream::Sim(_) => DevStorage::Sim(SimMem::try_new(len, bytes, None)?),
        };
        let buf = GpuRef::from_storage(&self.shared, storage, len, stream.index, epoch);
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "alloc"));
        rec.write(&buf)?;
        let target = buf.clone();
        let (source_in_flight, ev) = rec
            .launch_event(self, move |scope| match init {
                Init::Uninit => sim_only(scope, || {}).map(|()| false),
                Init::Zero => target.enqueue_zero(scope).map(|()| false),
                Init::Copy(data) => target.enqueue_from_slice(scope, data),
            })?
            .untracked(self);
        if source_in_flight {
            finish_copy(self, ev)?;
        }
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
pub(crate) fn sim_copy<T: Element>(from: &SimMem<T>, to: &SimMem<T>) -> impl FnOnce() + Send + 'static {
    let (from, to) = (from.clone(), to.clone());
    move || {
        let v = from.read().to_vec();
        to.lock().copy_from_slice(&v)
    }
}

/// Blocks until a copy's commit event has passed, so that its host source may be reused.
fn finish_copy(device: &Device, ev: Option<EventRef>) -> Result<()> {
    match ev {
        Some(ev) => ev.synchronize().map_err(|e| device.shared.classify(e, ev.epoch())),
        None => Ok(()),
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

    pub(crate) fn storage(&self) -> &DevStorage<T> {
        match &self.inner.storage {
            Some(s) => s,
            None => unreachable!("storage is only taken in Drop"),
        }
    }

    pub(crate) fn track(&self) -> &BufferTrack {
        &self.inner.track
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

    /// Queues the copy of `data` into the buffer. Returns whether the copy still reads `data`
    /// after this returns (pinned, registered or managed memory): then the caller must wait for
    /// the launch's event before `data` may be reused.
    fn enqueue_from_slice(&self, scope: &LaunchScope<'_>, data: &[T]) -> Result<bool> {
        match self.storage() {
            DevStorage::Cuda(slice) => {
                let s = scope.cuda_stream()?;
                let in_flight =
                    cuda::is_driver_host_memory(s.context(), data.as_ptr().cast(), std::mem::size_of_val(data))?;
                cuda::bind(s.context())?;
                let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(slice, s);
                // SAFETY: 1. `data.len() == self.len()` (checked by callers), so the copy stays
                // in bounds of a buffer whose free is fenced after it; 2. `data` stays readable
                // for as long as the copy reads it: pageable memory is staged before the call
                // returns, and for driver memory (`in_flight`) the callers wait for the copy's
                // event before giving the borrow of `data` back.
                unsafe { result::memcpy_htod_async(ptr, data, s.cu_stream()) }.call("cuMemcpyHtoDAsync")?;
                Ok(in_flight)
            }
            DevStorage::Sim(m) => {
                let (m, data) = (m.clone(), data.to_vec());
                scope.sim_kernel(move || m.lock().copy_from_slice(&data)).map(|()| false)
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
    ///
    /// From pageable memory the call returns once the driver has staged `data`; from pinned,
    /// registered or managed memory it waits for the copy to finish (see [`Device::upload`]).
    pub fn copy_from_slice(&self, stream: StreamId, data: &[T]) -> Result<()> {
        self.check_len("data", data.len())?;
        let device = self.device();
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from_slice"));
        rec.write(self)?;
        let (source_in_flight, ev) =
            rec.launch_event(&device, |scope| self.enqueue_from_slice(scope, data))?.untracked(&device);
        if source_in_flight {
            finish_copy(&device, ev)?;
        }
        Ok(())
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
                    device.shared.wait_event(&ev)?;
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
                    device.shared.wait_event(&ev)?;
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
            return free_in_old_context(storage, &self.track);
        }
        let Some(slot) = device.slot_by_index(self.home) else { return };
        // Free on the home stream after every outstanding use; the host never blocks.
        let uses = self.track.all_uses();
        let raw = match slot.fence(&uses) {
            Ok((raw, epoch)) if epoch == self.track.epoch => raw,
            // The device rebuilt its context since the check above; nothing was queued.
            Ok(_) | Err(Error::Stale { .. }) => return free_in_old_context(storage, &self.track),
            Err(e) => {
                // Freeing now could hand the memory to a new owner while a kernel still uses
                // it; leaking it is the safe failure.
                log::error!("cusched: could not fence the free of {}: {e}; leaking it", self.track.name());
                std::mem::forget(storage);
                return;
            }
        };
        match (storage, &*raw) {
            // cudarc's drop enqueues cuMemFreeAsync on the slice's stream, which is `slot`'s,
            // but on whatever context is current: bind the slice's own.
            (DevStorage::Cuda(slice), _) => {
                let ctx = slice.context().clone();
                cuda::drop_bound(&ctx, &format_args!("{} #{}", self.track.kind, self.track.id.0), slice);
            }
            (DevStorage::Sim(mem), RawStream::Sim(s)) => {
                s.run(smallvec::smallvec![(self.track.id.0, Access::Write)], Box::new(move || drop(mem)))
            }
            (DevStorage::Sim(_), RawStream::Cuda(_)) => {}
        }
    }
}

/// Memory of a poisoned context: no new work can reach it, and fencing its free on a stream of
/// the new context is impossible. cudarc's drop queues the free in the old context (bound
/// here), where it fails harmlessly; the context's teardown releases the memory.
fn free_in_old_context<T: Element>(storage: DevStorage<T>, track: &BufferTrack) {
    match storage {
        DevStorage::Cuda(slice) => {
            let ctx = slice.context().clone();
            cuda::drop_bound(&ctx, &format_args!("{} #{}", track.kind, track.id.0), slice);
        }
        DevStorage::Sim(mem) => drop(mem),
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
pub struct HostRead<'a, T>(ReadView<'a, T>);
/// Write access to a [`HostBuffer`]: the only reference to its contents while it lives.
pub struct HostWrite<'a, T>(WriteView<'a, T>);

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

enum ReadView<'a, T> {
    Pinned(&'a [T]),
    /// A copy taken under the lock: holding the lock instead would make a second read guard
    /// (or a simulated copy out of the buffer) wait for the first guard to drop.
    Sim(Vec<T>),
}

enum WriteView<'a, T> {
    Pinned(&'a mut [T]),
    Sim(MutexGuard<'a, Vec<T>>),
}

impl<T> Deref for HostRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            ReadView::Pinned(s) => s,
            ReadView::Sim(v) => v,
        }
    }
}

impl<T> Deref for HostWrite<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.0 {
            WriteView::Pinned(s) => s,
            WriteView::Sim(g) => g,
        }
    }
}

impl<T> DerefMut for HostWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.0 {
            WriteView::Pinned(s) => s,
            WriteView::Sim(g) => g,
        }
    }
}

impl<T: Element> HostBuffer<T> {
    fn new(device: &Arc<DeviceShared>, len: usize, init: Option<&[T]>) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?;
        if let Some(poisoned) = device.poisoned() {
            return Err(poisoned);
        }
        let (backend, epoch) = device.backend_epoch();
        let storage = match &backend {
            crate::backend::BackendCtx::Cuda(ctx) => {
                let ptr = if bytes == 0 {
                    NonNull::dangling()
                } else {
                    device.check(cuda::bind(ctx), epoch)?;
                    // SAFETY: plain allocation call with a non-zero size; the context is bound.
                    let raw = unsafe { result::malloc_host(bytes, 0) }.call("cuMemHostAlloc");
                    let raw = device.check(raw, epoch)?;
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
        Ok(())
    }

    /// Reads the contents, first waiting for pending GPU writes to this buffer.
    ///
    /// Fails with [`Error::Stale`] once the device's generation has advanced past the buffer's.
    pub fn read(&self) -> Result<HostRead<'_, T>> {
        self.settle(Access::Read)?;
        Ok(HostRead(match &self.inner.storage {
            // SAFETY: 1. the range is live (freed only when `inner` drops) and holds `len`
            // initialised elements; 2. every tracked GPU write to it has finished (waited for
            // above); 3. no tracked write can start while the slice lives: the safe writers
            // (`copy_to_host`, `write`) take `&mut self`, which this `&self` borrow excludes,
            // and a GPU write declared on a recorder comes from a user launch, whose `unsafe`
            // contract forbids writing memory Rust holds a shared reference to; 4. the slice is
            // shared, so read guards on several threads never alias a `&mut`.
            HostStorage::Pinned(p, _) => {
                ReadView::Pinned(unsafe { std::slice::from_raw_parts(p.as_ptr(), self.len()) })
            }
            HostStorage::Sim(m) => ReadView::Sim(m.lock().clone()),
        }))
    }

    /// Writes the contents, first waiting for every pending GPU use of this buffer.
    ///
    /// Fails with [`Error::Stale`] once the device's generation has advanced past the buffer's.
    pub fn write(&mut self) -> Result<HostWrite<'_, T>> {
        self.settle(Access::Write)?;
        Ok(HostWrite(match &self.inner.storage {
            // SAFETY: 1. the range is live and holds `len` initialised elements; 2. every tracked
            // GPU use of it has finished (waited for above); 3. `&mut self` excludes every other
            // Rust reference and every safe op that would queue a new GPU use, for as long as
            // the slice lives.
            HostStorage::Pinned(p, _) => {
                WriteView::Pinned(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.len()) })
            }
            HostStorage::Sim(m) => WriteView::Sim(m.lock()),
        }))
    }
}

impl<T> Drop for HostInner<T> {
    fn drop(&mut self) {
        let HostStorage::Pinned(p, ctx) = &self.storage else { return };
        if self.len == 0 || std::mem::size_of::<T>() == 0 {
            return;
        }
        // The free must follow every copy that still uses the memory: the reaper waits for
        // them, so this thread never blocks. (In a poisoned context nothing runs any more, and
        // its events only report the poison: there is nothing to wait for.)
        let device = &self.track.device;
        let after = if self.track.epoch == device.epoch() { self.track.all_uses().into_vec() } else { Vec::new() };
        device.reaper.defer(crate::reaper::Retired {
            what: "pinned host memory",
            after,
            ctx: Some(ctx.clone()),
            object: Box::new(PinnedFree(p.cast::<u8>())),
        });
    }
}

/// A pinned allocation whose drop frees it; handed to the reaper, which binds its context.
struct PinnedFree(NonNull<u8>);

// SAFETY: the pointer is owned exclusively by this value (its `HostInner` is gone), and only
// its drop uses it.
unsafe impl Send for PinnedFree {}

impl Drop for PinnedFree {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `malloc_host` in `HostBuffer::new` and is freed once,
        // here; the reaper drops this only after every GPU use has finished, with the
        // allocating context bound.
        if let Err(e) = unsafe { result::free_host(self.0.as_ptr().cast()) } {
            log::error!("cusched: cuMemFreeHost of pinned host memory failed: {:?}", e.0);
        }
    }
}
