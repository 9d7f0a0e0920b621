//! A completion that nobody else resolves, held in place without shared state.
//!
//! Most ops run on the caller's thread and nothing has to act when the GPU finishes them: no
//! keep-alives, trace ticket, deferred value or watchdog. Their completion holds its value and
//! event itself, so the op path allocates nothing for it: `wait` synchronizes on the event from
//! the waiting thread, `is_ready` queries it, and dropping it just drops both. Only a callback,
//! a waker or a bounded wait (all of which need the completion thread) move it into [`Shared`]
//! state, once, under its lock.

use super::shared::{Shared, Verdict, ENQUEUED, READY};
use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::sync::Guard;
use crate::track::EventRef;
use std::sync::{Arc, Mutex, OnceLock};

pub(super) struct Local<T> {
    device: Arc<DeviceShared>,
    state: crate::sync::Ranked<Mutex<LocalState<T>>, { crate::sync::rank::COMPLETION_IN_PLACE }>,
    /// Set, under `state`'s lock, when something needed shared state; `state` is empty then.
    promoted: OnceLock<Arc<Shared<T>>>,
}

pub(super) struct LocalState<T> {
    value: Option<Result<T>>,
    /// The job's event, until the GPU is known to have passed it.
    event: Option<EventRef>,
    /// Applied to the value once the GPU has passed the event.
    verdict: Option<Verdict>,
    taken: bool,
}

/// Where a completion's state lives now.
pub(super) enum View<'a, T> {
    /// In place, locked: it cannot be promoted while this is held.
    Local(&'a Arc<DeviceShared>, Guard<'a, LocalState<T>>),
    Shared(&'a Arc<Shared<T>>),
}

impl<T> Local<T> {
    pub(super) fn view(&self) -> View<'_, T> {
        if let Some(s) = self.promoted.get() {
            return View::Shared(s);
        }
        let st = crate::sync::lock(&self.state);
        // Promotion happens under this lock, so what is read here holds until it is released.
        match self.promoted.get() {
            Some(s) => View::Shared(s),
            None => View::Local(&self.device, st),
        }
    }
}

impl<T: Send + 'static> Local<T> {
    pub(super) fn new(device: &Arc<DeviceShared>, value: Result<T>, event: Option<EventRef>) -> Self {
        Self::judged(device, value, event, None)
    }

    /// Like [`new`](Self::new), with `verdict` applied to `value` once the GPU has passed
    /// `event` (at once without one).
    pub(super) fn judged(
        device: &Arc<DeviceShared>,
        value: Result<T>,
        event: Option<EventRef>,
        verdict: Option<Verdict>,
    ) -> Self {
        let (value, verdict) = match (verdict, &event) {
            (Some(v), None) => (v.apply(value), None),
            (verdict, _) => (value, verdict),
        };
        let st = LocalState { value: Some(value), event, verdict, taken: false };
        Local { device: device.clone(), state: crate::sync::Ranked::new(Mutex::new(st)), promoted: OnceLock::new() }
    }

    /// Whether shared state was made.
    #[cfg(test)]
    pub(super) fn is_promoted(&self) -> bool {
        self.promoted.get().is_some()
    }

    /// The shared state, made now (once) if nothing needed it before.
    pub(super) fn promote(&self) -> &Arc<Shared<T>> {
        if let Some(s) = self.promoted.get() {
            return s;
        }
        let mut st = crate::sync::lock(&self.state);
        self.promoted.get_or_init(|| st.move_to_shared(&self.device))
    }

    /// Like [`promote`](Self::promote), consuming the completion.
    pub(super) fn into_shared(self) -> Arc<Shared<T>> {
        let Local { device, state, promoted } = self;
        match promoted.into_inner() {
            Some(s) => s,
            None => state.into_inner().into_inner().unwrap_or_else(|e| e.into_inner()).move_to_shared(&device),
        }
    }

    /// Waits on this thread: synchronizes on the event, then takes the value.
    pub(super) fn wait(self) -> Result<T> {
        let Local { device, state, promoted } = self;
        if let Some(s) = promoted.into_inner() {
            return s.wait();
        }
        let mut st = state.into_inner().into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(outcome) = st.event.as_ref().map(|ev| ev.synchronize()) {
            st.finish(&device, outcome);
        }
        st.take()
    }
}

impl<T> LocalState<T> {
    /// The protocol state this corresponds to: enqueued until the GPU is known to be done.
    pub(super) fn status(&self) -> u8 {
        if self.event.is_some() {
            ENQUEUED
        } else {
            READY
        }
    }
}

impl<T: Send + 'static> LocalState<T> {
    /// Whether the GPU has passed the event, querying it if not known yet; a failed query
    /// becomes the value.
    pub(super) fn poll(&mut self, device: &DeviceShared) -> bool {
        let Some(ev) = &self.event else { return true };
        match ev.is_done() {
            Ok(false) => false,
            outcome => {
                self.finish(device, outcome.map(drop));
                true
            }
        }
    }

    /// The GPU passed the event (`Ok`), or watching it failed: drops it, and on failure the
    /// error (classified, which may poison the context) replaces the value.
    fn finish(&mut self, device: &DeviceShared, outcome: Result<()>) {
        let verdict = self.verdict.take();
        match (self.event.take(), outcome) {
            (Some(ev), Err(e)) => self.value = Some(Err(device.classify(e, ev.epoch()))),
            (_, Ok(())) => {
                if let Some(v) = verdict {
                    self.value = self.value.take().map(|value| v.apply(value));
                }
            }
            (None, Err(_)) => {}
        }
    }

    /// Takes the value, once.
    pub(super) fn take(&mut self) -> Result<T> {
        if std::mem::replace(&mut self.taken, true) {
            return Err(Error::AlreadyTaken);
        }
        self.value.take().unwrap_or(Err(Error::AlreadyTaken))
    }

    /// Moves the value and event into new shared state, leaving this empty.
    fn move_to_shared(&mut self, device: &Arc<DeviceShared>) -> Arc<Shared<T>> {
        Shared::settled(device, self.value.take(), self.event.take(), self.verdict.take(), self.taken)
    }
}
