//! The closure form, the everyday path under every op: trace, admit, enqueue, commit, with a
//! commit on unwind so that enqueued work never stays unfenced.

use super::admission::Choice;
use super::{failure, LaunchRecorder, LaunchScope, Launched, Reserved, Use};
use crate::device::{BufferTrack, Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::trace::{NvtxRange, OpLabel, TraceTicket};
use crate::track::EventRef;

impl LaunchRecorder {
    /// Preflights, runs `enqueue` with the launch's scope, and commits, even if `enqueue`
    /// fails (it may have enqueued part of its work). Returns `enqueue`'s result.
    ///
    /// This is the traced path: [`crate::KernelTrace`] hooks and NVTX ranges see launches made
    /// here (and every library op), not hand-paired [`preflight`](Self::preflight) and
    /// [`commit`](crate::Preflighted::commit) calls.
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
    pub fn launch<R>(mut self, device: &Device, enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>) -> Result<R> {
        // Nothing here hands the event out: a solo launch can skip its position unless a trace
        // needs it.
        self.launch_as(device, enqueue, false).map(|l| l.into_value(device))
    }

    /// The one launch path under every op: trace, preflight, enqueue, commit. The event comes
    /// back.
    pub(crate) fn launch_event<R>(
        mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
    ) -> Result<Launched<R>> {
        self.launch_as(device, enqueue, true)
    }

    /// [`launch_event`](Self::launch_event) for a recorder the caller keeps in place (a group's
    /// queued op): the recorder is not moved, which would copy its inline uses per op.
    // Its one user is NCCL's group path.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn launch_event_in_place<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
    ) -> Result<Launched<R>> {
        self.launch_as(device, enqueue, true)
    }

    /// [`launch`](Self::launch) for a recorder the caller built in place and drops after: the
    /// recorder is not moved (a copy of its inline uses per op).
    pub(crate) fn launch_in_place<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
    ) -> Result<R> {
        self.launch_as(device, enqueue, false).map(|l| l.into_value(device))
    }

    /// [`launch_event`](Self::launch_event); unless `event_wanted` (the caller hands the event
    /// out) or a trace follows the launch, a launch whose strategy needs no event (a solo
    /// launch: see `track::solo`) comes back with none.
    #[inline(always)]
    fn launch_as<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
        event_wanted: bool,
    ) -> Result<Launched<R>> {
        let _nvtx = NvtxRange::push(self.label.library, self.label.op());
        let shared = &device.shared;
        let epoch = shared.epoch();
        let stream = self.stream;
        let mut trace = shared.tracer.begin(|| shared.lane_name(stream), stream, &self.label);
        let _names =
            device.is_simulated().then(|| sim_naming(shared, stream, &self.label, self.uses.iter().map(Use::track)));
        let event_wanted = event_wanted || trace.is_some();
        match self.launch_traced(device, enqueue, &mut trace, event_wanted) {
            Ok((value, event, recorded)) => {
                if let Some(t) = &trace {
                    t.enqueued();
                }
                Ok(Launched { value, event, trace, recorded })
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

    /// The closure form's admit → enqueue → commit, between the trace's marks.
    fn launch_traced<R>(
        &mut self,
        device: &Device,
        enqueue: impl FnOnce(&LaunchScope<'_>) -> Result<R>,
        trace: &mut Option<TraceTicket>,
        event_wanted: bool,
    ) -> Result<Traced<R>> {
        let reserved = self.admit(device, Choice::Any, None)?;
        if reserved.admission.is_recording() {
            return self.run_recorded(device, reserved, enqueue).map(|(value, build)| (value, None, Some(build)));
        }
        // Until the commit: a conflicting use on another stream from this thread would wait
        // for this launch.
        let _held = reserved.admission.hold_here(device.shared.uid);
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
        let ev = pending.commit(event_wanted);
        match out {
            Ok(value) => Ok((value, ev?, None)),
            // Against the context the work went to: preflight may have waited for a rebuild
            // that moved the stream to a context newer than the one the launch began in, and
            // a fault there is new, not the one that rebuild cured. (`launch_event` classifies
            // again, which leaves a classified error as it is.)
            Err(e) => Err(device.shared.classify(e, reserved.epoch)),
        }
    }
}

/// What the closure form's launch leaves: the enqueue's value, the commit's event, and the
/// recording the launch went into instead (then without an event).
type Traced<R> = (R, Option<EventRef>, Option<std::sync::Arc<super::recording::GraphBuild>>);

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
    /// Commits; unless `event_wanted`, a launch whose strategy needs no event ends without one.
    #[inline(always)]
    fn commit(mut self, event_wanted: bool) -> Result<Option<EventRef>> {
        self.armed = false;
        if event_wanted {
            return self.reserved.commit(self.device, self.uses).map(Some);
        }
        self.reserved.commit_unobserved(self.device, self.uses)
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
pub(super) fn sim_naming<'u>(
    shared: &DeviceShared,
    stream: StreamId,
    label: &OpLabel,
    buffers: impl IntoIterator<Item = &'u BufferTrack>,
) -> crate::backend::sim::Naming {
    use crate::backend::sim::OpText;
    let labels = buffers.into_iter().filter_map(|t| t.label().map(|l| (t.id.0, l))).collect();
    let op = match &label.op {
        crate::trace::OpName::Static(s) => OpText::Static(s),
        crate::trace::OpName::Shared(s) => OpText::Shared(s.clone()),
    };
    crate::backend::sim::naming(label.library, op, shared.lane_name(stream), labels)
}
