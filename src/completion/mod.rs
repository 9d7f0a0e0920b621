//! `Completion<T>`: the result of GPU work, delivered by blocking, polling, callback or future.
//!
//! The parts: [`shared`] holds the state a completion shares with whoever resolves it, and the
//! protocol by which it moves to ready; [`blocking`] waits on it, polls it and registers it;
//! [`local`] holds a completion in place, with no shared state, until something needs the
//! completion thread; [`compose`] chains completions (`map`, `and_then`, `then`, `join`),
//! each step a callback. The device's completion thread, which watches the events of
//! completions that must act when the GPU finishes, is `crate::completion_thread`, a layer
//! below: it knows only events and the `Pending` trait.
//!
//! # Waiting from the device's own threads
//!
//! Some waits could never end: a lane job waiting on a job queued behind it on its own lane
//! (only that lane runs it), a lane job submitting to its own full queue. These return
//! [`Error::WouldDeadlock`] at once. A callback (or any user code on the completion thread)
//! that waits on a completion does not wait for the completion thread, which is busy running
//! it: it watches the job's event itself, polling it, so `wait`, `wait_timeout` and the
//! watchdog all work there (other deliveries wait meanwhile, so keep such waits short).

mod blocking;
mod compose;
mod local;
mod shared;
#[cfg(test)]
mod tests;

// Libraries that read a scalar back name the deferred reader; without them it is unused.
#[cfg_attr(not(feature = "cublas"), allow(unused_imports))]
pub(crate) use shared::Deferred;
// A library's watchdog rules on its ops (NCCL's); without one it is unused.
#[cfg_attr(not(feature = "nccl"), allow(unused_imports))]
pub(crate) use shared::Judge;
pub(crate) use shared::{KeepAlive, Shared, Verdict};

use crate::device::DeviceShared;
use crate::error::Result;
// Named by the docs' links.
#[cfg(doc)]
use crate::error::Error;
use crate::trace::TraceTicket;
use crate::track::EventRef;
use local::{Local, View};
use shared::{ENQUEUED, QUEUED};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
#[cfg(doc)]
use std::time::Instant;

/// The outcome of GPU work: `T` once every kernel and copy the job enqueued has finished.
///
/// Dropping a completion never cancels the work and never releases its keep-alives early, so
/// ignoring one is fine: library ops return one each, and inside a lane job the job's own
/// completion already covers them.
///
/// ```
/// use cusched::{Device, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let lane = device.lane("compute")?;
/// let done = lane.submit(|cx| {
///     let buf = cx.device().upload(cx.stream(), &[1u32, 2, 3])?;
///     cx.keep(buf.clone());
///     Ok(buf.len())
/// });
/// assert_eq!(done.wait()?, 3);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Completion<T> {
    slot: Slot<T>,
}

/// Where a completion's state lives: shared from the start when another thread fills it (lane
/// jobs) or something must act when the GPU finishes (keep-alives, a trace ticket, a deferred
/// value, a watchdog); otherwise in place until a callback, waker or bounded wait needs it.
enum Slot<T> {
    Shared(Arc<Shared<T>>),
    Local(Local<T>),
}

// Nothing in a completion is pinned: `poll` only reaches its state through `&mut`.
impl<T> Unpin for Completion<T> {}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match self.view() {
            View::Shared(s) => s.status.load(Ordering::Acquire),
            View::Local(_, st) => st.status(),
        };
        let s = match status {
            QUEUED => "queued",
            ENQUEUED => "enqueued",
            _ => "ready",
        };
        write!(f, "Completion({s})")
    }
}

impl<T> Completion<T> {
    fn view(&self) -> View<'_, T> {
        match &self.slot {
            Slot::Shared(s) => View::Shared(s),
            Slot::Local(l) => l.view(),
        }
    }
}

impl<T: Send + 'static> Completion<T> {
    pub(crate) fn queued(device: &Arc<DeviceShared>) -> (Completion<T>, Arc<Shared<T>>) {
        Self::queued_on(device, 0)
    }

    /// A completion for a job queued on the lane with id `lane`.
    pub(crate) fn queued_on(device: &Arc<DeviceShared>, lane: u64) -> (Completion<T>, Arc<Shared<T>>) {
        let shared = Shared::new(device, lane);
        (Completion { slot: Slot::Shared(shared.clone()) }, shared)
    }

    /// A completion for work the caller's thread has just enqueued: `value`, ready once the GPU
    /// passes `event` (at once without one). `keep` stays alive until then, and `trace`'s
    /// completion hooks run then. Without either (and without a watchdog) nothing has to act
    /// when the GPU finishes, so it allocates no shared state unless a callback, waker or
    /// bounded wait asks for it later.
    pub(crate) fn enqueued(
        device: &Arc<DeviceShared>,
        value: Result<T>,
        event: Option<EventRef>,
        keep: Vec<KeepAlive>,
        trace: Option<TraceTicket>,
    ) -> Completion<T> {
        if keep.is_empty() && trace.is_none() && device.config.watchdog.is_none() {
            return Completion { slot: Slot::Local(Local::new(device, value, event)) };
        }
        let (completion, shared) = Self::queued(device);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        shared.enqueued(value, event, keep);
        completion
    }

    /// Like [`enqueued`](Self::enqueued), with `verdict` applied to `value` once the GPU has
    /// passed `event`: in place, allocating nothing, unless a trace ticket or the device's
    /// watchdog needs shared state.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn judged(
        device: &Arc<DeviceShared>,
        value: Result<T>,
        event: EventRef,
        verdict: Verdict,
        trace: Option<TraceTicket>,
    ) -> Completion<T> {
        if trace.is_none() && device.config.watchdog.is_none() {
            return Completion { slot: Slot::Local(Local::judged(device, value, Some(event), Some(verdict))) };
        }
        let (completion, shared) = Self::queued(device);
        if let Some(t) = trace {
            shared.set_trace(t);
        }
        shared.enqueued_verdict(value, verdict, event);
        completion
    }

    fn into_shared(self) -> Arc<Shared<T>> {
        match self.slot {
            Slot::Shared(s) => s,
            Slot::Local(l) => l.into_shared(),
        }
    }

    /// Blocks until the job's GPU work has finished and returns its value. Synchronizes on the
    /// job's event from this thread.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane. Inside a callback (on the completion thread) it works: it watches the event
    /// from there.
    pub fn wait(self) -> Result<T> {
        match self.slot {
            Slot::Shared(s) => s.wait(),
            Slot::Local(l) => l.wait(),
        }
    }

    /// Like [`wait`](Self::wait), but gives up after `timeout` with [`Error::Timeout`]; after a
    /// timeout the completion stays usable (wait again, poll it, or set a callback). A value
    /// returned is taken: later calls return [`Error::AlreadyTaken`]. A timeout too large for
    /// [`Instant`] means no limit.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<T> {
        match self.view() {
            View::Shared(s) => s.wait_timeout(timeout),
            View::Local(device, mut st) => {
                if st.poll(device) {
                    return st.take();
                }
                drop(st);
                // The completion thread watches the event while this thread blocks.
                match &self.slot {
                    Slot::Local(l) => l.promote().wait_timeout(timeout),
                    Slot::Shared(s) => s.wait_timeout(timeout),
                }
            }
        }
    }

    /// Blocks until the job has run and its work is enqueued and committed (its uses are
    /// ordered before any later recorder's), without waiting for the GPU. Use it to order a
    /// job on one lane before a job on another.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane (it could only run after the waiting job returns). The job's own outcome is
    /// not reported here: [`wait`](Self::wait) returns it.
    pub fn wait_committed(&self) -> Result<()> {
        match self.view() {
            View::Shared(s) => s.wait_committed(),
            // The job ran on the thread that made it.
            View::Local(..) => Ok(()),
        }
    }

    /// Whether the value is available (the GPU work has finished). Never blocks.
    pub fn is_ready(&self) -> bool {
        match self.view() {
            View::Shared(s) => s.is_ready(),
            View::Local(device, mut st) => st.poll(device),
        }
    }

    /// The value if it is available, once; `None` while the work is pending.
    pub fn try_take(&self) -> Option<Result<T>> {
        match self.view() {
            View::Shared(s) => s.try_take(),
            View::Local(device, mut st) => st.poll(device).then(|| st.take()),
        }
    }

    /// Runs `callback` with the value on the device's completion thread once the GPU work has
    /// finished (never on CUDA's driver thread). Keep callbacks short: they delay other
    /// completions. To get a result back from the callback, use [`then`](Self::then) (or
    /// [`map`](Self::map)), whose completion carries it, rather than a channel.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// use std::sync::{Arc, Mutex};
    /// let device = Device::sim(SimConfig::default())?;
    /// let lane = device.lane("compute")?;
    /// let log = Arc::new(Mutex::new(Vec::new()));
    /// let sink = log.clone();
    /// lane.submit(|cx| cx.device().upload(cx.stream(), &[7u8; 4]).map(|b| b.len()))
    ///     .on_complete(move |r| sink.lock().unwrap().push(format!("{r:?}")));
    /// // Shutting down runs every pending callback first.
    /// drop(lane);
    /// device.shutdown()?;
    /// assert_eq!(*log.lock().unwrap(), ["Ok(4)"]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn on_complete(self, callback: impl FnOnce(Result<T>) + Send + 'static) {
        self.into_shared().on_complete(callback)
    }
}

impl<T: Send + 'static> Future for Completion<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        match this.view() {
            View::Shared(s) => s.poll_waker(cx),
            View::Local(device, mut st) => {
                if st.poll(device) {
                    return Poll::Ready(st.take());
                }
                drop(st);
                match &this.slot {
                    Slot::Local(l) => l.promote().poll_waker(cx),
                    Slot::Shared(s) => s.poll_waker(cx),
                }
            }
        }
    }
}

/// Waits for every completion and returns their results, in the order given.
///
/// The completions are waited for newest first: once the GPU has passed the last one of a
/// stream, the earlier ones of that stream are known done without asking the driver again, so
/// a batch costs about one synchronize per stream rather than one per completion.
pub fn wait_all<T: Send + 'static>(completions: impl IntoIterator<Item = Completion<T>>) -> Vec<Result<T>> {
    let completions: Vec<Completion<T>> = completions.into_iter().collect();
    let mut results: Vec<Result<T>> = completions.into_iter().rev().map(Completion::wait).collect();
    results.reverse();
    results
}
