//! The simulator's matmul: the checked column-major problem computed on the host, from the
//! simulated memory of the buffers the op declared, as a simulated kernel on the op's stream.
//!
//! The inputs are read as f32 (f16, bf16 and FP8 exactly), the product accumulates in f32
//! (`matrixmultiply`'s GEMM; TF32 computes in f32 too), and the epilogue runs in f32 on
//! `alpha scale_a scale_b op(A) op(B) + beta C`: the bias, then the activation or the gradient;
//! `D`'s amax is taken before `D`'s scale, and each stored element is rounded to its type once
//! (FP8 to nearest even, saturating at the largest finite value). A ReLU mask holds bit
//! `j * ld + i` (its byte `/ 8`, its bit `% 8`) set where the pre-activation of `D[i, j]` was
//! positive; the padding bits of a column are left as they were. FP8 fast accumulation changes
//! nothing here: the product accumulates in f32 either way. An FP8 aux matrix holds the
//! pre-activation times its scale, its amax taken before the scale (as `D`'s). `alpha` and
//! `beta` in device memory are read when the simulated kernel runs, as the GPU reads them; a
//! batch's bias gradients go one per matmul, at the bias stride.

use super::check::{EpiKind, Operand, Problem};
use super::types::sealed::ScaleValue;
use super::types::{Epilogue, LtElement, LtScale, Matmul, MatmulOutput, Transpose};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::op::OpStream;
use crate::memory::{Element, SimMem};
use crate::recorder::LaunchRecorder;

/// The epilogue's aux matrix: a ReLU bit-mask or a GELU pre-activation.
enum AuxMem<E> {
    None,
    Mask(SimMem<u8>),
    Gelu(SimMem<E>),
}

/// One matmul's host computation, with the memory of every buffer it uses.
struct Job<TA, TB, TC, TD, E, S> {
    p: Problem,
    alpha: f32,
    beta: f32,
    /// `alpha` and `beta` in device memory, read when the kernel runs (replacing the two above).
    scalars: Option<(SimMem<S>, SimMem<S>)>,
    amax: bool,
    /// The aux matrix's FP8 scale, and whether its amax is asked for.
    aux_scale: Option<SimMem<f32>>,
    amax_aux: bool,
    a: SimMem<TA>,
    b: SimMem<TB>,
    /// A separate `C` (`None`: `C` is `D`).
    c: Option<SimMem<TC>>,
    d: SimMem<TD>,
    /// The bias vector (read) or the bias gradient (written), as `p.epi` says.
    vector: Option<SimMem<E>>,
    aux: AuxMem<E>,
    scales: Option<Scales>,
}

/// The FP8 scales of `A`, `B` and `D`.
struct Scales {
    a: SimMem<f32>,
    b: SimMem<f32>,
    d: Option<SimMem<f32>>,
}

/// The buffers' memory of `e`: its vector, and its aux matrix.
fn epilogue_mem<E: Element>(e: &Epilogue<'_, E>) -> Result<(Option<SimMem<E>>, AuxMem<E>)> {
    use Epilogue as P;
    Ok(match *e {
        P::Default | P::Relu | P::Gelu => (None, AuxMem::None),
        P::Bias(b) | P::ReluBias(b) | P::GeluBias(b) | P::BgradA(b) | P::BgradB(b) => {
            (Some(b.sim_data()?), AuxMem::None)
        }
        P::ReluAux(m) | P::DRelu(m) => (None, AuxMem::Mask(m.buf.sim_data()?)),
        P::GeluAux(a) | P::DGelu(a) => (None, AuxMem::Gelu(a.buf.sim_data()?)),
        P::ReluAuxBias { bias, mask } | P::DReluBgrad { mask, bias_grad: bias } => {
            (Some(bias.sim_data()?), AuxMem::Mask(mask.buf.sim_data()?))
        }
        P::GeluAuxBias { bias, aux } | P::DGeluBgrad { aux, bias_grad: bias } => {
            (Some(bias.sim_data()?), AuxMem::Gelu(aux.buf.sim_data()?))
        }
    })
}

/// Runs `mm` (checked into `p`, its uses declared on `rec`) on the simulator.
pub(super) fn matmul<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    op: &OpStream,
    rec: LaunchRecorder,
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    p: Problem,
) -> Result<Completion<MatmulOutput>> {
    if p.kinds[0].is_wide() {
        return super::sim_wide::matmul(op, rec, mm, p);
    }
    let c = match mm.c {
        Some(c) if !p.c_is_d => Some(c.sim_data()?),
        _ => None,
    };
    let (vector, aux) = epilogue_mem(&mm.epilogue)?;
    let scales = match &mm.fp8 {
        Some(s) => Some(Scales { a: s.a.sim_data()?, b: s.b.sim_data()?, d: s.d.map(|d| d.sim_data()).transpose()? }),
        None => None,
    };
    let scalars = match mm.scale_device {
        Some((a, b)) => Some((a.sim_data()?, b.sim_data()?)),
        None => None,
    };
    let job = Job {
        p,
        // f32 for every input type of this path: exact.
        alpha: mm.alpha.wide()[0] as f32,
        beta: mm.beta.wide()[0] as f32,
        scalars,
        amax: mm.amax_d,
        aux_scale: mm.aux_scale.map(|s| s.sim_data()).transpose()?,
        amax_aux: mm.amax_aux,
        a: mm.a.sim_data()?,
        b: mm.b.sim_data()?,
        c,
        d: mm.d.sim_data()?,
        vector,
        aux,
        scales,
    };
    Ok(op.run_sim(rec, Vec::new(), move || job.run())?.try_map(|r| r))
}

/// `x` as f32, every element.
fn widen<T: LtElement>(x: &[T]) -> Vec<f32> {
    x.iter().map(|v| v.to_f32()).collect()
}

/// GELU, tanh approximation, as cuBLASLt's epilogue computes it.
fn gelu(x: f32) -> f32 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    (0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())) as f32
}

/// The derivative of [`gelu`].
fn dgelu(x: f32) -> f32 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x * x * x)).tanh();
    (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)) as f32
}

/// Index of element `(r, c)` of matrix `o` in batch `g`.
pub(super) fn at(o: &Operand, g: usize, r: usize, c: usize) -> usize {
    g * o.stride as usize + r + c * o.ld as usize
}

/// Whether `len` elements hold every matrix of the batch of `o` (the checks made sure; the
/// GEMM's raw pointers rely on it, so it is asserted again here).
pub(super) fn covers(o: &Operand, count: usize, len: usize) -> bool {
    let last = (|| {
        let end = (o.rows.checked_sub(1)?).checked_add((o.cols.checked_sub(1)?).checked_mul(o.ld as u64)?)?;
        end.checked_add((count as u64 - 1).checked_mul(o.stride as u64)?)
    })();
    last.is_some_and(|l| l < len as u64)
}

/// `out (m x n, packed) = alpha op(A) op(B)` for batch `g`.
fn gemm(p: &Problem, g: usize, alpha: f32, a: &[f32], b: &[f32], out: &mut [f32]) {
    let (m, n) = (p.d.rows as usize, p.d.cols as usize);
    let k = if p.trans_a == Transpose::No { p.a.cols } else { p.a.rows } as usize;
    let strides = |o: &Operand, t: Transpose| {
        let ld = o.ld as isize;
        if t == Transpose::No {
            (1, ld)
        } else {
            (ld, 1)
        }
    };
    let (rsa, csa) = strides(&p.a, p.trans_a);
    let (rsb, csb) = strides(&p.b, p.trans_b);
    let (a, b) = (&a[g * p.a.stride as usize..], &b[g * p.b.stride as usize..]);
    // SAFETY: 1. `covers` (asserted by the caller for A and B) puts every element of op(A)
    // (m x k through (rsa, csa)) and op(B) (k x n through (rsb, csb)) of batch `g` inside the
    // slices, which start at the batch's offset; 2. `out` holds m x n elements, written with
    // row stride 1 and column stride m; 3. no slice overlaps another (`out` is a separate Vec).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            out.as_mut_ptr(),
            1,
            m as isize,
        );
    }
}

/// What the kernel reads before it computes: the factors widened to f32 (in the problem's
/// order), `alpha` and `D`'s scale with the FP8 scales folded in, `beta`, the aux matrix's scale,
/// and the epilogue's inputs.
struct Inputs {
    a: Vec<f32>,
    b: Vec<f32>,
    alpha: f32,
    beta: f32,
    scale_d: f32,
    scale_aux: f32,
    /// `C`, read only when beta is not zero (as cuBLASLt does: a NaN there is not seen).
    c: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    mask_in: Option<Vec<u8>>,
    gelu_in: Option<Vec<f32>>,
}

impl Inputs {
    /// The epilogue's output for the element at `elem` of the aux matrix (or bit of the mask),
    /// from the product `x` and the pre-activation `pre` (`x` plus the bias).
    fn activate(&self, kind: EpiKind, x: f32, pre: f32, elem: usize) -> f32 {
        match kind {
            EpiKind::Relu | EpiKind::ReluBias | EpiKind::ReluAux | EpiKind::ReluAuxBias => pre.max(0.0),
            EpiKind::Gelu | EpiKind::GeluBias | EpiKind::GeluAux | EpiKind::GeluAuxBias => gelu(pre),
            EpiKind::DRelu | EpiKind::DReluBgrad => {
                let set = self.mask_in.as_ref().is_some_and(|mk| (mk[elem / 8] >> (elem % 8)) & 1 == 1);
                if set {
                    x
                } else {
                    0.0
                }
            }
            EpiKind::DGelu | EpiKind::DGeluBgrad => x * dgelu(self.gelu_in.as_ref().map_or(0.0, |v| v[elem])),
            EpiKind::Default | EpiKind::Bias | EpiKind::BgradA | EpiKind::BgradB => pre,
        }
    }
}

impl<TA: LtElement, TB: LtElement, TC: LtElement, TD: LtElement, E: LtElement, S: LtScale> Job<TA, TB, TC, TD, E, S> {
    fn run(self) -> Result<MatmulOutput> {
        let inputs = self.inputs()?;
        let (amax, amax_aux, grad) = self.compute(&inputs);
        self.write_grad(&inputs, grad);
        Ok(MatmulOutput { amax_d: self.amax.then_some(amax), amax_aux: self.amax_aux.then_some(amax_aux) })
    }

    /// Reads the operands and the epilogue's inputs, checking the factors cover the problem.
    fn inputs(&self) -> Result<Inputs> {
        let p = &self.p;
        // One lock at a time: `a` and `b` may be the same buffer.
        let first = widen(&self.a.read());
        let second = widen(&self.b.read());
        let (a, b) = if p.swapped { (second, first) } else { (first, second) };
        let count = p.count as usize;
        if !covers(&p.a, count, a.len()) || !covers(&p.b, count, b.len()) {
            return Err(Error::invalid("a", "the simulator found an operand shorter than the checked problem"));
        }
        let (mut alpha, mut beta, mut scale_d) = (self.alpha, self.beta, 1.0f32);
        if let Some((a, b)) = &self.scalars {
            // f32 for every input type of this path: exact.
            let first = |v: &SimMem<S>| v.read().first().map_or(0.0, |x| x.wide()[0] as f32);
            (alpha, beta) = (first(a), first(b));
        }
        if let Some(Scales { a: sa, b: sb, d: sd }) = &self.scales {
            alpha *= first_of(sa) * first_of(sb);
            if let Some(sd) = sd {
                scale_d = first_of(sd);
            }
        }
        let scale_aux = self.aux_scale.as_ref().map_or(1.0, first_of);
        let c: Option<Vec<f32>> = match (&self.c, beta != 0.0) {
            (_, false) => None,
            (Some(c), true) => Some(widen(&c.read())),
            (None, true) => Some(widen(&self.d.read())),
        };
        let bias: Option<Vec<f32>> = match (&self.vector, p.epi.bias()) {
            (Some(v), Some(false)) => Some(widen(&v.read())),
            _ => None,
        };
        let aux_write = p.epi.aux().is_some_and(|u| u.write);
        let mask_in: Option<Vec<u8>> = match (&self.aux, aux_write) {
            (AuxMem::Mask(mk), false) => Some(mk.read().to_vec()),
            _ => None,
        };
        let gelu_in: Option<Vec<f32>> = match (&self.aux, aux_write) {
            (AuxMem::Gelu(x), false) => Some(widen(&x.read())),
            _ => None,
        };
        Ok(Inputs { a, b, alpha, beta, scale_d, scale_aux, c, bias, mask_in, gelu_in })
    }

    /// The product and the epilogue of every batch into `D` and the aux matrix it writes:
    /// `D`'s amax, the aux matrix's (before its scale), and the bias gradient of `D` where the
    /// epilogue takes it (`m` entries per matmul of the batch).
    fn compute(&self, inputs: &Inputs) -> (f32, f32, Vec<f32>) {
        let p = &self.p;
        let (m, n) = (p.d.rows as usize, p.d.cols as usize);
        let kind = p.epi;
        let grad_of_d = matches!(kind, EpiKind::DReluBgrad | EpiKind::DGeluBgrad);
        let (aux_ld, aux_stride) = p.aux.map_or((0, 0), |(ld, s)| (ld as usize, s as usize));
        let aux_write = kind.aux().is_some_and(|u| u.write);
        let mut mask_out = match (&self.aux, aux_write) {
            (AuxMem::Mask(mk), true) => Some(mk.lock()),
            _ => None,
        };
        let mut gelu_out = match (&self.aux, aux_write) {
            (AuxMem::Gelu(x), true) => Some(x.lock()),
            _ => None,
        };
        let mut d = self.d.lock();
        let count = p.count as usize;
        let mut grad = vec![0.0f32; if grad_of_d { m * count } else { 0 }];
        let (mut amax, mut amax_aux) = (0.0f32, 0.0f32);
        let mut acc = vec![0.0f32; m * n];
        for g in 0..count {
            gemm(p, g, inputs.alpha, &inputs.a, &inputs.b, &mut acc);
            for j in 0..n {
                for i in 0..m {
                    let mut x = acc[i + j * m];
                    if let Some(c) = &inputs.c {
                        x += inputs.beta * c[at(&p.c, g, i, j)];
                    }
                    let pre = x + inputs.bias.as_ref().map_or(0.0, |v| v[g * p.bias_stride as usize + i]);
                    // The aux matrix's element, or the mask's bit (its ld and stride count bits).
                    let elem = g * aux_stride + j * aux_ld + i;
                    let v = inputs.activate(kind, x, pre, elem);
                    if let Some(mk) = mask_out.as_mut() {
                        let byte = &mut mk[elem / 8];
                        let flag = 1u8 << (elem % 8);
                        *byte = if pre > 0.0 { *byte | flag } else { *byte & !flag };
                    }
                    if let Some(out) = gelu_out.as_mut() {
                        out[elem] = E::from_f32(pre * inputs.scale_aux);
                        amax_aux = amax_aux.max(pre.abs());
                    }
                    if grad_of_d {
                        grad[g * m + i] += v;
                    }
                    amax = amax.max(v.abs());
                    d[at(&p.d, g, i, j)] = TD::from_f32(v * inputs.scale_d);
                }
            }
        }
        (amax, amax_aux, grad)
    }

    /// Writes the bias gradient of every matmul of the batch (at its stride) where the
    /// epilogue takes one: `grad` (that of `D`, `m` entries per matmul), or the row sums of
    /// `op(A)` or `op(B)ᵀ`.
    fn write_grad(&self, inputs: &Inputs, grad: Vec<f32>) {
        let p = &self.p;
        let count = p.count as usize;
        let per: Vec<Vec<f32>> = match p.epi {
            EpiKind::BgradA => (0..count).map(|g| row_sums(&p.a, p.trans_a, &inputs.a, g)).collect(),
            // op(B) is k x n: its columns are the rows of op(B)ᵀ.
            EpiKind::BgradB => {
                let t = if p.trans_b == Transpose::No { Transpose::Yes } else { Transpose::No };
                (0..count).map(|g| row_sums(&p.b, t, &inputs.b, g)).collect()
            }
            _ => {
                let m = p.d.rows as usize;
                (0..count).map(|g| grad.get(g * m..(g + 1) * m).unwrap_or_default().to_vec()).collect()
            }
        };
        if let (Some(v), Some(true)) = (&self.vector, p.epi.bias()) {
            let mut out = v.lock();
            for (g, sums) in per.iter().enumerate() {
                let start = g * p.bias_stride as usize;
                for (o, s) in out.iter_mut().skip(start).zip(sums) {
                    *o = E::from_f32(*s);
                }
            }
        }
    }
}

/// The first element of a scale (the checks made sure it has one).
fn first_of(s: &SimMem<f32>) -> f32 {
    s.read().first().copied().unwrap_or(1.0)
}

/// The sums along the rows of `op(X)` (`t` applied to the stored matrix `o`) of batch `g`: for
/// BGRADA, the sums of `op(A)` over `k`; for BGRADB, those of `op(B)ᵀ`.
fn row_sums(o: &Operand, t: Transpose, x: &[f32], g: usize) -> Vec<f32> {
    let (rows, cols) = (o.rows as usize, o.cols as usize);
    match t {
        Transpose::No => (0..rows).map(|r| (0..cols).map(|c| x[at(o, g, r, c)]).sum()).collect(),
        Transpose::Yes | Transpose::Conj => (0..cols).map(|c| (0..rows).map(|r| x[at(o, g, r, c)]).sum()).collect(),
    }
}
