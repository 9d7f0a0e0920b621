//! QR: `geqrf`, and `orgqr`, `ormqr` (the unitary `ungqr`, `unmqr` for complex types), all
//! for any element type.

use super::calls::{self, data_type};
use super::factor::{matrix, vptr, CheckStatus};
use super::info::Meaning;
use super::symmetric::work_bytes;
use super::{is_complex, Side, SizeKey, Solver, SolverElement, Trans};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::record;
use crate::libs::validate as check;
use crate::memory::GpuRef;
use crate::track::Access;

/// QR factorization `A = Q R` of the `m x n` matrix `A`: `R` overwrites the upper triangle,
/// `Q` is kept as `min(m, n)` Householder reflectors below it and their scales in `tau`.
#[derive(Debug)]
pub struct Geqrf<'a, T: SolverElement> {
    /// Rows of `A`.
    pub m: usize,
    /// Columns of `A`.
    pub n: usize,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The reflectors' scales: `min(m, n)` elements.
    pub tau: &'a GpuRef<T>,
}

/// Forms the first `n` columns of `Q` (`m x n`, `m >= n >= k`) from `k` reflectors of
/// [`Solver::geqrf`], overwriting `A`. `Q` is orthogonal for real types and unitary for complex
/// ones (LAPACK's `ungqr`).
#[derive(Debug)]
pub struct Orgqr<'a, T: SolverElement> {
    /// Rows of `Q`.
    pub m: usize,
    /// Columns of `Q` formed.
    pub n: usize,
    /// Reflectors used.
    pub k: usize,
    /// The reflectors, overwritten by `Q`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The scales `geqrf` wrote.
    pub tau: &'a GpuRef<T>,
}

/// `C = op(Q) C` (left) or `C op(Q)` (right), `C` being `m x n`, with `Q` held as `k`
/// reflectors of [`Solver::geqrf`] (orthogonal for real types, unitary for complex ones, as in
/// LAPACK's `unmqr`).
#[derive(Debug)]
pub struct Ormqr<'a, T: SolverElement> {
    /// Which side `Q` multiplies from.
    pub side: Side,
    /// How `Q` is applied. Real types: `Yes` and `Conj` both apply `Qᵀ`. Complex types: `Conj`
    /// applies `Qᴴ`, and `Yes` is rejected (a plain `Qᵀ` of a unitary `Q` is not something
    /// cuSOLVER's `unmqr` computes).
    pub trans: Trans,
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// Reflectors.
    pub k: usize,
    /// The reflectors: `m x k` (left) or `n x k` (right).
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// The scales.
    pub tau: &'a GpuRef<T>,
    /// `C`, overwritten.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

impl Solver {
    /// QR factorization (see [`Geqrf`]).
    pub fn geqrf<T: SolverElement>(&mut self, g: &Geqrf<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim64("m", g.m)?, check::dim64("n", g.n)?);
        let lda = matrix("a", "lda", g.a, g.m, g.n, g.lda)?;
        check::covers("tau", g.tau, Some(g.m.min(g.n)), "min(m, n) scales")?;
        check::distinct("tau", g.a, g.tau)?;
        let mut rec = self.op.recorder("geqrf");
        record(&mut rec, "a", g.a, Access::ReadWrite)?;
        record(&mut rec, "tau", g.tau, Access::Write)?;
        if self.op.device.is_simulated() {
            return super::sim::geqrf(&self.op, rec, g, lda as usize);
        }
        let (h, params) = self.handle()?;
        let (a, tau, dt) = (vptr(g.a)?, vptr(g.tau)?, data_type(T::CUDA));
        let key = SizeKey { op: "geqrf", dtype: T::CUDA as u32, dims: [m, n, lda, 0, 0, 0] };
        // SAFETY: a live handle and params, context bound; the query reads nothing.
        let sizes = self.sizes(key, || unsafe { calls::geqrf(h, params, m, n, dt, a, lda, tau, None) })?;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "geqrf",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: live handle and params; `a` (m x n at lda) and `tau` (min(m, n)) cover
                // their shapes, declared written; the workspace holds the queried sizes; `info` is
                // pinned mapped memory.
                unsafe { calls::geqrf(h, params, m, n, dt, a, lda, tau, Some((work, pin.info()))) }.map(drop)
            },
            || (),
        )
    }

    /// Forms `Q` (see [`Orgqr`]); complex types run the unitary form
    /// (`cusolverDn{C,Z}ungqr`), real types `cusolverDn{S,D}orgqr`.
    pub fn orgqr<T: SolverElement>(&mut self, o: &Orgqr<'_, T>) -> Result<Completion<()>> {
        let (m, n, k) = (check::dim("m", o.m, false)?, check::dim("n", o.n, false)?, check::dim("k", o.k, false)?);
        if o.n > o.m {
            return Err(Error::invalid("n", format!("{} exceeds m = {}: Q has at most m columns", o.n, o.m)));
        }
        if o.k > o.n {
            return Err(Error::invalid("k", format!("{} exceeds n = {}", o.k, o.n)));
        }
        let lda = matrix("a", "lda", o.a, o.m, o.n, o.lda)? as i32;
        check::covers("tau", o.tau, Some(o.k), "k scales")?;
        check::distinct("tau", o.a, o.tau)?;
        let mut rec = self.op.recorder("orgqr");
        record(&mut rec, "a", o.a, Access::ReadWrite)?;
        record(&mut rec, "tau", o.tau, Access::Read)?;
        if self.op.device.is_simulated() {
            return super::sim::orgqr(&self.op, rec, o, lda as usize);
        }
        let (h, _) = self.handle()?;
        let (a, tau) = (vptr(o.a)?, vptr(o.tau)?);
        let (size_call, call) = if is_complex::<T>() {
            ("cusolverDn<t>ungqr_bufferSize", "cusolverDn<t>ungqr")
        } else {
            ("cusolverDn<t>orgqr_bufferSize", "cusolverDn<t>orgqr")
        };
        let key =
            SizeKey { op: "orgqr", dtype: T::CUDA as u32, dims: [m.into(), n.into(), k.into(), lda.into(), 0, 0] };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle, context bound; the query reads nothing.
            unsafe { T::orgqr_size(h, m, n, k, a, lda, tau, &mut lwork) }.check_status(size_call)?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "orgqr",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: a live handle; `a` (m x n at lda, read-write) and `tau` (k, read) cover
                // their shapes, of `T`; the workspace holds `lwork` elements; `info` is pinned
                // mapped.
                unsafe { T::orgqr(h, m, n, k, a, lda, tau, work.device, lwork, pin.info()) }.check_status(call)
            },
            || (),
        )
    }

    /// Applies `Q` (see [`Ormqr`]); complex types run the unitary form
    /// (`cusolverDn{C,Z}unmqr`), real types `cusolverDn{S,D}ormqr`.
    pub fn ormqr<T: SolverElement>(&mut self, o: &Ormqr<'_, T>) -> Result<Completion<()>> {
        let (m, n, k) = (check::dim("m", o.m, false)?, check::dim("n", o.n, false)?, check::dim("k", o.k, false)?);
        let complex = is_complex::<T>();
        if complex && o.trans == Trans::Yes {
            return Err(Error::invalid(
                "trans",
                "must be No or Conj (Qᴴ) for a complex Q: unmqr has no plain transpose",
            ));
        }
        let q_order = match o.side {
            Side::Left => o.m,
            Side::Right => o.n,
        };
        if o.k > q_order {
            return Err(Error::invalid("k", format!("{} exceeds Q's order {q_order}", o.k)));
        }
        let lda = matrix("a", "lda", o.a, q_order, o.k, o.lda)? as i32;
        let ldc = matrix("c", "ldc", o.c, o.m, o.n, o.ldc)? as i32;
        check::covers("tau", o.tau, Some(o.k), "k scales")?;
        check::distinct("c", o.a, o.c)?;
        check::distinct("c", o.tau, o.c)?;
        let mut rec = self.op.recorder("ormqr");
        record(&mut rec, "a", o.a, Access::Read)?;
        record(&mut rec, "tau", o.tau, Access::Read)?;
        record(&mut rec, "c", o.c, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            return super::sim::ormqr(&self.op, rec, o, lda as usize, ldc as usize);
        }
        let (h, _) = self.handle()?;
        let (a, tau, c) = (vptr(o.a)?, vptr(o.tau)?, vptr(o.c)?);
        // ormqr takes T for Qᵀ, unmqr C for Qᴴ; `Yes` on a complex type was rejected above.
        let applied = match (o.trans, complex) {
            (Trans::No, _) => Trans::No,
            (_, false) => Trans::Yes,
            (_, true) => Trans::Conj,
        };
        let (side, trans) = (calls::side(o.side), calls::trans(applied));
        let (size_call, call) = if complex {
            ("cusolverDn<t>unmqr_bufferSize", "cusolverDn<t>unmqr")
        } else {
            ("cusolverDn<t>ormqr_bufferSize", "cusolverDn<t>ormqr")
        };
        let key = SizeKey {
            op: "ormqr",
            dtype: T::CUDA as u32,
            dims: [
                m.into(),
                n.into(),
                k.into(),
                lda.into(),
                ldc.into(),
                o.side as i64 * 2 + (o.trans != Trans::No) as i64,
            ],
        };
        let sizes = self.sizes(key, || {
            let mut lwork = 0;
            // SAFETY: a live handle, context bound; the query reads nothing.
            unsafe { T::ormqr_size(h, side, trans, m, n, k, a, lda, tau, c, ldc, &mut lwork) }
                .check_status(size_call)?;
            Ok(work_bytes::<T>(lwork))
        })?;
        let lwork = (sizes.0 / std::mem::size_of::<T>()) as i32;
        let (work, keep) = self.workspace(&mut rec, sizes)?;
        self.run_info(
            rec,
            keep,
            "ormqr",
            1,
            Meaning::ParamsOnly,
            None,
            |pin| {
                // SAFETY: a live handle; `a`, `tau` (read) and `c` (read-write) cover their
                // validated shapes, of `T`, `c` distinct; the workspace holds `lwork` elements;
                // `info` is pinned mapped memory.
                unsafe { T::ormqr(h, side, trans, m, n, k, a, lda, tau, c, ldc, work.device, lwork, pin.info()) }
                    .check_status(call)
            },
            || (),
        )
    }
}
