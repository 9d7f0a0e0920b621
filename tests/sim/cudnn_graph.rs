//! cuDNN's graph ops on the simulator: scaled dot-product attention forward against the f64
//! CPU reference (f16, bf16 × head dims 64 and 128 × causal, padded, grouped-query heads,
//! interleaved layout, a sequence length not a multiple of 64), inline and in a lane job;
//! dropout's determinism; bad input rejected before anything is recorded, with the argument
//! named (`<op>_rejects_<what>`).

use crate::common::fixture::{fx, rejects, runs, Fx};
use crate::common::reference::attention::*;
use crate::common::reference::cudnn::{Bench, El};
use crate::common::reference::matmul_act::*;
use crate::common::reference::norm::*;
use crate::common::*;
use cusched::cudnn::{Attention, AttnDropout, AttnTensor, SeqLens};
use cusched::cudnn::{MatmulActivation, MatmulBiasAct, NormKind, NormStats, RowNorm};
use cusched::half::{bf16, f16};
use cusched::{Error, GpuRef};

fn forward_all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for hd in [64, 128] {
        for c in attn_cases(hd) {
            check_sdpa_forward::<T>(&mut b, &c, &mut rng);
        }
    }
    check_sdpa_dropout::<T>(&mut b, &AttnCase::new(2, 2, 1, 37, 41, 64).causal(), &mut rng);
    for hd in [64, 128] {
        for c in attn_cases(hd) {
            check_sdpa_backward::<T>(&mut b, &c, &mut rng);
        }
    }
    let dnn = h.cudnn().unwrap();
    assert_eq!((dnn.graph_plans_made(), dnn.cached_graph_plans(), dnn.workspace_bytes()), (0, 0, 0));
}

#[test]
fn sdpa_forward_and_backward_match_the_reference_in_f16() {
    forward_all::<f16>();
}

#[test]
fn sdpa_forward_and_backward_match_the_reference_in_bf16() {
    forward_all::<bf16>();
}

#[test]
fn sdpa_forward_and_backward_run_in_a_lane_job() {
    let d = sim();
    let lane = d.lane("cudnn-graph").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 1.0 };
        check_sdpa_forward::<bf16>(&mut b, &AttnCase::new(2, 4, 2, 33, 47, 64).causal().padded().bshd(), &mut rng);
        check_sdpa_dropout::<f16>(&mut b, &AttnCase::new(1, 2, 2, 20, 20, 64), &mut rng);
        check_sdpa_backward::<f16>(&mut b, &AttnCase::new(2, 4, 2, 33, 47, 64).causal().padded(), &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Asserts `op` was refused as unsupported, with nothing recorded.
#[track_caller]
fn unsupported<T: std::fmt::Debug>(fx: &mut Fx, what: &str, op: impl FnOnce(&mut Fx) -> cusched::Result<T>) {
    let before = fx.device.stats();
    match op(fx) {
        Err(Error::Unsupported { what: w, .. }) if w.contains(what) => {}
        other => panic!("expected Unsupported ({what}), got {other:?}"),
    }
    let after = fx.device.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a rejected op recorded something");
}

/// Buffers for a `[2, 4, 33, 64]` query and `[2, 2, 47, 64]` keys and values.
struct Bufs<T: cusched::Element> {
    q: GpuRef<T>,
    k: GpuRef<T>,
    v: GpuRef<T>,
    o: GpuRef<T>,
}

const QD: [usize; 4] = [2, 4, 33, 64];
const KD: [usize; 4] = [2, 2, 47, 64];

fn bufs<T: cusched::Element>(fx: &Fx) -> Bufs<T> {
    let n = |d: [usize; 4]| d.iter().product();
    Bufs { q: fx.buf(n(QD)), k: fx.buf(n(KD)), v: fx.buf(n(KD)), o: fx.buf(n(QD)) }
}

#[allow(clippy::too_many_arguments)]
fn fwd<T: cusched::cudnn::DnnElement>(
    fx: &mut Fx,
    a: &Attention<'_>,
    q: AttnTensor<'_, T>,
    k: AttnTensor<'_, T>,
    v: AttnTensor<'_, T>,
    o: AttnTensor<'_, T>,
    stats: Option<&GpuRef<f32>>,
) -> cusched::Result<cusched::Completion<()>> {
    fx.h.cudnn()?.sdpa_forward(a, &q, &k, &v, &o, stats)
}

#[test]
fn sdpa_forward_rejects_mismatched_shapes_and_buffers() {
    let mut fx = fx();
    let b = bufs::<f16>(&fx);
    let t = |buf, d| AttnTensor::bhsd(buf, d);
    let a = Attention::new();
    // Heads that do not divide, head dims, batches and sequence lengths that disagree.
    rejects(&mut fx, "k", |fx| {
        fwd(fx, &a, t(&b.q, QD), t(&b.k, [2, 3, 31, 64]), t(&b.v, [2, 3, 31, 64]), t(&b.o, QD), None)
    });
    rejects(&mut fx, "k", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, [2, 2, 47, 32]), t(&b.v, KD), t(&b.o, QD), None));
    rejects(&mut fx, "k", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, [1, 2, 47, 64]), t(&b.v, KD), t(&b.o, QD), None));
    rejects(&mut fx, "v", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, [2, 2, 46, 64]), t(&b.o, QD), None));
    rejects(&mut fx, "o", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, [2, 4, 32, 64]), None));
    rejects(&mut fx, "q", |fx| fwd(fx, &a, t(&b.q, [2, 4, 0, 64]), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    // Buffers too small for their shape and strides.
    let short = fx.buf::<f16>(QD.iter().product::<usize>() - 1);
    rejects(&mut fx, "q", |fx| fwd(fx, &a, t(&short, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    rejects(&mut fx, "k", |fx| {
        let k = AttnTensor::strided(&b.k, KD, [2 * 47 * 64, 47 * 64, 64 * 2, 1]);
        fwd(fx, &a, t(&b.q, QD), k, t(&b.v, KD), t(&b.o, QD), None)
    });
    rejects(&mut fx, "q", |fx| {
        let q = AttnTensor::strided(&b.q, [2, 4, 33, 32], [4 * 33 * 64, 33 * 64, 64, 2]);
        let o = t(&b.o, [2, 4, 33, 32]);
        fwd(fx, &a, q, t(&b.k, [2, 2, 47, 32]), t(&b.v, [2, 2, 47, 32]), o, None)
    });
    rejects(&mut fx, "v", |fx| {
        let v = AttnTensor::strided(&b.v, KD, [0, 47 * 64, 64, 1]);
        fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), v, t(&b.o, QD), None)
    });
    let stats = fx.buf::<f32>(2 * 4 * 33 - 1);
    rejects(&mut fx, "stats", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), Some(&stats)));
    // Outputs that are inputs.
    rejects(&mut fx, "o", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.q, QD), None));
    // Foreign and stale buffers.
    let f = fx.foreign::<f16>(QD.iter().product());
    rejects(&mut fx, "!foreign", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&f, QD), None));
    runs(&mut fx, |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
}

#[test]
fn sdpa_forward_rejects_bad_options_types_and_head_dims() {
    let mut fx = fx();
    let b = bufs::<f16>(&fx);
    let t = |buf, d| AttnTensor::bhsd(buf, d);
    let (seed, off) = (fx.upload(&[1i64]), fx.upload(&[0i64]));
    for p in [1.0f32, -0.1, f32::NAN] {
        let a = Attention::new().dropout(AttnDropout { probability: p, seed: &seed, offset: &off });
        rejects(&mut fx, "dropout", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    }
    let empty = fx.buf::<i64>(0);
    let a = Attention::new().dropout(AttnDropout { probability: 0.1, seed: &empty, offset: &off });
    rejects(&mut fx, "seed", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    let (one, two) = (fx.upload(&[3i32]), fx.upload(&[3i32, 4]));
    let a = Attention::new().padding(SeqLens { q: &one, kv: &two });
    rejects(&mut fx, "seq_len_q", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    let a = Attention::new().padding(SeqLens { q: &two, kv: &one });
    rejects(&mut fx, "seq_len_kv", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    let a = Attention::new().scale(f32::INFINITY);
    rejects(&mut fx, "attn", |fx| fwd(fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None));
    // f32 tensors and head dims the engine does not take.
    let a = Attention::new();
    let b32 = bufs::<f32>(&fx);
    unsupported(&mut fx, "f32", |fx| {
        let t = |buf, d| AttnTensor::bhsd(buf, d);
        fwd(fx, &a, t(&b32.q, QD), t(&b32.k, KD), t(&b32.v, KD), t(&b32.o, QD), None)
    });
    for hd in [100, 256] {
        let (qd, kd) = ([1, 1, 8, hd], [1, 1, 8, hd]);
        let (q, k, v, o) =
            (fx.buf::<bf16>(8 * hd), fx.buf::<bf16>(8 * hd), fx.buf::<bf16>(8 * hd), fx.buf::<bf16>(8 * hd));
        unsupported(&mut fx, "head dim", |fx| {
            let t = |buf, d| AttnTensor::bhsd(buf, d);
            fwd(fx, &a, t(&q, qd), t(&k, kd), t(&v, kd), t(&o, qd), None)
        });
    }
}

#[test]
fn sdpa_backward_rejects_mismatched_gradients_stats_and_aliasing() {
    let mut fx = fx();
    let b = bufs::<bf16>(&fx);
    let gb = bufs::<bf16>(&fx);
    let d_o = fx.buf::<bf16>(QD.iter().product());
    let stats = fx.buf::<f32>(2 * 4 * 33);
    let t = |buf, d| AttnTensor::bhsd(buf, d);
    let a = Attention::new().causal(true);
    let grads = |dq: [usize; 4], dk: [usize; 4]| cusched::cudnn::SdpaGrads {
        d_o: t(&d_o, QD),
        dq: t(&gb.q, dq),
        dk: t(&gb.k, dk),
        dv: t(&gb.v, KD),
    };
    let bwd = |fx: &mut Fx, g: &cusched::cudnn::SdpaGrads<'_, bf16>, stats: &GpuRef<f32>| {
        fx.h.cudnn()?.sdpa_backward(&a, &t(&b.q, QD), &t(&b.k, KD), &t(&b.v, KD), &t(&b.o, QD), stats, g)
    };
    // Gradients whose shapes are not their operands'.
    rejects(&mut fx, "dq", |fx| bwd(fx, &grads([2, 4, 32, 64], KD), &stats));
    rejects(&mut fx, "dk", |fx| bwd(fx, &grads(QD, [2, 1, 47, 64]), &stats));
    // Statistics too short.
    let short = fx.buf::<f32>(2 * 4 * 33 - 1);
    rejects(&mut fx, "stats", |fx| bwd(fx, &grads(QD, KD), &short));
    // A gradient written over an input.
    rejects(&mut fx, "dq", |fx| {
        let g = cusched::cudnn::SdpaGrads { d_o: t(&d_o, QD), dq: t(&b.q, QD), dk: t(&gb.k, KD), dv: t(&gb.v, KD) };
        bwd(fx, &g, &stats)
    });
    // Mismatched heads, and f32.
    rejects(&mut fx, "k", |fx| {
        fx.h.cudnn()?.sdpa_backward(
            &a,
            &t(&b.q, QD),
            &t(&b.k, [2, 3, 31, 64]),
            &t(&b.v, [2, 3, 31, 64]),
            &t(&b.o, QD),
            &stats,
            &grads(QD, KD),
        )
    });
    let f = fx.foreign::<f32>(2 * 4 * 33);
    rejects(&mut fx, "!foreign", |fx| bwd(fx, &grads(QD, KD), &f));
    runs(&mut fx, |fx| bwd(fx, &grads(QD, KD), &stats));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| bwd(fx, &grads(QD, KD), &stats));
}

fn norms_all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for kind in [NormKind::Layer, NormKind::Rms] {
        for n in norm_cases(kind) {
            check_norm::<T>(&mut b, &n, &mut rng);
        }
    }
}

#[test]
fn layer_and_rms_norms_match_the_reference_in_f32() {
    norms_all::<f32>();
}

#[test]
fn layer_and_rms_norms_match_the_reference_in_f16() {
    norms_all::<f16>();
}

#[test]
fn layer_and_rms_norms_match_the_reference_in_bf16() {
    norms_all::<bf16>();
}

#[test]
fn norms_run_in_a_lane_job() {
    let d = sim();
    let lane = d.lane("cudnn-norm").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 1.0 };
        check_norm::<bf16>(&mut b, &RowNorm { kind: NormKind::Layer, rows: 9, cols: 40, epsilon: 1e-5 }, &mut rng);
        check_norm::<f32>(&mut b, &RowNorm { kind: NormKind::Rms, rows: 9, cols: 40, epsilon: 1e-6 }, &mut rng);
        check_instance_norm::<f16>(&mut b, &cusched::cudnn::Shape::nhwc(2, 3, 4, 5), &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
fn norms_reject_bad_shapes_parameters_and_statistics() {
    let mut fx = fx();
    let n = RowNorm { kind: NormKind::Layer, rows: 6, cols: 16, epsilon: 1e-5 };
    let (x, y, dx, dy) = (fx.buf::<f16>(96), fx.buf::<f16>(96), fx.buf::<f16>(96), fx.buf::<f16>(96));
    let (scale, bias, ds, db) = (fx.buf::<f32>(16), fx.buf::<f32>(16), fx.buf::<f32>(16), fx.buf::<f32>(16));
    let (mean, inv) = (fx.buf::<f32>(6), fx.buf::<f32>(6));
    let st = NormStats { mean: Some(&mean), inv_var: &inv };
    // Buffers too short for the matrix, the parameters and the statistics.
    let short = fx.buf::<f16>(95);
    rejects(&mut fx, "x", |fx| fx.h.cudnn()?.norm_forward(&n, &short, &scale, Some(&bias), &y, None));
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&bias), &short, None));
    let p15 = fx.buf::<f32>(15);
    rejects(&mut fx, "scale", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &p15, Some(&bias), &y, None));
    rejects(&mut fx, "bias", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&p15), &y, None));
    let s5 = fx.buf::<f32>(5);
    let bad = NormStats { mean: Some(&mean), inv_var: &s5 };
    rejects(&mut fx, "stats.inv_var", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&bias), &y, Some(&bad)));
    // Bias and means that do not fit the kind, zero rows, a bad epsilon.
    rejects(&mut fx, "bias", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, None, &y, None));
    let rms = RowNorm { kind: NormKind::Rms, ..n };
    rejects(&mut fx, "bias", |fx| fx.h.cudnn()?.norm_forward(&rms, &x, &scale, Some(&bias), &y, None));
    rejects(&mut fx, "stats", |fx| fx.h.cudnn()?.norm_forward(&rms, &x, &scale, None, &y, Some(&st)));
    rejects(&mut fx, "rows", |fx| {
        fx.h.cudnn()?.norm_forward(&RowNorm { rows: 0, ..n }, &x, &scale, Some(&bias), &y, None)
    });
    rejects(&mut fx, "norm", |fx| {
        fx.h.cudnn()?.norm_forward(&RowNorm { epsilon: -1.0, ..n }, &x, &scale, Some(&bias), &y, None)
    });
    // Writing over an input.
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&bias), &x, None));
    // Backward: short gradients, a missing dbias, aliasing.
    rejects(&mut fx, "dx", |fx| fx.h.cudnn()?.norm_backward(&n, &x, &dy, &scale, &st, &short, &ds, Some(&db)));
    rejects(&mut fx, "dscale", |fx| fx.h.cudnn()?.norm_backward(&n, &x, &dy, &scale, &st, &dx, &p15, Some(&db)));
    rejects(&mut fx, "dbias", |fx| fx.h.cudnn()?.norm_backward(&n, &x, &dy, &scale, &st, &dx, &ds, None));
    rejects(&mut fx, "dx", |fx| fx.h.cudnn()?.norm_backward(&n, &x, &dy, &scale, &st, &dy, &ds, Some(&db)));
    let f = fx.foreign::<f16>(96);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.norm_forward(&n, &f, &scale, Some(&bias), &y, None));
    runs(&mut fx, |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&bias), &y, Some(&st)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.cudnn()?.norm_forward(&n, &x, &scale, Some(&bias), &y, None));
}

fn matmul_all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    check_matmul_act::<T>(&mut b, (2, 7, 24, 40), &mut rng);
    check_matmul_act::<T>(&mut b, (1, 33, 64, 16), &mut rng);
}

#[test]
fn matmul_bias_activation_matches_the_reference_in_f32() {
    matmul_all::<f32>();
}

#[test]
fn matmul_bias_activation_matches_the_reference_in_f16() {
    matmul_all::<f16>();
}

#[test]
fn matmul_bias_activation_matches_the_reference_in_bf16() {
    matmul_all::<bf16>();
}

#[test]
fn matmul_bias_activation_runs_in_a_lane_job() {
    let d = sim();
    let lane = d.lane("cudnn-matmul").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 1.0 };
        check_matmul_act::<bf16>(&mut b, (3, 5, 16, 8), &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
fn matmul_bias_activation_rejects_short_buffers_zero_dims_and_aliasing() {
    let mut fx = fx();
    let mm = MatmulBiasAct { batch: 2, m: 4, n: 8, k: 6, act: MatmulActivation::Relu };
    let (a, b, c, bias) = (fx.buf::<f16>(48), fx.buf::<f16>(96), fx.buf::<f16>(64), fx.buf::<f16>(8));
    let short = fx.buf::<f16>(7);
    rejects(&mut fx, "a", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &short, &b, Some(&bias), &c));
    rejects(&mut fx, "b", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &short, Some(&bias), &c));
    rejects(&mut fx, "c", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &b, Some(&bias), &short));
    let s7 = fx.buf::<f16>(7);
    rejects(&mut fx, "bias", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &b, Some(&s7), &c));
    rejects(&mut fx, "k", |fx| fx.h.cudnn()?.matmul_bias_act(&MatmulBiasAct { k: 0, ..mm }, &a, &b, None, &c));
    rejects(&mut fx, "m", |fx| fx.h.cudnn()?.matmul_bias_act(&MatmulBiasAct { m: usize::MAX, ..mm }, &a, &b, None, &c));
    let big = fx.buf::<f16>(96);
    rejects(&mut fx, "c", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &big, None, &big));
    let f = fx.foreign::<f16>(48);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &f, &b, None, &c));
    runs(&mut fx, |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &b, Some(&bias), &c));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.cudnn()?.matmul_bias_act(&mm, &a, &b, None, &c));
}

fn instance_all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for shape in instance_shapes() {
        check_instance_norm::<T>(&mut b, &shape, &mut rng);
    }
}

fn instance_shapes() -> Vec<cusched::cudnn::Shape> {
    use cusched::cudnn::Shape;
    vec![Shape::nhwc(3, 8, 5, 7), Shape::nchw(2, 5, 6, 6), Shape::ndhwc(2, 4, 3, 4, 5)]
}

#[test]
fn instance_norm_matches_the_reference_in_f32() {
    instance_all::<f32>();
}

#[test]
fn instance_norm_matches_the_reference_in_f16() {
    instance_all::<f16>();
}

#[test]
fn instance_norm_matches_the_reference_in_bf16() {
    instance_all::<bf16>();
}

#[test]
fn instance_norm_rejects_bad_shapes_statistics_and_aliasing() {
    use cusched::cudnn::{Shape, TensorView};
    let mut fx = fx();
    let sh = Shape::nhwc(2, 4, 3, 3);
    let (x, y, dx, dy) = (fx.buf::<bf16>(72), fx.buf::<bf16>(72), fx.buf::<bf16>(72), fx.buf::<bf16>(72));
    let (scale, bias, ds, db) = (fx.buf::<f32>(4), fx.buf::<f32>(4), fx.buf::<f32>(4), fx.buf::<f32>(4));
    let (mean, inv) = (fx.buf::<f32>(8), fx.buf::<f32>(8));
    let st = NormStats { mean: Some(&mean), inv_var: &inv };
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    // `y` of another shape, a short buffer, short parameters, short or missing statistics.
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &Shape::nchw(2, 4, 3, 3)), None)
    });
    let short = fx.buf::<bf16>(71);
    rejects(&mut fx, "x", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&short, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    let p3 = fx.buf::<f32>(3);
    rejects(&mut fx, "bias", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &p3, &t(&y, &sh), None)
    });
    let s7 = fx.buf::<f32>(7);
    let bad = NormStats { mean: Some(&s7), inv_var: &inv };
    rejects(&mut fx, "stats.mean", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), Some(&bad))
    });
    let no_mean = NormStats { mean: None, inv_var: &inv };
    rejects(&mut fx, "stats", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), Some(&no_mean))
    });
    rejects(&mut fx, "epsilon", |fx| {
        fx.h.cudnn()?.instance_norm_forward(f32::NAN, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&x, &sh), None)
    });
    rejects(&mut fx, "dscale", |fx| {
        fx.h.cudnn()?.instance_norm_backward(1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &st, &t(&dx, &sh), &p3, &db)
    });
    rejects(&mut fx, "dx", |fx| {
        fx.h.cudnn()?.instance_norm_backward(1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &st, &t(&dy, &sh), &ds, &db)
    });
    let f = fx.foreign::<bf16>(72);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&f, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    runs(&mut fx, |fx| fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), Some(&st)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| {
        fx.h.cudnn()?.instance_norm_forward(1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
}

/// One i64 buffer as both the dropout seed and offset (both only read): the simulator computes
/// the attention (it took both read locks at once and hung).
#[test]
fn sdpa_forward_with_one_buffer_as_seed_and_offset() {
    let out = crate::common::bounded(std::time::Duration::from_secs(60), || {
        let mut fx = fx();
        let b = bufs::<f16>(&fx);
        let t = |buf, d| AttnTensor::bhsd(buf, d);
        let both = fx.upload(&[5i64]);
        let a = Attention::new().dropout(AttnDropout { probability: 0.25, seed: &both, offset: &both });
        fwd(&mut fx, &a, t(&b.q, QD), t(&b.k, KD), t(&b.v, KD), t(&b.o, QD), None)?.wait()
    });
    out.unwrap();
}

#[test]
fn cudnn_ops_recorded_into_a_graph_replay_as_the_eager_ops() {
    let d = cusched::Device::sim(cusched::SimConfig::default()).unwrap();
    crate::common::reference::cudnn_recorded::check_recorded_cudnn_ops(&d, 2, &mut Rng::new());
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// Group counts with each shape: one group (layer norm over each image), several, one per
/// channel (instance norm).
fn group_cases() -> Vec<(cusched::cudnn::Shape, usize)> {
    use cusched::cudnn::Shape;
    vec![
        (Shape::nhwc(3, 8, 5, 7), 4),
        (Shape::nchw(2, 6, 5, 3), 3),
        (Shape::nchw(2, 4, 3, 3), 1),
        (Shape::nhwc(2, 6, 3, 4), 6),
        (Shape::ndhwc(2, 4, 3, 4, 5), 2),
    ]
}

fn group_all<T: El>() {
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for (shape, groups) in group_cases() {
        check_group_norm::<T>(&mut b, &shape, groups, &mut rng);
    }
}

#[test]
fn group_norm_matches_the_reference_in_f32() {
    group_all::<f32>();
}

#[test]
fn group_norm_matches_the_reference_in_f16() {
    group_all::<f16>();
}

#[test]
fn group_norm_matches_the_reference_in_bf16() {
    group_all::<bf16>();
}

#[test]
fn group_norm_rejects_bad_groups_shapes_statistics_and_aliasing() {
    use cusched::cudnn::{Shape, TensorView};
    let mut fx = fx();
    let sh = Shape::nhwc(2, 4, 3, 3);
    let (x, y, dx, dy) = (fx.buf::<f16>(72), fx.buf::<f16>(72), fx.buf::<f16>(72), fx.buf::<f16>(72));
    let (scale, bias, ds, db) = (fx.buf::<f32>(4), fx.buf::<f32>(4), fx.buf::<f32>(4), fx.buf::<f32>(4));
    let (mean, inv) = (fx.buf::<f32>(4), fx.buf::<f32>(4));
    let st = NormStats { mean: Some(&mean), inv_var: &inv };
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    // Groups that do not divide the channels, none, and groups of one value.
    rejects(&mut fx, "groups", |fx| {
        fx.h.cudnn()?.group_norm_forward(3, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    rejects(&mut fx, "groups", |fx| {
        fx.h.cudnn()?.group_norm_forward(0, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    let one = Shape::nchw(2, 4, 1, 1);
    let (x8, y8) = (fx.buf::<f16>(8), fx.buf::<f16>(8));
    rejects(&mut fx, "groups", |fx| {
        fx.h.cudnn()?.group_norm_forward(4, 1e-5, &t(&x8, &one), &scale, &bias, &t(&y8, &one), None)
    });
    // `y` of another shape, short parameters, short or missing statistics, a bad epsilon.
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &Shape::nchw(2, 4, 3, 3)), None)
    });
    let p3 = fx.buf::<f32>(3);
    rejects(&mut fx, "scale", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &p3, &bias, &t(&y, &sh), None)
    });
    let s3 = fx.buf::<f32>(3);
    let short = NormStats { mean: Some(&s3), inv_var: &inv };
    rejects(&mut fx, "stats.mean", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), Some(&short))
    });
    let no_mean = NormStats { mean: None, inv_var: &inv };
    rejects(&mut fx, "stats", |fx| {
        fx.h.cudnn()?.group_norm_backward(2, 1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &no_mean, &t(&dx, &sh), &ds, &db)
    });
    rejects(&mut fx, "epsilon", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, -1.0, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    // Written operands that are read ones.
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &scale, &bias, &t(&x, &sh), None)
    });
    rejects(&mut fx, "dx", |fx| {
        fx.h.cudnn()?.group_norm_backward(2, 1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &st, &t(&dy, &sh), &ds, &db)
    });
    rejects(&mut fx, "dscale", |fx| {
        fx.h.cudnn()?.group_norm_backward(2, 1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &st, &t(&dx, &sh), &p3, &db)
    });
    let f = fx.foreign::<f16>(72);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&f, &sh), &scale, &bias, &t(&y, &sh), None)
    });
    runs(&mut fx, |fx| fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), Some(&st)));
    runs(&mut fx, |fx| {
        fx.h.cudnn()?.group_norm_backward(2, 1e-5, &t(&x, &sh), &t(&dy, &sh), &scale, &st, &t(&dx, &sh), &ds, &db)
    });
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| {
        fx.h.cudnn()?.group_norm_forward(2, 1e-5, &t(&x, &sh), &scale, &bias, &t(&y, &sh), None)
    });
}

fn fp8_all<T: crate::common::reference::attention_fp8::Fp8El>() {
    use crate::common::reference::attention_fp8::{check_sdpa_forward_fp8, fp8_cases};
    let d = sim();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for c in fp8_cases() {
        check_sdpa_forward_fp8::<T>(&mut b, &c, &mut rng);
    }
}

#[test]
fn fp8_attention_matches_the_reference_in_e4m3() {
    fp8_all::<cusched::cudnn::F8E4M3>();
}

#[test]
fn fp8_attention_matches_the_reference_in_e5m2() {
    fp8_all::<cusched::cudnn::F8E5M2>();
}

#[test]
fn the_tests_fp8_rounding_agrees_with_the_formats() {
    use crate::common::reference::attention_fp8::{E4M3, E5M2};
    // The largest finite values, the smallest subnormals, ties to even and saturation.
    assert_eq!((E4M3.round(448.0), E4M3.round(1e6), E5M2.round(57344.0)), (448.0, 448.0, 57344.0));
    assert_eq!((E4M3.round(2f64.powi(-9)), E5M2.round(2f64.powi(-16))), (2f64.powi(-9), 2f64.powi(-16)));
    assert_eq!((E4M3.round(1.0625), E4M3.round(1.1875)), (1.0, 1.25));
    assert_eq!(E4M3.decode(0x7f), None);
    assert_eq!(E5M2.decode(0x7c), None);
}

/// The scales of an FP8 attention from eight buffers, in the struct's order.
fn scales(sc: &[GpuRef<f32>]) -> cusched::cudnn::Fp8Attention<'_> {
    cusched::cudnn::Fp8Attention {
        descale_q: &sc[0],
        descale_k: &sc[1],
        descale_v: &sc[2],
        descale_s: &sc[3],
        scale_s: &sc[4],
        scale_o: &sc[5],
        amax_s: &sc[6],
        amax_o: &sc[7],
    }
}

#[test]
fn fp8_attention_rejects_bad_scales_shapes_and_aliasing() {
    use cusched::cudnn::F8E4M3;
    let mut fx = fx();
    let (q, k, v, o) = (fx.buf::<F8E4M3>(256), fx.buf::<F8E4M3>(256), fx.buf::<F8E4M3>(256), fx.buf::<F8E4M3>(256));
    let sc: Vec<GpuRef<f32>> = (0..8).map(|_| fx.buf::<f32>(1)).collect();
    let empty = fx.buf::<f32>(0);
    let t = |b| AttnTensor::bhsd(b, [1, 1, 16, 16]);
    let attn = Attention::new();
    // A missing scale, an amax that is a scale, `o` that is `q`.
    let mut short = scales(&sc);
    short.scale_o = &empty;
    rejects(&mut fx, "scale_o", |fx| {
        fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&v), &t(&o), &short, None)
    });
    let mut alias = scales(&sc);
    alias.amax_o = &sc[0];
    rejects(&mut fx, "amax_o", |fx| {
        fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&v), &t(&o), &alias, None)
    });
    let ok = scales(&sc);
    rejects(&mut fx, "o", |fx| fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&v), &t(&q), &ok, None));
    // Shapes that disagree, a short buffer.
    let k2 = AttnTensor::bhsd(&k, [1, 1, 16, 8]);
    rejects(&mut fx, "k", |fx| fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &k2, &t(&v), &t(&o), &ok, None));
    let small = fx.buf::<F8E4M3>(255);
    rejects(&mut fx, "v", |fx| fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&small), &t(&o), &ok, None));
    // A head dim that is not a multiple of 16 is refused as unsupported, with nothing recorded.
    let before = fx.device.stats();
    let t8 = |b| AttnTensor::bhsd(b, [1, 2, 16, 8]);
    let got = fx.h.cudnn().unwrap().sdpa_forward_fp8(&attn, &t8(&q), &t8(&k), &t8(&v), &t8(&o), &ok, None);
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
    assert_eq!(fx.device.stats().events, before.events);
    let f = fx.foreign::<f32>(1);
    let mut foreign = scales(&sc);
    foreign.descale_v = &f;
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&v), &t(&o), &foreign, None)
    });
    runs(&mut fx, |fx| fx.h.cudnn()?.sdpa_forward_fp8(&attn, &t(&q), &t(&k), &t(&v), &t(&o), &ok, None));
}

#[test]
fn group_norm_instance_norm_and_fp8_attention_run_in_a_lane_job() {
    check_lane_ops(&sim(), Rng::new().next());
}
