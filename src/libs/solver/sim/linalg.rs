//! The dense kernels the simulated cuSOLVER ops run: plain loops on column-major matrices of
//! complex `f64` (a real matrix is one whose imaginary parts stay zero; every routine here keeps
//! them zero for real input, so one implementation serves the four element types).

use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub, SubAssign};

/// A complex `f64`: the arithmetic every simulated solver op computes in.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct C {
    pub re: f64,
    pub im: f64,
}

pub(crate) const ZERO: C = C { re: 0.0, im: 0.0 };
pub(crate) const ONE: C = C { re: 1.0, im: 0.0 };

impl C {
    pub(crate) const fn new(re: f64, im: f64) -> C {
        C { re, im }
    }
    pub(crate) const fn real(re: f64) -> C {
        C { re, im: 0.0 }
    }
    pub(crate) fn conj(self) -> C {
        C { re: self.re, im: -self.im }
    }
    /// `|z|²`.
    pub(crate) fn norm2(self) -> f64 {
        self.re * self.re + self.im * self.im
    }
    pub(crate) fn abs(self) -> f64 {
        self.re.hypot(self.im)
    }
    /// `|re| + |im|`: LAPACK's pivot measure (`izamax`), `|x|` for real numbers.
    pub(crate) fn abs1(self) -> f64 {
        self.re.abs() + self.im.abs()
    }
    pub(crate) fn scale(self, s: f64) -> C {
        C { re: self.re * s, im: self.im * s }
    }
    pub(crate) fn is_zero(self) -> bool {
        self.re == 0.0 && self.im == 0.0
    }
}

impl Add for C {
    type Output = C;
    fn add(self, o: C) -> C {
        C { re: self.re + o.re, im: self.im + o.im }
    }
}
impl Sub for C {
    type Output = C;
    fn sub(self, o: C) -> C {
        C { re: self.re - o.re, im: self.im - o.im }
    }
}
impl Mul for C {
    type Output = C;
    fn mul(self, o: C) -> C {
        C { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
}
impl Div for C {
    type Output = C;
    fn div(self, o: C) -> C {
        // Smith's algorithm: no overflow in the squared magnitude.
        if o.im == 0.0 {
            return C { re: self.re / o.re, im: self.im / o.re };
        }
        if o.re.abs() >= o.im.abs() {
            let r = o.im / o.re;
            let d = o.re + o.im * r;
            C { re: (self.re + self.im * r) / d, im: (self.im - self.re * r) / d }
        } else {
            let r = o.re / o.im;
            let d = o.re * r + o.im;
            C { re: (self.re * r + self.im) / d, im: (self.im * r - self.re) / d }
        }
    }
}
impl Neg for C {
    type Output = C;
    fn neg(self) -> C {
        C { re: -self.re, im: -self.im }
    }
}
impl AddAssign for C {
    fn add_assign(&mut self, o: C) {
        *self = *self + o;
    }
}
impl SubAssign for C {
    fn sub_assign(&mut self, o: C) {
        *self = *self - o;
    }
}

/// A column-major matrix, packed (leading dimension = rows).
#[derive(Clone, Debug)]
pub(crate) struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<C>,
}

impl Mat {
    pub(crate) fn zeros(rows: usize, cols: usize) -> Mat {
        Mat { rows, cols, data: vec![ZERO; rows * cols] }
    }
    pub(crate) fn identity(rows: usize, cols: usize) -> Mat {
        let mut m = Mat::zeros(rows, cols);
        for i in 0..rows.min(cols) {
            m.data[i + i * rows] = ONE;
        }
        m
    }
    #[inline]
    pub(crate) fn at(&self, i: usize, j: usize) -> C {
        self.data[i + j * self.rows]
    }
    #[inline]
    pub(crate) fn at_mut(&mut self, i: usize, j: usize) -> &mut C {
        &mut self.data[i + j * self.rows]
    }
    /// `Aᴴ`.
    pub(crate) fn adjoint(&self) -> Mat {
        let mut t = Mat::zeros(self.cols, self.rows);
        for j in 0..self.cols {
            for i in 0..self.rows {
                *t.at_mut(j, i) = self.at(i, j).conj();
            }
        }
        t
    }
    /// `self · b`.
    pub(crate) fn mul(&self, b: &Mat) -> Mat {
        let mut c = Mat::zeros(self.rows, b.cols);
        for j in 0..b.cols {
            for k in 0..self.cols {
                let bkj = b.at(k, j);
                if bkj.is_zero() {
                    continue;
                }
                for i in 0..self.rows {
                    c.data[i + j * self.rows] += self.data[i + k * self.rows] * bkj;
                }
            }
        }
        c
    }
    fn col(&self, j: usize) -> &[C] {
        &self.data[j * self.rows..(j + 1) * self.rows]
    }
}

/// Which triangle of a Hermitian matrix is meant (`true`: lower).
pub(crate) type Lower = bool;

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
pub(crate) fn complete(u: &mut Mat, have: &[bool]) {
    let m = u.rows;
    let mut filled: Vec<bool> = have.to_vec();
    let mut candidate = 0;
    for k in 0..u.cols {
        if filled[k] {
            continue;
        }
        while candidate < m {
            let mut x = vec![ZERO; m];
            x[candidate] = ONE;
            candidate += 1;
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
            if norm > 0.5 {
                for (r, xr) in x.iter().enumerate() {
                    *u.at_mut(r, k) = xr.scale(1.0 / norm);
                }
                filled[k] = true;
                break;
            }
        }
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
