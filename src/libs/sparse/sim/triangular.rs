//! The simulator's triangular solves (SpSV, SpSM): the triangle the fill mode selects, as the
//! rows of `op(A)`, solved forward or backward by substitution, with no pivot check (a zero on
//! the diagonal gives infinities or NaNs, as on the GPU).

use super::host::{HostDense, HostMat};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::{DenseMatrix, Fill, Sparse, SparseIndex, SparseMatrix, SparseValue, Triangle};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;

/// The triangle a solve reads, as the rows of `op(A)`: its off-diagonal entries, its diagonal,
/// and whether `op(A)` is lower triangular (solved forward) or upper (backward).
struct Tri<T> {
    off: Vec<Vec<(usize, T)>>,
    diag: Vec<T>,
    lower: bool,
}

impl<T: SparseValue> Tri<T> {
    fn new(entries: Vec<(usize, usize, T)>, n: usize, tri: Triangle) -> Self {
        let trans = tri.transpose.flips();
        let mut diag = vec![if tri.unit_diagonal { T::one() } else { T::zero() }; n];
        let mut off = vec![Vec::new(); n];
        for (r, c, v) in entries {
            let kept = match tri.fill {
                Fill::Lower => c <= r,
                Fill::Upper => c >= r,
            };
            if !kept {
                continue;
            }
            let v = tri.transpose.value(v);
            if r == c {
                if !tri.unit_diagonal {
                    diag[r] = diag[r].plus(v);
                }
                continue;
            }
            let (i, j) = if trans { (c, r) } else { (r, c) };
            off[i].push((j, v));
        }
        Tri { off, diag, lower: (tri.fill == Fill::Lower) != trans }
    }

    /// Solves `op(A) y = alpha b` for one right-hand side: `b(i)` its entries, `y(i)` the
    /// solution's slots.
    fn solve(&self, alpha: T, b: impl Fn(usize) -> T, y: &mut [T], at: impl Fn(usize) -> usize) {
        let n = self.diag.len();
        let mut step = |i: usize| {
            let mut s = alpha.times(b(i));
            for &(j, v) in &self.off[i] {
                s = s.minus(v.times(y[at(j)]));
            }
            y[at(i)] = s.over(self.diag[i]);
        };
        if self.lower {
            (0..n).for_each(&mut step);
        } else {
            (0..n).rev().for_each(&mut step);
        }
    }
}
impl Sparse {
    pub(in crate::libs::sparse) fn sim_spsv<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        x: &GpuRef<T>,
        y: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let (am, xm, ym) = (HostMat::of(a)?, x.sim_data()?, y.sim_data()?);
        let n = a.rows;
        self.host(rec, move || {
            let t = Tri::new(am.entries()?, n, tri);
            let x = xm.read().to_vec();
            let mut y = ym.lock();
            t.solve(alpha, |i| x[i], &mut y, |i| i);
            Ok(())
        })
    }

    pub(in crate::libs::sparse) fn sim_spsm<T: SparseValue, I: SparseIndex>(
        &mut self,
        rec: LaunchRecorder,
        tri: Triangle,
        alpha: T,
        a: &SparseMatrix<T, I>,
        (b, ldb): (DenseMatrix<'_, T>, i64),
        (c, ldc): (DenseMatrix<'_, T>, i64),
    ) -> Result<Completion<()>> {
        let (am, bm, cm) = (HostMat::of(a)?, HostDense::of(&b, ldb)?, HostDense::of(&c, ldc)?);
        let n = a.rows;
        self.host(rec, move || {
            let t = Tri::new(am.entries()?, n, tri);
            let b = bm.mem.read().to_vec();
            let mut out = cm.mem.lock();
            for j in 0..cm.cols {
                t.solve(alpha, |i| b[bm.at(i, j)], &mut out, |i| cm.at(i, j));
            }
            Ok(())
        })
    }
}
