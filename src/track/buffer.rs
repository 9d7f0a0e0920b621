//! Per-buffer use state and the pending marks that make preflight-to-commit atomic.
//!
//! The files: this one holds [`BufferTrack`] (what it is made of, its name, its generation);
//! `id.rs` the identities (buffer, kind, mark holder), `marks.rs` the use state and its
//! pending marks (acquire, publish), `fold.rs` the fold of a committed use into that state,
//! `failure.rs` the failed-writer flag, and `written.rs` the last write's position.

mod failure;
mod fold;
mod id;
mod marks;
mod written;

use crate::backend::sim::FenceMutation;
use crate::error::{Error, Result};
use failure::Failure;
use marks::State;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};

pub(crate) use id::{BufferId, BufferKind, HolderId};
pub(crate) use marks::MarkRequest;

pub use crate::access::Access;

/// What a buffer's tracking needs of the device that owns it. The device layer implements it
/// (`DeviceShared`, named there as `device::BufferTrack`), so that this layer names no type
/// above it; the one implementation makes every use static.
pub(crate) trait BufferOwner: Send + Sync + 'static {
    /// The device's generation now: a handle made in an older one is stale.
    fn generation(&self) -> u64;
    /// The simulator's deliberate fence fault, if one is set (the checker's own tests).
    fn fence_mutation(&self) -> Option<FenceMutation>;
}

/// The tracking half of a buffer (device or pinned host memory), owned by a device `D`.
pub(crate) struct BufferTrack<D: BufferOwner> {
    pub id: BufferId,
    /// Device or pinned host memory; names the buffer in messages.
    pub kind: BufferKind,
    pub device: Arc<D>,
    pub generation: u64,
    /// The context epoch the memory belongs to.
    pub epoch: u64,
    state: crate::sync::Ranked<Mutex<State>, { crate::sync::rank::BUFFER }>,
    cv: Condvar,
    /// Declared lane jobs' claims on the next uses (`reservation`).
    pub(crate) reservations: super::reservation::Reservations,
    /// Scratch the crate made for its own ops (a library's workspace, analysis buffers,
    /// pointer arrays): no user holds a handle to it, so a declared job need not (and could
    /// not) declare it.
    pub(crate) scratch: bool,
    /// The lane job whose thread made the buffer, if one did: that job may use it undeclared.
    pub(crate) made_in: Option<super::reservation::Ticket>,
    /// Device memory, which only streams touch: the host never reads its state, so a launch
    /// on a one-stream device may leave it out (see `solo`). Pinned host memory is not, nor
    /// is a module's global: a later buffer over the same memory takes over the uses its state
    /// holds when it drops, and solo uses would be missing from them.
    pub(crate) device_memory: bool,
    /// The name the user gave the buffer, shown beside its id in errors and hazards.
    label: Mutex<Option<Arc<str>>>,
    /// Whether the buffer's last writer failed (see [`BufferTrack::failed_input`]): every use
    /// reads it with one relaxed load, and takes `failure`'s lock only when it is set.
    failed: AtomicBool,
    /// What failed, while `failed` is set. A leaf lock.
    failure: Mutex<Option<Failure>>,
}

impl<D: BufferOwner> BufferTrack<D> {
    /// Tracking for memory of context epoch `epoch` (read from the stream or context the
    /// memory came from, not from the device, which may have moved on meanwhile); `scratch`
    /// for memory only the crate's own ops see.
    pub(crate) fn new(kind: BufferKind, device: Arc<D>, epoch: u64, scratch: bool) -> Self {
        let generation = device.generation();
        // Pinned host memory is filled by the host, a module's global by its load; only
        // allocated device memory has an allocation write.
        let state = State { allocation_next: kind == BufferKind::Device, ..State::default() };
        Self {
            id: BufferId::next(),
            kind,
            device,
            generation,
            epoch,
            state: crate::sync::Ranked::new(Mutex::new(state)),
            cv: Condvar::new(),
            reservations: Default::default(),
            scratch,
            made_in: super::reservation::current_ticket(),
            device_memory: kind == BufferKind::Device,
            label: Mutex::new(None),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    /// The name the user gave the buffer, if any.
    pub(crate) fn label(&self) -> Option<Arc<str>> {
        crate::sync::lock(&self.label).clone()
    }

    /// Names the buffer in errors and hazards from now on.
    pub(crate) fn set_label(&self, label: &str) {
        *crate::sync::lock(&self.label) = Some(Arc::from(label));
    }

    /// The buffer as errors and logs name it (`buffer #N`, or `buffer #N "label"`).
    pub(crate) fn name(&self) -> String {
        match self.label() {
            Some(l) => format!("{} #{} \"{l}\"", self.kind, self.id.0),
            None => format!("{} #{}", self.kind, self.id.0),
        }
    }

    /// [`Error::Stale`] when the handle is of an earlier generation of its device.
    pub(crate) fn check_fresh(&self) -> Result<()> {
        if !self.is_fresh() {
            return Err(self.stale());
        }
        Ok(())
    }

    /// Whether the handle is of the device's current generation.
    pub(crate) fn is_fresh(&self) -> bool {
        self.device.generation() == self.generation
    }

    /// The error for a use of this handle after its device moved to a new generation.
    #[cold]
    #[inline(never)]
    fn stale(&self) -> Error {
        Error::Stale { what: self.name(), made: self.generation, current: self.device.generation() }
    }
}
