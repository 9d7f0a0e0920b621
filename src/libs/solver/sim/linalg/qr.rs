//! Householder QR with LAPACK's reflector conventions (`tau`, `v[0] = 1`): the factorization,
//! the reflectors applied from either side, and `Q` formed or applied.

use super::{Mat, C, ONE, ZERO};

/// LAPACK's `larfg`: the reflector `H = I - τ v vᴴ` (`v[0] = 1`) with `Hᴴ [α; x] = [β; 0]`, `β`
/// real. Overwrites `x` with `v[1..]` and returns `(β, τ)`.
fn larfg(alpha: C, x: &mut [C]) -> (f64, C) {
    let xnorm = x.iter().map(|v| v.norm2()).sum::<f64>().sqrt();
    if xnorm == 0.0 && alpha.im == 0.0 {
        return (alpha.re, ZERO);
    }
    let len = (alpha.norm2() + xnorm * xnorm).sqrt();
    let beta = if alpha.re >= 0.0 { -len } else { len };
    let tau = C::new((beta - alpha.re) / beta, -alpha.im / beta);
    let s = ONE / (alpha - C::real(beta));
    for v in x.iter_mut() {
        *v = *v * s;
    }
    (beta, tau)
}

/// Applies `I - t v vᴴ` from the left to rows `r0..r0 + v.len()` of `c`.
pub(crate) fn reflect_left(c: &mut Mat, r0: usize, v: &[C], t: C) {
    if t.is_zero() {
        return;
    }
    for col in 0..c.cols {
        let mut w = ZERO;
        for (r, vr) in v.iter().enumerate() {
            w += vr.conj() * c.at(r0 + r, col);
        }
        let tw = t * w;
        for (r, vr) in v.iter().enumerate() {
            *c.at_mut(r0 + r, col) -= *vr * tw;
        }
    }
}

/// Applies `I - t v vᴴ` from the right to columns `c0..c0 + v.len()` of `c`.
pub(crate) fn reflect_right(c: &mut Mat, c0: usize, v: &[C], t: C) {
    if t.is_zero() {
        return;
    }
    for row in 0..c.rows {
        let mut w = ZERO;
        for (k, vk) in v.iter().enumerate() {
            w += c.at(row, c0 + k) * *vk;
        }
        let tw = t * w;
        for (k, vk) in v.iter().enumerate() {
            *c.at_mut(row, c0 + k) -= tw * vk.conj();
        }
    }
}

/// Householder QR in place (LAPACK's `geqr2`): `R` in the upper triangle, the reflectors below
/// it; returns the `min(m, n)` scales.
pub(crate) fn geqrf(a: &mut Mat) -> Vec<C> {
    let (m, n) = (a.rows, a.cols);
    let k = m.min(n);
    let mut tau = Vec::with_capacity(k);
    for i in 0..k {
        let alpha = a.at(i, i);
        let (beta, t) = larfg(alpha, &mut a.data[i + 1 + i * m..(i + 1) * m]);
        *a.at_mut(i, i) = C::real(beta);
        tau.push(t);
        if i + 1 < n {
            let v = reflector(a, i, m);
            // Hᴴ on the trailing columns.
            let mut trailing = Mat { rows: m, cols: n - i - 1, data: a.data[(i + 1) * m..].to_vec() };
            reflect_left(&mut trailing, i, &v, t.conj());
            a.data[(i + 1) * m..].copy_from_slice(&trailing.data);
        }
    }
    tau
}

/// Reflector `i` of a QR factor `a` over its first `rows` rows: `[1, a(i+1.., i)]`.
pub(crate) fn reflector(a: &Mat, i: usize, rows: usize) -> Vec<C> {
    let mut v = Vec::with_capacity(rows - i);
    v.push(ONE);
    v.extend((i + 1..rows).map(|r| a.at(r, i)));
    v
}

/// The first `n` columns of `Q = H_1 ⋯ H_k` (`m x n`) from the reflectors in `a` and `tau`.
pub(crate) fn orgqr(a: &Mat, n: usize, tau: &[C]) -> Mat {
    let m = a.rows;
    let mut q = Mat::identity(m, n);
    for i in (0..tau.len()).rev() {
        reflect_left(&mut q, i, &reflector(a, i, m), tau[i]);
    }
    q
}

/// `op(Q) C` (`left`) or `C op(Q)`, `Q = H_1 ⋯ H_k` from the reflectors in `a` (its first
/// `order` rows) and `tau`; `adjoint` applies `Qᴴ`.
pub(crate) fn ormqr(a: &Mat, order: usize, tau: &[C], left: bool, adjoint: bool, c: &mut Mat) {
    let k = tau.len();
    // Q C = H_1 (H_2 (⋯ H_k C)); Qᴴ C = H_kᴴ (⋯ H_1ᴴ C); C Q = ((C H_1) H_2) ⋯; C Qᴴ = C H_kᴴ ⋯ H_1ᴴ.
    let forward = left == adjoint;
    for step in 0..k {
        let i = if forward { step } else { k - 1 - step };
        let v = reflector(a, i, order);
        let t = if adjoint { tau[i].conj() } else { tau[i] };
        if left {
            reflect_left(c, i, &v, t);
        } else {
            reflect_right(c, i, &v, t);
        }
    }
}
