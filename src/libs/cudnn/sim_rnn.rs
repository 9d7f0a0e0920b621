//! The simulator's RNNs: each cell computed in f64 with direct loops, in cuDNN's equations
//! (see [`super::rnn`]), through every layer and direction, over each sequence's valid steps;
//! backward by back-propagation through time.
//!
//! The reserve space holds what the backward ops are not given: the forward op's `x` and `cx`,
//! then (written by backward data) `dy`, `dhy`, `dcy` and the weights, each as f64. Backward
//! data and backward weights recompute the forward pass from them.

use super::rnn::{Rnn, RnnCell, RnnLayout, RnnOp, RnnWeightLayout, WeightGrad};
use super::tensor::DnnElement;
use crate::memory::SimMem;

/// One RNN op on the simulator.
pub(super) struct Job<T: DnnElement> {
    pub rnn: Rnn,
    pub lengths: Vec<usize>,
    pub max_len: usize,
    pub layout: RnnWeightLayout,
    pub op: RnnOp,
    /// The data operands by argument name.
    pub mems: Vec<(&'static str, SimMem<T>)>,
    pub reserve: Option<SimMem<u8>>,
}

/// The network's shape and weights, in f64.
struct Net<'a> {
    rnn: &'a Rnn,
    layout: &'a RnnWeightLayout,
    w: Vec<f64>,
    lengths: &'a [usize],
    max_len: usize,
}

/// What one step keeps for the backward pass.
#[derive(Clone, Default)]
struct Step {
    hp: Vec<f64>,
    cp: Vec<f64>,
    /// The activated gates (LSTM `i f g o`, GRU `r z n`, ReLU/tanh `h`).
    gates: Vec<f64>,
    /// GRU: `R_n h + bR_n`.
    q: Vec<f64>,
    c: Vec<f64>,
    h: Vec<f64>,
}

/// The forward pass: each layer's input (step-major), each pseudo-layer's steps, the output
/// and the final states.
struct Forward {
    inputs: Vec<Vec<f64>>,
    steps: Vec<Vec<Step>>,
    y: Vec<f64>,
    hy: Vec<f64>,
    cy: Vec<f64>,
}

/// The backward pass's results.
struct Backward {
    dx: Vec<f64>,
    dhx: Vec<f64>,
    dcx: Vec<f64>,
    dw: Vec<f64>,
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

impl Net<'_> {
    fn batch(&self) -> usize {
        self.lengths.len()
    }

    fn hidden(&self) -> usize {
        self.rnn.hidden
    }

    /// `out[r] = M x + b` for linear layer `lin` of pseudo-layer `p`.
    fn affine(&self, p: usize, lin: usize, x: &[f64]) -> Vec<f64> {
        let (layer, dir) = (p / self.rnn.directions(), p % self.rnn.directions());
        let (m, b) = (self.layout.matrix(layer, dir, lin), self.layout.bias(layer, dir, lin));
        let (Ok(m), Ok(b)) = (m, b) else { return vec![0.0; self.hidden()] };
        (0..m.rows)
            .map(|r| {
                let row = &self.w[m.offset + r * m.cols..m.offset + (r + 1) * m.cols];
                row.iter().zip(x).map(|(a, b)| a * b).sum::<f64>() + self.w[b.offset + r]
            })
            .collect()
    }

    /// Adds the gradient `a` of linear layer `lin`'s output (input `x`) to `dw`, and `Mᵀ a` to
    /// `dx`.
    fn affine_back(&self, p: usize, lin: usize, x: &[f64], a: &[f64], dw: &mut [f64], dx: &mut [f64]) {
        let (layer, dir) = (p / self.rnn.directions(), p % self.rnn.directions());
        let (Ok(m), Ok(b)) = (self.layout.matrix(layer, dir, lin), self.layout.bias(layer, dir, lin)) else { return };
        for r in 0..m.rows {
            dw[b.offset + r] += a[r];
            for c in 0..m.cols {
                dw[m.offset + r * m.cols + c] += a[r] * x[c];
                dx[c] += self.w[m.offset + r * m.cols + c] * a[r];
            }
        }
    }

    fn step(&self, p: usize, x: &[f64], hp: &[f64], cp: &[f64]) -> Step {
        let n = self.rnn.cell.linear_layers();
        let half = n / 2;
        let wx: Vec<Vec<f64>> = (0..half).map(|k| self.affine(p, k, x)).collect();
        let rh: Vec<Vec<f64>> = (0..half).map(|k| self.affine(p, half + k, hp)).collect();
        let hn = self.hidden();
        let mut s = Step { hp: hp.to_vec(), cp: cp.to_vec(), ..Step::default() };
        match self.rnn.cell {
            RnnCell::Lstm => {
                let mut gates = vec![0.0; 4 * hn];
                let (mut c, mut h) = (vec![0.0; hn], vec![0.0; hn]);
                for j in 0..hn {
                    let pre = |k: usize| wx[k][j] + rh[k][j];
                    let (i, f, g, o) = (sigmoid(pre(0)), sigmoid(pre(1)), pre(2).tanh(), sigmoid(pre(3)));
                    gates[j] = i;
                    gates[hn + j] = f;
                    gates[2 * hn + j] = g;
                    gates[3 * hn + j] = o;
                    c[j] = f * cp[j] + i * g;
                    h[j] = o * c[j].tanh();
                }
                (s.gates, s.c, s.h) = (gates, c, h);
            }
            RnnCell::Gru => {
                let mut gates = vec![0.0; 3 * hn];
                let mut h = vec![0.0; hn];
                for j in 0..hn {
                    let r = sigmoid(wx[0][j] + rh[0][j]);
                    let z = sigmoid(wx[1][j] + rh[1][j]);
                    let nn = (wx[2][j] + r * rh[2][j]).tanh();
                    gates[j] = r;
                    gates[hn + j] = z;
                    gates[2 * hn + j] = nn;
                    h[j] = (1.0 - z) * nn + z * hp[j];
                }
                s.q = rh[2].clone();
                (s.gates, s.h) = (gates, h);
            }
            RnnCell::Relu | RnnCell::Tanh => {
                let relu = self.rnn.cell == RnnCell::Relu;
                let h: Vec<f64> = (0..hn)
                    .map(|j| {
                        let pre = wx[0][j] + rh[0][j];
                        if relu {
                            pre.max(0.0)
                        } else {
                            pre.tanh()
                        }
                    })
                    .collect();
                s.gates = h.clone();
                s.h = h;
            }
        }
        s
    }

    /// Back through one step: `dh`, `dc` the gradients of its `h` and `c`; adds to `dw` and
    /// `dx`; returns the gradients of `hp` and `cp`.
    #[allow(clippy::too_many_arguments)]
    fn step_back(
        &self,
        p: usize,
        s: &Step,
        x: &[f64],
        dh: &[f64],
        dc: &[f64],
        dw: &mut [f64],
        dx: &mut [f64],
    ) -> (Vec<f64>, Vec<f64>) {
        let hn = self.hidden();
        let mut dhp = vec![0.0; hn];
        let mut dcp = vec![0.0; hn];
        let g = &s.gates;
        match self.rnn.cell {
            RnnCell::Lstm => {
                let mut a = vec![vec![0.0; hn]; 4];
                for j in 0..hn {
                    let (i, f, gg, o) = (g[j], g[hn + j], g[2 * hn + j], g[3 * hn + j]);
                    let tc = s.c[j].tanh();
                    let dct = dc[j] + dh[j] * o * (1.0 - tc * tc);
                    a[0][j] = dct * gg * i * (1.0 - i);
                    a[1][j] = dct * s.cp[j] * f * (1.0 - f);
                    a[2][j] = dct * i * (1.0 - gg * gg);
                    a[3][j] = dh[j] * tc * o * (1.0 - o);
                    dcp[j] = dct * f;
                }
                for (k, ak) in a.iter().enumerate() {
                    self.affine_back(p, k, x, ak, dw, dx);
                    self.affine_back(p, 4 + k, &s.hp, ak, dw, &mut dhp);
                }
            }
            RnnCell::Gru => {
                let (mut ar, mut az, mut an, mut aq) = (vec![0.0; hn], vec![0.0; hn], vec![0.0; hn], vec![0.0; hn]);
                for j in 0..hn {
                    let (r, z, n) = (g[j], g[hn + j], g[2 * hn + j]);
                    let dn = dh[j] * (1.0 - z);
                    let dz = dh[j] * (s.hp[j] - n);
                    an[j] = dn * (1.0 - n * n);
                    aq[j] = an[j] * r;
                    ar[j] = an[j] * s.q[j] * r * (1.0 - r);
                    az[j] = dz * z * (1.0 - z);
                    dhp[j] = dh[j] * z;
                }
                for (k, (ai, ah)) in [(&ar, &ar), (&az, &az), (&an, &aq)].into_iter().enumerate() {
                    self.affine_back(p, k, x, ai, dw, dx);
                    self.affine_back(p, 3 + k, &s.hp, ah, dw, &mut dhp);
                }
            }
            RnnCell::Relu | RnnCell::Tanh => {
                let a: Vec<f64> = (0..hn)
                    .map(|j| {
                        let h = g[j];
                        let d = if self.rnn.cell == RnnCell::Relu { f64::from(u8::from(h > 0.0)) } else { 1.0 - h * h };
                        dh[j] * d
                    })
                    .collect();
                self.affine_back(p, 0, x, &a, dw, dx);
                self.affine_back(p, 1, &s.hp, &a, dw, &mut dhp);
            }
        }
        (dhp, dcp)
    }

    /// The steps of sequence `b` in direction `dir`'s order.
    fn order(&self, dir: usize, b: usize) -> Vec<usize> {
        let len = self.lengths[b];
        if dir == 0 {
            (0..len).collect()
        } else {
            (0..len).rev().collect()
        }
    }

    /// `x` step-major; `hx`, `cx` `[pseudo][b][hidden]`.
    fn forward(&self, x: &[f64], hx: &[f64], cx: &[f64]) -> Forward {
        let (bn, hn, dn, tn) = (self.batch(), self.hidden(), self.rnn.directions(), self.max_len);
        let out = hn * dn;
        let mut input = x.to_vec();
        let mut width = self.rnn.input;
        let mut f = Forward { inputs: Vec::new(), steps: Vec::new(), y: Vec::new(), hy: hx.to_vec(), cy: cx.to_vec() };
        for layer in 0..self.rnn.layers {
            let mut y = vec![0.0; tn * bn * out];
            for dir in 0..dn {
                let p = layer * dn + dir;
                let mut steps = vec![Step::default(); tn * bn];
                for b in 0..bn {
                    let at = (p * bn + b) * hn;
                    let (mut h, mut c) = (hx[at..at + hn].to_vec(), cx[at..at + hn].to_vec());
                    for t in self.order(dir, b) {
                        let xi = &input[(t * bn + b) * width..(t * bn + b + 1) * width];
                        let s = self.step(p, xi, &h, &c);
                        y[(t * bn + b) * out + dir * hn..(t * bn + b) * out + (dir + 1) * hn].copy_from_slice(&s.h);
                        h.clone_from(&s.h);
                        if !s.c.is_empty() {
                            c.clone_from(&s.c);
                        }
                        steps[t * bn + b] = s;
                    }
                    f.hy[at..at + hn].copy_from_slice(&h);
                    f.cy[at..at + hn].copy_from_slice(&c);
                }
                f.steps.push(steps);
            }
            f.inputs.push(std::mem::replace(&mut input, y));
            width = out;
        }
        f.y = input;
        f
    }

    /// Back through `f` from `dy` (step-major, padded steps ignored), `dhy`, `dcy`.
    fn backward(&self, f: &Forward, dy: &[f64], dhy: &[f64], dcy: &[f64]) -> Backward {
        let (bn, hn, dn, tn) = (self.batch(), self.hidden(), self.rnn.directions(), self.max_len);
        let out = hn * dn;
        let mut dw = vec![0.0; self.w.len()];
        let (mut dhx, mut dcx) = (vec![0.0; dhy.len()], vec![0.0; dcy.len()]);
        let mut dout = dy.to_vec();
        for layer in (0..self.rnn.layers).rev() {
            let width = if layer == 0 { self.rnn.input } else { out };
            let input = &f.inputs[layer];
            let mut din = vec![0.0; tn * bn * width];
            for dir in 0..dn {
                let p = layer * dn + dir;
                for b in 0..bn {
                    let at = (p * bn + b) * hn;
                    let (mut dh, mut dc) = (dhy[at..at + hn].to_vec(), dcy[at..at + hn].to_vec());
                    for t in self.order(dir, b).into_iter().rev() {
                        let o = (t * bn + b) * out + dir * hn;
                        for j in 0..hn {
                            dh[j] += dout[o + j];
                        }
                        let xi = &input[(t * bn + b) * width..(t * bn + b + 1) * width];
                        let mut dxi = vec![0.0; width];
                        let (dhp, dcp) = self.step_back(p, &f.steps[p][t * bn + b], xi, &dh, &dc, &mut dw, &mut dxi);
                        for (d, v) in din[(t * bn + b) * width..(t * bn + b + 1) * width].iter_mut().zip(dxi) {
                            *d += v;
                        }
                        (dh, dc) = (dhp, dcp);
                    }
                    dhx[at..at + hn].copy_from_slice(&dh);
                    dcx[at..at + hn].copy_from_slice(&dc);
                }
            }
            dout = din;
        }
        Backward { dx: dout, dhx, dcx, dw }
    }
}

fn load<T: DnnElement>(m: &SimMem<T>) -> Vec<f64> {
    m.read().iter().map(|v| v.to_f64()).collect()
}

/// Stores `v` into the first elements of `m`.
fn store<T: DnnElement>(m: &SimMem<T>, v: &[f64]) {
    for (d, &s) in m.lock().iter_mut().zip(v) {
        *d = T::from_f64(s);
    }
}

fn put_f64(r: &mut [u8], at: usize, v: &[f64]) {
    for (i, x) in v.iter().enumerate() {
        r[(at + i) * 8..(at + i + 1) * 8].copy_from_slice(&x.to_le_bytes());
    }
}

fn get_f64(r: &[u8], at: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[(at + i) * 8..(at + i + 1) * 8]);
            f64::from_le_bytes(b)
        })
        .collect()
}

impl<T: DnnElement> Job<T> {
    fn mem(&self, arg: &str) -> Option<&SimMem<T>> {
        self.mems.iter().find(|m| m.0 == arg).map(|m| &m.1)
    }

    fn read(&self, arg: &str, n: usize) -> Vec<f64> {
        self.mem(arg).map(|m| load(m)).unwrap_or_default().into_iter().chain(std::iter::repeat(0.0)).take(n).collect()
    }

    /// Index of step `t` of sequence `b` in the user's layout, per element of width `w`.
    fn user_index(&self, t: usize, b: usize) -> usize {
        match self.rnn.layout {
            RnnLayout::SeqMajor => t * self.lengths.len() + b,
            RnnLayout::BatchMajor => b * self.max_len + t,
            // The steps before `t` hold the sequences longer than each of them; the lengths
            // do not increase, so those of step `t` come first in batch order.
            RnnLayout::SeqMajorPacked => {
                (0..t).map(|u| self.lengths.iter().filter(|&&l| l > u).count()).sum::<usize>() + b
            }
        }
    }

    /// The steps `x` and `y` hold.
    fn steps(&self) -> usize {
        match self.rnn.layout {
            RnnLayout::SeqMajorPacked => self.lengths.iter().sum(),
            RnnLayout::SeqMajor | RnnLayout::BatchMajor => self.max_len * self.lengths.len(),
        }
    }

    /// The user's `v` (width `w`) as step-major, padded steps zero.
    fn user_to_steps(&self, v: &[f64], w: usize) -> Vec<f64> {
        let bn = self.lengths.len();
        let mut out = vec![0.0; self.max_len * bn * w];
        for b in 0..bn {
            for t in 0..self.lengths[b] {
                let (s, d) = (self.user_index(t, b) * w, (t * bn + b) * w);
                out[d..d + w].copy_from_slice(&v[s..s + w]);
            }
        }
        out
    }

    /// Step-major `v` (width `w`) in the user's layout, padded steps zero.
    fn steps_to_user(&self, v: &[f64], w: usize) -> Vec<f64> {
        let bn = self.lengths.len();
        let mut out = vec![0.0; self.steps() * w];
        for b in 0..bn {
            for t in 0..self.lengths[b] {
                let (d, s) = (self.user_index(t, b) * w, (t * bn + b) * w);
                out[d..d + w].copy_from_slice(&v[s..s + w]);
            }
        }
        out
    }

    pub(super) fn run(self) {
        let bn = self.lengths.len();
        let (input, out) = (self.rnn.input, self.rnn.output_size());
        let (xn, yn) = (self.steps() * input, self.steps() * out);
        let hn = self.rnn.layers * self.rnn.directions() * bn * self.rnn.hidden;
        let weights = match self.op {
            RnnOp::BackwardWeights(_) => None,
            _ => self.mem("weights").map(load),
        };
        // Backward weights is not given the weights: backward data keeps them in the reserve.
        let net_w = weights.unwrap_or_default();
        match self.op {
            RnnOp::Forward { training } => {
                let x = self.read("x", xn);
                let (hx, cx) = (self.read("hx", hn), self.read("cx", hn));
                let net = Net {
                    rnn: &self.rnn,
                    layout: &self.layout,
                    w: net_w,
                    lengths: &self.lengths,
                    max_len: self.max_len,
                };
                let f = net.forward(&self.user_to_steps(&x, input), &hx, &cx);
                if let Some(m) = self.mem("y") {
                    store(m, &self.steps_to_user(&f.y, out));
                }
                if let Some(m) = self.mem("hy") {
                    store(m, &f.hy);
                }
                if let Some(m) = self.mem("cy") {
                    store(m, &f.cy);
                }
                if let (true, Some(r)) = (training, &self.reserve) {
                    let mut r = r.lock();
                    put_f64(&mut r, 0, &x);
                    put_f64(&mut r, xn, &cx);
                }
            }
            RnnOp::BackwardData => {
                let Some(r) = &self.reserve else { return };
                let (x, cx) = {
                    let r = r.lock();
                    (get_f64(&r, 0, xn), get_f64(&r, xn, hn))
                };
                let hx = self.read("hx", hn);
                let (dy, dhy, dcy) = (self.read("dy", yn), self.read("dhy", hn), self.read("dcy", hn));
                let net = Net {
                    rnn: &self.rnn,
                    layout: &self.layout,
                    w: net_w,
                    lengths: &self.lengths,
                    max_len: self.max_len,
                };
                let f = net.forward(&self.user_to_steps(&x, input), &hx, &cx);
                let g = net.backward(&f, &self.user_to_steps(&dy, out), &dhy, &dcy);
                if let Some(m) = self.mem("dx") {
                    store(m, &self.steps_to_user(&g.dx, input));
                }
                if let Some(m) = self.mem("dhx") {
                    store(m, &g.dhx);
                }
                if let Some(m) = self.mem("dcx") {
                    store(m, &g.dcx);
                }
                let mut r = r.lock();
                put_f64(&mut r, xn + hn, &dy);
                put_f64(&mut r, xn + hn + yn, &dhy);
                put_f64(&mut r, xn + 2 * hn + yn, &dcy);
                put_f64(&mut r, xn + 3 * hn + yn, &net.w);
            }
            RnnOp::BackwardWeights(mode) => {
                let Some(r) = &self.reserve else { return };
                let x = self.read("x", xn);
                let hx = self.read("hx", hn);
                let (cx, dy, dhy, dcy, w) = {
                    let r = r.read();
                    (
                        get_f64(&r, xn, hn),
                        get_f64(&r, xn + hn, yn),
                        get_f64(&r, xn + hn + yn, hn),
                        get_f64(&r, xn + 2 * hn + yn, hn),
                        get_f64(&r, xn + 3 * hn + yn, self.layout.len()),
                    )
                };
                let net =
                    Net { rnn: &self.rnn, layout: &self.layout, w, lengths: &self.lengths, max_len: self.max_len };
                let f = net.forward(&self.user_to_steps(&x, input), &hx, &cx);
                let g = net.backward(&f, &self.user_to_steps(&dy, out), &dhy, &dcy);
                if let Some(m) = self.mem("dweights") {
                    let mut dw = g.dw;
                    if mode == WeightGrad::Accumulate {
                        for (d, old) in dw.iter_mut().zip(load(m)) {
                            *d += old;
                        }
                    }
                    store(m, &dw);
                }
            }
        }
    }
}
