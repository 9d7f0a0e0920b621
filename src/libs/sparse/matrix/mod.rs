//! [`SparseMatrix`]: a sparse matrix that owns its tracked buffers, and [`DenseMatrix`], a
//! column-major view of a dense one.
//!
//! Making a matrix checks what costs nothing: the buffers' lengths against the sizes and the
//! number of nonzeros, and that the sizes fit the index type. What costs a pass over the data
//! (offsets that never decrease, indices in range) is the checked mode,
//! [`SparseMatrix::check`], which reads the structure back to the host: run it on matrices
//! from untrusted sources, not before every op. cuSPARSE given a malformed structure reads and
//! writes out of bounds.//!
//! Files: this one holds `SparseMatrix` and its checks; `element` the value and index types,
//! `dense` the dense view.

use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::memory::GpuRef;
mod dense;
mod element;

pub use dense::{DenseMatrix, DenseOrder};
pub(crate) use element::ValueType;
pub(in crate::libs::sparse) use element::{is_complex, mixed_types, value_bits, IndexArith, MixedArith};
pub use element::{IndexKind, MixedSpmm, MixedSpmv, SparseIndex, SparseStorage, SparseValue};

/// A sparse storage format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Compressed sparse rows: `rows + 1` row offsets, then column indices and values.
    Csr,
    /// Compressed sparse columns: `cols + 1` column offsets, then row indices and values.
    Csc,
    /// Coordinates: a row index, a column index and a value per nonzero (sorted by row).
    Coo,
    /// Block sparse rows: square blocks of `block x block` values stored row-major, with
    /// block-row offsets and block-column indices; `nnz` counts blocks.
    Bsr,
    /// Blocked-ELL: every block row holds the same number of `block x block` blocks; the
    /// values are a row-major `rows x ell_cols` array, the block-column indices a row-major
    /// `(rows / block) x (ell_cols / block)` array (`-1`: an empty block). For SpMM.
    BlockedEll,
}

/// A sparse matrix with zero-based indices, owning its buffers (clones of the `GpuRef`s, so the
/// caller may keep using them). Ops read the buffers as recorded uses, fenced like any other.
#[derive(Clone, Debug)]
pub struct SparseMatrix<T: SparseStorage, I: SparseIndex = i32> {
    pub(super) format: Format,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) nnz: usize,
    /// The block size of BSR and Blocked-ELL; 0 for the other formats.
    pub(super) block: usize,
    /// CSR row offsets, CSC column offsets, COO row indices, BSR block-row offsets; for
    /// Blocked-ELL the block-column indices, as `minor`.
    pub(super) major: GpuRef<I>,
    /// CSR column indices, CSC row indices, COO column indices, BSR or Blocked-ELL block-column
    /// indices.
    pub(super) minor: GpuRef<I>,
    pub(super) values: GpuRef<T>,
}

impl<T: SparseStorage, I: SparseIndex> SparseMatrix<T, I> {
    /// A CSR matrix: `offsets` holds exactly `rows + 1` entries, `indices` and `values` at least
    /// `nnz` each.
    pub fn csr(
        rows: usize,
        cols: usize,
        nnz: usize,
        offsets: &GpuRef<I>,
        indices: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        Self::new(Format::Csr, rows, cols, nnz, offsets, indices, values)
    }

    /// A CSC matrix: `offsets` holds exactly `cols + 1` entries, `indices` and `values` at least
    /// `nnz` each.
    pub fn csc(
        rows: usize,
        cols: usize,
        nnz: usize,
        offsets: &GpuRef<I>,
        indices: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        Self::new(Format::Csc, rows, cols, nnz, offsets, indices, values)
    }

    /// A COO matrix: `row_indices`, `col_indices` and `values` hold at least `nnz` entries each.
    pub fn coo(
        rows: usize,
        cols: usize,
        nnz: usize,
        row_indices: &GpuRef<I>,
        col_indices: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        Self::new(Format::Coo, rows, cols, nnz, row_indices, col_indices, values)
    }

    /// A BSR matrix of `block x block` blocks (row-major inside each block): `rows` and `cols`
    /// are multiples of `block`, `offsets` holds exactly `rows / block + 1` block-row offsets,
    /// `indices` at least `blocks` block-column indices and `values` at least
    /// `blocks * block * block` values. `rows`, `cols` and `blocks * block * block` fit the index
    /// type. For SpMV and SpMM (not transposed).
    pub fn bsr(
        rows: usize,
        cols: usize,
        block: usize,
        blocks: usize,
        offsets: &GpuRef<I>,
        indices: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        let (brows, bcols) = block_shape(rows, cols, block)?;
        fits_index::<I>(&[("rows", rows), ("cols", cols), ("block", block)])?;
        let mut m = Self::new(Format::Csr, brows, bcols, blocks, offsets, indices, values)?;
        // cuSPARSE addresses the values of block `b` from `b * block * block`: the whole count
        // must fit the index type too.
        let need = block
            .checked_mul(block)
            .and_then(|area| area.checked_mul(blocks))
            .filter(|&n| n <= I::MAX && i64::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::invalid(
                    "blocks",
                    format!("{blocks} blocks of {block}x{block} values do not fit {:?} indices", I::KIND),
                )
            })?;
        if values.len() < need {
            return Err(Error::invalid(
                "values",
                format!("holds {} entries; {blocks} blocks of {block}x{block} need {need}", values.len()),
            ));
        }
        (m.format, m.rows, m.cols, m.block) = (Format::Bsr, rows, cols, block);
        Ok(m)
    }

    /// A Blocked-ELL matrix (for SpMM, not transposed): `rows` and `cols` are multiples of
    /// `block`, `ell_cols` (the value array's columns, a multiple of `block`, at most `cols`)
    /// says how many blocks each block row holds; `col_indices` holds at least
    /// `(rows / block) * (ell_cols / block)` block-column indices (row-major, `-1` for an empty
    /// block) and `values` at least `rows * ell_cols` values (row-major). cuSPARSE multiplies
    /// Blocked-ELL matrices of `i32` indices and `f32` or `f64` values only (compute capability
    /// 8.0 and up): [`Sparse::spmm`](super::Sparse::spmm) rejects the others.
    pub fn blocked_ell(
        rows: usize,
        cols: usize,
        block: usize,
        ell_cols: usize,
        col_indices: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        let (brows, _) = block_shape(rows, cols, block)?;
        fits_index::<I>(&[("rows", rows), ("cols", cols), ("block", block)])?;
        if ell_cols == 0 || ell_cols % block != 0 || ell_cols > cols {
            return Err(Error::invalid(
                "ell_cols",
                format!("{ell_cols} is not a positive multiple of {block} at most {cols}"),
            ));
        }
        let slots = brows
            .checked_mul(ell_cols / block)
            .ok_or_else(|| Error::invalid("ell_cols", "the block layout overflows"))?;
        if col_indices.len() < slots {
            return Err(Error::invalid(
                "col_indices",
                format!("holds {} entries; the layout has {slots} blocks", col_indices.len()),
            ));
        }
        let need = rows.checked_mul(ell_cols).ok_or_else(|| Error::invalid("ell_cols", "overflows"))?;
        if values.len() < need {
            return Err(Error::invalid(
                "values",
                format!("holds {} entries; a {rows}x{ell_cols} value array needs {need}", values.len()),
            ));
        }
        let mut m = Self::new(Format::Coo, rows, cols, 0, col_indices, col_indices, values)?;
        (m.format, m.nnz, m.block) = (Format::BlockedEll, ell_cols, block);
        Ok(m)
    }

    pub(super) fn new(
        format: Format,
        rows: usize,
        cols: usize,
        nnz: usize,
        major: &GpuRef<I>,
        minor: &GpuRef<I>,
        values: &GpuRef<T>,
    ) -> Result<Self> {
        fits_index::<I>(&[("rows", rows), ("cols", cols), ("nnz", nnz)])?;
        if rows == 0 || cols == 0 {
            return Err(Error::invalid(if rows == 0 { "rows" } else { "cols" }, "must be at least 1"));
        }
        if rows.checked_mul(cols).is_some_and(|all| nnz > all) {
            return Err(Error::invalid("nnz", format!("{nnz} nonzeros do not fit a {rows}x{cols} matrix")));
        }
        let (major_arg, major_len) = match format {
            Format::Csr => ("offsets", rows + 1),
            Format::Csc => ("offsets", cols + 1),
            Format::Coo | Format::Bsr | Format::BlockedEll => ("row_indices", nnz),
        };
        let exact = format != Format::Coo;
        if (exact && major.len() != major_len) || major.len() < major_len {
            return Err(Error::invalid(
                major_arg,
                format!("holds {} entries; a {format:?} matrix of this shape needs {major_len}", major.len()),
            ));
        }
        let minor_arg = if format == Format::Coo { "col_indices" } else { "indices" };
        if minor.len() < nnz {
            return Err(Error::invalid(
                minor_arg,
                format!("holds {} entries, fewer than the {nnz} nonzeros", minor.len()),
            ));
        }
        if values.len() < nnz {
            return Err(Error::invalid(
                "values",
                format!("holds {} entries, fewer than the {nnz} nonzeros", values.len()),
            ));
        }
        if major.device_id() != values.device_id() || minor.device_id() != values.device_id() {
            return Err(Error::invalid("values", "the matrix's buffers are on different devices"));
        }
        Ok(SparseMatrix {
            format,
            rows,
            cols,
            nnz,
            block: 0,
            major: major.clone(),
            minor: minor.clone(),
            values: values.clone(),
        })
    }

    /// The storage format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Stored nonzeros; for BSR, stored blocks; for Blocked-ELL, the value array's columns.
    pub fn nnz(&self) -> usize {
        self.nnz
    }

    /// The block size of BSR and Blocked-ELL matrices; 0 for the other formats.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Row offsets (CSR), column offsets (CSC) or row indices (COO).
    pub fn offsets(&self) -> &GpuRef<I> {
        &self.major
    }

    /// Column indices (CSR, COO) or row indices (CSC).
    pub fn indices(&self) -> &GpuRef<I> {
        &self.minor
    }

    /// The nonzero values.
    pub fn values(&self) -> &GpuRef<T> {
        &self.values
    }

    /// The checked mode: reads the structure back on `stream` (blocking the calling thread
    /// until it has arrived) and checks that offsets start at 0, never decrease and end at
    /// `nnz`, and that every index is within the matrix. Costs a pass over the structure, so
    /// ops do not run it; run it once on matrices from outside your program.
    pub fn check(&self, stream: StreamId) -> Result<()> {
        let major = self.major.download(stream)?;
        let minor = self.minor.download(stream)?;
        let inner = match self.format {
            Format::Csr => self.cols,
            Format::Bsr | Format::BlockedEll => self.cols / self.block,
            _ => self.rows,
        };
        let in_range = |arg: &'static str, v: &[I], bound: usize| match v
            .iter()
            .position(|&x| x.to_i64() < 0 || x.to_i64() as u64 >= bound as u64)
        {
            Some(i) => Err(Error::invalid(arg, format!("entry {i} is {}, outside 0..{bound}", v[i].to_i64()))),
            None => Ok(()),
        };
        match self.format {
            Format::Coo => {
                in_range("row_indices", &major[..self.nnz], self.rows)?;
                in_range("col_indices", &minor[..self.nnz], self.cols)?;
                if let Some(i) = major[..self.nnz].windows(2).position(|w| w[1].to_i64() < w[0].to_i64()) {
                    return Err(Error::invalid(
                        "row_indices",
                        format!("not sorted: entry {} is below entry {i}", i + 1),
                    ));
                }
            }
            Format::BlockedEll => {
                let slots = (self.rows / self.block) * (self.nnz / self.block);
                if let Some(i) = minor[..slots].iter().position(|&x| x.to_i64() < -1 || x.to_i64() >= inner as i64) {
                    let v = minor[i].to_i64();
                    return Err(Error::invalid("col_indices", format!("entry {i} is {v}, outside -1..{inner}")));
                }
            }
            Format::Csr | Format::Csc | Format::Bsr => {
                if major[0].to_i64() != 0 {
                    return Err(Error::invalid("offsets", format!("start at {}, not 0", major[0].to_i64())));
                }
                if let Some(i) = major.windows(2).position(|w| w[1].to_i64() < w[0].to_i64()) {
                    return Err(Error::invalid("offsets", format!("decrease from entry {i} to entry {}", i + 1)));
                }
                let last = major[major.len() - 1].to_i64();
                if last != self.nnz as i64 {
                    return Err(Error::invalid("offsets", format!("end at {last}, not at nnz = {}", self.nnz)));
                }
                in_range("indices", &minor[..self.nnz], inner)?;
            }
        }
        Ok(())
    }
}

/// Rejects the first of `args` that does not fit index type `I` or `i64` (cuSPARSE takes every
/// size as `int64_t`, and indexes with `I`).
fn fits_index<I: SparseIndex>(args: &[(&'static str, usize)]) -> Result<()> {
    for &(arg, v) in args {
        if v > I::MAX || i64::try_from(v).is_err() {
            return Err(Error::invalid(arg, format!("{v} does not fit the {:?} index type", I::KIND)));
        }
    }
    Ok(())
}

/// The block grid of a `rows x cols` matrix of `block x block` blocks.
fn block_shape(rows: usize, cols: usize, block: usize) -> Result<(usize, usize)> {
    if block == 0 || rows % block != 0 || cols % block != 0 {
        return Err(Error::invalid("block", format!("{block} does not divide the {rows}x{cols} matrix into blocks")));
    }
    Ok((rows / block, cols / block))
}
