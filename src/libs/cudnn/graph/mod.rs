//! cuDNN's graph (backend) API: a typed builder over backend descriptors and the ops built on
//! it. Attention is the graph's scaled dot-product attention ([`Cudnn::sdpa_forward`]): the
//! legacy multi-head attention API (`cudnnMultiHeadAttnForward`) is deprecated in cuDNN 9 and
//! not wrapped.
//!
//! An op describes its computation as a graph of tensors (unique id, dims, strides, type,
//! virtual or by value) and operations (matmul, pointwise, reduction, generated indices,
//! random numbers); cuDNN's heuristics (mode A) propose engine configurations, and the first
//! that finalizes into an execution plan is kept, in the handle's plan cache, keyed by the
//! whole graph (shapes, strides, types, flags): a second op of the same graph makes no plan
//! ([`Cudnn::graph_plans_made`]). Its workspace comes from the stream's shared workspace.
//!
//! Attention operands are [`AttnTensor`]s: a buffer seen as `[B, H, S, D]` with strides in
//! elements, so that packed (`BHSD`) and interleaved (`BSHD`, as a projection writes them)
//! layouts work alike; [`Cudnn::sdpa_backward`] takes the forward op's output and row
//! statistics. The options ([`Attention`]) are the scale, the causal mask, padding
//! masks through per-batch sequence lengths (device i32 buffers, tracked reads) and dropout
//! (probability, device i64 seed and offset).
//!
//! On the simulator the ops compute their result on the host in f64 (no plans are made, no
//! workspace taken): scores, softmax and sums exact, each stored element rounded once. Its
//! dropout mask is its own (a hash of seed, offset and position), not cuDNN's Philox stream.
//!
//! FP8 attention forward ([`Cudnn::sdpa_forward_fp8`]) runs cuDNN's FP8 engine with the
//! per-tensor scales and amax outputs of FP8 training ([`Fp8Attention`]).
//!
//! Besides attention: layer and RMS norms ([`Cudnn::norm_forward`], [`Cudnn::norm_backward`])
//! and instance norm ([`Cudnn::instance_norm_forward`], and [`Cudnn::instance_norm_backward`]
//! as one batch-norm backward call per image: cuDNN 9.19's graph engine for it gives only one
//! image's part of the parameter gradients)
//! through the backend's norm operations, and a fused matmul + bias + activation
//! ([`Cudnn::matmul_bias_act`]).
//!
//! Files: this one holds the operands and options; `backend` the owned descriptors, `builder`
//! the graph, `plan` its execution plan, `sdpa` attention forward, `sdpa_bwd` backward,
//! `sdpa_fp8` FP8 attention forward, `norm`
//! the row norms, `instance` instance norm, `matmul` the fused matmul, `sim` the simulator's
//! attention, `tests` the graphs' unit tests.

mod backend;
mod builder;
mod instance;
mod matmul;
mod norm;
mod plan;
mod sdpa;
mod sdpa_bwd;
mod sdpa_fp8;
mod sim;
#[cfg(test)]
mod tests;

pub use matmul::{MatmulActivation, MatmulBiasAct};
pub use norm::{NormKind, NormStats, RowNorm};
pub use sdpa_bwd::SdpaGrads;
pub use sdpa_fp8::{AttnFp8, Fp8Attention};

pub(crate) use builder::GraphSpec;
pub(crate) use plan::GraphPlan;

use super::Cudnn;
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};

/// A buffer seen as a `[B, H, S, D]` attention tensor (batch, heads, sequence, head dim), with
/// strides in elements; the head dim must be contiguous.
#[derive(Clone, Debug)]
pub struct AttnTensor<'a, T: Element> {
    pub(super) buf: &'a GpuRef<T>,
    pub(super) dims: [usize; 4],
    pub(super) strides: [usize; 4],
}

impl<'a, T: Element> AttnTensor<'a, T> {
    /// `buf` holding a packed `[B, H, S, D]` tensor (`BHSD`).
    pub fn bhsd(buf: &'a GpuRef<T>, dims: [usize; 4]) -> Self {
        let [_, h, s, d] = dims;
        let strides = [h.saturating_mul(s).saturating_mul(d), s.saturating_mul(d), d, 1];
        AttnTensor { buf, dims, strides }
    }

    /// `buf` holding `[B, H, S, D]` stored as `[B, S, H, D]` (`BSHD`, heads interleaved).
    pub fn bshd(buf: &'a GpuRef<T>, dims: [usize; 4]) -> Self {
        let [_, h, s, d] = dims;
        let strides = [s.saturating_mul(h).saturating_mul(d), d, h.saturating_mul(d), 1];
        AttnTensor { buf, dims, strides }
    }

    /// `buf` holding `[B, H, S, D]` with the given strides (in elements).
    pub fn strided(buf: &'a GpuRef<T>, dims: [usize; 4], strides: [usize; 4]) -> Self {
        AttnTensor { buf, dims, strides }
    }

    /// The dims, `[B, H, S, D]`.
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }

    /// The strides, in elements.
    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }

    /// Checks the operand as argument `arg`: dims at least 1, strides within i64 and not 0
    /// (a dim of 1 aside), and a buffer that reaches its last element.
    pub(super) fn check(&self, arg: &'static str) -> Result<()> {
        let mut last = 0usize;
        for (&n, &st) in self.dims.iter().zip(&self.strides) {
            if n == 0 {
                return Err(Error::invalid(arg, format!("has a zero dim in {:?}", self.dims)));
            }
            if st == 0 && n > 1 {
                return Err(Error::invalid(arg, format!("has a zero stride in {:?} for a dim of {n}", self.strides)));
            }
            i64::try_from(st).map_err(|_| Error::invalid(arg, format!("stride {st} does not fit i64")))?;
            last = (n - 1).checked_mul(st).and_then(|x| last.checked_add(x)).ok_or_else(|| {
                Error::invalid(arg, format!("dims {:?} with strides {:?} overflow", self.dims, self.strides))
            })?;
        }
        let what = format!("{:?} with strides {:?}", self.dims, self.strides);
        crate::libs::validate::covers(arg, self.buf, last.checked_add(1), &what)
    }
}

/// Per-batch sequence lengths for padding masks: query row `i` of batch `b` is valid below
/// `q[b]`, key column `j` below `kv[b]`; the others are masked out.
#[derive(Clone, Copy, Debug)]
pub struct SeqLens<'a> {
    /// `B` query lengths, each at most `Sq`.
    pub q: &'a GpuRef<i32>,
    /// `B` key/value lengths, each at most `Skv`.
    pub kv: &'a GpuRef<i32>,
}

/// Dropout of the attention probabilities: each dropped with `probability`, the others scaled
/// by `1 / (1 - probability)`; the mask drawn from `seed` and `offset` (one i64 each, on the
/// device), so that the backward op redraws the same one.
#[derive(Clone, Copy, Debug)]
pub struct AttnDropout<'a> {
    /// In `[0, 1)`.
    pub probability: f32,
    /// The random stream's seed.
    pub seed: &'a GpuRef<i64>,
    /// The offset into the stream.
    pub offset: &'a GpuRef<i64>,
}

/// The options of a scaled dot-product attention: scale (`1/√D` when not set), causal mask
/// (key `j` visible to query `i` when `j <= i`), padding masks, dropout.
#[derive(Clone, Debug, Default)]
pub struct Attention<'a> {
    pub(super) scale: Option<f32>,
    pub(super) causal: bool,
    pub(super) padding: Option<SeqLens<'a>>,
    pub(super) dropout: Option<AttnDropout<'a>>,
}

impl<'a> Attention<'a> {
    /// No mask, no dropout, scale `1/√D`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The scores' scale.
    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = Some(scale);
        self
    }

    /// The causal mask (top-left aligned): query `i` sees keys `0..=i`.
    pub fn causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }

    /// Padding masks from per-batch sequence lengths.
    pub fn padding(mut self, lens: SeqLens<'a>) -> Self {
        self.padding = Some(lens);
        self
    }

    /// Dropout of the probabilities.
    pub fn dropout(mut self, dropout: AttnDropout<'a>) -> Self {
        self.dropout = Some(dropout);
        self
    }
}

impl Cudnn {
    /// Graph execution plans made since the handle was created (a cache hit makes none).
    pub fn graph_plans_made(&self) -> u64 {
        self.graphs.made()
    }

    /// Graph execution plans currently cached.
    pub fn cached_graph_plans(&self) -> usize {
        self.graphs.len()
    }
}
