//! The batched approximate SVD `gesvdaStridedBatched`: the `rank` largest singular triplets of
//! tall matrices through the eigenvalues of `Aᴴ A`.

use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::solver::calls::gesvda;
use crate::libs::solver::info::Meaning;
use crate::libs::solver::{Solver, SolverElement};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

use super::strided;

/// The approximate SVDs of `batch` tall `m x n` matrices (`m >= n`), `stride_a` elements
/// apart in `a` (read, not written): the `rank` largest singular values of each (descending)
/// into `s` (`stride_s` apart, `None`: `rank`), and with `vectors` the left singular vectors
/// into `U` (`m x rank` each) and the right ones, not transposed, into `V` (`n x rank` each).
/// cuSOLVER computes them from the eigenvalues of `Aᴴ A`, so singular values far below the
/// largest lose accuracy (relative to it, about its square root of machine precision).
/// cuSOLVER's optional residual norms are not asked for: on CUDA 13.0 (H100) they read 0 for a
/// truncation (`rank < n`) whose residual is the norm of the trailing singular values.
#[derive(Debug)]
pub struct GesvdaBatched<'a, T: SolverElement> {
    /// Whether `U` and `V` are computed.
    pub vectors: bool,
    /// Singular triplets per matrix: from 1 to `n`.
    pub rank: usize,
    /// Rows of each matrix.
    pub m: usize,
    /// Columns of each matrix (at most `m`).
    pub n: usize,
    /// Matrices.
    pub batch: usize,
    /// The matrices.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of each; `None`: packed.
    pub lda: Option<usize>,
    /// Elements from one matrix to the next; `None`: `lda * n`.
    pub stride_a: Option<usize>,
    /// The singular values.
    pub s: &'a GpuRef<T::Real>,
    /// Elements from one matrix's values to the next; `None`: `rank`.
    pub stride_s: Option<usize>,
    /// `U`.
    pub u: &'a GpuRef<T>,
    /// Leading dimension of each `U`; `None`: packed.
    pub ldu: Option<usize>,
    /// Elements from one `U` to the next; `None`: `ldu * rank`.
    pub stride_u: Option<usize>,
    /// `V`.
    pub v: &'a GpuRef<T>,
    /// Leading dimension of each `V`; `None`: packed.
    pub ldv: Option<usize>,
    /// Elements from one `V` to the next; `None`: `ldv * rank`.
    pub stride_v: Option<usize>,
}

/// A stride as the `long long` the call takes.
fn long(arg: &'static str, v: usize) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit a 64-bit integer")))
}

impl Solver {
    /// Batched approximate SVD (see [`GesvdaBatched`]). A matrix whose eigensolver did not converge is listed in
    /// [`Error::Numerical`] and the others' results are valid.
    pub fn gesvda_batched<T: SolverElement>(&mut self, g: &GesvdaBatched<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        if g.m < g.n {
            return Err(Error::invalid(
                "m",
                format!("{} is below n = {}: gesvda takes tall matrices (pass Aᴴ)", g.m, g.n),
            ));
        }
        if g.rank == 0 || g.rank > g.n {
            return Err(Error::invalid("rank", format!("{} is not within 1..={}", g.rank, g.n)));
        }
        let (rank, batch) = (check::dim("rank", g.rank, false)?, check::dim("batch", g.batch, false)?);
        let (lda, sa) = strided(("a", "lda", "stride_a"), g.a, g.m, g.n, g.lda, g.stride_a, g.batch)?;
        let ss = g.stride_s.unwrap_or(g.rank);
        if ss < g.rank {
            return Err(Error::invalid(
                "stride_s",
                format!("{ss} makes the values overlap (each matrix has {})", g.rank),
            ));
        }
        let s_span = ss.checked_mul(g.batch - 1).and_then(|x| x.checked_add(g.rank));
        check::covers("s", g.s, s_span, &format!("{} x {} singular values {ss} apart", g.batch, g.rank))?;
        let ((ldu, su), (ldv, sv)) = if g.vectors {
            (
                strided(("u", "ldu", "stride_u"), g.u, g.m, g.rank, g.ldu, g.stride_u, g.batch)?,
                strided(("v", "ldv", "stride_v"), g.v, g.n, g.rank, g.ldv, g.stride_v, g.batch)?,
            )
        } else {
            ((m, g.m * g.rank), (n, g.n * g.rank))
        };
        let (sa, ss, su, sv) =
            (long("stride_a", sa)?, long("stride_s", ss)?, long("stride_u", su)?, long("stride_v", sv)?);
        check::distinct("s", g.a, g.s)?;
        check::distinct("u", g.a, g.u)?;
        check::distinct("v", g.a, g.v)?;
        check::distinct("v", g.u, g.v)?;
        check::no_aliasing(&[("u", g.u.id(), false), ("v", g.v.id(), false), ("s", g.s.id(), true)])?;
        let mut rec = self.op.recorder("gesvdaStridedBatched");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "v", g.v, Access::Write)?;
        if self.op.device.is_simulated() {
            let strides = [sa, ss, su, sv].map(|x| x as usize);
            return crate::libs::solver::sim::gesvda_batched(
                &self.op,
                rec,
                g,
                (lda as usize, ldu as usize, ldv as usize),
                strides,
            );
        }
        let (h, _) = self.handle()?;
        let (a, s, u, v): (*mut c_void, *mut c_void, *mut c_void, *mut c_void) =
            (dptr(g.a)?, dptr(g.s)?, dptr(g.u)?, dptr(g.v)?);
        let (dims, vectors, dt) = ((rank, m, n, batch), g.vectors, T::CUDA);
        // Not cached: the shape has more parameters than a cache key holds.
        self.op.bound_stream()?;
        // SAFETY: a live handle, context bound above; the query reads no buffer.
        let lwork = unsafe { gesvda::size(h, dt, vectors, dims, (a, lda, sa), (s, ss), (u, ldu, su), (v, ldv, sv)) }?;
        let sizes = (lwork.max(0) as usize * std::mem::size_of::<T>(), 0);
        let lwork = i32::try_from(sizes.0 / std::mem::size_of::<T>()).unwrap_or(i32::MAX);
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvdaStridedBatched",
            g.batch,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: (1) a live handle on this stream; (2) `a` (read), `s`, `u`, `v` (written)
                // cover `batch` matrices of their validated shapes and strides, distinct and
                // declared, of `T` (real parts for `s`), the type `dt` names; (3) the workspace,
                // declared, holds `lwork` elements; (4) `info` holds `batch` pinned words; the
                // residuals' pointer is null, which asks cuSOLVER for none.
                unsafe {
                    gesvda::run(
                        h,
                        dt,
                        vectors,
                        dims,
                        (a, lda, sa),
                        (s, ss),
                        (u, ldu, su),
                        (v, ldv, sv),
                        (work.device, lwork),
                        pin.info(),
                        std::ptr::null_mut(),
                    )
                }
            },
            || (),
        )
    }
}
