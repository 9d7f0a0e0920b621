//! One-stream devices: while only one stream of a device has ever run tracked work, stream
//! order alone orders every launch, so its launches of device memory take no per-buffer marks
//! and publish nothing.
//!
//! # States
//!
//! ```text
//!   NONE ──first launch on stream X──▶ SOLO(X) ──first launch elsewhere──▶ CLOSING ──▶ SEVERAL
//! ```
//!
//! In `SOLO(X)` a closure-form launch on X whose uses are all fresh device memory of the
//! device's current context (no peers, no pinned host memory, no lane job, no declared job's
//! reservation) is a *solo launch*: under X's stream lock it counts itself in flight and
//! lists its uses there (buffer ids and accesses, which the launch keeps beside its buffers),
//! and at commit it takes itself and them out again under the same lock. No buffer lock is
//! taken either time. X also keeps the highest buffer id a solo launch used, so that later a
//! buffer with a higher id is known to have no solo use. Buffer states therefore miss solo
//! uses, and the following make up for that:
//!
//! - **Stream order.** Every solo use is on X, and X runs its work in enqueue order. Two
//!   threads' conflicting solo launches are ordered by their enqueue on X rather than held
//!   apart from preflight to commit: both orders are sequential, neither can race.
//! - **Frees.** A device buffer is freed on its home stream, which for memory allocated in
//!   `SOLO(X)` is X: every solo use is before the free in stream order.
//! - **Covering events.** The first marked launch on another stream (or on another device,
//!   through peers) closes solo mode, as does an op whose later launches compare its inputs'
//!   last-write positions, which solo launches do not publish (`close_solo`, used by cuSPARSE's
//!   count-then-fill ops): under X's lock it stores `CLOSING`, after which no solo
//!   launch starts. The last solo launch to commit (or the close itself, when none is in
//!   flight) records one event on X under the same lock, the floor, which covers every solo
//!   use there will ever be, and stores `SEVERAL`. A launch on any stream but X that uses a
//!   buffer a solo launch used waits on the floor first (a stream once; a peer launch each
//!   time). Before the floor exists, it looks under X's lock for a solo launch in flight that
//!   uses one of its buffers in a conflicting way (a write conflicts with every use, a read
//!   with writes); while one does, it waits, as it would have waited for that launch's mark.
//!   Once none does, every solo use of its buffers has been enqueued, and an event covers
//!   them: the close records one on X after every launch not in flight then, and each solo
//!   launch that commits while solo mode closes records one after its work and notes its
//!   buffers as late. A use of no late buffer waits on the close's event, one of a late
//!   buffer on the newest late event: never on an event after work that solo launches did not
//!   enqueue before, and the same event each time, so that a stream waits on it once.
//! - **Preflight order after the close.** A launch on X itself while solo mode closes (every
//!   launch there takes marks once the close began) looks the same way
//!   and waits while a solo launch in flight of another thread conflicts with it, as it would
//!   wait for that launch's mark: from the close on, conflicting launches follow preflight
//!   order on every stream. It needs no event (stream order covers every solo use on X); a
//!   conflicting solo launch of its own thread (the launch is made inside that one's enqueue)
//!   is not waited for, since that thread's enqueue order on X orders them, as in solo mode.
//! - **Leaving the check.** A stream is past solo mode once it waited on the floor (X: once
//!   the floor is recorded). A stream whose launches use no memory a solo launch used takes
//!   the floor as a fence candidate once that costs nothing on the GPU: its clock covers it,
//!   or the GPU is known to have passed it (a done-mark, or a query on every 64th look); from
//!   then on it reads nothing of solo mode either.
//!
//! Host accesses read only pinned host memory's states, and pinned memory never takes the
//! solo path. A device never goes back to `SOLO`. An event that would be recorded on X while
//! X is behind a context rebuild is left out: every solo use was then of the old context,
//! whose buffers are all stale.
//!
//! # Waiting
//!
//! The close never waits: it takes X's lock only briefly. A launch
//! waits only for solo launches that conflict with it, holding no buffer mark of its own
//! launch and no lock, and a solo launch's commit takes only X's lock, so the wait is the one
//! marks would have made. A solo launch held by the waiting thread itself (a conflicting use
//! on another stream from inside a solo launch's enqueue) is [`Error::WouldDeadlock`] at once
//! (the thread keeps the launches it holds in a thread-local stack, as the marked path keeps
//! holders in the marks); any other wait is bounded by `DeviceConfig::preflight_timeout`,
//! then [`Error::BufferBusy`].

mod held;

pub(crate) use held::{held_here, HeldHere};

use super::wait::ConflictWait;
use super::{Access, EventPool, EventRef, StreamId, StreamSlot};
use crate::error::Error;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// No stream has run tracked work yet.
const NONE: u32 = u32::MAX;
/// Solo mode is closing: no new solo launch starts, the floor is not recorded yet.
const CLOSING: u32 = u32::MAX - 1;
/// Several streams have run tracked work (or one of another device has used the memory).
const SEVERAL: u32 = u32::MAX - 2;

/// A device's solo state and, once several streams are in use, its floor.
pub(crate) struct Solo {
    /// `NONE`, the per-device index of the one stream (`SOLO`), `CLOSING` or `SEVERAL`.
    /// Leaves `SOLO(X)` and `CLOSING` only under X's stream lock, where solo launches check it
    /// and count themselves.
    state: AtomicU32,
    /// X, once a close began (written before `CLOSING` is stored).
    solo_stream: AtomicU32,
    /// The event on X after every solo use; unset when solo mode never ran a launch, or X was
    /// behind a rebuild when it closed.
    floor: OnceLock<EventRef>,
    /// Once solo mode is closing: every buffer a solo launch used has an id below this
    /// (written before `CLOSING` is stored; ids only grow).
    used_below: AtomicU64,
}

impl Solo {
    /// A device's solo state: open until a second stream runs work, or, without `open`,
    /// closed from the start (every launch takes marks).
    pub(crate) fn new(open: bool) -> Self {
        let state = AtomicU32::new(if open { NONE } else { SEVERAL });
        Solo { state, solo_stream: AtomicU32::new(NONE), floor: OnceLock::new(), used_below: AtomicU64::new(0) }
    }

    /// Whether a launch on the device's stream `index` may take the solo path: true while
    /// `index` is the solo stream, and for the device's first launch, which makes its stream
    /// the solo one. One relaxed load in steady state; the answer is confirmed under the
    /// stream's lock by [`StreamSlot::enter_solo`].
    #[inline(always)]
    pub(crate) fn open_on(&self, index: u32) -> bool {
        let now = self.state.load(Ordering::Relaxed);
        now == index || (now == NONE && self.claim(index))
    }

    /// Makes `index` the solo stream if no stream is yet; true if it is the solo stream now.
    #[cold]
    fn claim(&self, index: u32) -> bool {
        match self.state.compare_exchange(NONE, index, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => true,
            Err(now) => now == index,
        }
    }

    /// Whether solo launches may start on the device's stream `index` (read under that
    /// stream's lock).
    pub(crate) fn admits(&self, index: u32) -> bool {
        self.state.load(Ordering::Relaxed) == index
    }

    /// Whether a launch that takes marks on the device's stream `index` must first close solo
    /// mode or look at its floor; `floor_seen`: the stream is past solo mode (see the module
    /// docs), and needs neither. Never called in steady state: the caller reads `floor_seen`
    /// first.
    #[inline(always)]
    pub(crate) fn needs_floor(&self, index: u32, floor_seen: bool) -> bool {
        if floor_seen {
            return false;
        }
        let now = self.state.load(Ordering::Acquire);
        !(now == index || (now == NONE && self.claim(index)))
    }

    /// The stream solo mode closed on, once a close began.
    pub(crate) fn closed_on(&self) -> Option<u32> {
        let now = self.state.load(Ordering::Acquire);
        (now == CLOSING || now == SEVERAL).then(|| self.solo_stream.load(Ordering::Relaxed)).filter(|&x| x != NONE)
    }

    /// The floor as a launch elsewhere sees it: [`Floor::NotYet`] while solo mode is still open
    /// or closing.
    pub(crate) fn closed_floor(&self) -> Floor<'_> {
        if self.state.load(Ordering::Acquire) != SEVERAL {
            return Floor::NotYet;
        }
        self.floor.get().map_or(Floor::Unneeded, Floor::Recorded)
    }

    /// Closes solo mode if it is open (see the module docs). Never waits: the floor is
    /// recorded now if no solo launch is in flight, else by the last of them to commit.
    /// `slot` finds a stream of the device by its per-device index.
    pub(crate) fn close<'a>(&self, slot: impl Fn(u32) -> Option<&'a StreamSlot>, pool: &EventPool) {
        let mut now = self.state.load(Ordering::Acquire);
        if now == NONE {
            // No launch ever ran: no solo use to cover. (A stream that claimed the device
            // meanwhile is closed like any other.)
            match self.state.compare_exchange(NONE, SEVERAL, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(claimed) => now = claimed,
            }
        }
        if now == SEVERAL || now == CLOSING {
            return;
        }
        let Some(x) = slot(now) else {
            // A solo stream is a stream the device made: it always has its slot.
            self.state.store(SEVERAL, Ordering::Release);
            return;
        };
        // Two closers may both get here: the stream checks, under its lock, that it is still
        // the solo one, so only the first closes.
        x.close_solo(self, pool);
    }

    /// Under the lock of X (the device's stream `solo_stream`): stops new solo launches;
    /// `used_below` bounds the ids of every buffer a solo launch used.
    pub(crate) fn begin_closing(&self, solo_stream: u32, used_below: u64) {
        self.solo_stream.store(solo_stream, Ordering::Relaxed);
        self.used_below.store(used_below, Ordering::Relaxed);
        self.state.store(CLOSING, Ordering::Release);
    }

    /// Whether a solo launch may have used buffer `id` (read after seeing solo mode closing or
    /// closed, which orders it after the store). A buffer made during solo mode but never
    /// used there may answer yes: a use of it on another stream then fences once on the solo
    /// stream's work, needlessly.
    pub(crate) fn maybe_used(&self, id: u64) -> bool {
        id < self.used_below.load(Ordering::Relaxed)
    }

    /// Under X's lock, once no solo launch is in flight: solo mode has closed, with `floor`.
    pub(crate) fn finish(&self, floor: Option<EventRef>) {
        if let Some(floor) = floor {
            let _ = self.floor.set(floor);
        }
        self.state.store(SEVERAL, Ordering::Release);
    }

    /// Waits, bounded by `timeout`, until no solo launch in flight conflicts with the
    /// caller's `uses` (checked under the solo stream's lock), and returns the event
    /// on the solo stream that then covers every solo use of the caller's buffers: the floor
    /// once recorded (past solo mode: nothing need look again), else one recorded at the close
    /// or after a later solo commit. No event when none is needed (the solo stream is behind a
    /// rebuild). `on_solo_stream`: the caller's launch is on the solo stream itself, where
    /// stream order covers every solo use, so it needs no event and waits only for
    /// conflicting solo launches of other threads (see [`StreamSlot::solo_settled`]); past
    /// solo mode then once no solo launch is in flight. A failed record comes back with the
    /// solo stream's context epoch. `device` names the device.
    pub(crate) fn await_uses<'a>(
        &self,
        slot: impl Fn(u32) -> Option<&'a StreamSlot>,
        pool: &EventPool,
        device: u32,
        timeout: Duration,
        uses: &[(u64, Access)],
        on_solo_stream: bool,
    ) -> std::result::Result<Cover, (Error, Option<u64>)> {
        // Nothing notifies a waiter here (a solo launch leaves flight under its stream's lock
        // only), so the wait polls.
        let wait = ConflictWait::start(timeout);
        let mut x_id = None;
        loop {
            match self.closed_floor() {
                Floor::NotYet => {}
                floor => {
                    let event = floor.event().filter(|_| !on_solo_stream).cloned();
                    return Ok(Cover { event, past_solo: true });
                }
            }
            // None only in a moment between two stores of a close: then it is looked up again.
            if let Some(x) = self.closed_on().and_then(&slot) {
                x_id = Some(x.id);
                let look =
                    if on_solo_stream { x.solo_settled(uses, device) } else { x.solo_cover(self, pool, uses, device) };
                match look {
                    Look::Covered(cover) => return Ok(cover),
                    Look::Failed(e, epoch) => return Err((e, Some(epoch))),
                    Look::Conflict { held_here: true } => return Err((would_wait_for_itself(x.id, device), None)),
                    Look::Conflict { held_here: false } => {}
                }
            }
            if wait.poll().is_err() {
                let buffer = match x_id {
                    Some(x) => format!("a buffer used on {x} (the only stream of device #{device} until now)"),
                    None => format!("a buffer used while device #{device} had one stream only"),
                };
                return Err((Error::BufferBusy { buffer, waited: wait.timeout() }, None));
            }
        }
    }
}

/// A conflicting solo launch on `x` is held by the waiting thread itself.
#[cold]
fn would_wait_for_itself(x: StreamId, device: u32) -> Error {
    let what = format!(
        "a buffer that a launch still enqueueing on {x} uses (that stream was the only one of device #{device} until now) is used on another stream from inside that launch's enqueue, so it would wait for itself; make the use outside the launch's enqueue"
    );
    Error::WouldDeadlock { what }
}

/// Solo mode's floor, as a launch elsewhere sees it.
#[derive(Clone, Copy)]
pub(crate) enum Floor<'a> {
    /// Solo mode is still open or closing: no floor yet.
    NotYet,
    /// Solo mode has closed with no floor to follow: no solo launch ran, or the solo stream
    /// was behind a rebuild.
    Unneeded,
    /// Solo mode has closed; every solo use there will ever be is before this event.
    Recorded(&'a EventRef),
}

impl<'a> Floor<'a> {
    /// The floor's event, once recorded.
    pub(crate) fn event(self) -> Option<&'a EventRef> {
        match self {
            Floor::Recorded(ev) => Some(ev),
            Floor::NotYet | Floor::Unneeded => None,
        }
    }
}

/// What a launch elsewhere follows for the solo uses of its buffers, once no solo launch in
/// flight conflicts with it.
pub(crate) struct Cover {
    /// The event on the solo stream after every solo use of the buffers; `None` when none is
    /// needed (the launch is on the solo stream, or that stream is behind a rebuild).
    pub event: Option<EventRef>,
    /// The stream is past solo mode once it follows `event`: it need never look again.
    pub past_solo: bool,
}

/// One look under the solo stream's lock at the solo launches in flight.
pub(crate) enum Look {
    /// A solo launch in flight conflicts with the looker's uses; `held_here`: the looking
    /// thread holds one such launch itself.
    Conflict { held_here: bool },
    /// None conflicts: what to follow.
    Covered(Cover),
    /// Recording the covering event failed, on a stream of this context epoch.
    Failed(Error, u64),
}

/// The uses of one launch, or of the solo launches in flight: (buffer id, access).
pub(crate) type IdUses = SmallVec<[(u64, Access); 8]>;

/// Whether a use with `access` must follow one with `other` (a write follows every use, a
/// read only writes).
pub(crate) fn conflict(access: Access, other: Access) -> bool {
    access.writes() || other.writes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimConfig;
    use crate::backend::sim::SimShared;
    use crate::backend::BackendCtx;
    use std::sync::mpsc;

    /// Every wait for solo launches ends at its deadline, even one that cannot find the solo
    /// stream.
    #[test]
    fn a_wait_whose_solo_stream_cannot_be_found_ends_at_its_deadline() {
        let pool = EventPool::new(BackendCtx::Sim(SimShared::new(SimConfig::default())), 1);
        let solo = Solo::new(true);
        solo.state.store(CLOSING, Ordering::Release);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let no_slot = |_: u32| -> Option<&StreamSlot> { None };
            let waited = solo.await_uses(no_slot, &pool, 1, Duration::from_millis(50), &[(1, Access::Read)], false);
            let _ = tx.send(waited.map(|_| ()).map_err(|(e, _)| e));
        });
        let waited = rx.recv_timeout(Duration::from_secs(30)).expect("the wait never ended");
        assert!(matches!(waited, Err(Error::BufferBusy { .. })), "{waited:?}");
    }
}
