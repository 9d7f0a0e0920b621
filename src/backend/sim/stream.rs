//! The simulator's streams: one thread per stream executes its commands in order, keeping the
//! stream's actual vector clock, checking each kernel before it runs and delaying it at random.

use super::checker::{self, Origin, Running, Vc};
use super::event::{Owed, Record, SimEvent};
use super::{SimConfig, SimShared};
use crate::access::Access;
use crate::hazard::{Hazard, SimOp};
use crossbeam_channel::{unbounded, Receiver, Sender};
use smallvec::SmallVec;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

    /// A stream of the same machine that drops every command sent to it.
    pub(crate) fn discarding(&self) -> Self {
        SimStream { machine: self.machine, tx: None, thread: None }
    }

    fn send(&self, cmd: Cmd) {
        if let Some(tx) = &self.tx {
            // The receiver lives until this SimStream drops, so the send cannot fail.
            let _ = tx.send(cmd);
        }
    }

    pub(crate) fn record(&self, ev: &SimEvent) {
        self.send(Cmd::Record(ev.rerecord(self.machine)));
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
    /// this thread is enqueuing ([`naming`](super::naming)).
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
