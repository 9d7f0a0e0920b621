//! The captures open on each GPU, and a gate that keeps device-wide synchronizations out of
//! them.
//!
//! A `cudaDeviceSynchronize` from any thread, while a stream of its device is capturing, fails
//! with "operation not permitted when stream is capturing" and invalidates that capture
//! (thread-local capture mode too), and some libraries synchronize the device when their
//! handle is destroyed (`cublasDestroy` does). So the destroys the reaper makes wait until no
//! capture is open on their GPU ([`outside_captures`]), and no capture opens while one runs
//! or waits ([`opened`] waits for it): a graph dropped on one thread no longer breaks a
//! recording on another. Captures are short (one op each), so the waits are too. Keyed by GPU, so that a
//! device dropped inside a capture on another GPU (its reaper joined there) never waits for
//! that capture.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// One GPU's captures and the destroys waiting for them.
#[derive(Clone, Copy, Default)]
struct Gpu {
    /// Captures open now.
    open: usize,
    /// Destroys waiting for them to close: no capture opens meanwhile (on a thread that has
    /// none open), so that captures begun back to back on many threads cannot keep a destroy
    /// waiting for ever (its objects would pile up until allocations fail).
    waiting: usize,
}

/// Each GPU's state, by ordinal; [`outside_captures`] holds it while its destroy runs.
static GPUS: Mutex<Vec<Gpu>> = Mutex::new(Vec::new());
/// Signalled when a GPU's last open capture closes, and when a destroy is done.
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// Captures this thread has open: a destroy it makes meanwhile cannot wait for them, nor
    /// can a capture it opens wait for a destroy (which waits for them).
    static MINE: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread runs a destroy under the gate now: one nested in it (an object whose
    /// drop retires others) runs at once, the gate already held.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The states, under their lock. Unranked: a destroy holds it while it takes the crate's
/// locks, and it is taken with none of theirs held ([`opened`]'s callers take it first).
fn gpus() -> MutexGuard<'static, Vec<Gpu>> {
    GPUS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state of `gpu` in `all`, made if missing.
fn state(all: &mut Vec<Gpu>, gpu: usize) -> &mut Gpu {
    if all.len() <= gpu {
        all.resize(gpu + 1, Gpu::default());
    }
    &mut all[gpu]
}

fn mine() -> usize {
    MINE.try_with(Cell::get).unwrap_or(0)
}

/// Counts a capture this thread is about to begin on GPU `gpu`, once no destroy runs or
/// waits there. Call it before taking any lock the capture's begin needs, and [`closed`] once
/// the capture has ended (or failed to begin).
pub(crate) fn opened(gpu: usize) {
    let mut all = gpus();
    // A thread with a capture open goes on at once: the waiting destroy waits for it.
    while mine() == 0 && state(&mut all, gpu).waiting > 0 {
        all = CHANGED.wait(all).unwrap_or_else(PoisonError::into_inner);
    }
    state(&mut all, gpu).open += 1;
    drop(all);
    let _ = MINE.try_with(|m| m.set(m.get() + 1));
}

/// Counts a capture of this thread on `gpu` ended (or never begun after [`opened`]).
pub(crate) fn closed(gpu: usize) {
    let mut all = gpus();
    let g = state(&mut all, gpu);
    g.open = g.open.saturating_sub(1);
    if g.open == 0 {
        CHANGED.notify_all();
    }
    drop(all);
    let _ = MINE.try_with(|m| m.set(m.get().saturating_sub(1)));
}

/// Runs `destroy` (of an object of GPU `gpu`) once no capture is open on that GPU, with none
/// opening meanwhile. At once on a thread that has a capture open itself (waiting would never
/// end), or that runs a destroy under the gate already (one nested in it: the gate is held).
pub(crate) fn outside_captures<R>(gpu: usize, destroy: impl FnOnce() -> R) -> R {
    if mine() > 0 || HOLDING.try_with(Cell::get).unwrap_or(false) {
        return destroy();
    }
    let mut all = gpus();
    state(&mut all, gpu).waiting += 1;
    while state(&mut all, gpu).open > 0 {
        all = CHANGED.wait(all).unwrap_or_else(PoisonError::into_inner);
    }
    /// Clears `HOLDING` and counts the destroy done however it ends (the lock is held then).
    struct Held<'a>(&'a mut Vec<Gpu>, usize);
    impl Drop for Held<'_> {
        fn drop(&mut self) {
            let _ = HOLDING.try_with(|h| h.set(false));
            let g = state(self.0, self.1);
            g.waiting = g.waiting.saturating_sub(1);
            CHANGED.notify_all();
        }
    }
    let _ = HOLDING.try_with(|h| h.set(true));
    let held = Held(&mut all, gpu);
    let out = destroy();
    drop(held);
    drop(all);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_destroy_waits_for_the_open_captures_of_its_gpu_on_other_threads_and_holds_new_ones_back() {
        // A destroy nested in another runs at once (the gate is not taken twice).
        assert_eq!(outside_captures(7, || outside_captures(7, || 5)), 5);
        opened(7);
        // This thread's own capture: no wait.
        assert_eq!(outside_captures(7, || 7), 7);
        // Another GPU's destroy, on another thread: no wait either.
        std::thread::spawn(|| outside_captures(8, || ())).join().unwrap();
        let (tx, rx) = mpsc::channel();
        let other = std::thread::spawn(move || outside_captures(7, || tx.send(()).unwrap()));
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "the destroy ran while a capture was open");
        // While the destroy waits, this thread (a capture open) may open another; a thread
        // with none waits for the destroy.
        std::thread::sleep(Duration::from_millis(50));
        opened(7);
        closed(7);
        let (otx, orx) = mpsc::channel();
        let opener = std::thread::spawn(move || {
            opened(7);
            otx.send(()).unwrap();
            closed(7);
        });
        assert!(orx.recv_timeout(Duration::from_millis(100)).is_err(), "a capture opened while a destroy waited");
        closed(7);
        rx.recv_timeout(Duration::from_secs(10)).expect("the destroy runs once the capture closes");
        orx.recv_timeout(Duration::from_secs(10)).expect("the capture opens once the destroy is done");
        other.join().unwrap();
        opener.join().unwrap();
    }
}
