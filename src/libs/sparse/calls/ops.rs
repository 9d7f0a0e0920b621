//! cuSPARSE's compute entry points: SpMV, SpMM, SpGEMM, SpSV and the conversions.
//!
//! Every `unsafe fn` here shares one contract, stated once: (1) `h` is a live handle whose
//! stream the op was fenced on, with its context current; (2) every descriptor is live and
//! points at live device buffers of that context, sized and typed as the descriptor says;
//! (3) `alpha` and `beta` point to host scalars of the compute type `t`, aligned as CUDA
//! declares that type (16 bytes for `cuDoubleComplex`, which the library loads aligned);
//! (4) `buffer` is null where the call allows (a size query), else a device buffer of at least
//! the size the matching `_bufferSize` query returned, used by no other work until this one is
//! done.

use super::{data_type, op, DnMat, DnVec, SpGemm, SpMat, SpSv, BASE, H};
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::sparse::Transpose;
use crate::libs::Status;
use cudarc::cusparse::sys;
use std::ffi::{c_int, c_void};

/// The scalars and compute type of an op.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Scalars {
    pub alpha: *const c_void,
    pub beta: *const c_void,
    pub t: CudaType,
}

const SPMV: sys::cusparseSpMVAlg_t = sys::cusparseSpMVAlg_t::CUSPARSE_SPMV_ALG_DEFAULT;
const SPMM: sys::cusparseSpMMAlg_t = sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT;
const SPGEMM: sys::cusparseSpGEMMAlg_t = sys::cusparseSpGEMMAlg_t::CUSPARSE_SPGEMM_DEFAULT;
const SPSV: sys::cusparseSpSVAlg_t = sys::cusparseSpSVAlg_t::CUSPARSE_SPSV_ALG_DEFAULT;

/// `cusparseSpMV_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpMV_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmv)
pub(in crate::libs::sparse) unsafe fn spmv_size(
    h: H,
    t: Transpose,
    s: Scalars,
    a: SpMat,
    x: DnVec,
    y: DnVec,
) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpMV_bufferSize(h, op(t), s.alpha, a.0 as _, x.0 as _, s.beta, y.0, data_type(s.t), SPMV, &mut n)
    }
    .check("cusparseSpMV_bufferSize")?;
    Ok(n)
}

/// `cusparseSpMV`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpMV`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmv)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::sparse) unsafe fn spmv(
    h: H,
    t: Transpose,
    s: Scalars,
    a: SpMat,
    x: DnVec,
    y: DnVec,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSpMV(h, op(t), s.alpha, a.0 as _, x.0 as _, s.beta, y.0, data_type(s.t), SPMV, buffer) }
        .check("cusparseSpMV")
}

/// `cusparseSpMM_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpMM_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmm)
pub(in crate::libs::sparse) unsafe fn spmm_size(
    h: H,
    t: [Transpose; 2],
    s: Scalars,
    a: SpMat,
    b: DnMat,
    c: DnMat,
) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpMM_bufferSize(
            h,
            op(t[0]),
            op(t[1]),
            s.alpha,
            a.0 as _,
            b.0 as _,
            s.beta,
            c.0,
            data_type(s.t),
            SPMM,
            &mut n,
        )
    }
    .check("cusparseSpMM_bufferSize")?;
    Ok(n)
}

/// `cusparseSpMM`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpMM`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmm)
pub(in crate::libs::sparse) unsafe fn spmm(
    h: H,
    t: [Transpose; 2],
    s: Scalars,
    a: SpMat,
    b: DnMat,
    c: DnMat,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpMM(h, op(t[0]), op(t[1]), s.alpha, a.0 as _, b.0 as _, s.beta, c.0, data_type(s.t), SPMM, buffer)
    }
    .check("cusparseSpMM")
}

/// `cusparseSpGEMM_createDescr`.
///
/// NVIDIA: [`cusparseSpGEMM_createDescr`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemm)
pub(in crate::libs::sparse) fn spgemm_descr() -> Result<crate::libs::object::Owned<SpGemm>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusparseSpGEMM_createDescr(&mut d) }.check("cusparseSpGEMM_createDescr")?;
    Ok(crate::libs::object::Owned::new(SpGemm(d)))
}

/// The operands of one SpGEMM `C = alpha A B`.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct SpGemmArgs {
    pub h: H,
    pub s: Scalars,
    pub a: SpMat,
    pub b: SpMat,
    pub c: SpMat,
    pub d: SpGemm,
}

/// `cusparseSpGEMM_workEstimation`: with a null `buffer`, writes its size to `size`.
/// # Safety: the module's contract; `size` holds the buffer's size when `buffer` is not null.
///
/// NVIDIA: [`cusparseSpGEMM_workEstimation`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemm)
pub(in crate::libs::sparse) unsafe fn spgemm_work_estimation(
    g: SpGemmArgs,
    size: &mut usize,
    buffer: *mut c_void,
) -> Result<()> {
    let n = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMM_workEstimation(
            g.h,
            n,
            n,
            g.s.alpha,
            g.a.0 as _,
            g.b.0 as _,
            g.s.beta,
            g.c.0,
            data_type(g.s.t),
            SPGEMM,
            g.d.0,
            size,
            buffer,
        )
    }
    .check("cusparseSpGEMM_workEstimation")
}

/// `cusparseSpGEMM_compute`: with a null `buffer`, writes its size to `size`.
/// # Safety: the module's contract; the work estimation ran with its buffer, still live.
///
/// NVIDIA: [`cusparseSpGEMM_compute`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemm)
pub(in crate::libs::sparse) unsafe fn spgemm_compute(
    g: SpGemmArgs,
    size: &mut usize,
    buffer: *mut c_void,
) -> Result<()> {
    let n = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMM_compute(
            g.h,
            n,
            n,
            g.s.alpha,
            g.a.0 as _,
            g.b.0 as _,
            g.s.beta,
            g.c.0,
            data_type(g.s.t),
            SPGEMM,
            g.d.0,
            size,
            buffer,
        )
    }
    .check("cusparseSpGEMM_compute")
}

/// `cusparseSpGEMM_copy`.
/// # Safety: the module's contract; the compute phase ran, its buffers are still live, and `c`
/// points at buffers sized for the nonzeros it found.
///
/// NVIDIA: [`cusparseSpGEMM_copy`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemm)
pub(in crate::libs::sparse) unsafe fn spgemm_copy(g: SpGemmArgs) -> Result<()> {
    let n = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMM_copy(
            g.h,
            n,
            n,
            g.s.alpha,
            g.a.0 as _,
            g.b.0 as _,
            g.s.beta,
            g.c.0,
            data_type(g.s.t),
            SPGEMM,
            g.d.0,
        )
    }
    .check("cusparseSpGEMM_copy")
}

/// `cusparseSpSV_createDescr`.
///
/// NVIDIA: [`cusparseSpSV_createDescr`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsv)
pub(in crate::libs::sparse) fn spsv_descr() -> Result<crate::libs::object::Owned<SpSv>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusparseSpSV_createDescr(&mut d) }.check("cusparseSpSV_createDescr")?;
    Ok(crate::libs::object::Owned::new(SpSv(d)))
}

/// `cusparseSpSV_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpSV_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsv)
pub(in crate::libs::sparse) unsafe fn spsv_size(
    h: H,
    t: Transpose,
    s: Scalars,
    a: SpMat,
    x: DnVec,
    y: DnVec,
    d: SpSv,
) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpSV_bufferSize(h, op(t), s.alpha, a.0 as _, x.0 as _, y.0, data_type(s.t), SPSV, d.0, &mut n)
    }
    .check("cusparseSpSV_bufferSize")?;
    Ok(n)
}

/// `cusparseSpSV_analysis`. # Safety: the module's contract; `buffer` stays live and unused by
/// other work for as long as `d` is solved with.
///
/// NVIDIA: [`cusparseSpSV_analysis`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsv)
#[allow(clippy::too_many_arguments)]
pub(in crate::libs::sparse) unsafe fn spsv_analysis(
    h: H,
    t: Transpose,
    s: Scalars,
    a: SpMat,
    x: DnVec,
    y: DnVec,
    d: SpSv,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSpSV_analysis(h, op(t), s.alpha, a.0 as _, x.0 as _, y.0, data_type(s.t), SPSV, d.0, buffer) }
        .check("cusparseSpSV_analysis")
}

/// `cusparseSpSV_solve`. # Safety: the module's contract; `d` was analysed for `a`.
///
/// NVIDIA: [`cusparseSpSV_solve`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsv)
pub(in crate::libs::sparse) unsafe fn spsv_solve(
    h: H,
    t: Transpose,
    s: Scalars,
    a: SpMat,
    x: DnVec,
    y: DnVec,
    d: SpSv,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSpSV_solve(h, op(t), s.alpha, a.0 as _, x.0 as _, y.0, data_type(s.t), SPSV, d.0) }
        .check("cusparseSpSV_solve")
}

/// Whether the loaded cuSPARSE has `cusparseSpSV_updateMatrix` (the cuSPARSE of CUDA 12.1 on).
pub(in crate::libs::sparse) fn has_spsv_update() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::has_symbol(&FOUND, b"cusparseSpSV_updateMatrix\0")
}

/// `cusparseSpSV_updateMatrix` with `CUSPARSE_SPSV_UPDATE_GENERAL`: replaces the values `d`'s
/// analysis holds with `values`, enqueued on the handle's stream; the structure stays the one
/// analysed. # Safety: the module's contract; `d` was analysed, `values` is a device array of
/// the analysed matrix's nonzeros (its values array's layout and type), and the library has
/// the entry point ([`has_spsv_update`]).
///
/// NVIDIA: [`cusparseSpSV_updateMatrix`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsv)
pub(in crate::libs::sparse) unsafe fn spsv_update(h: H, d: SpSv, values: *mut c_void) -> Result<()> {
    let general = sys::cusparseSpSVUpdate_t::CUSPARSE_SPSV_UPDATE_GENERAL;
    // SAFETY: (1) the caller keeps the module's contract and the duties above, so `values`
    // holds as many elements as the analysed matrix's nonzeros; (2) `general` is a value the
    // call takes, reading the whole values array.
    unsafe { sys::cusparseSpSV_updateMatrix(h, d.0, values, general) }.check("cusparseSpSV_updateMatrix")
}

/// The raw arrays of a 32-bit CSR matrix and of its CSC output.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Csr2Csc {
    pub m: c_int,
    pub n: c_int,
    pub nnz: c_int,
    pub csr: [*mut c_void; 3],
    pub csc: [*mut c_void; 3],
    pub t: CudaType,
}

/// `cusparseCsr2cscEx2`, or its size query when `size` is `Some`.
/// # Safety: the module's contract for the raw arrays in `p` (offsets, indices, values each).
///
/// NVIDIA: [`cusparseCsr2cscEx2_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsecsr2cscex2),
/// [`cusparseCsr2cscEx2`](https://docs.nvidia.com/cuda/cusparse/#cusparsecsr2cscex2)
pub(in crate::libs::sparse) unsafe fn csr2csc(
    h: H,
    p: &Csr2Csc,
    size: Option<&mut usize>,
    buffer: *mut c_void,
) -> Result<()> {
    let action = sys::cusparseAction_t::CUSPARSE_ACTION_NUMERIC;
    let alg = sys::cusparseCsr2CscAlg_t::CUSPARSE_CSR2CSC_ALG1;
    let [ro, ci, v] = p.csr;
    let [co, ri, cv] = p.csc;
    let t = data_type(p.t);
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        match size {
            Some(size) => sys::cusparseCsr2cscEx2_bufferSize(
                h, p.m, p.n, p.nnz, v as _, ro as _, ci as _, cv, co as _, ri as _, t, action, BASE, alg, size,
            )
            .check("cusparseCsr2cscEx2_bufferSize"),
            None => sys::cusparseCsr2cscEx2(
                h, p.m, p.n, p.nnz, v as _, ro as _, ci as _, cv, co as _, ri as _, t, action, BASE, alg, buffer,
            )
            .check("cusparseCsr2cscEx2"),
        }
    }
}

const D2S: sys::cusparseDenseToSparseAlg_t = sys::cusparseDenseToSparseAlg_t::CUSPARSE_DENSETOSPARSE_ALG_DEFAULT;
const S2D: sys::cusparseSparseToDenseAlg_t = sys::cusparseSparseToDenseAlg_t::CUSPARSE_SPARSETODENSE_ALG_DEFAULT;

/// `cusparseDenseToSparse_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseDenseToSparse_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsedensetosparse)
pub(in crate::libs::sparse) unsafe fn dense_to_sparse_size(h: H, a: DnMat, b: SpMat) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseDenseToSparse_bufferSize(h, a.0 as _, b.0, D2S, &mut n) }
        .check("cusparseDenseToSparse_bufferSize")?;
    Ok(n)
}

/// `cusparseDenseToSparse_analysis` (`convert: false`) or `_convert`.
/// # Safety: the module's contract; for `convert`, the analysis ran with the same buffer.
///
/// NVIDIA: [`cusparseDenseToSparse_convert`](https://docs.nvidia.com/cuda/cusparse/#cusparsedensetosparse),
/// [`cusparseDenseToSparse_analysis`](https://docs.nvidia.com/cuda/cusparse/#cusparsedensetosparse)
pub(in crate::libs::sparse) unsafe fn dense_to_sparse(
    h: H,
    a: DnMat,
    b: SpMat,
    buffer: *mut c_void,
    convert: bool,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        if convert {
            sys::cusparseDenseToSparse_convert(h, a.0 as _, b.0, D2S, buffer).check("cusparseDenseToSparse_convert")
        } else {
            sys::cusparseDenseToSparse_analysis(h, a.0 as _, b.0, D2S, buffer).check("cusparseDenseToSparse_analysis")
        }
    }
}

/// `cusparseSparseToDense_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSparseToDense_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsesparsetodense)
pub(in crate::libs::sparse) unsafe fn sparse_to_dense_size(h: H, a: SpMat, b: DnMat) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSparseToDense_bufferSize(h, a.0 as _, b.0, S2D, &mut n) }
        .check("cusparseSparseToDense_bufferSize")?;
    Ok(n)
}

/// `cusparseSparseToDense`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSparseToDense`](https://docs.nvidia.com/cuda/cusparse/#cusparsesparsetodense)
pub(in crate::libs::sparse) unsafe fn sparse_to_dense(h: H, a: SpMat, b: DnMat, buffer: *mut c_void) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSparseToDense(h, a.0 as _, b.0, S2D, buffer) }.check("cusparseSparseToDense")
}
