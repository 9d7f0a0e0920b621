//! The simulated QR ops: `geqrf`, and `orgqr` / `ormqr` forming or applying its `Q`.

use super::linalg::{self, C};
use super::{load, run, store, Scalar};
use crate::completion::Completion;
use crate::error::Result;
use crate::libs::solver::qr::{Geqrf, Orgqr, Ormqr};
use crate::libs::solver::{Side, SolverElement, Trans};
use crate::libs::OpStream;
use crate::recorder::LaunchRecorder;

pub(in crate::libs::solver) fn geqrf<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    g: &Geqrf<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (m, n, a, tau) = (g.m, g.n, g.a.sim_data()?, g.tau.sim_data()?);
    run(op, rec, move || {
        let mut f = load(&a.read(), 0, m, n, lda);
        let t = linalg::geqrf(&mut f);
        store(&mut a.lock(), 0, lda, &f);
        for (o, v) in tau.lock().iter_mut().zip(&t) {
            *o = T::from_c(*v);
        }
        Ok(())
    })
}

fn load_tau<T: Scalar>(data: &[T], k: usize) -> Vec<C> {
    data[..k].iter().map(|v| v.to_c()).collect()
}

pub(in crate::libs::solver) fn orgqr<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    o: &Orgqr<'_, T>,
    lda: usize,
) -> Result<Completion<()>> {
    let (m, n, k, a, tau) = (o.m, o.n, o.k, o.a.sim_data()?, o.tau.sim_data()?);
    run(op, rec, move || {
        let f = load(&a.read(), 0, m, n, lda);
        let t = load_tau(&tau.read(), k);
        let q = linalg::orgqr(&f, n, &t);
        store(&mut a.lock(), 0, lda, &q);
        Ok(())
    })
}

pub(in crate::libs::solver) fn ormqr<T: SolverElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    o: &Ormqr<'_, T>,
    lda: usize,
    ldc: usize,
) -> Result<Completion<()>> {
    let (m, n, k, left, adjoint) = (o.m, o.n, o.k, o.side == Side::Left, o.trans != Trans::No);
    let order = if left { m } else { n };
    let (a, tau, c) = (o.a.sim_data()?, o.tau.sim_data()?, o.c.sim_data()?);
    run(op, rec, move || {
        let f = load(&a.read(), 0, order, k, lda);
        let t = load_tau(&tau.read(), k);
        let mut x = load(&c.read(), 0, m, n, ldc);
        linalg::ormqr(&f, order, &t, left, adjoint, &mut x);
        store(&mut c.lock(), 0, ldc, &x);
        Ok(())
    })
}
