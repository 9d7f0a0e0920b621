//! cuBLAS: GEMM in f32, f64, f16 and bf16 (single, strided-batched and batched over arrays of
//! buffers), level 1, level 2 (`gemv`, `ger`) and level 3 (`geam`, `syrk`, `trsm`) in f32 and
//! f64.
//!
//! Matrices are column-major, as in cuBLAS. A leading dimension left as `None` means tightly
//! packed (the number of rows stored). Scalar results (`dot`, `nrm2`, `asum`, `iamax`, `iamin`)
//! are written by the GPU in device pointer mode into pinned memory and come back through the
//! op's [`Completion`]: the op itself never synchronizes the host.

use super::scalars::ScalarSlots;
use super::validate as check;
use super::{dptr, record, OpStream};
use crate::completion::{Completion, Deferred};
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::track::Access;
use cudarc::cublas::{result as raw, sys};
use std::ffi::{c_int, c_void};

/// Whether a matrix operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = Xᵀ`.
    Yes,
}

impl Transpose {
    fn raw(self) -> sys::cublasOperation_t {
        match self {
            Transpose::No => sys::cublasOperation_t::CUBLAS_OP_N,
            Transpose::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
        }
    }

    fn stored(self, rows: usize, cols: usize) -> (usize, usize) {
        match self {
            Transpose::No => (rows, cols),
            Transpose::Yes => (cols, rows),
        }
    }
}

/// Which triangle of a symmetric or triangular matrix is used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fill {
    /// The lower triangle.
    #[default]
    Lower,
    /// The upper triangle.
    Upper,
}

impl Fill {
    fn raw(self) -> sys::cublasFillMode_t {
        match self {
            Fill::Lower => sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
            Fill::Upper => sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        }
    }
}

/// Which side the triangular matrix of `trsm` multiplies from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Side {
    /// Solve `op(A) X = alpha B`.
    #[default]
    Left,
    /// Solve `X op(A) = alpha B`.
    Right,
}

/// Whether a triangular matrix has an implicit unit diagonal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Diag {
    /// The diagonal is read from the matrix.
    #[default]
    NonUnit,
    /// The diagonal is taken to be all ones and not read.
    Unit,
}

/// The handle's math mode: which reduced-precision shortcuts cuBLAS may take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MathMode {
    /// Full precision for f32 and f64 (no TF32); tensor cores for f16 and bf16.
    #[default]
    Default,
    /// f32 GEMMs may round their inputs to TF32 on tensor cores: several times faster, about
    /// three decimal digits of input precision.
    Tf32Allowed,
    /// Pedantic: no reduced-precision reductions anywhere, the slowest and most reproducible.
    Pedantic,
}

impl MathMode {
    fn raw(self) -> sys::cublasMath_t {
        match self {
            MathMode::Default => sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            MathMode::Tf32Allowed => sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            MathMode::Pedantic => sys::cublasMath_t::CUBLAS_PEDANTIC_MATH,
        }
    }
}

pub(crate) mod sealed {
    #![allow(unreachable_pub, missing_debug_implementations)]
    use cudarc::cublas::sys::{self, cublasHandle_t as H, cublasStatus_t as S};
    use std::ffi::c_int as I;

    /// How cuBLAS names an element type in its `Ex` entry points.
    pub trait GemmType {
        const DATA: sys::cudaDataType_t;
        const COMPUTE: sys::cublasComputeType_t;
    }

    type Op = sys::cublasOperation_t;

    /// The typed cuBLAS entry points of one real type: C signatures, spelled out.
    #[allow(clippy::type_complexity)]
    pub struct RealFns<T: 'static> {
        pub axpy: unsafe fn(H, I, *const T, *const T, I, *mut T, I) -> S,
        pub scal: unsafe fn(H, I, *const T, *mut T, I) -> S,
        pub dot: unsafe fn(H, I, *const T, I, *const T, I, *mut T) -> S,
        pub nrm2: unsafe fn(H, I, *const T, I, *mut T) -> S,
        pub asum: unsafe fn(H, I, *const T, I, *mut T) -> S,
        pub iamax: unsafe fn(H, I, *const T, I, *mut I) -> S,
        pub iamin: unsafe fn(H, I, *const T, I, *mut I) -> S,
        pub copy: unsafe fn(H, I, *const T, I, *mut T, I) -> S,
        pub swap: unsafe fn(H, I, *mut T, I, *mut T, I) -> S,
        pub rot: unsafe fn(H, I, *mut T, I, *mut T, I, *const T, *const T) -> S,
        pub gemv: unsafe fn(H, Op, I, I, *const T, *const T, I, *const T, I, *const T, *mut T, I) -> S,
        pub ger: unsafe fn(H, I, I, *const T, *const T, I, *const T, I, *mut T, I) -> S,
        pub geam: unsafe fn(H, Op, Op, I, I, *const T, *const T, I, *const T, *const T, I, *mut T, I) -> S,
        pub syrk: unsafe fn(H, sys::cublasFillMode_t, Op, I, I, *const T, *const T, I, *const T, *mut T, I) -> S,
        pub trsm: unsafe fn(
            H,
            sys::cublasSideMode_t,
            sys::cublasFillMode_t,
            Op,
            sys::cublasDiagType_t,
            I,
            I,
            *const T,
            *const T,
            I,
            *mut T,
            I,
        ) -> S,
    }

    /// Real types with the full level 1 to 3 surface.
    pub trait RealType: Sized + 'static {
        fn fns() -> &'static RealFns<Self>;
    }
}

/// Element types cuBLAS multiplies in [`Blas::gemm`]: `f32`, `f64`, `half::f16`, `half::bf16`.
pub trait GemmElement: Element + sealed::GemmType {
    /// The type of `alpha` and `beta`: `f32` for the half types (they accumulate in f32).
    type Scalar: Element + From<u8>;
}

/// Real types with the whole level 1 to 3 surface: `f32` and `f64`.
pub trait BlasReal: GemmElement<Scalar = Self> + sealed::RealType {}

macro_rules! gemm_element {
    ($t:ty, $scalar:ty, $data:ident, $compute:ident) => {
        impl sealed::GemmType for $t {
            const DATA: sys::cudaDataType_t = sys::cudaDataType_t::$data;
            const COMPUTE: sys::cublasComputeType_t = sys::cublasComputeType_t::$compute;
        }
        impl GemmElement for $t {
            type Scalar = $scalar;
        }
    };
}
gemm_element!(f32, f32, CUDA_R_32F, CUBLAS_COMPUTE_32F);
gemm_element!(f64, f64, CUDA_R_64F, CUBLAS_COMPUTE_64F);
gemm_element!(half::f16, f32, CUDA_R_16F, CUBLAS_COMPUTE_32F);
gemm_element!(half::bf16, f32, CUDA_R_16BF, CUBLAS_COMPUTE_32F);

macro_rules! real_type {
    ($t:ty, $table:ident: $($field:ident = $f:ident),* $(,)?) => {
        static $table: sealed::RealFns<$t> = sealed::RealFns { $($field: sys::$f),* };
        impl sealed::RealType for $t {
            fn fns() -> &'static sealed::RealFns<$t> {
                &$table
            }
        }
        impl BlasReal for $t {}
    };
}
real_type!(f32, F32_FNS: axpy = cublasSaxpy_v2, scal = cublasSscal_v2, dot = cublasSdot_v2, nrm2 = cublasSnrm2_v2,
    asum = cublasSasum_v2, iamax = cublasIsamax_v2, iamin = cublasIsamin_v2, copy = cublasScopy_v2,
    swap = cublasSswap_v2, rot = cublasSrot_v2, gemv = cublasSgemv_v2, ger = cublasSger_v2, geam = cublasSgeam,
    syrk = cublasSsyrk_v2, trsm = cublasStrsm_v2);
real_type!(f64, F64_FNS: axpy = cublasDaxpy_v2, scal = cublasDscal_v2, dot = cublasDdot_v2, nrm2 = cublasDnrm2_v2,
    asum = cublasDasum_v2, iamax = cublasIdamax_v2, iamin = cublasIdamin_v2, copy = cublasDcopy_v2,
    swap = cublasDswap_v2, rot = cublasDrot_v2, gemv = cublasDgemv_v2, ger = cublasDger_v2, geam = cublasDgeam,
    syrk = cublasDsyrk_v2, trsm = cublasDtrsm_v2);

/// A strided view of a vector: `n` elements of `buf` starting at index 0, `inc` apart (a
/// negative `inc` walks the same elements backwards, as in BLAS).
#[derive(Debug)]
pub struct Vector<'a, T: Element> {
    /// The buffer.
    pub buf: &'a GpuRef<T>,
    /// Distance between consecutive elements; not zero.
    pub inc: isize,
}

impl<'a, T: Element> Vector<'a, T> {
    /// Every `inc`-th element of `buf`.
    pub fn strided(buf: &'a GpuRef<T>, inc: isize) -> Self {
        Vector { buf, inc }
    }
}

impl<'a, T: Element> From<&'a GpuRef<T>> for Vector<'a, T> {
    fn from(buf: &'a GpuRef<T>) -> Self {
        Vector { buf, inc: 1 }
    }
}

impl<T: Element> Clone for Vector<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for Vector<'_, T> {}

/// `C = alpha op(A) op(B) + beta C`, with `op(A)` `m x k`, `op(B)` `k x n` and `C` `m x n`.
///
/// ```no_run
/// # use cusched::{Device, Handles};
/// # use cusched::blas::Gemm;
/// # let device = Device::open(0)?; let s = device.new_stream()?;
/// # let (a, b, c) = (device.alloc_zeros::<f32>(s, 6)?, device.alloc_zeros::<f32>(s, 12)?, device.alloc_zeros::<f32>(s, 8)?);
/// let mut h = Handles::new(&device, s)?;
/// // C (2x4) = A (2x3) · B (3x4)
/// h.blas()?.gemm(&Gemm::new(2, 4, 3, &a, &b, &c))?.wait()?;
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Debug)]
pub struct Gemm<'a, T: GemmElement> {
    /// Whether `A` is transposed.
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: T::Scalar,
    /// Scale of `C`'s old contents (zero: `C` is only written).
    pub beta: T::Scalar,
    /// `A`, stored `m x k` (or `k x m` when transposed).
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`, stored `k x n` (or `n x k` when transposed).
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`, `m x n`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

impl<'a, T: GemmElement> Gemm<'a, T> {
    /// `C = A B` with packed operands, no transposes.
    pub fn new(m: usize, n: usize, k: usize, a: &'a GpuRef<T>, b: &'a GpuRef<T>, c: &'a GpuRef<T>) -> Self {
        Gemm {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            m,
            n,
            k,
            alpha: T::Scalar::from(1),
            beta: T::Scalar::from(0),
            a,
            lda: None,
            b,
            ldb: None,
            c,
            ldc: None,
        }
    }
}

impl<T: GemmElement> Gemm<'_, T> {
    /// Sets `alpha` and `beta`.
    pub fn scale(mut self, alpha: T::Scalar, beta: T::Scalar) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// Sets the transposes of `A` and `B`.
    pub fn transpose(mut self, a: Transpose, b: Transpose) -> Self {
        self.trans_a = a;
        self.trans_b = b;
        self
    }

    /// Sets the leading dimensions.
    pub fn leading(mut self, lda: usize, ldb: usize, ldc: usize) -> Self {
        (self.lda, self.ldb, self.ldc) = (Some(lda), Some(ldb), Some(ldc));
        self
    }
}

/// A GEMM's checked integer arguments.
struct GemmDims {
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldb: c_int,
    ldc: c_int,
    /// Elements each operand spans.
    spans: [usize; 3],
}

fn matrix_span(arg: &'static str, rows: usize, cols: usize, ld: usize) -> Result<usize> {
    check::matrix_span(rows, cols, ld)
        .ok_or_else(|| Error::invalid(arg, format!("a {rows}x{cols} matrix with leading dimension {ld} overflows")))
}

impl<T: GemmElement> Gemm<'_, T> {
    fn dims(&self) -> Result<GemmDims> {
        let (m, n, k) =
            (check::dim("m", self.m, false)?, check::dim("n", self.n, false)?, check::dim("k", self.k, false)?);
        let (ar, ac) = self.trans_a.stored(self.m, self.k);
        let (br, bc) = self.trans_b.stored(self.k, self.n);
        let lda = self.lda.unwrap_or(ar);
        let ldb = self.ldb.unwrap_or(br);
        let ldc = self.ldc.unwrap_or(self.m);
        let (lda_i, ldb_i, ldc_i) =
            (check::ld("lda", lda, ar)?, check::ld("ldb", ldb, br)?, check::ld("ldc", ldc, self.m)?);
        let spans =
            [matrix_span("a", ar, ac, lda)?, matrix_span("b", br, bc, ldb)?, matrix_span("c", self.m, self.n, ldc)?];
        Ok(GemmDims { m, n, k, lda: lda_i, ldb: ldb_i, ldc: ldc_i, spans })
    }

    /// A recorder with the GEMM's three uses.
    fn recorder(&self, op: &OpStream, name: &'static str) -> Result<crate::recorder::LaunchRecorder> {
        let mut rec = op.recorder(name);
        record(&mut rec, "a", self.a, Access::Read)?;
        record(&mut rec, "b", self.b, Access::Read)?;
        record(&mut rec, "c", self.c, gemm_c_access(self.beta))?;
        Ok(rec)
    }

    fn check_buffers(&self, spans: [usize; 3], batch: &str) -> Result<()> {
        check::covers("a", self.a, Some(spans[0]), &format!("op(A) {}x{}{batch}", self.m, self.k))?;
        check::covers("b", self.b, Some(spans[1]), &format!("op(B) {}x{}{batch}", self.k, self.n))?;
        check::covers("c", self.c, Some(spans[2]), &format!("C {}x{}{batch}", self.m, self.n))?;
        if self.c.same_buffer(self.a) || self.c.same_buffer(self.b) {
            return Err(Error::invalid(
                "c",
                "must not be the same buffer as `a` or `b` (cuBLAS does not allow aliasing)",
            ));
        }
        Ok(())
    }
}

/// Element strides between consecutive matrices of a strided-batched GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchStrides {
    /// How many GEMMs.
    pub count: usize,
    /// Stride of `A` (zero: every GEMM reads the same `A`); `None`: packed.
    pub a: Option<usize>,
    /// Stride of `B` (zero allowed, as for `a`); `None`: packed.
    pub b: Option<usize>,
    /// Stride of `C`; at least the span of one `C`, so that no two GEMMs write the same element.
    pub c: Option<usize>,
}

impl BatchStrides {
    /// `count` GEMMs over matrices packed one after another.
    pub fn packed(count: usize) -> Self {
        BatchStrides { count, a: None, b: None, c: None }
    }
}

/// `C[i] = alpha op(A[i]) op(B[i]) + beta C[i]` over arrays of buffers sharing one shape.
#[derive(Debug)]
pub struct GemmBatched<'a, T: GemmElement> {
    /// Whether each `A` is transposed.
    pub trans_a: Transpose,
    /// Whether each `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the products.
    pub alpha: T::Scalar,
    /// Scale of each `C`'s old contents.
    pub beta: T::Scalar,
    /// The `A` matrices (packed).
    pub a: &'a [GpuRef<T>],
    /// The `B` matrices (packed).
    pub b: &'a [GpuRef<T>],
    /// The `C` matrices (packed), all distinct.
    pub c: &'a [GpuRef<T>],
}

/// `y = alpha op(A) x + beta y`, with `A` stored `m x n`.
#[derive(Debug)]
pub struct Gemv<'a, T: BlasReal> {
    /// Whether `A` is transposed.
    pub trans: Transpose,
    /// Rows of the stored `A`.
    pub m: usize,
    /// Columns of the stored `A`.
    pub n: usize,
    /// Scale of the product.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `x`: `n` elements (`m` when transposed).
    pub x: Vector<'a, T>,
    /// Scale of `y`'s old contents.
    pub beta: T,
    /// `y`: `m` elements (`n` when transposed).
    pub y: Vector<'a, T>,
}

/// `C = alpha op(A) + beta op(B)`, with `C` `m x n`.
#[derive(Debug)]
pub struct Geam<'a, T: BlasReal> {
    /// Whether `A` is transposed.
    pub trans_a: Transpose,
    /// Whether `B` is transposed.
    pub trans_b: Transpose,
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// Scale of `op(A)`.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// Scale of `op(B)`.
    pub beta: T,
    /// `B`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`, distinct from `A` and `B`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

/// `C = alpha op(A) op(A)ᵀ + beta C` on the `fill` triangle of the `n x n` matrix `C`, with
/// `op(A)` `n x k`.
#[derive(Debug)]
pub struct Syrk<'a, T: BlasReal> {
    /// The triangle of `C` written (the other is untouched).
    pub fill: Fill,
    /// `Yes`: `C = alpha Aᵀ A + beta C`, with `A` stored `k x n`.
    pub trans: Transpose,
    /// Order of `C`.
    pub n: usize,
    /// Columns of `op(A)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// Scale of `C`'s old contents.
    pub beta: T,
    /// `C`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

/// Solves `op(A) X = alpha B` (or `X op(A) = alpha B`) for the `m x n` matrix `X`, which
/// overwrites `B`; `A` is triangular.
#[derive(Debug)]
pub struct Trsm<'a, T: BlasReal> {
    /// Which side `A` is on.
    pub side: Side,
    /// Which triangle of `A` is read.
    pub fill: Fill,
    /// Whether `A` is transposed.
    pub trans: Transpose,
    /// Whether `A`'s diagonal is implicitly one.
    pub diag: Diag,
    /// Rows of `B`.
    pub m: usize,
    /// Columns of `B`.
    pub n: usize,
    /// Scale of `B`.
    pub alpha: T,
    /// `A`: `m x m` (left) or `n x n` (right).
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`, overwritten by `X`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
}

/// A cuBLAS handle bound to one stream. Get it from [`crate::Handles::blas`] (on a lane or
/// inline); every op validates its arguments, fences, enqueues and commits, and returns a
/// [`Completion`] for its own work.
pub struct Blas {
    op: OpStream,
    raw: Option<RawHandle>,
    math: MathMode,
    slots: ScalarSlots,
}

struct RawHandle(sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread as long as one thread uses it at a time;
// `Blas` methods take `&mut self` for every call that uses it.
unsafe impl Send for RawHandle {}

impl super::StreamLibrary for Blas {
    fn create(device: &Device, stream: StreamId) -> Result<Self> {
        Blas::new(device, stream)
    }

    fn op_stream(&self) -> &OpStream {
        &self.op
    }

    /// Drops a handle of a poisoned context without calling cuBLAS on it (its memory goes with
    /// that context).
    fn abandon(mut self) {
        if let Some(h) = self.raw.take() {
            std::mem::forget(h);
        }
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // cublasDestroy synchronizes the device: the reaper runs it once the stream's work is
        // done, off this thread. The scalar slabs go with it (their free waits too).
        if let Some(h) = self.raw.take() {
            let slots = std::mem::take(&mut self.slots);
            self.op.retire("a cuBLAS handle", (h, slots));
        }
    }
}

impl Drop for RawHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from `cublasCreate` and is destroyed once, here (on the
        // reaper, with its context bound, after the work enqueued with it has finished).
        if let Err(e) = unsafe { raw::destroy_handle(self.0) } {
            log::error!("cusched: cublasDestroy failed: {e:?}");
        }
    }
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blas({}, {:?})", self.op.stream, self.math)
    }
}

fn status(call: &'static str, s: sys::cublasStatus_t) -> Result<()> {
    s.result().map_err(|e| Error::library(call, e.0))
}

impl Blas {
    pub(crate) fn new(device: &Device, stream: StreamId) -> Result<Blas> {
        let op = OpStream::new(device, stream, "cuBLAS (libcublas)");
        let raw = if device.is_simulated() {
            None
        } else {
            // SAFETY: only tries to dlopen cuBLAS by name; cudarc panics later if it is missing.
            if !unsafe { sys::is_culib_present() } {
                return Err(Error::LibraryUnavailable {
                    library: "cuBLAS (libcublas)",
                    hint: "install the CUDA toolkit's cuBLAS library (libcublas.so.13)",
                });
            }
            let s = device.cuda_stream(stream)?;
            crate::backend::cuda::bind(s.context())?;
            let h = RawHandle(raw::create_handle().map_err(|e| Error::library("cublasCreate", e.0))?);
            // SAFETY: both handles are live; the stream outlives the handle because the device
            // keeps its streams until it is dropped, after every lane and `Handles` is gone.
            unsafe { raw::set_stream(h.0, s.cu_stream() as _) }.map_err(|e| Error::library("cublasSetStream", e.0))?;
            Some(h)
        };
        let slots = ScalarSlots::new(device.cuda_context().ok());
        Ok(Blas { op, raw, math: MathMode::Default, slots })
    }

    /// The raw cuBLAS handle, for calls cusched does not wrap. Declare their buffer uses on a
    /// [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself, and leave the handle's
    /// stream and pointer mode as they are.
    pub fn cublas_handle(&self) -> Result<sys::cublasHandle_t> {
        self.handle()
    }

    /// The stream this handle enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }

    /// The current math mode.
    pub fn math_mode(&self) -> MathMode {
        self.math
    }

    /// Sets the math mode for later ops (on the simulator it is only remembered).
    pub fn set_math_mode(&mut self, mode: MathMode) -> Result<()> {
        if let Some(h) = &self.raw {
            // SAFETY: a live handle; the call only changes a handle setting.
            status("cublasSetMathMode", unsafe { sys::cublasSetMathMode(h.0, mode.raw()) })?;
        }
        self.math = mode;
        Ok(())
    }

    fn handle(&self) -> Result<sys::cublasHandle_t> {
        self.raw.as_ref().map(|h| h.0).ok_or_else(|| self.op.unavailable_on_sim())
    }

    /// `C = alpha op(A) op(B) + beta C` (see [`Gemm`]).
    pub fn gemm<T: GemmElement>(&mut self, g: &Gemm<'_, T>) -> Result<Completion<()>> {
        let d = g.dims()?;
        g.check_buffers(d.spans, "")?;
        let rec = g.recorder(&self.op, "gemm")?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            let (a, b, c) = (dptr::<T, c_void>(g.a)?, dptr::<T, c_void>(g.b)?, dptr::<T, c_void>(g.c)?);
            // SAFETY: the pointers are live device buffers of this context, each covering the
            // span validated above for its shape and leading dimension; alpha and beta are host
            // scalars of the compute type (host pointer mode); the handle's stream is the
            // recorder's, fenced by preflight.
            status("cublasGemmEx", unsafe {
                sys::cublasGemmEx(
                    h,
                    g.trans_a.raw(),
                    g.trans_b.raw(),
                    d.m,
                    d.n,
                    d.k,
                    (&g.alpha as *const T::Scalar).cast(),
                    a,
                    T::DATA,
                    d.lda,
                    b,
                    T::DATA,
                    d.ldb,
                    (&g.beta as *const T::Scalar).cast(),
                    c,
                    T::DATA,
                    d.ldc,
                    T::COMPUTE,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            })
        })
    }

    /// `batch.count` GEMMs over matrices `stride` elements apart in `g.a`, `g.b` and `g.c`.
    pub fn gemm_strided_batched<T: GemmElement>(
        &mut self,
        g: &Gemm<'_, T>,
        batch: BatchStrides,
    ) -> Result<Completion<()>> {
        let d = g.dims()?;
        let count = check::dim("batch.count", batch.count, false)?;
        let sa = batch.a.unwrap_or(d.spans[0]);
        let sb = batch.b.unwrap_or(d.spans[1]);
        let sc = batch.c.unwrap_or(d.spans[2]);
        if batch.count > 1 && sc < d.spans[2] {
            return Err(Error::invalid(
                "batch.c",
                format!(
                    "stride {sc} is below one C's span of {} elements: GEMMs would overwrite each other",
                    d.spans[2]
                ),
            ));
        }
        let total = |arg: &'static str, stride: usize, span: usize| -> Result<usize> {
            stride
                .checked_mul(batch.count - 1)
                .and_then(|x| x.checked_add(span))
                .ok_or_else(|| Error::invalid(arg, format!("stride {stride} times {} overflows", batch.count)))
        };
        let spans =
            [total("batch.a", sa, d.spans[0])?, total("batch.b", sb, d.spans[1])?, total("batch.c", sc, d.spans[2])?];
        g.check_buffers(spans, &format!(" x {} strided", batch.count))?;
        let strides = [sa, sb, sc].map(|s| s as i64);
        let rec = g.recorder(&self.op, "gemm_strided_batched")?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            let (a, b, c) = (dptr::<T, c_void>(g.a)?, dptr::<T, c_void>(g.b)?, dptr::<T, c_void>(g.c)?);
            // SAFETY: as in `gemm`; every one of the `count` matrices lies inside its buffer (the
            // last starts at `stride * (count - 1)` and the buffers cover that plus one span).
            status("cublasGemmStridedBatchedEx", unsafe {
                sys::cublasGemmStridedBatchedEx(
                    h,
                    g.trans_a.raw(),
                    g.trans_b.raw(),
                    d.m,
                    d.n,
                    d.k,
                    (&g.alpha as *const T::Scalar).cast(),
                    a,
                    T::DATA,
                    d.lda,
                    strides[0],
                    b,
                    T::DATA,
                    d.ldb,
                    strides[1],
                    (&g.beta as *const T::Scalar).cast(),
                    c,
                    T::DATA,
                    d.ldc,
                    strides[2],
                    count,
                    T::COMPUTE,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            })
        })
    }

    /// One GEMM per entry of `g.a`, `g.b`, `g.c` (packed operands of one shape). The arrays of
    /// device pointers are uploaded on the stream and freed after the GPU is done.
    pub fn gemm_batched<T: GemmElement>(&mut self, g: &GemmBatched<'_, T>) -> Result<Completion<()>> {
        let count = check::dim("a", g.a.len(), false)?;
        if g.b.len() != g.a.len() || g.c.len() != g.a.len() {
            return Err(Error::invalid(
                "c",
                format!("a, b and c must hold as many matrices: {}, {}, {}", g.a.len(), g.b.len(), g.c.len()),
            ));
        }
        let first = Gemm {
            trans_a: g.trans_a,
            trans_b: g.trans_b,
            m: g.m,
            n: g.n,
            k: g.k,
            alpha: g.alpha,
            beta: g.beta,
            a: &g.a[0],
            lda: None,
            b: &g.b[0],
            ldb: None,
            c: &g.c[0],
            ldc: None,
        };
        let d = first.dims()?;
        let mut rec = self.op.recorder("gemm_batched");
        for i in 0..g.a.len() {
            let one = Gemm { a: &g.a[i], b: &g.b[i], c: &g.c[i], ..first };
            one.check_buffers(d.spans, &format!(" (entry {i})"))?;
            if g.c[..i].iter().any(|c| c.same_buffer(&g.c[i])) {
                return Err(Error::invalid("c", format!("entry {i} repeats an earlier C: the GEMMs would race")));
            }
            record(&mut rec, "a", &g.a[i], Access::Read)?;
            record(&mut rec, "b", &g.b[i], Access::Read)?;
            record(&mut rec, "c", &g.c[i], gemm_c_access(g.beta))?;
        }
        let h = self.handle()?;
        let _ = self.op.cuda_stream()?;
        let ptrs = |bufs: &[GpuRef<T>]| bufs.iter().map(|b| b.raw_device_ptr()).collect::<Result<Vec<u64>>>();
        let (pa, pb, pc) = (ptrs(g.a)?, ptrs(g.b)?, ptrs(g.c)?);
        // The pointer arrays are tracked buffers like any other: uploaded on this stream, read by
        // the GEMM, freed after it.
        let device = &self.op.device;
        let (da, db, dc) = (
            device.upload(self.op.stream, &pa)?,
            device.upload(self.op.stream, &pb)?,
            device.upload(self.op.stream, &pc)?,
        );
        for (arg, p) in [("a", &da), ("b", &db), ("c", &dc)] {
            record(&mut rec, arg, p, Access::Read)?;
        }
        let (aa, ab, ac) =
            (dptr::<u64, *const c_void>(&da)?, dptr::<u64, *const c_void>(&db)?, dptr::<u64, *mut c_void>(&dc)?);
        let (m, n, kk, lda, ldb, ldc) = (d.m, d.n, d.k, d.lda, d.ldb, d.ldc);
        self.op.run(rec, vec![Box::new((da, db, dc))], || {
            // SAFETY: the three device arrays hold `count` pointers each, to live buffers that
            // cover one packed matrix of their shape (checked per entry above); every C is
            // distinct; alpha and beta are host scalars of the compute type.
            status("cublasGemmBatchedEx", unsafe {
                sys::cublasGemmBatchedEx(
                    h,
                    g.trans_a.raw(),
                    g.trans_b.raw(),
                    m,
                    n,
                    kk,
                    (&g.alpha as *const T::Scalar).cast(),
                    aa,
                    T::DATA,
                    lda,
                    ab,
                    T::DATA,
                    ldb,
                    (&g.beta as *const T::Scalar).cast(),
                    ac,
                    T::DATA,
                    ldc,
                    count,
                    T::COMPUTE,
                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            })
        })
    }
}

/// `beta == 0` means `C` is only written (cuBLAS does not read it then, so NaNs in it are
/// harmless); otherwise it is read too.
fn gemm_c_access<S: Element>(beta: S) -> Access {
    if beta == S::default() {
        Access::Write
    } else {
        Access::ReadWrite
    }
}

/// Checks a vector argument for `n` elements and returns its increment.
fn vector<T: Element>(arg: &'static str, inc_arg: &'static str, v: Vector<'_, T>, n: usize) -> Result<c_int> {
    let inc = check::inc(inc_arg, v.inc)?;
    check::covers(arg, v.buf, check::vector_span(n, v.inc), &format!("{n} elements {} apart", v.inc))?;
    Ok(inc)
}

/// Checks a vector argument whose increment must be positive: for `scal`, `nrm2`, `asum`,
/// `iamax` and `iamin`, BLAS defines a non-positive increment as "do nothing", which would
/// silently skip the op.
fn forward_vector<T: Element>(arg: &'static str, inc_arg: &'static str, v: Vector<'_, T>, n: usize) -> Result<c_int> {
    if v.inc < 0 {
        return Err(Error::invalid(inc_arg, format!("{} is negative; this op needs a positive increment", v.inc)));
    }
    vector(arg, inc_arg, v, n)
}

/// Level 1, f32 and f64.
impl Blas {
    /// Validates the `n`-element vectors `x` and `y` (distinct buffers when `distinct`) and
    /// records them; returns `n` and both increments as the library's ints.
    fn pair<T: BlasReal>(
        &self,
        name: &'static str,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        [x_access, y_access]: [Access; 2],
        distinct: bool,
    ) -> Result<(c_int, c_int, c_int, crate::recorder::LaunchRecorder)> {
        let ni = check::dim("n", n, false)?;
        let (incx, incy) = (vector("x", "x.inc", x, n)?, vector("y", "y.inc", y, n)?);
        if distinct {
            check::distinct("y", x.buf, y.buf)?;
        }
        let mut rec = self.op.recorder(name);
        record(&mut rec, "x", x.buf, x_access)?;
        record(&mut rec, "y", y.buf, y_access)?;
        Ok((ni, incx, incy, rec))
    }

    /// `y = alpha x + y` over `n` elements.
    pub fn axpy<T: BlasReal>(
        &mut self,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("axpy", n, x, y, [Access::Read, Access::ReadWrite], true)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x and y are live device buffers covering n elements at their increments
            // (validated); alpha is a host scalar (host pointer mode).
            status("cublas<t>axpy", unsafe { (T::fns().axpy)(h, ni, &alpha, dptr(x.buf)?, incx, dptr(y.buf)?, incy) })
        })
    }

    /// `x = alpha x` over `n` elements (`x.inc` positive).
    pub fn scal<T: BlasReal>(&mut self, n: usize, alpha: T, x: Vector<'_, T>) -> Result<Completion<()>> {
        let ni = check::dim("n", n, false)?;
        let incx = forward_vector("x", "x.inc", x, n)?;
        let mut rec = self.op.recorder("scal");
        record(&mut rec, "x", x.buf, Access::ReadWrite)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x covers n elements at its increment; alpha is a host scalar.
            status("cublas<t>scal", unsafe { (T::fns().scal)(h, ni, &alpha, dptr(x.buf)?, incx) })
        })
    }

    /// `y = x` over `n` elements.
    pub fn copy<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("copy", n, x, y, [Access::Read, Access::Write], true)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x and y cover n elements at their increments and are distinct buffers.
            status("cublas<t>copy", unsafe { (T::fns().copy)(h, ni, dptr(x.buf)?, incx, dptr(y.buf)?, incy) })
        })
    }

    /// Exchanges `x` and `y` over `n` elements.
    pub fn swap<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("swap", n, x, y, [Access::ReadWrite, Access::ReadWrite], true)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x and y cover n elements at their increments and are distinct buffers.
            status("cublas<t>swap", unsafe { (T::fns().swap)(h, ni, dptr(x.buf)?, incx, dptr(y.buf)?, incy) })
        })
    }

    /// Applies the plane rotation `[c s; -s c]` to the pairs `(x[i], y[i])`.
    pub fn rot<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        c: T,
        s: T,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("rot", n, x, y, [Access::ReadWrite, Access::ReadWrite], true)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x and y cover n elements at their increments and are distinct; c and s are
            // host scalars.
            status("cublas<t>rot", unsafe { (T::fns().rot)(h, ni, dptr(x.buf)?, incx, dptr(y.buf)?, incy, &c, &s) })
        })
    }

    /// `xᵀ y` over `n` elements, delivered by the completion.
    pub fn dot<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<T>> {
        let (ni, incx, incy, rec) = self.pair("dot", n, x, y, [Access::Read, Access::Read], false)?;
        self.scalar_op(
            rec,
            "cublas<t>dot",
            move |h, out: *mut T| {
                // SAFETY: x and y cover n elements at their increments; `out` is a device-mapped
                // pinned slot the handle writes in device pointer mode.
                Ok(unsafe { (T::fns().dot)(h, ni, dptr(x.buf)?, incx, dptr(y.buf)?, incy, out) })
            },
            |v: T| v,
        )
    }

    /// The Euclidean norm of `x` over `n` elements, delivered by the completion.
    pub fn nrm2<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T>> {
        self.reduce(n, x, "cublas<t>nrm2", T::fns().nrm2)
    }

    /// The sum of absolute values of `x` over `n` elements, delivered by the completion.
    pub fn asum<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T>> {
        self.reduce(n, x, "cublas<t>asum", T::fns().asum)
    }

    /// The 0-based index (counted in elements of the view) of the first largest `|x[i]|`.
    pub fn iamax<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amax", T::fns().iamax)
    }

    /// The 0-based index of the first smallest `|x[i]|`.
    pub fn iamin<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amin", T::fns().iamin)
    }

    #[allow(clippy::type_complexity)]
    fn reduce<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        call: &'static str,
        f: unsafe fn(sys::cublasHandle_t, c_int, *const T, c_int, *mut T) -> sys::cublasStatus_t,
    ) -> Result<Completion<T>> {
        let ni = check::dim("n", n, false)?;
        let incx = forward_vector("x", "x.inc", x, n)?;
        let mut rec = self.op.recorder(call);
        record(&mut rec, "x", x.buf, Access::Read)?;
        self.scalar_op(
            rec,
            call,
            move |h, out: *mut T| {
                // SAFETY: x covers n elements at its increment; `out` is a device-mapped slot.
                Ok(unsafe { f(h, ni, dptr(x.buf)?, incx, out) })
            },
            |v: T| v,
        )
    }

    #[allow(clippy::type_complexity)]
    fn index_of<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        call: &'static str,
        f: unsafe fn(sys::cublasHandle_t, c_int, *const T, c_int, *mut c_int) -> sys::cublasStatus_t,
    ) -> Result<Completion<usize>> {
        let ni = check::dim("n", n, false)?;
        let incx = forward_vector("x", "x.inc", x, n)?;
        let mut rec = self.op.recorder(call);
        record(&mut rec, "x", x.buf, Access::Read)?;
        // cuBLAS counts from 1 (and returns 0 only for an empty vector, rejected above).
        self.scalar_op(
            rec,
            call,
            move |h, out: *mut c_int| {
                // SAFETY: x covers n elements at its increment; `out` is a device-mapped slot.
                Ok(unsafe { f(h, ni, dptr(x.buf)?, incx, out) })
            },
            |i: c_int| usize::try_from(i).unwrap_or(0).saturating_sub(1),
        )
    }

    /// Runs a reduction that writes one `R` in device pointer mode into a pinned slot, read
    /// when the completion resolves.
    fn scalar_op<R: Copy + Send + 'static, V: Send + 'static>(
        &mut self,
        rec: crate::recorder::LaunchRecorder,
        call: &'static str,
        f: impl FnOnce(sys::cublasHandle_t, *mut R) -> Result<sys::cublasStatus_t>,
        convert: fn(R) -> V,
    ) -> Result<Completion<V>> {
        let h = self.handle()?;
        let stream = self.op.cuda_stream()?;
        crate::backend::cuda::bind(stream.context())?;
        let slot = self.slots.take()?;
        self.op.run_deferred(rec, Vec::new(), || {
            let out = slot.device_ptr::<R>();
            // SAFETY: a live handle; the mode is switched back before returning, so other ops
            // keep passing host scalars.
            status("cublasSetPointerMode", unsafe {
                sys::cublasSetPointerMode_v2(h, sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE)
            })?;
            let st = f(h, out);
            // SAFETY: as above.
            let back = status("cublasSetPointerMode", unsafe {
                sys::cublasSetPointerMode_v2(h, sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST)
            });
            status(call, st?)?;
            back?;
            let read: Deferred<V> = Box::new(move || Ok(convert(slot.read::<R>())));
            Ok(read)
        })
    }
}

/// Level 2 and 3, f32 and f64.
impl Blas {
    /// `y = alpha op(A) x + beta y` (see [`Gemv`]).
    pub fn gemv<T: BlasReal>(&mut self, g: &Gemv<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let lda = g.lda.unwrap_or(g.m);
        let lda_i = check::ld("lda", lda, g.m)?;
        check::covers("a", g.a, check::matrix_span(g.m, g.n, lda), &format!("A {}x{}", g.m, g.n))?;
        let (xn, yn) = match g.trans {
            Transpose::No => (g.n, g.m),
            Transpose::Yes => (g.m, g.n),
        };
        let (incx, incy) = (vector("x", "x.inc", g.x, xn)?, vector("y", "y.inc", g.y, yn)?);
        if g.y.buf.same_buffer(g.a) || g.y.buf.same_buffer(g.x.buf) {
            return Err(Error::invalid("y", "must not be the same buffer as `a` or `x`"));
        }
        let mut rec = self.op.recorder("gemv");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "x", g.x.buf, Access::Read)?;
        record(&mut rec, "y", g.y.buf, gemm_c_access(g.beta))?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: A covers m x n at lda; x and y cover their lengths at their increments;
            // y is distinct from the inputs; alpha and beta are host scalars.
            status("cublas<t>gemv", unsafe {
                (T::fns().gemv)(
                    h,
                    g.trans.raw(),
                    m,
                    n,
                    &g.alpha,
                    dptr(g.a)?,
                    lda_i,
                    dptr(g.x.buf)?,
                    incx,
                    &g.beta,
                    dptr(g.y.buf)?,
                    incy,
                )
            })
        })
    }

    /// `A = alpha x yᵀ + A`, with `A` `m x n` (`lda`: `None` for packed).
    #[allow(clippy::too_many_arguments)]
    pub fn ger<T: BlasReal>(
        &mut self,
        m: usize,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        a: &GpuRef<T>,
        lda: Option<usize>,
    ) -> Result<Completion<()>> {
        let (mi, ni) = (check::dim("m", m, false)?, check::dim("n", n, false)?);
        let lda = lda.unwrap_or(m);
        let lda_i = check::ld("lda", lda, m)?;
        check::covers("a", a, check::matrix_span(m, n, lda), &format!("A {m}x{n}"))?;
        let (incx, incy) = (vector("x", "x.inc", x, m)?, vector("y", "y.inc", y, n)?);
        if a.same_buffer(x.buf) || a.same_buffer(y.buf) {
            return Err(Error::invalid("a", "must not be the same buffer as `x` or `y`"));
        }
        let mut rec = self.op.recorder("ger");
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "y", y.buf, Access::Read)?;
        record(&mut rec, "a", a, Access::ReadWrite)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: x, y and A cover their validated spans; A is distinct from x and y.
            status("cublas<t>ger", unsafe {
                (T::fns().ger)(h, mi, ni, &alpha, dptr(x.buf)?, incx, dptr(y.buf)?, incy, dptr(a)?, lda_i)
            })
        })
    }

    /// `C = alpha op(A) + beta op(B)` (see [`Geam`]).
    pub fn geam<T: BlasReal>(&mut self, g: &Geam<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let (ar, ac) = g.trans_a.stored(g.m, g.n);
        let (br, bc) = g.trans_b.stored(g.m, g.n);
        let (lda, ldb, ldc) = (g.lda.unwrap_or(ar), g.ldb.unwrap_or(br), g.ldc.unwrap_or(g.m));
        let (lda_i, ldb_i, ldc_i) =
            (check::ld("lda", lda, ar)?, check::ld("ldb", ldb, br)?, check::ld("ldc", ldc, g.m)?);
        check::covers("a", g.a, check::matrix_span(ar, ac, lda), &format!("op(A) {}x{}", g.m, g.n))?;
        check::covers("b", g.b, check::matrix_span(br, bc, ldb), &format!("op(B) {}x{}", g.m, g.n))?;
        check::covers("c", g.c, check::matrix_span(g.m, g.n, ldc), &format!("C {}x{}", g.m, g.n))?;
        if g.c.same_buffer(g.a) || g.c.same_buffer(g.b) {
            return Err(Error::invalid("c", "must not be the same buffer as `a` or `b`"));
        }
        let mut rec = self.op.recorder("geam");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "b", g.b, Access::Read)?;
        record(&mut rec, "c", g.c, Access::Write)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: A, B and C cover their validated spans; C is distinct from both inputs;
            // alpha and beta are host scalars.
            status("cublas<t>geam", unsafe {
                (T::fns().geam)(
                    h,
                    g.trans_a.raw(),
                    g.trans_b.raw(),
                    m,
                    n,
                    &g.alpha,
                    dptr(g.a)?,
                    lda_i,
                    &g.beta,
                    dptr(g.b)?,
                    ldb_i,
                    dptr(g.c)?,
                    ldc_i,
                )
            })
        })
    }

    /// The symmetric rank-k update (see [`Syrk`]).
    pub fn syrk<T: BlasReal>(&mut self, s: &Syrk<'_, T>) -> Result<Completion<()>> {
        let (n, k) = (check::dim("n", s.n, false)?, check::dim("k", s.k, false)?);
        let (ar, ac) = s.trans.stored(s.n, s.k);
        let (lda, ldc) = (s.lda.unwrap_or(ar), s.ldc.unwrap_or(s.n));
        let (lda_i, ldc_i) = (check::ld("lda", lda, ar)?, check::ld("ldc", ldc, s.n)?);
        check::covers("a", s.a, check::matrix_span(ar, ac, lda), &format!("op(A) {}x{}", s.n, s.k))?;
        check::covers("c", s.c, check::matrix_span(s.n, s.n, ldc), &format!("C {}x{}", s.n, s.n))?;
        check::distinct("c", s.a, s.c)?;
        let mut rec = self.op.recorder("syrk");
        record(&mut rec, "a", s.a, Access::Read)?;
        // Only one triangle is written: the other keeps its contents, so C is read-write.
        record(&mut rec, "c", s.c, Access::ReadWrite)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: A and C cover their validated spans and are distinct; host scalars.
            status("cublas<t>syrk", unsafe {
                (T::fns().syrk)(
                    h,
                    s.fill.raw(),
                    s.trans.raw(),
                    n,
                    k,
                    &s.alpha,
                    dptr(s.a)?,
                    lda_i,
                    &s.beta,
                    dptr(s.c)?,
                    ldc_i,
                )
            })
        })
    }

    /// The triangular solve (see [`Trsm`]); `B` is overwritten by the solution.
    pub fn trsm<T: BlasReal>(&mut self, t: &Trsm<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", t.m, false)?, check::dim("n", t.n, false)?);
        let order = match t.side {
            Side::Left => t.m,
            Side::Right => t.n,
        };
        let (lda, ldb) = (t.lda.unwrap_or(order), t.ldb.unwrap_or(t.m));
        let (lda_i, ldb_i) = (check::ld("lda", lda, order)?, check::ld("ldb", ldb, t.m)?);
        check::covers("a", t.a, check::matrix_span(order, order, lda), &format!("A {order}x{order}"))?;
        check::covers("b", t.b, check::matrix_span(t.m, t.n, ldb), &format!("B {}x{}", t.m, t.n))?;
        check::distinct("b", t.a, t.b)?;
        let side = match t.side {
            Side::Left => sys::cublasSideMode_t::CUBLAS_SIDE_LEFT,
            Side::Right => sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
        };
        let diag = match t.diag {
            Diag::NonUnit => sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
            Diag::Unit => sys::cublasDiagType_t::CUBLAS_DIAG_UNIT,
        };
        let mut rec = self.op.recorder("trsm");
        record(&mut rec, "a", t.a, Access::Read)?;
        record(&mut rec, "b", t.b, Access::ReadWrite)?;
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: A and B cover their validated spans and are distinct; alpha is a host
            // scalar.
            status("cublas<t>trsm", unsafe {
                (T::fns().trsm)(
                    h,
                    side,
                    t.fill.raw(),
                    t.trans.raw(),
                    diag,
                    m,
                    n,
                    &t.alpha,
                    dptr(t.a)?,
                    lda_i,
                    dptr(t.b)?,
                    ldb_i,
                )
            })
        })
    }
}

// Lanes move their handles to the worker thread.
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Blas>();
};
