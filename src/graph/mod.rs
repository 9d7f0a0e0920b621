//! CUDA graphs: record a sequence of ops once, replay it many times as one tracked op.
//!
//! [`Graph::record`] runs a closure whose ops, on the graph's own streams ([`Recording`]), are
//! recorded rather than run: on CUDA each op is captured into the graph after the recorded ops
//! its declared uses conflict with (the tracker's rules, as edges instead of events), so the
//! graph has the fewest edges program order needs, across as many branches as the closure
//! uses. [`Graph::instantiate`] makes a [`GraphExec`]; [`GraphExec::replay`] launches it on any
//! stream as ONE launch whose declared uses are the union of the recorded ones (a buffer read
//! by one op and written by another is a read-write): it is fenced against eager work on every
//! stream, eager work is fenced against it, and it records one event. [`GraphExec::rebind`]
//! points a recorded buffer at another of the same type and length, updating the executable
//! graph in place (or refusing, with [`Error::GraphUpdate`]).
//!
//! On the simulator the recording keeps the closure: a replay runs it again with every op on
//! its branch's simulated stream, after the ops it conflicts with, so the hazard checker sees
//! the graph's accesses and edges; a graph whose declared uses miss a dependency is reported
//! there ([`FenceMutation::NoGraphEdges`](crate::FenceMutation::NoGraphEdges) drops the edges,
//! to show the checker catches it).

mod exec;
mod recording;

pub use exec::GraphExec;
use recording::{run_once, Branch, RecordFn};
pub use recording::{LoopCondition, Recording};

use crate::backend::cuda::graph::RawGraph;
use crate::completion::KeepAlive;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::recorder::{Finished, GraphBuild, RecordingMode, Substitute, Tracked};
use crate::track::Access;
use std::sync::{Arc, Mutex};

/// A recorded graph, ready to [`instantiate`](Self::instantiate).
///
/// ```
/// use cusched::{Device, Graph, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let x = device.alloc_zeros::<u32>(s, 4)?;
/// let xr = x.clone();
/// let graph = Graph::record(&device, move |rec| {
///     let b = rec.stream(0)?;
///     let xm = xr.sim_data()?;
///     let mut launch = LaunchRecorder::new_strict(b).named("increment");
///     launch.read_write(&xr)?;
///     launch.launch(rec.device(), |scope| scope.sim_kernel(move || xm.lock().iter_mut().for_each(|v| *v += 1)))
/// })?;
/// assert_eq!(graph.ops(), 1);
/// let exec = graph.instantiate()?;
/// for _ in 0..3 {
///     exec.replay(s)?; // one tracked op each
/// }
/// assert_eq!(x.download(s)?, [3, 3, 3, 3]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Graph {
    device: Device,
    inner: Arc<Mutex<Inner>>,
    /// The CUDA graph (none on the simulator).
    raw: Option<RawGraph>,
    /// Every buffer the ops used, with the union of their accesses.
    uses: Vec<(Arc<dyn Tracked>, Access)>,
    ops: usize,
    /// The device generation the graph was recorded in.
    generation: u64,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("ops", &self.ops).field("buffers", &self.uses.len()).finish()
    }
}

/// What a graph and every replay of it keep alive: the recording closure, the branches with
/// their library handles, what the recorded ops' completions would have kept, and the
/// rebindings in force. Replays hold it until the GPU has passed them.
struct Inner {
    device: Device,
    /// The device's context epoch when the graph was recorded.
    epoch: u64,
    record: RecordFn,
    branches: Vec<Branch>,
    keep: Vec<KeepAlive>,
    substitutes: Vec<Substitute>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The branches' streams go back to the device once nothing can record on them.
        let shared = &self.device.shared;
        for b in std::mem::take(&mut self.branches) {
            drop(b.handles);
            shared.release_stream(b.stream);
        }
        // What the recorded ops kept (library objects among them) is destroyed by the reaper,
        // with the context bound: the last replay that could use it has finished, since every
        // replay holds this until the GPU has passed it.
        let keep = std::mem::take(&mut self.keep);
        if shared.epoch() != self.epoch {
            // Objects of a context since replaced: calling the library on them could only
            // fail, as for any library object of an old context.
            std::mem::forget(keep);
        } else if !keep.is_empty() {
            let ctx = shared.cuda_ctx("a graph's kept objects").ok();
            shared.reaper.defer(crate::reaper::Retired {
                what: "a graph's kept objects",
                after: Vec::new(),
                ctx,
                object: Box::new(keep),
            });
        }
    }
}

impl Graph {
    /// Records a graph: runs `record` once, with its ops on the graph's branches
    /// ([`Recording::stream`], [`Recording::handles`]) recorded instead of run (see
    /// [`Recording`]). The closure is kept: a rebinding runs it again, and on the simulator
    /// every replay does.
    ///
    /// An op that cannot be recorded fails with [`Error::Recording`]; the recording is then
    /// abandoned and this returns that error, with nothing left capturing on any stream.
    ///
    /// # Waiting inside a recorded op
    ///
    /// On CUDA each op is captured on its own, and while its capture is open (its launch
    /// closure runs) nothing may synchronize its GPU: a synchronization from any thread would
    /// invalidate the capture. So the destroys that synchronize (library handles, plans and
    /// generators, modules, pinned memory: normally the reaper's, on its own thread), and
    /// cuRAND's pseudo-random draws (whose set-up breaks any capture beside it), wait on any
    /// thread until that GPU's open captures close, and no new capture opens there while such
    /// a call waits or runs. A launch closure inside a recording must therefore not wait for
    /// another thread that records on the same GPU, or that uses its libraries: that thread may
    /// be waiting for this very capture to close, and the two would wait for each other for
    /// ever. Hand such work over before the recording, or after it.
    pub fn record<F>(device: &Device, record: F) -> Result<Graph>
    where
        F: FnMut(&mut Recording<'_>) -> Result<()> + Send + 'static,
    {
        let mut inner = Inner {
            device: device.internal(),
            epoch: device.shared.epoch(),
            record: Box::new(record),
            branches: Vec::new(),
            keep: Vec::new(),
            substitutes: Vec::new(),
        };
        let generation = device.shared.generation();
        let finished = record_into(device, &mut inner)?;
        let Finished { graph: raw, uses, keep, ops, .. } = finished;
        inner.keep = keep;
        Ok(Graph { device: device.internal(), inner: Arc::new(Mutex::new(inner)), raw, uses, ops, generation })
    }

    /// How many ops were recorded.
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// How many distinct buffers the graph uses (what a replay declares).
    pub fn buffers(&self) -> usize {
        self.uses.len()
    }

    /// The streams of the graph's branches (for traces and tests).
    pub fn branches(&self) -> Vec<crate::StreamId> {
        crate::sync::lock(&self.inner).branches.iter().map(|b| b.stream).collect()
    }

    /// Makes the executable graph, to replay.
    pub fn instantiate(self) -> Result<GraphExec> {
        GraphExec::new(self)
    }
}

/// Records `inner`'s closure once into a new build (captured on CUDA, dry on the simulator,
/// with `inner`'s substitutions in force) and returns what it left.
fn record_into(device: &Device, inner: &mut Inner) -> Result<Finished> {
    let (mode, raw) = match device.is_simulated() {
        true => (RecordingMode::Dry, None),
        false => (RecordingMode::Capture, Some(RawGraph::new()?)),
    };
    let build = Arc::new(GraphBuild::new(&device.shared, mode, raw, None, false));
    let ran = run_once(device, &mut inner.branches, &build, &inner.substitutes, &mut inner.record);
    let finished = build.finish();
    ran?;
    let finished = finished?;
    if finished.ops == 0 {
        return Err(Error::Recording {
            what: "the closure recorded no op".into(),
            hint: "enqueue ops on Recording::stream or Recording::handles",
        });
    }
    Ok(finished)
}
