//! The cuDNN call layer: every cuDNN call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. With `graph::backend`, `graph::builder` and `graph::plan`
//! (the backend descriptors and the graph API's enums), the only code in the crate that
//! touches `cudarc::cudnn::sys`.
//!
//! Every wrapper that takes the handle needs the device's context current on the calling
//! thread (the op path binds it) and the handle used by one thread at a time (`Cudnn` methods
//! take `&mut self`). Descriptors are host objects: cuDNN reads them during the call that takes
//! them, so one made for a call may be destroyed once the call has returned.
//!
//! Files: this one holds the handle and the tensor, filter and convolution descriptors; `conv`
//! the convolution plans; `pointwise` activation, softmax, pooling and LRN; `norm` batch norm
//! and dropout.

use super::conv::Geometry;
use super::tensor::{Layout, Shape};
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cudnn::sys;
use std::ffi::c_int;

mod conv;
mod norm;
mod pointwise;
mod rnn;

pub(crate) use conv::ConvPlan;
pub(super) use norm::{
    batch_norm, dropout, dropout_reserve_bytes, dropout_states_bytes, fill_f32, transform, BatchNormArgs,
    BatchNormCall, DropoutCall,
};
pub(super) use pointwise::{activation, lrn, pooling, softmax, Backward};
pub(crate) use rnn::RnnPlan;
pub(super) use rnn::{rnn, version, RnnArgs, RnnCall};

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
    ($($t:ty => $destroy:ident $(, $synchronizes:literal)?;)*) => {$(
        // SAFETY: cuDNN's handles and descriptors may be used from any thread, one at a time.
        unsafe impl RawObject for $t {
            const DESTROY: &'static str = stringify!($destroy);
            $(const SYNCHRONIZES: bool = $synchronizes;)?
            type Status = sys::cudnnStatus_t;

            unsafe fn destroy(self) -> sys::cudnnStatus_t {
                // SAFETY: the caller keeps `destroy`'s contract.
                unsafe { sys::$destroy(self) }
            }
        }
    )*};
}
raw_objects! {
    sys::cudnnHandle_t => cudnnDestroy, true;
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
    pub(super) fn new(geo: &Geometry, tensor_cores: bool, half: bool) -> Result<ConvDesc> {
        let (pad, stride, dil) = (ints(&geo.pad)?, ints(&geo.stride)?, ints(&geo.dilation)?);
        let groups = c_int::try_from(geo.groups).map_err(|_| Error::invalid("conv", "groups does not fit i32"))?;
        let mut d: sys::cudnnConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer.
        unsafe { sys::cudnnCreateConvolutionDescriptor(&mut d) }.check("cudnnCreateConvolutionDescriptor")?;
        let desc = ConvDesc(Owned::new(d));
        // Half types need TENSOR_OP_MATH for the heuristics to rank tensor-core algorithms at
        // all: under DEFAULT_MATH the legacy API ran a bf16 ResNet convolution on an H100 at 30
        // TFLOP/s, on FMA units. f32 with TF32 allowed takes DEFAULT_MATH, which permits TF32.
        let math = match (tensor_cores, half) {
            (true, true) => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
            (true, false) => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
            (false, _) => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        };
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
