//! The cuSPARSE call layer: every cuSPARSE call cusched makes, each a thin wrapper that returns
//! `Result` with the call named. The only code in the crate that touches `cudarc::cusparse::sys`.
//!
//! Every wrapper needs the handle's context current on the calling thread (the op path binds it)
//! and the handle and descriptors used by one thread at a time (`Sparse` methods take
//! `&mut self`). Pointer arguments are cast with `as _`: CUDA 13 takes `const` descriptors where
//! older headers took mutable ones, and the casts keep one source for both.

use super::{Fill, IndexKind, Transpose};
use crate::backend::cuda::CuStream;
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::object::{Owned, RawObject};
use crate::libs::Status;
use cudarc::cusparse::sys;
use std::ffi::c_void;

pub(crate) use sys::cusparseHandle_t as H;

impl Status for sys::cusparseStatus_t {
    const SUCCESS: Self = sys::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS;
}

/// Whether libcusparse loads.
pub(in crate::libs::sparse) fn is_present() -> bool {
    // SAFETY: only tries to dlopen the library by name and drops the handle; no preconditions.
    unsafe { sys::is_culib_present() }
}

/// Whether the loaded cuSPARSE exports `symbol` (NUL-terminated): entry points NVIDIA added
/// after cuSPARSE 12.0 are looked up before their first call, as calling a missing one through
/// cudarc panics. Looked up once per symbol, the answers kept in `found`.
pub(in crate::libs::sparse) fn has_symbol(found: &std::sync::OnceLock<bool>, symbol: &[u8]) -> bool {
    *found.get_or_init(|| {
        if !is_present() {
            return false;
        }
        // SAFETY: (1) the library is present (checked above), so `culib` loads it rather than
        // panicking; (2) the symbol is only looked up, never called through this pointer.
        unsafe { sys::culib().get::<unsafe extern "C" fn()>(symbol).is_ok() }
    })
}

crate::libs::dtype::cuda_data_type!(pub(in crate::libs::sparse) fn data_type -> sys::cudaDataType);

pub(in crate::libs::sparse) fn index_type(i: IndexKind) -> sys::cusparseIndexType_t {
    match i {
        IndexKind::I32 => sys::cusparseIndexType_t::CUSPARSE_INDEX_32I,
        IndexKind::I64 => sys::cusparseIndexType_t::CUSPARSE_INDEX_64I,
    }
}

pub(in crate::libs::sparse) fn op(t: Transpose) -> sys::cusparseOperation_t {
    match t {
        Transpose::No => sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
        Transpose::Yes => sys::cusparseOperation_t::CUSPARSE_OPERATION_TRANSPOSE,
        Transpose::Conj => sys::cusparseOperation_t::CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE,
    }
}

pub(in crate::libs::sparse) const BASE: sys::cusparseIndexBase_t = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;

macro_rules! raw_object {
    ($(#[$doc:meta])* $name:ident($raw:ty) => $destroy:ident $(, $synchronizes:literal)?) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name(pub(in crate::libs::sparse) $raw);

        // SAFETY: cuSPARSE handles and descriptors may be used from any thread, one at a time.
        unsafe impl RawObject for $name {
            const DESTROY: &'static str = stringify!($destroy);
            $(const SYNCHRONIZES: bool = $synchronizes;)?
            type Status = sys::cusparseStatus_t;

            unsafe fn destroy(self) -> sys::cusparseStatus_t {
                // SAFETY: the caller keeps `destroy`'s contract.
                unsafe { sys::$destroy(self.0 as _) }
            }
        }
    };
}

raw_object!(
    /// A cuSPARSE handle.
    Handle(sys::cusparseHandle_t) => cusparseDestroy, true
);
raw_object!(
    /// A sparse matrix descriptor (host memory only; it points at the matrix's buffers).
    SpMat(sys::cusparseSpMatDescr_t) => cusparseDestroySpMat
);
raw_object!(
    /// A dense vector descriptor.
    DnVec(sys::cusparseDnVecDescr_t) => cusparseDestroyDnVec
);
raw_object!(
    /// A dense matrix descriptor.
    DnMat(sys::cusparseDnMatDescr_t) => cusparseDestroyDnMat
);
raw_object!(
    /// The state of one SpGEMM between its phases.
    SpGemm(sys::cusparseSpGEMMDescr_t) => cusparseSpGEMM_destroyDescr
);
raw_object!(
    /// A triangular solve's analysis.
    SpSv(sys::cusparseSpSVDescr_t) => cusparseSpSV_destroyDescr
);
raw_object!(
    /// A triangular solve's analysis, for several right-hand sides.
    SpSm(sys::cusparseSpSMDescr_t) => cusparseSpSM_destroyDescr
);
raw_object!(
    /// A sparse vector descriptor.
    SpVec(sys::cusparseSpVecDescr_t) => cusparseDestroySpVec
);

/// `cusparseCreate`, then `cusparseSetStream`.
///
/// NVIDIA: [`cusparseCreate`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreate),
/// [`cusparseSetStream`](https://docs.nvidia.com/cuda/cusparse/#cusparsesetstream)
///
/// # Safety
/// `stream` is a live stream of the current context that outlives the handle.
pub(in crate::libs::sparse) unsafe fn create_handle(stream: CuStream) -> Result<Owned<Handle>> {
    let mut h = std::ptr::null_mut();
    // SAFETY: `h` is a valid out-pointer.
    unsafe { sys::cusparseCreate(&mut h) }.check("cusparseCreate")?;
    let owned = Owned::new(Handle(h));
    // SAFETY: a live handle; the caller vouches for the stream.
    unsafe { sys::cusparseSetStream(h, stream as _) }.check("cusparseSetStream")?;
    Ok(owned)
}

/// What a compressed or coordinate descriptor is made of.
pub(in crate::libs::sparse) struct SpMatParts {
    pub format: super::matrix::Format,
    pub rows: i64,
    pub cols: i64,
    pub nnz: i64,
    pub major: *mut c_void,
    pub minor: *mut c_void,
    pub values: *mut c_void,
    pub index: IndexKind,
    pub value: CudaType,
    /// The block size of BSR and Blocked-ELL (0 for the others); `nnz` counts blocks for BSR
    /// and is the value array's columns for Blocked-ELL.
    pub block: i64,
}

/// `cusparseCreateCsr`, `cusparseCreateCsc`, `cusparseCreateCoo`, `cusparseCreateBsr` (blocks
/// stored row-major) or `cusparseCreateBlockedEll`.
///
/// NVIDIA: [`cusparseCreateCsr`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatecsr),
/// [`cusparseCreateCsc`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatecsc),
/// [`cusparseCreateCoo`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatecoo),
/// [`cusparseCreateBsr`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatebsr),
/// [`cusparseCreateBlockedEll`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreateblockedell)
///
/// # Safety
/// The pointers are null (for a matrix whose buffers are set later) or live device buffers of the
/// current context holding what the format needs for these sizes.
pub(in crate::libs::sparse) unsafe fn create_sp_mat(p: &SpMatParts) -> Result<Owned<SpMat>> {
    use super::matrix::Format;
    let mut d = std::ptr::null_mut();
    let (it, vt) = (index_type(p.index), data_type(p.value));
    // SAFETY: `d` is a valid out-pointer; the caller vouches for the buffers.
    let (status, call) = unsafe {
        match p.format {
            Format::Csr => (
                sys::cusparseCreateCsr(&mut d, p.rows, p.cols, p.nnz, p.major, p.minor, p.values, it, it, BASE, vt),
                "cusparseCreateCsr",
            ),
            Format::Csc => (
                sys::cusparseCreateCsc(&mut d, p.rows, p.cols, p.nnz, p.major, p.minor, p.values, it, it, BASE, vt),
                "cusparseCreateCsc",
            ),
            Format::Coo => (
                sys::cusparseCreateCoo(&mut d, p.rows, p.cols, p.nnz, p.major, p.minor, p.values, it, BASE, vt),
                "cusparseCreateCoo",
            ),
            Format::Bsr => {
                let (b, row) = (p.block, sys::cusparseOrder_t::CUSPARSE_ORDER_ROW);
                let (br, bc) = (p.rows / b, p.cols / b);
                (
                    sys::cusparseCreateBsr(
                        &mut d, br, bc, p.nnz, b, b, p.major, p.minor, p.values, it, it, BASE, vt, row,
                    ),
                    "cusparseCreateBsr",
                )
            }
            Format::BlockedEll => (
                sys::cusparseCreateBlockedEll(&mut d, p.rows, p.cols, p.block, p.nnz, p.minor, p.values, it, BASE, vt),
                "cusparseCreateBlockedEll",
            ),
        }
    };
    status.check(call)?;
    Ok(Owned::new(SpMat(d)))
}

/// `cusparseCreateSpVec`.
///
/// NVIDIA: [`cusparseCreateSpVec`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatespvec)
///
/// # Safety
/// `indices` and `values` are live device buffers of the current context holding at least
/// `nnz` elements of the index type and of `t`.
pub(in crate::libs::sparse) unsafe fn create_sp_vec(
    size: i64,
    nnz: i64,
    indices: *mut c_void,
    values: *mut c_void,
    index: IndexKind,
    t: CudaType,
) -> Result<Owned<SpVec>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the caller vouches for the buffers.
    unsafe { sys::cusparseCreateSpVec(&mut d, size, nnz, indices, values, index_type(index), BASE, data_type(t)) }
        .check("cusparseCreateSpVec")?;
    Ok(Owned::new(SpVec(d)))
}

/// `cusparseCreateDnVec`.
///
/// NVIDIA: [`cusparseCreateDnVec`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatednvec)
///
/// # Safety
/// `values` is a live device buffer of the current context with at least `n` elements of `t`.
pub(in crate::libs::sparse) unsafe fn create_dn_vec(n: i64, values: *mut c_void, t: CudaType) -> Result<Owned<DnVec>> {
    let mut d = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the caller vouches for the buffer.
    unsafe { sys::cusparseCreateDnVec(&mut d, n, values, data_type(t)) }.check("cusparseCreateDnVec")?;
    Ok(Owned::new(DnVec(d)))
}

/// `cusparseCreateDnMat`, column-major.
///
/// NVIDIA: [`cusparseCreateDnMat`](https://docs.nvidia.com/cuda/cusparse/#cusparsecreatednmat)
///
/// # Safety
/// `values` is a live device buffer of the current context spanning a `rows x cols` matrix
/// with leading dimension `ld`, column-major or, with `row_major`, row-major.
pub(in crate::libs::sparse) unsafe fn create_dn_mat(
    rows: i64,
    cols: i64,
    ld: i64,
    values: *mut c_void,
    t: CudaType,
    row_major: bool,
) -> Result<Owned<DnMat>> {
    let mut d = std::ptr::null_mut();
    let order =
        if row_major { sys::cusparseOrder_t::CUSPARSE_ORDER_ROW } else { sys::cusparseOrder_t::CUSPARSE_ORDER_COL };
    // SAFETY: a valid out-pointer; the caller vouches for the buffer.
    unsafe { sys::cusparseCreateDnMat(&mut d, rows, cols, ld, values, data_type(t), order) }
        .check("cusparseCreateDnMat")?;
    Ok(Owned::new(DnMat(d)))
}

/// Sets the triangle a triangular solve reads, and whether its diagonal is implicit.
///
/// NVIDIA: [`cusparseSpMatSetAttribute`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmatsetattribute)
pub(in crate::libs::sparse) fn set_triangle(a: SpMat, fill: Fill, unit: bool) -> Result<()> {
    let mut f = match fill {
        Fill::Lower => sys::cusparseFillMode_t::CUSPARSE_FILL_MODE_LOWER,
        Fill::Upper => sys::cusparseFillMode_t::CUSPARSE_FILL_MODE_UPPER,
    };
    let mut d = if unit {
        sys::cusparseDiagType_t::CUSPARSE_DIAG_TYPE_UNIT
    } else {
        sys::cusparseDiagType_t::CUSPARSE_DIAG_TYPE_NON_UNIT
    };
    let size = std::mem::size_of_val(&f);
    // SAFETY: a live descriptor; `f` is the attribute's type, `size` its size.
    unsafe {
        sys::cusparseSpMatSetAttribute(
            a.0,
            sys::cusparseSpMatAttribute_t::CUSPARSE_SPMAT_FILL_MODE,
            (&mut f as *mut sys::cusparseFillMode_t).cast(),
            size,
        )
    }
    .check("cusparseSpMatSetAttribute")?;
    let size = std::mem::size_of_val(&d);
    // SAFETY: as above, for the diagonal type.
    unsafe {
        sys::cusparseSpMatSetAttribute(
            a.0,
            sys::cusparseSpMatAttribute_t::CUSPARSE_SPMAT_DIAG_TYPE,
            (&mut d as *mut sys::cusparseDiagType_t).cast(),
            size,
        )
    }
    .check("cusparseSpMatSetAttribute")
}

/// `cusparseSpMatGetSize`: the descriptor's rows, columns and nonzeros.
///
/// NVIDIA: [`cusparseSpMatGetSize`](https://docs.nvidia.com/cuda/cusparse/#cusparsespmatgetsize)
pub(in crate::libs::sparse) fn sp_mat_size(a: SpMat) -> Result<(i64, i64, i64)> {
    let (mut r, mut c, mut n) = (0, 0, 0);
    // SAFETY: a live descriptor and valid out-pointers.
    unsafe { sys::cusparseSpMatGetSize(a.0 as _, &mut r, &mut c, &mut n) }.check("cusparseSpMatGetSize")?;
    Ok((r, c, n))
}

/// `cusparseCsrSetPointers`.
///
/// NVIDIA: [`cusparseCsrSetPointers`](https://docs.nvidia.com/cuda/cusparse/#cusparsecsrsetpointers)
///
/// # Safety
/// The buffers are live device buffers of the current context sized for the descriptor's rows
/// and nonzeros.
pub(in crate::libs::sparse) unsafe fn csr_set_pointers(
    a: SpMat,
    offsets: *mut c_void,
    cols: *mut c_void,
    values: *mut c_void,
) -> Result<()> {
    // SAFETY: a live descriptor; the caller vouches for the buffers.
    unsafe { sys::cusparseCsrSetPointers(a.0, offsets, cols, values) }.check("cusparseCsrSetPointers")
}

mod blocks;
mod more;
mod ops;
pub(in crate::libs::sparse) use blocks::*;
pub(in crate::libs::sparse) use more::*;
pub(in crate::libs::sparse) use ops::*;
