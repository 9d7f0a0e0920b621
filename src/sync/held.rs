//! The ranks this thread holds, with where each was taken: the lock-order checker of debug
//! builds (the module is compiled in those only).

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
