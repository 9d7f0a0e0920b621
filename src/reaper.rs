//! The per-device reaper: destroys library handles, plans and pinned memory after the GPU is
//! done with them, on their own context, on its own thread.
//!
//! Destroying such objects blocks: `cublasDestroy` and `cufftDestroy` synchronize, a pinned
//! free must wait for the copies that use it. Done in a `Drop` on the op path, that stalls the
//! caller for as long as the stream's work takes, with whatever context happens to be current.
//! Instead, an owner hands the object over with the events its GPU work must pass first; the
//! reaper thread (started on first use) waits for them, binds the object's context, drops it
//! under `catch_unwind`, and drains the errors cudarc saved in that context's `Drop`s, logging
//! them with what was destroyed, so that they never surface later on an unrelated call.
//!
//! # Lifecycle
//!
//! `NotStarted` → `Running` (first [`Reaper::defer`]) → `Closed` ([`Reaper::shutdown`], which
//! destroys everything queued and joins the thread). Objects handed over once closed are
//! destroyed on the caller's thread: that blocks, but only after the device has shut down.
//!
//! Objects of a poisoned context are abandoned: if waiting for their events fails, calling the
//! library on them could only fail or hang, so they are leaked (their memory goes with the
//! context).

use crate::track::EventRef;
use crossbeam_channel::{Receiver, Sender};
use cudarc::driver::CudaContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// One object to destroy.
pub(crate) struct Retired {
    /// What it is, for logs (`"a cuBLAS handle"`).
    pub what: &'static str,
    /// Events the GPU must pass before the object may be destroyed.
    pub after: Vec<EventRef>,
    /// The context to bind while dropping it (`None` on the simulator).
    pub ctx: Option<Arc<CudaContext>>,
    /// The object; its `Drop` does the destroying.
    pub object: Box<dyn Send>,
}

enum Msg {
    Reap(Retired),
    Shutdown,
}

/// A device's reaper thread and its queue.
pub(crate) struct Reaper {
    /// Written once, by the first `defer` (under `start`).
    thread: OnceLock<(Sender<Msg>, std::thread::ThreadId)>,
    join: Mutex<Option<JoinHandle<()>>>,
    start: crate::sync::Ranked<Mutex<()>, { crate::sync::rank::THREAD_START }>,
    /// Set by `shutdown`; `defer` then destroys on the caller's thread.
    closed: AtomicBool,
}

impl Default for Reaper {
    fn default() -> Self {
        Reaper {
            thread: OnceLock::new(),
            join: Mutex::new(None),
            start: crate::sync::Ranked::new(Mutex::new(())),
            closed: AtomicBool::new(false),
        }
    }
}

impl Reaper {
    /// Queues `item` for destruction once its events have passed.
    pub(crate) fn defer(&self, item: Retired) {
        if self.closed.load(Ordering::Acquire) {
            return reap(item);
        }
        let Some(tx) = self.sender() else { return reap(item) };
        if let Err(e) = tx.send(Msg::Reap(item)) {
            if let Msg::Reap(item) = e.0 {
                reap(item);
            }
        }
    }

    fn sender(&self) -> Option<&Sender<Msg>> {
        if let Some((tx, _)) = self.thread.get() {
            return Some(tx);
        }
        let _g = crate::sync::lock(&self.start);
        if self.thread.get().is_none() {
            let (tx, rx) = crossbeam_channel::unbounded();
            match std::thread::Builder::new().name("cusched-reaper".into()).spawn(move || reaper_loop(rx)) {
                Ok(h) => {
                    let _ = self.thread.set((tx, h.thread().id()));
                    *crate::sync::lock(&self.join) = Some(h);
                }
                Err(e) => {
                    log::error!("cusched: could not start the reaper thread ({e}); destroying on the caller's thread");
                    return None;
                }
            }
        }
        self.thread.get().map(|(tx, _)| tx)
    }

    /// Destroys everything queued (waiting for its GPU work) and joins the thread. Idempotent.
    pub(crate) fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // Serialized with a first `defer` starting the thread.
        let _g = crate::sync::lock(&self.start);
        if let Some((tx, id)) = self.thread.get() {
            let _ = tx.send(Msg::Shutdown);
            if *id == std::thread::current().id() {
                return;
            }
        }
        if let Some(h) = crate::sync::lock(&self.join).take() {
            let _ = h.join();
        }
    }
}

fn reaper_loop(rx: Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Reap(item) => reap(item),
            Msg::Shutdown => {
                while let Ok(Msg::Reap(item)) = rx.try_recv() {
                    reap(item);
                }
                return;
            }
        }
    }
}

/// Waits for the item's events, then drops it with its context bound.
fn reap(item: Retired) {
    let Retired { what, after, ctx, object } = item;
    for ev in &after {
        if let Err(e) = ev.synchronize() {
            log::error!("cusched: {what} is abandoned, not destroyed: waiting for its GPU work failed ({e})");
            std::mem::forget(object);
            return;
        }
    }
    drop(after);
    match ctx {
        // Some destroys synchronize the whole device, which would invalidate a capture open
        // on another thread: they wait for it to end.
        Some(ctx) => crate::backend::cuda::captures::outside_captures(ctx.ordinal(), || {
            crate::backend::cuda::drop_bound(&ctx, &what, object)
        }),
        None => {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(object))).is_err() {
                log::error!("cusched: destroying {what} panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{backend::sim::SimConfig, device::Device, recorder::LaunchRecorder};
    use std::sync::mpsc;
    use std::time::Duration;

    struct Probe(mpsc::Sender<String>);
    impl Drop for Probe {
        fn drop(&mut self) {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            let _ = self.0.send(name);
        }
    }

    struct Panics;
    impl Drop for Panics {
        fn drop(&mut self) {
            panic!("a Drop that panics");
        }
    }

    #[test]
    fn objects_drop_on_the_reaper_thread_only_after_their_event_and_panics_are_caught() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let s = d.default_stream();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        LaunchRecorder::new_strict(s)
            .launch(&d, |scope| {
                scope.sim_kernel(move || {
                    let _ = release_rx.recv_timeout(Duration::from_secs(60));
                })
            })
            .unwrap();
        let ev = d.shared.record(s).unwrap();
        let (tx, rx) = mpsc::channel();
        let reaper = Reaper::default();
        reaper.defer(Retired {
            what: "a panicking object",
            after: vec![ev.clone()],
            ctx: None,
            object: Box::new(Panics),
        });
        reaper.defer(Retired { what: "a probe", after: vec![ev], ctx: None, object: Box::new(Probe(tx)) });
        // The kernel is still blocked, so nothing may have been dropped.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "dropped before its event passed");
        release_tx.send(()).unwrap();
        let on = rx.recv_timeout(Duration::from_secs(60)).expect("dropped once the event passed");
        assert_eq!(on, "cusched-reaper");
        reaper.shutdown();
    }

    #[test]
    fn shutdown_destroys_what_is_queued_and_later_objects_drop_on_the_caller() {
        let reaper = Reaper::default();
        let (tx, rx) = mpsc::channel();
        reaper.defer(Retired { what: "a probe", after: Vec::new(), ctx: None, object: Box::new(Probe(tx.clone())) });
        reaper.shutdown();
        assert_eq!(rx.try_recv().unwrap(), "cusched-reaper");
        reaper.defer(Retired { what: "a probe", after: Vec::new(), ctx: None, object: Box::new(Probe(tx)) });
        let here = std::thread::current().name().unwrap_or("?").to_string();
        assert_eq!(rx.try_recv().unwrap(), here);
    }
}
