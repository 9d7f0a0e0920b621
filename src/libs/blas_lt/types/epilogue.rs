//! The epilogue and its buffers ([`Epilogue`], [`ReluMask`], [`Aux`]), and an FP8 matmul's
//! per-tensor scales ([`Fp8Scales`]).

use crate::memory::{Element, GpuRef};

/// The ReLU bit-mask an `_AUX` ReLU epilogue writes and `DRelu` reads: one bit per element of
/// `D` (set where the pre-activation was positive), column-major, `ld` bits between columns.
#[derive(Clone, Copy, Debug)]
pub struct ReluMask<'a> {
    /// The mask's bytes.
    pub buf: &'a GpuRef<u8>,
    /// Bits between consecutive columns (of the column-major `D`): a multiple of 128, at least
    /// its rows. `None`: the rows rounded up to 128.
    pub ld: Option<usize>,
}

/// The pre-activation matrix a GELU `_AUX` epilogue writes and `DGelu` reads, shaped like `D`.
#[derive(Clone, Copy, Debug)]
pub struct Aux<'a, E: Element> {
    /// The matrix.
    pub buf: &'a GpuRef<E>,
    /// Elements between consecutive columns (of the column-major `D`): a multiple of 8, at
    /// least its rows. `None`: the rows rounded up to 8.
    pub ld: Option<usize>,
}

/// What cuBLASLt applies to `alpha op(A) op(B) + beta C` before storing `D`.
///
/// Vectors are indexed along the rows of the column-major `D` (`m` entries; with
/// [`Order::Row`](crate::blas_lt::Order::Row), one per column of `D`, `n` entries), except `BgradB`'s (see there). `E` is the
/// element type of bias vectors and GELU aux matrices: `D`'s type, or for FP8 matmuls the type
/// cuBLASLt pairs with it (bf16 for an f32 `D`, `C`'s type for an FP8 `D`). In FP8 matmuls a
/// GELU aux matrix of another type than `D` is accepted only by [`Epilogue::GeluAux`] with an
/// E4M3 `D` from E4M3 inputs (the one case cuBLASLt supports), and an FP8 (E4M3) one only by
/// [`Epilogue::GeluAux`] beside an E4M3 `D` and an f16 `C` from E4M3 inputs, with its own scale
/// and amax ([`Matmul::fp8_aux`](crate::blas_lt::Matmul::fp8_aux)). In a strided batch, bias
/// gradients are written one per matmul, at the batch's bias stride. No epilogue buffer may be
/// another operand of the matmul where either is written.
#[derive(Clone, Copy, Debug, Default)]
pub enum Epilogue<'a, E: Element> {
    /// `D` as computed.
    #[default]
    Default,
    /// `max(x, 0)`.
    Relu,
    /// GELU (tanh approximation).
    Gelu,
    /// `x + bias` (broadcast across columns).
    Bias(&'a GpuRef<E>),
    /// `max(x + bias, 0)`.
    ReluBias(&'a GpuRef<E>),
    /// `gelu(x + bias)`.
    GeluBias(&'a GpuRef<E>),
    /// `max(x, 0)`, and the mask of positive `x` written to `mask`.
    ReluAux(ReluMask<'a>),
    /// `gelu(x)`, and `x` written to `aux`.
    GeluAux(Aux<'a, E>),
    /// `max(x + bias, 0)`, and the mask of positive `x + bias` written.
    ReluAuxBias {
        /// Read.
        bias: &'a GpuRef<E>,
        /// Written.
        mask: ReluMask<'a>,
    },
    /// `gelu(x + bias)`, and `x + bias` written to `aux`.
    GeluAuxBias {
        /// Read.
        bias: &'a GpuRef<E>,
        /// Written.
        aux: Aux<'a, E>,
    },
    /// `x * relu'(pre)`, with the mask a forward `ReluAux*` wrote.
    DRelu(ReluMask<'a>),
    /// `x * gelu'(pre)`, with the pre-activation a forward `GeluAux*` wrote.
    DGelu(Aux<'a, E>),
    /// As `DRelu`, and the sum of the result across columns written to `bias_grad`.
    DReluBgrad {
        /// Read.
        mask: ReluMask<'a>,
        /// Written: the bias gradient.
        bias_grad: &'a GpuRef<E>,
    },
    /// As `DGelu`, and the sum of the result across columns written to `bias_grad`.
    DGeluBgrad {
        /// Read.
        aux: Aux<'a, E>,
        /// Written: the bias gradient.
        bias_grad: &'a GpuRef<E>,
    },
    /// `D` as computed, and the sum of `op(A)` over `k` written (`m` entries: one per row of
    /// `op(A)`).
    BgradA(&'a GpuRef<E>),
    /// `D` as computed, and the sum of `op(B)` over `k` written (`n` entries: one per column of
    /// `op(B)`).
    BgradB(&'a GpuRef<E>),
}

/// The per-tensor scales of an FP8 matmul: device f32 scalars (buffers of at least one
/// element), read by the GPU. `D = scale_d (alpha scale_a scale_b op(A) op(B) + beta scale_c C)`.
#[derive(Clone, Copy, Debug)]
pub struct Fp8Scales<'a> {
    /// Dequantizes `A`.
    pub a: &'a GpuRef<f32>,
    /// Dequantizes `B`.
    pub b: &'a GpuRef<f32>,
    /// Scales `C`. Leave it `None`: cuBLASLt scales an FP8 `C` only, and none of its FP8
    /// matmuls takes one, so a scale here is rejected as an invalid `fp8.c`.
    pub c: Option<&'a GpuRef<f32>>,
    /// Quantizes `D` (FP8 `D` only); `None`: 1.
    pub d: Option<&'a GpuRef<f32>>,
}
