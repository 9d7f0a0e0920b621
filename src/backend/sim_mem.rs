//! The simulated backend's buffer memory: a `Vec` behind a lock, shared with the simulated
//! kernels that use it, whose accesses from inside a kernel are reported to the checker.

use crate::access::Access;
use crate::error::{Error, Result};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Host-side contents of a simulated buffer, shared with the simulated kernels that use it.
///
/// Accesses from inside a simulated kernel are reported to the hazard checker, which flags
/// any the kernel's recorder did not declare ([`crate::HazardKind::Undeclared`]): use
/// [`read`](Self::read) where the kernel only reads, [`lock`](Self::lock) where it writes.
///
/// ```
/// use cusched::{Device, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let (x, y) = (device.upload(s, &[1u32, 2, 3])?, device.alloc_zeros::<u32>(s, 3)?);
/// // The simulated memory behind the buffers, moved into the simulated kernel.
/// let (xm, ym) = (x.sim_data()?, y.sim_data()?);
/// let mut rec = LaunchRecorder::new_strict(s).named("square");
/// rec.read(&x)?.write(&y)?;
/// rec.launch(&device, |scope| {
///     scope.sim_kernel(move || {
///         let x = xm.read(); // a declared read
///         for (o, v) in ym.lock().iter_mut().zip(x.iter()) {
///             *o = v * v; // a declared write
///         }
///     })
/// })?;
/// assert_eq!(y.download(s)?, vec![1, 4, 9]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct SimMem<T>(Arc<SimInner<T>>);

struct SimInner<T> {
    /// Shared with the memory of a later buffer over the same contents (a module's global
    /// looked up again: see [`SimMem::rebound`]).
    data: Arc<Mutex<Vec<T>>>,
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
    pub(crate) fn new(v: Vec<T>) -> Self {
        SimMem(Arc::new(SimInner { data: Arc::new(Mutex::new(v)), buffer: OnceLock::new() }))
    }

    /// `len` copies of `T::default()` (or `init`), failing with `OutOfMemory` instead of
    /// aborting when the host cannot hold them.
    pub(crate) fn try_new(len: usize, bytes: usize, init: Option<&[T]>) -> Result<Self>
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

    /// The same contents, unbound, for a new tracked buffer over them: the accesses through
    /// the result are checked against that buffer, those through `self` against this one's.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn rebound(&self) -> Self {
        SimMem(Arc::new(SimInner { data: self.0.data.clone(), buffer: OnceLock::new() }))
    }

    pub(crate) fn bind(&self, buffer: u64) {
        // Bound once, right after the buffer's tracking is made.
        let _ = self.0.buffer.set(buffer);
    }

    fn report(&self, access: Access) {
        if let Some(&id) = self.0.buffer.get() {
            super::sim::kernel_access(id, access);
        }
    }

    /// Locks the contents for writing. Call it inside a simulated kernel whose recorder
    /// declared a write (or read-write) of the buffer, where the recorder's fences order it
    /// against other uses; the checker reports any other kernel access.
    pub fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.report(Access::Write);
        crate::sync::lock_unranked(&self.0.data)
    }

    /// Locks the contents for reading. Call it inside a simulated kernel whose recorder
    /// declared any use of the buffer.
    pub fn read(&self) -> SimRead<'_, T> {
        self.report(Access::Read);
        SimRead(crate::sync::lock_unranked(&self.0.data))
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
