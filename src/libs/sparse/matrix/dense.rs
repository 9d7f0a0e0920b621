//! [`DenseMatrix`]: a view of a dense matrix in a tracked buffer, column- or row-major.

use crate::error::Result;
use crate::memory::{Element, GpuRef};

/// How a dense matrix's elements are laid out in its buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DenseOrder {
    /// Columns stored one after another, `ld` apart (cuSPARSE's `CUSPARSE_ORDER_COL`).
    #[default]
    ColMajor,
    /// Rows stored one after another, `ld` apart (cuSPARSE's `CUSPARSE_ORDER_ROW`).
    RowMajor,
}

/// A dense matrix view: `rows x cols` elements of `buf`, columns (column-major) or rows
/// (row-major) `ld` apart.
#[derive(Debug)]
pub struct DenseMatrix<'a, T: Element> {
    /// The buffer.
    pub buf: &'a GpuRef<T>,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Leading dimension (distance between columns, or rows when row-major); `None`: packed
    /// (`rows`, or `cols` when row-major).
    pub ld: Option<usize>,
    /// The layout; column-major unless set with [`row_major`](Self::row_major).
    pub order: DenseOrder,
}

impl<'a, T: Element> DenseMatrix<'a, T> {
    /// A packed column-major `rows x cols` matrix.
    pub fn new(buf: &'a GpuRef<T>, rows: usize, cols: usize) -> Self {
        DenseMatrix { buf, rows, cols, ld: None, order: DenseOrder::ColMajor }
    }

    /// Sets the leading dimension.
    pub fn ld(mut self, ld: usize) -> Self {
        self.ld = Some(ld);
        self
    }

    /// Makes the view row-major: row `r` starts at element `r * ld`.
    pub fn row_major(mut self) -> Self {
        self.order = DenseOrder::RowMajor;
        self
    }

    /// Whether the view is row-major.
    pub(in crate::libs::sparse) fn is_row_major(&self) -> bool {
        self.order == DenseOrder::RowMajor
    }

    /// Checks the view as argument `arg`: returns its leading dimension. A row-major
    /// `rows x cols` view is laid out as a column-major `cols x rows` one, and checked so.
    pub(in crate::libs::sparse) fn check(&self, arg: &'static str, ld_arg: &'static str) -> Result<i64> {
        crate::libs::validate::dim64(arg, self.rows)?;
        crate::libs::validate::dim64(arg, self.cols)?;
        let (major, minor) = if self.is_row_major() { (self.cols, self.rows) } else { (self.rows, self.cols) };
        let m = crate::libs::validate::matrix(arg, ld_arg, major, minor, self.ld)?;
        let what = format!("a {}x{} matrix", self.rows, self.cols);
        crate::libs::validate::covers(arg, self.buf, Some(m.span), &what)?;
        Ok(m.ld as i64)
    }

    /// Elements the view spans with leading dimension `ld` (as [`check`](Self::check) returned).
    pub(in crate::libs::sparse) fn span(&self, ld: i64) -> usize {
        let (major, minor) = if self.is_row_major() { (self.cols, self.rows) } else { (self.rows, self.cols) };
        if major == 0 || minor == 0 {
            return 0;
        }
        // `check` found this product within usize.
        ld as usize * (minor - 1) + major
    }
}

impl<T: Element> Clone for DenseMatrix<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for DenseMatrix<'_, T> {}
