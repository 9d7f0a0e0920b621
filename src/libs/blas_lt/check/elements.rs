//! The element types: A, B, C, D and the epilogue's vectors checked against each other and
//! against the options that depend on them (TF32, FP8 scales, D's amax), and the FP8 matmuls
//! cuBLASLt has no kernel for.

use super::{EpiKind, EpiParts};
use crate::error::{Error, Result};
use crate::libs::blas_lt::types::sealed::Kind;
use crate::libs::blas_lt::types::{LtElement, Matmul};
use crate::libs::validate as check;

/// Checks the element types and the options that depend on them; returns whether the inputs
/// are FP8.
pub(super) fn types<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    epi: &EpiParts,
    kinds: [Kind; 5],
) -> Result<bool> {
    // An FP8 GELU aux matrix is not of the type the bias would have: `aux_type` checks it.
    let fp8_aux = epi.kind == EpiKind::GeluAux && kinds[4].is_fp8();
    let uses_e = match (epi.bias, epi.aux) {
        (Some((arg, ..)), _) => Some(arg),
        (None, Some((arg, ..))) if arg == "aux" && !fp8_aux => Some(arg),
        _ => None,
    };
    let fp8 = check_types(kinds, uses_e)?;
    if mm.tf32 && TA::KIND != Kind::F32 {
        return Err(Error::invalid("tf32", "only f32 inputs round to TF32"));
    }
    fp8_scales(mm, fp8)?;
    if mm.fp8_fast_accum && !fp8 {
        return Err(Error::invalid(
            "fp8_fast_accum",
            "fast accumulation is an option of FP8 matmuls only: leave it false",
        ));
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
    aux_type(kinds, fp8, epi)?;
    fp8_epilogue(kinds, fp8, epi)?;
    wide_epilogue(kinds[0], epi.kind)?;
    Ok(fp8)
}

/// The epilogues cuBLASLt's type table lists for f64, complex and i8 inputs: a bias (of D's
/// type) and ReLU for f64, and none (`Default`) for complex and i8 inputs, whose rows say
/// "non-default epilogue not supported".
fn wide_epilogue(ka: Kind, kind: EpiKind) -> Result<()> {
    let allowed = match ka {
        Kind::F64 => matches!(kind, EpiKind::Default | EpiKind::Relu | EpiKind::Bias | EpiKind::ReluBias),
        Kind::C32 | Kind::C64 | Kind::I8 => kind == EpiKind::Default,
        _ => return Ok(()),
    };
    if allowed {
        return Ok(());
    }
    let take = if ka == Kind::F64 { "Default, Relu, Bias or ReluBias" } else { "Epilogue::Default only" };
    Err(super::super::unsupported::refused(
        "epilogue",
        format!("Epilogue::{kind:?} on {} inputs", ka.name()),
        format!(
            "cuBLASLt's matmul type table lists {take} for {} inputs: apply the epilogue in a separate kernel",
            ka.name()
        ),
    ))
}

/// Checks the FP8 per-tensor scales: present exactly for FP8 inputs, each one element, D's for
/// an FP8 D only, and none for C.
fn fp8_scales<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    fp8: bool,
) -> Result<()> {
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
    Ok(())
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
        if !matches!(kd, Kind::E4M3 | Kind::E5M2 | Kind::F32 | Kind::F16 | Kind::Bf16) {
            return Err(Error::invalid(
                "d",
                format!("FP8 matmuls write an FP8, bf16, f16 or f32 D (is {})", kd.name()),
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
        if ka == Kind::I32 {
            return Err(Error::invalid(
                "a",
                "cuBLASLt multiplies no i32 matrices (i32 is the C and D of i8 inputs): make A and B i8",
            ));
        }
        if kb != ka {
            return Err(Error::invalid("b", format!("must have A's type {} (is {})", ka.name(), kb.name())));
        }
        if ka == Kind::I8 && kd != Kind::I32 {
            return Err(Error::invalid(
                "d",
                format!("i8 inputs accumulate in i32, into an i32 D (with an i32 C): D is {}", kd.name()),
            ));
        }
        if ka != Kind::I8 && kd != ka {
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
/// GELU aux of another type than D is refused by the library. An FP8 aux matrix is listed in
/// one case: E4M3, written by `GELU_AUX` beside an E4M3 D and an f16 C, from E4M3 inputs.
fn aux_type(kinds: [Kind; 5], fp8: bool, epi: &EpiParts) -> Result<()> {
    let [ka, kb, kc, kd, ke] = kinds;
    let gelu_aux = epi.kind.aux().is_some_and(|u| !u.relu);
    if gelu_aux && ke.is_fp8() {
        let listed = fp8 && epi.kind == EpiKind::GeluAux && [ka, kb, kd, ke] == [Kind::E4M3; 4] && kc == Kind::F16;
        if listed {
            return Ok(());
        }
        return Err(Error::invalid(
            "aux",
            format!(
                "cuBLASLt writes an FP8 GELU aux matrix only as E4M3, for GeluAux with E4M3 inputs, an E4M3 D and an \
                 f16 C (here a {} aux for Epilogue::{:?}, inputs {} x {}, C {}, D {}): use that, or a bf16 / f16 aux",
                ke.name(),
                epi.kind,
                ka.name(),
                kb.name(),
                kc.name(),
                kd.name()
            ),
        ));
    }
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

/// Checks the aux matrix's FP8 scale and amax: cuBLASLt scales, and takes the amax of, an FP8
/// aux matrix only (which `aux_type` has checked), and the scale is one f32.
pub(super) fn aux_scale<TA: LtElement, TB: LtElement, TD: LtElement, TC: LtElement, E: LtElement>(
    mm: &Matmul<'_, TA, TB, TD, TC, E>,
    epi: &EpiParts,
    kinds: [Kind; 5],
) -> Result<()> {
    let arg = match (mm.aux_scale, mm.amax_aux) {
        (None, false) => return Ok(()),
        (Some(_), _) => "aux_scale",
        (None, true) => "amax_aux",
    };
    let fp8_aux = epi.kind.aux().is_some_and(|u| !u.relu && u.write) && kinds[4].is_fp8();
    if !fp8_aux {
        return Err(Error::invalid(
            arg,
            format!(
                "cuBLASLt scales an FP8 GELU aux matrix only, and takes only its amax (here Epilogue::{:?} with \
                 epilogue type {}): leave aux_scale None and amax_aux false",
                epi.kind,
                kinds[4].name()
            ),
        ));
    }
    if let Some(s) = mm.aux_scale {
        check::covers("aux_scale", s, Some(1), "a scale")?;
    }
    Ok(())
}
