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

/// The device address and byte size of the `__device__` or `__constant__` variable `name` of
/// `module` (`cuModuleGetGlobal`, with the module's context bound), or `None` when the module
/// has no such variable.
#[cfg(feature = "nvrtc")]
pub(crate) fn global(
    module: &std::sync::Arc<cudarc::driver::CudaModule>,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    name: &str,
) -> Result<Option<(u64, usize)>> {
    use cudarc::driver::DevicePtr;
    if name.contains('\0') {
        // No variable can have a NUL byte in its name.
        return Ok(None);
    }
    super::bind(stream.context())?;
    match module.get_global(name, stream) {
        Ok(view) => {
            // Event tracking is off on every context this crate opens: this records nothing.
            let (address, _sync) = view.device_ptr(stream);
            Ok(Some((address, view.len())))
        }
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
        Err(e) => Err(Error::driver("cuModuleGetGlobal", e)),
    }
}

/// A kernel's parameter layout as its image records it (read by `libs::rtc`): the byte offset
/// of each parameter by ordinal, and the end of the last one where recorded.
#[cfg(feature = "nvrtc")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ParamLayout {
    pub(crate) offsets: Vec<usize>,
    pub(crate) end: Option<usize>,
}

/// `cuFuncGetParamCount`, where the installed driver has it (CUDA 13.2 and later; cudarc's
/// bindings for 13.0 do not declare it). Looked up by name in the driver library, which asks
/// the driver nothing: a missing symbol is no API error.
#[cfg(feature = "nvrtc")]
fn param_count_call() -> Option<unsafe extern "C" fn(sys::CUfunction, *mut usize) -> sys::CUresult> {
    type ParamCount = unsafe extern "C" fn(sys::CUfunction, *mut usize) -> sys::CUresult;
    static CALL: std::sync::OnceLock<Option<ParamCount>> = std::sync::OnceLock::new();
    *CALL.get_or_init(|| {
        // SAFETY: 1. the driver library is loaded (a function was loaded from it to get here);
        // 2. the symbol, where present, is the driver's `CUresult cuFuncGetParamCount(CUfunction,
        // size_t*)`, the type it is read as; 3. the library stays loaded for the process (cudarc
        // holds it in a static), so the copied function pointer stays valid.
        unsafe { sys::culib().get::<ParamCount>(b"cuFuncGetParamCount\0").ok().map(|f| *f) }
    })
}

/// The offset and byte size of parameter `index`, or `None` where the driver answers
/// `CUDA_ERROR_INVALID_VALUE` (no such parameter).
#[cfg(feature = "nvrtc")]
fn param_info(raw: sys::CUfunction, index: usize) -> Result<Option<(usize, usize)>> {
    let (mut offset, mut size) = (0usize, 0usize);
    // SAFETY: 1. a live function handle (the caller's `CudaFunction` keeps its module loaded);
    // 2. two valid out-pointers; 3. an index past the last parameter only returns an error.
    match unsafe { sys::cuFuncGetParamInfo(raw, index, &mut offset, &mut size) } {
        sys::CUresult::CUDA_SUCCESS => Ok(Some((offset, size))),
        sys::CUresult::CUDA_ERROR_INVALID_VALUE => Ok(None),
        other => super::status("cuFuncGetParamInfo", other).map(|()| None),
    }
}

/// The byte size of each of the function's parameters, from `cuFuncGetParamInfo`, asked only
/// about parameters that exist: compute-sanitizer reports every failing driver call, and
/// asking one index past the last is the only way to find the end with that call alone.
///
/// The count comes from `cuFuncGetParamCount` where the driver has it; else from `layout`,
/// the kernel's image's own record, used only if the driver confirms each parameter's offset
/// and the end of the last. Without either (an image whose records were not understood), the
/// end is found by asking one index past the last after all.
#[cfg(feature = "nvrtc")]
pub(crate) fn param_sizes(f: &cudarc::driver::CudaFunction, layout: Option<&ParamLayout>) -> Result<Vec<usize>> {
    let raw = f.cu_function();
    if let Some(count_call) = param_count_call() {
        let mut count = 0usize;
        // SAFETY: 1. a live function handle (`f` keeps its module loaded); 2. a valid
        // out-pointer; 3. the pointer has the driver's signature (`param_count_call`).
        super::status("cuFuncGetParamCount", unsafe { count_call(raw, &mut count) })?;
        let mut sizes = Vec::with_capacity(count);
        for i in 0..count {
            let Some((_, size)) = param_info(raw, i)? else {
                return Err(Error::driver(
                    "cuFuncGetParamInfo",
                    cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
                ));
            };
            sizes.push(size);
        }
        return Ok(sizes);
    }
    if let Some(layout) = layout {
        let mut sizes = Vec::with_capacity(layout.offsets.len());
        let mut end = 0usize;
        for (i, &want) in layout.offsets.iter().enumerate() {
            match param_info(raw, i)? {
                Some((offset, size)) if offset == want => {
                    sizes.push(size);
                    end = end.max(offset.saturating_add(size));
                }
                _ => break,
            }
        }
        // The recorded end confirms that no parameter after the last recorded one exists; a
        // kernel with parameters must have it.
        let end_agrees = match layout.end {
            Some(recorded) => recorded == end,
            None => sizes.is_empty(),
        };
        if sizes.len() == layout.offsets.len() && end_agrees {
            return Ok(sizes);
        }
        log::debug!("cusched: a kernel's recorded parameter layout disagrees with the driver; probing instead");
    }
    let mut sizes = Vec::new();
    while let Some((_, size)) = param_info(raw, sizes.len())? {
        sizes.push(size);
    }
    Ok(sizes)
}
