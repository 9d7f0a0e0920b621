//! The public vocabulary of the cuTENSOR ops: operands, compute types, operators, element
//! types.

use super::modes;
use crate::error::{Error, Result};
use crate::libs::dtype::CudaType;
use crate::memory::{Complex, Element, GpuRef};

/// A tensor operand: a buffer and one extent per mode, with strides in elements (`None`:
/// packed row-major, the last mode contiguous).
#[derive(Clone, Debug)]
pub struct TensorRef<'a, T: Element> {
    pub(super) buf: &'a GpuRef<T>,
    extents: Vec<usize>,
    strides: Option<Vec<usize>>,
}

impl<'a, T: Element> TensorRef<'a, T> {
    /// `buf` as a packed tensor of these extents (in the order of the operand's modes in the
    /// spec; the last is contiguous).
    pub fn new(buf: &'a GpuRef<T>, extents: &[usize]) -> Self {
        TensorRef { buf, extents: extents.to_vec(), strides: None }
    }

    /// `buf` as a tensor with explicit strides (elements between neighbours along each mode).
    /// Inputs may repeat elements (stride 0 broadcasts); outputs may not.
    pub fn strided(buf: &'a GpuRef<T>, extents: &[usize], strides: &[usize]) -> Self {
        TensorRef { buf, extents: extents.to_vec(), strides: Some(strides.to_vec()) }
    }

    /// The buffer.
    pub fn buf(&self) -> &'a GpuRef<T> {
        self.buf
    }

    /// Checks the operand as argument `arg` with modes `modes`.
    pub(super) fn layout(&self, arg: &'static str, modes: &[char]) -> Result<modes::Layout> {
        modes::layout(arg, modes, &self.extents, self.strides.as_deref(), self.buf.len())
    }
}

/// The precision cuTENSOR computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// Half precision (f16 data only).
    F16,
    /// bfloat16 (bf16 data only).
    Bf16,
    /// f32 inputs rounded to TF32 on tensor cores (f32 contractions only): several times
    /// faster, about three decimal digits of input precision.
    Tf32,
    /// Single precision: the default for f32, f16 and bf16 data.
    F32,
    /// Double precision: f64 data.
    F64,
}

/// A unary operator applied to an operand's elements as they are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `x`.
    #[default]
    Identity,
    /// `√x`.
    Sqrt,
    /// `max(x, 0)`.
    Relu,
    /// `1/x`.
    Rcp,
    /// `1/(1+e^-x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `|x|`.
    Abs,
    /// `-x`.
    Neg,
    /// `sin x`.
    Sin,
    /// `cos x`.
    Cos,
    /// `⌈x⌉`.
    Ceil,
    /// `⌊x⌋`.
    Floor,
    /// The complex conjugate `x̄` (complex data only; the only operator besides
    /// [`Identity`](Self::Identity) cuTENSOR applies to complex operands).
    Conj,
}

/// A binary operator: how elementwise ops combine operands and how reductions fold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `x + y`.
    #[default]
    Add,
    /// `x · y`.
    Mul,
    /// `max(x, y)`.
    Max,
    /// `min(x, y)`.
    Min,
}

/// Element types cuTENSOR ops take here: `f32`, `f64`, `half::f16`, `half::bf16`,
/// `Complex<f32>` and `Complex<f64>` (every operand of one op has the same type).
pub trait TensorElement: Element + sealed::Sealed {
    /// The compute type used when the op names none.
    const DEFAULT_COMPUTE: Compute;
    /// The type of the ops' scalars (`alpha`, `beta`, `gamma`): `f64` for real data (cuTENSOR
    /// takes them in the compute type's precision), `Complex<f64>` for complex data.
    type Scalar: Copy + std::fmt::Debug + PartialEq;
}

/// The seal, with the conversions the simulator computes through (out of users' reach: the
/// trait cannot be named outside the crate).
pub(super) mod sealed {
    use crate::libs::tensor::sim::{SimValue, C64};
    use crate::memory::Complex;

    pub trait Sealed: Copy {
        /// What the simulator computes this type in.
        type Sim: SimValue;
        /// Whether the type is complex (takes [`Conj`](super::UnaryOp::Conj), no max or min).
        const COMPLEX: bool = false;
        /// The value, exactly.
        fn to_sim(self) -> Self::Sim;
        /// `v` rounded to the nearest value of the type.
        fn from_sim(v: Self::Sim) -> Self;
        /// A scalar of the element type's [`Scalar`](super::TensorElement::Scalar) type as a
        /// complex value (real scalars have no imaginary part).
        fn scalar_value(s: <Self as super::TensorElement>::Scalar) -> Complex<f64>
        where
            Self: super::TensorElement;
    }
    macro_rules! real {
        ($($t:ty: |$x:ident| $to:expr, |$v:ident| $from:expr;)*) => {$(
            impl Sealed for $t {
                type Sim = f64;
                fn to_sim(self) -> f64 {
                    let $x = self;
                    $to
                }
                fn from_sim($v: f64) -> Self {
                    $from
                }
                fn scalar_value(s: f64) -> Complex<f64> {
                    Complex::new(s, 0.0)
                }
            }
        )*};
    }
    real! {
        f32: |x| f64::from(x), |v| v as f32;
        f64: |x| x, |v| v;
        half::f16: |x| half::f16::to_f64(x), |v| half::f16::from_f64(v);
        half::bf16: |x| half::bf16::to_f64(x), |v| half::bf16::from_f64(v);
    }
    impl Sealed for Complex<f32> {
        type Sim = C64;
        const COMPLEX: bool = true;
        fn to_sim(self) -> C64 {
            C64(f64::from(self.re), f64::from(self.im))
        }
        fn from_sim(v: C64) -> Self {
            Complex::new(v.0 as f32, v.1 as f32)
        }
        fn scalar_value(s: Complex<f64>) -> Complex<f64> {
            s
        }
    }
    impl Sealed for Complex<f64> {
        type Sim = C64;
        const COMPLEX: bool = true;
        fn to_sim(self) -> C64 {
            C64(self.re, self.im)
        }
        fn from_sim(v: C64) -> Self {
            Complex::new(v.0, v.1)
        }
        fn scalar_value(s: Complex<f64>) -> Complex<f64> {
            s
        }
    }
}

impl TensorElement for f32 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
    type Scalar = f64;
}
impl TensorElement for f64 {
    const DEFAULT_COMPUTE: Compute = Compute::F64;
    type Scalar = f64;
}
impl TensorElement for half::f16 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
    type Scalar = f64;
}
impl TensorElement for half::bf16 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
    type Scalar = f64;
}
impl TensorElement for Complex<f32> {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
    type Scalar = Complex<f64>;
}
impl TensorElement for Complex<f64> {
    const DEFAULT_COMPUTE: Compute = Compute::F64;
    type Scalar = Complex<f64>;
}

/// `T`'s `cudaDataType`.
pub(super) fn cuda_type<T: TensorElement>() -> CudaType {
    use crate::libs::dtype::DataTypes;
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f64>() {
        f64::CUDA
    } else if t == TypeId::of::<half::f16>() {
        half::f16::CUDA
    } else if t == TypeId::of::<half::bf16>() {
        half::bf16::CUDA
    } else if t == TypeId::of::<Complex<f32>>() {
        Complex::<f32>::CUDA
    } else if t == TypeId::of::<Complex<f64>>() {
        Complex::<f64>::CUDA
    } else {
        f32::CUDA
    }
}

/// Checks `compute` (or `T`'s default) for data of type `T` in an op that is a contraction or
/// not.
pub(super) fn compute_for<T: TensorElement>(compute: Option<Compute>, contraction: bool) -> Result<Compute> {
    let c = compute.unwrap_or(T::DEFAULT_COMPUTE);
    let ok = match (cuda_type::<T>(), c) {
        (CudaType::R64F, Compute::F64) => true,
        (CudaType::R32F, Compute::F32) => true,
        (CudaType::R32F, Compute::Tf32) => contraction,
        (CudaType::R16F, Compute::F32 | Compute::F16) => true,
        (CudaType::R16BF, Compute::F32 | Compute::Bf16) => true,
        (CudaType::C64F, Compute::F64) => true,
        (CudaType::C32F, Compute::F32) => true,
        (CudaType::C32F, Compute::Tf32) => contraction,
        _ => false,
    };
    if !ok {
        let what = if contraction { "contraction" } else { "op" };
        return Err(Error::invalid(
            "compute",
            format!("{c:?} does not compute a {what} on {:?} data", cuda_type::<T>()),
        ));
    }
    Ok(c)
}

/// Refuses a unary operator cuTENSOR does not apply to `T` (argument `arg`): complex operands
/// take only [`UnaryOp::Identity`] and [`UnaryOp::Conj`], real ones every operator but `Conj`;
/// contractions (`contraction`) take only the identity on real operands.
pub(super) fn check_unary<T: TensorElement>(arg: &'static str, op: UnaryOp, contraction: bool) -> Result<()> {
    let ok = match op {
        UnaryOp::Identity => true,
        UnaryOp::Conj => T::COMPLEX,
        _ => !T::COMPLEX && !contraction,
    };
    if ok {
        return Ok(());
    }
    let hint = if T::COMPLEX {
        "complex operands take only UnaryOp::Identity and UnaryOp::Conj; apply the operator in a \
         kernel of your own"
    } else if contraction {
        "real contraction operands take no operator; apply it with an elementwise op first"
    } else {
        "UnaryOp::Conj is for complex data; real data are their own conjugate (use Identity)"
    };
    Err(Error::Unsupported {
        library: super::NAME,
        what: format!("{op:?} on {:?} data (argument `{arg}`)", cuda_type::<T>()),
        hint: hint.into(),
    })
}

/// Refuses a binary operator cuTENSOR does not define on `T` (argument `arg`): complex numbers
/// have no order, so no [`BinaryOp::Max`] or [`BinaryOp::Min`].
pub(super) fn check_binary<T: TensorElement>(arg: &'static str, op: BinaryOp) -> Result<()> {
    if T::COMPLEX && matches!(op, BinaryOp::Max | BinaryOp::Min) {
        return Err(Error::Unsupported {
            library: super::NAME,
            what: format!("{op:?} on {:?} data (argument `{arg}`)", cuda_type::<T>()),
            hint: "complex numbers have no order: use BinaryOp::Add or BinaryOp::Mul, or compare \
                   magnitudes computed by a kernel of your own"
                .into(),
        });
    }
    Ok(())
}
