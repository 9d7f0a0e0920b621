//! The cuDNN call layer: every cuDNN call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cudnn::sys`.
//!
//! Every wrapper that takes the handle needs the device's context current on the calling
//! thread (the op path binds it) and the handle used by one thread at a time (`Cudnn` methods
//! take `&mut self`). Descriptors are host objects: cuDNN reads them during the call that takes
//! them, so one made for a call may be destroyed once the call has returned.

use super::conv::{AlgoSearch, ConvActivation, ConvKey, Direction, Geometry};
use super::ops::{ActivationMode, Lrn, PoolingMode, SoftmaxAlgo, SoftmaxMode};
use super::tensor::{Layout, Shape};
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::{c_int, c_void};

impl Status for sys::cudnnStatus_t {
    const SUCCESS: Self = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
}

/// Whether cudarc's loader finds cuDNN (`libcudnn.so`, or `libcudnn.so.9` among its other
/// candidate names).
pub(super) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

macro_rules! raw_objects {
    ($($t:ty => $destroy:ident;)*) => {$(
        // SAFETY: cuDNN's handles and descriptors may be used from any thread, one at a time.
        unsafe impl RawObject for $t {
            const DESTROY: &'static str = stringify!($destroy);
            type Status = sys::cudnnStatus_t;

            unsafe fn destroy(self) -> sys::cudnnStatus_t {
                // SAFETY: the caller keeps `destroy`'s contract.
                unsafe { sys::$destroy(self) }
            }
        }
    )*};
}
raw_objects! {
    sys::cudnnHandle_t => cudnnDestroy;
    sys::cudnnTensorDescriptor_t => cudnnDestroyTensorDescriptor;
    sys::cudnnFilterDescriptor_t => cudnnDestroyFilterDescriptor;
    sys::cudnnConvolutionDescriptor_t => cudnnDestroyConvolutionDescriptor;
    sys::cudnnActivationDescriptor_t => cudnnDestroyActivationDescriptor;
    sys::cudnnPoolingDescriptor_t => cudnnDestroyPoolingDescriptor;
    sys::cudnnLRNDescriptor_t => cudnnDestroyLRNDescriptor;
    sys::cudnnDropoutDescriptor_t => cudnnDestroyDropoutDescriptor;
}

fn data_type(t: CudnnType) -> sys::cudnnDataType_t {
    use sys::cudnnDataType_t as D;
    match t {
        CudnnType::Float => D::CUDNN_DATA_FLOAT,
        CudnnType::Double => D::CUDNN_DATA_DOUBLE,
        CudnnType::Half => D::CUDNN_DATA_HALF,
        CudnnType::Int8 => D::CUDNN_DATA_INT8,
        CudnnType::Int32 => D::CUDNN_DATA_INT32,
        CudnnType::Uint8 => D::CUDNN_DATA_UINT8,
        CudnnType::Bfloat16 => D::CUDNN_DATA_BFLOAT16,
        CudnnType::Int64 => D::CUDNN_DATA_INT64,
    }
}

/// Converts values validation already bounded to `i32`.
fn ints(v: &[usize]) -> Result<Vec<c_int>> {
    v.iter()
        .map(|&x| {
            c_int::try_from(x).map_err(|_| Error::invalid("shape", format!("{x} does not fit cuDNN's 32-bit int")))
        })
        .collect()
}

/// An owned cuDNN handle bound to one stream, destroyed on drop (after the plans made with it:
/// see [`super::Objects`]).
pub(crate) struct RawHandle(Owned<sys::cudnnHandle_t>);

impl RawHandle {
    /// `cudnnCreate` in the current context, then `cudnnSetStream`.
    ///
    /// NVIDIA: [`cudnnCreate`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnncreate),
    /// [`cudnnSetStream`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnsetstream)
    ///
    /// # Safety
    /// `stream` is a live stream of the current context that outlives the handle.
    pub(super) unsafe fn create(stream: crate::backend::cuda::CuStream) -> Result<RawHandle> {
        let mut h: sys::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; the caller made the device's context current.
        unsafe { sys::cudnnCreate(&mut h) }.check("cudnnCreate")?;
        let handle = RawHandle(Owned::new(h));
        // SAFETY: (1) a live handle; (2) the caller vouches for the stream.
        unsafe { sys::cudnnSetStream(h, stream as sys::cudaStream_t) }.check("cudnnSetStream")?;
        Ok(handle)
    }

    pub(super) fn get(&self) -> sys::cudnnHandle_t {
        self.0.get()
    }
}

/// A tensor descriptor: the shape's dims and strides, in cuDNN's logical order.
pub(crate) struct TensorDesc(Owned<sys::cudnnTensorDescriptor_t>);

impl TensorDesc {
    /// `cudnnCreateTensorDescriptor`, then `cudnnSetTensorNdDescriptor` with the shape's dims
    /// and strides.
    ///
    /// NVIDIA: [`cudnnSetTensorNdDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnnsettensornddescriptor)
    pub(super) fn new(shape: &Shape, dtype: CudnnType) -> Result<TensorDesc> {
        let dims = ints(shape.dims())?;
        let strides = ints(&shape.strides())?;
        let mut d: sys::cudnnTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        unsafe { sys::cudnnCreateTensorDescriptor(&mut d) }.check("cudnnCreateTensorDescriptor")?;
        let desc = TensorDesc(Owned::new(d));
        // SAFETY: (1) a fresh descriptor; (2) both arrays hold `dims.len()` entries and outlive
        // the call.
        unsafe {
            sys::cudnnSetTensorNdDescriptor(d, data_type(dtype), dims.len() as c_int, dims.as_ptr(), strides.as_ptr())
        }
        .check("cudnnSetTensorNdDescriptor")?;
        Ok(desc)
    }

    fn get(&self) -> sys::cudnnTensorDescriptor_t {
        self.0.get()
    }
}

/// A filter descriptor: `[K, C / groups, spatial...]` in the shape's layout.
pub(crate) struct FilterDesc(Owned<sys::cudnnFilterDescriptor_t>);

impl FilterDesc {
    /// `cudnnCreateFilterDescriptor`, then `cudnnSetFilterNdDescriptor`.
    ///
    /// NVIDIA: [`cudnnSetFilterNdDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnsetfilternddescriptor)
    pub(super) fn new(shape: &Shape, dtype: CudnnType) -> Result<FilterDesc> {
        let dims = ints(shape.dims())?;
        let format = match shape.layout() {
            Layout::Nchw => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            Layout::Nhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        };
        let mut d: sys::cudnnFilterDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        unsafe { sys::cudnnCreateFilterDescriptor(&mut d) }.check("cudnnCreateFilterDescriptor")?;
        let desc = FilterDesc(Owned::new(d));
        // SAFETY: (1) a fresh descriptor; (2) `dims` holds `dims.len()` entries and outlives the
        // call.
        unsafe { sys::cudnnSetFilterNdDescriptor(d, data_type(dtype), format, dims.len() as c_int, dims.as_ptr()) }
            .check("cudnnSetFilterNdDescriptor")?;
        Ok(desc)
    }
}

/// A convolution descriptor: padding, strides, dilation, groups, cross-correlation, the
/// compute type and the math type.
pub(crate) struct ConvDesc(Owned<sys::cudnnConvolutionDescriptor_t>);

impl ConvDesc {
    /// `cudnnCreateConvolutionDescriptor`, `cudnnSetConvolutionNdDescriptor`,
    /// `cudnnSetConvolutionGroupCount`, `cudnnSetConvolutionMathType`.
    ///
    /// NVIDIA: [`cudnnSetConvolutionNdDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnsetconvolutionnddescriptor),
    /// [`cudnnSetConvolutionGroupCount`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnsetconvolutiongroupcount),
    /// [`cudnnSetConvolutionMathType`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnsetconvolutionmathtype)
    pub(super) fn new(geo: &Geometry, tensor_cores: bool) -> Result<ConvDesc> {
        let (pad, stride, dil) = (ints(&geo.pad)?, ints(&geo.stride)?, ints(&geo.dilation)?);
        let groups = c_int::try_from(geo.groups).map_err(|_| Error::invalid("conv", "groups does not fit i32"))?;
        let mut d: sys::cudnnConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        unsafe { sys::cudnnCreateConvolutionDescriptor(&mut d) }.check("cudnnCreateConvolutionDescriptor")?;
        let desc = ConvDesc(Owned::new(d));
        let math =
            if tensor_cores { sys::cudnnMathType_t::CUDNN_DEFAULT_MATH } else { sys::cudnnMathType_t::CUDNN_FMA_MATH };
        // SAFETY: (1) a fresh descriptor; (2) the three arrays hold `pad.len()` entries each and
        // outlive the call.
        unsafe {
            sys::cudnnSetConvolutionNdDescriptor(
                d,
                pad.len() as c_int,
                pad.as_ptr(),
                stride.as_ptr(),
                dil.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .check("cudnnSetConvolutionNdDescriptor")?;
            sys::cudnnSetConvolutionGroupCount(d, groups).check("cudnnSetConvolutionGroupCount")?;
            sys::cudnnSetConvolutionMathType(d, math).check("cudnnSetConvolutionMathType")?;
        }
        Ok(desc)
    }
}

/// The algorithm a convolution plan runs, for its direction.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    BackwardData(sys::cudnnConvolutionBwdDataAlgo_t),
    BackwardFilter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// A convolution plan: the descriptors of one shape key, the algorithm chosen for it, and the
/// workspace it needs. `x` is the input side (`dx` backward), `y` the output side (`dy`
/// backward), `w` the filter (`dw` for backward-filter).
pub(crate) struct ConvPlan {
    x: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    y: TensorDesc,
    pub algo: Algo,
    pub work_bytes: usize,
}

/// Up to this many algorithms are asked of the heuristics or the search.
const ALGOS: usize = 8;

impl ConvPlan {
    /// Makes the descriptors and chooses the algorithm: the first the heuristics
    /// (`cudnnGetConvolution*Algorithm_v7`) rank usable, or with `find`, the fastest that
    /// `cudnnFindConvolution*Algorithm` measured (it runs each candidate on memory it allocates
    /// itself, and synchronizes). `None` when no algorithm supports the combination.
    ///
    /// NVIDIA: [`cudnnGetConvolutionForwardAlgorithm_v7`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnngetconvolutionforwardalgorithm-v7),
    /// [`cudnnFindConvolutionForwardAlgorithm`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnfindconvolutionforwardalgorithm),
    /// and their backward-data and backward-filter counterparts; the
    /// `cudnnGetConvolution*WorkspaceSize` of the chosen algorithm.
    ///
    /// # Safety
    /// `handle` is live, its context current, and used by this thread only.
    pub(super) unsafe fn make(handle: &RawHandle, k: &ConvKey) -> Result<Option<ConvPlan>> {
        let (dtype, tensor_cores, find) = (k.dtype, k.tensor_cores, k.search == AlgoSearch::Find);
        let mut plan = ConvPlan {
            x: TensorDesc::new(&k.x, dtype)?,
            w: FilterDesc::new(&k.w, dtype)?,
            conv: ConvDesc::new(&k.geo, tensor_cores)?,
            y: TensorDesc::new(&k.y, dtype)?,
            algo: Algo::Forward(sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM),
            work_bytes: 0,
        };
        let h = handle.get();
        let (xd, wd, cd, yd) = (plan.x.get(), plan.w.0.get(), plan.conv.0.get(), plan.y.get());
        let mut n: c_int = 0;
        let ok = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
        // For every arm's search: (1) the caller vouches for the handle; (2) the descriptors are
        // live and describe the validated shapes; (3) `perf` holds `ALGOS` entries and `n` is a
        // valid out-pointer; (4) the search allocates and frees its own memory.
        match k.dir {
            Direction::Forward if k.fused == Some(ConvActivation::Identity) => {
                // The fused op runs an identity activation with this algorithm only.
                let algo = sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
                plan.algo = Algo::Forward(algo);
                // SAFETY: (1) and (2) above; `work_bytes` is a valid out-pointer.
                unsafe {
                    sys::cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &mut plan.work_bytes)
                        .check("cudnnGetConvolutionForwardWorkspaceSize")?;
                }
            }
            Direction::Forward => {
                let mut perf = [zeroed_fwd(); ALGOS];
                // SAFETY: (1) to (4) above.
                unsafe {
                    if find {
                        sys::cudnnFindConvolutionForwardAlgorithm(
                            h,
                            xd,
                            wd,
                            cd,
                            yd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnFindConvolutionForwardAlgorithm")?;
                    } else {
                        sys::cudnnGetConvolutionForwardAlgorithm_v7(
                            h,
                            xd,
                            wd,
                            cd,
                            yd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnGetConvolutionForwardAlgorithm_v7")?;
                    }
                }
                let Some(p) = perf.iter().take(n.max(0) as usize).find(|p| p.status == ok) else { return Ok(None) };
                plan.algo = Algo::Forward(p.algo);
                // SAFETY: (1) and (2) above; `work_bytes` is a valid out-pointer.
                unsafe {
                    set_math(cd, tensor_cores, p.mathType)?;
                    sys::cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, p.algo, &mut plan.work_bytes)
                        .check("cudnnGetConvolutionForwardWorkspaceSize")?;
                }
            }
            Direction::BackwardData => {
                let mut perf = [zeroed_bwd_data(); ALGOS];
                // SAFETY: (1) to (4) above.
                unsafe {
                    if find {
                        sys::cudnnFindConvolutionBackwardDataAlgorithm(
                            h,
                            wd,
                            yd,
                            cd,
                            xd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnFindConvolutionBackwardDataAlgorithm")?;
                    } else {
                        sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                            h,
                            wd,
                            yd,
                            cd,
                            xd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnGetConvolutionBackwardDataAlgorithm_v7")?;
                    }
                }
                let Some(p) = perf.iter().take(n.max(0) as usize).find(|p| p.status == ok) else { return Ok(None) };
                plan.algo = Algo::BackwardData(p.algo);
                // SAFETY: (1) and (2) above; `work_bytes` is a valid out-pointer.
                unsafe {
                    set_math(cd, tensor_cores, p.mathType)?;
                    sys::cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, p.algo, &mut plan.work_bytes)
                        .check("cudnnGetConvolutionBackwardDataWorkspaceSize")?;
                }
            }
            Direction::BackwardFilter => {
                let mut perf = [zeroed_bwd_filter(); ALGOS];
                // SAFETY: (1) to (4) above.
                unsafe {
                    if find {
                        sys::cudnnFindConvolutionBackwardFilterAlgorithm(
                            h,
                            xd,
                            yd,
                            cd,
                            wd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnFindConvolutionBackwardFilterAlgorithm")?;
                    } else {
                        sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                            h,
                            xd,
                            yd,
                            cd,
                            wd,
                            ALGOS as c_int,
                            &mut n,
                            perf.as_mut_ptr(),
                        )
                        .check("cudnnGetConvolutionBackwardFilterAlgorithm_v7")?;
                    }
                }
                let Some(p) = perf.iter().take(n.max(0) as usize).find(|p| p.status == ok) else { return Ok(None) };
                plan.algo = Algo::BackwardFilter(p.algo);
                // SAFETY: (1) and (2) above; `work_bytes` is a valid out-pointer.
                unsafe {
                    set_math(cd, tensor_cores, p.mathType)?;
                    sys::cudnnGetConvolutionBackwardFilterWorkspaceSize(
                        h,
                        xd,
                        yd,
                        cd,
                        wd,
                        p.algo,
                        &mut plan.work_bytes,
                    )
                    .check("cudnnGetConvolutionBackwardFilterWorkspaceSize")?;
                }
            }
        }
        Ok(Some(plan))
    }

    /// Runs the plan's convolution: `out = alpha * op(a, b) + beta * out`, where for forward
    /// `(a, b, out)` is `(x, w, y)`, for backward-data `(w, dy, dx)`, for backward-filter
    /// `(x, dy, dw)`.
    ///
    /// NVIDIA: [`cudnnConvolutionForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnconvolutionforward),
    /// [`cudnnConvolutionBackwardData`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnconvolutionbackwarddata),
    /// [`cudnnConvolutionBackwardFilter`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnconvolutionbackwardfilter)
    ///
    /// # Safety
    /// (1) `handle` is live, bound to the op's stream, its context current; (2) the pointers are
    /// live device buffers of that context holding the plan's shapes, fenced on the stream; (3)
    /// `work` holds at least [`work_bytes`](Self::work_bytes) (or is null when that is 0), used
    /// by nothing else while the op runs.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run(
        &self,
        handle: &RawHandle,
        alpha: f32,
        a: *const c_void,
        b: *const c_void,
        beta: f32,
        out: *mut c_void,
        work: *mut c_void,
    ) -> Result<()> {
        let (h, al, be) = (handle.get(), &alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
        let (xd, wd, cd, yd, ws) = (self.x.get(), self.w.0.get(), self.conv.0.get(), self.y.get(), self.work_bytes);
        // SAFETY: the caller vouches for (1) to (3); the scalars are f32, as cuDNN takes them
        // for float, half and bfloat16 data, and outlive the call.
        unsafe {
            match self.algo {
                Algo::Forward(algo) => {
                    sys::cudnnConvolutionForward(h, al, xd, a, wd, b, cd, algo, work, ws, be, yd, out)
                        .check("cudnnConvolutionForward")
                }
                Algo::BackwardData(algo) => {
                    sys::cudnnConvolutionBackwardData(h, al, wd, a, yd, b, cd, algo, work, ws, be, xd, out)
                        .check("cudnnConvolutionBackwardData")
                }
                Algo::BackwardFilter(algo) => {
                    sys::cudnnConvolutionBackwardFilter(h, al, xd, a, yd, b, cd, algo, work, ws, be, wd, out)
                        .check("cudnnConvolutionBackwardFilter")
                }
            }
        }
    }
}

/// Gives the convolution the math type the chosen algorithm was ranked with, where tensor
/// cores are allowed; otherwise it keeps FMA math, so that no f32 convolution runs in TF32
/// unless asked to.
///
/// # Safety
/// `conv` is a live convolution descriptor.
unsafe fn set_math(
    conv: sys::cudnnConvolutionDescriptor_t,
    tensor_cores: bool,
    math: sys::cudnnMathType_t,
) -> Result<()> {
    if !tensor_cores {
        return Ok(());
    }
    // SAFETY: the caller vouches for the descriptor; `math` came from cuDNN.
    unsafe { sys::cudnnSetConvolutionMathType(conv, math) }.check("cudnnSetConvolutionMathType")
}

impl ConvPlan {
    /// Runs the plan's forward convolution fused with its epilogue:
    /// `y = act(alpha1 * conv(x, w) + alpha2 * z + bias)`, `bias` one value per output channel
    /// (of `bias_shape`, `1 x K x 1 x 1[ x 1]`).
    ///
    /// NVIDIA: [`cudnnConvolutionBiasActivationForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-cnn-library.html#cudnnconvolutionbiasactivationforward)
    ///
    /// # Safety
    /// As for [`run`](Self::run), with `z` (which may be `y`) holding the output shape and
    /// `bias` holding `bias_shape`, fenced on the stream.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn run_fused(
        &self,
        handle: &RawHandle,
        act: ConvActivation,
        alpha1: f32,
        x: *const c_void,
        w: *const c_void,
        alpha2: f32,
        z: *const c_void,
        bias_shape: &Shape,
        bias: *const c_void,
        y: *mut c_void,
        work: *mut c_void,
        dtype: CudnnType,
    ) -> Result<()> {
        let Algo::Forward(algo) = self.algo else {
            return Err(Error::invalid("conv", "a fused convolution needs a forward plan"));
        };
        let mode = match act {
            ConvActivation::Identity => sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY,
            ConvActivation::Relu => sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU,
        };
        let act = ActivationDesc::with(mode, 0.0)?;
        let b = TensorDesc::new(bias_shape, dtype)?;
        let (a1, a2) = (&alpha1 as *const f32 as *const c_void, &alpha2 as *const f32 as *const c_void);
        let (xd, wd, cd, yd) = (self.x.get(), self.w.0.get(), self.conv.0.get(), self.y.get());
        // SAFETY: the caller vouches for the handle, the buffers and the workspace; the
        // descriptors are live; the scalars are f32 and outlive the call.
        unsafe {
            sys::cudnnConvolutionBiasActivationForward(
                handle.get(),
                a1,
                xd,
                x,
                wd,
                w,
                cd,
                algo,
                work,
                self.work_bytes,
                a2,
                yd,
                z,
                b.get(),
                bias,
                act.0.get(),
                yd,
                y,
            )
        }
        .check("cudnnConvolutionBiasActivationForward")
    }
}

fn zeroed_fwd() -> sys::cudnnConvolutionFwdAlgoPerf_t {
    sys::cudnnConvolutionFwdAlgoPerf_t {
        algo: sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        status: sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
        time: 0.0,
        memory: 0,
        determinism: sys::cudnnDeterminism_t::CUDNN_NON_DETERMINISTIC,
        mathType: sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        reserved: [0; 3],
    }
}

fn zeroed_bwd_data() -> sys::cudnnConvolutionBwdDataAlgoPerf_t {
    sys::cudnnConvolutionBwdDataAlgoPerf_t {
        algo: sys::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        status: sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
        time: 0.0,
        memory: 0,
        determinism: sys::cudnnDeterminism_t::CUDNN_NON_DETERMINISTIC,
        mathType: sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        reserved: [0; 3],
    }
}

fn zeroed_bwd_filter() -> sys::cudnnConvolutionBwdFilterAlgoPerf_t {
    sys::cudnnConvolutionBwdFilterAlgoPerf_t {
        algo: sys::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
        status: sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED,
        time: 0.0,
        memory: 0,
        determinism: sys::cudnnDeterminism_t::CUDNN_NON_DETERMINISTIC,
        mathType: sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        reserved: [0; 3],
    }
}

/// An activation descriptor.
struct ActivationDesc(Owned<sys::cudnnActivationDescriptor_t>);

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
    fn with(m: sys::cudnnActivationMode_t, coef: f64) -> Result<ActivationDesc> {
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
pub(super) struct Backward {
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
pub(super) unsafe fn activation(
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
pub(super) unsafe fn softmax(
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
pub(super) unsafe fn pooling(
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

/// The pointers of a batch-norm call: the data side, the per-channel parameters and the
/// statistics (null where the call takes none).
pub(super) struct BatchNormArgs {
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
pub(super) enum BatchNormCall {
    Inference,
    /// The running statistics' exponential average factor.
    Training(f64),
    Backward,
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
pub(super) unsafe fn batch_norm(
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
    let (one, zero) = (1.0f32, 0.0f32);
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
            BatchNormCall::Backward => sys::cudnnBatchNormalizationBackward(
                h,
                mode,
                ptr(&alpha),
                ptr(&beta),
                ptr(&one),
                ptr(&zero),
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

/// `cudnnLRNCrossChannelForward` (`backward` `None`) or `cudnnLRNCrossChannelBackward`, every
/// tensor of `shape`.
///
/// NVIDIA: [`cudnnSetLRNDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnsetlrndescriptor),
/// [`cudnnLRNCrossChannelForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnlrncrosschannelforward),
/// [`cudnnLRNCrossChannelBackward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnnlrncrosschannelbackward)
///
/// # Safety
/// As for [`activation`].
pub(super) unsafe fn lrn(
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

/// Bytes of the random-number states dropout keeps on the device.
///
/// NVIDIA: [`cudnnDropoutGetStatesSize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutgetstatessize)
pub(super) fn dropout_states_bytes(handle: &RawHandle) -> Result<usize> {
    let mut n = 0usize;
    // SAFETY: a live handle; `n` is a valid out-pointer.
    unsafe { sys::cudnnDropoutGetStatesSize(handle.get(), &mut n) }.check("cudnnDropoutGetStatesSize")?;
    Ok(n)
}

/// Bytes of the reserve space (the mask) dropout of `shape` needs.
///
/// NVIDIA: [`cudnnDropoutGetReserveSpaceSize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-ops-library.html#cudnndropoutgetreservespacesize)
pub(super) fn dropout_reserve_bytes(shape: &Shape, dtype: CudnnType) -> Result<usize> {
    let t = TensorDesc::new(shape, dtype)?;
    let mut n = 0usize;
    // SAFETY: a live descriptor; `n` is a valid out-pointer.
    unsafe { sys::cudnnDropoutGetReserveSpaceSize(t.get(), &mut n) }.check("cudnnDropoutGetReserveSpaceSize")?;
    Ok(n)
}

/// What a dropout call does: set up the states, or run forward or backward.
pub(super) enum DropoutCall {
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
pub(super) unsafe fn dropout(
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
