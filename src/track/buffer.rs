//! Per-buffer use state and the pending uses that make preflight-to-commit atomic.

use super::EventRef;
use crate::backend::sim::FenceMutation;
use crate::device::DeviceShared;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use crate::access::Access;

/// Process-unique buffer identity, shown in errors as `buffer #N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct BufferId(pub u64);

impl BufferId {
    pub(crate) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        BufferId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Identifies the thread holding a pending use, so that a thread that would wait for itself
/// gets an error at once instead of a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HolderId(u64);

impl HolderId {
    /// No thread: the holder of events committed as soon as they are made.
    pub(crate) const NONE: HolderId = HolderId(0);

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
    /// A write preflighted with its launch's event, and reads likewise: never both, since a
    /// write waits for every other use and every use waits for a pending write. An entry whose
    /// event has committed since is folded into `last_write` and `reads` by the next one to
    /// take the lock (`settle`), so that a commit takes no buffer lock.
    pending_write: Option<EventRef>,
    pending_reads: SmallVec<[EventRef; 2]>,
    /// The next committed use is the allocation's write (device buffers are allocated through
    /// a recorder before anyone else can see them); only [`FenceMutation::NoAllocationWrite`]
    /// reads it.
    allocation_next: bool,
}

/// The tracking half of a buffer (device or pinned host memory).
pub(crate) struct BufferTrack {
    pub id: BufferId,
    /// `"buffer"` or `"host buffer"`, for messages.
    pub kind: &'static str,
    pub device: Arc<DeviceShared>,
    pub generation: u64,
    /// The context epoch the memory belongs to.
    pub epoch: u64,
    state: Mutex<State>,
    /// Preflights waiting for a pending use's commit; woken by the commit when its event has
    /// waiters (see [`FenceEvent::add_waiter`](super::event::FenceEvent::add_waiter)).
    cv: Condvar,
    /// Declared lane jobs' claims on the next uses (`reservation`).
    pub(crate) reservations: super::reservation::Reservations,
}

impl BufferTrack {
    /// Tracking for memory of context epoch `epoch` (read from the stream or context the
    /// memory came from, not from the device, which may have moved on meanwhile).
    pub(crate) fn new(kind: &'static str, device: Arc<DeviceShared>, epoch: u64) -> Self {
        let generation = device.generation();
        // Pinned host memory is filled by the host; only device memory has an allocation write.
        let state = State { allocation_next: kind == "buffer", ..State::default() };
        BufferTrack {
            id: BufferId::next(),
            kind,
            device,
            generation,
            epoch,
            state: Mutex::new(state),
            cv: Condvar::new(),
            reservations: Default::default(),
        }
    }

    pub(crate) fn name(&self) -> String {
        format!("{} #{}", self.kind, self.id.0)
    }

    pub(crate) fn check_fresh(&self) -> Result<()> {
        let current = self.device.generation();
        if current != self.generation {
            return Err(Error::Stale { what: self.name(), made: self.generation, current });
        }
        Ok(())
    }

    /// Waits until no conflicting launch is pending, enters `event` (the launch's, claimed and
    /// not committed yet) as a pending use with `access`, and appends the events this use must
    /// follow to `out`, leaving out those of stream `on` (the process-wide index of the stream
    /// the use runs on): stream order covers them, and not cloning them saves two atomic
    /// operations each on the op path.
    ///
    /// The launch's commit publishes the use by committing `event`; its failure, by abandoning
    /// it. Either way this buffer's lock is not taken again for it.
    pub(crate) fn acquire(
        &self,
        access: Access,
        event: &EventRef,
        timeout: Duration,
        on: u32,
        out: &mut SmallVec<[EventRef; 8]>,
    ) -> Result<()> {
        let mutation = self.device.fence_mutation;
        // Uncontended, the lock is taken once and nothing waits: the slow path relocks.
        let mut st = crate::sync::lock(&self.state);
        settle(&mut st, mutation);
        if conflicts(&st, access) {
            drop(st);
            st = self.wait_turn(access, event.holder(), timeout)?;
        }
        self.collect(&st, access, on, out, mutation);
        if access.writes() {
            st.pending_write = Some(event.clone());
        } else {
            st.pending_reads.push(event.clone());
        }
        Ok(())
    }

    /// Wakes preflights waiting on this buffer: a pending use's event committed or was
    /// abandoned while they waited.
    pub(crate) fn wake(&self) {
        // Under the lock: a waiter registers and checks the event while holding it, so it is
        // either already waiting on `cv` or will see the event's new state.
        let _st = crate::sync::lock(&self.state);
        self.cv.notify_all();
    }

    /// Locks the state once no pending use conflicts with `access` by `holder`: settled, with
    /// only uses that may run alongside this one still pending.
    fn wait_turn(&self, access: Access, holder: HolderId, timeout: Duration) -> Result<MutexGuard<'_, State>> {
        let mut st = crate::sync::lock(&self.state);
        let mut deadline = None;
        loop {
            settle(&mut st, self.device.fence_mutation);
            if !conflicts(&st, access) {
                return Ok(st);
            }
            if pending(&st).any(|ev| ev.holder() == holder) {
                return Err(Error::WouldDeadlock {
                    what: format!(
                        "{} is held by an uncommitted launch on this same thread; commit that recorder before preflighting another that uses it",
                        self.name()
                    ),
                });
            }
            // A timeout too large for `Instant` means no deadline: wait in long slices.
            let left = (*deadline.get_or_insert_with(|| Instant::now().checked_add(timeout)))
                .map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Err(Error::BufferBusy { buffer: self.name(), waited: timeout });
            }
            // Registered on every pending event, so that whichever settles first wakes this
            // thread; an event that settled meanwhile means settling again, not waiting.
            let mut waited_on = SmallVec::<[EventRef; 2]>::new();
            let mut settled = false;
            for ev in pending(&st) {
                if ev.add_waiter() {
                    waited_on.push(ev.clone());
                } else {
                    settled = true;
                }
            }
            if !settled {
                st = crate::sync::wait_timeout(&self.cv, st, left);
            }
            for ev in waited_on {
                ev.remove_waiter();
            }
        }
    }

    /// Appends to `out` the events a use with `access` on stream `on` must follow, breaking
    /// `mutation`'s rule when one is given (stream uses only: the host's own waits are not
    /// what the checker observes).
    fn collect(
        &self,
        st: &State,
        access: Access,
        on: u32,
        out: &mut SmallVec<[EventRef; 8]>,
        mutation: Option<FenceMutation>,
    ) {
        use super::plan::FencePoint;
        // Plain pushes, not `extend`: its reserve-then-fill costs more than the few (usually
        // no) events it adds.
        let mut push_elsewhere = |ev: &EventRef| {
            if ev.pos().stream != on {
                out.push(ev.clone());
            }
        };
        if access.writes() {
            if mutation == Some(FenceMutation::LatestReaderOnly) {
                // `settle` keeps the reads in commit order under this mutation.
                st.reads.last().into_iter().for_each(&mut push_elsewhere);
            } else {
                st.reads.iter().for_each(&mut push_elsewhere);
            }
        }
        if access.writes() || mutation != Some(FenceMutation::NoCrossStreamRaw) {
            // (A last write on the reader's own stream is ordered by stream order anyway.)
            st.last_write.iter().for_each(&mut push_elsewhere);
        }
    }

    /// Events a host access must wait for: the last write, plus every read if the host writes.
    /// Waits out conflicting pending launches first, like a preflight.
    pub(crate) fn host_dependencies(&self, access: Access, timeout: Duration) -> Result<SmallVec<[EventRef; 8]>> {
        super::reservation::before_host_use(self, access, timeout)?;
        let st = self.wait_turn(access, HolderId::current(), timeout)?;
        let mut out = SmallVec::new();
        // The host is no stream: every use counts.
        self.collect(&st, access, u32::MAX, &mut out, None);
        Ok(out)
    }

    /// Every use still outstanding, for a free: last write and all reads. Needs no wait for
    /// pending uses: a launch holding the buffer also holds a reference, so it cannot be freed
    /// then.
    pub(crate) fn all_uses(&self) -> SmallVec<[EventRef; 8]> {
        if self.device.fence_mutation == Some(FenceMutation::NoFreeFence) {
            return SmallVec::new();
        }
        let mut st = crate::sync::lock(&self.state);
        settle(&mut st, self.device.fence_mutation);
        st.last_write.iter().chain(st.reads.iter()).cloned().collect()
    }
}

/// Folds the pending uses whose launches have committed into `last_write` and `reads`, and drops
/// those whose launches failed. Pending uses are one write or only reads (a write waits for
/// every other use to settle, and every use waits for a pending write): reads fold in any order
/// (`fold` keeps the newest per stream).
#[inline]
fn settle(st: &mut State, mutation: Option<FenceMutation>) {
    if st.pending_write.as_ref().is_some_and(|w| !w.is_pending()) {
        if let Some(w) = st.pending_write.take() {
            fold_settled(st, Access::Write, w, mutation);
        }
    }
    if !st.pending_reads.is_empty() {
        settle_reads(st, mutation);
    }
}

fn settle_reads(st: &mut State, mutation: Option<FenceMutation>) {
    // From the back, so that `swap_remove` only moves entries already looked at (and the usual
    // single entry is a pop).
    let mut i = st.pending_reads.len();
    while i > 0 {
        i -= 1;
        if !st.pending_reads[i].is_pending() {
            let r = st.pending_reads.swap_remove(i);
            fold_settled(st, Access::Read, r, mutation);
        }
    }
}

/// Whether a use with `access` must wait for a pending one (of a settled state).
fn conflicts(st: &State, access: Access) -> bool {
    st.pending_write.is_some() || (access.writes() && !st.pending_reads.is_empty())
}

/// The uses pending on a buffer.
fn pending(st: &State) -> impl Iterator<Item = &EventRef> {
    st.pending_write.iter().chain(st.pending_reads.iter())
}

/// Folds a use whose event is no longer pending: committed, unless its launch abandoned it.
fn fold_settled(st: &mut State, access: Access, ev: EventRef, mutation: Option<FenceMutation>) {
    if ev.is_abandoned() {
        return;
    }
    let allocation = std::mem::take(&mut st.allocation_next);
    if !(allocation && mutation == Some(FenceMutation::NoAllocationWrite)) {
        fold(st, access, ev, mutation == Some(FenceMutation::LatestReaderOnly));
    }
}

/// Folds a committed use into the state. `in_commit_order` keeps `reads` ordered by commit
/// (newest last), for [`FenceMutation::LatestReaderOnly`].
fn fold(st: &mut State, access: Access, ev: EventRef, in_commit_order: bool) {
    use super::plan::FencePoint;
    if access.writes() {
        st.last_write = Some(ev);
        if !st.reads.is_empty() {
            st.reads.clear();
        }
        return;
    }
    // Two reads on one stream can commit out of sequence order when two threads share the
    // stream; keep the newer, which covers the older by stream order.
    let pos = ev.pos();
    let Some(i) = st.reads.iter().position(|r| r.pos().stream == pos.stream) else {
        st.reads.push(ev);
        return;
    };
    if st.reads[i].pos().seq >= pos.seq {
        return;
    }
    if in_commit_order {
        st.reads.remove(i);
        st.reads.push(ev);
    } else {
        st.reads[i] = ev;
    }
}
