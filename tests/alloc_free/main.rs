//! Steady-state allocation counts, on the simulator and on a real GPU.
//!
//! A binary of its own: it installs a counting global allocator, which counts the allocations
//! of the calling thread only and so would see nothing of other tests, but which every
//! allocation of every test in the binary would pay for.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "nvrtc")]
mod gpu;
mod sim;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local!(static ALLOCS: Cell<u64> = const { Cell::new(0) });

// SAFETY: 1. every call forwards to `System` with the caller's arguments unchanged; 2. the
// counter is a const-initialized thread-local `Cell` without a destructor, so touching it never
// allocates nor recurses into the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made so far by the calling thread.
fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}
