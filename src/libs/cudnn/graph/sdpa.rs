//! Scaled dot-product attention forward: `O = softmax(Q·Kᵀ·scale + mask)·V` per batch and
//! head, the graph cuDNN's fused flash-attention engine recognizes (matmul, scale, padding and
//! causal masks from generated indices, the softmax as max / sub / exp / sum / div with the
//! row statistics from log and add, optional dropout, matmul).

use super::builder::{Dt, GraphSpec, Pw, Red, Uid};
use super::sdpa_fp8::Fp8Attention;
use super::Attention;
use super::{sim, AttnTensor};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::tensor::DnnElement;
use crate::libs::cudnn::{Cudnn, NAME};
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::{Element, GpuRef};
use crate::track::Access;
use std::ffi::c_void;

/// The checked sizes of one attention: batch, query heads, key/value heads, query and key
/// sequence lengths, head dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub b: usize,
    pub h: usize,
    pub h_kv: usize,
    pub s_q: usize,
    pub s_kv: usize,
    pub d: usize,
}

/// The graph element type of `T`: f16 or bf16; f32 is refused (the fused engine takes half
/// types only).
pub(crate) fn half_type<T: DnnElement>(q: &AttnTensor<'_, T>) -> Result<Dt> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<half::f16>() {
        Ok(Dt::F16)
    } else if t == TypeId::of::<half::bf16>() {
        Ok(Dt::Bf16)
    } else {
        Err(Error::Unsupported {
            library: NAME,
            what: format!("attention on f32 tensors {:?}", q.dims),
            hint: "cuDNN's fused attention takes f16 or bf16 Q, K, V and O: convert them".into(),
        })
    }
}

/// Checks Q, K, V and O against each other; returns the sizes.
pub(crate) fn check_shapes<T: Element>(
    q: &AttnTensor<'_, T>,
    k: &AttnTensor<'_, T>,
    v: &AttnTensor<'_, T>,
    o: &AttnTensor<'_, T>,
) -> Result<Sizes> {
    for (arg, t) in [("q", q), ("k", k), ("v", v), ("o", o)] {
        t.check(arg)?;
    }
    let [b, h, s_q, d] = q.dims;
    let [kb, h_kv, s_kv, kd] = k.dims;
    if kb != b {
        return Err(Error::invalid("k", format!("has batch {kb}; `q` has {b}")));
    }
    if kd != d {
        return Err(Error::invalid("k", format!("has head dim {kd}; `q` has {d}")));
    }
    if h % h_kv != 0 {
        return Err(Error::invalid(
            "k",
            format!("has {h_kv} heads, which do not divide `q`'s {h} (grouped-query heads share K and V)"),
        ));
    }
    if v.dims != k.dims {
        return Err(Error::invalid("v", format!("is {:?}; it must be `k`'s {:?}", v.dims, k.dims)));
    }
    if o.dims != q.dims {
        return Err(Error::invalid("o", format!("is {:?}; it must be `q`'s {:?}", o.dims, q.dims)));
    }
    if d % 8 != 0 || d > 128 {
        return Err(Error::Unsupported {
            library: NAME,
            what: format!("attention with head dim {d}"),
            hint: "the fused flash-attention engine takes head dims that are multiples of 8 up to 128 (64 and 128 \
                   are the usual ones): pad the head dim"
                .into(),
        });
    }
    for (arg, t) in [("q", q), ("k", k), ("v", v), ("o", o)] {
        if t.strides[3] != 1 {
            return Err(Error::invalid(arg, format!("has head-dim stride {}; it must be 1", t.strides[3])));
        }
    }
    Ok(Sizes { b, h, h_kv, s_q, s_kv, d })
}

/// The row statistics' length: `B·H·S_q`.
pub(crate) fn stats_len(z: &Sizes) -> Option<usize> {
    z.b.checked_mul(z.h)?.checked_mul(z.s_q)
}

/// Checks the options' device operands (sequence lengths, dropout seed and offset) and the
/// dropout probability.
pub(crate) fn check_options(attn: &Attention<'_>, z: &Sizes) -> Result<()> {
    if let Some(s) = attn.scale {
        if !s.is_finite() {
            return Err(Error::invalid("attn", format!("scale {s} must be finite")));
        }
    }
    if let Some(p) = &attn.padding {
        validate::covers("seq_len_q", p.q, Some(z.b), &format!("one length per batch ({})", z.b))?;
        validate::covers("seq_len_kv", p.kv, Some(z.b), &format!("one length per batch ({})", z.b))?;
    }
    if let Some(dr) = &attn.dropout {
        if !(0.0..1.0).contains(&dr.probability) {
            return Err(Error::invalid("dropout", format!("probability {} is not in [0, 1)", dr.probability)));
        }
        validate::covers("seed", dr.seed, Some(1), "one seed")?;
        validate::covers("offset", dr.offset, Some(1), "one offset")?;
    }
    Ok(())
}

fn dims64(v: [usize; 4]) -> [i64; 4] {
    v.map(|x| x as i64)
}

/// The uids of a forward graph's tensors in memory (or by value).
pub(crate) struct FwdUids {
    pub q: Uid,
    pub k: Uid,
    pub v: Uid,
    pub o: Uid,
    pub stats: Uid,
    pub scale: Uid,
    pub neg_inf: Option<Uid>,
    pub seq: Option<(Uid, Uid)>,
    pub rng: Option<(Uid, Uid, Uid)>,
    pub fp8: Option<Fp8Uids>,
}

/// An FP8 graph's scaling tensors (`[1,1,1,1]` f32 in memory), in [`Fp8Attention`]'s order:
/// the descales of Q, K, V and S, the scales of S and O, then the two amax outputs.
pub(crate) struct Fp8Uids {
    pub all: [Uid; 8],
}

/// The scores' masks and softmax of a graph, from the scaled scores `s` (`[B,H,Sq,Skv]` f32):
/// returns the softmax output and the statistics' uid. Shared by forward and backward.
pub(crate) fn masked_softmax(
    g: &mut GraphSpec,
    z: &Sizes,
    s: Uid,
    causal: bool,
    seq: Option<(Uid, Uid)>,
    neg_inf: Option<Uid>,
) -> (Uid, Uid) {
    let sd = dims64([z.b, z.h, z.s_q, z.s_kv]);
    let mut last = s;
    if let (Some((sq, skv)), Some(ninf)) = (seq, neg_inf) {
        let row = g.pw(Pw::GenIndex(2), last, None, None, &sd, Dt::I32, Dt::I32);
        let col = g.pw(Pw::GenIndex(3), last, None, None, &sd, Dt::I32, Dt::I32);
        let rm = g.pw(Pw::CmpLt, row, Some(sq), None, &sd, Dt::Bool, Dt::Bool);
        let cm = g.pw(Pw::CmpLt, col, Some(skv), None, &sd, Dt::Bool, Dt::Bool);
        let m = g.pw(Pw::And, rm, Some(cm), None, &sd, Dt::Bool, Dt::Bool);
        last = g.pw(Pw::Select, last, Some(ninf), Some(m), &sd, Dt::F32, Dt::F32);
    }
    if let (true, Some(ninf)) = (causal, neg_inf) {
        let row = g.pw(Pw::GenIndex(2), last, None, None, &sd, Dt::I32, Dt::F32);
        let col = g.pw(Pw::GenIndex(3), last, None, None, &sd, Dt::I32, Dt::F32);
        let m = g.pw(Pw::CmpGe, row, Some(col), None, &sd, Dt::Bool, Dt::Bool);
        last = g.pw(Pw::Select, last, Some(ninf), Some(m), &sd, Dt::F32, Dt::F32);
    }
    let rd = dims64([z.b, z.h, z.s_q, 1]);
    let max = g.virt(&rd, Dt::F32);
    g.ops.push(super::builder::Op::Reduction { mode: Red::Max, x: last, y: max });
    let sub = g.pw(Pw::Sub, last, Some(max), None, &sd, Dt::F32, Dt::F32);
    let exp = g.pw(Pw::Exp, sub, None, None, &sd, Dt::F32, Dt::F32);
    let sum = g.virt(&rd, Dt::F32);
    g.ops.push(super::builder::Op::Reduction { mode: Red::Sum, x: exp, y: sum });
    let log = g.pw(Pw::Log, sum, None, None, &rd, Dt::F32, Dt::F32);
    let stats = g.pw(Pw::Add, max, Some(log), None, &rd, Dt::F32, Dt::F32);
    let p = g.pw(Pw::Div, exp, Some(sum), None, &sd, Dt::F32, Dt::F32);
    (p, stats)
}

/// The forward graph of `attn` over tensors of type `dt` with the given strides.
///
/// With `fp8`, the graph of cuDNN's FP8 engine: Q, K, V and O of the FP8 type `dt`, the scores
/// multiplied by Q's and K's descales, the probabilities' amax taken and the probabilities
/// scaled by S's scale into FP8 for the second matmul, whose result is multiplied by S's and
/// V's descales, its amax taken, and scaled by O's scale into O.
pub(crate) fn forward_graph(
    attn: &Attention<'_>,
    z: &Sizes,
    dt: Dt,
    strides: [[usize; 4]; 4],
    stats_out: bool,
    fp8: bool,
) -> (GraphSpec, FwdUids) {
    let mut g = GraphSpec::default();
    let [qs, ks, vs, os] = strides.map(dims64);
    let q = g.tensor(&dims64([z.b, z.h, z.s_q, z.d]), &qs, dt);
    // Kᵀ: the same memory seen as [B, Hkv, D, Skv].
    let k = g.tensor(&dims64([z.b, z.h_kv, z.d, z.s_kv]), &[ks[0], ks[1], ks[3], ks[2]], dt);
    let v = g.tensor(&dims64([z.b, z.h_kv, z.s_kv, z.d]), &vs, dt);
    let o = g.tensor(&dims64([z.b, z.h, z.s_q, z.d]), &os, dt);
    let scale = g.scalar(Dt::F32);
    let seq = attn.padding.as_ref().map(|_| {
        let bd = [z.b as i64, 1, 1, 1];
        (g.tensor(&bd, &[1, 1, 1, 1], Dt::I32), g.tensor(&bd, &[1, 1, 1, 1], Dt::I32))
    });
    let neg_inf = (attn.causal || seq.is_some()).then(|| g.scalar(Dt::F32));
    let sd = dims64([z.b, z.h, z.s_q, z.s_kv]);
    let s = g.virt(&sd, Dt::F32);
    let (mo, no) = match seq {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    g.ops.push(super::builder::Op::Matmul { a: q, b: k, c: s, m_override: mo, n_override: no, k_override: None });
    let mut scaled = g.pw(Pw::Mul, s, Some(scale), None, &sd, Dt::F32, Dt::F32);
    let one = [1i64, 1, 1, 1];
    let fp8 = fp8.then(|| Fp8Uids { all: [(); 8].map(|()| g.tensor(&one, &one, Dt::F32)) });
    if let Some(f) = &fp8 {
        let [dq, dk, ..] = f.all;
        scaled = g.pw(Pw::Mul, scaled, Some(dq), None, &sd, Dt::F32, Dt::F32);
        scaled = g.pw(Pw::Mul, scaled, Some(dk), None, &sd, Dt::F32, Dt::F32);
    }
    let (mut p, stats) = masked_softmax(&mut g, z, scaled, attn.causal, seq, neg_inf);
    if stats_out {
        g.materialize(stats, Dt::F32);
    }
    let mut rng = None;
    if let Some(dr) = attn.dropout.as_ref().filter(|d| d.probability > 0.0) {
        let one = [1i64, 1, 1, 1];
        let seed = g.tensor(&one, &one, Dt::I64);
        let offset = g.tensor(&one, &one, Dt::I64);
        let mask = g.virt(&sd, Dt::F32);
        g.ops.push(super::builder::Op::Rng { seed, offset, y: mask, keep: 1.0 - f64::from(dr.probability) });
        let dropped = g.pw(Pw::Mul, p, Some(mask), None, &sd, Dt::F32, Dt::F32);
        let inv = g.scalar(Dt::F32);
        p = g.pw(Pw::Mul, dropped, Some(inv), None, &sd, Dt::F32, Dt::F32);
        rng = Some((seed, offset, inv));
    }
    let Some(f) = fp8 else {
        // The second matmul takes its A operand in the I/O type.
        g.retype(p, dt);
        g.ops.push(super::builder::Op::Matmul { a: p, b: v, c: o, m_override: mo, n_override: None, k_override: no });
        return (g, FwdUids { q, k, v, o, stats, scale, neg_inf, seq, rng, fp8: None });
    };
    let [_, _, dv, ds, scale_s, scale_o, amax_s, amax_o] = f.all;
    g.ops.push(super::builder::Op::Reduction { mode: Red::Amax, x: p, y: amax_s });
    let p8 = g.pw(Pw::Mul, p, Some(scale_s), None, &sd, dt, Dt::F32);
    let od = dims64([z.b, z.h, z.s_q, z.d]);
    let c = g.virt(&od, Dt::F32);
    g.ops.push(super::builder::Op::Matmul { a: p8, b: v, c, m_override: mo, n_override: None, k_override: no });
    let c = g.pw(Pw::Mul, c, Some(ds), None, &od, Dt::F32, Dt::F32);
    let c = g.pw(Pw::Mul, c, Some(dv), None, &od, Dt::F32, Dt::F32);
    g.ops.push(super::builder::Op::Pointwise { mode: Pw::Mul, x: c, b: Some(scale_o), t: None, y: o, prec: Dt::F32 });
    g.ops.push(super::builder::Op::Reduction { mode: Red::Amax, x: c, y: amax_o });
    (g, FwdUids { q, k, v, o, stats, scale, neg_inf, seq, rng, fp8: Some(f) })
}

impl Cudnn {
    /// Scaled dot-product attention forward, `o = softmax(q·kᵀ·scale + mask)·v`, on cuDNN's
    /// fused flash-attention engine: `q` and `o` `[B, H, Sq, D]`, `k` and `v`
    /// `[B, Hkv, Skv, D]` (`Hkv` dividing `H`: grouped-query heads), f16 or bf16, accumulated in
    /// f32. `attn` gives the scale (`1/√D` by default), the causal mask, the padding masks
    /// (per-batch sequence lengths) and dropout. `stats` (training), when given, receives each
    /// row's logsumexp, f32 `[B, H, Sq, 1]`, for [`sdpa_backward`](Self::sdpa_backward).
    /// With padding masks, the rows past a batch's query length are not defined (the
    /// simulator writes zeros there).
    ///
    /// ```
    /// use cusched::cudnn::{Attention, AttnTensor};
    /// use cusched::half::f16;
    /// use cusched::{Device, Handles, SimConfig};
    ///
    /// let device = Device::sim(SimConfig::default())?;
    /// let s = device.new_stream()?;
    /// let mut h = Handles::new(&device, s)?;
    /// // One head, two queries and two keys of dim 8; the second key matches the queries.
    /// let q = device.upload(s, &[f16::ONE; 16])?;
    /// let k = device.upload(s, &(0..16).map(|i| f16::from_f32(if i < 8 { 0.0 } else { 4.0 })).collect::<Vec<_>>())?;
    /// let v = device.upload(s, &(0..16).map(|i| f16::from_f32((i / 8) as f32)).collect::<Vec<_>>())?;
    /// let o = device.alloc_zeros::<f16>(s, 16)?;
    /// let t = |buf| AttnTensor::bhsd(buf, [1, 1, 2, 8]);
    /// // Causal: the first query sees only the first key, whose value rows are 0.
    /// let attn = Attention::new().causal(true);
    /// h.cudnn()?.sdpa_forward(&attn, &t(&q), &t(&k), &t(&v), &t(&o), None)?.wait()?;
    /// let o = o.download(s)?;
    /// assert_eq!(o[0], f16::ZERO);
    /// assert!(o[8].to_f32() > 0.99);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn sdpa_forward<T: DnnElement>(
        &mut self,
        attn: &Attention<'_>,
        q: &AttnTensor<'_, T>,
        k: &AttnTensor<'_, T>,
        v: &AttnTensor<'_, T>,
        o: &AttnTensor<'_, T>,
        stats: Option<&GpuRef<f32>>,
    ) -> Result<Completion<()>> {
        let dt = half_type(q)?;
        let z = check_shapes(q, k, v, o)?;
        check_options(attn, &z)?;
        if let Some(st) = stats {
            validate::covers(
                "stats",
                st,
                stats_len(&z),
                &format!("[{}, {}, {}, 1] f32 row statistics", z.b, z.h, z.s_q),
            )?;
        }
        let rec = self.forward_recorder(attn, [q, k, v, o], stats, None)?;
        let scale = attn.scale.unwrap_or(1.0 / (z.d as f32).sqrt());
        if self.op.device.is_simulated() {
            let job = sim_job(attn, &z, f64::from(scale), [q, k, v])?;
            let out = (o.strides, o.buf.sim_data()?);
            let st = stats.map(|s| s.sim_data()).transpose()?;
            return self.op.run_sim(rec, Vec::new(), move || job.forward(out, st));
        }
        self.run_forward(rec, attn, &z, dt, [q, k, v, o], stats, None)
    }
}

/// The simulator's attention job over `q`, `k` and `v`.
pub(crate) fn sim_job<T: Element + crate::libs::cudnn::tensor::sealed::Sealed>(
    attn: &Attention<'_>,
    z: &Sizes,
    scale: f64,
    [q, k, v]: [&AttnTensor<'_, T>; 3],
) -> Result<sim::Attention<T>> {
    Ok(sim::Attention {
        z: *z,
        scale,
        causal: attn.causal,
        q: (q.strides, q.buf.sim_data()?),
        k: (k.strides, k.buf.sim_data()?),
        v: (v.strides, v.buf.sim_data()?),
        seq: attn.padding.as_ref().map(|p| Ok::<_, Error>((p.q.sim_data()?, p.kv.sim_data()?))).transpose()?,
        dropout: attn
            .dropout
            .as_ref()
            .filter(|d| d.probability > 0.0)
            .map(|d| Ok::<_, Error>((d.probability, d.seed.sim_data()?, d.offset.sim_data()?)))
            .transpose()?,
    })
}

impl Cudnn {
    /// The recorder of a forward op: every operand checked for aliasing and declared (the
    /// FP8 scales read, their amax outputs written).
    pub(crate) fn forward_recorder<T: Element>(
        &self,
        attn: &Attention<'_>,
        [q, k, v, o]: [&AttnTensor<'_, T>; 4],
        stats: Option<&GpuRef<f32>>,
        fp8: Option<&Fp8Attention<'_>>,
    ) -> Result<crate::recorder::LaunchRecorder> {
        let mut uses =
            vec![("q", q.buf.id(), false), ("k", k.buf.id(), false), ("v", v.buf.id(), false), ("o", o.buf.id(), true)];
        if let Some(st) = stats {
            uses.push(("stats", st.id(), true));
        }
        if let Some(p) = &attn.padding {
            uses.extend([("seq_len_q", p.q.id(), false), ("seq_len_kv", p.kv.id(), false)]);
        }
        if let Some(dr) = &attn.dropout {
            uses.extend([("seed", dr.seed.id(), false), ("offset", dr.offset.id(), false)]);
        }
        let scales = fp8.map(Fp8Attention::operands);
        for &(arg, buf, written) in scales.iter().flatten() {
            uses.push((arg, buf.id(), written));
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder(if fp8.is_some() { "sdpa_forward_fp8" } else { "sdpa_forward" });
        record(&mut rec, "q", q.buf, Access::Read)?;
        record(&mut rec, "k", k.buf, Access::Read)?;
        record(&mut rec, "v", v.buf, Access::Read)?;
        record(&mut rec, "o", o.buf, Access::Write)?;
        if let Some(st) = stats {
            record(&mut rec, "stats", st, Access::Write)?;
        }
        if let Some(p) = &attn.padding {
            record(&mut rec, "seq_len_q", p.q, Access::Read)?;
            record(&mut rec, "seq_len_kv", p.kv, Access::Read)?;
        }
        if let Some(dr) = &attn.dropout {
            record(&mut rec, "seed", dr.seed, Access::Read)?;
            record(&mut rec, "offset", dr.offset, Access::Read)?;
        }
        for (arg, buf, written) in scales.into_iter().flatten() {
            record(&mut rec, arg, buf, if written { Access::Write } else { Access::Read })?;
        }
        Ok(rec)
    }

    /// A forward graph's plan found or made, and executed on the op's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_forward<T: Element>(
        &mut self,
        mut rec: crate::recorder::LaunchRecorder,
        attn: &Attention<'_>,
        z: &Sizes,
        dt: Dt,
        [q, k, v, o]: [&AttnTensor<'_, T>; 4],
        stats: Option<&GpuRef<f32>>,
        fp8: Option<&Fp8Attention<'_>>,
    ) -> Result<Completion<()>> {
        let z = *z;
        let scale = attn.scale.unwrap_or(1.0 / (z.d as f32).sqrt());
        let strides = [q.strides, k.strides, v.strides, o.strides];
        self.op.bound_stream()?;
        let lowest = super::plan::version() < 91000;
        let (spec, uids) = forward_graph(attn, &z, dt, strides, stats.is_some(), fp8.is_some());
        let Some(handle) = self.raw.as_ref() else { return Err(self.op.unavailable_on_sim()) };
        let plan = self.graphs.get_or_make(spec, &self.op, |g| {
            // SAFETY: the handle is live, its context bound above; `&mut self` keeps it to
            // this thread.
            unsafe { g.plan(handle.get()) }?.ok_or_else(|| Error::Unsupported {
                library: NAME,
                what: format!(
                    "attention of {z:?} in {dt:?} (causal {}, padded {})",
                    attn.causal,
                    attn.padding.is_some()
                ),
                hint: "no engine of this cuDNN supports the graph; try head dim 64 or 128 and packed strides".into(),
            })
        })?;
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|b| b.raw_device_ptr()).transpose()?;
        let neg_inf_value: f32 = if lowest { f32::MIN } else { f32::NEG_INFINITY };
        let inv_keep: f32 = attn.dropout.as_ref().map_or(1.0, |d| 1.0 / (1.0 - d.probability));
        let mut ptrs: Vec<(Uid, *mut c_void)> =
            vec![(uids.q, dptr(q.buf)?), (uids.k, dptr(k.buf)?), (uids.v, dptr(v.buf)?), (uids.o, dptr(o.buf)?)];
        if let Some(st) = stats {
            ptrs.push((uids.stats, dptr(st)?));
        }
        if let (Some((a, b)), Some(p)) = (uids.seq, &attn.padding) {
            ptrs.extend([(a, dptr(p.q)?), (b, dptr(p.kv)?)]);
        }
        if let (Some((s, off, _)), Some(dr)) = (uids.rng, &attn.dropout) {
            ptrs.extend([(s, dptr(dr.seed)?), (off, dptr(dr.offset)?)]);
        }
        if let (Some(u), Some(f)) = (&uids.fp8, fp8) {
            for (uid, (_, buf, _)) in u.all.iter().zip(f.operands()) {
                ptrs.push((*uid, dptr(buf)?));
            }
        }
        self.op.run(rec, Vec::new(), || {
            // The by-value scalars live on this frame for the execute call, which reads them.
            let (scale, neg_inf_value, inv_keep) = (scale, neg_inf_value, inv_keep);
            let mut ptrs = ptrs;
            ptrs.push((uids.scale, &scale as *const f32 as *mut c_void));
            if let Some(n) = uids.neg_inf {
                ptrs.push((n, &neg_inf_value as *const f32 as *mut c_void));
            }
            if let Some((_, _, inv)) = uids.rng {
                ptrs.push((inv, &inv_keep as *const f32 as *mut c_void));
            }
            let work = work.map_or(std::ptr::null_mut(), |w| w as *mut c_void);
            // SAFETY: (1) the handle made the plan, was bound to this stream when made, and the
            // op path made its context current; (2) every tensor of the graph in memory has its
            // buffer here, validated against its shape and strides and fenced by preflight, and
            // the by-value scalars point at live f32 values on this frame; (3) the workspace,
            // declared read-write, holds the plan's need and serves one op at a time.
            unsafe { plan.execute(handle.get(), &ptrs, work) }
        })
    }
}
