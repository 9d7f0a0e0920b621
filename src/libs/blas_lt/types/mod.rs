//! The public description of a cuBLASLt matmul: operands, layouts, batches, epilogue, FP8
//! scales.
//!
//! Files: this one holds the layouts and element types; `epilogue` the epilogue and FP8
//! scales, `matmul` the matmul and its batch.

use crate::memory::{Element, F8E4M3, F8E5M2};

mod epilogue;
mod matmul;

pub use epilogue::{Aux, Epilogue, Fp8Scales, ReluMask};
pub use matmul::{LtBatch, Matmul, MatmulOutput};

/// Whether a matrix operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = Xᵀ`.
    Yes,
}

/// How all four matrices (`A`, `B`, `C`, `D`) are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// Column-major, as in cuBLAS: a leading dimension is the distance between columns.
    #[default]
    Col,
    /// Row-major: a leading dimension is the distance between rows. Computed as the
    /// column-major `Dᵀ = op(B)ᵀ op(A)ᵀ`, so epilogue vectors run along `D`'s rows (one entry
    /// per column of `D`): see [`Epilogue`].
    Row,
}

pub(crate) mod sealed {
    #![allow(unreachable_pub)]

    use crate::libs::dtype::{CudaType, DataTypes};
    use crate::memory::{F8E4M3, F8E5M2};

    /// The element kinds cuBLASLt multiplies.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Kind {
        F32,
        F16,
        Bf16,
        E4M3,
        E5M2,
    }

    impl Kind {
        pub fn is_fp8(self) -> bool {
            matches!(self, Kind::E4M3 | Kind::E5M2)
        }

        /// The kind's `cudaDataType`, from the data-type table.
        pub(crate) const fn cuda(self) -> CudaType {
            match self {
                Kind::F32 => <f32 as DataTypes>::CUDA,
                Kind::F16 => <half::f16 as DataTypes>::CUDA,
                Kind::Bf16 => <half::bf16 as DataTypes>::CUDA,
                Kind::E4M3 => <F8E4M3 as DataTypes>::CUDA,
                Kind::E5M2 => <F8E5M2 as DataTypes>::CUDA,
            }
        }

        pub fn name(self) -> &'static str {
            match self {
                Kind::F32 => "f32",
                Kind::F16 => "f16",
                Kind::Bf16 => "bf16",
                Kind::E4M3 => "F8E4M3",
                Kind::E5M2 => "F8E5M2",
            }
        }
    }

    /// An element type's kind, and its conversions for the simulator's host computation.
    pub trait LtType: Sized {
        const KIND: Kind;
        /// The value, exactly.
        fn to_f32(self) -> f32;
        /// `x` rounded to the nearest value (FP8: saturating, see `fp8`).
        fn from_f32(x: f32) -> Self;
    }
}
use sealed::Kind;

/// Element types of cuBLASLt matrices and epilogue vectors: `f32`, `half::f16`, `half::bf16`,
/// [`F8E4M3`] and [`F8E5M2`].
pub trait LtElement: Element + sealed::LtType {}

macro_rules! lt_element {
    ($($t:ty => $k:ident, |$x:ident| $to:expr, |$y:ident| $from:expr;)*) => {$(
        impl sealed::LtType for $t {
            const KIND: Kind = Kind::$k;
            fn to_f32(self) -> f32 {
                let $x = self;
                $to
            }
            fn from_f32($y: f32) -> Self {
                $from
            }
        }
        impl LtElement for $t {}
    )*};
}
lt_element! {
    f32 => F32, |x| x, |y| y;
    half::f16 => F16, |x| x.to_f32(), |y| half::f16::from_f32(y);
    half::bf16 => Bf16, |x| x.to_f32(), |y| half::bf16::from_f32(y);
    F8E4M3 => E4M3, |x| crate::libs::fp8::e4m3_to_f32(x.0), |y| F8E4M3(crate::libs::fp8::e4m3_from_f32(y));
    F8E5M2 => E5M2, |x| crate::libs::fp8::e5m2_to_f32(x.0), |y| F8E5M2(crate::libs::fp8::e5m2_from_f32(y));
}
