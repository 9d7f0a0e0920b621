//! Every cuTENSOR op on `Complex<f32>` and `Complex<f64>` data, conjugated or not, checked
//! against direct loops in complex f64 arithmetic: one runner for the simulator's tests and the
//! GPU's, so both cover the same cross product (odd extents throughout).

use super::tensor::{close, extents_of, packed};
use crate::common::{random, Rng};
use cusched::tensor::{
    BinaryOp, Contraction, ElementwiseBinary, ElementwiseTrinary, Permutation, Reduction, TensorElement, TensorRef,
    UnaryOp,
};
use cusched::{Complex, Device, Handles, StreamId};
use std::collections::BTreeMap;

/// A complex value of the reference: real part, imaginary part.
pub type Z = (f64, f64);

pub fn zadd(x: Z, y: Z) -> Z {
    (x.0 + y.0, x.1 + y.1)
}

pub fn zmul(x: Z, y: Z) -> Z {
    (x.0 * y.0 - x.1 * y.1, x.0 * y.1 + x.1 * y.0)
}

pub fn zconj(x: Z, conj: bool) -> Z {
    if conj {
        (x.0, -x.1)
    } else {
        x
    }
}

/// The complex element types of cuTENSOR, for the tests.
pub trait Cx: TensorElement<Scalar = Complex<f64>> {
    /// Relative tolerance per summed term.
    const TOL: f64;
    fn of(z: Z) -> Self;
    fn parts(self) -> Z;
}

impl Cx for Complex<f32> {
    const TOL: f64 = 1e-6;
    fn of(z: Z) -> Self {
        Complex::new(z.0 as f32, z.1 as f32)
    }
    fn parts(self) -> Z {
        (f64::from(self.re), f64::from(self.im))
    }
}

impl Cx for Complex<f64> {
    const TOL: f64 = 1e-14;
    fn of(z: Z) -> Self {
        Complex::new(z.0, z.1)
    }
    fn parts(self) -> Z {
        (self.re, self.im)
    }
}

/// `n` random complex values with parts in [-1, 1) (exact in f32).
pub fn zrandom(rng: &mut Rng, n: usize) -> Vec<Z> {
    let (re, im) = (random(rng, n), random(rng, n));
    re.into_iter().zip(im).collect()
}

/// `out[...] = fold over the modes the output lacks of Π inputs` (each input conjugated as
/// `conj` says), from `init`; inputs and output packed row-major.
pub fn zeinsum(
    spec: &str,
    inputs: &[(&[Z], &[usize])],
    conj: &[bool],
    ext: &BTreeMap<char, usize>,
    init: Z,
    fold: fn(Z, Z) -> Z,
) -> Vec<Z> {
    let (lhs, out) = spec.split_once("->").unwrap();
    let in_modes: Vec<Vec<char>> = lhs.split(',').map(|m| m.chars().collect()).collect();
    let out_modes: Vec<char> = out.chars().collect();
    let out_ext: Vec<usize> = out_modes.iter().map(|c| ext[c]).collect();
    let out_strides = packed(&out_ext);
    let modes: Vec<char> = ext.keys().copied().collect();
    let total: usize = modes.iter().map(|c| ext[c]).product();
    let mut res = vec![init; out_ext.iter().product()];
    let offset = |ms: &[char], strides: &[usize], idx: &BTreeMap<char, usize>| -> usize {
        ms.iter().zip(strides).map(|(c, s)| idx[c] * s).sum()
    };
    for flat in 0..total {
        let mut idx = BTreeMap::new();
        let mut r = flat;
        for c in modes.iter().rev() {
            idx.insert(*c, r % ext[c]);
            r /= ext[c];
        }
        let mut prod = (1.0, 0.0);
        for (i, (v, strides)) in inputs.iter().enumerate() {
            prod = zmul(prod, zconj(v[offset(&in_modes[i], strides, &idx)], conj[i]));
        }
        let o = offset(&out_modes, &out_strides, &idx);
        res[o] = fold(res[o], prod);
    }
    res
}

/// Asserts `got` is within `tol` (relative to the largest part of `want`, at least 1) of
/// `want`, part by part.
#[track_caller]
pub fn zclose(got: &[Z], want: &[Z], tol: f64, what: &str) {
    let split = |v: &[Z]| -> Vec<f64> { v.iter().flat_map(|z| [z.0, z.1]).collect() };
    close(&split(got), &split(want), tol, what);
}

fn up<T: Cx>(d: &Device, s: StreamId, v: &[Z]) -> cusched::GpuRef<T> {
    d.upload(s, &v.iter().map(|&z| T::of(z)).collect::<Vec<T>>()).unwrap()
}

fn down<T: Cx>(s: StreamId, b: &cusched::GpuRef<T>) -> Vec<Z> {
    b.download(s).unwrap().into_iter().map(T::parts).collect()
}

fn nan<T: Cx>(d: &Device, s: StreamId, n: usize) -> cusched::GpuRef<T> {
    up(d, s, &vec![(f64::NAN, f64::NAN); n])
}

fn unary(conj: bool) -> UnaryOp {
    if conj {
        UnaryOp::Conj
    } else {
        UnaryOp::Identity
    }
}

const ALPHA: Z = (0.5, -0.75);
const BETA: Z = (-1.0, 0.25);
const GAMMA: Z = (0.75, 0.5);

fn c(z: Z) -> Complex<f64> {
    Complex::new(z.0, z.1)
}

/// `d = alpha · Σ op_a(a) · op_b(b) + beta · d` for a matrix product and a batched
/// contraction with a permuted output, against [`zeinsum`].
pub fn contractions<T: Cx>(d: &Device, s: StreamId, h: &mut Handles, rng: &mut Rng, conj: [bool; 2]) {
    for (spec, shapes) in [
        ("ik,kj->ij", [&[7usize, 13][..], &[13, 5], &[7, 5]]),
        ("bik,kjb->jbi", [&[3, 5, 9][..], &[9, 7, 3], &[7, 3, 5]]),
    ] {
        let n = |sh: &[usize]| sh.iter().product::<usize>();
        let (a, b, old) = (zrandom(rng, n(shapes[0])), zrandom(rng, n(shapes[1])), zrandom(rng, n(shapes[2])));
        let (da, db, dd) = (up::<T>(d, s, &a), up::<T>(d, s, &b), up::<T>(d, s, &old));
        let op = Contraction::new(
            spec,
            TensorRef::new(&da, shapes[0]),
            TensorRef::new(&db, shapes[1]),
            TensorRef::new(&dd, shapes[2]),
        )
        .ops(unary(conj[0]), unary(conj[1]))
        .alpha(c(ALPHA))
        .beta(c(BETA));
        h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
        let ext = extents_of(spec, &shapes);
        let (pa, pb) = (packed(shapes[0]), packed(shapes[1]));
        let sum = zeinsum(spec, &[(&a, &pa), (&b, &pb)], &conj, &ext, (0.0, 0.0), zadd);
        let want: Vec<Z> = sum.iter().zip(&old).map(|(&x, &y)| zadd(zmul(ALPHA, x), zmul(BETA, y))).collect();
        let terms = ext.iter().filter(|(m, _)| !spec.split_once("->").unwrap().1.contains(**m)).map(|(_, e)| e);
        let tol = T::TOL * 4.0 * terms.product::<usize>() as f64;
        zclose(&down(s, &dd), &want, tol, &format!("{spec} conj {conj:?}"));

        // beta 0: the output's old value (NaN) is not read.
        let dn = nan::<T>(d, s, n(shapes[2]));
        let op = Contraction::new(
            spec,
            TensorRef::new(&da, shapes[0]),
            TensorRef::new(&db, shapes[1]),
            TensorRef::new(&dn, shapes[2]),
        )
        .ops(unary(conj[0]), unary(conj[1]));
        h.tensor().unwrap().contract(&op).unwrap().wait().unwrap();
        zclose(&down(s, &dn), &sum, tol, &format!("{spec} conj {conj:?}, beta 0"));
    }
}

/// Sum and product reductions with alpha and beta, `a` conjugated or not.
pub fn reductions<T: Cx>(d: &Device, s: StreamId, h: &mut Handles, rng: &mut Rng, conj: bool) {
    let spec = "ijk->ki";
    let shapes: [&[usize]; 2] = [&[5, 3, 7], &[7, 5]];
    let a = zrandom(rng, 105);
    let old = zrandom(rng, 35);
    let da = up::<T>(d, s, &a);
    let ext = extents_of(spec, &shapes);
    for (fold, init, f) in
        [(BinaryOp::Add, (0.0, 0.0), zadd as fn(Z, Z) -> Z), (BinaryOp::Mul, (1.0, 0.0), zmul as fn(Z, Z) -> Z)]
    {
        let dd = up::<T>(d, s, &old);
        let op = Reduction::new(spec, TensorRef::new(&da, shapes[0]), TensorRef::new(&dd, shapes[1]))
            .fold(fold)
            .op_a(unary(conj))
            .alpha(c(ALPHA))
            .beta(c(BETA));
        h.tensor().unwrap().reduce(&op).unwrap().wait().unwrap();
        let folded = zeinsum(spec, &[(&a, &packed(shapes[0]))], &[conj], &ext, init, f);
        let want: Vec<Z> = folded.iter().zip(&old).map(|(&x, &y)| zadd(zmul(ALPHA, x), zmul(BETA, y))).collect();
        zclose(&down(s, &dd), &want, T::TOL * 16.0, &format!("{fold:?} conj {conj}"));
    }
}

/// `b = alpha · op_a(a)` with the modes reordered.
pub fn permutations<T: Cx>(d: &Device, s: StreamId, h: &mut Handles, rng: &mut Rng, conj: bool) {
    let spec = "ijk->kij";
    let shapes: [&[usize]; 2] = [&[5, 7, 3], &[3, 5, 7]];
    let a = zrandom(rng, 105);
    let (da, db) = (up::<T>(d, s, &a), nan::<T>(d, s, 105));
    let op = Permutation::new(spec, TensorRef::new(&da, shapes[0]), TensorRef::new(&db, shapes[1]))
        .op_a(unary(conj))
        .alpha(c(ALPHA));
    h.tensor().unwrap().permute(&op).unwrap().wait().unwrap();
    let moved = zeinsum(spec, &[(&a, &packed(shapes[0]))], &[conj], &extents_of(spec, &shapes), (0.0, 0.0), zadd);
    let want: Vec<Z> = moved.iter().map(|&x| zmul(ALPHA, x)).collect();
    zclose(&down(s, &db), &want, T::TOL * 4.0, &format!("permutation conj {conj}"));
}

/// Binary (`a` broadcast along a row) and trinary elementwise ops, adding and multiplying,
/// with the inputs conjugated or not.
pub fn elementwise<T: Cx>(d: &Device, s: StreamId, h: &mut Handles, rng: &mut Rng, conj: bool) {
    let (m, n) = (7usize, 9usize);
    let (row, b, cc) = (zrandom(rng, n), zrandom(rng, n * m), zrandom(rng, m * n));
    let (drow, db, dc) = (up::<T>(d, s, &row), up::<T>(d, s, &b), up::<T>(d, s, &cc));
    let comb = |op: BinaryOp, x: Z, y: Z| if op == BinaryOp::Add { zadd(x, y) } else { zmul(x, y) };
    for ac in [BinaryOp::Add, BinaryOp::Mul] {
        // d = op_ac(alpha · op(row), gamma · op(c)).
        let dd = nan::<T>(d, s, m * n);
        let e = ElementwiseBinary::new(
            "j,ij->ij",
            TensorRef::new(&drow, &[n]),
            TensorRef::new(&dc, &[m, n]),
            TensorRef::new(&dd, &[m, n]),
        )
        .scales(c(ALPHA), c(GAMMA))
        .ops(unary(conj), unary(conj))
        .combine(ac);
        h.tensor().unwrap().elementwise_binary(&e).unwrap().wait().unwrap();
        let want: Vec<Z> = (0..m * n)
            .map(|x| comb(ac, zmul(ALPHA, zconj(row[x % n], conj)), zmul(GAMMA, zconj(cc[x], conj))))
            .collect();
        zclose(&down(s, &dd), &want, T::TOL * 8.0, &format!("binary {ac:?} conj {conj}"));

        // d = op_abc(op_ab(alpha · op(row), beta · b), gamma · op(c)), b read transposed; `a`
        // and `c` conjugated as `conj` says, `b` as it does not (both operators on one op).
        let abc = if ac == BinaryOp::Add { BinaryOp::Mul } else { BinaryOp::Add };
        let e = ElementwiseTrinary::new(
            "j,ji,ij->ij",
            TensorRef::new(&drow, &[n]),
            TensorRef::new(&db, &[n, m]),
            TensorRef::new(&dc, &[m, n]),
            TensorRef::new(&dd, &[m, n]),
        )
        .scales(c(ALPHA), c(BETA), c(GAMMA))
        .ops(unary(conj), unary(!conj), unary(conj))
        .combine(ac, abc);
        h.tensor().unwrap().elementwise_trinary(&e).unwrap().wait().unwrap();
        let want: Vec<Z> = (0..m * n)
            .map(|x| {
                let (i, j) = (x / n, x % n);
                let ab = comb(ac, zmul(ALPHA, zconj(row[j], conj)), zmul(BETA, zconj(b[j * m + i], !conj)));
                comb(abc, ab, zmul(GAMMA, zconj(cc[x], conj)))
            })
            .collect();
        zclose(&down(s, &dd), &want, T::TOL * 8.0, &format!("trinary {ac:?} {abc:?} conj {conj}"));
    }
}

/// Every op on `T`, conjugated or not (contractions: each of four conjugation pairs).
pub fn every_op<T: Cx>(d: &Device, s: StreamId, h: &mut Handles, rng: &mut Rng) {
    for conj in [[false, false], [true, false], [false, true], [true, true]] {
        contractions::<T>(d, s, h, rng, conj);
    }
    for conj in [false, true] {
        reductions::<T>(d, s, h, rng, conj);
        permutations::<T>(d, s, h, rng, conj);
        elementwise::<T>(d, s, h, rng, conj);
    }
}
