//! CUDA graphs: capture into a graph node by node, instantiate, launch, update in place.
//!
//! A recording captures each op separately (`cuStreamBeginCaptureToGraph` with the nodes it
//! must follow as its roots, then `cuStreamEndCapture`), so that the graph's edges are the
//! ones the declared uses ask for, not the order the ops happened to be enqueued in.

use super::CuStream;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One node of a graph being built. Only meaningful together with its [`RawGraph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Node(sys::CUgraphNode);

// SAFETY: 1. A node handle is an opaque pointer the driver hands out; it is only passed back
// to driver calls on the graph that owns it, which the owner serializes (a recording builds
// its graph under one lock). 2. Moving the handle between threads does not touch the node.
unsafe impl Send for Node {}
// SAFETY: as for `Send`: shared references only copy the handle.
unsafe impl Sync for Node {}

/// A graph under construction (`CUgraph`), destroyed on drop unless it is the body of a
/// conditional node (the node owns it), or the driver took the graph tree it belongs to.
///
/// A capture into a graph that the driver invalidates (a call the capture forbids ran) ends
/// with the driver destroying the graph captured into: a top-level graph is then gone, and a
/// body graph leaves its conditional node, and so the whole tree, dangling (any call on it
/// then faults in the driver). So a failed capture marks the tree [`gone`](Self::gone), and
/// nothing touches it again: a gone top-level graph is the driver's, a tree whose body was
/// taken is left as it is (leaked), never destroyed.
#[derive(Debug)]
pub(crate) struct RawGraph {
    graph: sys::CUgraph,
    owned: bool,
    /// Shared by a graph and the bodies of its conditional nodes, at any depth.
    gone: Arc<AtomicBool>,
}

/// A WHILE node added to a graph: the node, the condition handle its body's kernels set, and
/// the body graph to record the body into.
pub(crate) struct WhileNode {
    pub node: Node,
    pub handle: u64,
    pub body: RawGraph,
}

// SAFETY: 1. The driver's graph objects may be used from any thread as long as calls on one
// graph are not concurrent; its owner (a recording, under its lock, or a `Graph`) serializes
// them. 2. The handle has no thread affinity.
unsafe impl Send for RawGraph {}
// SAFETY: as for `Send`: `&RawGraph` is only used to read the handle under the owner's lock.
unsafe impl Sync for RawGraph {}

impl RawGraph {
    /// An empty graph. The context needs not be current (`cuGraphCreate` takes none).
    pub(crate) fn new() -> Result<RawGraph> {
        let mut graph = ptr::null_mut();
        // SAFETY: 1. `graph` is a valid out-pointer. 2. Flags must be 0, as passed.
        super::status("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut graph, 0) })?;
        Ok(RawGraph { graph, owned: true, gone: Arc::new(AtomicBool::new(false)) })
    }

    /// Adds a WHILE conditional node after every node of `after`: its body graph runs as long
    /// as the condition is non-zero when the body ends. The condition is 1 at every launch of
    /// the graph (so the body runs at least once); a kernel of the body sets it with
    /// `cudaGraphSetConditional(handle, value)`.
    ///
    /// # Safety
    ///
    /// `ctx` is the context the graph's work belongs to, current on this thread.
    pub(crate) unsafe fn add_while(&self, ctx: sys::CUcontext, after: &[Node]) -> Result<WhileNode> {
        self.alive()?;
        let mut handle: sys::CUgraphConditionalHandle = 0;
        // SAFETY: 1. `handle` is a valid out-pointer and the graph is live. 2. `ctx` is live
        // (caller). 3. ASSIGN_DEFAULT with 1: every launch starts the loop.
        let status = unsafe {
            sys::cuGraphConditionalHandleCreate(&mut handle, self.graph, ctx, 1, sys::CU_GRAPH_COND_ASSIGN_DEFAULT)
        };
        super::status("cuGraphConditionalHandleCreate", status)?;
        // SAFETY: an all-zero node-params struct is valid (plain handles, integers and a
        // union of plain structs); the fields the conditional node reads are set below.
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle,
            type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
            size: 1,
            phGraph_out: ptr::null_mut(),
            ctx,
        };
        let deps: Vec<sys::CUgraphNode> = after.iter().map(|n| n.0).collect();
        let deps_ptr = if deps.is_empty() { ptr::null() } else { deps.as_ptr() };
        let mut node = ptr::null_mut();
        // SAFETY: 1. `node` is a valid out-pointer; `deps` holds `len` nodes of this graph (or
        // null for none), and no edge data (null) means default edges. 2. `params` is a
        // conditional node's parameters; the driver writes the body graph's handle into
        // `phGraph_out`, an array it owns.
        let status =
            unsafe { sys::cuGraphAddNode_v2(&mut node, self.graph, deps_ptr, ptr::null(), deps.len(), &mut params) };
        super::status("cuGraphAddNode_v2", status)?;
        // SAFETY: the node was added as a conditional node; the union holds its parameters.
        let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
        // SAFETY: for a WHILE node of size 1 the driver's array holds one graph, valid for the
        // node's life (the body is destroyed with the node, hence not owned here).
        let body = if out.is_null() { ptr::null_mut() } else { unsafe { *out } };
        if body.is_null() {
            return Err(Error::Recording {
                what: "the driver made a WHILE node without a body graph".into(),
                hint: "conditional nodes need CUDA 12.4 or later and a driver that supports them",
            });
        }
        let body = RawGraph { graph: body, owned: false, gone: self.gone.clone() };
        Ok(WhileNode { node: Node(node), handle, body })
    }

    /// Starts capturing `stream`'s work into this graph: the first node captured depends on
    /// every node of `after`. Thread-local mode: calls this thread may not make while capturing
    /// (a synchronous allocation, a synchronize) fail and invalidate the capture instead of
    /// running.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the current context, not capturing already, and nothing
    /// else enqueues on it until [`end_capture`](Self::end_capture).
    pub(crate) unsafe fn begin_capture(&self, stream: CuStream, after: &[Node]) -> Result<()> {
        self.alive()?;
        let deps: Vec<sys::CUgraphNode> = after.iter().map(|n| n.0).collect();
        let deps_ptr = if deps.is_empty() { ptr::null() } else { deps.as_ptr() };
        // SAFETY: 1. `stream` is live and not capturing (caller). 2. `deps` are nodes of this
        // graph, and the pointer is valid for `len` nodes (or null for none). 3. No edge data
        // (null) means default edges.
        let status = unsafe {
            sys::cuStreamBeginCaptureToGraph(
                stream,
                self.graph,
                deps_ptr,
                ptr::null(),
                deps.len(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        super::status("cuStreamBeginCaptureToGraph", status)
    }

    /// Ends the capture begun by [`begin_capture`](Self::begin_capture) and returns the nodes
    /// a later op must follow to follow this one: the capture's last nodes (the roots it was
    /// given, when it captured nothing). An error means the capture was invalidated (an
    /// operation that cannot be captured ran on the stream or on this thread).
    ///
    /// # Safety
    ///
    /// `stream` is capturing into this graph, begun on this thread's current context.
    pub(crate) unsafe fn end_capture(&self, stream: CuStream) -> Result<Vec<Node>> {
        // SAFETY: the caller's contract is this function's.
        let ended = unsafe { self.end_capture_inner(stream) };
        if ended.is_err() {
            // Whether the driver destroyed the graph or not (an error other than an
            // invalidated capture), it is not touched again: a leak on an error path, where
            // touching a destroyed tree would fault.
            self.gone.store(true, Ordering::Release);
        }
        ended
    }

    /// Whether a failed capture took this graph's tree (see [`RawGraph`]): it may not be
    /// captured into, instantiated or destroyed any more.
    pub(crate) fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// `Err` once the graph's tree is [`gone`](Self::gone): a recording that failed.
    fn alive(&self) -> Result<()> {
        if self.gone() {
            return Err(Error::Recording {
                what: "the graph's tree was taken by the driver when a capture into it was invalidated".into(),
                hint: "record the graph again",
            });
        }
        Ok(())
    }

    /// [`end_capture`](Self::end_capture)'s driver calls.
    ///
    /// # Safety
    ///
    /// As for `end_capture`.
    unsafe fn end_capture_inner(&self, stream: CuStream) -> Result<Vec<Node>> {
        let mut state = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        let mut graph = ptr::null_mut();
        let mut deps: *const sys::CUgraphNode = ptr::null();
        let mut edges: *const sys::CUgraphEdgeData = ptr::null();
        let mut count = 0usize;
        // SAFETY: 1. Every out-pointer is valid. 2. The dependency array the driver returns
        // stays valid until the next call on the stream; it is copied out before `EndCapture`.
        let info = unsafe {
            sys::cuStreamGetCaptureInfo_v3(stream, &mut state, &mut id, &mut graph, &mut deps, &mut edges, &mut count)
        };
        let tail = if info == sys::CUresult::CUDA_SUCCESS && !deps.is_null() {
            // SAFETY: the driver returned `count` nodes at `deps` (checked non-null), valid
            // until the next call on the stream.
            unsafe { std::slice::from_raw_parts(deps, count) }.iter().map(|&n| Node(n)).collect()
        } else {
            Vec::new()
        };
        let mut out = ptr::null_mut();
        // SAFETY: `stream` is capturing (caller); `out` is a valid out-pointer. Ending the
        // capture is always attempted, so that the stream never stays capturing.
        let end = unsafe { sys::cuStreamEndCapture(stream, &mut out) };
        super::status("cuStreamGetCaptureInfo", info)?;
        super::status("cuStreamEndCapture", end)?;
        if state != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Err(Error::Driver {
                call: "cuStreamEndCapture",
                status: cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
            });
        }
        Ok(tail)
    }

    /// An executable graph of this one.
    ///
    /// # Safety
    ///
    /// The context the graph's work belongs to is current on this thread.
    pub(crate) unsafe fn instantiate(&self) -> Result<RawExec> {
        self.alive()?;
        let mut exec = ptr::null_mut();
        // Auto-free on launch: a library may allocate inside its captured work (cuBLAS takes
        // its default workspace with a stream-ordered allocation, which capture turns into a
        // graph allocation node it never frees); such a graph could not be launched again
        // until freed otherwise.
        let flags = u64::from(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0);
        // SAFETY: 1. `exec` is a valid out-pointer; the graph is complete (no capture into it
        // is open: the recording ended every capture). 2. The flag is a valid instantiate flag.
        let status = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, self.graph, flags) };
        super::status("cuGraphInstantiateWithFlags", status)?;
        Ok(RawExec(exec))
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if self.gone() {
            log::warn!(
                "cusched: a graph whose capture the driver invalidated is not destroyed (the driver destroyed the graph captured into; destroying the rest would fault)"
            );
            return;
        }
        // SAFETY: the graph is owned here and no capture into it is open (a recording ends
        // every capture before it lets go of its graph). Destroying it does not affect
        // executable graphs made from it.
        let status = unsafe { sys::cuGraphDestroy(self.graph) };
        if status != sys::CUresult::CUDA_SUCCESS {
            log::warn!("cusched: cuGraphDestroy failed ({status:?})");
        }
    }
}

/// An executable graph (`CUgraphExec`), destroyed on drop.
#[derive(Debug)]
pub(crate) struct RawExec(sys::CUgraphExec);

// SAFETY: 1. An executable graph may be launched and updated from any thread; its owner
// serializes updates against launches (`&mut` for update). 2. The handle has no thread
// affinity.
unsafe impl Send for RawExec {}
// SAFETY: launches through `&RawExec` from several threads are allowed by the driver (each
// launch is ordered on its own stream); updates take `&mut`.
unsafe impl Sync for RawExec {}

/// Why the driver refused to update an executable graph in place.
#[derive(Debug)]
pub(crate) struct UpdateRefused {
    pub reason: &'static str,
}

impl RawExec {
    /// Launches the whole graph on `stream`.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the graph's context, which is current on this thread, and
    /// every buffer the graph touches is alive and ordered before the launch on `stream`.
    pub(crate) unsafe fn launch(&self, stream: CuStream) -> Result<()> {
        // SAFETY: per the caller's contract.
        super::status("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.0, stream) })
    }

    /// Updates the executable graph in place to `graph`'s parameters (same topology, same
    /// node kinds): `Ok(Err(..))` names why the driver refused; the graph is then unchanged.
    ///
    /// # Safety
    ///
    /// The graph's context is current on this thread.
    pub(crate) unsafe fn update(&mut self, graph: &RawGraph) -> Result<std::result::Result<(), UpdateRefused>> {
        graph.alive()?;
        // SAFETY: an all-zero result info is a valid out-structure (plain handles and an enum
        // whose zero is `SUCCESS`).
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: 1. Both handles are live. 2. `info` is a valid out-pointer.
        let status = unsafe { sys::cuGraphExecUpdate_v2(self.0, graph.graph, &mut info) };
        use sys::CUgraphExecUpdateResult as U;
        let reason = match info.result {
            U::CU_GRAPH_EXEC_UPDATE_SUCCESS if status == sys::CUresult::CUDA_SUCCESS => return Ok(Ok(())),
            U::CU_GRAPH_EXEC_UPDATE_SUCCESS => return super::status("cuGraphExecUpdate", status).map(Ok),
            U::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => "the graph's topology changed (other nodes or edges)",
            U::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "a node's type changed",
            U::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => "a kernel node runs another function",
            U::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => {
                "a node's parameters changed in a way that cannot be updated"
            }
            U::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => "a node's change is not supported in place",
            U::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => {
                "a kernel node's function changed unsupportedly"
            }
            U::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => "a node's attributes changed",
            _ => "the driver refused the update",
        };
        Ok(Err(UpdateRefused { reason }))
    }
}

impl Drop for RawExec {
    fn drop(&mut self) {
        // SAFETY: the executable graph is owned here; its owner drops it only once no launch
        // of it is pending (launches keep it alive until the GPU passes them).
        let status = unsafe { sys::cuGraphExecDestroy(self.0) };
        if status != sys::CUresult::CUDA_SUCCESS {
            log::warn!("cusched: cuGraphExecDestroy failed ({status:?})");
        }
    }
}
