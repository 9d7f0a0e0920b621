//! The CPU reference of the cuSPARSE ops and the harness that runs every op cusched exposes,
//! for every value type (`f32`, `f64`, `Complex<f32>`, `Complex<f64>`) and index type (`i32`,
//! `i64`) the API takes, across formats, transposes, dense layouts with leading dimensions above
//! their rows, one or several right-hand columns, and beta zero or not, against the reference in
//! complex f64, on whichever device the [`Cx`] holds: the GPU suite runs it on CUDA, the
//! simulator suite on the simulator, and the comparison test on both with the same inputs (the
//! same seed), comparing the two logs. Combinations cuSPARSE documents as unsupported
//! (Blocked-ELL SpMM with 64-bit indices or complex values) must be rejected as an invalid `a`.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::common::Rng;
use cusched::sparse::{DenseMatrix, Fill, SparseIndex, SparseMatrix, SparseValue, SparseVector, Transpose, Triangle};
use cusched::{Complex, Device, Error, GpuRef, Handles, StreamId};

/// A complex f64 for the references.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct C(pub f64, pub f64);
impl std::ops::Add for C {
    type Output = C;
    fn add(self, o: C) -> C {
        C(self.0 + o.0, self.1 + o.1)
    }
}
impl std::ops::Sub for C {
    type Output = C;
    fn sub(self, o: C) -> C {
        C(self.0 - o.0, self.1 - o.1)
    }
}
impl std::ops::Mul for C {
    type Output = C;
    fn mul(self, o: C) -> C {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
}
impl C {
    pub fn div(self, o: C) -> C {
        let d = o.0 * o.0 + o.1 * o.1;
        C((self.0 * o.0 + self.1 * o.1) / d, (self.1 * o.0 - self.0 * o.1) / d)
    }
    pub fn abs(self) -> f64 {
        self.0.hypot(self.1)
    }
}
pub const Z: C = C(0.0, 0.0);

/// A value type under test: conversion to and from the reference type, and its tolerance.
pub trait Val: SparseValue {
    const NAME: &'static str;
    const COMPLEX: bool;
    const TOL: f64;
    fn of(c: C) -> Self;
    fn c(self) -> C;
}
impl Val for f32 {
    const NAME: &'static str = "f32";
    const COMPLEX: bool = false;
    const TOL: f64 = 2e-4;
    fn of(c: C) -> Self {
        c.0 as f32
    }
    fn c(self) -> C {
        C(self as f64, 0.0)
    }
}
impl Val for f64 {
    const NAME: &'static str = "f64";
    const COMPLEX: bool = false;
    const TOL: f64 = 1e-11;
    fn of(c: C) -> Self {
        c.0
    }
    fn c(self) -> C {
        C(self, 0.0)
    }
}
impl Val for Complex<f32> {
    const NAME: &'static str = "c32";
    const COMPLEX: bool = true;
    const TOL: f64 = 2e-4;
    fn of(c: C) -> Self {
        Complex::new(c.0 as f32, c.1 as f32)
    }
    fn c(self) -> C {
        C(self.re as f64, self.im as f64)
    }
}
impl Val for Complex<f64> {
    const NAME: &'static str = "c64";
    const COMPLEX: bool = true;
    const TOL: f64 = 1e-11;
    fn of(c: C) -> Self {
        Complex::new(c.0, c.1)
    }
    fn c(self) -> C {
        C(self.re, self.im)
    }
}

/// An index type under test.
pub trait Idx: SparseIndex {
    fn of(v: usize) -> Self;
    /// -1: an empty Blocked-ELL slot.
    fn neg1() -> Self;
}
impl Idx for i32 {
    fn of(v: usize) -> Self {
        v as i32
    }
    fn neg1() -> Self {
        -1
    }
}
impl Idx for i64 {
    fn of(v: usize) -> Self {
        v as i64
    }
    fn neg1() -> Self {
        -1
    }
}

/// A dense row-major host matrix of reference values.
#[derive(Clone)]
pub struct Dense {
    pub rows: usize,
    pub cols: usize,
    pub v: Vec<C>,
}
impl Dense {
    pub fn at(&self, r: usize, c: usize) -> C {
        self.v[r * self.cols + c]
    }
    pub fn op(&self, t: Transpose) -> Dense {
        let conj = |c: C| if t == Transpose::Conj { C(c.0, -c.1) } else { c };
        match t {
            Transpose::No => self.clone(),
            Transpose::Yes | Transpose::Conj => Dense {
                rows: self.cols,
                cols: self.rows,
                v: (0..self.cols * self.rows).map(|i| conj(self.at(i % self.rows, i / self.rows))).collect(),
            },
        }
    }
}

/// A device, a stream and its handles, the inputs' generator, and the log of every result
/// checked (what, values, tolerance), for comparing two backends run on the same inputs.
pub struct Cx {
    pub d: Device,
    pub s: StreamId,
    pub h: Handles,
    pub rng: Rng,
    pub log: Vec<(String, Vec<C>, f64)>,
}

impl Cx {
    pub fn val(&mut self, complex: bool) -> C {
        C(self.rng.f32() as f64, if complex { self.rng.f32() as f64 } else { 0.0 })
    }
    /// A random `rows x cols` pattern: row 1 empty, the others about `density` full.
    pub fn random(&mut self, rows: usize, cols: usize, density: f64, complex: bool) -> Dense {
        let mut v = vec![Z; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                if r != 1 && (self.rng.below(1000) as f64) < density * 1000.0 {
                    v[r * cols + c] = self.val(complex);
                }
            }
        }
        Dense { rows, cols, v }
    }
    pub fn vals<T: Val>(&mut self, n: usize) -> Vec<T> {
        (0..n).map(|_| T::of(self.val(T::COMPLEX))).collect()
    }
    pub fn up<T: cusched::Element>(&self, v: &[T]) -> GpuRef<T> {
        self.d.upload(self.s, v).unwrap()
    }
    pub fn idx<I: Idx>(&self, v: &[usize]) -> GpuRef<I> {
        let v: Vec<I> = v.iter().map(|&x| I::of(x)).collect();
        self.up(&v)
    }
    /// `m` in `format` (BSR and Blocked-ELL in blocks of 2, whole blocks stored).
    pub fn matrix<T: Val, I: Idx>(&self, m: &Dense, format: &str) -> SparseMatrix<T, I> {
        let pad1 = |v: Vec<T>| if v.is_empty() { vec![T::zero()] } else { v };
        let padi = |v: Vec<usize>| if v.is_empty() { vec![0] } else { v };
        let (rows, cols) = (m.rows, m.cols);
        match format {
            "csr" | "csc" | "coo" => {
                let (outer, inner) = if format == "csc" { (cols, rows) } else { (rows, cols) };
                let at = |o: usize, i: usize| if format == "csc" { m.at(i, o) } else { m.at(o, i) };
                let (mut off, mut major, mut minor, mut val) = (vec![0], Vec::new(), Vec::new(), Vec::new());
                for o in 0..outer {
                    for i in 0..inner {
                        if at(o, i) != Z {
                            major.push(o);
                            minor.push(i);
                            val.push(T::of(at(o, i)));
                        }
                    }
                    off.push(minor.len());
                }
                let nnz = val.len();
                let (mi, va) = (self.idx::<I>(&padi(minor)), self.up(&pad1(val)));
                match format {
                    "csr" => SparseMatrix::csr(rows, cols, nnz, &self.idx(&off), &mi, &va).unwrap(),
                    "csc" => SparseMatrix::csc(rows, cols, nnz, &self.idx(&off), &mi, &va).unwrap(),
                    _ => SparseMatrix::coo(rows, cols, nnz, &self.idx(&padi(major)), &mi, &va).unwrap(),
                }
            }
            "bsr" => {
                let (mut off, mut idx, mut val) = (vec![0], Vec::new(), Vec::new());
                for br in 0..rows / 2 {
                    for bc in 0..cols / 2 {
                        let blk: Vec<C> = (0..4).map(|e| m.at(br * 2 + e / 2, bc * 2 + e % 2)).collect();
                        if blk.iter().any(|&x| x != Z) {
                            idx.push(bc);
                            val.extend(blk.into_iter().map(T::of));
                        }
                    }
                    off.push(idx.len());
                }
                let blocks = idx.len();
                SparseMatrix::bsr(rows, cols, 2, blocks, &self.idx(&off), &self.idx(&padi(idx)), &self.up(&pad1(val)))
                    .unwrap()
            }
            _ => {
                // Blocked-ELL: as many block slots per block row as the fullest one needs.
                let brows = rows / 2;
                let per: Vec<Vec<usize>> = (0..brows)
                    .map(|br| {
                        (0..cols / 2).filter(|&bc| (0..4).any(|e| m.at(br * 2 + e / 2, bc * 2 + e % 2) != Z)).collect()
                    })
                    .collect();
                let slots = per.iter().map(Vec::len).max().unwrap_or(0).max(1);
                let ell_cols = slots * 2;
                let mut idx = vec![I::neg1(); brows * slots];
                let mut val = vec![T::zero(); rows * ell_cols];
                for br in 0..brows {
                    for (j, &bc) in per[br].iter().enumerate() {
                        idx[br * slots + j] = I::of(bc);
                        for e in 0..4 {
                            val[(br * 2 + e / 2) * ell_cols + j * 2 + e % 2] =
                                T::of(m.at(br * 2 + e / 2, bc * 2 + e % 2));
                        }
                    }
                }
                SparseMatrix::blocked_ell(rows, cols, 2, ell_cols, &self.up(&idx), &self.up(&val)).unwrap()
            }
        }
    }
    /// A `rows x cols` matrix with leading dimension `ld` (padding NaN), row-major if `row`.
    pub fn dense_up_in<T: Val>(&self, m: &Dense, ld: usize, row: bool) -> GpuRef<T> {
        if !row {
            return self.dense_up(m, ld);
        }
        let mut v = vec![T::of(C(f64::NAN, f64::NAN)); ld * m.rows.max(1)];
        for r in 0..m.rows {
            for c in 0..m.cols {
                v[r * ld + c] = T::of(m.at(r, c));
            }
        }
        self.up(&v)
    }
    /// A column-major `rows x cols` matrix with leading dimension `ld` (padding NaN).
    pub fn dense_up<T: Val>(&self, m: &Dense, ld: usize) -> GpuRef<T> {
        let mut v = vec![T::of(C(f64::NAN, f64::NAN)); ld * m.cols.max(1)];
        for r in 0..m.rows {
            for c in 0..m.cols {
                v[c * ld + r] = T::of(m.at(r, c));
            }
        }
        self.up(&v)
    }
}

#[track_caller]
pub fn close(got: &[C], want: &[C], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g - *w).abs() <= tol * (1.0 + w.abs()), "{what}: element {i}: {g:?} vs {w:?}");
    }
}

/// Reads back a column-major view.
pub fn dense_down<T: Val>(cx: &Cx, buf: &GpuRef<T>, rows: usize, cols: usize, ld: usize) -> Vec<C> {
    let v = buf.download(cx.s).unwrap();
    (0..rows * cols).map(|i| v[(i % cols) * ld + i / cols].c()).collect()
}

/// `alpha op(A) B + beta C`, row-major.
pub fn gemm(alpha: C, a: &Dense, b: &Dense, beta: C, c: &Dense) -> Vec<C> {
    (0..a.rows * b.cols)
        .map(|ij| {
            let (i, j) = (ij / b.cols, ij % b.cols);
            let s = (0..a.cols).fold(Z, |s, l| s + a.at(i, l) * b.at(l, j));
            alpha * s + if beta == Z { Z } else { beta * c.at(i, j) }
        })
        .collect()
}

pub fn spmv_and_spmm<T: Val, I: Idx>(cx: &mut Cx) {
    let (rows, cols) = (10, 8);
    let a = cx.random(rows, cols, 0.3, T::COMPLEX);
    for format in ["csr", "csc", "coo", "bsr", "ell"] {
        let sa = cx.matrix::<T, I>(&a, format);
        for t in [Transpose::No, Transpose::Yes, Transpose::Conj] {
            let blocked = matches!(format, "bsr" | "ell");
            if blocked && t != Transpose::No {
                continue;
            }
            let op = a.op(t);
            for beta0 in [true, false] {
                let alpha = cx.val(T::COMPLEX);
                let beta = if beta0 { Z } else { cx.val(T::COMPLEX) };
                let what = format!("{} {:?} {format} {t:?} beta0 {beta0}", T::NAME, I::KIND);
                if format != "ell" {
                    let x = cx.random(op.cols, 1, 1.0, T::COMPLEX);
                    let y = cx.random(op.rows, 1, 1.0, T::COMPLEX);
                    let (dx, dy) = (cx.dense_up::<T>(&x, op.cols), cx.dense_up::<T>(&y, op.rows));
                    cx.h.sparse().unwrap().spmv(t, T::of(alpha), &sa, &dx, T::of(beta), &dy).unwrap().wait().unwrap();
                    let want = gemm(alpha, &op, &x, beta, &y);
                    cx.check(&dense_down(cx, &dy, op.rows, 1, op.rows), &want, T::TOL, &format!("spmv {what}"));
                }
                for n in [1, 3] {
                    spmm_layouts::<T, I>(cx, &sa, format, t, &op, n, alpha, beta, &what);
                }
            }
        }
    }
}

/// SpMM of `sa` (`op` is `op(A)`) with `n` right-hand columns in each layout: `B` and `C`
/// column- or row-major, padded or packed, and `B` as stored, transposed or conjugate-transposed
/// (a transposed `B` with a blocked `A` must be refused as unsupported, naming `op_b`).
fn spmm_layouts<T: Val, I: Idx>(
    cx: &mut Cx,
    sa: &SparseMatrix<T, I>,
    format: &str,
    t: Transpose,
    op: &Dense,
    n: usize,
    alpha: C,
    beta: C,
    what: &str,
) {
    let layouts = [
        (Transpose::No, false, false, 0, 0),
        (Transpose::No, false, false, 2, 1),
        (Transpose::No, true, true, 0, 0),
        (Transpose::No, true, false, 3, 2),
        (Transpose::Yes, false, true, 1, 0),
        (Transpose::Yes, true, false, 0, 2),
        (Transpose::Conj, false, false, 2, 0),
        (Transpose::Conj, true, true, 1, 3),
    ];
    for (tb, row_b, row_c, pb, pc) in layouts {
        let blocked = matches!(format, "bsr" | "ell");
        let b = cx.random(op.cols, n, 1.0, T::COMPLEX);
        let c = cx.random(op.rows, n, 1.0, T::COMPLEX);
        // B as stored, so that op(B) = b: bᵀ for a transpose, conj(bᵀ) for a conjugate one.
        let stored = b.op(tb);
        let ldb = if row_b { stored.cols + pb } else { stored.rows + pb };
        let ldc = if row_c { n + pc } else { op.rows + pc };
        let (db, dc) = (cx.dense_up_in::<T>(&stored, ldb, row_b), cx.dense_up_in::<T>(&c, ldc, row_c));
        let mut bv = DenseMatrix::new(&db, stored.rows, stored.cols).ld(ldb);
        if row_b {
            bv = bv.row_major();
        }
        let mut cv = DenseMatrix::new(&dc, op.rows, n).ld(ldc);
        if row_c {
            cv = cv.row_major();
        }
        let r = cx.h.sparse().unwrap().spmm_ops(t, tb, T::of(alpha), sa, bv, T::of(beta), cv);
        let what = format!("spmm {what} n {n} {tb:?} row {row_b} {row_c} ldb {ldb} ldc {ldc}");
        if format == "ell" && (T::COMPLEX || I::KIND != cusched::sparse::IndexKind::I32) {
            assert!(matches!(r, Err(Error::InvalidArgument { arg: "a", .. })), "{what}: {r:?}");
            continue;
        }
        if tb == Transpose::Conj && T::COMPLEX && stored.rows == 1 && !blocked {
            // cuSPARSE takes no conjugate transpose of a single-row B.
            assert!(matches!(&r, Err(Error::Unsupported { what: w, .. }) if w.contains("`op_b`")), "{what}: {r:?}");
            continue;
        }
        if blocked && tb != Transpose::No {
            assert!(matches!(&r, Err(Error::Unsupported { what: w, .. }) if w.contains("`op_b`")), "{what}: {r:?}");
            continue;
        }
        r.unwrap().wait().unwrap();
        let got = cx.dc_padding_kept_in(&dc, op.rows, n, ldc, row_c, &what);
        // Blocked-ELL SpMM runs on Tensor Cores, in TF32 for f32 (an 11-bit significand:
        // 2.4e-4 off on an H100 against f32's 2e-4 budget).
        let tol = if format == "ell" && T::NAME == "f32" { 2e-3 } else { T::TOL };
        cx.check(&got, &gemm(alpha, op, &b, beta, &c), tol, &what);
    }
}

impl Cx {
    /// C's values, after checking that the padding of each column (or, row-major, each row)
    /// kept its NaN.
    pub fn dc_padding_kept_in<T: Val>(
        &self,
        dc: &GpuRef<T>,
        rows: usize,
        n: usize,
        ld: usize,
        row: bool,
        what: &str,
    ) -> Vec<C> {
        if !row {
            return self.dc_padding_kept(dc, rows, n, ld, what);
        }
        let raw = dc.download(self.s).unwrap();
        for r in 0..rows {
            for c in n..ld {
                assert!(raw[r * ld + c].c().0.is_nan(), "{what}: padding ({r}, {c}) was written");
            }
        }
        (0..rows * n).map(|i| raw[(i / n) * ld + i % n].c()).collect()
    }
}

impl Cx {
    /// C's values, after checking that the padding rows below them kept their NaN.
    pub fn dc_padding_kept<T: Val>(&self, dc: &GpuRef<T>, rows: usize, n: usize, ld: usize, what: &str) -> Vec<C> {
        let raw = dc.download(self.s).unwrap();
        for j in 0..n {
            for r in rows..ld {
                assert!(raw[j * ld + r].c().0.is_nan(), "{what}: padding ({r}, {j}) was written");
            }
        }
        dense_down(self, dc, rows, n, ld)
    }
}

/// A square triangular-solvable matrix: a strong diagonal, random entries in `fill`'s triangle.
pub fn triangular(cx: &mut Cx, n: usize, fill: Fill, complex: bool) -> Dense {
    let mut m = cx.random(n, n, 0.3, complex);
    for r in 0..n {
        for c in 0..n {
            let keep = match fill {
                Fill::Lower => c < r,
                Fill::Upper => c > r,
            };
            if r == c {
                m.v[r * n + c] = C(4.0 + cx.rng.f32() as f64, if complex { 0.5 } else { 0.0 });
            } else if !keep {
                m.v[r * n + c] = Z;
            }
        }
    }
    m
}

/// Solves `op(T) Y = alpha X` by substitution, `T` the matrix with a unit diagonal if `unit`.
pub fn solve(a: &Dense, tri: Triangle, alpha: C, x: &Dense) -> Vec<C> {
    let n = a.rows;
    let mut t = a.op(tri.transpose);
    if tri.unit_diagonal {
        for i in 0..n {
            t.v[i * n + i] = C(1.0, 0.0);
        }
    }
    let lower = (tri.fill == Fill::Lower) == (tri.transpose == Transpose::No);
    let mut y = vec![Z; n * x.cols];
    for j in 0..x.cols {
        let order: Vec<usize> = if lower { (0..n).collect() } else { (0..n).rev().collect() };
        for &i in &order {
            let mut s = alpha * x.at(i, j);
            for k in 0..n {
                if k != i && t.at(i, k) != Z {
                    s = s - t.at(i, k) * y[k * x.cols + j];
                }
            }
            y[i * x.cols + j] = s.div(t.at(i, i));
        }
    }
    y
}

pub fn solves<T: Val, I: Idx>(cx: &mut Cx) {
    let n = 9;
    for fill in [Fill::Lower, Fill::Upper] {
        let a = triangular(cx, n, fill, T::COMPLEX);
        for format in ["csr", "coo"] {
            let sa = cx.matrix::<T, I>(&a, format);
            for transpose in [Transpose::No, Transpose::Yes, Transpose::Conj] {
                for unit in [false, true] {
                    let tri = Triangle { fill, unit_diagonal: unit, transpose };
                    let alpha = cx.val(T::COMPLEX);
                    let what = format!("{} {:?} {format} {tri:?}", T::NAME, I::KIND);
                    let x = cx.random(n, 1, 1.0, T::COMPLEX);
                    let (dx, dy) =
                        (cx.dense_up::<T>(&x, n), cx.dense_up::<T>(&Dense { rows: n, cols: 1, v: vec![Z; n] }, n));
                    cx.h.sparse().unwrap().spsv(tri, T::of(alpha), &sa, &dx, &dy).unwrap().wait().unwrap();
                    cx.check(
                        &dense_down(cx, &dy, n, 1, n),
                        &solve(&a, tri, alpha, &x),
                        T::TOL * 10.0,
                        &format!("spsv {what}"),
                    );
                    for cols in [1, 3] {
                        for (pad, row) in [(0, false), (2, false), (0, true), (2, true)] {
                            let ld = if row { cols + pad } else { n + pad };
                            let b = cx.random(n, cols, 1.0, T::COMPLEX);
                            let zeros = Dense { rows: n, cols, v: vec![Z; n * cols] };
                            let (db, dc) = (cx.dense_up_in::<T>(&b, ld, row), cx.dense_up_in::<T>(&zeros, ld, row));
                            let (mut bv, mut cv) =
                                (DenseMatrix::new(&db, n, cols).ld(ld), DenseMatrix::new(&dc, n, cols).ld(ld));
                            if row {
                                bv = bv.row_major();
                                cv = cv.row_major();
                            }
                            cx.h.sparse().unwrap().spsm(tri, T::of(alpha), &sa, bv, cv).unwrap().wait().unwrap();
                            let what = format!("spsm {what} {cols} ld {ld} row {row}");
                            let got = cx.dc_padding_kept_in(&dc, n, cols, ld, row, &what);
                            cx.check(&got, &solve(&a, tri, alpha, &b), T::TOL * 10.0, &what);
                        }
                    }
                }
            }
        }
    }
}

/// A triangular matrix's pattern with random values: the diagonal strong, and left of it (for
/// `Fill::Lower`; mirrored through the anti-diagonal for `Fill::Upper`) columns 0, `r / 2` and
/// `r - 1` of each row `r`, which leaves rows (from 4 on) with a free column between two stored
/// ones, where [`moved`] can put an entry.
fn patterned(cx: &mut Cx, n: usize, fill: Fill, complex: bool) -> Dense {
    let mut m = Dense { rows: n, cols: n, v: vec![Z; n * n] };
    for r in 0..n {
        for c in [0, r / 2, r.saturating_sub(1)].into_iter().filter(|&c| c < r) {
            let (i, j) = if fill == Fill::Lower { (r, c) } else { (n - 1 - r, n - 1 - c) };
            m.v[i * n + j] = cx.val(complex);
        }
    }
    for r in 0..n {
        m.v[r * n + r] = diagonal(cx, complex);
    }
    m
}

/// A strong diagonal entry, so that every solve is well conditioned.
fn diagonal(cx: &mut Cx, complex: bool) -> C {
    C(4.0 + cx.rng.f32() as f64, if complex { 0.5 } else { 0.0 })
}

/// `m`'s arrays as stored in `format` (`"csr"` or `"coo"`), row by row, each row's columns
/// ascending: the offsets (CSR) or row indices (COO), the column indices and the values.
fn stored(m: &Dense, format: &str) -> (Vec<usize>, Vec<usize>, Vec<C>) {
    let (mut off, mut rows, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new(), Vec::new());
    for r in 0..m.rows {
        for c in 0..m.cols {
            if m.at(r, c) != Z {
                rows.push(r);
                cols.push(c);
                vals.push(m.at(r, c));
            }
        }
        off.push(cols.len());
    }
    (if format == "csr" { off } else { rows }, cols, vals)
}

/// The row of stored entry `p`, `major` being the offsets (CSR) or row indices (COO).
fn row_of(format: &str, major: &[usize], p: usize) -> usize {
    if format == "csr" {
        major.partition_point(|&o| o <= p) - 1
    } else {
        major[p]
    }
}

/// The `n x n` matrix the stored arrays hold.
fn held(n: usize, format: &str, major: &[usize], minor: &[usize], vals: &[C]) -> Dense {
    let mut v = vec![Z; n * n];
    for (p, (&c, &x)) in minor.iter().zip(vals).enumerate() {
        v[row_of(format, major, p) * n + c] = x;
    }
    Dense { rows: n, cols: n, v }
}

/// `minor` with one off-diagonal entry moved to a free column between its row's neighbours:
/// another structure of the same triangle, the offsets (or row indices) and the order of the
/// values unchanged.
fn moved(n: usize, format: &str, major: &[usize], minor: &[usize]) -> Vec<usize> {
    let same_row = |p: usize, q: usize| row_of(format, major, p) == row_of(format, major, q);
    for p in 0..minor.len() {
        if minor[p] == row_of(format, major, p) {
            continue;
        }
        let lo = if p > 0 && same_row(p - 1, p) { minor[p - 1] + 1 } else { 0 };
        let hi = if p + 1 < minor.len() && same_row(p + 1, p) { minor[p + 1] } else { n };
        if let Some(c) = (lo..hi).find(|&c| c != minor[p]) {
            let mut out = minor.to_vec();
            out[p] = c;
            return out;
        }
    }
    panic!("no entry of the pattern can move within its row");
}

/// New values for the stored entries, the diagonal strong.
fn new_values(cx: &mut Cx, format: &str, major: &[usize], minor: &[usize], complex: bool) -> Vec<C> {
    (0..minor.len())
        .map(|p| if minor[p] == row_of(format, major, p) { diagonal(cx, complex) } else { cx.val(complex) })
        .collect()
}

/// SpSV and SpSM (two right-hand columns) with `a`, holding `m`, each against the reference.
fn solve_both<T: Val, I: Idx>(cx: &mut Cx, a: &SparseMatrix<T, I>, tri: Triangle, alpha: C, m: &Dense, what: &str) {
    let n = m.rows;
    let x = cx.random(n, 1, 1.0, T::COMPLEX);
    let (dx, dy) = (cx.dense_up::<T>(&x, n), cx.dense_up::<T>(&Dense { rows: n, cols: 1, v: vec![Z; n] }, n));
    cx.h.sparse().unwrap().spsv(tri, T::of(alpha), a, &dx, &dy).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &dy, n, 1, n), &solve(m, tri, alpha, &x), T::TOL * 10.0, &format!("spsv {what}"));
    let b = cx.random(n, 2, 1.0, T::COMPLEX);
    let (db, dc) = (cx.dense_up::<T>(&b, n), cx.dense_up::<T>(&Dense { rows: n, cols: 2, v: vec![Z; n * 2] }, n));
    let (bv, cv) = (DenseMatrix::new(&db, n, 2), DenseMatrix::new(&dc, n, 2));
    cx.h.sparse().unwrap().spsm(tri, T::of(alpha), a, bv, cv).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &dc, n, 2, n), &solve(m, tri, alpha, &b), T::TOL * 10.0, &format!("spsm {what}"));
}

/// SpSV and SpSM keep their analyses in step with writes of `A`'s arrays between solves (made
/// on another stream, so that only cusched orders them): after a write of the values alone the
/// solves solve the new system with no new analysis (`analyses_made` stays), after a write of
/// the column indices (a new structure), of the offsets or row indices (the same contents
/// again: a write is a write), or of the indices and values together, each solve analyses anew
/// and solves the system `A` holds. CSR and COO, each triangle and transpose.
pub fn solves_after_writes<T: Val, I: Idx>(cx: &mut Cx) {
    let n = 8;
    let other = cx.d.new_stream().unwrap();
    let made = |cx: &mut Cx| cx.h.sparse().unwrap().analyses_made();
    for fill in [Fill::Lower, Fill::Upper] {
        for format in ["csr", "coo"] {
            for transpose in [Transpose::No, Transpose::Yes, Transpose::Conj] {
                let tri = Triangle { fill, unit_diagonal: false, transpose };
                let what = format!("{} {:?} {format} {tri:?}", T::NAME, I::KIND);
                let m = patterned(cx, n, fill, T::COMPLEX);
                let (major, first, mut vals) = stored(&m, format);
                let (dmajor, dminor, dvals) = (cx.idx::<I>(&major), cx.idx::<I>(&first), cx.up(&vals_of::<T>(&vals)));
                let a = if format == "csr" {
                    SparseMatrix::csr(n, n, first.len(), &dmajor, &dminor, &dvals).unwrap()
                } else {
                    SparseMatrix::coo(n, n, first.len(), &dmajor, &dminor, &dvals).unwrap()
                };
                let alpha = cx.val(T::COMPLEX);
                let write_idx = |buf: &GpuRef<I>, v: &[usize]| {
                    buf.copy_from_slice(other, &v.iter().map(|&x| I::of(x)).collect::<Vec<I>>()).unwrap()
                };
                let before = made(cx);
                let mut minor = first.clone();
                let step = |cx: &mut Cx, minor: &[usize], vals: &[C], analyses: u64, after: &str| {
                    solve_both(cx, &a, tri, alpha, &held(n, format, &major, minor, vals), &format!("{what} {after}"));
                    assert_eq!(made(cx), before + analyses, "{what}: analyses made by the solves {after}");
                };
                step(cx, &minor, &vals, 2, "first");
                vals = new_values(cx, format, &major, &minor, T::COMPLEX);
                dvals.copy_from_slice(other, &vals_of::<T>(&vals)).unwrap();
                step(cx, &minor, &vals, 2, "after a write of the values");
                step(cx, &minor, &vals, 2, "again");
                minor = moved(n, format, &major, &minor);
                write_idx(&dminor, &minor);
                step(cx, &minor, &vals, 4, "after a write of the column indices");
                vals = new_values(cx, format, &major, &minor, T::COMPLEX);
                dvals.copy_from_slice(other, &vals_of::<T>(&vals)).unwrap();
                step(cx, &minor, &vals, 4, "after a write of the values of the new structure");
                write_idx(&dmajor, &major);
                step(cx, &minor, &vals, 6, "after a write of the offsets or row indices");
                vals = new_values(cx, format, &major, &first, T::COMPLEX);
                write_idx(&dminor, &first);
                dvals.copy_from_slice(other, &vals_of::<T>(&vals)).unwrap();
                step(cx, &first, &vals, 8, "after a write of the column indices and values");
            }
        }
    }
}

pub fn sddmm<T: Val, I: Idx>(cx: &mut Cx) {
    let (m, k, n) = (7, 5, 6);
    let pattern = cx.random(m, n, 0.4, T::COMPLEX);
    for ta in [Transpose::No, Transpose::Yes, Transpose::Conj] {
        for tb in [Transpose::No, Transpose::Yes, Transpose::Conj] {
            for (pad, ra, rb) in
                [(0, false, false), (3, false, false), (0, true, true), (2, true, false), (1, false, true)]
            {
                for beta0 in [true, false] {
                    let what =
                        format!("sddmm {} {:?} {ta:?} {tb:?} pad {pad} row {ra} {rb} beta0 {beta0}", T::NAME, I::KIND);
                    let conj = |t| T::COMPLEX && t == Transpose::Conj;
                    if conj(ta) || conj(tb) {
                        // cuSPARSE's SDDMM read out of bounds with a conjugate transpose of
                        // complex values: cusched refuses it, naming the operand's op.
                        let arg = if conj(ta) { "op_a" } else { "op_b" };
                        let (a, b) = (cx.random(m, k, 1.0, T::COMPLEX).op(ta), cx.random(k, n, 1.0, T::COMPLEX).op(tb));
                        let (da, db) = (cx.dense_up::<T>(&a, a.rows), cx.dense_up::<T>(&b, b.rows));
                        let (av, bv) = (DenseMatrix::new(&da, a.rows, a.cols), DenseMatrix::new(&db, b.rows, b.cols));
                        let c = cx.matrix::<T, I>(&pattern, "csr");
                        let got = cx.h.sparse().unwrap().sddmm(ta, tb, T::of(Z), av, bv, T::of(Z), &c);
                        refused(got, arg, &what);
                        continue;
                    }
                    let a = cx.random(m, k, 1.0, T::COMPLEX).op(ta);
                    let b = cx.random(k, n, 1.0, T::COMPLEX).op(tb);
                    let lda = if ra { a.cols + pad } else { a.rows + pad };
                    let ldb = if rb { b.cols + pad } else { b.rows + pad };
                    let (da, db) = (cx.dense_up_in::<T>(&a, lda, ra), cx.dense_up_in::<T>(&b, ldb, rb));
                    let (mut av, mut bv) =
                        (DenseMatrix::new(&da, a.rows, a.cols).ld(lda), DenseMatrix::new(&db, b.rows, b.cols).ld(ldb));
                    if ra {
                        av = av.row_major();
                    }
                    if rb {
                        bv = bv.row_major();
                    }
                    let c = cx.matrix::<T, I>(&pattern, "csr");
                    let (alpha, beta) = (cx.val(T::COMPLEX), if beta0 { Z } else { cx.val(T::COMPLEX) });
                    cx.h.sparse()
                        .unwrap()
                        .sddmm(ta, tb, T::of(alpha), av, bv, T::of(beta), &c)
                        .unwrap()
                        .wait()
                        .unwrap();
                    let (oa, ob) = (a.op(ta), b.op(tb));
                    let full = gemm(alpha, &oa, &ob, Z, &pattern);
                    let want: Vec<C> = (0..m * n)
                        .filter(|&i| pattern.v[i] != Z)
                        .map(|i| full[i] + if beta0 { Z } else { beta * pattern.v[i] })
                        .collect();
                    let got: Vec<C> = c.values().download(cx.s).unwrap()[..c.nnz()].iter().map(|v| v.c()).collect();
                    cx.check(&got, &want, T::TOL, &what);
                }
            }
        }
    }
}

/// SDDMM into a BSR `C` (2x2 blocks) with `k` odd and even, transposed and row-major dense
/// operands: refused as unsupported, naming `c` (cuSPARSE's SDDMM size query refused BSR
/// outputs on an H100, CUDA 13.0). Each combination is printed before its call, so a failing
/// run names it.
pub fn sddmm_bsr<T: Val, I: Idx>(cx: &mut Cx) {
    let (m, n) = (6, 4);
    let pattern = cx.random(m, n, 0.3, T::COMPLEX);
    for k in [4, 5] {
        for (ta, tb, ra, rb) in [
            (Transpose::No, Transpose::No, false, false),
            (Transpose::Yes, Transpose::No, false, true),
            (Transpose::No, Transpose::Yes, true, false),
        ] {
            let what = format!("sddmm bsr {} {:?} k {k} {ta:?} {tb:?} row {ra} {rb}", T::NAME, I::KIND);
            eprintln!("{what}");
            let a = cx.random(m, k, 1.0, T::COMPLEX).op(ta);
            let b = cx.random(k, n, 1.0, T::COMPLEX).op(tb);
            let lda = if ra { a.cols } else { a.rows };
            let ldb = if rb { b.cols } else { b.rows };
            let (da, db) = (cx.dense_up_in::<T>(&a, lda, ra), cx.dense_up_in::<T>(&b, ldb, rb));
            let (mut av, mut bv) =
                (DenseMatrix::new(&da, a.rows, a.cols).ld(lda), DenseMatrix::new(&db, b.rows, b.cols).ld(ldb));
            if ra {
                av = av.row_major();
            }
            if rb {
                bv = bv.row_major();
            }
            let c = cx.matrix::<T, I>(&pattern, "bsr");
            let got = cx.h.sparse().unwrap().sddmm(ta, tb, T::of(Z), av, bv, T::of(Z), &c);
            refused(got, "c", &what);
        }
    }
}

/// Asserts that `got` is a refusal as unsupported naming `arg`.
#[track_caller]
fn refused<T>(got: cusched::Result<T>, arg: &str, what: &str) {
    let named = format!("`{arg}`");
    match got {
        Err(Error::Unsupported { what: w, .. }) if w.contains(&named) => {}
        Err(e) => panic!("{what}: expected `{arg}` refused as unsupported, got {e:?}"),
        Ok(_) => panic!("{what}: expected `{arg}` refused as unsupported, and it ran"),
    }
}

pub fn conversions<T: Val, I: Idx>(cx: &mut Cx) {
    let (rows, cols) = (9, 7);
    let a = cx.random(rows, cols, 0.3, T::COMPLEX);
    for format in ["csr", "csc", "coo"] {
        for (pad, row) in [(0, false), (2, false), (0, true), (3, true)] {
            let ld = if row { cols + pad } else { rows + pad };
            let sa = cx.matrix::<T, I>(&a, format);
            let noise = cx.random(rows, cols, 1.0, T::COMPLEX);
            let out = cx.dense_up_in::<T>(&noise, ld, row);
            let mut ov = DenseMatrix::new(&out, rows, cols).ld(ld);
            if row {
                ov = ov.row_major();
            }
            cx.h.sparse().unwrap().sparse_to_dense(&sa, ov).unwrap().wait().unwrap();
            let what = format!("sparse_to_dense {} {:?} {format} ld {ld} row {row}", T::NAME, I::KIND);
            let got = cx.dc_padding_kept_in(&out, rows, cols, ld, row, &what);
            cx.check(&got, &a.v, 0.0, &what);
        }
    }
    for (pad, row) in [(0, false), (2, false), (0, true), (1, true)] {
        let ld = if row { cols + pad } else { rows + pad };
        let dd = cx.dense_up_in::<T>(&a, ld, row);
        let mut dv = DenseMatrix::new(&dd, rows, cols).ld(ld);
        if row {
            dv = dv.row_major();
        }
        let csr = cx.h.sparse().unwrap().dense_to_csr::<T, I>(dv).unwrap().wait().unwrap();
        csr.check(cx.s).unwrap();
        let back = cx.dense_up::<T>(&Dense { rows, cols, v: vec![Z; rows * cols] }, rows);
        cx.h.sparse().unwrap().sparse_to_dense(&csr, DenseMatrix::new(&back, rows, cols)).unwrap().wait().unwrap();
        cx.check(
            &dense_down(cx, &back, rows, cols, rows),
            &a.v,
            0.0,
            &format!("dense_to_csr {} {:?} ld {ld} row {row}", T::NAME, I::KIND),
        );
    }
}

/// Dense → CSC and dense → COO, from column- and row-major views with padded leading
/// dimensions: each output passes the checked mode and holds `a` (read back through
/// sparse → dense); CSC's column offsets are the reference's.
pub fn dense_to_csc_and_coo<T: Val, I: Idx>(cx: &mut Cx) {
    let (rows, cols) = (9, 7);
    let a = cx.random(rows, cols, 0.3, T::COMPLEX);
    let want_csc = cx.matrix::<T, I>(&a, "csc");
    for (pad, row) in [(0, false), (2, false), (0, true), (3, true)] {
        let ld = if row { cols + pad } else { rows + pad };
        let dd = cx.dense_up_in::<T>(&a, ld, row);
        for coo in [false, true] {
            let mut dv = DenseMatrix::new(&dd, rows, cols).ld(ld);
            if row {
                dv = dv.row_major();
            }
            let what =
                format!("dense_to_{} {} {:?} ld {ld} row {row}", if coo { "coo" } else { "csc" }, T::NAME, I::KIND);
            let m = if coo {
                cx.h.sparse().unwrap().dense_to_coo::<T, I>(dv).unwrap().wait().unwrap()
            } else {
                cx.h.sparse().unwrap().dense_to_csc::<T, I>(dv).unwrap().wait().unwrap()
            };
            m.check(cx.s).unwrap();
            assert_eq!(m.nnz(), want_csc.nnz(), "{what}: nnz");
            if !coo {
                let offsets = |m: &SparseMatrix<T, I>| m.offsets().download(cx.s).unwrap();
                assert_eq!(offsets(&m), offsets(&want_csc), "{what}: column offsets");
            }
            let back = cx.dense_up::<T>(&Dense { rows, cols, v: vec![Z; rows * cols] }, rows);
            cx.h.sparse().unwrap().sparse_to_dense(&m, DenseMatrix::new(&back, rows, cols)).unwrap().wait().unwrap();
            cx.check(&dense_down(cx, &back, rows, cols, rows), &a.v, 0.0, &what);
        }
    }
}

/// The BSR conversions (`i32` indices, as cuSPARSE's legacy API takes): CSR → BSR against the
/// reference's BSR (blocks of 2), then in blocks of 3 and 1 on odd sizes; BSR → CSR and
/// BSR → dense holding the matrix; dense → BSR from a row-major padded view.
pub fn bsr_conversions<T: Val>(cx: &mut Cx) {
    let s = cx.s;
    let (rows, cols) = (8, 6);
    let a = cx.random(rows, cols, 0.3, T::COMPLEX);
    let csr = cx.matrix::<T, i32>(&a, "csr");
    let bsr = cx.h.sparse().unwrap().csr_to_bsr(&csr, 2).unwrap().wait().unwrap();
    let want = cx.matrix::<T, i32>(&a, "bsr");
    let what = format!("csr_to_bsr {} block 2", T::NAME);
    assert_eq!((bsr.nnz(), bsr.block()), (want.nnz(), 2), "{what}: blocks");
    assert_eq!(bsr.offsets().download(s).unwrap(), want.offsets().download(s).unwrap(), "{what}: offsets");
    let n = want.nnz();
    assert_eq!(bsr.indices().download(s).unwrap()[..n], want.indices().download(s).unwrap()[..n], "{what}: indices");
    let vals = |m: &SparseMatrix<T, i32>| -> Vec<C> {
        m.values().download(s).unwrap()[..n * 4].iter().map(|v| v.c()).collect()
    };
    cx.check(&vals(&bsr), &vals(&want), 0.0, &what);
    for (rows, cols, block) in [(9, 6, 3), (8, 6, 2), (5, 3, 1)] {
        let a = cx.random(rows, cols, 0.3, T::COMPLEX);
        let csr = cx.matrix::<T, i32>(&a, "csr");
        let what = format!("{} {rows}x{cols} block {block}", T::NAME);
        let bsr = cx.h.sparse().unwrap().csr_to_bsr(&csr, block).unwrap().wait().unwrap();
        bsr.check(s).unwrap();
        let out = cx.dense_up::<T>(&Dense { rows, cols, v: vec![Z; rows * cols] }, rows + 1);
        cx.h.sparse()
            .unwrap()
            .bsr_to_dense(&bsr, DenseMatrix::new(&out, rows, cols).ld(rows + 1))
            .unwrap()
            .wait()
            .unwrap();
        let got = cx.dc_padding_kept(&out, rows, cols, rows + 1, &what);
        cx.check(&got, &a.v, 0.0, &format!("csr_to_bsr then bsr_to_dense {what}"));
        let back = cx.h.sparse().unwrap().bsr_to_csr(&bsr).unwrap().wait().unwrap();
        back.check(s).unwrap();
        assert_eq!(back.nnz(), bsr.nnz() * block * block, "bsr_to_csr {what}: every value of every block");
        let out = cx.dense_up::<T>(&Dense { rows, cols, v: vec![Z; rows * cols] }, rows);
        cx.h.sparse().unwrap().sparse_to_dense(&back, DenseMatrix::new(&out, rows, cols)).unwrap().wait().unwrap();
        cx.check(&dense_down(cx, &out, rows, cols, rows), &a.v, 0.0, &format!("bsr_to_csr {what}"));
        let dd = cx.dense_up_in::<T>(&a, cols + 2, true);
        let dv = DenseMatrix::new(&dd, rows, cols).ld(cols + 2).row_major();
        let direct = cx.h.sparse().unwrap().dense_to_bsr(dv, block).unwrap().wait().unwrap();
        assert_eq!((direct.nnz(), direct.block()), (bsr.nnz(), block), "dense_to_bsr {what}: blocks");
        let bv = |m: &SparseMatrix<T, i32>| -> Vec<C> {
            m.values().download(s).unwrap()[..m.nnz() * block * block].iter().map(|v| v.c()).collect()
        };
        let want = bv(&bsr);
        cx.check(&bv(&direct), &want, 0.0, &format!("dense_to_bsr {what}"));
    }
}

pub fn vectors<T: Val, I: Idx>(cx: &mut Cx) {
    let size = 11;
    let pos = [0usize, 3, 4, 9];
    let vals = cx.vals::<T>(pos.len());
    let x = SparseVector::<T, I>::new(size, pos.len(), &cx.idx::<I>(&pos), &cx.up(&vals)).unwrap();
    for beta0 in [true, false] {
        let y0 = cx.vals::<T>(size);
        let dy = cx.up(&y0);
        let (alpha, beta) = (cx.val(T::COMPLEX), if beta0 { Z } else { cx.val(T::COMPLEX) });
        cx.h.sparse().unwrap().axpby(T::of(alpha), &x, T::of(beta), &dy).unwrap().wait().unwrap();
        let mut want: Vec<C> = y0.iter().map(|v| if beta0 { Z } else { beta * v.c() }).collect();
        for (j, &p) in pos.iter().enumerate() {
            want[p] = want[p] + alpha * vals[j].c();
        }
        let got: Vec<C> = dy.download(cx.s).unwrap().iter().map(|v| v.c()).collect();
        cx.check(&got, &want, T::TOL, &format!("axpby {} {:?} beta0 {beta0}", T::NAME, I::KIND));
    }
    let y = cx.vals::<T>(size);
    let dy = cx.up(&y);
    let g =
        SparseVector::<T, I>::new(size, pos.len(), &cx.idx::<I>(&pos), &cx.up(&vec![T::zero(); pos.len()])).unwrap();
    cx.h.sparse().unwrap().gather(&dy, &g).unwrap().wait().unwrap();
    let got: Vec<C> = g.values().download(cx.s).unwrap().iter().map(|v| v.c()).collect();
    cx.check(
        &got,
        &pos.iter().map(|&p| y[p].c()).collect::<Vec<_>>(),
        0.0,
        &format!("gather {} {:?}", T::NAME, I::KIND),
    );
    cx.h.sparse().unwrap().scatter(&x, &dy).unwrap().wait().unwrap();
    let mut want: Vec<C> = y.iter().map(|v| v.c()).collect();
    for (j, &p) in pos.iter().enumerate() {
        want[p] = vals[j].c();
    }
    let got: Vec<C> = dy.download(cx.s).unwrap().iter().map(|v| v.c()).collect();
    cx.check(&got, &want, 0.0, &format!("scatter {} {:?}", T::NAME, I::KIND));
}

/// SpGEMM in either index type, and its reusable form, computed with `beta` zero and then
/// `beta C` on the last compute's `C`, with `i32` indices (refused, naming `a`, with `i64`).
pub fn spgemm_products<T: Val, I: Idx>(cx: &mut Cx) {
    let (m, k, n) = (9, 8, 7);
    let (a, b) = (cx.random(m, k, 0.3, T::COMPLEX), cx.random(k, n, 0.3, T::COMPLEX));
    let (sa, sb) = (cx.matrix::<T, I>(&a, "csr"), cx.matrix::<T, I>(&b, "csr"));
    let what = format!("{} {:?}", T::NAME, I::KIND);
    let alpha = cx.val(T::COMPLEX);
    let c = cx.h.sparse().unwrap().spgemm(T::of(alpha), &sa, &sb).unwrap().wait().unwrap();
    let want = gemm(alpha, &a, &b, Z, &a);
    let out = cx.dense_up::<T>(&Dense { rows: m, cols: n, v: vec![Z; m * n] }, m);
    cx.h.sparse().unwrap().sparse_to_dense(&c, DenseMatrix::new(&out, m, n)).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &out, m, n, m), &want, T::TOL, &format!("spgemm {what}"));
    if I::KIND != cusched::sparse::IndexKind::I32 {
        // cuSPARSE's reuse work estimation takes 32-bit indices only.
        refused(cx.h.sparse().unwrap().spgemm_reuse(&sa, &sb), "a", &format!("spgemm_reuse {what}"));
        return;
    }
    let plan = cx.h.sparse().unwrap().spgemm_reuse(&sa, &sb).unwrap();
    cx.h.sparse().unwrap().spgemm_reuse_compute(&plan, T::of(alpha), T::of(Z)).unwrap().wait().unwrap();
    cx.h.sparse().unwrap().sparse_to_dense(plan.c(), DenseMatrix::new(&out, m, n)).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &out, m, n, m), &want, T::TOL, &format!("spgemm_reuse {what}"));
    let (alpha2, beta) = (cx.val(T::COMPLEX), cx.val(T::COMPLEX));
    cx.h.sparse().unwrap().spgemm_reuse_compute(&plan, T::of(alpha2), T::of(beta)).unwrap().wait().unwrap();
    cx.h.sparse().unwrap().sparse_to_dense(plan.c(), DenseMatrix::new(&out, m, n)).unwrap().wait().unwrap();
    let want2: Vec<C> = gemm(alpha2, &a, &b, Z, &a).iter().zip(&want).map(|(&x, &w)| x + beta * w).collect();
    cx.check(&dense_down(cx, &out, m, n, m), &want2, T::TOL * 2.0, &format!("spgemm_reuse beta {what}"));
}

/// The ops that take `i32` indices only: CSR ↔ CSC and CSR ↔ COO.
pub fn i32_only<T: Val>(cx: &mut Cx) {
    let (m, k) = (9, 8);
    let a = cx.random(m, k, 0.3, T::COMPLEX);
    let sa = cx.matrix::<T, i32>(&a, "csr");
    let csc = cx.h.sparse().unwrap().convert_compressed(&sa).unwrap().wait().unwrap();
    let out = cx.dense_up::<T>(&Dense { rows: m, cols: k, v: vec![Z; m * k] }, m);
    cx.h.sparse().unwrap().sparse_to_dense(&csc, DenseMatrix::new(&out, m, k)).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &out, m, k, m), &a.v, 0.0, &format!("csr2csc {}", T::NAME));
    // CSR → COO → CSR: the row structure matches the reference's COO and CSR of `a`, and the
    // matrices hold `a`.
    let coo = cx.h.sparse().unwrap().csr_to_coo(&sa).unwrap().wait().unwrap();
    let want_coo = cx.matrix::<T, i32>(&a, "coo");
    let rows_of = |cx: &Cx, m: &SparseMatrix<T, i32>, n: usize| m.offsets().download(cx.s).unwrap()[..n].to_vec();
    assert_eq!(rows_of(cx, &coo, sa.nnz()), rows_of(cx, &want_coo, sa.nnz()), "csr_to_coo {}", T::NAME);
    cx.h.sparse().unwrap().sparse_to_dense(&coo, DenseMatrix::new(&out, m, k)).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &out, m, k, m), &a.v, 0.0, &format!("csr_to_coo {}", T::NAME));
    let csr = cx.h.sparse().unwrap().coo_to_csr(&want_coo).unwrap().wait().unwrap();
    assert_eq!(rows_of(cx, &csr, m + 1), rows_of(cx, &sa, m + 1), "coo_to_csr {}", T::NAME);
    cx.h.sparse().unwrap().sparse_to_dense(&csr, DenseMatrix::new(&out, m, k)).unwrap().wait().unwrap();
    cx.check(&dense_down(cx, &out, m, k, m), &a.v, 0.0, &format!("coo_to_csr {}", T::NAME));
}

fn vals_of<T: Val>(v: &[C]) -> Vec<T> {
    v.iter().map(|&c| T::of(c)).collect()
}

/// Batched SpMM: three products of one pattern with different values (CSR sharing its row
/// offsets, COO striding all its arrays), strides with gaps, `B` row-major or not, and `A`
/// shared (stride 0) once.
pub fn spmm_batched<T: Val, I: Idx>(cx: &mut Cx) {
    let (rows, cols, n, count) = (7, 5, 3, 3);
    let pattern = cx.random(rows, cols, 0.4, T::COMPLEX);
    for format in ["csr", "coo"] {
        for (shared, row_b, t) in
            [(false, false, Transpose::No), (false, true, Transpose::Yes), (true, false, Transpose::No)]
        {
            let coo = format == "coo";
            // The A_i: one pattern, values of their own (one A for all when shared).
            let mut mats: Vec<Dense> = Vec::new();
            for i in 0..count {
                let m = if shared && i > 0 {
                    mats[0].clone()
                } else {
                    let v = pattern.v.iter().map(|&p| if p == Z { Z } else { cx.val(T::COMPLEX) }).collect();
                    Dense { rows, cols, v }
                };
                mats.push(m);
            }
            // One matrix's arrays (row-sorted entries), then the batch laid out `se` apart.
            let (mut major, mut minor) = (vec![0usize], Vec::new());
            for r in 0..rows {
                for c in 0..cols {
                    if pattern.at(r, c) != Z {
                        minor.push(c);
                        if coo {
                            major.push(r);
                        }
                    }
                }
                if !coo {
                    major.push(minor.len());
                }
            }
            if coo {
                major.remove(0);
            }
            let nnz = minor.len();
            let se = if shared { 0 } else { nnz + 2 };
            let total = se * (count - 1) + nnz;
            let (mut bmajor, mut bminor, mut bvals) = (vec![0usize; total], vec![0usize; total], vec![Z; total]);
            for i in 0..count {
                let mut p = 0;
                for r in 0..rows {
                    for c in 0..cols {
                        if pattern.at(r, c) != Z {
                            bminor[i * se + p] = c;
                            bvals[i * se + p] = mats[i].at(r, c);
                            if coo {
                                bmajor[i * se + p] = major[p];
                            }
                            p += 1;
                        }
                    }
                }
            }
            let sa = if coo {
                SparseMatrix::coo(
                    rows,
                    cols,
                    nnz,
                    &cx.idx::<I>(&bmajor),
                    &cx.idx::<I>(&bminor),
                    &cx.up(&vals_of::<T>(&bvals)),
                )
            } else {
                SparseMatrix::csr(
                    rows,
                    cols,
                    nnz,
                    &cx.idx::<I>(&major),
                    &cx.idx::<I>(&bminor),
                    &cx.up(&vals_of::<T>(&bvals)),
                )
            }
            .unwrap();
            let ops: Vec<Dense> = mats.iter().map(|m| m.op(t)).collect();
            let (k, m) = (ops[0].cols, ops[0].rows);
            let bs: Vec<Dense> = (0..count).map(|_| cx.random(k, n, 1.0, T::COMPLEX)).collect();
            let cs: Vec<Dense> = (0..count).map(|_| cx.random(m, n, 1.0, T::COMPLEX)).collect();
            let (ldb, ldc) = if row_b { (n + 1, m) } else { (k + 1, m) };
            let b_span = if row_b { ldb * (k - 1) + n } else { ldb * (n - 1) + k };
            let (sb, sc) = (b_span + 3, ldc * n + 1);
            let mut hb = vec![Z; sb * (count - 1) + b_span];
            let mut hc = vec![C(f64::NAN, 0.0); sc * (count - 1) + ldc * n];
            for i in 0..count {
                for r in 0..k {
                    for j in 0..n {
                        let o = if row_b { r * ldb + j } else { r + j * ldb };
                        hb[i * sb + o] = bs[i].at(r, j);
                    }
                }
                for r in 0..m {
                    for j in 0..n {
                        hc[i * sc + r + j * ldc] = cs[i].at(r, j);
                    }
                }
            }
            let (db, dc) = (cx.up(&vals_of::<T>(&hb)), cx.up(&vals_of::<T>(&hc)));
            let mut bv = DenseMatrix::new(&db, k, n).ld(ldb);
            if row_b {
                bv = bv.row_major();
            }
            let batch =
                cusched::sparse::SpmmBatch { count, a_offsets: if coo { se } else { 0 }, a_entries: se, b: sb, c: sc };
            let (alpha, beta) = (cx.val(T::COMPLEX), cx.val(T::COMPLEX));
            let cv = DenseMatrix::new(&dc, m, n).ld(ldc);
            cx.h.sparse()
                .unwrap()
                .spmm_batched(t, T::of(alpha), &sa, bv, T::of(beta), cv, batch)
                .unwrap()
                .wait()
                .unwrap();
            let got = dc.download(cx.s).unwrap();
            for i in 0..count {
                let what =
                    format!("spmm_batched {} {:?} {format} {t:?} shared {shared} row_b {row_b} #{i}", T::NAME, I::KIND);
                let g: Vec<C> = (0..m * n).map(|x| got[i * sc + (x / n) + (x % n) * ldc].c()).collect();
                cx.check(&g, &gemm(alpha, &ops[i], &bs[i], beta, &cs[i]), T::TOL, &what);
            }
        }
    }
}

pub fn all_index_types<T: Val>(cx: &mut Cx) {
    spmv_and_spmm::<T, i32>(cx);
    spmv_and_spmm::<T, i64>(cx);
    spmm_batched::<T, i32>(cx);
    spmm_batched::<T, i64>(cx);
    solves::<T, i32>(cx);
    solves::<T, i64>(cx);
    sddmm::<T, i32>(cx);
    sddmm::<T, i64>(cx);
    sddmm_bsr::<T, i32>(cx);
    sddmm_bsr::<T, i64>(cx);
    conversions::<T, i32>(cx);
    conversions::<T, i64>(cx);
    dense_to_csc_and_coo::<T, i32>(cx);
    dense_to_csc_and_coo::<T, i64>(cx);
    vectors::<T, i32>(cx);
    vectors::<T, i64>(cx);
    spgemm_products::<T, i32>(cx);
    spgemm_products::<T, i64>(cx);
    i32_only::<T>(cx);
    bsr_conversions::<T>(cx);
}

impl Cx {
    /// A harness on a fresh stream of `d`, its inputs drawn from `rng`.
    pub fn new(d: Device, rng: Rng) -> Cx {
        let s = d.new_stream().unwrap();
        let h = Handles::new(&d, s).unwrap();
        Cx { d, s, h, rng, log: Vec::new() }
    }

    /// Checks `got` against the reference `want` and logs it.
    #[track_caller]
    pub fn check(&mut self, got: &[C], want: &[C], tol: f64, what: &str) {
        close(got, want, tol, what);
        self.log.push((what.to_string(), got.to_vec(), tol));
    }
}

/// Every op in every value and index type, on `cx`'s device.
pub fn every_op(cx: &mut Cx) {
    all_index_types::<f32>(cx);
    all_index_types::<f64>(cx);
    all_index_types::<Complex<f32>>(cx);
    all_index_types::<Complex<f64>>(cx);
}

/// Compares two logs of the same harness on the same inputs, entry by entry: each backend is
/// within its tolerance of the reference, so they are within twice that of each other.
#[track_caller]
pub fn same_results(a: &[(String, Vec<C>, f64)], b: &[(String, Vec<C>, f64)], names: [&str; 2]) {
    assert_eq!(a.len(), b.len(), "{} and {} checked different numbers of results", names[0], names[1]);
    for ((wa, va, tol), (wb, vb, _)) in a.iter().zip(b) {
        assert_eq!(wa, wb, "the logs diverge");
        close(vb, va, 2.0 * tol, &format!("{wa}: {} vs {}", names[1], names[0]));
    }
}
