//! Device and pinned host memory: allocations, frees, memsets, copies and pointer attributes.
//!
//! The stream-ordered operations only enqueue: their `# Safety` sections say what the caller's
//! fences must guarantee for as long as the GPU runs them.

use super::bind;
use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaSlice, CudaStream, DevicePtr, DeviceRepr, DriverError};
use std::ptr::NonNull;
use std::sync::Arc;

/// Bytes of free device memory, for out-of-memory errors.
pub(crate) fn free_memory(ctx: &CudaContext) -> usize {
    bind(ctx).ok().and_then(|_| result::mem_get_info().ok()).map_or(0, |(free, _)| free)
}

/// Maps an allocation failure to `OutOfMemory` with the free byte count.
pub(crate) fn alloc_error(ctx: &CudaContext, call: &'static str, requested: usize, e: DriverError) -> Error {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory { requested, free: free_memory(ctx) }
    } else {
        Error::driver(call, e)
    }
}

/// The device address of `slice`, for kernel parameters and foreign calls.
pub(crate) fn device_address<T>(slice: &CudaSlice<T>) -> u64 {
    // Event tracking is off on every context this crate opens, so this records nothing.
    let (ptr, _sync) = slice.device_ptr(slice.stream());
    ptr
}

/// Device allocations are whole multiples of this many bytes. Library kernels read in aligned
/// words and vectors up to 16 bytes wide, and some read a buffer's last partial word whole
/// (NCCL's send/receive and low-latency all-gather kernels read 4 bytes at a 3-byte buffer's
/// start, and a word ending 1 byte past a 10,007-byte one): inside the driver's own allocation
/// granule, so harmless, but outside an allocation of exactly the bytes asked for, which
/// compute-sanitizer then reports as an out-of-bounds read. Rounded up, such reads stay inside
/// the allocation.
const ALLOC_GRANULE: usize = 16;

/// The environment variable that, set to `1`, makes allocations exactly the bytes asked for:
/// compute-sanitizer then reports every access past a buffer's end, the few bytes the granule
/// would hide included (and a library's whole-word read of a last partial word with them).
const EXACT_ALLOCATIONS_VAR: &str = "CUSCHED_EXACT_ALLOCATIONS";

/// The granule allocations are rounded to in this process: [`ALLOC_GRANULE`], or 1 where
/// [`EXACT_ALLOCATIONS_VAR`] is `1` (read once).
fn granule() -> usize {
    static GRANULE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *GRANULE.get_or_init(|| {
        let exact = std::env::var(EXACT_ALLOCATIONS_VAR).is_ok_and(|v| v == "1");
        if exact {
            1
        } else {
            ALLOC_GRANULE
        }
    })
}

/// The bytes an allocation of `bytes` takes: `bytes` rounded up to `granule`; `None` past
/// `usize`.
fn padded_bytes(bytes: usize, granule: usize) -> Option<usize> {
    bytes.checked_next_multiple_of(granule)
}

/// Allocates `len` elements of `T` on `s` (`cuMemAllocAsync`, or `cuMemAlloc` where the
/// device has no memory pools), in [`padded_bytes`] bytes (whole [`ALLOC_GRANULE`]s unless
/// [`EXACT_ALLOCATIONS_VAR`] says otherwise), freed on `s` when dropped.
///
/// # Safety
/// The memory is uninitialised: every bit pattern must be a valid `T`, and the caller must
/// order the allocation before any use on another stream.
pub(crate) unsafe fn alloc<T: DeviceRepr>(s: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<T>> {
    let ctx = s.context();
    let too_large = |requested| Error::OutOfMemory { requested, free: free_memory(ctx) };
    let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| too_large(usize::MAX))?;
    if bytes == 0 {
        // SAFETY: an empty allocation holds no `T` (this function's contract covers the rest).
        return unsafe { s.alloc::<T>(0) }.map_err(|e| alloc_error(ctx, "cuMemAllocAsync", 0, e));
    }
    let padded = padded_bytes(bytes, granule()).ok_or_else(|| too_large(bytes))?;
    bind(ctx)?;
    let (call, made) = if ctx.has_async_alloc() {
        // SAFETY: 1. `s` is a live stream of the bound context; 2. the memory is uninitialised
        // and 3. its first use on another stream is ordered after the allocation: both are the
        // caller's (this function's contract).
        ("cuMemAllocAsync", unsafe { result::malloc_async(s.cu_stream(), padded) })
    } else {
        // SAFETY: the memory is uninitialised, which the caller accepts (this function's
        // contract); the context is bound (above), so it is allocated in `s`'s context.
        ("cuMemAlloc", unsafe { result::malloc_sync(padded) })
    };
    let ptr = made.map_err(|e| alloc_error(ctx, call, bytes, e))?;
    // SAFETY: 1. `ptr` is a fresh allocation of `padded >= len * size_of::<T>()` bytes in `s`'s
    // context, owned by nothing else; 2. the slice frees it on `s` the way cudarc frees its own
    // allocations of this context (asynchronously where it has memory pools), whatever its
    // length; 3. the memory is uninitialised, which the caller accepts (this function's contract);
    // 4. event tracking is off on every context the crate opens (`open`, `open_fresh`), so the
    // call makes no event (the one thing in it that could fail).
    Ok(unsafe { s.upgrade_device_ptr::<T>(ptr, len) })
}

/// Takes over `slice`, allocated in `ours`'s context on another stream: `ours` waits for the
/// work queued on the slice's own stream so far, and frees the memory when the result drops.
///
/// # Safety
/// `slice` must be of `ours`'s context (compare [`same_context`]).
pub(crate) unsafe fn adopt<T: DeviceRepr>(ours: &Arc<CudaStream>, slice: CudaSlice<T>) -> Result<CudaSlice<T>> {
    let len = slice.len();
    let theirs = slice.stream().clone();
    let ptr = slice.leak();
    let done = super::stream::record_new_event(&theirs)?;
    super::stream::wait(ours, &done)?;
    // SAFETY: 1. `ptr` came from `leak`, so this is now its only owner; 2. it holds `len`
    // elements of `T` allocated in `ours`'s context (this function's contract); 3. `ours` waits
    // for the work queued on the slice's old stream (above).
    Ok(unsafe { ours.upgrade_device_ptr::<T>(ptr, len) })
}

/// Whether `slice` lives in the context of `stream`.
pub(crate) fn same_context<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> bool {
    slice.context().cu_ctx() == stream.context().cu_ctx()
}

/// Frees `slice` on its own stream (`cuMemFreeAsync`) with its context bound; see
/// [`super::drop_bound`].
pub(crate) fn free<T>(slice: CudaSlice<T>, what: &dyn std::fmt::Display) {
    let ctx = slice.context().clone();
    super::drop_bound(&ctx, what, slice);
}

/// Enqueues `cuMemsetD8Async(dst, 0)` on `s`.
///
/// # Safety
/// 1. All-zero bytes must be a valid `T`;
/// 2. the caller orders the memset against the other uses of `dst` and fences `dst`'s free after
///    it.
pub(crate) unsafe fn memset_zero<T>(s: &CudaStream, dst: &CudaSlice<T>) -> Result<()> {
    bind(s.context())?;
    let bytes = dst.len() * std::mem::size_of::<T>();
    let (ptr, _sync) = dst.device_ptr(s);
    // SAFETY: 1. `ptr` addresses `bytes` bytes of `dst`, whose uses and free the caller orders
    // around the memset (contract 2); 2. zero bytes are a valid `T` (contract 1); 3. the stream
    // is live and of the bound context.
    unsafe { result::memset_d8_async(ptr, 0, bytes, s.cu_stream()) }.call("cuMemsetD8Async")
}

/// Enqueues a copy of `len` elements of host memory at `src` into `dst` on `s`.
///
/// # Safety
/// 1. `src` addresses `len` readable elements of `T` that stay allocated and unwritten until the
///    copy has read them: pageable memory is staged before this returns, memory the driver copies
///    asynchronously (see [`is_driver_host_memory`]) is read when the stream reaches the copy;
/// 2. the caller orders the copy against the other uses of `dst` and fences `dst`'s free after it.
pub(crate) unsafe fn copy_htod<T>(s: &CudaStream, dst: &CudaSlice<T>, src: *const T, len: usize) -> Result<()> {
    check_lengths(dst.len(), len)?;
    bind(s.context())?;
    let (ptr, _sync) = dst.device_ptr(s);
    let bytes = len * std::mem::size_of::<T>();
    // SAFETY: 1. equal lengths (checked), so the copy stays inside `dst`; 2. `src` stays
    // readable for as long as the copy reads it, and `dst` is ordered and kept alive by the
    // caller (this function's contract); 3. the stream is live and of the bound context.
    let status = unsafe { sys::cuMemcpyHtoDAsync_v2(ptr, src.cast(), bytes, s.cu_stream()) };
    super::status("cuMemcpyHtoDAsync", status)
}

/// Enqueues a copy of `src` into the `len` elements of host memory at `dst` on `s`.
///
/// # Safety
/// 1. `dst` addresses `len` writable elements of `T` that stay allocated, with no Rust reference to
///    them used, until the stream has passed the copy;
/// 2. the caller orders the copy after the writes of `src` and fences `src`'s free after it.
pub(crate) unsafe fn copy_dtoh<T>(s: &CudaStream, dst: *mut T, len: usize, src: &CudaSlice<T>) -> Result<()> {
    check_lengths(src.len(), len)?;
    bind(s.context())?;
    let (ptr, _sync) = src.device_ptr(s);
    let bytes = len * std::mem::size_of::<T>();
    // SAFETY: 1. equal lengths (checked); 2. `dst` is left alone until the copy has finished,
    // and `src` is ordered and kept alive by the caller (this function's contract); 3. the
    // stream is live and of the bound context.
    let status = unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), ptr, bytes, s.cu_stream()) };
    super::status("cuMemcpyDtoHAsync", status)
}

/// Enqueues a copy of all of `src` into `dst` on `s`, both of `s`'s context.
///
/// # Safety
/// 1. `dst` and `src` are distinct allocations;
/// 2. the caller orders the copy against the other uses of both and fences both frees after it.
pub(crate) unsafe fn copy_dtod<T>(s: &CudaStream, dst: &CudaSlice<T>, src: &CudaSlice<T>) -> Result<()> {
    check_lengths(dst.len(), src.len())?;
    bind(s.context())?;
    let (d, _a) = dst.device_ptr(s);
    let (f, _b) = src.device_ptr(s);
    let bytes = dst.len() * std::mem::size_of::<T>();
    // SAFETY: 1. both ranges are `bytes` long (lengths checked) and distinct (contract 1);
    // 2. both are ordered and kept alive by the caller (contract 2); 3. the stream is live and
    // of the bound context.
    unsafe { result::memcpy_dtod_async(d, f, bytes, s.cu_stream()) }.call("cuMemcpyDtoDAsync")
}

/// Enqueues a copy of all of `src` into `dst` on `s`, where the two may live in different
/// contexts (devices): `cuMemcpyPeerAsync`, staged through the host by the driver when the
/// devices have no peer access.
///
/// # Safety
/// 1. `dst` and `src` are distinct allocations;
/// 2. the caller orders the copy against the other uses of both, on both devices, and fences both
///    frees after it.
pub(crate) unsafe fn copy_peer<T>(s: &CudaStream, dst: &CudaSlice<T>, src: &CudaSlice<T>) -> Result<()> {
    check_lengths(dst.len(), src.len())?;
    if dst.is_empty() || std::mem::size_of::<T>() == 0 {
        return Ok(());
    }
    bind(s.context())?;
    let (d, _a) = dst.device_ptr(s);
    let (f, _b) = src.device_ptr(s);
    let bytes = dst.len() * std::mem::size_of::<T>();
    // SAFETY: 1. both ranges are `bytes` long (lengths checked), of the contexts named, and
    // distinct (contract 1); 2. both are ordered and kept alive by the caller (contract 2);
    // 3. the stream is live and of the bound context.
    unsafe { result::memcpy_peer_async(dst.context().cu_ctx(), d, src.context().cu_ctx(), f, bytes, s.cu_stream()) }
        .call("cuMemcpyPeerAsync")
}

fn check_lengths(dst: usize, src: usize) -> Result<()> {
    if dst != src {
        return Err(Error::invalid("len", format!("a copy of {src} elements into {dst}")));
    }
    Ok(())
}

/// Allocates `bytes` (non-zero) of pinned, page-locked host memory in `ctx`
/// (`cuMemHostAlloc`). Free it with [`free_host`].
pub(crate) fn malloc_host(ctx: &CudaContext, bytes: usize) -> Result<NonNull<u8>> {
    bind(ctx)?;
    // SAFETY: 1. a plain allocation call (a zero size returns null or an error, both handled);
    // 2. the context is bound.
    let raw = unsafe { result::malloc_host(bytes, 0) }.call("cuMemHostAlloc")?;
    NonNull::new(raw.cast::<u8>()).ok_or(Error::OutOfMemory { requested: bytes, free: 0 })
}

/// Allocates `bytes` (non-zero) of pinned host memory mapped into `ctx`'s device address space
/// (`cuMemHostAlloc(DEVICEMAP)`), for results the GPU writes straight to the host. Returns the
/// host pointer and its device address; free it with [`free_host`].
pub(crate) fn malloc_host_mapped(ctx: &CudaContext, bytes: usize) -> Result<(NonNull<u8>, u64)> {
    bind(ctx)?;
    // SAFETY: 1. a plain allocation call (a zero size returns null or an error, both handled);
    // 2. the context is bound.
    let raw = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }.call("cuMemHostAlloc")?;
    let host = NonNull::new(raw.cast::<u8>()).ok_or(Error::OutOfMemory { requested: bytes, free: 0 })?;
    let mut device: sys::CUdeviceptr = 0;
    // SAFETY: 1. `raw` is a live mapped allocation of the bound context; 2. `device` is a valid
    // out-pointer.
    let got = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, raw, 0) };
    if let Err(e) = super::status("cuMemHostGetDevicePointer", got) {
        // SAFETY: 1. `host` came from `cuMemHostAlloc` above and is freed once; 2. nothing else
        // refers to it; 3. its context is bound.
        unsafe { free_host(host) };
        return Err(e);
    }
    Ok((host, device))
}

/// Frees pinned host memory (`cuMemFreeHost`), logging a failure.
///
/// # Safety
/// 1. `ptr` came from [`malloc_host`] and is freed once;
/// 2. no GPU work and no Rust reference uses it any more;
/// 3. the allocating context is bound.
pub(crate) unsafe fn free_host(ptr: NonNull<u8>) {
    // SAFETY: this function's contract.
    if let Err(e) = unsafe { result::free_host(ptr.as_ptr().cast()) } {
        log::error!("cusched: cuMemFreeHost of pinned host memory failed: {:?}", e.0);
    }
}

/// Whether the driver knows the host range `[ptr, ptr + bytes)` at either end: memory from
/// `cuMemHostAlloc`, registered with `cuMemHostRegister`, or managed. A host-to-device copy from
/// such memory reads its source asynchronously, after the call returns; one from plain pageable
/// memory has staged its source by the time the call returns.
///
/// Asked with `cuPointerGetAttributes` (plural), which answers an address the driver does not
/// know with a zero memory type and `CUDA_SUCCESS`: the singular call fails with
/// `CUDA_ERROR_INVALID_VALUE` there, which compute-sanitizer reports as an API error on every
/// upload from pageable memory. Any error status is returned as an error.
pub(crate) fn is_driver_host_memory(ctx: &CudaContext, ptr: *const u8, bytes: usize) -> Result<bool> {
    if bytes == 0 {
        return Ok(false);
    }
    bind(ctx)?;
    let last = ptr.wrapping_add(bytes - 1);
    for p in [ptr, last] {
        let mut memory_type: std::ffi::c_uint = 0;
        let mut attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
        let mut data: [*mut std::ffi::c_void; 1] = [(&mut memory_type as *mut std::ffi::c_uint).cast()];
        // SAFETY: 1. one attribute, and `data` holds one valid out-pointer, to the `unsigned int`
        // this attribute writes; 2. the address is only looked up by the driver, never
        // dereferenced; 3. a context is bound (above).
        let status =
            unsafe { sys::cuPointerGetAttributes(1, &mut attribute, data.as_mut_ptr(), p as sys::CUdeviceptr) };
        match status {
            // Zero is no `CUmemorytype`: the driver's default for an address it does not know.
            sys::CUresult::CUDA_SUCCESS if memory_type != 0 => return Ok(true),
            sys::CUresult::CUDA_SUCCESS => {}
            other => super::status("cuPointerGetAttributes(MEMORY_TYPE)", other)?,
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_round_up_to_whole_granules_and_refuse_what_cannot_be_rounded() {
        let g = ALLOC_GRANULE;
        assert_eq!(padded_bytes(1, g), Some(16));
        assert_eq!(padded_bytes(3, g), Some(16));
        assert_eq!(padded_bytes(16, g), Some(16));
        assert_eq!(padded_bytes(17, g), Some(32));
        assert_eq!(padded_bytes(10_007, g), Some(10_016));
        assert_eq!(padded_bytes(usize::MAX - 15, g), Some(usize::MAX - 15));
        assert_eq!(padded_bytes(usize::MAX - 14, g), None);
        assert_eq!(padded_bytes(usize::MAX, g), None);
        // Exact allocations (the sanitizer's setting): nothing is rounded.
        assert_eq!(padded_bytes(3, 1), Some(3));
        assert_eq!(padded_bytes(usize::MAX, 1), Some(usize::MAX));
    }
}
