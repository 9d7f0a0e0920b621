//! The lock helpers: take a lock (checking its rank in debug builds), wait on a condvar, and
//! the guards that release the rank with the lock.

#[cfg(debug_assertions)]
use super::held;
#[cfg(not(debug_assertions))]
use super::rank;
use super::ranked::{RankedMutex, RankedRwLock};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

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
