//! The ranks of the documented lock order, lowest (outermost) first. A lock may be taken only
//! while every lock the thread holds has a lower rank; two locks of one rank are never held
//! together (buffer state locks: one at a time; the event pool and an event's lazy-record
//! lock: never both). [`LEAF`] is the highest: nothing is taken under a leaf.

/// A lane's submit mutex (declared submits only).
pub(crate) const LANE_SUBMIT: u8 = 10;
/// A stream's graph-recording gate (`StreamSlot::recording`): a free, or an allocation with
/// its first write, on a stream a recording holds runs under it, so that none lands inside an
/// op's capture (an error there may classify: the poison lock comes after).
pub(crate) const RECORDING_GATE: u8 = 15;
/// `DeviceShared::poison` (`classify`).
pub(crate) const POISON: u8 = 20;
/// `DeviceShared::stream_create`, held through a rebuild and by `create_stream`.
pub(crate) const STREAM_CREATE: u8 = 30;
/// A buffer's state lock (`BufferTrack::state`), one at a time.
pub(crate) const BUFFER: u8 = 40;
/// A stream slot's lock (`StreamSlot::state`), at most one.
pub(crate) const STREAM: u8 = 50;
/// The pinned host cache: a host buffer may drop under a tracker lock.
pub(crate) const HOST_CACHE: u8 = 60;
/// The state of a completion held in place: under it, it queries its event (which may
/// record it: an event's lazy-record lock), or moves to a shared state it makes.
pub(crate) const COMPLETION_IN_PLACE: u8 = 62;
/// A completion's shared state: callbacks, keep-alives and wakers run after it is
/// released; under it, an event's lazy-record lock (a query).
pub(crate) const COMPLETION: u8 = 65;
/// The event pool's lock, or one event's lazy-record lock: never both.
pub(crate) const EVENT: u8 = 70;
/// The tracer's `RwLock` (`rebase`, under `stream_create`).
pub(crate) const TRACER: u8 = 80;
/// The backend context's `RwLock`.
pub(crate) const BACKEND: u8 = 90;
/// Start locks of the device's threads (completion thread, reaper): their join-handle
/// locks (leaves) are taken under them.
pub(crate) const THREAD_START: u8 = 100;
/// The device's list of lane threads: each lane's join-handle lock (a leaf) under it.
pub(crate) const LANES: u8 = 110;
/// Everything else: nothing is taken while it is held.
pub(crate) const LEAF: u8 = u8::MAX;

/// The rank's name, for the checker's message.
#[cfg(debug_assertions)]
pub(super) fn name(rank: u8) -> &'static str {
    match rank {
        LANE_SUBMIT => "a lane's submit lock",
        POISON => "the device's poison lock",
        STREAM_CREATE => "the device's stream-creation lock",
        RECORDING_GATE => "a stream's graph-recording gate",
        BUFFER => "a buffer state lock",
        STREAM => "a stream slot lock",
        HOST_CACHE => "the pinned host cache",
        COMPLETION_IN_PLACE => "a completion's state held in place",
        COMPLETION => "a completion's shared state",
        EVENT => "the event pool or an event's lazy-record lock",
        TRACER => "the tracer's lock",
        BACKEND => "the backend context's lock",
        THREAD_START => "a thread's start lock",
        LANES => "the device's lane list",
        LEAF => "a leaf lock",
        _ => "an unnamed rank",
    }
}
