//! cuBLAS's GEMM entry points (`cublasGemm*Ex`), and the data-type table's cuBLAS columns.

use super::sealed::GemmType;
use super::{op, H};
use crate::error::Result;
use crate::libs::blas::{ComputeType, Transpose};
use crate::libs::dtype::{required, BlasCompute, DataTypes};
use crate::libs::Status;
use crate::memory::Complex;
use cudarc::cublas::sys;
use std::ffi::{c_int, c_void};

crate::libs::dtype::cuda_data_type!(fn data_type -> sys::cudaDataType_t);

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
gemm_type!(f32, f64, half::f16, half::bf16, Complex<f32>, Complex<f64>);

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
/// NVIDIA: [`cublasGemmEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmex)
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
/// NVIDIA: [`cublasGemmStridedBatchedEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmstridedbatchedex)
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
/// NVIDIA: [`cublasGemmBatchedEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmbatchedex)
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

/// A `cudaDataType` of the table as cuBLAS's enum.
pub(in crate::libs::blas) const fn ex_type(t: crate::libs::dtype::CudaType) -> sys::cudaDataType_t {
    data_type(t)
}

/// A [`ComputeType`] as cuBLAS's enum.
pub(in crate::libs::blas) fn ex_compute(c: ComputeType) -> sys::cublasComputeType_t {
    use sys::cublasComputeType_t as C;
    match c {
        ComputeType::F16 => C::CUBLAS_COMPUTE_16F,
        ComputeType::F32 => C::CUBLAS_COMPUTE_32F,
        ComputeType::F32Pedantic => C::CUBLAS_COMPUTE_32F_PEDANTIC,
        ComputeType::F32FastTf32 => C::CUBLAS_COMPUTE_32F_FAST_TF32,
        ComputeType::F32Fast16F => C::CUBLAS_COMPUTE_32F_FAST_16F,
        ComputeType::F32Fast16BF => C::CUBLAS_COMPUTE_32F_FAST_16BF,
        ComputeType::I32 => C::CUBLAS_COMPUTE_32I,
    }
}

/// `cublasGemmEx` with its own data types (`types`: A and B's, C's, the compute type), or
/// `cublasGemmStridedBatchedEx` when `batch` gives the element strides and the count.
///
/// NVIDIA: [`cublasGemmEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmex),
/// [`cublasGemmStridedBatchedEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmstridedbatchedex)
///
/// # Safety
/// (1) `h` is a live handle whose stream the op was fenced on; (2) `a`, `b` and `c` are live
/// device buffers of the current context of the given types, covering every operand of shape
/// `s` at the strides; (3) `c` aliases neither input and no two GEMMs write one element; (4)
/// `alpha` and `beta` point to host scalars of the compute type's scale type; (5) the types are
/// a combination cuBLAS's table has.
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::blas) unsafe fn gemm_ex_mixed(
    h: H,
    s: &GemmShape,
    (ab, out, compute): (sys::cudaDataType_t, sys::cudaDataType_t, sys::cublasComputeType_t),
    alpha: *const c_void,
    a: *const c_void,
    b: *const c_void,
    beta: *const c_void,
    c: *mut c_void,
    batch: Option<([i64; 3], c_int)>,
) -> Result<()> {
    let algo = sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let (ta, tb) = (op(s.trans_a), op(s.trans_b));
    match batch {
        // SAFETY: the caller vouches for (1) to (5).
        None => unsafe {
            sys::cublasGemmEx(
                h, ta, tb, s.m, s.n, s.k, alpha, a, ab, s.lda, b, ab, s.ldb, beta, c, out, s.ldc, compute, algo,
            )
        }
        .check("cublasGemmEx"),
        // SAFETY: as above, for every one of the `count` GEMMs.
        Some((st, count)) => unsafe {
            sys::cublasGemmStridedBatchedEx(
                h, ta, tb, s.m, s.n, s.k, alpha, a, ab, s.lda, st[0], b, ab, s.ldb, st[1], beta, c, out, s.ldc, st[2],
                count, compute, algo,
            )
        }
        .check("cublasGemmStridedBatchedEx"),
    }
}

/// `cublasGemmGroupedBatchedEx`'s host parameter arrays, one entry per group.
#[derive(Default)]
pub(in crate::libs::blas) struct GroupParams {
    pub trans_a: Vec<sys::cublasOperation_t>,
    pub trans_b: Vec<sys::cublasOperation_t>,
    pub m: Vec<c_int>,
    pub n: Vec<c_int>,
    pub k: Vec<c_int>,
    pub lda: Vec<c_int>,
    pub ldb: Vec<c_int>,
    pub ldc: Vec<c_int>,
    pub alpha: Vec<f32>,
    pub beta: Vec<f32>,
    pub size: Vec<c_int>,
}

impl GroupParams {
    pub(in crate::libs::blas) fn push(&mut self, s: &GemmShape, alpha: f32, beta: f32, size: c_int) {
        self.trans_a.push(op(s.trans_a));
        self.trans_b.push(op(s.trans_b));
        self.m.push(s.m);
        self.n.push(s.n);
        self.k.push(s.k);
        self.lda.push(s.lda);
        self.ldb.push(s.ldb);
        self.ldc.push(s.ldc);
        self.alpha.push(alpha);
        self.beta.push(beta);
        self.size.push(size);
    }
}

/// `cublasGemmGroupedBatchedEx`: `p.size[g]` GEMMs of group `g`'s shape and scalars, over the
/// device arrays of pointers `a`, `b`, `c` (the groups' problems one after another), computed in
/// f32.
///
/// NVIDIA: [`cublasGemmGroupedBatchedEx`](https://docs.nvidia.com/cuda/cublas/#cublasgemmgroupedbatchedex)
///
/// # Safety
/// (1) `h` is a live handle whose stream the op was fenced on; (2) the device arrays hold one
/// pointer per problem, to live buffers of `T` covering that problem's operands; (3) every `C`
/// is distinct and aliases no `A` or `B`; (4) every host array of `p` has one entry per group.
pub(in crate::libs::blas) unsafe fn gemm_grouped_batched_ex<T: GemmType>(
    h: H,
    p: &GroupParams,
    a: *const *const c_void,
    b: *const *const c_void,
    c: *const *mut c_void,
) -> Result<()> {
    let groups = p.size.len() as c_int;
    // SAFETY: the caller vouches for (1) to (4); the host arrays live across the call.
    unsafe {
        sys::cublasGemmGroupedBatchedEx(
            h,
            p.trans_a.as_ptr(),
            p.trans_b.as_ptr(),
            p.m.as_ptr(),
            p.n.as_ptr(),
            p.k.as_ptr(),
            p.alpha.as_ptr().cast(),
            a,
            T::DATA,
            p.lda.as_ptr(),
            b,
            T::DATA,
            p.ldb.as_ptr(),
            p.beta.as_ptr().cast(),
            c,
            T::DATA,
            p.ldc.as_ptr(),
            groups,
            p.size.as_ptr(),
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    }
    .check("cublasGemmGroupedBatchedEx")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compute_mirrors_carry_the_sys_discriminants() {
        for c in [BlasCompute::F32, BlasCompute::F64, BlasCompute::I32] {
            assert_eq!(c as u32, compute_type(c) as u32, "{c:?}");
        }
    }
}
