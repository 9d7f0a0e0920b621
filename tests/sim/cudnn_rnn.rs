//! cuDNN RNNs on the simulator: every cell × directions {1, 2} × layers {1, 2} × type against
//! the f64 reference (forward, and backward data and weights against finite differences), with
//! variable lengths; the documented weight layout; bad input rejected before anything is
//! recorded, with the argument named (`<op>_rejects_<what>`).

use crate::common::fixture::{fx, rejects, runs, Fx};
use crate::common::reference::cudnn::{Bench, El};
use crate::common::reference::rnn::*;
use crate::common::*;
use cusched::cudnn::{Rnn, RnnCell, RnnData, RnnGrads, RnnLayout, SeqLengths, WeightGrad};
use cusched::half::{bf16, f16};
use cusched::{GpuRef, Handles};

fn all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for c in rnn_cases() {
        // Unequal lengths, the longest shorter than the padded length, then all equal.
        check_rnn::<T>(&mut b, &c, &[3, 5, 1], 6, &mut rng);
    }
    let c = RnnCase { cell: RnnCell::Lstm, input: 2, hidden: 3, layers: 1, dirs: 1, layout: RnnLayout::SeqMajor };
    check_rnn::<T>(&mut b, &c, &[4, 4], 4, &mut rng);
}

#[test]
fn rnns_match_the_reference_in_f32() {
    all::<f32>();
}

#[test]
fn rnns_match_the_reference_in_f16() {
    all::<f16>();
}

#[test]
fn rnns_match_the_reference_in_bf16() {
    all::<bf16>();
}

#[test]
fn rnns_run_in_a_lane_job_and_make_no_plans() {
    let d = sim();
    let lane = d.lane("cudnn").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 1.0 };
        let c = RnnCase { cell: RnnCell::Gru, input: 2, hidden: 3, layers: 2, dirs: 2, layout: RnnLayout::BatchMajor };
        check_rnn::<f32>(&mut b, &c, &[2, 3], 3, &mut rng);
        let dnn = b.h.cudnn()?;
        assert_eq!((dnn.rnn_plans_made(), dnn.workspace_bytes()), (0, 0));
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
fn the_weight_layout_is_the_documented_one() {
    let mut fx = fx();
    let rnn = Rnn::new(RnnCell::Gru, 3, 4).layers(2).bidirectional(true);
    let l = fx.h.cudnn().unwrap().rnn_weight_layout::<f32>(&rnn).unwrap();
    // cuDNN's order (as an H100 reports it): every pseudo-layer's matrices first, then every
    // bias in the same order. Pseudo-layer 0: three 4x3 matrices, then three 4x4.
    assert_eq!(l.matrix(0, 0, 0).unwrap(), cusched::cudnn::RnnMatrix { offset: 0, rows: 4, cols: 3 });
    assert_eq!(l.matrix(0, 0, 3).unwrap().offset, 36);
    let p0 = 36 + 48;
    assert_eq!(l.matrix(0, 1, 0).unwrap().offset, p0);
    // Layer 1 takes both directions' outputs: 4x8 input matrices.
    let m = l.matrix(1, 0, 2).unwrap();
    assert_eq!((m.offset, m.rows, m.cols), (2 * p0 + 64, 4, 8));
    let p1 = 3 * 32 + 3 * 16;
    let matrices = 2 * p0 + 2 * p1;
    // The biases after all matrices, 4 each, pseudo-layer by pseudo-layer.
    assert_eq!(l.bias(0, 0, 0).unwrap().offset, matrices);
    assert_eq!(l.bias(0, 1, 0).unwrap().offset, matrices + 6 * 4);
    assert_eq!(l.bias(1, 1, 5).unwrap().offset, matrices + 23 * 4);
    assert_eq!(l.len(), matrices + 24 * 4);
    for (layer, dir, lin) in [(2, 0, 0), (0, 2, 0), (0, 0, 6)] {
        assert!(l.matrix(layer, dir, lin).is_err());
    }
}

struct Bufs {
    seqs: SeqLengths,
    x: GpuRef<f32>,
    y: GpuRef<f32>,
    h: GpuRef<f32>,
    c: GpuRef<f32>,
    w: GpuRef<f32>,
    reserve: GpuRef<u8>,
}

/// An LSTM of input 3, hidden 4, one layer over two sequences padded to 5.
fn bufs(fx: &mut Fx, rnn: &Rnn) -> Bufs {
    let dnn = fx.h.cudnn().unwrap();
    let seqs = dnn.seq_lengths(&[5, 2], 5).unwrap();
    let wl = dnn.rnn_weight_layout::<f32>(rnn).unwrap().len();
    let rb = dnn.rnn_reserve_bytes::<f32>(rnn, &seqs).unwrap();
    Bufs {
        x: fx.buf(5 * 2 * 3),
        y: fx.buf(5 * 2 * 4),
        h: fx.buf(2 * 4),
        c: fx.buf(2 * 4),
        w: fx.buf(wl),
        reserve: fx.buf(rb),
        seqs,
    }
}

fn lstm() -> Rnn {
    Rnn::new(RnnCell::Lstm, 3, 4)
}

#[test]
fn seq_lengths_rejects_zero_long_and_empty_lengths() {
    let mut fx = fx();
    rejects(&mut fx, "lengths", |fx| fx.h.cudnn()?.seq_lengths(&[3, 0], 4));
    rejects(&mut fx, "lengths", |fx| fx.h.cudnn()?.seq_lengths(&[3, 5], 4));
    rejects(&mut fx, "lengths", |fx| fx.h.cudnn()?.seq_lengths(&[], 4));
    rejects(&mut fx, "max_len", |fx| fx.h.cudnn()?.seq_lengths(&[1], usize::MAX));
}

#[test]
fn rnn_forward_rejects_short_buffers_bad_sizes_and_foreign_or_stale_ones() {
    let mut fx = fx();
    let rnn = lstm();
    let b = bufs(&mut fx, &rnn);
    let fwd = |fx: &mut Fx, rnn: &Rnn, x: &GpuRef<f32>, y: &GpuRef<f32>, w: &GpuRef<f32>, r: Option<&GpuRef<u8>>| {
        fx.h.cudnn()?.rnn_forward(rnn, &b.seqs, &RnnData::new(x, y).hx(&b.h).cx(&b.c), w, r)
    };
    let short = fx.buf::<f32>(5 * 2 * 3 - 1);
    rejects(&mut fx, "x", |fx| fwd(fx, &rnn, &short, &b.y, &b.w, None));
    rejects(&mut fx, "y", |fx| fwd(fx, &rnn, &b.x, &short, &b.w, None));
    let short_w = fx.buf::<f32>(b.w.len() - 1);
    rejects(&mut fx, "weights", |fx| fwd(fx, &rnn, &b.x, &b.y, &short_w, None));
    let short_r = fx.buf::<u8>(b.reserve.len() - 1);
    rejects(&mut fx, "reserve", |fx| fwd(fx, &rnn, &b.x, &b.y, &b.w, Some(&short_r)));
    // A hidden size that disagrees with the states' buffers (5 wide, they hold 4).
    let wide = Rnn::new(RnnCell::Lstm, 3, 5);
    let big_y = fx.buf::<f32>(5 * 2 * 5);
    let big_w = fx.buf::<f32>(4096);
    rejects(&mut fx, "hx", |fx| fwd(fx, &wide, &b.x, &big_y, &big_w, None));
    // Sizes: zero, and a weight space that overflows.
    rejects(&mut fx, "rnn", |fx| fwd(fx, &Rnn::new(RnnCell::Lstm, 3, 0), &b.x, &b.y, &b.w, None));
    rejects(&mut fx, "rnn", |fx| fwd(fx, &Rnn::new(RnnCell::Lstm, 3, 1 << 20).layers(1 << 10), &b.x, &b.y, &b.w, None));
    // Packed data needs the longest sequences first (these are 5 and 2: reversed, they are not).
    let packed = lstm().layout(RnnLayout::SeqMajorPacked);
    let rising = fx.h.cudnn().unwrap().seq_lengths(&[2, 5], 5).unwrap();
    rejects(&mut fx, "seqs", |fx| fx.h.cudnn()?.rnn_forward(&packed, &rising, &RnnData::new(&b.x, &b.y), &b.w, None));
    // A cell state for a cell without one.
    let gru = Rnn::new(RnnCell::Gru, 3, 4);
    rejects(&mut fx, "cx", |fx| fwd(fx, &gru, &b.x, &b.y, &b.w, None));
    // The output may not be the input.
    let both = fx.buf::<f32>(100);
    rejects(&mut fx, "y", |fx| fwd(fx, &rnn, &both, &both, &b.w, None));
    let f = fx.foreign::<f32>(5 * 2 * 3);
    rejects(&mut fx, "!foreign", |fx| fwd(fx, &rnn, &f, &b.y, &b.w, None));
    runs(&mut fx, |fx| fwd(fx, &rnn, &b.x, &b.y, &b.w, Some(&b.reserve)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &rnn, &b.x, &b.y, &b.w, None));
}

#[test]
fn rnn_backward_data_rejects_short_buffers_reserve_and_aliasing() {
    let mut fx = fx();
    let rnn = lstm();
    let b = bufs(&mut fx, &rnn);
    let (dy, dx) = (fx.buf::<f32>(5 * 2 * 4), fx.buf::<f32>(5 * 2 * 3));
    let bwd = |fx: &mut Fx, g: &RnnGrads<'_, f32>, w: &GpuRef<f32>, r: &GpuRef<u8>| {
        fx.h.cudnn()?.rnn_backward_data(&rnn, &b.seqs, g, w, r)
    };
    let short = fx.buf::<f32>(7);
    rejects(&mut fx, "dy", |fx| bwd(fx, &RnnGrads::new(&b.y, &short, &dx), &b.w, &b.reserve));
    rejects(&mut fx, "dx", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &short), &b.w, &b.reserve));
    rejects(&mut fx, "dhx", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &dx).dhx(&short), &b.w, &b.reserve));
    let short_r = fx.buf::<u8>(8);
    rejects(&mut fx, "reserve", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &dx), &b.w, &short_r));
    let short_w = fx.buf::<f32>(3);
    rejects(&mut fx, "weights", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &dx), &short_w, &b.reserve));
    rejects(&mut fx, "dx", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &b.y), &b.w, &b.reserve));
    let f = fx.foreign::<f32>(5 * 2 * 4);
    rejects(&mut fx, "!foreign", |fx| bwd(fx, &RnnGrads::new(&b.y, &f, &dx), &b.w, &b.reserve));
    runs(&mut fx, |fx| fx.h.cudnn()?.rnn_forward(&rnn, &b.seqs, &RnnData::new(&b.x, &b.y), &b.w, Some(&b.reserve)));
    runs(&mut fx, |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &dx), &b.w, &b.reserve));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| bwd(fx, &RnnGrads::new(&b.y, &dy, &dx), &b.w, &b.reserve));
}

#[test]
fn rnn_backward_weights_rejects_short_buffers_reserve_and_aliasing() {
    let mut fx = fx();
    let rnn = lstm();
    let b = bufs(&mut fx, &rnn);
    let dw = fx.buf::<f32>(b.w.len());
    let bwd = |fx: &mut Fx, x: &GpuRef<f32>, y: &GpuRef<f32>, dw: &GpuRef<f32>, r: &GpuRef<u8>| {
        fx.h.cudnn()?.rnn_backward_weights(&rnn, &b.seqs, x, Some(&b.h), y, dw, r, WeightGrad::Overwrite)
    };
    let short = fx.buf::<f32>(7);
    rejects(&mut fx, "x", |fx| bwd(fx, &short, &b.y, &dw, &b.reserve));
    rejects(&mut fx, "y", |fx| bwd(fx, &b.x, &short, &dw, &b.reserve));
    rejects(&mut fx, "dweights", |fx| bwd(fx, &b.x, &b.y, &short, &b.reserve));
    let short_r = fx.buf::<u8>(8);
    rejects(&mut fx, "reserve", |fx| bwd(fx, &b.x, &b.y, &dw, &short_r));
    rejects(&mut fx, "dweights", |fx| bwd(fx, &b.x, &b.y, &b.y, &b.reserve));
    let f = fx.foreign::<f32>(b.w.len());
    rejects(&mut fx, "!foreign", |fx| bwd(fx, &b.x, &b.y, &f, &b.reserve));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| bwd(fx, &b.x, &b.y, &dw, &b.reserve));
}
