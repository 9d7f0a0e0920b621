//! The rest of level 3: `symm`/`hemm`, `trmm`, `syr2k`/`her2k`, `herk`, and `dgmm`, in f32, f64
//! and their complex forms. For the real types the Hermitian ops are the symmetric ones (as in
//! BLAS: a real Hermitian matrix is symmetric).

use super::calls;
use super::sim::{self as host, Mat, Scalar as _, Z};
use super::{output_access, Blas, BlasScalar, Diag, Fill, Side, Transpose, Vector};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;

/// `C = alpha A B + beta C` (`Left`) or `alpha B A + beta C` (`Right`), `C` and `B` `m x n`,
/// `A` symmetric (for [`Blas::symm`]) or Hermitian ([`Blas::hemm`]) of order `m` (`Left`) or
/// `n`, read from its `fill` triangle.
#[derive(Debug)]
pub struct Symm<'a, T: BlasScalar> {
    /// Which side `A` multiplies from.
    pub side: Side,
    /// The triangle of `A` read.
    pub fill: Fill,
    /// Rows of `B` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Scale of the product.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// Scale of `C`'s old contents (zero: `C` is only written).
    pub beta: T,
    /// `C`, distinct from `A` and `B`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

/// `C = alpha op(A) B` (`Left`) or `alpha B op(A)` (`Right`), `A` triangular of order `m`
/// (`Left`) or `n`, `B` and `C` `m x n` (cuBLAS's out-of-place `trmm`).
#[derive(Debug)]
pub struct Trmm<'a, T: BlasScalar> {
    /// Which side `A` multiplies from.
    pub side: Side,
    /// The triangle of `A` read.
    pub fill: Fill,
    /// Whether `A` is transposed (or conjugate-transposed).
    pub trans: Transpose,
    /// Whether `A`'s diagonal is implicitly one.
    pub diag: Diag,
    /// Rows of `B` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Scale of the product.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// `C`, distinct from `A` and `B`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

/// The rank-2k update on the `fill` triangle of the `n x n` matrix `C`, `op(A)` and `op(B)`
/// `n x k`: `C = alpha (op(A) op(B)ᵀ + op(B) op(A)ᵀ) + beta C` ([`Blas::syr2k`]; `trans` `No`
/// or `Yes` for complex types), or `C = alpha op(A) op(B)ᴴ + conj(alpha) op(B) op(A)ᴴ + beta C`
/// ([`Blas::her2k`]; `trans` `No` or `Conj`, `beta` real).
#[derive(Debug)]
pub struct Syr2k<'a, T: BlasScalar> {
    /// The triangle of `C` written (the other is untouched).
    pub fill: Fill,
    /// `No`: `op(X) = X`, stored `n x k`; otherwise `X` is stored `k x n`.
    pub trans: Transpose,
    /// Order of `C`.
    pub n: usize,
    /// Columns of `op(A)` and `op(B)`.
    pub k: usize,
    /// Scale of the products.
    pub alpha: T,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// `B`.
    pub b: &'a GpuRef<T>,
    /// Leading dimension of `B`; `None`: packed.
    pub ldb: Option<usize>,
    /// Scale of `C`'s old contents.
    pub beta: T,
    /// `C`, distinct from `A` and `B`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

/// `C = alpha op(A) op(A)ᴴ + beta C` on the `fill` triangle of the `n x n` Hermitian matrix
/// `C` (its diagonal kept real), `op(A)` `n x k`, `alpha` and `beta` real; `trans` is `No` or
/// `Conj` for complex types (any for real ones, where this is `syrk`).
#[derive(Debug)]
pub struct Herk<'a, T: BlasScalar> {
    /// The triangle of `C` written (the other is untouched).
    pub fill: Fill,
    /// `No`: `A` stored `n x k`; `Conj`: `C = alpha Aᴴ A + beta C`, `A` stored `k x n`.
    pub trans: Transpose,
    /// Order of `C`.
    pub n: usize,
    /// Columns of `op(A)`.
    pub k: usize,
    /// Scale of the product (real).
    pub alpha: T::Real,
    /// `A`.
    pub a: &'a GpuRef<T>,
    /// Leading dimension of `A`; `None`: packed.
    pub lda: Option<usize>,
    /// Scale of `C`'s old contents (real).
    pub beta: T::Real,
    /// `C`, distinct from `A`.
    pub c: &'a GpuRef<T>,
    /// Leading dimension of `C`; `None`: packed.
    pub ldc: Option<usize>,
}

fn mat<T: BlasScalar>(buf: &GpuRef<T>, ld: i32) -> Result<calls::Mat<T>> {
    Ok((dptr(buf)?, ld))
}

/// Refuses the transposes cuBLAS has no form of for a complex type: `Conj` for the symmetric
/// updates, `Yes` for the Hermitian ones. Real types take all three.
fn check_trans<T: BlasScalar>(trans: Transpose, herm: bool, op: &str) -> Result<()> {
    let refused = if herm { Transpose::Yes } else { Transpose::Conj };
    if <T as host::Scalar>::COMPLEX && trans == refused {
        let take = if herm { "No or Conj" } else { "No or Yes" };
        return Err(Error::invalid("trans", format!("a complex {op} takes Transpose::{take}, not {trans:?}")));
    }
    Ok(())
}

fn distinct_c<T: BlasScalar>(c: &GpuRef<T>, a: &GpuRef<T>, b: &GpuRef<T>) -> Result<()> {
    if c.same_buffer(a) || c.same_buffer(b) {
        return Err(Error::invalid("c", "must not be the same buffer as `a` or `b`"));
    }
    Ok(())
}

impl Blas {
    /// The symmetric matrix product (see [`Symm`]).
    pub fn symm<T: BlasScalar>(&mut self, s: &Symm<'_, T>) -> Result<Completion<()>> {
        self.symm_of(s, false)
    }

    /// The Hermitian matrix product (see [`Symm`]; `symm` for the real types).
    pub fn hemm<T: BlasScalar>(&mut self, s: &Symm<'_, T>) -> Result<Completion<()>> {
        self.symm_of(s, true)
    }

    fn symm_of<T: BlasScalar>(&mut self, s: &Symm<'_, T>, herm: bool) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", s.m, false)?, check::dim("n", s.n, false)?);
        let order = if s.side == Side::Left { s.m } else { s.n };
        let a = check::matrix("a", "lda", order, order, s.lda)?;
        let b = check::matrix("b", "ldb", s.m, s.n, s.ldb)?;
        let c = check::matrix("c", "ldc", s.m, s.n, s.ldc)?;
        check::covers("a", s.a, Some(a.span), &format!("A {order}x{order}"))?;
        check::covers("b", s.b, Some(b.span), &format!("B {}x{}", s.m, s.n))?;
        check::covers("c", s.c, Some(c.span), &format!("C {}x{}", s.m, s.n))?;
        distinct_c(s.c, s.a, s.b)?;
        let name = if herm { "hemm" } else { "symm" };
        let mut rec = self.op.recorder(name);
        record(&mut rec, "a", s.a, Access::Read)?;
        record(&mut rec, "b", s.b, Access::Read)?;
        record(&mut rec, "c", s.c, output_access(s.beta))?;
        if self.op.device.is_simulated() {
            let (am, bm, cm) = (s.a.sim_data()?, s.b.sim_data()?, s.c.sim_data()?);
            let (left, upper, mm, nn) = (s.side == Side::Left, s.fill == Fill::Upper, s.m, s.n);
            let (alpha, beta, lda, ldb, ldc) = (s.alpha.z(), s.beta.z(), a.ld as usize, b.ld as usize, c.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                // One lock at a time: `a` and `b` may be the same buffer.
                let av = am.read().to_vec();
                let bv = bm.read().to_vec();
                host::symm(left, upper, herm, (mm, nn), alpha, (&av, lda), (&bv, ldb), beta, &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A, B and C cover their validated spans; C is distinct from
            // both inputs; host scalars.
            unsafe {
                calls::symm(
                    h,
                    herm,
                    s.side,
                    s.fill,
                    m,
                    n,
                    s.alpha,
                    mat(s.a, a.ld)?,
                    mat(s.b, b.ld)?,
                    s.beta,
                    mat(s.c, c.ld)?,
                )
            }
        })
    }

    /// The triangular matrix product (see [`Trmm`]).
    pub fn trmm<T: BlasScalar>(&mut self, t: &Trmm<'_, T>) -> Result<Completion<()>> {
        let (m, n) = (check::dim("m", t.m, false)?, check::dim("n", t.n, false)?);
        let order = if t.side == Side::Left { t.m } else { t.n };
        let a = check::matrix("a", "lda", order, order, t.lda)?;
        let b = check::matrix("b", "ldb", t.m, t.n, t.ldb)?;
        let c = check::matrix("c", "ldc", t.m, t.n, t.ldc)?;
        check::covers("a", t.a, Some(a.span), &format!("A {order}x{order}"))?;
        check::covers("b", t.b, Some(b.span), &format!("B {}x{}", t.m, t.n))?;
        check::covers("c", t.c, Some(c.span), &format!("C {}x{}", t.m, t.n))?;
        distinct_c(t.c, t.a, t.b)?;
        let mut rec = self.op.recorder("trmm");
        record(&mut rec, "a", t.a, Access::Read)?;
        record(&mut rec, "b", t.b, Access::Read)?;
        record(&mut rec, "c", t.c, Access::Write)?;
        if self.op.device.is_simulated() {
            let (am, bm, cm) = (t.a.sim_data()?, t.b.sim_data()?, t.c.sim_data()?);
            let a_op = Mat { ld: a.ld as usize, trans: t.trans };
            let lower = host::op_lower(t.fill == Fill::Lower, t.trans);
            let (left, unit, mm, nn, alpha) = (t.side == Side::Left, t.diag == Diag::Unit, t.m, t.n, t.alpha.z());
            let (ldb, ldc) = (b.ld as usize, c.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                let av = am.read().to_vec();
                let bv = bm.read().to_vec();
                host::trmm(left, lower, unit, (mm, nn), alpha, (&av, a_op), (&bv, ldb), &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A, B and C cover their validated spans; C is distinct from
            // both inputs; alpha is a host scalar.
            unsafe {
                calls::trmm(
                    h,
                    t.side,
                    t.fill,
                    t.trans,
                    t.diag,
                    m,
                    n,
                    t.alpha,
                    mat(t.a, a.ld)?,
                    mat(t.b, b.ld)?,
                    mat(t.c, c.ld)?,
                )
            }
        })
    }

    /// The symmetric rank-2k update (see [`Syr2k`]).
    pub fn syr2k<T: BlasScalar>(&mut self, s: &Syr2k<'_, T>) -> Result<Completion<()>> {
        self.rank_2k(s, false)
    }

    /// The Hermitian rank-2k update (see [`Syr2k`]; `beta` must be real; `syr2k` for the real
    /// types).
    pub fn her2k<T: BlasScalar>(&mut self, s: &Syr2k<'_, T>) -> Result<Completion<()>> {
        self.rank_2k(s, true)
    }

    fn rank_2k<T: BlasScalar>(&mut self, s: &Syr2k<'_, T>, herm: bool) -> Result<Completion<()>> {
        let name = if herm { "her2k" } else { "syr2k" };
        let (n, k) = (check::dim("n", s.n, false)?, check::dim("k", s.k, false)?);
        check_trans::<T>(s.trans, herm, name)?;
        if herm && s.beta.z().im != 0.0 {
            return Err(Error::invalid("beta", "her2k's beta is real: its imaginary part must be zero"));
        }
        let (ar, ac) = s.trans.stored(s.n, s.k);
        let a = check::matrix("a", "lda", ar, ac, s.lda)?;
        let b = check::matrix("b", "ldb", ar, ac, s.ldb)?;
        let c = check::matrix("c", "ldc", s.n, s.n, s.ldc)?;
        check::covers("a", s.a, Some(a.span), &format!("op(A) {}x{}", s.n, s.k))?;
        check::covers("b", s.b, Some(b.span), &format!("op(B) {}x{}", s.n, s.k))?;
        check::covers("c", s.c, Some(c.span), &format!("C {}x{}", s.n, s.n))?;
        distinct_c(s.c, s.a, s.b)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "a", s.a, Access::Read)?;
        record(&mut rec, "b", s.b, Access::Read)?;
        // Only one triangle is written: the other keeps its contents, so C is read-write.
        record(&mut rec, "c", s.c, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let (am, bm, cm) = (s.a.sim_data()?, s.b.sim_data()?, s.c.sim_data()?);
            let (a_op, b_op) = (Mat { ld: a.ld as usize, trans: s.trans }, Mat { ld: b.ld as usize, trans: s.trans });
            let (upper, nn, kk, alpha, beta, ldc) =
                (s.fill == Fill::Upper, s.n, s.k, s.alpha.z(), s.beta.z(), c.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                let av = am.read().to_vec();
                let bv = bm.read().to_vec();
                host::rank_2k(upper, herm, (nn, kk), alpha, (&av, a_op), (&bv, b_op), beta, &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        let beta_real = T::real_sys(s.beta.z().re);
        self.op.run(rec, Vec::new(), || {
            let (a, b, c) = (mat(s.a, a.ld)?, mat(s.b, b.ld)?, mat(s.c, c.ld)?);
            // SAFETY: a live handle; A, B and C cover their validated spans; C is distinct from
            // both inputs; host scalars (her2k's beta real, checked).
            unsafe {
                if herm {
                    calls::her2k(h, s.fill, s.trans, n, k, s.alpha, a, b, beta_real, c)
                } else {
                    calls::syr2k(h, s.fill, s.trans, n, k, s.alpha, a, b, s.beta, c)
                }
            }
        })
    }

    /// The Hermitian rank-k update (see [`Herk`]; `syrk` for the real types).
    pub fn herk<T: BlasScalar>(&mut self, s: &Herk<'_, T>) -> Result<Completion<()>> {
        let (n, k) = (check::dim("n", s.n, false)?, check::dim("k", s.k, false)?);
        check_trans::<T>(s.trans, true, "herk")?;
        let (ar, ac) = s.trans.stored(s.n, s.k);
        let a = check::matrix("a", "lda", ar, ac, s.lda)?;
        let c = check::matrix("c", "ldc", s.n, s.n, s.ldc)?;
        check::covers("a", s.a, Some(a.span), &format!("op(A) {}x{}", s.n, s.k))?;
        check::covers("c", s.c, Some(c.span), &format!("C {}x{}", s.n, s.n))?;
        check::distinct("c", s.a, s.c)?;
        let mut rec = self.op.recorder("herk");
        record(&mut rec, "a", s.a, Access::Read)?;
        record(&mut rec, "c", s.c, Access::ReadWrite)?;
        let (alpha, beta) = (s.alpha.z(), s.beta.z());
        if self.op.device.is_simulated() {
            let (am, cm) = (s.a.sim_data()?, s.c.sim_data()?);
            let a_op = Mat { ld: a.ld as usize, trans: s.trans };
            let (upper, nn, kk, ldc) = (s.fill == Fill::Upper, s.n, s.k, c.ld as usize);
            return self.op.run_sim(rec, Vec::new(), move || {
                let av = am.read().to_vec();
                host::rank_k(upper, true, nn, kk, alpha, &av, a_op, beta, &mut cm.lock(), ldc);
            });
        }
        let h = self.handle()?;
        let (alpha, beta) = (T::real_sys(alpha.re), T::real_sys(beta.re));
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A and C cover their validated spans and are distinct; real
            // host scalars.
            unsafe { calls::herk(h, s.fill, s.trans, n, k, alpha, mat(s.a, a.ld)?, beta, mat(s.c, c.ld)?) }
        })
    }

    /// `C = A diag(x)` (`Right`: `x` has `n` elements) or `diag(x) A` (`Left`: `m`), `A` and
    /// `C` `m x n` (`lda`, `ldc`: `None` for packed). `C` may be `A` itself (cuBLAS scales in
    /// place then).
    #[allow(clippy::too_many_arguments)]
    pub fn dgmm<T: BlasScalar>(
        &mut self,
        side: Side,
        m: usize,
        n: usize,
        a: &GpuRef<T>,
        lda: Option<usize>,
        x: Vector<'_, T>,
        c: &GpuRef<T>,
        ldc: Option<usize>,
    ) -> Result<Completion<()>> {
        let (mi, ni) = (check::dim("m", m, false)?, check::dim("n", n, false)?);
        let am = check::matrix("a", "lda", m, n, lda)?;
        let cm = check::matrix("c", "ldc", m, n, ldc)?;
        check::covers("a", a, Some(am.span), &format!("A {m}x{n}"))?;
        check::covers("c", c, Some(cm.span), &format!("C {m}x{n}"))?;
        let xn = if side == Side::Left { m } else { n };
        let incx = x.check("x", "x.inc", xn, false)?;
        check::distinct("c", x.buf, c)?;
        let in_place = c.same_buffer(a);
        if in_place && am.ld != cm.ld {
            return Err(Error::invalid("ldc", "C is A itself: ldc must equal lda"));
        }
        let mut rec = self.op.recorder("dgmm");
        record(&mut rec, "x", x.buf, Access::Read)?;
        if in_place {
            record(&mut rec, "c", c, Access::ReadWrite)?;
        } else {
            record(&mut rec, "a", a, Access::Read)?;
            record(&mut rec, "c", c, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            let (amem, xm, cmem) = (a.sim_data()?, x.buf.sim_data()?, c.sim_data()?);
            let (lda, ldc, inc, left) = (am.ld as usize, cm.ld as usize, x.inc, side == Side::Left);
            return self.op.run_sim(rec, Vec::new(), move || {
                let xs = host::gather(&xm.read(), xn, inc);
                let av = amem.read().to_vec();
                let mut cv = cmem.lock();
                for j in 0..n {
                    for i in 0..m {
                        let d: Z = xs[if left { i } else { j }].z();
                        cv[i + j * ldc] = T::from_z(av[i + j * lda].z() * d);
                    }
                }
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; A, x and C cover their validated spans; C is distinct from
            // x and, when it is A, has A's leading dimension (cuBLAS's in-place form).
            unsafe { calls::dgmm(h, side, mi, ni, mat(a, am.ld)?, (dptr(x.buf)?, incx), mat(c, cm.ld)?) }
        })
    }
}
