//! What names a buffer and its users: [`BufferId`], [`BufferKind`], and [`HolderId`] (the
//! thread or lane job holding a pending mark).

use std::sync::atomic::{AtomicU64, Ordering};

/// Process-unique buffer identity, shown in errors as `buffer #N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct BufferId(pub u64);

impl BufferId {
    /// A new identity, never handed out before in this process.
    pub(crate) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        BufferId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What memory a tracked buffer is: it decides whether the buffer has an allocation write and
/// whether only streams touch it, and names the buffer in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufferKind {
    /// Device memory (`GpuRef`): allocated through a recorder, touched only by streams.
    Device,
    /// Pinned host memory (`HostBuffer`): filled by the host, read by the host too.
    Host,
    /// A module's `__device__` or `__constant__` variable (`GpuRef` over module memory):
    /// touched only by streams, with no allocation write (the module's load filled it), and
    /// never freed by cusched (the module owns it).
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    ModuleGlobal,
}

impl std::fmt::Display for BufferKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BufferKind::Device => "buffer",
            BufferKind::Host => "host buffer",
            BufferKind::ModuleGlobal => "module global",
        })
    }
}

/// Identifies the thread holding a pending mark, so that a thread that would wait for itself
/// gets an error at once instead of a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HolderId(u64);

impl HolderId {
    /// The calling thread's identity.
    #[inline]
    pub(crate) fn current() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // Const-initialized (0 is no id yet), so that every preflight after the thread's first
        // reads it without the lazy-init check.
        thread_local!(static ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
        ID.with(|id| {
            if id.get() == 0 {
                id.set(NEXT.fetch_add(1, Ordering::Relaxed));
            }
            HolderId(id.get())
        })
    }
}
