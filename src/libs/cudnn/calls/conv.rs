//! Convolution plans: the algorithm chosen for a shape key (heuristics or measured), its
//! descriptors and workspace, and the three directions' calls.

use super::super::conv::{AlgoSearch, ConvActivation, ConvKey, Direction};
use super::super::tensor::Shape;
use super::pointwise::ActivationDesc;
use super::{ConvDesc, FilterDesc, RawHandle, TensorDesc};
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::{c_int, c_void};

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
    pub(in crate::libs::cudnn) unsafe fn make(handle: &RawHandle, k: &ConvKey) -> Result<Option<ConvPlan>> {
        let (dtype, tensor_cores, find) = (k.dtype, k.tensor_cores, k.search == AlgoSearch::Find);
        let mut plan = ConvPlan {
            x: TensorDesc::new(&k.x, dtype)?,
            w: FilterDesc::new(&k.w, dtype)?,
            conv: ConvDesc::new(&k.geo, tensor_cores, dtype != CudnnType::Float)?,
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
    pub(in crate::libs::cudnn) unsafe fn run(
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
    pub(in crate::libs::cudnn) unsafe fn run_fused(
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
