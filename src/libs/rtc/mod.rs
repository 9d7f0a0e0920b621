//! NVRTC: compile CUDA C++ at run time to a CUBIN for the device's own architecture (`sm_90`
//! on an H100), with a per-device module cache keyed on source, options, name expressions and
//! architecture, an optional on-disk cache ([`crate::DeviceConfig::kernel_cache_dir`]), lowered
//! names for templated kernels, and a typed launch API that builds the recorder from the
//! declared reads and writes.
//!
//! - this file: [`Program`], [`Device::compile_program`] and the in-memory module cache;
//! - [`nvrtc`]: the NVRTC calls;
//! - [`disk`]: the on-disk cache;
//! - [`cubin`]: the kernels' parameter layouts recorded in a CUBIN;
//! - [`module`]: loaded modules, [`Module`] and [`Kernel`];
//! - [`globals`]: a module's `__device__` and `__constant__` variables as tracked buffers, and
//!   the simulator's module;
//! - [`launch`]: [`KernelLaunch`], the typed launch.
//!
//! On the simulator a CUDA C++ kernel has no CPU meaning: compiling fails with
//! [`Error::LibraryUnavailable`] naming the alternative, a host closure that computes what the
//! kernel would, enqueued with [`LaunchScope::sim_kernel`](crate::LaunchScope::sim_kernel) inside
//! [`LaunchRecorder::launch`](crate::LaunchRecorder::launch) with the same declared reads and
//! writes (the hazard checker sees its accesses against them). `examples/nvrtc_kernel.rs` and
//! `examples/custom_kernel.rs` take one form or the other by backend.

mod cubin;
mod disk;
mod globals;
mod image;
mod launch;
mod module;
mod nvrtc;
mod options;

pub use image::ModuleImage;
pub use launch::{KernelLaunch, LaunchOptions, RawLaunch, PDL_DEVICE_FUNCTIONS};
pub use module::{Kernel, Module};

use crate::backend::cuda;
use crate::device::Device;
use crate::error::{Error, Result};
use module::LoadedModule;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What to compile: source, NVRTC options and the name expressions (templated kernels) whose
/// lowered names the module should know.
///
/// ```no_run
/// # use cusched::{Device, Program};
/// # let device = Device::open(0)?;
/// let src = r#"template <typename T> __global__ void scale(T* x, T a, unsigned n) {
///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }"#;
/// let module = device.compile_program(&Program::new(src).name_expression("scale<float>"))?;
/// let kernel = module.kernel("scale<float>")?;
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    /// CUDA C++ source.
    pub source: String,
    /// NVRTC options (`-DN=4`, `--use_fast_math`...). The architecture is added from the device.
    pub options: Vec<String>,
    /// Name expressions (`"scale<float>"`) to lower; look them up with [`Module::kernel`].
    pub name_expressions: Vec<String>,
}

impl Program {
    /// A program with no options.
    pub fn new(source: impl Into<String>) -> Self {
        Program { source: source.into(), ..Default::default() }
    }

    /// Adds an NVRTC option.
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }

    /// Adds a name expression to lower (a templated kernel's instantiation).
    pub fn name_expression(mut self, expr: impl Into<String>) -> Self {
        self.name_expressions.push(expr.into());
        self
    }
}

/// Where a [`Device::compile_program`] result came from, counted per device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCacheStats {
    /// Served from the in-memory module cache.
    pub memory_hits: u64,
    /// Loaded from the on-disk cache (no compile).
    pub disk_hits: u64,
    /// Compiled by NVRTC.
    pub compiles: u64,
}

struct CachedModule {
    module: Arc<LoadedModule>,
    generation: u64,
    lowered: Arc<HashMap<String, String>>,
}

/// The per-device module cache. Holds no strong reference to the device (modules are rebuilt
/// into [`Module`]s on a hit; a [`LoadedModule`] holds it weakly), so it makes no cycle. It
/// keeps every module of the current generation loaded until the device drops.
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: Mutex<HashMap<String, CachedModule>>,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    compiles: AtomicU64,
}

/// The library name NVRTC's errors give.
const LIBRARY: &str = "NVRTC (libnvrtc)";

/// What compiling or launching a CUDA C++ kernel gives on the simulator, which runs no device
/// code: the error names the form a kernel takes there.
pub(crate) fn unavailable_on_sim() -> Error {
    Error::LibraryUnavailable {
        library: LIBRARY,
        hint: "the simulated backend compiles and runs no CUDA C++ (a kernel has no CPU meaning); on \
               the simulator, write the kernel's computation as a host closure and enqueue it with \
               LaunchScope::sim_kernel inside LaunchRecorder::launch, declaring the same reads and \
               writes (examples/custom_kernel.rs and examples/nvrtc_kernel.rs show both forms)",
    }
}

fn cstring(arg: &'static str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(arg, format!("{s:?} contains a NUL byte")))
}

impl Device {
    /// Compiles CUDA C++ `src` for this device's architecture with extra NVRTC `options`, and
    /// loads it. Same as [`compile_program`](Self::compile_program) with no name expressions.
    pub fn compile(&self, src: &str, options: &[&str]) -> Result<Module> {
        let mut p = Program::new(src);
        p.options = options.iter().map(|s| s.to_string()).collect();
        self.compile_program(&p)
    }

    /// Compiles `program` to a CUBIN for this device's architecture (`sm_90` on an H100) and
    /// loads it, or returns the module cached for the same source, options, name expressions
    /// and architecture. With [`crate::DeviceConfig::kernel_cache_dir`] set, CUBINs also persist
    /// on disk across runs. A compile error is [`Error::CompileFailed`] with NVRTC's log.
    ///
    /// On the simulator, which runs no device code, it fails with [`Error::LibraryUnavailable`]
    /// naming the simulator's form of a kernel: a host closure enqueued with
    /// [`LaunchScope::sim_kernel`](crate::LaunchScope::sim_kernel) inside
    /// [`LaunchRecorder::launch`](crate::LaunchRecorder::launch), declaring the same uses.
    pub fn compile_program(&self, program: &Program) -> Result<Module> {
        if let Some(e) = self.shared.poisoned() {
            return Err(e);
        }
        let epoch = self.shared.epoch();
        self.shared.check(self.load_program(program), epoch)
    }

    fn load_program(&self, program: &Program) -> Result<Module> {
        let (backend, epoch) = self.shared.backend_epoch();
        let crate::backend::BackendCtx::Cuda(ctx) = backend else {
            return Err(unavailable_on_sim());
        };
        if !nvrtc::is_present() {
            return Err(Error::LibraryUnavailable {
                library: LIBRARY,
                hint: "install the CUDA toolkit's NVRTC library",
            });
        }
        let src = cstring("source", &program.source)?;
        let options = program.options.iter().map(|o| cstring("options", o)).collect::<Result<Vec<_>>>()?;
        let exprs =
            program.name_expressions.iter().map(|e| cstring("name_expressions", e)).collect::<Result<Vec<_>>>()?;
        let (major, minor) = cuda::arch(&ctx)?;
        let arch = format!("-arch=sm_{major}{minor}");
        let (vmaj, vmin) = nvrtc::nvrtc_version()?;
        let key = cache_key(program, &arch, (vmaj, vmin));
        let cache = self.shared.libs.get::<ModuleCache>();
        let generation = self.shared.generation();
        if let Some(hit) = crate::sync::lock(&cache.modules).get(&key) {
            if hit.generation == generation {
                cache.memory_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Module::new(hit.module.clone(), hit.lowered.clone(), self.shared.clone(), generation));
            }
        }
        let disk = self.shared.config.kernel_cache_dir.as_deref();
        let (cubin, lowered) = match disk.and_then(|dir| disk::read_cached(dir, &key)) {
            Some(found) => {
                cache.disk_hits.fetch_add(1, Ordering::Relaxed);
                found
            }
            None => {
                let built = nvrtc::nvrtc_compile(&src, &options, &exprs, &arch, program)?;
                cache.compiles.fetch_add(1, Ordering::Relaxed);
                if let Some(dir) = disk {
                    if let Err(e) = disk::write_cached(dir, &key, &built.0, &built.1) {
                        log::warn!("cusched: could not write the kernel cache in {}: {e}", dir.display());
                    }
                }
                built
            }
        };
        let layouts = cubin::param_layouts(&cubin);
        let loaded = cuda::module::load_cubin(&ctx, cubin)?;
        let module = Arc::new(LoadedModule::new(loaded, ctx.clone(), &self.shared, epoch, layouts));
        let lowered = Arc::new(lowered);
        let entry = CachedModule { module: module.clone(), generation, lowered: lowered.clone() };
        let replaced = {
            let mut modules = crate::sync::lock(&cache.modules);
            // Entries of earlier generations can never be hit again.
            let stale: Vec<String> =
                modules.iter().filter(|(_, m)| m.generation != generation).map(|(k, _)| k.clone()).collect();
            let mut replaced: Vec<CachedModule> = stale.iter().filter_map(|k| modules.remove(k)).collect();
            replaced.extend(modules.insert(key, entry));
            replaced
        };
        // Outside the lock: a last handle's drop records events on every stream.
        drop(replaced);
        Ok(Module::new(module, lowered, self.shared.clone(), generation))
    }

    /// Counters of the module caches.
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        let c = self.shared.libs.get::<ModuleCache>();
        KernelCacheStats {
            memory_hits: c.memory_hits.load(Ordering::Relaxed),
            disk_hits: c.disk_hits.load(Ordering::Relaxed),
            compiles: c.compiles.load(Ordering::Relaxed),
        }
    }
}

/// Compiles CUDA C++ `src` to LTO-IR (`-dlto`) for compute capability `(major, minor)`: the
/// form a library links run-time-compiled device functions from (cuFFT's LTO callbacks). Not
/// cached here: the caller keeps what it links (a cuFFT plan is cached with its callbacks).
#[cfg_attr(not(feature = "cufft"), allow(dead_code))]
pub(crate) fn compile_lto_ir(src: &str, (major, minor): (u32, u32)) -> Result<Vec<u8>> {
    if !nvrtc::is_present() {
        return Err(Error::LibraryUnavailable { library: LIBRARY, hint: "install the CUDA toolkit's NVRTC library" });
    }
    let src = cstring("source", src)?;
    nvrtc::nvrtc_compile_lto(&src, &format!("-arch=sm_{major}{minor}"))
}

fn cache_key(p: &Program, arch: &str, version: (i32, i32)) -> String {
    let mut k = format!("{}\0nvrtc {}.{}\0{arch}\0", disk::DISK_FORMAT, version.0, version.1);
    for o in &p.options {
        k.push_str(o);
        k.push('\0');
    }
    k.push('\u{1}');
    for e in &p.name_expressions {
        k.push_str(e);
        k.push('\0');
    }
    k.push('\u{1}');
    k.push_str(&p.source);
    k
}
