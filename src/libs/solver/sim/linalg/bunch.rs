//! Bunch–Kaufman factorization of a symmetric matrix (LAPACK's unblocked `sytf2`, partial
//! pivoting with 1x1 and 2x2 blocks) and its solve (`sytrs`), in LAPACK's storage and pivot
//! conventions. Complex matrices are complex symmetric: nothing is conjugated.

use super::{Mat, C, ONE};

/// Pivots in LAPACK's convention (1-based, negative pairs for 2x2 blocks).
pub(crate) type Pivots = Vec<i64>;

fn swap(a: &mut Mat, (i1, j1): (usize, usize), (i2, j2): (usize, usize)) {
    let (x, y) = (a.at(i1, j1), a.at(i2, j2));
    *a.at_mut(i1, j1) = y;
    *a.at_mut(i2, j2) = x;
}

/// Factors the `lower` (or upper) triangle of `a` in place; returns the pivots and the first
/// exactly zero block (1-based), if any. Indices below are 0-based.
pub(crate) fn sytrf(a: &mut Mat, lower: bool) -> (Pivots, Option<usize>) {
    let n = a.rows;
    let alpha = (1.0 + 17f64.sqrt()) / 8.0;
    let mut ipiv = vec![0i64; n];
    let mut info = None;
    if lower {
        let mut k = 0;
        while k < n {
            let mut kstep = 1;
            let absakk = a.at(k, k).abs1();
            let (imax, colmax) = (k + 1..n).map(|i| (i, a.at(i, k).abs1())).fold((k, 0.0), pick);
            let kp;
            if absakk.max(colmax) == 0.0 {
                info.get_or_insert(k + 1);
                kp = k;
            } else if absakk >= alpha * colmax {
                kp = k;
            } else {
                let row = (k..imax).map(|j| a.at(imax, j).abs1()).fold(0.0, f64::max);
                let rowmax = (imax + 1..n).map(|i| a.at(i, imax).abs1()).fold(row, f64::max);
                if absakk >= alpha * colmax * (colmax / rowmax) {
                    kp = k;
                } else if a.at(imax, imax).abs1() >= alpha * rowmax {
                    kp = imax;
                } else {
                    kp = imax;
                    kstep = 2;
                }
                let kk = k + kstep - 1;
                if kp != kk {
                    for i in kp + 1..n {
                        swap(a, (i, kk), (i, kp));
                    }
                    for j in kk + 1..kp {
                        swap(a, (j, kk), (kp, j));
                    }
                    swap(a, (kk, kk), (kp, kp));
                    if kstep == 2 {
                        swap(a, (k + 1, k), (kp, k));
                    }
                }
            }
            if absakk.max(colmax) != 0.0 {
                if kstep == 1 {
                    if k + 1 < n {
                        let d11 = ONE / a.at(k, k);
                        for j in k + 1..n {
                            let x = a.at(j, k) * d11;
                            for i in j..n {
                                let v = a.at(i, k) * x;
                                *a.at_mut(i, j) -= v;
                            }
                        }
                        for i in k + 1..n {
                            *a.at_mut(i, k) = a.at(i, k) * d11;
                        }
                    }
                } else if k + 2 < n {
                    let d21 = a.at(k + 1, k);
                    let d11 = a.at(k + 1, k + 1) / d21;
                    let d22 = a.at(k, k) / d21;
                    let t = ONE / (d11 * d22 - ONE);
                    let d21 = t / d21;
                    for j in k + 2..n {
                        let wk = d21 * (d11 * a.at(j, k) - a.at(j, k + 1));
                        let wkp1 = d21 * (d22 * a.at(j, k + 1) - a.at(j, k));
                        for i in j..n {
                            let v = a.at(i, k) * wk + a.at(i, k + 1) * wkp1;
                            *a.at_mut(i, j) -= v;
                        }
                        *a.at_mut(j, k) = wk;
                        *a.at_mut(j, k + 1) = wkp1;
                    }
                }
            }
            if kstep == 1 {
                ipiv[k] = kp as i64 + 1;
            } else {
                ipiv[k] = -(kp as i64 + 1);
                ipiv[k + 1] = -(kp as i64 + 1);
            }
            k += kstep;
        }
    } else {
        let mut k = n;
        while k > 0 {
            let kc = k - 1;
            let mut kstep = 1;
            let absakk = a.at(kc, kc).abs1();
            let (imax, colmax) = (0..kc).map(|i| (i, a.at(i, kc).abs1())).fold((kc, 0.0), pick);
            let kp;
            if absakk.max(colmax) == 0.0 {
                info.get_or_insert(kc + 1);
                kp = kc;
            } else if absakk >= alpha * colmax {
                kp = kc;
            } else {
                let row = (imax + 1..=kc).map(|j| a.at(imax, j).abs1()).fold(0.0, f64::max);
                let rowmax = (0..imax).map(|i| a.at(i, imax).abs1()).fold(row, f64::max);
                if absakk >= alpha * colmax * (colmax / rowmax) {
                    kp = kc;
                } else if a.at(imax, imax).abs1() >= alpha * rowmax {
                    kp = imax;
                } else {
                    kp = imax;
                    kstep = 2;
                }
                let kk = kc + 1 - kstep;
                if kp != kk {
                    for i in 0..kp {
                        swap(a, (i, kk), (i, kp));
                    }
                    for j in kp + 1..kk {
                        swap(a, (j, kk), (kp, j));
                    }
                    swap(a, (kk, kk), (kp, kp));
                    if kstep == 2 {
                        swap(a, (kc - 1, kc), (kp, kc));
                    }
                }
            }
            if absakk.max(colmax) != 0.0 {
                if kstep == 1 {
                    let r1 = ONE / a.at(kc, kc);
                    for j in 0..kc {
                        let x = a.at(j, kc) * r1;
                        for i in 0..=j {
                            let v = a.at(i, kc) * x;
                            *a.at_mut(i, j) -= v;
                        }
                    }
                    for i in 0..kc {
                        *a.at_mut(i, kc) = a.at(i, kc) * r1;
                    }
                } else if kc >= 2 {
                    let d12 = a.at(kc - 1, kc);
                    let d22 = a.at(kc - 1, kc - 1) / d12;
                    let d11 = a.at(kc, kc) / d12;
                    let t = ONE / (d11 * d22 - ONE);
                    let d12 = t / d12;
                    for j in (0..kc - 1).rev() {
                        let wkm1 = d12 * (d11 * a.at(j, kc - 1) - a.at(j, kc));
                        let wk = d12 * (d22 * a.at(j, kc) - a.at(j, kc - 1));
                        for i in (0..=j).rev() {
                            let v = a.at(i, kc) * wk + a.at(i, kc - 1) * wkm1;
                            *a.at_mut(i, j) -= v;
                        }
                        *a.at_mut(j, kc) = wk;
                        *a.at_mut(j, kc - 1) = wkm1;
                    }
                }
            }
            if kstep == 1 {
                ipiv[kc] = kp as i64 + 1;
            } else {
                ipiv[kc] = -(kp as i64 + 1);
                ipiv[kc - 1] = -(kp as i64 + 1);
            }
            k -= kstep;
        }
    }
    (ipiv, info)
}

/// The first largest (index, value): LAPACK's `i*amax` order.
fn pick(best: (usize, f64), next: (usize, f64)) -> (usize, f64) {
    if next.1 > best.1 {
        next
    } else {
        best
    }
}

fn swap_rows(b: &mut Mat, i: usize, p: usize) {
    if i != p {
        for c in 0..b.cols {
            swap(b, (i, c), (p, c));
        }
    }
}

/// A 1-based pivot as a 0-based row; one out of range swaps nothing (`None`).
fn row(p: i64, n: usize) -> Option<usize> {
    usize::try_from(p.unsigned_abs()).ok().and_then(|v| v.checked_sub(1)).filter(|&v| v < n)
}

/// `B(dst, :) -= a(src_rows, col) ⋅ B(src_rows, :)` (a row update from a column of the factor).
fn dot_update(b: &mut Mat, a: &Mat, dst: usize, col: usize, rows: std::ops::Range<usize>) {
    for c in 0..b.cols {
        let mut s = C::default();
        for i in rows.clone() {
            s += a.at(i, col) * b.at(i, c);
        }
        *b.at_mut(dst, c) -= s;
    }
}

/// `B(rows, :) -= a(rows, col) B(src, :)`.
fn ger(b: &mut Mat, a: &Mat, col: usize, src: usize, rows: std::ops::Range<usize>) {
    for c in 0..b.cols {
        let x = b.at(src, c);
        for i in rows.clone() {
            *b.at_mut(i, c) -= a.at(i, col) * x;
        }
    }
}

/// The 2x2 block solve of rows `p`, `q` (`p` the block's first) with `D = [[a11, a21],
/// [a21, a22]]`.
fn block(b: &mut Mat, (p, q): (usize, usize), a11: C, a21: C, a22: C) {
    let akm1 = a11 / a21;
    let ak = a22 / a21;
    let denom = akm1 * ak - ONE;
    for c in 0..b.cols {
        let bkm1 = b.at(p, c) / a21;
        let bk = b.at(q, c) / a21;
        *b.at_mut(p, c) = (ak * bkm1 - bk) / denom;
        *b.at_mut(q, c) = (akm1 * bk - bkm1) / denom;
    }
}

/// Solves `A X = B` in place with the factor `f` and `ipiv` from [`sytrf`] (LAPACK's `sytrs`).
pub(crate) fn sytrs(f: &Mat, ipiv: &[i64], lower: bool, b: &mut Mat) {
    let n = f.rows;
    let piv = |k: usize| ipiv.get(k).copied().unwrap_or(0);
    if lower {
        let mut k = 0;
        while k < n {
            if piv(k) > 0 {
                if let Some(p) = row(piv(k), n) {
                    swap_rows(b, k, p);
                }
                ger(b, f, k, k, k + 1..n);
                let d = ONE / f.at(k, k);
                for c in 0..b.cols {
                    *b.at_mut(k, c) = b.at(k, c) * d;
                }
                k += 1;
            } else {
                if k + 1 >= n {
                    break;
                }
                if let Some(p) = row(piv(k), n) {
                    swap_rows(b, k + 1, p);
                }
                ger(b, f, k, k, k + 2..n);
                ger(b, f, k + 1, k + 1, k + 2..n);
                block(b, (k, k + 1), f.at(k, k), f.at(k + 1, k), f.at(k + 1, k + 1));
                k += 2;
            }
        }
        let mut k = n;
        while k > 0 {
            let kc = k - 1;
            if piv(kc) > 0 {
                dot_update(b, f, kc, kc, kc + 1..n);
                if let Some(p) = row(piv(kc), n) {
                    swap_rows(b, kc, p);
                }
                k -= 1;
            } else {
                if kc == 0 {
                    break;
                }
                dot_update(b, f, kc, kc, kc + 1..n);
                dot_update(b, f, kc - 1, kc - 1, kc + 1..n);
                if let Some(p) = row(piv(kc), n) {
                    swap_rows(b, kc, p);
                }
                k -= 2;
            }
        }
    } else {
        let mut k = n;
        while k > 0 {
            let kc = k - 1;
            if piv(kc) > 0 {
                if let Some(p) = row(piv(kc), n) {
                    swap_rows(b, kc, p);
                }
                ger(b, f, kc, kc, 0..kc);
                let d = ONE / f.at(kc, kc);
                for c in 0..b.cols {
                    *b.at_mut(kc, c) = b.at(kc, c) * d;
                }
                k -= 1;
            } else {
                if kc == 0 {
                    break;
                }
                if let Some(p) = row(piv(kc), n) {
                    swap_rows(b, kc - 1, p);
                }
                ger(b, f, kc, kc, 0..kc - 1);
                ger(b, f, kc - 1, kc - 1, 0..kc - 1);
                block(b, (kc - 1, kc), f.at(kc - 1, kc - 1), f.at(kc - 1, kc), f.at(kc, kc));
                k -= 2;
            }
        }
        let mut k = 0;
        while k < n {
            if piv(k) > 0 {
                dot_update(b, f, k, k, 0..k);
                if let Some(p) = row(piv(k), n) {
                    swap_rows(b, k, p);
                }
                k += 1;
            } else {
                if k + 1 >= n {
                    break;
                }
                dot_update(b, f, k, k, 0..k);
                dot_update(b, f, k + 1, k + 1, 0..k);
                if let Some(p) = row(piv(k), n) {
                    swap_rows(b, k, p);
                }
                k += 2;
            }
        }
    }
}
