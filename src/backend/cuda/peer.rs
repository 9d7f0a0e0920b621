//! Driver calls between two CUDA contexts: peer access, and contexts of their own. The peer
//! copy itself is [`super::memory::copy_peer`].

use super::{bind, status};
use crate::error::{Error, Result};
use cudarc::driver::{sys, CudaContext, DriverError};
use std::sync::{Arc, Mutex, Weak};

/// The (context, peer) pairs whose access this process enabled, so that enabling again asks the
/// driver nothing: a second `cuCtxEnablePeerAccess` fails with
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`, which compute-sanitizer reports as an API error.
/// Weak references name each context: an allocation a `Weak` points to is not reused while it
/// exists, so a new context never matches an old entry, and entries of dropped contexts are
/// pruned when a pair is added.
static ENABLED: Mutex<Vec<(Weak<CudaContext>, Weak<CudaContext>)>> = Mutex::new(Vec::new());

fn is_pair(entry: &(Weak<CudaContext>, Weak<CudaContext>), ctx: &Arc<CudaContext>, peer: &Arc<CudaContext>) -> bool {
    std::ptr::eq(entry.0.as_ptr(), Arc::as_ptr(ctx)) && std::ptr::eq(entry.1.as_ptr(), Arc::as_ptr(peer))
}

/// Whether `ctx`'s GPU can map memory of `peer`'s GPU. Two contexts on one GPU never need it:
/// each reaches that GPU's memory anyway.
pub(crate) fn can_access(ctx: &CudaContext, peer: &CudaContext) -> Result<bool> {
    if ctx.cu_device() == peer.cu_device() {
        return Ok(false);
    }
    let mut can: std::ffi::c_int = 0;
    // SAFETY: 1. `can` is a valid out-pointer of the `int` the call writes; 2. both devices are
    // live handles (`cu_device` of retained contexts).
    status("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), peer.cu_device())
    })?;
    Ok(can != 0)
}

/// Lets work in `ctx` reach `peer`'s memory directly: its plain allocations
/// (`cuCtxEnablePeerAccess`) and, where the GPU has memory pools, the stream-ordered ones too
/// (`cuMemPoolSetAccess` on `peer`'s current pool, which `cuMemAllocAsync` takes from). Returns
/// whether access is on; `false` where the GPUs cannot (peer copies are then staged by the
/// driver). Enabling twice is harmless, and the second time asks the driver nothing.
pub(crate) fn enable(ctx: &Arc<CudaContext>, peer: &Arc<CudaContext>) -> Result<bool> {
    if crate::sync::lock(&ENABLED).iter().any(|e| is_pair(e, ctx, peer)) {
        return Ok(true);
    }
    if !can_access(ctx, peer)? {
        return Ok(false);
    }
    bind(ctx)?;
    // SAFETY: `peer.cu_ctx()` is a live context (`peer` holds a retain on it); flags must be 0.
    match unsafe { sys::cuCtxEnablePeerAccess(peer.cu_ctx(), 0) }.result() {
        Ok(()) | Err(DriverError(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => {}
        Err(e) => return Err(Error::driver("cuCtxEnablePeerAccess", e)),
    }
    if peer.has_async_alloc() {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out-pointer; the device handle is live.
        status("cuDeviceGetMemPool", unsafe { sys::cuDeviceGetMemPool(&mut pool, peer.cu_device()) })?;
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.cu_device(),
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: 1. `pool` was just returned by the driver for a live device; 2. `desc` is one
        // valid descriptor and `count` says one.
        status("cuMemPoolSetAccess", unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) })?;
    }
    let mut enabled = crate::sync::lock(&ENABLED);
    enabled.retain(|(a, b)| a.strong_count() > 0 && b.strong_count() > 0);
    if !enabled.iter().any(|e| is_pair(e, ctx, peer)) {
        enabled.push((Arc::downgrade(ctx), Arc::downgrade(peer)));
    }
    Ok(true)
}

/// A new context of its own on `ordinal` (not the primary context that [`super::open`]
/// shares with every other user of the GPU in the process), with event tracking disabled.
pub(crate) fn open_isolated(ordinal: usize) -> Result<std::sync::Arc<CudaContext>> {
    super::probe(ordinal, "install the NVIDIA driver, or use Device::sim_group for simulated devices")?;
    super::open_fresh(ordinal)
}
