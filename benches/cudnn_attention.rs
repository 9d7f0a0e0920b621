//! cuDNN attention passthrough: scaled dot-product attention (default B 4, H 16, S 4096,
//! D 128, bf16, causal) forward and forward + backward through cusched's `sdpa_forward` and
//! `sdpa_backward`, next to the same backend graphs built here directly with cudarc's raw cuDNN
//! `sys` calls (descriptors, heuristics mode A then the fallback, the first engine configuration
//! that finalizes, `cudnnBackendExecute` with a variant pack and workspace of its own), in one
//! process on one stream; then the host cost of attention plans: the first `sdpa_forward` of a
//! new shape against a cached one, and the raw graph and plan building of a new shape.
//!
//! TFLOP/s count causal attention as PyTorch and FlashAttention do: forward `4·B·H·S²·D`,
//! halved when causal; backward 2.5 times the forward.
//!
//! Run from the GPU bundle with cuDNN on the loader path (`. tools/cuda-libs-env`):
//! `bench-cudnn_attention [b] [h] [s] [d] [iterations]` (defaults 4 16 4096 128 10);
//! `--full` drops the causal mask. The raw side prints the global index of the engine it runs;
//! cusched keeps the first configuration that finalizes in the same order, so both run that
//! engine (`CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr` shows cuDNN's own account). When
//! the raw graphs find no plan, the error is printed and cusched's side runs alone.

mod common;

use common::interleaved;
use cusched::cudarc::cudnn::sys;
use cusched::cudnn::{Attention, AttnTensor, SdpaGrads};
use cusched::half::bf16;
use cusched::{Device, GpuRef, Handles, StreamId};
use std::ffi::c_void;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as Ty;
use sys::cudnnBackendDescriptorType_t as K;
use sys::cudnnDataType_t as Dt;
use sys::cudnnPointwiseMode_t as Pw;

fn check(status: sys::cudnnStatus_t, call: &str) -> Res<()> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {status:?}").into())
    }
}

/// A raw backend descriptor; the bench never destroys one (they live until the process exits).
type Desc = sys::cudnnBackendDescriptor_t;

/// # Safety
/// cuDNN is loaded.
unsafe fn create(kind: K) -> Res<Desc> {
    let mut d: Desc = std::ptr::null_mut();
    check(sys::cudnnBackendCreateDescriptor(kind, &mut d), "cudnnBackendCreateDescriptor")?;
    Ok(d)
}

/// # Safety
/// `d` is live and `V` is the C type cuDNN reads for `ty`.
unsafe fn set<V>(d: Desc, attr: A, ty: Ty, vals: &[V]) -> Res<()> {
    let st = sys::cudnnBackendSetAttribute(d, attr, ty, vals.len() as i64, vals.as_ptr().cast());
    check(st, &format!("cudnnBackendSetAttribute({attr:?})"))
}

/// # Safety
/// `d` is live.
unsafe fn finalize(d: Desc) -> Result<(), sys::cudnnStatus_t> {
    match sys::cudnnBackendFinalize(d) {
        sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        e => Err(e),
    }
}

/// # Safety
/// `d` is live and finalized.
unsafe fn get_i64(d: Desc, attr: A) -> Res<i64> {
    let (mut v, mut n) = (0i64, 0i64);
    let st = sys::cudnnBackendGetAttribute(d, attr, Ty::CUDNN_TYPE_INT64, 1, &mut n, (&mut v as *mut i64).cast());
    check(st, &format!("cudnnBackendGetAttribute({attr:?})"))?;
    Ok(v)
}

/// One tensor of a raw graph.
#[derive(Clone, Copy)]
struct T {
    uid: i64,
    desc: Desc,
    dims: [i64; 4],
}

fn packed(d: [i64; 4]) -> [i64; 4] {
    [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]
}

/// An operation graph under construction: its operations, and the f32 tensors it keeps in the
/// workspace after cuDNN's part.
#[derive(Default)]
struct Graph {
    next: i64,
    ops: Vec<Desc>,
    scratch: Vec<T>,
}

/// A finalized plan, its workspace (cuDNN's part, then the scratch tensors at their offsets)
/// and the engine it runs.
struct Plan {
    plan: Desc,
    work_bytes: usize,
    scratch: Vec<(i64, usize)>,
    engine: i64,
    rank: String,
}

// Every method below is unsafe for one reason: it calls cuDNN, which must be loaded (`plan`
// adds its own).
impl Graph {
    /// # Safety
    /// cuDNN is loaded.
    unsafe fn tensor(&mut self, dims: [i64; 4], strides: [i64; 4], dt: Dt, virt: bool, by_value: bool) -> Res<T> {
        self.next += 1;
        let d = create(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
        set(d, A::CUDNN_ATTR_TENSOR_DATA_TYPE, Ty::CUDNN_TYPE_DATA_TYPE, &[dt])?;
        set(d, A::CUDNN_ATTR_TENSOR_DIMENSIONS, Ty::CUDNN_TYPE_INT64, &dims)?;
        set(d, A::CUDNN_ATTR_TENSOR_STRIDES, Ty::CUDNN_TYPE_INT64, &strides)?;
        set(d, A::CUDNN_ATTR_TENSOR_UNIQUE_ID, Ty::CUDNN_TYPE_INT64, &[self.next])?;
        set(d, A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, Ty::CUDNN_TYPE_INT64, &[16i64])?;
        set(d, A::CUDNN_ATTR_TENSOR_IS_VIRTUAL, Ty::CUDNN_TYPE_BOOLEAN, &[virt])?;
        if by_value {
            set(d, A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, Ty::CUDNN_TYPE_BOOLEAN, &[true])?;
        }
        finalize(d).map_err(|e| format!("tensor finalize: {e:?}"))?;
        Ok(T { uid: self.next, desc: d, dims })
    }

    unsafe fn mem(&mut self, dims: [i64; 4], strides: [i64; 4], dt: Dt) -> Res<T> {
        self.tensor(dims, strides, dt, false, false)
    }

    unsafe fn virt(&mut self, dims: [i64; 4], dt: Dt) -> Res<T> {
        self.tensor(dims, packed(dims), dt, true, false)
    }

    unsafe fn scalar(&mut self) -> Res<T> {
        self.tensor([1; 4], [1; 4], Dt::CUDNN_DATA_FLOAT, false, true)
    }

    /// A packed f32 tensor in the workspace.
    unsafe fn scratch(&mut self, dims: [i64; 4]) -> Res<T> {
        let t = self.tensor(dims, packed(dims), Dt::CUDNN_DATA_FLOAT, false, false)?;
        self.scratch.push(t);
        Ok(t)
    }

    /// `y = mode(x[, b][, t])` into `y`, computed in `prec`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pw_into(
        &mut self,
        mode: Pw,
        x: T,
        b: Option<T>,
        t: Option<T>,
        y: T,
        prec: Dt,
        axis: Option<i64>,
    ) -> Res<()> {
        let p = create(K::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
        set(p, A::CUDNN_ATTR_POINTWISE_MODE, Ty::CUDNN_TYPE_POINTWISE_MODE, &[mode])?;
        set(p, A::CUDNN_ATTR_POINTWISE_MATH_PREC, Ty::CUDNN_TYPE_DATA_TYPE, &[prec])?;
        if let Some(axis) = axis {
            set(p, A::CUDNN_ATTR_POINTWISE_AXIS, Ty::CUDNN_TYPE_INT64, &[axis])?;
        }
        finalize(p).map_err(|e| format!("pointwise finalize: {e:?}"))?;
        let o = create(K::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
        let bd = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        set(o, A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, bd, &[p])?;
        set(o, A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, bd, &[x.desc])?;
        if let Some(b) = b {
            set(o, A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bd, &[b.desc])?;
        }
        if let Some(t) = t {
            set(o, A::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, bd, &[t.desc])?;
        }
        set(o, A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, bd, &[y.desc])?;
        finalize(o).map_err(|e| format!("pointwise op finalize ({mode:?}): {e:?}"))?;
        self.ops.push(o);
        Ok(())
    }

    /// `mode(x[, b][, t])` into a new virtual tensor of `dims` and type `out`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pw(&mut self, mode: Pw, x: T, b: Option<T>, t: Option<T>, dims: [i64; 4], out: Dt, prec: Dt) -> Res<T> {
        let y = self.virt(dims, out)?;
        self.pw_into(mode, x, b, t, y, prec, None)?;
        Ok(y)
    }

    /// The index along `axis` of each element of `x`'s shape.
    unsafe fn gen_index(&mut self, x: T, axis: i64, prec: Dt) -> Res<T> {
        let y = self.virt(x.dims, Dt::CUDNN_DATA_INT32)?;
        self.pw_into(Pw::CUDNN_POINTWISE_GEN_INDEX, x, None, None, y, prec, Some(axis))?;
        Ok(y)
    }

    unsafe fn matmul(&mut self, a: T, b: T, c: T, m: Option<T>, n: Option<T>, k: Option<T>) -> Res<()> {
        let mm = create(K::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
        set(mm, A::CUDNN_ATTR_MATMUL_COMP_TYPE, Ty::CUDNN_TYPE_DATA_TYPE, &[Dt::CUDNN_DATA_FLOAT])?;
        finalize(mm).map_err(|e| format!("matmul finalize: {e:?}"))?;
        let o = create(K::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
        let bd = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        set(o, A::CUDNN_ATTR_OPERATION_MATMUL_ADESC, bd, &[a.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_MATMUL_BDESC, bd, &[b.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_MATMUL_CDESC, bd, &[c.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_MATMUL_DESC, bd, &[mm])?;
        for (attr, ov) in [
            (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m),
            (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n),
            (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k),
        ] {
            if let Some(t) = ov {
                set(o, attr, bd, &[t.desc])?;
            }
        }
        finalize(o).map_err(|e| format!("matmul op finalize: {e:?}"))?;
        self.ops.push(o);
        Ok(())
    }

    /// `y` = `x` reduced to `y`'s shape by max or sum, in f32.
    unsafe fn reduce(&mut self, max: bool, x: T, y: T) -> Res<()> {
        use sys::cudnnReduceTensorOp_t as R;
        let r = create(K::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
        let mode = if max { R::CUDNN_REDUCE_TENSOR_MAX } else { R::CUDNN_REDUCE_TENSOR_ADD };
        set(r, A::CUDNN_ATTR_REDUCTION_OPERATOR, Ty::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &[mode])?;
        set(r, A::CUDNN_ATTR_REDUCTION_COMP_TYPE, Ty::CUDNN_TYPE_DATA_TYPE, &[Dt::CUDNN_DATA_FLOAT])?;
        finalize(r).map_err(|e| format!("reduction finalize: {e:?}"))?;
        let o = create(K::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
        let bd = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        set(o, A::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, bd, &[x.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, bd, &[y.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_REDUCTION_DESC, bd, &[r])?;
        finalize(o).map_err(|e| format!("reduction op finalize: {e:?}"))?;
        self.ops.push(o);
        Ok(())
    }

    /// A virtual view of `x` with `dims` and `strides`.
    unsafe fn reshape(&mut self, x: T, dims: [i64; 4], strides: [i64; 4], dt: Dt) -> Res<T> {
        let y = self.tensor(dims, strides, dt, true, false)?;
        let o = create(K::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
        let bd = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        set(o, A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, bd, &[x.desc])?;
        set(o, A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, bd, &[y.desc])?;
        finalize(o).map_err(|e| format!("reshape op finalize: {e:?}"))?;
        self.ops.push(o);
        Ok(y)
    }

    /// `x` with the scores outside the sequence lengths set to `ninf`.
    unsafe fn padding(&mut self, x: T, seq: (T, T), ninf: T) -> Res<T> {
        let (i32t, bt, f) = (Dt::CUDNN_DATA_INT32, Dt::CUDNN_DATA_BOOLEAN, Dt::CUDNN_DATA_FLOAT);
        let row = self.gen_index(x, 2, i32t)?;
        let col = self.gen_index(x, 3, i32t)?;
        let rm = self.pw(Pw::CUDNN_POINTWISE_CMP_LT, row, Some(seq.0), None, x.dims, bt, bt)?;
        let cm = self.pw(Pw::CUDNN_POINTWISE_CMP_LT, col, Some(seq.1), None, x.dims, bt, bt)?;
        let m = self.pw(Pw::CUDNN_POINTWISE_LOGICAL_AND, rm, Some(cm), None, x.dims, bt, bt)?;
        self.pw(Pw::CUDNN_POINTWISE_BINARY_SELECT, x, Some(ninf), Some(m), x.dims, f, f)
    }

    /// `x` with the scores above the diagonal (key after query) set to `ninf`.
    unsafe fn causal(&mut self, x: T, ninf: T) -> Res<T> {
        let (bt, f) = (Dt::CUDNN_DATA_BOOLEAN, Dt::CUDNN_DATA_FLOAT);
        let row = self.gen_index(x, 2, f)?;
        let col = self.gen_index(x, 3, f)?;
        let m = self.pw(Pw::CUDNN_POINTWISE_CMP_GE, row, Some(col), None, x.dims, bt, bt)?;
        self.pw(Pw::CUDNN_POINTWISE_BINARY_SELECT, x, Some(ninf), Some(m), x.dims, f, f)
    }

    /// The operation graph, the heuristics (mode A, then the fallback), and the first engine
    /// configuration that finalizes into an execution plan.
    ///
    /// # Safety
    /// `handle` is live, its context current on this thread.
    unsafe fn plan(&self, handle: sys::cudnnHandle_t) -> Res<Plan> {
        let g = create(K::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        set(g, A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, Ty::CUDNN_TYPE_HANDLE, &[handle])?;
        set(g, A::CUDNN_ATTR_OPERATIONGRAPH_OPS, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &self.ops)?;
        finalize(g).map_err(|e| format!("operation graph finalize: {e:?}"))?;
        let mut last = None;
        for mode in
            [sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A, sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK]
        {
            let heur = create(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
            set(heur, A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &[g])?;
            set(heur, A::CUDNN_ATTR_ENGINEHEUR_MODE, Ty::CUDNN_TYPE_HEUR_MODE, &[mode])?;
            if let Err(e) = finalize(heur) {
                last = Some(format!("heuristics {mode:?}: {e:?}"));
                continue;
            }
            const MAX: usize = 8;
            let mut cfgs = Vec::with_capacity(MAX);
            for _ in 0..MAX {
                cfgs.push(create(K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?);
            }
            let mut n = 0i64;
            let st = sys::cudnnBackendGetAttribute(
                heur,
                A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                MAX as i64,
                &mut n,
                cfgs.as_mut_ptr().cast(),
            );
            check(st, "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)")?;
            for (rank, &cfg) in cfgs.iter().take(n.clamp(0, MAX as i64) as usize).enumerate() {
                let plan = create(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
                set(plan, A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, Ty::CUDNN_TYPE_HANDLE, &[handle])?;
                set(plan, A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &[cfg])?;
                if let Err(e) = finalize(plan) {
                    last = Some(format!("plan of configuration {rank} of {mode:?}: {e:?}"));
                    continue;
                }
                let work = usize::try_from(get_i64(plan, A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?)?;
                let align = |x: usize| x.div_ceil(256) * 256;
                let mut end = align(work);
                let mut scratch = Vec::new();
                for t in &self.scratch {
                    scratch.push((t.uid, end));
                    end = align(end + 4 * t.dims.iter().product::<i64>() as usize);
                }
                let work_bytes = if scratch.is_empty() { work } else { end };
                let engine = engine_index(cfg).unwrap_or(-1);
                let rank = format!("{} of {mode:?}", rank + 1).replace("CUDNN_HEUR_MODE_", "mode ");
                return Ok(Plan { plan, work_bytes, scratch, engine, rank });
            }
        }
        Err(format!("no engine configuration finalized; the last: {}", last.unwrap_or_default()).into())
    }
}

/// The global index of the engine an engine configuration runs.
///
/// # Safety
/// `cfg` is a live, finalized engine configuration.
unsafe fn engine_index(cfg: Desc) -> Res<i64> {
    let mut engine = create(K::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut n = 0i64;
    let st = sys::cudnnBackendGetAttribute(
        cfg,
        A::CUDNN_ATTR_ENGINECFG_ENGINE,
        Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
        1,
        &mut n,
        (&mut engine as *mut Desc).cast(),
    );
    check(st, "cudnnBackendGetAttribute(ENGINECFG_ENGINE)")?;
    get_i64(engine, A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
}

/// The sizes and options of the attention.
#[derive(Clone, Copy)]
struct Sizes {
    b: i64,
    h: i64,
    s: i64,
    d: i64,
    causal: bool,
}

impl Sizes {
    fn qd(&self) -> [i64; 4] {
        [self.b, self.h, self.s, self.d]
    }
    /// `[B, H, D, S]`: K (or V) transposed, over the same packed `[B, H, S, D]` memory.
    fn kt(&self) -> ([i64; 4], [i64; 4]) {
        let st = packed(self.qd());
        ([self.b, self.h, self.d, self.s], [st[0], st[1], 1, st[2]])
    }
    fn sd(&self) -> [i64; 4] {
        [self.b, self.h, self.s, self.s]
    }
    fn rd(&self) -> [i64; 4] {
        [self.b, self.h, self.s, 1]
    }
}

/// The uids the variant packs fill.
struct FwdIds {
    q: i64,
    k: i64,
    v: i64,
    o: i64,
    stats: i64,
    scale: i64,
    neg_inf: Option<i64>,
}

/// The forward graph: `S = Q·Kᵀ`, scaled, causal mask, softmax with its row statistics
/// (`max + log Σ exp`), `O = P·V`.
///
/// # Safety
/// cuDNN is loaded.
unsafe fn forward_graph(z: Sizes) -> Res<(Graph, FwdIds)> {
    let (bf, f) = (Dt::CUDNN_DATA_BFLOAT16, Dt::CUDNN_DATA_FLOAT);
    let mut g = Graph::default();
    let (qd, sd, rd) = (z.qd(), z.sd(), z.rd());
    let (kt, kts) = z.kt();
    let q = g.mem(qd, packed(qd), bf)?;
    let k = g.mem(kt, kts, bf)?;
    let v = g.mem(qd, packed(qd), bf)?;
    let o = g.mem(qd, packed(qd), bf)?;
    let scale = g.scalar()?;
    let neg_inf = if z.causal { Some(g.scalar()?) } else { None };
    let s = g.virt(sd, f)?;
    g.matmul(q, k, s, None, None, None)?;
    let mut last = g.pw(Pw::CUDNN_POINTWISE_MUL, s, Some(scale), None, sd, f, f)?;
    if let Some(ninf) = neg_inf {
        last = g.causal(last, ninf)?;
    }
    let max = g.virt(rd, f)?;
    g.reduce(true, last, max)?;
    let sub = g.pw(Pw::CUDNN_POINTWISE_SUB, last, Some(max), None, sd, f, f)?;
    let exp = g.pw(Pw::CUDNN_POINTWISE_EXP, sub, None, None, sd, f, f)?;
    let sum = g.virt(rd, f)?;
    g.reduce(false, exp, sum)?;
    let log = g.pw(Pw::CUDNN_POINTWISE_LOG, sum, None, None, rd, f, f)?;
    let stats = g.mem(rd, packed(rd), f)?;
    g.pw_into(Pw::CUDNN_POINTWISE_ADD, max, Some(log), None, stats, f, None)?;
    // The probabilities reach the second matmul in bf16.
    let p = g.virt(sd, bf)?;
    g.pw_into(Pw::CUDNN_POINTWISE_DIV, exp, Some(sum), None, p, f, None)?;
    g.matmul(p, v, o, None, None, None)?;
    let ids = FwdIds {
        q: q.uid,
        k: k.uid,
        v: v.uid,
        o: o.uid,
        stats: stats.uid,
        scale: scale.uid,
        neg_inf: neg_inf.map(|t| t.uid),
    };
    Ok((g, ids))
}

/// The uids the backward variant pack fills.
struct BwdIds {
    q: i64,
    k: i64,
    v: i64,
    o: i64,
    d_o: i64,
    stats: i64,
    dq: i64,
    dk: i64,
    dv: i64,
    scale: i64,
    keep: i64,
    neg_inf: Option<i64>,
    seq: Option<(i64, i64)>,
}

/// The backward graph: `Σ dO·O` per row into the workspace, the probabilities recomputed from
/// the scores and the statistics, `dV = Pᵀ·dO`, `dS = P ⊙ (dO·Vᵀ − rowsum) · scale`,
/// `dK = dSᵀ·Q`, and `dQ = dS·K` accumulated in f32 in the workspace. `seq` adds padding masks
/// of the full lengths (cuDNN up to 9.15 needs them when S is not a multiple of 128);
/// `second_padding` masks again after subtracting the statistics (cuDNN 9.0 to 9.9).
///
/// # Safety
/// cuDNN is loaded.
unsafe fn backward_graph(z: Sizes, seq: bool, second_padding: bool) -> Res<(Graph, BwdIds)> {
    let (bf, f) = (Dt::CUDNN_DATA_BFLOAT16, Dt::CUDNN_DATA_FLOAT);
    let mut g = Graph::default();
    let (qd, sd, rd) = (z.qd(), z.sd(), z.rd());
    let (kt, kts) = z.kt();
    let qs = packed(qd);
    let q = g.mem(qd, qs, bf)?;
    let k = g.mem(kt, kts, bf)?;
    let v = g.mem(kt, kts, bf)?;
    let o = g.mem(qd, qs, bf)?;
    let d_o = g.mem(qd, qs, bf)?;
    let stats = g.mem(rd, packed(rd), f)?;
    let dq = g.mem(qd, qs, bf)?;
    let dk = g.mem(qd, qs, bf)?;
    let dv = g.mem(qd, qs, bf)?;
    let scale = g.scalar()?;
    let keep = g.scalar()?;
    let seq = if seq {
        let i = Dt::CUDNN_DATA_INT32;
        Some((g.mem([z.b, 1, 1, 1], [1; 4], i)?, g.mem([z.b, 1, 1, 1], [1; 4], i)?))
    } else {
        None
    };
    let neg_inf = if z.causal || seq.is_some() { Some(g.scalar()?) } else { None };
    let (sq, skv) = (seq.map(|s| s.0), seq.map(|s| s.1));
    let prod = g.pw(Pw::CUDNN_POINTWISE_MUL, d_o, Some(o), None, qd, f, f)?;
    let rowsum = g.virt(rd, f)?;
    g.reduce(false, prod, rowsum)?;
    let softmax_sum = g.scratch(rd)?;
    g.pw_into(Pw::CUDNN_POINTWISE_MUL, rowsum, Some(keep), None, softmax_sum, f, None)?;
    let s = g.virt(sd, f)?;
    g.matmul(q, k, s, sq, skv, None)?;
    let mut last = g.pw(Pw::CUDNN_POINTWISE_MUL, s, Some(scale), None, sd, f, f)?;
    if let (Some(sl), Some(ninf)) = (seq, neg_inf) {
        last = g.padding(last, sl, ninf)?;
    }
    last = g.pw(Pw::CUDNN_POINTWISE_SUB, last, Some(stats), None, sd, f, f)?;
    if let (true, Some(sl), Some(ninf)) = (second_padding, seq, neg_inf) {
        last = g.padding(last, sl, ninf)?;
    }
    if let (true, Some(ninf)) = (z.causal, neg_inf) {
        last = g.causal(last, ninf)?;
    }
    let p = g.pw(Pw::CUDNN_POINTWISE_EXP, last, None, None, sd, f, f)?;
    let td = [z.b, z.h, z.s, z.s];
    let tst = [sd[1] * sd[2] * sd[3], sd[2] * sd[3], 1, sd[3]];
    let pt = g.reshape(p, td, tst, bf)?;
    g.matmul(pt, d_o, dv, skv, None, sq)?;
    let dpv = g.virt(sd, f)?;
    g.matmul(d_o, v, dpv, sq, skv, None)?;
    let dp = g.pw(Pw::CUDNN_POINTWISE_SUB, dpv, Some(softmax_sum), None, sd, f, f)?;
    let dp = g.pw(Pw::CUDNN_POINTWISE_MUL, dp, Some(p), None, sd, f, f)?;
    let ds = g.pw(Pw::CUDNN_POINTWISE_MUL, dp, Some(scale), None, sd, f, f)?;
    let dst = g.reshape(ds, td, tst, bf)?;
    g.matmul(dst, q, dk, skv, None, sq)?;
    let k_back = g.reshape(k, qd, qs, bf)?;
    let dq_acc = g.scratch(qd)?;
    g.matmul(ds, k_back, dq_acc, sq, None, skv)?;
    g.pw_into(Pw::CUDNN_POINTWISE_IDENTITY, dq_acc, None, None, dq, f, None)?;
    let ids = BwdIds {
        q: q.uid,
        k: k.uid,
        v: v.uid,
        o: o.uid,
        d_o: d_o.uid,
        stats: stats.uid,
        dq: dq.uid,
        dk: dk.uid,
        dv: dv.uid,
        scale: scale.uid,
        keep: keep.uid,
        neg_inf: neg_inf.map(|t| t.uid),
        seq: seq.map(|(a, b)| (a.uid, b.uid)),
    };
    Ok((g, ids))
}

/// A finalized variant pack: `(uid, pointer)` pairs, the plan's scratch tensors in `work`.
///
/// # Safety
/// The pointers stay live for every execution of the pack.
unsafe fn variant_pack(plan: &Plan, ptrs: &[(i64, *mut c_void)], work: *mut c_void) -> Res<Desc> {
    let mut uids: Vec<i64> = ptrs.iter().map(|p| p.0).collect();
    let mut data: Vec<*mut c_void> = ptrs.iter().map(|p| p.1).collect();
    for &(uid, off) in &plan.scratch {
        uids.push(uid);
        data.push(work.cast::<u8>().add(off).cast());
    }
    let pack = create(K::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
    set(pack, A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, Ty::CUDNN_TYPE_INT64, &uids)?;
    set(pack, A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, Ty::CUDNN_TYPE_VOID_PTR, &data)?;
    set(pack, A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE, Ty::CUDNN_TYPE_VOID_PTR, &[work])?;
    finalize(pack).map_err(|e| format!("variant pack finalize: {e:?}"))?;
    Ok(pack)
}

/// The raw side's device buffers.
struct RawBufs<'a> {
    q: &'a GpuRef<bf16>,
    k: &'a GpuRef<bf16>,
    v: &'a GpuRef<bf16>,
    o: &'a GpuRef<bf16>,
    d_o: &'a GpuRef<bf16>,
    dq: &'a GpuRef<bf16>,
    dk: &'a GpuRef<bf16>,
    dv: &'a GpuRef<bf16>,
    stats: &'a GpuRef<f32>,
}

/// The raw side: both plans, their variant packs (made once), and what the packs point at
/// that the raw side owns (the workspace, the full sequence lengths, the by-value scalars).
struct RawAttention {
    fwd: Plan,
    bwd: Plan,
    fwd_pack: Desc,
    bwd_pack: Desc,
    _work: GpuRef<u8>,
    _lens: Option<(GpuRef<i32>, GpuRef<i32>)>,
    /// Scale, the masks' -inf, the keep probability: boxed, so that the packs' pointers stay
    /// put when the struct moves.
    _scalars: Box<[f32; 3]>,
}

impl RawAttention {
    /// # Safety
    /// `handle` is live, bound to stream `s`, its context current on this thread; the buffers
    /// outlive the result.
    unsafe fn new(
        device: &Device,
        s: StreamId,
        handle: sys::cudnnHandle_t,
        z: Sizes,
        version: usize,
        bufs: &RawBufs<'_>,
    ) -> Res<RawAttention> {
        let (fg, fids) = forward_graph(z)?;
        let fwd = fg.plan(handle).map_err(|e| format!("forward: {e}"))?;
        let workaround = z.s % 128 != 0 && version <= 91500;
        let (bg, bids) = backward_graph(z, workaround, workaround && (90000..91000).contains(&version))?;
        let bwd = bg.plan(handle).map_err(|e| format!("backward: {e}"))?;
        let work = device.alloc_zeros::<u8>(s, fwd.work_bytes.max(bwd.work_bytes).max(1))?;
        let wp = work.raw_device_ptr()? as *mut c_void;
        let neg_inf = if version < 91000 { f32::MIN } else { f32::NEG_INFINITY };
        let scalars = Box::new([1.0 / (z.d as f32).sqrt(), neg_inf, 1.0]);
        let host = |i: usize| &scalars[i] as *const f32 as *mut c_void;
        let dev = |x: &GpuRef<bf16>| x.raw_device_ptr().map(|p| p as *mut c_void);
        let stats = bufs.stats.raw_device_ptr()? as *mut c_void;
        let mut fptrs = vec![
            (fids.q, dev(bufs.q)?),
            (fids.k, dev(bufs.k)?),
            (fids.v, dev(bufs.v)?),
            (fids.o, dev(bufs.o)?),
            (fids.stats, stats),
            (fids.scale, host(0)),
        ];
        fptrs.extend(fids.neg_inf.map(|u| (u, host(1))));
        let mut bptrs = vec![
            (bids.q, dev(bufs.q)?),
            (bids.k, dev(bufs.k)?),
            (bids.v, dev(bufs.v)?),
            (bids.o, dev(bufs.o)?),
            (bids.d_o, dev(bufs.d_o)?),
            (bids.stats, stats),
            (bids.dq, dev(bufs.dq)?),
            (bids.dk, dev(bufs.dk)?),
            (bids.dv, dev(bufs.dv)?),
            (bids.scale, host(0)),
            (bids.keep, host(2)),
        ];
        bptrs.extend(bids.neg_inf.map(|u| (u, host(1))));
        let mut lens = None;
        if let Some((a, c)) = bids.seq {
            let full = vec![i32::try_from(z.s)?; usize::try_from(z.b)?];
            let (lq, lkv) = (device.upload(s, &full)?, device.upload(s, &full)?);
            bptrs.extend([(a, lq.raw_device_ptr()? as *mut c_void), (c, lkv.raw_device_ptr()? as *mut c_void)]);
            lens = Some((lq, lkv));
        }
        let fwd_pack = variant_pack(&fwd, &fptrs, wp)?;
        let bwd_pack = variant_pack(&bwd, &bptrs, wp)?;
        Ok(RawAttention { fwd, bwd, fwd_pack, bwd_pack, _work: work, _lens: lens, _scalars: scalars })
    }

    /// The forward plan, then the backward one when `backward`.
    ///
    /// # Safety
    /// `handle` made the plans and is bound to the stream the buffers are used on, its context
    /// current; the buffers are live.
    unsafe fn run(&self, handle: sys::cudnnHandle_t, backward: bool) -> Res<()> {
        check(sys::cudnnBackendExecute(handle, self.fwd.plan, self.fwd_pack), "cudnnBackendExecute (forward)")?;
        if backward {
            check(sys::cudnnBackendExecute(handle, self.bwd.plan, self.bwd_pack), "cudnnBackendExecute (backward)")?;
        }
        Ok(())
    }
}

fn parse(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() -> Res<()> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let causal = !all.iter().any(|a| a == "--full");
    let args: Vec<String> = all.into_iter().filter(|a| !a.starts_with('-')).collect();
    let (b, h, sl, d) = (parse(&args, 0, 4), parse(&args, 1, 16), parse(&args, 2, 4096), parse(&args, 3, 128));
    let iters = parse(&args, 4, 10);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-cudnn_attention needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let mut hs = Handles::new(&device, s)?;
    if let Err(e) = hs.cudnn() {
        println!("bench-cudnn_attention needs cuDNN: {e}");
        return Ok(());
    }
    // SAFETY: no preconditions; cuDNN is loaded (a handle exists).
    let version = unsafe { sys::cudnnGetVersion() };
    let n = b * h * sl * d;
    let rows = b * h * sl;
    let fill =
        |seed: usize| (0..n).map(|i| bf16::from_f32((((i * 7 + seed) % 61) as f32 - 30.0) / 64.0)).collect::<Vec<_>>();
    let up = |seed: usize| device.upload(s, &fill(seed));
    let (q, k, v, o, d_o) = (up(1)?, up(2)?, up(3)?, device.alloc_zeros::<bf16>(s, n)?, up(4)?);
    let (dq, dk, dv) =
        (device.alloc_zeros::<bf16>(s, n)?, device.alloc_zeros::<bf16>(s, n)?, device.alloc_zeros::<bf16>(s, n)?);
    let stats = device.alloc_zeros::<f32>(s, rows)?;
    // The raw path's own buffers, used only by raw calls on the same stream.
    let (rq, rk, rv, ro, rdo) = (up(1)?, up(2)?, up(3)?, device.alloc_zeros::<bf16>(s, n)?, up(4)?);
    let (rdq, rdk, rdv) =
        (device.alloc_zeros::<bf16>(s, n)?, device.alloc_zeros::<bf16>(s, n)?, device.alloc_zeros::<bf16>(s, n)?);
    let rstats = device.alloc_zeros::<f32>(s, rows)?;
    // SAFETY: (1) the raw side touches only memory of its own, made on and used on this one
    // stream, and synchronizes it before each timing ends; (2) memory cusched's ops use is used
    // only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    stream.context().bind_to_thread()?;
    let cu = stream.cu_stream() as sys::cudaStream_t;
    let mut handle: sys::cudnnHandle_t = std::ptr::null_mut();
    // SAFETY: the context is bound on this thread and the stream outlives the handle.
    unsafe {
        check(sys::cudnnCreate(&mut handle), "cudnnCreate")?;
        check(sys::cudnnSetStream(handle, cu), "cudnnSetStream")?;
    }

    let z = Sizes { b: b as i64, h: h as i64, s: sl as i64, d: d as i64, causal };
    let bufs = RawBufs { q: &rq, k: &rk, v: &rv, o: &ro, d_o: &rdo, dq: &rdq, dk: &rdk, dv: &rdv, stats: &rstats };
    // SAFETY: the handle's context is current on this thread; the buffers outlive `raw`.
    let raw = match unsafe { RawAttention::new(&device, s, handle, z, version, &bufs) } {
        Ok(r) => Some(r),
        Err(e) => {
            println!("the raw graphs could not be built ({e}): cusched's side alone below");
            None
        }
    };
    let dims = [b, h, sl, d];
    let t = |buf| AttnTensor::bhsd(buf, dims);
    let attn = Attention::new().causal(causal);
    let (tq, tk, tv, to) = (t(&q), t(&k), t(&v), t(&o));
    let grads = SdpaGrads { d_o: t(&d_o), dq: t(&dq), dk: t(&dk), dv: t(&dv) };
    let mut fwd_flops = 4.0 * (b * h) as f64 * (sl as f64).powi(2) * d as f64;
    if causal {
        fwd_flops /= 2.0;
    }
    println!(
        "scaled dot-product attention, B {b}, H {h}, S {sl}, D {d}, bf16, {}, cuDNN {version}: {:.1} GFLOP forward",
        if causal { "causal" } else { "no mask" },
        fwd_flops / 1e9
    );
    if let Some(r) = &raw {
        println!(
            "raw engines: forward {} ({}), backward {} ({}); cusched keeps the first that finalizes in the same order",
            r.fwd.engine, r.fwd.rank, r.bwd.engine, r.bwd.rank
        );
    }
    println!("| pass | raw engine | cusched | raw cuDNN | ratio (raw/cusched time) |");
    println!("| --- | --- | --- | --- | --- |");
    for backward in [false, true] {
        let flops = if backward { 3.5 * fwd_flops } else { fwd_flops };
        let (best_ours, best_raw) = interleaved(
            iters,
            || {
                let dnn = hs.cudnn()?;
                dnn.sdpa_forward(&attn, &tq, &tk, &tv, &to, Some(&stats))?;
                if backward {
                    dnn.sdpa_backward(&attn, &tq, &tk, &tv, &to, &stats, &grads)?;
                }
                Ok(())
            },
            || match &raw {
                // SAFETY: the raw buffers and workspace are live and used only on this stream.
                Some(r) => unsafe { r.run(handle, backward) },
                None => Ok(()),
            },
            || Ok(device.synchronize(s)?),
            || Ok(stream.synchronize()?),
        )?;
        let ours = format!("{:.3} ms ({:.1} TFLOP/s)", best_ours * 1e3, flops / best_ours / 1e12);
        let (engine, theirs, ratio) = match &raw {
            Some(r) => (
                if backward { format!("{} + {}", r.fwd.engine, r.bwd.engine) } else { r.fwd.engine.to_string() },
                format!("{:.3} ms ({:.1} TFLOP/s)", best_raw * 1e3, flops / best_raw / 1e12),
                format!("{:.3}x", best_raw / best_ours),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let pass = if backward { "forward + backward" } else { "forward" };
        println!("| {pass} | {engine} | {ours} | {theirs} | {ratio} |");
    }
    if raw.is_some() {
        same_result(&device, s, &o, &ro, &dq, &rdq)?;
    }
    plan_cost(&device, s, &mut hs, handle, causal)
}

/// The largest difference between cusched's and the raw side's `o` and `dq` (the same engine on
/// the same inputs gives the same bits).
fn same_result(
    device: &Device,
    s: StreamId,
    o: &GpuRef<bf16>,
    ro: &GpuRef<bf16>,
    dq: &GpuRef<bf16>,
    rdq: &GpuRef<bf16>,
) -> Res<()> {
    device.synchronize(s)?;
    let diff = |a: &GpuRef<bf16>, b: &GpuRef<bf16>| -> Res<f32> {
        let (a, b) = (a.download(s)?, b.download(s)?);
        Ok(a.iter().zip(&b).map(|(x, y)| (x.to_f32() - y.to_f32()).abs()).fold(0.0, f32::max))
    };
    println!("largest difference cusched/raw: o {:e}, dq {:e}", diff(o, ro)?, diff(dq, rdq)?);
    Ok(())
}

/// Host time of one `sdpa_forward` call (recording only, not the GPU's work): the first call of
/// each of several new shapes (graph, heuristics and plan made) against the same calls once
/// their plans are cached; then the raw graph and plan building of each shape.
fn plan_cost(device: &Device, s: StreamId, h: &mut Handles, handle: sys::cudnnHandle_t, causal: bool) -> Res<()> {
    const SHAPES: usize = 8;
    let (b, heads, d) = (1usize, 2usize, 64usize);
    let max = b * heads * 128 * SHAPES * d;
    let bufs = (0..4).map(|_| device.alloc_zeros::<bf16>(s, max)).collect::<Result<Vec<_>, _>>()?;
    let stats = device.alloc_zeros::<f32>(s, b * heads * 128 * SHAPES)?;
    let attn = Attention::new().causal(causal);
    let made_before = h.cudnn()?.graph_plans_made();
    let mut round = |label: &str| -> Res<f64> {
        let mut total = 0.0;
        for i in 1..=SHAPES {
            let dims = [b, heads, 128 * i, d];
            let t = |buf| AttnTensor::bhsd(buf, dims);
            let dnn = h.cudnn()?;
            let start = Instant::now();
            dnn.sdpa_forward(&attn, &t(&bufs[0]), &t(&bufs[1]), &t(&bufs[2]), &t(&bufs[3]), Some(&stats))?;
            total += start.elapsed().as_secs_f64();
            device.synchronize(s)?;
        }
        let per = total / SHAPES as f64;
        println!("| {label} | {:.2} µs |", per * 1e6);
        Ok(per)
    };
    println!(
        "\nattention plans, sdpa_forward host time per call (B {b}, H {heads}, S 128..={}, D {d}, bf16):",
        128 * SHAPES
    );
    println!("| call | host time |");
    println!("| --- | --- |");
    let first = round("first call of a new shape (plan made)")?;
    let cached = round("same shapes again (plan cached)")?;
    let mut made = 0.0;
    let mut failed = None;
    for i in 1..=SHAPES {
        let z = Sizes { b: b as i64, h: heads as i64, s: (128 * i) as i64, d: d as i64, causal };
        let start = Instant::now();
        // SAFETY: the handle's context is current on this thread.
        if let Err(e) = unsafe { forward_graph(z).and_then(|(g, _)| g.plan(handle)) } {
            failed = Some(format!("S {}: {e}", 128 * i));
            break;
        }
        made += start.elapsed().as_secs_f64();
    }
    match failed {
        None => println!("| raw: graph, heuristics and plan of a new shape | {:.2} µs |", made / SHAPES as f64 * 1e6),
        Some(e) => println!("| raw: graph, heuristics and plan of a new shape | no plan ({e}) |"),
    }
    println!(
        "plans made: {}; first/cached {:.1}x",
        h.cudnn()?.graph_plans_made() - made_before,
        first / cached.max(f64::MIN_POSITIVE)
    );
    Ok(())
}
