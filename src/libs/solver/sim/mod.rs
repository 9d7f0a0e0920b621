//! The simulator's cuSOLVER: every dense op (and the sparse direct solves) computed on the
//! host, as a simulated kernel on the op's stream under the uses the op declared.
//!
//! All four element types compute in complex `f64` ([`linalg`]), each result rounded to the
//! element type once when stored. The algorithms are plain loops, not cuSOLVER's: Cholesky, LU
//! with LAPACK's partial pivoting (pivots 1-based, as cuSOLVER writes them), Householder QR
//! with LAPACK's reflector conventions (`tau`, `v[0] = 1`), cyclic Jacobi for every symmetric
//! or Hermitian eigenproblem and one-sided Jacobi for every SVD. Eigenvalues come out
//! ascending, singular values descending; eigen and singular vectors may differ from the
//! GPU's by a sign (a phase, for complex types) per vector. Numerical failures are reported
//! as the GPU path reports them: the same [`Error::Numerical`] with the same
//! [`NumericalFailure`] and index.
//!
//! This module holds the glue every op shares (the element [`Scalar`]s, loading and storing
//! column-major matrices, running a kernel, reporting failures); the ops live by kind in
//! [`factor`] (Cholesky, LU), [`qr`], [`eigen`] (eigen and SVD) and [`sparse`] (the sparse
//! direct solves), on the dense kernels of [`linalg`].

mod eigen;
mod factor;
pub(crate) mod linalg;
mod qr;
mod refine;
mod sparse;

pub(super) use self::eigen::{
    geev, geev_complex_w, gesvd, gesvda_batched, gesvdj, gesvdj_batched, gesvdr, syevd, syevdx, syevj, syevj_batched,
    sygvd, Select,
};
pub(super) use self::factor::{
    getrf, getrf_batched, getrs, getrs_batched, potrf, potrf_batched, potri, potrs, potrs_batched, sytrf, sytrs, trtri,
};
pub(super) use self::qr::{geqrf, orgqr, ormqr};
pub(super) use self::refine::{gels, gesv, irs_gels, irs_gesv, Irs, Ran, MAX_ITERATIONS};
pub(crate) use self::sparse::sparse_solve;

use self::linalg::{Lower, Mat, C};
use super::{Fill, JacobiSettings};
use crate::completion::Completion;
use crate::error::{Error, NumericalFailure, Result};
use crate::libs::OpStream;
use crate::memory::Complex;
use crate::recorder::LaunchRecorder;

/// An element type the simulated solvers compute with: converted to and from complex `f64`.
pub(crate) trait Scalar: Copy + Send + Sync + 'static {
    /// The precision of the type (its machine epsilon): the Jacobi methods' default tolerance.
    const EPS: f64;
    fn to_c(self) -> C;
    /// Rounds `c` to the type (a real type keeps the real part).
    fn from_c(c: C) -> Self;
}

impl Scalar for f32 {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> C {
        C::real(self.into())
    }
    fn from_c(c: C) -> f32 {
        c.re as f32
    }
}
impl Scalar for f64 {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> C {
        C::real(self)
    }
    fn from_c(c: C) -> f64 {
        c.re
    }
}
impl Scalar for Complex<f32> {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> C {
        C::new(self.re.into(), self.im.into())
    }
    fn from_c(c: C) -> Self {
        Complex::new(c.re as f32, c.im as f32)
    }
}
impl Scalar for Complex<f64> {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> C {
        C::new(self.re, self.im)
    }
    fn from_c(c: C) -> Self {
        Complex::new(c.re, c.im)
    }
}

/// The `rows x cols` matrix at `off` in `data`, leading dimension `ld`.
pub(crate) fn load<T: Scalar>(data: &[T], off: usize, rows: usize, cols: usize, ld: usize) -> Mat {
    let mut m = Mat::zeros(rows, cols);
    for j in 0..cols {
        for i in 0..rows {
            m.data[i + j * rows] = data[off + i + j * ld].to_c();
        }
    }
    m
}

/// Stores `m` at `off` in `data`, leading dimension `ld`.
pub(crate) fn store<T: Scalar>(data: &mut [T], off: usize, ld: usize, m: &Mat) {
    for j in 0..m.cols {
        for i in 0..m.rows {
            data[off + i + j * ld] = T::from_c(m.at(i, j));
        }
    }
}

/// Stores the `lower` (or upper) triangle of `m`, the diagonal included, leaving the other.
fn store_triangle<T: Scalar>(data: &mut [T], off: usize, ld: usize, m: &Mat, lower: Lower) {
    for j in 0..m.cols {
        let rows = if lower { j..m.rows } else { 0..j + 1 };
        for i in rows {
            data[off + i + j * ld] = T::from_c(m.at(i, j));
        }
    }
}

fn store_real<R: Scalar>(data: &mut [R], off: usize, values: &[f64]) {
    for (o, &v) in data[off..off + values.len()].iter_mut().zip(values) {
        *o = R::from_c(C::real(v));
    }
}

fn lower(fill: Fill) -> Lower {
    fill == Fill::Lower
}

/// The op's failures as the GPU path reports them (nothing: `Ok`).
fn outcome(op: &'static str, batch: usize, failures: Vec<NumericalFailure>) -> Result<()> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Numerical { op, batch, failures })
    }
}

/// Runs `kernel` as the op's simulated kernel; its error becomes the completion's. Refused in a
/// graph recording, as the GPU's form (which reads status words back) is.
fn run<V: Send + 'static>(
    op: &OpStream,
    rec: LaunchRecorder,
    kernel: impl FnOnce() -> Result<V> + Send + 'static,
) -> Result<Completion<V>> {
    Ok(op.run_sim_read_back(crate::libs::op::HOST_READS_STATUS, rec, kernel)?.try_map(|r| r))
}

/// A Jacobi method's tolerance: the settings', or the type's precision for 0.
fn tolerance<T: Scalar>(j: JacobiSettings) -> f64 {
    if j.tolerance > 0.0 {
        j.tolerance
    } else {
        T::EPS
    }
}
