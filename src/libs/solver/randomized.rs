//! Randomized SVD: `gesvdr`, the approximate `k` largest singular values and vectors, on the
//! 64-bit generic API (every element type).

use super::calls::{self, Randomized};
use super::factor::{matrix, vptr};
use super::info::Meaning;
use super::{Solver, SolverElement};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::DataTypes;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

/// The rank-`k` SVD `A ≈ U Σ Vᴴ` of the `m x n` matrix `A` (destroyed) by randomized
/// sampling (Halko, Martinsson and Tropp): `k + oversampling` random directions refined by
/// `iterations` power iterations, accurate with high probability when the spectrum decays. The
/// `k` largest singular values go to the first entries of `s` (descending), and with `vectors`
/// the left singular vectors to the first `k` columns of `U` and the right ones (not
/// transposed) to `V`.
///
/// The buffers are sized as NVIDIA's own example sizes them, whatever `k`: `s` for
/// `min(m, n)` values, `U` for `m x min(m, n)` and `V` for `n x n`.
///
/// On the simulator the values and vectors are the exact ones (a Jacobi SVD), which the GPU's
/// approach as the spectrum decays.
#[derive(Debug)]
pub struct Gesvdr<'a, T: SolverElement> {
    /// Whether `U` and `V` are computed.
    pub vectors: bool,
    /// Rows.
    pub m: usize,
    /// Columns.
    pub n: usize,
    /// The rank wanted: at least 1, and `k + oversampling <= min(m, n)`.
    pub k: usize,
    /// Extra random directions beyond `k`.
    pub oversampling: usize,
    /// Power iterations (at least 1).
    pub iterations: usize,
    /// `A`, destroyed.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The singular values (room for `min(m, n)`).
    pub s: &'a GpuRef<T::Real>,
    /// `U` (room for `m x min(m, n)`).
    pub u: &'a GpuRef<T>,
    /// Leading dimension of `U`; `None`: packed.
    pub ldu: Option<usize>,
    /// `V` (room for `n x n`).
    pub v: &'a GpuRef<T>,
    /// Leading dimension of `V`; `None`: packed.
    pub ldv: Option<usize>,
}

impl Solver {
    /// Randomized rank-`k` SVD (see [`Gesvdr`]).
    pub fn gesvdr<T: SolverElement>(&mut self, g: &Gesvdr<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim64("m", g.m)?, check::dim64("n", g.n)?);
        let p = g.m.min(g.n);
        if g.k == 0 {
            return Err(Error::invalid("k", "must be at least 1"));
        }
        if g.k.checked_add(g.oversampling).is_none_or(|kp| kp > p) {
            return Err(Error::invalid(
                "oversampling",
                format!("k + oversampling = {} + {} exceeds min(m, n) = {p}", g.k, g.oversampling),
            ));
        }
        if g.iterations == 0 {
            return Err(Error::invalid("iterations", "must be at least 1"));
        }
        let iters = check::dim64("iterations", g.iterations)?;
        let lda = matrix("a", "lda", g.a, g.m, g.n, g.lda)?;
        check::covers("s", g.s, Some(p), "min(m, n) singular values")?;
        let (ldu, ldv) = if g.vectors {
            (matrix("u", "ldu", g.u, g.m, p, g.ldu)?, matrix("v", "ldv", g.v, g.n, g.n, g.ldv)?)
        } else {
            (m, n)
        };
        check::distinct("u", g.a, g.u)?;
        check::distinct("v", g.a, g.v)?;
        check::distinct("v", g.u, g.v)?;
        check::no_aliasing(&[
            ("a", g.a.id(), false),
            ("u", g.u.id(), false),
            ("v", g.v.id(), false),
            ("s", g.s.id(), true),
        ])?;
        let mut rec = self.op.recorder("gesvdr");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "s", g.s, Access::Write)?;
        record(&mut rec, "u", g.u, Access::Write)?;
        record(&mut rec, "v", g.v, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::gesvdr(&self.op, rec, g, (lda as usize, ldu as usize, ldv as usize));
        }
        let (h, params) = self.handle()?;
        // Both fit: each is at most min(m, n), which passed `dim64`.
        let r = Randomized { m, n, k: g.k as i64, p: g.oversampling as i64, iters };
        let (a, s, u, v) = (vptr(g.a)?, dptr(g.s)?, vptr(g.u)?, vptr(g.v)?);
        let (dt, st, vectors) = (calls::data_type(T::CUDA), calls::data_type(T::Real::CUDA), g.vectors);
        // Not cached: the shape has more parameters than a cache key holds, and a randomized SVD
        // costs far more than its query.
        self.op.bound_stream()?;
        // SAFETY: a live handle and params, context bound above; the query reads nothing.
        let sizes = unsafe { calls::gesvdr(h, params, vectors, r, dt, (a, lda), st, s, (u, ldu), (v, ldv), None) }?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "gesvdr",
            1,
            Meaning::Converge,
            None,
            |pin| {
                // SAFETY: (1) live handle and params on this stream; (2) `a`, `s`, `u`, `v`
                // cover their validated shapes (at least what the call writes for any `k`), are
                // distinct and declared; (3) the workspace holds the queried sizes, the host part
                // kept alive with the op; (4) `info` pinned.
                unsafe {
                    calls::gesvdr(
                        h,
                        params,
                        vectors,
                        r,
                        dt,
                        (a, lda),
                        st,
                        s,
                        (u, ldu),
                        (v, ldv),
                        Some((work, pin.info())),
                    )
                }
                .map(drop)
            },
            || (),
        )
    }
}
