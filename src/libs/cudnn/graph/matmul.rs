//! A fused matmul + bias + activation graph: `C = act(A·B + bias)` over a batch of row-major
//! matrices, the bias one value per output column, accumulated in f32.

use super::builder::{Dt, GraphSpec, Op, Pw};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::tensor::{dtype, DnnElement};
use crate::libs::cudnn::Cudnn;
use crate::libs::dtype::CudnnType;
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::{GpuRef, SimMem};
use crate::track::Access;

/// The activation a fused matmul applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulActivation {
    /// None.
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `x·Φ(x)`, with the normal distribution's exact CDF.
    Gelu,
    /// GELU's tanh approximation, `x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    GeluTanh,
}

/// A batch of `batch` matrix products `[m, k]·[k, n]`, row-major and packed, with the
/// activation applied to each result plus the bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulBiasAct {
    /// Matrices in the batch.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// Applied last.
    pub act: MatmulActivation,
}

fn dt_of<T: DnnElement>() -> Dt {
    match dtype::<T>() {
        CudnnType::Half => Dt::F16,
        CudnnType::Bfloat16 => Dt::Bf16,
        _ => Dt::F32,
    }
}

impl Cudnn {
    /// `c = act(a·b + bias)` for each matrix of the batch: `a` `[batch, m, k]`, `b`
    /// `[batch, k, n]`, `c` `[batch, m, n]` (row-major, packed), `bias` `n` values added to
    /// every row (left out: no bias), all of type `T`, accumulated in f32. f32 data runs on
    /// the engine cuDNN picks, TF32 tensor cores included (inputs rounded to 10-bit mantissas:
    /// about 3 decimal digits, 2e-3 of the magnitude at k = 40 on an H100); for full f32
    /// products use cuBLAS or cuBLASLt.
    pub fn matmul_bias_act<T: DnnElement>(
        &mut self,
        mm: &MatmulBiasAct,
        a: &GpuRef<T>,
        b: &GpuRef<T>,
        bias: Option<&GpuRef<T>>,
        c: &GpuRef<T>,
    ) -> Result<Completion<()>> {
        let batch = validate::dim64("batch", mm.batch)?;
        let (m, n, k) = (validate::dim64("m", mm.m)?, validate::dim64("n", mm.n)?, validate::dim64("k", mm.k)?);
        let count = |x: usize, y: usize| mm.batch.checked_mul(x).and_then(|v| v.checked_mul(y));
        validate::covers("a", a, count(mm.m, mm.k), &format!("{} matrices of {} x {}", mm.batch, mm.m, mm.k))?;
        validate::covers("b", b, count(mm.k, mm.n), &format!("{} matrices of {} x {}", mm.batch, mm.k, mm.n))?;
        validate::covers("c", c, count(mm.m, mm.n), &format!("{} matrices of {} x {}", mm.batch, mm.m, mm.n))?;
        if let Some(bias) = bias {
            validate::covers("bias", bias, Some(mm.n), "one value per output column")?;
        }
        let prod = |arg: &'static str, x: i64, y: i64| {
            x.checked_mul(y)
                .filter(|v| v.checked_mul(batch).is_some())
                .ok_or_else(|| Error::invalid(arg, "the batch's element count overflows i64"))
        };
        let (mk, kn, mn) = (prod("a", m, k)?, prod("b", k, n)?, prod("c", m, n)?);
        let mut uses = vec![("a", a.id(), false), ("b", b.id(), false), ("c", c.id(), true)];
        if let Some(bias) = bias {
            uses.push(("bias", bias.id(), false));
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("matmul_bias_act");
        record(&mut rec, "a", a, Access::Read)?;
        record(&mut rec, "b", b, Access::Read)?;
        if let Some(bias) = bias {
            record(&mut rec, "bias", bias, Access::Read)?;
        }
        record(&mut rec, "c", c, Access::Write)?;
        if self.op.device.is_simulated() {
            let job = SimMatmul {
                mm: *mm,
                a: a.sim_data()?,
                b: b.sim_data()?,
                bias: bias.map(|x| x.sim_data()).transpose()?,
            };
            let out = c.sim_data()?;
            return self.op.run_sim(rec, Vec::new(), move || job.run(out));
        }
        let dt = dt_of::<T>();
        let mut g = GraphSpec::default();
        let au = g.tensor(&[batch, m, k], &[mk, k, 1], dt);
        let bu = g.tensor(&[batch, k, n], &[kn, n, 1], dt);
        let cu = g.tensor(&[batch, m, n], &[mn, n, 1], dt);
        let dims = [batch, m, n];
        let mut last = g.virt(&dims, Dt::F32);
        g.ops.push(Op::Matmul { a: au, b: bu, c: last, m_override: None, n_override: None, k_override: None });
        let biasu = bias.map(|_| g.tensor(&[1, 1, n], &[n, n, 1], dt));
        if let Some(bu) = biasu {
            last = g.pw(Pw::Add, last, Some(bu), None, &dims, Dt::F32, Dt::F32);
        }
        let mode = match mm.act {
            MatmulActivation::Identity => Pw::Identity,
            MatmulActivation::Relu => Pw::Relu,
            MatmulActivation::Gelu => Pw::Gelu,
            MatmulActivation::GeluTanh => Pw::GeluTanh,
        };
        g.ops.push(Op::Pointwise { mode, x: last, b: None, t: None, y: cu, prec: Dt::F32 });
        let mut ptrs = vec![(au, dptr(a)?), (bu, dptr(b)?), (cu, dptr(c)?)];
        if let (Some(u), Some(x)) = (biasu, bias) {
            ptrs.push((u, dptr(x)?));
        }
        self.run_graph(g, rec, ptrs, None, "matmul_bias_act")
    }
}

/// The simulator's fused matmul, in f64.
struct SimMatmul<T: DnnElement> {
    mm: MatmulBiasAct,
    a: SimMem<T>,
    b: SimMem<T>,
    bias: Option<SimMem<T>>,
}

/// `erf(x)`: its Taylor series near 0, the continued fraction of `erfc` further out (both
/// to about 1e-14).
fn erf(x: f64) -> f64 {
    let ax = x.abs();
    if ax < 2.5 {
        let (mut term, mut sum, mut n) = (ax, ax, 0.0f64);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -ax * ax / n;
            sum += term / (2.0 * n + 1.0);
        }
        return x.signum() * sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    // erfc(x) = exp(-x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), from the inside out.
    let mut f = ax;
    for i in (1..80).rev() {
        f = ax + (i as f64 / 2.0) / f;
    }
    let erfc = (-ax * ax).exp() / std::f64::consts::PI.sqrt() / f;
    x.signum() * (1.0 - erfc)
}

impl<T: DnnElement> SimMatmul<T> {
    fn run(self, c: SimMem<T>) {
        let MatmulBiasAct { batch, m, n, k, act } = self.mm;
        let load = |s: &SimMem<T>| s.read().iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
        let (a, b) = (load(&self.a), load(&self.b));
        let bias = self.bias.as_ref().map(load);
        let mut dst = c.lock();
        for p in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let mut acc: f64 = (0..k).map(|l| a[(p * m + i) * k + l] * b[(p * k + l) * n + j]).sum();
                    acc += bias.as_ref().map_or(0.0, |bias| bias[j]);
                    let v = match act {
                        MatmulActivation::Identity => acc,
                        MatmulActivation::Relu => acc.max(0.0),
                        MatmulActivation::Gelu => 0.5 * acc * (1.0 + erf(acc / std::f64::consts::SQRT_2)),
                        MatmulActivation::GeluTanh => {
                            let u = (2.0 / std::f64::consts::PI).sqrt() * (acc + 0.044715 * acc * acc * acc);
                            0.5 * acc * (1.0 + u.tanh())
                        }
                    };
                    dst[(p * m + i) * n + j] = T::from_f64(v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.5, -0.966_105_146_475_310_7),
        ] {
            assert!((super::erf(x) - want).abs() < 1e-13, "erf({x}) = {}", super::erf(x));
        }
    }
}
