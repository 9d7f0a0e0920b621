//! The host views of an op's operands: a sparse matrix's shape with the simulated memory of
//! its arrays (and its stored entries in any format, checked), and a dense column-major view.
//! Each is built before the op is enqueued and moved into its simulated kernel.

use super::{at, span};
use crate::error::Result;
use crate::libs::sparse::{DenseMatrix, Format, SparseIndex, SparseMatrix, SparseStorage};
use crate::memory::Element;
use crate::memory::SimMem;

/// A sparse matrix's shape and the simulated memory of its buffers, moved into a kernel.
pub(super) struct HostMat<T: SparseStorage, I: SparseIndex> {
    pub(super) format: Format,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) nnz: usize,
    pub(super) block: usize,
    pub(super) major: SimMem<I>,
    /// `None` where the matrix keeps one index array in both slots (Blocked-ELL).
    pub(super) minor: Option<SimMem<I>>,
    pub(super) values: SimMem<T>,
}

impl<T: SparseStorage, I: SparseIndex> HostMat<T, I> {
    pub(super) fn of(a: &SparseMatrix<T, I>) -> Result<Self> {
        let same = a.major.id() == a.minor.id();
        Ok(HostMat {
            format: a.format,
            rows: a.rows,
            cols: a.cols,
            nnz: a.nnz,
            block: a.block,
            major: a.major.sim_data()?,
            minor: if same { None } else { Some(a.minor.sim_data()?) },
            values: a.values.sim_data()?,
        })
    }

    /// Copies of the index arrays and values (each read once, its lock released at once, so a
    /// buffer the op also takes elsewhere is never locked twice).
    pub(super) fn arrays(&self) -> (Vec<I>, Vec<I>, Vec<T>) {
        let major = self.major.read().to_vec();
        let minor = match &self.minor {
            Some(m) => m.read().to_vec(),
            None => major.clone(),
        };
        (major, minor, self.values.read().to_vec())
    }

    /// The stored entries `(row, column, value)`, in storage order (duplicates kept).
    pub(super) fn entries(&self) -> Result<Vec<(usize, usize, T)>> {
        let (major, minor, values) = self.arrays();
        self.entries_in(&major, &minor, &values)
    }

    /// The stored entries of the matrix of this shape whose arrays start at `major`, `minor`
    /// and `values` (one matrix of a strided batch).
    pub(super) fn entries_in(&self, major: &[I], minor: &[I], values: &[T]) -> Result<Vec<(usize, usize, T)>> {
        let (rows, cols, nnz) = (self.rows, self.cols, self.nnz);
        let mut out = Vec::with_capacity(nnz);
        match self.format {
            Format::Csr => {
                for r in 0..rows {
                    for p in span("a.offsets", major, r, nnz)? {
                        out.push((r, at("a.indices", minor[p], cols)?, values[p]));
                    }
                }
            }
            Format::Csc => {
                for c in 0..cols {
                    for p in span("a.offsets", major, c, nnz)? {
                        out.push((at("a.indices", minor[p], rows)?, c, values[p]));
                    }
                }
            }
            Format::Coo => {
                for p in 0..nnz {
                    out.push((at("a.row_indices", major[p], rows)?, at("a.col_indices", minor[p], cols)?, values[p]));
                }
            }
            Format::Bsr => {
                let b = self.block;
                for br in 0..rows / b {
                    for p in span("a.offsets", major, br, nnz)? {
                        let bc = at("a.indices", minor[p], cols / b)?;
                        for r in 0..b {
                            for c in 0..b {
                                out.push((br * b + r, bc * b + c, values[(p * b + r) * b + c]));
                            }
                        }
                    }
                }
            }
            Format::BlockedEll => {
                // `nnz` holds the value array's columns.
                let (b, ell) = (self.block, self.nnz);
                let per_row = ell / b;
                for br in 0..rows / b {
                    for e in 0..per_row {
                        let raw = minor[br * per_row + e];
                        if raw.to_i64() == -1 {
                            continue;
                        }
                        let bc = at("a.col_indices", raw, cols / b)?;
                        for r in 0..b {
                            for c in 0..b {
                                out.push((br * b + r, bc * b + c, values[(br * b + r) * ell + e * b + c]));
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The CSR arrays as row spans, column indices and values, checked.
    pub(super) fn csr(&self, arg: [&'static str; 2]) -> Result<Rows<T>> {
        let (major, minor, values) = self.arrays();
        let spans = (0..self.rows).map(|r| span(arg[0], &major, r, self.nnz)).collect::<Result<Vec<_>>>()?;
        let cols = minor[..self.nnz].iter().map(|&c| at(arg[1], c, self.cols)).collect::<Result<Vec<_>>>()?;
        Ok((spans, cols, values))
    }
}

/// A CSR matrix's rows (spans into the arrays), column indices and values.
pub(super) type Rows<T> = (Vec<std::ops::Range<usize>>, Vec<usize>, Vec<T>);

/// A dense view, moved into a kernel.
pub(super) struct HostDense<T: Element> {
    pub(super) mem: SimMem<T>,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) ld: usize,
    pub(super) row_major: bool,
}

impl<T: Element> HostDense<T> {
    pub(super) fn of(m: &DenseMatrix<'_, T>, ld: i64) -> Result<Self> {
        let row_major = m.is_row_major();
        Ok(HostDense { mem: m.buf.sim_data()?, rows: m.rows, cols: m.cols, ld: ld as usize, row_major })
    }

    /// The offset of element `(r, c)` in the buffer.
    pub(super) fn at(&self, r: usize, c: usize) -> usize {
        if self.row_major {
            r * self.ld + c
        } else {
            r + c * self.ld
        }
    }
}
