//! Kernel launches.

use crate::error::{DriverResultExt, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;

/// A kernel function handle, valid while the module it came from is loaded.
pub(crate) type CuFunction = sys::CUfunction;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_mem_bytes: u32,
}

/// Enqueues `f` on `stream` (`cuLaunchKernel`) in the context current on this thread.
///
/// # Safety
/// 1. `f` is a function of a module still loaded in the current context, and `stream` a live stream
///    of that context;
/// 2. `params` holds one pointer per kernel parameter, each to a value of the size and type the
///    kernel expects (the driver copies them before returning);
/// 3. everything the kernel touches stays allocated until it has finished, and its uses are ordered
///    against other work by the caller.
pub(crate) unsafe fn launch_kernel(
    f: CuFunction,
    dims: Dims,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: this function's contract.
    unsafe { result::launch_kernel(f, dims.grid, dims.block, dims.shared_mem_bytes, stream, params) }
        .call("cuLaunchKernel")
}
