//! CUDA through cudarc's `result` layer: the one place in the crate that calls the driver.
//!
//! | module      | driver calls                                                          |
//! |-------------|-----------------------------------------------------------------------|
//! | this file   | `cuInit`, context retain/create, `cuCtxGetCurrent`/`SetCurrent`, attributes |
//! | [`stream`]  | streams and events: create, record, wait, query, synchronize, elapsed |
//! | [`memory`]  | allocations, frees, memsets, copies, pinned host memory, pointer attributes |
//! | [`module`]  | module load/unload, function lookup, parameter info                   |
//! | [`launch`]  | `cuLaunchKernel`                                                      |
//! | [`graph`]   | graphs: capture into a graph, instantiate, launch, update in place    |
//! | [`peer`]    | peer access (`cuCtxEnablePeerAccess`, `cuMemPoolSetAccess`), isolated contexts |
//!
//! Every wrapper binds the context it works in (or says that its caller must), returns
//! [`Result`] with the call named ([`Error::Driver`]), and every `unsafe fn` states its
//! contract under `# Safety`. Raw statuses become errors in one place, [`status`].
//!
//! cudarc's own event tracking is disabled on every context this crate opens: the tracker owns
//! ordering, and cudarc's single read event per slice cannot express "wait for every reader".

pub(crate) mod captures;
pub(crate) mod graph;
#[cfg(any(feature = "curand", feature = "nvrtc"))]
pub(crate) mod launch;
#[cfg(feature = "nvrtc")]
pub(crate) mod launch_ex;
pub(crate) mod memory;
#[cfg(any(feature = "curand", feature = "nvrtc"))]
pub(crate) mod module;
pub(crate) mod peer;
pub(crate) mod stream;

pub(crate) use stream::{
    elapsed, new_event, new_stream, new_timing_event, query, record, record_current, stream_synchronize, synchronize,
    wait, wait_current,
};

use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::sync::Arc;

/// A raw stream handle, as library calls that take a stream (`cublasSetStream`, a launch) want it.
pub(crate) type CuStream = sys::CUstream;

/// The status a simulated fault reports, as the driver reports an out-of-bounds access.
pub(crate) const ILLEGAL_ADDRESS: DriverError = DriverError(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);

/// The status of work that went to a context since destroyed (a rebuild replaced it).
pub(crate) const CONTEXT_IS_DESTROYED: DriverError = DriverError(sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);

/// A status unit tests inject into backend calls.
#[cfg(test)]
pub(crate) const INVALID_HANDLE: DriverError = DriverError(sys::CUresult::CUDA_ERROR_INVALID_HANDLE);

/// The one conversion of a raw driver status: `Ok` for `CUDA_SUCCESS`, else
/// [`Error::Driver`] naming `call`.
pub(crate) fn status(call: &'static str, status: sys::CUresult) -> Result<()> {
    status.result().call(call)
}

/// Driver statuses after which a context is unusable: every later call in it fails.
pub(crate) fn is_sticky(status: DriverError) -> bool {
    use sys::CUresult as R;
    matches!(
        status.0,
        R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_ASSERT
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_ECC_UNCORRECTABLE
    )
}

/// Loads the driver and checks that GPU `ordinal` exists; `hint` says what to do when the
/// driver is missing.
fn probe(ordinal: usize, hint: &'static str) -> Result<()> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by name and drops the
    // handle; it has no preconditions. Probing first matters because cudarc panics when its
    // lazily loaded library is missing.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::LibraryUnavailable { library: "the CUDA driver (libcuda)", hint });
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(Error::NoDevice { ordinal, count: 0 }),
        Err(e) => return Err(Error::driver("cuInit", e)),
    }
    let count = result::device::get_count().call("cuDeviceGetCount")?.max(0) as usize;
    if ordinal >= count {
        return Err(Error::NoDevice { ordinal, count });
    }
    Ok(())
}

/// Loads the driver and opens the primary context of `ordinal` with event tracking disabled.
pub(crate) fn open(ordinal: usize) -> Result<Arc<CudaContext>> {
    probe(ordinal, "install the NVIDIA driver, or use Device::sim for the CPU simulation")?;
    let ctx = CudaContext::new(ordinal).call("cuDevicePrimaryCtxRetain")?;
    // SAFETY: the flag only affects slices allocated through this `CudaContext` object after the
    // call, and every such slice is owned by a `GpuRef` whose uses the tracker fences (a first
    // use on another stream waits for the allocation, frees wait for every outstanding use,
    // writes wait for every read). Other `CudaContext` objects in the process keep their own
    // flag.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// A new, non-primary context on `ordinal`, with event tracking disabled: what a device moves
/// to when its context is poisoned (the primary context stays poisoned until every handle in it
/// is released, so it cannot be reused).
pub(crate) fn open_fresh(ordinal: usize) -> Result<Arc<CudaContext>> {
    let ctx = CudaContext::new_non_primary(ordinal, 0).call("cuCtxCreate")?;
    // SAFETY: as in `open`: every slice allocated through this context object is tracked.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// The ordinal of the GPU whose context is current on this thread; `None` where no context is
/// current (or the driver cannot say).
pub(crate) fn current_ordinal() -> Option<usize> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer; the call only reads this thread's current context.
    if unsafe { sys::cuCtxGetDevice(&mut dev) } != sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    let count = result::device::get_count().ok()?;
    (0..count).find(|&i| result::device::get(i).ok() == Some(dev)).and_then(|i| usize::try_from(i).ok())
}

/// Makes `ctx` current on the calling thread if it is not already.
pub(crate) fn bind(ctx: &CudaContext) -> Result<()> {
    if result::ctx::get_current().call("cuCtxGetCurrent")? != Some(ctx.cu_ctx()) {
        // SAFETY: `ctx.cu_ctx()` is a live context: `ctx` holds a retain on it.
        unsafe { result::ctx::set_current(ctx.cu_ctx()) }.call("cuCtxSetCurrent")?;
    }
    Ok(())
}

/// Drops `object` (a cudarc value or a library handle whose `Drop` calls into `ctx`) with `ctx`
/// bound, the one place every destroy goes through: cudarc's own `Drop`s do not all bind (a
/// `CudaSlice` frees on whatever context is current), and library destroys never do. A panic
/// in the `Drop` is caught and logged. Errors cudarc saved in the context during the drop are
/// drained here and logged with `what`, instead of surfacing later on an unrelated call. If
/// the context cannot be bound, the object is leaked: calling into it could only fail.
pub(crate) fn drop_bound<T>(ctx: &CudaContext, what: &dyn std::fmt::Display, object: T) {
    if let Err(e) = bind(ctx) {
        log::error!("cusched: {what} is leaked: its context could not be bound ({e})");
        std::mem::forget(object);
        return;
    }
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(object))).is_err() {
        log::error!("cusched: destroying {what} panicked");
    }
    drain_saved_errors(ctx, what);
}

/// Logs (and clears) the error cudarc saved in `ctx` from a `Drop`, naming what was dropped.
pub(crate) fn drain_saved_errors(ctx: &CudaContext, what: &dyn std::fmt::Display) {
    if let Err(e) = ctx.check_err() {
        log::error!("cusched: destroying {what} failed: {:?} (reported by the driver during the destroy)", e.0);
    }
}

/// The compute capability (major, minor) of the context's device.
pub(crate) fn arch(ctx: &CudaContext) -> Result<(i32, i32)> {
    ctx.compute_capability().call("cuDeviceGetAttribute(COMPUTE_CAPABILITY)")
}
