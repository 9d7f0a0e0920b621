//! The element types of buffers.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use std::fmt;

mod sealed {
    pub trait Sealed {}
}

/// Element types of buffers: plain numeric values, valid for every bit pattern, so that
/// uninitialised device memory and raw copies are sound to read.
pub trait Element:
    DeviceRepr + ValidAsZeroBits + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
}

macro_rules! elements {
    ($($t:ty),*) => {$( impl sealed::Sealed for $t {} impl Element for $t {} )*};
}
elements!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);
#[cfg(feature = "_half")]
elements!(half::f16, half::bf16);
#[cfg(feature = "_fp8")]
elements!(F8E4M3, F8E5M2);

macro_rules! fp8 {
    ($($(#[$doc:meta])* $t:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        #[cfg(feature = "_fp8")]
        pub struct $t(pub u8);

        // SAFETY: a transparent byte: copying it to the device is sound.
        #[cfg(feature = "_fp8")]
        unsafe impl DeviceRepr for $t {}
        // SAFETY: every byte, zero included, is a valid value (its bits are only reinterpreted
        // by the GPU).
        #[cfg(feature = "_fp8")]
        unsafe impl ValidAsZeroBits for $t {}
    )*};
}
fp8! {
    /// An FP8 value in the E4M3 format (4 exponent bits, 3 mantissa bits, no infinities), as
    /// its raw bits: the element of cuBLASLt's `CUDA_R_8F_E4M3` matrices and cuDNN's FP8 attention.
    F8E4M3;
    /// An FP8 value in the E5M2 format (5 exponent bits, 2 mantissa bits), as its raw bits: the
    /// element of cuBLASLt's `CUDA_R_8F_E5M2` matrices and cuDNN's FP8 attention.
    F8E5M2;
}
elements!(Complex<f32>, Complex<f64>);
#[cfg(feature = "_half")]
elements!(Complex<half::f16>, Complex<half::bf16>);

/// A complex number laid out as CUDA's `cuComplex` / `cuDoubleComplex` (real part first); with
/// `half::f16` or `half::bf16` parts, CUDA's `half2` / `nv_bfloat162` pairs (`CUDA_C_16F`,
/// `CUDA_C_16BF`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex<T> {
    /// Real part.
    pub re: T,
    /// Imaginary part.
    pub im: T,
}

impl<T> Complex<T> {
    /// `re + i im`.
    pub const fn new(re: T, im: T) -> Self {
        Complex { re, im }
    }
}

// SAFETY: `Complex<f32>` and `Complex<f64>` are `repr(C)` pairs of floats with no padding, the
// layout of `cuComplex` / `cuDoubleComplex`; copying their bytes to the device is sound.
unsafe impl DeviceRepr for Complex<f32> {}
// SAFETY: as above.
unsafe impl DeviceRepr for Complex<f64> {}
// SAFETY: all-zero bits are `0.0 + 0.0i`, and every bit pattern of two floats is valid.
unsafe impl ValidAsZeroBits for Complex<f32> {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for Complex<f64> {}
// SAFETY: `Complex<f16>` and `Complex<bf16>` are `repr(C)` pairs of two-byte floats with no
// padding, the layout of CUDA's `half2` / `nv_bfloat162`; copying their bytes is sound.
#[cfg(feature = "_half")]
unsafe impl DeviceRepr for Complex<half::f16> {}
// SAFETY: as above.
#[cfg(feature = "_half")]
unsafe impl DeviceRepr for Complex<half::bf16> {}
// SAFETY: all-zero bits are `0.0 + 0.0i`, and every bit pattern of two half floats is valid.
#[cfg(feature = "_half")]
unsafe impl ValidAsZeroBits for Complex<half::f16> {}
// SAFETY: as above.
#[cfg(feature = "_half")]
unsafe impl ValidAsZeroBits for Complex<half::bf16> {}
