//! Loaded modules and their kernels: [`Module`], [`Kernel`], and the module handle whose last
//! drop hands the module to the device's reaper.

use crate::backend::cuda;
use crate::device::DeviceShared;
use crate::error::{Error, Result};
use cudarc::driver::{CudaFunction, CudaModule};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The one owner of a loaded module's `Arc<CudaModule>` besides the [`CudaFunction`]s made
/// from it (each [`Kernel`] drops its function before its handle to this). Unloading blocks
/// (`cuModuleUnload` waits for the device) and needs the module's context bound, so the last
/// handle's drop hands the module to the device's reaper instead of unloading it in place.
pub(super) struct LoadedModule {
    /// `None` for a simulated module, which has no CUDA module (and after `Drop` took it).
    pub(super) module: Option<Arc<CudaModule>>,
    /// `None` for a simulated module.
    ctx: Option<Arc<cudarc::driver::CudaContext>>,
    /// Weak: the device's module cache holds these, and a strong reference would be a cycle.
    device: Weak<DeviceShared>,
    /// The context epoch the module was loaded in.
    pub(super) epoch: u64,
    /// The parameter layouts its image records, by symbol (see [`super::cubin`]).
    layouts: HashMap<String, cuda::module::ParamLayout>,
    /// Each function's dynamic shared memory ceiling as set so far, by symbol, shared by every
    /// [`Kernel`] looked up for it (see [`super::options`]).
    ceilings: std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<u32>>>>,
    /// The module's globals looked up so far, by name (see [`super::globals`]).
    pub(super) globals: super::globals::Globals,
}

impl LoadedModule {
    pub(super) fn new(
        module: Arc<CudaModule>,
        ctx: Arc<cudarc::driver::CudaContext>,
        device: &Arc<DeviceShared>,
        epoch: u64,
        layouts: HashMap<String, cuda::module::ParamLayout>,
    ) -> Self {
        LoadedModule {
            module: Some(module),
            ctx: Some(ctx),
            device: Arc::downgrade(device),
            epoch,
            layouts,
            ceilings: Default::default(),
            globals: Default::default(),
        }
    }

    /// A simulated module: no kernels (the simulator's are host closures), and globals that
    /// are simulated buffers made zeroed on first lookup.
    pub(super) fn simulated(device: &Arc<DeviceShared>) -> Self {
        LoadedModule {
            module: None,
            ctx: None,
            device: Arc::downgrade(device),
            epoch: device.epoch(),
            layouts: HashMap::new(),
            ceilings: Default::default(),
            globals: Default::default(),
        }
    }

    /// Whether this is a simulated module.
    pub(super) fn is_simulated(&self) -> bool {
        self.ctx.is_none()
    }

    /// The shared dynamic shared memory ceiling of `symbol`.
    fn ceiling(&self, symbol: &str) -> Arc<std::sync::Mutex<u32>> {
        crate::sync::lock_unranked(&self.ceilings).entry(symbol.to_string()).or_default().clone()
    }

    fn module(&self) -> Result<&Arc<CudaModule>> {
        // Only `Drop` takes the module out.
        self.module.as_ref().ok_or_else(|| Error::invalid("module", "the module has been unloaded"))
    }
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        const WHAT: &str = "an NVRTC module";
        let Some(module) = self.module.take() else { return };
        let Some(ctx) = self.ctx.clone() else { return };
        let Some(device) = self.device.upgrade() else {
            // The device itself is being dropped (its module cache with it), after its shutdown
            // closed the reaper: destroy here, as the reaper would now.
            cuda::captures::outside_captures(ctx.ordinal(), || cuda::drop_bound(&ctx, &WHAT, module));
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
        device.reaper.defer(crate::reaper::Retired { what: WHAT, after, ctx: Some(ctx), object: Box::new(module) });
    }
}

/// A module compiled for one device and generation: look its kernels up by name.
///
/// ```no_run
/// use cusched::Device;
/// let device = Device::open(0)?;
/// let module = device.compile(
///     r#"extern "C" __global__ void fill(float* x, float v, unsigned n) {
///         unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }"#,
///     &[],
/// )?;
/// let fill = module.kernel("fill")?;
/// assert_eq!(fill.name(), "fill");
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone)]
pub struct Module {
    pub(super) module: Arc<LoadedModule>,
    lowered: Arc<HashMap<String, String>>,
    pub(super) device: Arc<DeviceShared>,
    pub(super) generation: u64,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module(device {}, generation {})", self.device.label(), self.generation)
    }
}

/// A kernel function of a [`Module`]; stale after the device's generation advances. Launch it
/// with [`launch`](Self::launch), declaring what it reads and writes; hazards and traces name
/// it by its function name.
///
/// ```no_run
/// use cusched::cudarc::driver::LaunchConfig;
/// use cusched::Device;
/// let device = Device::open(0)?;
/// let s = device.default_stream();
/// let module = device.compile(
///     r#"extern "C" __global__ void scale(float* x, float a, unsigned n) {
///         unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }"#,
///     &[],
/// )?;
/// let scale = module.kernel("scale")?;
/// let x = device.upload(s, &[1.0f32, 2.0, 3.0])?;
/// let launch = scale.launch(&device, s, LaunchConfig::for_num_elems(3)).read_write(&x).scalar(2.0f32).scalar(3u32);
/// // SAFETY: 1. `scale` reads and writes `x` only, as declared; 2. with n = 3 it touches
/// // elements 0..3 of a buffer of 3; 3. its parameters are a float pointer, a float and an
/// // unsigned, as declared.
/// unsafe { launch.enqueue() }?.wait()?;
/// assert_eq!(x.download(s)?, vec![2.0, 4.0, 6.0]);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone)]
pub struct Kernel {
    /// Declared before `_module`: fields drop in order, so the function's `Arc<CudaModule>` is
    /// gone before the handle whose drop hands the module to the reaper.
    pub(super) function: CudaFunction,
    pub(super) name: Arc<str>,
    pub(super) params: Arc<[usize]>,
    pub(super) device: Arc<DeviceShared>,
    pub(super) generation: u64,
    /// The function's dynamic shared memory ceiling as set so far (48 KiB until raised).
    pub(super) dynamic_smem: Arc<std::sync::Mutex<u32>>,
    /// Held only for its drop.
    _module: Arc<LoadedModule>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({}, generation {})", self.name, self.generation)
    }
}

impl Module {
    pub(super) fn new(
        module: Arc<LoadedModule>,
        lowered: Arc<HashMap<String, String>>,
        device: Arc<DeviceShared>,
        generation: u64,
    ) -> Self {
        Module { module, lowered, device, generation }
    }

    /// Looks up a kernel: a name expression given to the [`Program`](super::Program) (`"scale<float>"`), or an
    /// `extern "C"` name.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        self.check()?;
        if self.module.is_simulated() {
            return Err(super::unavailable_on_sim());
        }
        let symbol = self.lowered.get(name).map(String::as_str).unwrap_or(name);
        let Some(function) = cuda::module::load_function(self.module.module()?, symbol)? else {
            return Err(Error::invalid(
                "name",
                format!("no kernel `{name}` in the module (declare it extern \"C\", or add it as a name expression)"),
            ));
        };
        let params = cuda::module::param_sizes(&function, self.module.layouts.get(symbol))?.into();
        Ok(Kernel {
            function,
            name: Arc::from(name),
            params,
            device: self.device.clone(),
            generation: self.generation,
            dynamic_smem: self.module.ceiling(symbol),
            _module: self.module.clone(),
        })
    }

    pub(super) fn check(&self) -> Result<()> {
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
    /// Launch it only on streams of this device (see [`Device::cuda_stream`](crate::Device::cuda_stream)): the module is
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

    pub(super) fn check(&self) -> Result<()> {
        let current = self.device.generation();
        if current != self.generation {
            return Err(Error::Stale { what: format!("kernel `{}`", self.name), made: self.generation, current });
        }
        Ok(())
    }
}
