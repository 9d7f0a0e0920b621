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
    pub trait Value {
        const KIND: ValueKind;
        /// The value's bits (real, imaginary), for cache keys.
        fn bits(self) -> [u64; 2];
    }
    impl Value for f32 {
        const KIND: ValueKind = ValueKind::F32;
        fn bits(self) -> [u64; 2] {
            [self.to_bits() as u64, 0]
        }
    }
    impl Value for f64 {
        const KIND: ValueKind = ValueKind::F64;
        fn bits(self) -> [u64; 2] {
            [self.to_bits(), 0]
        }
    }
    impl Value for crate::memory::Complex<f32> {
        const KIND: ValueKind = ValueKind::C32;
        fn bits(self) -> [u64; 2] {
            [self.re.to_bits() as u64, self.im.to_bits() as u64]
        }
    }
    impl Value for crate::memory::Complex<f64> {
        const KIND: ValueKind = ValueKind::C64;
        fn bits(self) -> [u64; 2] {
            [self.re.to_bits(), self.im.to_bits()]
        }
    }
    pub trait Index {}
    impl Index for i32 {}
    impl Index for i64 {}
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

/// The bits of `v` (real, imaginary), for cache keys.
pub(in crate::libs::sparse) fn value_bits<T: SparseValue>(v: T) -> [u64; 2] {
    sealed::Value::bits(v)
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
