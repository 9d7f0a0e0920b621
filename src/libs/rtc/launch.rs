//! [`KernelLaunch`]: a typed launch of a [`Kernel`], whose recorder is built from the declared
//! reads and writes.

use super::options;
pub use super::options::LaunchOptions;
use super::Kernel;
use crate::backend::cuda;
use crate::completion::Completion;
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::libs::OpStream;
use crate::memory::{Element, GpuRef};
use crate::recorder::{LaunchRecorder, LaunchScope};
use crate::trace::{OpLabel, OpName};
use crate::track::Access;
use cudarc::driver::LaunchConfig;
use smallvec::SmallVec;
use std::ffi::c_void;

impl Kernel {
    /// Starts a typed launch on `stream` of `device`: declare each parameter in order with
    /// [`KernelLaunch::read`], [`write`](KernelLaunch::write),
    /// [`read_write`](KernelLaunch::read_write) or [`scalar`](KernelLaunch::scalar), then
    /// [`enqueue`](KernelLaunch::enqueue), which is `unsafe`: the caller vouches for what the
    /// device code does. The recorder is built from the declarations.
    pub fn launch<'k>(&'k self, device: &'k Device, stream: StreamId, config: LaunchConfig) -> KernelLaunch<'k> {
        KernelLaunch {
            kernel: self,
            device,
            config,
            rec: LaunchRecorder::new_strict(stream)
                .labelled(OpLabel { library: "kernel", op: OpName::Shared(self.name.clone()) }),
            args: SmallVec::new(),
            options: LaunchOptions::default(),
            error: None,
        }
    }
}

/// CUDA C++ declarations of the two instructions of programmatic dependent launch (sm_90), to
/// put at the top of an NVRTC source: `cusched_wait_for_predecessor()` (`griddepcontrol.wait`:
/// returns once the kernel before this one on the stream has finished and its writes are
/// visible; a kernel launched with
/// [`KernelLaunch::programmatic_dependent`] calls it before touching memory) and
/// `cusched_release_dependents()` (`griddepcontrol.launch_dependents`: lets the next kernel, if
/// launched that way, start now).
///
/// Before sm_90 both are no-ops (and such a device refuses programmatic launches).
pub const PDL_DEVICE_FUNCTIONS: &str = r#"
__device__ __forceinline__ void cusched_wait_for_predecessor() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void cusched_release_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
"#;

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
    /// Borrowed, not cloned: the launch path takes no reference count of its own.
    device: &'k Device,
    config: LaunchConfig,
    rec: LaunchRecorder,
    /// Each parameter's bytes, size, and what was declared (for the size mismatch error).
    args: SmallVec<[(ArgSlot, usize, Declared); 8]>,
    options: LaunchOptions,
    /// The first declaration error, returned by `enqueue`; boxed, because the builder moves the
    /// whole launch through every declaration.
    error: Option<Box<Error>>,
}

/// What a parameter was declared as, named only when its size is wrong (a function, so that
/// an argument takes one word for it).
type Declared = fn() -> &'static str;

fn a_device_pointer() -> &'static str {
    "a device pointer"
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
            Ok(ptr) => self.push(&ptr, a_device_pointer),
            Err(e) => self.error = Some(Box::new(e)),
        }
        self
    }

    fn push<T: Copy>(&mut self, v: &T, what: Declared) {
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

    /// Declares that the kernel reads `buf` without taking it as a parameter: a module global
    /// ([`Module::global`](super::Module::global)) it names in its code. Adds no parameter.
    pub fn reads_global<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.touches(buf, Access::Read)
    }

    /// Declares that the kernel writes `buf` without taking it as a parameter, as
    /// [`reads_global`](Self::reads_global).
    pub fn writes_global<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.touches(buf, Access::Write)
    }

    /// Declares that the kernel reads and writes `buf` without taking it as a parameter, as
    /// [`reads_global`](Self::reads_global).
    pub fn read_writes_global<T: Element>(self, buf: &GpuRef<T>) -> Self {
        self.touches(buf, Access::ReadWrite)
    }

    fn touches<T: Element>(mut self, buf: &GpuRef<T>, access: Access) -> Self {
        if self.error.is_none() {
            if let Err(e) = self.rec.access(buf, access) {
                self.error = Some(Box::new(e));
            }
        }
        self
    }

    /// The next parameter is the value `v`.
    pub fn scalar<T: Element>(mut self, v: T) -> Self {
        if self.error.is_none() {
            self.push(&v, std::any::type_name::<T>);
        }
        self
    }

    /// Launches cooperatively (`cuLaunchKernelEx` with the cooperative attribute): every block
    /// is resident at once, so the grid may synchronize (`cooperative_groups::this_grid().sync()`).
    /// [`enqueue`](Self::enqueue) refuses a grid larger than the device holds at once (the
    /// occupancy calculator's blocks per multiprocessor times the multiprocessors) with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `config.grid_dim`.
    pub fn cooperative(mut self) -> Self {
        self.options.cooperative = true;
        self
    }

    /// Launches in thread-block clusters of `dims` blocks (sm_90): the blocks of a cluster run
    /// on one GPC at once and can reach each other's shared memory. The grid must be a whole
    /// number of clusters; more than 8 blocks per cluster (up to 16) sets the function's
    /// non-portable cluster attribute; a cluster that cannot fit (too many blocks, too much
    /// shared memory) is refused before recording, naming `cluster`.
    pub fn cluster(mut self, dims: (u32, u32, u32)) -> Self {
        self.options.cluster = Some(dims);
        self
    }

    /// Programmatic dependent launch (sm_90): the kernel may start while the kernel before it
    /// on the stream is still running (once that one has run
    /// `griddepcontrol.launch_dependents`, or as its blocks finish), so its prologue overlaps
    /// the predecessor's tail. The ordering every other op relies on holds only if the kernel
    /// touches no memory (declared or not) before `griddepcontrol.wait`, which returns once
    /// the predecessor has finished and its writes are visible: [`enqueue`](Self::enqueue)'s
    /// safety contract then includes that. [`PDL_DEVICE_FUNCTIONS`] declares both
    /// instructions for NVRTC sources.
    pub fn programmatic_dependent(mut self) -> Self {
        self.options.programmatic = true;
        self
    }

    /// Validates the declarations against the kernel's parameters and the launch
    /// configuration, then preflights, launches and commits. Returns a completion for the
    /// launch. On a simulated device it fails with [`Error::LibraryUnavailable`] naming the
    /// simulator's form of a kernel: a host closure enqueued with
    /// [`LaunchScope::sim_kernel`](crate::LaunchScope::sim_kernel).
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
    ///    [`write`](Self::write) or [`read_write`](Self::read_write) (module globals: with the
    ///    `*_global` declarations), and stays inside their lengths under the launch
    ///    configuration given;
    /// 2. any other memory it touches (another device buffer, pinned host memory such as a
    ///    [`crate::HostBuffer`]'s, an address passed as a [`scalar`](Self::scalar)) stays
    ///    allocated while the kernel runs, and the kernel writes it only while no Rust reference
    ///    to it exists and no GPU work the tracker does not order uses it;
    /// 3. each declared parameter has the type the kernel expects (only byte sizes are checked:
    ///    a `u64` declared where the kernel takes a pointer is accepted), and every value the
    ///    kernel reads is valid for its type;
    /// 4. with [`programmatic_dependent`](Self::programmatic_dependent), it touches no memory
    ///    before `griddepcontrol.wait` (`cusched_wait_for_predecessor()` of
    ///    [`PDL_DEVICE_FUNCTIONS`]); with [`cooperative`](Self::cooperative), a grid-wide
    ///    synchronization is reached by every block or by none.
    pub unsafe fn enqueue(self) -> Result<Completion<()>> {
        let KernelLaunch { kernel, device, config, rec, mut args, options, error } = self;
        // First: on the simulator the declarations' device pointers fail too, and this error
        // names what to do instead.
        if device.is_simulated() {
            return Err(super::unavailable_on_sim());
        }
        if let Some(e) = error {
            return Err(*e);
        }
        kernel.check()?;
        if kernel.device.uid != device.shared.uid {
            return Err(Error::ForeignDevice {
                what: format!("kernel `{}`", kernel.name),
                expected: device.shared.label(),
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
                        "parameter {i} of `{}` is {want} bytes, but {} ({size} bytes) was declared",
                        kernel.name,
                        what()
                    ),
                ));
            }
        }
        options::prepare(kernel, &config, &options)?;
        let function = &kernel.function;
        let dims = cuda::launch::Dims {
            grid: config.grid_dim,
            block: config.block_dim,
            shared_mem_bytes: config.shared_mem_bytes,
        };
        let launched = OpStream::launch_cuda_on(device, super::LIBRARY, rec, move |stream| {
            let mut params: SmallVec<[*mut c_void; 8]> =
                args.iter_mut().map(|(slot, _, _)| slot.0.as_mut_ptr().cast()).collect();
            // SAFETY: 1. the function is live (`kernel` holds its module) and of this device and
            // generation (checked), whose context `run_scoped` bound with this stream; 2. each
            // parameter slot matches the size the driver reports for it (checked), and the
            // driver copies the slots before returning; 3. buffer parameters are live device
            // pointers whose declared uses the recorder fenced, and whose frees it fences after
            // the launch; 4. the config was validated; 5. what the device code does with its
            // parameters is the caller's contract (`enqueue`'s `# Safety`).
            unsafe {
                if options.any() {
                    cuda::launch_ex::launch_kernel_ex(
                        function.cu_function(),
                        dims,
                        stream.cu_stream(),
                        &mut params,
                        options.attrs(),
                    )
                } else {
                    cuda::launch::launch_kernel(function.cu_function(), dims, stream.cu_stream(), &mut params)
                }
            }
        })?;
        Ok(launched.complete(device, Vec::new()))
    }
}

impl Kernel {
    /// Validates a launch of this kernel on `device` with `config` and `options` for the raw
    /// path (a [`LaunchRecorder::launch`] closure that enqueues the kernel itself), with the
    /// typed path's checks: the configuration and options ([`LaunchOptions::check`]), then
    /// against the device and the function (dynamic shared memory above 48 KiB, raising the
    /// function's ceiling; the cooperative grid's residency; the cluster's fit; programmatic
    /// launch's sm_90). Call it before the recorder's launch, so that a refusal records
    /// nothing; enqueue the result inside the closure with [`RawLaunch::enqueue`].
    ///
    /// ```no_run
    /// use cusched::cudarc::driver::LaunchConfig;
    /// use cusched::{Device, LaunchOptions, LaunchRecorder};
    /// let device = Device::open(0)?;
    /// let s = device.default_stream();
    /// let module = device.compile(r#"extern "C" __global__ void k(float* x) { x[blockIdx.x] = 1.0f; }"#, &[])?;
    /// let k = module.kernel("k")?;
    /// let x = device.alloc_zeros::<f32>(s, 4)?;
    /// let config = LaunchConfig { grid_dim: (4, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    /// let launch = k.prepare_raw(&device, config, LaunchOptions::new().cluster((2, 1, 1)))?;
    /// let mut rec = LaunchRecorder::new_strict(s);
    /// rec.write(&x)?;
    /// rec.launch(&device, |scope| {
    ///     let mut ptr = x.raw_device_ptr()?;
    ///     let mut params = [(&mut ptr as *mut u64).cast()];
    ///     // SAFETY: 1. `k` writes `x` only, as declared, inside its 4 elements; 2. its one
    ///     // parameter is a float pointer, given as a device address.
    ///     unsafe { launch.enqueue(scope, &mut params) }
    /// })?;
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn prepare_raw(&self, device: &Device, config: LaunchConfig, options: LaunchOptions) -> Result<RawLaunch<'_>> {
        options.check(&config)?;
        if device.is_simulated() {
            return Err(super::unavailable_on_sim());
        }
        self.check()?;
        if self.device.uid != device.shared.uid {
            return Err(Error::ForeignDevice {
                what: format!("kernel `{}`", self.name),
                expected: device.shared.label(),
                found: self.device.label(),
            });
        }
        options::prepare(self, &config, &options)?;
        Ok(RawLaunch { kernel: self, config, options })
    }
}

/// A launch validated by [`Kernel::prepare_raw`], to enqueue inside a recorder's launch
/// closure with its options (`cuLaunchKernelEx` where any is set).
#[derive(Debug)]
pub struct RawLaunch<'k> {
    kernel: &'k Kernel,
    config: LaunchConfig,
    options: LaunchOptions,
}

impl RawLaunch<'_> {
    /// Enqueues the kernel on the launch's stream with `params` (one pointer to each
    /// parameter's value, as `cuLaunchKernel` takes them). A count of parameters other than
    /// the kernel's is refused naming `params`, before anything is enqueued.
    ///
    /// # Safety
    ///
    /// As for [`KernelLaunch::enqueue`], with the recorder's declarations standing for the
    /// typed ones: 1. the device code touches only the buffers the recorder declared, as
    /// declared, and inside their lengths, and any other memory as that contract's point 2
    /// says; 2. each pointer in `params` points to a value of the type and size of the
    /// kernel's parameter, valid for the call; 3. with programmatic dependent launch, the
    /// kernel touches no memory before `griddepcontrol.wait`, and a cooperative kernel's grid
    /// synchronization is reached by every block or by none.
    pub unsafe fn enqueue(&self, scope: &LaunchScope<'_>, params: &mut [*mut c_void]) -> Result<()> {
        let kernel = self.kernel;
        if params.len() != kernel.params.len() {
            return Err(Error::invalid(
                "params",
                format!(
                    "kernel `{}` takes {} parameters, {} were given",
                    kernel.name,
                    kernel.params.len(),
                    params.len()
                ),
            ));
        }
        kernel.check()?;
        if scope.stream().device != kernel.device.uid {
            return Err(Error::ForeignDevice {
                what: format!("kernel `{}`", kernel.name),
                expected: format!("the device of {}", scope.stream()),
                found: kernel.device.label(),
            });
        }
        let stream = scope.bound_cuda_stream()?;
        let dims = cuda::launch::Dims {
            grid: self.config.grid_dim,
            block: self.config.block_dim,
            shared_mem_bytes: self.config.shared_mem_bytes,
        };
        let f = kernel.function.cu_function();
        // SAFETY: 1. the function is live (`kernel` holds its module) and of the scope's device
        // and generation (checked), whose context `bound_cuda_stream` bound with this stream;
        // 2. the configuration and options were validated by `prepare_raw` against the device
        // and the function; 3. the parameters and what the device code does are the caller's
        // contract (points 1 to 3), and the launch's uses were fenced by the recorder.
        unsafe {
            if self.options.any() {
                cuda::launch_ex::launch_kernel_ex(f, dims, stream.cu_stream(), params, self.options.attrs())
            } else {
                cuda::launch::launch_kernel(f, dims, stream.cu_stream(), params)
            }
        }
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

/// Launches from a lane job or inline.
impl crate::libs::Handles {
    /// Starts a typed launch of `kernel` on this stream (see [`Kernel::launch`]).
    pub fn launch<'k>(&'k self, kernel: &'k Kernel, config: LaunchConfig) -> KernelLaunch<'k> {
        kernel.launch(self.device(), self.stream(), config)
    }
}
