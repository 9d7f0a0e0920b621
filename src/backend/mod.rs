//! The seam to the driver: streams, events, buffer memory and host-visible completion, on CUDA
//! or simulated.
//!
//! The rest of the crate calls only the methods here and in [`memory`]; [`cuda`] is the only
//! module that touches `cudarc::driver::{result, sys}`, [`sim`] the only one that simulates it.

pub(crate) mod cuda;
pub(crate) mod memory;
pub(crate) mod sim;
pub(crate) mod sim_mem;

use crate::error::Result;
use std::sync::Arc;

/// A backend context: what streams and events are created from.
#[derive(Clone)]
pub(crate) enum BackendCtx {
    Cuda(Arc<cudarc::driver::CudaContext>),
    Sim(Arc<sim::SimShared>),
}

/// A stream handle.
pub(crate) enum RawStream {
    Cuda(Arc<cudarc::driver::CudaStream>),
    Sim(sim::SimStream),
}

/// An event handle.
pub(crate) enum RawEvent {
    Cuda(cudarc::driver::CudaEvent),
    Sim(sim::SimEvent),
}

impl BackendCtx {
    pub(crate) fn new_stream(&self, index: u32) -> Result<RawStream> {
        match self {
            BackendCtx::Cuda(ctx) => cuda::new_stream(ctx).map(RawStream::Cuda),
            BackendCtx::Sim(s) => Ok(RawStream::Sim(sim::SimStream::spawn(s.clone(), index))),
        }
    }

    pub(crate) fn new_event(&self) -> Result<RawEvent> {
        match self {
            BackendCtx::Cuda(ctx) => cuda::new_event(ctx).map(RawEvent::Cuda),
            BackendCtx::Sim(_) => Ok(RawEvent::Sim(sim::SimEvent::default())),
        }
    }

    /// An event that records timestamps, for GPU durations (tracing only: timing events cost
    /// more to record than the fence events the tracker pools).
    pub(crate) fn new_timing_event(&self) -> Result<RawEvent> {
        match self {
            BackendCtx::Cuda(ctx) => cuda::new_timing_event(ctx).map(RawEvent::Cuda),
            BackendCtx::Sim(_) => Ok(RawEvent::Sim(sim::SimEvent::default())),
        }
    }
}

impl RawStream {
    /// A stream like this one whose work goes nowhere: a simulated stream that drops every
    /// command (a graph recorded on the simulator runs nothing until it is replayed). A CUDA
    /// stream is never asked for one.
    pub(crate) fn discarding(&self) -> RawStream {
        match self {
            RawStream::Sim(s) => RawStream::Sim(s.discarding()),
            RawStream::Cuda(s) => RawStream::Cuda(s.clone()),
        }
    }

    /// Queues a wait: later work on this stream starts after `ev`'s recorded work.
    pub(crate) fn wait(&self, ev: &RawEvent) -> Result<()> {
        match (self, ev) {
            (RawStream::Cuda(s), RawEvent::Cuda(e)) => cuda::wait(s, e),
            (RawStream::Sim(s), RawEvent::Sim(e)) => {
                s.wait(e);
                Ok(())
            }
            _ => unreachable!("streams and events of one device share a backend"),
        }
    }

    /// Makes the stream's context current on this thread (nothing to do on the simulator).
    pub(crate) fn bind(&self) -> Result<()> {
        match self {
            RawStream::Cuda(s) => cuda::bind(s.context()),
            RawStream::Sim(_) => Ok(()),
        }
    }

    /// [`wait`](Self::wait) with the stream's context already current ([`bind`](Self::bind)).
    pub(crate) fn wait_current(&self, ev: &RawEvent) -> Result<()> {
        match (self, ev) {
            (RawStream::Cuda(s), RawEvent::Cuda(e)) => cuda::wait_current(s, e),
            _ => self.wait(ev),
        }
    }

    /// Records `ev` at the current end of this stream; `bound`: the caller has made the
    /// stream's context current on this thread and nothing has changed it since.
    pub(crate) fn record_as(&self, ev: &RawEvent, bound: bool) -> Result<()> {
        match (self, ev) {
            (RawStream::Cuda(s), RawEvent::Cuda(e)) if bound => {
                #[cfg(test)]
                if let Some(status) = test_hooks::take_record_failure() {
                    return Err(crate::error::Error::driver("cuEventRecord", status));
                }
                cuda::record_current(s, e)
            }
            _ => self.record(ev),
        }
    }

    /// Records `ev` at the current end of this stream.
    pub(crate) fn record(&self, ev: &RawEvent) -> Result<()> {
        #[cfg(test)]
        if let Some(status) = test_hooks::take_record_failure() {
            return Err(crate::error::Error::driver("cuEventRecord", status));
        }
        match (self, ev) {
            (RawStream::Cuda(s), RawEvent::Cuda(e)) => cuda::record(s, e),
            (RawStream::Sim(s), RawEvent::Sim(e)) => {
                s.record(e);
                Ok(())
            }
            _ => unreachable!("streams and events of one device share a backend"),
        }
    }

    /// Blocks until every piece of work enqueued on this stream so far has finished. Only for
    /// paths that are already failing: the op path never blocks the host.
    pub(crate) fn synchronize(&self) -> Result<()> {
        match self {
            RawStream::Cuda(s) => cuda::stream_synchronize(s),
            RawStream::Sim(s) => {
                let ev = sim::SimEvent::default();
                s.record(&ev);
                ev.synchronize()
            }
        }
    }
}

impl RawEvent {
    /// Whether the recorded work has finished (an event never recorded counts as finished).
    pub(crate) fn query(&self) -> Result<bool> {
        match self {
            RawEvent::Cuda(e) => cuda::query(e),
            RawEvent::Sim(e) => e.query(),
        }
    }

    /// GPU time from `start`'s recording to this event's. Both must have completed and, on
    /// CUDA, be timing events ([`BackendCtx::new_timing_event`]).
    pub(crate) fn elapsed_since(&self, start: &RawEvent) -> Result<std::time::Duration> {
        match (self, start) {
            (RawEvent::Cuda(end), RawEvent::Cuda(start)) => cuda::elapsed(start, end),
            (RawEvent::Sim(end), RawEvent::Sim(start)) => {
                Ok(end.completed_at().saturating_duration_since(start.completed_at()))
            }
            _ => unreachable!("events of one device share a backend"),
        }
    }

    /// Blocks until the recorded work has finished.
    pub(crate) fn synchronize(&self) -> Result<()> {
        match self {
            RawEvent::Cuda(e) => cuda::synchronize(e),
            RawEvent::Sim(e) => e.synchronize(),
        }
    }
}

/// Switches for unit tests that make backend calls fail on demand.
#[cfg(test)]
pub(crate) mod test_hooks {
    use cudarc::driver::DriverError;
    use std::cell::Cell;

    thread_local!(static FAIL_RECORD: Cell<Option<DriverError>> = const { Cell::new(None) });

    /// The next `RawStream::record` on this thread fails with `status`.
    pub(crate) fn fail_next_record(status: DriverError) {
        FAIL_RECORD.with(|f| f.set(Some(status)));
    }

    pub(super) fn take_record_failure() -> Option<DriverError> {
        FAIL_RECORD.with(Cell::take)
    }
}
