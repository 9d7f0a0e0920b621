//! Submit order across lanes: every lane job carries its submit number, every buffer remembers
//! the job (submit number and stream) of its last write and of its youngest read since, and a
//! job's use that would take effect after a conflicting use by a job the same thread submitted
//! after it, on another stream, is an inversion of the order the program submitted them in.
//!
//! Submit order is one thread's program order: jobs that two threads submit without waiting
//! for each other have no order the program stated (accumulations from several threads, say),
//! so a submit number carries its thread and only numbers of one thread are compared.
//!
//! Declared jobs keep submit order through their reservations; undeclared jobs are ordered by
//! commit, so the check is what catches the program that relied on submit order there. It
//! runs at preflight, under the buffer's lock the mark is taken under: the older job's op is
//! refused before anything is enqueued (or, configured to log, it goes on and is logged).
//!
//! Cost: outside lane jobs a use carries [`Stamp::NONE`], and the check is one branch on its
//! zero submit number; in a job, two compares per use. A commit stores the stamp beside the
//! event it publishes. Nothing here locks or allocates on that path; the report is cold.
//!
//! What it cannot tell: a job that waits (inside its body) for the completion of a job
//! submitted after it, and then uses what that job wrote, is ordered correctly by that wait,
//! yet looks inverted. A job that submits another job raises its own submit number to that
//! job's, so its uses after that submit are never reported against the job it submitted.

use super::buffer::BufferId;
use super::StreamId;
use crate::access::Access;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bits of a submit number below its thread's tag: the thread's own count of submits.
const COUNT_BITS: u32 = 40;

/// The next submit number of this thread: its thread's tag (process-wide, from 1) above
/// [`COUNT_BITS`] bits of the thread's own count, so that jobs of lanes of several devices
/// (peers) compare too, and jobs of two threads never do.
pub(crate) fn next_submit() -> u64 {
    static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NEXT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    // A submit from a thread-local's destructor, once this one is gone, takes a tag of its own.
    NEXT.try_with(|n| {
        let mut next = n.get();
        if next == 0 {
            next = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) << COUNT_BITS;
        }
        next += 1;
        n.set(next);
        next
    })
    .unwrap_or_else(|_| (NEXT_THREAD.fetch_add(1, Ordering::Relaxed) << COUNT_BITS) + 1)
}

/// Whether submit numbers `a` and `b` were taken by one thread.
#[inline(always)]
pub(crate) fn same_thread(a: u64, b: u64) -> bool {
    a >> COUNT_BITS == b >> COUNT_BITS
}

/// A submit number as errors show it: the count within its thread.
pub(crate) fn shown(seq: u64) -> u64 {
    seq & ((1 << COUNT_BITS) - 1)
}

/// Which job made a use: its submit number (0: not a lane job) and its stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub seq: u64,
    pub device: u32,
    pub stream: u32,
}

impl Stamp {
    /// A use outside lane jobs (or with the check off): never checked, never reported against.
    pub(crate) const NONE: Stamp = Stamp { seq: 0, device: 0, stream: 0 };

    /// A use by job `seq` on `stream`.
    pub(crate) fn new(seq: u64, stream: StreamId) -> Stamp {
        Stamp { seq, device: stream.device, stream: stream.index }
    }

    /// Whether `other` was made by a job this one's thread submitted after it, on another
    /// stream (one stream's jobs run in queue order, whatever their numbers). A use outside
    /// jobs (submit number 0, thread tag 0) never matches a job's.
    #[inline(always)]
    pub(crate) fn precedes(self, other: Stamp) -> bool {
        other.seq > self.seq
            && same_thread(other.seq, self.seq)
            && (other.stream != self.stream || other.device != self.device)
    }
}

/// A buffer's last write and youngest read since it, by job.
#[derive(Clone, Copy, Default)]
pub(crate) struct Stamps {
    write: Stamp,
    read: Stamp,
}

impl Stamps {
    /// Checks `me`'s `access` against the committed uses: `Some` with the younger job's
    /// stamp, and whether it wrote, when the use would invert submit order.
    #[inline(always)]
    pub(crate) fn check(&self, access: Access, me: Stamp) -> Option<(Stamp, bool)> {
        if me.precedes(self.write) {
            return Some((self.write, true));
        }
        if access.writes() && me.precedes(self.read) {
            return Some((self.read, false));
        }
        None
    }

    /// Folds in a committed use by `me`.
    #[inline(always)]
    pub(crate) fn fold(&mut self, access: Access, me: Stamp) {
        if access.writes() {
            self.write = me;
            self.read = Stamp::NONE;
        } else if me.seq > self.read.seq {
            self.read = me;
        }
    }
}

/// An inversion found at preflight, reported once the marks' locks are released.
#[derive(Debug)]
pub(crate) struct Inversion {
    pub buffer: BufferId,
    pub label: Option<Arc<str>>,
    pub name: String,
    /// The older job's use, being preflighted.
    pub mine: Stamp,
    pub access: Access,
    /// The younger job's committed use.
    pub theirs: Stamp,
    pub theirs_wrote: bool,
}

/// How the check is configured on a device ([`DeviceConfig::submit_order`]).
///
/// [`DeviceConfig::submit_order`]: crate::DeviceConfig::submit_order
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubmitOrderCheck {
    /// A use that would invert submit order fails its op with [`Error::SubmitOrder`](crate::Error::SubmitOrder) before
    /// anything is enqueued (on the simulator, with the [`HazardKind::SubmitOrder`](crate::HazardKind::SubmitOrder) hazard
    /// under [`SimConfig::fail_on_hazard`](crate::SimConfig::fail_on_hazard)). The default:
    /// the inversion means data the program did not mean to read or keep, and the error comes
    /// before the op that would make it so.
    #[default]
    Error,
    /// The use goes on (ordered by commit, as before) and is logged at `error`; on the
    /// simulator it is still listed as a hazard.
    Log,
    /// No check: undeclared jobs are ordered by commit silently.
    Off,
}
