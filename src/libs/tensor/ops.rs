//! The cuTENSOR ops' descriptions: what each computes, its operands and options.

use super::{BinaryOp, Compute, TensorElement, TensorRef, UnaryOp};
use crate::memory::Complex;

/// A scalar as the ops hold it: complex, with no imaginary part for real data.
type Scalar = Complex<f64>;

const ONE: Scalar = Complex::new(1.0, 0.0);
const ZERO: Scalar = Complex::new(0.0, 0.0);

fn scalar<T: TensorElement>(s: T::Scalar) -> Scalar {
    T::scalar_value(s)
}

/// `d = alpha · Σ a · b + beta · d`, the sum over the modes `a` and `b` share that `d` lacks:
/// `Contraction::new("ik,kj->ij", a, b, d)` is a matrix product. (cuTENSOR applies no unary
/// operators to real contraction operands; use an elementwise op first. Complex operands may
/// be conjugated: [`ops`](Self::ops) with [`UnaryOp::Conj`].)
#[derive(Clone, Debug)]
pub struct Contraction<'a, T: TensorElement> {
    pub(super) spec: &'a str,
    pub(super) a: TensorRef<'a, T>,
    pub(super) b: TensorRef<'a, T>,
    pub(super) d: TensorRef<'a, T>,
    pub(super) alpha: Scalar,
    pub(super) beta: Scalar,
    pub(super) ops: [UnaryOp; 2],
    pub(super) compute: Option<Compute>,
}

impl<'a, T: TensorElement> Contraction<'a, T> {
    /// `d = a · b` over the modes of `spec` (`alpha` 1, `beta` 0).
    pub fn new(spec: &'a str, a: TensorRef<'a, T>, b: TensorRef<'a, T>, d: TensorRef<'a, T>) -> Self {
        Contraction { spec, a, b, d, alpha: ONE, beta: ZERO, ops: [UnaryOp::Identity; 2], compute: None }
    }
    /// Scales the product.
    pub fn alpha(mut self, alpha: T::Scalar) -> Self {
        self.alpha = scalar::<T>(alpha);
        self
    }
    /// Adds `beta` times `d`'s old value (0: `d` is only written).
    pub fn beta(mut self, beta: T::Scalar) -> Self {
        self.beta = scalar::<T>(beta);
        self
    }
    /// Unary operators on `a` and `b`: [`UnaryOp::Conj`] conjugates a complex operand as it
    /// is read; real operands take only [`UnaryOp::Identity`].
    pub fn ops(mut self, a: UnaryOp, b: UnaryOp) -> Self {
        self.ops = [a, b];
        self
    }
    /// The compute type (default: the element type's, see [`TensorElement`]).
    pub fn compute(mut self, compute: Compute) -> Self {
        self.compute = Some(compute);
        self
    }
}

/// `d = alpha · fold_op(op_a(a)) + beta · d`, folding the modes of `a` that `d` lacks:
/// `Reduction::new("ijk->ik", a, d)` sums over `j`.
#[derive(Clone, Debug)]
pub struct Reduction<'a, T: TensorElement> {
    pub(super) spec: &'a str,
    pub(super) a: TensorRef<'a, T>,
    pub(super) d: TensorRef<'a, T>,
    pub(super) alpha: Scalar,
    pub(super) beta: Scalar,
    pub(super) op_a: UnaryOp,
    pub(super) fold: BinaryOp,
    pub(super) compute: Option<Compute>,
}

impl<'a, T: TensorElement> Reduction<'a, T> {
    /// A sum of `a` into `d` over the modes of `spec`.
    pub fn new(spec: &'a str, a: TensorRef<'a, T>, d: TensorRef<'a, T>) -> Self {
        Reduction { spec, a, d, alpha: ONE, beta: ZERO, op_a: UnaryOp::Identity, fold: BinaryOp::Add, compute: None }
    }
    /// How to fold (default [`BinaryOp::Add`]; complex data fold with `Add` or `Mul` only).
    pub fn fold(mut self, op: BinaryOp) -> Self {
        self.fold = op;
        self
    }
    /// Scales the folded value.
    pub fn alpha(mut self, alpha: T::Scalar) -> Self {
        self.alpha = scalar::<T>(alpha);
        self
    }
    /// Adds `beta` times `d`'s old value (0: `d` is only written).
    pub fn beta(mut self, beta: T::Scalar) -> Self {
        self.beta = scalar::<T>(beta);
        self
    }
    /// A unary operator on `a` (complex data: [`UnaryOp::Identity`] or [`UnaryOp::Conj`]).
    pub fn op_a(mut self, op: UnaryOp) -> Self {
        self.op_a = op;
        self
    }
    /// The compute type.
    pub fn compute(mut self, compute: Compute) -> Self {
        self.compute = Some(compute);
        self
    }
}

/// `b = alpha · op_a(a)` with the modes reordered: `Permutation::new("ijk->kij", a, b)`.
#[derive(Clone, Debug)]
pub struct Permutation<'a, T: TensorElement> {
    pub(super) spec: &'a str,
    pub(super) a: TensorRef<'a, T>,
    pub(super) b: TensorRef<'a, T>,
    pub(super) alpha: Scalar,
    pub(super) op_a: UnaryOp,
    pub(super) compute: Option<Compute>,
}

impl<'a, T: TensorElement> Permutation<'a, T> {
    /// `b = a` with its modes ordered as `spec` says.
    pub fn new(spec: &'a str, a: TensorRef<'a, T>, b: TensorRef<'a, T>) -> Self {
        Permutation { spec, a, b, alpha: ONE, op_a: UnaryOp::Identity, compute: None }
    }
    /// Scales `a`.
    pub fn alpha(mut self, alpha: T::Scalar) -> Self {
        self.alpha = scalar::<T>(alpha);
        self
    }
    /// A unary operator on `a` (complex data: [`UnaryOp::Identity`] or [`UnaryOp::Conj`]).
    pub fn op_a(mut self, op: UnaryOp) -> Self {
        self.op_a = op;
        self
    }
    /// The compute type.
    pub fn compute(mut self, compute: Compute) -> Self {
        self.compute = Some(compute);
        self
    }
}

/// `d = op_ac(alpha · op_a(a), gamma · op_c(c))`, elementwise; `c` has `d`'s modes and
/// layout (it may be `d` itself), `a` may lack some (broadcast): `"ij,ij->ij"`.
#[derive(Clone, Debug)]
pub struct ElementwiseBinary<'a, T: TensorElement> {
    pub(super) spec: &'a str,
    pub(super) a: TensorRef<'a, T>,
    pub(super) c: TensorRef<'a, T>,
    pub(super) d: TensorRef<'a, T>,
    pub(super) alpha: Scalar,
    pub(super) gamma: Scalar,
    pub(super) ops: [UnaryOp; 2],
    pub(super) op_ac: BinaryOp,
    pub(super) compute: Option<Compute>,
}

impl<'a, T: TensorElement> ElementwiseBinary<'a, T> {
    /// `d = a + c` over the modes of `spec` (`"A,C->D"`).
    pub fn new(spec: &'a str, a: TensorRef<'a, T>, c: TensorRef<'a, T>, d: TensorRef<'a, T>) -> Self {
        let ops = [UnaryOp::Identity; 2];
        ElementwiseBinary { spec, a, c, d, alpha: ONE, gamma: ONE, ops, op_ac: BinaryOp::Add, compute: None }
    }
    /// Scales of `a` and `c`.
    pub fn scales(mut self, alpha: T::Scalar, gamma: T::Scalar) -> Self {
        (self.alpha, self.gamma) = (scalar::<T>(alpha), scalar::<T>(gamma));
        self
    }
    /// Unary operators on `a` and `c` (complex data: [`UnaryOp::Identity`] or
    /// [`UnaryOp::Conj`]).
    pub fn ops(mut self, a: UnaryOp, c: UnaryOp) -> Self {
        self.ops = [a, c];
        self
    }
    /// How `a` and `c` combine (default [`BinaryOp::Add`]; complex data: `Add` or `Mul`).
    pub fn combine(mut self, op: BinaryOp) -> Self {
        self.op_ac = op;
        self
    }
    /// The compute type.
    pub fn compute(mut self, compute: Compute) -> Self {
        self.compute = Some(compute);
        self
    }
}

/// `d = op_abc(op_ab(alpha · op_a(a), beta · op_b(b)), gamma · op_c(c))`, elementwise; `c`
/// has `d`'s modes and layout (it may be `d` itself): `"ij,ij,ij->ij"`.
#[derive(Clone, Debug)]
pub struct ElementwiseTrinary<'a, T: TensorElement> {
    pub(super) spec: &'a str,
    pub(super) a: TensorRef<'a, T>,
    pub(super) b: TensorRef<'a, T>,
    pub(super) c: TensorRef<'a, T>,
    pub(super) d: TensorRef<'a, T>,
    pub(super) scales: [Scalar; 3],
    pub(super) ops: [UnaryOp; 3],
    pub(super) combine: (BinaryOp, BinaryOp),
    pub(super) compute: Option<Compute>,
}

impl<'a, T: TensorElement> ElementwiseTrinary<'a, T> {
    /// `d = a + b + c` over the modes of `spec` (`"A,B,C->D"`).
    pub fn new(
        spec: &'a str,
        a: TensorRef<'a, T>,
        b: TensorRef<'a, T>,
        c: TensorRef<'a, T>,
        d: TensorRef<'a, T>,
    ) -> Self {
        let (scales, ops) = ([ONE; 3], [UnaryOp::Identity; 3]);
        ElementwiseTrinary { spec, a, b, c, d, scales, ops, combine: (BinaryOp::Add, BinaryOp::Add), compute: None }
    }
    /// Scales of `a`, `b` and `c` (alpha, beta, gamma).
    pub fn scales(mut self, alpha: T::Scalar, beta: T::Scalar, gamma: T::Scalar) -> Self {
        self.scales = [scalar::<T>(alpha), scalar::<T>(beta), scalar::<T>(gamma)];
        self
    }
    /// Unary operators on `a`, `b` and `c` (complex data: [`UnaryOp::Identity`] or
    /// [`UnaryOp::Conj`]).
    pub fn ops(mut self, a: UnaryOp, b: UnaryOp, c: UnaryOp) -> Self {
        self.ops = [a, b, c];
        self
    }
    /// How `a` and `b` combine, then how that combines with `c` (default both add; complex
    /// data: `Add` or `Mul`).
    pub fn combine(mut self, ab: BinaryOp, abc: BinaryOp) -> Self {
        self.combine = (ab, abc);
        self
    }
    /// The compute type.
    pub fn compute(mut self, compute: Compute) -> Self {
        self.compute = Some(compute);
        self
    }
}
