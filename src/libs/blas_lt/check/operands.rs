//! The operands in the column-major problem: the stored shapes of A, B, C and D under the
//! user's names ([`Layout`]), the batch's strides and the buffers covering them ([`Strides`]),
//! the epilogue's bias vector and aux matrix, and the aliasing between all of them.

use super::{round_up, too_big, total, EpiKind, EpiParts};
use crate::error::{Error, Result};
use crate::libs::blas_lt::types::{LtBatch, LtElement, Matmul, Order, Transpose};
use crate::libs::validate as check;

/// The column-major problem's shape: a row-major one is its transpose, with A and B swapped.
pub(super) struct Layout {
    /// Row-major: `A` and `B` were swapped.
    pub swapped: bool,
    /// `A` or `B` is stored in the other order than `D` (its transpose flipped).
    pub mixed: bool,
    pub m: usize,
    pub n: usize,
    pub ta: Transpose,
    pub tb: Transpose,
    /// Stored rows and columns of the problem's first and second operand.
    pub first_shape: (usize, usize),
    pub second_shape: (usize, usize),
    /// The problem's first and second operand, checked under the user's names.
    pub first: check::Matrix,
    pub second: check::Matrix,
    pub c: check::Matrix,
    pub d: check::Matrix,
}

impl Layout {
    /// The user's A and B.
    fn user_ab(&self) -> (check::Matrix, check::Matrix) {
        if self.swapped {
            (self.second, self.first)
        } else {
            (self.first, self.second)
        }
    }
}

/// The batch: its count and every operand's stride in elements, under the user's names.
pub(super) struct Strides {
    pub batch: LtBatch,
    pub count: usize,
    pub count_i: i32,
    pub a: usize,
    pub b: usize,
    pub c: usize,
    pub d: usize,
    /// `C` is `D` (no separate `C` buffer).
    pub c_is_d: bool,
}

/// Checks the stored shapes of A, B, C and D against their leading dimensions.
pub(super) fn layout<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
) -> Result<Layout> {
    let swapped = mm.order == Order::Row;
    let (m, n) = if swapped { (mm.n, mm.m) } else { (mm.m, mm.n) };
    let k = mm.k;
    // The conjugate transpose of a real matrix is its transpose.
    let real = |t: Transpose| if t == Transpose::Conj && !TA::KIND.is_complex() { Transpose::Yes } else { t };
    // A matrix stored in the other order than D is, in the same memory, its transpose in D's
    // order: the transpose flips. A complex matrix conjugated has no such form (cuBLASLt
    // conjugates only with a transpose).
    let flip = |arg: &'static str, t: Transpose, o: Option<Order>| -> Result<Transpose> {
        match (o.is_none_or(|o| o == mm.order), t) {
            (true, t) => Ok(t),
            (false, Transpose::No) => Ok(Transpose::Yes),
            (false, Transpose::Yes) => Ok(Transpose::No),
            (false, Transpose::Conj) => Err(crate::libs::blas_lt::unsupported::refused(
                arg,
                format!("a conjugated {} matrix stored in the other order than D", TA::KIND.name()),
                "cuBLASLt conjugates a matrix only with a transpose, so a conjugated matrix must be stored in D's \
                 order: store it so, or conjugate it beforehand"
                    .to_string(),
            )),
        }
    };
    let trans_a = flip("order_a", real(mm.trans_a), mm.order_a)?;
    let trans_b = flip("order_b", real(mm.trans_b), mm.order_b)?;
    let (ta, tb) = if swapped { (trans_b, trans_a) } else { (trans_a, trans_b) };
    let stored = |t: Transpose, r: usize, c: usize| if t == Transpose::No { (r, c) } else { (c, r) };
    let ((ar, ac), (br, bc)) = (stored(ta, m, k), stored(tb, k, n));
    let (first, second) = if swapped {
        (check::matrix("b", "ldb", ar, ac, mm.ldb)?, check::matrix("a", "lda", br, bc, mm.lda)?)
    } else {
        (check::matrix("a", "lda", ar, ac, mm.lda)?, check::matrix("b", "ldb", br, bc, mm.ldb)?)
    };
    let d = check::matrix("d", "ldd", m, n, mm.ldd)?;
    let c = match mm.c {
        Some(_) => check::matrix("c", "ldc", m, n, mm.ldc)?,
        None => d,
    };
    let mixed = [mm.order_a, mm.order_b].iter().any(|o| o.is_some_and(|o| o != mm.order));
    Ok(Layout { swapped, mixed, m, n, ta, tb, first_shape: (ar, ac), second_shape: (br, bc), first, second, c, d })
}

/// A shape for an error message, with the batch when there is one.
fn shape(what: &str, r: usize, c: usize, count: usize) -> String {
    format!("{what} {r}x{c}{}", if count > 1 { format!(" x {count} strided") } else { String::new() })
}

/// Checks the batch: its count, the strides, and that A, B, C and D cover every matmul.
pub(super) fn strides<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    l: &Layout,
) -> Result<Strides> {
    let batch = mm.batch.unwrap_or(LtBatch::packed(1));
    let count_i = check::dim("batch.count", batch.count, false)?;
    let count = batch.count;
    let (user_a, user_b) = l.user_ab();
    let sa = batch.a.unwrap_or(user_a.span);
    let sb = batch.b.unwrap_or(user_b.span);
    let sd = batch.d.unwrap_or(l.d.span);
    if count > 1 && sd < l.d.span {
        return Err(Error::invalid(
            "batch.d",
            format!("stride {sd} is below one D's span of {} elements: matmuls would overwrite each other", l.d.span),
        ));
    }
    let a_total = total("batch.a", sa, user_a.span, count)?;
    check::covers("a", mm.a, Some(a_total), &shape("op(A)", mm.m, mm.k, count))?;
    let b_total = total("batch.b", sb, user_b.span, count)?;
    check::covers("b", mm.b, Some(b_total), &shape("op(B)", mm.k, mm.n, count))?;
    let d_total = total("batch.d", sd, l.d.span, count)?;
    check::covers("d", mm.d, Some(d_total), &shape("D", mm.m, mm.n, count))?;
    if mm.d.id() == mm.a.id() || mm.d.id() == mm.b.id() {
        return Err(Error::invalid(
            "d",
            "must not be the same buffer as `a` or `b` (cuBLASLt does not allow aliasing)",
        ));
    }
    let (c_is_d, sc) = c_stride(mm, l, &batch, sd)?;
    Ok(Strides { batch, count, count_i, a: sa, b: sb, c: sc, d: sd, c_is_d })
}

/// Checks C: D's buffer with D's layout, or a buffer covering every matmul, or none (C is D).
/// Returns whether C is D, and C's stride.
fn c_stride<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    l: &Layout,
    batch: &LtBatch,
    sd: usize,
) -> Result<(bool, usize)> {
    match mm.c {
        Some(c) if c.id() == mm.d.id() => {
            if l.c.ld != l.d.ld || batch.c.unwrap_or(l.c.span) != sd {
                return Err(Error::invalid("c", "is D's buffer with another leading dimension or stride"));
            }
            Ok((true, sd))
        }
        Some(c) => {
            let sc = batch.c.unwrap_or(l.c.span);
            let c_total = total("batch.c", sc, l.c.span, batch.count)?;
            check::covers("c", c, Some(c_total), &shape("C", mm.m, mm.n, batch.count))?;
            Ok((false, sc))
        }
        None => {
            if TD::KIND.is_fp8() {
                return Err(Error::invalid(
                    "c",
                    "an FP8 D needs a separate bf16 or f16 C: pass one with Matmul::with_c (with beta = 0 it is not read)",
                ));
            }
            Ok((true, sd))
        }
    }
}

/// Checks the epilogue's bias vector (`kind` in the column-major problem); returns its stride.
pub(super) fn bias_stride<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    epi: &EpiParts,
    kind: EpiKind,
    l: &Layout,
    s: &Strides,
) -> Result<i64> {
    let Some((arg, id, len)) = epi.bias else {
        if s.batch.bias != 0 {
            return Err(Error::invalid("batch.bias", "the epilogue has no bias vector"));
        }
        return Ok(0);
    };
    let grad = kind.bias() == Some(true);
    let want = if kind == EpiKind::BgradB { l.n } else { l.m };
    if grad && s.count > 1 && s.batch.bias < want {
        return Err(Error::invalid(
            "batch.bias",
            format!(
                "a bias gradient is written per matmul: its stride ({}) must be at least its {want} entries, or the \
                 matmuls would overwrite each other",
                s.batch.bias
            ),
        ));
    }
    let needed = total("batch.bias", s.batch.bias, want, s.count)?;
    if len < needed {
        return Err(Error::invalid(
            arg,
            format!("holds {len} elements, but the epilogue needs {want} per matmul ({needed} in all)"),
        ));
    }
    if id == mm.d.id() || id == mm.a.id() || id == mm.b.id() {
        return Err(Error::invalid(arg, "must not be the same buffer as `a`, `b` or `d`"));
    }
    i64::try_from(s.batch.bias).map_err(|_| too_big("batch.bias"))
}

/// Checks the epilogue's aux matrix (`kind` in the column-major problem); returns its leading
/// dimension and batch stride (elements; bits for a ReLU mask).
pub(super) fn aux_matrix<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    epi: &EpiParts,
    kind: EpiKind,
    l: &Layout,
    s: &Strides,
) -> Result<Option<(i64, i64)>> {
    let (Some((arg, id, len, ld)), Some(use_)) = (epi.aux, kind.aux()) else {
        if s.batch.aux.is_some() {
            return Err(Error::invalid("batch.aux", "the epilogue has no aux matrix"));
        }
        return Ok(None);
    };
    let (m, n) = (l.m, l.n);
    let ld_arg = if use_.relu { "mask.ld" } else { "aux.ld" };
    let multiple = if use_.relu { 128 } else { 8 };
    let ld = ld.unwrap_or_else(|| round_up(m, multiple));
    if ld < m || ld % multiple != 0 {
        return Err(Error::invalid(
            ld_arg,
            format!("{ld} must be a multiple of {multiple} and at least D's {m} stored rows"),
        ));
    }
    let span = ld.checked_mul(n).ok_or_else(|| too_big(arg))?;
    let stride = s.batch.aux.unwrap_or(span);
    if s.count > 1 && use_.write && stride < span {
        return Err(Error::invalid(
            "batch.aux",
            format!("stride {stride} is below one aux matrix's {span}: matmuls would overwrite each other"),
        ));
    }
    if use_.relu && stride % 8 != 0 {
        return Err(Error::invalid("batch.aux", "a ReLU mask's stride (in bits) must be a multiple of 8"));
    }
    let bits_or_elems = total("batch.aux", stride, span, s.count)?;
    let needed = if use_.relu { bits_or_elems / 8 } else { bits_or_elems };
    if len < needed {
        let unit = if use_.relu { "bytes" } else { "elements" };
        return Err(Error::invalid(
            arg,
            format!("holds {len} {unit}, but a {m}x{n} aux matrix with ld {ld} needs {needed}"),
        ));
    }
    if id == mm.d.id() || id == mm.a.id() || id == mm.b.id() {
        return Err(Error::invalid(arg, "must not be the same buffer as `a`, `b` or `d`"));
    }
    let i = |v: usize| i64::try_from(v).map_err(|_| too_big(arg));
    Ok(Some((i(ld)?, i(stride)?)))
}

/// Checks `alpha` and `beta` in device memory: one element each.
pub(super) fn scalars<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
) -> Result<()> {
    if let Some((alpha, beta)) = mm.scale_device {
        check::covers("alpha", alpha, Some(1), "a scalar")?;
        check::covers("beta", beta, Some(1), "a scalar")?;
    }
    Ok(())
}

/// Checks that no buffer written overlaps another the matmul uses.
pub(super) fn no_aliasing<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    epi: &EpiParts,
    kind: EpiKind,
    c_is_d: bool,
) -> Result<()> {
    let mut uses = vec![("a", mm.a.id(), false), ("b", mm.b.id(), false)];
    if let (Some(c), false) = (mm.c, c_is_d) {
        uses.push(("c", c.id(), false));
    }
    if let Some((alpha, beta)) = mm.scale_device {
        uses.push(("alpha", alpha.id(), false));
        uses.push(("beta", beta.id(), false));
    }
    if let Some(s) = mm.aux_scale {
        uses.push(("aux_scale", s.id(), false));
    }
    if let Some(s) = &mm.fp8 {
        uses.push(("fp8.a", s.a.id(), false));
        uses.push(("fp8.b", s.b.id(), false));
        if let Some(d) = s.d {
            uses.push(("fp8.d", d.id(), false));
        }
    }
    uses.push(("d", mm.d.id(), true));
    if let Some((arg, id, _)) = epi.bias {
        uses.push((arg, id, kind.bias() == Some(true)));
    }
    if let (Some((arg, id, ..)), Some(use_)) = (epi.aux, kind.aux()) {
        uses.push((arg, id, use_.write));
    }
    check::no_aliasing(&uses)
}

/// Checks the TN layout FP8 matmuls need, naming the user's argument.
pub(super) fn fp8_layout(fp8: bool, l: &Layout) -> Result<()> {
    if fp8 && (l.ta != Transpose::Yes || l.tb != Transpose::No) {
        let (arg, how) = match (l.swapped, l.ta != Transpose::Yes) {
            (false, true) => ("trans_a", "trans_a = Yes, trans_b = No"),
            (false, false) => ("trans_b", "trans_a = Yes, trans_b = No"),
            (true, true) => ("trans_b", "in row-major: trans_a = No, trans_b = Yes"),
            (true, false) => ("trans_a", "in row-major: trans_a = No, trans_b = Yes"),
        };
        let orders = if l.mixed {
            "; a matrix in the other order than D counts as its transpose: transpose it the other way"
        } else {
            ""
        };
        return Err(Error::invalid(arg, format!("FP8 matmuls need the TN layout cuBLASLt requires ({how}{orders})")));
    }
    Ok(())
}

/// Checks what cuBLASLt's IMMA (i8) kernels need with regular column- or row-major matrices:
/// the TN layout, `m` and `k` of the column-major problem and every leading dimension multiples
/// of 4. Refused as unsupported, naming the user's argument.
pub(super) fn imma_layout(i8: bool, l: &Layout, k: usize) -> Result<()> {
    if !i8 {
        return Ok(());
    }
    let refuse = |arg: &'static str, what: String| {
        let hint = if l.swapped {
            "row-major i8 matmuls take trans_a = No and trans_b = Yes (TN in column-major), \
             n, k and the leading dimensions multiples of 4"
        } else {
            "i8 matmuls take trans_a = Yes and trans_b = No (TN), m, k and the leading dimensions multiples of 4"
        };
        let orders = if l.mixed {
            "; a matrix in the other order than D counts as its transpose: transpose it the other way"
        } else {
            ""
        };
        Err(crate::libs::blas_lt::unsupported::refused(arg, what, format!("{hint}{orders}")))
    };
    if l.ta != Transpose::Yes || l.tb != Transpose::No {
        let arg = match (l.swapped, l.ta != Transpose::Yes) {
            (false, true) | (true, false) => "trans_a",
            (false, false) | (true, true) => "trans_b",
        };
        return refuse(arg, "an i8 matmul outside the TN layout".to_string());
    }
    let (m_arg, first, second) = if l.swapped { ("n", "ldb", "lda") } else { ("m", "lda", "ldb") };
    for (arg, v) in [(m_arg, l.m), ("k", k)] {
        if v % 4 != 0 {
            return refuse(arg, format!("an i8 matmul with {arg} = {v}, not a multiple of 4"));
        }
    }
    for (arg, ld) in [(first, l.first.ld), (second, l.second.ld), ("ldd", l.d.ld), ("ldc", l.c.ld)] {
        if ld % 4 != 0 {
            return refuse(arg, format!("an i8 matmul with {arg} = {ld}, not a multiple of 4"));
        }
    }
    Ok(())
}
