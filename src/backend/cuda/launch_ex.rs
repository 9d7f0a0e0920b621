//! Kernel launches with attributes (`cuLaunchKernelEx`: cooperative, clusters, programmatic
//! dependent launch) and the occupancy and function-attribute queries that size them.

use super::launch::{CuFunction, Dims};
use crate::error::Result;
use cudarc::driver::sys;
use std::ffi::c_void;

/// Launch attributes beyond grid, block and dynamic shared memory (`cuLaunchKernelEx`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attrs {
    /// A cooperative launch: every block resident at once, so the grid can synchronize.
    pub cooperative: bool,
    /// Thread-block cluster dimensions, in blocks.
    pub cluster: Option<(u32, u32, u32)>,
    /// Programmatic dependent launch: the kernel may start before its predecessor on the
    /// stream has finished.
    pub programmatic: bool,
}

impl Attrs {
    fn list(&self) -> smallvec::SmallVec<[sys::CUlaunchAttribute; 3]> {
        let mut list = smallvec::SmallVec::new();
        // SAFETY: the attribute value is a plain-data union of integers and arrays; all-zero is
        // a valid value of each member.
        let zero = || unsafe { std::mem::zeroed::<sys::CUlaunchAttribute>() };
        if self.cooperative {
            let mut a = zero();
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            a.value.cooperative = 1;
            list.push(a);
        }
        if let Some((x, y, z)) = self.cluster {
            let mut a = zero();
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            a.value.clusterDim = sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x, y, z };
            list.push(a);
        }
        if self.programmatic {
            let mut a = zero();
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            a.value.programmaticStreamSerializationAllowed = 1;
            list.push(a);
        }
        list
    }
}

/// The launch configuration `cuLaunchKernelEx` and the cluster occupancy query take; `attrs`
/// must outlive every use of it.
fn ex_config(dims: Dims, stream: sys::CUstream, attrs: &mut [sys::CUlaunchAttribute]) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: dims.grid.0,
        gridDimY: dims.grid.1,
        gridDimZ: dims.grid.2,
        blockDimX: dims.block.0,
        blockDimY: dims.block.1,
        blockDimZ: dims.block.2,
        sharedMemBytes: dims.shared_mem_bytes,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    }
}

/// Enqueues `f` on `stream` with launch attributes (`cuLaunchKernelEx`), in the context current
/// on this thread.
///
/// # Safety
/// As for [`launch_kernel`](super::launch::launch_kernel); and with `attrs.programmatic`, the kernel touches no memory before
/// its predecessor's results are visible (`griddepcontrol.wait`), which the caller vouches for.
pub(crate) unsafe fn launch_kernel_ex(
    f: CuFunction,
    dims: Dims,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    attrs: Attrs,
) -> Result<()> {
    let mut list = attrs.list();
    let config = ex_config(dims, stream, &mut list);
    // SAFETY: this function's contract; `config` and the attributes it points to outlive the
    // call, and `extra` is null (the parameters come through `params`).
    let status = unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) };
    super::status("cuLaunchKernelEx", status)
}

/// How many blocks of `f` fit on one multiprocessor at once with `block_threads` threads and
/// `dynamic_smem` bytes of dynamic shared memory each.
///
/// # Safety
/// `f` is a function of a module loaded in the context current on this thread.
pub(crate) unsafe fn max_active_blocks(f: CuFunction, block_threads: u32, dynamic_smem: usize) -> Result<u32> {
    let mut n = 0;
    // SAFETY: the caller vouches for `f`; `n` is a valid out-pointer.
    let status =
        unsafe { sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f, block_threads as i32, dynamic_smem) };
    super::status("cuOccupancyMaxActiveBlocksPerMultiprocessor", status)?;
    Ok(n.max(0) as u32)
}

/// The block size that maximizes `f`'s occupancy with `dynamic_smem` bytes of dynamic shared
/// memory per block, and the smallest grid that reaches it: `(min_grid, block)`.
///
/// # Safety
/// As for [`max_active_blocks`].
pub(crate) unsafe fn suggested_block_size(f: CuFunction, dynamic_smem: usize) -> Result<(u32, u32)> {
    let (mut grid, mut block) = (0, 0);
    // SAFETY: the caller vouches for `f`; both are valid out-pointers; no size callback.
    let status = unsafe { sys::cuOccupancyMaxPotentialBlockSize(&mut grid, &mut block, f, None, dynamic_smem, 0) };
    super::status("cuOccupancyMaxPotentialBlockSize", status)?;
    Ok((grid.max(0) as u32, block.max(0) as u32))
}

/// How many clusters of `dims` and `cluster` can be resident at once (0: none fits).
///
/// # Safety
/// As for [`max_active_blocks`].
pub(crate) unsafe fn max_active_clusters(f: CuFunction, dims: Dims, cluster: (u32, u32, u32)) -> Result<u32> {
    let mut list = Attrs { cluster: Some(cluster), ..Attrs::default() }.list();
    let config = ex_config(dims, std::ptr::null_mut(), &mut list);
    let mut n = 0;
    // SAFETY: the caller vouches for `f`; `config` and its attributes outlive the call; `n` is
    // a valid out-pointer.
    let status = unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f, &config) };
    super::status("cuOccupancyMaxActiveClusters", status)?;
    Ok(n.max(0) as u32)
}

/// A function attribute (`cuFuncGetAttribute`).
///
/// # Safety
/// As for [`max_active_blocks`].
pub(crate) unsafe fn function_attribute(f: CuFunction, attr: sys::CUfunction_attribute) -> Result<i32> {
    let mut v = 0;
    // SAFETY: the caller vouches for `f`; `v` is a valid out-pointer.
    let status = unsafe { sys::cuFuncGetAttribute(&mut v, attr, f) };
    super::status("cuFuncGetAttribute", status)?;
    Ok(v)
}

/// Sets a function attribute (`cuFuncSetAttribute`).
///
/// # Safety
/// As for [`max_active_blocks`].
pub(crate) unsafe fn set_function_attribute(f: CuFunction, attr: sys::CUfunction_attribute, value: i32) -> Result<()> {
    // SAFETY: the caller vouches for `f`.
    let status = unsafe { sys::cuFuncSetAttribute(f, attr, value) };
    super::status("cuFuncSetAttribute", status)
}
