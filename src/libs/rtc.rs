//! NVRTC: compile CUDA C++ at run time for the device's own architecture.

use crate::backend::cuda;
use crate::device::{Device, DeviceShared};
use crate::error::{DriverResultExt, Error, Result};
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
use std::sync::Arc;

/// A module compiled for one device and generation.
#[derive(Clone)]
pub struct Module {
    module: Arc<CudaModule>,
    device: Arc<DeviceShared>,
    generation: u64,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module(device {}, generation {})", self.device.label(), self.generation)
    }
}

/// A kernel function of a [`Module`]; stale after the device's generation advances.
#[derive(Clone)]
pub struct Kernel {
    function: CudaFunction,
    name: String,
    device: Arc<DeviceShared>,
    generation: u64,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({}, generation {})", self.name, self.generation)
    }
}

/// The virtual architecture string for compute capability `(major, minor)`.
fn arch_name(cc: (i32, i32)) -> &'static str {
    match cc {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        // An unknown newer device still runs the newest PTX this list knows, JIT-compiled.
        _ => "compute_90",
    }
}

impl Device {
    /// Compiles CUDA C++ `src` for this device's architecture (`compute_90` on an H100) with
    /// extra NVRTC `options`, and loads it. A compile error carries the compiler's log.
    pub fn compile(&self, src: &str, options: &[&str]) -> Result<Module> {
        let ctx = self.shared.cuda_ctx("Device::compile")?;
        // SAFETY: only tries to dlopen NVRTC by name; cudarc panics if it is missing later.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::LibraryUnavailable {
                library: "NVRTC (libnvrtc)",
                hint: "install the CUDA toolkit's NVRTC library",
            });
        }
        if src.contains('\0') {
            return Err(Error::invalid("src", "contains a NUL byte"));
        }
        let opts = CompileOptions {
            arch: Some(arch_name(cuda::arch(ctx)?)),
            options: options.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(src, opts).map_err(|e| match e {
            CompileError::CompileError { log, .. } => {
                Error::invalid("src", format!("NVRTC compile failed:\n{}", log.to_string_lossy()))
            }
            other => Error::invalid("src", format!("NVRTC failed: {other:?}")),
        })?;
        let module = ctx.load_module(ptx).call("cuModuleLoadData")?;
        Ok(Module { module, device: self.shared.clone(), generation: self.shared.generation() })
    }
}

impl Module {
    /// Looks up the `extern "C"` kernel `name`.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        self.check()?;
        let function = self.module.load_function(name).map_err(|e| match e.0 {
            cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                Error::invalid("name", format!("no kernel `{name}` in the module (declare it extern \"C\")"))
            }
            _ => Error::driver("cuModuleGetFunction", e),
        })?;
        Ok(Kernel { function, name: name.to_string(), device: self.device.clone(), generation: self.generation })
    }

    fn check(&self) -> Result<()> {
        let current = self.device.generation();
        if current != self.generation {
            return Err(Error::Stale { what: "compiled module".into(), made: self.generation, current });
        }
        Ok(())
    }
}

impl Kernel {
    /// The cudarc function, for `CudaStream::launch_builder` (validated: not stale).
    pub fn function(&self) -> Result<&CudaFunction> {
        let current = self.device.generation();
        if current != self.generation {
            return Err(Error::Stale { what: format!("kernel `{}`", self.name), made: self.generation, current });
        }
        Ok(&self.function)
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
