//! A matmul's arguments, checked into the column-major problem cuBLASLt is given. Every error
//! names the user's argument, also where a row-major problem swapped `A` and `B`.

use super::types::sealed::Kind;
use super::types::{Epilogue, LtElement, Matmul, Order, Transpose};
use crate::error::{Error, Result};
use crate::libs::validate as check;
use crate::memory::{Element, GpuRef};

/// The epilogue, without its buffers; in the column-major problem (a row-major problem swaps
/// `BgradA` and `BgradB`, as it swaps `A` and `B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum EpiKind {
    Default,
    Relu,
    Gelu,
    Bias,
    ReluBias,
    GeluBias,
    ReluAux,
    GeluAux,
    ReluAuxBias,
    GeluAuxBias,
    DRelu,
    DGelu,
    DReluBgrad,
    DGeluBgrad,
    BgradA,
    BgradB,
}

/// How an epilogue uses its aux matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AuxUse {
    /// A ReLU bit-mask (else a GELU pre-activation of type `E`).
    pub relu: bool,
    /// Written (forward) rather than read (backward).
    pub write: bool,
}

impl EpiKind {
    /// `Some(written)` when the epilogue has a bias vector: read as a bias, or written as a
    /// gradient.
    pub(super) fn bias(self) -> Option<bool> {
        use EpiKind::*;
        match self {
            Bias | ReluBias | GeluBias | ReluAuxBias | GeluAuxBias => Some(false),
            DReluBgrad | DGeluBgrad | BgradA | BgradB => Some(true),
            Default | Relu | Gelu | ReluAux | GeluAux | DRelu | DGelu => None,
        }
    }

    pub(super) fn aux(self) -> Option<AuxUse> {
        use EpiKind::*;
        match self {
            ReluAux | ReluAuxBias => Some(AuxUse { relu: true, write: true }),
            GeluAux | GeluAuxBias => Some(AuxUse { relu: false, write: true }),
            DRelu | DReluBgrad => Some(AuxUse { relu: true, write: false }),
            DGelu | DGeluBgrad => Some(AuxUse { relu: false, write: false }),
            _ => None,
        }
    }
}

/// The epilogue's kind and its buffers' ids and lengths, in bytes for a ReLU mask.
pub(super) struct EpiParts {
    pub kind: EpiKind,
    /// (argument, id, elements) of the bias or bias-gradient vector.
    pub bias: Option<(&'static str, u64, usize)>,
    /// (argument, id, elements or bytes, ld) of the aux matrix.
    pub aux: Option<(&'static str, u64, usize, Option<usize>)>,
}

pub(super) fn parts<E: Element>(e: &Epilogue<'_, E>) -> EpiParts {
    use Epilogue as P;
    let v = |arg: &'static str, b: &GpuRef<E>| Some((arg, b.id(), b.len()));
    let (kind, bias, aux) = match *e {
        P::Default => (EpiKind::Default, None, None),
        P::Relu => (EpiKind::Relu, None, None),
        P::Gelu => (EpiKind::Gelu, None, None),
        P::Bias(b) => (EpiKind::Bias, v("bias", b), None),
        P::ReluBias(b) => (EpiKind::ReluBias, v("bias", b), None),
        P::GeluBias(b) => (EpiKind::GeluBias, v("bias", b), None),
        P::ReluAux(m) => (EpiKind::ReluAux, None, Some(("mask", m.buf.id(), m.buf.len(), m.ld))),
        P::GeluAux(a) => (EpiKind::GeluAux, None, Some(("aux", a.buf.id(), a.buf.len(), a.ld))),
        P::ReluAuxBias { bias, mask } => {
            (EpiKind::ReluAuxBias, v("bias", bias), Some(("mask", mask.buf.id(), mask.buf.len(), mask.ld)))
        }
        P::GeluAuxBias { bias, aux } => {
            (EpiKind::GeluAuxBias, v("bias", bias), Some(("aux", aux.buf.id(), aux.buf.len(), aux.ld)))
        }
        P::DRelu(m) => (EpiKind::DRelu, None, Some(("mask", m.buf.id(), m.buf.len(), m.ld))),
        P::DGelu(a) => (EpiKind::DGelu, None, Some(("aux", a.buf.id(), a.buf.len(), a.ld))),
        P::DReluBgrad { mask, bias_grad } => {
            (EpiKind::DReluBgrad, v("bias_grad", bias_grad), Some(("mask", mask.buf.id(), mask.buf.len(), mask.ld)))
        }
        P::DGeluBgrad { aux, bias_grad } => {
            (EpiKind::DGeluBgrad, v("bias_grad", bias_grad), Some(("aux", aux.buf.id(), aux.buf.len(), aux.ld)))
        }
        P::BgradA(b) => (EpiKind::BgradA, v("bias_grad", b), None),
        P::BgradB(b) => (EpiKind::BgradB, v("bias_grad", b), None),
    };
    EpiParts { kind, bias, aux }
}

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

/// Checks the element types; returns whether the inputs are FP8.
fn check_types(kinds: [Kind; 5], uses_e: Option<&'static str>) -> Result<bool> {
    let [ka, kb, kc, kd, ke] = kinds;
    let fp8 = ka.is_fp8() || kb.is_fp8();
    let expected_e = if fp8 {
        if !(ka.is_fp8() && kb.is_fp8()) {
            let arg = if ka.is_fp8() { "b" } else { "a" };
            return Err(Error::invalid(
                arg,
                format!("FP8 matmuls take FP8 A and B; A is {}, B is {}", ka.name(), kb.name()),
            ));
        }
        if ka == Kind::E5M2 && kb == Kind::E5M2 {
            return Err(Error::invalid("b", "cuBLASLt has no E5M2 x E5M2 matmul: make A or B E4M3"));
        }
        if kd == Kind::E5M2 && ka != Kind::E5M2 && kb != Kind::E5M2 {
            return Err(Error::invalid(
                "d",
                "cuBLASLt has no E4M3 x E4M3 matmul with an E5M2 D: make D E4M3 (or bf16, f16, f32), or one input E5M2",
            ));
        }
        if kd.is_fp8() {
            if !matches!(kc, Kind::Bf16 | Kind::F16) {
                return Err(Error::invalid(
                    "c",
                    format!(
                        "D is {}, so C must be bf16 or f16 (is {}): pass one with Matmul::with_c (with beta = 0 it is not read)",
                        kd.name(),
                        kc.name()
                    ),
                ));
            }
            kc
        } else {
            if kc != kd {
                return Err(Error::invalid("c", format!("must have D's type {} (is {})", kd.name(), kc.name())));
            }
            if kd == Kind::F32 {
                Kind::Bf16
            } else {
                kd
            }
        }
    } else {
        if kb != ka {
            return Err(Error::invalid("b", format!("must have A's type {} (is {})", ka.name(), kb.name())));
        }
        if kd != ka {
            return Err(Error::invalid(
                "d",
                format!("must have A's type {} for non-FP8 inputs (is {})", ka.name(), kd.name()),
            ));
        }
        if kc != kd {
            return Err(Error::invalid("c", format!("must have D's type {} (is {})", kd.name(), kc.name())));
        }
        kd
    };
    if let Some(arg) = uses_e {
        if ke != expected_e {
            return Err(Error::invalid(
                arg,
                format!("must be {} for this matmul's types (is {})", expected_e.name(), ke.name()),
            ));
        }
    }
    Ok(fp8)
}

/// A GELU aux matrix holds the epilogue type `E`. cuBLASLt takes an aux type other than D's
/// (`CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE`) in one FP8 case only: `GELU_AUX` writing a
/// bf16 or f16 aux (C's type) beside an E4M3 D, from E4M3 inputs. Every other FP8 matmul with a
/// GELU aux of another type than D is refused by the library.
fn fp8_aux_type(kinds: [Kind; 5], fp8: bool, epi: &EpiParts) -> Result<()> {
    let [ka, kb, _, kd, ke] = kinds;
    let gelu_aux = epi.kind.aux().is_some_and(|u| !u.relu);
    if !fp8 || !gelu_aux || ke == kd {
        return Ok(());
    }
    let allowed = epi.kind == EpiKind::GeluAux && kd == Kind::E4M3 && ka == Kind::E4M3 && kb == Kind::E4M3;
    if allowed {
        return Ok(());
    }
    Err(Error::invalid(
        "aux",
        format!(
            "cuBLASLt takes a {} GELU aux beside a {} D in FP8 matmuls only for GeluAux with an E4M3 D from E4M3 inputs; \
             use that, or an epilogue without a GELU aux",
            ke.name(),
            kd.name()
        ),
    ))
}

/// The gradient epilogues cuBLASLt 13 has no FP8 kernel for, on sm_90 (every combination was
/// run on an H100 by `tests/gpu/blas_lt_fp8.rs`, whose sweep fails if one of these starts to
/// run or one that runs is refused here): the bias gradients of A or B alone, a ReLU gradient
/// written to an FP8 D, and a ReLU gradient with a bias gradient into an f32 D.
fn fp8_epilogue(kinds: [Kind; 5], fp8: bool, epi: &EpiParts) -> Result<()> {
    let kd = kinds[3];
    if !fp8 {
        return Ok(());
    }
    let why = match epi.kind {
        EpiKind::BgradA | EpiKind::BgradB => "cuBLASLt has no FP8 kernel for the BGRADA / BGRADB epilogues",
        EpiKind::DRelu | EpiKind::DReluBgrad if kd.is_fp8() => {
            "cuBLASLt has no FP8 kernel that writes a ReLU gradient to an FP8 D: use a bf16 or f16 D"
        }
        EpiKind::DReluBgrad if kd == Kind::F32 => {
            "cuBLASLt has no FP8 kernel for DRELU_BGRAD with an f32 D: use a bf16 or f16 D"
        }
        _ => return Ok(()),
    };
    Err(Error::invalid(
        "epilogue",
        format!(
            "{why} (inputs {} x {}, D {}); or run the gradient in bf16 / f16",
            kinds[0].name(),
            kinds[1].name(),
            kd.name()
        ),
    ))
}

/// Checks everything but the device (compute capability) and the buffers' devices and
/// generations (the recorder checks those).
pub(super) fn problem<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
) -> Result<Problem> {
    for (arg, v) in [("m", mm.m), ("n", mm.n), ("k", mm.k)] {
        check::dim(arg, v, false)?;
    }
    let epi = parts(&mm.epilogue);
    let uses_e = match (epi.bias, epi.aux) {
        (Some((arg, ..)), _) => Some(arg),
        (None, Some((arg, ..))) if arg == "aux" => Some(arg),
        _ => None,
    };
    let kinds = [TA::KIND, TB::KIND, TC::KIND, TD::KIND, E::KIND];
    let fp8 = check_types(kinds, uses_e)?;
    if mm.tf32 && TA::KIND != Kind::F32 {
        return Err(Error::invalid("tf32", "only f32 inputs round to TF32"));
    }
    match (&mm.fp8, fp8) {
        (None, true) => {
            return Err(Error::invalid("fp8", "FP8 inputs need their per-tensor scales: set them with Matmul::fp8"))
        }
        (Some(_), false) => return Err(Error::invalid("fp8", "scales apply to FP8 inputs only; leave them None")),
        (Some(s), true) => {
            for (arg, buf) in [("fp8.a", Some(s.a)), ("fp8.b", Some(s.b)), ("fp8.c", s.c), ("fp8.d", s.d)] {
                if let Some(buf) = buf {
                    check::covers(arg, buf, Some(1), "a scale")?;
                }
            }
            if s.d.is_some() && !TD::KIND.is_fp8() {
                return Err(Error::invalid("fp8.d", "D's scale applies to an FP8 D only"));
            }
            // cuBLASLt scales C only when C is FP8, and no FP8 matmul it has takes an FP8 C.
            if s.c.is_some() {
                return Err(Error::invalid(
                    "fp8.c",
                    format!("cuBLASLt scales an FP8 C only, and C is {} here: leave it None", TC::KIND.name()),
                ));
            }
        }
        (None, false) => {}
    }
    if mm.amax_d && !fp8 {
        return Err(Error::invalid("amax_d", "cuBLASLt computes D's amax for FP8 matmuls only"));
    }
    if mm.amax_d && !TD::KIND.is_fp8() {
        return Err(Error::invalid(
            "amax_d",
            format!("cuBLASLt computes D's amax for an FP8 D only (D is {}): leave amax_d false", TD::KIND.name()),
        ));
    }
    fp8_aux_type(kinds, fp8, &epi)?;
    fp8_epilogue(kinds, fp8, &epi)?;

    // The column-major problem: a row-major one is its transpose, with A and B swapped.
    let swapped = mm.order == Order::Row;
    let (m, n) = if swapped { (mm.n, mm.m) } else { (mm.m, mm.n) };
    let k = mm.k;
    let (ta, tb) = if swapped { (mm.trans_b, mm.trans_a) } else { (mm.trans_a, mm.trans_b) };
    let stored = |t: Transpose, r: usize, c: usize| if t == Transpose::Yes { (c, r) } else { (r, c) };
    // Stored shapes of the problem's first and second operand, checked under the user's names.
    let (ar, ac) = stored(ta, m, k);
    let (br, bc) = stored(tb, k, n);
    let (first, second) = if swapped {
        (check::matrix("b", "ldb", ar, ac, mm.ldb)?, check::matrix("a", "lda", br, bc, mm.lda)?)
    } else {
        (check::matrix("a", "lda", ar, ac, mm.lda)?, check::matrix("b", "ldb", br, bc, mm.ldb)?)
    };
    let (user_a, user_b) = if swapped { (second, first) } else { (first, second) };
    let d_m = check::matrix("d", "ldd", m, n, mm.ldd)?;
    let c_m = match mm.c {
        Some(_) => check::matrix("c", "ldc", m, n, mm.ldc)?,
        None => d_m,
    };

    let batch = mm.batch.unwrap_or(super::LtBatch::packed(1));
    let count_i = check::dim("batch.count", batch.count, false)?;
    let count = batch.count;
    let sa = batch.a.unwrap_or(user_a.span);
    let sb = batch.b.unwrap_or(user_b.span);
    let sd = batch.d.unwrap_or(d_m.span);
    if count > 1 && sd < d_m.span {
        return Err(Error::invalid(
            "batch.d",
            format!("stride {sd} is below one D's span of {} elements: matmuls would overwrite each other", d_m.span),
        ));
    }
    let shape = |what: &str, r: usize, c: usize| {
        format!("{what} {r}x{c}{}", if count > 1 { format!(" x {count} strided") } else { String::new() })
    };
    check::covers("a", mm.a, Some(total("batch.a", sa, user_a.span, count)?), &shape("op(A)", mm.m, mm.k))?;
    check::covers("b", mm.b, Some(total("batch.b", sb, user_b.span, count)?), &shape("op(B)", mm.k, mm.n))?;
    check::covers("d", mm.d, Some(total("batch.d", sd, d_m.span, count)?), &shape("D", mm.m, mm.n))?;
    if mm.d.id() == mm.a.id() || mm.d.id() == mm.b.id() {
        return Err(Error::invalid(
            "d",
            "must not be the same buffer as `a` or `b` (cuBLASLt does not allow aliasing)",
        ));
    }
    let (c_is_d, sc) = match mm.c {
        Some(c) if c.id() == mm.d.id() => {
            if c_m.ld != d_m.ld || batch.c.unwrap_or(c_m.span) != sd {
                return Err(Error::invalid("c", "is D's buffer with another leading dimension or stride"));
            }
            (true, sd)
        }
        Some(c) => {
            let sc = batch.c.unwrap_or(c_m.span);
            check::covers("c", c, Some(total("batch.c", sc, c_m.span, count)?), &shape("C", mm.m, mm.n))?;
            (false, sc)
        }
        None => {
            if TD::KIND.is_fp8() {
                return Err(Error::invalid(
                    "c",
                    "an FP8 D needs a separate bf16 or f16 C: pass one with Matmul::with_c (with beta = 0 it is not read)",
                ));
            }
            (true, sd)
        }
    };

    // The epilogue, in the column-major problem.
    let kind = match (swapped, epi.kind) {
        (true, EpiKind::BgradA) => EpiKind::BgradB,
        (true, EpiKind::BgradB) => EpiKind::BgradA,
        (_, kind) => kind,
    };
    let mut bias_stride = 0;
    if let Some((arg, id, len)) = epi.bias {
        let grad = kind.bias() == Some(true);
        let want = if kind == EpiKind::BgradB { n } else { m };
        if grad && count > 1 {
            return Err(Error::invalid("batch", "bias-gradient epilogues take one matmul, not a batch"));
        }
        let needed = total("batch.bias", batch.bias, want, count)?;
        if len < needed {
            return Err(Error::invalid(
                arg,
                format!("holds {len} elements, but the epilogue needs {want} per matmul ({needed} in all)"),
            ));
        }
        if id == mm.d.id() || id == mm.a.id() || id == mm.b.id() {
            return Err(Error::invalid(arg, "must not be the same buffer as `a`, `b` or `d`"));
        }
        bias_stride = i64::try_from(batch.bias).map_err(|_| too_big("batch.bias"))?;
    } else if batch.bias != 0 {
        return Err(Error::invalid("batch.bias", "the epilogue has no bias vector"));
    }
    let mut aux = None;
    if let (Some((arg, id, len, ld)), Some(use_)) = (epi.aux, kind.aux()) {
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
        let stride = batch.aux.unwrap_or(span);
        if count > 1 && use_.write && stride < span {
            return Err(Error::invalid(
                "batch.aux",
                format!("stride {stride} is below one aux matrix's {span}: matmuls would overwrite each other"),
            ));
        }
        if use_.relu && stride % 8 != 0 {
            return Err(Error::invalid("batch.aux", "a ReLU mask's stride (in bits) must be a multiple of 8"));
        }
        let bits_or_elems = total("batch.aux", stride, span, count)?;
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
        aux = Some((i(ld)?, i(stride)?));
    } else if batch.aux.is_some() {
        return Err(Error::invalid("batch.aux", "the epilogue has no aux matrix"));
    }

    let mut uses = vec![("a", mm.a.id(), false), ("b", mm.b.id(), false)];
    if let (Some(c), false) = (mm.c, c_is_d) {
        uses.push(("c", c.id(), false));
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
    check::no_aliasing(&uses)?;

    if fp8 && (ta != Transpose::Yes || tb != Transpose::No) {
        let (arg, how) = match (swapped, ta != Transpose::Yes) {
            (false, true) => ("trans_a", "trans_a = Yes, trans_b = No"),
            (false, false) => ("trans_b", "trans_a = Yes, trans_b = No"),
            (true, true) => ("trans_b", "in row-major: trans_a = No, trans_b = Yes"),
            (true, false) => ("trans_a", "in row-major: trans_a = No, trans_b = Yes"),
        };
        return Err(Error::invalid(arg, format!("FP8 matmuls need the TN layout cuBLASLt requires ({how})")));
    }

    let (sfirst, ssecond) = if swapped { (sb, sa) } else { (sa, sb) };
    let op = |mat: check::Matrix, rows: usize, cols: usize, stride: usize, arg: &'static str| -> Result<Operand> {
        Ok(Operand {
            rows: rows as u64,
            cols: cols as u64,
            ld: i64::from(mat.ld),
            stride: i64::try_from(stride).map_err(|_| too_big(arg))?,
        })
    };
    Ok(Problem {
        swapped,
        trans_a: ta,
        trans_b: tb,
        a: op(first, ar, ac, sfirst, "batch.a")?,
        b: op(second, br, bc, ssecond, "batch.b")?,
        c: op(c_m, m, n, sc, "batch.c")?,
        d: op(d_m, m, n, sd, "batch.d")?,
        c_is_d,
        count: count_i,
        epi: kind,
        aux,
        bias_stride,
        // The column-major problem's A and B: the caller's B and A when row-major.
        kinds: if swapped { [kinds[1], kinds[0], kinds[2], kinds[3], kinds[4]] } else { kinds },
        fp8,
    })
}
