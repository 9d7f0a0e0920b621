//! Per-buffer use state and the pending marks that make preflight-to-commit atomic.

use super::order::{Inversion, Stamp};
use super::wait::{ConflictWait, TimedOut};
use super::EventRef;
use crate::backend::sim::FenceMutation;
use crate::error::{Error, Result};
use crate::sync::Guard;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use crate::access::Access;

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
}

impl std::fmt::Display for BufferKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BufferKind::Device => "buffer",
            BufferKind::Host => "host buffer",
        })
    }
}

/// Identifies the thread holding a pending mark, so that a thread that would wait for itself
/// gets an error at once instead of a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HolderId(u64);

/// What a launch asks of each buffer it takes a pending mark on: the same for all of them.
#[derive(Clone, Copy)]
pub(crate) struct MarkRequest {
    /// Who takes the mark (the thread, or its lane job).
    pub holder: HolderId,
    /// How long to wait for a conflicting mark (`DeviceConfig::preflight_timeout`).
    pub timeout: Duration,
    /// The process-wide index of the launch's stream: its own events need no wait.
    pub on: u32,
    /// The lane job making the launch, for the check of submit order.
    pub stamp: Stamp,
}

impl HolderId {
    /// The calling thread's identity.
    pub(crate) fn current() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
        HolderId(ID.with(|id| *id))
    }
}

#[derive(Default)]
struct State {
    last_write: Option<EventRef>,
    /// Newest read per stream since `last_write`.
    reads: SmallVec<[EventRef; 2]>,
    pending_writer: Option<HolderId>,
    pending_readers: SmallVec<[HolderId; 2]>,
    /// Preflights blocked on a pending mark; `publish` notifies only when non-zero.
    waiters: u32,
    /// The next committed use is the allocation's write (device buffers are allocated through
    /// a recorder before anyone else can see them); only [`FenceMutation::NoAllocationWrite`]
    /// reads it.
    allocation_next: bool,
    /// The lane jobs of the last write and of the youngest read since it, for the check of
    /// submit order (`order`).
    stamps: super::order::Stamps,
}

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
    /// on a one-stream device may leave it out (see `solo`). Pinned host memory is not.
    pub(crate) device_memory: bool,
    /// The name the user gave the buffer, shown beside its id in errors and hazards.
    label: Mutex<Option<Arc<str>>>,
    /// Whether the buffer's last writer failed (see [`BufferTrack::failed_input`]): every use
    /// reads it with one relaxed load, and takes `failure`'s lock only when it is set.
    failed: AtomicBool,
    /// What failed, while `failed` is set. A leaf lock.
    failure: Mutex<Option<Failure>>,
}

/// The failed last writer of a buffer: the op as errors name it, and its error.
struct Failure {
    op: String,
    cause: Error,
}

impl<D: BufferOwner> BufferTrack<D> {
    /// Tracking for memory of context epoch `epoch` (read from the stream or context the
    /// memory came from, not from the device, which may have moved on meanwhile); `scratch`
    /// for memory only the crate's own ops see.
    pub(crate) fn new(kind: BufferKind, device: Arc<D>, epoch: u64, scratch: bool) -> Self {
        let generation = device.generation();
        // Pinned host memory is filled by the host; only device memory has an allocation write.
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

    /// Whether the buffer's last writer failed: one relaxed load. A failure is set before the
    /// failed op releases the buffer (its pending mark, its reservation, the solo stream's lock,
    /// its job's completion), so a use that checks after acquiring the buffer the same way sees
    /// it; a use racing the failed op unordered may not, as it may not see its data either.
    #[inline(always)]
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// [`Error::FailedInput`] for a read of the buffer, when its last writer failed.
    #[cold]
    #[inline(never)]
    pub(crate) fn failed_input(&self) -> Option<Error> {
        // The failure mutex is a leaf: the buffer is named (its label lock) after releasing it.
        let (op, cause) = {
            let failure = crate::sync::lock(&self.failure);
            let f = failure.as_ref()?;
            (f.op.clone(), f.cause.clone())
        };
        Some(Error::FailedInput {
            buffer: self.name(),
            label: self.label().map(|l| l.to_string()),
            op,
            cause: Box::new(cause),
        })
    }

    /// Marks the buffer's contents as left by `op`, which failed with `cause`: later reads fail
    /// with [`Error::FailedInput`] until a successful write. With `keep`, an earlier failure
    /// stays as it is (a job's failure does not rename the launch inside it that failed first).
    #[cold]
    #[inline(never)]
    pub(crate) fn fail(&self, op: &str, cause: &Error, keep: bool) {
        let mut failure = crate::sync::lock(&self.failure);
        if keep && failure.is_some() {
            return;
        }
        *failure = Some(Failure { op: op.to_string(), cause: cause.clone() });
        self.failed.store(true, Ordering::Relaxed);
    }

    /// A successful write replaced the contents: clears a failure. One relaxed load when there
    /// is none.
    #[inline(always)]
    pub(crate) fn clear_failure(&self) {
        if self.is_failed() {
            self.clear_failure_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn clear_failure_slow(&self) {
        let mut failure = crate::sync::lock(&self.failure);
        *failure = None;
        self.failed.store(false, Ordering::Relaxed);
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

    /// Waits until no conflicting recorder is pending, marks `holder` pending with `access`, and
    /// appends the events this use must follow to `out`, leaving out those of stream `on` (the
    /// process-wide index of the stream the use runs on): stream order covers them, and not
    /// cloning them saves two atomic operations each on the op path. `me` is the lane job
    /// making the use: one that would invert submit order against a committed use (see
    /// `order`) is left in `found`, the mark taken all the same, for the caller to report once
    /// no lock is held.
    ///
    /// Inlined into the preflight's loop over its uses: a call per buffer costs more there
    /// than the mark itself.
    #[inline(always)]
    pub(crate) fn acquire_stamped(
        &self,
        access: Access,
        mark: MarkRequest,
        out: &mut SmallVec<[EventRef; 8]>,
        found: &mut Option<Box<Inversion>>,
    ) -> Result<()> {
        self.acquire_as(access, mark, out, self.device.fence_mutation(), found)
    }

    /// `acquire_stamped`, breaking `mutation`'s rule when one is given (stream uses only: the host's
    /// own waits are not what the checker observes).
    ///
    /// Kept small on purpose: waiting for a conflicting holder and the checker's mutations are
    /// out of line, so the common case (no conflict, no mutation) is one lock, a few loads and
    /// pushes, and one unlock.
    #[inline(always)]
    fn acquire_as(
        &self,
        access: Access,
        mark: MarkRequest,
        out: &mut SmallVec<[EventRef; 8]>,
        mutation: Option<FenceMutation>,
        found: &mut Option<Box<Inversion>>,
    ) -> Result<()> {
        let MarkRequest { holder, timeout, on, stamp: me } = mark;
        let mut st = crate::sync::lock(&self.state);
        if st.pending_writer.is_some() || (access.writes() && !st.pending_readers.is_empty()) {
            st = self.wait_unpending(st, access, holder, timeout)?;
        }
        // Outside lane jobs one branch; in a job, a compare or two.
        if me.seq != 0 {
            if let Some((theirs, wrote)) = st.stamps.check(access, me) {
                self.inverted(access, me, theirs, wrote, found);
            }
        }
        if mutation.is_some() {
            self.mark_mutated(&mut st, access, holder, on, out, mutation);
            return Ok(());
        }
        // Plain pushes, not `extend`: its reserve-then-fill costs more than the few (usually
        // no) events it adds. Events of stream `on` are ordered by stream order already.
        if access.writes() {
            st.pending_writer = Some(holder);
            for ev in &st.reads {
                if ev.pos().stream != on {
                    out.push(ev.clone());
                }
            }
        } else {
            st.pending_readers.push(holder);
        }
        if let Some(ev) = &st.last_write {
            if ev.pos().stream != on {
                out.push(ev.clone());
            }
        }
        Ok(())
    }

    /// Notes an inversion of submit order (the first of the launch's).
    #[cold]
    #[inline(never)]
    fn inverted(&self, access: Access, mine: Stamp, theirs: Stamp, wrote: bool, found: &mut Option<Box<Inversion>>) {
        if found.is_none() {
            *found = Some(Box::new(Inversion {
                buffer: self.id,
                label: self.label(),
                name: self.name(),
                mine,
                access,
                theirs,
                theirs_wrote: wrote,
            }));
        }
    }

    /// Waits, bounded by `timeout`, until no recorder holds a mark conflicting with `access`.
    #[cold]
    #[inline(never)]
    fn wait_unpending<'a>(
        &self,
        mut st: Guard<'a, State>,
        access: Access,
        holder: HolderId,
        timeout: Duration,
    ) -> Result<Guard<'a, State>> {
        let mut wait = None;
        loop {
            let conflict = st.pending_writer.is_some() || (access.writes() && !st.pending_readers.is_empty());
            if !conflict {
                return Ok(st);
            }
            if st.pending_writer == Some(holder) || st.pending_readers.contains(&holder) {
                return Err(Error::WouldDeadlock {
                    what: format!(
                        "{} is held by an uncommitted launch on this same thread; commit that recorder before preflighting another that uses it",
                        self.name()
                    ),
                });
            }
            let wait = wait.get_or_insert_with(|| ConflictWait::start(timeout));
            st = wait
                .block(&self.cv, st, |st| &mut st.waiters)
                .map_err(|TimedOut| Error::BufferBusy { buffer: self.name(), waited: timeout })?;
        }
    }

    /// The pending mark and candidates under one of the checker's mutations.
    #[cold]
    #[inline(never)]
    fn mark_mutated(
        &self,
        st: &mut State,
        access: Access,
        holder: HolderId,
        on: u32,
        out: &mut SmallVec<[EventRef; 8]>,
        mutation: Option<FenceMutation>,
    ) {
        let mut push_elsewhere = |ev: &EventRef| {
            if ev.pos().stream != on {
                out.push(ev.clone());
            }
        };
        if access.writes() {
            st.pending_writer = Some(holder);
            if mutation == Some(FenceMutation::LatestReaderOnly) {
                // `fold` keeps the reads in commit order under this mutation.
                st.reads.last().into_iter().for_each(&mut push_elsewhere);
            } else {
                st.reads.iter().for_each(&mut push_elsewhere);
            }
        } else {
            st.pending_readers.push(holder);
        }
        if access.writes() || mutation != Some(FenceMutation::NoCrossStreamRaw) {
            // (A last write on the reader's own stream is ordered by stream order anyway.)
            st.last_write.iter().for_each(&mut push_elsewhere);
        }
    }

    /// Clears `holder`'s pending mark; with `event`, first folds the committed use into the
    /// state.
    pub(crate) fn publish(&self, access: Access, holder: HolderId, event: Option<&EventRef>) {
        self.publish_stamped(access, holder, event, Stamp::NONE)
    }

    /// [`publish`](Self::publish) for a use by lane job `me`, which the buffer remembers for
    /// the check of submit order.
    pub(crate) fn publish_stamped(&self, access: Access, holder: HolderId, event: Option<&EventRef>, me: Stamp) {
        let mut st = crate::sync::lock(&self.state);
        if event.is_some() {
            st.stamps.fold(access, me);
        }
        if access.writes() {
            debug_assert_eq!(st.pending_writer, Some(holder));
            st.pending_writer = None;
        } else if let Some(i) = st.pending_readers.iter().position(|h| *h == holder) {
            st.pending_readers.swap_remove(i);
        }
        if let Some(ev) = event {
            let mutation = self.device.fence_mutation();
            if mutation.is_none() {
                st.allocation_next = false;
                fold(&mut st, access, ev, false);
            } else {
                let allocation = std::mem::take(&mut st.allocation_next);
                if !(allocation && mutation == Some(FenceMutation::NoAllocationWrite)) {
                    fold(&mut st, access, ev, mutation == Some(FenceMutation::LatestReaderOnly));
                }
            }
        }
        if st.waiters > 0 {
            self.cv.notify_all();
        }
    }

    /// Events a host access must wait for: the last write, plus every read if the host writes.
    /// Waits out conflicting pending recorders first, like a preflight.
    pub(crate) fn host_dependencies(&self, access: Access, timeout: Duration) -> Result<SmallVec<[EventRef; 8]>> {
        super::reservation::before_host_use(self, access, timeout)?;
        let holder = HolderId::current();
        let mut out = SmallVec::new();
        // The host is no stream: every use counts.
        let mark = MarkRequest { holder, timeout, on: u32::MAX, stamp: Stamp::NONE };
        self.acquire_as(access, mark, &mut out, None, &mut None)?;
        self.publish(access, holder, None);
        Ok(out)
    }

    /// Every use still outstanding, for a free: last write and all reads. Needs no pending
    /// check: a recorder holding the buffer also holds a reference, so it cannot be freed then.
    pub(crate) fn all_uses(&self) -> SmallVec<[EventRef; 8]> {
        if self.device.fence_mutation() == Some(FenceMutation::NoFreeFence) {
            return SmallVec::new();
        }
        let st = crate::sync::lock(&self.state);
        st.last_write.iter().chain(st.reads.iter()).cloned().collect()
    }
}

/// Folds a committed use into the state. `in_commit_order` keeps `reads` ordered by commit
/// (newest last), for [`FenceMutation::LatestReaderOnly`].
#[inline]
fn fold(st: &mut State, access: Access, ev: &EventRef, in_commit_order: bool) {
    use super::plan::FencePoint;
    if access.writes() {
        st.last_write = Some(ev.clone());
        if !st.reads.is_empty() {
            st.reads.clear();
        }
        return;
    }
    // Two reads on one stream can commit out of sequence order when two threads share the
    // stream; keep the newer, which covers the older by stream order.
    let pos = ev.pos();
    let Some(i) = st.reads.iter().position(|r| r.pos().stream == pos.stream) else {
        st.reads.push(ev.clone());
        return;
    };
    if st.reads[i].pos().seq >= pos.seq {
        return;
    }
    if in_commit_order {
        st.reads.remove(i);
        st.reads.push(ev.clone());
    } else {
        st.reads[i] = ev.clone();
    }
}
