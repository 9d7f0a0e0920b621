//! Batched ops on the typed entry points (every element type): Cholesky solves
//! (`potrsBatched`), LU through cuBLAS (`getrfBatched`, `getrsBatched`), and the small-matrix
//! Jacobi methods (`gesvdjBatched`, `syevjBatched`, at most 32 x 32), and the approximate SVD
//! of tall matrices (`gesvdaStridedBatched`). Every matrix's status is
//! its own: bad ones fail the completion with each index listed, and the others are valid.
//!
//! Files: this one holds the arguments and the strided-batch checks; `lu` the Cholesky and LU
//! solves, `jacobi` the Jacobi SVD and eigensolver, `approx` the approximate SVD.

use crate::error::{Error, Result};
use crate::libs::solver::calls::{self};
use crate::libs::solver::{Fill, Solver, SolverElement, Trans};
use crate::libs::validate as check;
use crate::memory::{Element, GpuRef};

mod approx;
mod jacobi;
mod lu;

pub use approx::GesvdaBatched;

/// Solves `A_i X_i = B_i` for `batch` systems with Cholesky factors from
/// [`Solver::potrf_batched`]; each `X_i` overwrites `B_i`. cuSOLVER takes one right-hand side
/// per system (`nrhs` = 1).
#[derive(Debug)]
pub struct PotrsBatched<'a, T: SolverElement> {
    /// The triangle holding the factors.
    pub fill: Fill,
    /// Order of each `A_i`.
    pub n: usize,
    /// Right-hand sides per system: 1.
    pub nrhs: usize,
    /// Systems.
    pub batch: usize,
    /// The factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each `A_i`; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one `A_i` to the next; `None`: `lda * n`.
    pub stride_a: Option<usize>,
    /// The right-hand sides, overwritten by the solutions.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of each `B_i`; `None`: packed.
    pub ldb: Option<usize>,
    /// Elements from one `B_i` to the next; `None`: `ldb * nrhs`.
    pub stride_b: Option<usize>,
}

/// LU factorizations `P_i A_i = L_i U_i` of `batch` matrices of order `n` (cuBLAS), with
/// partial pivoting when `ipiv` is given (`n` 1-based row swaps per matrix, one after another),
/// without it otherwise. A singular `U_i` fails the completion naming the matrix and the zero.
#[derive(Debug)]
pub struct GetrfBatched<'a, T: SolverElement> {
    /// Order of each matrix.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten by their factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one matrix to the next; `None`: `lda * n`.
    pub stride: Option<usize>,
    /// The pivots, `n * batch`; `None`: no pivoting.
    pub ipiv: Option<&'a GpuRef<i32>>,
}

/// Solves `op(A_i) X_i = B_i` for `batch` systems with LU factors and pivots from
/// [`Solver::getrf_batched`] (cuBLAS); each `X_i` overwrites `B_i`.
#[derive(Debug)]
pub struct GetrsBatched<'a, T: SolverElement> {
    /// How each `A_i` is applied.
    pub trans: Trans,
    /// Order of each `A_i`.
    pub n: usize,
    /// Right-hand sides per system.
    pub nrhs: usize,
    /// Systems.
    pub batch: usize,
    /// The factors.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each `A_i`; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one `A_i` to the next; `None`: `lda * n`.
    pub stride_a: Option<usize>,
    /// The pivots `getrf_batched` wrote, `n * batch`.
    pub ipiv: &'a GpuRef<i32>,
    /// The right-hand sides, overwritten by the solutions.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of each `B_i`; `None`: packed.
    pub ldb: Option<usize>,
    /// Elements from one `B_i` to the next; `None`: `ldb * nrhs`.
    pub stride_b: Option<usize>,
}

/// Jacobi SVDs `A_i = U_i Σ_i V_iᴴ` of `batch` `m x n` matrices (`m, n <= 32`), stored one
/// after another `lda * n` apart and overwritten: singular values (`min(m, n)` per matrix, one
/// after another) into `s`, with `vectors` the full `U_i` (`m x m`, `ldu * m` apart) and `V_i`
/// (`n x n`, not transposed, `ldv * n` apart). Tolerance and sweeps are
/// [`Solver::set_jacobi`]'s; cuSOLVER reports no residual for batches.
#[derive(Debug)]
pub struct GesvdjBatched<'a, T: SolverElement> {
    /// Whether `U_i` and `V_i` are computed.
    pub vectors: bool,
    /// Rows of each.
    pub m: usize,
    /// Columns of each.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Singular values.
    pub s: &'a GpuRef<T::Real>,
    /// The `U_i`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of each `U_i`; `None`: packed.
    pub ldu: Option<usize>,
    /// The `V_i`.
    pub v: &'a GpuRef<T>,
    /// Leading dimension of each `V_i`; `None`: packed.
    pub ldv: Option<usize>,
}

/// Jacobi eigen decompositions of `batch` symmetric or Hermitian matrices of order `n <= 32`,
/// stored one after another `lda * n` apart: eigenvalues (ascending, `n` per matrix) into `w`,
/// eigenvectors overwriting the matrices with `vectors`. Tolerance and sweeps are
/// [`Solver::set_jacobi`]'s; cuSOLVER reports no residual for batches.
#[derive(Debug)]
pub struct SyevjBatched<'a, T: SolverElement> {
    /// Whether eigenvectors are computed.
    pub vectors: bool,
    /// The triangle read.
    pub fill: Fill,
    /// Order of each.
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices, overwritten.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// The eigenvalues.
    pub w: &'a GpuRef<T::Real>,
}

/// Checks `batch` `rows x cols` matrices in `buf`, `stride` elements apart (`None`: `ld *
/// cols`); returns the leading dimension and the stride.
#[allow(clippy::too_many_arguments)]
fn strided<T: Element>(
    (arg, ld_arg, stride_arg): (&'static str, &'static str, &'static str),
    buf: &GpuRef<T>,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
    stride: Option<usize>,
    batch: usize,
) -> Result<(i32, usize)> {
    let m = check::matrix(arg, ld_arg, rows, cols, ld)?;
    let one = m.ld as usize * cols;
    let stride = stride.unwrap_or(one);
    if stride < one {
        return Err(Error::invalid(stride_arg, format!("{stride} makes matrices overlap (each spans {one})")));
    }
    let span = stride.checked_mul(batch.saturating_sub(1)).and_then(|s| s.checked_add(m.span));
    check::covers(arg, buf, span, &format!("{batch} matrices {rows}x{cols} {stride} apart"))?;
    Ok((m.ld, stride))
}

/// The device addresses of `batch` matrices `stride` elements apart in `buf`.
fn pointers<T: Element>(buf: &GpuRef<T>, stride: usize, batch: usize) -> Result<Vec<u64>> {
    let (base, size) = (buf.raw_device_ptr()?, std::mem::size_of::<T>() as u64);
    Ok((0..batch as u64).map(|i| base + i * stride as u64 * size).collect())
}
impl Solver {
    fn blas_handle(&mut self) -> Result<calls::BlasHandle> {
        self.handle()?;
        let s = self.op.bound_stream()?;
        let raw = self.raw.as_mut().ok_or_else(|| self.op.unavailable_on_sim())?;
        // SAFETY: the op stream is live in the bound context and outlives the handles (the
        // device keeps its streams until after every lane and `Handles`).
        unsafe { raw.blas(s.cu_stream()) }
    }
}
