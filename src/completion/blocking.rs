//! How a thread waits on, polls or hands off a completion's shared state: spinning then
//! blocking on its condvar, synchronizing on its event, registering with the completion thread
//! when a callback, waker or bounded wait needs it, and the would-deadlock checks.

use super::shared::{run_callback, Shared, ENQUEUED, FILLED_BY_CALLBACK, QUEUED, READY};
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How many spin windows a waiter on a lane job spends before parking: while the job is queued
/// (after idle, the worker's own wake-up alone can outlast one window), and again once the
/// worker has started it. A waiter that parks pays a second thread wake when the job commits.
const LANE_SPIN_FACTOR: u32 = 4;

impl<T: Send + 'static> Shared<T> {
    fn spin(&self) -> Duration {
        self.device.config.spin
    }

    /// Blocks until the status reaches `at_least` or `deadline` passes (`None`: no deadline);
    /// spins briefly first.
    fn wait_status(&self, at_least: u8, deadline: Option<Instant>) -> bool {
        // Measured as elapsed time, so that any spin, however large, cannot overflow `Instant`.
        let (mut start, spin) = (Instant::now(), self.spin());
        // Waiting for a lane job to be enqueued: the window is longer, and restarts once the
        // worker has started the job, so that after idle the caller is still spinning when the
        // job commits (one thread wake in all, the worker's).
        let mut extend = at_least == ENQUEUED && self.runner != 0;
        let mut window = if extend { spin.saturating_mul(LANE_SPIN_FACTOR) } else { spin };
        while start.elapsed() < window && deadline.is_none_or(|d| Instant::now() < d) {
            if self.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            if extend && self.is_running() {
                extend = false;
                start = Instant::now();
                window = spin.saturating_mul(LANE_SPIN_FACTOR);
            }
            std::hint::spin_loop();
        }
        let mut st = crate::sync::lock(&self.state);
        loop {
            if self.status.load(Ordering::Acquire) >= at_least {
                return true;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return false;
            }
            // Counted under the lock the resolver reads it in: it notifies whenever one waits.
            st.waiters += 1;
            st = match left {
                None => crate::sync::wait(&self.cv, st),
                Some(left) => crate::sync::wait_timeout(&self.cv, st, left),
            };
            st.waiters -= 1;
        }
    }

    /// `Some(WouldDeadlock)` when waiting here could never end: the job is still queued on the
    /// lane whose thread this is.
    fn would_deadlock(&self) -> Option<Error> {
        if self.runner == FILLED_BY_CALLBACK {
            return self.composed_would_deadlock();
        }
        let runner = self.runner;
        (runner != 0
            && self.status.load(Ordering::Acquire) == QUEUED
            && crate::sync::role::lane() == runner)
            .then(|| Error::WouldDeadlock {
                what: "a lane job waited on a job queued behind it on its own lane, which only runs after the waiting job returns; return the completion instead, or submit the second job to another lane".into(),
            })
    }

    /// `Some(WouldDeadlock)` for a composed completion still queued, waited on from the
    /// completion thread that alone fills it.
    fn composed_would_deadlock(&self) -> Option<Error> {
        (self.status.load(Ordering::Acquire) == QUEUED && self.on_completion_thread()).then(|| Error::WouldDeadlock {
            what: "a callback waited on a composed completion (map, and_then, then, join) that only the completion thread running that callback can fill; chain the work with and_then instead of waiting".into(),
        })
    }

    /// Whether this is the completion thread of the completion's device, which cannot both wait
    /// and deliver.
    fn on_completion_thread(&self) -> bool {
        self.device.completions().is_current_thread()
    }

    /// On the completion thread: resolves the completion by polling its event from here (the
    /// thread cannot wait for itself), enforcing the watchdog too. `false` if `deadline` passed.
    fn watch_here(&self, deadline: Option<Instant>) -> bool {
        // The job runs on a lane or the caller's thread, neither of which needs this thread.
        if !self.wait_status(ENQUEUED, deadline) {
            return false;
        }
        let event = crate::sync::lock(&self.state).event.clone();
        if let Some(ev) = event {
            let watchdog = self.device.config.watchdog;
            let expires = watchdog.and_then(|w| Instant::now().checked_add(w));
            let mut backoff = Duration::from_micros(20);
            loop {
                match ev.is_done() {
                    Ok(false) => {}
                    done => {
                        self.resolve_in(done.map(drop), true);
                        break;
                    }
                }
                let now = Instant::now();
                if let (Some(w), Some(e)) = (watchdog, expires) {
                    if now >= e {
                        // The completion thread resolves it again, releasing its keep-alives,
                        // once the GPU is really done.
                        self.publish_value(Err(Error::Timeout { waited: w }), false, true);
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

    /// Takes the value, once.
    pub(super) fn take(&self) -> Result<T> {
        let mut st = crate::sync::lock(&self.state);
        if st.taken {
            return Err(Error::AlreadyTaken);
        }
        st.taken = true;
        st.value.take().unwrap_or(Err(Error::AlreadyTaken))
    }

    /// [`Completion::wait`](super::Completion::wait) on shared state.
    pub(super) fn wait(self: &Arc<Self>) -> Result<T> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        if self.device.config.watchdog.is_some() {
            // The completion thread enforces the watchdog; synchronizing here could outwait it.
            if self.on_completion_thread() {
                self.watch_here(None);
            } else {
                self.wait_status(READY, None);
            }
            return self.take();
        }
        self.wait_status(ENQUEUED, None);
        let event = crate::sync::lock(&self.state).event.clone();
        if let Some(ev) = event {
            let outcome = ev.synchronize();
            drop(ev);
            self.resolve_in(outcome, false);
        }
        self.wait_status(READY, None);
        self.take()
    }

    /// [`Completion::wait_timeout`](super::Completion::wait_timeout) on shared state.
    pub(super) fn wait_timeout(self: &Arc<Self>, timeout: Duration) -> Result<T> {
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
            let mut st = crate::sync::lock(&self.state);
            st.watched = true;
            let register = self.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.register(stream, event);
            }
        }
        if !self.wait_status(READY, deadline) {
            return Err(Error::Timeout { waited: timeout });
        }
        self.take()
    }

    /// [`Completion::wait_committed`](super::Completion::wait_committed) on shared state.
    pub(super) fn wait_committed(&self) -> Result<()> {
        if let Some(e) = self.would_deadlock() {
            return Err(e);
        }
        self.wait_status(ENQUEUED, None);
        Ok(())
    }

    /// [`Completion::is_ready`](super::Completion::is_ready) on shared state.
    pub(super) fn is_ready(&self) -> bool {
        match self.status.load(Ordering::Acquire) {
            READY => true,
            QUEUED => false,
            _ => {
                let event = crate::sync::lock(&self.state).event.clone();
                match event.map(|e| e.is_done()) {
                    Some(Ok(false)) => false,
                    Some(Ok(true)) | None => {
                        self.resolve_in(Ok(()), false);
                        true
                    }
                    Some(Err(e)) => {
                        self.resolve_in(Err(e), false);
                        true
                    }
                }
            }
        }
    }

    /// [`Completion::try_take`](super::Completion::try_take) on shared state.
    pub(super) fn try_take(&self) -> Option<Result<T>> {
        self.is_ready().then(|| self.take())
    }

    /// [`Completion::on_complete`](super::Completion::on_complete) on shared state.
    pub(super) fn on_complete(self: &Arc<Self>, callback: impl FnOnce(Result<T>) + Send + 'static) {
        let mut st = crate::sync::lock(&self.state);
        if self.status.load(Ordering::Acquire) != READY {
            st.callback = Some(Box::new(callback));
            let register = self.needs_registration(&mut st);
            drop(st);
            if let Some((stream, event)) = register {
                self.register(stream, event);
            }
            return;
        }
        st.taken = true;
        let value = st.value.take().unwrap_or(Err(Error::AlreadyTaken));
        drop(st);
        let job: Box<dyn FnOnce() + Send> = Box::new(move || run_callback(Box::new(callback), value));
        self.device.completions().run_callback(job);
    }

    /// [`Future::poll`](std::future::Future::poll) on shared state.
    pub(super) fn poll_waker(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if self.status.load(Ordering::Acquire) != READY {
            let mut st = crate::sync::lock(&self.state);
            // Re-checked under the lock the resolver takes the waker in: no lost wake-up.
            if self.status.load(Ordering::Acquire) != READY {
                st.waker = Some(cx.waker().clone());
                let register = self.needs_registration(&mut st);
                drop(st);
                if let Some((stream, event)) = register {
                    self.register(stream, event);
                }
                return Poll::Pending;
            }
        }
        Poll::Ready(self.take())
    }
}
