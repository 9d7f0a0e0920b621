//! Which solo launches this thread holds between preflight and commit (closure form only), so
//! that a wait for a conflicting solo launch knows when it would wait for itself.

use std::cell::{Cell, RefCell};

thread_local! {
    /// The solo launch this thread holds between preflight and commit (closure form only),
    /// as (device uid, launch number); launches nest, so a thread holds a stack of them, and
    /// this is its bottom.
    static HELD: Cell<Option<(u32, u64)>> = const { Cell::new(None) };
    /// The rest of that stack: solo launches made inside another's enqueue.
    static HELD_NESTED: RefCell<Vec<(u32, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Held by a closure-form solo launch from its preflight until its commit, so that a wait on
/// the same thread for a conflicting solo launch knows when it would wait for itself.
///
/// Launches may be made from a thread-local's destructor, after `HELD_NESTED` is gone: it is
/// reached only through `try_with` (a panic in a thread-local's destructor aborts the
/// process). A launch it cannot note is held nowhere: a conflicting use from its own enqueue
/// then waits for it until `DeviceConfig::preflight_timeout` (`Error::BufferBusy`) instead of
/// failing at once.
pub(crate) struct HeldHere {
    kept: Kept,
}

/// Where a [`HeldHere`] noted its launch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// In `HELD`, the bottom of the stack.
    Bottom,
    /// In `HELD_NESTED`.
    Nested,
    /// Nowhere: the thread's thread-locals are being destroyed.
    Nowhere,
}

impl HeldHere {
    /// Notes that this thread holds solo launch `ticket` of device `device`.
    #[inline(always)]
    pub(crate) fn enter(device: u32, ticket: u64) -> HeldHere {
        // `HELD` needs no destructor, so it stays usable while the thread's thread-locals are
        // destroyed.
        if HELD.get().is_none() {
            HELD.set(Some((device, ticket)));
            return HeldHere { kept: Kept::Bottom };
        }
        Self::enter_nested(device, ticket)
    }

    #[cold]
    #[inline(never)]
    fn enter_nested(device: u32, ticket: u64) -> HeldHere {
        let kept = match HELD_NESTED.try_with(|held| held.borrow_mut().push((device, ticket))) {
            Ok(()) => Kept::Nested,
            Err(_) => Kept::Nowhere,
        };
        HeldHere { kept }
    }
}

impl Drop for HeldHere {
    #[inline(always)]
    fn drop(&mut self) {
        match self.kept {
            Kept::Bottom => HELD.set(None),
            // Closure-form launches commit in the reverse order of their preflights.
            Kept::Nested => {
                let _ = HELD_NESTED.try_with(|held| held.borrow_mut().pop());
            }
            Kept::Nowhere => {}
        }
    }
}

/// Whether this thread holds solo launch `ticket` of `device` (as far as it could note: see
/// [`HeldHere`]).
pub(crate) fn held_here(device: u32, ticket: u64) -> bool {
    HELD.get() == Some((device, ticket))
        || HELD_NESTED.try_with(|held| held.borrow().contains(&(device, ticket))).unwrap_or(false)
}
