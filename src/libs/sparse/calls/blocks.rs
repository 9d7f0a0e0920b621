//! cuSPARSE's BSR conversions (`cusparseXcsr2bsrNnz`, `cusparse?csr2bsr`, `cusparse?bsr2csr`)
//! and the pointer setters of the dense → sparse conversion's CSC and COO outputs.
//!
//! The BSR conversions are cuSPARSE's legacy format-conversion API (the generic API has none):
//! `i32` indices, one entry point per value type, and a legacy matrix descriptor (general,
//! zero-based) for each side, made and destroyed around the call here. Blocks are row-major
//! (`CUSPARSE_DIRECTION_ROW`), as cusched's BSR matrices store them.
//!
//! Every `unsafe fn` here needs (1) `h` a live handle whose stream the op was fenced on, with
//! its context current, and (2) the arrays live device buffers of that context, sized as each
//! function says.

use super::{SpMat, H};
use crate::error::Result;
use crate::libs::dtype::CudaType;
use crate::libs::Status;
use cudarc::cusparse::sys;
use std::ffi::c_void;

const ROW: sys::cusparseDirection_t = sys::cusparseDirection_t::CUSPARSE_DIRECTION_ROW;

/// A legacy matrix descriptor (general, zero-based: cuSPARSE's defaults), destroyed on drop.
/// Host memory only, read by the call it is passed to and by nothing after.
struct Legacy(sys::cusparseMatDescr_t);

impl Legacy {
    fn new() -> Result<Legacy> {
        let mut d = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { sys::cusparseCreateMatDescr(&mut d) }.check("cusparseCreateMatDescr")?;
        Ok(Legacy(d))
    }
}

impl Drop for Legacy {
    fn drop(&mut self) {
        // SAFETY: (1) made by cusparseCreateMatDescr and destroyed once, here; (2) host memory
        // that no enqueued work refers to (the calls read it before returning). Destroying a
        // valid descriptor does not fail.
        let _ = unsafe { sys::cusparseDestroyMatDescr(self.0) };
    }
}

/// The sizes of a CSR ↔ BSR conversion: the CSR side's `rows x cols`, the block size.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct BlockShape {
    pub rows: i32,
    pub cols: i32,
    pub block: i32,
}

impl BlockShape {
    fn blocks(self) -> (i32, i32) {
        (self.rows / self.block, self.cols / self.block)
    }
}

/// `cusparseXcsr2bsrNnz`: writes the BSR block-row offsets (`rows / block + 1` entries) into
/// `bsr_offsets` and returns the number of nonzero blocks. The count comes back to the host:
/// the call waits for the GPU.
/// # Safety: the module's contract; `csr_offsets` holds `rows + 1` entries and `csr_indices`
/// the CSR matrix's nonzeros, within `0..cols`; `rows` and `cols` are multiples of `block`.
///
/// NVIDIA: [`cusparseXcsr2bsrNnz`](https://docs.nvidia.com/cuda/cusparse/#cusparse-t-csr2bsr)
pub(in crate::libs::sparse) unsafe fn csr2bsr_nnz(
    h: H,
    s: BlockShape,
    csr_offsets: *const i32,
    csr_indices: *const i32,
    bsr_offsets: *mut i32,
) -> Result<i32> {
    let (a, c) = (Legacy::new()?, Legacy::new()?);
    let mut total = 0i32;
    // SAFETY: (1) the caller keeps the contract above; (2) `total` is a host out-pointer, as
    // the handle's host pointer mode says; (3) the legacy descriptors are live until the
    // call returns.
    unsafe {
        sys::cusparseXcsr2bsrNnz(
            h,
            ROW,
            s.rows,
            s.cols,
            a.0,
            csr_offsets,
            csr_indices,
            s.block,
            c.0,
            bsr_offsets,
            &mut total,
        )
    }
    .check("cusparseXcsr2bsrNnz")?;
    Ok(total)
}

/// The three arrays of a CSR or BSR matrix: offsets, (block-)column indices, values.
#[derive(Clone, Copy)]
pub(in crate::libs::sparse) struct Arrays {
    pub offsets: *mut c_void,
    pub indices: *mut c_void,
    pub values: *mut c_void,
}

/// `cusparse?csr2bsr` (`to_bsr`) or `cusparse?bsr2csr`, for values of `t`.
/// # Safety: the module's contract; `from` holds a valid matrix of shape `s` (for CSR → BSR,
/// `to.offsets` as `csr2bsr_nnz` wrote them); `to`'s indices and values hold what the result
/// needs (BSR: the counted blocks, `block * block` values each; CSR: every entry of every
/// block) and its offsets `rows + 1` (CSR) entries.
///
/// NVIDIA: [`cusparse<t>csr2bsr`](https://docs.nvidia.com/cuda/cusparse/#cusparse-t-csr2bsr),
/// [`cusparse<t>bsr2csr`](https://docs.nvidia.com/cuda/cusparse/#cusparse-t-bsr2csr)
pub(in crate::libs::sparse) unsafe fn block_convert(
    h: H,
    to_bsr: bool,
    t: CudaType,
    s: BlockShape,
    from: Arrays,
    to: Arrays,
) -> Result<()> {
    let (a, c) = (Legacy::new()?, Legacy::new()?);
    let (mb, nb) = s.blocks();
    let (fo, fi) = (from.offsets as *const i32, from.indices as *const i32);
    let (to_o, to_i) = (to.offsets as *mut i32, to.indices as *mut i32);
    let (fv, tv) = (from.values as *const c_void, to.values);
    macro_rules! call {
        ($csr2bsr:ident, $bsr2csr:ident) => {
            if to_bsr {
                (
                    sys::$csr2bsr(h, ROW, s.rows, s.cols, a.0, fv as _, fo, fi, s.block, c.0, tv as _, to_o, to_i),
                    stringify!($csr2bsr),
                )
            } else {
                (
                    sys::$bsr2csr(h, ROW, mb, nb, a.0, fv as _, fo, fi, s.block, c.0, tv as _, to_o, to_i),
                    stringify!($bsr2csr),
                )
            }
        };
    }
    // SAFETY: (1) the caller keeps the contract above; (2) the value pointers are cast to the
    // entry point's element type, which is `t`'s; (3) the legacy descriptors are live until
    // the call returns.
    let (status, name) = unsafe {
        match t {
            CudaType::R32F => call!(cusparseScsr2bsr, cusparseSbsr2csr),
            CudaType::R64F => call!(cusparseDcsr2bsr, cusparseDbsr2csr),
            CudaType::C32F => call!(cusparseCcsr2bsr, cusparseCbsr2csr),
            CudaType::C64F => call!(cusparseZcsr2bsr, cusparseZbsr2csr),
            other => {
                return Err(crate::error::Error::invalid(
                    "a",
                    format!("holds {other:?} values; the BSR conversions take f32, f64 and their complex forms"),
                ))
            }
        }
    };
    status.check(name)
}

/// `cusparseCscSetPointers` (`csc`) or `cusparseCooSetPointers`: points a dense → sparse
/// conversion's output at the arrays allocated once its nonzeros were counted.
/// # Safety: the buffers are live device buffers of the current context sized for the
/// descriptor's shape and nonzeros (CSC: `cols + 1` offsets, `nnz` row indices and values;
/// COO: `nnz` row indices, column indices and values).
///
/// NVIDIA: [`cusparseCscSetPointers`](https://docs.nvidia.com/cuda/cusparse/#cusparsecscsetpointers),
/// [`cusparseCooSetPointers`](https://docs.nvidia.com/cuda/cusparse/#cusparsecoosetpointers)
pub(in crate::libs::sparse) unsafe fn set_pointers(a: SpMat, csc: bool, arrays: Arrays) -> Result<()> {
    let Arrays { offsets, indices, values } = arrays;
    // SAFETY: (1) a live descriptor; (2) the caller vouches for the buffers.
    unsafe {
        if csc {
            sys::cusparseCscSetPointers(a.0, offsets, indices, values).check("cusparseCscSetPointers")
        } else {
            sys::cusparseCooSetPointers(a.0, offsets, indices, values).check("cusparseCooSetPointers")
        }
    }
}
