//! The simulator's cuTENSOR: every op computed on the host with plain loops over its modes'
//! index space, as a simulated kernel on the op's stream.
//!
//! Inputs are read as f64 (exactly, for every element type; complex ones as pairs of f64),
//! the op is evaluated in f64 (complex f64 arithmetic for complex data) and each stored
//! element is rounded once to the element type. TF32 contractions round their
//! inputs to TF32 first, as the tensor cores do; other compute types only differ from the GPU
//! in rounding (f64 is at least as precise as any of them). As on the GPU, an output whose
//! scale is zero (`beta == 0`) is not read, and neither is an input whose scale is zero, so
//! NaNs in them do not reach the result.

use super::modes::Layout;
use super::{BinaryOp, Compute, Kind, TensorElement, UnaryOp};
use crate::memory::{Complex, SimMem};

/// A value as the simulator computes it: `f64` for real data, [`C64`] for complex.
pub trait SimValue: Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
    /// The value of a scalar (real data take the real part: they have no other).
    fn from_scalar(s: Complex<f64>) -> Self;
    /// Whether it is zero (an operand scaled by it is not read).
    fn is_zero(self) -> bool;
    /// `self` with `f` applied to each part (rounding to TF32).
    fn map(self, f: impl Fn(f64) -> f64) -> Self;
    /// The unary operator `op` applied.
    fn unary(self, op: UnaryOp) -> Self;
    /// The binary operator `op` applied to `self` and `y`.
    fn binary(self, op: BinaryOp, y: Self) -> Self;
    /// The value a fold with `op` starts from.
    fn identity(op: BinaryOp) -> Self;
}

impl SimValue for f64 {
    fn from_scalar(s: Complex<f64>) -> Self {
        s.re
    }
    fn is_zero(self) -> bool {
        self == 0.0
    }
    fn map(self, f: impl Fn(f64) -> f64) -> Self {
        f(self)
    }
    fn unary(self, op: UnaryOp) -> Self {
        unary(op, self)
    }
    fn binary(self, op: BinaryOp, y: Self) -> Self {
        binary(op, self, y)
    }
    fn identity(op: BinaryOp) -> Self {
        identity(op)
    }
}

/// A complex value of the simulator: real part, imaginary part.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct C64(pub f64, pub f64);

impl std::ops::Add for C64 {
    type Output = C64;
    fn add(self, o: C64) -> C64 {
        C64(self.0 + o.0, self.1 + o.1)
    }
}

impl std::ops::Mul for C64 {
    type Output = C64;
    fn mul(self, o: C64) -> C64 {
        C64(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
}

impl SimValue for C64 {
    fn from_scalar(s: Complex<f64>) -> Self {
        C64(s.re, s.im)
    }
    fn is_zero(self) -> bool {
        self.0 == 0.0 && self.1 == 0.0
    }
    fn map(self, f: impl Fn(f64) -> f64) -> Self {
        C64(f(self.0), f(self.1))
    }
    /// Validation lets only the identity and the conjugate through for complex data; anything
    /// else would be NaN.
    fn unary(self, op: UnaryOp) -> Self {
        match op {
            UnaryOp::Identity => self,
            UnaryOp::Conj => C64(self.0, -self.1),
            _ => C64(f64::NAN, f64::NAN),
        }
    }
    /// Validation refuses max and min for complex data (they have no order); they would be NaN.
    fn binary(self, op: BinaryOp, y: Self) -> Self {
        match op {
            BinaryOp::Add => self + y,
            BinaryOp::Mul => self * y,
            BinaryOp::Max | BinaryOp::Min => C64(f64::NAN, f64::NAN),
        }
    }
    fn identity(op: BinaryOp) -> Self {
        match op {
            BinaryOp::Add => C64(0.0, 0.0),
            BinaryOp::Mul => C64(1.0, 0.0),
            BinaryOp::Max | BinaryOp::Min => C64(f64::NAN, f64::NAN),
        }
    }
}

/// An op's operands and parameters, taken from the validated launch.
pub(super) struct SimOp<T> {
    pub kind: Kind,
    pub compute: Compute,
    /// The unary operator of each input, in `inputs`' order.
    pub unary: Vec<UnaryOp>,
    /// `[alpha, beta, gamma]` as the launch holds them.
    pub scalars: [Complex<f64>; 3],
    /// The inputs in spec order (for elementwise ops `c` last, with `d`'s layout).
    pub inputs: Vec<(Layout, SimMem<T>)>,
    pub output: (Layout, SimMem<T>),
}

impl<T: TensorElement> SimOp<T> {
    /// Computes the op from the buffers' simulated memory: inputs are copied out first, so an
    /// output that is also an input (`c` of an elementwise op, in place) is read before it is
    /// written, as on the GPU.
    pub(super) fn run(self) {
        let tf32 = self.compute == Compute::Tf32;
        let scalars = self.scalars.map(T::Sim::from_scalar);
        let scales = input_scales(self.kind, scalars, self.inputs.len());
        let zero = T::Sim::identity(BinaryOp::Add);
        let values: Vec<Vec<T::Sim>> = self
            .inputs
            .iter()
            .zip(&scales)
            .map(|((layout, mem), &scale)| {
                if scale.is_zero() {
                    // Not read, like the GPU: the operand contributes zeros.
                    return vec![zero; layout.span];
                }
                let data = mem.read();
                data[..layout.span.min(data.len())]
                    .iter()
                    .map(|&x| if tf32 { x.to_sim().map(round_tf32) } else { x.to_sim() })
                    .collect()
            })
            .collect();
        let (out_layout, out_mem) = &self.output;
        let mut out = out_mem.lock();
        let old: Option<Vec<T::Sim>> = reads_output(self.kind, scalars)
            .then(|| out[..out_layout.span.min(out.len())].iter().map(|&x| x.to_sim()).collect());
        let inputs: Vec<(&Layout, &[T::Sim])> =
            self.inputs.iter().map(|(l, _)| l).zip(values.iter().map(|v| &v[..])).collect();
        evaluate(self.kind, &self.unary, scalars, &inputs, out_layout, old.as_deref(), |at, v| {
            out[at] = T::from_sim(v);
        });
    }
}

/// Whether the op reads its output's old value: a contraction or reduction with `beta != 0`.
fn reads_output<V: SimValue>(kind: Kind, scalars: [V; 3]) -> bool {
    matches!(kind, Kind::Contraction | Kind::Reduction(_)) && !scalars[1].is_zero()
}

/// The scale of each input: a contraction scales the product by `alpha` (both inputs read
/// unless it is zero); elementwise ops scale `a`, `b`, `c` by alpha, beta, gamma (binary ops:
/// `a` by alpha, `c` by gamma).
fn input_scales<V: SimValue>(kind: Kind, [alpha, beta, gamma]: [V; 3], inputs: usize) -> Vec<V> {
    match kind {
        Kind::Contraction => vec![alpha; inputs],
        Kind::Reduction(_) | Kind::Permutation => vec![alpha],
        Kind::Binary(_) => vec![alpha, gamma],
        Kind::Trinary(..) => vec![alpha, beta, gamma],
    }
}

/// `x` rounded to TF32 (10 mantissa bits, to nearest even), as tensor cores read f32 inputs.
fn round_tf32(x: f64) -> f64 {
    let f = x as f32;
    if !f.is_finite() {
        return x;
    }
    let bits = f.to_bits();
    let rounded = bits.wrapping_add(0x0fff + ((bits >> 13) & 1)) & !0x1fff;
    f64::from(f32::from_bits(rounded))
}

fn unary(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Identity => x,
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Rcp => 1.0 / x,
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Neg => -x,
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Floor => x.floor(),
        // Refused for real data by validation; a real number is its own conjugate.
        UnaryOp::Conj => x,
    }
}

fn binary(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Mul => x * y,
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
    }
}

/// The value a fold starts from.
fn identity(op: BinaryOp) -> f64 {
    match op {
        BinaryOp::Add => 0.0,
        BinaryOp::Mul => 1.0,
        BinaryOp::Max => f64::NEG_INFINITY,
        BinaryOp::Min => f64::INFINITY,
    }
}

/// The index space of an op: the output's modes first, then the modes only inputs have (the
/// ones a contraction or reduction folds), with each operand's stride along each (0 where the
/// operand lacks the mode: it is broadcast).
struct Space {
    out_extents: Vec<usize>,
    fold_extents: Vec<usize>,
    /// Per operand (inputs, then the output): strides along the output's modes.
    out_strides: Vec<Vec<usize>>,
    /// Per input: strides along the folded modes.
    fold_strides: Vec<Vec<usize>>,
}

fn stride_of(l: &Layout, mode: i32) -> usize {
    l.modes.iter().position(|&m| m == mode).map_or(0, |i| l.strides[i] as usize)
}

impl Space {
    fn new(inputs: &[&Layout], out: &Layout) -> Space {
        let mut folded: Vec<(i32, usize)> = Vec::new();
        for l in inputs {
            for (&m, &e) in l.modes.iter().zip(&l.extents) {
                if !out.modes.contains(&m) && !folded.iter().any(|&(f, _)| f == m) {
                    folded.push((m, e as usize));
                }
            }
        }
        let operands = inputs.iter().copied().chain([out]);
        Space {
            out_extents: out.extents.iter().map(|&e| e as usize).collect(),
            fold_extents: folded.iter().map(|&(_, e)| e).collect(),
            out_strides: operands.map(|l| out.modes.iter().map(|&m| stride_of(l, m)).collect()).collect(),
            fold_strides: inputs.iter().map(|l| folded.iter().map(|&(m, _)| stride_of(l, m)).collect()).collect(),
        }
    }
}

/// Calls `f` with every operand's offset at each point of the index space of `extents`, the
/// last mode fastest; `strides[o][m]` is operand `o`'s stride along mode `m`, `base[o]` its
/// offset at the origin.
fn walk(extents: &[usize], strides: &[Vec<usize>], base: &[usize], mut f: impl FnMut(&[usize])) {
    let mut off = base.to_vec();
    let mut idx = vec![0usize; extents.len()];
    loop {
        f(&off);
        let mut m = extents.len();
        loop {
            if m == 0 {
                return;
            }
            m -= 1;
            idx[m] += 1;
            for (o, s) in off.iter_mut().zip(strides) {
                *o += s[m];
            }
            if idx[m] < extents[m] {
                break;
            }
            for (o, s) in off.iter_mut().zip(strides) {
                *o -= s[m] * extents[m];
            }
            idx[m] = 0;
        }
    }
}

/// Evaluates op `kind` over `inputs` (layout and values as f64) into the output of layout
/// `out`, calling `store` with each output element's offset and value; `old` is the output's
/// old value where the op reads it (`beta != 0`).
fn evaluate<V: SimValue>(
    kind: Kind,
    unary_ops: &[UnaryOp],
    [alpha, beta, gamma]: [V; 3],
    inputs: &[(&Layout, &[V])],
    out: &Layout,
    old: Option<&[V]>,
    mut store: impl FnMut(usize, V),
) {
    let layouts: Vec<&Layout> = inputs.iter().map(|(l, _)| *l).collect();
    let space = Space::new(&layouts, out);
    let n = inputs.len();
    let zeros = vec![0usize; n + 1];
    let input = |i: usize, at: usize| inputs[i].1[at].unary(unary_ops.get(i).copied().unwrap_or_default());
    let with_old = |v: V, at: usize| match old {
        Some(old) => v + beta * old[at],
        None => v,
    };
    walk(&space.out_extents, &space.out_strides, &zeros, |off| {
        let at = off[n];
        let value = match kind {
            Kind::Contraction => {
                let mut sum = V::identity(BinaryOp::Add);
                walk(&space.fold_extents, &space.fold_strides, &off[..n], |f| {
                    sum = sum + input(0, f[0]) * input(1, f[1])
                });
                with_old(alpha * sum, at)
            }
            Kind::Reduction(op) => {
                let mut acc = V::identity(op);
                walk(&space.fold_extents, &space.fold_strides, &off[..n], |f| acc = acc.binary(op, input(0, f[0])));
                with_old(alpha * acc, at)
            }
            Kind::Permutation => alpha * input(0, off[0]),
            Kind::Binary(ac) => (alpha * input(0, off[0])).binary(ac, gamma * input(1, off[1])),
            Kind::Trinary(ab, abc) => {
                (alpha * input(0, off[0])).binary(ab, beta * input(1, off[1])).binary(abc, gamma * input(2, off[2]))
            }
        };
        store(at, value);
    });
}

#[cfg(test)]
mod tests {
    use super::super::modes::{layout, parse};
    use super::*;

    fn eval(kind: Kind, spec: &str, shapes: &[(&[usize], &[f64])], out: &[usize], scalars: [f64; 3]) -> Vec<f64> {
        let n = shapes.len();
        let args: &[&str] = &["a", "b", "c", "d"][..=n];
        let s = parse(spec, n, args).unwrap();
        let ls: Vec<Layout> =
            shapes.iter().zip(&s.inputs).map(|((e, v), m)| layout("x", m, e, None, v.len()).unwrap()).collect();
        let len = out.iter().product();
        let ol = layout("d", &s.output, out, None, len).unwrap();
        let inputs: Vec<(&Layout, &[f64])> = ls.iter().zip(shapes).map(|(l, (_, v))| (l, *v)).collect();
        let mut got = vec![f64::NAN; len];
        evaluate(kind, &vec![UnaryOp::Identity; n], scalars, &inputs, &ol, None, |at, v| got[at] = v);
        got
    }

    #[test]
    fn a_contraction_is_a_matrix_product_and_a_reduction_folds() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        // a: 2x3, b: 3x2.
        let got = eval(Kind::Contraction, "ik,kj->ij", &[(&[2, 3], &a), (&[3, 2], &b)], &[2, 2], [1.0, 0.0, 0.0]);
        assert_eq!(got, [4.0, 5.0, 10.0, 11.0]);
        // The transposed output.
        let got = eval(Kind::Contraction, "ik,kj->ji", &[(&[2, 3], &a), (&[3, 2], &b)], &[2, 2], [2.0, 0.0, 0.0]);
        assert_eq!(got, [8.0, 20.0, 10.0, 22.0]);
        let got = eval(Kind::Reduction(BinaryOp::Max), "ij->i", &[(&[2, 3], &a)], &[2], [1.0, 0.0, 0.0]);
        assert_eq!(got, [3.0, 6.0]);
        let got = eval(Kind::Permutation, "ij->ji", &[(&[2, 3], &a)], &[3, 2], [1.0, 0.0, 0.0]);
        assert_eq!(got, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn tf32_keeps_ten_mantissa_bits() {
        assert_eq!(round_tf32(1.0 + 2f64.powi(-10)), 1.0 + 2f64.powi(-10));
        assert_eq!(round_tf32(1.0 + 2f64.powi(-12)), 1.0);
        assert_eq!(round_tf32(1.0 + 3.0 * 2f64.powi(-11)), 1.0 + 2f64.powi(-9));
    }
}
