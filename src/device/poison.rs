//! Poisoned contexts: classifying driver errors, and rebuilding the context after a sticky one.
//!
//! A sticky status (an illegal address, a trap) leaves a context unusable: every later call in
//! it fails. The first such error is recorded with the context's epoch, every error of that
//! epoch then reports it as [`Error::ContextPoisoned`], and the device moves to a fresh context
//! once; handles made before become stale.

use super::DeviceShared;
use crate::backend::{cuda, BackendCtx};
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

/// What poisoned a context: the first failing call, and the context's epoch.
#[derive(Clone, Copy, Debug)]
pub(super) struct Poison {
    call: &'static str,
    status: cudarc::driver::DriverError,
    epoch: u64,
}

impl DeviceShared {
    /// Maps an error from work of context epoch `epoch`: a sticky driver status poisons that
    /// context (rebuilding it, once) and becomes [`Error::ContextPoisoned`] naming the first
    /// failing call; every other error passes through.
    pub(crate) fn classify(&self, err: Error, epoch: u64) -> Error {
        let (call, status) = match err {
            Error::Driver { call, status } if cuda::is_sticky(status) => (call, status),
            Error::ContextPoisoned { .. } => return err,
            other => return other,
        };
        let mut poison = crate::sync::lock(&self.poison);
        if let Some(p) = *poison {
            if p.epoch >= epoch {
                // That context was already poisoned (and rebuilt): report its first failure.
                return Error::ContextPoisoned { call: p.call, status: p.status };
            }
        }
        log::error!(
            "cusched: {call} failed with {:?}, which poisons the CUDA context of device {}; rebuilding it",
            status.0,
            self.label()
        );
        *poison = Some(Poison { call, status, epoch });
        if epoch == self.epoch() {
            if let Err(e) = self.rebuild() {
                // On current NVIDIA drivers an illegal-address fault is sticky for the whole
                // process: no new context can be made on the device. The device stays poisoned
                // and fails every new op at once instead of hanging or touching freed memory.
                log::error!(
                    "cusched: rebuilding the context of device {} failed ({e}); it stays poisoned, restart the process to use it again",
                    self.label()
                );
                self.dead.store(true, Ordering::Release);
            }
        }
        Error::ContextPoisoned { call, status }
    }

    /// The one funnel for driver results of work on this device: `r` unchanged when it is `Ok`,
    /// else its error through [`classify`](Self::classify) for context epoch `epoch` (the
    /// epoch the work or handle belongs to, not the device's current one).
    pub(crate) fn check<T>(&self, r: Result<T>, epoch: u64) -> Result<T> {
        r.map_err(|e| self.classify(e, epoch))
    }

    /// `Some(ContextPoisoned)` while the context is poisoned and could not be rebuilt.
    pub(crate) fn poisoned(&self) -> Option<Error> {
        if !self.dead.load(Ordering::Acquire) {
            return None;
        }
        let p = (*crate::sync::lock(&self.poison))?;
        Some(Error::ContextPoisoned { call: p.call, status: p.status })
    }

    /// Replaces the context: a fresh one, the same streams made anew in it, the event pool and
    /// tracer moved over, and every handle made before stale. Called under the poison lock;
    /// takes `stream_create`, so that a stream created meanwhile is either remade here or made
    /// in the new context, then the backend's write lock.
    ///
    /// The poisoned context is not destroyed here: handles made in it (buffers, events, kernels,
    /// library handles) still hold it, and their calls fail with errors instead of touching
    /// freed memory. It is destroyed when the last of them drops.
    fn rebuild(&self) -> Result<()> {
        // Handles made so far are stale from here on, whether or not a new context can be made.
        self.generation.fetch_add(1, Ordering::AcqRel);
        let _creating = crate::sync::lock(&self.stream_create);
        let fresh = match &self.backend() {
            BackendCtx::Cuda(_) => BackendCtx::Cuda(cuda::open_fresh(self.ordinal)?),
            BackendCtx::Sim(old) => BackendCtx::Sim(old.rebuilt()),
        };
        let streams: Vec<crate::backend::RawStream> =
            self.slots().map(|slot| fresh.new_stream(slot.id.index)).collect::<Result<_>>()?;
        #[cfg(test)]
        rebuild_hooks::at(self.uid, rebuild_hooks::Stage::ContextMade);
        // The generation advanced first: a preflight that sees a new stream also sees its old
        // buffers stale. The epoch advances with the context, under its lock (`backend_epoch`).
        let epoch = {
            let mut backend = crate::sync::write(&self.backend);
            *backend = fresh.clone();
            self.epoch.fetch_add(1, Ordering::AcqRel) + 1
        };
        self.events.reset(fresh.clone(), epoch);
        for (slot, raw) in self.slots().zip(streams) {
            slot.replace(raw, epoch);
            #[cfg(test)]
            rebuild_hooks::at(self.uid, rebuild_hooks::Stage::Replaced(slot.id.index));
        }
        if let Some(slot) = self.slot_by_index(0) {
            self.tracer.rebase(&fresh, &slot.raw());
        }
        log::warn!("cusched: device {} runs on a new context (epoch {epoch})", self.label());
        Ok(())
    }

    /// Returns once no rebuild is under way: a stream still of an earlier context than the
    /// device's is replaced by the rebuild that holds `stream_create`, before it lets go.
    pub(crate) fn await_rebuild(&self) {
        #[cfg(test)]
        rebuild_hooks::at(self.uid, rebuild_hooks::Stage::Awaited);
        drop(crate::sync::lock(&self.stream_create));
    }

    /// The error for work of context epoch `epoch` after the device moved to a newer context:
    /// the poison that made it move.
    pub(crate) fn poison_since(&self, epoch: u64) -> Error {
        match *crate::sync::lock(&self.poison) {
            Some(p) if p.epoch >= epoch => Error::ContextPoisoned { call: p.call, status: p.status },
            // A context is only ever replaced after a poison is recorded; this covers a reader
            // that saw the new epoch before the poison record (it is written first, but read
            // without the epoch's ordering here).
            _ => Error::ContextPoisoned { call: "a context rebuild", status: cuda::CONTEXT_IS_DESTROYED },
        }
    }
}

/// Test-only interposition in a rebuild, to open its window between the device's new context
/// and the last stream moved into it deterministically.
#[cfg(test)]
pub(crate) mod rebuild_hooks {
    use std::sync::{Arc, Mutex};

    /// Where a rebuild is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Stage {
        /// The new context and its streams are made; the device still runs on the old one.
        ContextMade,
        /// The stream of this index moved to the new context; those after it not yet.
        Replaced(u32),
        /// A thread waits for the rebuild to end.
        Awaited,
        /// Not a rebuild's: a preflight on the device has taken its marks and not yet fenced
        /// its stream (run on the preflighting thread).
        MarksTaken,
    }

    /// A hook, shared so that it runs outside the registry's lock.
    type Hook = Arc<dyn Fn(Stage) + Send + Sync>;

    /// Per device uid, what runs at each stage. Called outside this lock, so that a hook that
    /// blocks holds up only its own device's rebuild.
    static HOOKS: Mutex<Vec<(u32, Hook)>> = Mutex::new(Vec::new());

    /// Runs `hook` at every stage of every rebuild of the device of uid `device`, until
    /// [`off`] for that device.
    pub(crate) fn on(device: u32, hook: impl Fn(Stage) + Send + Sync + 'static) {
        crate::sync::lock(&HOOKS).push((device, Arc::new(hook)));
    }

    /// Drops the hooks of the device of uid `device` (with whatever they own).
    pub(crate) fn off(device: u32) {
        crate::sync::lock(&HOOKS).retain(|(d, _)| *d != device);
    }

    /// Runs the hooks of the device of uid `device` for `stage`.
    pub(crate) fn at(device: u32, stage: Stage) {
        let hooks: Vec<Hook> =
            crate::sync::lock(&HOOKS).iter().filter(|(d, _)| *d == device).map(|(_, h)| h.clone()).collect();
        for hook in hooks {
            hook(stage);
        }
    }
}
