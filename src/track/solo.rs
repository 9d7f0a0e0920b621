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
//! In `SOLO(X)` a launch on X whose uses are all device memory of the device (no peers, no
//! pinned host memory, no lane job) is a *solo launch*: its preflight counts it in X's
//! in-flight count under X's stream lock, and its commit takes it out again under the same
//! lock, with no buffer lock taken either time. Buffer states therefore miss solo uses, and
//! three things make up for that:
//!
//! - **Stream order.** Every solo use is on X, and X runs its work in enqueue order. Two
//!   threads' conflicting solo launches are ordered by their enqueue on X rather than held
//!   apart from preflight to commit: both orders are sequential, neither can race.
//! - **Frees.** A device buffer is freed on its home stream, which for memory allocated in
//!   `SOLO(X)` is X: every solo use is before the free in stream order.
//! - **The floor.** The first launch on another stream (or on another device, through peers)
//!   closes solo mode: it stores `CLOSING` under X's lock (no solo launch can start after
//!   that), waits until the solo launches in flight have committed, and records one event on
//!   X, the floor, covering every solo use there will ever be. Every other stream waits on the
//!   floor once before its first launch (a peer launch, each time), and only then reads the
//!   buffer states, which from then on miss nothing.
//!
//! Host accesses read only pinned host memory's states, and pinned memory never takes the
//! solo path. A device never goes back to `SOLO`: after a rebuild its floor is of a dead
//! context and is skipped (every buffer of that context is stale).
//!
//! # Why the close cannot deadlock
//!
//! The close holds only the device's switch lock while it waits: no buffer mark (it runs
//! before the launch takes any) and no stream lock. A solo launch in flight needs neither to
//! commit (its commit takes X's stream lock alone). The one launch that can never commit while
//! the close waits is one held by the closing thread itself (a launch on a second stream made
//! inside another launch's enqueue); the thread knows it holds one (a thread-local count), and
//! the close returns [`Error::WouldDeadlock`] instead of waiting. Any other wait is bounded by
//! `DeviceConfig::preflight_timeout`.

use super::{EventPool, EventRef, StreamSlot};
use crate::error::{Error, Result};
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
    /// Changes away from `SOLO(X)` only under X's stream lock, where solo launches check it.
    state: AtomicU32,
    /// Held by the thread closing solo mode, so that others needing the floor wait for it;
    /// holds the solo stream's index once a close began (the state then reads `CLOSING`).
    closing: Mutex<u32>,
    /// The event on the solo stream after every solo use; unset when solo mode never ran a
    /// launch or its record failed.
    floor: OnceLock<EventRef>,
}

impl Solo {
    /// A device's solo state: open until a second stream runs work, or, without `open`,
    /// closed from the start (every launch takes marks).
    pub(crate) fn new(open: bool) -> Self {
        let state = AtomicU32::new(if open { NONE } else { SEVERAL });
        Solo { state, closing: Mutex::new(NONE), floor: OnceLock::new() }
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

    /// Whether a launch that takes marks on the device's stream `index` must first close
    /// solo mode or wait on its floor; `floor_seen`: the stream has waited on the floor
    /// already, or is the solo stream of a close (it then needs neither, even while the
    /// close is under way). One relaxed load in steady state.
    #[inline(always)]
    pub(crate) fn needs_floor(&self, index: u32, floor_seen: bool) -> bool {
        if floor_seen {
            return false;
        }
        let now = self.state.load(Ordering::Acquire);
        !(now == index || (now == NONE && self.claim(index)))
    }

    /// The floor, once solo mode has closed (`None` before, or when it never ran a launch).
    pub(crate) fn closed_floor(&self) -> Option<Option<&EventRef>> {
        (self.state.load(Ordering::Acquire) == SEVERAL).then(|| self.floor.get())
    }

    /// Closes solo mode (see the module docs) and returns the floor. `slot` finds a stream
    /// of the device by its per-device index; `device` names the device in errors.
    pub(crate) fn close<'a>(
        &self,
        slot: impl Fn(u32) -> Option<&'a StreamSlot>,
        pool: &EventPool,
        device: u32,
        timeout: Duration,
    ) -> Result<Option<EventRef>> {
        let mut closing = crate::sync::lock(&self.closing);
        let mut now = self.state.load(Ordering::Acquire);
        if now == NONE {
            // No launch ever ran: no solo use to cover. (A stream that claimed the device
            // meanwhile is closed like any other.)
            match self.state.compare_exchange(NONE, SEVERAL, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(None),
                Err(claimed) => now = claimed,
            }
        }
        if now == SEVERAL {
            return Ok(self.floor.get().cloned());
        }
        // `now` is SOLO(X), or CLOSING after an earlier close that failed, which noted X.
        let solo = if now == CLOSING { *closing } else { now };
        *closing = solo;
        let Some(x) = slot(solo) else {
            // A solo stream is a stream the device made: it always has its slot.
            self.state.store(SEVERAL, Ordering::Release);
            return Ok(None);
        };
        x.close_solo(|| self.state.store(CLOSING, Ordering::Release));
        self.await_solo_launches(x, device, timeout)?;
        let floor = x.record_now(pool)?;
        let _ = self.floor.set(floor.clone());
        self.state.store(SEVERAL, Ordering::Release);
        Ok(Some(floor))
    }

    /// Waits until no solo launch is in flight on `x`, bounded by `timeout`; one held by this
    /// very thread is an error at once.
    fn await_solo_launches(&self, x: &StreamSlot, device: u32, timeout: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if x.solo_in_flight() == 0 {
                return Ok(());
            }
            if held_here(device) {
                return Err(Error::WouldDeadlock {
                    what: format!(
                        "a first launch on a second stream of device #{device} must wait until the launches in flight on its first stream ({}) have committed, and this thread holds one of them; make the second stream's first launch outside that launch's enqueue",
                        x.id
                    ),
                });
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::BufferBusy {
                    buffer: format!("the memory used on {} (a launch there not yet committed)", x.id),
                    waited: timeout,
                });
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
