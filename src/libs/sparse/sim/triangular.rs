//! The simulator's triangular solves (SpSV, SpSM): the triangle the fill mode selects, as the
//! rows of `op(A)`, solved forward or backward by substitution, with no pivot check (a zero on
//! the diagonal gives infinities or NaNs, as on the GPU).
//!
//! The host needs no analysis, but the simulator keeps the GPU path's account of them, so that
//! [`Sparse::analyses_made`] counts the same there: a record per analysis the GPU would cache
//! (same keys, same capacity), holding the positions of `A`'s arrays it was made from, and the
//! same step per solve ([`analysis_step`]): made on a miss, kept after a write of `A`'s values
//! alone (which the GPU's analysis takes in), made anew after a write of its offsets or indices.

use super::host::{HostDense, HostMat};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::sparse::cache::Cache;
use crate::libs::sparse::phases::SameInputs;
use crate::libs::sparse::{
    after_solve, analysed_inputs, analysis_step, mat_key, updatable, After, DenseMatrix, Fill, Sparse, SparseIndex,
    SparseMatrix, SparseValue, Step, Triangle,
};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use std::cell::Cell;
use std::sync::Arc;

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

/// The simulator's record of the analysis a GPU solve of op `op` caches under `key`: the
/// positions of `A`'s arrays it was made from, made (and counted) on a miss; `true` with it
/// when made for this solve.
fn recorded<K: PartialEq, T: SparseValue, I: SparseIndex>(
    cache: &mut Cache<K, Arc<SameInputs>>,
    key: K,
    (op, device): (&'static str, &crate::device::Device),
    a: &SparseMatrix<T, I>,
) -> Result<(Arc<SameInputs>, bool)> {
    let mut fresh = false;
    let inputs = cache.get_or_make(key, |_| {
        fresh = true;
        Ok(analysed_inputs(op, device, a))
    })?;
    Ok((inputs.clone(), fresh))
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
        let (inputs, fresh) = recorded(&mut self.sim_analyses, (mat_key(a), tri, 0), ("spsv", &self.op.device), a)?;
        let step = Cell::new(None);
        let done = self.host_checked(
            rec,
            || decide(&inputs, fresh, updatable(a.format), &step),
            move || {
                let t = Tri::new(am.entries()?, n, tri);
                let x = xm.read().to_vec();
                let mut y = ym.lock();
                t.solve(alpha, |i| x[i], &mut y, |i| i);
                Ok(())
            },
        );
        let after = after_solve(&done, fresh, step.get());
        if after != After::Keep {
            let key = mat_key(a);
            self.sim_analyses.forget(&self.op, |(k, t, _)| *k == key && *t == tri);
        }
        if after == After::Redo {
            return self.spsv(tri, alpha, a, x, y);
        }
        done
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
        let shape = crate::libs::sparse::solve_many::rhs_shape(&b, ldb, ldc);
        let key = (mat_key(a), tri, shape);
        let (inputs, fresh) = recorded(&mut self.sim_many, key, ("spsm", &self.op.device), a)?;
        let step = Cell::new(None);
        let done = self.host_checked(
            rec,
            || decide(&inputs, fresh, updatable(a.format), &step),
            move || {
                let t = Tri::new(am.entries()?, n, tri);
                let b = bm.mem.read().to_vec();
                let mut out = cm.mem.lock();
                for j in 0..cm.cols {
                    t.solve(alpha, |i| b[bm.at(i, j)], &mut out, |i| cm.at(i, j));
                }
                Ok(())
            },
        );
        let after = after_solve(&done, fresh, step.get());
        if after != After::Keep {
            let key = mat_key(a);
            self.sim_many.forget(&self.op, |(k, t, sh)| *k == key && *t == tri && *sh == shape);
        }
        if after == After::Redo {
            return self.spsm(tri, alpha, a, b, c);
        }
        done
    }
}

/// The GPU path's step, under the launch's marks, kept in `step`: the host computes from `A` as
/// it is either way, so only the account of the analyses follows it.
fn decide(inputs: &SameInputs, fresh: bool, updatable: bool, step: &Cell<Option<Step>>) -> Result<()> {
    let now = analysis_step(inputs, fresh, updatable)?;
    if now == Step::Update {
        inputs.note_again();
    }
    step.set(Some(now));
    Ok(())
}
