//! CPU reference of FP8 attention forward in f64, with FP8 rounding of its own (every code
//! decoded, the nearest taken, ties to the even code), and the runner the simulator's and the
//! GPU's tests share.

use super::attention::{from_layout, lengths, sdpa_forward, to_layout, AttnCase};
use super::cudnn::{close, Bench};
use crate::common::Rng;
use cusched::cudnn::{Attention, AttnFp8, AttnTensor, Fp8Attention, SeqLens, F8E4M3, F8E5M2};
use cusched::GpuRef;

/// An FP8 format of the test: exponent and mantissa bits, and whether the top exponent holds
/// values (E4M3: only its all-ones mantissa is NaN) or infinities and NaNs (E5M2).
#[derive(Clone, Copy, Debug)]
pub struct Format {
    pub exp: u32,
    pub man: u32,
    pub top_finite: bool,
    pub name: &'static str,
}

pub const E4M3: Format = Format { exp: 4, man: 3, top_finite: true, name: "e4m3" };
pub const E5M2: Format = Format { exp: 5, man: 2, top_finite: false, name: "e5m2" };

impl Format {
    /// The value of `code`, or `None` for NaN and infinities.
    pub fn decode(&self, code: u8) -> Option<f64> {
        let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = u32::from(code >> self.man) & ((1 << self.exp) - 1);
        let m = f64::from(code & ((1 << self.man) - 1));
        let bias = (1i32 << (self.exp - 1)) - 1;
        let top = (1 << self.exp) - 1;
        if e == top && (!self.top_finite || m == f64::from((1u8 << self.man) - 1)) {
            return None;
        }
        let frac = m / f64::from(1u32 << self.man);
        Some(if e == 0 { sign * frac * 2f64.powi(1 - bias) } else { sign * (1.0 + frac) * 2f64.powi(e as i32 - bias) })
    }

    /// The code nearest `x` (ties to the even code), saturating at the largest finite value.
    pub fn encode(&self, x: f64) -> u8 {
        // Every finite value with its code, by value (both zeros kept: a tie between them
        // goes to the even code, +0).
        static TABLES: [std::sync::OnceLock<Vec<(f64, u8)>>; 2] =
            [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
        let table = TABLES[usize::from(self.man == 2)].get_or_init(|| {
            let mut t: Vec<(f64, u8)> = (0..=255u8).filter_map(|c| self.decode(c).map(|v| (v, c))).collect();
            t.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            t
        });
        let at = table.partition_point(|&(v, _)| v < x);
        let mut best = (f64::INFINITY, 0u8);
        for &(v, code) in &table[at.saturating_sub(2)..(at + 2).min(table.len())] {
            let d = (v - x).abs();
            if d < best.0 || (d == best.0 && code & 1 == 0 && best.1 & 1 == 1) {
                best = (d, code);
            }
        }
        best.1
    }

    pub fn round(&self, x: f64) -> f64 {
        self.decode(self.encode(x)).unwrap_or(f64::NAN)
    }
}

/// FP8 element types of the test.
pub trait Fp8El: AttnFp8 {
    const FORMAT: Format;
    fn of(code: u8) -> Self;
    fn code(self) -> u8;
}

impl Fp8El for F8E4M3 {
    const FORMAT: Format = E4M3;
    fn of(code: u8) -> Self {
        F8E4M3(code)
    }
    fn code(self) -> u8 {
        self.0
    }
}

impl Fp8El for F8E5M2 {
    const FORMAT: Format = E5M2;
    fn of(code: u8) -> Self {
        F8E5M2(code)
    }
    fn code(self) -> u8 {
        self.0
    }
}

/// The scales of a run: descales of Q, K, V, S; scales of S and O (powers of two: exact).
const SCALES: [f32; 6] = [0.5, 0.25, 2.0, 1.0 / 256.0, 256.0, 32.0];

/// Runs FP8 attention forward for `c` on random FP8 inputs and compares the output, the row
/// statistics and both amax with the reference.
pub fn check_sdpa_forward_fp8<T: Fp8El>(b: &mut Bench<'_>, c: &AttnCase, rng: &mut Rng) {
    let f = T::FORMAT;
    let what = format!("{} {c:?}", f.name);
    let nq = c.b * c.h * c.s_q * c.d;
    let nk = c.b * c.h_kv * c.s_kv * c.d;
    // Stored values in [-2, 2]: random codes of that range.
    let mut codes = |n: usize| {
        (0..n)
            .map(|_| loop {
                let code = rng.below(256) as u8;
                if f.decode(code).is_some_and(|v| v.abs() <= 2.0) {
                    break code;
                }
            })
            .collect::<Vec<u8>>()
    };
    let (cq, ck, cv) = (codes(nq), codes(nk), codes(nk));
    let stored = |codes: &[u8]| codes.iter().map(|&x| f.decode(x).unwrap_or(0.0)).collect::<Vec<f64>>();
    let (sq8, sk8, sv8) = (stored(&cq), stored(&ck), stored(&cv));
    let up = |codes: &[u8], heads, s| {
        let logical: Vec<f64> = codes.iter().map(|&x| f64::from(x)).collect();
        let laid: Vec<T> = to_layout(c, heads, s, &logical).iter().map(|&x| T::of(x as u8)).collect();
        b.d.upload(b.s, &laid).unwrap()
    };
    let (q, k, v) = (up(&cq, c.h, c.s_q), up(&ck, c.h_kv, c.s_kv), up(&cv, c.h_kv, c.s_kv));
    let o = b.d.upload(b.s, &vec![T::of(0x7f); nq]).unwrap();
    let stats = b.d.upload(b.s, &vec![f32::NAN; c.b * c.h * c.s_q]).unwrap();
    let (sq, skv) = lengths(c, rng);
    let seq = c.padded.then(|| {
        let a: Vec<i32> = sq.iter().map(|&x| x as i32).collect();
        let k: Vec<i32> = skv.iter().map(|&x| x as i32).collect();
        (b.d.upload(b.s, &a).unwrap(), b.d.upload(b.s, &k).unwrap())
    });
    let s: Vec<GpuRef<f32>> = SCALES.iter().map(|&x| b.d.upload(b.s, &[x]).unwrap()).collect();
    let (amax_s, amax_o) = (b.d.upload(b.s, &[f32::NAN]).unwrap(), b.d.upload(b.s, &[f32::NAN]).unwrap());
    let scales = Fp8Attention {
        descale_q: &s[0],
        descale_k: &s[1],
        descale_v: &s[2],
        descale_s: &s[3],
        scale_s: &s[4],
        scale_o: &s[5],
        amax_s: &amax_s,
        amax_o: &amax_o,
    };
    let view = |buf, heads, len| {
        if c.bshd {
            AttnTensor::bshd(buf, [c.b, heads, len, c.d])
        } else {
            AttnTensor::bhsd(buf, [c.b, heads, len, c.d])
        }
    };
    let mut attn = Attention::new().causal(c.causal);
    if let Some((a, kv)) = &seq {
        attn = attn.padding(SeqLens { q: a, kv });
    }
    let dnn = b.h.cudnn().unwrap();
    let (vq, vk, vv, vo) =
        (view(&q, c.h, c.s_q), view(&k, c.h_kv, c.s_kv), view(&v, c.h_kv, c.s_kv), view(&o, c.h, c.s_q));
    dnn.sdpa_forward_fp8(&attn, &vq, &vk, &vv, &vo, &scales, Some(&stats)).unwrap().wait().unwrap();

    // The reference: the real scores from the stored values and the descales, the
    // probabilities rounded to FP8 after `scale_s`, the second matmul over stored V.
    let [dq, dk, dv, _, _, so] = SCALES.map(f64::from);
    let scale = 1.0 / (c.d as f64).sqrt() * dq * dk;
    let probs = sdpa_probabilities(c, &sq8, &sk8, &sq, &skv, scale);
    let want_rows = sdpa_forward(c, &sq8, &sk8, &sv8, &sq, &skv, scale);
    let got_o: Vec<f64> =
        from_layout(c, c.h, c.s_q, &o.download(b.s).unwrap().iter().map(|x| f64::from(x.code())).collect::<Vec<_>>())
            .iter()
            .map(|&code| f.decode(code as u8).unwrap_or(f64::NAN))
            .collect();
    let got_stats: Vec<f64> = stats.download(b.s).unwrap().iter().map(|&x| f64::from(x)).collect();
    let group = c.h / c.h_kv;
    // The engine rounds the probabilities to FP8 in its own form (a flash engine rounds the
    // running exponentials before it divides by the row's sum), so the output is held to the
    // bound that rounding gives, not to one emulation of it: each probability is off by up to
    // `u` (half an FP8 step, relative), so an output by up to `u` times the sum of its terms'
    // sizes, plus `u` of itself for its own rounding into O.
    let u = 2f64.powi(-(f.man as i32 + 1));
    let (mut amax_p, mut amax_out, mut amax_mag) = (0.0f64, 0.0f64, 0.0f64);
    let (mut worst, mut g_s, mut w_s) = (0.0f64, Vec::new(), Vec::new());
    for (r, row) in probs.iter().enumerate() {
        let Some(p) = row else { continue };
        let (bb, h) = (r / (c.h * c.s_q), r / c.s_q % c.h);
        amax_p = p.iter().fold(amax_p, |m, &(_, x)| m.max(x));
        for d in 0..c.d {
            let v_at = |j: usize| sv8[((bb * c.h_kv + h / group) * c.s_kv + j) * c.d + d] * dv;
            let real: f64 = p.iter().map(|&(j, x)| x * v_at(j)).sum();
            let mag: f64 = p.iter().map(|&(j, x)| x * v_at(j).abs()).sum();
            amax_out = amax_out.max(real.abs());
            amax_mag = amax_mag.max(mag);
            let (got, want) = (got_o[r * c.d + d], real * so);
            let tol = 1.5 * u * (so * mag + want.abs()) + 1e-6;
            assert!(
                (got - want).abs() <= tol,
                "{what}: o at row {r}, dim {d} is {got}, want {want} (bound {tol}; scaled by scale_o)"
            );
            worst = worst.max((got - want).abs() / tol);
        }
        g_s.push(got_stats[r]);
        w_s.push(want_rows[r].as_ref().map_or(f64::NAN, |(_, lse)| *lse));
    }
    eprintln!("{what}: the output's largest error is {worst:.3} of its bound");
    let got_amax = |m: &GpuRef<f32>| f64::from(m.download(b.s).unwrap()[0]);
    close(&g_s, &w_s, 1e-3, &format!("{what}: stats"));
    close(&[got_amax(&amax_s)], &[amax_p], 1e-3, &format!("{what}: amax_s"));
    let ao = got_amax(&amax_o);
    assert!((ao - amax_out).abs() <= 1.5 * u * amax_mag, "{what}: amax_o is {ao}, want {amax_out}");
}

/// Each valid row's probabilities as `(key index, probability)`, the rows of [`sdpa_forward`].
fn sdpa_probabilities(
    c: &AttnCase,
    q: &[f64],
    k: &[f64],
    sq: &[usize],
    skv: &[usize],
    scale: f64,
) -> Vec<Option<Vec<(usize, f64)>>> {
    let group = c.h / c.h_kv;
    let mut rows = Vec::new();
    for b in 0..c.b {
        for h in 0..c.h {
            for i in 0..c.s_q {
                if i >= sq[b] {
                    rows.push(None);
                    continue;
                }
                let keys: Vec<usize> = (0..skv[b]).filter(|&j| !c.causal || j <= i).collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        (0..c.d)
                            .map(|d| {
                                q[((b * c.h + h) * c.s_q + i) * c.d + d]
                                    * k[((b * c.h_kv + h / group) * c.s_kv + j) * c.d + d]
                            })
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                rows.push(Some(keys.iter().zip(&w).map(|(&j, &x)| (j, x / sum)).collect()));
            }
        }
    }
    rows
}

/// The FP8 cases: plain, causal, padded, grouped-query heads, interleaved; head dims 64 and
/// 128; lengths that are not multiples of 64.
pub fn fp8_cases() -> Vec<AttnCase> {
    vec![
        AttnCase::new(2, 2, 2, 64, 64, 64),
        AttnCase::new(2, 2, 2, 70, 70, 128).causal(),
        AttnCase::new(3, 2, 2, 45, 70, 64).padded(),
        AttnCase::new(2, 4, 2, 33, 33, 128).causal().padded(),
        AttnCase::new(1, 4, 1, 20, 29, 64).bshd(),
    ]
}
