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

use crate::access::Access;
use crossbeam_channel::{unbounded, Receiver, Sender};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Settings of a simulated device.
///
/// The defaults: delays uniform in 0..50 µs, a fixed seed, fencing on.
///
/// ```
/// use cusched::{Device, SimConfig};
/// use std::time::Duration;
///
/// // Slower simulated kernels widen the windows in which a missing fence would show.
/// let config = SimConfig { max_delay: Duration::from_millis(1), ..SimConfig::default() };
/// let device = Device::sim(config)?;
/// assert!(device.is_simulated());
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Shortest time a simulated kernel takes before it runs. Default zero.
    pub min_delay: Duration,
    /// Longest time a simulated kernel takes; each takes a uniform random time in between.
    /// Default 50 µs.
    pub max_delay: Duration,
    /// Seed of the delay generator, for reproducible interleavings. Default `0x5eed`.
    pub seed: u64,
    /// Checker self-test switch: `Some` makes the tracker break one ordering rule on purpose,
    /// so that tests can prove the hazard checker reports the races that result. Leave it
    /// `None` everywhere else.
    pub fence_mutation: Option<FenceMutation>,
    /// The compute capability the simulated device reports through
    /// [`Device::compute_capability`](crate::Device::compute_capability), for testing what
    /// ops refuse on older GPUs. Default `(9, 0)` (Hopper).
    pub compute_capability: (u32, u32),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            min_delay: Duration::ZERO,
            max_delay: Duration::from_micros(50),
            seed: 0x5eed,
            fence_mutation: None,
            compute_capability: (9, 0),
        }
    }
}

/// An ordering rule the tracker breaks on purpose ([`SimConfig::fence_mutation`]), to prove
/// that the hazard checker catches each rule's violation with the expected [`HazardKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceMutation {
    /// No stream ever waits: every cross-stream pair of conflicting uses is left unordered.
    NoFences,
    /// A write waits only for the most recent read since the last write, not for the newest
    /// read of every stream (a single read event per buffer). Breaks write-after-read.
    LatestReaderOnly,
    /// A buffer's allocation (or adoption) is not recorded as a write, so a first use on
    /// another stream does not wait for it. Breaks read-after-write (and write-after-write).
    NoAllocationWrite,
    /// A free does not wait for the buffer's outstanding uses. Breaks write-after-read (and
    /// write-after-write) against the free.
    NoFreeFence,
    /// A read does not wait for the last write when that write was on another stream.
    /// Breaks read-after-write across streams.
    NoCrossStreamRaw,
    /// When a device that has used one stream so far starts using a second, the second does
    /// not wait for the first stream's work (whose launches left the buffer states out).
    /// Breaks read-after-write (and write-after-read) against that earlier work.
    NoSoloFloor,
}

/// Which ordering rule a hazard broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HazardKind {
    /// A read not ordered after the write before it.
    ReadAfterWrite,
    /// A write not ordered after a read before it.
    WriteAfterRead,
    /// A write not ordered after the write before it.
    WriteAfterWrite,
    /// A kernel accessed a buffer it did not declare, or wrote one it declared read-only.
    /// Such an access is unfenced whatever the timing, since fences follow declarations.
    Undeclared,
}

/// A simulated operation: the `op`-th kernel run by stream `stream` of its simulated machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimOp {
    /// The stream's number on its simulated machine, in creation order: for a device made
    /// alone, its index on the device; for devices of one `Device::sim_group`, numbered across
    /// all of them.
    pub stream: u32,
    /// 1-based count of kernels that stream had run.
    pub op: u64,
}

/// Two conflicting uses of one buffer that nothing ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hazard {
    /// The buffer's id (`buffer #N` in errors).
    pub buffer: u64,
    /// The rule broken.
    pub kind: HazardKind,
    /// The use that ran first. For [`HazardKind::Undeclared`], the offending kernel.
    pub earlier: SimOp,
    /// The use that ran second without waiting for it. For [`HazardKind::Undeclared`], the
    /// offending kernel.
    pub later: SimOp,
}

#[derive(Default)]
struct History {
    last_write: Option<SimOp>,
    reads: Vec<SimOp>,
}

#[derive(Default)]
struct Checker {
    histories: HashMap<u64, History>,
    hazards: Vec<Hazard>,
    kernels: u64,
}

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

type Vc = Vec<u64>;

fn covers(vc: &Vc, op: SimOp) -> bool {
    vc.get(op.stream as usize).copied().unwrap_or(0) >= op.op
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

    pub(crate) fn kernels_run(&self) -> u64 {
        crate::sync::lock(&self.machine.checker).kernels
    }

    fn report(&self, hazard: Hazard) {
        crate::sync::lock(&self.machine.checker).hazards.push(hazard);
    }

    fn check(&self, me: SimOp, vc: &Vc, uses: &[(u64, Access)]) {
        let mut ck = crate::sync::lock(&self.machine.checker);
        ck.kernels += 1;
        let Checker { histories, hazards, .. } = &mut *ck;
        for &(buffer, access) in uses {
            let h = histories.entry(buffer).or_default();
            let mut flag = |kind, earlier: SimOp| {
                if !covers(vc, earlier) {
                    hazards.push(Hazard { buffer, kind, earlier, later: me });
                }
            };
            if let Some(w) = h.last_write {
                flag(if access.writes() { HazardKind::WriteAfterWrite } else { HazardKind::ReadAfterWrite }, w);
            }
            if access.writes() {
                for &r in &h.reads {
                    flag(HazardKind::WriteAfterRead, r);
                }
                h.last_write = Some(me);
                h.reads.clear();
            } else {
                h.reads.retain(|r| r.stream != me.stream);
                h.reads.push(me);
            }
        }
    }
}

/// One recording of a simulated event; completed with the recording stream's clock.
#[derive(Default)]
struct Record {
    /// The recording stream's machine ([`SimMachine::id`]): its clock means nothing on another.
    machine: usize,
    /// The recording stream's clock and the host time when the stream passed the record.
    done: Mutex<Option<(Arc<Vc>, Instant)>>,
    /// The simulated context had faulted when the stream passed the record.
    failed: std::sync::atomic::AtomicBool,
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
        Ok(())
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
    Run { uses: SmallVec<[(u64, Access); 4]>, f: SimKernel },
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

    /// Enqueues a simulated kernel that declares `uses` to the checker.
    pub(crate) fn run(&self, uses: SmallVec<[(u64, Access); 4]>, f: SimKernel) {
        self.send(Cmd::Run { uses, f });
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
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Cmd::Fault => shared.faulted.store(true, std::sync::atomic::Ordering::Release),
            // A faulted context runs nothing more (the kernel is dropped unrun).
            Cmd::Run { .. } if shared.faulted.load(std::sync::atomic::Ordering::Acquire) => {}
            Cmd::Run { uses, f } => {
                delay(&shared.config, &mut rng);
                vc[index as usize] += 1;
                let op = SimOp { stream: index, op: vc[index as usize] };
                shared.check(op, &vc, &uses);
                RUNNING.with(|r| {
                    *r.borrow_mut() = Some(Running { shared: shared.clone(), op, uses, reported: SmallVec::new() })
                });
                let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
                RUNNING.with(|r| r.borrow_mut().take());
                if panicked {
                    log::error!("cusched: a simulated kernel on stream {index} panicked");
                }
            }
            Cmd::Record(rec) => rec.complete(vc.clone(), shared.faulted.load(std::sync::atomic::Ordering::Acquire)),
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

/// The kernel a simulated stream thread is running, for [`kernel_access`].
struct Running {
    shared: Arc<SimShared>,
    op: SimOp,
    uses: SmallVec<[(u64, Access); 4]>,
    /// Undeclared (buffer, wrote) pairs already reported, so a kernel that touches a buffer
    /// in a loop reports it once.
    reported: SmallVec<[(u64, bool); 2]>,
}

thread_local! {
    static RUNNING: RefCell<Option<Running>> = const { RefCell::new(None) };
}

/// Reports an actual access to simulated buffer `buffer`. Inside a simulated kernel, an access
/// its recorder did not declare is an [`HazardKind::Undeclared`] hazard; a read is covered by
/// any declared use, since a declared write is fenced at least as strictly as a read. Outside
/// any kernel (host code) it is not a kernel access and is ignored.
pub(crate) fn kernel_access(buffer: u64, access: Access) {
    RUNNING.with(|r| {
        // A guard dropped while the thread-local is being torn down, or a re-entrant access
        // from within this function, has no kernel to blame.
        let Ok(mut r) = r.try_borrow_mut() else { return };
        let Some(k) = r.as_mut() else { return };
        let declared = k.uses.iter().find(|(b, _)| *b == buffer).map(|&(_, a)| a);
        if declared.is_some_and(|d| d.writes() || !access.writes()) {
            return;
        }
        let key = (buffer, access.writes());
        if k.reported.contains(&key) {
            return;
        }
        k.reported.push(key);
        k.shared.report(Hazard { buffer, kind: HazardKind::Undeclared, earlier: k.op, later: k.op });
    });
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
