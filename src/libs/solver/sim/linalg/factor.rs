//! Cholesky and LU (LAPACK's partial pivoting) on the host, with the triangular solves their
//! factors are used through.

use super::{Lower, Mat, C};

/// The Hermitian matrix whose `lower` (or upper) triangle `a` holds; the other triangle and
/// the imaginary parts of the diagonal are not read, as LAPACK reads them.
pub(crate) fn hermitian(a: &Mat, lower: Lower) -> Mat {
    let n = a.rows;
    let mut h = Mat::zeros(n, n);
    for j in 0..n {
        for i in j..n {
            let v = if lower { a.at(i, j) } else { a.at(j, i).conj() };
            let v = if i == j { C::real(v.re) } else { v };
            *h.at_mut(i, j) = v;
            *h.at_mut(j, i) = v.conj();
        }
    }
    h
}

/// Cholesky `A = L Lᴴ` of the Hermitian `a` (full): `Err(j)` when the leading minor of order
/// `j` (1-based) is not positive definite.
pub(crate) fn cholesky(a: &Mat) -> Result<Mat, usize> {
    let n = a.rows;
    let mut l = Mat::zeros(n, n);
    for j in 0..n {
        let mut d = a.at(j, j).re;
        for k in 0..j {
            d -= l.at(j, k).norm2();
        }
        // A NaN is not positive either.
        if d.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Err(j + 1);
        }
        let d = d.sqrt();
        *l.at_mut(j, j) = C::real(d);
        for i in j + 1..n {
            let mut s = a.at(i, j);
            for k in 0..j {
                s -= l.at(i, k) * l.at(j, k).conj();
            }
            *l.at_mut(i, j) = s.scale(1.0 / d);
        }
    }
    Ok(l)
}

/// The factor `L` of `A = L Lᴴ` held in the `lower` triangle of `a` (for the upper one,
/// `A = Uᴴ U` and `L = Uᴴ`).
pub(crate) fn factor_lower(a: &Mat, lower: Lower) -> Mat {
    let n = a.rows;
    let mut l = Mat::zeros(n, n);
    for j in 0..n {
        for i in j..n {
            *l.at_mut(i, j) = if lower { a.at(i, j) } else { a.at(j, i).conj() };
        }
    }
    l
}

/// Writes `L` into the `lower` triangle of `a` (for the upper one, `U = Lᴴ`).
pub(crate) fn put_factor(a: &mut Mat, l: &Mat, lower: Lower) {
    let n = a.rows;
    for j in 0..n {
        for i in j..n {
            if lower {
                *a.at_mut(i, j) = l.at(i, j);
            } else {
                *a.at_mut(j, i) = l.at(i, j).conj();
            }
        }
    }
}

/// Solves `L X = B` in place (`L` lower triangular, `unit`: ones on its diagonal).
pub(crate) fn solve_lower(l: &Mat, b: &mut Mat, unit: bool) {
    let n = l.rows;
    for c in 0..b.cols {
        for i in 0..n {
            let mut s = b.at(i, c);
            for k in 0..i {
                s -= l.at(i, k) * b.at(k, c);
            }
            *b.at_mut(i, c) = if unit { s } else { s / l.at(i, i) };
        }
    }
}

/// Solves `U X = B` in place (`U` upper triangular).
pub(crate) fn solve_upper(u: &Mat, b: &mut Mat, unit: bool) {
    let n = u.rows;
    for c in 0..b.cols {
        for i in (0..n).rev() {
            let mut s = b.at(i, c);
            for k in i + 1..n {
                s -= u.at(i, k) * b.at(k, c);
            }
            *b.at_mut(i, c) = if unit { s } else { s / u.at(i, i) };
        }
    }
}

/// Solves `A X = B` with `A = L Lᴴ`.
pub(crate) fn cholesky_solve(l: &Mat, b: &mut Mat) {
    solve_lower(l, b, false);
    solve_upper(&l.adjoint(), b, false);
}

/// LU with partial pivoting (LAPACK's `getf2`: the first largest `|re| + |im|` in the column)
/// when `pivot`, without otherwise, in place on the `m x n` `a`. Returns the 0-based row each
/// step swapped with and the first exactly zero pivot (1-based), if any.
pub(crate) fn lu(a: &mut Mat, pivot: bool) -> (Vec<usize>, Option<usize>) {
    let (m, n) = (a.rows, a.cols);
    let steps = m.min(n);
    let mut piv = Vec::with_capacity(steps);
    let mut info = None;
    for j in 0..steps {
        let mut p = j;
        if pivot {
            let mut best = a.at(j, j).abs1();
            for i in j + 1..m {
                let v = a.at(i, j).abs1();
                if v > best {
                    best = v;
                    p = i;
                }
            }
            if p != j {
                for c in 0..n {
                    a.data.swap(j + c * m, p + c * m);
                }
            }
        }
        piv.push(p);
        let d = a.at(j, j);
        if d.is_zero() {
            info.get_or_insert(j + 1);
            continue;
        }
        for i in j + 1..m {
            let l = a.at(i, j) / d;
            *a.at_mut(i, j) = l;
        }
        for c in j + 1..n {
            let u = a.at(j, c);
            if u.is_zero() {
                continue;
            }
            for i in j + 1..m {
                let l = a.at(i, j);
                *a.at_mut(i, c) -= l * u;
            }
        }
    }
    (piv, info)
}

/// How the LU solve applies `A`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    No,
    Trans,
    Conj,
}

/// Solves `op(A) X = B` in place with the LU factors in `f` (`n x n`) and the 0-based swaps
/// `piv` (none without pivoting).
pub(crate) fn lu_solve(f: &Mat, piv: Option<&[usize]>, op: Op, b: &mut Mat) {
    let n = f.rows;
    let swap = |b: &mut Mat, i: usize, p: usize| {
        if p != i && p < n {
            for c in 0..b.cols {
                b.data.swap(i + c * n, p + c * n);
            }
        }
    };
    if op == Op::No {
        if let Some(piv) = piv {
            for (i, &p) in piv.iter().enumerate().take(n) {
                swap(b, i, p);
            }
        }
        solve_lower(f, b, true);
        solve_upper(f, b, false);
        return;
    }
    let t = if op == Op::Conj { f.adjoint() } else { transpose(f) };
    // op(A) = op(U) op(L) Pᵀ... : op(U) is lower, op(L) unit upper.
    solve_lower(&t, b, false);
    solve_upper(&t, b, true);
    if let Some(piv) = piv {
        for (i, &p) in piv.iter().enumerate().take(n).rev() {
            swap(b, i, p);
        }
    }
}

fn transpose(a: &Mat) -> Mat {
    let mut t = Mat::zeros(a.cols, a.rows);
    for j in 0..a.cols {
        for i in 0..a.rows {
            *t.at_mut(j, i) = a.at(i, j);
        }
    }
    t
}
