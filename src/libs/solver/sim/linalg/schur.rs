//! Eigenvalues and right eigenvectors of a general (non-Hermitian) matrix: Householder
//! reduction to Hessenberg form, the complex Schur form by shifted QR (Wilkinson shifts,
//! Givens rotations), and the eigenvectors by back substitution in the triangular factor.
//! Every matrix is treated as complex; a real one's eigenvalues come out as conjugate pairs
//! to rounding.

use super::{Mat, C, ONE, ZERO};

/// The principal square root.
fn csqrt(z: C) -> C {
    let r = z.abs();
    if r == 0.0 {
        return ZERO;
    }
    let re = ((r + z.re) / 2.0).sqrt();
    let im = ((r - z.re) / 2.0).sqrt();
    C::new(re, if z.im < 0.0 { -im } else { im })
}

/// Reduces `h` to upper Hessenberg form in place, accumulating the unitary `Q` (`A = Q H Qᴴ`).
fn hessenberg(h: &mut Mat) -> Mat {
    let n = h.rows;
    let mut q = Mat::identity(n, n);
    for k in 0..n.saturating_sub(2) {
        let mut v: Vec<C> = (k + 1..n).map(|i| h.at(i, k)).collect();
        let norm = v.iter().map(|x| x.norm2()).sum::<f64>().sqrt();
        if norm == 0.0 {
            continue;
        }
        let phase = if v[0].is_zero() { ONE } else { v[0].scale(1.0 / v[0].abs()) };
        v[0] += phase.scale(norm);
        let vv: f64 = v.iter().map(|x| x.norm2()).sum();
        // P = I - 2 v vᴴ / vᴴv on rows/columns k+1.., from both sides, and into Q.
        for j in 0..n {
            let mut s = ZERO;
            for (r, vr) in v.iter().enumerate() {
                s += vr.conj() * h.at(k + 1 + r, j);
            }
            let s = s.scale(2.0 / vv);
            for (r, vr) in v.iter().enumerate() {
                *h.at_mut(k + 1 + r, j) -= *vr * s;
            }
        }
        for m in [&mut *h, &mut q] {
            for i in 0..n {
                let mut s = ZERO;
                for (r, vr) in v.iter().enumerate() {
                    s += m.at(i, k + 1 + r) * *vr;
                }
                let s = s.scale(2.0 / vv);
                for (r, vr) in v.iter().enumerate() {
                    *m.at_mut(i, k + 1 + r) -= s * vr.conj();
                }
            }
        }
        for i in k + 2..n {
            *h.at_mut(i, k) = ZERO;
        }
    }
    q
}

/// The complex Schur form `A = Z T Zᴴ` of `a`: `T` upper triangular (the eigenvalues on its
/// diagonal) and `Z`; `None` when QR did not converge in `30 n` iterations.
fn schur(a: &Mat) -> Option<(Mat, Mat)> {
    let n = a.rows;
    let mut t = a.clone();
    let mut z = hessenberg(&mut t);
    if n < 2 {
        return Some((t, z));
    }
    let mut hi = n - 1;
    let (mut iters, mut total) = (0u32, 0usize);
    while hi > 0 {
        let mut l = hi;
        while l > 0 {
            let scale = t.at(l - 1, l - 1).abs1() + t.at(l, l).abs1();
            if t.at(l, l - 1).abs1() <= f64::EPSILON * scale.max(f64::MIN_POSITIVE) {
                *t.at_mut(l, l - 1) = ZERO;
                break;
            }
            l -= 1;
        }
        if l == hi {
            hi -= 1;
            iters = 0;
            continue;
        }
        total += 1;
        if total > 30 * n {
            return None;
        }
        iters += 1;
        let (a11, a12, a21, a22) = (t.at(hi - 1, hi - 1), t.at(hi - 1, hi), t.at(hi, hi - 1), t.at(hi, hi));
        let mu = if iters % 11 == 10 {
            // An exceptional shift breaks a cycle.
            a22 + C::real(t.at(hi, hi - 1).abs())
        } else {
            let half = (a11 - a22).scale(0.5);
            let root = csqrt(half * half + a12 * a21);
            let mid = (a11 + a22).scale(0.5);
            let (m1, m2) = (mid + root, mid - root);
            if (m1 - a22).abs() <= (m2 - a22).abs() {
                m1
            } else {
                m2
            }
        };
        for i in l..=hi {
            *t.at_mut(i, i) -= mu;
        }
        let mut rots = Vec::with_capacity(hi - l);
        for k in l..hi {
            let (x, y) = (t.at(k, k), t.at(k + 1, k));
            let r = (x.norm2() + y.norm2()).sqrt();
            let (c, s) = if r == 0.0 { (ONE, ZERO) } else { (x.scale(1.0 / r), y.scale(1.0 / r)) };
            for j in k..n {
                let (u, v) = (t.at(k, j), t.at(k + 1, j));
                *t.at_mut(k, j) = c.conj() * u + s.conj() * v;
                *t.at_mut(k + 1, j) = c * v - s * u;
            }
            rots.push((c, s));
        }
        for (k, &(c, s)) in (l..hi).zip(&rots) {
            for i in 0..=(k + 1) {
                let (u, v) = (t.at(i, k), t.at(i, k + 1));
                *t.at_mut(i, k) = u * c + v * s;
                *t.at_mut(i, k + 1) = v * c.conj() - u * s.conj();
            }
            for i in 0..n {
                let (u, v) = (z.at(i, k), z.at(i, k + 1));
                *z.at_mut(i, k) = u * c + v * s;
                *z.at_mut(i, k + 1) = v * c.conj() - u * s.conj();
            }
        }
        for i in l..=hi {
            *t.at_mut(i, i) += mu;
        }
    }
    for j in 0..n {
        for i in j + 1..n {
            *t.at_mut(i, j) = ZERO;
        }
    }
    Some((t, z))
}

/// The eigenvalues of the general `a` and, with `vectors`, its right eigenvectors (columns, in
/// the same order), each of norm 1 with its largest component real; `None` when QR did not
/// converge.
pub(crate) fn eig(a: &Mat, vectors: bool) -> Option<(Vec<C>, Option<Mat>)> {
    let n = a.rows;
    let (t, z) = schur(a)?;
    let w: Vec<C> = (0..n).map(|i| t.at(i, i)).collect();
    if !vectors {
        return Some((w, None));
    }
    let norm = t.data.iter().map(|v| v.norm2()).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    let mut v = Mat::zeros(n, n);
    for k in 0..n {
        let mut y = vec![ZERO; n];
        y[k] = ONE;
        for i in (0..k).rev() {
            let mut s = ZERO;
            for (j, yj) in y.iter().enumerate().take(k + 1).skip(i + 1) {
                s += t.at(i, j) * *yj;
            }
            let mut d = t.at(i, i) - w[k];
            // A repeated eigenvalue: perturb the pivot, as LAPACK's trevc does.
            if d.abs() < f64::EPSILON * norm {
                d = C::real(f64::EPSILON * norm);
            }
            y[i] = -(s / d);
        }
        let mut x = vec![ZERO; n];
        for (r, xr) in x.iter_mut().enumerate() {
            for (j, yj) in y.iter().enumerate().take(k + 1) {
                *xr += z.at(r, j) * *yj;
            }
        }
        let len = x.iter().map(|c| c.norm2()).sum::<f64>().sqrt();
        // The first of the largest components: the phase makes it real, and only its rounding
        // is cleared below (another, equally large component keeps its imaginary part).
        let top = (0..n).fold(0, |b, r| if x[r].abs() > x[b].abs() { r } else { b });
        let big = x[top];
        let phase = if big.is_zero() { ONE } else { big.conj().scale(1.0 / big.abs()) };
        for (r, xr) in x.iter().enumerate() {
            *v.at_mut(r, k) = (*xr * phase).scale(1.0 / len);
        }
        // The largest component exactly real.
        let re = v.at(top, k).re;
        *v.at_mut(top, k) = C::real(re);
    }
    Some((w, Some(v)))
}
