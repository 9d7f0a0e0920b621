//! Levels 2 (`gemv`, `ger`, `geru`, `gerc`) and 3 (`geam`, `syrk`, `trsm`), f32, f64 and their
//! complex forms.

use super::calls;
use super::sim::{self as host, Mat};
use super::{output_access, Blas, BlasReal, BlasScalar, Diag, Fill, Side, Transpose, Vector};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dptr;
use crate::libs::record;
use crate::libs::validate as check;
use crate::memory::GpuRef;
use crate::track::Access;

/// `y = alpha op(A) x + beta y`, with `A` stored `m x n`.
#[derive(Debug)]
pub struct Gemv<'a, T: BlasScalar> {
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
pub struct Geam<'a, T: BlasScalar> {
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
/// `op(A)` `n x k`. A complex `A` is not conjugated; its `trans` is `No` or `Yes`.
#[derive(Debug)]
pub struct Syrk<'a, T: BlasScalar> {
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
pub struct Trsm<'a, T: BlasScalar> {
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

/// A matrix argument as the calls take it.
fn mat<T: BlasScalar>(buf: &GpuRef<T>, ld: i32) -> Result<calls::Mat<T>> {
    Ok((dptr(buf)?, ld))
}

impl Blas {
    /// `y = alpha op(A) x + beta y` (see [`Gemv`]).
    pub fn gemv<T: BlasScalar>(&mut self, g: &Gemv<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let a = check::matrix("a", "lda", g.m, g.n, g.lda)?;
        check::covers("a", g.a, Some(a.span), &format!("A {}x{}", g.m, g.n))?;
        let (xn, yn) = match g.trans {
            Transpose::No => (g.n, g.m),
            Transpose::Yes | Transpose::Conj => (g.m, g.n),
        };
        let (incx, incy) = (g.x.check("x", "x.inc", xn, false)?, g.y.check("y", "y.inc", yn, false)?);
        if g.y.buf.same_buffer(g.a) || g.y.buf.same_buffer(g.x.buf) {
            return Err(Error::invalid("y", "must not be the same buffer as `a` or `x`"));
        }
        let mut rec = self.op.recorder("gemv");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "x", g.x.buf, Access::Read)?;
        record(&mut rec, "y", g.y.buf, output_access(g.beta))?;
        if self.op.device.is_simulated() {
            let (am, xm, ym) = (g.a.sim_data()?, g.x.buf.sim_data()?, g.y.buf.sim_data()?);
            let (trans, mm, nn, alpha, beta, lda, incx, incy) =
                (g.trans, g.m, g.n, g.alpha, g.beta, a.ld as usize, g.x.inc, g.y.inc);
            return self.op.run_sim(rec, Vec::new(), move || {
                // Copies of the inputs, so that no two buffers are locked at once.
                let x = host::gather(&xm.read(), xn, incx);
                let a = am.read().to_vec();
                host::gemv(trans, mm, nn, alpha, &a, lda, &x, beta, &mut ym.lock(), incy);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle; (2) A covers m x n at lda, x and y cover their lengths
            // at their increments; (3) y is distinct from the inputs; (4) host scalars.
            unsafe {
                calls::gemv(
                    h,
                    g.trans,
                    m,
                    n,
                    g.alpha,
                    mat(g.a, a.ld)?,
                    (dptr(g.x.buf)?, incx),
                    g.beta,
                    (dptr(g.y.buf)?, incy),
                )
            }
        })
    }

    /// `A = alpha x yᵀ + A` over real vectors, with `A` `m x n` (`lda`: `None` for packed); see
    /// [`geru`](Self::geru) and [`gerc`](Self::gerc) for complex ones.
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
        self.rank1("ger", false, m, n, alpha, x, y, a, lda)
    }

    /// `A = alpha x yᵀ + A`, unconjugated (`ger` for the real types), with `A` `m x n`.
    #[allow(clippy::too_many_arguments)]
    pub fn geru<T: BlasScalar>(
        &mut self,
        m: usize,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        a: &GpuRef<T>,
        lda: Option<usize>,
    ) -> Result<Completion<()>> {
        self.rank1("geru", false, m, n, alpha, x, y, a, lda)
    }

    /// `A = alpha x yᴴ + A` (`y` conjugated; `ger` for the real types), with `A` `m x n`.
    #[allow(clippy::too_many_arguments)]
    pub fn gerc<T: BlasScalar>(
        &mut self,
        m: usize,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        a: &GpuRef<T>,
        lda: Option<usize>,
    ) -> Result<Completion<()>> {
        self.rank1("gerc", true, m, n, alpha, x, y, a, lda)
    }

    #[allow(clippy::too_many_arguments)]
    fn rank1<T: BlasScalar>(
        &mut self,
        name: &'static str,
        conj: bool,
        m: usize,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        a: &GpuRef<T>,
        lda: Option<usize>,
    ) -> Result<Completion<()>> {
        let (mi, ni) = (check::dim("m", m, false)?, check::dim("n", n, false)?);
        let am = check::matrix("a", "lda", m, n, lda)?;
        check::covers("a", a, Some(am.span), &format!("A {m}x{n}"))?;
        let (incx, incy) = (x.check("x", "x.inc", m, false)?, y.check("y", "y.inc", n, false)?);
        if a.same_buffer(x.buf) || a.same_buffer(y.buf) {
            return Err(Error::invalid("a", "must not be the same buffer as `x` or `y`"));
        }
        let mut rec = self.op.recorder(name);
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "y", y.buf, Access::Read)?;
        record(&mut rec, "a", a, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let (xm, ym, amem, ld) = (x.buf.sim_data()?, y.buf.sim_data()?, a.sim_data()?, am.ld as usize);
            let (incx, incy, alpha) = (x.inc, y.inc, alpha.z());
            return self.op.run_sim(rec, Vec::new(), move || {
                // One lock at a time: `x` and `y` may be the same buffer.
                let xs = host::gather(&xm.read(), m, incx);
                let ys = host::gather(&ym.read(), n, incy);
                let mut av = amem.lock();
                for (j, yj) in ys.iter().enumerate() {
                    let yj = if conj { yj.z().conj() } else { yj.z() };
                    for (i, xi) in xs.iter().enumerate() {
                        let e = &mut av[i + j * ld];
                        *e = T::from_z(alpha * xi.z() * yj + e.z());
                    }
                }
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x, y and A cover their validated spans; A is distinct from
            // x and y; alpha is a host scalar.
            unsafe { calls::ger(h, conj, mi, ni, alpha, (dptr(x.buf)?, incx), (dptr(y.buf)?, incy), mat(a, am.ld)?) }
        })
    }

    /// `C = alpha op(A) + beta op(B)` (see [`Geam`]).
    pub fn geam<T: BlasScalar>(&mut self, g: &Geam<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", g.m, false)?, check::dim("n", g.n, false)?);
        let (ar, ac) = g.trans_a.stored(g.m, g.n);
        let (br, bc) = g.trans_b.stored(g.m, g.n);
        let a = check::matrix("a", "lda", ar, ac, g.lda)?;
        let b = check::matrix("b", "ldb", br, bc, g.ldb)?;
        let c = check::matrix("c", "ldc", g.m, g.n, g.ldc)?;
        check::covers("a", g.a, Some(a.span), &format!("op(A) {}x{}", g.m, g.n))?;
        check::covers("b", g.b, Some(b.span), &format!("op(B) {}x{}", g.m, g.n))?;
        check::covers("c", g.c, Some(c.span), &format!("C {}x{}", g.m, g.n))?;
        if g.c.same_buffer(g.a) || g.c.same_buffer(g.b) {
            return Err(Error::invalid("c", "must not be the same buffer as `a` or `b`"));
        }
        let mut rec = self.op.recorder("geam");
        record(&mut rec, "a", g.a, Access::Read)?;
        record(&mut rec, "b", g.b, Access::Read)?;
        record(&mut rec, "c", g.c, Access::Write)?;
        if self.op.device.is_simulated() {
            let (am, bm, cm) = (g.a.sim_data()?, g.b.sim_data()?, g.c.sim_data()?);
            let a_op = Mat { ld: a.ld as usize, trans: g.trans_a };
            let b_op = Mat { ld: b.ld as usize, trans: g.trans_b };
            let (mm, nn, alpha, beta, ldc) = (g.m, g.n, g.alpha, g.beta, c.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                // One lock at a time: `a` and `b` may be the same buffer.
                let av = am.read().to_vec();
                let bv = bm.read().to_vec();
                host::geam(mm, nn, alpha, &av, a_op, beta, &bv, b_op, &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle; (2) A, B and C cover their validated spans; (3) C is
            // distinct from both inputs; (4) alpha and beta are host scalars.
            unsafe {
                calls::geam(
                    h,
                    [g.trans_a, g.trans_b],
                    m,
                    n,
                    g.alpha,
                    mat(g.a, a.ld)?,
                    g.beta,
                    mat(g.b, b.ld)?,
                    mat(g.c, c.ld)?,
                )
            }
        })
    }

    /// The symmetric rank-k update (see [`Syrk`]).
    pub fn syrk<T: BlasScalar>(&mut self, s: &Syrk<'_, T>) -> Result<Completion<()>> {
        let (n, k) = (check::dim("n", s.n, false)?, check::dim("k", s.k, false)?);
        let (ar, ac) = s.trans.stored(s.n, s.k);
        let a = check::matrix("a", "lda", ar, ac, s.lda)?;
        let c = check::matrix("c", "ldc", s.n, s.n, s.ldc)?;
        check::covers("a", s.a, Some(a.span), &format!("op(A) {}x{}", s.n, s.k))?;
        check::covers("c", s.c, Some(c.span), &format!("C {}x{}", s.n, s.n))?;
        check::distinct("c", s.a, s.c)?;
        if T::COMPLEX && s.trans == Transpose::Conj {
            return Err(Error::invalid(
                "trans",
                "a complex syrk takes Transpose::No or Transpose::Yes: cuBLAS's syrk has no conjugate form",
            ));
        }
        let mut rec = self.op.recorder("syrk");
        record(&mut rec, "a", s.a, Access::Read)?;
        // Only one triangle is written: the other keeps its contents, so C is read-write.
        record(&mut rec, "c", s.c, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let (am, cm) = (s.a.sim_data()?, s.c.sim_data()?);
            let a_op = Mat { ld: a.ld as usize, trans: s.trans };
            let (nn, kk, ldc, alpha, beta, upper) =
                (s.n, s.k, c.ld as usize, s.alpha.z(), s.beta.z(), s.fill == Fill::Upper);
            return self.op.run_sim(rec, Vec::new(), move || {
                let av = am.read().to_vec();
                host::rank_k(upper, false, nn, kk, alpha, &av, a_op, beta, &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A and C cover their validated spans and are distinct; host
            // scalars.
            unsafe { calls::syrk(h, s.fill, s.trans, n, k, s.alpha, mat(s.a, a.ld)?, s.beta, mat(s.c, c.ld)?) }
        })
    }

    /// The triangular solve (see [`Trsm`]); `B` is overwritten by the solution.
    pub fn trsm<T: BlasScalar>(&mut self, t: &Trsm<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", t.m, false)?, check::dim("n", t.n, false)?);
        let order = match t.side {
            Side::Left => t.m,
            Side::Right => t.n,
        };
        let a = check::matrix("a", "lda", order, order, t.lda)?;
        let b = check::matrix("b", "ldb", t.m, t.n, t.ldb)?;
        check::covers("a", t.a, Some(a.span), &format!("A {order}x{order}"))?;
        check::covers("b", t.b, Some(b.span), &format!("B {}x{}", t.m, t.n))?;
        check::distinct("b", t.a, t.b)?;
        let mut rec = self.op.recorder("trsm");
        record(&mut rec, "a", t.a, Access::Read)?;
        record(&mut rec, "b", t.b, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let (am, bm) = (t.a.sim_data()?, t.b.sim_data()?);
            let a_op = Mat { ld: a.ld as usize, trans: t.trans };
            let lower = host::op_lower(t.fill == Fill::Lower, t.trans);
            let (left, unit, mm, nn, alpha, ldb) =
                (t.side == Side::Left, t.diag == Diag::Unit, t.m, t.n, t.alpha, b.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                let av = am.read().to_vec();
                host::trsm(left, lower, unit, mm, nn, alpha, &av, a_op, &mut bm.lock(), ldb);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A and B cover their validated spans and are distinct; alpha
            // is a host scalar.
            unsafe { calls::trsm(h, t.side, t.fill, t.trans, t.diag, m, n, t.alpha, mat(t.a, a.ld)?, mat(t.b, b.ld)?) }
        })
    }
}
