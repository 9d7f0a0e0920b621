//! Lock helpers that never panic, and the lock order checked in debug builds.
//!
//! A poisoned lock only means another thread panicked while holding it, and every state
//! guarded here stays consistent at each unlock point, so the helpers take the state as it is.
//!
//! Every lock of the crate is taken through [`lock`], [`read`] or [`write`], and every lock
//! has a rank ([`rank`]): a lock declared as [`Ranked`] names its rank in its type, once; any
//! other lock is a leaf. In debug builds (`cfg(debug_assertions)`, so in every test run) each
//! thread keeps the ranks it holds, and taking a lock whose rank is not above every rank held
//! panics, naming both: that is a bug detector for the documented lock order
//! (docs/ARCHITECTURE.md, "Lock order"), not error handling, and release builds carry none of
//! it (no thread-local access, the guards are the standard ones wrapped).

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// The ranks of the documented lock order, lowest (outermost) first. A lock may be taken only
/// while every lock the thread holds has a lower rank; two locks of one rank are never held
/// together (buffer state locks: one at a time; the event pool and an event's lazy-record
/// lock: never both). [`LEAF`](rank::LEAF) is the highest: nothing is taken under a leaf.
pub(crate) mod rank {
    /// A lane's submit mutex (declared submits only).
    pub(crate) const LANE_SUBMIT: u8 = 10;
    /// `DeviceShared::poison` (`classify`).
    pub(crate) const POISON: u8 = 20;
    /// `DeviceShared::stream_create`, held through a rebuild and by `create_stream`.
    pub(crate) const STREAM_CREATE: u8 = 30;
    /// A buffer's state lock (`BufferTrack::state`), one at a time.
    pub(crate) const BUFFER: u8 = 40;
    /// A stream slot's lock (`StreamSlot::state`), at most one.
    pub(crate) const STREAM: u8 = 50;
    /// The pinned host cache: a host buffer may drop under a tracker lock.
    pub(crate) const HOST_CACHE: u8 = 60;
    /// The state of a completion held in place: under it, it queries its event (which may
    /// record it: an event's lazy-record lock), or moves to a shared state it makes.
    pub(crate) const COMPLETION_IN_PLACE: u8 = 62;
    /// A completion's shared state: callbacks, keep-alives and wakers run after it is
    /// released; under it, an event's lazy-record lock (a query).
    pub(crate) const COMPLETION: u8 = 65;
    /// The event pool's lock, or one event's lazy-record lock: never both.
    pub(crate) const EVENT: u8 = 70;
    /// The tracer's `RwLock` (`rebase`, under `stream_create`).
    pub(crate) const TRACER: u8 = 80;
    /// The backend context's `RwLock`.
    pub(crate) const BACKEND: u8 = 90;
    /// Start locks of the device's threads (completion thread, reaper): their join-handle
    /// locks (leaves) are taken under them.
    pub(crate) const THREAD_START: u8 = 100;
    /// The device's list of lane threads: each lane's join-handle lock (a leaf) under it.
    pub(crate) const LANES: u8 = 110;
    /// Everything else: nothing is taken while it is held.
    pub(crate) const LEAF: u8 = u8::MAX;

    /// The rank's name, for the checker's message.
    #[cfg(debug_assertions)]
    pub(super) fn name(rank: u8) -> &'static str {
        match rank {
            LANE_SUBMIT => "a lane's submit lock",
            POISON => "the device's poison lock",
            STREAM_CREATE => "the device's stream-creation lock",
            BUFFER => "a buffer state lock",
            STREAM => "a stream slot lock",
            HOST_CACHE => "the pinned host cache",
            COMPLETION_IN_PLACE => "a completion's state held in place",
            COMPLETION => "a completion's shared state",
            EVENT => "the event pool or an event's lazy-record lock",
            TRACER => "the tracer's lock",
            BACKEND => "the backend context's lock",
            THREAD_START => "a thread's start lock",
            LANES => "the device's lane list",
            LEAF => "a leaf lock",
            _ => "an unnamed rank",
        }
    }
}

/// A lock with its rank in the lock order, named once where it is declared:
/// `Ranked<Mutex<State>, { rank::BUFFER }>`.
#[derive(Debug, Default)]
pub(crate) struct Ranked<L, const RANK: u8>(L);

impl<L, const RANK: u8> Ranked<L, RANK> {
    pub(crate) const fn new(lock: L) -> Self {
        Ranked(lock)
    }

    /// The lock itself, for what needs no locking (`get_mut`, `into_inner`).
    #[allow(dead_code)]
    pub(crate) fn inner_mut(&mut self) -> &mut L {
        &mut self.0
    }

    #[allow(dead_code)]
    pub(crate) fn into_inner(self) -> L {
        self.0
    }
}

/// A mutex with a rank: a [`Ranked`] one, or any other (a leaf).
pub(crate) trait RankedMutex {
    type Data;
    const RANK: u8;
    fn mutex(&self) -> &Mutex<Self::Data>;
}

impl<T> RankedMutex for Mutex<T> {
    type Data = T;
    const RANK: u8 = rank::LEAF;
    #[inline(always)]
    fn mutex(&self) -> &Mutex<T> {
        self
    }
}

impl<T, const R: u8> RankedMutex for Ranked<Mutex<T>, R> {
    type Data = T;
    const RANK: u8 = R;
    #[inline(always)]
    fn mutex(&self) -> &Mutex<T> {
        &self.0
    }
}

impl<M: RankedMutex + ?Sized> RankedMutex for Arc<M> {
    type Data = M::Data;
    const RANK: u8 = M::RANK;
    #[inline(always)]
    fn mutex(&self) -> &Mutex<M::Data> {
        (**self).mutex()
    }
}

/// A read-write lock with a rank: a [`Ranked`] one, or any other (a leaf).
pub(crate) trait RankedRwLock {
    type Data;
    const RANK: u8;
    fn rw(&self) -> &RwLock<Self::Data>;
}

impl<T> RankedRwLock for RwLock<T> {
    type Data = T;
    const RANK: u8 = rank::LEAF;
    #[inline(always)]
    fn rw(&self) -> &RwLock<T> {
        self
    }
}

impl<T, const R: u8> RankedRwLock for Ranked<RwLock<T>, R> {
    type Data = T;
    const RANK: u8 = R;
    #[inline(always)]
    fn rw(&self) -> &RwLock<T> {
        &self.0
    }
}

/// The ranks this thread holds, checked in debug builds only.
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;
    use std::panic::Location;

    thread_local! {
        /// Each held rank with where it was taken, in the order taken.
        static HELD: RefCell<Vec<(u8, &'static Location<'static>)>> = const { RefCell::new(Vec::new()) };
    }

    /// Notes `rank` as held; panics when a held rank is not below it.
    #[track_caller]
    pub(super) fn enter(rank: u8) {
        let at = Location::caller();
        let top = HELD
            .try_with(|h| {
                let mut h = h.borrow_mut();
                let top = h.iter().copied().filter(|&(r, _)| r >= rank).max_by_key(|&(r, _)| r);
                if top.is_none() {
                    h.push((rank, at));
                }
                top
            })
            .ok()
            .flatten();
        if let Some((top, top_at)) = top {
            panic!(
                "cusched: lock order violated: taking {} (rank {rank}) at {at} while holding {} (rank {top}) \
                 taken at {top_at}; see docs/ARCHITECTURE.md, \"Lock order\"",
                super::rank::name(rank),
                super::rank::name(top)
            );
        }
    }

    pub(super) fn exit(rank: u8) {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&(r, _)| r == rank) {
                h.remove(i);
            }
        });
    }

    /// The ranks held now, in the order taken (tests).
    #[cfg(test)]
    pub(super) fn ranks() -> Vec<u8> {
        HELD.with(|h| h.borrow().iter().map(|&(r, _)| r).collect())
    }
}

/// One held rank: noted when made, released when dropped. Nothing in release builds.
struct Held {
    #[cfg(debug_assertions)]
    rank: u8,
}

impl Held {
    #[inline(always)]
    #[cfg_attr(debug_assertions, track_caller)]
    fn enter(_rank: u8) -> Held {
        #[cfg(debug_assertions)]
        held::enter(_rank);
        Held {
            #[cfg(debug_assertions)]
            rank: _rank,
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        held::exit(self.rank);
    }
}

/// A held mutex, with its rank (debug builds).
pub(crate) struct Guard<'a, T> {
    inner: MutexGuard<'a, T>,
    held: Held,
}

impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> std::ops::DerefMut for Guard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// A held read lock, with its rank (debug builds).
pub(crate) struct ReadGuard<'a, T> {
    inner: RwLockReadGuard<'a, T>,
    _held: Held,
}

impl<T> std::ops::Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner
    }
}

/// A held write lock, with its rank (debug builds).
pub(crate) struct WriteGuard<'a, T> {
    inner: RwLockWriteGuard<'a, T>,
    _held: Held,
}

impl<T> std::ops::Deref for WriteGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> std::ops::DerefMut for WriteGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

/// Takes `m` (checking its rank in debug builds).
#[inline(always)]
#[cfg_attr(debug_assertions, track_caller)]
pub(crate) fn lock<M: RankedMutex + ?Sized>(m: &M) -> Guard<'_, M::Data> {
    // The rank is checked before blocking: an inversion panics instead of deadlocking.
    let held = Held::enter(M::RANK);
    Guard { inner: m.mutex().lock().unwrap_or_else(PoisonError::into_inner), held }
}

/// Takes `m` without a rank: for a lock user code holds (simulated memory), whose order is
/// the user's.
#[inline(always)]
pub(crate) fn lock_unranked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cv`, releasing `g`'s rank while waiting and taking it again (checked) after.
#[cfg_attr(debug_assertions, track_caller)]
pub(crate) fn wait<'a, T>(cv: &Condvar, g: Guard<'a, T>) -> Guard<'a, T> {
    let Guard { inner, held } = g;
    let rank = release(held);
    let inner = cv.wait(inner).unwrap_or_else(PoisonError::into_inner);
    Guard { inner, held: Held::enter(rank) }
}

/// [`wait`] for at most `d`.
#[cfg_attr(debug_assertions, track_caller)]
pub(crate) fn wait_timeout<'a, T>(cv: &Condvar, g: Guard<'a, T>, d: Duration) -> Guard<'a, T> {
    let Guard { inner, held } = g;
    let rank = release(held);
    let inner = match cv.wait_timeout(inner, d) {
        Ok((g, _)) => g,
        Err(e) => e.into_inner().0,
    };
    Guard { inner, held: Held::enter(rank) }
}

/// Lets go of a held rank (the lock itself is released by the condvar wait), returning it.
#[inline(always)]
fn release(held: Held) -> u8 {
    #[cfg(debug_assertions)]
    {
        let rank = held.rank;
        drop(held);
        rank
    }
    #[cfg(not(debug_assertions))]
    {
        let Held {} = held;
        rank::LEAF
    }
}

/// Takes `l` for reading (checking its rank in debug builds).
#[inline(always)]
#[cfg_attr(debug_assertions, track_caller)]
pub(crate) fn read<L: RankedRwLock + ?Sized>(l: &L) -> ReadGuard<'_, L::Data> {
    let held = Held::enter(L::RANK);
    ReadGuard { inner: l.rw().read().unwrap_or_else(PoisonError::into_inner), _held: held }
}

/// Takes `l` for writing (checking its rank in debug builds).
#[inline(always)]
#[cfg_attr(debug_assertions, track_caller)]
pub(crate) fn write<L: RankedRwLock + ?Sized>(l: &L) -> WriteGuard<'_, L::Data> {
    let held = Held::enter(L::RANK);
    WriteGuard { inner: l.rw().write().unwrap_or_else(PoisonError::into_inner), _held: held }
}

/// Which of a device's own threads the current thread is, so that a wait that could never end
/// there is refused instead of hanging.
///
/// Each thread writes only its own entries, once, when it starts; `Cell`s in a thread-local
/// need no ordering.
pub(crate) mod role {
    use std::cell::Cell;

    thread_local! {
        /// The id of the lane this thread runs (0: not a lane thread).
        static LANE: Cell<u64> = const { Cell::new(0) };
        /// The uid of the device whose completion thread this is (0: not one).
        static COMPLETION_OF: Cell<u32> = const { Cell::new(0) };
    }

    pub(crate) fn set_lane(id: u64) {
        LANE.with(|c| c.set(id));
    }

    pub(crate) fn lane() -> u64 {
        LANE.with(Cell::get)
    }

    pub(crate) fn set_completion_thread(device: u32) {
        COMPLETION_OF.with(|c| c.set(device));
    }

    pub(crate) fn completion_thread_of() -> u32 {
        COMPLETION_OF.with(Cell::get)
    }

    /// Whether this is a lane or a completion thread (of any device): joining a device's
    /// threads from here could wait on this very thread.
    pub(crate) fn on_device_thread() -> bool {
        lane() != 0 || completion_thread_of() != 0
    }
}

/// Runs user code that the crate calls for the user (a keep-alive's `Drop`, a waker, a trace
/// hook) so that a panic in it is logged and cannot stop the thread that runs it.
pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::error!("cusched: {what} panicked; the panic was caught and delivery goes on");
    }
}

/// Shared values, at most one per type, each made on first use. A lower layer holds one of
/// these for the layers above it (the device keeps a library's per-device caches here), so that
/// it owns their state without naming, and so importing, their types.
#[derive(Default)]
pub(crate) struct TypeSlots(Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl TypeSlots {
    /// The value of type `T`, made with `T::default()` on first use.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    pub(crate) fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = lock(&self.0);
        if let Some(found) = slots.iter().find_map(|s| s.clone().downcast::<T>().ok()) {
            return found;
        }
        let made = Arc::new(T::default());
        slots.push(made.clone());
        made
    }
}

#[cfg(all(test, debug_assertions))]
mod rank_tests {
    use super::*;

    fn panics(f: impl FnOnce()) -> String {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("no panic");
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn ranks_in_order_pass_and_are_released() {
        let (a, b, c) = (
            Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
            Ranked::<Mutex<u8>, { rank::STREAM }>::new(Mutex::new(0)),
            Mutex::new(0u8),
        );
        {
            let _a = lock(&a);
            let _b = lock(&b);
            let _c = lock(&c);
            assert_eq!(held::ranks(), vec![rank::BUFFER, rank::STREAM, rank::LEAF]);
        }
        assert!(held::ranks().is_empty());
        // Released out of order, then taken again.
        let ga = lock(&a);
        let gb = lock(&b);
        drop(ga);
        drop(gb);
        let _b = lock(&b);
        assert_eq!(held::ranks(), vec![rank::STREAM]);
    }

    #[test]
    fn an_inversion_panics() {
        let buffer = Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0));
        let stream = Ranked::<Mutex<u8>, { rank::STREAM }>::new(Mutex::new(0));
        let msg = panics(|| {
            let _s = lock(&stream);
            let _b = lock(&buffer);
        });
        assert!(msg.contains("a buffer state lock") && msg.contains("a stream slot lock"), "{msg}");
        // The panic released what the thread held.
        assert!(held::ranks().is_empty());
    }

    #[test]
    fn one_rank_twice_panics() {
        let (a, b) = (
            Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
            Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
        );
        panics(|| {
            let _a = lock(&a);
            let _b = lock(&b);
        });
    }

    #[test]
    fn anything_under_a_leaf_panics() {
        let leaf = Mutex::new(0u8);
        let (other, ranked) = (Mutex::new(0u8), Ranked::<RwLock<u8>, { rank::TRACER }>::new(RwLock::new(0)));
        panics(|| {
            let _l = lock(&leaf);
            let _o = lock(&other);
        });
        panics(|| {
            let _l = lock(&leaf);
            let _r = read(&ranked);
        });
        // A leaf under ranked locks is fine.
        let _r = write(&ranked);
        let _l = lock(&leaf);
    }

    #[test]
    fn a_condvar_wait_releases_the_rank_and_takes_it_again() {
        let stream = Ranked::<Mutex<bool>, { rank::STREAM }>::new(Mutex::new(false));
        let buffer = Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0));
        let cv = Condvar::new();
        let g = lock(&stream);
        let g = wait_timeout(&cv, g, Duration::from_millis(1));
        assert_eq!(held::ranks(), vec![rank::STREAM]);
        drop(g);
        // Waiting while holding a lower rank is fine; its rank comes back checked.
        let _b = lock(&buffer);
        let g = wait_timeout(&cv, lock(&stream), Duration::from_millis(1));
        assert_eq!(held::ranks(), vec![rank::BUFFER, rank::STREAM]);
        drop(g);
    }
}
