//! CPU reference of cuDNN's RNNs in f64: each sequence run step by step through each layer and
//! direction with the equations of cuDNN's `cudnnRNNMode_t`, weights kept per pseudo-layer and
//! linear layer (not in any weight space); gradients by central finite differences of the loss
//! `Σ y·dy + Σ hy·dhy + Σ cy·dcy`, so that they share nothing with an analytic backward pass.
//! The runner [`check_rnn`] drives forward (training), backward data and backward weights
//! (accumulating, then overwriting) on a device and compares each with the reference.

use super::cudnn::{close, from_el, to_el, Bench, El};
use crate::common::{random, Rng};
use cusched::cudnn::{Rnn, RnnCell, RnnData, RnnGrads, RnnLayout, RnnWeightLayout, WeightGrad};

/// A network's shape.
#[derive(Clone, Copy, Debug)]
pub struct RnnCase {
    pub cell: RnnCell,
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    pub dirs: usize,
    pub layout: RnnLayout,
}

impl RnnCase {
    pub fn lins(&self) -> usize {
        match self.cell {
            RnnCell::Lstm => 8,
            RnnCell::Gru => 6,
            RnnCell::Relu | RnnCell::Tanh => 2,
        }
    }

    pub fn out(&self) -> usize {
        self.hidden * self.dirs
    }

    pub fn pseudo(&self) -> usize {
        self.layers * self.dirs
    }

    /// Columns of linear layer `lin` of `layer`.
    pub fn cols(&self, layer: usize, lin: usize) -> usize {
        if lin >= self.lins() / 2 {
            self.hidden
        } else if layer == 0 {
            self.input
        } else {
            self.out()
        }
    }

    pub fn rnn(&self) -> Rnn {
        Rnn::new(self.cell, self.input, self.hidden)
            .layers(self.layers)
            .bidirectional(self.dirs == 2)
            .layout(self.layout)
    }
}

/// Weights per pseudo-layer and linear layer: row-major matrices (`hidden` rows) and biases.
#[derive(Clone, Debug)]
pub struct Weights {
    pub m: Vec<Vec<Vec<f64>>>,
    pub b: Vec<Vec<Vec<f64>>>,
}

impl Weights {
    pub fn random<T: El>(c: &RnnCase, rng: &mut Rng, scale: f64) -> Weights {
        let mut w = Weights { m: Vec::new(), b: Vec::new() };
        for p in 0..c.pseudo() {
            let layer = p / c.dirs;
            let r = |n: usize, rng: &mut Rng| random(rng, n).iter().map(|v| T::cast(v * scale).value()).collect();
            w.m.push((0..c.lins()).map(|lin| r(c.hidden * c.cols(layer, lin), rng)).collect());
            w.b.push((0..c.lins()).map(|_| r(c.hidden, rng)).collect());
        }
        w
    }

    /// Every value, in a fixed order (for finite differences).
    fn flat(&self) -> Vec<f64> {
        self.m.iter().chain(&self.b).flatten().flatten().copied().collect()
    }

    fn set_flat(&mut self, v: &[f64]) {
        let mut it = v.iter();
        for x in self.m.iter_mut().chain(self.b.iter_mut()).flatten().flatten() {
            *x = *it.next().unwrap();
        }
    }

    /// The weight space `layout` describes, zero where it places nothing.
    pub fn pack(&self, c: &RnnCase, layout: &RnnWeightLayout) -> Vec<f64> {
        let mut out = vec![0.0; layout.len()];
        for p in 0..c.pseudo() {
            for lin in 0..c.lins() {
                let (m, b) = (
                    layout.matrix(p / c.dirs, p % c.dirs, lin).unwrap(),
                    layout.bias(p / c.dirs, p % c.dirs, lin).unwrap(),
                );
                assert_eq!((m.rows, m.cols), (c.hidden, c.cols(p / c.dirs, lin)), "matrix {p}/{lin}'s shape");
                assert_eq!(b.len, c.hidden, "bias {p}/{lin}'s length");
                out[m.offset..m.offset + m.rows * m.cols].copy_from_slice(&self.m[p][lin]);
                out[b.offset..b.offset + b.len].copy_from_slice(&self.b[p][lin]);
            }
        }
        out
    }

    /// The weights a packed space holds.
    pub fn unpack(c: &RnnCase, layout: &RnnWeightLayout, v: &[f64]) -> Weights {
        let mut w = Weights { m: Vec::new(), b: Vec::new() };
        for p in 0..c.pseudo() {
            let (mut ms, mut bs) = (Vec::new(), Vec::new());
            for lin in 0..c.lins() {
                let (m, b) = (
                    layout.matrix(p / c.dirs, p % c.dirs, lin).unwrap(),
                    layout.bias(p / c.dirs, p % c.dirs, lin).unwrap(),
                );
                ms.push(v[m.offset..m.offset + m.rows * m.cols].to_vec());
                bs.push(v[b.offset..b.offset + b.len].to_vec());
            }
            w.m.push(ms);
            w.b.push(bs);
        }
        w
    }
}

fn sig(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `M v + b` for a row-major `M` of `b.len()` rows.
fn lin(m: &[f64], b: &[f64], v: &[f64]) -> Vec<f64> {
    let cols = v.len();
    b.iter().enumerate().map(|(r, &bias)| bias + (0..cols).map(|k| m[r * cols + k] * v[k]).sum::<f64>()).collect()
}

/// The states and outputs: `x[b][t]` (valid steps only), `hx`, `cx` `[pseudo][b][hidden]`.
pub struct Run {
    pub y: Vec<Vec<Vec<f64>>>,
    pub hy: Vec<Vec<Vec<f64>>>,
    pub cy: Vec<Vec<Vec<f64>>>,
}

thread_local! {
    /// The smallest `|pre-activation|` of the ReLU cells the reference computed since it was
    /// last reset: how close the data came to ReLU's kink.
    static KINK: std::cell::Cell<f64> = const { std::cell::Cell::new(f64::INFINITY) };
}

/// One cell step of pseudo-layer `p`: the new `(h, c)`.
fn cell(c: &RnnCase, w: &Weights, p: usize, x: &[f64], h: &[f64], cs: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (m, bb) = (&w.m[p], &w.b[p]);
    let half = c.lins() / 2;
    let wx: Vec<Vec<f64>> = (0..half).map(|k| lin(&m[k], &bb[k], x)).collect();
    let rh: Vec<Vec<f64>> = (0..half).map(|k| lin(&m[half + k], &bb[half + k], h)).collect();
    let n = c.hidden;
    match c.cell {
        RnnCell::Lstm => {
            let mut nc = vec![0.0; n];
            let mut nh = vec![0.0; n];
            for j in 0..n {
                let i = sig(wx[0][j] + rh[0][j]);
                let f = sig(wx[1][j] + rh[1][j]);
                let g = (wx[2][j] + rh[2][j]).tanh();
                let o = sig(wx[3][j] + rh[3][j]);
                nc[j] = f * cs[j] + i * g;
                nh[j] = o * nc[j].tanh();
            }
            (nh, nc)
        }
        RnnCell::Gru => {
            let nh = (0..n)
                .map(|j| {
                    let r = sig(wx[0][j] + rh[0][j]);
                    let z = sig(wx[1][j] + rh[1][j]);
                    let nn = (wx[2][j] + r * rh[2][j]).tanh();
                    (1.0 - z) * nn + z * h[j]
                })
                .collect();
            (nh, cs.to_vec())
        }
        RnnCell::Relu => {
            let z: Vec<f64> = (0..n).map(|j| wx[0][j] + rh[0][j]).collect();
            let nearest = z.iter().fold(f64::INFINITY, |m, v| m.min(v.abs()));
            KINK.with(|k| k.set(k.get().min(nearest)));
            (z.iter().map(|v| v.max(0.0)).collect(), cs.to_vec())
        }
        RnnCell::Tanh => ((0..n).map(|j| (wx[0][j] + rh[0][j]).tanh()).collect(), cs.to_vec()),
    }
}

/// The forward pass over sequences `x[b][t][k]` of their own lengths.
pub fn forward(c: &RnnCase, w: &Weights, x: &[Vec<Vec<f64>>], hx: &[Vec<Vec<f64>>], cx: &[Vec<Vec<f64>>]) -> Run {
    let mut seqs: Vec<Vec<Vec<f64>>> = x.to_vec();
    let (mut hy, mut cy) = (hx.to_vec(), cx.to_vec());
    for layer in 0..c.layers {
        let mut next: Vec<Vec<Vec<f64>>> = seqs.iter().map(|s| vec![vec![0.0; c.out()]; s.len()]).collect();
        for dir in 0..c.dirs {
            let p = layer * c.dirs + dir;
            for (b, s) in seqs.iter().enumerate() {
                let (mut h, mut cs) = (hx[p][b].clone(), cx[p][b].clone());
                let steps: Vec<usize> = if dir == 0 { (0..s.len()).collect() } else { (0..s.len()).rev().collect() };
                for t in steps {
                    (h, cs) = cell(c, w, p, &s[t], &h, &cs);
                    next[b][t][dir * c.hidden..(dir + 1) * c.hidden].copy_from_slice(&h);
                }
                hy[p][b] = h;
                cy[p][b] = cs;
            }
        }
        seqs = next;
    }
    Run { y: seqs, hy, cy }
}

/// `Σ y·dy + Σ hy·dhy + Σ cy·dcy`.
fn loss(r: &Run, dy: &[Vec<Vec<f64>>], dhy: &[Vec<Vec<f64>>], dcy: &[Vec<Vec<f64>>]) -> f64 {
    let dot = |a: &[Vec<Vec<f64>>], b: &[Vec<Vec<f64>>]| -> f64 {
        a.iter().flatten().flatten().zip(b.iter().flatten().flatten()).map(|(x, y)| x * y).sum()
    };
    dot(&r.y, dy) + dot(&r.hy, dhy) + dot(&r.cy, dcy)
}

/// The central difference of `f` at each element of `v`. The step is small enough that a ReLU
/// cell's kink rarely falls inside it (a difference across one is off by half the slope) and
/// large enough that the loss's rounding stays far below the tolerances.
fn fd(v: &mut [f64], mut f: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
    const H: f64 = 1e-7;
    (0..v.len())
        .map(|i| {
            let keep = v[i];
            v[i] = keep + H;
            let up = f(v);
            v[i] = keep - H;
            let down = f(v);
            v[i] = keep;
            (up - down) / (2.0 * H)
        })
        .collect()
}

fn flat3(v: &[Vec<Vec<f64>>]) -> Vec<f64> {
    v.iter().flatten().flatten().copied().collect()
}

fn shape3(like: &[Vec<Vec<f64>>], flat: &[f64]) -> Vec<Vec<Vec<f64>>> {
    let mut it = flat.iter();
    like.iter().map(|a| a.iter().map(|b| b.iter().map(|_| *it.next().unwrap()).collect()).collect()).collect()
}

/// Gradients of the loss: `dx`, `dhx`, `dcx`, `dW`, by finite differences.
pub struct Grads {
    pub dx: Vec<Vec<Vec<f64>>>,
    pub dhx: Vec<Vec<Vec<f64>>>,
    pub dcx: Vec<Vec<Vec<f64>>>,
    pub dw: Weights,
}

#[allow(clippy::too_many_arguments)]
pub fn gradients(
    c: &RnnCase,
    w: &Weights,
    x: &[Vec<Vec<f64>>],
    hx: &[Vec<Vec<f64>>],
    cx: &[Vec<Vec<f64>>],
    dy: &[Vec<Vec<f64>>],
    dhy: &[Vec<Vec<f64>>],
    dcy: &[Vec<Vec<f64>>],
) -> Grads {
    let dx = fd(&mut flat3(x), |v| loss(&forward(c, w, &shape3(x, v), hx, cx), dy, dhy, dcy));
    let dhx = fd(&mut flat3(hx), |v| loss(&forward(c, w, x, &shape3(hx, v), cx), dy, dhy, dcy));
    let dcx = fd(&mut flat3(cx), |v| loss(&forward(c, w, x, hx, &shape3(cx, v)), dy, dhy, dcy));
    let mut probe = w.clone();
    let dwf = fd(&mut w.flat(), |v| {
        probe.set_flat(v);
        loss(&forward(c, &probe, x, hx, cx), dy, dhy, dcy)
    });
    let mut dw = w.clone();
    dw.set_flat(&dwf);
    Grads { dx: shape3(x, &dx), dhx: shape3(hx, &dhx), dcx: shape3(cx, &dcx), dw }
}

/// Where step `t` of sequence `b` starts (in steps of `width`) in the case's layout.
fn step_at(c: &RnnCase, lengths: &[usize], max_len: usize, t: usize, b: usize) -> usize {
    let bn = lengths.len();
    match c.layout {
        RnnLayout::SeqMajor => t * bn + b,
        RnnLayout::BatchMajor => b * max_len + t,
        // Longest first: step `t` holds the sequences longer than `t`, in batch order.
        RnnLayout::SeqMajorPacked => {
            let before: usize = (0..t).map(|u| lengths.iter().filter(|&&l| l > u).count()).sum();
            before + b
        }
    }
}

/// The steps a buffer of the case's layout holds.
fn steps(c: &RnnCase, lengths: &[usize], max_len: usize) -> usize {
    match c.layout {
        RnnLayout::SeqMajorPacked => lengths.iter().sum(),
        _ => max_len * lengths.len(),
    }
}

/// Sequences `[b][t][width]` (valid steps) in the case's layout, padding `pad`.
pub fn pack_seq(c: &RnnCase, v: &[Vec<Vec<f64>>], max_len: usize, width: usize, pad: f64) -> Vec<f64> {
    let lengths: Vec<usize> = v.iter().map(|s| s.len()).collect();
    let mut out = vec![pad; steps(c, &lengths, max_len) * width];
    for (b, s) in v.iter().enumerate() {
        for (t, e) in s.iter().enumerate() {
            let at = step_at(c, &lengths, max_len, t, b) * width;
            out[at..at + width].copy_from_slice(e);
        }
    }
    out
}

/// The valid steps of a buffer in the case's layout, and the padding's values.
pub fn unpack_seq(
    c: &RnnCase,
    v: &[f64],
    lengths: &[usize],
    max_len: usize,
    width: usize,
) -> (Vec<Vec<Vec<f64>>>, Vec<f64>) {
    let mut used = vec![false; v.len() / width];
    let mut seqs = vec![Vec::new(); lengths.len()];
    for (b, seq) in seqs.iter_mut().enumerate() {
        for t in 0..lengths[b] {
            let at = step_at(c, lengths, max_len, t, b);
            used[at] = true;
            seq.push(v[at * width..(at + 1) * width].to_vec());
        }
    }
    let pad = used
        .iter()
        .enumerate()
        .filter(|(_, &u)| !u)
        .flat_map(|(i, _)| v[i * width..(i + 1) * width].to_vec())
        .collect();
    (seqs, pad)
}

fn states(c: &RnnCase, bn: usize, rng: &mut Rng, round: impl Fn(f64) -> f64) -> Vec<Vec<Vec<f64>>> {
    (0..c.pseudo())
        .map(|_| (0..bn).map(|_| random(rng, c.hidden).into_iter().map(&round).collect()).collect())
        .collect()
}

/// The cases of the suites: every cell × directions {1, 2} × layers {1, 2}, the three
/// layouts in turn.
pub fn rnn_cases() -> Vec<RnnCase> {
    let mut v = Vec::new();
    for cell in [RnnCell::Lstm, RnnCell::Gru, RnnCell::Relu, RnnCell::Tanh] {
        for dirs in [1, 2] {
            for layers in [1, 2] {
                let layout = [RnnLayout::SeqMajor, RnnLayout::BatchMajor, RnnLayout::SeqMajorPacked][v.len() % 3];
                v.push(RnnCase { cell, input: 3, hidden: 4, layers, dirs, layout });
            }
        }
    }
    v
}

/// Forward (training), backward data and backward weights (accumulating onto random values,
/// then overwriting) of `case` on sequences of lengths `lengths` (padded to `max_len`; sorted
/// longest first for the packed layout), each against the reference, `T`'s tolerance times `b.slack` (and the type's rounding of
/// the inputs for the gradients). Weights are placed through the device's layout helper.
pub fn check_rnn<T: El>(b: &mut Bench<'_>, c: &RnnCase, lengths: &[usize], max_len: usize, rng: &mut Rng) {
    let mut sorted = lengths.to_vec();
    if c.layout == RnnLayout::SeqMajorPacked {
        sorted.sort_unstable_by(|a, b| b.cmp(a));
    }
    let lengths = &sorted[..];
    let what = format!("{} {c:?} lengths {lengths:?}", T::NAME);
    let round = |v: f64| T::cast(v).value();
    let rnn = c.rnn();
    let bn = lengths.len();
    let lstm = c.cell == RnnCell::Lstm;
    let dnn = b.h.cudnn().unwrap();
    let seqs = dnn.seq_lengths(lengths, max_len).unwrap();
    let layout = dnn.rnn_weight_layout::<T>(&rnn).unwrap();
    let zeros: Vec<Vec<Vec<f64>>> = (0..c.pseudo()).map(|_| vec![vec![0.0; c.hidden]; bn]).collect();
    // The device keeps the half types' states in the type, so a ReLU pre-activation within
    // their rounding of zero may fall on the other side of the kink there, and the gradients
    // differ by whole terms: such draws are drawn again (a comparison at the kink is ill-posed).
    let margin = if T::NAME == "f32" { 1e-4 } else { 0.01 };
    let mut best = None;
    for _ in 0..64 {
        let w = Weights::random::<T>(c, rng, 0.5);
        let x: Vec<Vec<Vec<f64>>> = lengths
            .iter()
            .map(|&l| (0..l).map(|_| random(rng, c.input).into_iter().map(round).collect()).collect())
            .collect();
        let hx = states(c, bn, rng, round);
        let cx = if lstm { states(c, bn, rng, round) } else { zeros.clone() };
        KINK.with(|k| k.set(f64::INFINITY));
        let want = forward(c, &w, &x, &hx, &cx);
        let kink = KINK.with(|k| k.get());
        if best.as_ref().is_none_or(|(k, _)| kink > *k) {
            best = Some((kink, (w, x, hx, cx, want)));
        }
        if kink >= margin {
            break;
        }
    }
    let Some((kink, (w, x, hx, cx, want))) = best else { unreachable!("64 draws") };
    if kink < margin {
        eprintln!("{what}: a ReLU pre-activation within {kink:.2e} of the kink after 64 draws");
    }

    let (d, s) = (b.d, b.s);
    let up = |v: &[f64]| d.upload(s, &to_el::<T>(v)).unwrap();
    let hn = c.pseudo() * bn * c.hidden;
    let wbuf = up(&w.pack(c, &layout));
    let xbuf = up(&pack_seq(c, &x, max_len, c.input, 0.5));
    let ybuf = up(&vec![7.0; steps(c, lengths, max_len) * c.out()]);
    let (hxb, cxb) = (up(&flat3(&hx)), up(&flat3(&cx)));
    let (hyb, cyb) = (up(&vec![7.0; hn]), up(&vec![7.0; hn]));
    let dnn = b.h.cudnn().unwrap();
    let rbytes = dnn.rnn_reserve_bytes::<T>(&rnn, &seqs).unwrap();
    let reserve = d.alloc_zeros::<u8>(s, rbytes).unwrap();
    let mut data = RnnData::new(&xbuf, &ybuf).hx(&hxb).hy(&hyb);
    if lstm {
        data = data.cx(&cxb).cy(&cyb);
    }
    dnn.rnn_forward(&rnn, &seqs, &data, &wbuf, Some(&reserve)).unwrap().wait().unwrap();
    let down = |buf: &cusched::GpuRef<T>| from_el(&buf.download(s).unwrap());
    let tol = T::REL * b.slack;
    let (y, pad) = unpack_seq(c, &down(&ybuf), lengths, max_len, c.out());
    close(&flat3(&y), &flat3(&want.y), tol, &format!("{what}: y"));
    assert!(pad.iter().all(|&v| v == 0.0), "{what}: y's padding is {pad:?}, want zeros");
    close(&down(&hyb), &flat3(&want.hy), tol, &format!("{what}: hy"));
    if lstm {
        close(&down(&cyb), &flat3(&want.cy), tol, &format!("{what}: cy"));
    }
    // Inference: the same outputs, no reserve, the final states left out.
    let yinf = up(&vec![7.0; steps(c, lengths, max_len) * c.out()]);
    let mut data = RnnData::new(&xbuf, &yinf).hx(&hxb);
    if lstm {
        data = data.cx(&cxb);
    }
    dnn.rnn_forward(&rnn, &seqs, &data, &wbuf, None).unwrap().wait().unwrap();
    let (y, _) = unpack_seq(c, &down(&yinf), lengths, max_len, c.out());
    close(&flat3(&y), &flat3(&want.y), tol, &format!("{what}: y (inference)"));

    // Backward against finite differences, from the device's own y.
    let dy: Vec<Vec<Vec<f64>>> = lengths
        .iter()
        .map(|&l| (0..l).map(|_| random(rng, c.out()).into_iter().map(round).collect()).collect())
        .collect();
    let dhy = states(c, bn, rng, round);
    let dcy = if lstm { states(c, bn, rng, round) } else { zeros.clone() };
    let g = gradients(c, &w, &x, &hx, &cx, &dy, &dhy, &dcy);
    let dyb = up(&pack_seq(c, &dy, max_len, c.out(), 3.0));
    let (dhyb, dcyb) = (up(&flat3(&dhy)), up(&flat3(&dcy)));
    let dxb = up(&vec![7.0; steps(c, lengths, max_len) * c.input]);
    let (dhxb, dcxb) = (up(&vec![7.0; hn]), up(&vec![7.0; hn]));
    let mut grads = RnnGrads::new(&ybuf, &dyb, &dxb).hx(&hxb).dhy(&dhyb).dhx(&dhxb);
    if lstm {
        grads = grads.cx(&cxb).dcy(&dcyb).dcx(&dcxb);
    }
    let dnn = b.h.cudnn().unwrap();
    dnn.rnn_backward_data(&rnn, &seqs, &grads, &wbuf, &reserve).unwrap().wait().unwrap();
    // Gradients sum over many steps: the half types' inputs are exact, their intermediate
    // states are not.
    let gtol = tol * if T::NAME == "f32" { 1.0 } else { 2.0 };
    let (dx, _) = unpack_seq(c, &down(&dxb), lengths, max_len, c.input);
    close(&flat3(&dx), &flat3(&g.dx), gtol, &format!("{what}: dx"));
    close(&down(&dhxb), &flat3(&g.dhx), gtol, &format!("{what}: dhx"));
    if lstm {
        close(&down(&dcxb), &flat3(&g.dcx), gtol, &format!("{what}: dcx"));
    }

    // Backward weights: added to random values, then replacing other values.
    let prior: Vec<f64> = random(rng, layout.len()).into_iter().map(round).collect();
    let dwb = up(&prior);
    dnn.rnn_backward_weights(&rnn, &seqs, &xbuf, Some(&hxb), &ybuf, &dwb, &reserve, WeightGrad::Accumulate)
        .unwrap()
        .wait()
        .unwrap();
    let got = Weights::unpack(c, &layout, &down(&dwb));
    let base = Weights::unpack(c, &layout, &prior);
    let want_acc: Vec<f64> = g.dw.flat().iter().zip(base.flat()).map(|(a, b)| a + b).collect();
    close(&got.flat(), &want_acc, gtol, &format!("{what}: dW accumulated"));
    let dwb2 = up(&vec![7.0; layout.len()]);
    dnn.rnn_backward_weights(&rnn, &seqs, &xbuf, Some(&hxb), &ybuf, &dwb2, &reserve, WeightGrad::Overwrite)
        .unwrap()
        .wait()
        .unwrap();
    let got = Weights::unpack(c, &layout, &down(&dwb2));
    close(&got.flat(), &g.dw.flat(), gtol, &format!("{what}: dW overwritten"));
}
