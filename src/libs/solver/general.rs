//! Eigenvalues of a general (non-symmetric, non-Hermitian) matrix: `geev`, on the 64-bit
//! generic API (every element type), and for real matrices `geev_complex_w`, the same with the
//! eigenvalues as complex numbers.
//!
//! Left eigenvectors are not offered: `cusolverDnXgeev` takes a `jobvl` argument, but cuSOLVER
//! (CUDA 12.6, where `Xgeev` appeared, through 13.0, which cusched builds against) supports only
//! `jobvl = CUSOLVER_EIG_MODE_NOVECTOR`. The left eigenvectors of `A` are the right eigenvectors
//! of `Aᴴ` (conjugated): run `geev` on `Aᴴ` for them.

use super::calls;
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::{is_complex, SizeKey, Solver, SolverElement, SolverReal};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::dtype::DataTypes;
use crate::libs::record;
use crate::libs::validate as check;
use crate::memory::{Complex, GpuRef};
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// The validated shape of a `geev`: order, leading dimensions, and whether vectors are computed.
#[derive(Clone, Copy)]
struct GeevShape {
    n: i64,
    lda: i64,
    ldvr: i64,
    vectors: bool,
}

/// Eigenvalues and optionally right eigenvectors `A v = λ v` of the `n x n` general `A`
/// (destroyed), in LAPACK's `geev` layout (cuSOLVER's `Xgeev` with every data type the element
/// type's):
///
/// - complex types: `w` holds the `n` eigenvalues, column `j` of `VR` the eigenvector of
///   `w[j]`;
/// - real types: `w` holds `2n` values, the `n` real parts then the `n` imaginary parts;
///   complex eigenvalues come in conjugate pairs, the one with the positive imaginary part
///   first, and for such a pair at `j`, `j + 1` the eigenvectors are `VR(:,j) ± i VR(:,j+1)`;
///   a real eigenvalue's eigenvector is the real column `VR(:,j)`.
///
/// Each eigenvector has norm 1 and its largest component real. Left eigenvectors are not
/// computed (see the module docs). For a real matrix's eigenvalues as complex numbers, see
/// [`GeevComplexW`].
#[derive(Debug)]
pub struct Geev<'a, T: SolverElement> {
    /// Whether right eigenvectors are computed.
    pub vectors: bool,
    /// Order of `A`.
    pub n: usize,
    /// `A`, destroyed.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The eigenvalues: `n` for complex types, `2n` (real parts, then imaginary parts) for
    /// real types.
    pub w: &'a GpuRef<T>,
    /// The right eigenvectors (`n x n`), written with `vectors`.
    pub vr: &'a GpuRef<T>,
    /// Leading dimension of `VR`; `None`: packed.
    pub ldvr: Option<usize>,
}

/// [`Geev`] of a real `n x n` `A` (destroyed) with the eigenvalues as `n` complex numbers
/// (cuSOLVER's `Xgeev` with a complex `W`; the computation stays real): `w[j]` is the `j`-th
/// eigenvalue, a conjugate pair stored as both its members, the one with the positive
/// imaginary part first. `VR` is real, laid out as [`Geev`]'s: a real eigenvalue's eigenvector
/// is the column `VR(:,j)`, and a pair's at `j`, `j + 1` are `VR(:,j) ± i VR(:,j+1)`.
#[derive(Debug)]
pub struct GeevComplexW<'a, T: SolverReal>
where
    Complex<T>: SolverElement,
{
    /// Whether right eigenvectors are computed.
    pub vectors: bool,
    /// Order of `A`.
    pub n: usize,
    /// `A`, destroyed.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The `n` eigenvalues.
    pub w: &'a GpuRef<Complex<T>>,
    /// The right eigenvectors (`n x n`), written with `vectors`.
    pub vr: &'a GpuRef<T>,
    /// Leading dimension of `VR`; `None`: packed.
    pub ldvr: Option<usize>,
}

impl Solver {
    /// General eigenvalues and right eigenvectors (see [`Geev`]); a QR iteration that did not
    /// converge fails the completion with
    /// [`NumericalFailure::NotConverged`](crate::NumericalFailure::NotConverged).
    pub fn geev<T: SolverElement>(&mut self, g: &Geev<'_, T>) -> Result<Completion<()>> {
        let n = check::dim64("n", g.n)?;
        let lda = matrix("a", "lda", g.a, g.n, g.n, g.lda)?;
        let values = if is_complex::<T>() { Some(g.n) } else { g.n.checked_mul(2) };
        check::covers(
            "w",
            g.w,
            values,
            if is_complex::<T>() { "n eigenvalues" } else { "2n values (real, imaginary parts)" },
        )?;
        let ldvr = if g.vectors { matrix("vr", "ldvr", g.vr, g.n, g.n, g.ldvr)? } else { n };
        check::distinct("w", g.a, g.w)?;
        check::distinct("vr", g.a, g.vr)?;
        check::distinct("vr", g.w, g.vr)?;
        let mut rec = self.op.recorder("geev");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "w", g.w, Access::Write)?;
        record(&mut rec, "vr", g.vr, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::geev(&self.op, rec, g, lda as usize, ldvr as usize);
        }
        let shape = GeevShape { n, lda, ldvr, vectors: g.vectors };
        let (a, w, vr) = (vptr(g.a)?, vptr(g.w)?, vptr(g.vr)?);
        let dt = calls::data_type(T::CUDA);
        self.geev_on_gpu(rec, "geev", T::CUDA as u32, shape, (a, dt), (w, dt), vr)
    }

    /// General eigenvalues of a real matrix as complex numbers, and its right eigenvectors
    /// (see [`GeevComplexW`]); a QR iteration that did not converge fails the completion with
    /// [`NumericalFailure::NotConverged`](crate::NumericalFailure::NotConverged).
    pub fn geev_complex_w<T: SolverReal>(&mut self, g: &GeevComplexW<'_, T>) -> Result<Completion<()>>
    where
        Complex<T>: SolverElement,
    {
        let n = check::dim64("n", g.n)?;
        let lda = matrix("a", "lda", g.a, g.n, g.n, g.lda)?;
        check::covers("w", g.w, Some(g.n), "n complex eigenvalues")?;
        let ldvr = if g.vectors { matrix("vr", "ldvr", g.vr, g.n, g.n, g.ldvr)? } else { n };
        check::distinct("w", g.a, g.w)?;
        check::distinct("vr", g.a, g.vr)?;
        check::distinct("vr", g.w, g.vr)?;
        let mut rec = self.op.recorder("geev");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "w", g.w, Access::Write)?;
        record(&mut rec, "vr", g.vr, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::geev_complex_w(&self.op, rec, g, lda as usize, ldvr as usize);
        }
        let shape = GeevShape { n, lda, ldvr, vectors: g.vectors };
        let (a, w, vr) = (vptr(g.a)?, vptr(g.w)?, vptr(g.vr)?);
        let (dt, dtw) = (calls::data_type(T::CUDA), calls::data_type(<Complex<T> as DataTypes>::CUDA));
        self.geev_on_gpu(rec, "geev_complex_w", T::CUDA as u32, shape, (a, dt), (w, dtw), vr)
    }

    /// The GPU part of `geev` and `geev_complex_w`, which differ only in `W`'s type: the size
    /// query (cached under `op` and `dtype`), the workspace, and the call with its status word.
    /// `a`, `w` and `vr` are the validated, declared buffers' pointers, of types `dt`, `dtw`
    /// and `dt`.
    #[allow(clippy::too_many_arguments)]
    fn geev_on_gpu(
        &mut self,
        mut rec: LaunchRecorder,
        op: &'static str,
        dtype: u32,
        shape: GeevShape,
        (a, dt): (*mut c_void, cudarc::cusolver::sys::cudaDataType),
        (w, dtw): (*mut c_void, cudarc::cusolver::sys::cudaDataType),
        vr: *mut c_void,
    ) -> Result<Completion<()>> {
        let GeevShape { n, lda, ldvr, vectors } = shape;
        let (h, params) = self.handle()?;
        let key = SizeKey { op, dtype, dims: [n, lda, ldvr, vectors as i64, 0, 0] };
        // SAFETY: a live handle and params, context bound by `sizes`; the query reads nothing.
        let sizes = self
            .sizes(key, || unsafe { calls::geev(h, params, vectors, n, dt, (a, lda), (w, dtw), (vr, ldvr), None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "geev",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: (1) live handle and params on this stream; (2) `a` (n x n at lda), `w`
                // (n of `dtw`, or 2n for a real type's own `w`) and `vr` (n x n at ldvr, with
                // vectors) cover the shapes the caller validated, are distinct and declared;
                // (3) the workspace, declared, holds the queried sizes, the host part kept
                // alive with the op; (4) `info` pinned.
                unsafe {
                    calls::geev(h, params, vectors, n, dt, (a, lda), (w, dtw), (vr, ldvr), Some((work, pin.info())))
                }
                .map(drop)
            },
            || (),
        )
    }
}
