//! The simulator's cuDNN: every op computed on the host from the buffers' simulated memory,
//! inputs read exactly as f64, evaluated in f64, each stored element rounded once to the
//! element type. Convolutions are direct loops (cross-correlation, as cuDNN computes them);
//! 2-D ops run as 3-D ones with a depth of 1.
//!
//! Each op reads its inputs (one read of each buffer), then writes its output (one lock):
//! an in-place activation or softmax works as on the GPU. With `beta` 0 the output's old
//! contents are not read, as cuDNN does not read them (NaN there stays harmless).

use super::conv::{Direction, Geometry};
use super::ops::{Activation, ActivationMode, Lrn, PoolGeometry, PoolingMode, Softmax, SoftmaxAlgo, SoftmaxMode};
use super::tensor::{DnnElement, Shape};
use crate::memory::SimMem;

/// A shape as 3 spatial dims (depth 1 for 4-D) and its strides `[n, c, d, h, w]`.
struct Dims {
    n: usize,
    c: usize,
    sp: [usize; 3],
    st: [usize; 5],
}

impl Dims {
    fn of(s: &Shape) -> Dims {
        let (d, st) = (s.dims(), s.strides());
        if d.len() == 4 {
            Dims { n: d[0], c: d[1], sp: [1, d[2], d[3]], st: [st[0], st[1], 0, st[2], st[3]] }
        } else {
            Dims { n: d[0], c: d[1], sp: [d[2], d[3], d[4]], st: [st[0], st[1], st[2], st[3], st[4]] }
        }
    }

    fn at(&self, n: usize, c: usize, p: [usize; 3]) -> usize {
        n * self.st[0] + c * self.st[1] + p[0] * self.st[2] + p[1] * self.st[3] + p[2] * self.st[4]
    }

    fn count(&self) -> usize {
        self.n * self.c * self.sp.iter().product::<usize>()
    }

    /// Every spatial position, row-major.
    fn positions(&self) -> impl Iterator<Item = [usize; 3]> + '_ {
        positions(self.sp)
    }
}

fn positions(sp: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..sp[0]).flat_map(move |a| (0..sp[1]).flat_map(move |b| (0..sp[2]).map(move |c| [a, b, c])))
}

/// A per-spatial-dim list as 3 entries, `fill` for the missing depth.
fn three(v: &[usize], fill: usize) -> [usize; 3] {
    match v {
        [a, b] => [fill, *a, *b],
        [a, b, c] => [*a, *b, *c],
        _ => [fill; 3],
    }
}

/// The input position `o * stride + r * dilation - pad` per dim, if inside `sp`.
fn source(
    o: [usize; 3],
    r: [usize; 3],
    stride: [usize; 3],
    dil: [usize; 3],
    pad: [usize; 3],
    sp: [usize; 3],
) -> Option<[usize; 3]> {
    let mut i = [0; 3];
    for j in 0..3 {
        i[j] = (o[j] * stride[j] + r[j] * dil[j]).checked_sub(pad[j]).filter(|&v| v < sp[j])?;
    }
    Some(i)
}

fn load<T: DnnElement>(m: &SimMem<T>) -> Vec<f64> {
    m.read().iter().map(|v| v.to_f64()).collect()
}

/// Stores `alpha * acc[i] + beta * out[i]` into the first `acc.len()` elements of `out`.
fn store<T: DnnElement>(out: &SimMem<T>, acc: &[f64], alpha: f32, beta: f32) {
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    let mut dst = out.lock();
    for (d, &a) in dst.iter_mut().zip(acc) {
        let old = if beta == 0.0 { 0.0 } else { beta * d.to_f64() };
        *d = T::from_f64(alpha * a + old);
    }
}

/// A convolution of any direction: `x`, `w`, `y` are the forward op's operands, whichever the
/// direction writes.
pub(super) struct Conv<T: DnnElement> {
    pub dir: Direction,
    pub x: (Shape, SimMem<T>),
    pub w: (Shape, SimMem<T>),
    pub y: (Shape, SimMem<T>),
    pub geo: Geometry,
    pub alpha: f32,
    pub beta: f32,
    /// A fused forward convolution's epilogue.
    pub epilogue: Option<Epilogue<T>>,
}

/// `y = act(alpha * conv + beta * z + bias[k])`.
pub(super) struct Epilogue<T: DnnElement> {
    pub relu: bool,
    /// `None`: no residual (`beta` is 0).
    pub z: Option<SimMem<T>>,
    pub bias: SimMem<T>,
}

impl<T: DnnElement> Conv<T> {
    pub(super) fn run(self) {
        let (xd, wd, yd) = (Dims::of(&self.x.0), Dims::of(&self.w.0), Dims::of(&self.y.0));
        let (pad, stride, dil) = (three(&self.geo.pad, 0), three(&self.geo.stride, 1), three(&self.geo.dilation, 1));
        let g = self.geo.groups;
        let (cpg, kpg) = (xd.c / g, wd.n / g);
        // The two inputs of the direction, read once; the output's accumulator, in its storage.
        let (xv, wv, yv) = match self.dir {
            Direction::Forward => (load(&self.x.1), load(&self.w.1), Vec::new()),
            Direction::BackwardData => (Vec::new(), load(&self.w.1), load(&self.y.1)),
            Direction::BackwardFilter => (load(&self.x.1), Vec::new(), load(&self.y.1)),
        };
        let mut acc = vec![
            0.0f64;
            match self.dir {
                Direction::Forward => yd.count(),
                Direction::BackwardData => xd.count(),
                Direction::BackwardFilter => wd.count(),
            }
        ];
        for n in 0..yd.n {
            for k in 0..yd.c {
                let grp = k / kpg;
                for o in yd.positions() {
                    let yi = yd.at(n, k, o);
                    for cg in 0..cpg {
                        let c = grp * cpg + cg;
                        for r in wd.positions() {
                            let Some(i) = source(o, r, stride, dil, pad, xd.sp) else { continue };
                            let (xi, wi) = (xd.at(n, c, i), wd.at(k, cg, r));
                            match self.dir {
                                Direction::Forward => acc[yi] += xv[xi] * wv[wi],
                                Direction::BackwardData => acc[xi] += wv[wi] * yv[yi],
                                Direction::BackwardFilter => acc[wi] += xv[xi] * yv[yi],
                            }
                        }
                    }
                }
            }
        }
        if let Some(e) = &self.epilogue {
            // The residual and the bias read before `y` is written: `z` may be `y`.
            let z = e.z.as_ref().map(load);
            let bias = load(&e.bias);
            let (alpha, beta) = (f64::from(self.alpha), f64::from(self.beta));
            let mut out = vec![0.0; yd.count()];
            for n in 0..yd.n {
                for (k, &b) in bias.iter().enumerate().take(yd.c) {
                    for o in yd.positions() {
                        let i = yd.at(n, k, o);
                        let v = alpha * acc[i] + z.as_ref().map_or(0.0, |z| beta * z[i]) + b;
                        out[i] = if e.relu { v.max(0.0) } else { v };
                    }
                }
            }
            store(&self.y.1, &out, 1.0, 0.0);
            return;
        }
        let out = match self.dir {
            Direction::Forward => &self.y.1,
            Direction::BackwardData => &self.x.1,
            Direction::BackwardFilter => &self.w.1,
        };
        store(out, &acc, self.alpha, self.beta);
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The activation's value at `x`.
pub(super) fn activate(mode: ActivationMode, x: f64) -> f64 {
    match mode {
        ActivationMode::Relu => x.max(0.0),
        ActivationMode::Sigmoid => sigmoid(x),
        ActivationMode::Tanh => x.tanh(),
        ActivationMode::ClippedRelu { ceiling } => x.max(0.0).min(ceiling),
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * x.exp_m1()
            }
        }
        ActivationMode::Swish { beta } => x * sigmoid(beta * x),
    }
}

/// The activation's gradient `f'(x) dy`, from `x` and the stored output `y`, as cuDNN
/// computes it.
fn activate_back(mode: ActivationMode, x: f64, y: f64, dy: f64) -> f64 {
    match mode {
        ActivationMode::Relu => {
            if x > 0.0 {
                dy
            } else {
                0.0
            }
        }
        ActivationMode::Sigmoid => dy * y * (1.0 - y),
        ActivationMode::Tanh => dy * (1.0 - y * y),
        ActivationMode::ClippedRelu { ceiling } => {
            if x > 0.0 && x < ceiling {
                dy
            } else {
                0.0
            }
        }
        ActivationMode::Elu { alpha } => {
            if x > 0.0 {
                dy
            } else {
                dy * (y + alpha)
            }
        }
        ActivationMode::Swish { beta } => {
            let s = sigmoid(beta * x);
            dy * (s + beta * x * s * (1.0 - s))
        }
    }
}

pub(super) fn activation_forward<T: DnnElement>(a: &Activation, shape: &Shape, x: &SimMem<T>, y: &SimMem<T>) {
    let n = Dims::of(shape).count();
    let acc: Vec<f64> = load(x).into_iter().take(n).map(|v| activate(a.mode, v)).collect();
    store(y, &acc, a.alpha, a.beta);
}

/// `m`: `y`, `dy`, `x`, `dx`.
pub(super) fn activation_backward<T: DnnElement>(a: &Activation, shape: &Shape, m: [SimMem<T>; 4]) {
    let n = Dims::of(shape).count();
    let (y, dy, x) = (load(&m[0]), load(&m[1]), load(&m[2]));
    let acc: Vec<f64> = (0..n).map(|i| activate_back(a.mode, x[i], y[i], dy[i])).collect();
    store(&m[3], &acc, a.alpha, a.beta);
}

/// The index sets softmax normalizes over.
fn softmax_sets(mode: SoftmaxMode, shape: &Shape) -> Vec<Vec<usize>> {
    let d = Dims::of(shape);
    let mut sets = Vec::new();
    for n in 0..d.n {
        match mode {
            SoftmaxMode::Instance => {
                sets.push(
                    (0..d.c).flat_map(|c| d.positions().map(move |p| (c, p))).map(|(c, p)| d.at(n, c, p)).collect(),
                );
            }
            SoftmaxMode::Channel => {
                for p in d.positions() {
                    sets.push((0..d.c).map(|c| d.at(n, c, p)).collect());
                }
            }
        }
    }
    sets
}

pub(super) fn softmax_forward<T: DnnElement>(s: &Softmax, shape: &Shape, x: &SimMem<T>, y: &SimMem<T>) {
    let xv = load(x);
    let mut acc = vec![0.0; Dims::of(shape).count()];
    for set in softmax_sets(s.mode, shape) {
        let m = set.iter().map(|&i| xv[i]).fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = set.iter().map(|&i| (xv[i] - m).exp()).sum();
        for &i in &set {
            acc[i] = match s.algo {
                SoftmaxAlgo::Log => xv[i] - m - sum.ln(),
                SoftmaxAlgo::Fast | SoftmaxAlgo::Accurate => (xv[i] - m).exp() / sum,
            };
        }
    }
    store(y, &acc, s.alpha, s.beta);
}

/// `m`: `y`, `dy`, `dx`.
pub(super) fn softmax_backward<T: DnnElement>(s: &Softmax, shape: &Shape, m: [SimMem<T>; 3]) {
    let (y, dy) = (load(&m[0]), load(&m[1]));
    let mut acc = vec![0.0; Dims::of(shape).count()];
    for set in softmax_sets(s.mode, shape) {
        match s.algo {
            SoftmaxAlgo::Log => {
                let sum: f64 = set.iter().map(|&i| dy[i]).sum();
                for &i in &set {
                    acc[i] = dy[i] - y[i].exp() * sum;
                }
            }
            SoftmaxAlgo::Fast | SoftmaxAlgo::Accurate => {
                let dot: f64 = set.iter().map(|&i| dy[i] * y[i]).sum();
                for &i in &set {
                    acc[i] = y[i] * (dy[i] - dot);
                }
            }
        }
    }
    store(&m[2], &acc, s.alpha, s.beta);
}

/// For each value (storage index) of `shape`, in order: the storage indices of the channels in
/// its LRN window.
fn lrn_windows(n: usize, shape: &Shape) -> Vec<(usize, Vec<usize>)> {
    let d = Dims::of(shape);
    let half = n / 2;
    let mut out = Vec::with_capacity(d.count());
    for b in 0..d.n {
        for c in 0..d.c {
            for p in d.positions() {
                let window = (c.saturating_sub(half)..(c + half + 1).min(d.c)).map(|j| d.at(b, j, p)).collect();
                out.push((d.at(b, c, p), window));
            }
        }
    }
    out
}

/// `k + alpha / n * Σ x²` over each value's window, by storage index.
fn lrn_scales(l: &Lrn, shape: &Shape, x: &[f64]) -> Vec<f64> {
    let mut s = vec![0.0; x.len()];
    for (i, window) in lrn_windows(l.n, shape) {
        s[i] = l.k + l.alpha / l.n as f64 * window.iter().map(|&j| x[j] * x[j]).sum::<f64>();
    }
    s
}

pub(super) fn lrn_forward<T: DnnElement>(l: &Lrn, shape: &Shape, x: &SimMem<T>, y: &SimMem<T>) {
    let n = Dims::of(shape).count();
    let xv: Vec<f64> = load(x).into_iter().take(n).collect();
    let s = lrn_scales(l, shape, &xv);
    let acc: Vec<f64> = (0..n).map(|i| xv[i] * s[i].powf(-l.beta)).collect();
    store(y, &acc, l.scale_alpha, l.scale_beta);
}

/// `m`: `y`, `dy`, `x`, `dx`. The window is symmetric (odd `n`), so the values whose window
/// holds `i` are those in `i`'s window.
pub(super) fn lrn_backward<T: DnnElement>(l: &Lrn, shape: &Shape, m: [SimMem<T>; 4]) {
    let n = Dims::of(shape).count();
    let (y, dy, x): (Vec<f64>, Vec<f64>, Vec<f64>) =
        (load(&m[0]), load(&m[1]), load(&m[2]).into_iter().take(n).collect());
    let s = lrn_scales(l, shape, &x);
    let c = 2.0 * l.alpha * l.beta / l.n as f64;
    let mut acc = vec![0.0; n];
    for (i, window) in lrn_windows(l.n, shape) {
        let sum: f64 = window.iter().map(|&j| dy[j] * y[j] / s[j]).sum();
        acc[i] = dy[i] * s[i].powf(-l.beta) - c * x[i] * sum;
    }
    store(&m[3], &acc, l.scale_alpha, l.scale_beta);
}

/// Calls `f(n, c, output position, the window's input positions inside x, the divisor)` for
/// every output element.
fn windows(
    geo: &PoolGeometry,
    xs: &Shape,
    ys: &Shape,
    mut f: impl FnMut(usize, usize, [usize; 3], &[[usize; 3]], f64),
) {
    let (xd, yd) = (Dims::of(xs), Dims::of(ys));
    let (win, pad, stride) = (three(&geo.window, 1), three(&geo.pad, 0), three(&geo.stride, 1));
    let full = win.iter().product::<usize>() as f64;
    let mut inside = Vec::new();
    for n in 0..yd.n {
        for c in 0..yd.c {
            for o in yd.positions() {
                inside.clear();
                inside.extend(positions(win).filter_map(|r| source(o, r, stride, [1; 3], pad, xd.sp)));
                let divisor = match geo.mode {
                    PoolingMode::AverageIncludePadding => full,
                    _ => inside.len() as f64,
                };
                f(n, c, o, &inside, divisor);
            }
        }
    }
}

pub(super) fn pooling_forward<T: DnnElement>(
    geo: &PoolGeometry,
    alpha: f32,
    beta: f32,
    xs: &Shape,
    ys: &Shape,
    x: &SimMem<T>,
    y: &SimMem<T>,
) {
    let (xd, yd) = (Dims::of(xs), Dims::of(ys));
    let xv = load(x);
    let mut acc = vec![0.0; yd.count()];
    windows(geo, xs, ys, |n, c, o, inside, divisor| {
        let vals = inside.iter().map(|&i| xv[xd.at(n, c, i)]);
        acc[yd.at(n, c, o)] = match geo.mode {
            PoolingMode::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            _ => vals.sum::<f64>() / divisor,
        };
    });
    store(y, &acc, alpha, beta);
}

/// `m`: `y`, `dy`, `x`, `dx`.
pub(super) fn pooling_backward<T: DnnElement>(
    geo: &PoolGeometry,
    alpha: f32,
    beta: f32,
    xs: &Shape,
    ys: &Shape,
    m: [SimMem<T>; 4],
) {
    let (xd, yd) = (Dims::of(xs), Dims::of(ys));
    let (dy, x) = (load(&m[1]), load(&m[2]));
    let mut acc = vec![0.0; xd.count()];
    windows(geo, xs, ys, |n, c, o, inside, divisor| {
        let g = dy[yd.at(n, c, o)];
        match geo.mode {
            PoolingMode::Max => {
                // The first maximum of the window takes the gradient.
                let mut best: Option<(usize, f64)> = None;
                for &i in inside {
                    let at = xd.at(n, c, i);
                    if best.is_none_or(|(_, v)| x[at] > v) {
                        best = Some((at, x[at]));
                    }
                }
                if let Some((at, _)) = best {
                    acc[at] += g;
                }
            }
            _ => {
                for &i in inside {
                    acc[xd.at(n, c, i)] += g / divisor;
                }
            }
        }
    });
    store(&m[3], &acc, alpha, beta);
}

/// Which batch-norm op, with what only it uses.
pub(super) enum BatchNormKind<T: DnnElement> {
    /// `mean` and `var` are the given statistics.
    Inference,
    /// `mean` and `var` are the running statistics (`None`: not updated).
    Training { factor: f64, saved: Option<(SimMem<f32>, SimMem<f32>)> },
    /// `y` is `dx`, `mean` is `dscale`, `var` is `dbias`; `saved` the training step's mean
    /// and inverse standard deviation.
    Backward { dy: SimMem<T>, saved: (SimMem<f32>, SimMem<f32>) },
}

/// A batch-norm op per channel over `N x spatial`.
pub(super) struct BatchNorm<T: DnnElement> {
    pub bn: super::norm::BatchNorm,
    pub shape: Shape,
    pub x: SimMem<T>,
    /// `y`, or `dx` backward.
    pub y: SimMem<T>,
    pub scale: SimMem<f32>,
    pub bias: Option<SimMem<f32>>,
    pub mean: Option<SimMem<f32>>,
    pub var: Option<SimMem<f32>>,
    pub kind: BatchNormKind<T>,
}

fn floats(m: &SimMem<f32>) -> Vec<f64> {
    m.read().iter().map(|&v| f64::from(v)).collect()
}

fn put(m: &SimMem<f32>, c: usize, v: f64) {
    if let Some(slot) = m.lock().get_mut(c) {
        *slot = v as f32;
    }
}

impl<T: DnnElement> BatchNorm<T> {
    pub(super) fn run(self) {
        let d = Dims::of(&self.shape);
        let x = load(&self.x);
        let scale = floats(&self.scale);
        let bias = self.bias.as_ref().map(floats);
        let (mean, var) = (self.mean.as_ref().map(floats), self.var.as_ref().map(floats));
        let eps = self.bn.epsilon;
        let count = (d.n * d.sp.iter().product::<usize>()) as f64;
        let dy = match &self.kind {
            BatchNormKind::Backward { dy, .. } => load(dy),
            _ => Vec::new(),
        };
        let mut out = vec![0.0; d.count()];
        for c in 0..d.c {
            let idx: Vec<usize> =
                (0..d.n).flat_map(|n| d.positions().map(move |p| (n, p))).map(|(n, p)| d.at(n, c, p)).collect();
            match &self.kind {
                BatchNormKind::Inference => {
                    let (mu, var) = (mean.as_ref().map_or(0.0, |m| m[c]), var.as_ref().map_or(1.0, |v| v[c]));
                    let inv = 1.0 / (var + eps).sqrt();
                    for &i in &idx {
                        out[i] = scale[c] * (x[i] - mu) * inv + bias.as_ref().map_or(0.0, |b| b[c]);
                    }
                }
                BatchNormKind::Training { factor, saved } => {
                    let mu = idx.iter().map(|&i| x[i]).sum::<f64>() / count;
                    let var_b = idx.iter().map(|&i| (x[i] - mu).powi(2)).sum::<f64>() / count;
                    let inv = 1.0 / (var_b + eps).sqrt();
                    for &i in &idx {
                        out[i] = scale[c] * (x[i] - mu) * inv + bias.as_ref().map_or(0.0, |b| b[c]);
                    }
                    if let (Some(rm), Some(rv), Some(m), Some(v)) = (&mean, &var, &self.mean, &self.var) {
                        put(m, c, (1.0 - factor) * rm[c] + factor * mu);
                        put(v, c, (1.0 - factor) * rv[c] + factor * var_b * count / (count - 1.0));
                    }
                    if let Some((sm, si)) = saved {
                        put(sm, c, mu);
                        put(si, c, inv);
                    }
                }
                BatchNormKind::Backward { saved, .. } => {
                    let (mu, inv) = (floats(&saved.0)[c], floats(&saved.1)[c]);
                    let xhat = |i: usize| (x[i] - mu) * inv;
                    let dbias: f64 = idx.iter().map(|&i| dy[i]).sum();
                    let dscale: f64 = idx.iter().map(|&i| dy[i] * xhat(i)).sum();
                    for &i in &idx {
                        out[i] = scale[c] * inv / count * (count * dy[i] - dbias - xhat(i) * dscale);
                    }
                    if let (Some(ds), Some(db)) = (&self.mean, &self.var) {
                        put(ds, c, dscale);
                        put(db, c, dbias);
                    }
                }
            }
        }
        store(&self.y, &out, self.bn.alpha, self.bn.beta);
    }
}

/// Seeds the simulator's dropout states: the seed, then a counter of forward ops at 0.
pub(super) fn dropout_init(states: &SimMem<u8>, seed: u64) {
    let mut s = states.lock();
    if s.len() >= super::dropout::SIM_STATES {
        s[..8].copy_from_slice(&seed.to_le_bytes());
        s[8..16].copy_from_slice(&0u64.to_le_bytes());
    }
}

/// splitmix64: the simulator's dropout draws.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A dropout op: forward draws a mask from the states (the seed and the forward count, so
/// two states seeded alike give the same masks in turn), keeps it in `reserve` (a byte per
/// element) and advances the count; backward applies the kept mask.
pub(super) struct Dropout<T: DnnElement> {
    pub p: f32,
    pub count: usize,
    pub states: SimMem<u8>,
    pub input: SimMem<T>,
    pub output: SimMem<T>,
    pub reserve: SimMem<u8>,
    pub forward: bool,
}

impl<T: DnnElement> Dropout<T> {
    pub(super) fn run(self) {
        let input = load(&self.input);
        let keep_scale = 1.0 / (1.0 - f64::from(self.p));
        let mask: Vec<u8> = if self.forward {
            let mut s = self.states.lock();
            let word =
                |r: std::ops::Range<usize>| s.get(r).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
            let (seed, turn) = (word(0..8), word(8..16));
            if let Some(b) = s.get_mut(8..16) {
                b.copy_from_slice(&turn.wrapping_add(1).to_le_bytes());
            }
            let base = mix(seed ^ mix(turn));
            let p = f64::from(self.p);
            let mask: Vec<u8> = (0..self.count)
                .map(|i| u8::from(((mix(base.wrapping_add(i as u64)) >> 11) as f64 / (1u64 << 53) as f64) >= p))
                .collect();
            let mut r = self.reserve.lock();
            for (d, &m) in r.iter_mut().zip(&mask) {
                *d = m;
            }
            mask
        } else {
            self.reserve.read().iter().take(self.count).copied().collect()
        };
        let acc: Vec<f64> = input.iter().zip(&mask).map(|(&v, &m)| if m != 0 { v * keep_scale } else { 0.0 }).collect();
        store(&self.output, &acc, 1.0, 0.0);
    }
}
