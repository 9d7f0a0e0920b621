//! CPU references of the row normalizations (layer norm, RMS norm) in f64 as direct loops,
//! and the runner the simulator's and the GPU's tests share.

use super::cudnn::{close, from_el, round, to_el, Bench, El};
use crate::common::{random, Rng};
use cusched::cudnn::{NormKind, NormStats, RowNorm};

/// Forward: `(y, mean, inv_std)` of each row of the `rows x cols` matrix `x`.
#[allow(clippy::type_complexity)]
pub fn norm_forward(n: &RowNorm, x: &[f64], scale: &[f64], bias: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut invs) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..n.rows {
        let row = &x[r * n.cols..(r + 1) * n.cols];
        let mut mean = 0.0;
        if n.kind == NormKind::Layer {
            for v in row {
                mean += v;
            }
            mean /= n.cols as f64;
        }
        let mut sq = 0.0;
        for v in row {
            sq += (v - mean) * (v - mean);
        }
        let inv = 1.0 / (sq / n.cols as f64 + f64::from(n.epsilon)).sqrt();
        for (j, v) in row.iter().enumerate() {
            let b = if n.kind == NormKind::Layer { bias[j] } else { 0.0 };
            y.push((v - mean) * inv * scale[j] + b);
        }
        means.push(mean);
        invs.push(inv);
    }
    (y, means, invs)
}

/// Backward: `(dx, dscale, dbias)` by the chain rule through the mean and the deviation,
/// with the statistics recomputed exactly.
#[allow(clippy::needless_range_loop)]
pub fn norm_backward(n: &RowNorm, x: &[f64], dy: &[f64], scale: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (_, means, invs) = norm_forward(n, x, scale, &vec![0.0; n.cols]);
    let c = n.cols as f64;
    let (mut dx, mut ds, mut db) = (vec![0.0; x.len()], vec![0.0; n.cols], vec![0.0; n.cols]);
    for r in 0..n.rows {
        let (m, inv) = (means[r], invs[r]);
        // ∂L/∂x̂, then the sums the mean and the variance carry back.
        let mut sum_g = 0.0;
        let mut sum_gx = 0.0;
        for j in 0..n.cols {
            let i = r * n.cols + j;
            let xh = (x[i] - m) * inv;
            let g = dy[i] * scale[j];
            sum_g += g;
            sum_gx += g * xh;
            ds[j] += dy[i] * xh;
            db[j] += dy[i];
        }
        for j in 0..n.cols {
            let i = r * n.cols + j;
            let xh = (x[i] - m) * inv;
            let g = dy[i] * scale[j];
            let centered = if n.kind == NormKind::Layer { sum_g / c } else { 0.0 };
            dx[i] = inv * (g - centered - xh * sum_gx / c);
        }
    }
    (dx, ds, db)
}

/// Forward (training, then inference) and backward of `n` against the references.
pub fn check_norm<T: El>(b: &mut Bench<'_>, n: &RowNorm, rng: &mut Rng) {
    let what = format!("{} {n:?}", T::NAME);
    let len = n.rows * n.cols;
    let x: Vec<f64> = round::<T>(&random(rng, len).iter().map(|v| v * 3.0 + 0.5).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, len));
    let scale: Vec<f64> = random(rng, n.cols).iter().map(|v| 1.0 + v / 2.0).collect();
    let bias = random(rng, n.cols);
    let up32 = |v: &[f64]| b.d.upload(b.s, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()).unwrap();
    let (bx, bdy) = (b.d.upload(b.s, &to_el::<T>(&x)).unwrap(), b.d.upload(b.s, &to_el::<T>(&dy)).unwrap());
    let (bs, bb) = (up32(&scale), up32(&bias));
    let nan_t = || b.d.upload(b.s, &vec![T::cast(f64::NAN); len]).unwrap();
    let nan_f = |k: usize| b.d.upload(b.s, &vec![f32::NAN; k]).unwrap();
    let (by, by2, bdx) = (nan_t(), nan_t(), nan_t());
    let (mean, inv, ds, db) = (nan_f(n.rows), nan_f(n.rows), nan_f(n.cols), nan_f(n.cols));
    let layer = n.kind == NormKind::Layer;
    let stats = NormStats { mean: layer.then_some(&mean), inv_var: &inv };
    let bias_arg = layer.then_some(&bb);
    let dnn = b.h.cudnn().unwrap();
    dnn.norm_forward(n, &bx, &bs, bias_arg, &by, Some(&stats)).unwrap();
    dnn.norm_forward(n, &bx, &bs, bias_arg, &by2, None).unwrap();
    dnn.norm_backward(n, &bx, &bdy, &bs, &stats, &bdx, &ds, layer.then_some(&db)).unwrap().wait().unwrap();
    let down = |buf: &cusched::GpuRef<T>| from_el(&buf.download(b.s).unwrap());
    let down32 =
        |buf: &cusched::GpuRef<f32>| buf.download(b.s).unwrap().iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let (y, want_mean, want_inv) = norm_forward(
        n,
        &x,
        &scale.iter().map(|&v| f64::from(v as f32)).collect::<Vec<_>>(),
        &bias.iter().map(|&v| f64::from(v as f32)).collect::<Vec<_>>(),
    );
    let rel = T::REL * b.slack;
    close(&down(&by), &y, rel, &format!("{what}: training y"));
    close(&down(&by2), &y, rel, &format!("{what}: inference y"));
    if layer {
        close(&down32(&mean), &want_mean, 1e-5 * b.slack, &format!("{what}: mean"));
    }
    close(&down32(&inv), &want_inv, 1e-5 * b.slack, &format!("{what}: inv_var"));
    let scale32: Vec<f64> = scale.iter().map(|&v| f64::from(v as f32)).collect();
    let (dx, dscale, dbias) = norm_backward(n, &x, &dy, &scale32);
    close(&down(&bdx), &dx, rel, &format!("{what}: dx"));
    close(&down32(&ds), &dscale, 1e-4 * b.slack, &format!("{what}: dscale"));
    if layer {
        close(&down32(&db), &dbias, 1e-4 * b.slack, &format!("{what}: dbias"));
    }
}

/// The shapes every type runs: odd column counts and a transformer-like width.
pub fn norm_cases(kind: NormKind) -> Vec<RowNorm> {
    [(7, 24), (33, 128), (5, 1024)]
        .into_iter()
        .map(|(rows, cols)| RowNorm { kind, rows, cols, epsilon: 1e-5 })
        .collect()
}

/// Instance norm of logical `x` (`[N, C, spatial...]` row-major): `(y, mean, inv_std)`, the
/// statistics image-major.
pub fn instance_norm_forward(
    dims: &[usize],
    eps: f32,
    x: &[f64],
    scale: &[f64],
    bias: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c) = (dims[0], dims[1]);
    let sp: usize = dims[2..].iter().product();
    let (mut y, mut means, mut invs) = (vec![0.0; x.len()], Vec::new(), Vec::new());
    for i in 0..n {
        for ch in 0..c {
            let base = (i * c + ch) * sp;
            let vals = &x[base..base + sp];
            let mean = vals.iter().sum::<f64>() / sp as f64;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / sp as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            for (p, v) in vals.iter().enumerate() {
                y[base + p] = (v - mean) * inv * scale[ch] + bias[ch];
            }
            means.push(mean);
            invs.push(inv);
        }
    }
    (y, means, invs)
}

/// Instance norm backward of logical tensors: `(dx, dscale, dbias)`, each `(n, c)` group as a
/// row of [`norm_backward`]'s layer norm with its channel's scale.
pub fn instance_norm_backward(
    dims: &[usize],
    eps: f32,
    x: &[f64],
    dy: &[f64],
    scale: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c) = (dims[0], dims[1]);
    let sp: usize = dims[2..].iter().product();
    let row = RowNorm { kind: NormKind::Layer, rows: 1, cols: sp, epsilon: eps };
    let (mut dx, mut ds, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
    for i in 0..n {
        for ch in 0..c {
            let base = (i * c + ch) * sp;
            let (g, s, b) = norm_backward(&row, &x[base..base + sp], &dy[base..base + sp], &vec![scale[ch]; sp]);
            dx[base..base + sp].copy_from_slice(&g);
            // The row's per-column sums, summed over the channel's positions.
            ds[ch] += s.iter().sum::<f64>();
            db[ch] += b.iter().sum::<f64>();
        }
    }
    (dx, ds, db)
}

/// Instance norm forward (training, inference) and backward of `shape` against the references.
pub fn check_instance_norm<T: El>(b: &mut Bench<'_>, shape: &cusched::cudnn::Shape, rng: &mut Rng) {
    use super::cudnn::{from_storage, to_storage};
    use cusched::cudnn::TensorView;
    let what = format!("{} instance norm {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let dims = shape.dims().to_vec();
    let (len, c) = (dims.iter().product::<usize>(), dims[1]);
    let eps = 1e-5f32;
    let x: Vec<f64> = round::<T>(&random(rng, len).iter().map(|v| v * 2.0 - 0.3).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, len));
    let scale: Vec<f64> = random(rng, c).iter().map(|v| f64::from((1.0 + v / 2.0) as f32)).collect();
    let bias: Vec<f64> = random(rng, c);
    let up32 = |v: &[f64]| b.d.upload(b.s, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()).unwrap();
    let upt = |v: &[f64]| b.d.upload(b.s, &to_el::<T>(&to_storage(v, shape))).unwrap();
    let (bx, bdy, bs, bb) = (upt(&x), upt(&dy), up32(&scale), up32(&bias));
    let nan_t = || b.d.upload(b.s, &vec![T::cast(f64::NAN); len]).unwrap();
    let nan_f = |k: usize| b.d.upload(b.s, &vec![f32::NAN; k]).unwrap();
    let (by, by2, bdx) = (nan_t(), nan_t(), nan_t());
    let (mean, inv, ds, db) = (nan_f(dims[0] * c), nan_f(dims[0] * c), nan_f(c), nan_f(c));
    let stats = NormStats { mean: Some(&mean), inv_var: &inv };
    let t = |buf| TensorView::new(buf, shape.clone());
    let dnn = b.h.cudnn().unwrap();
    dnn.instance_norm_forward(eps, &t(&bx), &bs, &bb, &t(&by), Some(&stats)).unwrap();
    dnn.instance_norm_forward(eps, &t(&bx), &bs, &bb, &t(&by2), None).unwrap();
    dnn.instance_norm_backward(eps, &t(&bx), &t(&bdy), &bs, &stats, &t(&bdx), &ds, &db).unwrap().wait().unwrap();
    let down = |buf: &cusched::GpuRef<T>| from_storage(&from_el(&buf.download(b.s).unwrap()), shape);
    let down32 =
        |buf: &cusched::GpuRef<f32>| buf.download(b.s).unwrap().iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let bias32: Vec<f64> = bias.iter().map(|&v| f64::from(v as f32)).collect();
    let (y, want_mean, want_inv) = instance_norm_forward(&dims, eps, &x, &scale, &bias32);
    let rel = T::REL * b.slack;
    close(&down(&by), &y, rel, &format!("{what}: training y"));
    close(&down(&by2), &y, rel, &format!("{what}: inference y"));
    close(&down32(&mean), &want_mean, 1e-5 * b.slack, &format!("{what}: mean"));
    close(&down32(&inv), &want_inv, 1e-5 * b.slack, &format!("{what}: inv_var"));
    let (dx, dscale, dbias) = instance_norm_backward(&dims, eps, &x, &dy, &scale);
    close(&down(&bdx), &dx, rel, &format!("{what}: dx"));
    close(&down32(&ds), &dscale, 1e-4 * b.slack, &format!("{what}: dscale"));
    close(&down32(&db), &dbias, 1e-4 * b.slack, &format!("{what}: dbias"));
}

/// Group norm of logical `x` (`[N, C, spatial...]` row-major) with `groups` groups:
/// `(y, mean, inv_std)`, the statistics image-major.
pub fn group_norm_forward(
    dims: &[usize],
    groups: usize,
    eps: f32,
    x: &[f64],
    scale: &[f64],
    bias: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c) = (dims[0], dims[1]);
    let sp: usize = dims[2..].iter().product();
    let run = c / groups * sp;
    let (mut y, mut means, mut invs) = (vec![0.0; x.len()], Vec::new(), Vec::new());
    for i in 0..n {
        for g in 0..groups {
            // A group of one image is a contiguous run of the logical order.
            let base = (i * groups + g) * run;
            let vals = &x[base..base + run];
            let mean = vals.iter().sum::<f64>() / run as f64;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / run as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            for (p, v) in vals.iter().enumerate() {
                let ch = g * (c / groups) + p / sp;
                y[base + p] = (v - mean) * inv * scale[ch] + bias[ch];
            }
            means.push(mean);
            invs.push(inv);
        }
    }
    (y, means, invs)
}

/// Group norm backward of logical tensors: `(dx, dscale, dbias)`, written out from the
/// definition (`g = dy·scale[c]`, `dx = inv·(g - mean(g) - x̂·mean(g·x̂))` over the group).
pub fn group_norm_backward(
    dims: &[usize],
    groups: usize,
    eps: f32,
    x: &[f64],
    dy: &[f64],
    scale: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (n, c) = (dims[0], dims[1]);
    let sp: usize = dims[2..].iter().product();
    let run = c / groups * sp;
    let (mut dx, mut ds, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
    for i in 0..n {
        for g in 0..groups {
            let base = (i * groups + g) * run;
            let vals = &x[base..base + run];
            let mean = vals.iter().sum::<f64>() / run as f64;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / run as f64;
            let inv = 1.0 / (var + f64::from(eps)).sqrt();
            let ch = |p: usize| g * (c / groups) + p / sp;
            let xhat: Vec<f64> = vals.iter().map(|v| (v - mean) * inv).collect();
            let gr: Vec<f64> = (0..run).map(|p| dy[base + p] * scale[ch(p)]).collect();
            let mg = gr.iter().sum::<f64>() / run as f64;
            let mgx = gr.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / run as f64;
            for p in 0..run {
                dx[base + p] = inv * (gr[p] - mg - xhat[p] * mgx);
                ds[ch(p)] += dy[base + p] * xhat[p];
                db[ch(p)] += dy[base + p];
            }
        }
    }
    (dx, ds, db)
}

/// Group norm forward (training, inference) and backward of `shape` with `groups` groups
/// against the references.
pub fn check_group_norm<T: El>(b: &mut Bench<'_>, shape: &cusched::cudnn::Shape, groups: usize, rng: &mut Rng) {
    use super::cudnn::{from_storage, to_storage};
    use cusched::cudnn::TensorView;
    let what = format!("{} group norm {:?} {:?} in {groups} groups", T::NAME, shape.layout(), shape.dims());
    let dims = shape.dims().to_vec();
    let (len, c) = (dims.iter().product::<usize>(), dims[1]);
    let eps = 1e-5f32;
    let x: Vec<f64> = round::<T>(&random(rng, len).iter().map(|v| v * 2.0 - 0.3).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, len).iter().map(|v| v - 0.4).collect::<Vec<_>>());
    let scale: Vec<f64> = random(rng, c).iter().map(|v| f64::from((0.5 + v) as f32)).collect();
    let bias: Vec<f64> = random(rng, c).iter().map(|v| f64::from((v - 0.5) as f32)).collect();
    let up32 = |v: &[f64]| b.d.upload(b.s, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()).unwrap();
    let upt = |v: &[f64]| b.d.upload(b.s, &to_el::<T>(&to_storage(v, shape))).unwrap();
    let (bx, bdy, bs, bb) = (upt(&x), upt(&dy), up32(&scale), up32(&bias));
    let nan_t = || b.d.upload(b.s, &vec![T::cast(f64::NAN); len]).unwrap();
    let nan_f = |k: usize| b.d.upload(b.s, &vec![f32::NAN; k]).unwrap();
    let (by, by2, bdx) = (nan_t(), nan_t(), nan_t());
    let (mean, inv, ds, db) = (nan_f(dims[0] * groups), nan_f(dims[0] * groups), nan_f(c), nan_f(c));
    let stats = NormStats { mean: Some(&mean), inv_var: &inv };
    let t = |buf| TensorView::new(buf, shape.clone());
    let dnn = b.h.cudnn().unwrap();
    dnn.group_norm_forward(groups, eps, &t(&bx), &bs, &bb, &t(&by), Some(&stats)).unwrap();
    dnn.group_norm_forward(groups, eps, &t(&bx), &bs, &bb, &t(&by2), None).unwrap();
    dnn.group_norm_backward(groups, eps, &t(&bx), &t(&bdy), &bs, &stats, &t(&bdx), &ds, &db).unwrap().wait().unwrap();
    let down = |buf: &cusched::GpuRef<T>| from_storage(&from_el(&buf.download(b.s).unwrap()), shape);
    let down32 =
        |buf: &cusched::GpuRef<f32>| buf.download(b.s).unwrap().iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let (y, want_mean, want_inv) = group_norm_forward(&dims, groups, eps, &x, &scale, &bias);
    let rel = T::REL * b.slack;
    close(&down(&by), &y, rel, &format!("{what}: training y"));
    close(&down(&by2), &y, rel, &format!("{what}: inference y"));
    close(&down32(&mean), &want_mean, 1e-5 * b.slack, &format!("{what}: mean"));
    close(&down32(&inv), &want_inv, 1e-5 * b.slack, &format!("{what}: inv_var"));
    let (dx, dscale, dbias) = group_norm_backward(&dims, groups, eps, &x, &dy, &scale);
    close(&down(&bdx), &dx, rel, &format!("{what}: dx"));
    // On the GPU the normalized input is rounded to the data type before `dscale` sums it.
    close(&down32(&ds), &dscale, T::REL.max(1e-4) * b.slack, &format!("{what}: dscale"));
    close(&down32(&db), &dbias, 1e-4 * b.slack, &format!("{what}: dbias"));
}

/// Group norm, instance norm (with its backward) and FP8 attention in one lane job: the
/// closure gets the lane's handles, so every op runs on the lane's path.
pub fn check_lane_ops(d: &cusched::Device, seed: u64) {
    use super::attention::AttnCase;
    use super::attention_fp8::check_sdpa_forward_fp8;
    let lane = d.lane("cudnn-new-ops").unwrap();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 4.0 };
        check_group_norm::<cusched::half::bf16>(&mut b, &cusched::cudnn::Shape::nhwc(2, 8, 5, 3), 4, &mut rng);
        check_instance_norm::<cusched::half::f16>(&mut b, &cusched::cudnn::Shape::nchw(2, 4, 5, 3), &mut rng);
        check_sdpa_forward_fp8::<cusched::cudnn::F8E4M3>(
            &mut b,
            &AttnCase::new(1, 2, 2, 40, 40, 64).causal(),
            &mut rng,
        );
        Ok(())
    })
    .wait()
    .unwrap();
}
