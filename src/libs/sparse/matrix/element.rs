//! The element types a sparse matrix takes: what it stores ([`SparseStorage`]: the four
//! [`SparseValue`]s, `f32`, `f64` and their complex forms, which every op computes in, and the
//! low-precision `f16`, `bf16` and `i8`, which only the mixed-precision products read), indices
//! ([`SparseIndex`]: `i32`, `i64`), and the rows of cuSPARSE's mixed-precision tables
//! ([`MixedSpmv`], [`MixedSpmm`]); all sealed, each with its row of cuSPARSE's data-type table.

use crate::libs::dtype::{CudaType, DataTypes};
use crate::memory::{Complex, Element};

mod sealed {
    /// Every element type a sparse operand stores, for the table below.
    #[derive(Clone, Copy, Debug)]
    pub enum Kind {
        F32,
        F64,
        C32,
        C64,
        F16,
        BF16,
        I8,
        I32,
    }
    /// The storage types: what a matrix's values are.
    pub trait Storage: Copy {
        const STORAGE: Kind;
    }
    impl Storage for f32 {
        const STORAGE: Kind = Kind::F32;
    }
    impl Storage for f64 {
        const STORAGE: Kind = Kind::F64;
    }
    impl Storage for crate::memory::Complex<f32> {
        const STORAGE: Kind = Kind::C32;
    }
    impl Storage for crate::memory::Complex<f64> {
        const STORAGE: Kind = Kind::C64;
    }
    impl Storage for half::f16 {
        const STORAGE: Kind = Kind::F16;
    }
    impl Storage for half::bf16 {
        const STORAGE: Kind = Kind::BF16;
    }
    impl Storage for i8 {
        const STORAGE: Kind = Kind::I8;
    }

    /// A row of the mixed-precision tables: inputs of `Self`, output `Y`, and the host
    /// arithmetic the simulator computes it with (inputs read exactly, summed in `Acc`, rounded
    /// once into `Y`).
    pub trait Mixed<Y>: Storage {
        /// The compute type (`alpha` and `beta`).
        type Compute: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static;
        /// The simulator's accumulator: `f64` for floating rows, `i64` for the integer one.
        type Acc: Copy + Send + 'static;
        /// The output type's and the compute type's rows.
        const OUT: Kind;
        const COMPUTE: Kind;
        /// The empty sum.
        fn acc_zero() -> Self::Acc;
        /// `acc + a x`.
        fn mul_add(acc: Self::Acc, a: Self, x: Self) -> Self::Acc;
        /// `alpha acc + beta old`, rounded once into `Y`; `old` is not read when `beta` is 0.
        fn finish(alpha: Self::Compute, acc: Self::Acc, beta: Self::Compute, old: impl FnOnce() -> Y) -> Y;
        /// The scalar's bits, for cache keys.
        fn bits(c: Self::Compute) -> u64;
        /// Whether the scalar is zero (the output is then written, not read).
        fn is_zero(c: Self::Compute) -> bool;
    }

    /// Floating rows: inputs widened to `f64` (exact for `f16`, `bf16` and `i8`), the sum in
    /// `f64`, `alpha` and `beta` in `f32`.
    macro_rules! float_row {
        ($x:ty => $y:ty, $out:ident, $to:expr, $from:expr, $back:expr) => {
            impl Mixed<$y> for $x {
                type Compute = f32;
                type Acc = f64;
                const OUT: Kind = Kind::$out;
                const COMPUTE: Kind = Kind::F32;
                fn acc_zero() -> f64 {
                    0.0
                }
                fn mul_add(acc: f64, a: Self, x: Self) -> f64 {
                    acc + $to(a) * $to(x)
                }
                fn finish(alpha: f32, acc: f64, beta: f32, old: impl FnOnce() -> $y) -> $y {
                    let v = alpha as f64 * acc;
                    let v = if beta == 0.0 { v } else { v + beta as f64 * $back(old()) };
                    $from(v)
                }
                fn bits(c: f32) -> u64 {
                    c.to_bits() as u64
                }
                fn is_zero(c: f32) -> bool {
                    c == 0.0
                }
            }
        };
    }
    float_row!(half::f16 => half::f16, F16, half::f16::to_f64, half::f16::from_f64, half::f16::to_f64);
    float_row!(half::f16 => f32, F32, half::f16::to_f64, |v: f64| v as f32, |v: f32| v as f64);
    float_row!(half::bf16 => half::bf16, BF16, half::bf16::to_f64, half::bf16::from_f64, half::bf16::to_f64);
    float_row!(half::bf16 => f32, F32, half::bf16::to_f64, |v: f64| v as f32, |v: f32| v as f64);
    float_row!(i8 => f32, F32, |v: i8| v as f64, |v: f64| v as f32, |v: f32| v as f64);

    /// The integer row: products summed in `i64` and wrapped into `i32` once, which is what
    /// `i32` arithmetic wrapping at every step gives (sums and products agree modulo 2^32).
    impl Mixed<i32> for i8 {
        type Compute = i32;
        type Acc = i64;
        const OUT: Kind = Kind::I32;
        const COMPUTE: Kind = Kind::I32;
        fn acc_zero() -> i64 {
            0
        }
        fn mul_add(acc: i64, a: i8, x: i8) -> i64 {
            acc.wrapping_add(a as i64 * x as i64)
        }
        fn finish(alpha: i32, acc: i64, beta: i32, old: impl FnOnce() -> i32) -> i32 {
            let v = (alpha as i64).wrapping_mul(acc);
            let v = if beta == 0 { v } else { v.wrapping_add((beta as i64).wrapping_mul(old() as i64)) };
            v as i32
        }
        fn bits(c: i32) -> u64 {
            c as u32 as u64
        }
        fn is_zero(c: i32) -> bool {
            c == 0
        }
    }

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

/// What a sparse matrix may store: the four [`SparseValue`]s, which every op takes, and `f16`,
/// `bf16` and `i8`, which only the mixed-precision products ([`Sparse::spmv_mixed`],
/// [`Sparse::spmm_mixed`]) read; every other op asks for a [`SparseValue`], so a matrix of the
/// low-precision types cannot reach them (the second example does not compile).
///
/// ```no_run
/// use cusched::half::f16;
/// use cusched::sparse::{Sparse, SparseMatrix, Transpose};
/// use cusched::GpuRef;
/// fn f(s: &mut Sparse, a: &SparseMatrix<f16>, x: &GpuRef<f16>, y: &GpuRef<f32>) -> cusched::Result<()> {
///     s.spmv_mixed(Transpose::No, 1.0, a, x, 0.0, y)?.wait()
/// }
/// ```
///
/// ```compile_fail
/// use cusched::half::f16;
/// use cusched::sparse::{Sparse, SparseMatrix, Transpose};
/// use cusched::GpuRef;
/// fn f(s: &mut Sparse, a: &SparseMatrix<f16>, x: &GpuRef<f16>, y: &GpuRef<f16>) -> cusched::Result<()> {
///     s.spmv(Transpose::No, f16::ONE, a, x, f16::ZERO, y)?.wait()
/// }
/// ```
///
/// [`Sparse::spmv_mixed`]: crate::libs::sparse::Sparse::spmv_mixed
/// [`Sparse::spmm_mixed`]: crate::libs::sparse::Sparse::spmm_mixed
pub trait SparseStorage: Element + sealed::Storage {}
impl SparseStorage for f32 {}
impl SparseStorage for f64 {}
impl SparseStorage for Complex<f32> {}
impl SparseStorage for Complex<f64> {}
impl SparseStorage for half::f16 {}
impl SparseStorage for half::bf16 {}
impl SparseStorage for i8 {}

/// A row of cuSPARSE's mixed-precision SpMV table: `A` and `x` of `Self`, `y` of `Y`, computed
/// in `Compute` (the type of `alpha` and `beta`):
///
/// | `A`, `x` | `y` | compute |
/// |---|---|---|
/// | `f16` | `f16` or `f32` | `f32` |
/// | `bf16` | `bf16` or `f32` | `f32` |
/// | `i8` | `i32` | `i32` |
/// | `i8` | `f32` | `f32` |
pub trait MixedSpmv<Y: Element>: SparseStorage + sealed::Mixed<Y> {}
impl MixedSpmv<half::f16> for half::f16 {}
impl MixedSpmv<f32> for half::f16 {}
impl MixedSpmv<half::bf16> for half::bf16 {}
impl MixedSpmv<f32> for half::bf16 {}
impl MixedSpmv<i32> for i8 {}
impl MixedSpmv<f32> for i8 {}

/// A row of cuSPARSE's mixed-precision SpMM table: `A` and `B` of `Self`, `C` of `Y`, as
/// [`MixedSpmv`] but without `i8` into `f32` (which SpMM's table does not list).
pub trait MixedSpmm<Y: Element>: MixedSpmv<Y> {}
impl MixedSpmm<half::f16> for half::f16 {}
impl MixedSpmm<f32> for half::f16 {}
impl MixedSpmm<half::bf16> for half::bf16 {}
impl MixedSpmm<f32> for half::bf16 {}
impl MixedSpmm<i32> for i8 {}

/// The mixed rows' host arithmetic, for the simulator.
pub(in crate::libs::sparse) use sealed::Mixed as MixedArith;

/// Element types of sparse matrices that every op computes in: `f32`, `f64`, `Complex<f32>`,
/// `Complex<f64>`.
pub trait SparseValue: SparseStorage + sealed::Value {
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

/// A storage type's row of the data-type table.
pub(crate) trait ValueType {
    const CUDA_TYPE: CudaType;
}
impl<T: SparseStorage> ValueType for T {
    const CUDA_TYPE: CudaType = cuda(T::STORAGE);
}

/// A kind's row of the data-type table.
const fn cuda(k: sealed::Kind) -> CudaType {
    match k {
        sealed::Kind::F32 => <f32 as DataTypes>::CUDA,
        sealed::Kind::F64 => <f64 as DataTypes>::CUDA,
        sealed::Kind::C32 => <Complex<f32> as DataTypes>::CUDA,
        sealed::Kind::C64 => <Complex<f64> as DataTypes>::CUDA,
        sealed::Kind::F16 => <half::f16 as DataTypes>::CUDA,
        sealed::Kind::BF16 => <half::bf16 as DataTypes>::CUDA,
        sealed::Kind::I8 => <i8 as DataTypes>::CUDA,
        sealed::Kind::I32 => <i32 as DataTypes>::CUDA,
    }
}

/// The output and compute types of the mixed row `X` into `Y`.
pub(in crate::libs::sparse) const fn mixed_types<X: MixedArith<Y>, Y>() -> [CudaType; 2] {
    [cuda(X::OUT), cuda(X::COMPUTE)]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows that share an input type differ in the output or compute type the descriptors
    /// and workspace-size keys are made with.
    #[test]
    fn mixed_rows_name_their_output_and_compute_types() {
        use half::{bf16, f16};
        assert_eq!(mixed_types::<f16, f16>(), [CudaType::R16F, CudaType::R32F]);
        assert_eq!(mixed_types::<f16, f32>(), [CudaType::R32F, CudaType::R32F]);
        assert_eq!(mixed_types::<bf16, bf16>(), [CudaType::R16BF, CudaType::R32F]);
        assert_eq!(mixed_types::<bf16, f32>(), [CudaType::R32F, CudaType::R32F]);
        assert_eq!(mixed_types::<i8, i32>(), [CudaType::R32I, CudaType::R32I]);
        assert_eq!(mixed_types::<i8, f32>(), [CudaType::R32F, CudaType::R32F]);
        assert_eq!(<i8 as ValueType>::CUDA_TYPE, CudaType::R8I);
        assert_eq!(<bf16 as ValueType>::CUDA_TYPE, CudaType::R16BF);
    }
}
