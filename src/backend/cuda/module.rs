//! Modules: loading PTX or CUBIN images, looking functions up, unloading.

use crate::error::{DriverResultExt, Error, Result};
#[cfg(feature = "curand")]
use cudarc::driver::result;
use cudarc::driver::sys;
#[cfg(feature = "curand")]
use std::ffi::{CStr, CString};

/// A module loaded from an image in the context current when it was loaded, unloaded on drop
/// (`cuModuleUnload`, in the context current then: drop it with that context bound).
#[cfg(feature = "curand")]
pub(crate) struct RawModule {
    handle: sys::CUmodule,
    /// What the module is, for the log when unloading fails.
    what: &'static str,
}

// SAFETY: a module handle is a plain driver handle, usable from any thread that binds its
// context; `RawModule` owns it exclusively.
#[cfg(feature = "curand")]
unsafe impl Send for RawModule {}

#[cfg(feature = "curand")]
impl RawModule {
    /// Loads a NUL-terminated PTX text (JIT-compiled by the driver) or CUBIN image into the
    /// context current on this thread.
    pub(crate) fn load(image: &CStr, what: &'static str) -> Result<RawModule> {
        // SAFETY: 1. `image` is NUL-terminated and outlives the call (the driver copies it);
        // 2. without a current context the driver returns an error, it touches nothing.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.call("cuModuleLoadData")?;
        Ok(RawModule { handle: module, what })
    }

    /// The `extern "C"` function `name`, valid while this module stays loaded.
    pub(crate) fn function(&self, name: &str) -> Result<super::launch::CuFunction> {
        let name = CString::new(name).map_err(|_| Error::invalid("name", "contains a NUL byte"))?;
        // SAFETY: 1. the module is live (owned by `self`); 2. the name is NUL-terminated.
        unsafe { result::module::get_function(self.handle, name) }.call("cuModuleGetFunction")
    }
}

#[cfg(feature = "curand")]
impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: 1. the module was loaded once by `load` and is unloaded once, here; 2. launches
        // already enqueued keep running: the driver defers the unload until they finish.
        if let Err(e) = unsafe { result::module::unload(self.handle) } {
            log::error!("cusched: cuModuleUnload of {} failed: {e:?}", self.what);
        }
    }
}

/// Loads a CUBIN image into `ctx` as cudarc's shared module (binds `ctx`).
#[cfg(feature = "nvrtc")]
pub(crate) fn load_cubin(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    cubin: Vec<u8>,
) -> Result<std::sync::Arc<cudarc::driver::CudaModule>> {
    ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).call("cuModuleLoadData")
}

/// The function `symbol` of `module`, or `None` when the module has no such function.
#[cfg(feature = "nvrtc")]
pub(crate) fn load_function(
    module: &std::sync::Arc<cudarc::driver::CudaModule>,
    symbol: &str,
) -> Result<Option<cudarc::driver::CudaFunction>> {
    if symbol.contains('\0') {
        // cudarc panics on a name with a NUL byte; no function can have one.
        return Ok(None);
    }
    match module.load_function(symbol) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
        Err(e) => Err(Error::driver("cuModuleGetFunction", e)),
    }
}

/// The byte size of each of the function's parameters, from `cuFuncGetParamInfo`. CUDA 13.0
/// has no parameter count call (`cuFuncGetParamCount` is 13.2), so the end is found by the
/// documented `CUDA_ERROR_INVALID_VALUE` for the index one past the last parameter; sanitizers
/// report that as an API error unless run with `--report-api-errors no`.
#[cfg(feature = "nvrtc")]
pub(crate) fn param_sizes(f: &cudarc::driver::CudaFunction) -> Result<Vec<usize>> {
    let raw = f.cu_function();
    let mut sizes = Vec::new();
    loop {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: 1. a live function handle (`f` keeps its module loaded); 2. two valid
        // out-pointers; 3. an index past the last parameter only returns an error.
        match unsafe { sys::cuFuncGetParamInfo(raw, sizes.len(), &mut offset, &mut size) } {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(sizes),
            other => super::status("cuFuncGetParamInfo", other)?,
        }
    }
}
