//! cuSOLVER dense: Cholesky (`potrf`, `potrs`, batched `potrf`), LU with or without pivoting
//! (`getrf`, `getrs`), QR (`geqrf`, `orgqr`, `ormqr`; for complex types these two run the unitary
//! `ungqr`, `unmqr`), symmetric and Hermitian eigenvalues (`syevd`, Jacobi `syevj`), selected
//! eigenvalues by index or value range (`syevdx`), the eigenvalues and right eigenvectors of a
//! general matrix (`geev`; for a real matrix also with complex eigenvalues, `geev_complex_w`),
//! the generalized eigenproblem (`sygvd`/`hegvd`), the inverse from a Cholesky factor (`potri`),
//! the triangular inverse (`trtri`), SVD (`gesvd`, full or economy, Jacobi `gesvdj`, randomized
//! rank-`k` `gesvdr`), mixed-precision solves with iterative refinement (`gesv`, least squares
//! `gels`) and their expert forms with settings and a report (`irs_gesv`, `irs_gels`:
//! `cusolverDnIRSXgesv`/`IRSXgels`, see [`IrsSettings`]), the symmetric indefinite
//! (Bunch–Kaufman) factorization and solve (`sytrf`, `sytrs`), and batched forms
//! (`potrf_batched`, `potrs_batched`, cuBLAS's `getrf_batched`/`getrs_batched`,
//! `gesvdj_batched`, `syevj_batched`, the approximate SVD of tall matrices `gesvda_batched`) that
//! report every matrix's status.
//!
//! Matrices are column-major, as in LAPACK; a leading dimension left as `None` means tightly
//! packed. The 64-bit generic API (`cusolverDnX...`) is used wherever it exists, the typed entry
//! points elsewhere; every op takes `f32`, `f64`, `Complex<f32>` and `Complex<f64>` alike
//! (Hermitian or unitary for complex). The status word (`devInfo`) is written by the GPU into
//! pinned memory and read when the op's [`Completion`](crate::Completion) resolves: the op never
//! synchronizes, and a numerical failure resolves the completion with
//! [`Error::Numerical`](crate::Error::Numerical) saying what happened ("leading minor 5 is not
//! positive definite"). Workspace sizes come from the library's own queries, cached per shape; the
//! device workspace is the stream's shared one.
//!
//! On the simulator every op computes on the CPU, as a simulated kernel on the op's stream under
//! the uses the op declared (the hazard checker sees it like any simulated kernel): in `f64`
//! (complex `f64`) with plain loops, each result rounded to the element type once. The
//! factorizations follow LAPACK's conventions (LU's partial pivoting, 1-based pivots; Householder
//! reflectors with `v[0] = 1` and their `tau`), so factors, pivots, `R`, `tau` and `Q` match the
//! GPU's to rounding; every eigenproblem and SVD runs a Jacobi method (the [`JacobiSettings`] apply
//! to `syevj`, `gesvdj` and the batched Jacobi ops, and [`Solver::jacobi_report`] reports the
//! simulated run), so eigenvalues (ascending) and singular values (descending) match, while eigen
//! and singular vectors may differ by a sign (a phase, for complex types) per vector; `geev` runs
//! shifted QR on the complex Schur form, so its eigenvalues match the GPU's as a set, not
//! necessarily in the same order. Numerical failures come back as on the GPU, through the same
//! [`Error::Numerical`](crate::Error::Numerical) and index. The simulator uses no workspace, and
//! the raw handle accessors still fail there.
//!
//! The expert refinement's simulator runs the classical loop for every refinement solver, so its
//! iteration counts are plausible rather than the GPU's own (see [`IrsSettings`]).
//!
//! cuSOLVER dense ops not wrapped (reach them through [`Solver::cusolver_handle`]): the
//! Hermitian indefinite factorization (`cusolverDnXhetrf`/`hetrs`: like `Xsytrf`, only in cuSOLVER
//! from CUDA 13.4, and not in the headers cusched builds against), `geev`'s left eigenvectors
//! (`cusolverDnXgeev` accepts only `jobvl = CUSOLVER_EIG_MODE_NOVECTOR` through CUDA 13.0; see
//! [`Geev`]), the polar-decomposition SVD (`Xgesvdp`), the
//! generalized selected eigenproblem (`Xsygvdx`), `Xsyevbatched`, `Xstedc`, `Xlarft`, `Xpolar` and
//! the tridiagonal and bidiagonal reductions (`sytrd`, `gebrd` and their `org*`): each needs its
//! own simulator reference and GPU test first.

mod batched;
mod calls;
mod eigen;
mod expert;
mod factor;
mod general;
mod indefinite;
mod info;
mod qr;
mod randomized;
mod refine;
pub(in crate::libs) mod sim;
mod symmetric;
mod triangular;

pub use batched::{GesvdaBatched, GesvdjBatched, GetrfBatched, GetrsBatched, PotrsBatched, SyevjBatched};
pub use eigen::{EigRange, Gesvd, GesvdEconomy, Gesvdj, JacobiReport, JacobiRun, Syevd, Syevdx};
pub use expert::{IrsGels, IrsGesv, IrsOutcome, IrsReport, IrsSettings, RefinementSolver, ResidualStep};
pub use factor::{Getrf, Getrs, Potrf, PotrfBatched, Potrs};
pub use general::{Geev, GeevComplexW};
pub use indefinite::{Sytrf, Sytrs};
pub use qr::{Geqrf, Orgqr, Ormqr};
pub use randomized::Gesvdr;
pub use refine::{Fallback, Gels, Gesv, LowPrecision, Refinement};
pub use symmetric::{Generalized, Potri, Syevj, Sygvd};
pub use triangular::Trtri;

use super::dtype::DataTypes;
use super::workspace::Workspace;
use super::{Library, OpStream, StreamLibrary};
use crate::error::Result;
use crate::memory::{Complex, Element};
use std::collections::HashMap;

/// Which triangle of a symmetric or Hermitian matrix is read (and written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fill {
    /// The lower triangle.
    #[default]
    Lower,
    /// The upper triangle.
    Upper,
}

/// How a matrix operand is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Trans {
    /// As stored.
    #[default]
    No,
    /// Transposed.
    Yes,
    /// Conjugate-transposed (for real types, the same as transposed).
    Conj,
}

/// Which side `Q` multiplies from in [`Solver::ormqr`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Side {
    /// `op(Q) C`.
    #[default]
    Left,
    /// `C op(Q)`.
    Right,
}

/// Element types of the 64-bit cuSOLVER API: `f32`, `f64`, `Complex<f32>`, `Complex<f64>`.
// The data-type table is crate-private on purpose; the trait is sealed, so no outside type
// needs to name it.
#[allow(private_bounds)]
pub trait SolverElement: Element + DataTypes + calls::Typed + sim::Scalar + sealed::Sealed {
    /// The real type of eigenvalues and singular values.
    type Real: SolverElement;
}

/// The real solver element types, `f32` and `f64` (sealed): those whose
/// [`SolverElement::Real`] is the type itself.
///
/// No op of [`Solver`] bounds on it any more (every op takes all four element types); it stays
/// for users' own generic code that wants to accept only the real types.
pub trait SolverReal: SolverElement<Real = Self> {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for crate::memory::Complex<f32> {}
    impl Sealed for crate::memory::Complex<f64> {}
}

impl SolverElement for f32 {
    type Real = f32;
}
impl SolverElement for f64 {
    type Real = f64;
}
impl SolverElement for Complex<f32> {
    type Real = f32;
}
impl SolverElement for Complex<f64> {
    type Real = f64;
}
impl SolverReal for f32 {}
impl SolverReal for f64 {}

/// Whether `T` is complex, so that LAPACK's unitary (`ung..`, `unm..`) forms apply to it.
fn is_complex<T: SolverElement>() -> bool {
    matches!(T::CUDA, super::dtype::CudaType::C32F | super::dtype::CudaType::C64F)
}

/// The Jacobi methods' settings ([`Solver::set_jacobi`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JacobiSettings {
    /// Stop when the off-diagonal residual falls below this (0: machine precision).
    pub tolerance: f64,
    /// Stop after this many sweeps at most.
    pub max_sweeps: u32,
}

impl Default for JacobiSettings {
    fn default() -> Self {
        // cuSOLVER's defaults.
        JacobiSettings { tolerance: 0.0, max_sweeps: 100 }
    }
}

/// A key for the workspace-size cache: the op, the element type and the shape.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct SizeKey {
    op: &'static str,
    dtype: u32,
    dims: [i64; 6],
}

/// A cuSOLVER dense handle bound to one stream. Get it from [`crate::Handles::solver`] (on a
/// lane or inline); every op validates its arguments, fences, enqueues and commits, and
/// returns a [`Completion`](crate::Completion) for its own work.
pub struct Solver {
    op: OpStream,
    raw: Option<calls::RawHandle>,
    work: Workspace,
    sizes: HashMap<SizeKey, (usize, usize)>,
    jacobi: JacobiSettings,
}

impl StreamLibrary for Solver {
    const LIBRARY: Library = Library {
        name: "cuSOLVER (libcusolver)",
        hint: "install the CUDA toolkit's cuSOLVER library (libcusolver.so.12)",
        present: calls::is_present,
        objects: "a cuSOLVER handle",
    };
    type Objects = calls::RawHandle;

    fn create(op: OpStream) -> Result<Solver> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let s = op.bound_stream()?;
            // SAFETY: the stream is live in the bound context and outlives the handle: the
            // device keeps its streams until it is dropped, after every lane and `Handles`.
            Some(unsafe { calls::RawHandle::create(s.cu_stream()) }?)
        };
        Ok(Solver { op, raw, work: Workspace::default(), sizes: HashMap::new(), jacobi: JacobiSettings::default() })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<calls::RawHandle> {
        self.raw.take()
    }
}

impl std::fmt::Debug for Solver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Solver({}, {} workspace sizes cached)", self.op.stream, self.sizes.len())
    }
}

impl Solver {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// The Jacobi methods' settings.
    pub fn jacobi(&self) -> JacobiSettings {
        self.jacobi
    }

    /// Sets the tolerance and sweep limit of later Jacobi ops.
    pub fn set_jacobi(&mut self, settings: JacobiSettings) -> Result<()> {
        if !(settings.tolerance >= 0.0 && settings.tolerance.is_finite()) {
            return Err(crate::error::Error::invalid("settings.tolerance", "must be finite and not negative"));
        }
        if settings.max_sweeps == 0 {
            return Err(crate::error::Error::invalid("settings.max_sweeps", "must be at least 1"));
        }
        self.jacobi = settings;
        Ok(())
    }

    /// Workspace sizes queried so far (a cached shape queries no more).
    pub fn cached_sizes(&self) -> usize {
        self.sizes.len()
    }

    /// Bytes of the stream's device workspace.
    pub fn workspace_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// The raw cuSOLVER dense handle, for calls cusched does not wrap. Declare their buffer uses on
    /// a [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue them inside its
    /// [`launch`](crate::LaunchRecorder::launch) closure, with the stream's context current
    /// (`scope.cuda_stream()?.context().bind_to_thread()`, in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). Leave the handle's
    /// stream and its other settings (such as the deterministic mode) as they are: cusched caches
    /// the workspace sizes the library reported per shape under them. Workspaces and `devInfo`
    /// words come from your own allocations (declared on the recorder), not cusched's shared
    /// workspace. On the simulator it fails with
    /// [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable): there is no
    /// cuSOLVER handle there (the ops compute on the CPU).
    pub fn cusolver_handle(&self) -> Result<cudarc::cusolver::sys::cusolverDnHandle_t> {
        self.handle().map(|(h, _)| h)
    }

    fn handle(&self) -> Result<(calls::Handle, calls::Params)> {
        self.raw.as_ref().map(|h| h.get()).ok_or_else(|| self.op.unavailable_on_sim())
    }

    /// The workspace sizes for `key`, from the cache or from `query` (with the stream's context
    /// bound).
    fn sizes(&mut self, key: SizeKey, query: impl FnOnce() -> Result<(usize, usize)>) -> Result<(usize, usize)> {
        if let Some(&s) = self.sizes.get(&key) {
            return Ok(s);
        }
        self.op.bound_stream()?;
        let s = query()?;
        self.sizes.insert(key, s);
        Ok(s)
    }
}
