//! Device buffers: [`GpuRef`], their allocation, adoption and fenced free.

use super::{bytes_of, Element};
use crate::backend::memory::DeviceMemory;
use crate::backend::sim_mem::SimMem;
use crate::device::BufferTrack;
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::recorder::{LaunchRecorder, Resource, ResourceKind, ResourceRef, ResourceSealed, Tracked};
use crate::trace::OpLabel;
use crate::track::{BufferKind, FenceError};
use cudarc::driver::CudaSlice;
use std::fmt;
use std::sync::Arc;

pub(super) struct BufferInner<T: Element> {
    pub(super) track: BufferTrack,
    len: usize,
    /// Index of the stream the memory was allocated on, and is freed on.
    home: u32,
    memory: Option<DeviceMemory<T>>,
    /// For memory a module owns (its globals): what keeps the module loaded while the buffer
    /// exists, told the buffer's last uses when it drops. The memory is then never freed here.
    owner: Option<Arc<dyn ModuleOwner>>,
}

/// The owner of memory a [`GpuRef`] covers without owning it (a loaded module's global).
/// Held by the buffer, so the owner (and its memory) outlives every handle.
pub(crate) trait ModuleOwner: Send + Sync {
    /// The buffer's last handle dropped, with `uses` still outstanding: a later buffer over the
    /// same memory orders its first use after them (see [`Device::module_global`]).
    fn released(&self, uses: Vec<crate::track::EventRef>);
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
    pub(super) inner: Arc<BufferInner<T>>,
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
    #[inline]
    fn resource(&self) -> ResourceRef {
        if let Some(sub) = crate::recorder::substitute(self.id()) {
            return ResourceRef(ResourceKind::Tracked(sub.tracked));
        }
        ResourceRef(ResourceKind::Tracked(self.inner.clone()))
    }
}
impl<T: Element> Resource for GpuRef<T> {}

/// A handle that does not keep its buffer alive: how a module finds the live buffer over one
/// of its globals without keeping it (the buffer keeps the module).
#[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
pub(crate) struct WeakGpuRef<T: Element>(std::sync::Weak<BufferInner<T>>);

#[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
impl<T: Element> WeakGpuRef<T> {
    /// The buffer, while a handle to it exists.
    pub(crate) fn upgrade(&self) -> Option<GpuRef<T>> {
        self.0.upgrade().map(|inner| GpuRef { inner })
    }
}

/// How a new buffer's contents start.
pub(super) enum Init<'a, T> {
    Uninit,
    Zero,
    Copy(&'a [T]),
}

impl Device {
    /// Allocates `len` elements on `stream` without initialising them (their values are
    /// unspecified, but every bit pattern is a valid `T`). The allocation counts as a write on
    /// `stream`, so a first use on another stream waits for it.
    ///
    /// On a GPU the memory behind the buffer is a whole number of 16-byte granules: library
    /// kernels that read a buffer's last partial word or vector whole stay inside it. With
    /// `CUSCHED_EXACT_ALLOCATIONS=1` in the environment (read once per process), allocations
    /// are exactly their bytes instead, so that compute-sanitizer reports any access past a
    /// buffer's end (and those whole-word reads with them).
    pub fn alloc<T: Element>(&self, stream: StreamId, len: usize) -> Result<GpuRef<T>> {
        self.new_buffer(stream, len, Init::Uninit, false)
    }

    /// Allocates `len` zeroed elements on `stream`.
    pub fn alloc_zeros<T: Element>(&self, stream: StreamId, len: usize) -> Result<GpuRef<T>> {
        self.new_buffer(stream, len, Init::Zero, false)
    }

    /// Allocates `len` uninitialised elements on `stream` as scratch for the crate's own ops
    /// (see `BufferTrack::scratch`).
    // The libraries with a workspace take scratch, not all (cuBLAS, cuRAND): with one library
    // feature alone it may be unused, and no list of libraries is kept here.
    #[allow(dead_code)]
    pub(crate) fn alloc_scratch<T: Element>(&self, stream: StreamId, len: usize) -> Result<GpuRef<T>> {
        self.new_buffer(stream, len, Init::Uninit, true)
    }

    /// Makes a buffer of `len` elements on `stream`, filled as `init` says; `scratch` when only
    /// the crate's own ops will see it.
    pub(super) fn new_buffer<T: Element>(
        &self,
        stream: StreamId,
        len: usize,
        init: Init<'_, T>,
        scratch: bool,
    ) -> Result<GpuRef<T>> {
        let slot = self.shared.stream(stream)?;
        let bytes = bytes_of::<T>(len)?;
        if slot.recording().is_some() {
            // A stream a graph recording holds: the allocation and its first write happen now,
            // not in the graph, and never inside an op's capture.
            return match slot.outside_capture(|| self.make_buffer(stream, len, bytes, init, scratch, true)) {
                Some(made) => made,
                None => Err(crate::recorder::abandon_recording(
                    slot,
                    Error::Recording {
                        what: format!("an allocation on {stream} while an op captures there"),
                        hint: "allocate before the op (or before the recording); an op cannot allocate while it is recorded",
                    },
                )),
            };
        }
        self.make_buffer(stream, len, bytes, init, scratch, false)
    }

    /// [`new_buffer`](Self::new_buffer) once checked: `unrecorded` makes the first write run
    /// now on a stream a graph recording holds.
    fn make_buffer<T: Element>(
        &self,
        stream: StreamId,
        len: usize,
        bytes: usize,
        init: Init<'_, T>,
        scratch: bool,
        unrecorded: bool,
    ) -> Result<GpuRef<T>> {
        let slot = self.shared.stream(stream)?;
        let (raw, epoch) = slot.raw_and_epoch();
        // SAFETY: 1. `Element` types are valid for every bit pattern, so unset memory is never
        // an invalid `T`; 2. the write recorded below orders the allocation before any use on
        // another stream.
        let memory = unsafe { DeviceMemory::<T>::alloc(&raw, len, bytes) };
        // A sticky fault can surface first at an allocation: classify it like any other.
        let memory = self.shared.check(memory, epoch)?;
        let buf = GpuRef::from_memory(&self.shared, memory, len, stream.index, epoch, scratch);
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "alloc"));
        if unrecorded {
            rec = rec.unrecorded();
        }
        rec.write(&buf)?;
        let target = buf.clone();
        let (source_in_flight, ev) = rec
            .launch_event(self, move |scope| match init {
                Init::Uninit => target.memory().announce(scope).map(|()| false),
                // SAFETY: 1. all-zero bytes are a valid `Element`; 2. the recorder declared the
                // write and fenced it; the free waits for it.
                Init::Zero => unsafe { target.memory().zero(scope) }.map(|()| false),
                Init::Copy(data) => target.enqueue_from_slice(scope, data),
            })?
            .without_completion(self);
        if source_in_flight {
            super::copies::finish_copy(self, ev)?;
        }
        Ok(buf)
    }

    /// Takes a slice allocated elsewhere through cudarc and tracks it from now on. Work already
    /// queued on the slice's own stream is waited for once; later frees happen on `stream`.
    pub fn adopt<T: Element>(&self, stream: StreamId, slice: CudaSlice<T>) -> Result<GpuRef<T>> {
        let slot = self.shared.stream(stream)?;
        let (raw, epoch) = slot.raw_and_epoch();
        let memory = DeviceMemory::adopt(&raw, slice, |ordinal| Error::ForeignDevice {
            what: "the adopted slice".into(),
            expected: self.shared.label(),
            found: format!("CUDA context of ordinal {ordinal}"),
        })?;
        let len = memory.cuda_slice().map_or(0, CudaSlice::len);
        let buf = GpuRef::from_memory(&self.shared, memory, len, stream.index, epoch, false);
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "adopt"));
        rec.write(&buf)?;
        rec.launch(self, |_| Ok(()))?;
        Ok(buf)
    }
}

impl Device {
    /// A tracked buffer over `len` elements of memory `owner` owns (a module's global, of
    /// context epoch `epoch`), which cusched never frees. The memory exists and holds its
    /// contents already (the module's load was synchronous), so the buffer has no allocation
    /// write and no op is enqueued: a lookup inside a graph recording records nothing. An
    /// earlier buffer over the same memory may have left uses outstanding when it dropped
    /// (`prior`): this waits for them on the host, since the new buffer's tracker does not
    /// know them.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn module_global<T: Element>(
        &self,
        memory: DeviceMemory<T>,
        len: usize,
        epoch: u64,
        owner: Arc<dyn ModuleOwner>,
        prior: &[crate::track::EventRef],
    ) -> Result<GpuRef<T>> {
        for ev in prior {
            ev.synchronize()?;
        }
        let home = self.default_stream().index;
        let track = BufferTrack::new(BufferKind::ModuleGlobal, self.shared.clone(), epoch, false);
        memory.bind_buffer(track.id.0);
        Ok(GpuRef { inner: Arc::new(BufferInner { track, len, home, memory: Some(memory), owner: Some(owner) }) })
    }
}

impl<T: Element> GpuRef<T> {
    /// A handle that keeps the buffer alive, of any element type: an op queued past its call
    /// holds its buffers with it, with no allocation of its own.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn holder(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.inner.clone()
    }

    /// Wraps `memory` of context epoch `epoch`, allocated on the device's stream of index
    /// `home`, in a new tracked buffer; `scratch` when only the crate's own ops will see it.
    fn from_memory(
        device: &Arc<DeviceShared>,
        memory: DeviceMemory<T>,
        len: usize,
        home: u32,
        epoch: u64,
        scratch: bool,
    ) -> Self {
        let track = BufferTrack::new(BufferKind::Device, device.clone(), epoch, scratch);
        memory.bind_buffer(track.id.0);
        GpuRef { inner: Arc::new(BufferInner { track, len, home, memory: Some(memory), owner: None }) }
    }

    pub(crate) fn memory(&self) -> &DeviceMemory<T> {
        match &self.inner.memory {
            Some(m) => m,
            None => unreachable!("the memory is only taken in Drop"),
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

    /// Names the buffer: errors and the simulator's hazards show it beside the id, as
    /// `buffer #N "name"`. Every handle to the buffer shares the name; a later call renames it.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let x = device.alloc_zeros::<f32>(device.default_stream(), 4)?;
    /// x.label("weights");
    /// assert_eq!(x.name(), format!("buffer #{} \"weights\"", x.id()));
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn label(&self, name: &str) -> &Self {
        self.inner.track.set_label(name);
        self
    }

    /// [`label`](Self::label), by value: `device.upload(s, &w)?.with_label("weights")`.
    pub fn with_label(self, name: &str) -> Self {
        self.inner.track.set_label(name);
        self
    }

    /// The buffer as errors name it: `buffer #N`, with its [`label`](Self::label) if set.
    pub fn name(&self) -> String {
        self.inner.track.name()
    }

    /// A handle that does not keep the buffer alive.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn downgrade(&self) -> WeakGpuRef<T> {
        WeakGpuRef(Arc::downgrade(&self.inner))
    }

    /// Whether `other` is a handle to the same allocation.
    pub fn same_buffer(&self, other: &GpuRef<T>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The cudarc slice, for raw launches (validated: not stale).
    ///
    /// # Safety
    ///
    /// cudarc's own event tracking is off for the slice: cusched orders its uses through the
    /// recorder, and cudarc's safe methods on it (cloning it, reaching its stream) do not.
    /// 1. The slice is used only by work enqueued inside a [`LaunchRecorder`] launch that
    ///    declares this buffer with the access the work makes, on that launch's stream.
    /// 2. It is never cloned (cudarc's clone copies on the slice's own stream, unordered), and
    ///    its stream and context are not used outside such work.
    ///
    /// Calling it needs `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// fn slice(buf: &cusched::GpuRef<f32>) {
    ///     let _ = buf.cuda_slice();
    /// }
    /// ```
    pub unsafe fn cuda_slice(&self) -> Result<&CudaSlice<T>> {
        self.slice()
    }

    /// The cudarc slice, validated, for crate code.
    fn slice(&self) -> Result<&CudaSlice<T>> {
        self.inner.track.check_fresh()?;
        self.memory().cuda_slice().ok_or(Error::WrongBackend {
            what: "GpuRef::cuda_slice",
            needed: "cuda",
            actual: "sim",
        })
    }

    /// The raw device address, for foreign calls (TensorRT and the like), validated first.
    /// The caller declares the call's use on a recorder. While a graph is recorded again for a
    /// rebinding ([`GraphExec::rebind`](crate::GraphExec::rebind)), a rebound buffer gives the
    /// address of the buffer that stands for it.
    pub fn raw_device_ptr(&self) -> Result<u64> {
        if let Some(sub) = self.rebound() {
            return sub.slice().map(crate::backend::cuda::memory::device_address);
        }
        self.slice().map(crate::backend::cuda::memory::device_address)
    }

    /// The buffer that stands for this one while a graph is recorded again for a rebinding.
    #[inline]
    pub(crate) fn rebound(&self) -> Option<GpuRef<T>> {
        let sub = crate::recorder::substitute(self.id())?;
        sub.handle.downcast_ref::<GpuRef<T>>().cloned()
    }

    /// This buffer as the stand-in for buffer `recorded` in a graph's rebinding.
    pub(crate) fn substitute_for(&self, recorded: u64) -> crate::recorder::Substitute {
        crate::recorder::Substitute { recorded, handle: Arc::new(self.clone()), tracked: self.inner.clone() }
    }

    /// Fails with [`Error::Stale`] when the buffer is of an earlier device generation.
    pub(crate) fn check_fresh(&self) -> Result<()> {
        self.inner.track.check_fresh()
    }

    /// This buffer, or the one that stands for it while a graph is recorded again for a
    /// rebinding.
    #[inline]
    pub(crate) fn resolved(&self) -> std::borrow::Cow<'_, GpuRef<T>> {
        match self.rebound() {
            Some(sub) => std::borrow::Cow::Owned(sub),
            None => std::borrow::Cow::Borrowed(self),
        }
    }

    /// The contents of a simulated buffer, for simulated kernels (while a graph is recorded
    /// again for a rebinding, a rebound buffer's stand-in's).
    pub fn sim_data(&self) -> Result<SimMem<T>> {
        if let Some(sub) = self.rebound() {
            return sub.sim_data();
        }
        self.inner.track.check_fresh()?;
        self.memory().sim_mem().cloned().ok_or(Error::WrongBackend {
            what: "GpuRef::sim_data",
            needed: "sim",
            actual: "cuda",
        })
    }

    pub(super) fn device(&self) -> Device {
        Device::from_shared(&self.inner.track.device)
    }

    pub(super) fn check_len(&self, arg: &'static str, other: usize) -> Result<()> {
        if other != self.len() {
            return Err(Error::invalid(arg, format!("has {other} elements, the buffer has {}", self.len())));
        }
        Ok(())
    }
}

impl<T: Element> Drop for BufferInner<T> {
    fn drop(&mut self) {
        let Some(memory) = self.memory.take() else { return };
        if let Some(owner) = self.owner.take() {
            // Module memory: the module frees it when it unloads, after these uses (the owner
            // keeps it loaded until then).
            memory.release_unowned();
            owner.released(self.track.all_uses().into_vec());
            return;
        }
        let what = super::LogName(&self.track);
        let device = &self.track.device;
        if self.track.epoch != device.epoch() {
            return memory.free_in_old_context(&what);
        }
        let Some(slot) = device.slot_by_index(self.home) else { return };
        // Free on the home stream after every outstanding use; the host never blocks. Never
        // inside a graph recording's capture on that stream (it would become a node of the
        // graph): then it runs once the capture ends.
        let (epoch, id) = (self.track.epoch, self.track.id.0);
        let uses = std::cell::Cell::new(self.track.all_uses());
        let memory = std::cell::Cell::new(Some(memory));
        slot.free_outside_capture(
            |slot| {
                if let Some(m) = memory.take() {
                    free_after(slot, m, &uses.take(), epoch, id, &what);
                }
            },
            || {
                let (m, uses, name) = (memory.take(), uses.take(), what.to_string());
                Box::new(move |slot| {
                    if let Some(m) = m {
                        free_after(slot, m, &uses, epoch, id, &name);
                    }
                })
            },
        );
    }
}

/// A buffer's free on its home stream `slot`, after its outstanding `uses`.
fn free_after<T: Element>(
    slot: &crate::track::StreamSlot,
    memory: DeviceMemory<T>,
    uses: &[crate::track::EventRef],
    epoch: u64,
    id: u64,
    name: &dyn fmt::Display,
) {
    let raw = match slot.fence(uses) {
        Ok((raw, now)) if now == epoch => raw,
        // The device rebuilt its context since the check above; nothing was queued.
        Ok(_) | Err(FenceError::OtherContext { .. }) => return memory.free_in_old_context(name),
        Err(FenceError::Failed { error: e, .. }) => {
            // Freeing now could hand the memory to a new owner while a kernel still uses it;
            // leaking it is the safe failure.
            log::error!("cusched: could not fence the free of {name}: {e}; leaking it");
            std::mem::forget(memory);
            return;
        }
    };
    memory.free_on(&raw, id, name);
}
