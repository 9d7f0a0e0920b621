//! The sparse direct solves cuSOLVER's sparse module offers, computed densely: the CSR matrix
//! expanded, then solved by QR or Cholesky.

use super::linalg::{self, Mat};
use super::{load, Scalar};

/// The sparse direct solves: `A x = b` for the `n x n` CSR matrix, by QR or (`cholesky`) by
/// Cholesky of the Hermitian matrix its lower triangle holds. `Ok(Some(row))`: singular to
/// `tol` at `row` (0-based), `x` not written.
pub(crate) fn sparse_solve<T: Scalar>(
    n: usize,
    (offsets, indices, values): (&[i32], &[i32], &[T]),
    b: &[T],
    tol: f64,
    cholesky: bool,
) -> std::result::Result<Vec<T>, usize> {
    let mut a = Mat::zeros(n, n);
    for row in 0..n {
        let (start, end) = (offsets[row].max(0) as usize, offsets[row + 1].max(0) as usize);
        for k in start..end.min(indices.len()).min(values.len()) {
            let col = indices[k];
            if col < 0 || col as usize >= n || (cholesky && col as usize > row) {
                continue;
            }
            *a.at_mut(row, col as usize) += values[k].to_c();
        }
    }
    let mut x = load(b, 0, n, 1, n);
    if cholesky {
        let l = linalg::cholesky(&linalg::hermitian(&a, true)).map_err(|minor| minor - 1)?;
        if let Some(j) = (0..n).find(|&j| l.at(j, j).re <= tol) {
            return Err(j);
        }
        linalg::cholesky_solve(&l, &mut x);
    } else {
        let tau = linalg::geqrf(&mut a);
        if let Some(j) = (0..n).find(|&j| a.at(j, j).abs() <= tol) {
            return Err(j);
        }
        linalg::ormqr(&a, n, &tau, true, true, &mut x);
        linalg::solve_upper(&a, &mut x, false);
    }
    Ok(x.data.iter().map(|&v| T::from_c(v)).collect())
}
