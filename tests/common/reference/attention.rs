//! CPU reference of scaled dot-product attention in f64, on logical `[B, H, S, D]` tensors,
//! and the runner the simulator's and the GPU's tests share: random Q, K, V (rounded to the
//! element type), the op, and the comparison of the rows a padding mask leaves valid.

use super::cudnn::{close, round, Bench, El};
use crate::common::{random, Rng};
use cusched::cudnn::{Attention, AttnDropout, AttnTensor, SeqLens};
use cusched::GpuRef;

/// One attention case: sizes, layout and options.
#[derive(Clone, Debug)]
pub struct AttnCase {
    pub b: usize,
    pub h: usize,
    pub h_kv: usize,
    pub s_q: usize,
    pub s_kv: usize,
    pub d: usize,
    pub causal: bool,
    pub padded: bool,
    /// Heads interleaved (`BSHD` storage) rather than packed `BHSD`.
    pub bshd: bool,
}

impl AttnCase {
    pub fn new(b: usize, h: usize, h_kv: usize, s_q: usize, s_kv: usize, d: usize) -> Self {
        AttnCase { b, h, h_kv, s_q, s_kv, d, causal: false, padded: false, bshd: false }
    }
    pub fn causal(mut self) -> Self {
        self.causal = true;
        self
    }
    pub fn padded(mut self) -> Self {
        self.padded = true;
        self
    }
    pub fn bshd(mut self) -> Self {
        self.bshd = true;
        self
    }
}

/// The cases every type runs: a sequence length that is not a multiple of 64, causal,
/// padded, grouped-query heads, interleaved layout, head dims 64 and 128.
pub fn attn_cases(d: usize) -> Vec<AttnCase> {
    vec![
        AttnCase::new(2, 2, 2, 37, 37, d),
        AttnCase::new(2, 2, 2, 70, 70, d).causal(),
        AttnCase::new(3, 2, 2, 45, 70, d).padded(),
        AttnCase::new(2, 4, 2, 33, 33, d).causal().padded(),
        AttnCase::new(1, 4, 1, 20, 29, d).bshd(),
        AttnCase::new(2, 6, 3, 65, 65, d).causal().bshd(),
    ]
}

/// Where logical `(b, h, s, d)` lies in storage.
pub fn index(c: &AttnCase, heads: usize, s_len: usize, p: [usize; 4]) -> usize {
    let [b, h, s, d] = p;
    if c.bshd {
        ((b * s_len + s) * heads + h) * c.d + d
    } else {
        ((b * heads + h) * s_len + s) * c.d + d
    }
}

pub fn to_layout(c: &AttnCase, heads: usize, s_len: usize, logical: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; logical.len()];
    let mut i = 0;
    for b in 0..c.b {
        for h in 0..heads {
            for s in 0..s_len {
                for d in 0..c.d {
                    out[index(c, heads, s_len, [b, h, s, d])] = logical[i];
                    i += 1;
                }
            }
        }
    }
    out
}

pub fn from_layout(c: &AttnCase, heads: usize, s_len: usize, stored: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(stored.len());
    for b in 0..c.b {
        for h in 0..heads {
            for s in 0..s_len {
                for d in 0..c.d {
                    out.push(stored[index(c, heads, s_len, [b, h, s, d])]);
                }
            }
        }
    }
    out
}

/// The attention of logical `q`, `k`, `v`: each valid row's output and logsumexp, with
/// `sq`, `skv` the per-batch lengths (the full lengths without padding). Rows past a query
/// length are `None`.
pub fn sdpa_forward(
    c: &AttnCase,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    sq: &[usize],
    skv: &[usize],
    scale: f64,
) -> Vec<Option<(Vec<f64>, f64)>> {
    let group = c.h / c.h_kv;
    let mut rows = Vec::new();
    for b in 0..c.b {
        for h in 0..c.h {
            let hk = h / group;
            for i in 0..c.s_q {
                if i >= sq[b] {
                    rows.push(None);
                    continue;
                }
                let keys: Vec<usize> = (0..skv[b]).filter(|&j| !c.causal || j <= i).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let mut dot = 0.0;
                        for d in 0..c.d {
                            dot += q[((b * c.h + h) * c.s_q + i) * c.d + d]
                                * k[((b * c.h_kv + hk) * c.s_kv + j) * c.d + d];
                        }
                        dot * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                let mut out = vec![0.0; c.d];
                for (wi, &j) in w.iter().zip(&keys) {
                    for (d, o) in out.iter_mut().enumerate() {
                        *o += wi / sum * v[((b * c.h_kv + hk) * c.s_kv + j) * c.d + d];
                    }
                }
                rows.push(Some((out, m + sum.ln())));
            }
        }
    }
    rows
}

/// The per-batch lengths of a case: random below the maxima when padded (the first batch
/// shorter than both), the maxima otherwise.
pub fn lengths(c: &AttnCase, rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    if !c.padded {
        return (vec![c.s_q; c.b], vec![c.s_kv; c.b]);
    }
    let mut sq: Vec<usize> = (0..c.b).map(|_| 1 + rng.below(c.s_q as u64) as usize).collect();
    let mut skv: Vec<usize> = (0..c.b).map(|_| 1 + rng.below(c.s_kv as u64) as usize).collect();
    sq[0] = (c.s_q / 2).max(1);
    skv[0] = (c.s_kv / 3).max(1);
    (sq, skv)
}

/// The buffers of one forward run.
pub struct AttnRun<T: El> {
    pub q: GpuRef<T>,
    pub k: GpuRef<T>,
    pub v: GpuRef<T>,
    pub o: GpuRef<T>,
    pub stats: GpuRef<f32>,
    pub seq: Option<(GpuRef<i32>, GpuRef<i32>)>,
}

impl<T: El> AttnRun<T> {
    pub fn views(&self, c: &AttnCase) -> [AttnTensor<'_, T>; 4] {
        let view = |buf, heads, s| {
            if c.bshd {
                AttnTensor::bshd(buf, [c.b, heads, s, c.d])
            } else {
                AttnTensor::bhsd(buf, [c.b, heads, s, c.d])
            }
        };
        [
            view(&self.q, c.h, c.s_q),
            view(&self.k, c.h_kv, c.s_kv),
            view(&self.v, c.h_kv, c.s_kv),
            view(&self.o, c.h, c.s_q),
        ]
    }

    pub fn attention(&self) -> Attention<'_> {
        let mut a = Attention::new();
        if let Some((q, kv)) = &self.seq {
            a = a.padding(SeqLens { q, kv });
        }
        a
    }
}

/// Uploads random inputs for `c`; returns the buffers and the logical (rounded) inputs and
/// lengths.
#[allow(clippy::type_complexity)]
pub fn attn_inputs<T: El>(
    b: &Bench<'_>,
    c: &AttnCase,
    rng: &mut Rng,
) -> (AttnRun<T>, [Vec<f64>; 3], (Vec<usize>, Vec<usize>)) {
    let nq = c.b * c.h * c.s_q * c.d;
    let nk = c.b * c.h_kv * c.s_kv * c.d;
    let (q, k, v) = (round::<T>(&random(rng, nq)), round::<T>(&random(rng, nk)), round::<T>(&random(rng, nk)));
    let up = |x: &[f64], heads, s| b.d.upload(b.s, &super::cudnn::to_el::<T>(&to_layout(c, heads, s, x))).unwrap();
    let (sq, skv) = lengths(c, rng);
    let seq = c.padded.then(|| {
        let a: Vec<i32> = sq.iter().map(|&x| x as i32).collect();
        let k: Vec<i32> = skv.iter().map(|&x| x as i32).collect();
        (b.d.upload(b.s, &a).unwrap(), b.d.upload(b.s, &k).unwrap())
    });
    let run = AttnRun {
        q: up(&q, c.h, c.s_q),
        k: up(&k, c.h_kv, c.s_kv),
        v: up(&v, c.h_kv, c.s_kv),
        o: b.d.upload(b.s, &vec![T::cast(f64::NAN); nq]).unwrap(),
        stats: b.d.upload(b.s, &vec![f32::NAN; c.b * c.h * c.s_q]).unwrap(),
        seq,
    };
    (run, [q, k, v], (sq, skv))
}

/// Runs the forward op of `c` (with its statistics) and compares the valid rows with the
/// reference.
pub fn check_sdpa_forward<T: El>(b: &mut Bench<'_>, c: &AttnCase, rng: &mut Rng) {
    let what = format!("{} {c:?}", T::NAME);
    let (run, [q, k, v], (sq, skv)) = attn_inputs::<T>(b, c, rng);
    let [vq, vk, vv, vo] = run.views(c);
    let attn = run.attention().causal(c.causal);
    b.h.cudnn().unwrap().sdpa_forward(&attn, &vq, &vk, &vv, &vo, Some(&run.stats)).unwrap().wait().unwrap();
    let o = from_layout(c, c.h, c.s_q, &super::cudnn::from_el(&run.o.download(b.s).unwrap()));
    let stats: Vec<f64> = run.stats.download(b.s).unwrap().iter().map(|&x| f64::from(x)).collect();
    let want = sdpa_forward(c, &q, &k, &v, &sq, &skv, 1.0 / (c.d as f64).sqrt());
    let (mut got_o, mut want_o, mut got_s, mut want_s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (r, row) in want.iter().enumerate() {
        if let Some((out, lse)) = row {
            got_o.extend_from_slice(&o[r * c.d..(r + 1) * c.d]);
            want_o.extend_from_slice(out);
            got_s.push(stats[r]);
            want_s.push(*lse);
        }
    }
    close(&got_o, &want_o, T::REL * b.slack, &format!("{what}: o"));
    close(&got_s, &want_s, 1e-4 * b.slack, &format!("{what}: stats"));
}

/// Dropout: the same seed and offset give the same output, another offset another one, and
/// a probability of 0 gives the reference.
pub fn check_sdpa_dropout<T: El>(b: &mut Bench<'_>, c: &AttnCase, rng: &mut Rng) {
    let what = format!("{} {c:?} dropout", T::NAME);
    let (run, [q, k, v], (sq, skv)) = attn_inputs::<T>(b, c, rng);
    let seed = b.d.upload(b.s, &[rng.next() as i64 & 0xFFFF_FFFF]).unwrap();
    let (off0, off1) = (b.d.upload(b.s, &[0i64]).unwrap(), b.d.upload(b.s, &[1i64 << 20]).unwrap());
    let [vq, vk, vv, vo] = run.views(c);
    let mut outs = Vec::new();
    for (p, off) in [(0.25f32, &off0), (0.25, &off0), (0.25, &off1), (0.0, &off0)] {
        let attn = run.attention().causal(c.causal).dropout(AttnDropout { probability: p, seed: &seed, offset: off });
        b.h.cudnn().unwrap().sdpa_forward(&attn, &vq, &vk, &vv, &vo, Some(&run.stats)).unwrap().wait().unwrap();
        outs.push(from_layout(c, c.h, c.s_q, &super::cudnn::from_el(&run.o.download(b.s).unwrap())));
    }
    assert_eq!(outs[0], outs[1], "{what}: the same seed and offset must draw the same mask");
    assert_ne!(outs[0], outs[2], "{what}: another offset must draw another mask");
    let want = sdpa_forward(c, &q, &k, &v, &sq, &skv, 1.0 / (c.d as f64).sqrt());
    let (mut got_o, mut want_o) = (Vec::new(), Vec::new());
    for (r, row) in want.iter().enumerate() {
        if let Some((out, _)) = row {
            got_o.extend_from_slice(&outs[3][r * c.d..(r + 1) * c.d]);
            want_o.extend_from_slice(out);
        }
    }
    close(&got_o, &want_o, T::REL * b.slack, &format!("{what}: probability 0"));
}

/// The gradients of the attention of logical `q`, `k`, `v` by each, given the output's
/// gradient `d_o`: `(dq, dk, dv)`, logical, computed from the probabilities directly
/// (`dS = P ∘ (dP − rowsum(P ∘ dP))`); grouped-query heads' `dk` and `dv` summed per group.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_backward(
    c: &AttnCase,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
    sq: &[usize],
    skv: &[usize],
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let group = c.h / c.h_kv;
    let qi = |b: usize, h: usize, i: usize| ((b * c.h + h) * c.s_q + i) * c.d;
    let kj = |b: usize, h: usize, j: usize| ((b * c.h_kv + h) * c.s_kv + j) * c.d;
    let dot = |a: &[f64], x: usize, bb: &[f64], y: usize| (0..c.d).map(|d| a[x + d] * bb[y + d]).sum::<f64>();
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for b in 0..c.b {
        for h in 0..c.h {
            let hk = h / group;
            for i in 0..sq[b] {
                let keys: Vec<usize> = (0..skv[b]).filter(|&j| !c.causal || j <= i).collect();
                let s: Vec<f64> = keys.iter().map(|&j| dot(q, qi(b, h, i), k, kj(b, hk, j)) * scale).collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                let p: Vec<f64> = e.iter().map(|x| x / sum).collect();
                let dp: Vec<f64> = keys.iter().map(|&j| dot(d_o, qi(b, h, i), v, kj(b, hk, j))).collect();
                let row: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for (n, &j) in keys.iter().enumerate() {
                    let ds = p[n] * (dp[n] - row) * scale;
                    for d in 0..c.d {
                        dv[kj(b, hk, j) + d] += p[n] * d_o[qi(b, h, i) + d];
                        dq[qi(b, h, i) + d] += ds * k[kj(b, hk, j) + d];
                        dk[kj(b, hk, j) + d] += ds * q[qi(b, h, i) + d];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

/// The rows of logical `x` (`[B, heads, n, D]`) below each batch's length, flattened.
fn valid_rows(c: &AttnCase, x: &[f64], heads: usize, n: usize, lens: &[usize]) -> Vec<f64> {
    let mut out = Vec::new();
    for (b, &len) in lens.iter().enumerate() {
        for h in 0..heads {
            for s in 0..len {
                let at = ((b * heads + h) * n + s) * c.d;
                out.extend_from_slice(&x[at..at + c.d]);
            }
        }
    }
    out
}

/// Runs the forward op, then the backward op from its output and statistics, and compares
/// the three gradients' valid rows with the reference.
pub fn check_sdpa_backward<T: El>(b: &mut Bench<'_>, c: &AttnCase, rng: &mut Rng) {
    let what = format!("{} {c:?} backward", T::NAME);
    let (run, [q, k, v], (sq, skv)) = attn_inputs::<T>(b, c, rng);
    let d_o = round::<T>(&random(rng, c.b * c.h * c.s_q * c.d));
    let up = |x: &[f64], heads, s| b.d.upload(b.s, &super::cudnn::to_el::<T>(&to_layout(c, heads, s, x))).unwrap();
    let bdo = up(&d_o, c.h, c.s_q);
    let nans = |n: usize| b.d.upload(b.s, &vec![T::cast(f64::NAN); n]).unwrap();
    let (bdq, bdk, bdv) = (nans(q.len()), nans(k.len()), nans(v.len()));
    let [vq, vk, vv, vo] = run.views(c);
    let view = |buf, heads, s| {
        if c.bshd {
            AttnTensor::bshd(buf, [c.b, heads, s, c.d])
        } else {
            AttnTensor::bhsd(buf, [c.b, heads, s, c.d])
        }
    };
    let grads = cusched::cudnn::SdpaGrads {
        d_o: view(&bdo, c.h, c.s_q),
        dq: view(&bdq, c.h, c.s_q),
        dk: view(&bdk, c.h_kv, c.s_kv),
        dv: view(&bdv, c.h_kv, c.s_kv),
    };
    let attn = run.attention().causal(c.causal);
    let dnn = b.h.cudnn().unwrap();
    dnn.sdpa_forward(&attn, &vq, &vk, &vv, &vo, Some(&run.stats)).unwrap();
    dnn.sdpa_backward(&attn, &vq, &vk, &vv, &vo, &run.stats, &grads).unwrap().wait().unwrap();
    let down =
        |buf: &GpuRef<T>, heads, s| from_layout(c, heads, s, &super::cudnn::from_el(&buf.download(b.s).unwrap()));
    let (want_q, want_k, want_v) = sdpa_backward(c, &q, &k, &v, &d_o, &sq, &skv, 1.0 / (c.d as f64).sqrt());
    // The softmax's row sum is `dO·O` with `O` as stored, rounded to the element type: where
    // `dP` and the row sum nearly cancel (rows with few keys), that rounding reaches the
    // gradients several times over.
    let rel = 4.0 * T::REL * b.slack;
    let pairs = [
        ("dq", down(&bdq, c.h, c.s_q), want_q, c.h, c.s_q, &sq),
        ("dk", down(&bdk, c.h_kv, c.s_kv), want_k, c.h_kv, c.s_kv, &skv),
        ("dv", down(&bdv, c.h_kv, c.s_kv), want_v, c.h_kv, c.s_kv, &skv),
    ];
    for (name, got, want, heads, n, lens) in pairs {
        close(
            &valid_rows(c, &got, heads, n, lens),
            &valid_rows(c, &want, heads, n, lens),
            rel,
            &format!("{what}: {name}"),
        );
    }
}
