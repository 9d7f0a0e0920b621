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
//!   pending    : write | reads           uses preflighted with their launch's event, not yet
//!                                        folded into the two above
//! ```
//!
//! A launch claims its event when it begins (before any buffer), so that its uses can name it
//! while it is still pending; the event gets its position only at commit. Four operations:
//!
//! ```text
//!   begin   (preflight, once per launch, under the stream lock)
//!       claim the event the commit will place (pending, holder = this thread)
//!   acquire (preflight, per buffer, in buffer-id order)
//!       settle: fold pending uses whose events committed since, drop abandoned ones
//!       wait until no conflicting use is pending, enter this one (the claimed event),
//!       collect candidates: last_write, plus every read if this use writes
//!   fence   (preflight, once per launch with candidates, under the stream lock)
//!       plan = plan_waits(stream, stream clock, candidates)    -- pure, see `plan`
//!       for each planned event: cuStreamWaitEvent, join its clock
//!   commit  (once per launch, under the stream lock, then one atomic store)
//!       seq += 1; place the event (position, clock snapshot); record it unless lazy;
//!       mark it committed: every buffer sees the use published, without its lock
//! ```
//!
//! Settling folds a write into `last_write` (clearing `reads`) and a read into its stream's
//! entry if newer. A read-after-write thus waits on the last write; a write waits on the last
//! write and on the newest read of *every* stream since it (not only the latest reader); reads
//! never wait on reads. The pending uses make preflight-to-commit atomic per buffer: a
//! conflicting preflight on another thread blocks (bounded by
//! `DeviceConfig::preflight_timeout`) until the holder's event commits (or is abandoned by a
//! failed launch), so no committed use is ever missing from the state it reads. The commit
//! wakes waiters only when its event counts some: the waiter registers on the event and checks
//! its state under the buffer's lock, the commit stores the state and reads the count, both
//! sequentially consistent, so one of the two always sees the other.
//!
//! Per 3-buffer launch this is one lock per buffer and two of the stream (three with a
//! cross-stream fence): the commit takes no buffer lock.
//!
//! # Lock order
//!
//! Buffer locks in increasing buffer id (never two at once in practice: each is released before
//! the next is taken), then at most one stream lock, then the event pool lock or one event's
//! lazy-record lock (never both). Nothing takes a buffer lock while holding a stream lock (a
//! commit wakes waiting preflights after releasing it). A lazily recorded event is recorded on
//! its producer's backend stream, which the event holds: no second stream lock is taken for it.

mod buffer;
mod clock;
mod event;
mod plan;
mod registry;
pub(crate) mod reservation;
mod stream;

pub use buffer::Access;
pub(crate) use buffer::{BufferId, BufferTrack, HolderId};
pub(crate) use clock::{Clock, Pos};
pub(crate) use event::{EventPool, EventRef};
pub(crate) use plan::plan_waits;
pub(crate) use stream::{Begun, FenceError, StreamSlot};
pub use stream::{StreamId, StreamStats};
