//! The Jacobi methods: cyclic Jacobi for Hermitian eigenproblems and one-sided Jacobi for the
//! SVD, with their convergence report, and the completion of a partial unitary basis.

use super::{Mat, C, ONE, ZERO};

/// The outcome of a Jacobi method.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Jacobi {
    pub sweeps: u32,
    pub residual: f64,
    pub converged: bool,
}

/// The unitary 2x2 rotation `G` (entries `pp, pq, qp, qq`) with `(Gᴴ H G)_pq = 0` for the
/// Hermitian `H = [[app, apq], [conj(apq), aqq]]`; real for real `apq`.
fn rotation(app: f64, aqq: f64, apq: C) -> [C; 4] {
    let g = apq.abs();
    let e = apq.scale(1.0 / g);
    let theta = (aqq - app) / (2.0 * g);
    let t = if theta.abs() > 1e150 {
        0.5 / theta
    } else {
        let t = 1.0 / (theta.abs() + (theta * theta + 1.0).sqrt());
        if theta < 0.0 {
            -t
        } else {
            t
        }
    };
    let c = 1.0 / (t * t + 1.0).sqrt();
    let s = t * c;
    // D P with D = diag(1, conj(e)) making the pair real, P the real rotation that zeros it.
    [C::real(c), C::real(s), e.conj().scale(-s), e.conj().scale(c)]
}

/// Columns `p`, `q` of `m` times `g`.
fn rotate_cols(m: &mut Mat, p: usize, q: usize, g: &[C; 4]) {
    let rows = m.rows;
    for i in 0..rows {
        let (x, y) = (m.data[i + p * rows], m.data[i + q * rows]);
        m.data[i + p * rows] = x * g[0] + y * g[2];
        m.data[i + q * rows] = x * g[1] + y * g[3];
    }
}

/// Off-diagonal Frobenius norm.
fn off(a: &Mat) -> f64 {
    let mut s = 0.0;
    for j in 0..a.cols {
        for i in 0..a.rows {
            if i != j {
                s += a.at(i, j).norm2();
            }
        }
    }
    s.sqrt()
}

/// Cyclic Jacobi on the Hermitian `a` (full): returns the eigenvalues ascending and, with
/// `vectors`, the eigenvectors (columns, in the same order). Stops once the off-diagonal norm
/// is at most `tol ‖A‖_F`, or after `max_sweeps`.
pub(crate) fn eigh(mut a: Mat, vectors: bool, tol: f64, max_sweeps: u32) -> (Vec<f64>, Option<Mat>, Jacobi) {
    let n = a.rows;
    let norm = a.data.iter().map(|v| v.norm2()).sum::<f64>().sqrt();
    let mut v = vectors.then(|| Mat::identity(n, n));
    let mut sweeps = 0;
    let mut residual = off(&a);
    while residual > tol * norm {
        if sweeps == max_sweeps {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a.at(p, q);
                if apq.is_zero() {
                    continue;
                }
                let g = rotation(a.at(p, p).re, a.at(q, q).re, apq);
                rotate_cols(&mut a, p, q, &g);
                // Rows p, q times Gᴴ.
                for c in 0..n {
                    let (x, y) = (a.at(p, c), a.at(q, c));
                    *a.at_mut(p, c) = g[0].conj() * x + g[2].conj() * y;
                    *a.at_mut(q, c) = g[1].conj() * x + g[3].conj() * y;
                }
                *a.at_mut(p, q) = ZERO;
                *a.at_mut(q, p) = ZERO;
                let (dp, dq) = (a.at(p, p).re, a.at(q, q).re);
                *a.at_mut(p, p) = C::real(dp);
                *a.at_mut(q, q) = C::real(dq);
                if let Some(v) = v.as_mut() {
                    rotate_cols(v, p, q, &g);
                }
            }
        }
        sweeps += 1;
        residual = off(&a);
    }
    let converged = residual <= tol * norm;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a.at(i, i).re.total_cmp(&a.at(j, j).re));
    let w = order.iter().map(|&i| a.at(i, i).re).collect();
    let v = v.map(|v| {
        let mut s = Mat::zeros(n, n);
        for (k, &i) in order.iter().enumerate() {
            s.data[k * n..(k + 1) * n].copy_from_slice(v.col(i));
        }
        s
    });
    (w, v, Jacobi { sweeps, residual, converged })
}

/// A thin SVD `A = U Σ Vᴴ` of the `m x n` `a`: `min(m, n)` singular values descending, `U`
/// (`m x min`) and `V` (`n x min`) with orthonormal columns. One-sided Jacobi (Hestenes) on the
/// taller of `A`, `Aᴴ`; a pair is done once its columns' cosine is at most `tol`.
pub(crate) fn svd(a: &Mat, tol: f64, max_sweeps: u32) -> (Vec<f64>, Mat, Mat, Jacobi) {
    if a.rows < a.cols {
        let (s, u, v, j) = svd(&a.adjoint(), tol, max_sweeps);
        return (s, v, u, j);
    }
    let (m, n) = (a.rows, a.cols);
    let mut w = a.clone();
    let mut v = Mat::identity(n, n);
    let mut sweeps = 0;
    let mut converged = false;
    let mut residual = 0.0;
    while !converged && sweeps < max_sweeps {
        converged = true;
        residual = 0.0f64;
        for p in 0..n {
            for q in p + 1..n {
                let (wp, wq) = (w.col(p), w.col(q));
                let alpha: f64 = wp.iter().map(|x| x.norm2()).sum();
                let beta: f64 = wq.iter().map(|x| x.norm2()).sum();
                let mut gamma = ZERO;
                for (x, y) in wp.iter().zip(wq) {
                    gamma += x.conj() * *y;
                }
                if gamma.is_zero() || gamma.abs() <= tol * (alpha * beta).sqrt() {
                    continue;
                }
                residual += 2.0 * gamma.norm2();
                converged = false;
                let g = rotation(alpha, beta, gamma);
                rotate_cols(&mut w, p, q, &g);
                rotate_cols(&mut v, p, q, &g);
            }
        }
        sweeps += 1;
    }
    let norms: Vec<f64> = (0..n).map(|j| w.col(j).iter().map(|x| x.norm2()).sum::<f64>().sqrt()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| norms[j].total_cmp(&norms[i]));
    let s: Vec<f64> = order.iter().map(|&i| norms[i]).collect();
    let top = s.first().copied().unwrap_or(0.0);
    let mut u = Mat::zeros(m, n);
    let mut vs = Mat::zeros(n, n);
    let mut have = vec![false; n];
    for (k, &i) in order.iter().enumerate() {
        vs.data[k * n..(k + 1) * n].copy_from_slice(v.col(i));
        // A column that is numerically zero carries no direction: completed below instead.
        if s[k] > top * f64::EPSILON * m as f64 && s[k] > 0.0 {
            for r in 0..m {
                *u.at_mut(r, k) = w.at(r, i).scale(1.0 / s[k]);
            }
            have[k] = true;
        }
    }
    complete(&mut u, &have);
    let residual = if top > 0.0 { residual.sqrt() / top } else { 0.0 };
    (s, u, vs, Jacobi { sweeps, residual, converged })
}

/// Fills the columns of `u` not marked in `have` with unit vectors orthonormal to the others.
///
/// Each column is the unit vector `e_i` whose part outside the span of the columns so far is
/// the largest, that part normalized. The parts' squared norms add up to the number of columns
/// still missing, so the largest is at least `1 / m` of one: there is always one to take, and
/// far enough from the span that two passes of Gram-Schmidt leave it orthogonal to rounding. A
/// first `e_i` past a fixed threshold would not do: there may be none (every `e_i` lies within
/// `sqrt(1 / 5)` of a span whose complement is `(1, 1, 1, 1, 1) / sqrt(5)`).
pub(crate) fn complete(u: &mut Mat, have: &[bool]) {
    let m = u.rows;
    let mut filled: Vec<bool> = have.to_vec();
    for k in 0..u.cols {
        if filled[k] {
            continue;
        }
        let mut best: Option<(f64, Vec<C>)> = None;
        for candidate in 0..m {
            let mut x = vec![ZERO; m];
            x[candidate] = ONE;
            // Twice is enough (Kahan's "twice is enough" for Gram-Schmidt).
            for _ in 0..2 {
                for (j, _) in filled.iter().enumerate().filter(|(_, &f)| f) {
                    let mut d = ZERO;
                    for (r, xr) in x.iter().enumerate() {
                        d += u.at(r, j).conj() * *xr;
                    }
                    for (r, xr) in x.iter_mut().enumerate() {
                        *xr -= u.at(r, j) * d;
                    }
                }
            }
            let norm = x.iter().map(|v| v.norm2()).sum::<f64>().sqrt();
            if best.as_ref().is_none_or(|(b, _)| norm > *b) {
                best = Some((norm, x));
            }
        }
        // More columns than rows would leave nothing to take: `u` is never wider than tall.
        let Some((norm, x)) = best.filter(|(norm, _)| *norm > 0.0) else { return };
        for (r, xr) in x.iter().enumerate() {
            *u.at_mut(r, k) = xr.scale(1.0 / norm);
        }
        filled[k] = true;
    }
}

/// `u` (`m x p`, orthonormal columns) extended to a square unitary `m x m`.
pub(crate) fn square(u: &Mat) -> Mat {
    let m = u.rows;
    let mut full = Mat::zeros(m, m);
    full.data[..u.data.len()].copy_from_slice(&u.data);
    let have: Vec<bool> = (0..m).map(|j| j < u.cols).collect();
    complete(&mut full, &have);
    full
}
