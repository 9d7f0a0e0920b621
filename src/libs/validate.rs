//! Argument checks shared by the library ops. Each names the argument it rejects.

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
pub(crate) fn matrix_span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    ld.checked_mul(cols - 1)?.checked_add(rows)
}

/// Elements an `n`-element vector with increment `inc` spans.
pub(crate) fn vector_span(n: usize, inc: isize) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    (n - 1).checked_mul(inc.unsigned_abs())?.checked_add(1)
}

/// Checks that `buf` holds at least `needed` elements (`None`: the shape overflowed).
pub(crate) fn covers<T: Element>(arg: &'static str, buf: &GpuRef<T>, needed: Option<usize>, shape: &str) -> Result<()> {
    let needed = needed.ok_or_else(|| Error::invalid(arg, format!("the shape {shape} overflows usize")))?;
    if buf.len() < needed {
        return Err(Error::invalid(arg, format!("holds {} elements, but {shape} needs at least {needed}", buf.len())));
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
