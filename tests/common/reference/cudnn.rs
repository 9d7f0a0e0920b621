//! CPU references of the cuDNN ops in f64, on tensors in logical order (row-major over
//! `N, C, [D,] H, W`); `to_storage` and `from_storage` move them to and from a layout.
//! Convolutions gather (each output element sums what reaches it), so that they share no loop
//! structure with the simulator's scatter for the backward ops.

use cusched::cudnn::{ActivationMode, DnnElement, Layout, PoolingMode, Shape, SoftmaxAlgo, SoftmaxMode};
use cusched::half::{bf16, f16};

/// The element types of the tests, with their conversions and tolerance.
pub trait El: DnnElement + Copy + std::fmt::Debug {
    /// `v` rounded to the type.
    fn cast(v: f64) -> Self;
    /// The value, exactly.
    fn value(self) -> f64;
    /// A relative tolerance for results computed from exact inputs and rounded once (the GPU
    /// accumulates in f32).
    const REL: f64;
    const NAME: &'static str;
}

impl El for f32 {
    fn cast(v: f64) -> Self {
        v as f32
    }
    fn value(self) -> f64 {
        self as f64
    }
    const REL: f64 = 2e-5;
    const NAME: &'static str = "f32";
}

impl El for f16 {
    fn cast(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn value(self) -> f64 {
        f16::to_f64(self)
    }
    const REL: f64 = 2e-3;
    const NAME: &'static str = "f16";
}

impl El for bf16 {
    fn cast(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn value(self) -> f64 {
        bf16::to_f64(self)
    }
    const REL: f64 = 1.6e-2;
    const NAME: &'static str = "bf16";
}

/// `v` rounded through `T`, so that a reference sees exactly what the op reads.
pub fn round<T: El>(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| T::cast(x).value()).collect()
}

pub fn to_el<T: El>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::cast(x)).collect()
}

pub fn from_el<T: El>(v: &[T]) -> Vec<f64> {
    v.iter().map(|&x| x.value()).collect()
}

/// Where logical element `i` of `shape` is stored.
fn storage_index(shape: &Shape, mut i: usize) -> usize {
    let dims = shape.dims();
    let rank = dims.len();
    let mut idx = vec![0; rank];
    for d in (0..rank).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    // Storage order, outermost first.
    let order: Vec<usize> = match shape.layout() {
        Layout::Nchw => (0..rank).collect(),
        Layout::Nhwc => std::iter::once(0).chain(2..rank).chain(std::iter::once(1)).collect(),
    };
    order.iter().fold(0, |acc, &d| acc * dims[d] + idx[d])
}

/// A logical tensor laid out for `shape`.
pub fn to_storage(logical: &[f64], shape: &Shape) -> Vec<f64> {
    let mut out = vec![0.0; logical.len()];
    for (i, &v) in logical.iter().enumerate() {
        out[storage_index(shape, i)] = v;
    }
    out
}

/// A stored tensor of `shape` in logical order.
pub fn from_storage(stored: &[f64], shape: &Shape) -> Vec<f64> {
    (0..stored.len()).map(|i| stored[storage_index(shape, i)]).collect()
}

/// Asserts `got` is within `rel` of `want`, relative to each value plus a sixteenth of the
/// largest (sums that cancel keep the error of their terms).
#[track_caller]
pub fn close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-3);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = rel * (w.abs() + scale / 16.0);
        assert!((g - w).abs() <= tol, "{what}: element {i} is {g}, want {w} (tolerance {tol})");
    }
}

/// A convolution's parameters, one entry per spatial dim.
#[derive(Clone, Debug)]
pub struct ConvCase {
    pub pad: Vec<usize>,
    pub stride: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
}

/// Logical dims as `(n, c, [d, h, w])`, 2-D with depth 1.
fn split(dims: &[usize]) -> (usize, usize, [usize; 3]) {
    match dims {
        [n, c, h, w] => (*n, *c, [1, *h, *w]),
        [n, c, d, h, w] => (*n, *c, [*d, *h, *w]),
        _ => panic!("4 or 5 dims"),
    }
}

fn three(v: &[usize], fill: usize) -> [usize; 3] {
    match v {
        [h, w] => [fill, *h, *w],
        [d, h, w] => [*d, *h, *w],
        _ => panic!("2 or 3 spatial entries"),
    }
}

fn lin(c: usize, sp: [usize; 3], n: usize, ch: usize, p: [usize; 3]) -> usize {
    (((n * c + ch) * sp[0] + p[0]) * sp[1] + p[1]) * sp[2] + p[2]
}

fn each(sp: [usize; 3]) -> Vec<[usize; 3]> {
    let mut v = Vec::new();
    for a in 0..sp[0] {
        for b in 0..sp[1] {
            for c in 0..sp[2] {
                v.push([a, b, c]);
            }
        }
    }
    v
}

/// The forward output dims of `x` by `w`.
pub fn conv_out_dims(x: &[usize], w: &[usize], case: &ConvCase) -> Vec<usize> {
    let mut out = vec![x[0], w[0]];
    for i in 0..x.len() - 2 {
        let reach = (w[i + 2] - 1) * case.dilation[i] + 1;
        out.push((x[i + 2] + 2 * case.pad[i] - reach) / case.stride[i] + 1);
    }
    out
}

struct Geo {
    pad: [usize; 3],
    stride: [usize; 3],
    dil: [usize; 3],
}

fn geo(case: &ConvCase) -> Geo {
    Geo { pad: three(&case.pad, 0), stride: three(&case.stride, 1), dil: three(&case.dilation, 1) }
}

/// Input position of output `o` and filter tap `r`, if inside.
fn tap(g: &Geo, o: [usize; 3], r: [usize; 3], sp: [usize; 3]) -> Option<[usize; 3]> {
    let mut i = [0; 3];
    for j in 0..3 {
        let v = (o[j] * g.stride[j] + r[j] * g.dil[j]) as i64 - g.pad[j] as i64;
        if v < 0 || v as usize >= sp[j] {
            return None;
        }
        i[j] = v as usize;
    }
    Some(i)
}

/// `y = conv(x, w)` (cross-correlation).
pub fn conv_forward(x: &[f64], xd: &[usize], w: &[f64], wd: &[usize], case: &ConvCase) -> Vec<f64> {
    let yd = conv_out_dims(xd, wd, case);
    let ((n, c, xs), (k, cpg, ws), (_, _, ys)) = (split(xd), split(wd), split(&yd));
    let g = geo(case);
    let kpg = k / case.groups;
    let mut y = vec![0.0; yd.iter().product()];
    for b in 0..n {
        for f in 0..k {
            for o in each(ys) {
                let mut acc = 0.0;
                for cg in 0..cpg {
                    let ch = f / kpg * cpg + cg;
                    for r in each(ws) {
                        if let Some(i) = tap(&g, o, r, xs) {
                            acc += x[lin(c, xs, b, ch, i)] * w[lin(cpg, ws, f, cg, r)];
                        }
                    }
                }
                y[lin(k, ys, b, f, o)] = acc;
            }
        }
    }
    y
}

/// `dx` of a forward convolution of `x` (dims `xd`) by `w`, from `dy`.
pub fn conv_backward_data(w: &[f64], wd: &[usize], dy: &[f64], xd: &[usize], case: &ConvCase) -> Vec<f64> {
    let yd = conv_out_dims(xd, wd, case);
    let ((n, c, xs), (k, cpg, ws), (_, _, ys)) = (split(xd), split(wd), split(&yd));
    let g = geo(case);
    let kpg = k / case.groups;
    let mut dx = vec![0.0; xd.iter().product()];
    for b in 0..n {
        for ch in 0..c {
            let (grp, cg) = (ch / cpg, ch % cpg);
            for i in each(xs) {
                let mut acc = 0.0;
                for f in grp * kpg..(grp + 1) * kpg {
                    for r in each(ws) {
                        // o * stride = i + pad - r * dilation, when o is whole and inside.
                        let mut o = [0; 3];
                        let mut ok = true;
                        for j in 0..3 {
                            let v = (i[j] + g.pad[j]) as i64 - (r[j] * g.dil[j]) as i64;
                            if v < 0 || v as usize % g.stride[j] != 0 || v as usize / g.stride[j] >= ys[j] {
                                ok = false;
                                break;
                            }
                            o[j] = v as usize / g.stride[j];
                        }
                        if ok {
                            acc += w[lin(cpg, ws, f, cg, r)] * dy[lin(k, ys, b, f, o)];
                        }
                    }
                }
                dx[lin(c, xs, b, ch, i)] = acc;
            }
        }
    }
    dx
}

/// `dw` of a forward convolution of `x` by a filter of dims `wd`, from `dy`.
pub fn conv_backward_filter(x: &[f64], xd: &[usize], dy: &[f64], wd: &[usize], case: &ConvCase) -> Vec<f64> {
    let yd = conv_out_dims(xd, wd, case);
    let ((n, c, xs), (k, cpg, ws), (_, _, ys)) = (split(xd), split(wd), split(&yd));
    let g = geo(case);
    let kpg = k / case.groups;
    let mut dw = vec![0.0; wd.iter().product()];
    for f in 0..k {
        for cg in 0..cpg {
            let ch = f / kpg * cpg + cg;
            for r in each(ws) {
                let mut acc = 0.0;
                for b in 0..n {
                    for o in each(ys) {
                        if let Some(i) = tap(&g, o, r, xs) {
                            acc += x[lin(c, xs, b, ch, i)] * dy[lin(k, ys, b, f, o)];
                        }
                    }
                }
                dw[lin(cpg, ws, f, cg, r)] = acc;
            }
        }
    }
    dw
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn activation(mode: ActivationMode, x: f64) -> f64 {
    match mode {
        ActivationMode::Relu => x.max(0.0),
        ActivationMode::Sigmoid => sigmoid(x),
        ActivationMode::Tanh => x.tanh(),
        ActivationMode::ClippedRelu { ceiling } => x.clamp(0.0, ceiling),
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * (x.exp() - 1.0)
            }
        }
        ActivationMode::Swish { beta } => x * sigmoid(beta * x),
    }
}

/// `dx` from `x`, the stored forward output `y` and `dy`: derivatives written in `y` where
/// cuDNN uses it (sigmoid, tanh, ELU's negative side).
pub fn activation_backward(mode: ActivationMode, x: f64, y: f64, dy: f64) -> f64 {
    match mode {
        ActivationMode::Relu => dy * f64::from(u8::from(x > 0.0)),
        ActivationMode::Sigmoid => dy * y * (1.0 - y),
        ActivationMode::Tanh => dy * (1.0 - y * y),
        ActivationMode::ClippedRelu { ceiling } => dy * f64::from(u8::from(x > 0.0 && x < ceiling)),
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                dy
            } else {
                dy * (y + alpha)
            }
        }
        ActivationMode::Swish { beta } => {
            let s = sigmoid(beta * x);
            dy * (s * (1.0 + beta * x * (1.0 - s)))
        }
    }
}

/// The logical index sets softmax normalizes over.
fn softmax_sets(mode: SoftmaxMode, dims: &[usize]) -> Vec<Vec<usize>> {
    let (n, c, sp) = split(dims);
    let inner = sp.iter().product::<usize>();
    let mut sets = Vec::new();
    for b in 0..n {
        match mode {
            SoftmaxMode::Instance => sets.push((b * c * inner..(b + 1) * c * inner).collect()),
            SoftmaxMode::Channel => {
                for p in 0..inner {
                    sets.push((0..c).map(|ch| (b * c + ch) * inner + p).collect());
                }
            }
        }
    }
    sets
}

pub fn softmax(algo: SoftmaxAlgo, mode: SoftmaxMode, x: &[f64], dims: &[usize]) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for set in softmax_sets(mode, dims) {
        let sum: f64 = set.iter().map(|&i| x[i].exp()).sum();
        for &i in &set {
            y[i] = if algo == SoftmaxAlgo::Log { x[i] - sum.ln() } else { x[i].exp() / sum };
        }
    }
    y
}

pub fn softmax_backward(algo: SoftmaxAlgo, mode: SoftmaxMode, y: &[f64], dy: &[f64], dims: &[usize]) -> Vec<f64> {
    let mut dx = vec![0.0; y.len()];
    for set in softmax_sets(mode, dims) {
        if algo == SoftmaxAlgo::Log {
            let s: f64 = set.iter().map(|&i| dy[i]).sum();
            for &i in &set {
                dx[i] = dy[i] - y[i].exp() * s;
            }
        } else {
            let s: f64 = set.iter().map(|&i| dy[i] * y[i]).sum();
            for &i in &set {
                dx[i] = y[i] * (dy[i] - s);
            }
        }
    }
    dx
}

/// A pooling's parameters, one entry per spatial dim.
#[derive(Clone, Debug)]
pub struct PoolCase {
    pub mode: PoolingMode,
    pub window: Vec<usize>,
    pub pad: Vec<usize>,
    pub stride: Vec<usize>,
}

pub fn pool_out_dims(x: &[usize], case: &PoolCase) -> Vec<usize> {
    let mut out = x[..2].to_vec();
    for i in 0..x.len() - 2 {
        out.push((x[i + 2] + 2 * case.pad[i] - case.window[i]) / case.stride[i] + 1);
    }
    out
}

/// For each output element (logical index), its window's logical input indices (inside the
/// input, in window order) and the average's divisor.
fn pool_windows(x: &[usize], case: &PoolCase) -> Vec<(Vec<usize>, f64)> {
    let yd = pool_out_dims(x, case);
    let ((n, c, xs), (_, _, ys)) = (split(x), split(&yd));
    let g = Geo { pad: three(&case.pad, 0), stride: three(&case.stride, 1), dil: [1; 3] };
    let win = three(&case.window, 1);
    let mut out = Vec::new();
    for b in 0..n {
        for ch in 0..c {
            for o in each(ys) {
                let inside: Vec<usize> =
                    each(win).into_iter().filter_map(|r| tap(&g, o, r, xs)).map(|i| lin(c, xs, b, ch, i)).collect();
                let divisor = match case.mode {
                    PoolingMode::AverageIncludePadding => win.iter().product::<usize>() as f64,
                    _ => inside.len() as f64,
                };
                out.push((inside, divisor));
            }
        }
    }
    out
}

pub fn pool_forward(x: &[f64], xd: &[usize], case: &PoolCase) -> Vec<f64> {
    pool_windows(xd, case)
        .into_iter()
        .map(|(inside, div)| match case.mode {
            PoolingMode::Max => inside.iter().map(|&i| x[i]).fold(f64::NEG_INFINITY, f64::max),
            _ => inside.iter().map(|&i| x[i]).sum::<f64>() / div,
        })
        .collect()
}

/// `dx` from `x` and `dy`: max pooling routes each gradient to its window's first maximum.
pub fn pool_backward(x: &[f64], xd: &[usize], dy: &[f64], case: &PoolCase) -> Vec<f64> {
    let mut dx = vec![0.0; x.len()];
    for (o, (inside, div)) in pool_windows(xd, case).into_iter().enumerate() {
        match case.mode {
            PoolingMode::Max => {
                let mut best = inside[0];
                for &i in &inside[1..] {
                    if x[i] > x[best] {
                        best = i;
                    }
                }
                dx[best] += dy[o];
            }
            _ => {
                for &i in &inside {
                    dx[i] += dy[o] / div;
                }
            }
        }
    }
    dx
}

/// The logical indices of each channel's values (over the batch and the spatial dims).
fn channel_sets(dims: &[usize]) -> Vec<Vec<usize>> {
    let (n, c, sp) = split(dims);
    let inner = sp.iter().product::<usize>();
    (0..c).map(|ch| (0..n).flat_map(|b| (b * c + ch) * inner..(b * c + ch + 1) * inner).collect()).collect()
}

/// Batch-norm inference: `scale (x - mean) / sqrt(var + eps) + bias` per channel.
pub fn batch_norm_inference(x: &[f64], dims: &[usize], p: [&[f64]; 4], eps: f64) -> Vec<f64> {
    let [scale, bias, mean, var] = p;
    let mut y = vec![0.0; x.len()];
    for (ch, set) in channel_sets(dims).into_iter().enumerate() {
        for i in set {
            y[i] = scale[ch] * (x[i] - mean[ch]) / (var[ch] + eps).sqrt() + bias[ch];
        }
    }
    y
}

/// Each channel's batch mean and biased variance.
pub fn batch_stats(x: &[f64], dims: &[usize]) -> (Vec<f64>, Vec<f64>) {
    channel_sets(dims)
        .into_iter()
        .map(|set| {
            let m = set.len() as f64;
            let mean = set.iter().map(|&i| x[i]).sum::<f64>() / m;
            (mean, set.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / m)
        })
        .unzip()
}

/// Batch-norm backward from the batch statistics: `(dx, dscale, dbias)`.
pub fn batch_norm_backward(
    x: &[f64],
    dims: &[usize],
    dy: &[f64],
    scale: &[f64],
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mean, var) = batch_stats(x, dims);
    let mut dx = vec![0.0; x.len()];
    let (mut dscale, mut dbias) = (Vec::new(), Vec::new());
    for (ch, set) in channel_sets(dims).into_iter().enumerate() {
        let m = set.len() as f64;
        let sd = (var[ch] + eps).sqrt();
        let xhat: Vec<f64> = set.iter().map(|&i| (x[i] - mean[ch]) / sd).collect();
        let db: f64 = set.iter().map(|&i| dy[i]).sum();
        let ds: f64 = set.iter().zip(&xhat).map(|(&i, h)| dy[i] * h).sum();
        // d/dx of scale * (x - mean) / sd, through the mean and the variance.
        for (&i, h) in set.iter().zip(&xhat) {
            dx[i] = scale[ch] / sd * (dy[i] - db / m - h * ds / m);
        }
        dscale.push(ds);
        dbias.push(db);
    }
    (dx, dscale, dbias)
}

/// LRN across channels (odd `n`): `x / (k + alpha / n * Σ x²)^beta` over the `n` channels
/// centred on each value; returns the outputs and each value's denominator base.
pub fn lrn(x: &[f64], dims: &[usize], n: usize, alpha: f64, beta: f64, k: f64) -> (Vec<f64>, Vec<f64>) {
    let (b, c, sp) = split(dims);
    let inner = sp.iter().product::<usize>();
    let half = n as i64 / 2;
    let mut y = vec![0.0; x.len()];
    let mut s = vec![0.0; x.len()];
    for bi in 0..b {
        for ch in 0..c {
            for p in 0..inner {
                let i = (bi * c + ch) * inner + p;
                let mut sum = 0.0;
                for j in ch as i64 - half..=ch as i64 + half {
                    if j >= 0 && (j as usize) < c {
                        sum += x[(bi * c + j as usize) * inner + p].powi(2);
                    }
                }
                s[i] = k + alpha / n as f64 * sum;
                y[i] = x[i] / s[i].powf(beta);
            }
        }
    }
    (y, s)
}

/// LRN backward: the derivative of `lrn` through each value's own denominator and its
/// neighbours', from the stored `y`.
#[allow(clippy::too_many_arguments)]
pub fn lrn_backward(
    x: &[f64],
    y: &[f64],
    dy: &[f64],
    dims: &[usize],
    n: usize,
    alpha: f64,
    beta: f64,
    k: f64,
) -> Vec<f64> {
    let (_, s) = lrn(x, dims, n, alpha, beta, k);
    let (b, c, sp) = split(dims);
    let inner = sp.iter().product::<usize>();
    let half = n as i64 / 2;
    let mut dx = vec![0.0; x.len()];
    for bi in 0..b {
        for ch in 0..c {
            for p in 0..inner {
                let i = (bi * c + ch) * inner + p;
                // ∂y_j/∂x_i for the j whose window holds i: -2 alpha beta / n * x_i * y_j / s_j.
                let mut g = dy[i] / s[i].powf(beta);
                for j in ch as i64 - half..=ch as i64 + half {
                    if j >= 0 && (j as usize) < c {
                        let jj = (bi * c + j as usize) * inner + p;
                        g -= 2.0 * alpha * beta / n as f64 * x[i] * dy[jj] * y[jj] / s[jj];
                    }
                }
                dx[i] = g;
            }
        }
    }
    dx
}

/// Values distinct within any window of a pooling (the logical index's pattern repeats only
/// every 251 elements), exact in bf16: no ties for max pooling to break.
pub fn distinct(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 37) % 251) as f64 / 16.0 - 7.8125).collect()
}

// The runners below upload random inputs, run an op through `h` (inline, or inside a lane job
// when `h` is a lane's), and compare with the references: one body for the simulator's tests
// and the GPU's.

use crate::common::{random, Rng};
use cusched::cudnn::{
    Activation, BatchNorm, ConvActivation, Convolution, Lrn, Pooling, RunningStats, SavedStats, Softmax, TensorView,
};
use cusched::{Device, GpuRef, Handles, StreamId};

/// Where the runners work: a device, a stream, the stream's handles, and how many times the
/// type's tolerance the results may be off (1 on the simulator, which rounds once; more on a
/// GPU, whose algorithms sum in f32 in their own order, Winograd and FFT ones included).
pub struct Bench<'a> {
    pub d: &'a Device,
    pub s: StreamId,
    pub h: &'a mut Handles,
    pub slack: f64,
}

impl Bench<'_> {
    /// `logical` laid out for `shape`, as `T`.
    pub fn up<T: El>(&self, logical: &[f64], shape: &Shape) -> GpuRef<T> {
        self.d.upload(self.s, &to_el::<T>(&to_storage(logical, shape))).unwrap()
    }

    /// A buffer of NaN for `shape`: an op with `beta` 0 must not read it.
    pub fn nans<T: El>(&self, shape: &Shape) -> GpuRef<T> {
        let n = shape.dims().iter().product();
        self.d.upload(self.s, &vec![T::cast(f64::NAN); n]).unwrap()
    }

    /// `buf` (holding `shape`) in logical order.
    pub fn down<T: El>(&self, buf: &GpuRef<T>, shape: &Shape) -> Vec<f64> {
        from_storage(&from_el(&buf.download(self.s).unwrap()), shape)
    }
}

/// `buf` seen with `shape`.
fn tv<'a, T: El>(buf: &'a GpuRef<T>, shape: &Shape) -> TensorView<'a, T> {
    TensorView::new(buf, shape.clone())
}

fn count(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Forward, backward-data and backward-filter of one convolution, each against its reference;
/// then backward-filter again with `beta` 1, which must add to the gradient.
pub fn check_conv<T: El>(
    b: &mut Bench<'_>,
    layout: Layout,
    xd: &[usize],
    wd: &[usize],
    case: &ConvCase,
    rng: &mut Rng,
) {
    let what = format!("{} {layout:?} x {xd:?} w {wd:?} {case:?}", T::NAME);
    let yd = conv_out_dims(xd, wd, case);
    let (xs, ws, ys) = (Shape::new(layout, xd), Shape::new(layout, wd), Shape::new(layout, &yd));
    let x = round::<T>(&random(rng, count(xd)));
    let w = round::<T>(&random(rng, count(wd)));
    let dy = round::<T>(&random(rng, count(&yd)));
    let conv = Convolution::new().pad(&case.pad).stride(&case.stride).dilation(&case.dilation).groups(case.groups);
    assert_eq!(conv.output_shape(&xs, &ws).unwrap(), ys, "{what}");
    let (bx, bw, bdy) = (b.up::<T>(&x, &xs), b.up::<T>(&w, &ws), b.up::<T>(&dy, &ys));
    let (by, bdx, bdw) = (b.nans::<T>(&ys), b.nans::<T>(&xs), b.nans::<T>(&ws));
    let t = |buf, sh: &Shape| TensorView::new(buf, sh.clone());
    let dnn = b.h.cudnn().unwrap();
    dnn.conv_forward(&conv, &t(&bx, &xs), &t(&bw, &ws), &t(&by, &ys)).unwrap();
    dnn.conv_backward_data(&conv, &t(&bw, &ws), &t(&bdy, &ys), &t(&bdx, &xs)).unwrap();
    dnn.conv_backward_filter(&conv, &t(&bx, &xs), &t(&bdy, &ys), &t(&bdw, &ws)).unwrap().wait().unwrap();
    close(&b.down(&by, &ys), &conv_forward(&x, xd, &w, wd, case), T::REL * b.slack, &format!("{what}: forward"));
    close(
        &b.down(&bdx, &xs),
        &conv_backward_data(&w, wd, &dy, xd, case),
        T::REL * b.slack,
        &format!("{what}: backward data"),
    );
    let dw = conv_backward_filter(&x, xd, &dy, wd, case);
    close(&b.down(&bdw, &ws), &dw, T::REL * b.slack, &format!("{what}: backward filter"));
    // Accumulate: dw = 2 * grad + 1 * dw (the gradient already there, rounded to T).
    let old = b.down(&bdw, &ws);
    let acc = conv.clone().scale(2.0, 1.0);
    b.h.cudnn()
        .unwrap()
        .conv_backward_filter(&acc, &t(&bx, &xs), &t(&bdy, &ys), &t(&bdw, &ws))
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f64> = dw.iter().zip(&old).map(|(g, o)| 2.0 * g + o).collect();
    close(&b.down(&bdw, &ws), &want, T::REL * 2.0 * b.slack, &format!("{what}: backward filter, beta 1"));
}

/// The fused forward convolution, bias and activation against `act(alpha conv + beta z + bias)`:
/// without a residual, with one, and with the residual in `y` itself (in place).
pub fn check_conv_fused<T: El>(
    b: &mut Bench<'_>,
    layout: Layout,
    xd: &[usize],
    wd: &[usize],
    case: &ConvCase,
    rng: &mut Rng,
) {
    let what = format!("{} fused {layout:?} x {xd:?} w {wd:?} {case:?}", T::NAME);
    let yd = conv_out_dims(xd, wd, case);
    let (xs, ws, ys) = (Shape::new(layout, xd), Shape::new(layout, wd), Shape::new(layout, &yd));
    let x = round::<T>(&random(rng, count(xd)));
    let w = round::<T>(&random(rng, count(wd)));
    let z = round::<T>(&random(rng, count(&yd)));
    let bias = round::<T>(&random(rng, wd[0]));
    let conv = Convolution::new().pad(&case.pad).stride(&case.stride).dilation(&case.dilation).groups(case.groups);
    let (bx, bw, bz) = (b.up::<T>(&x, &xs), b.up::<T>(&w, &ws), b.up::<T>(&z, &ys));
    let bb = b.d.upload(b.s, &to_el::<T>(&bias)).unwrap();
    let plain = conv_forward(&x, xd, &w, wd, case);
    let inner = count(&yd[2..]);
    let want = |alpha: f64, beta: f64, relu: bool| -> Vec<f64> {
        (0..plain.len())
            .map(|i| {
                let v = alpha * plain[i] + beta * z[i] + bias[i / inner % wd[0]];
                if relu {
                    v.max(0.0)
                } else {
                    v
                }
            })
            .collect()
    };
    for act in [ConvActivation::Identity, ConvActivation::Relu] {
        let relu = act == ConvActivation::Relu;
        let by = b.nans::<T>(&ys);
        b.h.cudnn()
            .unwrap()
            .conv_bias_activation_forward(&conv, act, &tv(&bx, &xs), &tv(&bw, &ws), None, &bb, &tv(&by, &ys))
            .unwrap()
            .wait()
            .unwrap();
        close(&b.down(&by, &ys), &want(1.0, 0.0, relu), T::REL * 2.0 * b.slack, &format!("{what} {act:?}"));
        let scaled = conv.clone().scale(0.5, 1.5);
        b.h.cudnn()
            .unwrap()
            .conv_bias_activation_forward(
                &scaled,
                act,
                &tv(&bx, &xs),
                &tv(&bw, &ws),
                Some(&tv(&bz, &ys)),
                &bb,
                &tv(&by, &ys),
            )
            .unwrap()
            .wait()
            .unwrap();
        let with_z = want(0.5, 1.5, relu);
        close(&b.down(&by, &ys), &with_z, T::REL * 2.0 * b.slack, &format!("{what} {act:?} with z"));
        // The residual in `y` itself.
        let by = b.up::<T>(&z, &ys);
        b.h.cudnn()
            .unwrap()
            .conv_bias_activation_forward(
                &scaled,
                act,
                &tv(&bx, &xs),
                &tv(&bw, &ws),
                Some(&tv(&by, &ys)),
                &bb,
                &tv(&by, &ys),
            )
            .unwrap()
            .wait()
            .unwrap();
        close(&b.down(&by, &ys), &with_z, T::REL * 2.0 * b.slack, &format!("{what} {act:?} in place"));
    }
}

/// Batch norm: inference from given statistics, a training step (the running statistics
/// updated with factor 0.3, the saved ones written), and the backward step from the saved
/// statistics, each against the references.
pub fn check_batch_norm<T: El>(b: &mut Bench<'_>, shape: &Shape, rng: &mut Rng) {
    let what = format!("{} batch norm {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let dims = shape.dims().to_vec();
    let (n, c) = (count(&dims), dims[1]);
    let eps = 1e-3;
    let x: Vec<f64> = round::<T>(&random(rng, n).iter().map(|v| 2.0 * v + 0.5).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, n));
    let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let back = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
    let scale: Vec<f64> = round::<f32>(&random(rng, c).iter().map(|v| v + 1.5).collect::<Vec<_>>());
    let bias = round::<f32>(&random(rng, c));
    let mean = round::<f32>(&random(rng, c));
    let var: Vec<f64> = round::<f32>(&random(rng, c).iter().map(|v| v + 1.2).collect::<Vec<_>>());
    let up32 = |v: &[f64]| b.d.upload(b.s, &f32s(v)).unwrap();
    let (bs, bb, bm, bv) = (up32(&scale), up32(&bias), up32(&mean), up32(&var));
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, shape), b.nans::<T>(shape), b.up::<T>(&dy, shape), b.nans::<T>(shape));
    let (sm, si, ds, db) =
        (up32(&vec![f64::NAN; c]), up32(&vec![f64::NAN; c]), up32(&vec![f64::NAN; c]), up32(&vec![f64::NAN; c]));
    let bn = BatchNorm::new(eps);
    let rel = T::REL * 4.0 * b.slack;
    b.h.cudnn()
        .unwrap()
        .batch_norm_inference(&bn, &tv(&bx, shape), &tv(&by, shape), &bs, &bb, &bm, &bv)
        .unwrap()
        .wait()
        .unwrap();
    let want = batch_norm_inference(&x, &dims, [&scale, &bias, &mean, &var], eps);
    close(&b.down(&by, shape), &want, rel, &format!("{what}: inference"));

    let running = RunningStats { mean: &bm, var: &bv, factor: 0.3 };
    let saved = SavedStats { mean: &sm, inv_var: &si };
    b.h.cudnn()
        .unwrap()
        .batch_norm_training(&bn, &tv(&bx, shape), &tv(&by, shape), &bs, &bb, Some(&running), Some(&saved))
        .unwrap()
        .wait()
        .unwrap();
    let (bmean, bvar) = batch_stats(&x, &dims);
    let want = batch_norm_inference(&x, &dims, [&scale, &bias, &bmean, &bvar], eps);
    close(&b.down(&by, shape), &want, rel, &format!("{what}: training"));
    let m = (n / c) as f64;
    let rm: Vec<f64> = mean.iter().zip(&bmean).map(|(r, b)| 0.7 * r + 0.3 * b).collect();
    let rv: Vec<f64> = var.iter().zip(&bvar).map(|(r, v)| 0.7 * r + 0.3 * v * m / (m - 1.0)).collect();
    let stat_rel = 1e-4 * b.slack.max(1.0);
    close(&back(bm.download(b.s).unwrap()), &rm, stat_rel, &format!("{what}: running mean"));
    close(&back(bv.download(b.s).unwrap()), &rv, stat_rel, &format!("{what}: running variance"));
    close(&back(sm.download(b.s).unwrap()), &bmean, stat_rel, &format!("{what}: saved mean"));
    let inv: Vec<f64> = bvar.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    close(&back(si.download(b.s).unwrap()), &inv, stat_rel, &format!("{what}: saved inverse deviation"));

    b.h.cudnn()
        .unwrap()
        .batch_norm_backward(&bn, &tv(&bx, shape), &tv(&bdy, shape), &tv(&bdx, shape), &bs, &ds, &db, &saved)
        .unwrap()
        .wait()
        .unwrap();
    let (dx, dscale, dbias) = batch_norm_backward(&x, &dims, &dy, &scale, eps);
    close(&b.down(&bdx, shape), &dx, rel, &format!("{what}: backward dx"));
    close(&back(ds.download(b.s).unwrap()), &dscale, stat_rel * 10.0, &format!("{what}: backward dscale"));
    close(&back(db.download(b.s).unwrap()), &dbias, stat_rel * 10.0, &format!("{what}: backward dbias"));
}

/// LRN forward and backward against the references.
pub fn check_lrn<T: El>(b: &mut Bench<'_>, shape: &Shape, rng: &mut Rng) {
    let what = format!("{} lrn {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let dims = shape.dims().to_vec();
    let n = count(&dims);
    let (win, alpha, beta, k) = (3, 0.5, 0.75, 1.5);
    let x: Vec<f64> = round::<T>(&random(rng, n).iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, n));
    let l = Lrn::new(win, alpha, beta, k);
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, shape), b.nans::<T>(shape), b.up::<T>(&dy, shape), b.nans::<T>(shape));
    // What cuDNN's LRN refuses (bf16; 5-D NDHWC) is refused before anything is recorded.
    if T::NAME == "bf16" || (dims.len() == 5 && shape.layout() == Layout::Nhwc) {
        let before = b.d.stats();
        let e = b.h.cudnn().unwrap().lrn_forward(&l, &tv(&bx, shape), &tv(&by, shape)).unwrap_err();
        assert!(matches!(e, cusched::Error::Unsupported { .. }), "{what}: forward: {e:?}");
        let back =
            b.h.cudnn().unwrap().lrn_backward(&l, &tv(&by, shape), &tv(&bdy, shape), &tv(&bx, shape), &tv(&bdx, shape));
        assert!(matches!(back, Err(cusched::Error::Unsupported { .. })), "{what}: backward: {back:?}");
        let after = b.d.stats();
        assert_eq!((before.events, before.waits), (after.events, after.waits), "{what}: refused, yet recorded");
        return;
    }
    let done = b.h.cudnn().unwrap().lrn_forward(&l, &tv(&bx, shape), &tv(&by, shape));
    done.and_then(|c| c.wait()).unwrap_or_else(|e| panic!("{what}: forward: {e}"));
    let y = b.down(&by, shape);
    close(&y, &lrn(&x, &dims, win, alpha, beta, k).0, T::REL * 2.0 * b.slack, &format!("{what}: forward"));
    b.h.cudnn()
        .unwrap()
        .lrn_backward(&l, &tv(&by, shape), &tv(&bdy, shape), &tv(&bx, shape), &tv(&bdx, shape))
        .unwrap()
        .wait()
        .unwrap();
    let want = lrn_backward(&x, &y, &dy, &dims, win, alpha, beta, k);
    close(&b.down(&bdx, shape), &want, T::REL * 4.0 * b.slack, &format!("{what}: backward"));
}

/// Dropout: every output is 0 or the input over `1 - p`, about `p` of them dropped; the
/// backward op applies the same mask; states seeded alike draw the same mask.
pub fn check_dropout<T: El>(b: &mut Bench<'_>, shape: &Shape, rng: &mut Rng) {
    let what = format!("{} dropout {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let n = count(shape.dims());
    let p = 0.3f32;
    let keep = 1.0 / (1.0 - f64::from(p));
    let x: Vec<f64> = round::<T>(&random(rng, n).iter().map(|v| 1.0 + v.abs()).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, n));
    let seed = rng.next();
    let bytes = b.h.cudnn().unwrap().dropout_reserve_bytes::<T>(shape).unwrap();
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, shape), b.nans::<T>(shape), b.up::<T>(&dy, shape), b.nans::<T>(shape));
    let reserve = b.d.alloc_zeros::<u8>(b.s, bytes).unwrap();
    let state = b.h.cudnn().unwrap().dropout(p, seed).unwrap();
    // cuDNN's dropout refuses bf16 (NOT_SUPPORTED on the GPU): refused before recording.
    if T::NAME == "bf16" {
        let before = b.d.stats();
        let e = b.h.cudnn().unwrap().dropout_forward(&state, &tv(&bx, shape), &tv(&by, shape), &reserve).unwrap_err();
        assert!(matches!(e, cusched::Error::Unsupported { .. }), "{what}: forward: {e:?}");
        let back = b.h.cudnn().unwrap().dropout_backward(&state, &tv(&bdy, shape), &tv(&bdx, shape), &reserve);
        assert!(matches!(back, Err(cusched::Error::Unsupported { .. })), "{what}: backward: {back:?}");
        let after = b.d.stats();
        assert_eq!((before.events, before.waits), (after.events, after.waits), "{what}: refused, yet recorded");
        return;
    }
    b.h.cudnn().unwrap().dropout_forward(&state, &tv(&bx, shape), &tv(&by, shape), &reserve).unwrap().wait().unwrap();
    let y = b.down(&by, shape);
    let kept: Vec<bool> = y.iter().map(|&v| v != 0.0).collect();
    let want: Vec<f64> = (0..n).map(|i| if kept[i] { x[i] * keep } else { 0.0 }).collect();
    close(&y, &want, T::REL * 2.0 * b.slack, &format!("{what}: forward"));
    let dropped = kept.iter().filter(|k| !**k).count() as f64 / n as f64;
    assert!((dropped - f64::from(p)).abs() < 0.06, "{what}: {dropped} dropped, want about {p}");
    b.h.cudnn()
        .unwrap()
        .dropout_backward(&state, &tv(&bdy, shape), &tv(&bdx, shape), &reserve)
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f64> = (0..n).map(|i| if kept[i] { dy[i] * keep } else { 0.0 }).collect();
    close(&b.down(&bdx, shape), &want, T::REL * 2.0 * b.slack, &format!("{what}: backward"));
    // Another state of the same seed draws the same first mask.
    let again = b.h.cudnn().unwrap().dropout(p, seed).unwrap();
    let by2 = b.nans::<T>(shape);
    b.h.cudnn().unwrap().dropout_forward(&again, &tv(&bx, shape), &tv(&by2, shape), &reserve).unwrap().wait().unwrap();
    assert_eq!(b.down(&by2, shape), y, "{what}: the same seed gave another mask");
}

/// Activation forward (out of place and in place) and backward against the references.
pub fn check_activation<T: El>(b: &mut Bench<'_>, mode: ActivationMode, shape: &Shape, rng: &mut Rng) {
    let what = format!("{} {mode:?} {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let n = count(shape.dims());
    let x: Vec<f64> = round::<T>(&random(rng, n).iter().map(|&v| off_kinks(mode, v * 3.0)).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, n));
    let act = Activation::new(mode);
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, shape), b.nans::<T>(shape), b.up::<T>(&dy, shape), b.nans::<T>(shape));
    let t = |buf| TensorView::new(buf, shape.clone());
    let dnn = b.h.cudnn().unwrap();
    dnn.activation_forward(&act, &t(&bx), &t(&by)).unwrap().wait().unwrap();
    let want: Vec<f64> = x.iter().map(|&v| activation(mode, v)).collect();
    let y = b.down(&by, shape);
    close(&y, &want, T::REL * 2.0 * b.slack, &format!("{what}: forward"));
    b.h.cudnn().unwrap().activation_backward(&act, &t(&by), &t(&bdy), &t(&bx), &t(&bdx)).unwrap().wait().unwrap();
    let want: Vec<f64> = (0..n).map(|i| activation_backward(mode, x[i], y[i], dy[i])).collect();
    close(&b.down(&bdx, shape), &want, T::REL * 2.0 * b.slack, &format!("{what}: backward"));
    // In place: x becomes f(x).
    b.h.cudnn().unwrap().activation_forward(&act, &t(&bx), &t(&bx)).unwrap().wait().unwrap();
    close(&b.down(&bx, shape), &y, T::REL * 2.0 * b.slack, &format!("{what}: in place"));
}

/// `v` moved 0.05 away from the points where `mode` has no derivative (0, and a clipped ReLU's
/// ceiling), where the library and the reference may each take either side: at a half type's
/// resolution an input lands on them exactly.
fn off_kinks(mode: ActivationMode, v: f64) -> f64 {
    let kinks: &[f64] = match mode {
        ActivationMode::Relu | ActivationMode::Elu { .. } => &[0.0],
        ActivationMode::ClippedRelu { ceiling } => &[0.0, ceiling],
        _ => &[],
    };
    match kinks.iter().find(|&&k| (v - k).abs() < 0.05) {
        Some(&k) if v >= k => k + 0.05,
        Some(&k) => k - 0.05,
        None => v,
    }
}

/// Softmax forward and backward against the references.
pub fn check_softmax<T: El>(b: &mut Bench<'_>, algo: SoftmaxAlgo, mode: SoftmaxMode, shape: &Shape, rng: &mut Rng) {
    let what = format!("{} {algo:?} {mode:?} {:?} {:?}", T::NAME, shape.layout(), shape.dims());
    let n = count(shape.dims());
    let x: Vec<f64> = round::<T>(&random(rng, n).iter().map(|v| v * 4.0).collect::<Vec<_>>());
    let dy = round::<T>(&random(rng, n));
    let sm = Softmax::new(algo, mode);
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, shape), b.nans::<T>(shape), b.up::<T>(&dy, shape), b.nans::<T>(shape));
    let t = |buf| TensorView::new(buf, shape.clone());
    b.h.cudnn().unwrap().softmax_forward(&sm, &t(&bx), &t(&by)).unwrap().wait().unwrap();
    let y = b.down(&by, shape);
    close(&y, &softmax(algo, mode, &x, shape.dims()), T::REL * 2.0 * b.slack, &format!("{what}: forward"));
    b.h.cudnn().unwrap().softmax_backward(&sm, &t(&by), &t(&bdy), &t(&bdx)).unwrap().wait().unwrap();
    let want = softmax_backward(algo, mode, &y, &dy, shape.dims());
    close(&b.down(&bdx, shape), &want, T::REL * 4.0 * b.slack, &format!("{what}: backward"));
}

/// Pooling forward and backward against the references.
pub fn check_pooling<T: El>(b: &mut Bench<'_>, layout: Layout, xd: &[usize], case: &PoolCase, rng: &mut Rng) {
    let what = format!("{} {layout:?} x {xd:?} {case:?}", T::NAME);
    let yd = pool_out_dims(xd, case);
    let (xs, ys) = (Shape::new(layout, xd), Shape::new(layout, &yd));
    let x = distinct(count(xd));
    let dy = round::<T>(&random(rng, count(&yd)));
    let pool = Pooling::new(case.mode, &case.window).pad(&case.pad).stride(&case.stride);
    assert_eq!(pool.output_shape(&xs).unwrap(), ys, "{what}");
    let (bx, by, bdy, bdx) = (b.up::<T>(&x, &xs), b.nans::<T>(&ys), b.up::<T>(&dy, &ys), b.nans::<T>(&xs));
    let t = |buf, sh: &Shape| TensorView::new(buf, sh.clone());
    b.h.cudnn().unwrap().pooling_forward(&pool, &t(&bx, &xs), &t(&by, &ys)).unwrap().wait().unwrap();
    close(&b.down(&by, &ys), &pool_forward(&x, xd, case), T::REL * b.slack, &format!("{what}: forward"));
    b.h.cudnn()
        .unwrap()
        .pooling_backward(&pool, &t(&by, &ys), &t(&bdy, &ys), &t(&bx, &xs), &t(&bdx, &xs))
        .unwrap()
        .wait()
        .unwrap();
    close(&b.down(&bdx, &xs), &pool_backward(&x, xd, &dy, case), T::REL * b.slack, &format!("{what}: backward"));
}

/// The convolution cases: 3x3 stride 2 padding 1, 5x5 dilation 2, groups 2, depthwise, and
/// a 3-D one; each as `(x dims, w dims, case)` with batch 3 and odd sizes.
pub fn conv_cases() -> Vec<(Vec<usize>, Vec<usize>, ConvCase)> {
    let c2 = |pad: usize, stride: usize, dilation: usize, groups: usize| ConvCase {
        pad: vec![pad; 2],
        stride: vec![stride; 2],
        dilation: vec![dilation; 2],
        groups,
    };
    vec![
        (vec![3, 4, 9, 7], vec![6, 4, 3, 3], c2(1, 2, 1, 1)),
        (vec![3, 3, 11, 9], vec![5, 3, 5, 5], c2(2, 1, 2, 1)),
        (vec![3, 4, 7, 7], vec![6, 2, 3, 3], c2(1, 1, 1, 2)),
        (vec![3, 8, 9, 9], vec![8, 1, 3, 3], c2(1, 2, 1, 8)),
        (
            vec![3, 2, 5, 6, 5],
            vec![4, 2, 3, 3, 3],
            ConvCase { pad: vec![1, 1, 1], stride: vec![1, 2, 1], dilation: vec![1, 1, 2], groups: 1 },
        ),
    ]
}

/// The pooling cases: max and both averages, with and without padding, 2-D and 3-D.
pub fn pool_cases() -> Vec<(Vec<usize>, PoolCase)> {
    let mut v = Vec::new();
    for mode in [PoolingMode::Max, PoolingMode::AverageIncludePadding, PoolingMode::AverageExcludePadding] {
        v.push((vec![3, 4, 7, 7], PoolCase { mode, window: vec![3, 3], pad: vec![1, 1], stride: vec![2, 2] }));
        v.push((vec![3, 2, 8, 6], PoolCase { mode, window: vec![2, 2], pad: vec![0, 0], stride: vec![2, 2] }));
        v.push((
            vec![2, 3, 5, 5, 4],
            PoolCase { mode, window: vec![2, 3, 2], pad: vec![1, 1, 0], stride: vec![1, 2, 2] },
        ));
    }
    v
}

/// The activation modes the tests cover.
pub fn activation_modes() -> Vec<ActivationMode> {
    vec![
        ActivationMode::Relu,
        ActivationMode::Sigmoid,
        ActivationMode::Tanh,
        ActivationMode::ClippedRelu { ceiling: 1.5 },
        ActivationMode::Elu { alpha: 0.7 },
        ActivationMode::Swish { beta: 1.3 },
    ]
}
