//! Streams and events.

use super::bind;
use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, DriverError};
use std::sync::Arc;

pub(crate) fn new_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    ctx.new_stream().call("cuStreamCreate")
}

pub(crate) fn new_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).call("cuEventCreate")
}

pub(crate) fn new_timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).call("cuEventCreate")
}

/// A new event recorded at the current end of `s` (cudarc binds `s`'s context).
pub(crate) fn record_new_event(s: &CudaStream) -> Result<CudaEvent> {
    s.record_event(None).call("cuEventRecord")
}

/// GPU time between two completed timing events (resolution about 0.5 µs).
pub(crate) fn elapsed(start: &CudaEvent, end: &CudaEvent) -> Result<std::time::Duration> {
    bind(start.context())?;
    // SAFETY: 1. both events are live (owned by their `CudaEvent`s); 2. they are of the bound
    // context.
    let ms = unsafe { result::event::elapsed(start.cu_event(), end.cu_event()) }.call("cuEventElapsedTime")?;
    Ok(std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
}

pub(crate) fn wait(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    bind(s.context())?;
    wait_current(s, e)
}

/// [`wait`] for a caller that has bound `s`'s context on this thread already (a fence queueing
/// several waits binds once). A context not current makes the driver fail the call; it cannot
/// make it touch another context's work.
pub(crate) fn wait_current(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    // SAFETY: 1. both handles are live (owned by `s` and `e`); 2. they belong to the bound context.
    unsafe { result::stream::wait_event(s.cu_stream(), e.cu_event(), sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        .call("cuStreamWaitEvent")
}

pub(crate) fn record(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    bind(s.context())?;
    record_current(s, e)
}

/// [`record`] for a caller that has bound `s`'s context on this thread already (a commit right
/// after a library call enqueued with that context current).
pub(crate) fn record_current(s: &CudaStream, e: &CudaEvent) -> Result<()> {
    // SAFETY: 1. both handles are live (owned by `s` and `e`); 2. they are of the bound context.
    unsafe { result::event::record(e.cu_event(), s.cu_stream()) }.call("cuEventRecord")
}

pub(crate) fn stream_synchronize(s: &CudaStream) -> Result<()> {
    bind(s.context())?;
    // SAFETY: 1. the stream is live (owned by `s`); 2. it is of the bound context.
    unsafe { result::stream::synchronize(s.cu_stream()) }.call("cuStreamSynchronize")
}

pub(crate) fn query(e: &CudaEvent) -> Result<bool> {
    bind(e.context())?;
    // SAFETY: 1. the event is live (owned by `e`); 2. its context is bound.
    match unsafe { result::event::query(e.cu_event()) } {
        Ok(()) => Ok(true),
        Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
        Err(err) => Err(Error::driver("cuEventQuery", err)),
    }
}

pub(crate) fn synchronize(e: &CudaEvent) -> Result<()> {
    bind(e.context())?;
    // SAFETY: 1. the event is live (owned by `e`); 2. its context is bound.
    unsafe { result::event::synchronize(e.cu_event()) }.call("cuEventSynchronize")
}
