//! Batch norm and dropout: the calls that keep statistics or random-number states.

use super::super::tensor::{Layout, Shape};
use super::{RawHandle, TensorDesc};
use crate::error::Result;
use crate::libs::dtype::CudnnType;
use crate::libs::object::Owned;
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::c_void;

/// The pointers of a batch-norm call: the data side, the per-channel parameters and the
/// statistics (null where the call takes none).
pub(in crate::libs::cudnn) struct BatchNormArgs {
    pub x: *const c_void,
    pub y: *mut c_void,
    pub scale: *const c_void,
    pub bias: *const c_void,
    pub mean: *mut c_void,
    pub var: *mut c_void,
    pub save_mean: *mut c_void,
    pub save_inv_var: *mut c_void,
    /// Backward: `dy` (read), `dx` is `y`, `dscale` is `mean`, `dbias` is `var`.
    pub dy: *const c_void,
}

/// Which batch-norm call.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::cudnn) enum BatchNormCall {
    Inference,
    /// The running statistics' exponential average factor.
    Training(f64),
    /// With `accumulate_params`, `dscale` and `dbias` are added to (cuDNN's `betaParamDiff`
    /// of 1) rather than overwritten.
    Backward {
        accumulate_params: bool,
    },
}

/// `cudnnBatchNormalizationForwardInference`, `cudnnBatchNormalizationForwardTraining` or
/// `cudnnBatchNormalizationBackward`, per channel (spatial mode), the parameters and statistics
/// f32 tensors of `1 x C x 1 x 1[ x 1]`.
///
/// NVIDIA: [`cudnnBatchNormalizationForwardInference`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnbatchnormalizationforwardinference),
/// [`cudnnBatchNormalizationForwardTraining`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnbatchnormalizationforwardtraining),
/// [`cudnnBatchNormalizationBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnbatchnormalizationbackward)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) the data pointers
/// are live device buffers of that context holding `shape`, the others `C` f32 values (or null
/// where the call allows it), all fenced on the stream.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::cudnn) unsafe fn batch_norm(
    handle: &RawHandle,
    call: BatchNormCall,
    shape: &Shape,
    dtype: CudnnType,
    epsilon: f64,
    alpha: f32,
    beta: f32,
    a: BatchNormArgs,
) -> Result<()> {
    let mode = sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL;
    let t = TensorDesc::new(shape, dtype)?;
    let mut pdims = vec![1; shape.dims().len()];
    pdims[1] = shape.dims()[1];
    let p = TensorDesc::new(&Shape::new(Layout::Nchw, &pdims), CudnnType::Float)?;
    let (h, td, pd) = (handle.get(), t.get(), p.get());
    let one = 1.0f32;
    let param_beta = match call {
        BatchNormCall::Backward { accumulate_params: true } => 1.0f32,
        _ => 0.0,
    };
    let ptr = |v: &f32| v as *const f32 as *const c_void;
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live; the scalars are f32
    // (as cuDNN takes them for float, half and bfloat16 data) and outlive the call.
    unsafe {
        match call {
            BatchNormCall::Inference => sys::cudnnBatchNormalizationForwardInference(
                h,
                mode,
                ptr(&alpha),
                ptr(&beta),
                td,
                a.x,
                td,
                a.y,
                pd,
                a.scale,
                a.bias,
                a.mean,
                a.var,
                epsilon,
            )
            .check("cudnnBatchNormalizationForwardInference"),
            BatchNormCall::Training(factor) => sys::cudnnBatchNormalizationForwardTraining(
                h,
                mode,
                ptr(&alpha),
                ptr(&beta),
                td,
                a.x,
                td,
                a.y,
                pd,
                a.scale,
                a.bias,
                factor,
                a.mean,
                a.var,
                epsilon,
                a.save_mean,
                a.save_inv_var,
            )
            .check("cudnnBatchNormalizationForwardTraining"),
            BatchNormCall::Backward { .. } => sys::cudnnBatchNormalizationBackward(
                h,
                mode,
                ptr(&alpha),
                ptr(&beta),
                ptr(&one),
                ptr(&param_beta),
                td,
                a.x,
                td,
                a.dy,
                td,
                a.y,
                pd,
                a.scale,
                a.mean,
                a.var,
                epsilon,
                a.save_mean,
                a.save_inv_var,
            )
            .check("cudnnBatchNormalizationBackward"),
        }
    }
}

/// Bytes of the random-number states dropout keeps on the device.
///
/// NVIDIA: [`cudnnDropoutGetStatesSize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutgetstatessize)
pub(in crate::libs::cudnn) fn dropout_states_bytes(handle: &RawHandle) -> Result<usize> {
    let mut n = 0usize;
    // SAFETY: a live handle; `n` is a valid out-pointer.
    unsafe { sys::cudnnDropoutGetStatesSize(handle.get(), &mut n) }.check("cudnnDropoutGetStatesSize")?;
    Ok(n)
}

/// Bytes of the reserve space (the mask) dropout of `shape` needs.
///
/// NVIDIA: [`cudnnDropoutGetReserveSpaceSize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutgetreservespacesize)
pub(in crate::libs::cudnn) fn dropout_reserve_bytes(shape: &Shape, dtype: CudnnType) -> Result<usize> {
    let t = TensorDesc::new(shape, dtype)?;
    let mut n = 0usize;
    // SAFETY: a live descriptor; `n` is a valid out-pointer.
    unsafe { sys::cudnnDropoutGetReserveSpaceSize(t.get(), &mut n) }.check("cudnnDropoutGetReserveSpaceSize")?;
    Ok(n)
}

/// What a dropout call does: set up the states, or run forward or backward.
pub(in crate::libs::cudnn) enum DropoutCall {
    /// `cudnnSetDropoutDescriptor`: seeds the states (a kernel on the handle's stream).
    Init,
    /// `y = x * mask / (1 - p)`, the mask drawn from the states and kept in `reserve`.
    Forward {
        shape: Shape,
        dtype: CudnnType,
        x: *const c_void,
        y: *mut c_void,
        reserve: *mut c_void,
        reserve_bytes: usize,
    },
    /// `dx = dy * mask / (1 - p)`, the mask read from `reserve`.
    Backward {
        shape: Shape,
        dtype: CudnnType,
        dy: *const c_void,
        dx: *mut c_void,
        reserve: *mut c_void,
        reserve_bytes: usize,
    },
}

/// A dropout call on states `states` (`states_bytes` long) for probability `p` and `seed`;
/// forward and backward restore the descriptor over states already seeded.
///
/// NVIDIA: [`cudnnSetDropoutDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetdropoutdescriptor),
/// [`cudnnRestoreDropoutDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnrestoredropoutdescriptor),
/// [`cudnnDropoutForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutforward),
/// [`cudnnDropoutBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutbackward)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) `states` is a live
/// device buffer of `states_bytes` (seeded by an earlier `Init` unless this is one), and the
/// call's pointers are live device buffers holding its shape (the reserve its bytes), all
/// fenced on the stream.
pub(in crate::libs::cudnn) unsafe fn dropout(
    handle: &RawHandle,
    p: f32,
    seed: u64,
    states: *mut c_void,
    states_bytes: usize,
    call: DropoutCall,
) -> Result<()> {
    let mut d: sys::cudnnDropoutDescriptor_t = std::ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer.
    unsafe { sys::cudnnCreateDropoutDescriptor(&mut d) }.check("cudnnCreateDropoutDescriptor")?;
    let desc = Owned::new(d);
    let h = handle.get();
    // SAFETY: (1) and (2) from the caller; a fresh descriptor.
    unsafe {
        if let DropoutCall::Init = call {
            return sys::cudnnSetDropoutDescriptor(desc.get(), h, p, states, states_bytes, seed)
                .check("cudnnSetDropoutDescriptor");
        }
        sys::cudnnRestoreDropoutDescriptor(desc.get(), h, p, states, states_bytes, seed)
            .check("cudnnRestoreDropoutDescriptor")?;
    }
    match call {
        DropoutCall::Init => Ok(()),
        DropoutCall::Forward { shape, dtype, x, y, reserve, reserve_bytes } => {
            let t = TensorDesc::new(&shape, dtype)?;
            // SAFETY: (1) and (2) from the caller; the descriptors are live.
            unsafe { sys::cudnnDropoutForward(h, desc.get(), t.get(), x, t.get(), y, reserve, reserve_bytes) }
                .check("cudnnDropoutForward")
        }
        DropoutCall::Backward { shape, dtype, dy, dx, reserve, reserve_bytes } => {
            let t = TensorDesc::new(&shape, dtype)?;
            // SAFETY: (1) and (2) from the caller; the descriptors are live.
            unsafe { sys::cudnnDropoutBackward(h, desc.get(), t.get(), dy, t.get(), dx, reserve, reserve_bytes) }
                .check("cudnnDropoutBackward")
        }
    }
}

/// `y = x` between two layouts of one logical shape (`cudnnTransformTensor`, alpha 1, beta 0).
///
/// NVIDIA: [`cudnnTransformTensor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnntransformtensor)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) `x` and `y` are
/// live, distinct device buffers holding `from` and `to` (of equal dims) in `dtype`, fenced
/// on the stream.
pub(in crate::libs::cudnn) unsafe fn transform(
    handle: &RawHandle,
    from: &Shape,
    to: &Shape,
    dtype: CudnnType,
    x: *const c_void,
    y: *mut c_void,
) -> Result<()> {
    let (xd, yd) = (TensorDesc::new(from, dtype)?, TensorDesc::new(to, dtype)?);
    let (one, zero) = (1.0f32, 0.0f32);
    let ptr = |v: &f32| v as *const f32 as *const c_void;
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live; the scalars are
    // f32 (as cuDNN takes them for float, half and bfloat16 data) and outlive the call.
    unsafe { sys::cudnnTransformTensor(handle.get(), ptr(&one), xd.get(), x, ptr(&zero), yd.get(), y) }
        .check("cudnnTransformTensor")
}

/// Sets `count` f32 values at `y` to `value` (`cudnnSetTensor`).
///
/// NVIDIA: [`cudnnSetTensor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsettensor)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) `y` is a live
/// device buffer of at least `count` f32 values, fenced on the stream.
pub(in crate::libs::cudnn) unsafe fn fill_f32(
    handle: &RawHandle,
    count: usize,
    value: f32,
    y: *mut c_void,
) -> Result<()> {
    let d = TensorDesc::new(&Shape::new(Layout::Nchw, &[1, count, 1, 1]), CudnnType::Float)?;
    // SAFETY: the caller vouches for (1) and (2); the descriptor is live; `value` outlives the
    // call.
    unsafe { sys::cudnnSetTensor(handle.get(), d.get(), y, &value as *const f32 as *const c_void) }
        .check("cudnnSetTensor")
}
