//! Driver calls between two CUDA contexts: peer access and peer copies.

use super::cuda::bind;
use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};

/// Whether `ctx`'s GPU can map memory of `peer`'s GPU. Two contexts on one GPU never need it:
/// each reaches that GPU's memory anyway.
pub(crate) fn can_access(ctx: &CudaContext, peer: &CudaContext) -> Result<bool> {
    if ctx.cu_device() == peer.cu_device() {
        return Ok(false);
    }
    let mut can: std::ffi::c_int = 0;
    // SAFETY: 1. `can` is a valid out-pointer of the `int` the call writes; 2. both devices are
    // live handles (`cu_device` of retained contexts).
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), peer.cu_device()) }
        .result()
        .call("cuDeviceCanAccessPeer")?;
    Ok(can != 0)
}

/// Lets work in `ctx` reach `peer`'s memory directly: its plain allocations
/// (`cuCtxEnablePeerAccess`) and, where the GPU has memory pools, the stream-ordered ones too
/// (`cuMemPoolSetAccess` on `peer`'s current pool, which `cuMemAllocAsync` takes from). Returns
/// whether access is on; `false` where the GPUs cannot (peer copies are then staged by the
/// driver). Enabling twice is harmless.
pub(crate) fn enable(ctx: &CudaContext, peer: &CudaContext) -> Result<bool> {
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
        unsafe { sys::cuDeviceGetMemPool(&mut pool, peer.cu_device()) }.result().call("cuDeviceGetMemPool")?;
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.cu_device(),
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: 1. `pool` was just returned by the driver for a live device; 2. `desc` is one
        // valid descriptor and `count` says one.
        unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }.result().call("cuMemPoolSetAccess")?;
    }
    Ok(true)
}

/// Queues a copy of `bytes` bytes from `src` (memory of `src_ctx`) to `dst` (memory of
/// `dst_ctx`) on `stream`, which may belong to either context.
///
/// # Safety
/// 1. `src` and `dst` address at least `bytes` live bytes of their contexts, which stay
///    allocated until the copy has finished (the caller orders their frees after it);
/// 2. nothing else writes `dst`, or writes `src`, until the copy has finished (the caller
///    fences the copy against every conflicting use).
pub(crate) unsafe fn memcpy(
    stream: &CudaStream,
    dst_ctx: &CudaContext,
    dst: sys::CUdeviceptr,
    src_ctx: &CudaContext,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    bind(stream.context())?;
    // SAFETY: both contexts are retained by their `CudaContext`s and the stream by `stream`;
    // the ranges are the caller's promise (see `# Safety`).
    unsafe { result::memcpy_peer_async(dst_ctx.cu_ctx(), dst, src_ctx.cu_ctx(), src, bytes, stream.cu_stream()) }
        .call("cuMemcpyPeerAsync")
}

/// A new context of its own on `ordinal` (not the primary context that [`super::cuda::open`]
/// shares with every other user of the GPU in the process), with event tracking disabled.
pub(crate) fn open_isolated(ordinal: usize) -> Result<std::sync::Arc<CudaContext>> {
    // Probe as `cuda::open` does: cudarc panics when its lazily loaded library is missing.
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by name; it has no
    // preconditions.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::LibraryUnavailable {
            library: "the CUDA driver (libcuda)",
            hint: "install the NVIDIA driver, or use Device::sim_group for simulated devices",
        });
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(Error::NoDevice { ordinal, count: 0 }),
        Err(e) => return Err(Error::driver("cuInit", e)),
    }
    let count = result::device::get_count().call("cuDeviceGetCount")?.max(0) as usize;
    if ordinal >= count {
        return Err(Error::NoDevice { ordinal, count });
    }
    super::cuda::open_fresh(ordinal)
}
