//! Every element type's name in each library's data-type enum, in one table.
//!
//! The libraries name element types with enums of their own: CUDA's `cudaDataType` (taken by
//! cuBLAS, cuSPARSE, cuTENSOR as `cutensorDataType_t`, and cuFFT's Xt API), cuBLAS's compute
//! types, cuDNN's `cudnnDataType_t` and NCCL's `ncclDataType_t`. cudarc generates each in its
//! library's `sys` module, behind that library's feature, so the table uses mirrors of them
//! here (same discriminants as cudarc 0.19.10) and each library's call layer converts the one
//! column it uses into its `sys` enum: [`cuda_data_type!`] is that conversion for every
//! library's `cudaDataType`, and checks at compile time that the discriminants agree. The table
//! itself needs no library feature.

// The cuDNN and NCCL columns are there for the libraries to come: adding one uses its column,
// it does not edit the table. Likewise the conversion below serves the libraries that take a
// `cudaDataType`: with none of them on, it is unused.
#![allow(dead_code, unused_macros)]

use crate::memory::Complex;

/// CUDA's `cudaDataType` (`library_types.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub(crate) enum CudaType {
    R16F = 2,
    R16BF = 14,
    R32F = 0,
    R64F = 1,
    C32F = 4,
    C64F = 5,
    R8I = 3,
    R8U = 8,
    R16I = 20,
    R16U = 22,
    R32I = 10,
    R32U = 12,
    R64I = 24,
    R64U = 26,
    R8F_E4M3 = 28,
    R8F_E5M2 = 29,
}

/// Defines `const fn $name(t: CudaType) -> $sys`: the one conversion from the table's CUDA
/// column into a library's `sys` enum. cudarc generates `cudaDataType` once per library (cuBLAS,
/// cuBLASLt, cuSPARSE, cuSOLVER, cuTENSOR's `cutensorDataType_t`): the same C enum, with the
/// same variant names, as distinct Rust types, so each call layer invokes this once with its
/// own. Every arm is also checked at compile time to carry the mirror's discriminant.
macro_rules! cuda_data_type {
    ($vis:vis fn $name:ident -> $sys:ty) => {
        $vis const fn $name(t: $crate::libs::dtype::CudaType) -> $sys {
            $crate::libs::dtype::cuda_data_type!(@arms t, $sys;
                R16F => CUDA_R_16F, R16BF => CUDA_R_16BF, R32F => CUDA_R_32F, R64F => CUDA_R_64F,
                C32F => CUDA_C_32F, C64F => CUDA_C_64F, R8I => CUDA_R_8I, R8U => CUDA_R_8U,
                R16I => CUDA_R_16I, R16U => CUDA_R_16U, R32I => CUDA_R_32I, R32U => CUDA_R_32U,
                R64I => CUDA_R_64I, R64U => CUDA_R_64U, R8F_E4M3 => CUDA_R_8F_E4M3,
                R8F_E5M2 => CUDA_R_8F_E5M2,
            )
        }
    };
    (@arms $t:ident, $sys:ty; $($ours:ident => $theirs:ident,)*) => {{
        type Sys = $sys;
        $(
            const _: () = assert!(
                $crate::libs::dtype::CudaType::$ours as u32 == Sys::$theirs as u32,
                concat!("cudaDataType mirror disagrees with cudarc: ", stringify!($ours)),
            );
        )*
        match $t {
            $($crate::libs::dtype::CudaType::$ours => Sys::$theirs,)*
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use cuda_data_type;

/// cuBLAS's `cublasComputeType_t`: the precision a cuBLAS op accumulates in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum BlasCompute {
    F32 = 68,
    F64 = 70,
    I32 = 72,
}

/// cuDNN's `cudnnDataType_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum CudnnType {
    Float = 0,
    Double = 1,
    Half = 2,
    Int8 = 3,
    Int32 = 4,
    Uint8 = 6,
    Bfloat16 = 9,
    Int64 = 10,
}

/// NCCL's `ncclDataType_t` (NCCL 2.24 and later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum NcclType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
}

/// An element type's row of the table. `None`: the library has no name for the type.
pub(crate) trait DataTypes {
    /// Its `cudaDataType`.
    const CUDA: CudaType;
    /// The compute type cuBLAS accumulates it in.
    const BLAS_COMPUTE: Option<BlasCompute>;
    /// Its `cudnnDataType_t`.
    const CUDNN: Option<CudnnType>;
    /// Its `ncclDataType_t`.
    const NCCL: Option<NcclType>;
}

macro_rules! table {
    ($( $(#[$gate:meta])* $t:ty => $cuda:ident, $blas:expr, $cudnn:expr, $nccl:expr; )*) => {$(
        $(#[$gate])*
        impl DataTypes for $t {
            const CUDA: CudaType = CudaType::$cuda;
            const BLAS_COMPUTE: Option<BlasCompute> = $blas;
            const CUDNN: Option<CudnnType> = $cudnn;
            const NCCL: Option<NcclType> = $nccl;
        }
    )*};
}

use BlasCompute as B;
use CudnnType as D;
use NcclType as N;
table! {
    // type                   CUDA   cuBLAS compute   cuDNN              NCCL
    f32                    => R32F,  Some(B::F32),    Some(D::Float),    Some(N::Float32);
    f64                    => R64F,  Some(B::F64),    Some(D::Double),   Some(N::Float64);
    #[cfg(feature = "_half")]
    half::f16              => R16F,  Some(B::F32),    Some(D::Half),     Some(N::Float16);
    #[cfg(feature = "_half")]
    half::bf16             => R16BF, Some(B::F32),    Some(D::Bfloat16), Some(N::Bfloat16);
    Complex<f32>           => C32F,  Some(B::F32),    None,              None;
    Complex<f64>           => C64F,  Some(B::F64),    None,              None;
    i8                     => R8I,   Some(B::I32),    Some(D::Int8),     Some(N::Int8);
    u8                     => R8U,   None,            Some(D::Uint8),    Some(N::Uint8);
    i16                    => R16I,  None,            None,              None;
    u16                    => R16U,  None,            None,              None;
    i32                    => R32I,  None,            Some(D::Int32),    Some(N::Int32);
    u32                    => R32U,  None,            None,              Some(N::Uint32);
    i64                    => R64I,  None,            Some(D::Int64),    Some(N::Int64);
    u64                    => R64U,  None,            None,              Some(N::Uint64);
    #[cfg(feature = "cublaslt")]
    crate::memory::F8E4M3  => R8F_E4M3, Some(B::F32), None,              None;
    #[cfg(feature = "cublaslt")]
    crate::memory::F8E5M2  => R8F_E5M2, Some(B::F32), None,              None;
}

/// The column's value for types every caller knows it exists for (a compile-time error
/// otherwise: only ever evaluated in constants).
pub(crate) const fn required<T: Copy>(column: Option<T>) -> T {
    match column {
        Some(v) => v,
        None => panic!("the data-type table has no entry for this type in this library's column"),
    }
}
