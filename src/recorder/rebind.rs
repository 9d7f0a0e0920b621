//! Buffer substitutions while a graph is recorded again: a rebinding
//! ([`crate::GraphExec::rebind`]) runs the recording once more with each rebound buffer standing
//! for the buffer the graph was recorded with, so every op reaches the new buffer (its address,
//! its simulated memory, its declared use) without knowing it.
//!
//! The substitutions are the recording thread's, set only while its recording runs: a thread
//! with none pays one thread-local flag read per declared use and per address taken.

use super::Tracked;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// One substitution: the buffer the graph was recorded with (its id), and the buffer that
/// stands for it (as its handle, for addresses and memory, and its tracking side).
#[derive(Clone)]
pub(crate) struct Substitute {
    pub recorded: u64,
    pub handle: Arc<dyn Any + Send + Sync>,
    pub tracked: Arc<dyn Tracked>,
}

thread_local! {
    /// A recording closure runs on this thread (see [`in_recording_closure`]).
    static CLOSURE: Cell<bool> = const { Cell::new(false) };
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static TABLE: RefCell<Vec<Substitute>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f`, a graph's recording closure, with `table` in force on this thread (the previous
/// table and closure flag come back after, on unwind too).
pub(crate) fn with_substitutes<R>(table: &[Substitute], f: impl FnOnce() -> R) -> R {
    struct Restore(Vec<Substitute>, bool, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = std::mem::take(&mut self.0);
            TABLE.with(|t| *t.borrow_mut() = old);
            ACTIVE.with(|a| a.set(self.1));
            CLOSURE.with(|c| c.set(self.2));
        }
    }
    let previous = TABLE.with(|t| std::mem::replace(&mut *t.borrow_mut(), table.to_vec()));
    let was = ACTIVE.with(|a| a.replace(!table.is_empty()));
    let was_closure = CLOSURE.with(|c| c.replace(true));
    let _restore = Restore(previous, was, was_closure);
    f()
}

/// Whether a graph's recording closure runs on this thread: a launch it makes on a stream
/// no recording holds is refused (it would run eagerly at every recording, and at every
/// replay on the simulator, and while a rebinding records again it would declare a stand-in
/// yet touch the buffer it stands for).
#[inline(always)]
pub(crate) fn in_recording_closure() -> bool {
    CLOSURE.with(Cell::get)
}

/// The substitute for buffer `id` on this thread, if a recording running here rebinds it.
#[inline(always)]
pub(crate) fn substitute(id: u64) -> Option<Substitute> {
    if !ACTIVE.with(Cell::get) {
        return None;
    }
    lookup(id)
}

#[cold]
#[inline(never)]
fn lookup(id: u64) -> Option<Substitute> {
    TABLE.with(|t| t.borrow().iter().find(|s| s.recorded == id).cloned())
}
