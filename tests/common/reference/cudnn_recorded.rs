//! cuDNN ops recorded into a CUDA graph against the same ops run eagerly: a legacy
//! convolution, the graph API's layer norm and attention, and instance norm forward and
//! backward (one batch-norm call per image), chained through their buffers, replayed round
//! after round with new inputs.

use super::cudnn::close;
use crate::common::Rng;
use cusched::cudnn::{Attention, AttnTensor, Convolution, NormKind, NormStats, RowNorm, Shape, TensorView};
use cusched::half::f16;
use cusched::{Device, GpuRef, Graph, Handles, StreamId};

const ROWS: usize = 24;
const COLS: usize = 40;
/// Attention: batch, heads, sequence, head dim.
const ATT: [usize; 4] = [1, 2, 48, 64];

/// Every buffer of one side (the graph's or the eager twin's).
#[derive(Clone)]
struct Side {
    conv_x: GpuRef<f16>,
    conv_w: GpuRef<f16>,
    conv_y: GpuRef<f16>,
    x: GpuRef<f16>,
    y: GpuRef<f16>,
    mean: GpuRef<f32>,
    inv: GpuRef<f32>,
    q: GpuRef<f16>,
    o: GpuRef<f16>,
    iy: GpuRef<f16>,
    imean: GpuRef<f32>,
    iinv: GpuRef<f32>,
    idx: GpuRef<f16>,
    ids: GpuRef<f32>,
    idb: GpuRef<f32>,
    params: GpuRef<f32>,
    bias: GpuRef<f32>,
    iparams: GpuRef<f32>,
    ibias: GpuRef<f32>,
}

fn conv_shapes() -> (Shape, Shape, Shape) {
    (Shape::nhwc(2, 8, 9, 9), Shape::nhwc(8, 8, 3, 3), Shape::nhwc(2, 8, 9, 9))
}

/// The instance-norm tensor: the layer norm's output seen as 2 x 4 x 12 x 10 (NCHW).
fn inst_shape() -> Shape {
    Shape::nchw(2, 4, 12, 10)
}

fn side(d: &Device, s: StreamId) -> Side {
    let z16 = |n: usize| d.alloc_zeros::<f16>(s, n).unwrap();
    let z32 = |n: usize| d.alloc_zeros::<f32>(s, n).unwrap();
    let att: usize = ATT.iter().product();
    Side {
        conv_x: z16(2 * 8 * 81),
        conv_w: z16(8 * 8 * 9),
        conv_y: z16(2 * 8 * 81),
        x: z16(ROWS * COLS),
        y: z16(ROWS * COLS),
        mean: z32(ROWS),
        inv: z32(ROWS),
        q: z16(att),
        o: z16(att),
        iy: z16(ROWS * COLS),
        imean: z32(8),
        iinv: z32(8),
        idx: z16(ROWS * COLS),
        ids: z32(4),
        idb: z32(4),
        params: d.upload(s, &[1.25f32; COLS]).unwrap(),
        bias: d.upload(s, &[0.5f32; COLS]).unwrap(),
        iparams: d.upload(s, &[0.75f32, 1.5, 1.0, 2.0]).unwrap(),
        ibias: d.upload(s, &[0.25f32, -0.5, 0.0, 1.0]).unwrap(),
    }
}

/// The chain: conv, layer norm of `x`, attention with `q` as queries, keys and values, and
/// instance norm forward and backward of the layer norm's output (its own `dy`).
fn ops(h: &mut Handles, v: &Side) -> cusched::Result<()> {
    let (cx, cw, cy) = conv_shapes();
    let dnn = h.cudnn()?;
    let conv = Convolution::new().pad(&[1, 1]);
    dnn.conv_forward(
        &conv,
        &TensorView::new(&v.conv_x, cx),
        &TensorView::new(&v.conv_w, cw),
        &TensorView::new(&v.conv_y, cy),
    )?;
    let n = RowNorm { kind: NormKind::Layer, rows: ROWS, cols: COLS, epsilon: 1e-5 };
    let stats = NormStats { mean: Some(&v.mean), inv_var: &v.inv };
    dnn.norm_forward(&n, &v.x, &v.params, Some(&v.bias), &v.y, Some(&stats))?;
    let t = |b| AttnTensor::bhsd(b, ATT);
    dnn.sdpa_forward(&Attention::new().causal(true), &t(&v.q), &t(&v.q), &t(&v.q), &t(&v.o), None)?;
    let is = inst_shape();
    let (p, b) = (&v.iparams, &v.ibias);
    let st = NormStats { mean: Some(&v.imean), inv_var: &v.iinv };
    let view = |buf| TensorView::new(buf, is.clone());
    dnn.instance_norm_forward(1e-5, &view(&v.y), p, b, &view(&v.iy), Some(&st))?;
    dnn.instance_norm_backward(1e-5, &view(&v.y), &view(&v.iy), p, &st, &view(&v.idx), &v.ids, &v.idb)?;
    Ok(())
}

/// Records [`ops`] on `d`, replays it `rounds` times with fresh inputs, and compares every
/// output with the eager twin's after each round.
pub fn check_recorded_cudnn_ops(d: &Device, rounds: usize, rng: &mut Rng) {
    let s = d.new_stream().unwrap();
    let g = side(d, s);
    let es = d.new_stream().unwrap();
    let e = side(d, es);
    let mut eager = Handles::new(d, es).unwrap();
    let gr = g.clone();
    let graph = Graph::record(d, move |rec| ops(rec.handles(0)?, &gr)).unwrap();
    assert_eq!(graph.ops(), 5, "every op of the chain is recorded");
    let exec = graph.instantiate().unwrap();
    let rand =
        |rng: &mut Rng, n: usize, k: f32| (0..n).map(|_| f16::from_f32((rng.f32() - 0.5) * k)).collect::<Vec<_>>();
    for round in 0..rounds {
        let att: usize = ATT.iter().product();
        let (cx, cw) = (rand(rng, g.conv_x.len(), 2.0), rand(rng, g.conv_w.len(), 0.5));
        let (x, q) = (rand(rng, ROWS * COLS, 4.0), rand(rng, att, 2.0));
        for (side, st) in [(&g, s), (&e, es)] {
            side.conv_x.copy_from_slice(st, &cx).unwrap();
            side.conv_w.copy_from_slice(st, &cw).unwrap();
            side.x.copy_from_slice(st, &x).unwrap();
            side.q.copy_from_slice(st, &q).unwrap();
        }
        exec.replay(s).unwrap();
        ops(&mut eager, &e).unwrap();
        let h = |b: &GpuRef<f16>, st| b.download(st).unwrap().iter().map(|v| f64::from(v.to_f32())).collect::<Vec<_>>();
        let f = |b: &GpuRef<f32>, st| b.download(st).unwrap().iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
        let what = |name: &str| format!("round {round}: {name}, replayed against eager");
        for (name, a, b) in [
            ("conv y", &g.conv_y, &e.conv_y),
            ("layer norm y", &g.y, &e.y),
            ("attention o", &g.o, &e.o),
            ("instance norm y", &g.iy, &e.iy),
            ("instance norm dx", &g.idx, &e.idx),
        ] {
            close(&h(a, s), &h(b, es), 1e-3, &what(name));
        }
        for (name, a, b) in [
            ("layer norm mean", &g.mean, &e.mean),
            ("layer norm inv_var", &g.inv, &e.inv),
            ("instance norm dscale", &g.ids, &e.ids),
            ("instance norm dbias", &g.idb, &e.idb),
        ] {
            close(&f(a, s), &f(b, es), 1e-5, &what(name));
        }
        // The inputs changed, so the outputs must have: a replay that ran nothing would keep
        // the last round's values (or zeros) and could still match a stale eager side.
        assert!(h(&g.o, s).iter().any(|&v| v != 0.0), "round {round}: attention output is all zeros");
    }
    drop(eager);
    d.synchronize(s).unwrap();
}
