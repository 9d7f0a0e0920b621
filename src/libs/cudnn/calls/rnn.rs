//! RNNs through cuDNN's v8 API: the RNN descriptor of a configuration (cached as a plan), the
//! RNN data descriptors of one call's sequence lengths, the weight space's sizes and
//! addresses, and the forward, backward-data and backward-weights calls.

use super::super::rnn::{RnnCell, RnnKey, RnnLayout};
use super::{data_type, RawHandle};
use crate::error::{DriverResultExt, Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::{c_int, c_void};

// SAFETY: cuDNN's descriptors may be used from any thread, one at a time.
unsafe impl RawObject for sys::cudnnRNNDescriptor_t {
    const DESTROY: &'static str = "cudnnDestroyRNNDescriptor";
    type Status = sys::cudnnStatus_t;

    unsafe fn destroy(self) -> sys::cudnnStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cudnnDestroyRNNDescriptor(self) }
    }
}

// SAFETY: as above.
unsafe impl RawObject for sys::cudnnRNNDataDescriptor_t {
    const DESTROY: &'static str = "cudnnDestroyRNNDataDescriptor";
    type Status = sys::cudnnStatus_t;

    unsafe fn destroy(self) -> sys::cudnnStatus_t {
        // SAFETY: the caller keeps `destroy`'s contract.
        unsafe { sys::cudnnDestroyRNNDataDescriptor(self) }
    }
}

/// `CUDNN_RNN_PADDED_IO_ENABLED`: the unpacked layouts need it; the packed one allows it.
const PADDED_IO: u32 = 1;

fn int(arg: &'static str, v: usize) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit cuDNN's 32-bit int")))
}

/// A 3-D packed tensor descriptor (`hx`, `cx` and the weight params).
fn tensor3(dims: [usize; 3], dtype: CudnnType) -> Result<Owned<sys::cudnnTensorDescriptor_t>> {
    let d = [int("hx", dims[0])?, int("hx", dims[1])?, int("hx", dims[2])?];
    let s = [d[1] * d[2], d[2], 1];
    let mut t: sys::cudnnTensorDescriptor_t = std::ptr::null_mut();
    // SAFETY: `t` is a valid out-pointer.
    unsafe { sys::cudnnCreateTensorDescriptor(&mut t) }.check("cudnnCreateTensorDescriptor")?;
    let owned = Owned::new(t);
    // SAFETY: (1) a fresh descriptor; (2) both arrays hold 3 entries and outlive the call.
    unsafe { sys::cudnnSetTensorNdDescriptor(t, data_type(dtype), 3, d.as_ptr(), s.as_ptr()) }
        .check("cudnnSetTensorNdDescriptor")?;
    Ok(owned)
}

/// An RNN plan: the RNN descriptor of one configuration key, with the (no-)dropout descriptor
/// it points to, the hidden-state descriptor and the weight space's size in bytes.
pub(crate) struct RnnPlan {
    rnn: Owned<sys::cudnnRNNDescriptor_t>,
    h: Owned<sys::cudnnTensorDescriptor_t>,
    // Read by cuDNN through the RNN descriptor: it lives as long as the plan.
    _dropout: Owned<sys::cudnnDropoutDescriptor_t>,
    pub weight_bytes: usize,
}

/// A call's pair of RNN data descriptors (`x`, `y`) for its sequence lengths.
pub(in crate::libs::cudnn) struct DataDescs {
    x: Owned<sys::cudnnRNNDataDescriptor_t>,
    y: Owned<sys::cudnnRNNDataDescriptor_t>,
}

impl RnnPlan {
    /// `cudnnCreateRNNDescriptor` and `cudnnSetRNNDescriptor_v8` (standard algorithm, linear
    /// input, two bias vectors, no projection, no dropout, padded IO), the hidden-state
    /// descriptor `[layers * directions, batch, hidden]`, and `cudnnGetRNNWeightSpaceSize`.
    /// `None` when cuDNN refuses the combination of types (`CUDNN_STATUS_NOT_SUPPORTED` or
    /// `CUDNN_STATUS_BAD_PARAM` from the setter on arguments validation accepted).
    ///
    /// NVIDIA: [`cudnnSetRNNDescriptor_v8`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnnsetrnndescriptor-v8),
    /// [`cudnnGetRNNWeightSpaceSize`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnngetrnnweightspacesize)
    ///
    /// # Safety
    /// `handle` is live, its context current, and used by this thread only.
    pub(in crate::libs::cudnn) unsafe fn make(handle: &RawHandle, k: &RnnKey) -> Result<Option<RnnPlan>> {
        let mut drop_d: sys::cudnnDropoutDescriptor_t = std::ptr::null_mut();
        // SAFETY: `drop_d` is a valid out-pointer.
        unsafe { sys::cudnnCreateDropoutDescriptor(&mut drop_d) }.check("cudnnCreateDropoutDescriptor")?;
        let dropout = Owned::new(drop_d);
        // SAFETY: (1) the caller vouches for the handle; (2) a fresh descriptor; with a
        // probability of 0 cuDNN takes no states.
        unsafe { sys::cudnnSetDropoutDescriptor(drop_d, handle.get(), 0.0, std::ptr::null_mut(), 0, 0) }
            .check("cudnnSetDropoutDescriptor")?;
        let mut r: sys::cudnnRNNDescriptor_t = std::ptr::null_mut();
        // SAFETY: `r` is a valid out-pointer.
        unsafe { sys::cudnnCreateRNNDescriptor(&mut r) }.check("cudnnCreateRNNDescriptor")?;
        let rnn = Owned::new(r);
        let cell = match k.cell {
            RnnCell::Lstm => sys::cudnnRNNMode_t::CUDNN_LSTM,
            RnnCell::Gru => sys::cudnnRNNMode_t::CUDNN_GRU,
            RnnCell::Relu => sys::cudnnRNNMode_t::CUDNN_RNN_RELU,
            RnnCell::Tanh => sys::cudnnRNNMode_t::CUDNN_RNN_TANH,
        };
        let dir = if k.bidirectional {
            sys::cudnnDirectionMode_t::CUDNN_BIDIRECTIONAL
        } else {
            sys::cudnnDirectionMode_t::CUDNN_UNIDIRECTIONAL
        };
        // f32 data computes in f32 (FMA unless TF32 is allowed); the half types compute in f32
        // on tensor cores.
        let math = match (k.dtype, k.tf32) {
            (CudnnType::Float, false) => sys::cudnnMathType_t::CUDNN_FMA_MATH,
            (CudnnType::Float, true) => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
            _ => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        };
        let (input, hidden, layers) = (int("rnn", k.input)?, int("rnn", k.hidden)?, int("rnn", k.layers)?);
        // SAFETY: (1) a fresh RNN descriptor and a set dropout descriptor that outlives it (both
        // in the plan); (2) sizes validated positive and within i32.
        let status = unsafe {
            sys::cudnnSetRNNDescriptor_v8(
                r,
                sys::cudnnRNNAlgo_t::CUDNN_RNN_ALGO_STANDARD,
                cell,
                sys::cudnnRNNBiasMode_t::CUDNN_RNN_DOUBLE_BIAS,
                dir,
                sys::cudnnRNNInputMode_t::CUDNN_LINEAR_INPUT,
                data_type(k.dtype),
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                math,
                input,
                hidden,
                hidden,
                layers,
                drop_d,
                PADDED_IO,
            )
        };
        match status {
            sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED | sys::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM => {
                return Ok(None)
            }
            s => s.check("cudnnSetRNNDescriptor_v8")?,
        }
        let pseudo = k.layers * if k.bidirectional { 2 } else { 1 };
        let h = tensor3([pseudo, k.batch, k.hidden], k.dtype)?;
        let mut weight_bytes = 0usize;
        // SAFETY: (1) the caller vouches for the handle; (2) a set descriptor; (3) a valid
        // out-pointer.
        unsafe { sys::cudnnGetRNNWeightSpaceSize(handle.get(), r, &mut weight_bytes) }
            .check("cudnnGetRNNWeightSpaceSize")?;
        Ok(Some(RnnPlan { rnn, h, _dropout: dropout, weight_bytes }))
    }

    /// The data descriptors of `x` (`input` wide) and `y` (`output` wide) for `lengths`, in
    /// the key's layout, `y`'s padding filled with zeros.
    ///
    /// NVIDIA: [`cudnnSetRNNDataDescriptor`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnnsetrnndatadescriptor)
    pub(in crate::libs::cudnn) fn data(&self, k: &RnnKey, lengths: &[usize]) -> Result<DataDescs> {
        let lens = lengths.iter().map(|&l| int("seqs", l)).collect::<Result<Vec<_>>>()?;
        let out = k.hidden.checked_mul(if k.bidirectional { 2 } else { 1 });
        let out = out.ok_or_else(|| Error::invalid("rnn", "the output width overflows"))?;
        let layout = match k.layout {
            RnnLayout::SeqMajor => sys::cudnnRNNDataLayout_t::CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
            RnnLayout::BatchMajor => sys::cudnnRNNDataLayout_t::CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
            RnnLayout::SeqMajorPacked => sys::cudnnRNNDataLayout_t::CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
        };
        // Packed data has no padding, and cuDNN refuses a packed descriptor whose maximum is
        // not the longest sequence's length (BAD_PARAM).
        let max_seq = match k.layout {
            RnnLayout::SeqMajorPacked => lengths.iter().copied().max().unwrap_or(k.max_seq),
            RnnLayout::SeqMajor | RnnLayout::BatchMajor => k.max_seq,
        };
        let make = |width: usize| -> Result<Owned<sys::cudnnRNNDataDescriptor_t>> {
            let mut d: sys::cudnnRNNDataDescriptor_t = std::ptr::null_mut();
            // SAFETY: `d` is a valid out-pointer.
            unsafe { sys::cudnnCreateRNNDataDescriptor(&mut d) }.check("cudnnCreateRNNDataDescriptor")?;
            let owned = Owned::new(d);
            // All-zero bits are 0.0 in f32, f16 and bf16 alike.
            let mut fill = 0u64;
            // SAFETY: (1) a fresh descriptor; (2) `lens` holds `batch` lengths and outlives the
            // call; (3) `fill` is at least one element wide, read during the call only.
            unsafe {
                sys::cudnnSetRNNDataDescriptor(
                    d,
                    data_type(k.dtype),
                    layout,
                    int("seqs", max_seq)?,
                    int("seqs", k.batch)?,
                    int("rnn", width)?,
                    lens.as_ptr(),
                    &mut fill as *mut u64 as *mut c_void,
                )
            }
            .check("cudnnSetRNNDataDescriptor")?;
            Ok(owned)
        };
        Ok(DataDescs { x: make(k.input)?, y: make(out)? })
    }

    /// Bytes of the work space and of the reserve space (training) the calls on `data` need.
    ///
    /// NVIDIA: [`cudnnGetRNNTempSpaceSizes`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnngetrnntempspacesizes)
    ///
    /// # Safety
    /// `handle` is live, its context current, and used by this thread only.
    pub(in crate::libs::cudnn) unsafe fn temp_sizes(
        &self,
        handle: &RawHandle,
        data: &DataDescs,
        training: bool,
    ) -> Result<(usize, usize)> {
        let mode = if training {
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING
        } else {
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE
        };
        let (mut work, mut reserve) = (0usize, 0usize);
        // SAFETY: (1) the caller vouches for the handle; (2) live descriptors; (3) valid
        // out-pointers.
        unsafe {
            sys::cudnnGetRNNTempSpaceSizes(handle.get(), self.rnn.get(), mode, data.x.get(), &mut work, &mut reserve)
        }
        .check("cudnnGetRNNTempSpaceSizes")?;
        Ok((work, if training { reserve } else { 0 }))
    }

    /// Where linear layer `lin` of pseudo-layer `pseudo` lies in the weight space, in bytes
    /// from its start, with the element counts of the matrix and the bias,
    /// as cuDNN reports them for a weight space at an aligned stand-in address (cuDNN computes
    /// the addresses without reading the space).
    ///
    /// NVIDIA: [`cudnnGetRNNWeightParams`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnngetrnnweightparams)
    ///
    /// # Safety
    /// `handle` is live, its context current, and used by this thread only.
    pub(in crate::libs::cudnn) unsafe fn weight_params(
        &self,
        handle: &RawHandle,
        dtype: CudnnType,
        pseudo: usize,
        lin: usize,
    ) -> Result<ParamPlace> {
        const BASE: usize = 1 << 30;
        let m = tensor3([1, 1, 1], dtype)?;
        let b = tensor3([1, 1, 1], dtype)?;
        let (mut ma, mut ba): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: (1) the caller vouches for the handle; (2) live descriptors; (3) the weight
        // space is a stand-in address cuDNN only offsets (it reads no memory there); (4) valid
        // out-pointers.
        unsafe {
            sys::cudnnGetRNNWeightParams(
                handle.get(),
                self.rnn.get(),
                int("layer", pseudo)?,
                self.weight_bytes,
                BASE as *const c_void,
                int("lin", lin)?,
                m.get(),
                &mut ma,
                b.get(),
                &mut ba,
            )
        }
        .check("cudnnGetRNNWeightParams")?;
        // The element count of a descriptor cuDNN filled in, whatever its rank.
        let count = |t: &Owned<sys::cudnnTensorDescriptor_t>| -> Result<usize> {
            const MAX: usize = 8;
            let (mut dt, mut n) = (sys::cudnnDataType_t::CUDNN_DATA_FLOAT, 0 as c_int);
            let (mut d, mut s) = ([0 as c_int; MAX], [0 as c_int; MAX]);
            // SAFETY: a live descriptor; the arrays hold the `MAX` entries asked for.
            unsafe {
                sys::cudnnGetTensorNdDescriptor(t.get(), MAX as c_int, &mut dt, &mut n, d.as_mut_ptr(), s.as_mut_ptr())
            }
            .check("cudnnGetTensorNdDescriptor")?;
            let rank = usize::try_from(n).unwrap_or(0).min(MAX);
            Ok(d[..rank].iter().map(|&v| usize::try_from(v).unwrap_or(0)).product())
        };
        let off = |a: *mut c_void| {
            (a as usize)
                .checked_sub(BASE)
                .filter(|&o| o < self.weight_bytes)
                .ok_or_else(|| Error::library("cudnnGetRNNWeightParams", "an address outside the weight space"))
        };
        Ok(ParamPlace { matrix: off(ma)?, matrix_len: count(&m)?, bias: off(ba)?, bias_len: count(&b)? })
    }
}

/// Where one linear layer's parameters lie in the weight space, in bytes from its start.
/// The lengths are the element counts of the descriptors cuDNN describes them with.
pub(in crate::libs::cudnn) struct ParamPlace {
    pub matrix: usize,
    pub matrix_len: usize,
    pub bias: usize,
    pub bias_len: usize,
}

/// The loaded cuDNN's version (`major * 10000 + minor * 100 + patch`).
///
/// NVIDIA: [`cudnnGetVersion`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html#cudnngetversion)
pub(in crate::libs::cudnn) fn version() -> usize {
    // SAFETY: no arguments; the library was found loadable when the handle was made.
    unsafe { sys::cudnnGetVersion() }
}

/// The pointers of an RNN call (null where the call leaves one out).
pub(in crate::libs::cudnn) struct RnnArgs {
    pub seqs: *const i32,
    pub x: *mut c_void,
    pub y: *mut c_void,
    pub hx: *const c_void,
    pub cx: *const c_void,
    pub hy: *mut c_void,
    pub cy: *mut c_void,
    pub dy: *const c_void,
    pub dhy: *const c_void,
    pub dcy: *const c_void,
    pub weights: *mut c_void,
    pub weight_bytes: usize,
    pub work: *mut c_void,
    pub work_bytes: usize,
    pub reserve: *mut c_void,
    pub reserve_bytes: usize,
}

/// Which RNN call.
#[derive(Clone, Copy, Debug)]
pub(in crate::libs::cudnn) enum RnnCall {
    /// Forward; with a reserve space, for training.
    Forward { training: bool },
    /// Backward data: `x` is `dx`, `hy` is `dhx`, `cy` is `dcx`.
    BackwardData,
    /// Backward weights into `weights` (the gradient), added to it or, with `overwrite`,
    /// replacing it (zeroed first on the stream: cuDNN adds only).
    BackwardWeights { overwrite: bool },
}

/// `cudnnRNNForward`, `cudnnRNNBackwardData_v8` or `cudnnRNNBackwardWeights_v8`.
///
/// NVIDIA: [`cudnnRNNForward`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnnrnnforward),
/// [`cudnnRNNBackwardData_v8`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnnrnnbackwarddata-v8),
/// [`cudnnRNNBackwardWeights_v8`](https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-adv-library.html#cudnnrnnbackwardweights-v8)
///
/// # Safety
/// (1) `handle` is live, bound to the op's stream, its context current; (2) every non-null
/// pointer is a live device buffer of that context holding what `plan` and `data` describe
/// (`seqs` the batch's lengths as i32), the work space and reserve space at least their byte
/// counts, all fenced on the stream.
pub(in crate::libs::cudnn) unsafe fn rnn(
    handle: &RawHandle,
    plan: &RnnPlan,
    data: &DataDescs,
    call: RnnCall,
    a: &RnnArgs,
) -> Result<()> {
    let (h, r, xd, yd, hd) = (handle.get(), plan.rnn.get(), data.x.get(), data.y.get(), plan.h.get());
    // SAFETY: the caller vouches for (1) and (2); the descriptors are live.
    unsafe {
        match call {
            RnnCall::Forward { training } => {
                let mode = if training {
                    sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING
                } else {
                    sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE
                };
                sys::cudnnRNNForward(
                    h,
                    r,
                    mode,
                    a.seqs,
                    xd,
                    a.x,
                    yd,
                    a.y,
                    hd,
                    a.hx,
                    a.hy,
                    hd,
                    a.cx,
                    a.cy,
                    a.weight_bytes,
                    a.weights,
                    a.work_bytes,
                    a.work,
                    a.reserve_bytes,
                    a.reserve,
                )
                .check("cudnnRNNForward")
            }
            RnnCall::BackwardData => sys::cudnnRNNBackwardData_v8(
                h,
                r,
                a.seqs,
                yd,
                a.y,
                a.dy,
                xd,
                a.x,
                hd,
                a.hx,
                a.dhy,
                a.hy,
                hd,
                a.cx,
                a.dcy,
                a.cy,
                a.weight_bytes,
                a.weights,
                a.work_bytes,
                a.work,
                a.reserve_bytes,
                a.reserve,
            )
            .check("cudnnRNNBackwardData_v8"),
            RnnCall::BackwardWeights { overwrite } => {
                if overwrite {
                    let mut stream: sys::cudaStream_t = std::ptr::null_mut();
                    sys::cudnnGetStream(h, &mut stream).check("cudnnGetStream")?;
                    cudarc::driver::result::memset_d8_async(
                        a.weights as cudarc::driver::sys::CUdeviceptr,
                        0,
                        a.weight_bytes,
                        stream as cudarc::driver::sys::CUstream,
                    )
                    .call("cuMemsetD8Async")?;
                }
                sys::cudnnRNNBackwardWeights_v8(
                    h,
                    r,
                    sys::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
                    a.seqs,
                    xd,
                    a.x,
                    hd,
                    a.hx,
                    yd,
                    a.y,
                    a.weight_bytes,
                    a.weights,
                    a.work_bytes,
                    a.work,
                    a.reserve_bytes,
                    a.reserve,
                )
                .check("cudnnRNNBackwardWeights_v8")
            }
        }
    }
}
