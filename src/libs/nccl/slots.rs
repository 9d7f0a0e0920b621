//! The watchdog's record of a communicator's enqueued ops: reusable slots, so that following
//! an op allocates nothing in steady state.
//!
//! A slot is claimed under the communicator's lock, in the critical section that enqueues the
//! op, and freed by the watchdog once the op is done. The slots themselves live in chunks that
//! never move or shrink, so that an op's completion reads its slot's state without any lock.
//! Each claim gives the slot a new generation, and the state word holds generation and state
//! together: a completion whose generation no longer matches knows its slot was freed and
//! reused, which happens only to slots whose op finished well. A failed op's slot is never
//! reused (a communicator that failed an op takes no more).
//!
//! A slot keeps its op's event only while it may be asked about: once the next op on the
//! communicator publishes an event that passes it (a later point of the same stream), the
//! slot keeps only its mark, which reads as passed once a later op is seen passed. The first op
//! claimed after each look of the watchdog keeps its event regardless (a checkpoint), so that a
//! stream the host stays ahead of still shows progress long before its newest op ends. The
//! other events go back to their streams at once instead of waiting for the watchdog's next
//! look, and the op path reuses them in place instead of taking one from the device's pool:
//! the checkpoints are few enough (one per look) not to fill a stream's recent events.
//!
//! The op path reads no clock: an op's age, which the watchdog's timeout is measured on,
//! counts from the first look that finds it pending ([`Book::looked`]), at most one look
//! after its claim.
//!
//! The price: an op that kept only its mark is known finished only once a later op of its
//! stream is seen finished. If the communicator faults while that later op is pending (its
//! peer died), the earlier op is failed with it, although it may have finished; an op's
//! completion resolved before the fault keeps its success. Keeping every pending op's event
//! until the watchdog's next look narrowed this to the ops finished in the last 2 ms, and cost
//! every commit a trip to the device's event pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Claimed; the op's event is not known yet (its launch has not committed).
pub(super) const ENQUEUING: u64 = 0;
/// Its event known, not yet seen passed.
pub(super) const PENDING: u64 = 1;
/// Finished on the GPU (or never launched).
pub(super) const DONE: u64 = 2;
/// Failed by the watchdog: its communicator faulted while it was pending.
pub(super) const FAILED: u64 = 3;

const STATE_BITS: u32 = 2;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

/// An op's end as a slot keeps it: an event that can be asked about, and its mark, what the
/// slot keeps once a later end passes it.
pub(super) trait End: Clone {
    /// The end without its event.
    type Mark;
    /// The mark of this end.
    fn mark(&self) -> Self::Mark;
    /// Whether passing this end passes `earlier` too.
    fn covers(&self, earlier: &Self::Mark) -> bool;
    /// Whether `mark` is known passed without asking the driver.
    fn known_done(mark: &Self::Mark) -> bool;
    /// Whether `mark` can no longer be known passed: its context was replaced, so the driver
    /// would not answer for its event either (its op's completion reports that failure).
    fn gone(mark: &Self::Mark) -> bool;
}

/// Pending ops past which a sweep reads every one, not only the settled ones at the front.
const FULL_SWEEP: usize = 1024;

/// Slots in the first chunk; each later chunk doubles the total.
const FIRST: usize = 64;
/// Chunks: `FIRST * (2^CHUNKS - 1)` slots in all, past any number of ops in flight.
const CHUNKS: usize = 24;

/// An op's claim on a slot: the slot and the generation it was claimed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ticket {
    idx: u32,
    generation: u64,
}

impl Ticket {
    /// The ticket as one number (slot in the high half, generation in the low).
    pub(super) fn to_bits(self) -> u128 {
        u128::from(self.idx) << 64 | u128::from(self.generation)
    }

    /// The ticket [`to_bits`](Self::to_bits) made.
    pub(super) fn from_bits(bits: u128) -> Ticket {
        Ticket { idx: (bits >> 64) as u32, generation: bits as u64 }
    }
}

/// A claimed slot the watchdog follows: its ticket, and since when it has been pending as the
/// watchdog's looks know it (`None` until the first look after its claim).
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub ticket: Ticket,
    pub since: Option<Instant>,
}

/// The bookkeeping of the slots, kept under the communicator's lock.
#[derive(Debug, Default)]
pub(super) struct Book {
    free: Vec<u32>,
    made: u32,
    /// The claimed slots not yet settled, oldest first.
    pub pending: Vec<Entry>,
    /// Slots ever claimed: the watchdog sees from it whether ops are still coming.
    pub claimed: u64,
    /// The op claimed last, whose event the next op's may pass.
    last: Option<Ticket>,
    /// Whether an op claimed since the watchdog's last look is a checkpoint already.
    checkpointed: bool,
}

impl Book {
    /// A look of the watchdog, at `now`: the ops claimed since the last one are pending from
    /// now on, and the next op claimed is a checkpoint.
    pub(super) fn looked(&mut self, now: Instant) {
        // Claims append: the ones not seen yet are the newest.
        for e in self.pending.iter_mut().rev().take_while(|e| e.since.is_none()) {
            e.since = Some(now);
        }
        self.checkpointed = false;
    }

    /// When the oldest pending op was first seen pending.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.pending.iter().filter_map(|e| e.since).min()
    }
}

struct Slot<E: End> {
    word: AtomicU64,
    end: Mutex<Kept<E>>,
}

/// What a slot keeps of its op's end.
struct Kept<E: End> {
    /// The event, until a later op's passes it (a checkpoint's stays).
    event: Option<E>,
    mark: Option<E::Mark>,
    /// The op claimed before this one on the communicator, whose event this one's may pass.
    prev: Option<Ticket>,
    checkpoint: bool,
}

impl<E: End> Kept<E> {
    const EMPTY: Kept<E> = Kept { event: None, mark: None, prev: None, checkpoint: false };
}

/// The slots of one communicator (`E`: the op's end, an event).
pub(super) struct Slots<E: End> {
    chunks: [OnceLock<Box<[Slot<E>]>>; CHUNKS],
}

impl<E: End> Default for Slots<E> {
    fn default() -> Self {
        Slots { chunks: std::array::from_fn(|_| OnceLock::new()) }
    }
}

/// The chunk of slot `idx` and its place in it.
fn place(idx: u32) -> (usize, usize) {
    let n = idx as usize / FIRST + 1;
    let chunk = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (chunk, idx as usize - FIRST * ((1 << chunk) - 1))
}

impl<E: End> Slots<E> {
    fn slot(&self, idx: u32) -> Option<&Slot<E>> {
        let (chunk, at) = place(idx);
        self.chunks.get(chunk)?.get()?.get(at)
    }

    /// Claims a slot for an op enqueued now (`None` only when every slot is taken, which no
    /// process reaches: the op then goes unwatched).
    pub(super) fn claim(&self, book: &mut Book) -> Option<Ticket> {
        let idx = match book.free.pop() {
            Some(i) => i,
            None => {
                let idx = book.made;
                let (chunk, _) = place(idx);
                let chunk = self.chunks.get(chunk)?;
                chunk.get_or_init(|| {
                    let len = FIRST << place(idx).0;
                    (0..len).map(|_| Slot { word: AtomicU64::new(DONE), end: Mutex::new(Kept::EMPTY) }).collect()
                });
                book.made = idx.checked_add(1)?;
                idx
            }
        };
        let slot = self.slot(idx)?;
        let generation = (slot.word.load(Ordering::Acquire) >> STATE_BITS).wrapping_add(1);
        let checkpoint = !std::mem::replace(&mut book.checkpointed, true);
        *crate::sync::lock_unranked(&slot.end) = Kept { prev: book.last, checkpoint, ..Kept::EMPTY };
        slot.word.store(generation << STATE_BITS | ENQUEUING, Ordering::Release);
        let ticket = Ticket { idx, generation };
        book.pending.push(Entry { ticket, since: None });
        book.claimed = book.claimed.wrapping_add(1);
        book.last = Some(ticket);
        Some(ticket)
    }

    /// The op of `t` has committed, with `event` its end (`None`: nothing to wait for). A slot
    /// failed meanwhile stays failed. The op claimed before it keeps only its mark from now on
    /// if `event` passes it (see the module docs).
    pub(super) fn publish(&self, t: Ticket, event: Option<E>) {
        let Some(slot) = self.slot(t.idx) else { return };
        let Some(event) = event else {
            let _ = self.transition(t, ENQUEUING, DONE);
            return;
        };
        let prev = {
            let mut kept = crate::sync::lock_unranked(&slot.end);
            if slot.word.load(Ordering::Acquire) >> STATE_BITS != t.generation {
                return;
            }
            kept.mark = Some(event.mark());
            kept.event = Some(event.clone());
            kept.prev.take()
        };
        // After the event is in place: the watchdog reads it only once the state says PENDING.
        let _ = self.transition(t, ENQUEUING, PENDING);
        if let Some(p) = prev {
            drop(self.passed_by(p, &event));
        }
    }

    /// Takes `earlier`'s event if `later` passes it and it is pending and no checkpoint: the
    /// slot keeps its mark. Returns the event, for the caller to drop outside the slot's lock.
    fn passed_by(&self, earlier: Ticket, later: &E) -> Option<E> {
        let slot = self.slot(earlier.idx)?;
        let mut kept = crate::sync::lock_unranked(&slot.end);
        let word = slot.word.load(Ordering::Acquire);
        let pending = word == earlier.generation << STATE_BITS | PENDING;
        match &kept.mark {
            Some(mark) if pending && !kept.checkpoint && later.covers(mark) => kept.event.take(),
            _ => None,
        }
    }

    /// The state of `t`'s op: [`DONE`] once its slot has been reused (only a finished op's is).
    pub(super) fn state(&self, t: Ticket) -> u64 {
        match self.slot(t.idx) {
            Some(slot) => {
                let word = slot.word.load(Ordering::Acquire);
                if word >> STATE_BITS == t.generation {
                    word & STATE_MASK
                } else {
                    DONE
                }
            }
            None => DONE,
        }
    }

    /// Moves `t`'s op from `from` to `to`; false if it was not in `from` (or is reused).
    pub(super) fn transition(&self, t: Ticket, from: u64, to: u64) -> bool {
        let Some(slot) = self.slot(t.idx) else { return false };
        let (old, new) = (t.generation << STATE_BITS | from, t.generation << STATE_BITS | to);
        slot.word.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// `f` of what `t`'s slot keeps, if it is still `t`'s.
    fn with_kept<R>(&self, t: Ticket, f: impl FnOnce(&Kept<E>) -> R) -> Option<R> {
        let slot = self.slot(t.idx)?;
        let kept = crate::sync::lock_unranked(&slot.end);
        if slot.word.load(Ordering::Acquire) >> STATE_BITS != t.generation {
            return None;
        }
        Some(f(&kept))
    }

    /// A copy of `t`'s event, if its slot still keeps it, to ask the driver about without the
    /// communicator's lock.
    pub(super) fn event(&self, t: Ticket) -> Option<E> {
        self.with_kept(t, |k| k.event.clone()).flatten()
    }

    /// Whether `t`'s op is known passed without asking the driver (`None`: it has no end yet,
    /// or its slot is no longer its).
    pub(super) fn known_done(&self, t: Ticket) -> Option<bool> {
        self.with_kept(t, |k| k.mark.as_ref().map(E::known_done)).flatten()
    }

    /// Whether `t`'s end can no longer be known passed (see [`End::gone`]; `None`: it has no end
    /// yet, or its slot is no longer its).
    pub(super) fn gone(&self, t: Ticket) -> Option<bool> {
        self.with_kept(t, |k| k.mark.as_ref().map(E::gone)).flatten()
    }

    /// Drops the settled entries of `book.pending` (done or failed), freeing the done ones'
    /// slots for reuse: those before the first unsettled one, which reads only the few slots
    /// that settled since the last sweep (a communicator's ops mostly finish in order), or
    /// every one once the list is long (ops of several streams finishing out of order).
    pub(super) fn sweep(&self, book: &mut Book) {
        let settled = |state: u64| state == DONE || state == FAILED;
        if book.pending.len() < FULL_SWEEP {
            let n = book.pending.iter().take_while(|e| settled(self.state(e.ticket))).count();
            let Book { free, pending, .. } = book;
            for e in pending.drain(..n) {
                if self.state(e.ticket) == DONE {
                    self.free(e.ticket, free);
                }
            }
            return;
        }
        let Book { free, pending, .. } = book;
        pending.retain(|e| match self.state(e.ticket) {
            DONE => {
                self.free(e.ticket, free);
                false
            }
            FAILED => false,
            _ => true,
        });
    }

    /// Frees the slot of `t`, a done op, for reuse.
    fn free(&self, t: Ticket, free: &mut Vec<u32>) {
        if let Some(slot) = self.slot(t.idx) {
            // Its end goes now: a reused slot gets its own.
            let kept = std::mem::replace(&mut *crate::sync::lock_unranked(&slot.end), Kept::EMPTY);
            drop(kept);
            free.push(t.idx);
        }
    }
}

#[cfg(test)]
mod tests;
