//! A CUDA communicator and its watchdog: a thread per communicator that, while ops are
//! pending, polls NCCL's asynchronous error and the ops' ages, and on a fault marks every
//! pending op failed and aborts the communicator, so that its kernels return and nothing
//! waits forever. It also destroys the communicator once the last handle is gone and its ops
//! have finished.

use super::calls::{self, RawComm};
use super::slots::{Book, End, Slots, Ticket, DONE, ENQUEUING, FAILED, PENDING};
use crate::device::Device;
use crate::error::{CollectiveFault, Error, Result};
use crate::track::{EventRef, PassMark};
use cudarc::driver::CudaContext;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How often the watchdog looks while ops are pending.
const POLL: Duration = Duration::from_millis(2);

/// How long a watchdog with nothing pending keeps looking on its timer before it sleeps until
/// woken: while ops keep coming it is never asleep, so enqueueing one never wakes it.
const LINGER: Duration = Duration::from_millis(100);

/// How an op is followed: its slot, or failed from the start (its communicator had faulted
/// when it was enqueued).
#[derive(Clone, Copy, Debug)]
pub(super) enum Watch {
    Slot(Ticket),
    Failed,
    /// Not followed (no slot left): its completion stands on its event alone.
    Unwatched,
}

impl Watch {
    const SLOT: u128 = 1 << 126;
    const FAILED: u128 = 1 << 127;

    /// The watch as a completion's verdict token.
    pub(super) fn token(self) -> u128 {
        match self {
            Watch::Slot(t) => Self::SLOT | t.to_bits(),
            Watch::Failed => Self::FAILED,
            Watch::Unwatched => 0,
        }
    }

    /// The watch [`token`](Self::token) made.
    pub(super) fn from_token(token: u128) -> Watch {
        if token & Self::FAILED != 0 {
            Watch::Failed
        } else if token & Self::SLOT != 0 {
            Watch::Slot(Ticket::from_bits(token & !Self::SLOT))
        } else {
            Watch::Unwatched
        }
    }
}

impl End for EventRef {
    type Mark = PassMark;
    fn mark(&self) -> PassMark {
        self.pass_mark()
    }
    fn covers(&self, earlier: &PassMark) -> bool {
        earlier.covered_by(self)
    }
    fn known_done(mark: &PassMark) -> bool {
        mark.known_done()
    }
    fn gone(mark: &PassMark) -> bool {
        mark.context_replaced()
    }
}

/// The communicator handle, `None` once aborted or destroyed.
struct Raw(RawComm);
// SAFETY: an NCCL communicator may be used from any thread, one at a time: every use goes
// through `Shared::state`'s lock.
unsafe impl Send for Raw {}

pub(super) struct State {
    raw: Option<Raw>,
    fault: Option<Error>,
    /// The ops being followed: their slots' bookkeeping.
    book: Book,
    closing: bool,
    /// The watchdog sleeps without a timeout: the next op wakes it.
    asleep: bool,
}

impl State {
    /// The live communicator, or the error every op gets once it has faulted.
    pub(super) fn raw(&self) -> Result<RawComm> {
        match (&self.raw, &self.fault) {
            (Some(r), None) => Ok(r.0),
            (_, fault) => Err(aborted(fault.as_ref())),
        }
    }
}

struct Shared {
    state: Mutex<State>,
    /// The ops' slots, read without the lock by their completions.
    slots: Slots<EventRef>,
    /// The fault, once declared, readable without the lock (which an abort in progress holds).
    fault: OnceLock<Error>,
    wake: Condvar,
    ctx: Option<Arc<CudaContext>>,
    timeout: Duration,
    /// Whether the communicator is blocking (its shrink makes a blocking one too).
    blocking: bool,
}

/// A CUDA communicator, watched.
pub(super) struct CudaComm {
    shared: Arc<Shared>,
    /// The watchdog, joined on drop: it destroys the communicator, which must happen before
    /// the process (or the device's context) goes away under NCCL's own threads.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CudaComm {
    /// Watches `raw`, a ready communicator on `device`.
    pub(super) fn new(raw: RawComm, device: &Device, timeout: Duration, blocking: bool) -> CudaComm {
        let ctx = device.shared.cuda_ctx("nccl").ok();
        let state = State { raw: Some(Raw(raw)), fault: None, book: Book::default(), closing: false, asleep: false };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            slots: Slots::default(),
            fault: OnceLock::new(),
            wake: Condvar::new(),
            ctx,
            timeout,
            blocking,
        });
        let watched = shared.clone();
        let spawned = std::thread::Builder::new().name("cusched-nccl-watch".into()).spawn(move || watch(&watched));
        let thread = match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                // Without the thread nothing detects a dead peer: say so, and keep working.
                log::error!(
                    "cusched: could not start an NCCL communicator's watchdog ({e}); its faults will not be detected"
                );
                None
            }
        };
        CudaComm { shared, thread }
    }

    /// Locks the communicator for enqueueing (one thread at a time uses it).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock_unranked(&self.shared.state)
    }

    /// Whether NCCL's calls on this communicator return only once they are done.
    pub(super) fn blocking(&self) -> bool {
        self.shared.blocking
    }

    /// The fault that ended the communicator, if any.
    pub(super) fn fault(&self) -> Option<Error> {
        self.shared.fault.get().cloned()
    }

    /// Declares `fault`: fails every pending op and aborts the communicator.
    pub(super) fn declare(&self, fault: Error) {
        let mut st = self.lock();
        declare(&mut st, fault, &self.shared);
    }

    /// [`declare`](Self::declare) on a state the caller holds.
    pub(super) fn declare_locked(&self, st: &mut State, fault: Error) {
        declare(st, fault, &self.shared);
    }

    /// Follows an op enqueued now on the communicator, whose lock the caller holds (the one it
    /// enqueued the op under): its end is published once its launch commits.
    pub(super) fn watch_locked(&self, st: &mut State) -> Watch {
        if st.fault.is_some() {
            // It went to a communicator that faulted before it could be followed.
            return Watch::Failed;
        }
        let watch = match self.shared.slots.claim(&mut st.book) {
            Some(t) => Watch::Slot(t),
            None => Watch::Unwatched,
        };
        if st.asleep {
            // A watchdog that had been idle for a while: the one op path that wakes it.
            st.asleep = false;
            self.shared.wake.notify_all();
        }
        watch
    }

    /// The op of `watch` has committed with `event` as its end (`None`: it has nothing to wait
    /// for).
    pub(super) fn publish(&self, watch: Watch, event: Option<EventRef>) {
        if let Watch::Slot(t) = watch {
            self.shared.slots.publish(t, event);
        }
    }

    /// Whether the watchdog failed `watch`'s op (it was pending when the communicator faulted).
    pub(super) fn failed(&self, watch: Watch) -> bool {
        match watch {
            Watch::Slot(t) => self.shared.slots.state(t) == FAILED,
            Watch::Failed => true,
            Watch::Unwatched => false,
        }
    }

    /// The device's context, which NCCL's calls on this communicator run in.
    pub(super) fn context(&self) -> Option<&Arc<CudaContext>> {
        self.shared.ctx.as_ref()
    }

    /// `ncclCommShrink` on the live communicator.
    pub(super) fn shrink(&self, exclude: &[usize]) -> Result<Option<RawComm>> {
        let st = self.lock();
        let raw = st.raw()?;
        if let Some(ctx) = &self.shared.ctx {
            crate::backend::cuda::bind(ctx)?;
        }
        let mut ranks = exclude.iter().map(|&r| r as std::ffi::c_int).collect::<Vec<_>>();
        // SAFETY: `raw` is live and locked by this thread; its context is current.
        let slot = unsafe { calls::shrink(raw, &mut ranks, self.shared.blocking) }?;
        // The parent is in progress too until the shrink is done (non-blocking communicators):
        // nothing else may use it meanwhile, and the new handle is read only then.
        let deadline = Instant::now() + self.shared.timeout;
        let parent_ready = calls::wait_ready(&[raw], "ncclCommShrink", deadline);
        let new = match parent_ready {
            Ok(()) => Some(*slot).filter(|n| !n.is_null()),
            Err(_) => {
                // Not done: NCCL may still write the slot, which must then stay allocated.
                Box::leak(slot);
                None
            }
        };
        let ready =
            parent_ready.and_then(|()| new.map_or(Ok(()), |n| calls::wait_ready(&[n], "ncclCommShrink", deadline)));
        drop(st);
        if let Err(e) = ready {
            if let Some(n) = new {
                calls::abort(n);
            }
            return Err(e);
        }
        Ok(new)
    }

    /// The error the ops of `op`'s communicator get when the watchdog failed `op`.
    pub(super) fn failure(&self) -> Error {
        aborted(self.shared.fault.get())
    }
}

impl Drop for CudaComm {
    fn drop(&mut self) {
        // The watchdog destroys the communicator once its pending ops are done (or the
        // timeout failed them). Waited for here: NCCL's proxy threads outliving the
        // communicator's owner crashed processes at exit. A communicator is dropped at
        // teardown, not on the op path.
        self.lock().closing = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// The error of an op on a communicator that faulted (with `fault`).
fn aborted(fault: Option<&Error>) -> Error {
    match fault {
        Some(e) => e.clone(),
        None => Error::Collective {
            call: "nccl",
            fault: CollectiveFault::Aborted,
            detail: "the communicator is gone".into(),
        },
    }
}

fn declare(st: &mut State, fault: Error, shared: &Shared) {
    if st.fault.is_none() {
        log::error!("cusched: an NCCL communicator faulted ({fault}); aborting it");
        let _ = shared.fault.set(fault.clone());
        st.fault = Some(fault);
    }
    // Failed before the abort lets their kernels return: a completion that resolves because
    // its kernel was stopped sees the failure.
    let slots = &shared.slots;
    for e in &st.book.pending {
        // One the GPU is known to have finished keeps its success.
        let to = if slots.known_done(e.ticket) == Some(true) { DONE } else { FAILED };
        if !slots.transition(e.ticket, PENDING, to) {
            slots.transition(e.ticket, ENQUEUING, FAILED);
        }
    }
    slots.sweep(&mut st.book);
    if let Some(Raw(raw)) = st.raw.take() {
        if let Some(ctx) = &shared.ctx {
            let _ = crate::backend::cuda::bind(ctx);
        }
        calls::abort(raw);
    }
}

/// How many of the oldest pending ops the watchdog asks the driver about per look, beside the
/// newer ones [`settle`] picks: a communicator's ops mostly run on one stream, in order.
const QUERIES: usize = 8;

/// Marks done the pending ops of `tickets` known done without a driver call (or of a replaced
/// context), and returns the ops to ask the driver about among those whose slots keep their
/// events (see `slots`): the newest, then going back toward the oldest in doubling steps (the
/// 2nd, 4th, 8th ... newest), and the oldest few. Ops of one stream finish in order, so the
/// first of those seen done makes every earlier op of its stream known done: each look clears
/// what finished in a few queries, however many ops came since the last one, and the list
/// stays short whether the host or the GPU is ahead. Runs without the communicator's lock
/// (every transition is one atomic step of its slot, and the op path takes the lock for each
/// enqueue), on a copy of the pending list.
fn settle(tickets: &[Ticket], slots: &Slots<EventRef>, picked: &mut Vec<(Ticket, EventRef)>) {
    for &t in tickets {
        // One of a replaced context settles as its event's failed query would (see
        // `mark_finished`): no later op's event marks it passed any more.
        if slots.known_done(t) == Some(true) || slots.gone(t) == Some(true) {
            // An op the watchdog failed meanwhile stays failed.
            slots.transition(t, PENDING, DONE);
        }
    }
    // Ops whose launch has not committed yet have no event to ask about, nor have those whose
    // event a later op's passes.
    let pending = tickets.iter().filter(|&&t| slots.state(t) == PENDING);
    picked.extend(pending.filter_map(|&t| slots.event(t).map(|ev| (t, ev))));
    let n = picked.len();
    let mut at = 0;
    picked.retain(|_| {
        // `back`: 1 for the newest.
        let back = n - at;
        at += 1;
        at <= QUERIES || back.is_power_of_two()
    });
}

/// One look of the watchdog at the pending ops of `tickets` (a copy of its list, taken under
/// the lock), without the communicator's lock: see [`settle`] and [`mark_finished`].
fn look(tickets: &[Ticket], slots: &Slots<EventRef>, picked: &mut Vec<(Ticket, EventRef)>) {
    settle(tickets, slots, picked);
    mark_finished(picked, slots);
    picked.clear();
}

/// Marks done the ops of `picked` the driver reports done (an op already known done through a
/// later one of its stream costs no query). An event that cannot be queried (its context is
/// gone) counts as done: its op's completion reports that failure. Called without the
/// communicator's lock: querying an event may record it, under its stream's lock.
fn mark_finished(picked: &[(Ticket, EventRef)], slots: &Slots<EventRef>) {
    for (t, event) in picked {
        if event.is_done().unwrap_or(true) {
            slots.transition(*t, PENDING, DONE);
        }
    }
}

/// The watchdog's loop: see the module docs.
fn watch(shared: &Shared) {
    let slots = &shared.slots;
    let (mut tickets, mut picked) = (Vec::new(), Vec::new());
    // When an op was last seen coming, to linger on the timer for a while after the last.
    let (mut seen, mut active) = (0u64, Instant::now());
    let mut st = crate::sync::lock_unranked(&shared.state);
    loop {
        // The look itself runs without the lock, which the op path takes to enqueue: only the
        // list of pending ops is copied under it, and the settled ones swept after.
        tickets.clear();
        tickets.extend(st.book.pending.iter().map(|e| e.ticket));
        drop(st);
        look(&tickets, slots, &mut picked);
        st = crate::sync::lock_unranked(&shared.state);
        slots.sweep(&mut st.book);
        st.book.looked(Instant::now());
        if st.closing && st.book.pending.is_empty() {
            if let Some(Raw(raw)) = st.raw.take() {
                if let Some(ctx) = &shared.ctx {
                    let _ = crate::backend::cuda::bind(ctx);
                }
                calls::destroy(raw, shared.timeout.min(Duration::from_secs(30)));
            }
            return;
        }
        if let (Some(raw), false) = (st.raw.as_ref().map(|r| r.0), st.book.pending.is_empty()) {
            let oldest = st.book.oldest();
            let fault = match calls::async_state(raw) {
                Err(e) => Some(e),
                Ok(_) if oldest.is_some_and(|t| t.elapsed() > shared.timeout) => Some(Error::Collective {
                    call: "the communicator's watchdog",
                    fault: CollectiveFault::Timeout,
                    detail: format!("an op stayed pending longer than the timeout ({:?})", shared.timeout),
                }),
                Ok(_) => None,
            };
            if let Some(fault) = fault {
                declare(&mut st, fault, shared);
            }
        }
        if st.book.claimed != seen {
            (seen, active) = (st.book.claimed, Instant::now());
        }
        let idle = st.book.pending.is_empty() && !st.closing;
        st = if idle && active.elapsed() >= LINGER {
            st.asleep = true;
            let mut st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            st.asleep = false;
            st
        } else {
            shared.wake.wait_timeout(st, POLL).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimConfig;
    use crate::recorder::LaunchRecorder;
    use crate::track::StreamId;

    /// Commits a launch on `s` and returns its commit event.
    fn launch(d: &Device, s: StreamId) -> EventRef {
        let launched = LaunchRecorder::new_strict(s).launch_event(d, |scope| scope.sim_kernel(|| {})).unwrap();
        launched.event.expect("a launch commits an event")
    }

    /// The watchdog's looks, as `watch` takes them, until nothing is pending or `looks` ran out.
    fn looks(book: &mut Book, slots: &Slots<EventRef>, looks: usize) {
        let (mut tickets, mut picked) = (Vec::new(), Vec::new());
        for _ in 0..looks {
            tickets.clear();
            tickets.extend(book.pending.iter().map(|e| e.ticket));
            look(&tickets, slots, &mut picked);
            slots.sweep(book);
            book.looked(Instant::now());
            if book.pending.is_empty() {
                return;
            }
        }
    }

    #[test]
    fn ops_of_a_replaced_context_settle_also_when_they_keep_only_their_marks() {
        // A rebuilt context's events never reach the watermarks again: an op whose event a
        // later op's passed would stay pending until the timeout failed it and aborted its
        // communicator, where the driver's answer for its own event settles it.
        let d = Device::sim(SimConfig::default()).unwrap();
        let s = d.default_stream();
        let (slots, mut book) = (Slots::<EventRef>::default(), Book::default());
        // The first op is a checkpoint, which keeps its event whatever passes it.
        let checkpoint = slots.claim(&mut book).unwrap();
        slots.publish(checkpoint, None);
        let (a, b) = (slots.claim(&mut book).unwrap(), slots.claim(&mut book).unwrap());
        slots.publish(a, Some(launch(&d, s)));
        slots.publish(b, Some(launch(&d, s)));
        assert!(slots.event(a).is_none(), "b's event passes a's");
        LaunchRecorder::new_strict(s).named("oob_write").launch(&d, |scope| scope.sim_fault()).unwrap();
        assert!(matches!(d.synchronize(s), Err(Error::ContextPoisoned { .. })), "the fault poisons the context");
        looks(&mut book, &slots, 8);
        assert!(book.pending.is_empty(), "still pending: {:?}", book.pending);
        assert_eq!(slots.state(a), DONE);
    }
}
