//! Every FP8 combination `BlasLt::matmul` accepts runs on a real GPU and matches a CPU
//! reference: each input pair, each C and D type, each epilogue, with and without D's scale
//! and amax, column- and row-major. A combination the crate rejects must be a typed
//! `InvalidArgument`; anything accepted that then fails (at the heuristic or in the matmul) or
//! computes a wrong answer is collected and reported at the end.
#![allow(clippy::too_many_arguments, clippy::needless_range_loop)] // the reference mirrors the math

use crate::common::reference::blas_lt::EPILOGUES;
use crate::common::*;
use cusched::blas_lt::{Aux, Epilogue, Fp8Scales, LtElement, Matmul, Order, ReluMask, Transpose, F8E4M3, F8E5M2};
use cusched::half::{bf16, f16};
use cusched::{Device, Error, GpuRef, Handles};

/// An element type with its conversions and the rounding its storage adds.
trait Val: LtElement<Scale = f32> {
    fn of(x: f64) -> Self;
    fn f(self) -> f64;
    /// Relative error of storing a value.
    const REL: f64;
    const NAME: &'static str;
}

impl Val for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
    const REL: f64 = 1e-5;
    const NAME: &'static str = "f32";
}
impl Val for f16 {
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
    const REL: f64 = 2e-3;
    const NAME: &'static str = "f16";
}
impl Val for bf16 {
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn f(self) -> f64 {
        self.to_f64()
    }
    const REL: f64 = 1e-2;
    const NAME: &'static str = "bf16";
}
impl Val for F8E4M3 {
    fn of(x: f64) -> Self {
        // Nearest of the 127 magnitudes (max 448), saturating.
        let a = x.abs().min(448.0);
        let best = (0u8..0x7f).min_by(|&p, &q| (e4m3(p) - a).abs().total_cmp(&(e4m3(q) - a).abs())).unwrap_or(0);
        F8E4M3(best | if x < 0.0 { 0x80 } else { 0 })
    }
    fn f(self) -> f64 {
        let v = e4m3(self.0 & 0x7f);
        if self.0 & 0x80 != 0 {
            -v
        } else {
            v
        }
    }
    const REL: f64 = 1.0 / 16.0;
    const NAME: &'static str = "e4m3";
}
impl Val for F8E5M2 {
    fn of(x: f64) -> Self {
        // The top byte of an IEEE half, rounded to nearest.
        let bits = f16::from_f64(x).to_bits();
        F8E5M2(((bits + 0x80) >> 8) as u8)
    }
    fn f(self) -> f64 {
        f16::from_bits((self.0 as u16) << 8).to_f64()
    }
    const REL: f64 = 1.0 / 8.0;
    const NAME: &'static str = "e5m2";
}

fn e4m3(bits: u8) -> f64 {
    let (e, m) = (((bits >> 3) & 0xf) as i32, (bits & 7) as f64);
    if e == 0 {
        m / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    }
}

/// What the whole sweep saw.
#[derive(Default)]
struct Tally {
    ran: usize,
    rejected: usize,
    failures: Vec<String>,
}

const M: usize = 64;
const N: usize = 48;
const K: usize = 96;

/// Values exact in both FP8 formats, so the inputs need no rounding model.
fn pick(rng: &mut Rng) -> f64 {
    [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -2.0, 3.0, 0.25, -0.75][rng.below(10) as usize]
}

/// One input pair, C and D type, over every epilogue, scale, amax and order option.
fn sweep<TA: Val, TB: Val, TC: Val, TD: Val, E: Val>(dev: &Device, h: &mut Handles, rng: &mut Rng, t: &mut Tally) {
    let s = h.stream();
    // A is stored K x M (used transposed), B K x N: the TN layout, and in row-major the same
    // memory is A (M x K) and Bᵀ.
    let fa: Vec<f64> = (0..K * M).map(|_| pick(rng)).collect();
    let fb: Vec<f64> = (0..K * N).map(|_| pick(rng)).collect();
    let a = dev.upload(s, &fa.iter().map(|&x| TA::of(x)).collect::<Vec<_>>()).unwrap();
    let b = dev.upload(s, &fb.iter().map(|&x| TB::of(x)).collect::<Vec<_>>()).unwrap();
    // The exact product, column-major M x N, and the magnitudes of its terms.
    let (mut ab, mut mag) = (vec![0.0; M * N], vec![0.0; M * N]);
    for j in 0..N {
        for i in 0..M {
            for p in 0..K {
                ab[i + j * M] += fa[p + i * K] * fb[p + j * K];
                mag[i + j * M] += (fa[p + i * K] * fb[p + j * K]).abs();
            }
        }
    }
    let hc: Vec<TC> = (0..M * N).map(|_| TC::of(pick(rng))).collect();
    let fc: Vec<f64> = hc.iter().map(|x| x.f()).collect();
    let c = dev.upload(s, &hc).unwrap();
    let hbias: Vec<E> = (0..M.max(N)).map(|_| E::of(pick(rng))).collect();
    let fbias: Vec<f64> = hbias.iter().map(|x| x.f()).collect();
    let bias = dev.upload(s, &hbias).unwrap();
    let (aux_ld, mask_ld) = (M.div_ceil(8) * 8, M.div_ceil(128) * 128);
    let haux: Vec<E> = (0..aux_ld * N).map(|_| E::of(pick(rng))).collect();
    let faux: Vec<f64> = haux.iter().map(|x| x.f()).collect();
    let mask_bytes: Vec<u8> = (0..mask_ld * N / 8).map(|_| rng.below(256) as u8).collect();
    let bit = |i: usize, j: usize| (mask_bytes[(j * mask_ld + i) / 8] >> ((j * mask_ld + i) % 8)) & 1 == 1;
    for order in [Order::Col, Order::Row] {
        for name in EPILOGUES {
            if order == Order::Row && !matches!(name, "default" | "bias") {
                continue;
            }
            // Bias gradients of FP8 inputs are compared at unit scales: which scales they
            // include is not what this sweep checks.
            let grad_of_inputs = name.starts_with("bgrad");
            let (sa, sb) = if grad_of_inputs { (1.0f32, 1.0f32) } else { (0.5f32, 0.25f32) };
            let (scale_a, scale_b) = (dev.upload(s, &[sa]).unwrap(), dev.upload(s, &[sb]).unwrap());
            for (with_scale_d, amax, beta) in
                [(false, false, 0.0f32), (true, false, 0.5), (false, true, 0.0), (true, true, 0.5)]
            {
                let sd = if with_scale_d { 2.0f32 } else { 1.0 };
                let scale_d = dev.upload(s, &[sd]).unwrap();
                let what = format!(
                    "{} x {} -> C {} D {} ({name}, {order:?}, scale_d {with_scale_d}, amax {amax}, beta {beta})",
                    TA::NAME,
                    TB::NAME,
                    TC::NAME,
                    TD::NAME
                );
                let d = dev.upload(s, &[TD::of(0.0); M * N]).unwrap();
                let aux = dev.upload(s, &haux).unwrap();
                let mask = dev.upload(s, &mask_bytes).unwrap();
                let grad = dev.upload(s, &vec![E::of(0.0); M.max(N)]).unwrap();
                let (auxv, maskv) = (Aux { buf: &aux, ld: None }, ReluMask { buf: &mask, ld: None });
                let e: Epilogue<'_, E> = match name {
                    "default" => Epilogue::Default,
                    "relu" => Epilogue::Relu,
                    "gelu" => Epilogue::Gelu,
                    "bias" => Epilogue::Bias(&bias),
                    "relu_bias" => Epilogue::ReluBias(&bias),
                    "gelu_bias" => Epilogue::GeluBias(&bias),
                    "relu_aux" => Epilogue::ReluAux(maskv),
                    "gelu_aux" => Epilogue::GeluAux(auxv),
                    "relu_aux_bias" => Epilogue::ReluAuxBias { bias: &bias, mask: maskv },
                    "gelu_aux_bias" => Epilogue::GeluAuxBias { bias: &bias, aux: auxv },
                    "drelu" => Epilogue::DRelu(maskv),
                    "dgelu" => Epilogue::DGelu(auxv),
                    "drelu_bgrad" => Epilogue::DReluBgrad { mask: maskv, bias_grad: &grad },
                    "dgelu_bgrad" => Epilogue::DGeluBgrad { aux: auxv, bias_grad: &grad },
                    "bgrada" => Epilogue::BgradA(&grad),
                    _ => Epilogue::BgradB(&grad),
                };
                let (ta, tb) =
                    if order == Order::Col { (Transpose::Yes, Transpose::No) } else { (Transpose::No, Transpose::Yes) };
                let scales = Fp8Scales { a: &scale_a, b: &scale_b, c: None, d: with_scale_d.then_some(&scale_d) };
                let mm = Matmul::new(M, N, K, &a, &b, &d)
                    .order(order)
                    .transpose(ta, tb)
                    .scale(1.0, beta)
                    .fp8(scales, amax)
                    .epilogue(e)
                    .with_c(&c, None);
                let out = match h.blas_lt().unwrap().matmul(&mm) {
                    Err(Error::InvalidArgument { .. }) => {
                        t.rejected += 1;
                        continue;
                    }
                    Err(other) => {
                        t.failures.push(format!("{what}: accepted, then failed: {other}"));
                        continue;
                    }
                    Ok(done) => match done.wait() {
                        Ok(out) => out,
                        Err(err) => {
                            t.failures.push(format!("{what}: the matmul failed: {err}"));
                            continue;
                        }
                    },
                };
                t.ran += 1;
                // The reference in D's own layout: (i, j) of the column-major M x N product.
                let at = |i: usize, j: usize| if order == Order::Col { i + j * M } else { i * N + j };
                let scale = (sa * sb) as f64;
                let bias_of = |i: usize, j: usize| {
                    if !name.contains("bias") || name.contains("bgrad") {
                        0.0
                    } else if order == Order::Col {
                        fbias[i]
                    } else {
                        fbias[j]
                    }
                };
                let (mut want, mut tol) = (vec![0.0; M * N], vec![0.0; M * N]);
                let mut pre = vec![0.0; M * N];
                for j in 0..N {
                    for i in 0..M {
                        // In row-major, D (M x N) = A Bᵀ with A M x K: the same sums.
                        let x = ab[i + j * M] * scale + beta as f64 * fc[at(i, j)];
                        let p = x + bias_of(i, j);
                        let v = match name {
                            "relu" | "relu_bias" | "relu_aux" | "relu_aux_bias" => p.max(0.0),
                            "gelu" | "gelu_bias" | "gelu_aux" | "gelu_aux_bias" => gelu(p),
                            "drelu" | "drelu_bgrad" => {
                                if bit(i, j) {
                                    x
                                } else {
                                    0.0
                                }
                            }
                            "dgelu" | "dgelu_bgrad" => x * dgelu(faux[i + j * aux_ld]),
                            _ => p,
                        };
                        pre[i + j * M] = p;
                        want[at(i, j)] = v;
                        let m = mag[i + j * M] * scale + beta.abs() as f64 * fc[at(i, j)].abs() + 1.0;
                        tol[at(i, j)] = 1e-2 * m + TD::REL * v.abs() * 2.0;
                    }
                }
                let got: Vec<f64> = d.download(s).unwrap().iter().map(|x| x.f() / sd as f64).collect();
                if let Some(i) = (0..M * N).find(|&i| (got[i] - want[i]).abs() > tol[i]) {
                    t.failures.push(format!("{what}: D[{i}] = {}, want {}", got[i], want[i]));
                    continue;
                }
                if amax {
                    let want_amax = want.iter().fold(0.0f64, |acc, v| acc.max(v.abs()));
                    match out.amax_d {
                        Some(got) if (got as f64 - want_amax).abs() <= 2e-2 * want_amax + 1e-2 => {}
                        other => t.failures.push(format!("{what}: amax {other:?}, want {want_amax}")),
                    }
                }
                if name == "gelu_aux" || name == "gelu_aux_bias" {
                    let got: Vec<f64> = aux.download(s).unwrap().iter().map(|x| x.f()).collect();
                    if let Some(ij) = (0..M * N)
                        .find(|&ij| (got[ij % M + ij / M * aux_ld] - pre[ij]).abs() > 2e-2 * (pre[ij].abs() + 1.0))
                    {
                        t.failures.push(format!(
                            "{what}: aux[{ij}] = {}, want {}",
                            got[ij % M + ij / M * aux_ld],
                            pre[ij]
                        ));
                    }
                }
                if name == "relu_aux" || name == "relu_aux_bias" {
                    let got = mask.download(s).unwrap();
                    for ij in 0..M * N {
                        let (i, j) = (ij % M, ij / M);
                        let idx = j * mask_ld + i;
                        let set = (got[idx / 8] >> (idx % 8)) & 1 == 1;
                        if pre[ij].abs() > 1e-2 * (mag[ij] + 1.0) && set != (pre[ij] > 0.0) {
                            t.failures
                                .push(format!("{what}: mask bit ({i}, {j}) is {set}, pre-activation {}", pre[ij]));
                            break;
                        }
                    }
                }
                let sums: Option<Vec<(f64, f64)>> = match name {
                    "drelu_bgrad" | "dgelu_bgrad" => Some(
                        (0..M)
                            .map(|i| {
                                let s: f64 = (0..N).map(|j| want[i + j * M]).sum();
                                let m: f64 = (0..N).map(|j| tol[i + j * M] * 2.0).sum();
                                (s, m)
                            })
                            .collect(),
                    ),
                    "bgrada" => {
                        Some((0..M).map(|i| ((0..K).map(|p| fa[p + i * K]).sum(), 1e-2 * K as f64 + 0.1)).collect())
                    }
                    "bgradb" => {
                        Some((0..N).map(|j| ((0..K).map(|p| fb[p + j * K]).sum(), 1e-2 * K as f64 + 0.1)).collect())
                    }
                    _ => None,
                };
                if let Some(sums) = sums {
                    let got: Vec<f64> = grad.download(s).unwrap().iter().map(|x| x.f()).collect();
                    if let Some(i) =
                        (0..sums.len()).find(|&i| (got[i] - sums[i].0).abs() > sums[i].1 + E::REL * sums[i].0.abs())
                    {
                        t.failures.push(format!("{what}: bias gradient [{i}] = {}, want {}", got[i], sums[i].0));
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_fp8_combination_the_crate_accepts_runs_and_matches_the_reference() {
    let Some(dev) = gpu() else { return };
    if dev.compute_capability().unwrap() < (8, 9) {
        eprintln!("skipped: FP8 needs compute capability 8.9");
        return;
    }
    let mut rng = Rng::new();
    let mut h = Handles::new(&dev, dev.new_stream().unwrap()).unwrap();
    let mut t = Tally::default();
    macro_rules! inputs {
        ($ta:ty, $tb:ty) => {
            // (C, D, epilogue vectors) of NVIDIA's FP8 table, and the rows it leaves out.
            sweep::<$ta, $tb, bf16, bf16, bf16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, f16, f16, f16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, f32, f32, bf16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, bf16, F8E4M3, bf16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, f16, F8E4M3, f16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, bf16, F8E5M2, bf16>(&dev, &mut h, &mut rng, &mut t);
            sweep::<$ta, $tb, f16, F8E5M2, f16>(&dev, &mut h, &mut rng, &mut t);
        };
    }
    inputs!(F8E4M3, F8E4M3);
    inputs!(F8E4M3, F8E5M2);
    inputs!(F8E5M2, F8E4M3);
    // The case, which passed validation and then failed inside the heuristic.
    let s = h.stream();
    let (a, b) = (
        dev.upload(s, &vec![F8E4M3::of(0.5); 96 * 64]).unwrap(),
        dev.upload(s, &vec![F8E4M3::of(0.5); 96 * 48]).unwrap(),
    );
    let (c, d, bias) = (
        dev.upload(s, &vec![bf16::ZERO; 64 * 48]).unwrap(),
        dev.upload(s, &vec![bf16::ZERO; 64 * 48]).unwrap(),
        dev.upload(s, &[bf16::ZERO; 64]).unwrap(),
    );
    let one: GpuRef<f32> = dev.upload(s, &[1.0f32]).unwrap();
    let mm = Matmul::new(64, 48, 96, &a, &b, &d)
        .transpose(Transpose::Yes, Transpose::No)
        .fp8(Fp8Scales { a: &one, b: &one, c: None, d: None }, true)
        .with_c(&c, None)
        .epilogue(Epilogue::Bias(&bias));
    match h.blas_lt().unwrap().matmul(&mm) {
        Err(Error::InvalidArgument { .. }) => {}
        Err(other) => t.failures.push(format!("the issue's case: untyped failure {other}")),
        Ok(done) => {
            if let Err(err) = done.wait() {
                t.failures.push(format!("the issue's case: the matmul failed: {err}"));
            }
        }
    }
    println!("FP8 sweep: {} ran, {} rejected, {} failed", t.ran, t.rejected, t.failures.len());
    for f in &t.failures {
        println!("  {f}");
    }
    assert!(t.failures.is_empty(), "{} FP8 combinations failed (listed above)", t.failures.len());
    assert!(t.ran > 0, "no FP8 combination ran");
}
