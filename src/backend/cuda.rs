//! CUDA through cudarc's `result` layer. cudarc's own event tracking is disabled on every
//! context this crate opens: the tracker owns ordering, and cudarc's single read event per
//! slice cannot express "wait for every reader".

use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, DriverError};
use std::sync::Arc;

/// Loads the driver and opens the primary context of `ordinal` with event tracking disabled.
pub(crate) fn open(ordinal: usize) -> Result<Arc<CudaContext>> {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by name and drops the
    // handle; it has no preconditions. Probing first matters because cudarc panics when its
    // lazily loaded library is missing.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::LibraryUnavailable {
            library: "the CUDA driver (libcuda)",
            hint: "install the NVIDIA driver, or use Device::sim for the CPU simulation",
        });
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

pub(crate) fn new_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    ctx.new_stream().call("cuStreamCreate")
}

pub(crate) fn new_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).call("cuEventCreate")
}

pub(crate) fn new_timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).call("cuEventCreate")
}

/// GPU time between two completed timing events (resolution about 0.5 µs).
pub(crate) fn elapsed(start: &CudaEvent, end: &CudaEvent) -> Result<std::time::Duration> {
    bind(start.context())?;
    // SAFETY: both events are live (owned by their `CudaEvent`s) and of the bound context.
    let ms = unsafe { result::event::elapsed(start.cu_event(), end.cu_event()) }.call("cuEventElapsedTime")?;
    Ok(std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
}

pub(crate) fn wait(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    bind(s.context())?;
    // SAFETY: both handles are live (owned by `s` and `e`) and belong to the bound context.
    unsafe { result::stream::wait_event(s.cu_stream(), e.cu_event(), sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        .call("cuStreamWaitEvent")
}

pub(crate) fn record(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    bind(s.context())?;
    // SAFETY: both handles are live and of the bound context.
    unsafe { result::event::record(e.cu_event(), s.cu_stream()) }.call("cuEventRecord")
}

pub(crate) fn stream_synchronize(s: &CudaStream) -> Result<()> {
    bind(s.context())?;
    // SAFETY: the stream is live (owned by `s`) and of the bound context.
    unsafe { result::stream::synchronize(s.cu_stream()) }.call("cuStreamSynchronize")
}

pub(crate) fn query(e: &CudaEvent) -> Result<bool> {
    bind(e.context())?;
    // SAFETY: the event is live (owned by `e`).
    match unsafe { result::event::query(e.cu_event()) } {
        Ok(()) => Ok(true),
        Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
        Err(err) => Err(Error::driver("cuEventQuery", err)),
    }
}

pub(crate) fn synchronize(e: &CudaEvent) -> Result<()> {
    bind(e.context())?;
    // SAFETY: the event is live (owned by `e`).
    unsafe { result::event::synchronize(e.cu_event()) }.call("cuEventSynchronize")
}

/// Bytes of free device memory, for out-of-memory errors.
pub(crate) fn free_memory(ctx: &CudaContext) -> usize {
    bind(ctx).ok().and_then(|_| result::mem_get_info().ok()).map_or(0, |(free, _)| free)
}

/// Maps an allocation failure to `OutOfMemory` with the free byte count.
pub(crate) fn alloc_error(ctx: &CudaContext, call: &'static str, requested: usize, e: DriverError) -> Error {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory { requested, free: free_memory(ctx) }
    } else {
        Error::driver(call, e)
    }
}

/// The `sm_XY` architecture string of the context's device.
#[cfg(feature = "nvrtc")]
pub(crate) fn arch(ctx: &CudaContext) -> Result<(i32, i32)> {
    ctx.compute_capability().call("cuDeviceGetAttribute(COMPUTE_CAPABILITY)")
}

/// Whether the driver knows the host range `[ptr, ptr + bytes)` at either end: memory from
/// `cuMemHostAlloc`, registered with `cuMemHostRegister`, or managed. A host-to-device copy from
/// such memory reads its source asynchronously, after the call returns; one from plain pageable
/// memory has staged its source by the time the call returns. A status other than "not a
/// driver pointer" is returned as an error.
pub(crate) fn is_driver_host_memory(ctx: &CudaContext, ptr: *const u8, bytes: usize) -> Result<bool> {
    if bytes == 0 {
        return Ok(false);
    }
    bind(ctx)?;
    let last = ptr.wrapping_add(bytes - 1);
    for p in [ptr, last] {
        let mut memory_type: std::ffi::c_uint = 0;
        // SAFETY: 1. `memory_type` is a valid out-pointer of the `unsigned int` this attribute
        // writes; 2. the address is only looked up by the driver, never dereferenced; 3. a context
        // is bound (above).
        let status = unsafe {
            sys::cuPointerGetAttribute(
                (&mut memory_type as *mut std::ffi::c_uint).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p as sys::CUdeviceptr,
            )
        };
        match status {
            sys::CUresult::CUDA_SUCCESS => return Ok(true),
            // The documented answer for an address the driver did not allocate or register.
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => {}
            other => return Err(Error::driver("cuPointerGetAttribute(MEMORY_TYPE)", DriverError(other))),
        }
    }
    Ok(false)
}
