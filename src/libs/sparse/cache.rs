//! Caches of the library's own objects (descriptors, analyses) keyed on what they were made
//! for, and of buffer sizes keyed on the op and its operands.
//!
//! A cache never evicts while an op holds raw objects from it: the op gets every object it
//! needs first, and [`Cache::trim`] retires the least recently used ones beyond capacity only
//! after the op has enqueued, so the reaper destroys them after that op too.

use crate::error::Result;
use crate::libs::OpStream;

/// Objects of type `V` keyed by `K`, most recently used last.
pub(super) struct Cache<K, V> {
    entries: Vec<(K, V)>,
    capacity: usize,
    made: u64,
    what: &'static str,
}

impl<K: PartialEq, V: Send + 'static> Cache<K, V> {
    pub(super) fn new(capacity: usize, what: &'static str) -> Self {
        Cache { entries: Vec::new(), capacity: capacity.max(1), made: 0, what }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn made(&self) -> u64 {
        self.made
    }

    /// The object for `key`, made by `make` on a miss; it becomes the most recently used.
    pub(super) fn get_or_make(&mut self, key: K, make: impl FnOnce(&K) -> Result<V>) -> Result<&mut V> {
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            let hit = self.entries.remove(i);
            self.entries.push(hit);
        } else {
            let v = make(&key)?;
            self.made += 1;
            self.entries.push((key, v));
        }
        let last = self.entries.len() - 1;
        Ok(&mut self.entries[last].1)
    }

    /// Retires the objects whose key matches `pred`.
    pub(super) fn forget(&mut self, op: &OpStream, pred: impl Fn(&K) -> bool) {
        let (gone, kept): (Vec<_>, Vec<_>) = self.entries.drain(..).partition(|(k, _)| pred(k));
        self.entries = kept;
        if !gone.is_empty() {
            op.retire(self.what, gone.into_iter().map(|(_, v)| v).collect::<Vec<V>>());
        }
    }

    /// Retires the least recently used objects beyond capacity. Call after the op's enqueue.
    pub(super) fn trim(&mut self, op: &OpStream) {
        let excess = self.entries.len().saturating_sub(self.capacity);
        if excess > 0 {
            let evicted: Vec<V> = self.entries.drain(..excess).map(|(_, v)| v).collect();
            op.retire(self.what, evicted);
        }
    }

    /// Moves every object out.
    pub(super) fn take_all(&mut self) -> Vec<V> {
        self.entries.drain(..).map(|(_, v)| v).collect()
    }
}
