//! cuSPARSE's remaining entry points: SpGEMM reuse, SDDMM, SpSM, the sparse-vector ops and
//! CSR ↔ COO.
//!
//! Every `unsafe fn` here shares the contract of the sibling `ops` module: (1) `h` is a live
//! handle whose stream the op was fenced on, with its context current; (2) every descriptor is
//! live and points at live device buffers of that context, sized and typed as it says; (3)
//! `alpha` and `beta` point to host scalars of the compute type, aligned as CUDA declares it;
//! (4) a buffer is null where the call allows (a size query), else a device buffer of at least
//! the size its query returned, used by no other work until this one is done.

use super::{data_type, op, DnMat, DnVec, SpGemm, SpMat, SpSm, SpVec, H};
use crate::error::Result;
use crate::libs::sparse::Transpose;
use crate::libs::Status;
use cudarc::cusparse::sys;
use std::ffi::c_void;

use super::ops::Scalars;

const N: sys::cusparseOperation_t = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
const SPGEMM: sys::cusparseSpGEMMAlg_t = sys::cusparseSpGEMMAlg_t::CUSPARSE_SPGEMM_DEFAULT;
const SDDMM: sys::cusparseSDDMMAlg_t = sys::cusparseSDDMMAlg_t::CUSPARSE_SDDMM_ALG_DEFAULT;
const SPSM: sys::cusparseSpSMAlg_t = sys::cusparseSpSMAlg_t::CUSPARSE_SPSM_ALG_DEFAULT;

/// The operands of a reusable SpGEMM `C = A B` (non-transposed).
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Reuse {
    pub h: H,
    pub a: SpMat,
    pub b: SpMat,
    pub c: SpMat,
    pub d: SpGemm,
}

/// `cusparseSpGEMMreuse_workEstimation`: with a null `buffer`, writes its size to `size`.
/// # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpGEMMreuse_workEstimation`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemmreuse)
pub(in crate::libs::sparse) unsafe fn reuse_work_estimation(
    g: Reuse,
    size: &mut usize,
    buffer: *mut c_void,
) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMMreuse_workEstimation(g.h, N, N, g.a.0 as _, g.b.0 as _, g.c.0, SPGEMM, g.d.0, size, buffer)
    }
    .check("cusparseSpGEMMreuse_workEstimation")
}

/// `cusparseSpGEMMreuse_nnz`: with null buffers, writes their three sizes to `sizes`.
/// # Safety: the module's contract; the work estimation ran with its buffer, still live.
///
/// NVIDIA: [`cusparseSpGEMMreuse_nnz`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemmreuse)
pub(in crate::libs::sparse) unsafe fn reuse_nnz(
    g: Reuse,
    sizes: &mut [usize; 3],
    buffers: [*mut c_void; 3],
) -> Result<()> {
    let [s2, s3, s4] = sizes;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMMreuse_nnz(
            g.h, N, N, g.a.0 as _, g.b.0 as _, g.c.0, SPGEMM, g.d.0, s2, buffers[0], s3, buffers[1], s4, buffers[2],
        )
    }
    .check("cusparseSpGEMMreuse_nnz")
}

/// `cusparseSpGEMMreuse_copy`: with a null `buffer`, writes its size to `size`.
/// # Safety: the module's contract; the nnz phase ran, its buffers are live, and `c` points at
/// buffers sized for the nonzeros it found.
///
/// NVIDIA: [`cusparseSpGEMMreuse_copy`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemmreuse)
pub(in crate::libs::sparse) unsafe fn reuse_copy(g: Reuse, size: &mut usize, buffer: *mut c_void) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseSpGEMMreuse_copy(g.h, N, N, g.a.0 as _, g.b.0 as _, g.c.0, SPGEMM, g.d.0, size, buffer) }
        .check("cusparseSpGEMMreuse_copy")
}

/// `cusparseSpGEMMreuse_compute`.
/// # Safety: the module's contract; the copy phase ran, and the nnz phase's last buffer and the
/// copy phase's buffer are still live.
///
/// NVIDIA: [`cusparseSpGEMMreuse_compute`](https://docs.nvidia.com/cuda/cusparse/#cusparsespgemmreuse)
pub(in crate::libs::sparse) unsafe fn reuse_compute(g: Reuse, s: Scalars) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpGEMMreuse_compute(
            g.h,
            N,
            N,
            s.alpha,
            g.a.0 as _,
            g.b.0 as _,
            s.beta,
            g.c.0,
            data_type(s.t),
            SPGEMM,
            g.d.0,
        )
    }
    .check("cusparseSpGEMMreuse_compute")
}

/// The operands of an SDDMM `C = alpha (op(A) op(B)) ∘ spy(C) + beta C`.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Sddmm {
    pub h: H,
    pub t: [Transpose; 2],
    pub s: Scalars,
    pub a: DnMat,
    pub b: DnMat,
    pub c: SpMat,
}

/// `cusparseSDDMM_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSDDMM_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsesddmm)
pub(in crate::libs::sparse) unsafe fn sddmm_size(p: Sddmm) -> Result<usize> {
    let mut n = 0;
    let (ta, tb, t) = (op(p.t[0]), op(p.t[1]), data_type(p.s.t));
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSDDMM_bufferSize(p.h, ta, tb, p.s.alpha, p.a.0 as _, p.b.0 as _, p.s.beta, p.c.0, t, SDDMM, &mut n)
    }
    .check("cusparseSDDMM_bufferSize")?;
    Ok(n)
}

/// `cusparseSDDMM_preprocess`, then `cusparseSDDMM`, with the same buffer.
/// # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSDDMM_preprocess`](https://docs.nvidia.com/cuda/cusparse/#cusparsesddmm),
/// [`cusparseSDDMM`](https://docs.nvidia.com/cuda/cusparse/#cusparsesddmm)
pub(in crate::libs::sparse) unsafe fn sddmm(p: Sddmm, buffer: *mut c_void) -> Result<()> {
    let (ta, tb, t) = (op(p.t[0]), op(p.t[1]), data_type(p.s.t));
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSDDMM_preprocess(
            p.h, ta, tb, p.s.alpha, p.a.0 as _, p.b.0 as _, p.s.beta, p.c.0, t, SDDMM, buffer,
        )
        .check("cusparseSDDMM_preprocess")?;
        sys::cusparseSDDMM(p.h, ta, tb, p.s.alpha, p.a.0 as _, p.b.0 as _, p.s.beta, p.c.0, t, SDDMM, buffer)
            .check("cusparseSDDMM")
    }
}

/// `cusparseSpSM_createDescr`.
///
/// NVIDIA: [`cusparseSpSM_createDescr`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsm)
pub(in crate::libs::sparse) fn spsm_descr() -> Result<crate::libs::object::Owned<SpSm>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    unsafe { sys::cusparseSpSM_createDescr(&mut d) }.check("cusparseSpSM_createDescr")?;
    Ok(crate::libs::object::Owned::new(SpSm(d)))
}

/// The operands of a triangular solve with several right-hand sides, `op(A) C = alpha B`.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Spsm {
    pub h: H,
    pub t: Transpose,
    pub s: Scalars,
    pub a: SpMat,
    pub b: DnMat,
    pub c: DnMat,
    pub d: SpSm,
}

/// `cusparseSpSM_bufferSize`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseSpSM_bufferSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsm)
pub(in crate::libs::sparse) unsafe fn spsm_size(p: Spsm) -> Result<usize> {
    let mut n = 0;
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpSM_bufferSize(
            p.h,
            op(p.t),
            N,
            p.s.alpha,
            p.a.0 as _,
            p.b.0 as _,
            p.c.0,
            data_type(p.s.t),
            SPSM,
            p.d.0,
            &mut n,
        )
    }
    .check("cusparseSpSM_bufferSize")?;
    Ok(n)
}

/// `cusparseSpSM_analysis`. # Safety: the module's contract; `buffer` stays live and unused
/// by other work for as long as `p.d` is solved with.
///
/// NVIDIA: [`cusparseSpSM_analysis`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsm)
pub(in crate::libs::sparse) unsafe fn spsm_analysis(p: Spsm, buffer: *mut c_void) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpSM_analysis(
            p.h,
            op(p.t),
            N,
            p.s.alpha,
            p.a.0 as _,
            p.b.0 as _,
            p.c.0,
            data_type(p.s.t),
            SPSM,
            p.d.0,
            buffer,
        )
    }
    .check("cusparseSpSM_analysis")
}

/// `cusparseSpSM_solve`. # Safety: the module's contract; `p.d` was analysed for `p.a`.
///
/// NVIDIA: [`cusparseSpSM_solve`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsm)
pub(in crate::libs::sparse) unsafe fn spsm_solve(p: Spsm) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe {
        sys::cusparseSpSM_solve(
            p.h,
            op(p.t),
            N,
            p.s.alpha,
            p.a.0 as _,
            p.b.0 as _,
            p.c.0,
            data_type(p.s.t),
            SPSM,
            p.d.0,
        )
    }
    .check("cusparseSpSM_solve")
}

/// Whether the loaded cuSPARSE has `cusparseSpSM_updateMatrix` (the cuSPARSE of CUDA 12.4 on).
pub(in crate::libs::sparse) fn has_spsm_update() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::has_symbol(&FOUND, b"cusparseSpSM_updateMatrix\0")
}

/// `cusparseSpSM_updateMatrix` with `CUSPARSE_SPSM_UPDATE_GENERAL`: replaces the values `d`'s
/// analysis holds with `values`, enqueued on the handle's stream; the structure stays the one
/// analysed. # Safety: the module's contract; `d` was analysed, `values` is a device array of
/// the analysed matrix's nonzeros (its values array's layout and type), and the library has
/// the entry point ([`has_spsm_update`]).
///
/// NVIDIA: [`cusparseSpSM_updateMatrix`](https://docs.nvidia.com/cuda/cusparse/#cusparsespsm)
pub(in crate::libs::sparse) unsafe fn spsm_update(h: H, d: SpSm, values: *mut c_void) -> Result<()> {
    let general = sys::cusparseSpSMUpdate_t::CUSPARSE_SPSM_UPDATE_GENERAL;
    // SAFETY: (1) the caller keeps the module's contract and the duties above, so `values`
    // holds as many elements as the analysed matrix's nonzeros; (2) `general` is a value the
    // call takes, reading the whole values array.
    unsafe { sys::cusparseSpSM_updateMatrix(h, d.0, values, general) }.check("cusparseSpSM_updateMatrix")
}

/// `cusparseAxpby`: `y = alpha x + beta y`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseAxpby`](https://docs.nvidia.com/cuda/cusparse/#cusparseaxpby)
pub(in crate::libs::sparse) unsafe fn axpby(h: H, s: Scalars, x: SpVec, y: DnVec) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseAxpby(h, s.alpha, x.0 as _, s.beta, y.0) }.check("cusparseAxpby")
}

/// `cusparseGather`: `x.values[i] = y[x.indices[i]]`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseGather`](https://docs.nvidia.com/cuda/cusparse/#cusparsegather)
pub(in crate::libs::sparse) unsafe fn gather(h: H, y: DnVec, x: SpVec) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseGather(h, y.0 as _, x.0) }.check("cusparseGather")
}

/// `cusparseScatter`: `y[x.indices[i]] = x.values[i]`. # Safety: the module's contract.
///
/// NVIDIA: [`cusparseScatter`](https://docs.nvidia.com/cuda/cusparse/#cusparsescatter)
pub(in crate::libs::sparse) unsafe fn scatter(h: H, x: SpVec, y: DnVec) -> Result<()> {
    // SAFETY: the caller keeps the module's contract.
    unsafe { sys::cusparseScatter(h, x.0 as _, y.0) }.check("cusparseScatter")
}

/// `cusparseXcsr2coo` (`coo` false: expands `rows + 1` CSR offsets into `nnz` COO row
/// indices) or `cusparseXcoo2csr` (`coo` true: compresses `nnz` row indices sorted by row into
/// `rows + 1` offsets). # Safety: (1) of the module's contract; `from` and `to` are live device
/// arrays of `i32` of the current context holding the counts named.
///
/// NVIDIA: [`cusparseXcsr2coo`](https://docs.nvidia.com/cuda/cusparse/#cusparsexcsr2coo),
/// [`cusparseXcoo2csr`](https://docs.nvidia.com/cuda/cusparse/#cusparsexcoo2csr)
pub(in crate::libs::sparse) unsafe fn rows_convert(
    h: H,
    to_csr: bool,
    from: *const i32,
    nnz: i32,
    rows: i32,
    to: *mut i32,
) -> Result<()> {
    let base = super::BASE;
    // SAFETY: the caller keeps the contract above.
    unsafe {
        if to_csr {
            sys::cusparseXcoo2csr(h, from, nnz, rows, to, base).check("cusparseXcoo2csr")
        } else {
            sys::cusparseXcsr2coo(h, from, nnz, rows, to, base).check("cusparseXcsr2coo")
        }
    }
}

/// Makes `a` (a CSR or COO descriptor) a strided batch of `count` matrices:
/// `cusparseCsrSetStridedBatch` (offsets `major` apart, column indices and values `entries`
/// apart) or `cusparseCooSetStridedBatch` (all arrays `entries` apart). # Safety: (2) of the
/// module's contract for every matrix of the batch.
///
/// NVIDIA: [`cusparseCsrSetStridedBatch`](https://docs.nvidia.com/cuda/cusparse/#cusparsecsrsetstridedbatch),
/// [`cusparseCooSetStridedBatch`](https://docs.nvidia.com/cuda/cusparse/#cusparsecoosetstridedbatch)
pub(in crate::libs::sparse) unsafe fn sp_mat_batch(
    a: SpMat,
    coo: bool,
    count: i32,
    major: i64,
    entries: i64,
) -> Result<()> {
    // SAFETY: the caller keeps the contract above.
    unsafe {
        if coo {
            sys::cusparseCooSetStridedBatch(a.0, count, entries).check("cusparseCooSetStridedBatch")
        } else {
            sys::cusparseCsrSetStridedBatch(a.0, count, major, entries).check("cusparseCsrSetStridedBatch")
        }
    }
}

/// Makes `m` a strided batch of `count` dense matrices `stride` elements apart. # Safety: (2)
/// of the module's contract for every matrix of the batch.
///
/// NVIDIA: [`cusparseDnMatSetStridedBatch`](https://docs.nvidia.com/cuda/cusparse/#cusparsednmatsetstridedbatch)
pub(in crate::libs::sparse) unsafe fn dn_mat_batch(m: DnMat, count: i32, stride: i64) -> Result<()> {
    // SAFETY: the caller keeps the contract above.
    unsafe { sys::cusparseDnMatSetStridedBatch(m.0, count, stride) }.check("cusparseDnMatSetStridedBatch")
}
