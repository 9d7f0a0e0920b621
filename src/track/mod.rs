//! Use tracking: how declared buffer uses become the fewest `cuStreamWaitEvent` fences.
//!
//! # Design
//!
//! Every stream `S` carries a sequence counter and a **vector clock**. Streams are numbered
//! process-wide (`registry`), not per device, so positions and clocks span every device of the
//! process: a buffer used on streams of two GPUs is fenced exactly like one used on two streams
//! of one GPU (`cuStreamWaitEvent` accepts another context's event). One device alone numbers
//! its streams densely from 0, so its clocks are as short as before. A committed
//! launch on `S` takes the next sequence number `k` and records one pooled event; that event is a
//! **position** `(S, k)` plus a snapshot of `S`'s clock at that moment. A clock entry `C[T] = j`
//! means "everything stream `T` did up to and including its `j`-th commit is known to have
//! happened before this point". Waiting on an event joins (element-wise max) its clock into the
//! waiting stream's clock, so coverage is transitive: a stream that waited on `(T, k)` covers
//! every `(T, j <= k)` and everything `(T, k)` itself covered.
//!
//! Every buffer keeps, under its own lock:
//!
//! ```text
//!   last_write : Option<event>          the most recent committed write
//!   reads      : [event; <= 1 per stream] reads committed since that write (newest per stream)
//!   pending    : writer | readers        recorders preflighted but not yet committed
//! ```
//!
//! Four operations combine them:
//!
//! ```text
//!   acquire (preflight, per buffer, in buffer-id order)
//!       wait until no conflicting recorder is pending, mark this one pending,
//!       collect candidates: last_write, plus every read if this use writes
//!   fence   (preflight, once per recorder, under the stream lock)
//!       plan = plan_waits(stream, stream clock, candidates)    -- pure, see `plan`
//!       for each planned event: cuStreamWaitEvent, join its clock
//!   record  (commit, once per recorder, under the stream lock)
//!       seq += 1; record a pooled event; snapshot the clock
//!   publish (commit, per buffer)
//!       writes replace last_write and clear reads; reads replace their stream's entry
//!       if newer; clear the pending mark; wake conflicting preflights
//! ```
//!
//! A read-after-write thus waits on the last write; a write waits on the last write and on
//! the newest read of *every* stream since it (not only the latest reader); reads never wait
//! on reads. The pending marks make preflight-to-commit atomic per buffer: a conflicting
//! preflight on another thread blocks (bounded by `DeviceConfig::preflight_timeout`) until
//! the holder commits, so no committed use is ever missing from the state it reads. Every
//! such wait (for a pending mark, a reservation, or a solo launch in flight) is one
//! `wait::ConflictWait`, whose deadline every round checks.
//!
//! # Solo mode
//!
//! A device that has run tracked work on one stream only needs none of this for device
//! memory: stream order orders every launch there. Its closure-form launches then skip
//! acquire and publish (and, when nothing needs it, the position), and the states miss their
//! uses until a launch on another stream closes solo mode. From then on a launch that takes
//! marks (on any stream, the solo one too) waits for any conflicting solo launch still in
//! flight, and one elsewhere of memory a solo launch used then waits on an event of the solo
//! stream that covers those uses (the floor, once every solo launch has committed). `solo`
//! has the protocol and why it holds.
//!
//! # Lock order
//!
//! Buffer locks in increasing buffer id (never two at once in practice: each is released before
//! the next is taken), then at most one stream lock, then the event pool lock or one event's
//! lazy-record lock (never both). Nothing takes a buffer lock while holding a stream lock. A
//! lazily recorded event is recorded on its producer's backend stream, which the event holds:
//! no second stream lock is taken for it. A preflight whose stream is still of a context the
//! device is leaving releases every mark before it waits for the rebuild (the device's stream
//! creation lock, which the rebuild holds until every stream has moved), so that wait holds
//! nothing the rebuild needs.

mod buffer;
mod clock;
mod event;
pub(crate) mod order;
mod plan;
mod registry;
pub(crate) mod reservation;
mod solo;
mod stream;
mod wait;

pub use buffer::Access;
pub(crate) use buffer::{BufferKind, BufferOwner, BufferTrack, HolderId, MarkRequest};
pub(crate) use clock::{Clock, Pos};
#[cfg(feature = "nccl")]
pub(crate) use event::PassMark;
pub(crate) use event::{EventPool, EventRef};
pub use order::SubmitOrderCheck;
pub(crate) use plan::plan_waits;
pub(crate) use solo::{Cover, Floor, HeldHere, IdUses, Solo};
pub(crate) use stream::{CommitAt, FenceError, StreamSlot};
pub use stream::{StreamId, StreamStats};
