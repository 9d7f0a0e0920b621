//! `Completion<T>`: the result of GPU work, delivered by blocking, polling, callback or future.
//!
//! The parts: [`shared`] holds the state a completion shares with whoever resolves it, and the
//! protocol by which it moves to ready; [`thread`] is the device's completion thread, which
//! watches the events of completions that must act when the GPU finishes.
//!
//! # Waiting from the device's own threads
//!
//! Some waits could never end: a lane job waiting on a job queued behind it on its own lane
//! (only that lane runs it), a lane job submitting to its own full queue. These return
//! [`Error::WouldDeadlock`] at once. A callback (or any user code on the completion thread)
//! that waits on a completion does not wait for the completion thread, which is busy running
//! it: it watches the job's event itself, polling it, so `wait`, `wait_timeout` and the
//! watchdog all work there (other deliveries wait meanwhile, so keep such waits short).

mod shared;
#[cfg(test)]
mod tests;
mod thread;

// Libraries that read a scalar back name the deferred reader; without them it is unused.
#[cfg_attr(not(feature = "cublas"), allow(unused_imports))]
pub(crate) use shared::Deferred;
pub(crate) use shared::{KeepAlive, Shared};
pub(crate) use thread::Completions;

use crate::device::DeviceShared;
use crate::error::{Error, Result};
use shared::{run_callback, ENQUEUED, QUEUED, READY};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.shared.status.load(Ordering::Acquire) {
            QUEUED => "queued",
            ENQUEUED => "enqueued",
            _ => "ready",
        };
        write!(f, "Completion({s})")
    }
}

impl<T: Send + 'static> Completion<T> {
    pub(crate) fn queued(device: &Arc<DeviceShared>) -> (Completion<T>, Arc<Shared<T>>) {
        Self::queued_on(device, 0)
    }

    /// A completion for a job queued on the lane with id `lane`.
    pub(crate) fn queued_on(device: &Arc<DeviceShared>, lane: u64) -> (Completion<T>, Arc<Shared<T>>) {
        let shared = Shared::new(device, lane);
        (Completion { shared: shared.clone() }, shared)
    }

    fn spin(&self) -> Duration {
        self.shared.device.config.spin
    }

    /// Blocks until the status reaches `at_least` or `deadline` passes (`None`: no deadline);
    /// spins briefly first.
    fn wait_status(&self, at_least: u8, deadline: Option<Instant>) -> bool {
        // Measured as elapsed time, so that any spin, however large, cannot overflow `Instant`.
        let (start, spin) = (Instant::now(), self.spin());
        while start.elapsed() < spin && deadline.is_none_or(|d| Instant::now() < d) {
            if self.shared.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            std::hint::spin_loop();
        }
        let mut st = crate::sync::lock(&self.shared.state);
        loop {
            if self.shared.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            st = match deadline {
                None => crate::sync::wait(&self.shared.cv, st),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    crate::sync::wait_timeout(&self.shared.cv, st, left)
                }
            };
        }
    }

    /// `Some(WouldDeadlock)` when waiting here could never end: the job is still queued on the
    /// lane whose thread this is.
    fn would_deadlock(&self) -> Option<Error> {
        let runner = self.shared.runner;
        (runner != 0
            && self.shared.status.load(Ordering::Acquire) == QUEUED
            && crate::sync::role::lane() == runner)
            .then(|| Error::WouldDeadlock {
                what: "a lane job waited on a job queued behind it on its own lane, which only runs after the waiting job returns; return the completion instead, or submit the second job to another lane".into(),
            })
    }

    /// Whether this is the completion thread of the completion's device, which cannot both wait
    /// and deliver.
    fn on_completion_thread(&self) -> bool {
        self.shared.device.completions().is_current_thread()
    }

    /// On the completion thread: resolves the completion by polling its event from here (the
    /// thread cannot wait for itself), enforcing the watchdog too. `false` if `deadline` passed.
    fn watch_here(&self, deadline: Option<Instant>) -> bool {
        // The job runs on a lane or the caller's thread, neither of which needs this thread.
        if !self.wait_status(ENQUEUED, deadline) {
            return false;
        }
        let event = crate::sync::lock(&self.shared.state).event.clone();
        if let Some(ev) = event {
            let watchdog = self.shared.device.config.watchdog;
            let expires = watchdog.and_then(|w| Instant::now().checked_add(w));
            let mut backoff = Duration::from_micros(20);
            loop {
                match ev.is_done() {
                    Ok(false) => {}
                    done => {
                        self.shared.resolve_in(done.map(drop), true);
                        break;
                    }
                }
                let now = Instant::now();
                if let (Some(w), Some(e)) = (watchdog, expires) {
                    if now >= e {
                        // The completion thread resolves it again, releasing its keep-alives,
                        // once the GPU is really done.
                        self.shared.publish_value(Err(Error::Timeout { waited: w }), false, true);
                        break;
                    }
                }
                if deadline.is_some_and(|d| now >= d) {
                    return false;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(1));
            }
        }
        self.wait_status(READY, deadline)
    }

    fn take(&self) -> Result<T> {
        let mut st = crate::sync::lock(&self.shared.state);
        if st.taken {
            return Err(Error::AlreadyTaken);
        }
        st.taken = true;
        st.value.take().unwrap_or(Err(Error::AlreadyTaken))
    }

    /// Blocks until the job's GPU work has finished and returns its value. Synchronizes on the
    /// job's event from this thread.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane. Inside a callback (on the completion thread) it works: it watches the event
    /// from there.
    pub fn wait(self) -> Result<T> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        if self.shared.device.config.watchdog.is_some() {
            // The completion thread enforces the watchdog; synchronizing here could outwait it.
            if self.on_completion_thread() {
                self.watch_here(None);
            } else {
                self.wait_status(READY, None);
            }
            return self.take();
        }
        self.wait_status(ENQUEUED, None);
        let event = crate::sync::lock(&self.shared.state).event.clone();
        if let Some(ev) = event {
            let outcome = ev.synchronize();
            drop(ev);
            self.shared.resolve_in(outcome, false);
        }
        self.wait_status(READY, None);
        self.take()
    }

    /// Like [`wait`](Self::wait), but gives up after `timeout` with [`Error::Timeout`]; after a
    /// timeout the completion stays usable (wait again, poll it, or set a callback). A value
    /// returned is taken: later calls return [`Error::AlreadyTaken`]. A timeout too large for
    /// [`Instant`] means no limit.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<T> {
        let deadline = Instant::now().checked_add(timeout);
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        if self.on_completion_thread() {
            if !self.watch_here(deadline) {
                return Err(Error::Timeout { waited: timeout });
            }
            return self.take();
        }
        {
            let mut st = crate::sync::lock(&self.shared.state);
            st.watched = true;
            let register = self.shared.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.shared.register(stream, event);
            }
        }
        if !self.wait_status(READY, deadline) {
            return Err(Error::Timeout { waited: timeout });
        }
        self.take()
    }

    /// Blocks until the job has run and its work is enqueued and committed (its uses are
    /// ordered before any later recorder's), without waiting for the GPU. Use it to order a
    /// job on one lane before a job on another.
    ///
    /// Fails at once with [`Error::WouldDeadlock`] from a lane job, on a job still queued on that
    /// same lane (it could only run after the waiting job returns). The job's own outcome is
    /// not reported here: [`wait`](Self::wait) returns it.
    pub fn wait_committed(&self) -> Result<()> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        self.wait_status(ENQUEUED, None);
        Ok(())
    }

    /// Whether the value is available (the GPU work has finished). Never blocks.
    pub fn is_ready(&self) -> bool {
        match self.shared.status.load(Ordering::Acquire) {
            READY => true,
            QUEUED => false,
            _ => {
                let event = crate::sync::lock(&self.shared.state).event.clone();
                match event.map(|e| e.is_done()) {
                    Some(Ok(false)) => false,
                    Some(Ok(true)) | None => {
                        self.shared.resolve_in(Ok(()), false);
                        true
                    }
                    Some(Err(e)) => {
                        self.shared.resolve_in(Err(e), false);
                        true
                    }
                }
            }
        }
    }

    /// The value if it is available, once; `None` while the work is pending.
    pub fn try_take(&self) -> Option<Result<T>> {
        self.is_ready().then(|| self.take())
    }

    /// Runs `callback` with the value on the device's completion thread once the GPU work has
    /// finished (never on CUDA's driver thread). Keep callbacks short: they delay other
    /// completions.
    pub fn on_complete(self, callback: impl FnOnce(Result<T>) + Send + 'static) {
        let mut st = crate::sync::lock(&self.shared.state);
        if self.shared.status.load(Ordering::Acquire) != READY {
            st.callback = Some(Box::new(callback));
            let register = self.shared.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.shared.register(stream, event);
            }
            return;
        }
        st.taken = true;
        let value = st.value.take().unwrap_or(Err(Error::AlreadyTaken));
        drop(st);
        let job: Box<dyn FnOnce() + Send> = Box::new(move || run_callback(Box::new(callback), value));
        self.shared.device.completions().run_callback(job);
    }
}

impl<T: Send + 'static> Future for Completion<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if self.shared.status.load(Ordering::Acquire) != READY {
            let mut st = crate::sync::lock(&self.shared.state);
            // Re-checked under the lock the resolver takes the waker in: no lost wake-up.
            if self.shared.status.load(Ordering::Acquire) != READY {
                st.waker = Some(cx.waker().clone());
                let register = self.shared.needs_registration(&mut st);
                drop(st);
                if let Some((stream, event)) = register {
                    self.shared.register(stream, event);
                }
                return Poll::Pending;
            }
        }
        Poll::Ready(self.take())
    }
}

/// Waits for every completion, in order, and returns their results.
pub fn wait_all<T: Send + 'static>(completions: impl IntoIterator<Item = Completion<T>>) -> Vec<Result<T>> {
    completions.into_iter().map(Completion::wait).collect()
}
