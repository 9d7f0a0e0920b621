//! cuSOLVER's sparse direct solvers: `A x = b` for a square CSR matrix `A` by sparse QR
//! (`csrlsvqr`, any nonsingular `A`) or sparse Cholesky (`csrlsvchol`, symmetric positive
//! definite `A`; Hermitian positive definite for the complex types), in `f32`, `f64`,
//! `Complex<f32>` and `Complex<f64>`. The tolerance is of the element's real type.
//!
//! **These calls block** the calling thread until the solve is done: cuSOLVER reports whether
//! the matrix is singular on the host, so it finishes the factorization before returning.
//! The op still records its uses and commits like every op (other streams are fenced on it),
//! and its completion resolves with [`Error::Numerical`](crate::Error::Numerical) (a [`NumericalFailure::SingularToTolerance`](crate::NumericalFailure::SingularToTolerance)), carrying the
//! row where the factorization broke down, when the matrix is singular to the tolerance.
//!
//! On the simulator both solves compute on the CPU, as a simulated kernel under the op's uses:
//! the matrix is made dense and factored (Householder QR, complex for the complex types;
//! Cholesky of the Hermitian matrix the lower triangle defines, as cuSOLVER reads it), in `f64`
//! (complex `f64`). The reordering is accepted and not applied (it changes nothing
//! but rounding), and a matrix singular to the tolerance resolves the completion with the same
//! [`NumericalFailure::SingularToTolerance`](crate::NumericalFailure::SingularToTolerance), its
//! row counted in the original order.
//!
//! CUDA 12.x marks the `cusolverSp` `csrlsv*` family as deprecated (NVIDIA points to cuDSS
//! for sparse direct solves); it is still shipped and works in CUDA 13, and cusched keeps
//! wrapping it.

mod calls;

use super::{dptr, record, Library, OpStream, StreamLibrary};
use crate::completion::Completion;
use crate::error::{Error, NumericalFailure, Result};
use crate::libs::validate as check;
use crate::memory::{Complex, Element, GpuRef};
use crate::track::Access;

/// A fill-reducing reordering applied before factorizing (`reorder` of `csrlsv*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reorder {
    /// No reordering.
    None,
    /// Symmetric reverse Cuthill-McKee.
    #[default]
    Symrcm,
    /// Symmetric approximate minimum degree.
    Symamd,
    /// METIS nested dissection.
    Metis,
}

/// Which triangles of a symmetric (or Hermitian) matrix its CSR arrays hold (the `csrlsvchol`
/// matrix).
///
/// Without reordering, cuSOLVER's sparse Cholesky reads only the lower triangle (and the
/// diagonal). With a reordering it permutes the stored entries, `P A Pᵀ`, and then reads the
/// lower triangle of the result: entries of a lower-only matrix that the permutation moves
/// above the diagonal are lost, and the answer is silently wrong. So a lower-only matrix takes
/// [`Reorder::None`] only; store both triangles to reorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Both triangles (the whole symmetric matrix): every [`Reorder`] is right.
    Full,
    /// The lower triangle and the diagonal only: [`Reorder::None`] only.
    Lower,
}

/// Element types of the sparse solvers: `f32`, `f64`, `Complex<f32>` and `Complex<f64>`
/// (sealed).
// The simulator's element trait and the call layer's are crate-private; the trait is sealed, so
// no outside type needs them.
#[allow(private_bounds)]
pub trait SparseSolverElement:
    Element + calls::sealed::SpScalar<Tol = Self::Real> + crate::libs::solver::sim::Scalar
{
    /// The real type of the tolerance: the type itself, or a complex type's part.
    type Real: Copy + Into<f64>;
}
impl SparseSolverElement for f32 {
    type Real = f32;
}
impl SparseSolverElement for f64 {
    type Real = f64;
}
impl SparseSolverElement for Complex<f32> {
    type Real = f32;
}
impl SparseSolverElement for Complex<f64> {
    type Real = f64;
}

/// The real element types of the sparse solvers, `f32` and `f64` (sealed): those whose
/// [`SparseSolverElement::Real`] is the type itself. The solves take every
/// [`SparseSolverElement`]; this stays for generic code that wants only the real types.
pub trait SolverReal: SparseSolverElement<Real = Self> + Into<f64> {}
impl SolverReal for f32 {}
impl SolverReal for f64 {}

/// A square CSR system matrix with zero-based `i32` indices: `n + 1` offsets, and at least
/// `nnz` column indices and values.
#[derive(Debug)]
pub struct CsrSystem<'a, T: Element> {
    /// Rows (and columns).
    pub n: usize,
    /// Stored nonzeros.
    pub nnz: usize,
    /// Row offsets, exactly `n + 1`.
    pub offsets: &'a GpuRef<i32>,
    /// Column indices.
    pub indices: &'a GpuRef<i32>,
    /// Values.
    pub values: &'a GpuRef<T>,
}

impl<T: Element> Clone for CsrSystem<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for CsrSystem<'_, T> {}

/// A stream's cuSOLVER sparse handle. Get it from [`crate::Handles::solver_sparse`].
pub struct SolverSparse {
    op: OpStream,
    raw: Option<calls::Raw>,
}

impl StreamLibrary for SolverSparse {
    const LIBRARY: Library = Library {
        name: "cuSOLVER (libcusolver)",
        hint: "install the CUDA toolkit's cuSOLVER and cuSPARSE libraries (CUDA 13: libcusolver.so.12 and \
               libcusparse.so.12; CUDA 12: libcusolver.so.11 and libcusparse.so.12)",
        present: calls::is_present,
        objects: "a cuSOLVER sparse handle",
    };
    type Objects = calls::Raw;

    fn create(op: OpStream) -> Result<SolverSparse> {
        let raw = if op.device.is_simulated() {
            None
        } else {
            let s = op.bound_stream()?;
            // SAFETY: the stream is live in the bound context and outlives the handle (the
            // device keeps its streams until every library state is gone).
            Some(unsafe { calls::create(s.cu_stream()) }?)
        };
        Ok(SolverSparse { op, raw })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<calls::Raw> {
        self.raw.take()
    }
}

impl std::fmt::Debug for SolverSparse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SolverSparse({})", self.op.stream)
    }
}

impl SolverSparse {
    /// The stream this handle enqueues on.
    pub fn stream(&self) -> crate::track::StreamId {
        self.op.stream
    }

    /// The raw cuSOLVER sparse handle, for calls cusched does not wrap. Declare their buffer
    /// uses on a [`crate::LaunchRecorder`] on [`stream`](Self::stream) yourself and enqueue
    /// them inside its [`launch`](crate::LaunchRecorder::launch) closure, with the stream's
    /// context current (`scope.cuda_stream()?.context().bind_to_thread()`,
    /// in the `unsafe` block whose duties
    /// [`LaunchScope::cuda_stream`](crate::LaunchScope::cuda_stream) lists). Leave the handle's
    /// stream as it is; matrix descriptors you make are yours to destroy. On the simulator it
    /// fails with [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable): there is
    /// no cuSOLVER handle there (the ops compute on the CPU).
    pub fn cusolver_sp_handle(&self) -> Result<cudarc::cusolver::sys::cusolverSpHandle_t> {
        self.raw.as_ref().map(|r| r.handle.get().0).ok_or_else(|| self.op.unavailable_on_sim())
    }

    /// Solves `A x = b` by sparse QR (`cusolverSp?csrlsvqr`). `tol` decides singularity (a
    /// pivot of magnitude below it; finite and at least zero, else rejected naming `tol`); the completion fails with [`Error::Numerical`] ([`NumericalFailure::SingularToTolerance`](crate::NumericalFailure::SingularToTolerance)) when `A` is singular.
    /// **Blocks** until the solve is done (see the module docs).
    pub fn csrlsvqr<T: SparseSolverElement>(
        &mut self,
        a: CsrSystem<'_, T>,
        b: &GpuRef<T>,
        x: &GpuRef<T>,
        tol: T::Real,
        reorder: Reorder,
    ) -> Result<Completion<()>> {
        self.solve(calls::Method::Qr, "csrlsvqr", a, b, x, tol, reorder)
    }

    /// Solves `A x = b` by sparse Cholesky (`cusolverSp?csrlsvchol`), `A` symmetric positive
    /// definite (Hermitian positive definite for the complex types), its CSR arrays holding the triangles `stored` says. A [`Stored::Lower`] matrix
    /// with a reordering other than [`Reorder::None`] is rejected as an invalid `reorder`
    /// before anything is recorded: cuSOLVER would drop the entries the permutation moves
    /// above the diagonal (see [`Stored`]). The completion fails with [`Error::Numerical`]
    /// ([`NumericalFailure::SingularToTolerance`](crate::NumericalFailure::SingularToTolerance))
    /// when `A` is not positive definite to the tolerance. **Blocks** until the solve is done
    /// (see the module docs).
    pub fn csrlsvchol<T: SparseSolverElement>(
        &mut self,
        a: CsrSystem<'_, T>,
        stored: Stored,
        b: &GpuRef<T>,
        x: &GpuRef<T>,
        tol: T::Real,
        reorder: Reorder,
    ) -> Result<Completion<()>> {
        if stored == Stored::Lower && reorder != Reorder::None {
            return Err(Error::invalid(
                "reorder",
                format!(
                    "{reorder:?} permutes A before cuSOLVER reads its lower triangle, which loses entries of a \
                     lower-triangle-only matrix: pass Reorder::None, or store both triangles (Stored::Full)"
                ),
            ));
        }
        self.solve(calls::Method::Cholesky, "csrlsvchol", a, b, x, tol, reorder)
    }

    #[allow(clippy::too_many_arguments)]
    fn solve<T: SparseSolverElement>(
        &mut self,
        method: calls::Method,
        name: &'static str,
        a: CsrSystem<'_, T>,
        b: &GpuRef<T>,
        x: &GpuRef<T>,
        tol: T::Real,
        reorder: Reorder,
    ) -> Result<Completion<()>> {
        let n = check::dim("a.n", a.n, false)?;
        let nnz = check::dim("a.nnz", a.nnz, true)?;
        let tol_f64: f64 = tol.into();
        if !(tol_f64.is_finite() && tol_f64 >= 0.0) {
            return Err(Error::invalid(
                "tol",
                format!("is {tol_f64}: the singularity tolerance must be a finite number, zero or more"),
            ));
        }
        if a.offsets.len() != a.n + 1 {
            return Err(Error::invalid(
                "a.offsets",
                format!("holds {} entries; an {}-row matrix needs {}", a.offsets.len(), a.n, a.n + 1),
            ));
        }
        if a.indices.len() < a.nnz {
            return Err(Error::invalid(
                "a.indices",
                format!("holds {} entries, fewer than the {} nonzeros", a.indices.len(), a.nnz),
            ));
        }
        if a.values.len() < a.nnz {
            return Err(Error::invalid(
                "a.values",
                format!("holds {} entries, fewer than the {} nonzeros", a.values.len(), a.nnz),
            ));
        }
        check::covers("b", b, Some(a.n), &format!("{} right-hand-side entries", a.n))?;
        check::covers("x", x, Some(a.n), &format!("{} solution entries", a.n))?;
        check::distinct("x", b, x)?;
        check::distinct("x", a.values, x)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "a.offsets", a.offsets, Access::Read)?;
        record(&mut rec, "a.indices", a.indices, Access::Read)?;
        record(&mut rec, "a.values", a.values, Access::Read)?;
        record(&mut rec, "b", b, Access::Read)?;
        record(&mut rec, "x", x, Access::Write)?;
        let call = match method {
            calls::Method::Qr => <T as calls::sealed::SpScalar>::QR,
            calls::Method::Cholesky => <T as calls::sealed::SpScalar>::CHOL,
        };
        if self.op.device.is_simulated() {
            return self.solve_sim(method, call, a, b, x, tol, rec);
        }
        let raw = self.raw.as_ref().ok_or_else(|| self.op.unavailable_on_sim())?;
        let s: calls::System<T, T::Real> = calls::System {
            n,
            nnz,
            values: dptr(a.values)?,
            offsets: dptr(a.offsets)?,
            indices: dptr(a.indices)?,
            b: dptr(b)?,
            x: dptr(x)?,
            tol,
            reorder: reorder as i32,
        };
        self.op.run_outcome(rec, || {
            // SAFETY: (1) a live handle bound to this stream, fenced by preflight; (2) the
            // buffers were validated against n and nnz, are live, and x is distinct.
            let singularity = unsafe { calls::solve(raw, method, &s) }?;
            Ok(match usize::try_from(singularity) {
                Ok(row) => Err(Error::Numerical {
                    op: call,
                    batch: 1,
                    failures: vec![NumericalFailure::SingularToTolerance { matrix: 0, row }],
                }),
                Err(_) => Ok(()),
            })
        })
    }

    /// The simulator's solve: the system made dense and factored on the host, as a simulated
    /// kernel under the op's uses; the reordering changes nothing there but rounding, so it is
    /// not applied.
    #[allow(clippy::too_many_arguments)]
    fn solve_sim<T: SparseSolverElement>(
        &self,
        method: calls::Method,
        call: &'static str,
        a: CsrSystem<'_, T>,
        b: &GpuRef<T>,
        x: &GpuRef<T>,
        tol: T::Real,
        rec: crate::recorder::LaunchRecorder,
    ) -> Result<Completion<()>> {
        let n = a.n;
        let (offsets, indices, values) = (a.offsets.sim_data()?, a.indices.sim_data()?, a.values.sim_data()?);
        let (b, x) = (b.sim_data()?, x.sim_data()?);
        let (tol, cholesky): (f64, bool) = (tol.into(), matches!(method, calls::Method::Cholesky));
        let done = self.op.run_sim_read_back(crate::libs::op::HOST_READS_OUTCOME, rec, move || {
            let solved = crate::libs::solver::sim::sparse_solve(
                n,
                (&offsets.read(), &indices.read(), &values.read()),
                &b.read(),
                tol,
                cholesky,
            );
            match solved {
                Ok(v) => {
                    x.lock()[..n].copy_from_slice(&v);
                    Ok(())
                }
                Err(row) => Err(Error::Numerical {
                    op: call,
                    batch: 1,
                    failures: vec![NumericalFailure::SingularToTolerance { matrix: 0, row }],
                }),
            }
        })?;
        Ok(done.try_map(|r| r))
    }
}
