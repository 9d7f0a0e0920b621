//! cuBLAS: GEMM in f32, f64, f16, bf16, `Complex<f32>` and `Complex<f64>` (single,
//! strided-batched, batched over arrays of buffers, and grouped), mixed-precision GEMM (`gemm_ex`), level 1,
//! level 2 (`gemv`, `ger`, `geru`, `gerc`) and level 3 (`geam`, `syrk`, `trsm`, `symm`, `hemm`,
//! `trmm`, `syr2k`, `her2k`, `herk`, `dgmm`) in f32, f64 and both complex types.
//!
//! Matrices are column-major, as in cuBLAS. A leading dimension left as `None` means tightly
//! packed (the number of rows stored). Scalar results (`dot`, `nrm2`, `asum`, `iamax`, `iamin`)
//! are written by the GPU in device pointer mode into pinned memory and come back through the
//! op's [`Completion`](crate::Completion): the op itself never synchronizes the host.
//!
//! # On the simulator
//!
//! Every op computes its result on the CPU, as a simulated kernel on the handle's stream under
//! the uses the op declares (the hazard checker sees it as it sees a user kernel), with
//! cuBLAS's semantics: transposes, leading dimensions (the padding rows are left as they are),
//! batch strides (zero broadcasts), negative increments, fill modes, unit diagonals, and
//! `beta == 0` leaving the output unread. f32 and f64 GEMMs run on the `matrixmultiply` crate,
//! single-threaded: a 512³ f32 GEMM takes well under a second in release. f16 and bf16 GEMMs
//! are widened to f32 (their compute type on the GPU), multiplied there and each stored element
//! rounded back. Complex GEMMs and every level 1 to 3 op compute in f64 complex arithmetic (plain
//! loops: meant for test sizes) and round each stored element or scalar once; `iamax`/`iamin`
//! return the first index of the extreme magnitude (`|re| + |im|` for complex), as cuBLAS does.
//! Results agree with the GPU's to the type's rounding, not bit for bit (the summation order
//! differs). [`MathMode`] is only remembered there: TF32 is not imitated, f32 GEMMs stay full f32.
//! The raw handle ([`Blas::cublas_handle`]) has no simulated form.

mod calls;
mod gemm;
mod gemm_ex;
mod level1;
mod level23;
mod level3;
mod sim;

pub use gemm::{BatchStrides, Gemm, GemmBatched, GemmGroup, GroupedElement};
pub use gemm_ex::{ComputeType, ExElement, GemmEx};
pub use level23::{Geam, Gemv, Syrk, Trsm};
pub use level3::{Herk, Symm, Syr2k, Trmm};

use super::{Library, OpStream, StreamLibrary};
use crate::error::Result;
use crate::memory::{Complex, Element, GpuRef};
use crate::track::Access;
use cudarc::cublas::sys::cublasHandle_t;

/// Whether a matrix operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = Xᵀ`.
    Yes,
    /// `op(X) = Xᴴ`, the conjugate transpose; the same as [`Yes`](Self::Yes) for real types.
    Conj,
}

impl Transpose {
    /// The stored shape of an operand whose `op(X)` is `rows x cols`.
    fn stored(self, rows: usize, cols: usize) -> (usize, usize) {
        match self {
            Transpose::No => (rows, cols),
            Transpose::Yes | Transpose::Conj => (cols, rows),
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

/// Element types cuBLAS multiplies in [`Blas::gemm`]: `f32`, `f64`, `half::f16`, `half::bf16`,
/// [`Complex<f32>`] and [`Complex<f64>`].
pub trait GemmElement: Element + calls::sealed::GemmType + sim::SimGemm {
    /// The type of `alpha` and `beta`: `f32` for the half types (they accumulate in f32).
    type Scalar: Element + sim::Scalar;
}

/// Types with the whole level 1 to 3 surface: `f32`, `f64`, [`Complex<f32>`] and
/// [`Complex<f64>`].
pub trait BlasScalar: GemmElement<Scalar = Self> + calls::sealed::ScalarType + sim::Scalar {
    /// The real type of the norms (`nrm2`, `asum`) and of `rot`'s cosine and sine: `f32` for
    /// `f32` and `Complex<f32>`.
    type Real: BlasReal;
}

/// The real types of [`BlasScalar`]: `f32` and `f64`.
pub trait BlasReal: BlasScalar<Real = Self> + sim::Real {}

/// The complex types of [`BlasScalar`]: [`Complex<f32>`] and [`Complex<f64>`].
pub trait BlasComplex: BlasScalar {}

impl GemmElement for f32 {
    type Scalar = f32;
}
impl GemmElement for f64 {
    type Scalar = f64;
}
impl GemmElement for half::f16 {
    type Scalar = f32;
}
impl GemmElement for half::bf16 {
    type Scalar = f32;
}
impl GemmElement for Complex<f32> {
    type Scalar = Complex<f32>;
}
impl GemmElement for Complex<f64> {
    type Scalar = Complex<f64>;
}
impl BlasScalar for f32 {
    type Real = f32;
}
impl BlasScalar for f64 {
    type Real = f64;
}
impl BlasScalar for Complex<f32> {
    type Real = f32;
}
impl BlasScalar for Complex<f64> {
    type Real = f64;
}
impl BlasReal for f32 {}
impl BlasReal for f64 {}
impl BlasComplex for Complex<f32> {}
impl BlasComplex for Complex<f64> {}

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

    /// Checks the view for `n` elements (see [`super::validate::vector`]); returns the
    /// increment as cuBLAS's int.
    fn check(self, arg: &'static str, inc_arg: &'static str, n: usize, forward: bool) -> Result<i32> {
        super::validate::vector(arg, inc_arg, self.buf, self.inc, n, forward)
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

/// `beta == 0` means `C` is only written (cuBLAS does not read it then, so NaNs in it are
/// harmless); otherwise it is read too.
fn output_access<S: Element>(beta: S) -> Access {
    if beta == S::default() {
        Access::Write
    } else {
        Access::ReadWrite
    }
}

/// A cuBLAS handle bound to one stream. Get it from [`crate::Handles::blas`] (on a lane or
/// inline); every op validates its arguments, fences, enqueues and commits, and returns a
/// [`Completion`](crate::Completion) for its own work.
///
/// ```no_run
/// use cusched::blas::{Gemm, Vector};
/// use cusched::Device;
/// let device = Device::open(0)?;
/// let lane = device.lane("blas")?;
/// let s = device.default_stream();
/// let (a, b) = (device.upload(s, &[1.0f32; 6])?, device.upload(s, &[2.0f32; 12])?);
/// let c = device.alloc_zeros::<f32>(s, 8)?;
/// // The closure gets the buffers it declared.
/// let done = lane.job().read(&a).read(&b).write(&c).submit(|cx, (a, b, c)| {
///     let blas = cx.blas()?;
///     // C (2x4) = A (2x3) · B (3x4), column-major as in cuBLAS; then C *= 0.5.
///     blas.gemm(&Gemm::new(2, 4, 3, &a, &b, &c))?;
///     blas.scal(8, 0.5f32, Vector::from(&c))?;
///     Ok(c)
/// });
/// assert_eq!(done.wait()?.download(s)?, vec![3.0f32; 8]);
/// # Ok::<(), cusched::Error>(())
/// ```
pub struct Blas {
    op: OpStream,
    /// The handle and its workspace (CUDA).
    raw: Option<(calls::RawHandle, GpuRef<u8>)>,
    math: MathMode,
}

/// The workspace each cuBLAS handle is given: what cuBLAS takes for itself by default (32 MiB
/// on Hopper and later, 4 MiB before). Set explicitly so that a graph's captured cuBLAS ops
/// use memory the graph keeps (the handle lives as long as the graph's branch) instead of
/// allocation nodes, which a graph's loop body cannot hold.
fn workspace_bytes(compute_major: u32) -> usize {
    if compute_major >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}

impl StreamLibrary for Blas {
    const LIBRARY: Library = Library {
        name: "cuBLAS (libcublas)",
        hint: "install the CUDA toolkit's cuBLAS library (libcublas.so.13)",
        present: calls::is_present,
        objects: "a cuBLAS handle",
    };
    type Objects = (calls::RawHandle, GpuRef<u8>);

    fn create(op: OpStream) -> Result<Blas> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let s = op.bound_stream()?;
            // SAFETY: the stream is live in the bound context and outlives the handle: the
            // device keeps its streams until it is dropped, after every lane and `Handles`.
            let handle = unsafe { calls::RawHandle::create(s.cu_stream()) }?;
            let with_workspace = || {
                let bytes = workspace_bytes(op.device.compute_capability()?.0);
                let workspace = op.device.alloc_scratch::<u8>(op.stream, bytes)?;
                // SAFETY: 1. the workspace is `bytes` bytes of this context's memory, allocated
                // on the handle's stream (so ordered before its ops) and aligned as every
                // cusched allocation (256 bytes at least); 2. only this handle's ops use it, all
                // on its stream; 3. it lives beside the handle and goes to the reaper with it,
                // freed once the stream's work is done.
                unsafe { handle.set_workspace(workspace.raw_device_ptr()?, bytes) }?;
                Ok(workspace)
            };
            match with_workspace() {
                Ok(workspace) => Some((handle, workspace)),
                Err(e) => {
                    // `cublasDestroy` synchronizes the device: the reaper destroys the handle,
                    // not this thread (which may be on another thread's op path, beside a
                    // graph capture that a synchronization would invalidate).
                    op.retire(Self::LIBRARY.objects, handle);
                    return Err(e);
                }
            }
        };
        Ok(Blas { op, raw, math: MathMode::Default })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<(calls::RawHandle, GpuRef<u8>)> {
        self.raw.take()
    }
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blas({}, {:?})", self.op.stream, self.math)
    }
}

impl Blas {
    /// The raw cuBLAS handle, for calls cusched does not wrap. Declare their buffer uses on a
    /// [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current
    /// (`scope.cuda_stream()?.context().bind_to_thread()`, in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). Leave the handle's
    /// stream, pointer mode (host) and math mode as they are: cusched remembers the math mode, so
    /// change it with [`set_math_mode`](Self::set_math_mode). On the simulator it fails with
    /// [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable), as the ops do there.
    pub fn cublas_handle(&self) -> Result<cublasHandle_t> {
        self.handle()
    }

    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// The current math mode.
    pub fn math_mode(&self) -> MathMode {
        self.math
    }

    /// Sets the math mode for later ops (on the simulator it is only remembered).
    pub fn set_math_mode(&mut self, mode: MathMode) -> Result<()> {
        if let Some((h, _)) = &self.raw {
            h.set_math_mode(mode)?;
        }
        self.math = mode;
        Ok(())
    }

    fn handle(&self) -> Result<calls::Handle> {
        self.raw.as_ref().map(|(h, _)| h.get()).ok_or_else(|| self.op.unavailable_on_sim())
    }
}
