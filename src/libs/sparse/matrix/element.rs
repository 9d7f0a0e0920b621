//! The element types a sparse matrix takes: values ([`SparseValue`]: `f32`, `f64` and their
//! complex forms) and indices ([`SparseIndex`]: `i32`, `i64`), sealed, each with its row of
//! cuSPARSE's data-type table.

use crate::libs::dtype::{CudaType, DataTypes};
use crate::memory::{Complex, Element};

mod sealed {
    /// The value types, for the table below.
    #[derive(Clone, Copy, Debug)]
    pub enum ValueKind {
        F32,
        F64,
        C32,
        C64,
    }
    /// The value types' arithmetic, for the simulator's host computation of the ops.
    pub trait Value: Copy {
        const KIND: ValueKind;
        /// The value's bits (real, imaginary), for cache keys.
        fn bits(self) -> [u64; 2];
        /// The multiplicative identity.
        fn one() -> Self;
        /// `self + o`.
        fn plus(self, o: Self) -> Self;
        /// `self - o`.
        fn minus(self, o: Self) -> Self;
        /// `self * o`.
        fn times(self, o: Self) -> Self;
        /// `self / o`.
        fn over(self, o: Self) -> Self;
        /// Whether it is zero (a `NaN` is not).
        fn is_zero(self) -> bool;
        /// The complex conjugate (the value itself for real types).
        fn conj(self) -> Self;
    }
    macro_rules! real {
        ($t:ty, $kind:ident, $bits:expr) => {
            impl Value for $t {
                const KIND: ValueKind = ValueKind::$kind;
                fn bits(self) -> [u64; 2] {
                    [$bits(self), 0]
                }
                fn one() -> Self {
                    1.0
                }
                fn plus(self, o: Self) -> Self {
                    self + o
                }
                fn minus(self, o: Self) -> Self {
                    self - o
                }
                fn times(self, o: Self) -> Self {
                    self * o
                }
                fn over(self, o: Self) -> Self {
                    self / o
                }
                fn is_zero(self) -> bool {
                    self == 0.0
                }
                fn conj(self) -> Self {
                    self
                }
            }
        };
    }
    real!(f32, F32, |v: f32| v.to_bits() as u64);
    real!(f64, F64, |v: f64| v.to_bits());
    macro_rules! complex {
        ($t:ty, $kind:ident, $bits:expr) => {
            impl Value for crate::memory::Complex<$t> {
                const KIND: ValueKind = ValueKind::$kind;
                fn bits(self) -> [u64; 2] {
                    [$bits(self.re), $bits(self.im)]
                }
                fn one() -> Self {
                    Self::new(1.0, 0.0)
                }
                fn plus(self, o: Self) -> Self {
                    Self::new(self.re + o.re, self.im + o.im)
                }
                fn minus(self, o: Self) -> Self {
                    Self::new(self.re - o.re, self.im - o.im)
                }
                fn times(self, o: Self) -> Self {
                    Self::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
                }
                fn over(self, o: Self) -> Self {
                    let d = o.re * o.re + o.im * o.im;
                    Self::new((self.re * o.re + self.im * o.im) / d, (self.im * o.re - self.re * o.im) / d)
                }
                fn is_zero(self) -> bool {
                    self.re == 0.0 && self.im == 0.0
                }
                fn conj(self) -> Self {
                    Self::new(self.re, -self.im)
                }
            }
        };
    }
    complex!(f32, C32, |v: f32| v.to_bits() as u64);
    complex!(f64, C64, |v: f64| v.to_bits());
    pub trait Index: Copy {
        /// `v`, which the caller knows fits.
        fn from_usize(v: usize) -> Self;
    }
    impl Index for i32 {
        fn from_usize(v: usize) -> Self {
            v as i32
        }
    }
    impl Index for i64 {
        fn from_usize(v: usize) -> Self {
            v as i64
        }
    }
}

/// Element types of sparse matrices: `f32`, `f64`, `Complex<f32>`, `Complex<f64>`.
pub trait SparseValue: Element + sealed::Value {
    /// The additive identity (`beta` that makes an output write-only).
    fn zero() -> Self;
}
impl SparseValue for f32 {
    fn zero() -> Self {
        0.0
    }
}
impl SparseValue for f64 {
    fn zero() -> Self {
        0.0
    }
}
impl SparseValue for Complex<f32> {
    fn zero() -> Self {
        Complex::new(0.0, 0.0)
    }
}
impl SparseValue for Complex<f64> {
    fn zero() -> Self {
        Complex::new(0.0, 0.0)
    }
}

/// The value and index types' host arithmetic, for the simulator.
pub(in crate::libs::sparse) use sealed::Index as IndexArith;

/// The bits of `v` (real, imaginary), for cache keys.
pub(in crate::libs::sparse) fn value_bits<T: SparseValue>(v: T) -> [u64; 2] {
    sealed::Value::bits(v)
}

/// Whether `T` is a complex type (where a conjugate transpose differs from a transpose).
pub(in crate::libs::sparse) fn is_complex<T: SparseValue>() -> bool {
    matches!(T::KIND, sealed::ValueKind::C32 | sealed::ValueKind::C64)
}

/// A value type's row of the data-type table.
pub(crate) trait ValueType {
    const CUDA_TYPE: CudaType;
}
impl<T: SparseValue> ValueType for T {
    const CUDA_TYPE: CudaType = match T::KIND {
        sealed::ValueKind::F32 => <f32 as DataTypes>::CUDA,
        sealed::ValueKind::F64 => <f64 as DataTypes>::CUDA,
        sealed::ValueKind::C32 => <Complex<f32> as DataTypes>::CUDA,
        sealed::ValueKind::C64 => <Complex<f64> as DataTypes>::CUDA,
    };
}

/// The index width, as cuSPARSE names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// 32-bit indices (every op).
    I32,
    /// 64-bit indices (SpMV, SpMM, SpSV and the dense conversions; not SpGEMM or CSR↔CSC).
    I64,
}

/// Index types of sparse matrices: `i32` and `i64`.
pub trait SparseIndex: Element + sealed::Index {
    /// Its width.
    const KIND: IndexKind;
    /// The largest count it holds.
    const MAX: usize;
    /// As `i64`.
    fn to_i64(self) -> i64;
}
impl SparseIndex for i32 {
    const KIND: IndexKind = IndexKind::I32;
    const MAX: usize = i32::MAX as usize;
    fn to_i64(self) -> i64 {
        self as i64
    }
}
impl SparseIndex for i64 {
    const KIND: IndexKind = IndexKind::I64;
    const MAX: usize = i64::MAX as usize;
    fn to_i64(self) -> i64 {
        self
    }
}
