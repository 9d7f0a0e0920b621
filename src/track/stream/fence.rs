//! The fence: the one place that issues `cuStreamWaitEvent` for tracked work, queueing the
//! fewest waits so that every candidate event happens before the stream's next work.

use super::StreamSlot;
use crate::backend::RawStream;
use crate::error::Error;
use crate::track::{plan_waits, EventRef};
use std::sync::Arc;

impl StreamSlot {
    /// Queues the minimal waits so that every candidate happens before the stream's next work,
    /// and returns the stream and its context epoch as they were under the same lock. A
    /// candidate of another context epoch of this device fails the whole fence with
    /// [`FenceError::OtherContext`] before anything is queued.
    pub(crate) fn fence(&self, candidates: &[EventRef]) -> std::result::Result<(Arc<RawStream>, u64), FenceError> {
        let mut st = crate::sync::lock(&self.state);
        // A candidate of an earlier context was recorded on a stream that is gone (and may have
        // faulted): waiting on it from this context could never be satisfied, and its buffer
        // is stale. Checked under the lock that a rebuild takes to swap the stream, before any
        // wait is queued. Epochs count per device: a candidate of another device is checked
        // against that device's current context instead.
        for ev in candidates {
            if ev.device() == self.id.device {
                if ev.epoch() != st.epoch {
                    return Err(FenceError::OtherContext { stream_epoch: st.epoch });
                }
            } else if ev.context_replaced() {
                return Err(FenceError::Failed { error: peer_context_lost(ev), stream_epoch: st.epoch });
            }
        }
        if !candidates.is_empty() && self.fencing {
            let stream_epoch = st.epoch;
            let failed = |error| FenceError::Failed { error, stream_epoch };
            let plan = plan_waits(self.index(), &st.clock, candidates);
            if !plan.is_empty() {
                st.raw.bind().map_err(failed)?;
            }
            for ev in plan {
                // A lazily recorded producer is recorded on its own stream now (no tracker lock
                // of that stream is taken: only its backend handle, which the event holds).
                // Recording a lazy producer may bind another context (a peer's): bind again
                // only then.
                let raw = ev.raw_in(&st.raw).map_err(failed)?;
                st.raw.wait_current(raw).map_err(failed)?;
                use crate::track::plan::FencePoint;
                st.clock.join(ev.clock());
                st.stats.waits += 1;
            }
        }
        Ok((st.raw.clone(), st.epoch))
    }
}

/// Why a fence queued no wait.
#[derive(Debug)]
pub(crate) enum FenceError {
    /// A candidate was recorded in another context of this device than the stream's
    /// (`stream_epoch`). Either an earlier one: the buffer belongs to that context, and a wait
    /// from this one could never be satisfied. Or a later one: a rebuild is moving the streams
    /// and has not reached this one yet.
    OtherContext { stream_epoch: u64 },
    /// Any other failure: a driver error, or a peer device's context that was replaced; the
    /// stream was of context `stream_epoch`, which a driver error is classified against.
    Failed { error: Error, stream_epoch: u64 },
}

/// A use on another device whose context was poisoned and replaced since: the work went to a
/// context where nothing runs any more, so whether it touched the buffer is unknown and no
/// stream can wait for it. The buffer cannot be ordered after it, so it is not used again
/// (its free leaks it rather than risk freeing memory still in use).
fn peer_context_lost(ev: &EventRef) -> Error {
    log::error!(
        "cusched: a buffer was used by device #{} in a context that was poisoned since; it cannot be fenced any more",
        ev.device()
    );
    Error::ContextPoisoned {
        call: "a use on another device whose context was poisoned",
        status: crate::backend::cuda::CONTEXT_IS_DESTROYED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimConfig;
    use crate::backend::sim::SimShared;
    use crate::backend::BackendCtx;
    use crate::track::{EventPool, StreamId};

    #[test]
    fn a_fence_on_an_event_of_an_earlier_context_queues_nothing_and_fails() {
        let old = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let pool = Arc::new(EventPool::new(old.clone(), 1));
        let producer = StreamSlot::new(StreamId { device: 1, index: 1 }, old.new_stream(1).unwrap(), 1, None, &pool);
        let ev = producer.record_in(&pool, None).unwrap().unwrap();
        // The consumer already runs on the rebuilt context (epoch 2).
        let fresh = BackendCtx::Sim(SimShared::new(SimConfig::default()));
        let consumer = StreamSlot::new(StreamId { device: 1, index: 0 }, fresh.new_stream(0).unwrap(), 2, None, &pool);
        let r = consumer.fence(&[ev]);
        assert!(matches!(r, Err(FenceError::OtherContext { stream_epoch: 2 })), "a fence across contexts must fail");
        assert_eq!(consumer.stats().waits, 0, "no wait may be queued on an event of a dead context");
    }
}
