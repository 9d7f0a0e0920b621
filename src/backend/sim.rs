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
//! stays on its machine; one of a lone device gets a fresh machine, as before.

mod checker;
mod config;

pub use config::{FenceMutation, SimConfig};

pub use crate::hazard::{Hazard, HazardKind, OpOrigin, SimOp};
pub(crate) use checker::{kernel_access, naming, Naming, OpText, Origin};

use crate::access::Access;
use checker::{Checker, Running, Vc};
use crossbeam_channel::{unbounded, Receiver, Sender};
use smallvec::SmallVec;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// A hazard a stream found and has not yet reported through a wait: handed to every event the
/// stream passes after it, and taken by the first wait that observes one of those.
#[derive(Default)]
struct Owed(Mutex<Option<Hazard>>);

/// One recording of a simulated event; completed with the recording stream's clock.
#[derive(Default)]
struct Record {
    /// The recording stream's machine ([`SimMachine::id`]): its clock means nothing on another.
    machine: usize,
    /// The recording stream's clock and the host time when the stream passed the record.
    done: Mutex<Option<(Arc<Vc>, Instant)>>,
    /// The simulated context had faulted when the stream passed the record.
    failed: std::sync::atomic::AtomicBool,
    /// A hazard the stream owed when it passed the record ([`SimConfig::fail_on_hazard`]).
    owed: std::sync::OnceLock<Arc<Owed>>,
    /// The owed hazard, once a wait on this record took it: later waits on it see it again.
    observed: std::sync::OnceLock<Hazard>,
    cv: Condvar,
}

impl Record {
    fn complete(&self, vc: Vc, failed: bool) {
        self.failed.store(failed, std::sync::atomic::Ordering::Release);
        *crate::sync::lock(&self.done) = Some((Arc::new(vc), Instant::now()));
        self.cv.notify_all();
    }

    fn outcome(&self, call: &'static str) -> crate::error::Result<()> {
        if self.failed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::error::Error::Driver { call, status: super::cuda::ILLEGAL_ADDRESS });
        }
        let hazard = match self.observed.get() {
            Some(h) => Some(h.clone()),
            None => self
                .owed
                .get()
                .and_then(|owed| crate::sync::lock(&owed.0).take())
                .map(|h| self.observed.get_or_init(|| h).clone()),
        };
        match hazard {
            Some(hazard) => Err(crate::error::Error::Hazard { hazard: Box::new(hazard), more: 0 }),
            None => Ok(()),
        }
    }

    fn wait(&self) -> Arc<Vc> {
        self.wait_done().0
    }

    fn wait_done(&self) -> (Arc<Vc>, Instant) {
        let mut g = crate::sync::lock(&self.done);
        loop {
            if let Some(done) = g.as_ref() {
                return done.clone();
            }
            g = crate::sync::wait(&self.cv, g);
        }
    }
}

/// A virtual event. Like a CUDA event, it refers to its most recent recording; a wait captures
/// the recording current when it is enqueued, so re-recording never changes earlier waits.
#[derive(Default)]
pub(crate) struct SimEvent {
    current: Mutex<Option<Arc<Record>>>,
}

impl SimEvent {
    fn current(&self) -> Option<Arc<Record>> {
        crate::sync::lock(&self.current).clone()
    }

    /// Whether the stream passed the recording; an error if the simulated context had
    /// faulted by then.
    pub(crate) fn query(&self) -> crate::error::Result<bool> {
        match self.current() {
            None => Ok(true),
            Some(r) if crate::sync::lock(&r.done).is_some() => r.outcome("cuEventQuery").map(|()| true),
            Some(_) => Ok(false),
        }
    }

    pub(crate) fn synchronize(&self) -> crate::error::Result<()> {
        match self.current() {
            None => Ok(()),
            Some(r) => {
                r.wait();
                r.outcome("cuEventSynchronize")
            }
        }
    }

    /// When the simulated stream passed the latest recording (waits for it); the simulation's
    /// stand-in for a CUDA timing event's timestamp.
    pub(crate) fn completed_at(&self) -> Instant {
        self.current().map_or_else(Instant::now, |r| r.wait_done().1)
    }
}

/// What a simulated kernel is: a host closure.
pub(crate) type SimKernel = Box<dyn FnOnce() + Send>;

enum Cmd {
    Run { uses: SmallVec<[(u64, Access); 4]>, origin: Option<Arc<Origin>>, f: SimKernel },
    Fault,
    Record(Arc<Record>),
    Wait(Arc<Record>),
}

/// A simulated stream: a thread executing commands in order.
pub(crate) struct SimStream {
    machine: usize,
    tx: Option<Sender<Cmd>>,
    thread: Option<JoinHandle<()>>,
}

impl SimStream {
    /// A stream of the device context `shared`; `index` (its index on the device) only names
    /// the thread: the checker numbers streams per machine.
    pub(crate) fn spawn(shared: Arc<SimShared>, index: u32) -> Self {
        let (tx, rx) = unbounded();
        let machine = shared.machine.id();
        let number = shared.machine.streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let thread = std::thread::Builder::new()
            .name(format!("cusched-sim-stream-{index}"))
            .spawn(move || run_stream(shared, number, rx));
        match thread {
            Ok(t) => SimStream { machine, tx: Some(tx), thread: Some(t) },
            // Without a thread nothing would ever execute; commands sent to a dropped receiver
            // are discarded, so fail loudly in the log and let waits hang-proof via is_done.
            Err(e) => {
                log::error!("cusched: could not spawn a simulated stream thread: {e}");
                SimStream { machine, tx: None, thread: None }
            }
        }
    }

    fn send(&self, cmd: Cmd) {
        if let Some(tx) = &self.tx {
            // The receiver lives until this SimStream drops, so the send cannot fail.
            let _ = tx.send(cmd);
        }
    }

    pub(crate) fn record(&self, ev: &SimEvent) {
        let rec = Arc::new(Record { machine: self.machine, ..Record::default() });
        *crate::sync::lock(&ev.current) = Some(rec.clone());
        self.send(Cmd::Record(rec));
    }

    pub(crate) fn wait(&self, ev: &SimEvent) {
        if let Some(rec) = ev.current() {
            self.send(Cmd::Wait(rec));
        }
    }

    /// Enqueues a simulated kernel that faults, poisoning the simulated context.
    pub(crate) fn fault(&self) {
        self.send(Cmd::Fault);
    }

    /// Enqueues a simulated kernel that declares `uses` to the checker, named by the launch
    /// this thread is enqueuing ([`naming`]).
    pub(crate) fn run(&self, uses: SmallVec<[(u64, Access); 4]>, f: SimKernel) {
        self.send(Cmd::Run { uses, origin: checker::current_origin(), f });
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // A kernel closure may hold the last reference to its own device; joining from the
            // stream's own thread would wait forever, so that thread is left to finish alone.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

fn run_stream(shared: Arc<SimShared>, index: u32, rx: Receiver<Cmd>) {
    let machine = shared.machine.id();
    let mut vc: Vc = vec![0; index as usize + 1];
    let mut rng = shared.config.seed ^ (u64::from(index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // The oldest hazard of this stream no wait has reported yet.
    let mut owed: Option<Arc<Owed>> = None;
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Cmd::Fault => shared.faulted.store(true, std::sync::atomic::Ordering::Release),
            // A faulted context runs nothing more (the kernel is dropped unrun).
            Cmd::Run { .. } if shared.faulted.load(std::sync::atomic::Ordering::Acquire) => {}
            Cmd::Run { uses, origin, f } => {
                delay(&shared.config, &mut rng);
                vc[index as usize] += 1;
                let op = SimOp { stream: index, op: vc[index as usize] };
                let mut found = shared.check(op, &vc, &uses, origin.as_ref());
                Running::enter(shared.clone(), op, uses, origin);
                let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
                found.extend(Running::leave());
                if panicked {
                    log::error!("cusched: a simulated kernel on stream {index} panicked");
                }
                if shared.config.fail_on_hazard {
                    owe(&mut owed, found);
                }
            }
            Cmd::Record(rec) => {
                // A hazard a wait has reported is owed no more.
                let still_owed = owed.as_ref().is_some_and(|o| crate::sync::lock(&o.0).is_some());
                match &owed {
                    Some(o) if still_owed => drop(rec.owed.set(o.clone())),
                    _ => owed = None,
                }
                rec.complete(vc.clone(), shared.faulted.load(std::sync::atomic::Ordering::Acquire))
            }
            // A record of another machine orders execution only: its clock counts other streams.
            Cmd::Wait(rec) if rec.machine != machine => drop(rec.wait()),
            Cmd::Wait(rec) => {
                let theirs = rec.wait();
                if vc.len() < theirs.len() {
                    vc.resize(theirs.len(), 0);
                }
                for (m, t) in vc.iter_mut().zip(theirs.iter()) {
                    *m = (*m).max(*t);
                }
            }
        }
    }
}

/// Makes the first of `found` the stream's owed hazard, unless an older one is still owed.
/// A new hazard gets a new slot: events passed before it must not report it.
fn owe(owed: &mut Option<Arc<Owed>>, found: Vec<Hazard>) {
    let Some(first) = found.into_iter().next() else { return };
    if owed.as_ref().is_some_and(|o| crate::sync::lock(&o.0).is_some()) {
        return;
    }
    *owed = Some(Arc::new(Owed(Mutex::new(Some(first)))));
}

fn delay(cfg: &SimConfig, rng: &mut u64) {
    let span = cfg.max_delay.saturating_sub(cfg.min_delay).as_nanos() as u64;
    let extra = if span == 0 { 0 } else { splitmix(rng) % (span + 1) };
    let d = cfg.min_delay + Duration::from_nanos(extra);
    if d.is_zero() {
        return;
    }
    if d >= Duration::from_micros(200) {
        std::thread::sleep(d);
        return;
    }
    // Short delays: sleeping would round up to the timer slack, so yield until the deadline.
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::thread::yield_now();
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
