//! Recurrent networks: LSTM, GRU and plain ReLU or tanh cells, one or two directions, several
//! layers, over padded sequences of per-sequence lengths ([`Rnn`], [`SeqLengths`]); forward
//! for inference and training, backward data and backward weights.
//!
//! The equations, data layouts, weight space and reserve space are documented on [`Rnn`].

use super::calls::{self, RnnArgs, RnnCall, RnnPlan};
use super::tensor::DnnElement;
use super::{sim_rnn, Cudnn};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::plan_cache::PlanCache;
use crate::libs::{dptr, record, validate, OpStream};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

/// The cell of a recurrent network (cuDNN's `cudnnRNNMode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RnnCell {
    /// Long short-term memory: gates `i, f, g, o`, a cell state `c`.
    Lstm,
    /// Gated recurrent unit: gates `r, z, n`, the reset gate applied after the recurrent
    /// matrix product.
    Gru,
    /// `h' = max(0, W x + bW + R h + bR)`.
    Relu,
    /// `h' = tanh(W x + bW + R h + bR)`.
    Tanh,
}

impl RnnCell {
    /// Linear layers (matrix + bias pairs) per pseudo-layer: the input ones `0..n/2`, then the
    /// recurrent ones.
    pub fn linear_layers(self) -> usize {
        match self {
            RnnCell::Lstm => 8,
            RnnCell::Gru => 6,
            RnnCell::Relu | RnnCell::Tanh => 2,
        }
    }
}

/// How `x` and `y` lie in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RnnLayout {
    /// `max_len x batch x width`, step-major, padded to the longest sequence.
    #[default]
    SeqMajor,
    /// `batch x max_len x width`, padded to the longest sequence.
    BatchMajor,
    /// Step-major without padding: step `t` holds, in batch order, the sequences longer than
    /// `t`, so the lengths must not increase along the batch (longest first); `x` holds
    /// `sum(lengths) x input` elements.
    SeqMajorPacked,
}

/// Whether backward weights adds the gradient to `dweights` or replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightGrad {
    /// `dweights += gradient` (accumulating over batches).
    Accumulate,
    /// `dweights = gradient`.
    Overwrite,
}

/// A recurrent network's configuration: cell, input size, hidden size, layers, directions and
/// data layout.
///
/// # Equations
/// At each step `t` of a sequence, with `x` the layer's input (the data for layer 0, the
/// previous layer's output above), `h` the previous hidden state, `W_k`/`R_k` linear layer
/// `k`'s input and recurrent matrices and `bW_k`/`bR_k` their biases, `σ` the logistic
/// function and `∘` the element-wise product (cuDNN's `cudnnRNNMode_t`):
/// - ReLU / tanh (linear layers 0 `W`, 1 `R`): `h' = act(W x + bW + R h + bR)`.
/// - LSTM (0–3 input, 4–7 recurrent; gates `i, f, g, o` in that order):
///   `i = σ(W_0 x + bW_0 + R_4 h + bR_4)`, `f = σ(…_1, …_5)`, `g = tanh(…_2, …_6)`,
///   `o = σ(…_3, …_7)`, `c' = f ∘ c + i ∘ g`, `h' = o ∘ tanh(c')`.
/// - GRU (0–2 input, 3–5 recurrent; reset `r`, update `z`, new `n`):
///   `r = σ(W_0 x + bW_0 + R_3 h + bR_3)`, `z = σ(W_1 x + bW_1 + R_4 h + bR_4)`,
///   `n = tanh(W_2 x + bW_2 + r ∘ (R_5 h + bR_5))`, `h' = (1 − z) ∘ n + z ∘ h`.
///
/// The reverse direction of a bidirectional layer runs each sequence from its last valid step
/// to its first; a layer's output is the forward direction's `h` followed by the reverse
/// one's.
///
/// # Data
/// `x` is `max_len x batch x input` (sequence-major) or `batch x max_len x input`
/// (batch-major), padded: sequence `b` holds `lengths[b]` valid steps, and `y`
/// (`output = hidden * directions` wide) is zero at the padded steps. Packed sequence-major
/// data ([`RnnLayout::SeqMajorPacked`]) has no padding: `sum(lengths)` steps, the longest
/// sequences first. `hx`, `cx`, `hy`, `cy`
/// are `layers * directions x batch x hidden` (pseudo-layer `layer * directions + direction`);
/// a left-out `hx` or `cx` is zero, a left-out `hy` or `cy` is not written. `hy` holds each
/// sequence's state after its last valid step (for the reverse direction, after step 0).
///
/// Data is f32, f16 or bf16, computed in f32 (f32 data on FMA kernels unless
/// [`Cudnn::set_tf32`] allows TF32, the half types on tensor cores). On a GPU, bf16 needs cuDNN
/// 9.13 or later; an older one gives [`Error::Unsupported`](crate::Error::Unsupported) before
/// anything is recorded.
///
/// # Weight space
/// One buffer of [`RnnWeightLayout::len`] elements the user owns and initializes: for each
/// pseudo-layer in order, the matrices of linear layers `0..n` (row-major, `hidden` rows;
/// `input` columns for layer 0's input matrices, `output` for the layers above, `hidden` for
/// the recurrent ones); after all of them, the biases (`hidden` each) in the same order. [`Cudnn::rnn_weight_layout`]
/// gives every matrix's and bias's offset: on a GPU as cuDNN reports them
/// (`cudnnGetRNNWeightParams`), on the simulator computed from this layout; code that writes
/// weights through it runs alike on both. The gradient `dweights` has the same layout.
///
/// # Reserve space
/// Training needs a reserve buffer of [`Cudnn::rnn_reserve_bytes`] bytes: the forward op in
/// training mode writes it, backward data reads and updates it, backward weights reads it, so
/// they run in that order on the same `seqs`, `x` and `hx`. The work space comes from the
/// stream's shared workspace.
///
/// # Example
/// ```
/// use cusched::cudnn::{Rnn, RnnCell, RnnData};
/// use cusched::{Device, Handles, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.new_stream()?;
/// let mut h = Handles::new(&device, s)?;
/// let dnn = h.cudnn()?;
/// // A tanh cell of input 1 and hidden 1 over one sequence of 3 steps.
/// let rnn = Rnn::new(RnnCell::Tanh, 1, 1);
/// let seqs = dnn.seq_lengths(&[3], 3)?;
/// // W = 0.5, R = 0, biases 0: placed where the layout says, on any backend.
/// let layout = dnn.rnn_weight_layout::<f32>(&rnn)?;
/// let mut w = vec![0.0f32; layout.len()];
/// w[layout.matrix(0, 0, 0)?.offset] = 0.5;
/// let w = device.upload(s, &w)?;
/// let x = device.upload(s, &[0.0f32, 1.0, 2.0])?;
/// let y = device.alloc_zeros::<f32>(s, 3)?;
/// dnn.rnn_forward(&rnn, &seqs, &RnnData::new(&x, &y), &w, None)?.wait()?;
/// let y = y.download(s)?;
/// assert!((y[2] - 1.0f32.tanh()).abs() < 1e-6);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rnn {
    pub(super) cell: RnnCell,
    pub(super) input: usize,
    pub(super) hidden: usize,
    pub(super) layers: usize,
    bidirectional: bool,
    pub(super) layout: RnnLayout,
}

impl Rnn {
    /// One layer, one direction, sequence-major data.
    pub fn new(cell: RnnCell, input: usize, hidden: usize) -> Rnn {
        Rnn { cell, input, hidden, layers: 1, bidirectional: false, layout: RnnLayout::SeqMajor }
    }

    /// Stacked layers (at least 1).
    pub fn layers(mut self, layers: usize) -> Rnn {
        self.layers = layers;
        self
    }

    /// Both directions: each layer's output is `2 * hidden` wide.
    pub fn bidirectional(mut self, bidirectional: bool) -> Rnn {
        self.bidirectional = bidirectional;
        self
    }

    /// The layout of `x` and `y`.
    pub fn layout(mut self, layout: RnnLayout) -> Rnn {
        self.layout = layout;
        self
    }

    /// The cell.
    pub fn cell(&self) -> RnnCell {
        self.cell
    }

    /// 1 or 2.
    pub fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// The width of `y`: `hidden * directions`.
    pub fn output_size(&self) -> usize {
        self.hidden.saturating_mul(self.directions())
    }

    /// The steps `x` and `y` hold: `max_len * batch` padded, `sum(lengths)` packed.
    fn steps(&self, seqs: &SeqLengths) -> Option<usize> {
        match self.layout {
            RnnLayout::SeqMajorPacked => seqs.lengths.iter().try_fold(0usize, |a, &l| a.checked_add(l)),
            RnnLayout::SeqMajor | RnnLayout::BatchMajor => seqs.max_len.checked_mul(seqs.batch()),
        }
    }

    /// Elements of `x` for `seqs` (`max_len * batch * input`; packed, `sum(lengths) * input`).
    pub fn x_len(&self, seqs: &SeqLengths) -> Option<usize> {
        self.steps(seqs)?.checked_mul(self.input)
    }

    /// Elements of `y` for `seqs` (`max_len * batch * output`; packed, `sum(lengths) * output`).
    pub fn y_len(&self, seqs: &SeqLengths) -> Option<usize> {
        self.steps(seqs)?.checked_mul(self.hidden)?.checked_mul(self.directions())
    }

    /// Elements of `hx`, `cx`, `hy`, `cy` for `seqs` (`layers * directions * batch * hidden`).
    pub fn h_len(&self, seqs: &SeqLengths) -> Option<usize> {
        self.layers.checked_mul(self.directions())?.checked_mul(seqs.batch())?.checked_mul(self.hidden)
    }

    /// Checks the sizes: each at least 1, every count of the weight space within cuDNN's
    /// 32-bit ints.
    fn check(&self) -> Result<()> {
        validate::dim("rnn", self.input, false)?;
        validate::dim("rnn", self.hidden, false)?;
        validate::dim("rnn", self.layers, false)?;
        for (what, v) in [("input size", self.input), ("hidden size", self.hidden), ("layers", self.layers)] {
            if v == 0 {
                return Err(Error::invalid("rnn", format!("the {what} must be at least 1")));
            }
        }
        let out = self.hidden.checked_mul(self.directions());
        let widest = out.map(|o| o.max(self.input));
        let lin = widest
            .and_then(|w| w.checked_add(self.hidden))
            .and_then(|w| w.checked_mul(self.hidden))
            .and_then(|w| w.checked_mul(self.cell.linear_layers()))
            .and_then(|w| w.checked_mul(self.layers))
            .and_then(|w| w.checked_mul(self.directions()));
        if lin.is_none_or(|n| i32::try_from(n).is_err()) {
            return Err(Error::invalid(
                "rnn",
                "the weight space overflows cuDNN's 32-bit counts: fewer or smaller layers",
            ));
        }
        Ok(())
    }

    /// The input width of `layer`.
    fn layer_input(&self, layer: usize) -> usize {
        if layer == 0 {
            self.input
        } else {
            self.output_size()
        }
    }

    /// The weight layout [`Rnn`] documents, in elements.
    fn documented_layout(&self) -> RnnWeightLayout {
        let (n, h) = (self.cell.linear_layers(), self.hidden);
        let mut entries = Vec::new();
        let mut at = 0usize;
        for layer in 0..self.layers {
            for _ in 0..self.directions() {
                for lin in 0..n {
                    let cols = if lin < n / 2 { self.layer_input(layer) } else { h };
                    entries.push((RnnMatrix { offset: at, rows: h, cols }, RnnBias { offset: 0, len: h }));
                    at += h * cols;
                }
            }
        }
        // The biases follow every matrix, in the same order.
        for e in &mut entries {
            e.1.offset = at;
            at += h;
        }
        RnnWeightLayout { len: at, directions: self.directions(), lins: n, layers: self.layers, entries }
    }
}

/// The lengths of a batch's sequences, on the host (for the descriptors and checks) and on the
/// device as i32 (cuDNN's kernels read them there). Made by [`Cudnn::seq_lengths`]; usable on
/// any stream of its device.
#[derive(Clone, Debug)]
pub struct SeqLengths {
    lengths: Vec<usize>,
    max_len: usize,
    device: GpuRef<i32>,
}

impl SeqLengths {
    /// Each sequence's length.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The padded length of `x` and `y`.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.lengths.len()
    }

    /// The device copy (declared read on every RNN op).
    pub fn device_lengths(&self) -> &GpuRef<i32> {
        &self.device
    }
}

/// A matrix in the weight space: `rows x cols` row-major from `offset` (elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnnMatrix {
    /// The first element.
    pub offset: usize,
    /// Rows: the hidden size.
    pub rows: usize,
    /// Columns: the width of what it multiplies.
    pub cols: usize,
}

/// A bias vector in the weight space: `len` elements from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnnBias {
    /// The first element.
    pub offset: usize,
    /// Elements: the hidden size.
    pub len: usize,
}

/// Where every matrix and bias lies in a weight space (or its gradient), in elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RnnWeightLayout {
    len: usize,
    directions: usize,
    lins: usize,
    layers: usize,
    entries: Vec<(RnnMatrix, RnnBias)>,
}

impl RnnWeightLayout {
    /// Elements of the weight space.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the space is empty (never, for a valid network).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn entry(&self, layer: usize, direction: usize, lin: usize) -> Result<&(RnnMatrix, RnnBias)> {
        if layer >= self.layers {
            return Err(Error::invalid("layer", format!("{layer} is not below the {} layers", self.layers)));
        }
        if direction >= self.directions {
            return Err(Error::invalid(
                "direction",
                format!("{direction} is not below the {} directions", self.directions),
            ));
        }
        if lin >= self.lins {
            return Err(Error::invalid("lin", format!("{lin} is not below the cell's {} linear layers", self.lins)));
        }
        Ok(&self.entries[(layer * self.directions + direction) * self.lins + lin])
    }

    /// Linear layer `lin`'s matrix of `layer`, `direction` (0 forward, 1 reverse).
    pub fn matrix(&self, layer: usize, direction: usize, lin: usize) -> Result<RnnMatrix> {
        self.entry(layer, direction, lin).map(|e| e.0)
    }

    /// Linear layer `lin`'s bias of `layer`, `direction`.
    pub fn bias(&self, layer: usize, direction: usize, lin: usize) -> Result<RnnBias> {
        self.entry(layer, direction, lin).map(|e| e.1)
    }
}

/// The data operands of a forward op: `x` read, `y` written; the states optional.
#[derive(Clone, Debug)]
pub struct RnnData<'a, T: DnnElement> {
    x: &'a GpuRef<T>,
    y: &'a GpuRef<T>,
    hx: Option<&'a GpuRef<T>>,
    cx: Option<&'a GpuRef<T>>,
    hy: Option<&'a GpuRef<T>>,
    cy: Option<&'a GpuRef<T>>,
}

impl<'a, T: DnnElement> RnnData<'a, T> {
    /// The input `x` and the output `y`; initial states zero, final states not written.
    pub fn new(x: &'a GpuRef<T>, y: &'a GpuRef<T>) -> Self {
        RnnData { x, y, hx: None, cx: None, hy: None, cy: None }
    }

    /// The initial hidden state.
    pub fn hx(mut self, hx: &'a GpuRef<T>) -> Self {
        self.hx = Some(hx);
        self
    }

    /// The initial cell state (LSTM only).
    pub fn cx(mut self, cx: &'a GpuRef<T>) -> Self {
        self.cx = Some(cx);
        self
    }

    /// Where the final hidden state goes.
    pub fn hy(mut self, hy: &'a GpuRef<T>) -> Self {
        self.hy = Some(hy);
        self
    }

    /// Where the final cell state goes (LSTM only).
    pub fn cy(mut self, cy: &'a GpuRef<T>) -> Self {
        self.cy = Some(cy);
        self
    }
}

/// The operands of backward data: the forward op's `y` and its gradient `dy` read, `dx`
/// written; `hx`, `cx` the forward op's initial states, `dhy`, `dcy` the final states'
/// gradients (left out: zero), `dhx`, `dcx` where the initial states' gradients go.
#[derive(Clone, Debug)]
pub struct RnnGrads<'a, T: DnnElement> {
    y: &'a GpuRef<T>,
    dy: &'a GpuRef<T>,
    dx: &'a GpuRef<T>,
    hx: Option<&'a GpuRef<T>>,
    cx: Option<&'a GpuRef<T>>,
    dhy: Option<&'a GpuRef<T>>,
    dcy: Option<&'a GpuRef<T>>,
    dhx: Option<&'a GpuRef<T>>,
    dcx: Option<&'a GpuRef<T>>,
}

impl<'a, T: DnnElement> RnnGrads<'a, T> {
    /// `y` and `dy` read, `dx` written.
    pub fn new(y: &'a GpuRef<T>, dy: &'a GpuRef<T>, dx: &'a GpuRef<T>) -> Self {
        RnnGrads { y, dy, dx, hx: None, cx: None, dhy: None, dcy: None, dhx: None, dcx: None }
    }

    /// The forward op's initial hidden state.
    pub fn hx(mut self, hx: &'a GpuRef<T>) -> Self {
        self.hx = Some(hx);
        self
    }

    /// The forward op's initial cell state (LSTM only).
    pub fn cx(mut self, cx: &'a GpuRef<T>) -> Self {
        self.cx = Some(cx);
        self
    }

    /// The final hidden state's gradient.
    pub fn dhy(mut self, dhy: &'a GpuRef<T>) -> Self {
        self.dhy = Some(dhy);
        self
    }

    /// The final cell state's gradient (LSTM only).
    pub fn dcy(mut self, dcy: &'a GpuRef<T>) -> Self {
        self.dcy = Some(dcy);
        self
    }

    /// Where the initial hidden state's gradient goes.
    pub fn dhx(mut self, dhx: &'a GpuRef<T>) -> Self {
        self.dhx = Some(dhx);
        self
    }

    /// Where the initial cell state's gradient goes (LSTM only).
    pub fn dcx(mut self, dcx: &'a GpuRef<T>) -> Self {
        self.dcx = Some(dcx);
        self
    }
}

/// The plan cache's key: everything an RNN descriptor and its hidden-state descriptor depend
/// on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RnnKey {
    pub cell: RnnCell,
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    pub bidirectional: bool,
    pub layout: RnnLayout,
    pub dtype: CudnnType,
    pub tf32: bool,
    pub max_seq: usize,
    pub batch: usize,
}

/// Which RNN op, for the checks and the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RnnOp {
    Forward { training: bool },
    BackwardData,
    BackwardWeights(WeightGrad),
}

/// One operand: its argument name, buffer, access, and the elements it must hold.
type Operand<'a, T> = (&'static str, &'a GpuRef<T>, Access, Option<usize>);

/// Bytes of the simulator's reserve space: `x` and `cx`, then after backward data `dy`, `dhy`,
/// `dcy` and the weights, each as f64 (the backward ops recompute from them).
fn sim_reserve_bytes(rnn: &Rnn, seqs: &SeqLengths) -> Option<usize> {
    let h = rnn.h_len(seqs)?;
    let w = rnn.documented_layout().len;
    rnn.x_len(seqs)?.checked_add(rnn.y_len(seqs)?)?.checked_add(h.checked_mul(3)?)?.checked_add(w)?.checked_mul(8)
}

impl Cudnn {
    /// RNN descriptors made since the handle was created, one per configuration key (cell,
    /// sizes, layers, directions, layout, type, math, padded length, batch); a cache hit makes
    /// none, and the simulator makes none.
    pub fn rnn_plans_made(&self) -> u64 {
        self.rnn_plans.made()
    }

    /// Copies `lengths` (one per sequence of the batch, each in `1..=max_len`) to the device as
    /// i32, as an op on this stream that writes the copy.
    pub fn seq_lengths(&mut self, lengths: &[usize], max_len: usize) -> Result<SeqLengths> {
        if lengths.is_empty() {
            return Err(Error::invalid("lengths", "holds no sequence: a batch has at least one"));
        }
        validate::dim("max_len", max_len, false)?;
        validate::dim("lengths", lengths.len(), false)?;
        for (b, &l) in lengths.iter().enumerate() {
            if l == 0 || l > max_len {
                return Err(Error::invalid(
                    "lengths",
                    format!("sequence {b} has length {l}; each must be in 1..={max_len} (`max_len`)"),
                ));
            }
        }
        // Each fits: bounded by `max_len`, checked as an i32 above.
        let ints: Vec<i32> = lengths.iter().map(|&l| l as i32).collect();
        let device = self.op.device.upload(self.op.stream, &ints)?;
        Ok(SeqLengths { lengths: lengths.to_vec(), max_len, device })
    }

    /// Where each matrix and bias of `rnn`'s weight space of `T` lies (see [`Rnn`]):
    /// on a GPU as cuDNN reports it, on the simulator the documented layout.
    pub fn rnn_weight_layout<T: DnnElement>(&mut self, rnn: &Rnn) -> Result<RnnWeightLayout> {
        rnn.check()?;
        let mut layout = rnn.documented_layout();
        if self.op.device.is_simulated() {
            return Ok(layout);
        }
        let elem = std::mem::size_of::<T>();
        let key = self.rnn_key::<T>(rnn, 0, 1);
        let (plan, handle) = rnn_plan(&mut self.rnn_plans, &self.op, &self.raw, key)?;
        let dtype = super::tensor::dtype::<T>();
        let lins = rnn.cell.linear_layers();
        for (i, e) in layout.entries.iter_mut().enumerate() {
            let (pseudo, lin) = (i / lins, i % lins);
            // SAFETY: the handle is live, its context bound by `rnn_plan`, and `&mut self`
            // keeps it to this thread.
            let at = unsafe { plan.weight_params(handle, dtype, pseudo, lin) }?;
            // The shapes are the documented ones; cuDNN's descriptors must agree in size.
            if at.matrix_len != e.0.rows * e.0.cols || at.bias_len != e.1.len {
                return Err(Error::library(
                    "cudnnGetRNNWeightParams",
                    format!(
                        "linear layer {lin} of pseudo-layer {pseudo} holds {} and {} elements, not {}x{} and {}",
                        at.matrix_len, at.bias_len, e.0.rows, e.0.cols, e.1.len
                    ),
                ));
            }
            e.0.offset = at.matrix / elem;
            e.1.offset = at.bias / elem;
        }
        layout.len = plan.weight_bytes.div_ceil(elem);
        Ok(layout)
    }

    /// Bytes of the reserve space a training forward op of `rnn` on `T` data with `seqs` needs
    /// (the backward ops read it).
    pub fn rnn_reserve_bytes<T: DnnElement>(&mut self, rnn: &Rnn, seqs: &SeqLengths) -> Result<usize> {
        rnn.check()?;
        if self.op.device.is_simulated() {
            return sim_reserve_bytes(rnn, seqs).ok_or_else(|| Error::invalid("seqs", "the reserve space overflows"));
        }
        let key = self.rnn_key::<T>(rnn, seqs.max_len, seqs.batch());
        let (plan, handle) = rnn_plan(&mut self.rnn_plans, &self.op, &self.raw, key.clone())?;
        let data = plan.data(&key, &seqs.lengths)?;
        // SAFETY: as in `rnn_weight_layout`.
        let (_, reserve) = unsafe { plan.temp_sizes(handle, &data, true) }?;
        Ok(reserve)
    }

    /// Forward: `y` (and `hy`, `cy` if given) from `x`, `hx`, `cx` and `weights`. With a
    /// `reserve` space ([`rnn_reserve_bytes`](Self::rnn_reserve_bytes) long) for training,
    /// which the backward ops read; without one for inference.
    pub fn rnn_forward<T: DnnElement>(
        &mut self,
        rnn: &Rnn,
        seqs: &SeqLengths,
        data: &RnnData<'_, T>,
        weights: &GpuRef<T>,
        reserve: Option<&GpuRef<u8>>,
    ) -> Result<Completion<()>> {
        let (x, y) = (rnn.x_len(seqs), rnn.y_len(seqs));
        let h = rnn.h_len(seqs);
        let mut ops: Vec<Operand<'_, T>> = vec![("x", data.x, Access::Read, x), ("y", data.y, Access::Write, y)];
        push(&mut ops, "hx", data.hx, Access::Read, h);
        push(&mut ops, "cx", data.cx, Access::Read, h);
        push(&mut ops, "hy", data.hy, Access::Write, h);
        push(&mut ops, "cy", data.cy, Access::Write, h);
        ops.push(("weights", weights, Access::Read, None));
        let op = RnnOp::Forward { training: reserve.is_some() };
        self.rnn_op(rnn, seqs, op, ops, reserve)
    }

    /// Backward data: `dx`, and `dhx`, `dcx` if given, from the forward op's `y`, the
    /// gradients `dy`, `dhy`, `dcy`, the states `hx`, `cx` and `weights`, with the `reserve`
    /// space the training forward op wrote (this op updates it for backward weights). The
    /// padded steps of `dx` are zero.
    pub fn rnn_backward_data<T: DnnElement>(
        &mut self,
        rnn: &Rnn,
        seqs: &SeqLengths,
        grads: &RnnGrads<'_, T>,
        weights: &GpuRef<T>,
        reserve: &GpuRef<u8>,
    ) -> Result<Completion<()>> {
        let (x, y) = (rnn.x_len(seqs), rnn.y_len(seqs));
        let h = rnn.h_len(seqs);
        let mut ops: Vec<Operand<'_, T>> = vec![
            ("y", grads.y, Access::Read, y),
            ("dy", grads.dy, Access::Read, y),
            ("dx", grads.dx, Access::Write, x),
        ];
        push(&mut ops, "hx", grads.hx, Access::Read, h);
        push(&mut ops, "cx", grads.cx, Access::Read, h);
        push(&mut ops, "dhy", grads.dhy, Access::Read, h);
        push(&mut ops, "dcy", grads.dcy, Access::Read, h);
        push(&mut ops, "dhx", grads.dhx, Access::Write, h);
        push(&mut ops, "dcx", grads.dcx, Access::Write, h);
        ops.push(("weights", weights, Access::Read, None));
        self.rnn_op(rnn, seqs, RnnOp::BackwardData, ops, Some(reserve))
    }

    /// Backward weights: the weights' gradient from `x`, `hx`, the forward op's `y` and the
    /// `reserve` space backward data updated, added to `dweights` or replacing it (`mode`).
    /// `dweights` has the weight space's layout and length.
    #[allow(clippy::too_many_arguments)]
    pub fn rnn_backward_weights<T: DnnElement>(
        &mut self,
        rnn: &Rnn,
        seqs: &SeqLengths,
        x: &GpuRef<T>,
        hx: Option<&GpuRef<T>>,
        y: &GpuRef<T>,
        dweights: &GpuRef<T>,
        reserve: &GpuRef<u8>,
        mode: WeightGrad,
    ) -> Result<Completion<()>> {
        let (xl, yl, h) = (rnn.x_len(seqs), rnn.y_len(seqs), rnn.h_len(seqs));
        let mut ops: Vec<Operand<'_, T>> = vec![("x", x, Access::Read, xl)];
        push(&mut ops, "hx", hx, Access::Read, h);
        ops.push(("y", y, Access::Read, yl));
        let access = if mode == WeightGrad::Accumulate { Access::ReadWrite } else { Access::Write };
        ops.push(("dweights", dweights, access, None));
        self.rnn_op(rnn, seqs, RnnOp::BackwardWeights(mode), ops, Some(reserve))
    }

    fn rnn_key<T: DnnElement>(&self, rnn: &Rnn, max_seq: usize, batch: usize) -> RnnKey {
        RnnKey {
            cell: rnn.cell,
            input: rnn.input,
            hidden: rnn.hidden,
            layers: rnn.layers,
            bidirectional: rnn.bidirectional,
            layout: rnn.layout,
            dtype: super::tensor::dtype::<T>(),
            tf32: self.tf32,
            max_seq,
            batch,
        }
    }

    /// Checks, records and runs an RNN op. `ops` lists the data operands (the weights or
    /// their gradient last, sized here).
    fn rnn_op<T: DnnElement>(
        &mut self,
        rnn: &Rnn,
        seqs: &SeqLengths,
        op: RnnOp,
        mut ops: Vec<Operand<'_, T>>,
        reserve: Option<&GpuRef<u8>>,
    ) -> Result<Completion<()>> {
        rnn.check()?;
        validate::dim("seqs", seqs.max_len, false)?;
        if seqs.batch() == 0 || seqs.lengths.iter().any(|&l| l == 0 || l > seqs.max_len) {
            return Err(Error::invalid("seqs", format!("lengths must be in 1..={}", seqs.max_len)));
        }
        if rnn.layout == RnnLayout::SeqMajorPacked && seqs.lengths.windows(2).any(|w| w[1] > w[0]) {
            return Err(Error::invalid(
                "seqs",
                format!("lengths {:?} increase; packed data needs the longest sequences first", seqs.lengths),
            ));
        }
        if rnn.cell != RnnCell::Lstm {
            if let Some((arg, ..)) = ops.iter().find(|o| matches!(o.0, "cx" | "cy" | "dcy" | "dcx")) {
                return Err(Error::invalid(arg, format!("is given, but a {:?} cell has no cell state", rnn.cell)));
            }
        }
        for &(arg, buf, _, need) in &ops {
            if !matches!(arg, "weights" | "dweights") {
                validate::covers(arg, buf, need, &format!("{rnn:?} over {} sequences", seqs.batch()))?;
            }
        }
        let uses: Vec<(&'static str, u64, bool)> =
            ops.iter().map(|o| (o.0, o.1.id(), !matches!(o.2, Access::Read))).collect();
        validate::no_aliasing(&uses)?;
        let name = match op {
            RnnOp::Forward { training: false } => "rnn_forward_inference",
            RnnOp::Forward { training: true } => "rnn_forward_training",
            RnnOp::BackwardData => "rnn_backward_data",
            RnnOp::BackwardWeights(_) => "rnn_backward_weights",
        };
        let reserve_access = match op {
            RnnOp::Forward { .. } => Access::Write,
            RnnOp::BackwardData => Access::ReadWrite,
            RnnOp::BackwardWeights(_) => Access::Read,
        };
        if self.op.device.is_simulated() {
            let layout = rnn.documented_layout();
            if let Some(w) = ops.last_mut() {
                w.3 = Some(layout.len);
                validate::covers(w.0, w.1, w.3, &format!("the weight space of {rnn:?}"))?;
            }
            if let Some(r) = reserve {
                let need = sim_reserve_bytes(rnn, seqs);
                validate::covers("reserve", r, need, &format!("the reserve space of {rnn:?}"))?;
            }
            let mut rec = self.op.recorder(name);
            record(&mut rec, "seqs", &seqs.device, Access::Read)?;
            let mut mems = Vec::with_capacity(ops.len());
            for &(arg, buf, access, _) in &ops {
                record(&mut rec, arg, buf, access)?;
                mems.push((arg, buf.sim_data()?));
            }
            if let Some(r) = reserve {
                record(&mut rec, "reserve", r, reserve_access)?;
            }
            let job = sim_rnn::Job {
                rnn: rnn.clone(),
                lengths: seqs.lengths.clone(),
                max_len: seqs.max_len,
                layout,
                op,
                mems,
                reserve: reserve.map(|r| r.sim_data()).transpose()?,
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let key = self.rnn_key::<T>(rnn, seqs.max_len, seqs.batch());
        let training = !matches!(op, RnnOp::Forward { training: false });
        let (plan, handle) = rnn_plan(&mut self.rnn_plans, &self.op, &self.raw, key.clone())?;
        let data = plan.data(&key, &seqs.lengths)?;
        // SAFETY: as in `rnn_weight_layout`.
        let (work_bytes, reserve_bytes) = unsafe { plan.temp_sizes(handle, &data, training) }?;
        let weight_bytes = plan.weight_bytes;
        let elem = std::mem::size_of::<T>();
        if let Some(w) = ops.last_mut() {
            w.3 = Some(weight_bytes.div_ceil(elem));
            validate::covers(w.0, w.1, w.3, &format!("the weight space of {rnn:?}"))?;
        }
        if let Some(r) = reserve {
            validate::covers("reserve", r, Some(reserve_bytes), &format!("the reserve space of {rnn:?}"))?;
        }
        let mut rec = self.op.recorder(name);
        record(&mut rec, "seqs", &seqs.device, Access::Read)?;
        for &(arg, buf, access, _) in &ops {
            record(&mut rec, arg, buf, access)?;
        }
        if let Some(r) = reserve {
            record(&mut rec, "reserve", r, reserve_access)?;
        }
        let work = self.work.use_on(&self.op, &mut rec, work_bytes)?.map(|b| b.raw_device_ptr()).transpose()?;
        let ptr = |arg: &str| -> Result<*mut c_void> {
            match ops.iter().find(|o| o.0 == arg) {
                Some(o) => dptr(o.1),
                None => Ok(std::ptr::null_mut()),
            }
        };
        let (call, args) = match op {
            RnnOp::Forward { training } => (
                RnnCall::Forward { training },
                RnnArgs {
                    x: ptr("x")?,
                    y: ptr("y")?,
                    hx: ptr("hx")?,
                    cx: ptr("cx")?,
                    hy: ptr("hy")?,
                    cy: ptr("cy")?,
                    dy: std::ptr::null(),
                    dhy: std::ptr::null(),
                    dcy: std::ptr::null(),
                    weights: ptr("weights")?,
                    ..null_args()
                },
            ),
            RnnOp::BackwardData => (
                RnnCall::BackwardData,
                RnnArgs {
                    x: ptr("dx")?,
                    y: ptr("y")?,
                    hx: ptr("hx")?,
                    cx: ptr("cx")?,
                    hy: ptr("dhx")?,
                    cy: ptr("dcx")?,
                    dy: ptr("dy")?,
                    dhy: ptr("dhy")?,
                    dcy: ptr("dcy")?,
                    weights: ptr("weights")?,
                    ..null_args()
                },
            ),
            RnnOp::BackwardWeights(mode) => (
                RnnCall::BackwardWeights { overwrite: mode == WeightGrad::Overwrite },
                RnnArgs { x: ptr("x")?, y: ptr("y")?, hx: ptr("hx")?, weights: ptr("dweights")?, ..null_args() },
            ),
        };
        let args = RnnArgs {
            seqs: dptr(&seqs.device)?,
            weight_bytes,
            work: work.map_or(std::ptr::null_mut(), |w| w as *mut c_void),
            work_bytes,
            reserve: match reserve {
                Some(r) => dptr(r)?,
                None => std::ptr::null_mut(),
            },
            reserve_bytes,
            ..args
        };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) every buffer was checked to hold what the plan and the data
            // descriptors describe (the weights and reserve the byte counts cuDNN reported), is
            // live and was fenced by preflight with its access; the device lengths are the
            // batch's i32 copy; (3) the workspace, declared read-write, holds at least the
            // reported need and serves one op at a time (the stream is in order).
            unsafe { calls::rnn(handle, plan, &data, call, &args) }
        })
    }
}

/// The first cuDNN whose RNNs take bf16 data (older ones answer `CUDNN_STATUS_NOT_SUPPORTED`).
const BF16_SINCE: usize = 9_13_00;

/// Finds or makes the plan of `key` (CUDA only), with the context bound; a bf16 key on a
/// cuDNN older than 9.13 is [`Error::Unsupported`].
fn rnn_plan<'a>(
    plans: &'a mut PlanCache<RnnKey, RnnPlan>,
    op: &OpStream,
    raw: &'a Option<calls::RawHandle>,
    key: RnnKey,
) -> Result<(&'a RnnPlan, &'a calls::RawHandle)> {
    op.bound_stream()?;
    let Some(handle) = raw.as_ref() else { return Err(op.unavailable_on_sim()) };
    if key.dtype == CudnnType::Bfloat16 && calls::version() < BF16_SINCE {
        return Err(Error::Unsupported {
            library: super::NAME,
            what: format!("a {:?} RNN on bf16 data with cuDNN {}", key.cell, calls::version()),
            hint: "cuDNN's RNNs take bf16 from 9.13 on: update cuDNN, or use f16 or f32 data".into(),
        });
    }
    let plan = plans.get_or_make(key, op, |k| {
        // SAFETY: (1) the handle is live and its context was bound above; (2) the caller's
        // `&mut Cudnn` keeps it to this thread.
        let plan = unsafe { RnnPlan::make(handle, k) }?;
        plan.ok_or_else(|| Error::Unsupported {
            library: super::NAME,
            what: format!("a {:?} RNN on {:?} data", k.cell, k.dtype),
            hint: "cuDNN has no RNN kernel for this type combination: use f32 or f16 data".into(),
        })
    })?;
    Ok((plan, handle))
}

/// Adds an optional operand.
fn push<'a, T: DnnElement>(
    ops: &mut Vec<Operand<'a, T>>,
    arg: &'static str,
    buf: Option<&'a GpuRef<T>>,
    access: Access,
    need: Option<usize>,
) {
    if let Some(b) = buf {
        ops.push((arg, b, access, need));
    }
}

fn null_args() -> RnnArgs {
    RnnArgs {
        seqs: std::ptr::null(),
        x: std::ptr::null_mut(),
        y: std::ptr::null_mut(),
        hx: std::ptr::null(),
        cx: std::ptr::null(),
        hy: std::ptr::null_mut(),
        cy: std::ptr::null_mut(),
        dy: std::ptr::null(),
        dhy: std::ptr::null(),
        dcy: std::ptr::null(),
        weights: std::ptr::null_mut(),
        weight_bytes: 0,
        work: std::ptr::null_mut(),
        work_bytes: 0,
        reserve: std::ptr::null_mut(),
        reserve_bytes: 0,
    }
}
