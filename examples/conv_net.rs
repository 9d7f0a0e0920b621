//! A small CNN's training step on two lanes, with cuDNN:
//!
//! - forward (lane `head`): `a1 = relu(conv3x3(x, w1) + b1)` (one fused kernel), `p1 =
//!   maxpool2x2(a1)`, `z = conv6x6(p1, w2)` (the classifier: one logit per class), `logp =
//!   log_softmax(z)`, and the loss gradient `dz = softmax(z) - onehot`, divided by the batch,
//!   which is log-softmax's backward of `dlogp = -onehot / N`;
//! - backward, split over the two lanes, which run at the same time: `head` computes the
//!   classifier's filter gradient `dw2`; `trunk` goes back through the classifier, the pooling
//!   and the ReLU to `dw1` and the bias gradient `db1` (a backward-filter convolution of `dz1`
//!   against a tensor of ones: `db1[k] = Σ dz1[·, k, ·, ·]`).
//!
//! The jobs are declared (each names the buffers it reads and writes), so the backward jobs
//! wait for the forward one without a `wait` in between. NHWC, f32. `cargo run --release
//! --example conv_net --features cudnn` runs on GPU 0 (cuDNN on the loader path:
//! `. tools/cuda-libs-env`), or on the CPU simulation when there is no GPU (every op then
//! computes on the host); either way the loss and every gradient are checked against a CPU
//! reference in f64, and a wrong one fails the example.

use cusched::cudnn::{
    Activation, ActivationMode, ConvActivation, Convolution, Pooling, PoolingMode, Shape, Softmax, SoftmaxAlgo,
    SoftmaxMode, TensorView,
};
use cusched::{Device, GpuRef};

/// Batch, input channels, image side, first layer's channels, classes.
const N: usize = 4;
const C: usize = 3;
const HW: usize = 12;
const K1: usize = 8;
const CLASSES: usize = 10;
/// The pooled side, which the classifier's filter covers whole.
const P: usize = HW / 2;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Deterministic values in [-0.5, 0.5).
fn fill(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5).collect()
}

/// Index of `[n, c, h, w]` in an NHWC tensor of `c_all` channels and side `side`.
fn at(n: usize, c: usize, h: usize, w: usize, c_all: usize, side: usize) -> usize {
    ((n * side + h) * side + w) * c_all + c
}

/// The CPU reference of the whole step in f64: (loss, dw1, db1, dw2).
fn reference(x: &[f32], w1: &[f32], b1: &[f32], w2: &[f32], labels: &[usize]) -> (f64, Vec<f64>, Vec<f64>, Vec<f64>) {
    let f = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    let (x, w1, b1, w2) = (f(x), f(w1), f(b1), f(w2));
    // conv3x3 (pad 1) + bias + ReLU.
    let mut a1 = vec![0.0; N * HW * HW * K1];
    for n in 0..N {
        for k in 0..K1 {
            for h in 0..HW {
                for w in 0..HW {
                    let mut acc = b1[k];
                    for c in 0..C {
                        for r in 0..3 {
                            for s in 0..3 {
                                let (ih, iw) = ((h + r) as isize - 1, (w + s) as isize - 1);
                                if ih < 0 || iw < 0 || ih >= HW as isize || iw >= HW as isize {
                                    continue;
                                }
                                acc += x[at(n, c, ih as usize, iw as usize, C, HW)] * w1[at(k, c, r, s, C, 3)];
                            }
                        }
                    }
                    a1[at(n, k, h, w, K1, HW)] = acc.max(0.0);
                }
            }
        }
    }
    // maxpool 2x2, remembering where each maximum came from (the first in the window).
    let mut p1 = vec![0.0; N * P * P * K1];
    let mut arg = vec![0usize; p1.len()];
    for n in 0..N {
        for k in 0..K1 {
            for h in 0..P {
                for w in 0..P {
                    let mut best = (f64::NEG_INFINITY, 0);
                    for (dh, dw) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let i = at(n, k, 2 * h + dh, 2 * w + dw, K1, HW);
                        if a1[i] > best.0 {
                            best = (a1[i], i);
                        }
                    }
                    let o = at(n, k, h, w, K1, P);
                    (p1[o], arg[o]) = best;
                }
            }
        }
    }
    // The classifier, log-softmax, the loss and its gradient dz = (softmax - onehot) / N.
    let mut loss = 0.0;
    let mut dz = vec![0.0; N * CLASSES];
    for n in 0..N {
        let z: Vec<f64> = (0..CLASSES)
            .map(|j| (0..P * P * K1).map(|i| p1[n * P * P * K1 + i] * w2[j * P * P * K1 + i]).sum())
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        loss -= (z[labels[n]] - lse) / N as f64;
        for j in 0..CLASSES {
            dz[n * CLASSES + j] = ((z[j] - lse).exp() - if j == labels[n] { 1.0 } else { 0.0 }) / N as f64;
        }
    }
    // Backward: dw2, dp1, through the pooling and the ReLU, then dw1 and db1.
    let mut dw2 = vec![0.0; CLASSES * P * P * K1];
    let mut dp1 = vec![0.0; p1.len()];
    for n in 0..N {
        for j in 0..CLASSES {
            for i in 0..P * P * K1 {
                dw2[j * P * P * K1 + i] += dz[n * CLASSES + j] * p1[n * P * P * K1 + i];
                dp1[n * P * P * K1 + i] += dz[n * CLASSES + j] * w2[j * P * P * K1 + i];
            }
        }
    }
    let mut dz1 = vec![0.0; a1.len()];
    for (o, &i) in arg.iter().enumerate() {
        if a1[i] > 0.0 {
            dz1[i] += dp1[o];
        }
    }
    let mut dw1 = vec![0.0; K1 * 9 * C];
    let mut db1 = vec![0.0; K1];
    for n in 0..N {
        for k in 0..K1 {
            for h in 0..HW {
                for w in 0..HW {
                    let g = dz1[at(n, k, h, w, K1, HW)];
                    db1[k] += g;
                    for c in 0..C {
                        for r in 0..3 {
                            for s in 0..3 {
                                let (ih, iw) = ((h + r) as isize - 1, (w + s) as isize - 1);
                                if ih >= 0 && iw >= 0 && ih < HW as isize && iw < HW as isize {
                                    dw1[at(k, c, r, s, C, 3)] += g * x[at(n, c, ih as usize, iw as usize, C, HW)];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (loss, dw1, db1, dw2)
}

/// Fails unless `got` is within 1e-4 of `want`, relative to `want`'s largest magnitude.
fn check(what: &str, got: &[f32], want: &[f64]) -> Res<()> {
    let scale = want.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    if got.len() != want.len() || err > 1e-4 * scale {
        return Err(format!("{what} is off the reference by {err:.3e} (largest magnitude {scale:.3e})").into());
    }
    Ok(())
}

/// A buffer seen as an NHWC tensor.
fn view(buf: &GpuRef<f32>, n: usize, c: usize, h: usize, w: usize) -> TensorView<'_, f32> {
    TensorView::new(buf, Shape::nhwc(n, c, h, w))
}

fn main() -> Res<()> {
    // CUDA device 0 if there is one, else the CPU simulation.
    let device = Device::open_or_sim()?;
    println!(
        "running on {}",
        if device.is_simulated() { "the simulated backend (cuDNN's ops computed on the CPU)" } else { "CUDA device 0" }
    );
    let s = device.default_stream();
    let (head, trunk) = (device.lane("head")?, device.lane("trunk")?);
    let labels: Vec<usize> = (0..N).map(|n| (3 * n + 1) % CLASSES).collect();
    let (hx, hw1, hb1) = (fill(N * HW * HW * C, 1), fill(K1 * 9 * C, 2), fill(K1, 3));
    let hw2: Vec<f32> = fill(CLASSES * P * P * K1, 4).iter().map(|v| v / 4.0).collect();
    let mut dlogp = vec![0.0f32; N * CLASSES];
    for (n, &l) in labels.iter().enumerate() {
        dlogp[n * CLASSES + l] = -1.0 / N as f32;
    }
    let up = |v: &[f32]| device.upload(s, v);
    let (x, w1, b1, w2, dlogp) = (up(&hx)?, up(&hw1)?, up(&hb1)?, up(&hw2)?, up(&dlogp)?);
    let ones = up(&vec![1.0f32; N * HW * HW])?;
    let zeros = |n: usize| device.alloc_zeros::<f32>(s, n);
    let (a1, p1) = (zeros(N * HW * HW * K1)?, zeros(N * P * P * K1)?);
    let (logp, dz) = (zeros(N * CLASSES)?, zeros(N * CLASSES)?);
    let (dp1, da1, dz1) = (zeros(p1.len())?, zeros(a1.len())?, zeros(a1.len())?);
    let (dw1, db1, dw2) = (zeros(w1.len())?, zeros(K1)?, zeros(w2.len())?);
    // The layers' settings, cheap to make in each job.
    let conv1 = || Convolution::new().pad(&[1, 1]);
    let conv2 = Convolution::new;
    let pool = || Pooling::new(PoolingMode::Max, &[2, 2]);
    let log_softmax = Softmax::new(SoftmaxAlgo::Log, SoftmaxMode::Instance);

    // Forward and the loss gradient, on `head`.
    head.job()
        .read(&x)
        .read(&w1)
        .read(&b1)
        .read(&w2)
        .read(&dlogp)
        .write(&a1)
        .write(&p1)
        .write(&logp)
        .write(&dz)
        .submit(move |cx, (x, w1, b1, w2, dlogp, a1, p1, logp, dz)| {
            let dnn = cx.cudnn()?;
            let (tx, ta1) = (view(&x, N, C, HW, HW), view(&a1, N, K1, HW, HW));
            dnn.conv_bias_activation_forward(
                &conv1(),
                ConvActivation::Relu,
                &tx,
                &view(&w1, K1, C, 3, 3),
                None,
                &b1,
                &ta1,
            )?;
            let tp1 = view(&p1, N, K1, P, P);
            dnn.pooling_forward(&pool(), &ta1, &tp1)?;
            let tz = view(&dz, N, CLASSES, 1, 1);
            // The logits go to `dz` first, which log-softmax's backward then overwrites.
            dnn.conv_forward(&conv2(), &tp1, &view(&w2, CLASSES, K1, P, P), &tz)?;
            let tlogp = view(&logp, N, CLASSES, 1, 1);
            dnn.softmax_forward(&log_softmax, &tz, &tlogp)?;
            dnn.softmax_backward(&log_softmax, &tlogp, &view(&dlogp, N, CLASSES, 1, 1), &tz)?;
            Ok(())
        });
    // The classifier's filter gradient, on `head` again.
    let head_done = head.job().read(&p1).read(&dz).write(&dw2).submit(move |cx, (p1, dz, dw2)| {
        let (tp1, tdz) = (view(&p1, N, K1, P, P), view(&dz, N, CLASSES, 1, 1));
        cx.cudnn()?.conv_backward_filter(&conv2(), &tp1, &tdz, &view(&dw2, CLASSES, K1, P, P))?;
        Ok(())
    });
    // Back to the first layer's gradients, on `trunk`, at the same time.
    let trunk_done = trunk
        .job()
        .read(&x)
        .read(&ones)
        .read(&w2)
        .read(&a1)
        .read(&p1)
        .read(&dz)
        .write(&dp1)
        .write(&da1)
        .write(&dz1)
        .write(&dw1)
        .write(&db1)
        .submit(move |cx, (x, ones, w2, a1, p1, dz, dp1, da1, dz1, dw1, db1)| {
            let dnn = cx.cudnn()?;
            let (tp1, tdp1) = (view(&p1, N, K1, P, P), view(&dp1, N, K1, P, P));
            dnn.conv_backward_data(&conv2(), &view(&w2, CLASSES, K1, P, P), &view(&dz, N, CLASSES, 1, 1), &tdp1)?;
            let (ta1, tda1, tdz1) = (view(&a1, N, K1, HW, HW), view(&da1, N, K1, HW, HW), view(&dz1, N, K1, HW, HW));
            dnn.pooling_backward(&pool(), &tp1, &tdp1, &ta1, &tda1)?;
            // ReLU's gradient passes where its output is positive, which `a1` shows as well as
            // the pre-activation would.
            dnn.activation_backward(&Activation::new(ActivationMode::Relu), &ta1, &tda1, &ta1, &tdz1)?;
            dnn.conv_backward_filter(&conv1(), &view(&x, N, C, HW, HW), &tdz1, &view(&dw1, K1, C, 3, 3))?;
            dnn.conv_backward_filter(&conv2(), &view(&ones, N, 1, HW, HW), &tdz1, &view(&db1, K1, 1, 1, 1))?;
            Ok(())
        });
    head_done.wait()?;
    trunk_done.wait()?;

    let (glogp, gdw1, gdb1, gdw2) = (logp.download(s)?, dw1.download(s)?, db1.download(s)?, dw2.download(s)?);
    let loss = -labels.iter().enumerate().map(|(n, &l)| glogp[n * CLASSES + l] as f64).sum::<f64>() / N as f64;
    let (want_loss, want_dw1, want_db1, want_dw2) = reference(&hx, &hw1, &hb1, &hw2, &labels);
    println!("loss {loss:.6} (reference {want_loss:.6}); |dw1| {:.4e}", gdw1.iter().map(|v| v.abs()).sum::<f32>());
    if (loss - want_loss).abs() > 1e-4 * want_loss.abs().max(1.0) {
        return Err(format!("the loss {loss} is off the reference {want_loss}").into());
    }
    check("dw1", &gdw1, &want_dw1)?;
    check("db1", &gdb1, &want_db1)?;
    check("dw2", &gdw2, &want_dw2)?;
    println!("the loss and every gradient match the CPU reference");
    Ok(())
}
