//! cuBLASLt matmuls in f64, `Complex<f32>`, `Complex<f64>` and i8 (into i32): one case run
//! through cusched (GPU or simulator) and checked against a direct complex-f64 loop.
#![allow(clippy::too_many_arguments)]

use super::super::Rng;
use cusched::blas_lt::{Epilogue, LtElement, Matmul, Order, Transpose};
use cusched::{Complex, Device, Element, GpuRef, Handles};

/// A complex f64, `[re, im]` (a real value has im 0).
pub type C = [f64; 2];

/// A value of one of the new element types, through complex f64.
pub trait Val: Element + LtElement {
    fn of(x: C) -> Self;
    fn f(self) -> C;
    /// A random value: small integers for integer types, f32-exact values in [-1, 1) for
    /// floating ones.
    fn gen(rng: &mut Rng) -> C;
}

/// An input type: its `D` type, name, tolerance and scales.
pub trait Input: Val {
    type Out: Val;
    const NAME: &'static str;
    /// Tolerance relative to the sum of the absolute terms (0: exact).
    const TOL: f64;
    const COMPLEX: bool;
    fn scale(x: C) -> Self::Scale;
    /// `alpha` and `beta` (when C is read) for a case.
    fn alpha_beta() -> (C, C);
}

fn real_gen(rng: &mut Rng) -> C {
    [rng.f32() as f64, 0.0]
}
fn complex_gen(rng: &mut Rng) -> C {
    [rng.f32() as f64, rng.f32() as f64]
}

impl Val for f64 {
    fn of(x: C) -> Self {
        x[0]
    }
    fn f(self) -> C {
        [self, 0.0]
    }
    fn gen(rng: &mut Rng) -> C {
        real_gen(rng)
    }
}
impl Val for Complex<f32> {
    fn of(x: C) -> Self {
        Complex::new(x[0] as f32, x[1] as f32)
    }
    fn f(self) -> C {
        [self.re as f64, self.im as f64]
    }
    fn gen(rng: &mut Rng) -> C {
        complex_gen(rng)
    }
}
impl Val for Complex<f64> {
    fn of(x: C) -> Self {
        Complex::new(x[0], x[1])
    }
    fn f(self) -> C {
        [self.re, self.im]
    }
    fn gen(rng: &mut Rng) -> C {
        complex_gen(rng)
    }
}
impl Val for i8 {
    fn of(x: C) -> Self {
        x[0] as i8
    }
    fn f(self) -> C {
        [self as f64, 0.0]
    }
    fn gen(rng: &mut Rng) -> C {
        [rng.below(255) as f64 - 127.0, 0.0]
    }
}
impl Val for i32 {
    fn of(x: C) -> Self {
        x[0] as i32
    }
    fn f(self) -> C {
        [self as f64, 0.0]
    }
    fn gen(rng: &mut Rng) -> C {
        [rng.below(2001) as f64 - 1000.0, 0.0]
    }
}

impl Input for f64 {
    type Out = f64;
    const NAME: &'static str = "f64";
    const TOL: f64 = 1e-13;
    const COMPLEX: bool = false;
    fn scale(x: C) -> f64 {
        x[0]
    }
    fn alpha_beta() -> (C, C) {
        ([1.5, 0.0], [-0.75, 0.0])
    }
}
impl Input for Complex<f32> {
    type Out = Complex<f32>;
    const NAME: &'static str = "Complex<f32>";
    // f32 accumulation over k terms: k eps of the magnitude at worst.
    const TOL: f64 = 1e-5;
    const COMPLEX: bool = true;
    fn scale(x: C) -> Complex<f32> {
        Complex::new(x[0] as f32, x[1] as f32)
    }
    fn alpha_beta() -> (C, C) {
        ([1.5, -0.5], [0.25, 0.75])
    }
}
impl Input for Complex<f64> {
    type Out = Complex<f64>;
    const NAME: &'static str = "Complex<f64>";
    const TOL: f64 = 1e-13;
    const COMPLEX: bool = true;
    fn scale(x: C) -> Complex<f64> {
        Complex::new(x[0], x[1])
    }
    fn alpha_beta() -> (C, C) {
        ([1.5, -0.5], [0.25, 0.75])
    }
}
impl Input for i8 {
    type Out = i32;
    const NAME: &'static str = "i8";
    const TOL: f64 = 0.0;
    const COMPLEX: bool = false;
    fn scale(x: C) -> i32 {
        x[0] as i32
    }
    fn alpha_beta() -> (C, C) {
        ([3.0, 0.0], [-2.0, 0.0])
    }
}

/// One matmul: shape, transposes, order (`row` of C and D, and of A and B unless `row_a` /
/// `row_b` say otherwise), whether `beta C` is added (C is D, read in place), the epilogue
/// (`default`, `relu`, `bias`, `relu_bias`), and whether `alpha` and `beta` come from device
/// memory.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: Transpose,
    pub tb: Transpose,
    pub row: bool,
    pub beta: bool,
    pub epi: &'static str,
    pub row_a: Option<bool>,
    pub row_b: Option<bool>,
    pub device_scalars: bool,
}

/// The transposes each type takes: TN only for i8; N, T and C (the conjugate transpose, the
/// transpose for a real type) for the others.
pub fn transposes<T: Input>() -> Vec<(Transpose, Transpose)> {
    use Transpose::*;
    if T::NAME == "i8" {
        return vec![(Yes, No)];
    }
    let all = [No, Yes, Conj];
    all.iter().flat_map(|&a| all.iter().map(move |&b| (a, b))).collect()
}

/// The epilogues each type takes.
pub fn epilogues<T: Input>() -> &'static [&'static str] {
    if T::NAME == "f64" {
        &["default", "relu", "bias", "relu_bias"]
    } else {
        &["default"]
    }
}

/// Every case of `T` at shape `m x n x k`: transposes x order x beta x epilogue.
pub fn cases<T: Input>(m: usize, n: usize, k: usize) -> Vec<Case> {
    let mut out = Vec::new();
    for (ta, tb) in transposes::<T>() {
        for row in [false, true] {
            // Row-major i8: TN in the column-major problem is trans_a = No, trans_b = Yes.
            let (ta, tb) = if row && T::NAME == "i8" { (Transpose::No, Transpose::Yes) } else { (ta, tb) };
            for beta in [false, true] {
                for &epi in epilogues::<T>() {
                    out.push(Case { m, n, k, ta, tb, row, beta, epi, row_a: None, row_b: None, device_scalars: false });
                }
            }
        }
    }
    out
}

/// Every mix of orders of A, B and C/D of `T` at shape `m x n x k`, over the transposes it takes
/// there (a conjugated complex matrix stored in another order than D's has no cuBLASLt form:
/// left out), with `beta C` and, when `device_scalars`, `alpha` and `beta` from device memory.
pub fn order_cases<T: Input>(m: usize, n: usize, k: usize, device_scalars: bool) -> Vec<Case> {
    let mut out = Vec::new();
    for row in [false, true] {
        for row_a in [false, true] {
            for row_b in [false, true] {
                let tr: Vec<(Transpose, Transpose)> = if T::NAME == "i8" {
                    // TN once the orders are folded in: A transposed exactly when column-major, B
                    // when row-major.
                    let t = |y: bool| if y { Transpose::Yes } else { Transpose::No };
                    vec![(t(!row_a), t(row_b))]
                } else {
                    transposes::<T>()
                };
                for (ta, tb) in tr {
                    let conj_flipped =
                        (ta == Transpose::Conj && row_a != row) || (tb == Transpose::Conj && row_b != row);
                    if T::COMPLEX && conj_flipped {
                        continue;
                    }
                    let epi = epilogues::<T>()[epilogues::<T>().len() - 1];
                    let (row_a, row_b) = (Some(row_a), Some(row_b));
                    out.push(Case { m, n, k, ta, tb, row, beta: true, epi, row_a, row_b, device_scalars });
                }
            }
        }
    }
    out
}

fn mul(x: C, y: C) -> C {
    [x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]]
}
fn abs(x: C) -> f64 {
    x[0].hypot(x[1])
}

/// A stored `rows x cols` matrix, packed in the case's order.
struct Stored {
    row: bool,
    rows: usize,
    cols: usize,
}

impl Stored {
    fn len(&self) -> usize {
        self.rows * self.cols
    }
    fn ld(&self) -> usize {
        if self.row {
            self.cols
        } else {
            self.rows
        }
    }
    fn at(&self, r: usize, c: usize) -> usize {
        if self.row {
            r * self.cols + c
        } else {
            r + c * self.rows
        }
    }
}

/// Element `(i, l)` of `op(X)`.
fn op(x: &[C], s: &Stored, t: Transpose, i: usize, l: usize) -> C {
    match t {
        Transpose::No => x[s.at(i, l)],
        Transpose::Yes => x[s.at(l, i)],
        Transpose::Conj => {
            let v = x[s.at(l, i)];
            [v[0], -v[1]]
        }
    }
}

/// Runs `c` on `dev` with fresh random inputs and checks every element of `D`; panics naming
/// the case on a mismatch.
pub fn check<T: Input>(dev: &Device, h: &mut Handles, c: &Case, rng: &mut Rng) {
    let s = h.stream();
    let stored = |t: Transpose, r: usize, cc: usize, row: Option<bool>| {
        let (rows, cols) = if t == Transpose::No { (r, cc) } else { (cc, r) };
        Stored { row: row.unwrap_or(c.row), rows, cols }
    };
    let (sa, sb, sd) =
        (stored(c.ta, c.m, c.k, c.row_a), stored(c.tb, c.k, c.n, c.row_b), stored(Transpose::No, c.m, c.n, None));
    let fa: Vec<C> = (0..sa.len()).map(|_| T::gen(rng)).collect();
    let fb: Vec<C> = (0..sb.len()).map(|_| T::gen(rng)).collect();
    let fc: Vec<C> = (0..sd.len()).map(|_| T::Out::gen(rng)).collect();
    let bias_len = if c.row { c.n } else { c.m };
    let fbias: Vec<C> = (0..bias_len).map(|_| T::Out::gen(rng)).collect();
    // Values exactly as stored.
    let fa: Vec<C> = fa.iter().map(|&x| T::of(x).f()).collect();
    let fb: Vec<C> = fb.iter().map(|&x| T::of(x).f()).collect();
    let fc: Vec<C> = fc.iter().map(|&x| T::Out::of(x).f()).collect();
    let fbias: Vec<C> = fbias.iter().map(|&x| T::Out::of(x).f()).collect();
    let up_in = |v: &[C]| -> GpuRef<T> { dev.upload(s, &v.iter().map(|&x| T::of(x)).collect::<Vec<_>>()).unwrap() };
    let up_out =
        |v: &[C]| -> GpuRef<T::Out> { dev.upload(s, &v.iter().map(|&x| T::Out::of(x)).collect::<Vec<_>>()).unwrap() };
    let (a, b) = (up_in(&fa), up_in(&fb));
    // D starts as C (read in place when beta is set) or as garbage that must be overwritten.
    let d0: Vec<C> = if c.beta { fc.clone() } else { vec![[12345.0, -54321.0]; sd.len()] };
    let d = up_out(&d0);
    let bias = up_out(&fbias);
    let (alpha, beta) = T::alpha_beta();
    let beta = if c.beta { beta } else { [0.0, 0.0] };
    let e: Epilogue<'_, T::Out> = match c.epi {
        "default" => Epilogue::Default,
        "relu" => Epilogue::Relu,
        "bias" => Epilogue::Bias(&bias),
        "relu_bias" => Epilogue::ReluBias(&bias),
        other => panic!("unknown epilogue {other}"),
    };
    let o = |row: bool| if row { Order::Row } else { Order::Col };
    let mut mm = Matmul::new(c.m, c.n, c.k, &a, &b, &d)
        .transpose(c.ta, c.tb)
        .order(o(c.row))
        .leading(sa.ld(), sb.ld(), sd.ld())
        .scale(T::scale(alpha), T::scale(beta))
        .epilogue(e);
    if c.row_a.is_some() || c.row_b.is_some() {
        mm = mm.orders(o(sa.row), o(sb.row), o(c.row));
    }
    let scalars = (dev.upload(s, &[T::scale(alpha)]).unwrap(), dev.upload(s, &[T::scale(beta)]).unwrap());
    if c.device_scalars {
        // Host values that would give another result: the device's must be the ones read.
        mm = mm.scale(T::scale([0.0, 0.0]), T::scale([1.0, 0.0])).scale_device(&scalars.0, &scalars.1);
    }
    let what = format!("{} {c:?}", T::NAME);
    h.blas_lt().unwrap().matmul(&mm).unwrap_or_else(|e| panic!("{what}: {e}")).wait().unwrap();
    let got: Vec<C> = d.download(s).unwrap().iter().map(|x| x.f()).collect();
    let relu = c.epi.starts_with("relu");
    let has_bias = c.epi.ends_with("bias");
    for j in 0..c.n {
        for i in 0..c.m {
            let (mut acc, mut mag) = ([0.0, 0.0], 0.0);
            for l in 0..c.k {
                let (x, y) = (op(&fa, &sa, c.ta, i, l), op(&fb, &sb, c.tb, l, j));
                let p = mul(x, y);
                acc = [acc[0] + p[0], acc[1] + p[1]];
                mag += abs(x) * abs(y);
            }
            let mut v = mul(alpha, acc);
            mag *= abs(alpha);
            if c.beta {
                let y = mul(beta, fc[sd.at(i, j)]);
                v = [v[0] + y[0], v[1] + y[1]];
                mag += abs(beta) * abs(fc[sd.at(i, j)]);
            }
            if has_bias {
                let bv = fbias[if c.row { j } else { i }];
                v = [v[0] + bv[0], v[1] + bv[1]];
                mag += abs(bv);
            }
            if relu {
                v[0] = v[0].max(0.0);
            }
            let g = got[sd.at(i, j)];
            let err = abs([g[0] - v[0], g[1] - v[1]]);
            assert!(
                err <= T::TOL * mag + f64::MIN_POSITIVE,
                "{what}: D[{i},{j}] = {g:?}, want {v:?} (error {err:e}, magnitude {mag:e})"
            );
        }
    }
}
