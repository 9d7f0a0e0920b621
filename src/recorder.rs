//! `LaunchRecorder`: declare a launch's buffer uses, `preflight` (queue the fences), enqueue,
//! `commit` (record the event later uses wait on).
//!
//! The shape is reserve-then-commit: `preflight` reserves every buffer (a conflicting
//! preflight on another thread waits for this recorder's commit) and fences the stream; the
//! caller enqueues; `commit` publishes the launch's event to every buffer at once. A recorder
//! dropped between the two commits anyway and logs an error, so no enqueued work is ever left
//! unfenced.

use crate::backend::sim::SimKernel;
use crate::backend::RawStream;
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::trace::{NvtxRange, OpLabel, TraceTicket};
use crate::track::{Access, BufferTrack, EventRef, HolderId};

const USER_LAUNCH: OpLabel = OpLabel::new("user", "launch");
use smallvec::SmallVec;
use std::sync::Arc;

/// The tracking side of a buffer, type-erased so that one recorder holds buffers of any
/// element type and keeps them alive until it commits.
pub(crate) trait Tracked: Send + Sync {
    fn track(&self) -> &BufferTrack;
}

/// What a recorder is given for one use: tracked memory, or memory cusched does not track.
pub(crate) enum ResourceKind {
    Tracked(Arc<dyn Tracked>),
    External(String),
}

mod sealed {
    /// Opaque token a [`super::Resource`] hands to recorders; only this crate can build one.
    #[allow(unreachable_pub, missing_debug_implementations)]
    pub struct ResourceRef(pub(crate) super::ResourceKind);

    pub trait Sealed {
        fn resource(&self) -> ResourceRef;
    }
}
pub(crate) use sealed::ResourceRef;

/// Memory a [`LaunchRecorder`] can be told about: [`crate::GpuRef`], [`crate::HostBuffer`]
/// and [`External`]. Sealed: tracking state lives only in this crate's types.
pub trait Resource: sealed::Sealed {}

impl<R: Resource + ?Sized> sealed::Sealed for &R {
    fn resource(&self) -> ResourceRef {
        (**self).resource()
    }
}
impl<R: Resource + ?Sized> Resource for &R {}
pub(crate) use sealed::Sealed as ResourceSealed;

/// Memory that cusched does not track: a pointer from another library (a TensorRT binding, a
/// framework's tensor). Strict recorders reject it; permissive recorders skip it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External {
    /// Device address.
    pub ptr: u64,
    /// Size in bytes.
    pub bytes: usize,
}

impl sealed::Sealed for External {
    fn resource(&self) -> ResourceRef {
        ResourceRef(ResourceKind::External(format!("external memory at {:#x} ({} bytes)", self.ptr, self.bytes)))
    }
}
impl Resource for External {}

struct Use {
    buf: Arc<dyn Tracked>,
    access: Access,
}

impl Use {
    fn track(&self) -> &BufferTrack {
        self.buf.track()
    }
}

enum Phase {
    Recording,
    /// `epoch`: the context epoch of `raw`, which the enqueued work belongs to.
    Preflighted {
        device: Arc<DeviceShared>,
        holder: HolderId,
        raw: Arc<RawStream>,
        epoch: u64,
    },
    Done,
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
pub struct LaunchRecorder {
    stream: StreamId,
    strict: bool,
    uses: SmallVec<[Use; 4]>,
    phase: Phase,
    label: OpLabel,
}

/// What [`LaunchRecorder::launch_event`] hands back: the enqueue closure's value, the commit
/// event (none when nothing was recorded), and the op's trace ticket when a hook is set.
pub(crate) struct Launched<R> {
    pub value: R,
    pub event: Option<EventRef>,
    pub trace: Option<TraceTicket>,
}

impl<R: Send + 'static> Launched<R> {
    /// A completion carrying the value, resolved once the GPU passes the commit event; the
    /// trace ticket (if any) rides along, and `keep` stays alive until then.
    pub(crate) fn complete(self, device: &Device, keep: Vec<crate::completion::KeepAlive>) -> crate::Completion<R> {
        let (completion, shared) = crate::completion::Completion::queued(&device.shared);
        if let Some(t) = self.trace {
            shared.set_trace(t);
        }
        shared.enqueued(Ok(self.value), self.event, keep);
        completion
    }
}

impl<R> Launched<R> {
    /// For ops that return no [`crate::Completion`]: hands the trace ticket (if any) to a
    /// completion of its own, so the completion hooks still run when the GPU finishes.
    pub(crate) fn untracked(self, device: &Device) -> (R, Option<EventRef>) {
        if let Some(trace) = self.trace {
            Launched { value: (), event: self.event.clone(), trace: Some(trace) }.complete(device, Vec::new());
        }
        (self.value, self.event)
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
        LaunchRecorder { stream, strict: true, uses: SmallVec::new(), phase: Phase::Recording, label: USER_LAUNCH }
    }

    /// A recorder that skips untracked, foreign-device and stale memory (with a debug log).
    pub fn new_permissive(stream: StreamId) -> Self {
        LaunchRecorder { stream, strict: false, uses: SmallVec::new(), phase: Phase::Recording, label: USER_LAUNCH }
    }

    /// Names the launch for [`crate::KernelTrace`] hooks, the timeline and NVTX (library
    /// `"user"`; unnamed launches are `"launch"`).
    pub fn named(mut self, op: &'static str) -> Self {
        self.label = OpLabel::new("user", op);
        self
    }

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

    fn reject(&self, err: Error) -> Result<()> {
        if self.strict {
            return Err(err);
        }
        log::debug!("cusched: permissive recorder on {} skips a use: {err}", self.stream);
        Ok(())
    }

    fn record(&mut self, res: ResourceRef, access: Access) -> Result<&mut Self> {
        let ResourceRef(res) = res;
        if !matches!(self.phase, Phase::Recording) {
            return Err(Error::RecorderMisuse {
                what: "a use was recorded after preflight; declare every use before preflight",
            });
        }
        let buf = match res {
            ResourceKind::External(what) => {
                self.reject(Error::Untracked { what })?;
                return Ok(self);
            }
            ResourceKind::Tracked(buf) => buf,
        };
        let t = buf.track();
        if t.device.uid != self.stream.device {
            self.reject(Error::ForeignDevice {
                what: t.name(),
                expected: format!("#{}", self.stream.device),
                found: t.device.label(),
            })?;
            return Ok(self);
        }
        if let Err(stale) = t.check_fresh() {
            self.reject(stale)?;
            return Ok(self);
        }
        match self.uses.iter_mut().find(|u| u.track().id == t.id) {
            Some(u) => u.access = u.access.merge(access),
            None => self.uses.push(Use { buf, access }),
        }
        Ok(self)
    }

    /// Validates the recorder against `device` and queues every wait its uses need on its
    /// stream. Call before enqueueing the launch. On error nothing is reserved and the
    /// recorder can be dropped.
    pub fn preflight(&mut self, device: &Device) -> Result<()> {
        match self.phase {
            Phase::Recording => {}
            Phase::Preflighted { .. } => {
                return Err(Error::RecorderMisuse { what: "preflight was called twice; commit the recorder instead" })
            }
            Phase::Done => return Err(Error::RecorderMisuse { what: "the recorder was already committed" }),
        }
        let shared = &device.shared;
        let slot = shared.stream(self.stream)?;
        // The generation may have advanced since the uses were recorded.
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
        // Reserving in one global order means two preflights never hold-and-wait in a cycle.
        self.uses.sort_unstable_by_key(|u| u.track().id);
        let holder = HolderId::current();
        let timeout = shared.config.preflight_timeout;
        let mut candidates = SmallVec::<[EventRef; 8]>::new();
        for (n, u) in self.uses.iter().enumerate() {
            if let Err(e) = u.track().acquire(u.access, holder, timeout, &mut candidates) {
                release(&self.uses[..n], holder);
                return Err(e);
            }
        }
        // The stream and its context epoch come back read together with the fencing: if the
        // device rebuilt its context since the uses were checked, their memory belongs to the
        // old one and must not reach a stream of the new one.
        let (raw, epoch) = match slot.fence(&candidates) {
            Ok(current) => current,
            Err(Error::Stale { current: epoch, .. }) if self.uses.iter().any(|u| u.track().epoch != epoch) => {
                // A candidate event belongs to an earlier context: its buffer is stale.
                release(&self.uses, holder);
                let t = self.uses.iter().map(|u| u.track()).find(|t| t.epoch != epoch);
                return Err(t.map_or_else(
                    || Error::Stale { what: "a buffer".into(), made: 0, current: shared.generation() },
                    |t| of_old_context(shared, t),
                ));
            }
            Err(e) => {
                release(&self.uses, holder);
                return Err(e);
            }
        };
        if let Some(u) = self.uses.iter().find(|u| u.track().epoch != epoch) {
            let err = of_old_context(shared, u.track());
            release(&self.uses, holder);
            return Err(err);
        }
        self.phase = Phase::Preflighted { device: shared.clone(), holder, raw, epoch };
        Ok(())
    }

    /// Records the launch's event on its stream and publishes it to every recorded buffer.
    /// Call after enqueueing. `device` must be the one given to preflight.
    pub fn commit(mut self, device: &Device) -> Result<()> {
        if let Phase::Preflighted { device: d, .. } = &self.phase {
            if d.uid != device.shared.uid {
                let found = d.label();
                self.finish()?;
                return Err(Error::ForeignDevice {
                    what: "the recorder's commit".into(),
                    expected: device.shared.label(),
                    found,
                });
            }
        }
        self.finish().map(drop)
    }

    /// Preflights, runs `enqueue` with the launch's scope, and commits, even if `enqueue`
    /// fails (it may have enqueued part of its work). Returns `enqueue`'s result.
    ///
    /// This is the traced path: [`crate::KernelTrace`] hooks and NVTX ranges see launches made
    /// here (and every library op), not hand-paired `preflight`/`commit` calls.
    pub fn launch<R>(mut self, device: &Device, enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>) -> Result<R> {
        self.launch_event(device, enqueue).map(|l| l.untracked(device).0)
    }

    /// The one launch path under every op: trace, preflight, enqueue, commit.
    pub(crate) fn launch_event<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
    ) -> Result<Launched<R>> {
        let _nvtx = NvtxRange::push(self.label.library, self.label.op());
        let shared = &device.shared;
        let epoch = shared.epoch();
        let mut trace = shared.tracer.begin(|| shared.lane_name(self.stream), self.stream, &self.label);
        let result = self.launch_traced(device, enqueue, &mut trace);
        match result {
            Ok((value, mut event)) => {
                if let Some(t) = &trace {
                    t.enqueued();
                    if event.is_none() {
                        // The completion hooks need a point on the stream to wait for.
                        event = shared.record(self.stream).ok();
                    }
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
    ) -> Result<(R, Option<EventRef>)> {
        self.preflight(device)?;
        let out = {
            let scope = self.scope()?;
            if let Some(t) = trace.as_mut() {
                t.gpu_start(&scope.raw);
            }
            let out = enqueue(&scope);
            if let Some(t) = trace.as_mut() {
                t.gpu_end(&scope.raw);
            }
            out
        };
        let ev = self.finish();
        let r = out?;
        Ok((r, ev?))
    }

    /// The scope of a preflighted recorder, for enqueueing between `preflight` and `commit`.
    pub fn scope(&self) -> Result<LaunchScope<'_>> {
        match &self.phase {
            Phase::Preflighted { raw, .. } => Ok(LaunchScope { rec: self, raw: raw.clone() }),
            _ => Err(Error::RecorderMisuse { what: "the recorder has no scope before preflight or after commit" }),
        }
    }

    fn finish(&mut self) -> Result<Option<EventRef>> {
        let (device, holder, raw, epoch) = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Preflighted { device, holder, raw, epoch } => (device, holder, raw, epoch),
            Phase::Recording if self.uses.is_empty() => return Ok(None),
            Phase::Recording => {
                return Err(Error::RecorderMisuse {
                    what: "commit without preflight; preflight before enqueueing so the launch is fenced",
                })
            }
            Phase::Done => return Err(Error::RecorderMisuse { what: "the recorder was already committed" }),
        };
        // Recorded even when no tracked buffer is used (a kernel with only scalar arguments, or
        // on external memory): the op's completion and keep-alives need a point on the stream
        // that covers its work.
        // Only in the context the work went to: after a rebuild, an event on the new stream
        // would mark work of the poisoned context as finished.
        let recorded = device.stream(self.stream).and_then(|slot| {
            slot.record_in(&device.events, Some(epoch)).unwrap_or_else(|| Err(device.poison_since(epoch)))
        });
        match recorded {
            Ok(ev) => {
                for u in &self.uses {
                    u.track().publish(u.access, holder, Some(&ev));
                }
                Ok(Some(ev))
            }
            Err(e) => {
                let err = device.classify(e, epoch);
                unfenced(&device, &raw, epoch);
                release(&self.uses, holder);
                Err(err)
            }
        }
    }

    pub(crate) fn checker_uses(&self) -> SmallVec<[(u64, Access); 4]> {
        self.uses.iter().map(|u| (u.track().id.0, u.access)).collect()
    }
}

/// The record that would have fenced enqueued work failed, so nothing on the device marks where
/// that work ends and later users of its buffers would have nothing to wait on. This is already
/// an error path, so block until the stream has drained before the buffers are released. If
/// even that fails, the work cannot be proven finished: a sticky status has poisoned the
/// context (its buffers are stale), and any other makes every handle of the device stale, so
/// that no buffer is ever used unfenced.
fn unfenced(device: &DeviceShared, raw: &RawStream, epoch: u64) {
    let Err(e) = raw.synchronize() else { return };
    match device.classify(e, epoch) {
        Error::ContextPoisoned { .. } => {}
        e => {
            log::error!(
                "cusched: the work of a failed commit on device {} cannot be proven finished ({e}); every handle made so far becomes stale",
                device.label()
            );
            device.advance_generation();
        }
    }
}

/// The error for a use of memory of an earlier context. Memory made while the device was
/// moving to a new context can carry the new generation with the old context's memory: it is
/// not stale in the generation's sense, but the poisoned context it lives in is the cause.
fn of_old_context(device: &DeviceShared, t: &BufferTrack) -> Error {
    let current = device.generation();
    if t.generation >= current {
        return device.poison_since(t.epoch);
    }
    Error::Stale { what: t.name(), made: t.generation, current }
}

fn release(uses: &[Use], holder: HolderId) {
    for u in uses {
        u.track().publish(u.access, holder, None);
    }
}

impl Drop for LaunchRecorder {
    fn drop(&mut self) {
        if matches!(self.phase, Phase::Preflighted { .. }) {
            log::error!(
                "cusched: a LaunchRecorder on {} was dropped after preflight without commit; committing it so its work stays fenced",
                self.stream
            );
            if let Err(e) = self.finish() {
                log::error!("cusched: committing the dropped recorder failed: {e}");
            }
        }
    }
}

/// What an enqueue closure gets between preflight and commit: the stream to enqueue on.
pub struct LaunchScope<'a> {
    rec: &'a LaunchRecorder,
    raw: Arc<RawStream>,
}

impl std::fmt::Debug for LaunchScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaunchScope({})", self.rec.stream)
    }
}

impl LaunchScope<'_> {
    /// The launch's stream.
    pub fn stream(&self) -> StreamId {
        self.rec.stream
    }

    /// The cudarc stream to enqueue on (CUDA devices).
    pub fn cuda_stream(&self) -> Result<&Arc<cudarc::driver::CudaStream>> {
        match &*self.raw {
            RawStream::Cuda(s) => Ok(s),
            RawStream::Sim(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::cuda_stream", needed: "cuda", actual: "sim" })
            }
        }
    }

    /// Enqueues a host closure as the launch's kernel (simulated devices). The hazard checker
    /// sees it use exactly the buffers the recorder declared.
    pub fn sim_kernel(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        self.sim_kernel_boxed(Box::new(f))
    }

    /// Enqueues a simulated kernel that faults like an out-of-bounds write on a GPU
    /// (`CUDA_ERROR_ILLEGAL_ADDRESS`): the simulated context is poisoned, no later kernel in it
    /// runs, and its events report the error, so that recovery can be exercised without a GPU.
    pub fn sim_fault(&self) -> Result<()> {
        match &*self.raw {
            RawStream::Sim(s) => {
                s.fault();
                Ok(())
            }
            RawStream::Cuda(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::sim_fault", needed: "sim", actual: "cuda" })
            }
        }
    }

    pub(crate) fn sim_kernel_boxed(&self, f: SimKernel) -> Result<()> {
        match &*self.raw {
            RawStream::Sim(s) => {
                s.run(self.rec.checker_uses(), f);
                Ok(())
            }
            RawStream::Cuda(_) => {
                Err(Error::WrongBackend { what: "LaunchScope::sim_kernel", needed: "sim", actual: "cuda" })
            }
        }
    }
}

/// Backend memory operations enqueue on a launch's stream and show the checker its uses.
impl crate::backend::memory::Enqueue for LaunchScope<'_> {
    fn raw_stream(&self) -> &RawStream {
        &self.raw
    }

    fn declared_uses(&self) -> crate::backend::memory::SimUses {
        self.rec.checker_uses()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::{ILLEGAL_ADDRESS, INVALID_HANDLE};
    use crate::backend::test_hooks::fail_next_record;
    use crate::SimConfig;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A recorder on `s` writing `buf`, preflighted, with a 150 ms kernel enqueued that sets the
    /// returned flag when it finishes.
    fn slow_write(d: &Device, buf: &crate::GpuRef<u32>) -> (LaunchRecorder, Arc<AtomicBool>) {
        let mut rec = LaunchRecorder::new_strict(d.default_stream());
        rec.write(buf).unwrap();
        rec.preflight(d).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        rec.scope()
            .unwrap()
            .sim_kernel(move || {
                std::thread::sleep(Duration::from_millis(150));
                flag.store(true, Ordering::SeqCst);
            })
            .unwrap();
        (rec, done)
    }

    #[test]
    fn a_failed_commit_record_releases_the_buffers_only_after_the_work_is_done() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let (rec, done) = slow_write(&d, &buf);
        fail_next_record(INVALID_HANDLE);
        let err = rec.commit(&d).expect_err("the record failed");
        assert!(matches!(err, Error::Driver { call: "cuEventRecord", .. }), "{err}");
        assert!(done.load(Ordering::SeqCst), "the buffer was released while the kernel using it still ran");
    }

    #[test]
    fn a_sticky_failure_at_the_commit_record_is_context_poisoned() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let (rec, _) = slow_write(&d, &buf);
        fail_next_record(ILLEGAL_ADDRESS);
        let err = rec.commit(&d).expect_err("the record failed");
        assert!(matches!(err, Error::ContextPoisoned { call: "cuEventRecord", .. }), "{err}");
        let err = buf.download(d.default_stream()).expect_err("the buffer is of the poisoned context");
        assert!(matches!(err, Error::Stale { .. }), "{err}");
    }
}
