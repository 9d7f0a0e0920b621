//! Level 1, f32 and f64: vector updates, and reductions whose scalar result comes back through
//! the op's completion.

use super::calls::{self, Norm, Strided};
use super::sim as host;
use super::{Blas, BlasReal, Vector};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::validate as check;
use crate::libs::{dptr, record};
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_int;

impl<T: BlasReal> Vector<'_, T> {
    /// The device address and increment cuBLAS takes.
    fn raw(self, inc: c_int) -> Result<Strided<T>> {
        Ok((dptr(self.buf)?, inc))
    }
}

impl Blas {
    /// Validates the `n`-element vectors `x` and `y` (distinct buffers when `distinct`) and
    /// records them; returns `n` and both increments as the library's ints.
    fn pair<T: BlasReal>(
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
    fn single<T: BlasReal>(
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
    pub fn axpy<T: BlasReal>(
        &mut self,
        n: usize,
        alpha: T,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("axpy", n, x, y, [Access::Read, Access::ReadWrite], true)?;
        if self.op.device.is_simulated() {
            return self.sim_pair(rec, n, x, y, move |x, y| *y = alpha * x + *y);
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) a live handle; (2) x and y are live device buffers covering n elements
            // at their increments (validated), distinct; (3) alpha is a host scalar.
            unsafe { calls::axpy(h, ni, &alpha, x.raw(incx)?, y.raw(incy)?) }
        })
    }

    /// `x = alpha x` over `n` elements (`x.inc` positive).
    pub fn scal<T: BlasReal>(&mut self, n: usize, alpha: T, x: Vector<'_, T>) -> Result<Completion<()>> {
        let (ni, incx, rec) = self.single("scal", n, x, Access::ReadWrite)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim(rec, Vec::new(), move || {
                let mut v = xm.lock();
                for i in 0..n {
                    let e = &mut v[host::vec_index(n, x.inc, i)];
                    *e = alpha * *e;
                }
            });
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x covers n elements at its increment; alpha is a host scalar.
            unsafe { calls::scal(h, ni, &alpha, x.raw(incx)?) }
        })
    }

    /// `y = x` over `n` elements.
    pub fn copy<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
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
    pub fn swap<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<()>> {
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

    /// Applies the plane rotation `[c s; -s c]` to the pairs `(x[i], y[i])`.
    pub fn rot<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        y: Vector<'_, T>,
        c: T,
        s: T,
    ) -> Result<Completion<()>> {
        let (ni, incx, incy, rec) = self.pair("rot", n, x, y, [Access::ReadWrite, Access::ReadWrite], true)?;
        if self.op.device.is_simulated() {
            return self.sim_both(rec, n, x, y, move |x, y| (*x, *y) = (c * *x + s * *y, c * *y - s * *x));
        }
        let h = self.handle()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: a live handle; x and y cover n elements at their increments and are
            // distinct; c and s are host scalars.
            unsafe { calls::rot(h, ni, x.raw(incx)?, y.raw(incy)?, &c, &s) }
        })
    }

    /// `xᵀ y` over `n` elements, delivered by the completion.
    pub fn dot<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>, y: Vector<'_, T>) -> Result<Completion<T>> {
        let (ni, incx, incy, rec) = self.pair("dot", n, x, y, [Access::Read, Access::Read], false)?;
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || {
                let xs = host::gather(&xm.read(), n, x.inc);
                let ys = host::gather(&ym.read(), n, y.inc);
                T::narrow(xs.iter().zip(&ys).map(|(a, b)| a.wide() * b.wide()).sum())
            });
        }
        self.scalar_op(
            rec,
            move |h, out: *mut T| {
                // SAFETY: a live handle in device pointer mode; x and y cover n elements at their
                // increments; `out` is a device-mapped pinned slot.
                unsafe { calls::dot(h, ni, x.raw(incx)?, y.raw(incy)?, out) }
            },
            |v: T| v,
        )
    }

    /// The Euclidean norm of `x` over `n` elements, delivered by the completion.
    pub fn nrm2<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T>> {
        self.reduce(n, x, "cublas<t>nrm2", Norm::Two)
    }

    /// The sum of absolute values of `x` over `n` elements, delivered by the completion.
    pub fn asum<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<T>> {
        self.reduce(n, x, "cublas<t>asum", Norm::AbsSum)
    }

    /// The 0-based index (counted in elements of the view) of the first largest `|x[i]|`.
    pub fn iamax<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amax", true)
    }

    /// The 0-based index of the first smallest `|x[i]|`.
    pub fn iamin<T: BlasReal>(&mut self, n: usize, x: Vector<'_, T>) -> Result<Completion<usize>> {
        self.index_of(n, x, "cublasI<t>amin", false)
    }

    fn reduce<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        name: &'static str,
        norm: Norm,
    ) -> Result<Completion<T>> {
        let (ni, incx, rec) = self.single(name, n, x, Access::Read)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim(rec, Vec::new(), move || {
                let xs: Vec<f64> = host::gather(&xm.read(), n, x.inc).iter().map(|v| v.wide()).collect();
                T::narrow(match norm {
                    Norm::Two => host::nrm2(&xs),
                    Norm::AbsSum => xs.iter().map(|v| v.abs()).sum(),
                })
            });
        }
        self.scalar_op(
            rec,
            move |h, out: *mut T| {
                // SAFETY: a live handle in device pointer mode; x covers n elements at its
                // increment; `out` is a device-mapped slot.
                unsafe { calls::reduce(h, norm, ni, x.raw(incx)?, out) }
            },
            |v: T| v,
        )
    }

    fn index_of<T: BlasReal>(
        &mut self,
        n: usize,
        x: Vector<'_, T>,
        name: &'static str,
        max: bool,
    ) -> Result<Completion<usize>> {
        let (ni, incx, rec) = self.single(name, n, x, Access::Read)?;
        if self.op.device.is_simulated() {
            let xm = x.buf.sim_data()?;
            return self.op.run_sim(rec, Vec::new(), move || host::index_of(&host::gather(&xm.read(), n, x.inc), max));
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
    fn sim_pair<T: BlasReal>(
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
    fn sim_both<T: BlasReal>(
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
