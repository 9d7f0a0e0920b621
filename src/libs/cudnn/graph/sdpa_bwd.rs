//! Scaled dot-product attention backward: `dq`, `dk`, `dv` from `q`, `k`, `v`, the forward
//! op's `o` and row statistics, and `do`, as the graph cuDNN's fused flash-attention backward
//! engine recognizes (the probabilities recomputed from the statistics, `dO·O` per row kept in
//! the workspace, `dQ` accumulated in f32 there; grouped-query heads' `dK` and `dV` summed
//! over each group).

use super::builder::{packed, Dt, GraphSpec, Op, Pw, Red, Uid};
use super::sdpa::{check_options, check_shapes, half_type, stats_len, Sizes};
use super::{sim, Attention, AttnTensor};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::tensor::DnnElement;
use crate::libs::cudnn::{Cudnn, NAME};
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

fn d64(v: [usize; 4]) -> [i64; 4] {
    v.map(|x| x as i64)
}

/// The uids of a backward graph's tensors in memory (or by value).
pub(crate) struct BwdUids {
    pub q: Uid,
    pub k: Uid,
    pub v: Uid,
    pub o: Uid,
    pub d_o: Uid,
    pub stats: Uid,
    pub dq: Uid,
    pub dk: Uid,
    pub dv: Uid,
    pub scale: Uid,
    pub keep: Uid,
    pub neg_inf: Option<Uid>,
    pub seq: Option<(Uid, Uid)>,
    pub rng: Option<(Uid, Uid, Uid)>,
}

/// The backward graph. `strides` are q, k, v, o, do, dq, dk, dv's; `seq_lens` adds padding
/// masks of the full lengths where the user gave none (a workaround older engines need).
pub(crate) fn backward_graph(
    attn: &Attention<'_>,
    z: &Sizes,
    dt: Dt,
    strides: [[usize; 4]; 8],
    seq_lens: bool,
    second_padding: bool,
) -> (GraphSpec, BwdUids) {
    let mut g = GraphSpec::default();
    let [qs, ks, vs, os, dos, dqs, dks, dvs] = strides.map(d64);
    let qd = d64([z.b, z.h, z.s_q, z.d]);
    let kd = d64([z.b, z.h_kv, z.s_kv, z.d]);
    let kt = d64([z.b, z.h_kv, z.d, z.s_kv]);
    let sd = d64([z.b, z.h, z.s_q, z.s_kv]);
    let rd = d64([z.b, z.h, z.s_q, 1]);
    let q = g.tensor(&qd, &qs, dt);
    let k = g.tensor(&kt, &[ks[0], ks[1], ks[3], ks[2]], dt);
    let v = g.tensor(&kt, &[vs[0], vs[1], vs[3], vs[2]], dt);
    let o = g.tensor(&qd, &os, dt);
    let d_o = g.tensor(&qd, &dos, dt);
    let stats = g.tensor(&rd, &packed(&rd), Dt::F32);
    let dq = g.tensor(&qd, &dqs, dt);
    let dk = g.tensor(&kd, &dks, dt);
    let dv = g.tensor(&kd, &dvs, dt);
    let scale = g.scalar(Dt::F32);
    let keep = g.scalar(Dt::F32);
    let seq = (attn.padding.is_some() || seq_lens).then(|| {
        let bd = [z.b as i64, 1, 1, 1];
        (g.tensor(&bd, &[1, 1, 1, 1], Dt::I32), g.tensor(&bd, &[1, 1, 1, 1], Dt::I32))
    });
    let neg_inf = (attn.causal || seq.is_some()).then(|| g.scalar(Dt::F32));
    let (sq, skv) = (seq.map(|s| s.0), seq.map(|s| s.1));
    let mut rng = None;
    let mut mask = None;
    if let Some(dr) = attn.dropout.as_ref().filter(|d| d.probability > 0.0) {
        let one = [1i64, 1, 1, 1];
        let (seed, offset) = (g.tensor(&one, &one, Dt::I64), g.tensor(&one, &one, Dt::I64));
        let m = g.virt(&sd, Dt::F32);
        g.ops.push(Op::Rng { seed, offset, y: m, keep: 1.0 - f64::from(dr.probability) });
        let inv = g.scalar(Dt::F32);
        rng = Some((seed, offset, inv));
        mask = Some(m);
    }
    // dO·O per row, times the keep probability: the softmax backward's row sum.
    let prod = g.pw(Pw::Mul, d_o, Some(o), None, &qd, Dt::F32, Dt::F32);
    let rowsum = g.virt(&rd, Dt::F32);
    g.ops.push(Op::Reduction { mode: Red::Sum, x: prod, y: rowsum });
    let softmax_sum = g.scratch(&rd);
    g.ops.push(Op::Pointwise { mode: Pw::Mul, x: rowsum, b: Some(keep), t: None, y: softmax_sum, prec: Dt::F32 });
    // The probabilities, from the scores and the statistics.
    let s = g.virt(&sd, Dt::F32);
    g.ops.push(Op::Matmul { a: q, b: k, c: s, m_override: sq, n_override: skv, k_override: None });
    let mut last = g.pw(Pw::Mul, s, Some(scale), None, &sd, Dt::F32, Dt::F32);
    let padding_mask = |g: &mut GraphSpec, x: Uid| -> Uid {
        match (seq, neg_inf) {
            (Some((a, b)), Some(ninf)) => {
                let row = g.pw(Pw::GenIndex(2), x, None, None, &sd, Dt::I32, Dt::I32);
                let col = g.pw(Pw::GenIndex(3), x, None, None, &sd, Dt::I32, Dt::I32);
                let rm = g.pw(Pw::CmpLt, row, Some(a), None, &sd, Dt::Bool, Dt::Bool);
                let cm = g.pw(Pw::CmpLt, col, Some(b), None, &sd, Dt::Bool, Dt::Bool);
                let m = g.pw(Pw::And, rm, Some(cm), None, &sd, Dt::Bool, Dt::Bool);
                g.pw(Pw::Select, x, Some(ninf), Some(m), &sd, Dt::F32, Dt::F32)
            }
            _ => x,
        }
    };
    last = padding_mask(&mut g, last);
    last = g.pw(Pw::Sub, last, Some(stats), None, &sd, Dt::F32, Dt::F32);
    if second_padding {
        last = padding_mask(&mut g, last);
    }
    if let (true, Some(ninf)) = (attn.causal, neg_inf) {
        let row = g.pw(Pw::GenIndex(2), last, None, None, &sd, Dt::I32, Dt::F32);
        let col = g.pw(Pw::GenIndex(3), last, None, None, &sd, Dt::I32, Dt::F32);
        let m = g.pw(Pw::CmpGe, row, Some(col), None, &sd, Dt::Bool, Dt::Bool);
        last = g.pw(Pw::Select, last, Some(ninf), Some(m), &sd, Dt::F32, Dt::F32);
    }
    let exp_s = g.pw(Pw::Exp, last, None, None, &sd, Dt::F32, Dt::F32);
    let mut p = exp_s;
    if let (Some(m), Some((_, _, inv))) = (mask, rng) {
        p = g.pw(Pw::Mul, p, Some(m), None, &sd, Dt::F32, Dt::F32);
        p = g.pw(Pw::Mul, p, Some(inv), None, &sd, Dt::F32, Dt::F32);
    }
    // Transposed views of [B, H, Sq, Skv] intermediates.
    let td = d64([z.b, z.h, z.s_kv, z.s_q]);
    let tst = [sd[1] * sd[2] * sd[3], sd[2] * sd[3], 1, sd[3]];
    let full = d64([z.b, z.h, z.s_kv, z.d]);
    // A kv-head gradient: straight into `out`, or over every query head, then summed per group.
    let grad = |g: &mut GraphSpec, a: Uid, b: Uid, out: Uid| {
        if z.h == z.h_kv {
            g.ops.push(Op::Matmul { a, b, c: out, m_override: skv, n_override: None, k_override: sq });
        } else {
            let f = g.virt(&full, dt);
            g.ops.push(Op::Matmul { a, b, c: f, m_override: skv, n_override: None, k_override: sq });
            g.ops.push(Op::Reduction { mode: Red::Sum, x: f, y: out });
        }
    };
    let pt = g.reshape(p, &td, &tst, dt);
    grad(&mut g, pt, d_o, dv);
    let dpv = g.virt(&sd, Dt::F32);
    g.ops.push(Op::Matmul { a: d_o, b: v, c: dpv, m_override: sq, n_override: skv, k_override: None });
    let mut dp = dpv;
    if let Some(m) = mask {
        dp = g.pw(Pw::Mul, dp, Some(m), None, &sd, Dt::F32, Dt::F32);
    }
    dp = g.pw(Pw::Sub, dp, Some(softmax_sum), None, &sd, Dt::F32, Dt::F32);
    dp = g.pw(Pw::Mul, dp, Some(exp_s), None, &sd, Dt::F32, Dt::F32);
    if let Some((_, _, inv)) = rng {
        dp = g.pw(Pw::Mul, dp, Some(inv), None, &sd, Dt::F32, Dt::F32);
    }
    let ds = g.pw(Pw::Mul, dp, Some(scale), None, &sd, Dt::F32, Dt::F32);
    let dst = g.reshape(ds, &td, &tst, dt);
    grad(&mut g, dst, q, dk);
    let k_back = g.reshape(k, &kd, &ks, dt);
    let dq_acc = g.scratch(&qd);
    g.ops.push(Op::Matmul { a: ds, b: k_back, c: dq_acc, m_override: sq, n_override: None, k_override: skv });
    g.ops.push(Op::Pointwise { mode: Pw::Identity, x: dq_acc, b: None, t: None, y: dq, prec: Dt::F32 });
    let uids = BwdUids { q, k, v, o, d_o, stats, dq, dk, dv, scale, keep, neg_inf, seq, rng };
    (g, uids)
}

/// The operands of [`Cudnn::sdpa_backward`].
#[derive(Clone, Debug)]
pub struct SdpaGrads<'a, T: crate::memory::Element> {
    /// The gradient of the loss by `o`, `o`'s shape.
    pub d_o: AttnTensor<'a, T>,
    /// Written: `q`'s shape.
    pub dq: AttnTensor<'a, T>,
    /// Written: `k`'s shape.
    pub dk: AttnTensor<'a, T>,
    /// Written: `v`'s shape.
    pub dv: AttnTensor<'a, T>,
}

impl Cudnn {
    /// Scaled dot-product attention backward: `g.dq`, `g.dk`, `g.dv` from `q`, `k`, `v`, the
    /// forward op's output `o` and row statistics `stats` (f32 `[B, H, Sq, 1]`), and `g.d_o`,
    /// with the forward op's options (the same dropout seed and offset redraw its mask).
    /// Grouped-query heads' `dk` and `dv` sum over each group. With padding masks, the rows
    /// past a batch's lengths are not defined.
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_backward<T: DnnElement>(
        &mut self,
        attn: &Attention<'_>,
        q: &AttnTensor<'_, T>,
        k: &AttnTensor<'_, T>,
        v: &AttnTensor<'_, T>,
        o: &AttnTensor<'_, T>,
        stats: &GpuRef<f32>,
        g: &SdpaGrads<'_, T>,
    ) -> Result<Completion<()>> {
        let dt = half_type(q)?;
        let z = check_shapes(q, k, v, o)?;
        for (arg, t, like) in [("d_o", &g.d_o, o), ("dq", &g.dq, q), ("dk", &g.dk, k), ("dv", &g.dv, v)] {
            t.check(arg)?;
            if t.dims != like.dims {
                return Err(Error::invalid(arg, format!("is {:?}; it must be {:?}", t.dims, like.dims)));
            }
            if t.strides[3] != 1 {
                return Err(Error::invalid(arg, format!("has head-dim stride {}; it must be 1", t.strides[3])));
            }
        }
        check_options(attn, &z)?;
        validate::covers(
            "stats",
            stats,
            stats_len(&z),
            &format!("[{}, {}, {}, 1] f32 row statistics", z.b, z.h, z.s_q),
        )?;
        let mut uses = vec![
            ("q", q.buf.id(), false),
            ("k", k.buf.id(), false),
            ("v", v.buf.id(), false),
            ("o", o.buf.id(), false),
            ("d_o", g.d_o.buf.id(), false),
            ("stats", stats.id(), false),
            ("dq", g.dq.buf.id(), true),
            ("dk", g.dk.buf.id(), true),
            ("dv", g.dv.buf.id(), true),
        ];
        if let Some(p) = &attn.padding {
            uses.extend([("seq_len_q", p.q.id(), false), ("seq_len_kv", p.kv.id(), false)]);
        }
        if let Some(dr) = &attn.dropout {
            uses.extend([("seed", dr.seed.id(), false), ("offset", dr.offset.id(), false)]);
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("sdpa_backward");
        for (arg, buf) in [("q", q.buf), ("k", k.buf), ("v", v.buf), ("o", o.buf), ("d_o", g.d_o.buf)] {
            record(&mut rec, arg, buf, Access::Read)?;
        }
        record(&mut rec, "stats", stats, Access::Read)?;
        for (arg, buf) in [("dq", g.dq.buf), ("dk", g.dk.buf), ("dv", g.dv.buf)] {
            record(&mut rec, arg, buf, Access::Write)?;
        }
        if let Some(p) = &attn.padding {
            record(&mut rec, "seq_len_q", p.q, Access::Read)?;
            record(&mut rec, "seq_len_kv", p.kv, Access::Read)?;
        }
        if let Some(dr) = &attn.dropout {
            record(&mut rec, "seed", dr.seed, Access::Read)?;
            record(&mut rec, "offset", dr.offset, Access::Read)?;
        }
        let scale = attn.scale.unwrap_or(1.0 / (z.d as f32).sqrt());
        if self.op.device.is_simulated() {
            let job = sim::Attention {
                z,
                scale: f64::from(scale),
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
            };
            let io = sim::BackwardIo {
                o: (o.strides, o.buf.sim_data()?),
                d_o: (g.d_o.strides, g.d_o.buf.sim_data()?),
                stats: stats.sim_data()?,
                dq: (g.dq.strides, g.dq.buf.sim_data()?),
                dk: (g.dk.strides, g.dk.buf.sim_data()?),
                dv: (g.dv.strides, g.dv.buf.sim_data()?),
            };
            return self.op.run_sim(rec, Vec::new(), move || job.backward(io));
        }
        self.op.bound_stream()?;
        let version = super::plan::version();
        if version < 90600 {
            return Err(Error::Unsupported {
                library: NAME,
                what: format!("attention backward on cuDNN {version}"),
                hint: "the fused attention backward graph needs cuDNN 9.6 or later".into(),
            });
        }
        // Older engines need a padding mask when the key length is not a multiple of 128.
        let workaround = attn.padding.is_none() && z.s_kv % 128 != 0 && version <= 91500;
        let strides =
            [q.strides, k.strides, v.strides, o.strides, g.d_o.strides, g.dq.strides, g.dk.strides, g.dv.strides];
        let (spec, uids) = backward_graph(attn, &z, dt, strides, workaround, (90000..91000).contains(&version));
        let (device, stream) = (self.op.device.clone(), self.op.stream);
        let Some(handle) = self.raw.as_ref() else { return Err(self.op.unavailable_on_sim()) };
        let plan = self.graphs.get_or_make(spec, &self.op, |gs| {
            // SAFETY: the handle is live, its context bound above; `&mut self` keeps it to
            // this thread.
            let mut plan = unsafe { gs.plan(handle.get()) }?.ok_or_else(|| Error::Unsupported {
                library: NAME,
                what: format!("attention backward of {z:?} in {dt:?} (causal {})", attn.causal),
                hint: "no engine of this cuDNN supports the graph; try head dim 64 or 128 and packed strides".into(),
            })?;
            if let (true, Some((a, b))) = (workaround, uids.seq) {
                let (sq, skv) = (i32::try_from(z.s_q), i32::try_from(z.s_kv));
                let (Ok(sq), Ok(skv)) = (sq, skv) else { return Err(Error::invalid("q", "sequence length past i32")) };
                plan.aux.push((a, device.upload(stream, &vec![sq; z.b])?));
                plan.aux.push((b, device.upload(stream, &vec![skv; z.b])?));
            }
            Ok(plan)
        })?;
        for (_, buf) in &plan.aux {
            record(&mut rec, "seq_len", buf, Access::Read)?;
        }
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|b| b.raw_device_ptr()).transpose()?;
        let lowest = version < 91000;
        let neg_inf_value: f32 = if lowest { f32::MIN } else { f32::NEG_INFINITY };
        let drop_p = attn.dropout.as_ref().map_or(0.0, |d| d.probability);
        let (keep_value, inv_keep) = (1.0 - drop_p, 1.0 / (1.0 - drop_p));
        let mut ptrs: Vec<(Uid, *mut c_void)> = vec![
            (uids.q, dptr(q.buf)?),
            (uids.k, dptr(k.buf)?),
            (uids.v, dptr(v.buf)?),
            (uids.o, dptr(o.buf)?),
            (uids.d_o, dptr(g.d_o.buf)?),
            (uids.stats, dptr(stats)?),
            (uids.dq, dptr(g.dq.buf)?),
            (uids.dk, dptr(g.dk.buf)?),
            (uids.dv, dptr(g.dv.buf)?),
        ];
        if let (Some((a, b)), Some(p)) = (uids.seq, &attn.padding) {
            ptrs.extend([(a, dptr(p.q)?), (b, dptr(p.kv)?)]);
        }
        if let (Some((s, off, _)), Some(dr)) = (uids.rng, &attn.dropout) {
            ptrs.extend([(s, dptr(dr.seed)?), (off, dptr(dr.offset)?)]);
        }
        self.op.run(rec, Vec::new(), || {
            // The by-value scalars live on this frame for the execute call, which reads them.
            let (scale, neg_inf_value, keep_value, inv_keep) = (scale, neg_inf_value, keep_value, inv_keep);
            let mut ptrs = ptrs;
            ptrs.push((uids.scale, &scale as *const f32 as *mut c_void));
            ptrs.push((uids.keep, &keep_value as *const f32 as *mut c_void));
            if let Some(n) = uids.neg_inf {
                ptrs.push((n, &neg_inf_value as *const f32 as *mut c_void));
            }
            if let Some((_, _, inv)) = uids.rng {
                ptrs.push((inv, &inv_keep as *const f32 as *mut c_void));
            }
            let work = work.map_or(std::ptr::null_mut(), |w| w as *mut c_void);
            // SAFETY: (1) the handle made the plan, was bound to this stream when made, and the
            // op path made its context current; (2) every tensor of the graph in memory has its
            // buffer here (the plan's own sequence lengths and the workspace's scratch tensors
            // added by `execute`), validated against its shape and strides and fenced by
            // preflight, and the by-value scalars point at live f32 values on this frame; (3)
            // the workspace, declared read-write, holds the plan's need (cuDNN's and the
            // scratch tensors') and serves one op at a time.
            unsafe { plan.execute(handle.get(), &ptrs, work) }
        })
    }
}
