//! The public description of a cuBLASLt matmul: operands, layouts, batches, epilogue, FP8
//! scales.
//!
//! Files: this one holds the layouts, the element types and their scale types; `epilogue` the
//! epilogue and FP8 scales, `matmul` the matmul and its batch.

use crate::memory::{Complex, Element, F8E4M3, F8E5M2};

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
    /// `op(X) = Xᴴ`, the conjugate transpose; the same as [`Yes`](Self::Yes) for real types.
    Conj,
}

/// How a matrix is stored: all four (`A`, `B`, `C`, `D`) with [`Matmul::order`], or each of
/// them with [`Matmul::orders`].
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
    use crate::memory::{Complex, F8E4M3, F8E5M2};

    /// The element kinds cuBLASLt multiplies.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Kind {
        F32,
        F16,
        Bf16,
        E4M3,
        E5M2,
        F64,
        C32,
        C64,
        I8,
        I32,
    }

    impl Kind {
        pub fn is_fp8(self) -> bool {
            matches!(self, Kind::E4M3 | Kind::E5M2)
        }

        pub fn is_complex(self) -> bool {
            matches!(self, Kind::C32 | Kind::C64)
        }

        /// Inputs the simulator computes in f64 (complex or real), not through its f32 GEMM.
        pub fn is_wide(self) -> bool {
            matches!(self, Kind::F64 | Kind::C32 | Kind::C64 | Kind::I8 | Kind::I32)
        }

        /// The kind's `cudaDataType`, from the data-type table.
        pub(crate) const fn cuda(self) -> CudaType {
            match self {
                Kind::F32 => <f32 as DataTypes>::CUDA,
                Kind::F16 => <half::f16 as DataTypes>::CUDA,
                Kind::Bf16 => <half::bf16 as DataTypes>::CUDA,
                Kind::E4M3 => <F8E4M3 as DataTypes>::CUDA,
                Kind::E5M2 => <F8E5M2 as DataTypes>::CUDA,
                Kind::F64 => <f64 as DataTypes>::CUDA,
                Kind::C32 => <Complex<f32> as DataTypes>::CUDA,
                Kind::C64 => <Complex<f64> as DataTypes>::CUDA,
                Kind::I8 => <i8 as DataTypes>::CUDA,
                Kind::I32 => <i32 as DataTypes>::CUDA,
            }
        }

        pub fn name(self) -> &'static str {
            match self {
                Kind::F32 => "f32",
                Kind::F16 => "f16",
                Kind::Bf16 => "bf16",
                Kind::E4M3 => "F8E4M3",
                Kind::E5M2 => "F8E5M2",
                Kind::F64 => "f64",
                Kind::C32 => "Complex<f32>",
                Kind::C64 => "Complex<f64>",
                Kind::I8 => "i8",
                Kind::I32 => "i32",
            }
        }
    }

    /// A host scale value, as cuBLASLt reads it through a pointer to the matmul's scale type.
    #[derive(Clone, Copy, Debug)]
    pub enum HostScalar {
        F32(f32),
        F64(f64),
        C32(Complex<f32>),
        C64(Complex<f64>),
        I32(i32),
    }

    impl HostScalar {
        /// The value's address, for as long as `self` is borrowed.
        pub fn as_ptr(&self) -> *const std::ffi::c_void {
            match self {
                HostScalar::F32(v) => (v as *const f32).cast(),
                HostScalar::F64(v) => (v as *const f64).cast(),
                HostScalar::C32(v) => (v as *const Complex<f32>).cast(),
                HostScalar::C64(v) => (v as *const Complex<f64>).cast(),
                HostScalar::I32(v) => (v as *const i32).cast(),
            }
        }
    }

    /// The conversions of a scale type (`alpha`, `beta`).
    pub trait ScaleValue: Copy {
        const ONE: Self;
        const ZERO: Self;
        /// The value as a complex f64 `[re, im]` (exact for every scale type).
        fn wide(self) -> [f64; 2];
        fn host(self) -> HostScalar;
    }

    /// An element type's kind, and its conversions for the simulator's host computation.
    pub trait LtType: Sized {
        const KIND: Kind;
        /// The value, exactly (the real part of a complex one; the f32 path never sees those).
        fn to_f32(self) -> f32;
        /// `x` rounded to the nearest value (FP8: saturating, see `fp8`).
        fn from_f32(x: f32) -> Self;
        /// The value as a complex f64 `[re, im]`, exactly.
        fn wide(self) -> [f64; 2];
        /// `x` rounded to the type (the imaginary part dropped for a real one; an integer
        /// rounded to nearest and wrapped to its width, as the GPU's integer accumulators).
        fn from_wide(x: [f64; 2]) -> Self;
    }
}
use sealed::Kind;

/// The type of a matmul's `alpha` and `beta`: cuBLASLt's scale type for the inputs' element
/// type. `f32` for f32, f16, bf16 and FP8 inputs; `f64` for f64; `Complex<f32>` and
/// `Complex<f64>` for complex inputs; `i32` for i8 inputs.
pub trait LtScale: Element + Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static + sealed::ScaleValue {}

macro_rules! lt_scale {
    ($($t:ty => $v:ident, $one:expr, $zero:expr, |$x:ident| $wide:expr;)*) => {$(
        impl sealed::ScaleValue for $t {
            const ONE: Self = $one;
            const ZERO: Self = $zero;
            fn wide(self) -> [f64; 2] {
                let $x = self;
                $wide
            }
            fn host(self) -> sealed::HostScalar {
                sealed::HostScalar::$v(self)
            }
        }
        impl LtScale for $t {}
    )*};
}
lt_scale! {
    f32 => F32, 1.0, 0.0, |x| [f64::from(x), 0.0];
    f64 => F64, 1.0, 0.0, |x| [x, 0.0];
    Complex<f32> => C32, Complex::new(1.0, 0.0), Complex::new(0.0, 0.0), |x| [f64::from(x.re), f64::from(x.im)];
    Complex<f64> => C64, Complex::new(1.0, 0.0), Complex::new(0.0, 0.0), |x| [x.re, x.im];
    i32 => I32, 1, 0, |x| [f64::from(x), 0.0];
}

/// Element types of cuBLASLt matrices and epilogue vectors: `f32`, `half::f16`, `half::bf16`,
/// [`F8E4M3`], [`F8E5M2`], `f64`, [`Complex<f32>`], [`Complex<f64>`], `i8` (inputs) and `i32`
/// (the `C` and `D` of i8 inputs).
pub trait LtElement: Element + sealed::LtType {
    /// The type of `alpha` and `beta` when this is the type of `A`.
    type Scale: LtScale;
}

/// Wraps an integer value (already rounded) to `i32`, as a 32-bit two's-complement
/// accumulator does.
fn wrap_i32(x: f64) -> i32 {
    // `as i64` saturates beyond i64 (no integer matmul reaches it); the cast to i32 keeps the
    // low 32 bits.
    (x.round() as i64) as i32
}

macro_rules! lt_element {
    ($($t:ty => $k:ident, $scale:ty, |$x:ident| $to:expr, |$y:ident| $from:expr, |$w:ident| $wide:expr, |$v:ident| $from_wide:expr;)*) => {$(
        impl sealed::LtType for $t {
            const KIND: Kind = Kind::$k;
            fn to_f32(self) -> f32 {
                let $x = self;
                $to
            }
            fn from_f32($y: f32) -> Self {
                $from
            }
            fn wide(self) -> [f64; 2] {
                let $w = self;
                $wide
            }
            fn from_wide($v: [f64; 2]) -> Self {
                $from_wide
            }
        }
        impl LtElement for $t {
            type Scale = $scale;
        }
    )*};
}
lt_element! {
    f32 => F32, f32, |x| x, |y| y, |w| [f64::from(w), 0.0], |v| v[0] as f32;
    half::f16 => F16, f32, |x| x.to_f32(), |y| half::f16::from_f32(y), |w| [f64::from(w.to_f32()), 0.0], |v| half::f16::from_f64(v[0]);
    half::bf16 => Bf16, f32, |x| x.to_f32(), |y| half::bf16::from_f32(y), |w| [f64::from(w.to_f32()), 0.0], |v| half::bf16::from_f64(v[0]);
    F8E4M3 => E4M3, f32, |x| crate::libs::fp8::e4m3_to_f32(x.0), |y| F8E4M3(crate::libs::fp8::e4m3_from_f32(y)),
        |w| [f64::from(crate::libs::fp8::e4m3_to_f32(w.0)), 0.0], |v| F8E4M3(crate::libs::fp8::e4m3_from_f32(v[0] as f32));
    F8E5M2 => E5M2, f32, |x| crate::libs::fp8::e5m2_to_f32(x.0), |y| F8E5M2(crate::libs::fp8::e5m2_from_f32(y)),
        |w| [f64::from(crate::libs::fp8::e5m2_to_f32(w.0)), 0.0], |v| F8E5M2(crate::libs::fp8::e5m2_from_f32(v[0] as f32));
    f64 => F64, f64, |x| x as f32, |y| f64::from(y), |w| [w, 0.0], |v| v[0];
    Complex<f32> => C32, Complex<f32>, |x| x.re, |y| Complex::new(y, 0.0), |w| [f64::from(w.re), f64::from(w.im)],
        |v| Complex::new(v[0] as f32, v[1] as f32);
    Complex<f64> => C64, Complex<f64>, |x| x.re as f32, |y| Complex::new(f64::from(y), 0.0), |w| [w.re, w.im],
        |v| Complex::new(v[0], v[1]);
    i8 => I8, i32, |x| f32::from(x), |y| y as i8, |w| [f64::from(w), 0.0], |v| v[0].round() as i8;
    i32 => I32, i32, |x| x as f32, |y| y as i32, |w| [f64::from(w), 0.0], |v| wrap_i32(v[0]);
}
