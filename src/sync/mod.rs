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

//!
//! The files: `rank.rs` (the rank table), `ranked.rs` ([`Ranked`] and how a lock's rank is
//! read), `held.rs` (the ranks a thread holds, debug builds), `guard.rs` (the lock helpers and
//! their guards), `role.rs` (thread roles), `slots.rs` ([`TypeSlots`]); [`guarded`] is here.

mod guard;
#[cfg(debug_assertions)]
mod held;
pub(crate) mod rank;
#[cfg(all(test, debug_assertions))]
mod rank_tests;
mod ranked;
pub(crate) mod role;
mod slots;

pub(crate) use guard::{lock, lock_unranked, read, wait, wait_timeout, write, Guard};
pub(crate) use ranked::Ranked;
pub(crate) use slots::TypeSlots;

/// Runs user code that the crate calls for the user (a keep-alive's `Drop`, a waker, a trace
/// hook) so that a panic in it is logged and cannot stop the thread that runs it.
pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::error!("cusched: {what} panicked; the panic was caught and delivery goes on");
    }
}
