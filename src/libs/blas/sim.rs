//! The simulator's cuBLAS: every op computed on the host, from the simulated memory of its
//! buffers, with cuBLAS's semantics (column-major storage, transposes, leading dimensions,
//! batch strides, BLAS increments, fill modes, `beta == 0` leaving `C` unread).
//!
//! The f32 and f64 GEMM cores are `matrixmultiply`'s (single-threaded, vectorized), which takes
//! a row and a column stride per operand: a transpose swaps them, a leading dimension is the
//! column stride. f16 and bf16 operands are widened to f32, multiplied there (cuBLAS's compute
//! type for them) and each stored element rounded back. Reductions accumulate in f64. The
//! TF32 math mode is not imitated: f32 GEMMs are computed in full f32.
//!
//! The kernels here run inside a simulated kernel, after validation: every index stays inside
//! the spans the op checked, so the slices are indexed plainly.

use super::Transpose;

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
            Transpose::Yes => (self.ld as isize, 1),
        }
    }

    /// The index of `op(X)[i, j]`.
    fn at(self, i: usize, j: usize) -> usize {
        match self.trans {
            Transpose::No => i + j * self.ld,
            Transpose::Yes => j + i * self.ld,
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

/// The real types of the level 1 to 3 kernels (f32 and f64), and their GEMM core.
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
    /// The value as f64 (exact).
    fn wide(self) -> f64;
    /// `x` rounded to the type.
    fn narrow(x: f64) -> Self;
    /// `|self|`.
    fn magnitude(self) -> Self;

    /// `C = alpha op(A) op(B) + beta C` through `matrixmultiply`; `C` is not read when `beta`
    /// is zero.
    fn mm(s: &Shape, alpha: Self, a: &[Self], b: &[Self], beta: Self, c: &mut [Self]);
}

macro_rules! real {
    ($t:ty, $gemm:ident) => {
        impl Real for $t {
            fn wide(self) -> f64 {
                self as f64
            }
            fn narrow(x: f64) -> Self {
                x as $t
            }
            fn magnitude(self) -> Self {
                self.abs()
            }
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
/// through f32 copies.
pub trait SimGemm: Copy + Send + 'static {
    /// `C = alpha op(A) op(B) + beta C` (see [`Shape`]); `alpha` and `beta` are the op's
    /// scalars, widened to f64 (exactly: they are f32 or f64).
    fn gemm(s: &Shape, alpha: f64, a: &[Self], b: &[Self], beta: f64, c: &mut [Self]);
}

impl SimGemm for f32 {
    fn gemm(s: &Shape, alpha: f64, a: &[f32], b: &[f32], beta: f64, c: &mut [f32]) {
        f32::mm(s, alpha as f32, a, b, beta as f32, c)
    }
}

impl SimGemm for f64 {
    fn gemm(s: &Shape, alpha: f64, a: &[f64], b: &[f64], beta: f64, c: &mut [f64]) {
        f64::mm(s, alpha, a, b, beta, c)
    }
}

macro_rules! half_gemm {
    ($t:ty) => {
        impl SimGemm for $t {
            fn gemm(s: &Shape, alpha: f64, a: &[$t], b: &[$t], beta: f64, c: &mut [$t]) {
                let wide = |x: &[$t]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
                let (a32, b32) = (wide(a), wide(b));
                // C is widened only when it is read; the padding rows between m and ldc keep
                // their contents either way, since only op's m x n elements are stored back.
                let mut c32 = if beta == 0.0 { vec![0.0f32; c.len()] } else { wide(c) };
                f32::mm(s, alpha as f32, &a32, &b32, beta as f32, &mut c32);
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
/// the largest magnitude so far.
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

/// The 0-based index of the first largest (`max`) or smallest `|x_i|`.
pub(super) fn index_of<T: Real>(x: &[T], max: bool) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate().skip(1) {
        let (a, b) = (v.magnitude(), x[best].magnitude());
        if (max && a > b) || (!max && a < b) {
            best = i;
        }
    }
    best
}

/// `y = alpha op(A) x + beta y` with `A` stored `m x n` at `lda`; `x` gathered, `y` strided.
/// `y` is not read when `beta` is zero; the product is skipped when `alpha` is zero.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemv<T: Real>(
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
    let zero = T::default();
    let a_op = Mat { ld: lda, trans };
    let (rows, cols) = match trans {
        Transpose::No => (m, n),
        Transpose::Yes => (n, m),
    };
    for i in 0..rows {
        let mut sum = 0.0f64;
        if alpha != zero {
            for (l, xl) in x.iter().enumerate().take(cols) {
                sum += a[a_op.at(i, l)].wide() * xl.wide();
            }
        }
        let yi = &mut y[vec_index(rows, incy, i)];
        let old = if beta == zero { 0.0 } else { beta.wide() * yi.wide() };
        *yi = T::narrow(alpha.wide() * sum + old);
    }
}

/// `C = alpha op(A) + beta op(B)` (`m x n`); a term whose scalar is zero is not read.
#[allow(clippy::too_many_arguments)]
pub(super) fn geam<T: Real>(
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
    let zero = T::default();
    for j in 0..n {
        for i in 0..m {
            let x = if alpha == zero { zero } else { alpha * a[a_op.at(i, j)] };
            let y = if beta == zero { zero } else { beta * b[b_op.at(i, j)] };
            c[i + j * ldc] = x + y;
        }
    }
}

/// Whether `op(A)` of a triangular `A` stored in the `lower` triangle is lower triangular.
pub(super) fn op_lower(lower: bool, trans: Transpose) -> bool {
    lower != (trans == Transpose::Yes)
}

/// Solves `op(A) X = alpha B` (`left`) or `X op(A) = alpha B` in place of `B` (`m x n` at
/// `ldb`); `op(A)` is lower triangular when `lower`, its diagonal taken as ones when `unit`.
/// Only the triangle of `op(A)` is read; a zero on the diagonal gives infinities or NaNs, as
/// on the GPU.
#[allow(clippy::too_many_arguments)]
pub(super) fn trsm<T: Real>(
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
    let zero = T::default();
    for j in 0..n {
        for i in 0..m {
            let v = &mut b[i + j * ldb];
            *v = if alpha == zero { zero } else { alpha * *v };
        }
    }
    if alpha == zero {
        return;
    }
    let t = |i: usize, j: usize| a[a_op.at(i, j)];
    if left {
        for j in 0..n {
            let col = &mut b[j * ldb..j * ldb + m];
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
                    let xp = b[i + p * ldb];
                    b[i + j * ldb] = b[i + j * ldb] - xp * f;
                }
            }
            if !unit {
                let d = t(j, j);
                for i in 0..m {
                    b[i + j * ldb] = b[i + j * ldb] / d;
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
