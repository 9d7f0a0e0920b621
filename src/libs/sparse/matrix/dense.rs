//! [`DenseMatrix`]: a column-major view of a dense matrix in a tracked buffer.

use crate::error::Result;
use crate::memory::{Element, GpuRef};

/// A column-major dense matrix view: `rows x cols` elements of `buf`, columns `ld` apart.
#[derive(Debug)]
pub struct DenseMatrix<'a, T: Element> {
    /// The buffer.
    pub buf: &'a GpuRef<T>,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Leading dimension (distance between columns); `None`: `rows`.
    pub ld: Option<usize>,
}

impl<'a, T: Element> DenseMatrix<'a, T> {
    /// A packed column-major `rows x cols` matrix.
    pub fn new(buf: &'a GpuRef<T>, rows: usize, cols: usize) -> Self {
        DenseMatrix { buf, rows, cols, ld: None }
    }

    /// Sets the leading dimension.
    pub fn ld(mut self, ld: usize) -> Self {
        self.ld = Some(ld);
        self
    }

    /// Checks the view as argument `arg`: returns its leading dimension.
    pub(in crate::libs::sparse) fn check(&self, arg: &'static str, ld_arg: &'static str) -> Result<i64> {
        crate::libs::validate::dim64(arg, self.rows)?;
        crate::libs::validate::dim64(arg, self.cols)?;
        let m = crate::libs::validate::matrix(arg, ld_arg, self.rows, self.cols, self.ld)?;
        crate::libs::validate::covers(arg, self.buf, Some(m.span), &format!("a {}x{} matrix", self.rows, self.cols))?;
        Ok(m.ld as i64)
    }
}

impl<T: Element> Clone for DenseMatrix<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for DenseMatrix<'_, T> {}
