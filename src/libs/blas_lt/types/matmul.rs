//! [`Matmul`]: the description of one matmul or a strided batch of them ([`LtBatch`]), its
//! builder methods, and what its completion resolves with ([`MatmulOutput`]).

use super::sealed::ScaleValue;
use super::{Epilogue, Fp8Scales, LtElement, Order, Transpose};
use crate::memory::GpuRef;

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
    /// Stride of the bias vector; zero (the default): one bias for all. A bias gradient is
    /// written once per matmul: its stride must be at least one gradient's length.
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
/// is FP8), the epilogue's vectors `E`. Inputs other than FP8 have `A`'s type throughout,
/// except i8 inputs, whose `C` and `D` are i32.
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
    /// How `C` and `D` are stored, and `A` and `B` where [`order_a`](Self::order_a) and
    /// [`order_b`](Self::order_b) leave them to it.
    pub order: Order,
    /// How `A` is stored; `None`: as `D` ([`order`](Self::order)). A matrix in the other order
    /// than `D` is handed to cuBLASLt as its transpose in `D`'s order (the same memory), so every
    /// mix runs, except a complex matrix with [`Transpose::Conj`] (cuBLASLt has no conjugate
    /// without a transpose), refused as unsupported.
    pub order_a: Option<Order>,
    /// How `B` is stored; `None`: as `D`. As [`order_a`](Self::order_a).
    pub order_b: Option<Order>,
    /// Rows of `op(A)` and `D`.
    pub m: usize,
    /// Columns of `op(B)` and `D`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product, of `A`'s scale type ([`LtElement::Scale`]: `f32` but for f64,
    /// complex and i8 inputs).
    pub alpha: TA::Scale,
    /// Scale of `C` (zero: `C` is not read), of `alpha`'s type.
    pub beta: TA::Scale,
    /// `alpha` and `beta` read by the GPU from these one-element buffers when the matmul runs
    /// (`CUBLASLT_POINTER_MODE_DEVICE`), in place of [`alpha`](Self::alpha) and
    /// [`beta`](Self::beta); `None`: the host values. Declared as reads, so a kernel writing
    /// them on another stream is fenced. `C` (or `D`, when `C` is `D`) is declared read, as
    /// `beta` is unknown until then.
    #[allow(clippy::type_complexity)] // a pair of borrowed buffers reads plainer than a named type
    pub scale_device: Option<(&'a GpuRef<TA::Scale>, &'a GpuRef<TA::Scale>)>,
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
    /// FP8 inputs: let the kernel accumulate in the tensor cores' faster, less precise mode
    /// (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`), which skips the periodic promotion of partial sums
    /// to full f32. Off by default; refused for other inputs.
    pub fp8_fast_accum: bool,
    /// Which of the heuristic's candidate algorithms runs the matmul, by its index in
    /// [`BlasLt::candidates`](crate::blas_lt::BlasLt::candidates) (0: the heuristic's best).
    /// `None`: the heuristic's best, or the winner [`BlasLt::autotune`](crate::blas_lt::BlasLt::autotune)
    /// stored for this matmul. The simulator has one candidate, index 0.
    pub algorithm: Option<usize>,
    /// FP8 inputs and an FP8 `D`: return the maximum absolute value of `D` (before `D`'s
    /// scale) through the completion, for the next step's scale. cuBLASLt computes it for an
    /// FP8 `D` only; with another `D` it is rejected as an invalid `amax_d`.
    pub amax_d: bool,
    /// FP8 inputs with an FP8 GELU aux matrix: the scale the aux matrix is stored with
    /// (`CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER`: `aux = scale pre`), a device f32
    /// scalar; `None`: 1. cuBLASLt scales an FP8 aux only (an E4M3 [`Aux`](crate::blas_lt::Aux) of
    /// [`Epilogue::GeluAux`] beside an E4M3 `D` and an f16 `C`, from E4M3 inputs); elsewhere it is
    /// refused as an invalid `aux_scale`.
    pub aux_scale: Option<&'a GpuRef<f32>>,
    /// FP8 inputs with an FP8 GELU aux matrix: return the maximum absolute value of the aux
    /// matrix (before its scale) through the completion
    /// (`CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER`), as [`amax_d`](Self::amax_d) does for
    /// `D`. Refused as an invalid `amax_aux` where [`aux_scale`](Self::aux_scale) is.
    pub amax_aux: bool,
}

impl<'a, TA: LtElement, TB: LtElement, TD: LtElement> Matmul<'a, TA, TB, TD, TD, TD> {
    /// `D = A B` with packed column-major operands, no transposes, no epilogue.
    pub fn new(m: usize, n: usize, k: usize, a: &'a GpuRef<TA>, b: &'a GpuRef<TB>, d: &'a GpuRef<TD>) -> Self {
        Matmul {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            order: Order::Col,
            order_a: None,
            order_b: None,
            m,
            n,
            k,
            alpha: <TA::Scale as ScaleValue>::ONE,
            beta: <TA::Scale as ScaleValue>::ZERO,
            scale_device: None,
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
            fp8_fast_accum: false,
            algorithm: None,
            amax_d: false,
            aux_scale: None,
            amax_aux: false,
        }
    }
}

impl<'a, TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement> Matmul<'a, TA, TB, TD, TC, E> {
    /// Sets `alpha` and `beta`.
    pub fn scale(mut self, alpha: TA::Scale, beta: TA::Scale) -> Self {
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
        (self.order, self.order_a, self.order_b) = (order, None, None);
        self
    }

    /// Sets the storage order of each matrix: `A`, `B`, and `C` with `D` (see
    /// [`order_a`](Self::order_a)).
    pub fn orders(mut self, a: Order, b: Order, cd: Order) -> Self {
        (self.order, self.order_a, self.order_b) = (cd, Some(a), Some(b));
        self
    }

    /// Reads `alpha` and `beta` from device memory when the matmul runs (see
    /// [`scale_device`](Self::scale_device)).
    pub fn scale_device(mut self, alpha: &'a GpuRef<TA::Scale>, beta: &'a GpuRef<TA::Scale>) -> Self {
        self.scale_device = Some((alpha, beta));
        self
    }

    /// FP8 aux matrix: its scale, and whether to return its amax (see
    /// [`aux_scale`](Self::aux_scale) and [`amax_aux`](Self::amax_aux)).
    pub fn fp8_aux(mut self, scale: Option<&'a GpuRef<f32>>, amax: bool) -> Self {
        (self.aux_scale, self.amax_aux) = (scale, amax);
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

    /// FP8 inputs: turns the fast accumulation mode on or off (see
    /// [`fp8_fast_accum`](Self::fp8_fast_accum)).
    pub fn fp8_fast_accum(mut self, on: bool) -> Self {
        self.fp8_fast_accum = on;
        self
    }

    /// Runs the heuristic's candidate `index` (see [`algorithm`](Self::algorithm)).
    pub fn algorithm(mut self, index: usize) -> Self {
        self.algorithm = Some(index);
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

    /// The same matmul run with candidate `index`.
    pub(crate) fn with_algorithm(&self, index: usize) -> Self {
        let c = self.c;
        Matmul { c, algorithm: Some(index), ..self.retype(self.epilogue) }
    }

    /// The same matmul with `C` dropped and epilogue `epilogue`, for the type-changing setters.
    fn retype<C2: LtElement, E2: LtElement>(&self, epilogue: Epilogue<'a, E2>) -> Matmul<'a, TA, TB, TD, C2, E2> {
        Matmul {
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            order: self.order,
            order_a: self.order_a,
            order_b: self.order_b,
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: self.alpha,
            beta: self.beta,
            scale_device: self.scale_device,
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
            fp8_fast_accum: self.fp8_fast_accum,
            algorithm: self.algorithm,
            amax_d: self.amax_d,
            aux_scale: self.aux_scale,
            amax_aux: self.amax_aux,
        }
    }
}

/// What a matmul's completion resolves with.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MatmulOutput {
    /// The maximum absolute value of `D`, when [`Matmul::amax_d`] asked for it.
    pub amax_d: Option<f32>,
    /// The maximum absolute value of the aux matrix, when [`Matmul::amax_aux`] asked for it.
    pub amax_aux: Option<f32>,
}
