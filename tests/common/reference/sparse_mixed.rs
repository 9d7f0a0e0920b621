//! The CPU reference of cuSPARSE's mixed-precision SpMV and SpMM and the harness that runs
//! every row of their tables (`f16` and `bf16` into themselves or `f32`, `i8` into `i32` or,
//! for SpMV, `f32`) with both index types, CSR / CSC / COO, `A` plain and transposed, `beta`
//! zero or not, odd sizes, and (SpMM) column-major with a padded leading dimension and
//! row-major dense operands, on whichever device the [`Cx`] holds.
//!
//! The inputs are eighths (floating rows) or small integers (`i8`), so every input is exact in
//! its type, every product and sum exact in `f32` and `f64`: the reference sums exactly and
//! rounds once into the output type, as the simulator does, so the simulator must match it
//! bit for bit; a GPU may differ by the output type's rounding (its tolerance), the integer
//! row not at all.
#![allow(clippy::needless_range_loop)]

use super::sparse::{Cx, Idx};
use cusched::half::{bf16, f16};
use cusched::sparse::{DenseMatrix, MixedSpmm, MixedSpmv, SparseMatrix, SparseStorage, Transpose};
use cusched::{Element, GpuRef};

/// An input type of the tables: its values from the reference's and back.
pub trait Low: SparseStorage {
    const NAME: &'static str;
    /// Whether inputs are integers (`i8`: -8..=8) or eighths in -2..=2.
    const INT: bool;
    fn of(v: f64) -> Self;
    fn f(self) -> f64;
}
/// An output type: its values from the reference's (rounded once) and back, and its tolerance
/// relative to the sum of the magnitudes of the terms. The 16-bit types allow four units of
/// roundoff: cuSPARSE may add partial sums into the output in its own precision (atomics over
/// COO entries), rounding once per partial sum (a bf16 SpMM of a transposed COO matrix came out
/// 2.1 units off).
pub trait Out: Element {
    const NAME: &'static str;
    const TOL: f64;
    fn of(v: f64) -> Self;
    fn f(self) -> f64;
}
/// A compute type (`alpha`, `beta`).
pub trait Scalar: Copy {
    fn of(v: f64) -> Self;
}
impl Scalar for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Scalar for i32 {
    fn of(v: f64) -> Self {
        v as i32
    }
}
macro_rules! low {
    ($t:ty, $name:expr, $int:expr, $of:expr, $f:expr) => {
        impl Low for $t {
            const NAME: &'static str = $name;
            const INT: bool = $int;
            fn of(v: f64) -> Self {
                $of(v)
            }
            fn f(self) -> f64 {
                $f(self)
            }
        }
    };
}
low!(f16, "f16", false, f16::from_f64, f16::to_f64);
low!(bf16, "bf16", false, bf16::from_f64, bf16::to_f64);
low!(i8, "i8", true, |v: f64| v as i8, |v: i8| v as f64);
macro_rules! out {
    ($t:ty, $name:expr, $tol:expr, $of:expr, $f:expr) => {
        impl Out for $t {
            const NAME: &'static str = $name;
            const TOL: f64 = $tol;
            fn of(v: f64) -> Self {
                $of(v)
            }
            fn f(self) -> f64 {
                $f(self)
            }
        }
    };
}
out!(f16, "f16", 2e-3, f16::from_f64, f16::to_f64);
out!(bf16, "bf16", 1.6e-2, bf16::from_f64, bf16::to_f64);
out!(f32, "f32", 1e-6, |v: f64| v as f32, |v: f32| v as f64);
out!(i32, "i32", 0.0, |v: f64| v as i32, |v: i32| v as f64);

/// A random input value of `X`'s kind.
fn pick<X: Low>(cx: &mut Cx) -> f64 {
    if X::INT {
        cx.rng.below(17) as f64 - 8.0
    } else {
        (cx.rng.below(33) as f64 - 16.0) / 8.0
    }
}

/// A random `rows x cols` matrix (row-major, as reference values), row 1 empty, about half full.
fn pattern<X: Low>(cx: &mut Cx, rows: usize, cols: usize) -> Vec<f64> {
    let mut v = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            if r != 1 && cx.rng.below(2) == 0 {
                v[r * cols + c] = pick::<X>(cx);
            }
        }
    }
    v
}

/// The row-major `rows x cols` `a` in `format` ("csr", "csc", "coo").
fn sparse<X: Low, I: Idx>(cx: &Cx, a: &[f64], rows: usize, cols: usize, format: &str) -> SparseMatrix<X, I> {
    let (outer, inner) = if format == "csc" { (cols, rows) } else { (rows, cols) };
    let at = |o: usize, i: usize| if format == "csc" { a[i * cols + o] } else { a[o * cols + i] };
    let (mut off, mut major, mut minor, mut val) = (vec![0], Vec::new(), Vec::new(), Vec::new());
    for o in 0..outer {
        for i in 0..inner {
            if at(o, i) != 0.0 {
                major.push(o);
                minor.push(i);
                val.push(X::of(at(o, i)));
            }
        }
        off.push(major.len());
    }
    let nnz = val.len();
    let (minor_b, val_b) = (cx.idx::<I>(&minor), cx.up(&val));
    match format {
        "csr" => SparseMatrix::csr(rows, cols, nnz, &cx.idx::<I>(&off), &minor_b, &val_b).unwrap(),
        "csc" => SparseMatrix::csc(rows, cols, nnz, &cx.idx::<I>(&off), &minor_b, &val_b).unwrap(),
        _ => SparseMatrix::coo(rows, cols, nnz, &cx.idx::<I>(&major), &minor_b, &val_b).unwrap(),
    }
}

/// Checks `got` against the exact `want` (rounded once into `Y` here) with magnitudes `mag`;
/// on the simulator bit for bit.
fn compare<Y: Out>(cx: &Cx, what: &str, got: &[Y], want: &[f64], mag: &[f64]) {
    let exact = cx.d.is_simulated();
    for (i, (&g, (&w, &m))) in got.iter().zip(want.iter().zip(mag)).enumerate() {
        let (g, w) = (g.f(), Y::of(w).f());
        let tol = if exact { 0.0 } else { Y::TOL * m.max(1.0) };
        assert!((g - w).abs() <= tol, "{what}: entry {i} is {g}, want {w} (tolerance {tol})");
    }
}

/// The scalars of a row: `alpha` and a nonzero `beta`, exact in every compute type.
fn scalars<X: Low>() -> (f64, f64) {
    if X::INT {
        (3.0, -2.0)
    } else {
        (1.5, -0.75)
    }
}

/// SpMV of one row, index type, format, transpose and beta against the reference.
pub fn spmv_mixed<X, Y, I>(cx: &mut Cx)
where
    X: MixedSpmv<Y> + Low,
    Y: Out,
    I: Idx,
    X::Compute: Scalar,
{
    let (rows, cols) = (5, 7);
    for format in ["csr", "csc", "coo"] {
        for t in [Transpose::No, Transpose::Yes] {
            for nonzero_beta in [false, true] {
                let a = pattern::<X>(cx, rows, cols);
                let am = sparse::<X, I>(cx, &a, rows, cols, format);
                let (m, n) = if t == Transpose::No { (rows, cols) } else { (cols, rows) };
                let op = |i: usize, j: usize| if t == Transpose::No { a[i * cols + j] } else { a[j * cols + i] };
                let x: Vec<f64> = (0..n).map(|_| pick::<X>(cx)).collect();
                let y0: Vec<f64> = (0..m).map(|_| pick::<X>(cx)).collect();
                let (alpha, beta) = scalars::<X>();
                let beta = if nonzero_beta { beta } else { 0.0 };
                let xb = cx.up(&x.iter().map(|&v| X::of(v)).collect::<Vec<_>>());
                let yb: GpuRef<Y> = cx.up(&y0.iter().map(|&v| Y::of(v)).collect::<Vec<_>>());
                let (sa, sb) = (X::Compute::of(alpha), X::Compute::of(beta));
                cx.h.sparse().unwrap().spmv_mixed(t, sa, &am, &xb, sb, &yb).unwrap().wait().unwrap();
                let got = yb.download(cx.s).unwrap();
                let want: Vec<f64> =
                    (0..m).map(|i| alpha * (0..n).map(|j| op(i, j) * x[j]).sum::<f64>() + beta * y0[i]).collect();
                let mag: Vec<f64> = (0..m)
                    .map(|i| alpha.abs() * (0..n).map(|j| (op(i, j) * x[j]).abs()).sum::<f64>() + (beta * y0[i]).abs())
                    .collect();
                let what = format!("SpMV {} -> {} {format} {t:?} beta {beta}", X::NAME, Y::NAME);
                compare::<Y>(cx, &what, &got, &want, &mag);
            }
        }
    }
}

/// SpMM of one row, index type, format, transpose, dense order and beta against the reference.
pub fn spmm_mixed<X, Y, I>(cx: &mut Cx)
where
    X: MixedSpmm<Y> + Low,
    Y: Out,
    I: Idx,
    X::Compute: Scalar,
{
    let (rows, cols, k) = (5, 7, 3);
    for format in ["csr", "csc", "coo"] {
        for t in [Transpose::No, Transpose::Yes] {
            for (row_major, nonzero_beta) in [(false, false), (false, true), (true, true)] {
                let a = pattern::<X>(cx, rows, cols);
                let am = sparse::<X, I>(cx, &a, rows, cols, format);
                let (m, n) = if t == Transpose::No { (rows, cols) } else { (cols, rows) };
                let op = |i: usize, j: usize| if t == Transpose::No { a[i * cols + j] } else { a[j * cols + i] };
                // B is n x k, C m x k: column-major with ld two above the rows, or packed row-major.
                let (ldb, ldc) = if row_major { (k, k) } else { (n + 2, m + 2) };
                let bi = |r: usize, c: usize| if row_major { r * ldb + c } else { r + c * ldb };
                let ci = |r: usize, c: usize| if row_major { r * ldc + c } else { r + c * ldc };
                let (blen, clen) = if row_major { (n * k, m * k) } else { (ldb * k, ldc * k) };
                let bv: Vec<f64> = (0..blen).map(|_| pick::<X>(cx)).collect();
                let c0: Vec<f64> = (0..clen).map(|_| pick::<X>(cx)).collect();
                let (alpha, beta) = scalars::<X>();
                let beta = if nonzero_beta { beta } else { 0.0 };
                let bb = cx.up(&bv.iter().map(|&v| X::of(v)).collect::<Vec<_>>());
                let cb: GpuRef<Y> = cx.up(&c0.iter().map(|&v| Y::of(v)).collect::<Vec<_>>());
                let (mut bd, mut cd) = (DenseMatrix::new(&bb, n, k).ld(ldb), DenseMatrix::new(&cb, m, k).ld(ldc));
                if row_major {
                    (bd, cd) = (bd.row_major(), cd.row_major());
                }
                let (sa, sb) = (X::Compute::of(alpha), X::Compute::of(beta));
                cx.h.sparse().unwrap().spmm_mixed(t, sa, &am, bd, sb, cd).unwrap().wait().unwrap();
                let got = cb.download(cx.s).unwrap();
                let (mut want, mut mag) = (c0.clone(), vec![0.0; clen]);
                for i in 0..m {
                    for j in 0..k {
                        let s: f64 = (0..n).map(|l| op(i, l) * bv[bi(l, j)]).sum();
                        let sm: f64 = (0..n).map(|l| (op(i, l) * bv[bi(l, j)]).abs()).sum();
                        want[ci(i, j)] = alpha * s + beta * c0[ci(i, j)];
                        mag[ci(i, j)] = alpha.abs() * sm + (beta * c0[ci(i, j)]).abs();
                    }
                }
                let what = format!("SpMM {} -> {} {format} {t:?} row-major {row_major} beta {beta}", X::NAME, Y::NAME);
                compare::<Y>(cx, &what, &got, &want, &mag);
            }
        }
    }
}

/// Every row of both tables with both index types.
pub fn every_mixed_row(cx: &mut Cx) {
    macro_rules! rows {
        ($f:ident: $($x:ty => $y:ty),*) => {$(
            $f::<$x, $y, i32>(cx);
            $f::<$x, $y, i64>(cx);
        )*};
    }
    rows!(spmv_mixed: f16 => f16, f16 => f32, bf16 => bf16, bf16 => f32, i8 => i32, i8 => f32);
    rows!(spmm_mixed: f16 => f16, f16 => f32, bf16 => bf16, bf16 => f32, i8 => i32);
}
