//! `LaunchRecorder`: declare a launch's buffer uses, `preflight` (queue the fences), enqueue,
//! `commit` (record the event later uses wait on).
//!
//! The shape is reserve-then-commit, in types: [`LaunchRecorder::preflight`] consumes the
//! recorder, reserves every buffer (a conflicting preflight on another thread waits for this
//! launch's commit) and fences the stream, and returns a [`Preflighted`] launch. Only that
//! value gives the [`LaunchScope`] to enqueue on, and only it can be committed, once: so
//! recording after preflight, preflighting twice, committing without preflight and committing
//! twice do not compile. A `Preflighted` dropped without commit commits anyway and logs an
//! error, so no enqueued work is ever left unfenced.
//!
//! [`LaunchRecorder::launch`] does all of it around a closure and is the everyday path; every
//! op of the crate goes through its internal form, `launch_event`. On a device that has run
//! tracked work on one stream only, the closure form of a launch of device memory is a solo
//! launch (see `track::solo`): it reserves and publishes nothing, since stream order orders
//! it, and `launch` records no position unless a trace needs one. The hand-paired form always
//! reserves.

mod context;
mod failure;
#[cfg(test)]
mod lazy_tests;
mod preflighted;
mod resource;
mod scope;
mod solo;

pub(crate) use failure::collect_writes;
pub use preflighted::Preflighted;
use preflighted::Reserved;
pub use resource::{External, Resource};
pub(crate) use resource::{ResourceKind, ResourceRef, ResourceSealed, Tracked};
pub use scope::LaunchScope;
use solo::solo_floor;

use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::trace::{NvtxRange, OpLabel, TraceTicket};
use crate::track::{Access, BufferTrack, EventRef, HeldHere, HolderId};
use smallvec::SmallVec;
use std::sync::Arc;

const USER_LAUNCH: OpLabel = OpLabel::new("user", "launch");

#[derive(Clone)]
struct Use {
    buf: Arc<dyn Tracked>,
    access: Access,
    /// The buffer's id, kept beside it so that sorting and solo bookkeeping need no call
    /// through `buf`.
    id: u64,
}

impl Use {
    fn track(&self) -> &BufferTrack {
        self.buf.track()
    }
}

/// Records the buffer uses of one launch (kernel, copy or library call) on one stream.
///
/// ```
/// use cusched::{Device, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let (s1, s2) = (device.new_stream()?, device.new_stream()?);
/// let a = device.upload(s1, &[1u32, 2, 3])?;
/// let b = device.alloc_zeros::<u32>(s2, 3)?;
/// let mut rec = LaunchRecorder::new_strict(s2);
/// rec.read(&a)?.write(&b)?;
/// let (src, dst) = (a.sim_data()?, b.sim_data()?);
/// // preflight makes s2 wait for a's upload on s1; commit records the event later users need.
/// rec.launch(&device, |scope| {
///     scope.sim_kernel(move || {
///         let src = src.read();
///         for (d, s) in dst.lock().iter_mut().zip(src.iter()) { *d = s * 10; }
///     })
/// })?;
/// assert_eq!(b.download(s1)?, vec![10, 20, 30]);
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// A recorder is only a list of declared uses until it is preflighted: cloning one (to retry
/// a preflight that failed, say) reserves nothing.
#[derive(Clone)]
pub struct LaunchRecorder {
    stream: StreamId,
    strict: bool,
    /// Buffers of other devices are accepted ([`with_peers`](Self::with_peers)).
    peers: bool,
    uses: SmallVec<[Use; 4]>,
    label: OpLabel,
}

/// What [`LaunchRecorder::launch_event`] hands back: the enqueue closure's value, the commit
/// event, and the op's trace ticket when a hook is set.
pub(crate) struct Launched<R> {
    pub value: R,
    pub event: Option<EventRef>,
    pub trace: Option<TraceTicket>,
}

impl<R: Send + 'static> Launched<R> {
    /// A completion carrying the value, resolved once the GPU passes the commit event; the
    /// trace ticket (if any) rides along, and `keep` stays alive until then.
    pub(crate) fn complete(self, device: &Device, keep: Vec<crate::completion::KeepAlive>) -> crate::Completion<R> {
        crate::completion::Completion::enqueued(&device.shared, Ok(self.value), self.event, keep, self.trace)
    }
}

impl<R> Launched<R> {
    /// For ops that return no [`crate::Completion`]: hands the trace ticket (if any) to the
    /// device's trace backlog, so the completion hooks still run when the GPU finishes.
    pub(crate) fn untracked(self, device: &Device) -> (R, Option<EventRef>) {
        if let Some(trace) = self.trace {
            hand_to_backlog(device, trace, self.event.clone());
        }
        (self.value, self.event)
    }

    /// [`untracked`](Self::untracked), for a caller that has no use for the event: the backlog
    /// takes it as it is.
    pub(crate) fn into_value(self, device: &Device) -> R {
        if let Some(trace) = self.trace {
            hand_to_backlog(device, trace, self.event);
        }
        self.value
    }
}

/// Runs `trace`'s completion hooks once the GPU has passed `event` (at once without one).
fn hand_to_backlog(device: &Device, trace: TraceTicket, event: Option<EventRef>) {
    match event {
        Some(event) => crate::device::Backlog::defer(&device.shared, event, trace),
        None => {
            let span = trace.completing(true);
            trace.completed(span);
        }
    }
}

impl std::fmt::Debug for LaunchRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchRecorder")
            .field("stream", &self.stream)
            .field("strict", &self.strict)
            .field("uses", &self.uses.iter().map(|u| (u.track().name(), u.access)).collect::<Vec<_>>())
            .finish()
    }
}

impl LaunchRecorder {
    /// A recorder that rejects untracked, foreign-device and stale memory with an error naming it.
    pub fn new_strict(stream: StreamId) -> Self {
        LaunchRecorder { stream, strict: true, peers: false, uses: SmallVec::new(), label: USER_LAUNCH }
    }

    /// A recorder that skips untracked, foreign-device and stale memory (with a debug log).
    pub fn new_permissive(stream: StreamId) -> Self {
        LaunchRecorder { stream, strict: false, peers: false, uses: SmallVec::new(), label: USER_LAUNCH }
    }

    /// Accepts buffers of other devices of this process too, for a launch that reads or writes
    /// peer memory (a peer copy, or a kernel given peer pointers after
    /// [`Device::enable_peer_access`]). Their uses are fenced like any other: the launch's
    /// stream waits for the conflicting uses on every device, and later uses on every device
    /// wait for the launch. Without it, a buffer of another device is
    /// [`Error::ForeignDevice`] (strict) or skipped (permissive), since a kernel given a pointer
    /// into another GPU's memory faults unless peer access is on.
    ///
    /// The buffers must be of the same backend as the stream (CUDA or simulated), else
    /// preflight fails with [`Error::WrongBackend`].
    pub fn with_peers(mut self) -> Self {
        self.peers = true;
        self
    }

    /// Names the launch for [`crate::KernelTrace`] hooks, the timeline and NVTX (library
    /// `"user"`; unnamed launches are `"launch"`).
    pub fn named(mut self, op: &'static str) -> Self {
        self.label = OpLabel::new("user", op);
        self
    }

    /// A buffer of another device must be of the stream's backend: a CUDA stream cannot wait on
    /// a simulated event, nor copy simulated memory.
    fn check_peer_backends(&self, device: &Device) -> Result<()> {
        let sim = device.is_simulated();
        let foreign = self.uses.iter().map(|u| u.track()).filter(|t| t.device.uid != device.shared.uid);
        for t in foreign {
            if Device::from_shared(&t.device).is_simulated() != sim {
                let (needed, actual) = if sim { ("sim", "cuda") } else { ("cuda", "sim") };
                return Err(Error::WrongBackend { what: "a buffer of another device", needed, actual });
            }
        }
        Ok(())
    }

    /// Names the launch with a library's label (library ops name their launches this way).
    pub(crate) fn labelled(mut self, label: OpLabel) -> Self {
        self.label = label;
        self
    }

    /// The stream the launch runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Whether this recorder is strict.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// Number of distinct tracked buffers recorded.
    pub fn recorded_count(&self) -> usize {
        self.uses.len()
    }

    /// Declares that the launch reads `buf`.
    pub fn read(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::Read)
    }

    /// Declares that the launch writes `buf` without reading it.
    pub fn write(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::Write)
    }

    /// Declares that the launch reads and writes `buf`.
    pub fn read_write(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::ReadWrite)
    }

    /// Declares a use with an explicit [`Access`].
    pub fn access(&mut self, buf: &impl Resource, access: Access) -> Result<&mut Self> {
        self.record(buf.resource(), access)
    }

    /// A buffer of another device (without [`with_peers`](Self::with_peers)) or of an earlier
    /// generation: an error (strict) or skipped (permissive).
    #[cold]
    #[inline(never)]
    fn refuse(&self, t: &BufferTrack) -> Result<()> {
        if t.device.uid != self.stream.device && !self.peers {
            return self.reject(Error::ForeignDevice {
                what: t.name(),
                expected: format!("#{}", self.stream.device),
                found: t.device.label(),
            });
        }
        match t.check_fresh() {
            Ok(()) => Ok(()),
            Err(stale) => self.reject(stale),
        }
    }

    fn reject(&self, err: Error) -> Result<()> {
        if self.strict {
            return Err(err);
        }
        log::debug!("cusched: permissive recorder on {} skips a use: {err}", self.stream);
        Ok(())
    }

    fn record(&mut self, res: ResourceRef, access: Access) -> Result<&mut Self> {
        let ResourceRef(res) = res;
        let buf = match res {
            ResourceKind::External(what) => {
                self.reject(Error::Untracked { what })?;
                return Ok(self);
            }
            ResourceKind::Tracked(buf) => buf,
        };
        let t = buf.track();
        if (t.device.uid != self.stream.device && !self.peers) || !t.is_fresh() {
            self.refuse(t)?;
            return Ok(self);
        }
        // Kept sorted by buffer id, the order preflight reserves in (a launch uses few
        // buffers: a linear scan beats a search).
        let id = t.id.0;
        match self.uses.iter().position(|u| u.id >= id) {
            Some(i) if self.uses[i].id == id => self.uses[i].access = self.uses[i].access.merge(access),
            Some(i) => self.uses.insert(i, Use { buf, access, id }),
            None => self.uses.push(Use { buf, access, id }),
        }
        Ok(self)
    }

    /// Validates the recorder against `device` and queues every wait its uses need on its
    /// stream; returns the launch, to enqueue on through [`Preflighted::scope`] and then
    /// [`commit`](Preflighted::commit). Prefer [`launch`](Self::launch), which does all three.
    ///
    /// A hand-paired launch always takes marks, in solo mode too (see [`launch`](Self::launch)):
    /// there, on the one stream, it is ordered against solo launches by enqueue; once solo mode
    /// has closed, it waits for a conflicting solo launch still enqueueing, as for a mark.
    ///
    /// A read (or `read_write`) of a buffer whose last writer failed is
    /// [`Error::FailedInput`]. [`commit`](Preflighted::commit) counts as success: it clears the
    /// failure of what the launch writes.
    ///
    /// On error nothing is reserved and the recorder is gone: to retry (after a
    /// [`Error::BufferBusy`], say), preflight a clone.
    pub fn preflight(mut self, device: &Device) -> Result<Preflighted> {
        // Always marked: a hand-paired launch may be committed on another thread, so a close
        // of solo mode could not tell whether the closing thread holds it (see `track::solo`).
        let reserved = self.reserve_after(device, None, false)?;
        Ok(Preflighted::new(self.uses, device.shared.clone(), reserved))
    }

    /// The preflight proper: checks the uses, takes every pending mark and fences the stream;
    /// on error nothing stays reserved. The uses stay in place: the closure form borrows them
    /// until its commit, the hand-paired form moves them into its [`Preflighted`].
    fn reserve(&mut self, device: &Device) -> Result<Reserved> {
        self.reserve_after(device, None, true)
    }

    /// [`reserve`](Self::reserve); `behind` is the context epoch of the stream when an earlier
    /// attempt found it behind its device's rebuild and waited for that; `solo`: the launch
    /// may take the solo path (see `track::solo`).
    fn reserve_after(&mut self, device: &Device, behind: Option<u64>, solo: bool) -> Result<Reserved> {
        let shared = &device.shared;
        let slot = shared.stream(self.stream)?;
        // One pass for the common case: every handle still of the device's generation (it may
        // have advanced since the uses were recorded), no declared lane job holding any of
        // them, and the caller not in a lane job.
        let mut plain = crate::track::reservation::nothing_before_unreserved();
        // Whether every buffer is of the device's current context, so that a fence returning
        // that same context clears them all at once (buffers of other devices come only with
        // peers, which take the full check).
        let device_epoch = shared.epoch();
        let mut current = !self.peers;
        // Whether every use is device memory, which a launch on a one-stream device may leave
        // out of the buffer states (see `track::solo`).
        let mut stream_only = true;
        // A stream that has seen the floor is past solo mode: one load of its own slot, so
        // that steady state with several streams never reads the device's solo state.
        let solo = solo && !slot.floor_seen() && shared.solo.open_on(self.stream.index);
        for u in &self.uses {
            let t = u.track();
            plain &= t.is_fresh() & t.reservations.is_empty();
            current &= t.epoch == device_epoch;
            stream_only &= t.stream_only;
        }
        if solo & plain & current & stream_only {
            if let Some(reserved) = self.reserve_solo(shared, slot, device_epoch) {
                if let Some(e) = failure::failed_input(&self.uses) {
                    return Err(self.unreserve_solo(shared, slot, reserved, e));
                }
                return Ok(reserved);
            }
        }
        // Stale uses go first (an error, or dropped when permissive), so that only live ones
        // are checked for their backend and waited for.
        if !plain {
            self.drop_stale()?;
        }
        let mut candidates = SmallVec::<[EventRef; 8]>::new();
        // Before any mark is taken: closing a device's solo mode waits for launches that hold
        // none (see `track::solo`).
        let mut saw_floor = false;
        if shared.solo.needs_floor(self.stream.index, slot.floor_seen()) {
            let floor;
            (floor, saw_floor) = solo_floor(shared, slot, &self.uses)?;
            candidates.extend(floor);
        }
        if self.peers {
            self.check_peer_backends(device)?;
            self.peer_floors(device, slot, &mut candidates)?;
        }
        // The lane job making the launch, for the check of submit order (none outside jobs).
        let mut stamp = crate::track::order::Stamp::NONE;
        if !plain {
            stamp = self.before_marks(shared)?;
        }
        // Reserving in one global order (buffer ids are process-wide, so this holds across
        // devices too) means two preflights never hold-and-wait in a cycle: `record` keeps the
        // uses sorted by id.
        debug_assert!(self.uses.windows(2).all(|w| w[0].id < w[1].id));
        let holder = HolderId::current();
        let timeout = shared.config.preflight_timeout;
        let mut inverted = None;
        for (n, u) in self.uses.iter().enumerate() {
            let t = u.track();
            if let Err(e) =
                t.acquire_stamped(u.access, holder, timeout, slot.index(), &mut candidates, stamp, &mut inverted)
            {
                release(&self.uses[..n], holder);
                return Err(e);
            }
        }
        // With the marks taken, a failure its writer set before publishing is visible.
        if let Some(e) = failure::failed_input(&self.uses) {
            release(&self.uses, holder);
            return Err(e);
        }
        if let Some(inv) = inverted {
            if let Err(e) = crate::device::report_submit_order(shared, *inv, op_origin_name(&self.label)) {
                release(&self.uses, holder);
                return Err(e);
            }
        }
        #[cfg(test)]
        crate::device::rebuild_hooks::at(shared.uid, crate::device::rebuild_hooks::Stage::MarksTaken);
        // The stream and its context epoch come back read together with the fencing: if the
        // device rebuilt its context since the uses were checked, their memory belongs to the
        // old one and must not reach a stream of the new one.
        let (raw, epoch) = match slot.fence(&candidates) {
            Ok(current) => current,
            Err(e) => return self.fence_refused(device, holder, e, behind),
        };
        if saw_floor {
            slot.saw_floor();
        }
        // The device's epoch is read again: a rebuild that began while the marks were taken has
        // moved the device on, and maybe not this stream yet.
        if !(current && epoch == device_epoch && epoch == shared.epoch()) {
            if let Some(refused) = self.context_refused(device, holder, epoch, behind) {
                return refused;
            }
        }
        let mut reserved = Reserved::new(self.stream, holder, raw, epoch);
        reserved.stamp = stamp;
        Ok(reserved)
    }

    /// What comes before any pending mark is taken, beyond the common case, once stale uses
    /// are gone: the declared lane jobs submitted earlier are waited out and a declared job's
    /// undeclared uses are refused. Returns the lane job's stamp for the check of submit order.
    #[cold]
    #[inline(never)]
    fn before_marks(&mut self, shared: &DeviceShared) -> Result<crate::track::order::Stamp> {
        let timeout = shared.config.preflight_timeout;
        let seq = crate::track::reservation::before_use(
            self.uses.iter().map(|u| (u.track(), u.access)),
            self.strict,
            timeout,
        )?;
        let check = shared.config.submit_order != crate::SubmitOrderCheck::Off;
        Ok(if check && seq != 0 {
            crate::track::order::Stamp::new(seq, self.stream)
        } else {
            crate::track::order::Stamp::NONE
        })
    }

    /// Strict: the first stale use's error. Permissive: drops the stale uses.
    #[cold]
    #[inline(never)]
    fn drop_stale(&mut self) -> Result<()> {
        let mut i = 0;
        while i < self.uses.len() {
            match self.uses[i].track().check_fresh() {
                Ok(()) => i += 1,
                Err(e) if self.strict => return Err(e),
                Err(e) => {
                    log::debug!("cusched: permissive recorder skips a use: {e}");
                    self.uses.remove(i);
                }
            }
        }
        Ok(())
    }

    /// Preflights, runs `enqueue` with the launch's scope, and commits, even if `enqueue`
    /// fails (it may have enqueued part of its work). Returns `enqueue`'s result.
    ///
    /// This is the traced path: [`crate::KernelTrace`] hooks and NVTX ranges see launches made
    /// here (and every library op), not hand-paired [`preflight`](Self::preflight) and
    /// [`commit`](Preflighted::commit) calls.
    ///
    /// On a device that has run tracked work on this one stream only, a launch whose uses are
    /// all device memory of the device holds no buffer: stream order orders it against every
    /// other launch there, so a conflicting launch of another thread on the same stream is
    /// ordered by enqueue rather than held until this one commits. Once a launch runs on
    /// another stream, a launch of memory the one-stream launches used, on any stream (this
    /// one included, and hand-paired ones too), waits until none of them still enqueueing
    /// conflicts with it (as it would wait for any conflicting launch between preflight and
    /// commit): conflicting launches follow preflight order. One on another stream that would
    /// wait for a launch whose enqueue closure it runs in is [`Error::WouldDeadlock`]; on this
    /// stream, that thread's own enqueue order orders them.
    ///
    /// When `enqueue` fails (or panics), the buffers the launch declared a write of are left
    /// failed: a later use that reads one fails at its preflight with
    /// [`Error::FailedInput`], naming this launch ([`named`](Self::named)) and the error, until
    /// a successful write replaces the contents. A successful launch clears the failure of what
    /// it writes. Reads of a buffer whose last writer failed fail here the same way, with
    /// nothing enqueued.
    pub fn launch<R>(self, device: &Device, enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>) -> Result<R> {
        // Nothing here hands the event out: a launch on a one-stream device can skip its
        // position unless a trace needs it.
        self.launch_as(device, enqueue, false).map(|l| l.into_value(device))
    }

    /// The one launch path under every op: trace, preflight, enqueue, commit. The event comes
    /// back.
    pub(crate) fn launch_event<R>(
        self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
    ) -> Result<Launched<R>> {
        self.launch_as(device, enqueue, true)
    }

    /// [`launch_event`](Self::launch_event); without `position`, a solo launch (see
    /// `track::solo`) that no trace follows comes back with no event.
    #[inline(always)]
    fn launch_as<R>(
        mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
        position: bool,
    ) -> Result<Launched<R>> {
        let _nvtx = NvtxRange::push(self.label.library, self.label.op());
        let shared = &device.shared;
        let epoch = shared.epoch();
        let stream = self.stream;
        let mut trace = shared.tracer.begin(|| shared.lane_name(stream), stream, &self.label);
        let _names = device.is_simulated().then(|| sim_naming(shared, stream, &self.label, &self.uses));
        let position = position || trace.is_some();
        match self.launch_traced(device, enqueue, &mut trace, position) {
            Ok((value, event)) => {
                if let Some(t) = &trace {
                    t.enqueued();
                }
                Ok(Launched { value, event, trace })
            }
            Err(e) => {
                if let Some(t) = trace {
                    t.enqueued();
                    let span = t.completing(false);
                    t.completed(span);
                }
                Err(shared.classify(e, epoch))
            }
        }
    }

    fn launch_traced<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
        trace: &mut Option<TraceTicket>,
        position: bool,
    ) -> Result<(R, Option<EventRef>)> {
        let reserved = self.reserve(device)?;
        // Until the commit: a conflicting use on another stream from this thread would wait
        // for this launch.
        let _held = reserved.solo.map(|ticket| HeldHere::enter(device.shared.uid, ticket));
        let pending = Uncommitted {
            device: &device.shared,
            uses: &self.uses,
            reserved: &reserved,
            label: &self.label,
            armed: true,
        };
        let out = {
            let scope = LaunchScope::new(&reserved, &self.uses);
            if let Some(t) = trace.as_mut() {
                t.gpu_start(&reserved.raw);
            }
            let out = enqueue(&scope);
            if let Some(t) = trace.as_mut() {
                t.gpu_end(&reserved.raw);
            }
            out
        };
        // Before the commit releases the buffers: a later use sees what this launch left.
        failure::settle(&self.uses, out.as_ref().err(), || {
            failure::op_name(&device.shared, reserved.stream, &self.label)
        });
        let ev = pending.commit(position);
        match out {
            Ok(value) => Ok((value, ev?)),
            // Against the context the work went to: preflight may have waited for a rebuild
            // that moved the stream to a context newer than the one the launch began in, and
            // a fault there is new, not the one that rebuild cured. (`launch_event` classifies
            // again, which leaves a classified error as it is.)
            Err(e) => Err(device.shared.classify(e, reserved.epoch)),
        }
    }
}

/// The closure form's launch between preflight and commit: commits on drop too, so that work
/// already enqueued stays fenced when the enqueue closure panics.
struct Uncommitted<'a> {
    /// The device the launch runs on.
    device: &'a DeviceShared,
    /// The launch's uses, borrowed from its recorder.
    uses: &'a [Use],
    /// The launch's stream and marks.
    reserved: &'a Reserved,
    /// The launch's name, for the failure an unwinding enqueue leaves on its buffers.
    label: &'a OpLabel,
    /// Whether the drop still has to commit (cleared by an explicit commit).
    armed: bool,
}

impl Uncommitted<'_> {
    #[inline(always)]
    fn commit(mut self, position: bool) -> Result<Option<EventRef>> {
        self.armed = false;
        self.reserved.commit_as(self.device, self.uses, position)
    }
}

impl Drop for Uncommitted<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        log::error!(
            "cusched: a launch on {} unwound before its commit; committing it so its work stays fenced",
            self.reserved.stream
        );
        let unwound = Error::JobPanicked { message: "the launch's enqueue closure panicked".into() };
        failure::settle(self.uses, Some(&unwound), || failure::op_name(self.device, self.reserved.stream, self.label));
        if let Err(e) = self.reserved.commit(self.device, self.uses) {
            log::error!("cusched: committing the unwound launch failed: {e}");
        }
    }
}

/// Names the simulated kernels the launch enqueues, for the checker's hazards: the op, its
/// lane and the labels of its buffers (nothing is copied unless a simulated kernel is
/// enqueued).
#[cold]
#[inline(never)]
fn sim_naming(shared: &DeviceShared, stream: StreamId, label: &OpLabel, uses: &[Use]) -> crate::backend::sim::Naming {
    use crate::backend::sim::OpText;
    let labels = uses.iter().filter_map(|u| u.track().label().map(|l| (u.id, l))).collect();
    let op = match &label.op {
        crate::trace::OpName::Static(s) => OpText::Static(s),
        crate::trace::OpName::Shared(s) => OpText::Shared(s.clone()),
    };
    crate::backend::sim::naming(label.library, op, shared.lane_name(stream), labels)
}

/// The launch's name as hazards show it: a user launch or compiled kernel by its own name,
/// the crate's other ops as `library::op`.
#[cold]
fn op_origin_name(label: &OpLabel) -> Option<Arc<str>> {
    Some(match label.library {
        "user" | "kernel" => Arc::from(label.op()),
        lib => Arc::from(format!("{lib}::{}", label.op())),
    })
}

/// Clears the pending marks of `uses` without publishing an event: nothing was enqueued for
/// them, or the work that was has finished.
fn release(uses: &[Use], holder: HolderId) {
    for u in uses {
        u.track().publish(u.access, holder, None);
    }
}
