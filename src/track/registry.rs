//! Process-wide stream indices: the key of positions and vector clocks.
//!
//! Every stream of every device in the process holds one dense index, so that a position
//! `(stream, seq)` names one stream of one device, and a clock can cover streams of several
//! GPUs (a peer copy, or a buffer used on two devices, is fenced like any other use). The
//! per-device index of [`StreamId`](crate::StreamId) stays what users see.
//!
//! Indices are handed out lowest first and taken back when nothing can refer to them any more,
//! so clocks stay as short as the number of streams alive at once: one device alone in a process
//! numbers its streams 0, 1, 2, ... exactly as its own indices.
//!
//! Two rules keep a reused index sound:
//! - A lease is held by its stream and by its device's event pool, which every recorded event
//!   keeps alive; an index is free only once its stream and every event of it are gone.
//! - Sequence numbers go on from where the previous holder stopped. Clocks elsewhere may still
//!   say "stream `i` up to `k`"; the next holder starts after `k`, so none of its positions
//!   is mistaken for covered.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

struct Registry {
    /// The lowest index never handed out.
    next: u32,
    /// Indices given back, with the last sequence number their holder used.
    free: BTreeMap<u32, u64>,
}

impl Registry {
    const fn new() -> Self {
        Registry { next: 0, free: BTreeMap::new() }
    }

    /// The lowest free index and the last sequence number used on it.
    fn take(&mut self) -> (u32, u64) {
        match self.free.pop_first() {
            Some(reused) => reused,
            None => {
                let index = self.next;
                // Four billion live streams would exhaust memory long before this saturates.
                self.next = self.next.saturating_add(1);
                (index, 0)
            }
        }
    }

    fn give_back(&mut self, index: u32, last_seq: u64) {
        self.free.insert(index, last_seq);
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());

/// One stream's lease on a process-wide index.
#[derive(Debug)]
pub(crate) struct StreamIndex {
    index: u32,
    /// The last sequence number of the previous holder (0 for a fresh index).
    first_seq: u64,
    /// The last sequence number this holder used, written when its stream drops.
    last_seq: AtomicU64,
}

impl StreamIndex {
    /// Leases the lowest free index.
    pub(crate) fn lease() -> Arc<StreamIndex> {
        let (index, first_seq) = crate::sync::lock(&REGISTRY).take();
        Arc::new(StreamIndex { index, first_seq, last_seq: AtomicU64::new(first_seq) })
    }

    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// The sequence number a new stream on this index starts after.
    pub(crate) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// Notes the last sequence number the stream used, for the next holder to go on from.
    pub(crate) fn retire(&self, seq: u64) {
        self.last_seq.fetch_max(seq, Ordering::AcqRel);
    }
}

impl Drop for StreamIndex {
    fn drop(&mut self) {
        let seq = *self.last_seq.get_mut();
        crate::sync::lock(&REGISTRY).give_back(self.index, seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_reused_lowest_first_and_go_on_after_their_last_sequence_number() {
        let mut reg = Registry::new();
        assert_eq!(reg.take(), (0, 0));
        assert_eq!(reg.take(), (1, 0));
        assert_eq!(reg.take(), (2, 0));
        reg.give_back(1, 41);
        reg.give_back(0, 7);
        assert_eq!(reg.take(), (0, 7), "the lowest free index first, with its last sequence number");
        assert_eq!(reg.take(), (1, 41));
        assert_eq!(reg.take(), (3, 0));
    }

    #[test]
    fn a_lease_gives_back_the_last_sequence_number_its_stream_used() {
        // The registry is process-wide and other tests use it at the same time: the index may
        // come back from an earlier holder, so count from where it starts.
        let l = StreamIndex::lease();
        let first = l.first_seq();
        l.retire(first + 12);
        l.retire(first + 5);
        assert_eq!(l.last_seq.load(Ordering::Acquire), first + 12, "never goes back");
    }

    #[test]
    fn live_leases_never_share_an_index() {
        let leases: Vec<_> = (0..64).map(|_| StreamIndex::lease()).collect();
        let mut seen: Vec<u32> = leases.iter().map(|l| l.index()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), leases.len());
    }
}
