//! Lock helpers that never panic: a poisoned lock only means another thread panicked while
//! holding it, and every state guarded here stays consistent at each unlock point.

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn wait_timeout<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    match cv.wait_timeout(g, d) {
        Ok((g, _)) => g,
        Err(e) => e.into_inner().0,
    }
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Which of a device's own threads the current thread is, so that a wait that could never end
/// there is refused instead of hanging.
///
/// Each thread writes only its own entries, once, when it starts; `Cell`s in a thread-local
/// need no ordering.
pub(crate) mod role {
    use std::cell::Cell;

    thread_local! {
        /// The id of the lane this thread runs (0: not a lane thread).
        static LANE: Cell<u64> = const { Cell::new(0) };
        /// The uid of the device whose completion thread this is (0: not one).
        static COMPLETION_OF: Cell<u32> = const { Cell::new(0) };
    }

    pub(crate) fn set_lane(id: u64) {
        LANE.with(|c| c.set(id));
    }

    pub(crate) fn lane() -> u64 {
        LANE.with(Cell::get)
    }

    pub(crate) fn set_completion_thread(device: u32) {
        COMPLETION_OF.with(|c| c.set(device));
    }

    pub(crate) fn completion_thread_of() -> u32 {
        COMPLETION_OF.with(Cell::get)
    }

    /// Whether this is a lane or a completion thread (of any device): joining a device's
    /// threads from here could wait on this very thread.
    pub(crate) fn on_device_thread() -> bool {
        lane() != 0 || completion_thread_of() != 0
    }
}

/// Runs user code that the crate calls for the user (a keep-alive's `Drop`, a waker, a trace
/// hook) so that a panic in it is logged and cannot stop the thread that runs it.
pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::error!("cusched: {what} panicked; the panic was caught and delivery goes on");
    }
}

/// Shared values, at most one per type, each made on first use. A lower layer holds one of
/// these for the layers above it (the device keeps a library's per-device caches here), so that
/// it owns their state without naming, and so importing, their types.
#[derive(Default)]
pub(crate) struct TypeSlots(Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl TypeSlots {
    /// The value of type `T`, made with `T::default()` on first use.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = lock(&self.0);
        if let Some(found) = slots.iter().find_map(|s| s.clone().downcast::<T>().ok()) {
            return found;
        }
        let made = Arc::new(T::default());
        slots.push(made.clone());
        made
    }
}
