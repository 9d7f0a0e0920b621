//! Hopper launch features for a [`Kernel`]: dynamic shared memory above the default 48 KiB,
//! cooperative launches, thread-block clusters and programmatic dependent launch, each
//! checked against what the device and the function allow before anything is recorded; and
//! the occupancy queries behind those checks, for users sizing their own grids.

use super::Kernel;
use crate::backend::cuda::launch::{CuFunction, Dims};
use crate::backend::cuda::launch_ex::{self as raw, Attrs};
use crate::backend::BackendCtx;
use crate::error::{Error, Result};
use cudarc::driver::sys::{CUdevice_attribute as DevAttr, CUfunction_attribute as FnAttr};
use cudarc::driver::{CudaContext, LaunchConfig};
use std::sync::Arc;

/// Dynamic shared memory a block gets without opting in (`cuFuncSetAttribute`).
const DEFAULT_DYNAMIC_SMEM: u32 = 48 << 10;

/// Blocks in a cluster that every GPU with clusters supports; more (up to 16 on an H100) needs
/// the function's non-portable attribute, which the launch sets.
const PORTABLE_CLUSTER: u32 = 8;

/// The most blocks a cluster can have on sm_90 (non-portable).
const MAX_CLUSTER: u32 = 16;

/// How a kernel is launched beyond its grid, block and dynamic shared memory: cooperatively,
/// in thread-block clusters, or as a programmatic dependent launch. The typed path sets them
/// through [`KernelLaunch`](super::KernelLaunch)'s `cooperative`, `cluster` and
/// `programmatic_dependent`; the raw path hands them to [`Kernel::prepare_raw`], which checks
/// them as the typed path does.
///
/// ```
/// use cusched::cudarc::driver::LaunchConfig;
/// use cusched::LaunchOptions;
/// let config = LaunchConfig { grid_dim: (6, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
/// assert!(LaunchOptions::new().cluster((2, 1, 1)).check(&config).is_ok());
/// assert!(LaunchOptions::new().cluster((4, 1, 1)).check(&config).is_err()); // 6 is not a whole number of 4s
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    pub(super) cooperative: bool,
    pub(super) cluster: Option<(u32, u32, u32)>,
    pub(super) programmatic: bool,
}

impl LaunchOptions {
    /// No options: a plain launch.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cooperative launch (see [`KernelLaunch::cooperative`](super::KernelLaunch::cooperative)).
    pub fn cooperative(mut self) -> Self {
        self.cooperative = true;
        self
    }

    /// Thread-block clusters of `dims` blocks (see
    /// [`KernelLaunch::cluster`](super::KernelLaunch::cluster)).
    pub fn cluster(mut self, dims: (u32, u32, u32)) -> Self {
        self.cluster = Some(dims);
        self
    }

    /// Programmatic dependent launch (see
    /// [`KernelLaunch::programmatic_dependent`](super::KernelLaunch::programmatic_dependent)).
    pub fn programmatic_dependent(mut self) -> Self {
        self.programmatic = true;
        self
    }

    pub(super) fn attrs(&self) -> Attrs {
        Attrs { cooperative: self.cooperative, cluster: self.cluster, programmatic: self.programmatic }
    }

    /// Whether the launch needs `cuLaunchKernelEx`.
    pub(super) fn any(&self) -> bool {
        *self != LaunchOptions::default()
    }

    /// Checks `config` and these options against each other: what needs no device or kernel
    /// (the grid and block shape, the cluster's shape against the grid's, cooperative and
    /// clusters together). Refusals are [`Error::InvalidArgument`] naming `config.grid_dim`,
    /// `config.block_dim` or `cluster`, or [`Error::Unsupported`]. The typed and raw launches
    /// run it, then the checks against the device and the function.
    pub fn check(&self, config: &LaunchConfig) -> Result<()> {
        check_config(config)?;
        if self.cooperative && self.cluster.is_some() {
            return Err(Error::Unsupported {
                library: super::LIBRARY,
                what: "a cooperative launch with thread-block clusters".into(),
                hint: "synchronize the grid with a cooperative launch, or a cluster with clusters, not both".into(),
            });
        }
        if let Some(cluster) = self.cluster {
            let (cx, cy, cz) = cluster;
            let (gx, gy, gz) = config.grid_dim;
            if cx == 0 || cy == 0 || cz == 0 {
                return Err(Error::invalid("cluster", format!("{cluster:?} has a zero dimension")));
            }
            if gx % cx != 0 || gy % cy != 0 || gz % cz != 0 {
                return Err(Error::invalid(
                    "cluster",
                    format!(
                        "the grid {:?} is not a whole number of clusters {cluster:?} in every dimension",
                        config.grid_dim
                    ),
                ));
            }
            let size = blocks(cluster);
            if size > MAX_CLUSTER as u64 {
                return Err(Error::invalid("cluster", format!("{size} blocks per cluster: at most {MAX_CLUSTER}")));
            }
        }
        Ok(())
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

/// The device's context, bound on this thread, for the queries below.
fn bound_context(kernel: &Kernel) -> Result<Arc<CudaContext>> {
    let (backend, _) = kernel.device.backend_epoch();
    let BackendCtx::Cuda(ctx) = backend else { return Err(super::unavailable_on_sim()) };
    crate::backend::cuda::bind(&ctx)?;
    Ok(ctx)
}

fn attribute(ctx: &CudaContext, attr: DevAttr) -> Result<u32> {
    use crate::error::DriverResultExt;
    ctx.attribute(attr).call("cuDeviceGetAttribute").map(|v| v.max(0) as u32)
}

fn dims(config: &LaunchConfig) -> Dims {
    Dims { grid: config.grid_dim, block: config.block_dim, shared_mem_bytes: config.shared_mem_bytes }
}

fn blocks(d: (u32, u32, u32)) -> u64 {
    d.0 as u64 * d.1 as u64 * d.2 as u64
}

/// Checks `config` and `options` against the device and the function, and sets the function
/// attributes they need (the dynamic shared memory ceiling, non-portable cluster sizes). Runs
/// before the launch is recorded; the context is bound on this thread afterwards.
pub(super) fn prepare(kernel: &Kernel, config: &LaunchConfig, options: &LaunchOptions) -> Result<()> {
    options.check(config)?;
    if config.shared_mem_bytes <= DEFAULT_DYNAMIC_SMEM && !options.any() {
        return Ok(());
    }
    let ctx = bound_context(kernel)?;
    let f = kernel.function.cu_function();
    if config.shared_mem_bytes > DEFAULT_DYNAMIC_SMEM {
        // SAFETY: the function is of the kernel's module, loaded in this context (the kernel is
        // not stale: checked by the caller), which is bound.
        unsafe { opt_in_shared_memory(kernel, &ctx, f, config.shared_mem_bytes) }?;
    }
    if let Some(cluster) = options.cluster {
        // SAFETY: as above.
        unsafe { check_cluster(&ctx, f, config, cluster) }?;
    }
    if options.cooperative {
        // SAFETY: as above.
        unsafe { check_cooperative(&ctx, f, config) }?;
    }
    if options.programmatic {
        let (major, _) = crate::backend::cuda::arch(&ctx)?;
        if major < 9 {
            return Err(Error::Unsupported {
                library: super::LIBRARY,
                what: format!("programmatic dependent launch on compute capability {major}.x"),
                hint: "it needs sm_90 or later; launch without it".into(),
            });
        }
    }
    Ok(())
}

/// Raises the function's dynamic shared memory ceiling to `bytes` (never lowers it: launches of
/// the same function from other threads may rely on a higher one), after checking that the
/// device can give a block that much beside the function's static shared memory.
///
/// # Safety
/// `f` is a function of a module loaded in `ctx`, which is bound on this thread.
unsafe fn opt_in_shared_memory(kernel: &Kernel, ctx: &CudaContext, f: CuFunction, bytes: u32) -> Result<()> {
    let optin = attribute(ctx, DevAttr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    // SAFETY: the caller vouches for `f` and the context.
    let stat = unsafe { raw::function_attribute(f, FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) }?.max(0) as u32;
    if bytes.saturating_add(stat) > optin {
        return Err(Error::invalid(
            "config.shared_mem_bytes",
            format!(
                "{bytes} bytes of dynamic shared memory beside `{}`'s {stat} static bytes exceed the {optin} bytes a block \
                 can have on this device",
                kernel.name
            ),
        ));
    }
    let mut ceiling = crate::sync::lock_unranked(&kernel.dynamic_smem);
    if *ceiling < bytes {
        // SAFETY: the caller vouches for `f` and the context; the value was checked above.
        unsafe {
            raw::set_function_attribute(f, FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
        }?;
        *ceiling = bytes;
    }
    Ok(())
}

/// # Safety
/// As for [`opt_in_shared_memory`].
unsafe fn check_cluster(
    ctx: &CudaContext,
    f: CuFunction,
    config: &LaunchConfig,
    cluster: (u32, u32, u32),
) -> Result<()> {
    let (major, _) = crate::backend::cuda::arch(ctx)?;
    if major < 9 {
        return Err(Error::Unsupported {
            library: super::LIBRARY,
            what: format!("thread-block clusters on compute capability {major}.x"),
            hint: "clusters need sm_90 or later".into(),
        });
    }
    // The cluster's shape against the grid's was checked by `LaunchOptions::check`.
    let size = blocks(cluster);
    if size > PORTABLE_CLUSTER as u64 {
        // SAFETY: the caller vouches for `f` and the context.
        unsafe { raw::set_function_attribute(f, FnAttr::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) }
            .map_err(|_| {
                Error::invalid("cluster", format!("{size} blocks per cluster: this device allows {PORTABLE_CLUSTER}"))
            })?;
    }
    // SAFETY: the caller vouches for `f` and the context.
    let fits = unsafe { raw::max_active_clusters(f, dims(config), cluster) };
    match fits? {
        0 => Err(Error::invalid(
            "cluster",
            format!(
                "no cluster of {cluster:?} blocks of {:?} threads with {} bytes of dynamic shared memory fits on this \
                 device (the cluster's blocks share one GPC: fewer blocks or less shared memory per block)",
                config.block_dim, config.shared_mem_bytes
            ),
        )),
        _ => Ok(()),
    }
}

/// # Safety
/// As for [`opt_in_shared_memory`].
unsafe fn check_cooperative(ctx: &CudaContext, f: CuFunction, config: &LaunchConfig) -> Result<()> {
    if attribute(ctx, DevAttr::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? == 0 {
        return Err(Error::Unsupported {
            library: super::LIBRARY,
            what: "a cooperative launch".into(),
            hint: "this device does not support cooperative launches".into(),
        });
    }
    let sms = attribute(ctx, DevAttr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let threads = blocks(config.block_dim) as u32;
    // SAFETY: the caller vouches for `f` and the context.
    let per_sm = unsafe { raw::max_active_blocks(f, threads, config.shared_mem_bytes as usize) }?;
    let most = per_sm as u64 * sms as u64;
    let grid = blocks(config.grid_dim);
    if grid > most {
        return Err(Error::invalid(
            "config.grid_dim",
            format!(
                "a cooperative launch needs every block resident at once: {grid} blocks asked, at most {most} fit \
                 ({per_sm} per multiprocessor x {sms}) with {:?} threads and {} bytes of dynamic shared memory",
                config.block_dim, config.shared_mem_bytes
            ),
        ));
    }
    Ok(())
}

impl Kernel {
    /// How many blocks of this kernel fit on one multiprocessor at once with `block_threads`
    /// threads and `dynamic_smem` bytes of dynamic shared memory each (the occupancy
    /// calculator's answer, `cuOccupancyMaxActiveBlocksPerMultiprocessor`).
    pub fn max_active_blocks_per_sm(&self, block_threads: u32, dynamic_smem: usize) -> Result<u32> {
        self.check()?;
        if block_threads == 0 || block_threads > 1024 {
            return Err(Error::invalid("block_threads", format!("{block_threads}: 1 to 1024")));
        }
        bound_context(self)?;
        // SAFETY: the function is of this kernel's module, loaded in the context just bound (the
        // kernel is not stale: checked above).
        unsafe { raw::max_active_blocks(self.function.cu_function(), block_threads, dynamic_smem) }
    }

    /// The block size that gives this kernel the highest occupancy with `dynamic_smem` bytes of
    /// dynamic shared memory per block, and the smallest grid that fills the device at that
    /// size: `(min_grid, block_threads)` (`cuOccupancyMaxPotentialBlockSize`).
    pub fn suggested_block_size(&self, dynamic_smem: usize) -> Result<(u32, u32)> {
        self.check()?;
        bound_context(self)?;
        // SAFETY: as in `max_active_blocks_per_sm`.
        unsafe { raw::suggested_block_size(self.function.cu_function(), dynamic_smem) }
    }

    /// How many clusters of `cluster` blocks can be resident at once for a launch of `config`
    /// (`cuOccupancyMaxActiveClusters`); 0 when none fits.
    pub fn max_active_clusters(&self, config: LaunchConfig, cluster: (u32, u32, u32)) -> Result<u32> {
        self.check()?;
        bound_context(self)?;
        // SAFETY: as in `max_active_blocks_per_sm`.
        unsafe { raw::max_active_clusters(self.function.cu_function(), dims(&config), cluster) }
    }
}
