//! NVRTC: compile CUDA C++ at run time to a CUBIN for the device's own architecture (`sm_90`
//! on an H100), with a per-device module cache keyed on source, options, name expressions and
//! architecture, an optional on-disk cache ([`crate::DeviceConfig::kernel_cache_dir`]), lowered
//! names for templated kernels, and a typed launch API that builds the recorder from the
//! declared reads and writes.

use crate::backend::cuda;
use crate::completion::Completion;
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::libs::OpStream;
use crate::memory::{Element, GpuRef};
use crate::recorder::LaunchRecorder;
use crate::trace::{OpLabel, OpName};
use crate::track::Access;
use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig};
use cudarc::nvrtc::sys;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

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

/// The one owner of a loaded module's `Arc<CudaModule>` besides the [`CudaFunction`]s made
/// from it (each [`Kernel`] drops its function before its handle to this). Unloading blocks
/// (`cuModuleUnload` waits for the device) and needs the module's context bound, so the last
/// handle's drop hands the module to the device's reaper instead of unloading it in place.
struct LoadedModule {
    module: Option<Arc<CudaModule>>,
    ctx: Arc<cudarc::driver::CudaContext>,
    /// Weak: the device's module cache holds these, and a strong reference would be a cycle.
    device: Weak<DeviceShared>,
    /// The context epoch the module was loaded in.
    epoch: u64,
}

impl LoadedModule {
    fn module(&self) -> Result<&Arc<CudaModule>> {
        // Only `Drop` takes the module out.
        self.module.as_ref().ok_or_else(|| Error::invalid("module", "the module has been unloaded"))
    }
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        const WHAT: &str = "an NVRTC module";
        let Some(module) = self.module.take() else { return };
        let Some(device) = self.device.upgrade() else {
            // The device itself is being dropped (its module cache with it), after its shutdown
            // closed the reaper: destroy here, as the reaper would now.
            cuda::drop_bound(&self.ctx, &WHAT, module);
            return;
        };
        if device.epoch() != self.epoch {
            // Loaded in a context since replaced: unloading could only fail.
            std::mem::forget(module);
            return;
        }
        // A module is used from any stream of the device, and not only through `enqueue`:
        // `Kernel::function` hands the raw function out for cudarc launches the tracker never
        // sees. So the unload waits for everything enqueued so far on every stream of the
        // device. Modules are unloaded rarely (the cache holds them), so an event per stream
        // costs little, and waiting also for unrelated work only delays the unload.
        let mut after = Vec::new();
        for slot in device.slots() {
            match device.record(slot.id) {
                Ok(ev) => after.push(ev),
                Err(e) => {
                    log::error!("cusched: {WHAT} is abandoned, not unloaded: {} failed ({e})", slot.id);
                    std::mem::forget(module);
                    return;
                }
            }
        }
        device.reaper.defer(crate::reaper::Retired {
            what: WHAT,
            after,
            ctx: Some(self.ctx.clone()),
            object: Box::new(module),
        });
    }
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

/// A module compiled for one device and generation.
#[derive(Clone)]
pub struct Module {
    module: Arc<LoadedModule>,
    lowered: Arc<HashMap<String, String>>,
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
    /// Declared before `_module`: fields drop in order, so the function's `Arc<CudaModule>` is
    /// gone before the handle whose drop hands the module to the reaper.
    function: CudaFunction,
    name: Arc<str>,
    params: Arc<[usize]>,
    device: Arc<DeviceShared>,
    generation: u64,
    /// Held only for its drop.
    _module: Arc<LoadedModule>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({}, generation {})", self.name, self.generation)
    }
}

/// Bumped whenever the on-disk format or the key's contents change.
const DISK_FORMAT: &str = "cusched-kernel-cache-v1";

fn nvrtc_status(call: &'static str, r: sys::nvrtcResult) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::library(call, r))
    }
}

fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers.
    nvrtc_status("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// FNV-1a, 64-bit: a stable hash for cache file names (the full key is stored in the file and
/// compared, so a collision only costs a recompile).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
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
            return Err(Error::WrongBackend { what: "Device::compile", needed: "cuda", actual: "sim" });
        };
        // SAFETY: only tries to dlopen NVRTC by name; cudarc panics if it is missing later.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::LibraryUnavailable {
                library: "NVRTC (libnvrtc)",
                hint: "install the CUDA toolkit's NVRTC library",
            });
        }
        let src = cstring("source", &program.source)?;
        let options = program.options.iter().map(|o| cstring("options", o)).collect::<Result<Vec<_>>>()?;
        let exprs =
            program.name_expressions.iter().map(|e| cstring("name_expressions", e)).collect::<Result<Vec<_>>>()?;
        let (major, minor) = cuda::arch(&ctx)?;
        let arch = format!("-arch=sm_{major}{minor}");
        let (vmaj, vmin) = nvrtc_version()?;
        let key = cache_key(program, &arch, (vmaj, vmin));
        let cache = &self.shared.kernels;
        let generation = self.shared.generation();
        if let Some(hit) = crate::sync::lock(&cache.modules).get(&key) {
            if hit.generation == generation {
                cache.memory_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Module {
                    module: hit.module.clone(),
                    lowered: hit.lowered.clone(),
                    device: self.shared.clone(),
                    generation,
                });
            }
        }
        let disk = self.shared.config.kernel_cache_dir.as_deref();
        let (cubin, lowered) = match disk.and_then(|dir| read_cached(dir, &key)) {
            Some(found) => {
                cache.disk_hits.fetch_add(1, Ordering::Relaxed);
                found
            }
            None => {
                let built = nvrtc_compile(&src, &options, &exprs, &arch, program)?;
                cache.compiles.fetch_add(1, Ordering::Relaxed);
                if let Some(dir) = disk {
                    if let Err(e) = write_cached(dir, &key, &built.0, &built.1) {
                        log::warn!("cusched: could not write the kernel cache in {}: {e}", dir.display());
                    }
                }
                built
            }
        };
        let loaded = cuda::module::load_cubin(&ctx, cubin)?;
        let module = Arc::new(LoadedModule {
            module: Some(loaded),
            ctx: ctx.clone(),
            device: Arc::downgrade(&self.shared),
            epoch,
        });
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
        Ok(Module { module, lowered, device: self.shared.clone(), generation })
    }

    /// Counters of the module caches.
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        let c = &self.shared.kernels;
        KernelCacheStats {
            memory_hits: c.memory_hits.load(Ordering::Relaxed),
            disk_hits: c.disk_hits.load(Ordering::Relaxed),
            compiles: c.compiles.load(Ordering::Relaxed),
        }
    }
}

fn cache_key(p: &Program, arch: &str, version: (i32, i32)) -> String {
    let mut k = format!("{DISK_FORMAT}\0nvrtc {}.{}\0{arch}\0", version.0, version.1);
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

/// Runs NVRTC; returns the CUBIN and the lowered name of every name expression.
fn nvrtc_compile(
    src: &CStr,
    options: &[CString],
    exprs: &[CString],
    arch: &str,
    program: &Program,
) -> Result<(Vec<u8>, HashMap<String, String>)> {
    let prog =
        cudarc::nvrtc::result::create_program(src, None).map_err(|e| Error::library("nvrtcCreateProgram", e.0))?;
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { cudarc::nvrtc::result::destroy_program(self.0) };
        }
    }
    let guard = Guard(prog);
    for e in exprs {
        // SAFETY: live program; NUL-terminated expression.
        nvrtc_status("nvrtcAddNameExpression", unsafe { sys::nvrtcAddNameExpression(guard.0, e.as_ptr()) })?;
    }
    let arch_c = cstring("arch", arch)?;
    let mut opts: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    opts.push(arch_c.as_ptr());
    // SAFETY: live program; `opts` holds NUL-terminated strings that outlive the call.
    let r = unsafe { sys::nvrtcCompileProgram(guard.0, opts.len() as i32, opts.as_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        // SAFETY: live program.
        let log = unsafe { cudarc::nvrtc::result::get_program_log(guard.0) }
            .map(|l| {
                let bytes: Vec<u8> = l.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_else(|e| format!("(the log could not be read: {e:?})"));
        return Err(Error::CompileFailed { status: format!("{r:?}"), log });
    }
    let mut size = 0usize;
    // SAFETY: live, compiled program; valid out-pointer.
    nvrtc_status("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(guard.0, &mut size) })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported.
    nvrtc_status("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(guard.0, cubin.as_mut_ptr().cast()) })?;
    let mut lowered = HashMap::new();
    for (e, name) in exprs.iter().zip(&program.name_expressions) {
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: live, compiled program; `e` was added before compiling; the returned string
        // lives until the program is destroyed, and is copied before that.
        nvrtc_status("nvrtcGetLoweredName", unsafe { sys::nvrtcGetLoweredName(guard.0, e.as_ptr(), &mut out) })?;
        if out.is_null() {
            return Err(Error::invalid("name_expressions", format!("NVRTC did not lower {name:?}")));
        }
        // SAFETY: non-null, NUL-terminated, alive until `guard` drops below.
        let s = unsafe { CStr::from_ptr(out) }.to_string_lossy().into_owned();
        lowered.insert(name.clone(), s);
    }
    drop(guard);
    Ok((cubin, lowered))
}

fn cache_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{:016x}.cubin", fnv1a(key.as_bytes())))
}

/// File layout: the key (length-prefixed, u64 LE), the lowered-name count (u64 LE), each name
/// pair as two length-prefixed strings, then the CUBIN.
fn read_cached(dir: &Path, key: &str) -> Option<(Vec<u8>, HashMap<String, String>)> {
    let bytes = std::fs::read(cache_path(dir, key)).ok()?;
    let mut r = Cursor { bytes: &bytes, at: 0 };
    if r.chunk()? != key.as_bytes() {
        return None;
    }
    let count = r.len()?;
    let mut lowered = HashMap::new();
    for _ in 0..count {
        let name = String::from_utf8(r.chunk()?.to_vec()).ok()?;
        let low = String::from_utf8(r.chunk()?.to_vec()).ok()?;
        lowered.insert(name, low);
    }
    Some((bytes.get(r.at..)?.to_vec(), lowered))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(u64::from_le_bytes(self.take(8)?.try_into().ok()?)).ok()
    }

    fn chunk(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
}

/// Writes the entry to a temporary file in `dir` and renames it into place, so a reader never
/// sees a partial file and concurrent writers of one key leave one whole copy.
fn write_cached(dir: &Path, key: &str, cubin: &[u8], lowered: &HashMap<String, String>) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::with_capacity(key.len() + cubin.len() + 64);
    let put = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    put(&mut out, key.as_bytes());
    let mut names: Vec<_> = lowered.iter().collect();
    names.sort();
    out.extend_from_slice(&(names.len() as u64).to_le_bytes());
    for (name, low) in names {
        put(&mut out, name.as_bytes());
        put(&mut out, low.as_bytes());
    }
    out.extend_from_slice(cubin);
    let final_path = cache_path(dir, key);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        final_path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, &out)?;
    std::fs::rename(&tmp, &final_path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

impl Module {
    /// Looks up a kernel: a name expression given to the [`Program`] (`"scale<float>"`), or an
    /// `extern "C"` name.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        self.check()?;
        let symbol = self.lowered.get(name).map(String::as_str).unwrap_or(name);
        let Some(function) = cuda::module::load_function(self.module.module()?, symbol)? else {
            return Err(Error::invalid(
                "name",
                format!("no kernel `{name}` in the module (declare it extern \"C\", or add it as a name expression)"),
            ));
        };
        let params = cuda::module::param_sizes(&function)?.into();
        Ok(Kernel {
            function,
            name: Arc::from(name),
            params,
            device: self.device.clone(),
            generation: self.generation,
            _module: self.module.clone(),
        })
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
    ///
    /// Launch it only on streams of this device (see [`Device::cuda_stream`]): the module is
    /// unloaded once the last [`Kernel`] and [`Module`] made from it are gone and the device's
    /// streams have finished the work enqueued by then, and a clone of the function kept past
    /// that point unloads the module where it drops, blocking that thread.
    pub fn function(&self) -> Result<&CudaFunction> {
        self.check()?;
        Ok(&self.function)
    }

    /// The kernel's name as looked up.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The byte size of each parameter, as the driver reports them.
    pub fn param_sizes(&self) -> &[usize] {
        &self.params
    }

    fn check(&self) -> Result<()> {
        let current = self.device.generation();
        if current != self.generation {
            return Err(Error::Stale { what: format!("kernel `{}`", self.name), made: self.generation, current });
        }
        Ok(())
    }

    /// Starts a typed launch on `stream` of `device`: declare each parameter in order with
    /// [`KernelLaunch::read`], [`write`](KernelLaunch::write),
    /// [`read_write`](KernelLaunch::read_write) or [`scalar`](KernelLaunch::scalar), then
    /// [`enqueue`](KernelLaunch::enqueue), which is `unsafe`: the caller vouches for what the
    /// device code does. The recorder is built from the declarations.
    pub fn launch(&self, device: &Device, stream: StreamId, config: LaunchConfig) -> KernelLaunch<'_> {
        KernelLaunch {
            kernel: self,
            op: OpStream::new(device, stream, "NVRTC (libnvrtc)"),
            config,
            rec: LaunchRecorder::new_strict(stream)
                .labelled(OpLabel { library: "kernel", op: OpName::Shared(self.name.clone()) }),
            args: SmallVec::new(),
            error: None,
        }
    }
}

/// One parameter's bytes (large enough for every [`Element`], pointers included).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct ArgSlot([u8; 16]);

/// A kernel launch being declared. Errors are remembered and returned by `enqueue`, so the
/// declarations chain. Launching is `unsafe` (see [`enqueue`](Self::enqueue)): device code can
/// touch any memory the GPU can reach, pinned host memory included.
///
/// ```no_run
/// # use cusched::{Device, cudarc::driver::LaunchConfig};
/// # let device = Device::open(0)?; let s = device.new_stream()?;
/// # let module = device.compile(r#"extern "C" __global__ void add(const float* a, const float* b, float* c, unsigned n) {
/// #   unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }"#, &[])?;
/// # let (a, b, c) = (device.alloc_zeros::<f32>(s, 4)?, device.alloc_zeros::<f32>(s, 4)?, device.alloc_zeros::<f32>(s, 4)?);
/// let add = module.kernel("add")?;
/// let launch = add.launch(&device, s, LaunchConfig::for_num_elems(4)).read(&a).read(&b).write(&c).scalar(4u32);
/// // SAFETY: 1. `add` reads `a` and `b` and writes `c`, as declared; 2. with n = 4 it touches
/// // elements 0..4 of buffers of 4 elements; 3. the parameters are three float pointers and
/// // an unsigned, as declared.
/// unsafe { launch.enqueue() }?.wait()?;
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct KernelLaunch<'k> {
    kernel: &'k Kernel,
    op: OpStream,
    config: LaunchConfig,
    rec: LaunchRecorder,
    args: SmallVec<[(ArgSlot, usize, &'static str); 8]>,
    error: Option<Error>,
}

impl std::fmt::Debug for KernelLaunch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelLaunch({}, {} args)", self.kernel.name, self.args.len())
    }
}

impl KernelLaunch<'_> {
    fn buffer<T: Element>(mut self, buf: &GpuRef<T>, access: Access) -> Self {
        if self.error.is_some() {
            return self;
        }
        let index = self.args.len();
        let declared = self
            .rec
            .access(buf, access)
            .map(drop)
            .and_then(|()| buf.raw_device_ptr())
            .map_err(|e| name_parameter(e, index));
        match declared {
            Ok(ptr) => self.push(&ptr, "a device pointer"),
            Err(e) => self.error = Some(e),
        }
        self
    }

    fn push<T: Copy>(&mut self, v: &T, what: &'static str) {
        let mut slot = ArgSlot([0; 16]);
        let n = std::mem::size_of::<T>();
        // SAFETY: `T` is at most 16 bytes (every Element and u64 are), so the copy stays inside
        // `slot`; source and destination do not overlap.
        unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), slot.0.as_mut_ptr(), n.min(16)) };
        self.args.push((slot, n, what));
    }

    /// The next parameter is a pointer to `buf`, which the kernel only reads.
    pub fn read<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.buffer(buf, Access::Read)
    }

    /// The next parameter is a pointer to `buf`, which the kernel only writes.
    pub fn write<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.buffer(buf, Access::Write)
    }

    /// The next parameter is a pointer to `buf`, which the kernel reads and writes.
    pub fn read_write<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.buffer(buf, Access::ReadWrite)
    }

    /// The next parameter is the value `v`.
    pub fn scalar<T: Element>(mut self, v: T) -> Self {
        if self.error.is_none() {
            self.push(&v, std::any::type_name::<T>());
        }
        self
    }

    /// Validates the declarations against the kernel's parameters and the launch
    /// configuration, then preflights, launches and commits. Returns a completion for the
    /// launch.
    ///
    /// Running user device code is unsafe: the checks cover the parameters' byte sizes and the
    /// declared buffers' devices and generations, not what the kernel does with them.
    ///
    /// ```compile_fail,E0133
    /// # use cusched::{cudarc::driver::LaunchConfig, Device, GpuRef, Kernel};
    /// # fn f(device: &Device, kernel: &Kernel, x: &GpuRef<f32>) -> cusched::Result<()> {
    /// let cfg = LaunchConfig::for_num_elems(4);
    /// kernel.launch(device, device.default_stream(), cfg).write(x).enqueue()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Safety
    ///
    /// The device code must keep to what was declared. For the launch's whole run:
    ///
    /// 1. it reads only buffers declared with [`read`](Self::read) or
    ///    [`read_write`](Self::read_write), writes only buffers declared with
    ///    [`write`](Self::write) or [`read_write`](Self::read_write), and stays inside their
    ///    lengths under the launch configuration given;
    /// 2. any other memory it touches (another device buffer, pinned host memory such as a
    ///    [`crate::HostBuffer`]'s, an address passed as a [`scalar`](Self::scalar)) stays
    ///    allocated while the kernel runs, and the kernel writes it only while no Rust reference
    ///    to it exists and no GPU work the tracker does not order uses it;
    /// 3. each declared parameter has the type the kernel expects (only byte sizes are checked:
    ///    a `u64` declared where the kernel takes a pointer is accepted), and every value the
    ///    kernel reads is valid for its type.
    pub unsafe fn enqueue(self) -> Result<Completion<()>> {
        let KernelLaunch { kernel, op, config, rec, mut args, error } = self;
        if let Some(e) = error {
            return Err(e);
        }
        kernel.check()?;
        if kernel.device.uid != op.device.shared.uid {
            return Err(Error::ForeignDevice {
                what: format!("kernel `{}`", kernel.name),
                expected: op.device.shared.label(),
                found: kernel.device.label(),
            });
        }
        if args.len() != kernel.params.len() {
            return Err(Error::invalid(
                "args",
                format!(
                    "kernel `{}` takes {} parameters, {} were declared",
                    kernel.name,
                    kernel.params.len(),
                    args.len()
                ),
            ));
        }
        for (i, ((_, size, what), want)) in args.iter().zip(kernel.params.iter()).enumerate() {
            if size != want {
                return Err(Error::invalid(
                    "args",
                    format!(
                        "parameter {i} of `{}` is {want} bytes, but {what} ({size} bytes) was declared",
                        kernel.name
                    ),
                ));
            }
        }
        check_config(&config)?;
        let function = &kernel.function;
        let dims = cuda::launch::Dims {
            grid: config.grid_dim,
            block: config.block_dim,
            shared_mem_bytes: config.shared_mem_bytes,
        };
        op.run_scoped(rec, move |stream| {
            let mut params: SmallVec<[*mut c_void; 8]> =
                args.iter_mut().map(|(slot, _, _)| slot.0.as_mut_ptr().cast()).collect();
            // SAFETY: 1. the function is live (`kernel` holds its module) and of this device and
            // generation (checked), whose context `run_scoped` bound with this stream; 2. each
            // parameter slot matches the size the driver reports for it (checked), and the
            // driver copies the slots before returning; 3. buffer parameters are live device
            // pointers whose declared uses the recorder fenced, and whose frees it fences after
            // the launch; 4. the config was validated; 5. what the device code does with its
            // parameters is the caller's contract (`enqueue`'s `# Safety`).
            unsafe { cuda::launch::launch_kernel(function.cu_function(), dims, stream.cu_stream(), &mut params) }
        })
    }
}

/// Names the parameter in a rejected buffer's error, keeping the variant (a foreign or stale
/// buffer is not an argument of the wrong shape, and callers match on the difference).
fn name_parameter(e: Error, index: usize) -> Error {
    match e {
        Error::ForeignDevice { what, expected, found } => {
            Error::ForeignDevice { what: format!("parameter {index} ({what})"), expected, found }
        }
        Error::Stale { what, made, current } => {
            Error::Stale { what: format!("parameter {index} ({what})"), made, current }
        }
        other => other,
    }
}

fn check_config(c: &LaunchConfig) -> Result<()> {
    let (gx, gy, gz) = c.grid_dim;
    let (bx, by, bz) = c.block_dim;
    if gx == 0 || gy == 0 || gz == 0 {
        return Err(Error::invalid("config.grid_dim", format!("{:?} has a zero dimension", c.grid_dim)));
    }
    if gx > i32::MAX as u32 || gy > 65_535 || gz > 65_535 {
        return Err(Error::invalid("config.grid_dim", format!("{:?} exceeds (2^31-1, 65535, 65535)", c.grid_dim)));
    }
    let threads = bx as u64 * by as u64 * bz as u64;
    if threads == 0 || threads > 1024 || bz > 64 {
        return Err(Error::invalid("config.block_dim", format!("{:?}: 1 to 1024 threads, z at most 64", c.block_dim)));
    }
    Ok(())
}

/// Launches from a lane job or inline.
impl crate::lane::Handles {
    /// Starts a typed launch of `kernel` on this stream (see [`Kernel::launch`]).
    pub fn launch<'k>(&self, kernel: &'k Kernel, config: LaunchConfig) -> KernelLaunch<'k> {
        kernel.launch(self.device(), self.stream(), config)
    }
}
