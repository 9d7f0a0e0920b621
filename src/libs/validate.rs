//! Argument checks and operand views shared by the library ops. Each names the argument it
//! rejects.
//!
//! An operand view (a column-major [`matrix`], a strided [`vector`], a batch of strided tensors
//! ([`tensor_span`])) is checked once into what the library call takes (its leading dimension
//! or increment as the library's int) and the elements it spans; [`covers`] then checks a
//! buffer against that span.

// Each library uses its own subset; with only some features on, the rest is unused.
#![cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]

use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};

/// `v` as the `i32` the libraries take; zero is rejected unless `allow_zero`.
pub(crate) fn dim(arg: &'static str, v: usize, allow_zero: bool) -> Result<i32> {
    if v == 0 && !allow_zero {
        return Err(Error::invalid(arg, "must be at least 1"));
    }
    i32::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit the library's 32-bit int")))
}

/// `v` as `i64`, at least 1.
pub(crate) fn dim64(arg: &'static str, v: usize) -> Result<i64> {
    if v == 0 {
        return Err(Error::invalid(arg, "must be at least 1"));
    }
    i64::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit in i64")))
}

/// A vector increment: nonzero, as `i32`.
pub(crate) fn inc(arg: &'static str, v: isize) -> Result<i32> {
    if v == 0 {
        return Err(Error::invalid(arg, "must not be zero"));
    }
    i32::try_from(v).map_err(|_| Error::invalid(arg, format!("{v} does not fit the library's 32-bit int")))
}

/// Checks a column-major leading dimension: at least `rows` (and at least 1).
pub(crate) fn ld(arg: &'static str, ld: usize, rows: usize) -> Result<i32> {
    if ld < rows.max(1) {
        return Err(Error::invalid(arg, format!("{ld} is below the {} rows stored per column", rows.max(1))));
    }
    dim(arg, ld, false)
}

/// Elements a column-major `rows x cols` matrix with leading dimension `ld` spans.
fn matrix_span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    ld.checked_mul(cols - 1)?.checked_add(rows)
}

/// A column-major matrix operand, checked: its leading dimension as the library's int, and the
/// elements it spans.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Matrix {
    pub ld: i32,
    pub span: usize,
}

/// Checks matrix argument `arg`, stored `rows x cols` with leading dimension `ld` (argument
/// `ld_arg`; `None`: packed, the number of rows).
pub(crate) fn matrix(
    arg: &'static str,
    ld_arg: &'static str,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
) -> Result<Matrix> {
    let ld = ld.unwrap_or(rows);
    let ld_i = self::ld(ld_arg, ld, rows)?;
    let span = matrix_span(rows, cols, ld)
        .ok_or_else(|| Error::invalid(arg, format!("a {rows}x{cols} matrix with leading dimension {ld} overflows")))?;
    Ok(Matrix { ld: ld_i, span })
}

/// Elements an `n`-element vector with increment `inc` spans.
fn vector_span(n: usize, inc: isize) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    (n - 1).checked_mul(inc.unsigned_abs())?.checked_add(1)
}

/// Checks vector argument `arg`: `n` elements of `buf`, `inc` apart (argument `inc_arg`, not
/// zero), and returns the increment as the library's int. With `forward`, the increment must be
/// positive: BLAS defines a non-positive one as "do nothing" for some ops, which would silently
/// skip them.
pub(crate) fn vector<T: Element>(
    arg: &'static str,
    inc_arg: &'static str,
    buf: &GpuRef<T>,
    inc: isize,
    n: usize,
    forward: bool,
) -> Result<i32> {
    if forward && inc < 0 {
        return Err(Error::invalid(inc_arg, format!("{inc} is negative; this op needs a positive increment")));
    }
    let inc_i = self::inc(inc_arg, inc)?;
    covers(arg, buf, vector_span(n, inc), &format!("{n} elements {inc} apart"))?;
    Ok(inc_i)
}

/// Elements a batch of strided tensors spans: `batch` tensors (at least 1) `dist` apart, each
/// with `dims[i]` elements (each at least 1) `strides[i]` apart along dimension `i`. `None`:
/// it overflows.
pub(crate) fn tensor_span(dims: &[usize], strides: &[usize], batch: usize, dist: usize) -> Option<usize> {
    debug_assert_eq!(dims.len(), strides.len());
    let mut last = 0usize;
    for (&n, &stride) in dims.iter().zip(strides) {
        last = n.checked_sub(1)?.checked_mul(stride)?.checked_add(last)?;
    }
    dist.checked_mul(batch.checked_sub(1)?)?.checked_add(last)?.checked_add(1)
}

/// Checks that `buf` holds at least `needed` elements (`None`: the shape overflowed).
pub(crate) fn covers<T: Element>(arg: &'static str, buf: &GpuRef<T>, needed: Option<usize>, shape: &str) -> Result<()> {
    let needed = needed.ok_or_else(|| Error::invalid(arg, format!("the shape {shape} overflows usize")))?;
    if buf.len() < needed {
        return Err(Error::invalid(arg, format!("holds {} elements, but {shape} needs at least {needed}", buf.len())));
    }
    Ok(())
}

/// Checks that no operand the library writes is another operand: `uses` lists `(argument,
/// buffer id, written)`. The error names the written argument and the other one.
#[cfg(any(feature = "cublaslt", feature = "cusolver", feature = "cudnn"))]
pub(crate) fn no_aliasing(uses: &[(&'static str, u64, bool)]) -> Result<()> {
    for (i, &(arg, id, written)) in uses.iter().enumerate() {
        for &(other, other_id, other_written) in &uses[..i] {
            if id == other_id && (written || other_written) {
                let (out, with) = if written { (arg, other) } else { (other, arg) };
                return Err(Error::invalid(
                    out,
                    format!("must not be the same buffer as `{with}`: the library writes one while using the other"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks that two buffers are not the same allocation where the library forbids aliasing.
pub(crate) fn distinct<T: Element, U: Element>(arg: &'static str, a: &GpuRef<T>, b: &GpuRef<U>) -> Result<()> {
    if a.id() == b.id() {
        return Err(Error::invalid(arg, "must not be the same buffer as the input"));
    }
    Ok(())
}
