//! The epilogue as the checks see it: its kind without its buffers ([`EpiKind`]), how it uses
//! its bias vector and aux matrix, and its buffers' ids and lengths ([`EpiParts`]).

use crate::libs::blas_lt::types::Epilogue;
use crate::memory::{Element, GpuRef};

/// The epilogue, without its buffers; in the column-major problem (a row-major problem swaps
/// `BgradA` and `BgradB`, as it swaps `A` and `B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::libs::blas_lt) enum EpiKind {
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
pub(in crate::libs::blas_lt) struct AuxUse {
    /// A ReLU bit-mask (else a GELU pre-activation of type `E`).
    pub relu: bool,
    /// Written (forward) rather than read (backward).
    pub write: bool,
}

impl EpiKind {
    /// `Some(written)` when the epilogue has a bias vector: read as a bias, or written as a
    /// gradient.
    pub(in crate::libs::blas_lt) fn bias(self) -> Option<bool> {
        use EpiKind::*;
        match self {
            Bias | ReluBias | GeluBias | ReluAuxBias | GeluAuxBias => Some(false),
            DReluBgrad | DGeluBgrad | BgradA | BgradB => Some(true),
            Default | Relu | Gelu | ReluAux | GeluAux | DRelu | DGelu => None,
        }
    }

    pub(in crate::libs::blas_lt) fn aux(self) -> Option<AuxUse> {
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
pub(in crate::libs::blas_lt) struct EpiParts {
    pub kind: EpiKind,
    /// (argument, id, elements) of the bias or bias-gradient vector.
    pub bias: Option<(&'static str, u64, usize)>,
    /// (argument, id, elements or bytes, ld) of the aux matrix.
    pub aux: Option<(&'static str, u64, usize, Option<usize>)>,
}

pub(in crate::libs::blas_lt) fn parts<E: Element>(e: &Epilogue<'_, E>) -> EpiParts {
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
