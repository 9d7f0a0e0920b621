//! `LaunchScope`: what a preflighted launch's work is enqueued on.

use super::Reserved;
use super::Use;
use crate::backend::RawStream;
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::track::Access;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a launch's work is enqueued on between preflight and commit: the stream, fenced.
/// Borrowed from a [`Preflighted`](super::Preflighted) launch (or from
/// [`LaunchRecorder::launch`](super::LaunchRecorder::launch)), so it cannot outlive the commit.
///
/// ```
/// use cusched::{Device, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.new_stream()?;
/// let x = device.alloc_zeros::<f32>(s, 4)?;
/// let xm = x.sim_data()?;
/// let mut rec = LaunchRecorder::new_strict(s).named("ones");
/// rec.write(&x)?;
/// rec.launch(&device, |scope| {
///     assert_eq!(scope.stream(), s);
///     // On CUDA: `unsafe { scope.cuda_stream() }?` and a raw launch on it. On the simulator,
///     // a host closure stands for the kernel.
///     scope.sim_kernel(move || xm.lock().fill(1.0))
/// })?;
/// assert_eq!(x.download(s)?, vec![1.0; 4]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct LaunchScope<'a> {
    launch: &'a Reserved,
    uses: &'a [Use],
}

impl std::fmt::Debug for LaunchScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaunchScope({})", self.launch.stream)
    }
}

impl<'a> LaunchScope<'a> {
    pub(super) fn new(launch: &'a Reserved, uses: &'a [Use]) -> Self {
        LaunchScope { launch, uses }
    }

    /// The launch's stream.
    pub fn stream(&self) -> StreamId {
        self.launch.stream
    }

    /// The uses declared, as the simulator's checker takes them.
    fn checker_uses(&self) -> SmallVec<[(u64, Access); 4]> {
        self.uses.iter().map(|u| (u.track().id.0, u.access)).collect()
    }

    /// The cudarc stream to enqueue the launch's work on (CUDA devices).
    ///
    /// # Safety
    ///
    /// cusched turns cudarc's own event tracking off on the device's context: it orders work
    /// itself, through the recorder, and cudarc's safe API relies on that tracking to order
    /// memory used from several streams. So:
    /// 1. The work enqueued on the stream touches memory cusched owns only as the recorder
    ///    declared it (a buffer declared read is not written).
    /// 2. It is enqueued before the launch's closure returns: the commit's event covers only
    ///    work enqueued by then.
    /// 3. cudarc memory made from the stream (or its context) is ordered by the caller when used
    ///    from another stream, and freed only after the work that uses it.
    ///
    /// Calling it needs `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// fn stream(scope: &cusched::LaunchScope<'_>) {
    ///     let _ = scope.cuda_stream();
    /// }
    /// ```
    pub unsafe fn cuda_stream(&self) -> Result<&'a Arc<cudarc::driver::CudaStream>> {
        self.stream_handle()
    }

    /// The cudarc stream, for crate code.
    fn stream_handle(&self) -> Result<&'a Arc<cudarc::driver::CudaStream>> {
        match &*self.launch.raw {
            RawStream::Cuda(s) => Ok(s),
            RawStream::Sim(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::cuda_stream", needed: "cuda", actual: "sim" })
            }
        }
    }

    /// The cudarc stream with its context made current on this thread, for crate code that
    /// enqueues only on it until the commit: the commit then records without binding again.
    pub(crate) fn bound_cuda_stream(&self) -> Result<&'a Arc<cudarc::driver::CudaStream>> {
        let stream = self.stream_handle()?;
        crate::backend::cuda::bind(stream.context())?;
        // The context stays current on this thread until the commit.
        self.launch.bound.store(true, Ordering::Relaxed);
        Ok(stream)
    }

    /// Enqueues a host closure as the launch's kernel (simulated devices). The hazard checker
    /// sees it use exactly the buffers the recorder declared.
    pub fn sim_kernel(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        match &*self.launch.raw {
            RawStream::Sim(s) => {
                s.run(self.checker_uses(), Box::new(f));
                Ok(())
            }
            RawStream::Cuda(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::sim_kernel", needed: "sim", actual: "cuda" })
            }
        }
    }

    /// An owned handle that enqueues a simulated kernel on this launch's stream, under the
    /// launch's declared uses, for an op that enqueues further in than its scope reaches
    /// (launches nested in each other's enqueue closures, whose kernels are all enqueued by the
    /// innermost). It must be used before this launch's closure returns, as the scope itself.
    #[cfg(feature = "nccl")]
    pub(crate) fn sim_enqueuer(&self) -> Result<SimEnqueuer> {
        match &*self.launch.raw {
            RawStream::Sim(_) => Ok(SimEnqueuer { raw: self.launch.raw.clone(), uses: self.checker_uses() }),
            RawStream::Cuda(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::sim_enqueuer", needed: "sim", actual: "cuda" })
            }
        }
    }

    /// Enqueues a simulated kernel that faults like an out-of-bounds write on a GPU
    /// (`CUDA_ERROR_ILLEGAL_ADDRESS`): the simulated context is poisoned, no later kernel in it
    /// runs, and its events report the error, so that recovery can be exercised without a GPU.
    pub fn sim_fault(&self) -> Result<()> {
        match &*self.launch.raw {
            RawStream::Sim(s) => {
                s.fault();
                Ok(())
            }
            RawStream::Cuda(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::sim_fault", needed: "sim", actual: "cuda" })
            }
        }
    }
}

/// Backend memory operations enqueue on a launch's stream and show the checker its uses.
impl crate::backend::memory::Enqueue for LaunchScope<'_> {
    fn raw_stream(&self) -> &RawStream {
        &self.launch.raw
    }

    fn declared_uses(&self) -> crate::backend::memory::SimUses {
        self.checker_uses()
    }
}

/// A launch's simulated stream and declared uses, owned: see [`LaunchScope::sim_enqueuer`].
#[cfg(feature = "nccl")]
pub(crate) struct SimEnqueuer {
    raw: Arc<RawStream>,
    uses: SmallVec<[(u64, Access); 4]>,
}

#[cfg(feature = "nccl")]
impl SimEnqueuer {
    /// Adds the uses of `other`, a launch on the same stream, so that one kernel does the work
    /// of both (both launches are preflighted, and commit after it).
    pub(crate) fn merge(&mut self, other: SimEnqueuer) {
        for (id, access) in other.uses {
            match self.uses.iter_mut().find(|(i, _)| *i == id) {
                Some(u) => u.1 = u.1.merge(access),
                None => self.uses.push((id, access)),
            }
        }
    }

    /// Enqueues `f` as the launch's kernel, as [`LaunchScope::sim_kernel`] does.
    pub(crate) fn run(self, f: impl FnOnce() + Send + 'static) {
        if let RawStream::Sim(s) = &*self.raw {
            s.run(self.uses, Box::new(f));
        }
    }
}
