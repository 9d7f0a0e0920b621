//! [`Ranked`]: a lock with its rank in its type, and the traits through which the lock helpers
//! read the rank of any lock (a lock not declared `Ranked` is a leaf).

use super::rank;
use std::sync::{Arc, Mutex, RwLock};

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
