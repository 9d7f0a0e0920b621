//! The public vocabulary of the cuTENSOR ops: operands, compute types, operators, element
//! types.

use super::modes;
use crate::error::{Error, Result};
use crate::libs::dtype::CudaType;
use crate::memory::{Element, GpuRef};

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

/// Element types cuTENSOR ops take here: `f32`, `f64`, `half::f16`, `half::bf16` (every
/// operand of one op has the same type).
pub trait TensorElement: Element + sealed::Sealed {
    /// The compute type used when the op names none.
    const DEFAULT_COMPUTE: Compute;
}

/// The seal, with the conversions the simulator computes through (out of users' reach: the
/// trait cannot be named outside the crate).
pub(super) mod sealed {
    pub trait Sealed: Copy {
        /// The value, exactly.
        fn to_f64(self) -> f64;
        /// `v` rounded to the nearest value of the type.
        fn from_f64(v: f64) -> Self;
    }
    impl Sealed for f32 {
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
        fn from_f64(v: f64) -> Self {
            v as f32
        }
    }
    impl Sealed for f64 {
        fn to_f64(self) -> f64 {
            self
        }
        fn from_f64(v: f64) -> Self {
            v
        }
    }
    impl Sealed for half::f16 {
        fn to_f64(self) -> f64 {
            half::f16::to_f64(self)
        }
        fn from_f64(v: f64) -> Self {
            half::f16::from_f64(v)
        }
    }
    impl Sealed for half::bf16 {
        fn to_f64(self) -> f64 {
            half::bf16::to_f64(self)
        }
        fn from_f64(v: f64) -> Self {
            half::bf16::from_f64(v)
        }
    }
}

impl TensorElement for f32 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
}
impl TensorElement for f64 {
    const DEFAULT_COMPUTE: Compute = Compute::F64;
}
impl TensorElement for half::f16 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
}
impl TensorElement for half::bf16 {
    const DEFAULT_COMPUTE: Compute = Compute::F32;
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
