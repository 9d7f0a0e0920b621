//! The per-device cache of pinned host memory that dropped [`HostBuffer`](crate::HostBuffer)s
//! leave behind, for later buffers of the same size class.
//!
//! Freeing pinned memory is far more expensive than it looks: `cuMemFreeHost` waits until the
//! whole device is idle, and while it waits every other thread's CUDA calls in the process wait
//! too (measured on an H100: 47 ms behind a 50 ms kernel on another stream, and another
//! thread's `cuMemcpyAsync` held up for as long). Allocating costs about 9 ms per 16 MiB. A
//! pipeline that drops its staging buffers as their copies finish would stall every stream
//! once per buffer. So a dropped buffer's block is parked here with the events its copies must
//! pass, and [`HostCache::take`] hands it to the next allocation of its class once they have.
//! Blocks go back to the driver only past [`DeviceConfig::host_cache_limit`], on
//! [`Device::trim_host_cache`] and at shutdown, through the reaper.
//!
//! [`DeviceConfig::host_cache_limit`]: crate::DeviceConfig::host_cache_limit
//! [`Device::trim_host_cache`]: crate::Device::trim_host_cache

use crate::backend::memory::PinnedFree;
use crate::reaper::{Reaper, Retired};
use crate::track::EventRef;
use cudarc::driver::CudaContext;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// How many parked blocks of a class [`HostCache::take`] queries before allocating anew: the
/// oldest come first and are the likeliest to be done, so a long scan rarely finds more.
const SCAN: usize = 8;

/// What the cache needs of a parked block (a trait so that the policy is tested without a GPU).
pub(crate) trait Parkable: Send + Sized {
    /// Bytes the block holds: its size class.
    fn capacity(&self) -> usize;
    /// The context epoch it was allocated in.
    fn epoch(&self) -> u64;
    /// Whether every GPU use of it has finished; `Err` when that can no longer be known (a
    /// poisoned context).
    fn gpu_done(&mut self) -> crate::error::Result<bool>;
    /// The block as an object for the reaper, which waits for its uses and frees it.
    fn retire(self) -> Retired;
}

/// A dropped host buffer's pinned block, the context that owns it and the events of the
/// copies that may still use it.
pub(crate) struct ParkedBlock {
    pub ctx: Arc<CudaContext>,
    pub block: PinnedFree,
    pub epoch: u64,
    pub after: Vec<EventRef>,
}

impl Parkable for ParkedBlock {
    fn capacity(&self) -> usize {
        self.block.capacity()
    }

    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn gpu_done(&mut self) -> crate::error::Result<bool> {
        while let Some(ev) = self.after.last() {
            if !ev.is_done()? {
                return Ok(false);
            }
            self.after.pop();
        }
        Ok(true)
    }

    fn retire(self) -> Retired {
        Retired { what: "pinned host memory", after: self.after, ctx: Some(self.ctx), object: Box::new(self.block) }
    }
}

/// Counters of a device's pinned host memory cache ([`Device::host_cache_stats`](crate::Device::host_cache_stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostCacheStats {
    /// Bytes of pinned memory parked for reuse now.
    pub cached_bytes: usize,
    /// Blocks parked for reuse now.
    pub cached_blocks: usize,
    /// Host buffers that reused a parked block.
    pub reused: u64,
    /// Host buffers that found no finished block of their class and allocated.
    pub allocated: u64,
}

struct State<B> {
    classes: HashMap<usize, VecDeque<B>>,
    stats: HostCacheStats,
    closed: bool,
}

/// Parked pinned blocks by size class.
pub(crate) struct HostCache<B: Parkable = ParkedBlock> {
    state: crate::sync::Ranked<Mutex<State<B>>, { crate::sync::rank::HOST_CACHE }>,
    limit: Option<usize>,
}

impl<B: Parkable> HostCache<B> {
    /// A cache that keeps at most `limit` bytes (`None`: no limit).
    pub(crate) fn new(limit: Option<usize>) -> Self {
        HostCache {
            state: crate::sync::Ranked::new(Mutex::new(State {
                classes: HashMap::new(),
                stats: HostCacheStats::default(),
                closed: false,
            })),
            limit,
        }
    }

    /// A parked block of size class `capacity` from context epoch `epoch` whose GPU uses have
    /// all finished, if there is one. Blocks of an older epoch, or whose events fail, go to
    /// `reaper`.
    pub(crate) fn take(&self, capacity: usize, epoch: u64, reaper: &Reaper) -> Option<B> {
        let mut dead = Vec::new();
        let found = {
            let mut st = crate::sync::lock(&self.state);
            let found = match st.classes.get_mut(&capacity) {
                Some(queue) => pick(queue, epoch, &mut dead),
                None => None,
            };
            let freed: usize =
                dead.iter().map(Parkable::capacity).sum::<usize>() + found.as_ref().map_or(0, B::capacity);
            st.stats.cached_bytes -= freed;
            st.stats.cached_blocks -= dead.len() + usize::from(found.is_some());
            match found {
                Some(_) => st.stats.reused += 1,
                None => st.stats.allocated += 1,
            }
            found
        };
        for block in dead {
            reaper.defer(block.retire());
        }
        found
    }

    /// Parks `block` for reuse; past the limit, after shutdown or when it belongs to an older
    /// context than `epoch`, hands it to `reaper` instead.
    pub(crate) fn put(&self, block: B, epoch: u64, reaper: &Reaper) {
        let rejected = {
            let mut st = crate::sync::lock(&self.state);
            let bytes = block.capacity();
            let fits = self.limit.is_none_or(|limit| st.stats.cached_bytes + bytes <= limit);
            if st.closed || block.epoch() != epoch || !fits {
                Some(block)
            } else {
                st.stats.cached_bytes += bytes;
                st.stats.cached_blocks += 1;
                st.classes.entry(bytes).or_default().push_back(block);
                None
            }
        };
        if let Some(block) = rejected {
            reaper.defer(block.retire());
        }
    }

    /// Hands every parked block to `reaper`; returns the bytes released.
    pub(crate) fn trim(&self, reaper: &Reaper) -> usize {
        let blocks: Vec<B> = {
            let mut st = crate::sync::lock(&self.state);
            st.stats.cached_bytes = 0;
            st.stats.cached_blocks = 0;
            st.classes.drain().flat_map(|(_, queue)| queue).collect()
        };
        let bytes = blocks.iter().map(Parkable::capacity).sum();
        for block in blocks {
            reaper.defer(block.retire());
        }
        bytes
    }

    /// Trims, and from now on hands every block put to `reaper` at once (device shutdown).
    pub(crate) fn close(&self, reaper: &Reaper) {
        crate::sync::lock(&self.state).closed = true;
        self.trim(reaper);
    }

    pub(crate) fn stats(&self) -> HostCacheStats {
        crate::sync::lock(&self.state).stats
    }
}

/// Removes and returns the first of the oldest [`SCAN`] blocks of `queue` that is of `epoch`
/// and done; moves the ones that are of another epoch or failed into `dead`.
fn pick<B: Parkable>(queue: &mut VecDeque<B>, epoch: u64, dead: &mut Vec<B>) -> Option<B> {
    let mut i = 0;
    let mut scanned = 0;
    while i < queue.len() && scanned < SCAN {
        scanned += 1;
        // `None`: of an older context, or its events failed; either way never reusable.
        let done = if queue[i].epoch() == epoch { queue[i].gpu_done().ok() } else { None };
        match done {
            Some(true) => return queue.remove(i),
            Some(false) => i += 1,
            None => dead.extend(queue.remove(i)),
        }
    }
    None
}

#[cfg(test)]
mod tests;
