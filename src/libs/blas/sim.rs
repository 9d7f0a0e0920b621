//! The simulator's cuBLAS: every op computed on the host, from the simulated memory of its
//! buffers, with cuBLAS's semantics (column-major storage, transposes, leading dimensions,
//! batch strides, BLAS increments, fill modes, `beta == 0` leaving `C` unread).
//!
//! The f32 and f64 GEMM cores are `matrixmultiply`'s (single-threaded, vectorized), which takes
//! a row and a column stride per operand: a transpose swaps them, a leading dimension is the
//! column stride (a conjugate transpose of a real matrix is its transpose, as in cuBLAS). f16
//! and bf16 operands are widened to f32, multiplied there (cuBLAS's compute type for them) and
//! each stored element rounded back. Complex GEMMs, and every level 1 to 3 kernel, compute in
//! f64 complex arithmetic ([`Z`]; a real value is `re + 0i`) and round each stored element once.
//! The TF32 math mode is not imitated: f32 GEMMs are computed in full f32.
//!
//! The kernels here run inside a simulated kernel, after validation: every index stays inside
//! the spans the op checked, so the slices are indexed plainly.

use super::Transpose;
use crate::memory::Complex;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A complex number in f64: the arithmetic of every simulated level 1 to 3 kernel and of the
/// complex GEMMs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Z {
    /// Real part.
    pub re: f64,
    /// Imaginary part.
    pub im: f64,
}

impl Z {
    /// `re + 0i`.
    pub fn real(re: f64) -> Z {
        Z { re, im: 0.0 }
    }

    /// The conjugate.
    pub fn conj(self) -> Z {
        Z { re: self.re, im: -self.im }
    }

    /// `|re| + |im|`: the magnitude cuBLAS's `asum`, `iamax` and `iamin` use for complex values
    /// (and `|x|` for real ones).
    pub fn abs1(self) -> f64 {
        self.re.abs() + self.im.abs()
    }

    /// Whether it is exactly zero.
    pub fn is_zero(self) -> bool {
        self.re == 0.0 && self.im == 0.0
    }
}

impl Add for Z {
    type Output = Z;
    fn add(self, o: Z) -> Z {
        Z { re: self.re + o.re, im: self.im + o.im }
    }
}
impl Sub for Z {
    type Output = Z;
    fn sub(self, o: Z) -> Z {
        Z { re: self.re - o.re, im: self.im - o.im }
    }
}
impl Mul for Z {
    type Output = Z;
    fn mul(self, o: Z) -> Z {
        Z { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
}
impl Div for Z {
    type Output = Z;
    fn div(self, o: Z) -> Z {
        // Smith's algorithm: no overflow in the squares of `o`'s parts.
        if o.im == 0.0 {
            return Z { re: self.re / o.re, im: self.im / o.re };
        }
        if o.re.abs() >= o.im.abs() {
            let (r, den) = (o.im / o.re, o.re + o.im * (o.im / o.re));
            Z { re: (self.re + self.im * r) / den, im: (self.im - self.re * r) / den }
        } else {
            let (r, den) = (o.re / o.im, o.im + o.re * (o.re / o.im));
            Z { re: (self.re * r + self.im) / den, im: (self.im * r - self.re) / den }
        }
    }
}
impl Neg for Z {
    type Output = Z;
    fn neg(self) -> Z {
        Z { re: -self.re, im: -self.im }
    }
}

/// The element and scalar types of the level 1 to 3 kernels (f32, f64 and their complex
/// forms), as [`Z`]s.
pub trait Scalar: Copy + Default + PartialEq + Send + Sync + 'static {
    /// Whether the type is complex.
    const COMPLEX: bool;
    /// The value in f64 (exactly).
    fn z(self) -> Z;
    /// `z` rounded to the type (a real type keeps the real part).
    fn from_z(z: Z) -> Self;
}

impl Scalar for f32 {
    const COMPLEX: bool = false;
    fn z(self) -> Z {
        Z::real(self as f64)
    }
    fn from_z(z: Z) -> f32 {
        z.re as f32
    }
}
impl Scalar for f64 {
    const COMPLEX: bool = false;
    fn z(self) -> Z {
        Z::real(self)
    }
    fn from_z(z: Z) -> f64 {
        z.re
    }
}
impl Scalar for Complex<f32> {
    const COMPLEX: bool = true;
    fn z(self) -> Z {
        Z { re: self.re as f64, im: self.im as f64 }
    }
    fn from_z(z: Z) -> Self {
        Complex::new(z.re as f32, z.im as f32)
    }
}
impl Scalar for Complex<f64> {
    const COMPLEX: bool = true;
    fn z(self) -> Z {
        Z { re: self.re, im: self.im }
    }
    fn from_z(z: Z) -> Self {
        Complex::new(z.re, z.im)
    }
}

/// A column-major operand: its leading dimension and whether the op transposes it.
#[derive(Clone, Copy, Debug)]
pub struct Mat {
    /// Leading dimension.
    pub ld: usize,
    /// Whether the op uses it transposed.
    pub trans: Transpose,
}

impl Mat {
    /// The (row, column) strides of `op(X)`.
    fn strides(self) -> (isize, isize) {
        match self.trans {
            Transpose::No => (1, self.ld as isize),
            Transpose::Yes | Transpose::Conj => (self.ld as isize, 1),
        }
    }

    /// The index of `op(X)[i, j]`.
    fn at(self, i: usize, j: usize) -> usize {
        match self.trans {
            Transpose::No => i + j * self.ld,
            Transpose::Yes | Transpose::Conj => j + i * self.ld,
        }
    }

    /// `op(X)[i, j]`, conjugated for a conjugate transpose.
    pub(super) fn get<T: Scalar>(self, x: &[T], i: usize, j: usize) -> Z {
        let v = x[self.at(i, j)].z();
        if self.trans == Transpose::Conj {
            v.conj()
        } else {
            v
        }
    }
}

/// A GEMM's shape: `C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// `A`.
    pub a: Mat,
    /// `B`.
    pub b: Mat,
    /// Leading dimension of `C`.
    pub ldc: usize,
}

/// The real types with a `matrixmultiply` GEMM core (f32 and f64).
pub trait Real:
    Copy
    + PartialOrd
    + Default
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + Send
    + 'static
{
    /// `C = alpha op(A) op(B) + beta C` through `matrixmultiply`; `C` is not read when `beta`
    /// is zero.
    fn mm(s: &Shape, alpha: Self, a: &[Self], b: &[Self], beta: Self, c: &mut [Self]);
}

macro_rules! real {
    ($t:ty, $gemm:ident) => {
        impl Real for $t {
            fn mm(s: &Shape, alpha: Self, a: &[Self], b: &[Self], beta: Self, c: &mut [Self]) {
                let ((rsa, csa), (rsb, csb)) = (s.a.strides(), s.b.strides());
                // The op validated that each buffer covers its operand's span: the last element
                // matrixmultiply touches is inside the slice.
                assert!(s.m == 0 || s.n == 0 || c.len() > (s.m - 1) + (s.n - 1) * s.ldc, "C's span");
                if s.k > 0 && s.m > 0 && s.n > 0 {
                    assert!(a.len() > s.a.at(s.m - 1, s.k - 1) && b.len() > s.b.at(s.k - 1, s.n - 1), "spans");
                }
                // SAFETY: 1. the asserts above keep every element of op(A) (m x k), op(B)
                // (k x n) and C (m x n) at these strides inside its slice; 2. `c` is a unique
                // borrow, so it aliases neither input, and C's strides (1, ldc >= m) give
                // distinct elements distinct addresses; 3. with beta zero matrixmultiply does
                // not read C.
                unsafe {
                    matrixmultiply::$gemm(
                        s.m,
                        s.k,
                        s.n,
                        alpha,
                        a.as_ptr(),
                        rsa,
                        csa,
                        b.as_ptr(),
                        rsb,
                        csb,
                        beta,
                        c.as_mut_ptr(),
                        1,
                        s.ldc as isize,
                    )
                }
            }
        }
    };
}
real!(f32, sgemm);
real!(f64, dgemm);

/// The element types of the simulated GEMM: f32 and f64 multiply in place, the half types
/// through f32 copies, the complex types in f64 loops.
pub trait SimGemm: Copy + Send + 'static {
    /// `C = alpha op(A) op(B) + beta C` (see [`Shape`]); `alpha` and `beta` are the op's
    /// scalars, widened to f64 (exactly: a real type's are `re + 0i`).
    fn gemm(s: &Shape, alpha: Z, a: &[Self], b: &[Self], beta: Z, c: &mut [Self]);
}

impl SimGemm for f32 {
    fn gemm(s: &Shape, alpha: Z, a: &[f32], b: &[f32], beta: Z, c: &mut [f32]) {
        f32::mm(s, alpha.re as f32, a, b, beta.re as f32, c)
    }
}

impl SimGemm for f64 {
    fn gemm(s: &Shape, alpha: Z, a: &[f64], b: &[f64], beta: Z, c: &mut [f64]) {
        f64::mm(s, alpha.re, a, b, beta.re, c)
    }
}

macro_rules! half_gemm {
    ($t:ty) => {
        impl SimGemm for $t {
            fn gemm(s: &Shape, alpha: Z, a: &[$t], b: &[$t], beta: Z, c: &mut [$t]) {
                let wide = |x: &[$t]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
                let (a32, b32) = (wide(a), wide(b));
                // C is widened only when it is read; the padding rows between m and ldc keep
                // their contents either way, since only op's m x n elements are stored back.
                let mut c32 = if beta.is_zero() { vec![0.0f32; c.len()] } else { wide(c) };
                f32::mm(s, alpha.re as f32, &a32, &b32, beta.re as f32, &mut c32);
                for j in 0..s.n {
                    let col = j * s.ldc;
                    for (o, v) in c[col..col + s.m].iter_mut().zip(&c32[col..col + s.m]) {
                        *o = <$t>::from_f32(*v);
                    }
                }
            }
        }
    };
}
half_gemm!(half::f16);
half_gemm!(half::bf16);

/// The complex GEMM: f64 loops over `op(A)` and `op(B)` (conjugated for a conjugate
/// transpose), each element of `C` rounded once; `C` is not read when `beta` is zero.
fn complex_gemm<T: Scalar>(s: &Shape, alpha: Z, a: &[T], b: &[T], beta: Z, c: &mut [T]) {
    for j in 0..s.n {
        for i in 0..s.m {
            let mut sum = Z::default();
            if !alpha.is_zero() {
                for l in 0..s.k {
                    sum = sum + s.a.get(a, i, l) * s.b.get(b, l, j);
                }
            }
            let e = &mut c[i + j * s.ldc];
            let old = if beta.is_zero() { Z::default() } else { beta * e.z() };
            *e = T::from_z(alpha * sum + old);
        }
    }
}

impl SimGemm for Complex<f32> {
    fn gemm(s: &Shape, alpha: Z, a: &[Self], b: &[Self], beta: Z, c: &mut [Self]) {
        complex_gemm(s, alpha, a, b, beta, c)
    }
}

impl SimGemm for Complex<f64> {
    fn gemm(s: &Shape, alpha: Z, a: &[Self], b: &[Self], beta: Z, c: &mut [Self]) {
        complex_gemm(s, alpha, a, b, beta, c)
    }
}

/// The index of element `i` of an `n`-element BLAS vector with increment `inc`: a negative
/// increment walks the same elements from the end.
pub(super) fn vec_index(n: usize, inc: isize, i: usize) -> usize {
    let step = inc.unsigned_abs();
    if inc >= 0 {
        i * step
    } else {
        (n - 1 - i) * step
    }
}

/// The `n` elements of a vector view, in order.
pub(super) fn gather<T: Copy>(x: &[T], n: usize, inc: isize) -> Vec<T> {
    (0..n).map(|i| x[vec_index(n, inc, i)]).collect()
}

/// `sqrt(sum x_i^2)` without overflow or underflow in the squares: the sum is kept scaled by
/// the largest magnitude so far. A complex vector's norm is that of its parts, side by side.
pub(super) fn nrm2(x: &[f64]) -> f64 {
    let (mut scale, mut ssq) = (0.0f64, 1.0f64);
    for &v in x {
        let a = v.abs();
        if a == 0.0 {
            continue;
        }
        if a.is_nan() {
            return f64::NAN;
        }
        if scale < a {
            ssq = 1.0 + ssq * (scale / a) * (scale / a);
            scale = a;
        } else {
            ssq += (a / scale) * (a / scale);
        }
    }
    scale * ssq.sqrt()
}

/// The 0-based index of the first largest (`max`) or smallest `|re| + |im|`.
pub(super) fn index_of<T: Scalar>(x: &[T], max: bool) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate().skip(1) {
        let (a, b) = (v.z().abs1(), x[best].z().abs1());
        if (max && a > b) || (!max && a < b) {
            best = i;
        }
    }
    best
}

/// `y = alpha op(A) x + beta y` with `A` stored `m x n` at `lda`; `x` gathered, `y` strided.
/// `y` is not read when `beta` is zero; the product is skipped when `alpha` is zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv<T: Scalar>(
    trans: Transpose,
    m: usize,
    n: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    x: &[T],
    beta: T,
    y: &mut [T],
    incy: isize,
) {
    let (alpha, beta) = (alpha.z(), beta.z());
    let a_op = Mat { ld: lda, trans };
    let (rows, cols) = match trans {
        Transpose::No => (m, n),
        Transpose::Yes | Transpose::Conj => (n, m),
    };
    for i in 0..rows {
        let mut sum = Z::default();
        if !alpha.is_zero() {
            for (l, xl) in x.iter().enumerate().take(cols) {
                sum = sum + a_op.get(a, i, l) * xl.z();
            }
        }
        let yi = &mut y[vec_index(rows, incy, i)];
        let old = if beta.is_zero() { Z::default() } else { beta * yi.z() };
        *yi = T::from_z(alpha * sum + old);
    }
}

/// `C = alpha op(A) + beta op(B)` (`m x n`); a term whose scalar is zero is not read.
#[allow(clippy::too_many_arguments)]
pub(super) fn geam<T: Scalar>(
    m: usize,
    n: usize,
    alpha: T,
    a: &[T],
    a_op: Mat,
    beta: T,
    b: &[T],
    b_op: Mat,
    c: &mut [T],
    ldc: usize,
) {
    let (alpha, beta) = (alpha.z(), beta.z());
    for j in 0..n {
        for i in 0..m {
            let x = if alpha.is_zero() { Z::default() } else { alpha * a_op.get(a, i, j) };
            let y = if beta.is_zero() { Z::default() } else { beta * b_op.get(b, i, j) };
            c[i + j * ldc] = T::from_z(x + y);
        }
    }
}

/// Whether `op(A)` of a triangular `A` stored in the `lower` triangle is lower triangular.
pub(super) fn op_lower(lower: bool, trans: Transpose) -> bool {
    lower != (trans != Transpose::No)
}

/// Solves `op(A) X = alpha B` (`left`) or `X op(A) = alpha B` in place of `B` (`m x n` at
/// `ldb`); `op(A)` is lower triangular when `lower`, its diagonal taken as ones when `unit`.
/// Only the triangle of `op(A)` is read; a zero on the diagonal gives infinities or NaNs, as
/// on the GPU. The solve runs in f64 and each element of `X` is rounded once.
#[allow(clippy::too_many_arguments)]
pub(super) fn trsm<T: Scalar>(
    left: bool,
    lower: bool,
    unit: bool,
    m: usize,
    n: usize,
    alpha: T,
    a: &[T],
    a_op: Mat,
    b: &mut [T],
    ldb: usize,
) {
    let alpha = alpha.z();
    // B scaled by alpha, in f64 (not read when alpha is zero).
    let mut x: Vec<Z> = vec![Z::default(); m * n];
    if !alpha.is_zero() {
        for j in 0..n {
            for i in 0..m {
                x[i + j * m] = alpha * b[i + j * ldb].z();
            }
        }
        let t = |i: usize, j: usize| a_op.get(a, i, j);
        if left {
            for j in 0..n {
                let col = &mut x[j * m..j * m + m];
                let mut solve = |i: usize, range: std::ops::Range<usize>| {
                    let mut s = col[i];
                    for p in range {
                        s = s - t(i, p) * col[p];
                    }
                    col[i] = if unit { s } else { s / t(i, i) };
                };
                if lower {
                    (0..m).for_each(|i| solve(i, 0..i));
                } else {
                    (0..m).rev().for_each(|i| solve(i, i + 1..m));
                }
            }
        } else {
            // Column j of B is the sum over p of X's column p times op(A)[p, j].
            let mut solve = |j: usize, range: std::ops::Range<usize>| {
                for p in range {
                    let f = t(p, j);
                    for i in 0..m {
                        let xp = x[i + p * m];
                        x[i + j * m] = x[i + j * m] - xp * f;
                    }
                }
                if !unit {
                    let d = t(j, j);
                    for i in 0..m {
                        x[i + j * m] = x[i + j * m] / d;
                    }
                }
            };
            if lower {
                (0..n).rev().for_each(|j| solve(j, j + 1..n));
            } else {
                (0..n).for_each(|j| solve(j, 0..j));
            }
        }
    }
    for j in 0..n {
        for i in 0..m {
            b[i + j * ldb] = T::from_z(x[i + j * m]);
        }
    }
}

/// The `fill` triangle of `C = alpha op(A) op(A)ᵀ + beta C` (`n x n` at `ldc`, `op(A)` `n x k`
/// stored at `lda`), with `op(A)ᵀ` conjugated when `herm` (then `C`'s diagonal is kept real, as
/// cuBLAS's `herk` does). `C` is not read when `beta` is zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn rank_k<T: Scalar>(
    upper: bool,
    herm: bool,
    n: usize,
    k: usize,
    alpha: Z,
    a: &[T],
    a_op: Mat,
    beta: Z,
    c: &mut [T],
    ldc: usize,
) {
    for j in 0..n {
        let rows = if upper { 0..j + 1 } else { j..n };
        for i in rows {
            let mut sum = Z::default();
            for l in 0..k {
                let r = a_op.get(a, j, l);
                sum = sum + a_op.get(a, i, l) * if herm { r.conj() } else { r };
            }
            let e = &mut c[i + j * ldc];
            let old = if beta.is_zero() { Z::default() } else { beta * e.z() };
            let mut v = alpha * sum + old;
            if herm && i == j {
                v.im = 0.0;
            }
            *e = T::from_z(v);
        }
    }
}

/// `A[i, j]` of a symmetric (or, when `herm`, Hermitian) `A` stored in one triangle at `lda`:
/// the other triangle is the stored one mirrored (and conjugated); a Hermitian diagonal is real
/// (its imaginary part is not read, as in cuBLAS).
fn sym_at<T: Scalar>(a: &[T], lda: usize, upper: bool, herm: bool, i: usize, j: usize) -> Z {
    if i == j {
        let v = a[i + i * lda].z();
        return if herm { Z::real(v.re) } else { v };
    }
    if upper == (i < j) {
        a[i + j * lda].z()
    } else {
        let v = a[j + i * lda].z();
        if herm {
            v.conj()
        } else {
            v
        }
    }
}

/// `C = alpha A B + beta C` (`left`, `A` `m x m`) or `alpha B A + beta C` (`A` `n x n`), `A`
/// symmetric or Hermitian in its `upper` or lower triangle; `C` is not read when `beta` is zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn symm<T: Scalar>(
    left: bool,
    upper: bool,
    herm: bool,
    (m, n): (usize, usize),
    alpha: Z,
    (a, lda): (&[T], usize),
    (b, ldb): (&[T], usize),
    beta: Z,
    c: &mut [T],
    ldc: usize,
) {
    for j in 0..n {
        for i in 0..m {
            let mut sum = Z::default();
            if left {
                for l in 0..m {
                    sum = sum + sym_at(a, lda, upper, herm, i, l) * b[l + j * ldb].z();
                }
            } else {
                for l in 0..n {
                    sum = sum + b[i + l * ldb].z() * sym_at(a, lda, upper, herm, l, j);
                }
            }
            let e = &mut c[i + j * ldc];
            let old = if beta.is_zero() { Z::default() } else { beta * e.z() };
            *e = T::from_z(alpha * sum + old);
        }
    }
}

/// `C = alpha op(A) B` (`left`, `op(A)` `m x m`) or `alpha B op(A)`, `op(A)` lower triangular
/// when `lower`, with a unit diagonal when `unit` (only the triangle is read).
#[allow(clippy::too_many_arguments)]
pub(super) fn trmm<T: Scalar>(
    left: bool,
    lower: bool,
    unit: bool,
    (m, n): (usize, usize),
    alpha: Z,
    (a, a_op): (&[T], Mat),
    (b, ldb): (&[T], usize),
    c: &mut [T],
    ldc: usize,
) {
    let t = |i: usize, j: usize| {
        if unit && i == j {
            Z::real(1.0)
        } else if (lower && i >= j) || (!lower && i <= j) {
            a_op.get(a, i, j)
        } else {
            Z::default()
        }
    };
    for j in 0..n {
        for i in 0..m {
            let mut sum = Z::default();
            if left {
                for l in 0..m {
                    sum = sum + t(i, l) * b[l + j * ldb].z();
                }
            } else {
                for l in 0..n {
                    sum = sum + b[i + l * ldb].z() * t(l, j);
                }
            }
            c[i + j * ldc] = T::from_z(alpha * sum);
        }
    }
}

/// The `upper` or lower triangle of `C = alpha op(A) op(B)ᵀ + alpha' op(B) op(A)ᵀ + beta C`
/// (`n x n`, `op(A)` and `op(B)` `n x k`): with `herm`, the transposes are conjugate ones,
/// `alpha'` is `conj(alpha)` and the diagonal is kept real (`her2k`); otherwise `alpha' = alpha`
/// (`syr2k`). `C` is not read when `beta` is zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn rank_2k<T: Scalar>(
    upper: bool,
    herm: bool,
    (n, k): (usize, usize),
    alpha: Z,
    (a, a_op): (&[T], Mat),
    (b, b_op): (&[T], Mat),
    beta: Z,
    c: &mut [T],
    ldc: usize,
) {
    let h = |v: Z| if herm { v.conj() } else { v };
    for j in 0..n {
        let rows = if upper { 0..j + 1 } else { j..n };
        for i in rows {
            let (mut s1, mut s2) = (Z::default(), Z::default());
            for l in 0..k {
                s1 = s1 + a_op.get(a, i, l) * h(b_op.get(b, j, l));
                s2 = s2 + b_op.get(b, i, l) * h(a_op.get(a, j, l));
            }
            let e = &mut c[i + j * ldc];
            let old = if beta.is_zero() { Z::default() } else { beta * e.z() };
            let mut v = alpha * s1 + h(alpha) * s2 + old;
            if herm && i == j {
                v.im = 0.0;
            }
            *e = T::from_z(v);
        }
    }
}
