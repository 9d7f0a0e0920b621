//! [`GraphExec`]: an instantiated graph, replayed as one tracked op and rebound in place.

use super::{record_into, run_once, Graph, Inner};
use crate::backend::cuda::graph::{RawExec, RawGraph};
use crate::backend::memory::Enqueue;
use crate::completion::{Completion, KeepAlive};
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::recorder::{GraphBuild, LaunchRecorder, Launched, RecordingMode};
use crate::trace::OpLabel;
use crate::track::EventRef;
use std::sync::{Arc, Mutex};

/// An executable graph: [`replay`](Self::replay) it as often as needed.
///
/// A replay is one launch on the stream it is given, declaring every buffer the graph uses
/// (the union of the recorded uses), so it waits for conflicting work on any stream and later
/// work waits for it, with one event per replay. Replays of one graph on several streams are
/// ordered like any launches that share buffers. See [`Graph`] for an example.
pub struct GraphExec {
    graph: Graph,
    /// The executable CUDA graph (none on the simulator).
    exec: Option<Arc<Mutex<RawExec>>>,
    /// The newest replay's event on each stream replayed on: when the executable graph is
    /// dropped, it and the graph's objects go to the reaper, destroyed once the GPU has passed
    /// these (replays carry no keep-alive of their own, so each completes in place).
    last: Mutex<Vec<EventRef>>,
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let after = std::mem::take(&mut *crate::sync::lock(&self.last));
        let shared = &self.graph.device.shared;
        let object: (Option<Arc<Mutex<RawExec>>>, Arc<Mutex<Inner>>) = (self.exec.take(), self.graph.inner.clone());
        let ctx = shared.cuda_ctx("a graph").ok();
        shared.reaper.defer(crate::reaper::Retired {
            what: "an executable graph",
            after,
            ctx,
            object: Box::new(object),
        });
    }
}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphExec").field("graph", &self.graph).finish()
    }
}

impl GraphExec {
    pub(super) fn new(graph: Graph) -> Result<GraphExec> {
        check_fresh_graph(&graph)?;
        let exec = match &graph.raw {
            Some(raw) => {
                let ctx = graph.device.shared.cuda_ctx("cuGraphInstantiate")?;
                crate::backend::cuda::bind(&ctx)?;
                // SAFETY: the graph's context is current (bound above).
                Some(Arc::new(Mutex::new(unsafe { raw.instantiate()? })))
            }
            None => None,
        };
        Ok(GraphExec { graph, exec, last: Mutex::new(Vec::new()) })
    }

    /// The graph this was instantiated from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Replays the graph on `stream`: one launch that declares the union of the recorded uses.
    /// The completion resolves once the GPU has run the whole graph.
    ///
    /// A graph recorded before its device's context was poisoned (or made stale otherwise) is
    /// [`Error::Stale`], as are buffers of an earlier generation; nothing is launched.
    pub fn replay(&self, stream: StreamId) -> Result<Completion<()>> {
        let g = &self.graph;
        check_fresh_graph(g)?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("graph", "replay"));
        for (buf, access) in &g.uses {
            rec.access_tracked(buf.clone(), *access)?;
        }
        let Some(exec) = &self.exec else { return self.replay_sim(rec, vec![Box::new(g.inner.clone())]) };
        let launched = rec.launch_event(&g.device, |scope| {
            let s = scope.bound_cuda_stream()?;
            let exec = crate::sync::lock(&**exec);
            // SAFETY: 1. The stream is the launch's, live, with its context current (bound
            // above). 2. Every buffer the graph touches is declared on the launch, so the
            // stream waits for their earlier uses, their frees wait for this launch, and the
            // graph (and its branches' library objects) stay alive until the GPU passes it.
            unsafe { exec.launch(s.cu_stream()) }
        })?;
        if let Some(ev) = &launched.event {
            self.note_end(ev);
        }
        // Replayed inside another graph's recording: that graph keeps this one alive.
        let keep: Vec<KeepAlive> = match launched.recorded {
            Some(_) => vec![Box::new(g.inner.clone()), Box::new(exec.clone())],
            None => Vec::new(),
        };
        Ok(launched.complete(&g.device, keep))
    }

    /// Notes `ev` as the newest replay's end on its stream.
    fn note_end(&self, ev: &EventRef) {
        let stream = ev.pos().stream;
        let mut last = crate::sync::lock(&self.last);
        // Replays of two threads may note their ends out of order: the newest position wins.
        match last.iter_mut().find(|e| e.pos().stream == stream) {
            Some(e) if e.pos().seq < ev.pos().seq => *e = ev.clone(),
            Some(_) => {}
            None => last.push(ev.clone()),
        }
    }

    /// A replay on the simulator: the recording closure runs again inside the replay's
    /// launch, each op on its branch's stream after the replay's start and the ops it
    /// conflicts with; the replay's stream then waits for every branch.
    fn replay_sim(&self, rec: LaunchRecorder, mut keep: Vec<KeepAlive>) -> Result<Completion<()>> {
        let device = &self.graph.device;
        let inner = &self.graph.inner;
        let drop_edges = device.shared.fence_mutation == Some(crate::FenceMutation::NoGraphEdges);
        let launched = rec.launch_event(device, |scope| {
            let raw = scope.raw_stream();
            let start = Arc::new(device.shared.backend().new_event()?);
            raw.record(&start)?;
            let build =
                Arc::new(GraphBuild::new(&device.shared, RecordingMode::Execute, None, Some(start), drop_edges));
            // Held across the closure: one replay (or rebinding) of a graph runs its closure at
            // a time. Not ranked: the closure's ops take every other lock under it.
            let mut held = crate::sync::lock_unranked(inner);
            let Inner { branches, substitutes, record, .. } = &mut *held;
            let ran = run_once(device, branches, &build, substitutes, record);
            drop(held);
            let finished = build.finish();
            ran?;
            let finished = finished?;
            for (_, end) in &finished.ends {
                raw.wait(end)?;
            }
            Ok(finished.keep)
        })?;
        let Launched { value, event, trace, recorded } = launched;
        keep.extend(value);
        Ok(Launched { value: (), event, trace, recorded }.complete(device, keep))
    }

    /// Points the graph at `new` wherever it was recorded with `old` (or with the buffer that
    /// stands for it after an earlier rebinding): later replays read and write `new`, and
    /// declare it instead of `old`. The recording closure runs again with `new` standing for
    /// `old`, and the executable graph is updated in place; replays already enqueued are not
    /// affected.
    ///
    /// `new` must be of the graph's device and have `old`'s length (the element type is the
    /// same by its type); `old` must be a buffer the graph uses. A change the executable graph
    /// cannot take in place (the ops would record other nodes or edges) is
    /// [`Error::GraphUpdate`] naming the reason, and leaves the graph as it was: nothing is
    /// instantiated again.
    pub fn rebind<T: Element>(&mut self, old: &GpuRef<T>, new: &GpuRef<T>) -> Result<()> {
        let g = &mut self.graph;
        check_fresh_graph(g)?;
        if new.track().device.uid != g.device.shared.uid {
            return Err(Error::ForeignDevice {
                what: format!("argument `new` ({})", new.name()),
                expected: g.device.shared.label(),
                found: new.track().device.label(),
            });
        }
        if new.len() != old.len() {
            return Err(Error::invalid("new", format!("has {} elements, `old` has {}", new.len(), old.len())));
        }
        new.check_fresh()?;
        let mut held = crate::sync::lock_unranked(&g.inner);
        let recorded = match held
            .substitutes
            .iter()
            .find(|s| s.handle.downcast_ref::<GpuRef<T>>().is_some_and(|b| b.same_buffer(old)))
        {
            Some(s) => s.recorded,
            None if g.uses.iter().any(|(t, _)| t.track().id.0 == old.id()) => old.id(),
            None => return Err(Error::invalid("old", format!("{} is not a buffer this graph uses", old.name()))),
        };
        // An op that needs distinct buffers (a copy's two ends, a GEMM's output and inputs)
        // would get the same one twice.
        if new.id() != recorded && g.uses.iter().any(|(t, _)| t.track().id.0 == new.id()) {
            return Err(Error::invalid("new", format!("{} is already used by this graph", new.name())));
        }
        let what = format!("{} to {}", old.name(), new.name());
        let previous = held.substitutes.clone();
        held.substitutes.retain(|s| s.recorded != recorded);
        if new.id() != recorded {
            held.substitutes.push(new.substitute_for(recorded));
        }
        let updated = record_into(&g.device, &mut held)
            .map_err(|e| Error::GraphUpdate { what: what.clone(), reason: format!("recording it again failed: {e}") })
            .and_then(|mut finished| {
                // What the new recording kept stays with the graph whatever happens: the live
                // executable graph may use objects retired while it recorded.
                held.keep.append(&mut finished.keep);
                update_exec(&self.exec, g, &finished.graph, &what).map(|()| finished)
            });
        let finished = match updated {
            Ok(f) => f,
            Err(e) => {
                held.substitutes = previous;
                return Err(e);
            }
        };
        drop(held);
        g.uses = finished.uses;
        g.ops = finished.ops;
        if finished.graph.is_some() {
            g.raw = finished.graph;
        }
        Ok(())
    }
}

/// Updates `exec` (CUDA) in place to `raw`, the graph recorded again.
fn update_exec(exec: &Option<Arc<Mutex<RawExec>>>, g: &Graph, raw: &Option<RawGraph>, what: &str) -> Result<()> {
    let (Some(exec), Some(raw)) = (exec, raw) else { return Ok(()) };
    let ctx = g.device.shared.cuda_ctx("cuGraphExecUpdate")?;
    crate::backend::cuda::bind(&ctx)?;
    let mut exec = crate::sync::lock(&**exec);
    // SAFETY: the graph's context is current (bound above), and the graph is of the device's
    // current generation (checked by the caller).
    match unsafe { exec.update(raw) }? {
        Ok(()) => Ok(()),
        Err(refused) => Err(Error::GraphUpdate { what: what.to_string(), reason: refused.reason.to_string() }),
    }
}

/// [`Error::Stale`] for a graph recorded before its device's context was poisoned or
/// rebuilt: its graph and executable graph belong to a context that is gone.
fn check_fresh_graph(g: &Graph) -> Result<()> {
    let current = g.device.shared.generation();
    if current != g.generation {
        return Err(Error::Stale { what: "a graph".into(), made: g.generation, current });
    }
    Ok(())
}
