//! Level 1, f32, f64 and their complex forms: vector updates, and reductions whose scalar result
//! comes back through the op's completion.

use super::calls::{self, Norm, Strided};
use super::sim::{self as host, Scalar as _, Z};
use super::{Blas, BlasReal, BlasScalar, Vector};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_int;

impl<T: BlasScalar> Vector<'_, T> {
    /// The device address and increment cuBLAS takes.
    fn raw(self, inc: c_int) -> Result<Strided<T>> {
        Ok((dptr(self.buf)?, inc))
    }
}

impl Blas {
    /// Validates the `n`-element vectors `x` and `y` (distinct buffers when `distinct`) and
    /// records them; returns `n` and both increments as the library's ints.
    fn pair<T: BlasScalar>(
        &self,
        name: &'static str,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        [x_access, y_access]: [Access; 2],
        distinct: bool,
    ) -> Result<(c_int, c_int, c_int, LaunchRecorder)> {
        let ni = check::dim("n", n, false)?;
        let (incx, incy) = (x.check("x", "x.inc", n, false)?, y.check("y", "y.inc", n, false)?);
        if distinct {
            check::distinct("y", x.buf, y.buf)?;
        }
        let mut rec = self.op.recorder(name);
        record(&mut rec, "x", x.buf, x_access)?;
        record(&mut rec, "y", y.buf, y_access)?;
        Ok((ni, incx, incy, rec))
    }

    /// Validates and records the one `n`-element vector `x` of a reduction, whose increment
    /// must be positive; returns `n` and the increment as the library's ints.
    fn single<T: BlasScalar>(
        &self,
        name: &'static str,
        n: usize,
        x: Vector<'_, T>,
        access: Access,
    ) -> Result<(c_int, c_int, LaunchRecorder)> {
        let ni = check::dim("n", n, false)?;
        let incx = x.check("x", "x.inc", n, true)?;
        let mut rec = self.op.recorder(name);
        record(&mut rec, "x", x.buf, access)?;
        Ok((ni, incx, rec))
    }

    /// `y = alpha x + y` over `n` elements.
    pub fn axpy<T: BlasScalar>(
        &mut self,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("axpy", n, x, y, [Access::Read, Access::ReadWrite], true)?;
        if self.op.device.is_simulated() {
            return self.sim_pair(rec, n, x, y, move |x, y| *y = T::from_z(alpha.z() * x.z() + y.z()));
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle; (2) x and y are live device buffers covering n elements
            // at their increments (validated), distinct; (3) alpha is a host scalar.
            unsafe { calls::axpy(h, ni, alpha, x.raw(incx)?, y.raw(incy)?) }
        })
    }

    /// `x = alpha x` over `n` elements (`x.inc` positive).
    pub fn scal<T: BlasScalar>(&mut self, n: usize, alpha: T, x: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, rec) = self.single("scal", n, x, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim(rec, Vec::new(), move || {
                let mut v = xm.lock();
                for i in 0..n {
                    let e = &mut v[host::vec_index(n, x.inc, i)];
                    *e = T::from_z(alpha.z() * e.z());
                }
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x covers n elements at its increment; alpha is a host scalar.
            unsafe { calls::scal(h, ni, alpha, x.raw(incx)?) }
        })
    }

    /// `y = x` over `n` elements.
    pub fn copy<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("copy", n, x, y, [Access::Read, Access::Write], true)?;
        if self.op.device.is_simulated() {
            return self.sim_pair(rec, n, x, y, |x, y| *y = x);
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x and y cover n elements at their increments and are
            // distinct buffers.
            unsafe { calls::copy(h, ni, x.raw(incx)?, y.raw(incy)?) }
        })
    }

    /// Exchanges `x` and `y` over `n` elements.
    pub fn swap<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("swap", n, x, y, [Access::ReadWrite, Access::ReadWrite], true)?;
        if self.op.device.is_simulated() {
            return self.sim_both(rec, n, x, y, |x, y| std::mem::swap(x, y));
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x and y cover n elements at their increments and are
            // distinct buffers.
            unsafe { calls::swap(h, ni, x.raw(incx)?, y.raw(incy)?) }
        })
    }

    /// Applies the plane rotation `[c s; -s c]` (real `c` and `s`, also for complex vectors:
    /// cuBLAS's `csrot`/`zdrot`) to the pairs `(x[i], y[i])`.
    pub fn rot<T: BlasScalar>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        c: T::Real,
        s: T::Real,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("rot", n, x, y, [Access::ReadWrite, Access::ReadWrite], true)?;
        if self.op.device.is_simulated() {
            let (c, s) = (c.z(), s.z());
            return self.sim_both(rec, n, x, y, move |x, y| {
                let (xz, yz) = (x.z(), y.z());
                (*x, *y) = (T::from_z(c * xz + s * yz), T::from_z(c * yz - s * xz));
            });
        }
        // Through f64: exact, f32 and f64 both widen to it and come back unchanged.
        let (c, s) = (T::real_sys(c.z().re), T::real_sys(s.z().re));
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x and y cover n elements at their increments and are
            // distinct; c and s are host scalars.
            unsafe { calls::rot(h, ni, x.raw(incx)?, y.raw(incy)?, c, s) }
        })
    }

    /// `xᵀ y` over `n` real elements, delivered by the completion (see [`dotu`](Self::dotu) and
    /// [`dotc`](Self::dotc) for complex vectors).
    pub fn dot<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<T>> {
        self.dot_of(n, x, y, false, "dot")
    }

    /// `xᵀ y` over `n` elements, unconjugated (`dot` for the real types), delivered by the
    /// completion.
    pub fn dotu<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<T>> {
        self.dot_of(n, x, y, false, "dotu")
    }

    /// `xᴴ y` over `n` elements (`x` conjugated; `dot` for the real types), delivered by the
    /// completion.
    pub fn dotc<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<T>> {
        self.dot_of(n, x, y, true, "dotc")
    }

    fn dot_of<T: BlasScalar>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        conj: bool,
        name: &'static str,
    ) -> Result<Completion<T>> {
        let (ni, incx, incy, rec) = self.pair(name, n, x, y, [Access::Read, Access::Read], false)?;
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self.op.run_sim_read_back(crate::libs::op::HOST_READS_RESULT, rec, move || {
                let xs = host::gather(&xm.read(), n, x.inc);
                let ys = host::gather(&ym.read(), n, y.inc);
                let sum = xs.iter().zip(&ys).fold(Z::default(), |acc, (a, b)| {
                    let a = if conj { a.z().conj() } else { a.z() };
                    acc + a * b.z()
                });
                T::from_z(sum)
            });
        }
        self.scalar_op(
            rec,
            move |h, out: *mut T| {
                // SAFETY: a live handle in device pointer mode; x and y cover n elements at their
                // increments; `out` is a device-mapped pinned slot.
                unsafe { calls::dot(h, conj, ni, x.raw(incx)?, y.raw(incy)?, out) }
            },
            |v: T| v,
        )
    }

    /// The Euclidean norm of `x` over `n` elements, delivered by the completion.
    pub fn nrm2<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T::Real>> {
        self.reduce(n, x, "cublas<t>nrm2", Norm::Two)
    }

    /// The sum of absolute values of `x` over `n` elements (`|re| + |im|` for complex elements,
    /// as cuBLAS sums them), delivered by the completion.
    pub fn asum<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T::Real>> {
        self.reduce(n, x, "cublas<t>asum", Norm::AbsSum)
    }

    /// The 0-based index (counted in elements of the view) of the first largest `|x[i]|`
    /// (`|re| + |im|` for complex elements, as cuBLAS compares them).
    pub fn iamax<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amax", true)
    }

    /// The 0-based index of the first smallest `|x[i]|`.
    pub fn iamin<T: BlasScalar>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amin", false)
    }

    fn reduce<T: BlasScalar>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        name: &'static str,
        norm: Norm,
    ) -> Result<Completion<T::Real>> {
        let (ni, incx, rec) = self.single(name, n, x, Access::Read)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim_read_back(crate::libs::op::HOST_READS_RESULT, rec, move || {
                let xs: Vec<Z> = host::gather(&xm.read(), n, x.inc).iter().map(|v| v.z()).collect();
                T::Real::from_z(Z::real(match norm {
                    Norm::Two => host::nrm2(&xs.iter().flat_map(|v| [v.re, v.im]).collect::<Vec<f64>>()),
                    Norm::AbsSum => xs.iter().map(|v| v.abs1()).sum(),
                }))
            });
        }
        self.scalar_op(
            rec,
            move |h, out: *mut T::Real| {
                // SAFETY: a live handle in device pointer mode; x covers n elements at its
                // increment; `out` is a device-mapped slot of the real type, which is the sys
                // real type (f32 or f64) under another name.
                unsafe { calls::reduce(h, norm, ni, x.raw(incx)?, out.cast::<T::RealSys>()) }
            },
            |v: T::Real| v,
        )
    }

    fn index_of<T: BlasScalar>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        name: &'static str,
        max: bool,
    ) -> Result<Completion<usize>> {
        let (ni, incx, rec) = self.single(name, n, x, Access::Read)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim_read_back(crate::libs::op::HOST_READS_RESULT, rec, move || {
                host::index_of(&host::gather(&xm.read(), n, x.inc), max)
            });
        }
        // cuBLAS counts from 1 (and returns 0 only for an empty vector, rejected above).
        self.scalar_op(
            rec,
            move |h, out: *mut c_int| {
                // SAFETY: a live handle in device pointer mode; x covers n elements at its
                // increment; `out` is a device-mapped slot.
                unsafe { calls::index_of(h, max, ni, x.raw(incx)?, out) }
            },
            |i: c_int| usize::try_from(i).unwrap_or(0).saturating_sub(1),
        )
    }

    /// The simulator's form of an op that reads `x` and updates `y` element by element.
    fn sim_pair<T: BlasScalar>(
        &self,
        rec: LaunchRecorder,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        f: impl Fn(T, &mut T) + Send + 'static,
    ) -> Result<Completion<()>> {
        let (xm, ym, incx, incy) = (x.buf.sim_data()?, y.buf.sim_data()?, x.inc, y.inc);
        self.op.run_sim(rec, Vec::new(), move || {
            // A copy, so that no two buffers are locked at once.
            let xs = host::gather(&xm.read(), n, incx);
            let mut yv = ym.lock();
            for (i, xi) in xs.into_iter().enumerate() {
                f(xi, &mut yv[host::vec_index(n, incy, i)]);
            }
        })
    }

    /// The simulator's form of an op that updates both `x` and `y` (distinct buffers) element
    /// by element.
    fn sim_both<T: BlasScalar>(
        &self,
        rec: LaunchRecorder,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        f: impl Fn(&mut T, &mut T) + Send + 'static,
    ) -> Result<Completion<()>> {
        let (xm, ym, incx, incy) = (x.buf.sim_data()?, y.buf.sim_data()?, x.inc, y.inc);
        self.op.run_sim(rec, Vec::new(), move || {
            let mut xs = host::gather(&xm.read(), n, incx);
            {
                let mut yv = ym.lock();
                for (i, xi) in xs.iter_mut().enumerate() {
                    f(xi, &mut yv[host::vec_index(n, incy, i)]);
                }
            }
            let mut xv = xm.lock();
            for (i, xi) in xs.into_iter().enumerate() {
                xv[host::vec_index(n, incx, i)] = xi;
            }
        })
    }

    /// Runs a reduction that writes one `R` in device pointer mode into a pinned slot, read
    /// when the completion resolves.
    fn scalar_op<R: Copy + Send + 'static, V: Send + 'static>(
        &mut self,
        rec: LaunchRecorder,
        f: impl FnOnce(calls::Handle, *mut R) -> Result<()>,
        convert: fn(R) -> V,
    ) -> Result<Completion<V>> {
        let h = self.handle()?;
        self.op.run_scalar(
            rec,
            |out| {
                // SAFETY: a live handle; the mode is switched back before returning, so other
                // ops keep passing host scalars.
                unsafe { calls::set_pointer_mode(h, true) }?;
                let result = f(h, out);
                // SAFETY: as above.
                let back = unsafe { calls::set_pointer_mode(h, false) };
                result?;
                back
            },
            convert,
        )
    }
}
