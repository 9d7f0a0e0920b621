//! The NCCL call layer: every NCCL call cusched makes, each a thin wrapper that names the call
//! in its error. The only code in the crate that touches `cudarc::nccl::sys`.
//!
//! On a non-blocking communicator (`ncclConfig_t::blocking = 0`) a call may return
//! `ncclInProgress`, and the caller then polls `ncclCommGetAsyncError` until the state leaves
//! it ([`Progress`]), bounded by a deadline; on a blocking one that poll returns at once.

use super::DType;
use crate::error::{CollectiveFault, Error, Result};
use crate::libs::Status;
use cudarc::nccl::sys;
use std::ffi::{c_int, c_void, CStr};
use std::time::{Duration, Instant};

pub(super) use sys::{cudaStream_t as RawStream, ncclComm_t as RawComm, ncclRedOp_t as RawOp};

impl Status for sys::ncclResult_t {
    const SUCCESS: Self = sys::ncclResult_t::ncclSuccess;
}

/// Whether libnccl loads.
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

/// Whether the loaded NCCL exports `symbol` (calling a missing one through cudarc panics).
pub(super) fn has_symbol(symbol: &[u8]) -> bool {
    if !is_present() {
        return false;
    }
    // SAFETY: 1. the library is present (checked above), so `culib` loads it rather than
    // panicking; 2. the symbol is only looked up, never called through this pointer.
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(symbol).is_ok() }
}

/// The NCCL version code (`major * 10000 + minor * 100 + patch`).
///
/// NVIDIA: [`ncclGetVersion`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
pub(super) fn version() -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    unsafe { sys::ncclGetVersion(&mut v) }.check("ncclGetVersion")?;
    Ok(v)
}

/// A fresh unique id's bytes.
///
/// NVIDIA: [`ncclGetUniqueId`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
pub(super) fn unique_id() -> Result<[u8; 128]> {
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: `id` is a valid out-pointer.
    unsafe { sys::ncclGetUniqueId(&mut id) }.check("ncclGetUniqueId")?;
    Ok(id.internal.map(|c| c as u8))
}

/// Whether a call finished, or goes on in NCCL's background (non-blocking communicators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Progress {
    Done,
    InProgress,
}

/// The fault class of an NCCL result; `None` for success and `ncclInProgress`.
pub(super) fn fault_of(r: sys::ncclResult_t) -> Option<CollectiveFault> {
    use sys::ncclResult_t as R;
    Some(match r {
        R::ncclSuccess | R::ncclInProgress => return None,
        R::ncclUnhandledCudaError => CollectiveFault::Cuda,
        R::ncclSystemError => CollectiveFault::System,
        R::ncclInvalidArgument => CollectiveFault::InvalidArgument,
        R::ncclInvalidUsage => CollectiveFault::InvalidUsage,
        R::ncclRemoteError => CollectiveFault::Remote,
        _ => CollectiveFault::Internal,
    })
}

/// An NCCL result as [`Progress`], or the typed error naming `call`, with NCCL's last message
/// (of `comm` when given).
pub(super) fn check(r: sys::ncclResult_t, call: &'static str, comm: Option<RawComm>) -> Result<Progress> {
    match fault_of(r) {
        None if r == sys::ncclResult_t::ncclInProgress => Ok(Progress::InProgress),
        None => Ok(Progress::Done),
        Some(fault) => Err(Error::Collective { call, fault, detail: last_error(r, comm) }),
    }
}

/// NCCL's message for `r`: the communicator's last error when there is one, else the result's
/// name.
fn last_error(r: sys::ncclResult_t, comm: Option<RawComm>) -> String {
    // SAFETY: 1. `ncclGetErrorString` takes any result and returns a static string;
    // 2. `ncclGetLastError` takes a live communicator (or null) and returns a string NCCL owns,
    // copied at once.
    unsafe {
        let text =
            |p: *const std::ffi::c_char| (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned());
        let last = comm.and_then(|c| text(sys::ncclGetLastError(c))).filter(|s| !s.is_empty());
        last.or_else(|| text(sys::ncclGetErrorString(r))).unwrap_or_else(|| format!("{r:?}"))
    }
}

/// The config of a communicator, blocking or not, every other field left to NCCL (the
/// `NCCL_CONFIG_INITIALIZER` of nccl.h: undefined ints are `INT_MIN`, pointers null).
pub(super) fn config(blocking: bool) -> sys::ncclConfig_t {
    const UNDEF: c_int = c_int::MIN;
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        // NCCL_VERSION(2, 28, 0): the layout this struct has.
        version: 22800,
        blocking: c_int::from(blocking),
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
    }
}

/// `ncclCommInitRankConfig`; a non-blocking communicator may still be initializing (poll it
/// with [`wait_ready`]).
///
/// NVIDIA: [`ncclCommInitRankConfig`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
///
/// # Safety
/// The current context is the one of the rank's device.
pub(super) unsafe fn init_rank(nranks: c_int, id: &[u8; 128], rank: c_int, blocking: bool) -> Result<RawComm> {
    let mut comm: RawComm = std::ptr::null_mut();
    let mut cfg = config(blocking);
    let id = sys::ncclUniqueId { internal: id.map(|b| b as std::ffi::c_char) };
    // SAFETY: valid out-pointer and config; the caller made the device's context current.
    let r = unsafe { sys::ncclCommInitRankConfig(&mut comm, nranks, id, rank, &mut cfg) };
    let comm_ref = (!comm.is_null()).then_some(comm);
    match check(r, "ncclCommInitRankConfig", comm_ref) {
        Ok(_) if comm.is_null() => Err(Error::Collective {
            call: "ncclCommInitRankConfig",
            fault: CollectiveFault::Internal,
            detail: "returned no communicator".into(),
        }),
        Ok(_) => Ok(comm),
        Err(e) => {
            if let Some(c) = comm_ref {
                abort(c);
            }
            Err(e)
        }
    }
}

/// The communicator's asynchronous state: done, still in progress, or its error.
///
/// NVIDIA: [`ncclCommGetAsyncError`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
pub(super) fn async_state(comm: RawComm) -> Result<Progress> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm` is a live communicator (its owner holds it until abort or destroy);
    // `state` is a valid out-pointer. NCCL allows this call from any thread.
    let r = unsafe { sys::ncclCommGetAsyncError(comm, &mut state) };
    check(r, "ncclCommGetAsyncError", Some(comm))?;
    check(state, "ncclCommGetAsyncError", Some(comm))
}

/// Polls `comms` until none is in progress, each at most until `deadline`. A communicator
/// that does not get there is reported as [`CollectiveFault::Timeout`], naming `call`.
pub(super) fn wait_ready(comms: &[RawComm], call: &'static str, deadline: Instant) -> Result<()> {
    for &comm in comms {
        let start = Instant::now();
        while async_state(comm)? == Progress::InProgress {
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Collective {
                    call,
                    fault: CollectiveFault::Timeout,
                    detail: "NCCL was still in progress at the communicator's timeout".into(),
                });
            }
            // An enqueue is in progress for a few microseconds: a sleep (50 µs and more, with
            // the timer's slack) cost every op that much on the GPU machine. Yield for the
            // first two milliseconds, then sleep between polls (a long init or shrink).
            if now - start < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
    Ok(())
}

/// `ncclCommAbort`: stops the communicator's work (its kernels return) and frees it. Errors
/// are logged: there is nothing left to do with the communicator.
///
/// NVIDIA: [`ncclCommAbort`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
pub(super) fn abort(comm: RawComm) {
    // SAFETY: `comm` is a live communicator that its owner gives up here and never uses again.
    let r = unsafe { sys::ncclCommAbort(comm) };
    if let Err(e) = check(r, "ncclCommAbort", None) {
        log::warn!("cusched: {e}");
    }
}

/// `ncclCommFinalize` (awaited up to `wait`), then `ncclCommDestroy`, once every op enqueued
/// on the communicator has finished (the caller knows they have). A communicator whose
/// finalize fails or does not end in time is aborted instead.
///
/// NVIDIA: [`ncclCommFinalize`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html),
/// [`ncclCommDestroy`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
pub(super) fn destroy(comm: RawComm, wait: Duration) {
    // SAFETY: `comm` is a live communicator with no op pending, given up here.
    let finalized = check(unsafe { sys::ncclCommFinalize(comm) }, "ncclCommFinalize", Some(comm))
        .and_then(|_| wait_ready(&[comm], "ncclCommFinalize", Instant::now() + wait));
    if let Err(e) = finalized {
        log::warn!("cusched: {e}; aborting the communicator instead");
        abort(comm);
        return;
    }
    // SAFETY: `comm` is live and finalized, given up here.
    let r = unsafe { sys::ncclCommDestroy(comm) };
    if let Err(e) = check(r, "ncclCommDestroy", None) {
        log::warn!("cusched: {e}");
    }
}

/// `ncclCommShrink`: a communicator of the ranks not in `exclude` (renumbered in order), from
/// a live one; `None` on an excluded rank. Needs NCCL 2.27 (check [`has_symbol`]).
///
/// NVIDIA: [`ncclCommShrink`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html)
///
/// # Safety
/// `comm` is live and no other thread calls NCCL on it meanwhile; the current context is the
/// communicator's device's.
pub(super) unsafe fn shrink(comm: RawComm, exclude: &mut [c_int], blocking: bool) -> Result<Box<RawComm>> {
    // On the heap: a non-blocking communicator's shrink may write the new handle after the
    // call returns (in progress), so the slot must outlive this frame until the parent is
    // ready again (the caller waits for that before reading it).
    let mut new: Box<RawComm> = Box::new(std::ptr::null_mut());
    let mut cfg = config(blocking);
    let n = c_int::try_from(exclude.len()).map_err(|_| Error::invalid("exclude", "too many ranks"))?;
    // SAFETY: valid pointers (`new` is a heap slot the caller keeps until the shrink is done);
    // `exclude` holds `n` ranks; the caller vouches for `comm`.
    let r = unsafe { sys::ncclCommShrink(comm, exclude.as_mut_ptr(), n, &mut *new, &mut cfg, 0) };
    check(r, "ncclCommShrink", Some(comm))?;
    Ok(new)
}

/// `ncclGroupStart`.
///
/// NVIDIA: [`ncclGroupStart`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/group.html)
pub(super) fn group_start() -> Result<()> {
    // SAFETY: no arguments; groups nest per thread.
    check(unsafe { sys::ncclGroupStart() }, "ncclGroupStart", None).map(drop)
}

/// `ncclGroupEnd`: launches what the group enqueued (in the background on non-blocking
/// communicators: poll them with [`wait_ready`]).
///
/// NVIDIA: [`ncclGroupEnd`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/group.html)
pub(super) fn group_end() -> Result<()> {
    // SAFETY: ends the group this thread started.
    check(unsafe { sys::ncclGroupEnd() }, "ncclGroupEnd", None).map(drop)
}

/// One NCCL enqueue, with its raw arguments: pointers of the current context's device,
/// counts in elements of `dtype`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Call {
    AllReduce { send: u64, recv: u64, count: usize, op: RawOp },
    Broadcast { send: u64, recv: u64, count: usize, root: c_int },
    Reduce { send: u64, recv: u64, count: usize, op: RawOp, root: c_int },
    AllGather { send: u64, recv: u64, count: usize },
    ReduceScatter { send: u64, recv: u64, count: usize, op: RawOp },
    Send { send: u64, count: usize, peer: c_int },
    Recv { recv: u64, count: usize, peer: c_int },
}

/// Enqueues `call` on `stream` through `comm`.
///
/// NVIDIA: [`ncclAllReduce`, `ncclBroadcast`, `ncclReduce`, `ncclAllGather`,
/// `ncclReduceScatter`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html),
/// [`ncclSend`, `ncclRecv`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/p2p.html)
///
/// # Safety
/// `comm` is live and used by this thread alone meanwhile; `stream` is a live stream of the
/// communicator's device; every pointer is a live device buffer of that device holding the
/// elements the call reads or writes, fenced on `stream` for those uses.
pub(super) unsafe fn enqueue(call: Call, dtype: DType, comm: RawComm, stream: RawStream) -> Result<Progress> {
    let t = nccl_type(dtype);
    let (p, m) = (|a: u64| a as *const c_void, |a: u64| a as *mut c_void);
    // SAFETY: the caller vouches for the communicator, stream and buffers.
    let (r, name) = unsafe {
        match call {
            Call::AllReduce { send, recv, count, op } => {
                (sys::ncclAllReduce(p(send), m(recv), count, t, op, comm, stream), "ncclAllReduce")
            }
            Call::Broadcast { send, recv, count, root } => {
                (sys::ncclBroadcast(p(send), m(recv), count, t, root, comm, stream), "ncclBroadcast")
            }
            Call::Reduce { send, recv, count, op, root } => {
                (sys::ncclReduce(p(send), m(recv), count, t, op, root, comm, stream), "ncclReduce")
            }
            Call::AllGather { send, recv, count } => {
                (sys::ncclAllGather(p(send), m(recv), count, t, comm, stream), "ncclAllGather")
            }
            Call::ReduceScatter { send, recv, count, op } => {
                (sys::ncclReduceScatter(p(send), m(recv), count, t, op, comm, stream), "ncclReduceScatter")
            }
            Call::Send { send, count, peer } => (sys::ncclSend(p(send), count, t, peer, comm, stream), "ncclSend"),
            Call::Recv { recv, count, peer } => (sys::ncclRecv(m(recv), count, t, peer, comm, stream), "ncclRecv"),
        }
    };
    check(r, name, Some(comm))
}

/// `ncclRedOpCreatePreMulSum` with a host scalar (`scalar` holds one element of `dtype`).
///
/// NVIDIA: [`ncclRedOpCreatePreMulSum`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/ops.html)
///
/// # Safety
/// `comm` is live and used by this thread alone meanwhile.
pub(super) unsafe fn premul_sum(scalar: &mut [u8; 8], dtype: DType, comm: RawComm) -> Result<RawOp> {
    let mut op = RawOp::ncclSum;
    let residence = sys::ncclScalarResidence_t::ncclScalarHostImmediate;
    // SAFETY: `op` is a valid out-pointer; the scalar is read at once (host-immediate).
    let r = unsafe {
        sys::ncclRedOpCreatePreMulSum(&mut op, scalar.as_mut_ptr().cast(), nccl_type(dtype), residence, comm)
    };
    check(r, "ncclRedOpCreatePreMulSum", Some(comm))?;
    Ok(op)
}

/// `ncclRedOpDestroy`, once the last call given `op` has returned.
///
/// NVIDIA: [`ncclRedOpDestroy`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/ops.html)
///
/// # Safety
/// `op` was made on `comm`, which is live and used by this thread alone meanwhile.
pub(super) unsafe fn destroy_op(op: RawOp, comm: RawComm) {
    // SAFETY: the caller vouches for `op` and `comm`.
    if let Err(e) = check(unsafe { sys::ncclRedOpDestroy(op, comm) }, "ncclRedOpDestroy", Some(comm)) {
        log::warn!("cusched: {e}");
    }
}

/// The built-in reduction ops.
pub(super) fn builtin_op(op: super::BuiltinOp) -> RawOp {
    use super::BuiltinOp as B;
    match op {
        B::Sum => RawOp::ncclSum,
        B::Prod => RawOp::ncclProd,
        B::Max => RawOp::ncclMax,
        B::Min => RawOp::ncclMin,
        B::Avg => RawOp::ncclAvg,
    }
}

fn nccl_type(d: DType) -> sys::ncclDataType_t {
    use sys::ncclDataType_t as T;
    match d {
        DType::U8 => T::ncclUint8,
        DType::I32 => T::ncclInt32,
        DType::F16 => T::ncclFloat16,
        DType::Bf16 => T::ncclBfloat16,
        DType::F32 => T::ncclFloat32,
        DType::F64 => T::ncclFloat64,
    }
}
