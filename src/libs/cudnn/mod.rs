//! cuDNN 9 through its legacy API: convolutions forward, backward-data and backward-filter
//! (2-D and 3-D, padding, stride, dilation, groups, depthwise), the fused convolution + bias +
//! activation (identity or ReLU, with an optional residual), activations, softmax, pooling, LRN
//! across channels and dropout (its random-number states a tracked buffer), forward and
//! backward, and batch normalization per channel (inference, training with the running
//! statistics, backward; parameters and statistics in f32), in f32, f16 and bf16 (the half
//! types compute in f32), on channels-first (NCHW, NCDHW) and channels-last (NHWC, NDHWC)
//! tensors.
//!
//! Operands are [`TensorView`]s: a buffer seen with a [`Shape`] (dims in logical order,
//! `N, C, [D,] H, W`, and a [`Layout`]). Every op checks its operands before it records
//! anything: shapes against each other (channels, groups, the output shape a convolution or a
//! pooling gives), buffers against their shapes, written operands against the inputs; the
//! error names the argument.
//!
//! A convolution's algorithm is chosen once per shape key (direction, element type, the three
//! shapes and layouts, padding, strides, dilation, groups, math, the fused activation) and
//! cached with its descriptors in a bounded plan cache, by cuDNN's heuristics or, with
//! [`AlgoSearch::Find`], by measuring the candidates ([`Cudnn::set_algo_search`]). Its
//! workspace comes from the stream's shared workspace, declared on the op's recorder. f32
//! convolutions run on FMA kernels unless [`Cudnn::set_tf32`] allows TF32 tensor cores; f16
//! and bf16 ones use tensor cores.
//!
//! On the simulator every op computes its result on the CPU, on the op's simulated stream:
//! convolutions as direct loops, inputs read exactly as f64, evaluated in f64, each stored
//! element rounded once to the element type. Results match the GPU's to the type's
//! tolerance (max pooling's ties and the fast softmax's rounding may differ in the last
//! bits). No plans are made there and no workspace is taken ([`Cudnn::plans_made`] stays 0).
//!
//! cuDNN is loaded at run time (`libcudnn.so`, or `libcudnn.so.9` as the `nvidia-cudnn-cu13`
//! wheel ships it: `. tools/cuda-libs-env` puts its folder on `LD_LIBRARY_PATH`). Without it
//! every op on a CUDA device fails with
//! [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable).
//!
//! Attention is the graph (backend) API's scaled dot-product attention
//! ([`Cudnn::sdpa_forward`], [`Cudnn::sdpa_backward`], see the `graph` module): the legacy
//! multi-head attention API is deprecated in cuDNN 9 and not wrapped.
//!
//! RNNs ([`Rnn`]: LSTM, GRU, ReLU and tanh cells, one or two directions, several layers,
//! variable sequence lengths) run through cuDNN's v8 RNN API: forward for inference and
//! training, backward data and backward weights, the weight space and the reserve space
//! tracked buffers the user owns ([`Cudnn::rnn_weight_layout`] places each matrix and bias),
//! the RNN descriptors cached per configuration. On the simulator they compute in f64.
//!
//! ```
//! use cusched::cudnn::{Activation, ActivationMode, Convolution, Shape, TensorView};
//! use cusched::{Device, Handles, SimConfig};
//!
//! let device = Device::sim(SimConfig::default())?;
//! let s = device.new_stream()?;
//! let mut h = Handles::new(&device, s)?;
//! // One 3x3 image, one 2x2 filter of ones: each output sums a 2x2 window.
//! let x = device.upload(s, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])?;
//! let w = device.upload(s, &[1.0f32; 4])?;
//! let y = device.alloc_zeros::<f32>(s, 4)?;
//! let conv = Convolution::new();
//! let (xs, ws) = (Shape::nchw(1, 1, 3, 3), Shape::nchw(1, 1, 2, 2));
//! let ys = conv.output_shape(&xs, &ws)?;
//! let dnn = h.cudnn()?;
//! dnn.conv_forward(&conv, &TensorView::new(&x, xs), &TensorView::new(&w, ws), &TensorView::new(&y, ys.clone()))?;
//! // ReLU in place, then read back.
//! let relu = Activation::new(ActivationMode::Relu);
//! dnn.activation_forward(&relu, &TensorView::new(&y, ys.clone()), &TensorView::new(&y, ys))?.wait()?;
//! assert_eq!(y.download(s)?, [12.0, 16.0, 24.0, 28.0]);
//! # Ok::<(), cusched::Error>(())
//! ```
//!
//! Files: this one holds the state; `tensor` the operands, `conv` the convolutions, `ops`
//! activations, softmax, pooling and LRN, `norm` batch normalization, `dropout` dropout,
//! `rnn` the RNNs (`sim_rnn` their simulation), `calls` the cuDNN calls, `graph` the graph
//! (backend) API and attention, `sim` the simulator's computations.

mod calls;
mod conv;
mod dropout;
mod graph;
mod group_norm;
mod norm;
mod ops;
mod rnn;
mod sim;
mod sim_rnn;
mod tensor;

pub use crate::memory::{F8E4M3, F8E5M2};
pub use conv::{AlgoSearch, ConvActivation, Convolution};
pub use dropout::Dropout;
pub use graph::{
    Attention, AttnDropout, AttnFp8, AttnTensor, Fp8Attention, MatmulActivation, MatmulBiasAct, NormKind, NormStats,
    RowNorm, SdpaGrads, SeqLens,
};
pub use norm::{BatchNorm, RunningStats, SavedStats};
pub use ops::{Activation, ActivationMode, Lrn, Pooling, PoolingMode, Softmax, SoftmaxAlgo, SoftmaxMode};
pub use rnn::{
    Rnn, RnnBias, RnnCell, RnnData, RnnGrads, RnnLayout, RnnMatrix, RnnWeightLayout, SeqLengths, WeightGrad,
};
pub use tensor::{DnnElement, Layout, Shape, TensorView};

use super::plan_cache::PlanCache;
use super::workspace::Workspace;
use super::{Library, OpStream, StreamLibrary};
use crate::device::StreamId;
use crate::error::Result;
use calls::{ConvPlan, RawHandle, RnnPlan};
use conv::ConvKey;
use rnn::RnnKey;

/// The name errors give: the file to install is part of it.
const NAME: &str = "cuDNN (libcudnn.so.9)";

/// What the reaper destroys: the plans, then the handle that made them.
pub(crate) struct Objects {
    _plans: Vec<ConvPlan>,
    _rnn_plans: Vec<RnnPlan>,
    _graphs: Vec<graph::GraphPlan>,
    _handle: RawHandle,
}

/// A stream's cuDNN handle, convolution plans and workspace. Get it from
/// [`crate::Handles::cudnn`].
pub struct Cudnn {
    op: OpStream,
    raw: Option<RawHandle>,
    plans: PlanCache<ConvKey, ConvPlan>,
    rnn_plans: PlanCache<RnnKey, RnnPlan>,
    graphs: PlanCache<graph::GraphSpec, graph::GraphPlan>,
    work: Workspace,
    search: AlgoSearch,
    tf32: bool,
}

impl StreamLibrary for Cudnn {
    const LIBRARY: Library = Library {
        name: NAME,
        hint: "install cuDNN 9 (libcudnn.so.9, e.g. from the nvidia-cudnn-cu13 wheel) and put its lib folder on \
               LD_LIBRARY_PATH (`. tools/cuda-libs-env` finds the wheel's)",
        present: calls::is_present,
        objects: "a cuDNN handle, convolution plans and graph execution plans",
    };
    type Objects = Objects;

    fn create(op: OpStream) -> Result<Cudnn> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let stream = op.bound_stream()?;
            // SAFETY: the stream is live in the bound context and outlives the handle (the
            // device keeps its streams until every library state is gone).
            Some(unsafe { RawHandle::create(stream.cu_stream()) }?)
        };
        Ok(Cudnn {
            op,
            raw,
            plans: PlanCache::new(64, "an evicted cuDNN convolution plan"),
            rnn_plans: PlanCache::new(16, "an evicted cuDNN RNN descriptor"),
            graphs: PlanCache::new(64, "an evicted cuDNN graph execution plan"),
            work: Workspace::default(),
            search: AlgoSearch::default(),
            tf32: false,
        })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Objects> {
        let handle = self.raw.take()?;
        Some(Objects {
            _plans: self.plans.take_all().unwrap_or_default(),
            _rnn_plans: self.rnn_plans.take_all().unwrap_or_default(),
            _graphs: self.graphs.take_all().unwrap_or_default(),
            _handle: handle,
        })
    }
}

impl std::fmt::Debug for Cudnn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cudnn({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.plans.capacity())
    }
}

impl Cudnn {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }

    /// Convolution plans currently cached.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    /// Convolution plans made since the handle was created (a cache hit makes none).
    pub fn plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Bytes of the shared workspace (the largest plan's need so far).
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Bounds the plan cache (at least 1); the least recently used plans beyond it are freed.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        self.plans.set_capacity(capacity, &self.op)
    }

    /// How later plans choose their algorithm (heuristics by default).
    pub fn set_algo_search(&mut self, search: AlgoSearch) {
        self.search = search;
    }

    /// Whether later f32 convolution plans may use TF32 tensor cores (off by default: FMA
    /// kernels, f32 results; on, several times faster with about three decimal digits of input
    /// precision). The simulator computes exactly either way.
    pub fn set_tf32(&mut self, tf32: bool) {
        self.tf32 = tf32;
    }

    /// The raw cuDNN handle, for calls cusched does not wrap. It is bound to
    /// [`stream`](Self::stream); declare the calls' buffer uses on a
    /// [`crate::LaunchRecorder`] on that stream yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current,
    /// and use a workspace of your own. On the simulator, which has no cuDNN, it fails with
    /// [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable).
    pub fn cudnn_handle(&self) -> Result<cudarc::cudnn::sys::cudnnHandle_t> {
        self.handle().map(|h| h.get())
    }

    /// The handle (CUDA only).
    fn handle(&self) -> Result<&RawHandle> {
        self.raw.as_ref().ok_or_else(|| self.op.unavailable_on_sim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_library_the_error_names_libcudnn() {
        let lib = <Cudnn as StreamLibrary>::LIBRARY;
        let msg = crate::libs::unavailable::<Cudnn>().to_string();
        assert!(msg.contains("libcudnn.so.9"), "{msg}");
        assert!(lib.hint.contains("LD_LIBRARY_PATH"), "{}", lib.hint);
    }
}
