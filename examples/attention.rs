//! A transformer block's attention, forward and backward, with cuDNN's fused scaled
//! dot-product attention:
//!
//! - the projections `Q = X·Wq`, `K = X·Wk`, `V = X·Wv` of the block's input `X` (`[B, S, E]`,
//!   `E = H·D`) are computed on the host and uploaded as the projections lay them out:
//!   `[B, S, H, D]`, heads interleaved ([`AttnTensor::bshd`]);
//! - forward: `O = softmax(Q·Kᵀ/√D + causal mask)·V` per batch and head, keeping each row's
//!   logsumexp (the statistics the backward op reads);
//! - the loss `L = ½‖O − T‖²` against a target `T`, whose gradient `dO = O − T` is what the
//!   output projection would hand back;
//! - backward: `dQ`, `dK`, `dV` from `Q`, `K`, `V`, `O`, the statistics and `dO`.
//!
//! B 2, H 4, S 77, D 64, causal, bf16 with f32 accumulation. `cargo run --release --example
//! attention --features cudnn` runs on GPU 0 (cuDNN 9 on the loader path:
//! `. tools/cuda-libs-env`), or on the CPU simulation when there is no GPU (the ops then compute
//! on the host); either way the output, the statistics and every gradient are checked against a
//! CPU reference in f64, and a wrong one fails the example.

use cusched::cudnn::{Attention, AttnTensor, SdpaGrads};
use cusched::half::bf16;
use cusched::{Device, Handles};

/// Batch, heads, sequence length, head dim; the model width is `H·D`.
const B: usize = 2;
const H: usize = 4;
const S: usize = 77;
const D: usize = 64;
const E: usize = H * D;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Deterministic values in [-0.5, 0.5).
fn fill(n: usize, seed: u32) -> Vec<f64> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f64 / 1000.0 - 0.5).collect()
}

/// Index of `[b, h, s, d]` in a `[B, S, H, D]` buffer.
fn at(b: usize, h: usize, s: usize, d: usize) -> usize {
    ((b * S + s) * H + h) * D + d
}

/// Rounds to bf16, as the device stores.
fn to_bf16(v: &[f64]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f64(x)).collect()
}

fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `X·W` for `X` `[B·S, E]` and `W` `[E, E]`, row-major: the `[B, S, H, D]` projection.
fn project(x: &[f64], w: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; B * S * E];
    for r in 0..B * S {
        for c in 0..E {
            y[r * E + c] = (0..E).map(|p| x[r * E + p] * w[p * E + c]).sum();
        }
    }
    y
}

/// The reference attention in f64, every tensor `[B, S, H, D]` but `stats` (`[B, H, S]`).
struct Reference {
    o: Vec<f64>,
    stats: Vec<f64>,
    dq: Vec<f64>,
    dk: Vec<f64>,
    dv: Vec<f64>,
}

/// The reference's forward from `q`, `k`, `v` and backward from the output gradient `g`.
fn reference(q: &[f64], k: &[f64], v: &[f64], g: &[f64]) -> Reference {
    let scale = 1.0 / (D as f64).sqrt();
    let n = B * S * E;
    let (mut o, mut stats) = (vec![0.0; n], vec![0.0; B * H * S]);
    // The probabilities, kept for the backward pass: [b][h][i][j], j <= i.
    let mut p = vec![0.0; B * H * S * S];
    for b in 0..B {
        for h in 0..H {
            for i in 0..S {
                let dot = |j: usize| (0..D).map(|d| q[at(b, h, i, d)] * k[at(b, h, j, d)]).sum::<f64>() * scale;
                let s: Vec<f64> = (0..=i).map(dot).collect();
                let max = s.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                let lse = max + s.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
                stats[(b * H + h) * S + i] = lse;
                for (j, sj) in s.iter().enumerate() {
                    let pij = (sj - lse).exp();
                    p[((b * H + h) * S + i) * S + j] = pij;
                    for d in 0..D {
                        o[at(b, h, i, d)] += pij * v[at(b, h, j, d)];
                    }
                }
            }
        }
    }
    let (mut dq, mut dk, mut dv) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for b in 0..B {
        for h in 0..H {
            for i in 0..S {
                // Σ_j P_ij dP_ij, which is dO_i · O_i.
                let di: f64 = (0..D).map(|d| g[at(b, h, i, d)] * o[at(b, h, i, d)]).sum();
                for j in 0..=i {
                    let pij = p[((b * H + h) * S + i) * S + j];
                    let dp: f64 = (0..D).map(|d| g[at(b, h, i, d)] * v[at(b, h, j, d)]).sum();
                    let ds = pij * (dp - di) * scale;
                    for d in 0..D {
                        dv[at(b, h, j, d)] += pij * g[at(b, h, i, d)];
                        dq[at(b, h, i, d)] += ds * k[at(b, h, j, d)];
                        dk[at(b, h, j, d)] += ds * q[at(b, h, i, d)];
                    }
                }
            }
        }
    }
    Reference { o, stats, dq, dk, dv }
}

/// Fails unless `got` is near `want`: the relative L2 error within 2e-2 and every element
/// within 4e-2 of `want`'s largest magnitude (bf16 keeps about 3 decimal digits, and the GPU's
/// engine rounds the probabilities to bf16 before the second matmul).
fn check(what: &str, got: &[f64], want: &[f64]) -> Res<()> {
    let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((g - w).abs()));
    let l2 = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let rel = l2(&mut got.iter().zip(want).map(|(g, w)| g - w)) / l2(&mut want.iter().copied()).max(1e-12);
    println!("{what:>5}: largest error {err:.2e} (largest magnitude {scale:.2e}), relative L2 error {rel:.2e}");
    if got.len() != want.len() || err > 4e-2 * scale || rel > 2e-2 {
        return Err(format!("{what} is off the reference").into());
    }
    Ok(())
}

fn main() -> Res<()> {
    // CUDA device 0 if there is one, else the CPU simulation.
    let device = Device::open_or_sim()?;
    println!(
        "running on {}",
        if device.is_simulated() { "the simulated backend (cuDNN's ops computed on the CPU)" } else { "CUDA device 0" }
    );
    let s = device.default_stream();
    let mut h = Handles::new(&device, s)?;

    // The block's input and projections, on the host; the weights scaled by 1/√E so that the
    // projections keep the input's magnitude.
    let x = fill(B * S * E, 1);
    let w = |seed| fill(E * E, seed).iter().map(|v| v * 2.0 / (E as f64).sqrt()).collect::<Vec<_>>();
    let (hq, hk, hv) = (to_bf16(&project(&x, &w(2))), to_bf16(&project(&x, &w(3))), to_bf16(&project(&x, &w(4))));
    let target = fill(B * S * E, 5);
    let up = |v: &[bf16]| device.upload(s, v);
    let (q, k, v) = (up(&hq)?, up(&hk)?, up(&hv)?);
    let zeros = || device.alloc_zeros::<bf16>(s, B * S * E);
    let (o, dq, dk, dv) = (zeros()?, zeros()?, zeros()?, zeros()?);
    let stats = device.alloc_zeros::<f32>(s, B * H * S)?;

    let t = |buf| AttnTensor::bshd(buf, [B, H, S, D]);
    let attn = Attention::new().causal(true);
    let dnn = h.cudnn()?;
    dnn.sdpa_forward(&attn, &t(&q), &t(&k), &t(&v), &t(&o), Some(&stats))?.wait()?;

    // The loss and its gradient on the host, from the output as stored.
    let go = to_f64(&o.download(s)?);
    let loss: f64 = go.iter().zip(&target).map(|(a, b)| 0.5 * (a - b) * (a - b)).sum();
    let hdo = to_bf16(&go.iter().zip(&target).map(|(a, b)| a - b).collect::<Vec<_>>());
    let d_o = up(&hdo)?;

    let grads = SdpaGrads { d_o: t(&d_o), dq: t(&dq), dk: t(&dk), dv: t(&dv) };
    dnn.sdpa_backward(&attn, &t(&q), &t(&k), &t(&v), &t(&o), &stats, &grads)?.wait()?;
    println!("loss {loss:.6}; {} attention plans made", dnn.graph_plans_made());

    // The reference from the bf16 operands the device read (a wrong O fails its own check
    // first, so the dO made from it is checked too).
    let want = reference(&to_f64(&hq), &to_f64(&hk), &to_f64(&hv), &to_f64(&hdo));
    check("o", &go, &want.o)?;
    let gstats: Vec<f64> = stats.download(s)?.iter().map(|&x| f64::from(x)).collect();
    check("stats", &gstats, &want.stats)?;
    check("dq", &to_f64(&dq.download(s)?), &want.dq)?;
    check("dk", &to_f64(&dk.download(s)?), &want.dk)?;
    check("dv", &to_f64(&dv.download(s)?), &want.dv)?;
    println!("the output, the statistics and every gradient match the CPU reference");
    Ok(())
}
