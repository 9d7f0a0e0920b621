//! [`Recording`]: what a graph's recording closure records on, and one run of that closure
//! against a recording in progress.

use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::libs::Handles;
use crate::recorder::{GraphBuild, Substitute};
use std::sync::Arc;

/// How many branches (streams) one graph may record on.
pub(crate) const MAX_BRANCHES: usize = 16;

/// One branch of a graph: a stream of the device that the graph holds for its life, and the
/// library handles on it (made when first asked for, kept for every later recording and
/// replay, so that the library objects the graph's nodes use live as long as the graph).
pub(crate) struct Branch {
    pub stream: StreamId,
    pub handles: Option<Handles>,
}

/// What a graph's recording closure records on ([`Graph::record`](crate::Graph::record)).
///
/// Ops on [`stream`](Self::stream)`(b)` (or through [`handles`](Self::handles)`(b)`) are
/// recorded into the graph, not run: library ops, typed and recorder launches, copies between
/// device buffers and pinned host buffers, fills. An op follows the op before it on its branch
/// and the recorded ops it conflicts with on other branches (it reads what they wrote, or
/// writes what they read or wrote), so branches fork and join where the data says. An op the
/// closure enqueues on any other stream is refused ([`Error::Recording`]): the closure runs
/// again for a rebinding (and on the simulator for every replay), where eager work would run
/// again too.
///
/// Allocations and uploads on a branch happen at once, outside the graph (a library's
/// workspace grows this way the first time an op needs it); an op that cannot be a graph node
/// (a download, a blocking copy from a host slice, an op whose result the host reads back)
/// fails with [`Error::Recording`] and abandons the recording.
///
/// ```
/// use cusched::{Device, Graph, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let x = device.upload(s, &[1.0f32, 2.0, 3.0])?;
/// let y = device.alloc_zeros::<f32>(s, 3)?;
/// let (xr, yr) = (x.clone(), y.clone());
/// let graph = Graph::record(&device, move |rec| {
///     let b = rec.stream(0)?;
///     let (xm, ym) = (xr.sim_data()?, yr.sim_data()?);
///     let mut launch = LaunchRecorder::new_strict(b).named("double");
///     launch.read(&xr)?.write(&yr)?;
///     launch.launch(rec.device(), |scope| {
///         scope.sim_kernel(move || {
///             for (o, i) in ym.lock().iter_mut().zip(xm.read().iter()) { *o = 2.0 * i; }
///         })
///     })
/// })?;
/// let exec = graph.instantiate()?;
/// exec.replay(s)?.wait()?;
/// assert_eq!(y.download(s)?, [2.0, 4.0, 6.0]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Recording<'g> {
    pub(super) device: &'g Device,
    pub(super) branches: &'g mut Vec<Branch>,
    pub(super) build: &'g Arc<GraphBuild>,
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recording({} branches)", self.branches.len())
    }
}

impl Recording<'_> {
    /// The device the graph belongs to.
    pub fn device(&self) -> &Device {
        self.device
    }

    /// The stream of branch `branch` (made on first use; at most 16 branches): ops enqueued
    /// on it are recorded into the graph.
    pub fn stream(&mut self, branch: usize) -> Result<StreamId> {
        while self.branches.len() <= branch {
            if self.branches.len() == MAX_BRANCHES {
                return Err(Error::invalid(
                    "branch",
                    format!("is {branch}; a graph records on at most {MAX_BRANCHES} branches"),
                ));
            }
            let stream = self.device.shared.lane_stream("graph")?;
            self.branches.push(Branch { stream, handles: None });
            lend(self.device, stream, self.build)?;
        }
        Ok(self.branches[branch].stream)
    }

    /// The library handles on branch `branch`'s stream: their ops are recorded into the graph.
    pub fn handles(&mut self, branch: usize) -> Result<&mut Handles> {
        let stream = self.stream(branch)?;
        let b = &mut self.branches[branch];
        if b.handles.is_none() {
            b.handles = Some(Handles::new(self.device, stream)?);
        }
        b.handles.as_mut().ok_or(Error::Recording { what: "branch handles".into(), hint: "record again" })
    }
}

/// Lends `stream` to `build`.
fn lend(device: &Device, stream: StreamId, build: &Arc<GraphBuild>) -> Result<()> {
    let lent: Arc<dyn std::any::Any + Send + Sync> = build.clone();
    device.shared.stream(stream)?.lend_to_recording(lent).map_err(|_| Error::Recording {
        what: format!("{stream} is held by another graph recording already"),
        hint: "record one graph at a time on a stream",
    })?;
    build.note_lent(stream);
    Ok(())
}

/// The closure a graph is recorded with, run again for rebinding and (on the simulator) for
/// every replay.
pub(crate) type RecordFn = Box<dyn FnMut(&mut Recording<'_>) -> Result<()> + Send>;

/// Runs `record` once against `build`: lends the graph's branches to it for the run (and any
/// branch the run adds), with `substitutes` in force, and takes them back after, whatever
/// happens (an error, a panic). Returns the closure's result.
pub(crate) fn run_once(
    device: &Device,
    branches: &mut Vec<Branch>,
    build: &Arc<GraphBuild>,
    substitutes: &[Substitute],
    record: &mut RecordFn,
) -> Result<()> {
    /// Takes back every stream lent to the build, on unwind too.
    struct GiveBack<'a> {
        device: &'a Device,
        build: &'a GraphBuild,
    }
    impl Drop for GiveBack<'_> {
        fn drop(&mut self) {
            for stream in self.build.take_lent() {
                if let Ok(slot) = self.device.shared.stream(stream) {
                    slot.end_recording();
                }
            }
        }
    }
    let _give_back = GiveBack { device, build };
    for b in branches.iter() {
        lend(device, b.stream, build)?;
    }
    let mut rec = Recording { device, branches, build };
    crate::recorder::with_substitutes(substitutes, || record(&mut rec))
}
