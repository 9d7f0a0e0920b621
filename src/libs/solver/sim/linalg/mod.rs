//! The dense kernels the simulated cuSOLVER ops run: plain loops on column-major matrices of
//! complex `f64` (a real matrix is one whose imaginary parts stay zero; every routine here keeps
//! them zero for real input, so one implementation serves the four element types).
//!
//! This module holds the arithmetic: the complex scalar [`C`] and the column-major [`Mat`].
//! The routines live by method: [`factor`] (Cholesky, LU, the triangular solves), [`bunch`]
//! (Bunch–Kaufman symmetric indefinite), [`schur`] (general eigenproblems), [`qr`]
//! (Householder QR and its reflectors) and [`jacobi`] (the Jacobi eigen and SVD methods).

mod bunch;
mod factor;
mod jacobi;
mod qr;
mod schur;

pub(crate) use self::bunch::{sytrf, sytrs};
pub(crate) use self::factor::{
    cholesky, cholesky_solve, factor_lower, hermitian, lu, lu_solve, put_factor, solve_lower, solve_upper, Op,
};
pub(crate) use self::jacobi::{eigh, square, svd, Jacobi};
pub(crate) use self::qr::{geqrf, orgqr, ormqr};
pub(crate) use self::schur::eig;

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
