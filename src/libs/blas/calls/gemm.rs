//! cuBLAS's GEMM entry points (`cublasGemm*Ex`), and the data-type table's cuBLAS columns.

use super::sealed::GemmType;
use super::{op, H};
use crate::error::Result;
use crate::libs::blas::Transpose;
use crate::libs::dtype::{required, BlasCompute, CudaType, DataTypes};
use crate::libs::Status;
use cudarc::cublas::sys;
use std::ffi::{c_int, c_void};

/// The data-type table's CUDA column as cuBLAS's `sys` enum.
const fn data_type(t: CudaType) -> sys::cudaDataType_t {
    use sys::cudaDataType_t as C;
    match t {
        CudaType::R16F => C::CUDA_R_16F,
        CudaType::R16BF => C::CUDA_R_16BF,
        CudaType::R32F => C::CUDA_R_32F,
        CudaType::R64F => C::CUDA_R_64F,
        CudaType::C32F => C::CUDA_C_32F,
        CudaType::C64F => C::CUDA_C_64F,
        CudaType::R8I => C::CUDA_R_8I,
        CudaType::R8U => C::CUDA_R_8U,
        CudaType::R16I => C::CUDA_R_16I,
        CudaType::R16U => C::CUDA_R_16U,
        CudaType::R32I => C::CUDA_R_32I,
        CudaType::R32U => C::CUDA_R_32U,
        CudaType::R64I => C::CUDA_R_64I,
        CudaType::R64U => C::CUDA_R_64U,
        CudaType::R8F_E4M3 => C::CUDA_R_8F_E4M3,
        CudaType::R8F_E5M2 => C::CUDA_R_8F_E5M2,
    }
}

/// The data-type table's cuBLAS column as cuBLAS's `sys` enum.
const fn compute_type(c: BlasCompute) -> sys::cublasComputeType_t {
    use sys::cublasComputeType_t as C;
    match c {
        BlasCompute::F32 => C::CUBLAS_COMPUTE_32F,
        BlasCompute::F64 => C::CUBLAS_COMPUTE_64F,
        BlasCompute::I32 => C::CUBLAS_COMPUTE_32I,
    }
}

macro_rules! gemm_type {
    ($($t:ty),*) => {$(
        impl GemmType for $t {
            const DATA: sys::cudaDataType_t = data_type(<$t as DataTypes>::CUDA);
            const COMPUTE: sys::cublasComputeType_t = compute_type(required(<$t as DataTypes>::BLAS_COMPUTE));
        }
    )*};
}
gemm_type!(f32, f64, half::f16, half::bf16);

/// The shape arguments every GEMM entry point takes.
pub(in crate::libs::blas) struct GemmShape {
    pub trans_a: Transpose,
    pub trans_b: Transpose,
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub lda: c_int,
    pub ldb: c_int,
    pub ldc: c_int,
}

/// `cublasGemmEx`.
///
/// # Safety
/// (1) `h` is a live handle whose stream the op was fenced on; (2) `a`, `b` and `c` are live
/// device buffers of the current context covering `op(A)`, `op(B)` and `C` of shape `s`;
/// (3) `c` does not alias `a` or `b`; (4) `alpha` and `beta` point to host scalars of `T`'s
/// compute type (host pointer mode).
pub(in crate::libs::blas) unsafe fn gemm_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const c_void,
    b: *const c_void,
    beta: *const c_void,
    c: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller vouches for (1) to (4).
    unsafe {
        sys::cublasGemmEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            b,
            T::DATA,
            s.ldb,
            beta,
            c,
            T::DATA,
            s.ldc,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmEx")
}

/// `cublasGemmStridedBatchedEx`: `count` GEMMs whose operands lie `strides` elements apart.
///
/// # Safety
/// As [`gemm_ex`], for every one of the `count` GEMMs: the buffers cover
/// `stride * (count - 1)` plus one operand's span, and no two GEMMs write the same element of
/// `c`.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn gemm_strided_batched_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const c_void,
    b: *const c_void,
    beta: *const c_void,
    c: *mut c_void,
    strides: [i64; 3],
    count: c_int,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the buffers and the scalars.
    unsafe {
        sys::cublasGemmStridedBatchedEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            strides[0],
            b,
            T::DATA,
            s.ldb,
            strides[1],
            beta,
            c,
            T::DATA,
            s.ldc,
            strides[2],
            count,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmStridedBatchedEx")
}

/// `cublasGemmBatchedEx`: one GEMM per entry of the device arrays of pointers `a`, `b`, `c`.
///
/// # Safety
/// As [`gemm_ex`], for each entry: the three device arrays hold `count` pointers to live
/// buffers that cover one operand each; every `C` is distinct.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn gemm_batched_ex<T: GemmType>(
    h: H,
    s: &GemmShape,
    alpha: *const c_void,
    a: *const *const c_void,
    b: *const *const c_void,
    beta: *const c_void,
    c: *const *mut c_void,
    count: c_int,
) -> Result<()> {
    // SAFETY: the caller vouches for the handle, the arrays, the buffers and the scalars.
    unsafe {
        sys::cublasGemmBatchedEx(
            h,
            op(s.trans_a),
            op(s.trans_b),
            s.m,
            s.n,
            s.k,
            alpha,
            a,
            T::DATA,
            s.lda,
            b,
            T::DATA,
            s.ldb,
            beta,
            c,
            T::DATA,
            s.ldc,
            count,
            T::COMPUTE,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .check("cublasGemmBatchedEx")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_mirrors_carry_the_sys_discriminants() {
        use CudaType::*;
        for t in [R16F, R16BF, R32F, R64F, C32F, C64F, R8I, R8U, R16I, R16U, R32I, R32U, R64I, R64U] {
            assert_eq!(t as u32, data_type(t) as u32, "{t:?}");
        }
        for c in [BlasCompute::F32, BlasCompute::F64, BlasCompute::I32] {
            assert_eq!(c as u32, compute_type(c) as u32, "{c:?}");
        }
    }
}
