use super::*;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;

const BUSY: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// A parked block whose GPU state the test sets, and that reports its id when the reaper
/// drops it.
struct Fake {
    id: u32,
    capacity: usize,
    epoch: u64,
    state: Arc<AtomicU8>,
    reaped: mpsc::Sender<u32>,
}

struct Probe(u32, mpsc::Sender<u32>);
impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

impl Parkable for Fake {
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn epoch(&self) -> u64 {
        self.epoch
    }
    fn gpu_done(&mut self) -> crate::error::Result<bool> {
        match self.state.load(Ordering::Acquire) {
            BUSY => Ok(false),
            DONE => Ok(true),
            _ => Err(crate::error::Error::Shutdown),
        }
    }
    fn retire(self) -> Retired {
        Retired { what: "a fake block", after: Vec::new(), ctx: None, object: Box::new(Probe(self.id, self.reaped)) }
    }
}

struct Fixture {
    reaper: Reaper,
    tx: mpsc::Sender<u32>,
    rx: mpsc::Receiver<u32>,
}

impl Fixture {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Fixture { reaper: Reaper::default(), tx, rx }
    }

    fn block(&self, id: u32, capacity: usize, epoch: u64, state: u8) -> (Fake, Arc<AtomicU8>) {
        let state = Arc::new(AtomicU8::new(state));
        (Fake { id, capacity, epoch, state: state.clone(), reaped: self.tx.clone() }, state)
    }

    /// Ids the reaper dropped, once everything handed to it is done.
    fn reaped(self) -> Vec<u32> {
        self.reaper.shutdown();
        let mut ids: Vec<u32> = self.rx.try_iter().collect();
        ids.sort();
        ids
    }
}

#[test]
fn size_classes_cover_each_size_and_waste_at_most_a_quarter_or_a_page() {
    use crate::backend::memory::pinned_capacity;
    assert_eq!(pinned_capacity(1), 64);
    assert_eq!(pinned_capacity(100), 128);
    assert_eq!(pinned_capacity(4096), 4096);
    assert_eq!(pinned_capacity(16 << 20), 16 << 20);
    assert_eq!(pinned_capacity((16 << 20) + 1), 20 << 20);
    for bytes in [4097usize, 5000, 65_537, 1 << 20, (1 << 20) + 4096, 3 << 24, (1 << 30) + 7] {
        let class = pinned_capacity(bytes);
        assert!(class >= bytes && class % 4096 == 0, "{bytes} -> {class}");
        assert!(class - bytes < 4096 || (class - bytes) * 4 <= bytes, "{bytes} -> {class} wastes too much");
        assert_eq!(pinned_capacity(class), class, "a class is its own class");
    }
}

#[test]
fn a_parked_block_is_reused_only_once_its_gpu_uses_finished() {
    let fx = Fixture::new();
    let cache = HostCache::new(None);
    let (block, state) = fx.block(1, 4096, 1, BUSY);
    cache.put(block, 1, &fx.reaper);
    assert_eq!(cache.stats().cached_bytes, 4096);
    assert!(cache.take(4096, 1, &fx.reaper).is_none(), "reused while a copy may still use it");
    state.store(DONE, Ordering::Release);
    assert!(cache.take(8192, 1, &fx.reaper).is_none(), "served from another class");
    let got = cache.take(4096, 1, &fx.reaper).expect("a finished block of the class");
    assert_eq!(got.id, 1);
    let stats = cache.stats();
    assert_eq!((stats.cached_bytes, stats.cached_blocks, stats.reused, stats.allocated), (0, 0, 1, 2));
    drop(got);
    assert!(fx.reaped().is_empty(), "a reused block must not be freed");
}

#[test]
fn the_oldest_finished_block_is_taken_and_busy_ones_stay() {
    let fx = Fixture::new();
    let cache = HostCache::new(None);
    let (a, _busy) = fx.block(1, 4096, 1, BUSY);
    let (b, _) = fx.block(2, 4096, 1, DONE);
    let (c, _) = fx.block(3, 4096, 1, DONE);
    for block in [a, b, c] {
        cache.put(block, 1, &fx.reaper);
    }
    assert_eq!(cache.take(4096, 1, &fx.reaper).map(|b| b.id), Some(2));
    assert_eq!(cache.take(4096, 1, &fx.reaper).map(|b| b.id), Some(3));
    assert!(cache.take(4096, 1, &fx.reaper).is_none());
    assert_eq!(cache.stats().cached_blocks, 1);
}

#[test]
fn blocks_past_the_limit_of_an_old_context_or_after_close_go_to_the_reaper() {
    let fx = Fixture::new();
    let cache = HostCache::new(Some(8192));
    let blocks: Vec<Fake> = (1..=3).map(|id| fx.block(id, 4096, 1, DONE).0).collect();
    for block in blocks {
        cache.put(block, 1, &fx.reaper);
    }
    assert_eq!(cache.stats().cached_bytes, 8192, "the third block is over the limit");
    let (stale, _) = fx.block(4, 4096, 1, DONE);
    let other = HostCache::new(None);
    other.put(stale, 2, &fx.reaper);
    assert_eq!(other.stats().cached_blocks, 0, "a block of an older context is parked");
    let (late, _) = fx.block(5, 4096, 1, DONE);
    cache.close(&fx.reaper);
    assert_eq!(cache.stats().cached_bytes, 0);
    cache.put(late, 1, &fx.reaper);
    assert_eq!(cache.stats().cached_blocks, 0, "parked after close");
    assert_eq!(fx.reaped(), vec![1, 2, 3, 4, 5]);
}

#[test]
fn failed_or_stale_blocks_met_while_taking_are_reaped_and_trim_releases_the_rest() {
    let fx = Fixture::new();
    let cache = HostCache::new(None);
    let (failed, _) = fx.block(1, 4096, 1, FAILED);
    let (busy, _) = fx.block(2, 4096, 1, BUSY);
    let (other_class, _) = fx.block(3, 1 << 20, 1, BUSY);
    for block in [failed, busy, other_class] {
        cache.put(block, 1, &fx.reaper);
    }
    assert!(cache.take(4096, 1, &fx.reaper).is_none());
    assert_eq!(cache.stats().cached_blocks, 2, "the failed block is still parked");
    // After a context rebuild the busy block of the old epoch can never be reused.
    assert!(cache.take(4096, 2, &fx.reaper).is_none());
    assert_eq!(cache.stats().cached_blocks, 1);
    assert_eq!(cache.trim(&fx.reaper), 1 << 20);
    let stats = cache.stats();
    assert_eq!((stats.cached_bytes, stats.cached_blocks), (0, 0));
    assert_eq!(fx.reaped(), vec![1, 2, 3]);
}
