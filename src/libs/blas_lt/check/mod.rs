//! A matmul's arguments, checked into the column-major problem cuBLASLt is given. Every error
//! names the user's argument, also where a row-major problem swapped `A` and `B`.
//!
//! Files: this one holds the problem and the order of the checks; `epilogue` the epilogue's
//! kinds and buffers, `elements` the element types and the options that depend on them,
//! `operands` the shapes, strides, epilogue buffers and aliasing.

use crate::error::{Error, Result};
use crate::libs::blas_lt::types::sealed::Kind;
use crate::libs::blas_lt::types::{LtElement, Matmul, Order, Transpose};
use crate::libs::validate as check;

mod elements;
mod epilogue;
mod operands;

pub(super) use epilogue::{parts, EpiKind, EpiParts};

/// One matrix operand of the column-major problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Operand {
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub stride: i64,
}

/// The checked column-major problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Problem {
    /// Row-major: `A` and `B` were swapped (the problem is `Dᵀ = op(B)ᵀ op(A)ᵀ`).
    pub swapped: bool,
    pub trans_a: Transpose,
    pub trans_b: Transpose,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub d: Operand,
    /// `C` is `D` (no separate `C` buffer).
    pub c_is_d: bool,
    pub count: i32,
    pub epi: EpiKind,
    /// The aux matrix's leading dimension and batch stride (elements; bits for a ReLU mask).
    pub aux: Option<(i64, i64)>,
    pub bias_stride: i64,
    /// The kinds of A, B, C, D and the epilogue's vectors.
    pub kinds: [Kind; 5],
    pub fp8: bool,
    /// FP8 fast accumulation (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`).
    pub fast_accum: bool,
    /// `alpha` and `beta` are read from device memory (`CUBLASLT_POINTER_MODE_DEVICE`).
    pub device_scalars: bool,
    /// The caller's orders of A, B and D (a matrix in another order than D's is its transpose
    /// in `trans_a` / `trans_b`), for describing the problem in the caller's terms.
    pub orders: [Order; 3],
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

fn too_big(arg: &'static str) -> Error {
    Error::invalid(arg, "the shape overflows")
}

/// `stride * (count - 1) + span`.
fn total(arg: &'static str, stride: usize, span: usize, count: usize) -> Result<usize> {
    stride.checked_mul(count - 1).and_then(|x| x.checked_add(span)).ok_or_else(|| too_big(arg))
}

/// Checks everything but the device (compute capability) and the buffers' devices and
/// generations (the recorder checks those). Its phases run in a fixed order, so a matmul with
/// several faults always reports the same one first.
pub(super) fn problem<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
) -> Result<Problem> {
    for (arg, v) in [("m", mm.m), ("n", mm.n), ("k", mm.k)] {
        check::dim(arg, v, false)?;
    }
    if let Some(i) = mm.algorithm {
        if i >= crate::libs::blas_lt::calls::MAX_CANDIDATES {
            return Err(Error::invalid(
                "algorithm",
                format!(
                    "{i} is beyond the {} candidates cusched asks the heuristic for",
                    crate::libs::blas_lt::calls::MAX_CANDIDATES
                ),
            ));
        }
    }
    let epi = parts(&mm.epilogue);
    let kinds = [TA::KIND, TB::KIND, TC::KIND, TD::KIND, E::KIND];
    let fp8 = elements::types(mm, &epi, kinds)?;
    let l = operands::layout(mm)?;
    let s = operands::strides(mm, &l)?;
    // The epilogue, in the column-major problem.
    let kind = match (l.swapped, epi.kind) {
        (true, EpiKind::BgradA) => EpiKind::BgradB,
        (true, EpiKind::BgradB) => EpiKind::BgradA,
        (_, kind) => kind,
    };
    let bias_stride = operands::bias_stride(mm, &epi, kind, &l, &s)?;
    let aux = operands::aux_matrix(mm, &epi, kind, &l, &s)?;
    elements::aux_scale(mm, &epi, kinds)?;
    operands::scalars(mm)?;
    operands::no_aliasing(mm, &epi, kind, s.c_is_d)?;
    operands::fp8_layout(fp8, &l)?;
    operands::imma_layout(TA::KIND == Kind::I8, &l, mm.k)?;

    let (sfirst, ssecond) = if l.swapped { (s.b, s.a) } else { (s.a, s.b) };
    let op = |mat: check::Matrix, (rows, cols): (usize, usize), stride: usize, arg: &'static str| -> Result<Operand> {
        Ok(Operand {
            rows: rows as u64,
            cols: cols as u64,
            ld: i64::from(mat.ld),
            stride: i64::try_from(stride).map_err(|_| too_big(arg))?,
        })
    };
    Ok(Problem {
        swapped: l.swapped,
        trans_a: l.ta,
        trans_b: l.tb,
        a: op(l.first, l.first_shape, sfirst, "batch.a")?,
        b: op(l.second, l.second_shape, ssecond, "batch.b")?,
        c: op(l.c, (l.m, l.n), s.c, "batch.c")?,
        d: op(l.d, (l.m, l.n), s.d, "batch.d")?,
        c_is_d: s.c_is_d,
        count: s.count_i,
        epi: kind,
        aux,
        bias_stride,
        // The column-major problem's A and B: the caller's B and A when row-major.
        kinds: if l.swapped { [kinds[1], kinds[0], kinds[2], kinds[3], kinds[4]] } else { kinds },
        fp8,
        fast_accum: mm.fp8_fast_accum,
        device_scalars: mm.scale_device.is_some(),
        orders: [mm.order_a.unwrap_or(mm.order), mm.order_b.unwrap_or(mm.order), mm.order],
    })
}
