//! A bounded plan cache, for every library that plans (cuFFT plans, cuBLASLt matmul plans,
//! cuTENSOR contraction plans...): keyed on the fully resolved layout, so that a plan is never
//! reused for another; least recently used first out. An evicted plan goes to the reaper:
//! destroying one can synchronize, and an op enqueued with it may still run.
//!
//! Capacities are small (tens), so a vector searched linearly beats a map and keeps the
//! recency order for free.

// Each library uses its own subset of the shared parts; with only some features on, the rest
// is unused.
#![cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]

use super::OpStream;
use crate::error::{Error, Result};

/// Plans of type `P`, keyed by `K`, at most `capacity` of them.
pub(crate) struct PlanCache<K, P> {
    /// Most recently used last.
    entries: Vec<(K, P)>,
    capacity: usize,
    made: u64,
    /// What an evicted plan is called in the reaper's logs.
    what: &'static str,
}

impl<K: PartialEq, P: Send + 'static> PlanCache<K, P> {
    pub(crate) fn new(capacity: usize, what: &'static str) -> Self {
        PlanCache { entries: Vec::new(), capacity: capacity.max(1), made: 0, what }
    }

    /// Plans cached.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Plans made since the cache was created (a hit makes none).
    pub(crate) fn made(&self) -> u64 {
        self.made
    }

    /// Bounds the cache (at least 1); the least recently used plans beyond it are retired.
    pub(crate) fn set_capacity(&mut self, capacity: usize, op: &OpStream) -> Result<()> {
        if capacity == 0 {
            return Err(Error::invalid("capacity", "must be at least 1"));
        }
        self.capacity = capacity;
        let excess = self.entries.len().saturating_sub(capacity);
        if excess > 0 {
            let evicted: Vec<P> = self.entries.drain(..excess).map(|(_, p)| p).collect();
            op.retire(self.what, evicted);
        }
        Ok(())
    }

    /// The plan for `key`, made by `make` on a miss (evicting the least recently used one when
    /// full). The plan found becomes the most recently used.
    pub(crate) fn get_or_make(&mut self, key: K, op: &OpStream, make: impl FnOnce(&K) -> Result<P>) -> Result<&P> {
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            let hit = self.entries.remove(i);
            self.entries.push(hit);
        } else {
            let plan = make(&key)?;
            self.made += 1;
            if self.entries.len() >= self.capacity {
                // Inside an op: destroying here could synchronize the device on the op path.
                let (_, evicted) = self.entries.remove(0);
                op.retire(self.what, evicted);
            }
            self.entries.push((key, plan));
        }
        // Not empty: a plan was just pushed or moved to the end.
        let last = self.entries.len() - 1;
        Ok(&self.entries[last].1)
    }

    /// Stores `plan` under `key` as the most recently used, in place of the plan cached under
    /// it (which goes to the reaper), evicting the least recently used one when full.
    // Only cuBLASLt's autotuner stores plans it made itself.
    #[cfg_attr(not(feature = "cublaslt"), allow(dead_code))]
    pub(crate) fn insert(&mut self, key: K, plan: P, op: &OpStream) {
        let mut retired = Vec::new();
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            retired.push(self.entries.remove(i).1);
        }
        if self.entries.len() >= self.capacity {
            retired.push(self.entries.remove(0).1);
        }
        self.made += 1;
        self.entries.push((key, plan));
        if !retired.is_empty() {
            op.retire(self.what, retired);
        }
    }

    /// Moves every plan out (for the reaper, or to be forgotten with a poisoned context).
    pub(crate) fn take_all(&mut self) -> Option<Vec<P>> {
        (!self.entries.is_empty()).then(|| self.entries.drain(..).map(|(_, p)| p).collect())
    }
}
