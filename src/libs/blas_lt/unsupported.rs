//! The error for a matmul cuBLASLt has no kernel for, described in the caller's terms (the
//! row-major problem as given, not the swapped column-major one cuBLASLt sees).

use super::check::{EpiKind, Problem};
use super::types::{Order, Transpose};
use super::BlasLt;
use crate::error::Error;
use crate::libs::StreamLibrary;

fn yes_no(t: Transpose) -> &'static str {
    match t {
        Transpose::No => "No",
        Transpose::Yes => "Yes",
        Transpose::Conj => "Conj",
    }
}

/// `Error::Unsupported` for a combination cuBLASLt's type table does not list, refused by the
/// checks before anything is recorded: `what` names the argument `arg` that makes it so.
pub(super) fn refused(arg: &'static str, what: String, hint: String) -> Error {
    Error::Unsupported { library: BlasLt::LIBRARY.name, what: format!("{what} (argument `{arg}`)"), hint }
}

/// `Error::Unsupported` for `p` (with `tf32`, operands aligned to `align` bytes).
pub(super) fn error(p: &Problem, tf32: bool, align: u32) -> Error {
    // Back to the caller's problem: a row-major one swapped A and B, and BgradA and BgradB.
    let (m, n) = if p.swapped { (p.d.cols, p.d.rows) } else { (p.d.rows, p.d.cols) };
    let k = if p.trans_a == Transpose::Yes { p.a.rows } else { p.a.cols };
    let (ta, tb) = if p.swapped { (p.trans_b, p.trans_a) } else { (p.trans_a, p.trans_b) };
    // A matrix in another order than D's was handed over transposed: undo that.
    let [oa, ob, od] = p.orders;
    let back = |t: Transpose, o: Order| match (o == od, t) {
        (false, Transpose::No) => Transpose::Yes,
        (false, Transpose::Yes) => Transpose::No,
        (_, t) => t,
    };
    let (ta, tb) = (back(ta, oa), back(tb, ob));
    let epi = match (p.swapped, p.epi) {
        (true, EpiKind::BgradA) => EpiKind::BgradB,
        (true, EpiKind::BgradB) => EpiKind::BgradA,
        (_, e) => e,
    };
    let [ka, kb, kc, kd, ke] = p.kinds;
    let (ka, kb) = if p.swapped { (kb, ka) } else { (ka, kb) };
    let mut what = format!(
        "a {m}x{n}x{k} matmul with Epilogue::{epi:?} on A {}, B {}, C {}, D {}",
        ka.name(),
        kb.name(),
        kc.name(),
        kd.name()
    );
    if epi.bias().is_some() {
        what += &format!(", bias {}", ke.name());
    }
    let major = |o: Order| if o == Order::Row { "row" } else { "column" };
    what += &format!(", trans_a = {}, trans_b = {}, ", yes_no(ta), yes_no(tb));
    if oa == od && ob == od {
        what += &format!("{}-major", major(od));
    } else {
        what += &format!("A {}-major, B {}-major, C and D {}-major", major(oa), major(ob), major(od));
    }
    if p.device_scalars {
        what += ", alpha and beta in device memory";
    }
    if tf32 {
        what += ", TF32";
    }
    if p.fast_accum {
        what += ", FP8 fast accumulation";
    }
    if p.count > 1 {
        what += &format!(", a batch of {}", p.count);
    }
    what += &format!(", operands {align}-byte aligned");

    let mut hint = match epi {
        EpiKind::BgradA | EpiKind::BgradB => {
            let other = if epi == EpiKind::BgradB { "trans_b" } else { "trans_a" };
            format!(
                "the BGRADA/BGRADB epilogues have kernels for f16 and bf16 inputs in a weight-gradient layout only: \
                 use f16 or bf16, try the other {other}, or sum the bias gradient in a separate reduction"
            )
        }
        _ => "try another epilogue, other transposes or element types (cuBLASLt's cublasLtMatmul support tables)"
            .to_string(),
    };
    if align < 16 {
        hint += &format!("; the operands are only {align}-byte aligned, and 16-byte-aligned ones have more kernels");
    }
    Error::Unsupported { library: BlasLt::LIBRARY.name, what, hint }
}

#[cfg(test)]
mod tests {
    use super::super::check;
    use super::super::types::{Epilogue, Matmul, Order, Transpose};
    use crate::error::Error;
    use crate::{backend::sim::SimConfig, device::Device};

    #[test]
    fn the_error_names_the_callers_epilogue_types_transposes_and_order() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let s = d.default_stream();
        let (a, b, out) = (
            d.alloc_zeros::<f32>(s, 6).unwrap(),
            d.alloc_zeros::<f32>(s, 12).unwrap(),
            d.alloc_zeros::<f32>(s, 8).unwrap(),
        );
        let grad = d.alloc_zeros::<f32>(s, 4).unwrap();
        // Row-major 2x4x3 with BgradB: cuBLASLt sees the column-major 4x2x3 problem with BgradA.
        let mm = Matmul::new(2, 4, 3, &a, &b, &out)
            .order(Order::Row)
            .transpose(Transpose::Yes, Transpose::No)
            .leading(2, 4, 4)
            .epilogue(Epilogue::BgradB(&grad));
        let p = check::problem(&mm).unwrap();
        assert!(p.swapped);
        let e = super::error(&p, false, 8);
        let Error::Unsupported { what, hint, .. } = &e else { panic!("{e:?}") };
        assert_eq!(
            what,
            "a 2x4x3 matmul with Epilogue::BgradB on A f32, B f32, C f32, D f32, bias f32, trans_a = Yes, trans_b = No, row-major, operands 8-byte aligned"
        );
        assert!(hint.contains("f16 or bf16") && hint.contains("trans_b") && hint.contains("8-byte"), "{hint}");
        assert!(e.to_string().starts_with("cuBLASLt (libcublasLt) has no kernel for a 2x4x3 matmul"), "{e}");
    }

    #[test]
    fn fp8_fast_accumulation_is_part_of_the_problem_and_named_in_the_error() {
        use crate::memory::F8E4M3;
        let d = Device::sim(SimConfig::default()).unwrap();
        let s = d.default_stream();
        let (a, b) = (d.alloc_zeros::<F8E4M3>(s, 256).unwrap(), d.alloc_zeros::<F8E4M3>(s, 256).unwrap());
        let (out, one) = (d.alloc_zeros::<half::bf16>(s, 256).unwrap(), d.alloc_zeros::<f32>(s, 1).unwrap());
        let scales = super::super::types::Fp8Scales { a: &one, b: &one, c: None, d: None };
        let mm = || Matmul::new(16, 16, 16, &a, &b, &out).transpose(Transpose::Yes, Transpose::No).fp8(scales, false);
        let slow = check::problem(&mm()).unwrap();
        let fast = check::problem(&mm().fp8_fast_accum(true)).unwrap();
        assert!(!slow.fast_accum && fast.fast_accum);
        // The plan key holds the problem: the two get plans of their own.
        assert_ne!(slow, fast);
        let Error::Unsupported { what, .. } = super::error(&fast, false, 16) else { panic!() };
        assert!(what.contains("FP8 fast accumulation"), "{what}");
    }

    #[test]
    fn device_scalars_and_per_matrix_orders_are_part_of_the_problem_and_named_in_the_error() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let s = d.default_stream();
        let (a, b, out) = (
            d.alloc_zeros::<f32>(s, 6).unwrap(),
            d.alloc_zeros::<f32>(s, 12).unwrap(),
            d.alloc_zeros::<f32>(s, 8).unwrap(),
        );
        let (alpha, beta) = (d.alloc_zeros::<f32>(s, 1).unwrap(), d.alloc_zeros::<f32>(s, 1).unwrap());
        let host = check::problem(&Matmul::new(2, 4, 3, &a, &b, &out)).unwrap();
        let device = check::problem(&Matmul::new(2, 4, 3, &a, &b, &out).scale_device(&alpha, &beta)).unwrap();
        // The plan key holds the problem: the pointer modes get plans of their own.
        assert!(!host.device_scalars && device.device_scalars);
        assert_ne!(host, device);
        let Error::Unsupported { what, .. } = super::error(&device, false, 16) else { panic!() };
        assert!(what.contains("alpha and beta in device memory"), "{what}");
        // A row-major A of a column-major D is handed over as its transpose; the error shows the
        // caller's transpose and orders.
        let mixed = Matmul::new(2, 4, 3, &a, &b, &out).orders(Order::Row, Order::Col, Order::Col);
        let p = check::problem(&mixed).unwrap();
        assert_eq!((p.trans_a, p.swapped), (Transpose::Yes, false));
        let Error::Unsupported { what, .. } = super::error(&p, false, 16) else { panic!() };
        assert!(
            what.contains("trans_a = No, trans_b = No, A row-major, B column-major, C and D column-major"),
            "{what}"
        );
    }
}
