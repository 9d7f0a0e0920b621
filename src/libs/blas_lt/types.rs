//! The public description of a cuBLASLt matmul: operands, layouts, batches, epilogue, FP8
//! scales.

use crate::memory::{Element, GpuRef, F8E4M3, F8E5M2};

/// Whether a matrix operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = Xᵀ`.
    Yes,
}

/// How all four matrices (`A`, `B`, `C`, `D`) are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// Column-major, as in cuBLAS: a leading dimension is the distance between columns.
    #[default]
    Col,
    /// Row-major: a leading dimension is the distance between rows. Computed as the
    /// column-major `Dᵀ = op(B)ᵀ op(A)ᵀ`, so epilogue vectors run along `D`'s rows (one entry
    /// per column of `D`): see [`Epilogue`].
    Row,
}

pub(crate) mod sealed {
    #![allow(unreachable_pub)]

    use crate::libs::dtype::{CudaType, DataTypes};
    use crate::memory::{F8E4M3, F8E5M2};

    /// The element kinds cuBLASLt multiplies.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Kind {
        F32,
        F16,
        Bf16,
        E4M3,
        E5M2,
    }

    impl Kind {
        pub fn is_fp8(self) -> bool {
            matches!(self, Kind::E4M3 | Kind::E5M2)
        }

        /// The kind's `cudaDataType`, from the data-type table.
        pub(crate) const fn cuda(self) -> CudaType {
            match self {
                Kind::F32 => <f32 as DataTypes>::CUDA,
                Kind::F16 => <half::f16 as DataTypes>::CUDA,
                Kind::Bf16 => <half::bf16 as DataTypes>::CUDA,
                Kind::E4M3 => <F8E4M3 as DataTypes>::CUDA,
                Kind::E5M2 => <F8E5M2 as DataTypes>::CUDA,
            }
        }

        pub fn name(self) -> &'static str {
            match self {
                Kind::F32 => "f32",
                Kind::F16 => "f16",
                Kind::Bf16 => "bf16",
                Kind::E4M3 => "F8E4M3",
                Kind::E5M2 => "F8E5M2",
            }
        }
    }

    /// An element type's kind.
    pub trait LtType {
        const KIND: Kind;
    }
}
use sealed::Kind;

/// Element types of cuBLASLt matrices and epilogue vectors: `f32`, `half::f16`, `half::bf16`,
/// [`F8E4M3`] and [`F8E5M2`].
pub trait LtElement: Element + sealed::LtType {}

macro_rules! lt_element {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::LtType for $t {
            const KIND: Kind = Kind::$k;
        }
        impl LtElement for $t {}
    )*};
}
lt_element!(f32 => F32, half::f16 => F16, half::bf16 => Bf16, F8E4M3 => E4M3, F8E5M2 => E5M2);

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
/// [`Order::Row`], one per column of `D`, `n` entries), except `BgradB`'s (see there). `E` is the
/// element type of bias vectors and GELU aux matrices: `D`'s type, or for FP8 matmuls the type
/// cuBLASLt pairs with it (bf16 for an f32 `D`, `C`'s type for an FP8 `D`). In FP8 matmuls a
/// GELU aux matrix of another type than `D` is accepted only by [`Epilogue::GeluAux`] with an
/// E4M3 `D` from E4M3 inputs (the one case cuBLASLt supports). No epilogue buffer may be
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

/// Strided batches: `count` matmuls whose operands lie the given element strides apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LtBatch {
    /// How many matmuls.
    pub count: usize,
    /// Stride of `A`; zero: one `A` for all; `None`: packed.
    pub a: Option<usize>,
    /// Stride of `B`, as for `a`.
    pub b: Option<usize>,
    /// Stride of `C`, as for `a`.
    pub c: Option<usize>,
    /// Stride of `D`; at least one `D`'s span; `None`: packed.
    pub d: Option<usize>,
    /// Stride of the bias vector; zero (the default): one bias for all.
    pub bias: usize,
    /// Stride of the aux matrix (in its elements, bits for a ReLU mask); `None`: packed.
    pub aux: Option<usize>,
}

impl LtBatch {
    /// `count` matmuls over packed operands, one shared bias.
    pub fn packed(count: usize) -> Self {
        LtBatch { count, ..LtBatch::default() }
    }
}

/// A cuBLASLt matmul: `D = epilogue(alpha op(A) op(B) + beta C)`, `op(A)` `m x k`, `op(B)`
/// `k x n`, `C` and `D` `m x n`. `A` holds `TA`, `B` `TB`, `D` `TD`, `C` `TC` (`TD` unless `D`
/// is FP8), the epilogue's vectors `E`.
///
/// ```no_run
/// # use cusched::{Device, Handles};
/// # use cusched::blas_lt::{Epilogue, Matmul};
/// # let device = Device::open(0)?; let s = device.new_stream()?;
/// # let (a, b, d, bias) = (device.alloc_zeros::<f32>(s, 6)?, device.alloc_zeros::<f32>(s, 12)?, device.alloc_zeros::<f32>(s, 8)?, device.alloc_zeros::<f32>(s, 2)?);
/// let mut h = Handles::new(&device, s)?;
/// // D (2x4) = relu(A (2x3) · B (3x4) + bias)
/// h.blas_lt()?.matmul(&Matmul::new(2, 4, 3, &a, &b, &d).epilogue(Epilogue::ReluBias(&bias)))?.wait()?;
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Debug)]
pub struct Matmul<'a, TA: LtElement, TB: LtElement = TA, TD: LtElement = TA, TC: LtElement = TD, E: LtElement = TD> {
    /// Whether `A` is transposed.
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// How the matrices are stored.
    pub order: Order,
    /// Rows of `op(A)` and `D`.
    pub m: usize,
    /// Columns of `op(B)` and `D`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of `C` (zero: `C` is not read).
    pub beta: f32,
    /// `A`.
    pub a: &'a GpuRef<TA>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`.
    pub b: &'a GpuRef<TB>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`; `None`: `D` itself (read when `beta` is not zero).
    pub c: Option<&'a GpuRef<TC>>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
    /// `D`, written.
    pub d: &'a GpuRef<TD>,
    /// Leading dimension of `D`; `None`: packed.
    pub ldd: Option<usize>,
    /// Strided batches; `None`: one matmul.
    pub batch: Option<LtBatch>,
    /// The epilogue.
    pub epilogue: Epilogue<'a, E>,
    /// f32 inputs only: let the tensor cores round them to TF32 (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    pub tf32: bool,
    /// FP8 inputs: the per-tensor scales (required for them, refused for other types).
    pub fp8: Option<Fp8Scales<'a>>,
    /// FP8 inputs and an FP8 `D`: return the maximum absolute value of `D` (before `D`'s
    /// scale) through the completion, for the next step's scale. cuBLASLt computes it for an
    /// FP8 `D` only; with another `D` it is rejected as an invalid `amax_d`.
    pub amax_d: bool,
}

impl<'a, TA: LtElement, TB: LtElement, TD: LtElement> Matmul<'a, TA, TB, TD, TD, TD> {
    /// `D = A B` with packed column-major operands, no transposes, no epilogue.
    pub fn new(m: usize, n: usize, k: usize, a: &'a GpuRef<TA>, b: &'a GpuRef<TB>, d: &'a GpuRef<TD>) -> Self {
        Matmul {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            order: Order::Col,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            a,
            lda: None,
            b,
            ldb: None,
            c: None,
            ldc: None,
            d,
            ldd: None,
            batch: None,
            epilogue: Epilogue::Default,
            tf32: false,
            fp8: None,
            amax_d: false,
        }
    }
}

impl<'a, TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement> Matmul<'a, TA, TB, TD, TC, E> {
    /// Sets `alpha` and `beta`.
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        (self.alpha, self.beta) = (alpha, beta);
        self
    }

    /// Sets the transposes of `A` and `B`.
    pub fn transpose(mut self, a: Transpose, b: Transpose) -> Self {
        (self.trans_a, self.trans_b) = (a, b);
        self
    }

    /// Sets the storage order of all four matrices.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Sets the leading dimensions of `A`, `B` and `D` (and `C`, when it is `D`).
    pub fn leading(mut self, lda: usize, ldb: usize, ldd: usize) -> Self {
        (self.lda, self.ldb, self.ldd) = (Some(lda), Some(ldb), Some(ldd));
        self
    }

    /// Strided batches.
    pub fn batched(mut self, batch: LtBatch) -> Self {
        self.batch = Some(batch);
        self
    }

    /// Lets f32 inputs round to TF32.
    pub fn tf32(mut self, allowed: bool) -> Self {
        self.tf32 = allowed;
        self
    }

    /// FP8 scales, and whether to return `D`'s amax.
    pub fn fp8(mut self, scales: Fp8Scales<'a>, amax_d: bool) -> Self {
        (self.fp8, self.amax_d) = (Some(scales), amax_d);
        self
    }

    /// A separate `C` (of its own type when `D` is FP8) with leading dimension `ldc`.
    pub fn with_c<C2: LtElement>(self, c: &'a GpuRef<C2>, ldc: Option<usize>) -> Matmul<'a, TA, TB, TD, C2, E> {
        let epilogue = self.epilogue;
        Matmul { c: Some(c), ldc, ..self.retype(epilogue) }
    }

    /// Sets the epilogue (its vectors of type `E2`).
    pub fn epilogue<E2: LtElement>(self, epilogue: Epilogue<'a, E2>) -> Matmul<'a, TA, TB, TD, TC, E2> {
        let c = self.c;
        Matmul { c, ..self.retype(epilogue) }
    }

    /// The same matmul with `C` dropped and epilogue `epilogue`, for the type-changing setters.
    fn retype<C2: LtElement, E2: LtElement>(&self, epilogue: Epilogue<'a, E2>) -> Matmul<'a, TA, TB, TD, C2, E2> {
        Matmul {
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            order: self.order,
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: self.alpha,
            beta: self.beta,
            a: self.a,
            lda: self.lda,
            b: self.b,
            ldb: self.ldb,
            c: None,
            ldc: self.ldc,
            d: self.d,
            ldd: self.ldd,
            batch: self.batch,
            epilogue,
            tf32: self.tf32,
            fp8: self.fp8,
            amax_d: self.amax_d,
        }
    }
}

/// What a matmul's completion resolves with.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MatmulOutput {
    /// The maximum absolute value of `D`, when [`Matmul::amax_d`] asked for it.
    pub amax_d: Option<f32>,
}
