//! Activation, softmax, pooling and LRN: the pointwise and windowed ops' calls.

use super::super::ops::{ActivationMode, Lrn, PoolingMode, SoftmaxAlgo, SoftmaxMode};
use super::super::tensor::Shape;
use super::{ints, RawHandle, TensorDesc};
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::object::Owned;
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::{c_int, c_void};

/// An activation descriptor.
pub(super) struct ActivationDesc(pub(super) Owned<sys::cudnnActivationDescriptor_t>);

impl ActivationDesc {
    /// NVIDIA: [`cudnnSetActivationDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetactivationdescriptor),
    /// [`cudnnSetActivationDescriptorSwishBeta`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetactivationdescriptorswishbeta)
    fn new(mode: ActivationMode) -> Result<ActivationDesc> {
        use sys::cudnnActivationMode_t as M;
        let (m, coef) = match mode {
            ActivationMode::Relu => (M::CUDNN_ACTIVATION_RELU, 0.0),
            ActivationMode::Sigmoid => (M::CUDNN_ACTIVATION_SIGMOID, 0.0),
            ActivationMode::Tanh => (M::CUDNN_ACTIVATION_TANH, 0.0),
            ActivationMode::ClippedRelu { ceiling } => (M::CUDNN_ACTIVATION_CLIPPED_RELU, ceiling),
            ActivationMode::Elu { alpha } => (M::CUDNN_ACTIVATION_ELU, alpha),
            ActivationMode::Swish { .. } => (M::CUDNN_ACTIVATION_SWISH, 0.0),
        };
        let desc = ActivationDesc::with(m, coef)?;
        if let ActivationMode::Swish { beta } = mode {
            // SAFETY: a live descriptor; a plain value.
            unsafe { sys::cudnnSetActivationDescriptorSwishBeta(desc.0.get(), beta) }
                .check("cudnnSetActivationDescriptorSwishBeta")?;
        }
        Ok(desc)
    }

    /// A descriptor of mode `m` with coefficient `coef`, not propagating NaN.
    pub(super) fn with(m: sys::cudnnActivationMode_t, coef: f64) -> Result<ActivationDesc> {
        let mut d: sys::cudnnActivationDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        unsafe { sys::cudnnCreateActivationDescriptor(&mut d) }.check("cudnnCreateActivationDescriptor")?;
        let desc = ActivationDesc(Owned::new(d));
        // SAFETY: a fresh descriptor; plain values.
        unsafe { sys::cudnnSetActivationDescriptor(d, m, sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN, coef) }
            .check("cudnnSetActivationDescriptor")?;
        Ok(desc)
    }
}

/// The device pointers of a backward op: `y`, `dy`, `x` (null where the op takes none) and
/// `dx`.
pub(in crate::libs::cudnn) struct Backward {
    pub y: *const c_void,
    pub dy: *const c_void,
    pub x: *const c_void,
    pub dx: *mut c_void,
}

/// `cudnnActivationForward` (`backward` `None`) or `cudnnActivationBackward`, every tensor of
/// `shape`.
///
/// NVIDIA: [`cudnnActivationForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnactivationforward),
/// [`cudnnActivationBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnactivationbackward)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) the pointers are
/// live device buffers of that context holding `shape`, fenced on the stream.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::cudnn) unsafe fn activation(
    handle: &RawHandle,
    mode: ActivationMode,
    shape: &Shape,
    dtype: CudnnType,
    alpha: f32,
    beta: f32,
    forward: Option<(*const c_void, *mut c_void)>,
    backward: Option<Backward>,
) -> Result<()> {
    let act = ActivationDesc::new(mode)?;
    let t = TensorDesc::new(&shape.as_4d(), dtype)?;
    let (h, a, td) = (handle.get(), act.0.get(), t.get());
    let (al, be) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live; the scalars are f32
    // and outlive the call.
    unsafe {
        if let Some((x, y)) = forward {
            sys::cudnnActivationForward(h, a, al, td, x, be, td, y).check("cudnnActivationForward")?;
        }
        if let Some(b) = backward {
            sys::cudnnActivationBackward(h, a, al, td, b.y, td, b.dy, td, b.x, be, td, b.dx)
                .check("cudnnActivationBackward")?;
        }
    }
    Ok(())
}

/// `cudnnSoftmaxForward` (`backward` `None`) or `cudnnSoftmaxBackward`, every tensor of `shape`.
///
/// NVIDIA: [`cudnnSoftmaxForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsoftmaxforward),
/// [`cudnnSoftmaxBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsoftmaxbackward)
///
/// # Safety
/// As for [`activation`].
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::cudnn) unsafe fn softmax(
    handle: &RawHandle,
    algo: SoftmaxAlgo,
    mode: SoftmaxMode,
    shape: &Shape,
    dtype: CudnnType,
    alpha: f32,
    beta: f32,
    forward: Option<(*const c_void, *mut c_void)>,
    backward: Option<Backward>,
) -> Result<()> {
    use sys::cudnnSoftmaxAlgorithm_t as A;
    use sys::cudnnSoftmaxMode_t as M;
    let algo = match algo {
        SoftmaxAlgo::Fast => A::CUDNN_SOFTMAX_FAST,
        SoftmaxAlgo::Accurate => A::CUDNN_SOFTMAX_ACCURATE,
        SoftmaxAlgo::Log => A::CUDNN_SOFTMAX_LOG,
    };
    let mode = match mode {
        SoftmaxMode::Instance => M::CUDNN_SOFTMAX_MODE_INSTANCE,
        SoftmaxMode::Channel => M::CUDNN_SOFTMAX_MODE_CHANNEL,
    };
    // Softmax takes 4-D tensors: a 5-D one's depth and height merge (its modes only tell the
    // channels from the rest).
    let t = TensorDesc::new(&shape.as_4d(), dtype)?;
    let (h, td) = (handle.get(), t.get());
    let (al, be) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
    // SAFETY: the caller vouches for (1) and (2); the descriptor is live; the scalars are f32 and
    // outlive the call.
    unsafe {
        if let Some((x, y)) = forward {
            sys::cudnnSoftmaxForward(h, algo, mode, al, td, x, be, td, y).check("cudnnSoftmaxForward")?;
        }
        if let Some(b) = backward {
            sys::cudnnSoftmaxBackward(h, algo, mode, al, td, b.y, td, b.dy, be, td, b.dx)
                .check("cudnnSoftmaxBackward")?;
        }
    }
    Ok(())
}

/// `cudnnPoolingForward` (`backward` `None`) or `cudnnPoolingBackward`: `x` and `dx` of
/// `xs`, `y` and `dy` of `ys`.
///
/// NVIDIA: [`cudnnSetPoolingNdDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetpoolingnddescriptor),
/// [`cudnnPoolingForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnpoolingforward),
/// [`cudnnPoolingBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnpoolingbackward)
///
/// # Safety
/// As for [`activation`], with `x`/`dx` holding `xs` and `y`/`dy` holding `ys`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::cudnn) unsafe fn pooling(
    handle: &RawHandle,
    mode: PoolingMode,
    window: &[usize],
    pad: &[usize],
    stride: &[usize],
    xs: &Shape,
    ys: &Shape,
    dtype: CudnnType,
    alpha: f32,
    beta: f32,
    forward: Option<(*const c_void, *mut c_void)>,
    backward: Option<Backward>,
) -> Result<()> {
    use sys::cudnnPoolingMode_t as M;
    let m = match mode {
        PoolingMode::Max => M::CUDNN_POOLING_MAX_DETERMINISTIC,
        PoolingMode::AverageIncludePadding => M::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        PoolingMode::AverageExcludePadding => M::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
    };
    let (win, pads, strides) = (ints(window)?, ints(pad)?, ints(stride)?);
    let mut p: sys::cudnnPoolingDescriptor_t = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    unsafe { sys::cudnnCreatePoolingDescriptor(&mut p) }.check("cudnnCreatePoolingDescriptor")?;
    let pool = Owned::new(p);
    // SAFETY: a fresh descriptor; the arrays hold `win.len()` entries each and outlive the call.
    unsafe {
        sys::cudnnSetPoolingNdDescriptor(
            pool.get(),
            m,
            sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
            win.len() as c_int,
            win.as_ptr(),
            pads.as_ptr(),
            strides.as_ptr(),
        )
    }
    .check("cudnnSetPoolingNdDescriptor")?;
    let (xt, yt) = (TensorDesc::new(xs, dtype)?, TensorDesc::new(ys, dtype)?);
    let (h, pd, xd, yd) = (handle.get(), pool.get(), xt.get(), yt.get());
    let (al, be) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live; the scalars are f32
    // and outlive the call.
    unsafe {
        if let Some((x, y)) = forward {
            sys::cudnnPoolingForward(h, pd, al, xd, x, be, yd, y).check("cudnnPoolingForward")?;
        }
        if let Some(b) = backward {
            sys::cudnnPoolingBackward(h, pd, al, yd, b.y, yd, b.dy, xd, b.x, be, xd, b.dx)
                .check("cudnnPoolingBackward")?;
        }
    }
    Ok(())
}

/// `cudnnLRNCrossChannelForward` (`backward` `None`) or `cudnnLRNCrossChannelBackward`, every
/// tensor of `shape`.
///
/// NVIDIA: [`cudnnSetLRNDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetlrndescriptor),
/// [`cudnnLRNCrossChannelForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnlrncrosschannelforward),
/// [`cudnnLRNCrossChannelBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnlrncrosschannelbackward)
///
/// # Safety
/// As for [`activation`].
pub(in crate::libs::cudnn) unsafe fn lrn(
    handle: &RawHandle,
    lrn: &Lrn,
    shape: &Shape,
    dtype: CudnnType,
    forward: Option<(*const c_void, *mut c_void)>,
    backward: Option<Backward>,
) -> Result<()> {
    let mut d: sys::cudnnLRNDescriptor_t = std::ptr::null_mut();
    // SAFETY: `d` is a valid out-pointer.
    unsafe { sys::cudnnCreateLRNDescriptor(&mut d) }.check("cudnnCreateLRNDescriptor")?;
    let desc = Owned::new(d);
    let n = std::ffi::c_uint::try_from(lrn.n).map_err(|_| Error::invalid("lrn", "the window does not fit u32"))?;
    // SAFETY: a fresh descriptor; plain values, checked against cuDNN's limits.
    unsafe { sys::cudnnSetLRNDescriptor(d, n, lrn.alpha, lrn.beta, lrn.k) }.check("cudnnSetLRNDescriptor")?;
    let t = TensorDesc::new(shape, dtype)?;
    let (h, td, mode) = (handle.get(), t.get(), sys::cudnnLRNMode_t::CUDNN_LRN_CROSS_CHANNEL_DIM1);
    let (al, be) = (&lrn.scale_alpha as *const f32 as *const c_void, &lrn.scale_beta as *const f32 as *const c_void);
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live; the scalars are f32
    // and outlive the call.
    unsafe {
        if let Some((x, y)) = forward {
            sys::cudnnLRNCrossChannelForward(h, desc.get(), mode, al, td, x, be, td, y)
                .check("cudnnLRNCrossChannelForward")?;
        }
        if let Some(b) = backward {
            sys::cudnnLRNCrossChannelBackward(h, desc.get(), mode, al, td, b.y, td, b.dy, td, b.x, be, td, b.dx)
                .check("cudnnLRNCrossChannelBackward")?;
        }
    }
    Ok(())
}
