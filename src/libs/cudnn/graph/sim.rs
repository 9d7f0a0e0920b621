//! The simulator's graph ops: attention forward and backward computed on the host in f64 from
//! the buffers' simulated memory (inputs read exactly, every sum and the softmax in f64, each
//! stored element rounded once).

use super::sdpa::Sizes;
use crate::libs::cudnn::tensor::sealed::Sealed;
use crate::memory::{Element, SimMem};

/// One attention's inputs, with their strides.
pub(super) struct Attention<T: Element + Sealed> {
    pub z: Sizes,
    pub scale: f64,
    pub causal: bool,
    pub q: ([usize; 4], SimMem<T>),
    pub k: ([usize; 4], SimMem<T>),
    pub v: ([usize; 4], SimMem<T>),
    /// Per-batch query and key lengths.
    pub seq: Option<(SimMem<i32>, SimMem<i32>)>,
    /// Probability, seed, offset.
    pub dropout: Option<(f32, SimMem<i64>, SimMem<i64>)>,
}

fn at(st: &[usize; 4], b: usize, h: usize, s: usize, d: usize) -> usize {
    b * st[0] + h * st[1] + s * st[2] + d * st[3]
}

fn load<T: Element + Sealed>(m: &SimMem<T>) -> Vec<f64> {
    m.read().iter().map(|v| v.to_f64()).collect()
}

/// Whether the simulator's dropout keeps element `(b, h, i, j)`: a splitmix64 hash of the
/// seed, the offset and the position against the keep probability.
pub(super) fn keeps(seed: i64, offset: i64, pos: [usize; 4], z: &Sizes, p: f32) -> bool {
    let lin = ((pos[0] * z.h + pos[1]) * z.s_q + pos[2]) * z.s_kv + pos[3];
    let mut x = (seed as u64)
        ^ (offset as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (lin as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    ((x >> 11) as f64 / (1u64 << 53) as f64) >= f64::from(p)
}

/// One row's logsumexp.
struct Row {
    lse: f64,
}

impl<T: Element + Sealed> Attention<T> {
    /// Each row's probabilities (after dropout when on: `pd`) and logsumexp, for every
    /// `(b, h, i)`; `None` where the row is masked out.
    fn rows(&self, q: &[f64], k: &[f64]) -> Vec<Option<(Row, Vec<f64>)>> {
        let z = self.z;
        let (sq, skv) = match &self.seq {
            Some((a, b)) => (
                a.read().iter().map(|&x| x.max(0) as usize).collect(),
                b.read().iter().map(|&x| x.max(0) as usize).collect(),
            ),
            None => (vec![z.s_q; z.b], vec![z.s_kv; z.b]),
        };
        // One lock at a time: the seed and the offset may be one buffer.
        let drop = self.dropout.as_ref().map(|(p, s, o)| {
            let seed = s.read()[0];
            (*p, seed, o.read()[0])
        });
        let group = z.h / z.h_kv;
        let mut out = Vec::with_capacity(z.b * z.h * z.s_q);
        for b in 0..z.b {
            for h in 0..z.h {
                let hk = h / group;
                for i in 0..z.s_q {
                    let visible: Vec<usize> = (0..z.s_kv.min(skv[b])).filter(|&j| !self.causal || j <= i).collect();
                    if i >= sq[b].min(z.s_q) || visible.is_empty() {
                        out.push(None);
                        continue;
                    }
                    let mut s = vec![f64::NEG_INFINITY; z.s_kv];
                    for &j in &visible {
                        let dot: f64 =
                            (0..z.d).map(|d| q[at(&self.q.0, b, h, i, d)] * k[at(&self.k.0, b, hk, j, d)]).sum();
                        s[j] = dot * self.scale;
                    }
                    let m = visible.iter().map(|&j| s[j]).fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> =
                        s.iter().map(|&x| if x == f64::NEG_INFINITY { 0.0 } else { (x - m).exp() }).collect();
                    let sum: f64 = e.iter().sum();
                    let p: Vec<f64> = e.iter().map(|x| x / sum).collect();
                    let pd = match drop {
                        Some((pr, seed, off)) => {
                            p.iter()
                                .enumerate()
                                .map(|(j, &x)| {
                                    if keeps(seed, off, [b, h, i, j], &z, pr) {
                                        x / (1.0 - f64::from(pr))
                                    } else {
                                        0.0
                                    }
                                })
                                .collect()
                        }
                        None => p.clone(),
                    };
                    out.push(Some((Row { lse: m + sum.ln() }, pd)));
                }
            }
        }
        out
    }

    /// Forward: `o` and, when given, the statistics (`[B,H,Sq,1]` packed); masked-out rows
    /// are written as zeros.
    pub(super) fn forward(self, o: ([usize; 4], SimMem<T>), stats: Option<SimMem<f32>>) {
        let (q, k, v) = (load(&self.q.1), load(&self.k.1), load(&self.v.1));
        let z = self.z;
        let rows = self.rows(&q, &k);
        let group = z.h / z.h_kv;
        let mut dst = o.1.lock();
        let mut st = stats.as_ref().map(|s| s.lock());
        for b in 0..z.b {
            for h in 0..z.h {
                for i in 0..z.s_q {
                    let r = (b * z.h + h) * z.s_q + i;
                    for d in 0..z.d {
                        let val = match &rows[r] {
                            Some((_, pd)) => (0..z.s_kv).map(|j| pd[j] * v[at(&self.v.0, b, h / group, j, d)]).sum(),
                            None => 0.0,
                        };
                        dst[at(&o.0, b, h, i, d)] = T::from_f64(val);
                    }
                    if let Some(st) = st.as_mut() {
                        st[r] = rows[r].as_ref().map_or(0.0, |(row, _)| row.lse as f32);
                    }
                }
            }
        }
    }
}

impl<T: Element + Sealed> Attention<T> {
    /// FP8 forward: `scales` are the descales of Q, K, V and S, the scales of S and O, and the
    /// amax outputs of S and O (one f32 each). The scores take Q's and K's descales with the
    /// scale; each probability (after dropout) is rounded to FP8 after `scale_s` for the
    /// second matmul, whose sums take S's and V's descales; the amax are of the probabilities
    /// and of those sums, before their scales.
    pub(super) fn forward_fp8(
        mut self,
        o: ([usize; 4], SimMem<T>),
        scales: Vec<SimMem<f32>>,
        stats: Option<SimMem<f32>>,
    ) {
        let s: Vec<f64> = scales.iter().take(6).map(|m| f64::from(m.read()[0])).collect();
        let (dq, dk, dv, ds, scale_s, scale_o) = (s[0], s[1], s[2], s[3], s[4], s[5]);
        self.scale *= dq * dk;
        let (q, k, v) = (load(&self.q.1), load(&self.k.1), load(&self.v.1));
        let z = self.z;
        let rows = self.rows(&q, &k);
        let group = z.h / z.h_kv;
        let amax_s = rows.iter().flatten().flat_map(|(_, pd)| pd.iter()).fold(0.0f64, |m, p| m.max(p.abs()));
        let mut amax_o = 0.0f64;
        let mut dst = o.1.lock();
        let mut st = stats.as_ref().map(|s| s.lock());
        for b in 0..z.b {
            for h in 0..z.h {
                for i in 0..z.s_q {
                    let r = (b * z.h + h) * z.s_q + i;
                    let p8: Option<Vec<f64>> =
                        rows[r].as_ref().map(|(_, pd)| pd.iter().map(|&p| T::from_f64(p * scale_s).to_f64()).collect());
                    for d in 0..z.d {
                        let val = match &p8 {
                            Some(p8) => {
                                (0..z.s_kv).map(|j| p8[j] * v[at(&self.v.0, b, h / group, j, d)]).sum::<f64>() * ds * dv
                            }
                            None => 0.0,
                        };
                        amax_o = amax_o.max(val.abs());
                        dst[at(&o.0, b, h, i, d)] = T::from_f64(val * scale_o);
                    }
                    if let Some(st) = st.as_mut() {
                        st[r] = rows[r].as_ref().map_or(0.0, |(row, _)| row.lse as f32);
                    }
                }
            }
        }
        drop(dst);
        for (m, v) in scales.iter().skip(6).zip([amax_s, amax_o]) {
            m.lock()[0] = v as f32;
        }
    }
}

/// The backward op's other operands: the forward output and statistics, the incoming
/// gradient, and the three gradients it writes.
pub(super) struct BackwardIo<T: Element + Sealed> {
    pub o: ([usize; 4], SimMem<T>),
    pub d_o: ([usize; 4], SimMem<T>),
    pub stats: SimMem<f32>,
    pub dq: ([usize; 4], SimMem<T>),
    pub dk: ([usize; 4], SimMem<T>),
    pub dv: ([usize; 4], SimMem<T>),
}

impl<T: Element + Sealed> Attention<T> {
    /// Backward: the probabilities recomputed from the scores and the given statistics, the
    /// softmax's row sum from `do·o`, as the GPU's graph computes them; every element of the
    /// three gradients written (zero where no valid row or key reaches it).
    pub(super) fn backward(self, io: BackwardIo<T>) {
        let z = self.z;
        let (q, k, v) = (load(&self.q.1), load(&self.k.1), load(&self.v.1));
        let (o, d_o) = (load(&io.o.1), load(&io.d_o.1));
        let stats: Vec<f64> = io.stats.read().iter().map(|&x| f64::from(x)).collect();
        let (sq, skv) = match &self.seq {
            Some((a, b)) => (
                a.read().iter().map(|&x| x.max(0) as usize).collect(),
                b.read().iter().map(|&x| x.max(0) as usize).collect(),
            ),
            None => (vec![z.s_q; z.b], vec![z.s_kv; z.b]),
        };
        // One lock at a time: the seed and the offset may be one buffer.
        let drop = self.dropout.as_ref().map(|(p, s, o)| {
            let seed = s.read()[0];
            (*p, seed, o.read()[0])
        });
        let group = z.h / z.h_kv;
        let lin = |b: usize, h: usize, s: usize, n: usize, heads: usize| ((b * heads + h) * n + s) * z.d;
        let mut dq = vec![0.0; z.b * z.h * z.s_q * z.d];
        let (mut dk, mut dv) = (vec![0.0; z.b * z.h_kv * z.s_kv * z.d], vec![0.0; z.b * z.h_kv * z.s_kv * z.d]);
        for b in 0..z.b {
            for h in 0..z.h {
                let hk = h / group;
                for i in 0..z.s_q.min(sq[b]) {
                    let lse = stats[(b * z.h + h) * z.s_q + i];
                    let rowsum: f64 =
                        (0..z.d).map(|d| d_o[at(&io.d_o.0, b, h, i, d)] * o[at(&io.o.0, b, h, i, d)]).sum();
                    for j in (0..z.s_kv.min(skv[b])).filter(|&j| !self.causal || j <= i) {
                        let dot: f64 =
                            (0..z.d).map(|d| q[at(&self.q.0, b, h, i, d)] * k[at(&self.k.0, b, hk, j, d)]).sum();
                        let p = (dot * self.scale - lse).exp();
                        let keep = match drop {
                            Some((pr, seed, off)) => {
                                if keeps(seed, off, [b, h, i, j], &z, pr) {
                                    1.0 / (1.0 - f64::from(pr))
                                } else {
                                    0.0
                                }
                            }
                            None => 1.0,
                        };
                        let dpd: f64 =
                            (0..z.d).map(|d| d_o[at(&io.d_o.0, b, h, i, d)] * v[at(&self.v.0, b, hk, j, d)]).sum();
                        let ds = p * (dpd * keep - rowsum) * self.scale;
                        let (qi, kj) = (lin(b, h, i, z.s_q, z.h), lin(b, hk, j, z.s_kv, z.h_kv));
                        for d in 0..z.d {
                            dv[kj + d] += p * keep * d_o[at(&io.d_o.0, b, h, i, d)];
                            dq[qi + d] += ds * k[at(&self.k.0, b, hk, j, d)];
                            dk[kj + d] += ds * q[at(&self.q.0, b, h, i, d)];
                        }
                    }
                }
            }
        }
        for ((st, mem), acc, heads, n) in
            [(&io.dq, &dq, z.h, z.s_q), (&io.dk, &dk, z.h_kv, z.s_kv), (&io.dv, &dv, z.h_kv, z.s_kv)]
        {
            let mut dst = mem.lock();
            for b in 0..z.b {
                for h in 0..heads {
                    for s in 0..n {
                        for d in 0..z.d {
                            dst[at(st, b, h, s, d)] = T::from_f64(acc[lin(b, h, s, n, heads) + d]);
                        }
                    }
                }
            }
        }
    }
}
