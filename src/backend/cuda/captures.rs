//! The captures open on each GPU, and a gate that keeps device-wide synchronizations out of
//! them.
//!
//! A `cudaDeviceSynchronize` from any thread, while a stream of its device is capturing, fails
//! with "operation not permitted when stream is capturing" and invalidates that capture
//! (thread-local capture mode too), and some libraries synchronize the device when their
//! handle is destroyed (`cublasDestroy` does; so does freeing pinned memory). Other calls
//! fail beside a capture and break it the same way: a cuRAND pseudo-random generator's first
//! draw after its seed or offset is set, which sets up its state (cuRAND of CUDA 13.0), fails
//! with `CURAND_STATUS_LAUNCH_FAILURE` and invalidates every capture open on the GPU. So such
//! calls wait until no capture is open on their GPU ([`outside_captures`]), and no capture
//! opens there while one runs or waits ([`Opened::new`] waits for it): a graph dropped, or a
//! random draw made, on one thread no longer breaks a recording on another. Captures are
//! short (one op each), so the waits are too.
//!
//! Keyed by GPU: a gated call never waits for a capture on another GPU, and no lock is held
//! while it runs, so a destroy that drops a device (joining its threads) or synchronizes a GPU
//! whose work waits for another GPU's (a collective) holds nothing another GPU's captures
//! need. A thread with a capture open on the GPU, or inside a gated call for it already, goes
//! on at once: waiting would be waiting for itself. Such a thread must not join a device's
//! threads either ([`must_not_join`]): one of them may be waiting for it.

use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::LocalKey;

/// A thread's list of GPU ordinals ([`MINE`], [`HOLDING`]).
type Gpus = &'static LocalKey<RefCell<Vec<usize>>>;

/// One GPU's captures and destroys.
#[derive(Clone, Copy, Default)]
struct Gpu {
    /// Captures open now.
    open: usize,
    /// Destroys waiting for them to close: no capture opens meanwhile, so that captures begun
    /// back to back on many threads cannot keep a destroy waiting for ever.
    waiting: usize,
    /// Destroys running now: no capture opens until they are done.
    running: usize,
    /// Threads asleep on [`CHANGED`] for this GPU: a change wakes them only if there are any,
    /// so that an uncontended gate never calls into the kernel.
    asleep: usize,
}

/// Each GPU's state, by ordinal. Held only to read or change the counts, never while a
/// destroy runs.
static GPUS: Mutex<Vec<Gpu>> = Mutex::new(Vec::new());
/// Signalled when a GPU's last open capture closes, and when a destroy is done.
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// The GPU of each capture this thread has open.
    static MINE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The GPU of each destroy this thread runs under the gate now (nested ones included).
    static HOLDING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The states, under their lock. Unranked: a leaf, taken with any of the crate's locks held
/// or none, and nothing is taken under it.
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

/// Waits on [`CHANGED`] for a change on `gpu`, counted among its sleepers meanwhile.
fn sleep(mut all: MutexGuard<'static, Vec<Gpu>>, gpu: usize) -> MutexGuard<'static, Vec<Gpu>> {
    state(&mut all, gpu).asleep += 1;
    let mut all = CHANGED.wait(all).unwrap_or_else(PoisonError::into_inner);
    let g = state(&mut all, gpu);
    g.asleep = g.asleep.saturating_sub(1);
    all
}

/// Whether this thread's list `list` holds `gpu` (false during thread teardown).
fn has(list: Gpus, gpu: usize) -> bool {
    list.try_with(|l| l.borrow().contains(&gpu)).unwrap_or(false)
}

fn push(list: Gpus, gpu: usize) {
    let _ = list.try_with(|l| l.borrow_mut().push(gpu));
}

fn remove(list: Gpus, gpu: usize) {
    let _ = list.try_with(|l| {
        let mut l = l.borrow_mut();
        if let Some(i) = l.iter().rposition(|&g| g == gpu) {
            l.swap_remove(i);
        }
    });
}

/// A capture counted open on a GPU: made before the capture begins, once no destroy runs or
/// waits there. Dropped, it counts the capture closed (one that failed to begin, however);
/// once begun, [`begun`](Self::begun) hands the count to [`closed`], called when the capture
/// ends.
pub(crate) struct Opened {
    gpu: usize,
}

impl Opened {
    /// Counts a capture this thread is about to begin on GPU `gpu`. Make it before taking any
    /// lock the capture's begin needs (the wait may be long: a destroy synchronizing the GPU).
    pub(crate) fn new(gpu: usize) -> Opened {
        let mut all = gpus();
        // A thread with a capture open there goes on at once: the waiting destroy waits for it.
        while !has(&MINE, gpu) && {
            let g = state(&mut all, gpu);
            g.waiting > 0 || g.running > 0
        } {
            all = sleep(all, gpu);
        }
        state(&mut all, gpu).open += 1;
        drop(all);
        push(&MINE, gpu);
        Opened { gpu }
    }

    /// The capture has begun: [`closed`] counts it closed when it ends.
    pub(crate) fn begun(self) {
        std::mem::forget(self);
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        closed(self.gpu);
    }
}

/// Counts a capture of this thread on GPU `gpu` closed: one whose [`Opened`] was
/// [`begun`](Opened::begun), once it has ended.
pub(crate) fn closed(gpu: usize) {
    let mut all = gpus();
    let g = state(&mut all, gpu);
    g.open = g.open.saturating_sub(1);
    if g.open == 0 && g.asleep > 0 {
        CHANGED.notify_all();
    }
    drop(all);
    remove(&MINE, gpu);
}

/// Runs `destroy` (of an object of GPU `gpu`) once no capture is open on that GPU, with none
/// opening until it is done. At once on a thread that has a capture open there, or runs a
/// destroy for it already (one nested in another).
pub(crate) fn outside_captures<R>(gpu: usize, destroy: impl FnOnce() -> R) -> R {
    if has(&MINE, gpu) || has(&HOLDING, gpu) {
        return destroy();
    }
    {
        let mut all = gpus();
        state(&mut all, gpu).waiting += 1;
        while state(&mut all, gpu).open > 0 {
            all = sleep(all, gpu);
        }
        let g = state(&mut all, gpu);
        g.waiting -= 1;
        g.running += 1;
    }
    /// Counts the destroy done however it ends.
    struct Running(usize);
    impl Drop for Running {
        fn drop(&mut self) {
            remove(&HOLDING, self.0);
            let mut all = gpus();
            let g = state(&mut all, self.0);
            g.running = g.running.saturating_sub(1);
            if g.asleep > 0 {
                CHANGED.notify_all();
            }
        }
    }
    push(&HOLDING, gpu);
    let running = Running(gpu);
    let out = destroy();
    drop(running);
    out
}

/// [`outside_captures`] for an object of the GPU whose context is current on this thread: for
/// a destroy made where its GPU is known only by the bound context (a library object dropped
/// where its setup failed). At once where no context is current.
pub(crate) fn outside_captures_of_current<R>(destroy: impl FnOnce() -> R) -> R {
    match super::current_ordinal() {
        Some(gpu) => outside_captures(gpu, destroy),
        None => destroy(),
    }
}

/// Whether this thread has a capture open or runs a gated destroy: joining a device's threads
/// from here could wait for ever (one of them may be waiting for this thread's capture to
/// close, or for this destroy to end, before it can go on).
pub(crate) fn must_not_join() -> bool {
    let busy = |list: Gpus| list.try_with(|l| !l.borrow().is_empty()).unwrap_or(false);
    busy(&MINE) || busy(&HOLDING)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_destroy_waits_for_the_open_captures_of_its_gpu_on_other_threads_and_holds_new_ones_back() {
        // A destroy nested in another runs at once (it would wait for itself).
        assert_eq!(outside_captures(7, || outside_captures(7, || 5)), 5);
        assert!(!must_not_join());
        let mine = Opened::new(7);
        assert!(must_not_join());
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
        drop(Opened::new(7));
        let (otx, orx) = mpsc::channel();
        let opener = std::thread::spawn(move || {
            let opened = Opened::new(7);
            otx.send(()).unwrap();
            drop(opened);
        });
        assert!(orx.recv_timeout(Duration::from_millis(100)).is_err(), "a capture opened while a destroy waited");
        drop(mine);
        assert!(!must_not_join());
        rx.recv_timeout(Duration::from_secs(10)).expect("the destroy runs once the capture closes");
        orx.recv_timeout(Duration::from_secs(10)).expect("the capture opens once the destroy is done");
        other.join().unwrap();
        opener.join().unwrap();
    }

    #[test]
    fn a_running_destroy_holds_no_lock_and_other_gpus_go_on() {
        let (in_tx, in_rx) = mpsc::channel();
        let (out_tx, out_rx) = mpsc::channel::<()>();
        let destroy = std::thread::spawn(move || {
            outside_captures(9, || {
                in_tx.send(()).unwrap();
                out_rx.recv().unwrap();
            })
        });
        in_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Another GPU's captures open and close while GPU 9's destroy runs.
        drop(Opened::new(10));
        // GPU 9's wait until it is done.
        let (otx, orx) = mpsc::channel();
        let opener = std::thread::spawn(move || {
            drop(Opened::new(9));
            otx.send(()).unwrap();
        });
        assert!(orx.recv_timeout(Duration::from_millis(100)).is_err(), "a capture opened while a destroy ran");
        out_tx.send(()).unwrap();
        orx.recv_timeout(Duration::from_secs(10)).expect("the capture opens once the destroy is done");
        destroy.join().unwrap();
        opener.join().unwrap();
    }
}
