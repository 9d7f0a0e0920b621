//! The simulator's matmul for f64, complex and i8 inputs: the checked column-major problem
//! computed on the host in complex f64 (real types with a zero imaginary part), straight from
//! the definition, as a simulated kernel on the op's stream.
//!
//! Every input is read exactly; `op(A) op(B)` accumulates in f64 (exact for i8 inputs up to
//! `k` of 2^37), then `alpha x + beta C`, the bias, and ReLU (on the real part: only f64
//! matmuls take an epilogue). Each stored element is rounded once to D's type: an i32 `D` to
//! the nearest integer, wrapped to 32 bits as the GPU's integer accumulator wraps. `alpha` and
//! `beta` in device memory are read when the simulated kernel runs.

use super::check::{EpiKind, Problem};
use super::sim::{at, covers};
use super::types::sealed::ScaleValue;
use super::types::{Epilogue, LtElement, LtScale, Matmul, MatmulOutput, Transpose};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::op::OpStream;
use crate::memory::SimMem;
use crate::recorder::LaunchRecorder;

/// A complex f64: `[re, im]`.
type C = [f64; 2];

fn mul(x: C, y: C) -> C {
    [x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]]
}

/// One matmul's host computation, with the memory of every buffer it uses.
struct Job<TA, TB, TC, TD, E, S> {
    p: Problem,
    alpha: C,
    beta: C,
    /// `alpha` and `beta` in device memory, read when the kernel runs (replacing the two above).
    scalars: Option<(SimMem<S>, SimMem<S>)>,
    a: SimMem<TA>,
    b: SimMem<TB>,
    /// A separate `C` (`None`: `C` is `D`).
    c: Option<SimMem<TC>>,
    d: SimMem<TD>,
    bias: Option<SimMem<E>>,
}

/// Runs `mm` (checked into `p`, its uses declared on `rec`) on the simulator.
pub(super) fn matmul<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    p: Problem,
) -> Result<Completion<MatmulOutput>> {
    let c = match mm.c {
        Some(c) if !p.c_is_d => Some(c.sim_data()?),
        _ => None,
    };
    let bias = match mm.epilogue {
        Epilogue::Bias(b) | Epilogue::ReluBias(b) => Some(b.sim_data()?),
        _ => None,
    };
    let job = Job {
        p,
        alpha: mm.alpha.wide(),
        beta: mm.beta.wide(),
        scalars: match mm.scale_device {
            Some((a, b)) => Some((a.sim_data()?, b.sim_data()?)),
            None => None,
        },
        a: mm.a.sim_data()?,
        b: mm.b.sim_data()?,
        c,
        d: mm.d.sim_data()?,
        bias,
    };
    Ok(op.run_sim(rec, Vec::new(), move || job.run())?.try_map(|r| r))
}

fn widen<T: LtElement>(x: &[T]) -> Vec<C> {
    x.iter().map(|v| v.wide()).collect()
}

/// Element `(i, l)` of `op(X)`, `X` stored as `o` with transpose `t`, in batch `g`.
fn op_at(o: &super::check::Operand, t: Transpose, x: &[C], g: usize, i: usize, l: usize) -> C {
    match t {
        Transpose::No => x[at(o, g, i, l)],
        Transpose::Yes => x[at(o, g, l, i)],
        Transpose::Conj => {
            let [re, im] = x[at(o, g, l, i)];
            [re, -im]
        }
    }
}

impl<TA: LtElement, TB: LtElement, TC: LtElement, TD: LtElement, E: LtElement, S: LtScale> Job<TA, TB, TC, TD, E, S> {
    fn run(self) -> Result<MatmulOutput> {
        let p = &self.p;
        // One lock at a time: `a` and `b` may be the same buffer.
        let first = widen(&self.a.read());
        let second = widen(&self.b.read());
        let (a, b) = if p.swapped { (second, first) } else { (first, second) };
        let count = p.count as usize;
        if !covers(&p.a, count, a.len()) || !covers(&p.b, count, b.len()) {
            return Err(Error::invalid("a", "the simulator found an operand shorter than the checked problem"));
        }
        let (mut alpha, mut beta) = (self.alpha, self.beta);
        if let Some((a, b)) = &self.scalars {
            let first = |v: &SimMem<S>| v.read().first().map_or([0.0, 0.0], |x| x.wide());
            (alpha, beta) = (first(a), first(b));
        }
        let reads_c = beta != [0.0, 0.0];
        let c: Option<Vec<C>> = match (&self.c, reads_c) {
            (_, false) => None,
            (Some(c), true) => Some(widen(&c.read())),
            (None, true) => Some(widen(&self.d.read())),
        };
        let bias: Option<Vec<C>> = self.bias.as_ref().map(|v| widen(&v.read()));
        let (m, n) = (p.d.rows as usize, p.d.cols as usize);
        let k = if p.trans_a == Transpose::No { p.a.cols } else { p.a.rows } as usize;
        let relu = matches!(p.epi, EpiKind::Relu | EpiKind::ReluBias);
        let mut d = self.d.lock();
        for g in 0..count {
            for j in 0..n {
                for i in 0..m {
                    let mut acc = [0.0, 0.0];
                    for l in 0..k {
                        let x = mul(op_at(&p.a, p.trans_a, &a, g, i, l), op_at(&p.b, p.trans_b, &b, g, l, j));
                        acc = [acc[0] + x[0], acc[1] + x[1]];
                    }
                    let mut x = mul(alpha, acc);
                    if let Some(c) = &c {
                        let y = mul(beta, c[at(&p.c, g, i, j)]);
                        x = [x[0] + y[0], x[1] + y[1]];
                    }
                    if let Some(v) = &bias {
                        let bv = v[g * p.bias_stride as usize + i];
                        x = [x[0] + bv[0], x[1] + bv[1]];
                    }
                    if relu {
                        x[0] = x[0].max(0.0);
                    }
                    d[at(&p.d, g, i, j)] = TD::from_wide(x);
                }
            }
        }
        Ok(MatmulOutput::default())
    }
}
