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
//! reservation) is a *solo launch*: it flags each of its buffers `solo_used`, counts itself in
//! X's in-flight count under X's stream lock, and takes itself out again at commit under the
//! same lock, with no buffer lock taken either time. Buffer states therefore miss solo uses,
//! and three things make up for that:
//!
//! - **Stream order.** Every solo use is on X, and X runs its work in enqueue order. Two
//!   threads' conflicting solo launches are ordered by their enqueue on X rather than held
//!   apart from preflight to commit: both orders are sequential, neither can race.
//! - **Frees.** A device buffer is freed on its home stream, which for memory allocated in
//!   `SOLO(X)` is X: every solo use is before the free in stream order.
//! - **The floor.** The first marked launch on another stream (or on another device, through
//!   peers) closes solo mode: under X's lock it stores `CLOSING`, after which no solo launch
//!   starts. The last solo launch to commit (or the close itself, when none is in flight)
//!   records one event on X under the same lock, the floor, which covers every solo use there
//!   will ever be, and stores `SEVERAL`. A launch on any stream but X that uses a `solo_used`
//!   buffer waits on the floor first (a stream once; a peer launch each time), so it reads
//!   the buffer's state only when nothing is missing from it.
//!
//! Host accesses read only pinned host memory's states, and pinned memory never takes the
//! solo path. A device never goes back to `SOLO`. A floor that would be recorded on X while X
//! is behind a context rebuild is left out: every solo use was then of the old context, whose
//! buffers are all stale.
//!
//! # Waiting for the floor
//!
//! The close itself never waits: it holds the close mutex and then X's lock only briefly.
//! Only a launch that uses a `solo_used` buffer waits, until the solo launches in flight when
//! solo mode closed have committed, as it would have waited for their marks on the buffers
//! they share. It waits holding no buffer mark and no lock, and a solo launch's commit takes
//! only X's lock. What it cannot tell is which buffers the launches in flight use, so it
//! waits for all of them: a launch held by the waiting thread itself (a use of such a buffer
//! on another stream from inside a solo launch's enqueue) is [`Error::WouldDeadlock`] at once
//! (the thread knows, from a thread-local count), and any other wait is bounded by
//! `DeviceConfig::preflight_timeout`.

use super::{EventPool, EventRef, StreamSlot};
use crate::error::Error;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    /// Serializes closes, so that one finds X and stores `CLOSING`; never held while waiting.
    closing: Mutex<()>,
    /// X, once a close began (written before `CLOSING` is stored).
    solo_stream: AtomicU32,
    /// The event on X after every solo use; unset when solo mode never ran a launch, or X was
    /// behind a rebuild when it closed.
    floor: OnceLock<EventRef>,
}

impl Solo {
    /// A device's solo state: open until a second stream runs work, or, without `open`,
    /// closed from the start (every launch takes marks).
    pub(crate) fn new(open: bool) -> Self {
        let state = AtomicU32::new(if open { NONE } else { SEVERAL });
        Solo { state, closing: Mutex::new(()), solo_stream: AtomicU32::new(NONE), floor: OnceLock::new() }
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
    /// mode or look at its floor; `floor_seen`: the stream has waited on the floor already, or
    /// is X (it then needs neither). One relaxed load in steady state.
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

    /// The floor, once recorded (or known not to be needed: `Some(None)`); `None` while solo
    /// mode is still open or closing.
    pub(crate) fn closed_floor(&self) -> Option<Option<&EventRef>> {
        (self.state.load(Ordering::Acquire) == SEVERAL).then(|| self.floor.get())
    }

    /// Closes solo mode if it is open (see the module docs). Never waits: the floor is
    /// recorded now if no solo launch is in flight, else by the last of them to commit.
    /// `slot` finds a stream of the device by its per-device index.
    pub(crate) fn close<'a>(&self, slot: impl Fn(u32) -> Option<&'a StreamSlot>, pool: &EventPool) {
        let now = self.state.load(Ordering::Acquire);
        if now == SEVERAL || now == CLOSING {
            return;
        }
        let _closing = crate::sync::lock(&self.closing);
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
        self.solo_stream.store(now, Ordering::Relaxed);
        x.close_solo(self, pool);
    }

    /// Under X's lock: stops new solo launches.
    pub(crate) fn begin_closing(&self) {
        self.state.store(CLOSING, Ordering::Release);
    }

    /// Under X's lock, once no solo launch is in flight: solo mode has closed, with `floor`.
    pub(crate) fn finish(&self, floor: Option<EventRef>) {
        if let Some(floor) = floor {
            let _ = self.floor.set(floor);
        }
        self.state.store(SEVERAL, Ordering::Release);
    }

    /// Waits, bounded by `timeout`, until the floor is recorded, and returns it (`None`: none
    /// is needed). A record that failed at the last commit is tried again here; its error
    /// comes back with the context epoch of X it was made in. `device` names the device.
    pub(crate) fn await_floor<'a>(
        &self,
        slot: impl Fn(u32) -> Option<&'a StreamSlot>,
        pool: &EventPool,
        device: u32,
        timeout: Duration,
    ) -> std::result::Result<Option<EventRef>, (Error, Option<u64>)> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(floor) = self.closed_floor() {
                return Ok(floor.cloned());
            }
            let Some(x) = self.closed_on().and_then(&slot) else {
                // Not even closing yet: the caller closes first, so this is a race with
                // nothing; look again.
                std::thread::yield_now();
                continue;
            };
            if let Some(Err((e, epoch))) = x.retry_floor(self, pool) {
                return Err((e, Some(epoch)));
            }
            if self.closed_floor().is_some() {
                continue;
            }
            if held_here(device) {
                let what = format!(
                    "a buffer used on {} while it was the only stream of device #{device} is used on another stream from inside a launch on {} that has not committed, and that use must wait for it; make it outside the launch's enqueue",
                    x.id, x.id
                );
                return Err((Error::WouldDeadlock { what }, None));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let buffer = format!("a buffer used on {} (the only stream of device #{device} until now)", x.id);
                return Err((Error::BufferBusy { buffer, waited: timeout }, None));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

thread_local! {
    /// The solo launches this thread holds between preflight and commit (closure form
    /// only): the device uid of the first, and how many.
    static HELD: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// Held by a closure-form solo launch from its preflight until its commit, so that a close on
/// the same thread knows it would wait for itself.
pub(crate) struct HeldHere;

/// Several devices' solo launches held at once: any device matches.
const ANY_DEVICE: u32 = 0;

impl HeldHere {
    /// Counts a solo launch of device `device` as held by this thread.
    #[inline(always)]
    pub(crate) fn enter(device: u32) -> HeldHere {
        HELD.with(|h| {
            let (uid, n) = h.get();
            let uid = if n == 0 || uid == device { device } else { ANY_DEVICE };
            h.set((uid, n + 1));
        });
        HeldHere
    }
}

impl Drop for HeldHere {
    #[inline(always)]
    fn drop(&mut self) {
        HELD.with(|h| {
            let (uid, n) = h.get();
            h.set((uid, n.saturating_sub(1)));
        });
    }
}

/// Whether this thread holds a solo launch of `device` (or of several devices at once).
fn held_here(device: u32) -> bool {
    HELD.with(|h| {
        let (uid, n) = h.get();
        n > 0 && (uid == device || uid == ANY_DEVICE)
    })
}
