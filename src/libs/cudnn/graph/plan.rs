//! A [`GraphSpec`] made into backend descriptors, an operation graph, engine configurations
//! from the heuristics and an execution plan ([`GraphPlan`]), and the plan's execution with a
//! variant pack.

use super::backend::{Attr, Desc, Kind};
use super::builder::{Dt, GraphSpec, NormMode, Op, Pw, Red, Uid};
use crate::error::{Error, Result};
use cudarc::cudnn::sys;
use std::ffi::c_void;

impl GraphSpec {
    /// The workspace's size and the scratch tensors' offsets in it: cuDNN's part (`work`
    /// bytes) first, then each scratch tensor, 256-byte aligned.
    fn scratch_layout(&self, work: i64) -> Result<(usize, Vec<(Uid, usize)>)> {
        let work = usize::try_from(work).map_err(|_| Error::invalid("graph", "negative workspace size"))?;
        let too_big = || Error::invalid("graph", "the workspace size overflows");
        let align = |n: usize| n.checked_add(255).map(|x| x / 256 * 256).ok_or_else(too_big);
        let mut end = align(work)?;
        let mut scratch = Vec::new();
        for t in self.tensors.iter().filter(|t| t.scratch) {
            let n = t.dims.iter().try_fold(4usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)));
            scratch.push((t.uid, end));
            end = align(n.and_then(|n| end.checked_add(n)).ok_or_else(too_big)?)?;
        }
        Ok((if scratch.is_empty() { work } else { end }, scratch))
    }

    /// Builds the graph's descriptors with `handle` and finds an execution plan for it: the
    /// heuristics' configurations tried best first, the first that finalizes kept. `Ok(None)`
    /// when none does (no engine supports the graph).
    ///
    /// # Safety
    /// `handle` is live, its context current on this thread, used by one thread at a time.
    pub(crate) unsafe fn plan(&self, handle: sys::cudnnHandle_t) -> Result<Option<GraphPlan>> {
        let mut keep: Vec<Desc> = Vec::new();
        let mut tensors: Vec<(Uid, Desc)> = Vec::new();
        for t in &self.tensors {
            let d = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
            d.set_dtype(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, t.dt.raw())?;
            d.set_i64(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &t.dims)?;
            d.set_i64(Attr::CUDNN_ATTR_TENSOR_STRIDES, &t.strides)?;
            d.set_i64(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[t.uid])?;
            d.set_i64(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
            d.set_bool(Attr::CUDNN_ATTR_TENSOR_IS_VIRTUAL, t.virt)?;
            if t.by_value {
                d.set_bool(Attr::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
            }
            d.finalize()?;
            tensors.push((t.uid, d));
        }
        let desc = |uid: Uid| -> Result<&Desc> {
            tensors
                .iter()
                .find(|(u, _)| *u == uid)
                .map(|(_, d)| d)
                .ok_or_else(|| Error::invalid("graph", format!("no tensor {uid}")))
        };
        let mut ops: Vec<Desc> = Vec::new();
        for op in &self.ops {
            match op {
                Op::Matmul { a, b, c, m_override, n_override, k_override } => {
                    let mm = Desc::new(Kind::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
                    mm.set_dtype(Attr::CUDNN_ATTR_MATMUL_COMP_TYPE, Dt::F32.raw())?;
                    mm.finalize()?;
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[desc(*a)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[desc(*b)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[desc(*c)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&mm])?;
                    for (attr, ov) in [
                        (Attr::CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override),
                        (Attr::CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override),
                        (Attr::CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override),
                    ] {
                        if let Some(u) = ov {
                            o.set_descs(attr, &[desc(*u)?])?;
                        }
                    }
                    o.finalize()?;
                    keep.push(mm);
                    ops.push(o);
                }
                Op::Pointwise { mode, x, b, t, y, prec } => {
                    let pw = Desc::new(Kind::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
                    pw.set_pointwise_mode(Attr::CUDNN_ATTR_POINTWISE_MODE, mode.raw())?;
                    pw.set_dtype(Attr::CUDNN_ATTR_POINTWISE_MATH_PREC, prec.raw())?;
                    if let Pw::GenIndex(axis) = mode {
                        pw.set_i64(Attr::CUDNN_ATTR_POINTWISE_AXIS, &[*axis])?;
                    }
                    if *mode == Pw::Relu {
                        // A plain ReLU: no lower slope, no upper clip within f32's range.
                        pw.set_f64(Attr::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, 0.0)?;
                        pw.set_f64(Attr::CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, f64::from(f32::MAX))?;
                        pw.set_f64(Attr::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, 0.0)?;
                    }
                    pw.finalize()?;
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[desc(*x)?])?;
                    if let Some(b) = b {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[desc(*b)?])?;
                    }
                    if let Some(t) = t {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &[desc(*t)?])?;
                    }
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[desc(*y)?])?;
                    o.finalize()?;
                    keep.push(pw);
                    ops.push(o);
                }
                Op::Reduction { mode, x, y } => {
                    use sys::cudnnReduceTensorOp_t as R;
                    let r = Desc::new(Kind::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
                    let mode = match mode {
                        Red::Max => R::CUDNN_REDUCE_TENSOR_MAX,
                        Red::Sum => R::CUDNN_REDUCE_TENSOR_ADD,
                        Red::Amax => R::CUDNN_REDUCE_TENSOR_AMAX,
                    };
                    r.set_reduction(Attr::CUDNN_ATTR_REDUCTION_OPERATOR, mode)?;
                    r.set_dtype(Attr::CUDNN_ATTR_REDUCTION_COMP_TYPE, Dt::F32.raw())?;
                    r.finalize()?;
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[desc(*x)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[desc(*y)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&r])?;
                    o.finalize()?;
                    keep.push(r);
                    ops.push(o);
                }
                Op::Reshape { x, y } => {
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[desc(*x)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[desc(*y)?])?;
                    o.finalize()?;
                    ops.push(o);
                }
                Op::NormFwd { mode, training, x, scale, bias, eps, y, mean, inv_var } => {
                    use sys::cudnnBackendNormFwdPhase_t as P;
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR)?;
                    o.set_norm_mode(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_MODE, norm_mode(*mode))?;
                    let phase = if *training { P::CUDNN_NORM_FWD_TRAINING } else { P::CUDNN_NORM_FWD_INFERENCE };
                    o.set_norm_phase(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, phase)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, &[desc(*x)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, &[desc(*scale)?])?;
                    if let Some(b) = bias {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, &[desc(*b)?])?;
                    }
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, &[desc(*eps)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, &[desc(*y)?])?;
                    if let Some(m) = mean {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, &[desc(*m)?])?;
                    }
                    if let Some(v) = inv_var {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, &[desc(*v)?])?;
                    }
                    o.finalize()?;
                    ops.push(o);
                }
                Op::NormBwd { mode, eps, x, dy, scale, mean, inv_var, dx, dscale, dbias } => {
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR)?;
                    o.set_norm_mode(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_MODE, norm_mode(*mode))?;
                    if let Some(e) = eps {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC, &[desc(*e)?])?;
                    }
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, &[desc(*x)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, &[desc(*dy)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, &[desc(*scale)?])?;
                    if let Some(m) = mean {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, &[desc(*m)?])?;
                    }
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, &[desc(*inv_var)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, &[desc(*dx)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, &[desc(*dscale)?])?;
                    if let Some(b) = dbias {
                        o.set_descs(Attr::CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, &[desc(*b)?])?;
                    }
                    o.finalize()?;
                    ops.push(o);
                }
                Op::Rng { seed, offset, y, keep: p } => {
                    let r = Desc::new(Kind::CUDNN_BACKEND_RNG_DESCRIPTOR)?;
                    r.set_rng(
                        Attr::CUDNN_ATTR_RNG_DISTRIBUTION,
                        sys::cudnnRngDistribution_t::CUDNN_RNG_DISTRIBUTION_BERNOULLI,
                    )?;
                    r.set_f64(Attr::CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, *p)?;
                    r.finalize()?;
                    let o = Desc::new(Kind::CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR)?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RNG_YDESC, &[desc(*y)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RNG_DESC, &[&r])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RNG_SEED, &[desc(*seed)?])?;
                    o.set_descs(Attr::CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, &[desc(*offset)?])?;
                    o.finalize()?;
                    keep.push(r);
                    ops.push(o);
                }
            }
        }
        let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_handle(Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        graph.set_descs(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &ops.iter().collect::<Vec<_>>())?;
        graph.finalize()?;
        let mut last_err = None;
        // Mode A's proposals first; the fallback engines only when none of those finalizes.
        for mode in
            [sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A, sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK]
        {
            let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
            heur.set_descs(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&graph])?;
            heur.set_heur_mode(Attr::CUDNN_ATTR_ENGINEHEUR_MODE, mode)?;
            let configs = match heur.finalize().and_then(|()| heur.engine_configs(8)) {
                Ok(c) => c,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            for cfg in configs {
                let plan = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
                plan.set_handle(Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
                plan.set_descs(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&cfg])?;
                // An engine the heuristics propose may still refuse this graph: try the next.
                if let Err(e) = plan.finalize() {
                    last_err = Some(e);
                    continue;
                }
                let work = plan.get_i64(Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
                let (work_bytes, scratch) = self.scratch_layout(work)?;
                keep.extend(tensors.into_iter().map(|(_, d)| d));
                keep.extend(ops);
                keep.extend([graph, heur, cfg]);
                return Ok(Some(GraphPlan { plan, work_bytes, scratch, aux: Vec::new(), _keep: keep }));
            }
        }
        if let Some(e) = last_err {
            log::debug!("cusched: no engine configuration finalized; the last error: {e}");
        }
        Ok(None)
    }
}

/// A finalized execution plan, its workspace need, and the descriptors it was made from.
pub(crate) struct GraphPlan {
    pub plan: Desc,
    /// cuDNN's need and the scratch tensors'.
    pub work_bytes: usize,
    /// The scratch tensors' offsets in the workspace.
    pub scratch: Vec<(Uid, usize)>,
    /// Device buffers the plan owns and the graph reads (constant inputs, made with the plan).
    pub aux: Vec<(Uid, crate::memory::GpuRef<i32>)>,
    _keep: Vec<Desc>,
}

impl GraphPlan {
    /// Builds the variant pack (`(uid, pointer)` pairs and the workspace) and executes the
    /// plan.
    ///
    /// # Safety
    /// (1) `handle` made the plan, is bound to the op's stream, its context current; (2) every
    /// non-virtual tensor of the plan's graph but the scratch and plan-owned ones has its uid
    /// in `ptrs`, with a live device buffer holding it (a pointer to a live host value for a
    /// by-value one), all fenced on the stream, the plan-owned ones too; (3) `work` holds
    /// `work_bytes` (or is null when that is 0).
    pub(crate) unsafe fn execute(
        &self,
        handle: sys::cudnnHandle_t,
        ptrs: &[(Uid, *mut c_void)],
        work: *mut c_void,
    ) -> Result<()> {
        let pack = Desc::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        let mut uids: Vec<i64> = ptrs.iter().map(|p| p.0).collect();
        let mut data: Vec<*mut c_void> = ptrs.iter().map(|p| p.1).collect();
        for (uid, off) in &self.scratch {
            uids.push(*uid);
            data.push((work as *mut u8).wrapping_add(*off) as *mut c_void);
        }
        for (uid, buf) in &self.aux {
            uids.push(*uid);
            data.push(crate::libs::dptr(buf)?);
        }
        pack.set_i64(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &uids)?;
        pack.set_ptrs(Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, &data)?;
        pack.set_ptrs(Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE, &[work])?;
        pack.finalize()?;
        // SAFETY: the caller vouches for (1) to (3); the pack is finalized.
        unsafe { super::backend::execute(handle, &self.plan, &pack) }
    }
}

/// The backend's norm mode.
fn norm_mode(mode: NormMode) -> sys::cudnnBackendNormMode_t {
    use sys::cudnnBackendNormMode_t as M;
    match mode {
        NormMode::Layer => M::CUDNN_LAYER_NORM,
        NormMode::Rms => M::CUDNN_RMS_NORM,
        NormMode::Instance => M::CUDNN_INSTANCE_NORM,
    }
}

/// The backend's version (`cudnnGetVersion`), e.g. 91000 for 9.10.0.
pub(crate) fn version() -> usize {
    // SAFETY: no preconditions; the library is loaded (a handle exists).
    unsafe { sys::cudnnGetVersion() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_tensors_follow_cudnns_workspace_aligned() {
        let mut g = GraphSpec::default();
        let a = g.scratch(&[2, 3, 5, 1]);
        let b = g.scratch(&[1, 1, 1, 7]);
        let (total, offsets) = g.scratch_layout(1000).unwrap();
        assert_eq!(offsets, [(a, 1024), (b, 1280)]);
        assert_eq!(total, 1536);
        assert_eq!(GraphSpec::default().scratch_layout(1000).unwrap(), (1000, Vec::new()));
        assert!(GraphSpec::default().scratch_layout(-1).is_err());
    }
}
