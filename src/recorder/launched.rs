//! What a launch hands back to the op that made it: the enqueue closure's value, the commit
//! event, and the op's trace ticket.

use crate::device::Device;
use crate::trace::TraceTicket;
use crate::track::EventRef;

/// What [`LaunchRecorder::launch_event`] hands back: the enqueue closure's value, the commit
/// event, and the op's trace ticket when a hook is set.
pub(crate) struct Launched<R> {
    pub value: R,
    pub event: Option<EventRef>,
    pub trace: Option<TraceTicket>,
    /// The launch was recorded into this graph recording, not run: what its completion would
    /// keep alive goes to the recording, which keeps it for the graph's life.
    pub recorded: Option<std::sync::Arc<super::recording::GraphBuild>>,
}

impl<R: Send + 'static> Launched<R> {
    /// A completion carrying the value, resolved once the GPU passes the commit event; the
    /// trace ticket (if any) rides along, and `keep` stays alive until then.
    pub(crate) fn complete(
        self,
        device: &Device,
        keep: Vec<crate::completion::KeepAlive>,
    ) -> crate::completion::Completion<R> {
        if let Some(build) = &self.recorded {
            build.keep(keep);
            return crate::completion::Completion::enqueued(
                &device.shared,
                Ok(self.value),
                None,
                Vec::new(),
                self.trace,
            );
        }
        crate::completion::Completion::enqueued(&device.shared, Ok(self.value), self.event, keep, self.trace)
    }
}

impl<R> Launched<R> {
    /// For ops that return no [`crate::Completion`]: hands the trace ticket (if any) to the
    /// device's trace backlog, so the completion hooks still run when the GPU finishes, and
    /// returns the value and the commit event.
    pub(crate) fn without_completion(self, device: &Device) -> (R, Option<EventRef>) {
        if let Some(trace) = self.trace {
            hand_to_backlog(device, trace, self.event.clone());
        }
        (self.value, self.event)
    }

    /// [`without_completion`](Self::without_completion), for a caller that has no use for the event: the backlog
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
