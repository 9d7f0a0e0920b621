//! Which of a device's own threads the current thread is, so that a wait that could never end
//! there is refused instead of hanging.
//!
//! Each thread writes only its own entries, once, when it starts; `Cell`s in a thread-local
//! need no ordering.

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
