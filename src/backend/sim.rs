//! The CPU simulation backend: one thread per stream, virtual events, host closures as
//! kernels with random delays, and a shadow happens-before checker.
//!
//! # The checker
//!
//! Independently of the tracker, every simulated stream thread keeps the *actual* vector clock
//! of its execution: it ticks its own entry for every kernel it runs, snapshots the clock into
//! an event when it executes a record, and joins the snapshot when it executes a wait on that
//! record. Before running a kernel, the thread checks the kernel's declared uses against each
//! buffer's history (last write, reads since): a conflicting earlier use whose position the
//! current clock does not cover is a hazard, i.e. a pair of conflicting uses left unordered.
//! Because clocks, not timing, decide, a missing fence is found whatever the interleaving.
//!
//! Declared uses are only what the recorder was told. While a kernel closure runs, its stream
//! thread also publishes the kernel (its op and declared uses) in a thread-local, and every
//! [`SimMem`](crate::SimMem) access from inside it is compared with those declarations: a
//! buffer touched without being declared, or written when declared read-only, is an
//! [`HazardKind::Undeclared`] hazard, whatever the timing.
//!
//! # Machines
//!
//! The checker belongs to a simulated *machine*, which numbers its streams and keeps one
//! history per buffer. A device made alone (`Device::sim`) is a machine of its own; devices
//! made together (`Device::sim_group`) share one, so that the checker sees every stream of
//! every one of them and a pair of conflicting uses on two devices (a peer copy, say) is
//! checked like a pair on one. Waits on events of another machine order execution but add no
//! happens-before edge: nothing is known across machines. A rebuilt context of a grouped device
//! stays on its machine; one of a lone device gets a fresh machine.
//!
//! # Files
//!
//! This file holds the machine and the context its streams share; [`checker`] the
//! happens-before checker and the names it reports with, [`config`] the public configuration,
//! [`event`] the virtual events, [`stream`] the stream threads that execute commands.

mod checker;
mod config;
mod event;
mod stream;

pub use config::{FenceMutation, SimConfig};
pub(crate) use event::SimEvent;
pub(crate) use stream::SimStream;

pub use crate::hazard::{Hazard, HazardKind, OpOrigin, SimOp};
pub(crate) use checker::{kernel_access, naming, Naming, OpText, Origin};

use crate::access::Access;
use checker::{Checker, Vc};
use std::sync::{Arc, Mutex};

/// What the streams of every device of one simulated machine share: the checker, and the
/// numbering of streams its clocks are indexed by.
#[derive(Default)]
pub(crate) struct SimMachine {
    checker: Mutex<Checker>,
    streams: std::sync::atomic::AtomicU32,
}

impl SimMachine {
    /// Identifies the machine in its streams' records, to tell waits within it from waits across.
    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }
}

/// State shared by all streams of one simulated device context.
pub(crate) struct SimShared {
    pub config: SimConfig,
    machine: Arc<SimMachine>,
    /// Made as one of a group sharing `machine`: a rebuilt context stays on it.
    grouped: bool,
    /// Set when a simulated kernel faulted: like a sticky CUDA error, every later event of this
    /// simulated context reports it and no later kernel runs.
    faulted: std::sync::atomic::AtomicBool,
}

impl SimShared {
    /// A device context on a machine of its own.
    pub(crate) fn new(config: SimConfig) -> Arc<Self> {
        Arc::new(SimShared { config, machine: Arc::default(), grouped: false, faulted: Default::default() })
    }

    /// `count` device contexts on one machine, whose checker sees all of them.
    pub(crate) fn group(config: &SimConfig, count: usize) -> Vec<Arc<Self>> {
        let machine = Arc::<SimMachine>::default();
        (0..count)
            .map(|_| {
                Arc::new(SimShared {
                    config: config.clone(),
                    machine: machine.clone(),
                    grouped: true,
                    faulted: Default::default(),
                })
            })
            .collect()
    }

    /// The context a rebuild moves to: on the same machine for a grouped device (its peers'
    /// checker must go on seeing it), on a fresh one for a lone device.
    pub(crate) fn rebuilt(&self) -> Arc<Self> {
        if !self.grouped {
            return SimShared::new(self.config.clone());
        }
        Arc::new(SimShared {
            config: self.config.clone(),
            machine: self.machine.clone(),
            grouped: true,
            faulted: Default::default(),
        })
    }

    /// Identifies the simulated machine this context is on: devices of one `sim_group` share it.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn machine_id(&self) -> usize {
        self.machine.id()
    }

    pub(crate) fn hazards(&self) -> Vec<Hazard> {
        crate::sync::lock(&self.machine.checker).hazards.clone()
    }

    /// Lists a hazard found outside the checker (a submit-order inversion at preflight);
    /// returns whether it fails the op ([`SimConfig::fail_on_hazard`]).
    pub(crate) fn note_hazard(&self, hazard: Hazard) -> bool {
        crate::sync::lock(&self.machine.checker).hazards.push(hazard);
        self.config.fail_on_hazard
    }

    pub(crate) fn kernels_run(&self) -> u64 {
        crate::sync::lock(&self.machine.checker).kernels
    }

    /// Checks kernel `me` against the machine's histories; returns (and logs) the hazards.
    fn check(&self, me: SimOp, vc: &Vc, uses: &[(u64, Access)], origin: Option<&Arc<Origin>>) -> Vec<Hazard> {
        let found = crate::sync::lock(&self.machine.checker).check(me, vc, uses, origin);
        for h in &found {
            log::error!("cusched: simulator: {h}");
        }
        found
    }

    /// Records (and logs) an undeclared access found while kernel `op` ran.
    fn undeclared(&self, op: SimOp, origin: Option<&Arc<Origin>>, buffer: u64, access: Access) -> Hazard {
        let hazard = crate::sync::lock(&self.machine.checker).undeclared(op, origin, buffer, access);
        log::error!("cusched: simulator: {hazard}");
        hazard
    }
}
