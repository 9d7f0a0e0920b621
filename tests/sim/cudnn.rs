//! cuDNN on the simulator: every op against the CPU references (f32, f16, bf16 × NCHW, NHWC
//! × each op's options), inline and in a lane job; bad input rejected before anything is
//! recorded, with the argument named (`<op>_rejects_<what>`).

use crate::common::fixture::{fx, rejects, runs, Fx};
use crate::common::reference::cudnn::*;
use crate::common::*;
use cusched::cudnn::{
    Activation, ActivationMode, BatchNorm, ConvActivation, Convolution, Layout, Lrn, Pooling, PoolingMode,
    RunningStats, SavedStats, Shape, Softmax, SoftmaxAlgo, SoftmaxMode, TensorView,
};
use cusched::half::{bf16, f16};
use cusched::{Device, Handles};

const LAYOUTS: [Layout; 2] = [Layout::Nchw, Layout::Nhwc];

fn setup() -> (Device, cusched::StreamId, Handles) {
    let d = sim();
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    (d, s, h)
}

fn conv_all<T: El>() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for layout in LAYOUTS {
        for (xd, wd, case) in conv_cases() {
            check_conv::<T>(&mut b, layout, &xd, &wd, &case, &mut rng);
            check_conv_fused::<T>(&mut b, layout, &xd, &wd, &case, &mut rng);
        }
    }
}

#[test]
fn convolutions_match_the_reference_in_f32() {
    conv_all::<f32>();
}

#[test]
fn convolutions_match_the_reference_in_f16() {
    conv_all::<f16>();
}

#[test]
fn convolutions_match_the_reference_in_bf16() {
    conv_all::<bf16>();
}

fn pointwise_all<T: El>() {
    let (d, s, mut h) = setup();
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    for layout in LAYOUTS {
        for dims in [&[3usize, 5, 4, 3][..], &[2, 3, 2, 3, 4]] {
            let shape = Shape::new(layout, dims);
            for mode in activation_modes() {
                check_activation::<T>(&mut b, mode, &shape, &mut rng);
            }
            check_batch_norm::<T>(&mut b, &shape, &mut rng);
            check_lrn::<T>(&mut b, &shape, &mut rng);
            check_dropout::<T>(&mut b, &Shape::new(layout, &[4, 8, 8, 9]), &mut rng);
            for algo in [SoftmaxAlgo::Fast, SoftmaxAlgo::Accurate, SoftmaxAlgo::Log] {
                for mode in [SoftmaxMode::Instance, SoftmaxMode::Channel] {
                    check_softmax::<T>(&mut b, algo, mode, &shape, &mut rng);
                }
            }
        }
        for (xd, case) in pool_cases() {
            check_pooling::<T>(&mut b, layout, &xd, &case, &mut rng);
        }
    }
}

#[test]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_f32() {
    pointwise_all::<f32>();
}

#[test]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_f16() {
    pointwise_all::<f16>();
}

#[test]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_bf16() {
    pointwise_all::<bf16>();
}

#[test]
fn every_op_runs_in_a_lane_job() {
    let d = sim();
    let lane = d.lane("cudnn").unwrap();
    let mut rng = Rng::new();
    let seed = rng.next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: 1.0 };
        let (xd, wd, case) = conv_cases().remove(2);
        check_conv::<f32>(&mut b, Layout::Nhwc, &xd, &wd, &case, &mut rng);
        check_conv_fused::<f32>(&mut b, Layout::Nhwc, &xd, &wd, &case, &mut rng);
        let shape = Shape::nhwc(2, 3, 4, 5);
        check_activation::<f32>(&mut b, ActivationMode::Swish { beta: 1.0 }, &shape, &mut rng);
        check_softmax::<f32>(&mut b, SoftmaxAlgo::Log, SoftmaxMode::Channel, &shape, &mut rng);
        let (xd, case) = pool_cases().remove(0);
        check_pooling::<f32>(&mut b, Layout::Nchw, &xd, &case, &mut rng);
        check_batch_norm::<f32>(&mut b, &shape, &mut rng);
        check_lrn::<f32>(&mut b, &shape, &mut rng);
        check_dropout::<f32>(&mut b, &Shape::nhwc(4, 8, 8, 9), &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

#[test]
fn the_simulator_makes_no_plans_and_no_workspace() {
    let mut fx = fx();
    let (x, w, y) = (fx.buf::<f32>(2 * 3 * 5 * 5), fx.buf::<f32>(4 * 3 * 3 * 3), fx.buf::<f32>(2 * 4 * 3 * 3));
    let conv = Convolution::new();
    runs(&mut fx, |fx| {
        fx.h.cudnn()?.conv_forward(
            &conv,
            &TensorView::new(&x, Shape::nchw(2, 3, 5, 5)),
            &TensorView::new(&w, Shape::nchw(4, 3, 3, 3)),
            &TensorView::new(&y, Shape::nchw(2, 4, 3, 3)),
        )
    });
    let dnn = fx.h.cudnn().unwrap();
    assert_eq!((dnn.plans_made(), dnn.cached_plans(), dnn.workspace_bytes()), (0, 0, 0));
    assert!(matches!(dnn.cudnn_handle(), Err(cusched::Error::LibraryUnavailable { .. })));
}

/// A 2x4x7x7 input, 6 filters of 4x3x3, a 2x6x5x5 output: a valid forward convolution.
struct ConvBufs {
    x: cusched::GpuRef<f32>,
    w: cusched::GpuRef<f32>,
    y: cusched::GpuRef<f32>,
}

fn conv_bufs(fx: &Fx) -> ConvBufs {
    ConvBufs { x: fx.buf(2 * 4 * 7 * 7), w: fx.buf(6 * 4 * 3 * 3), y: fx.buf(2 * 6 * 5 * 5) }
}

fn fwd(
    fx: &mut Fx,
    conv: &Convolution,
    x: (&cusched::GpuRef<f32>, Shape),
    w: (&cusched::GpuRef<f32>, Shape),
    y: (&cusched::GpuRef<f32>, Shape),
) -> cusched::Result<cusched::Completion<()>> {
    fx.h.cudnn()?.conv_forward(conv, &TensorView::new(x.0, x.1), &TensorView::new(w.0, w.1), &TensorView::new(y.0, y.1))
}

#[test]
fn conv_forward_rejects_mismatched_shapes_groups_and_buffers() {
    let mut fx = fx();
    let b = conv_bufs(&fx);
    let (xs, ws, ys) = (Shape::nchw(2, 4, 7, 7), Shape::nchw(6, 4, 3, 3), Shape::nchw(2, 6, 5, 5));
    let c = Convolution::new();
    // Channels that disagree: the filter has 3 of x's 4.
    rejects(&mut fx, "w", |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, Shape::nchw(6, 3, 3, 3)), (&b.y, ys.clone())));
    // Groups that do not divide the channels, and filters that do not split into them.
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().groups(3), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "w", |fx| {
        fwd(fx, &c.clone().groups(4), (&b.x, xs.clone()), (&b.w, Shape::nchw(6, 1, 3, 3)), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "w", |fx| {
        fwd(fx, &c.clone().groups(2), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    // An output of the wrong shape: too small, and too many channels.
    rejects(&mut fx, "y", |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, Shape::nchw(2, 6, 4, 5))));
    rejects(&mut fx, "y", |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, Shape::nchw(2, 7, 5, 5))));
    // The padded, strided geometry gives 4x4, not 5x5.
    rejects(&mut fx, "y", |fx| {
        fwd(fx, &c.clone().pad(&[1, 1]).stride(&[2, 2]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    // Bad geometry: stride 0, dilation 0, a list of the wrong length, a filter that outgrows
    // the padded input, a padding that overflows.
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().stride(&[0, 1]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().dilation(&[1, 0]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().pad(&[1, 1, 1]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().dilation(&[4, 4]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().pad(&[usize::MAX / 2, 0]), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "conv", |fx| {
        fwd(fx, &c.clone().scale(f32::NAN, 0.0), (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    // Shapes: 3 dims, a zero dim, ranks that disagree, an element count past i32.
    rejects(&mut fx, "x", |fx| {
        fwd(fx, &c, (&b.x, Shape::new(Layout::Nchw, &[2, 4, 49])), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "x", |fx| fwd(fx, &c, (&b.x, Shape::nchw(2, 4, 0, 7)), (&b.w, ws.clone()), (&b.y, ys.clone())));
    rejects(&mut fx, "w", |fx| {
        fwd(fx, &c, (&b.x, xs.clone()), (&b.w, Shape::ncdhw(6, 4, 1, 3, 3)), (&b.y, ys.clone()))
    });
    rejects(&mut fx, "x", |fx| {
        fwd(fx, &c, (&b.x, Shape::nchw(1 << 12, 1 << 12, 1 << 8, 7)), (&b.w, ws.clone()), (&b.y, ys.clone()))
    });
    // A buffer shorter than its shape.
    let short = fx.buf::<f32>(2 * 6 * 5 * 5 - 1);
    rejects(&mut fx, "y", |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, ws.clone()), (&short, ys.clone())));
    let short = fx.buf::<f32>(10);
    rejects(&mut fx, "x", |fx| fwd(fx, &c, (&short, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone())));
    // The output may not be an input.
    let big = fx.buf::<f32>(2 * 6 * 7 * 7);
    rejects(&mut fx, "y", |fx| fwd(fx, &c, (&big, xs.clone()), (&b.w, ws.clone()), (&big, ys.clone())));
    let f = fx.foreign::<f32>(2 * 4 * 7 * 7);
    rejects(&mut fx, "!foreign", |fx| fwd(fx, &c, (&f, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone())));
    runs(&mut fx, |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone())));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &c, (&b.x, xs.clone()), (&b.w, ws.clone()), (&b.y, ys.clone())));
}

#[test]
fn conv_backward_rejects_mismatched_shapes_and_aliasing() {
    let mut fx = fx();
    let b = conv_bufs(&fx);
    let (xs, ws, ys) = (Shape::nhwc(2, 4, 7, 7), Shape::nhwc(6, 4, 3, 3), Shape::nhwc(2, 6, 5, 5));
    let c = Convolution::new();
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    // Backward data names dx, w and dy.
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.conv_backward_data(&c, &t(&b.w, &ws), &t(&b.y, &Shape::nhwc(2, 6, 5, 4)), &t(&b.x, &xs))
    });
    rejects(&mut fx, "w", |fx| {
        fx.h.cudnn()?.conv_backward_data(&c, &t(&b.w, &Shape::nhwc(6, 2, 3, 3)), &t(&b.y, &ys), &t(&b.x, &xs))
    });
    // A dx whose forward convolution would not give dy: the mismatch is reported on dy.
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.conv_backward_data(&c, &t(&b.w, &ws), &t(&b.y, &ys), &t(&b.x, &Shape::nhwc(2, 4, 7, 8)))
    });
    let big = fx.buf::<f32>(2 * 6 * 7 * 7);
    rejects(&mut fx, "dx", |fx| fx.h.cudnn()?.conv_backward_data(&c, &t(&b.w, &ws), &t(&big, &ys), &t(&big, &xs)));
    // Backward filter names x, dw and dy.
    rejects(&mut fx, "dw", |fx| {
        fx.h.cudnn()?.conv_backward_filter(&c, &t(&b.x, &xs), &t(&b.y, &ys), &t(&b.w, &Shape::nhwc(6, 3, 3, 3)))
    });
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.conv_backward_filter(&c, &t(&b.x, &xs), &t(&b.y, &Shape::nhwc(3, 6, 5, 5)), &t(&b.w, &ws))
    });
    rejects(&mut fx, "dw", |fx| fx.h.cudnn()?.conv_backward_filter(&c, &t(&big, &xs), &t(&b.y, &ys), &t(&big, &ws)));
    rejects(&mut fx, "conv", |fx| {
        fx.h.cudnn()?.conv_backward_filter(&c.clone().groups(0), &t(&b.x, &xs), &t(&b.y, &ys), &t(&b.w, &ws))
    });
    let f = fx.foreign::<f32>(6 * 4 * 9);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.cudnn()?.conv_backward_filter(&c, &t(&b.x, &xs), &t(&b.y, &ys), &t(&f, &ws))
    });
    runs(&mut fx, |fx| fx.h.cudnn()?.conv_backward_data(&c, &t(&b.w, &ws), &t(&b.y, &ys), &t(&b.x, &xs)));
    runs(&mut fx, |fx| fx.h.cudnn()?.conv_backward_filter(&c, &t(&b.x, &xs), &t(&b.y, &ys), &t(&b.w, &ws)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| {
        fx.h.cudnn()?.conv_backward_filter(&c, &t(&b.x, &xs), &t(&b.y, &ys), &t(&b.w, &ws))
    });
}

#[test]
fn conv_bias_activation_rejects_bad_bias_and_residual() {
    let mut fx = fx();
    let b = conv_bufs(&fx);
    let (xs, ws, ys) = (Shape::nchw(2, 4, 7, 7), Shape::nchw(6, 4, 3, 3), Shape::nchw(2, 6, 5, 5));
    let (bias, z) = (fx.buf::<f32>(6), fx.buf::<f32>(2 * 6 * 5 * 5));
    let c = Convolution::new();
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let relu = ConvActivation::Relu;
    // A bias shorter than the output channels, or the output itself.
    let short = fx.buf::<f32>(5);
    rejects(&mut fx, "bias", |fx| {
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &short, &t(&b.y, &ys))
    });
    rejects(&mut fx, "bias", |fx| {
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &b.y, &t(&b.y, &ys))
    });
    // A residual of another shape or layout, or none with beta not 0.
    rejects(&mut fx, "z", |fx| {
        let zt = t(&z, &Shape::nhwc(2, 6, 5, 5));
        fx.h.cudnn()?.conv_bias_activation_forward(
            &c,
            relu,
            &t(&b.x, &xs),
            &t(&b.w, &ws),
            Some(&zt),
            &bias,
            &t(&b.y, &ys),
        )
    });
    rejects(&mut fx, "z", |fx| {
        let c = c.clone().scale(1.0, 1.0);
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &bias, &t(&b.y, &ys))
    });
    // The convolution's own checks still apply.
    rejects(&mut fx, "y", |fx| {
        let ys = Shape::nchw(2, 6, 4, 4);
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &bias, &t(&b.y, &ys))
    });
    let f = fx.foreign::<f32>(6);
    rejects(&mut fx, "!foreign", |fx| {
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &f, &t(&b.y, &ys))
    });
    runs(&mut fx, |fx| {
        let zt = t(&z, &ys);
        fx.h.cudnn()?.conv_bias_activation_forward(
            &c,
            relu,
            &t(&b.x, &xs),
            &t(&b.w, &ws),
            Some(&zt),
            &bias,
            &t(&b.y, &ys),
        )
    });
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| {
        fx.h.cudnn()?.conv_bias_activation_forward(&c, relu, &t(&b.x, &xs), &t(&b.w, &ws), None, &bias, &t(&b.y, &ys))
    });
}

#[test]
fn activation_rejects_bad_coefficients_shapes_and_buffers() {
    let mut fx = fx();
    let (x, y, dy, dx) = (fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60));
    let s = Shape::nchw(2, 3, 2, 5);
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let relu = Activation::new(ActivationMode::Relu);
    let fwd = |fx: &mut Fx, a: &Activation, ys: &Shape| fx.h.cudnn()?.activation_forward(a, &t(&x, &s), &t(&y, ys));
    rejects(&mut fx, "activation", |fx| fwd(fx, &Activation::new(ActivationMode::ClippedRelu { ceiling: 0.0 }), &s));
    rejects(&mut fx, "activation", |fx| fwd(fx, &Activation::new(ActivationMode::Elu { alpha: f64::INFINITY }), &s));
    rejects(&mut fx, "activation", |fx| fwd(fx, &relu.scale(1.0, f32::NAN), &s));
    rejects(&mut fx, "y", |fx| fwd(fx, &relu, &Shape::nhwc(2, 3, 2, 5)));
    rejects(&mut fx, "y", |fx| fwd(fx, &relu, &Shape::nchw(2, 3, 5, 2)));
    let short = fx.buf::<f32>(59);
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.activation_forward(&relu, &t(&x, &s), &t(&short, &s)));
    rejects(&mut fx, "dx", |fx| {
        fx.h.cudnn()?.activation_backward(&relu, &t(&y, &s), &t(&dy, &s), &t(&x, &s), &t(&x, &s))
    });
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.activation_backward(&relu, &t(&y, &s), &t(&dy, &Shape::nchw(2, 3, 5, 2)), &t(&x, &s), &t(&dx, &s))
    });
    let f = fx.foreign::<f32>(60);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.activation_forward(&relu, &t(&f, &s), &t(&y, &s)));
    runs(&mut fx, |fx| fwd(fx, &relu, &s));
    runs(&mut fx, |fx| fx.h.cudnn()?.activation_backward(&relu, &t(&y, &s), &t(&dy, &s), &t(&x, &s), &t(&dx, &s)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &relu, &s));
}

#[test]
fn softmax_rejects_bad_shapes_and_buffers() {
    let mut fx = fx();
    let (x, y, dy, dx) = (fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60));
    let s = Shape::nhwc(2, 3, 2, 5);
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let sm = Softmax::new(SoftmaxAlgo::Accurate, SoftmaxMode::Channel);
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.softmax_forward(&sm, &t(&x, &s), &t(&y, &Shape::nchw(2, 3, 2, 5))));
    rejects(&mut fx, "x", |fx| fx.h.cudnn()?.softmax_forward(&sm, &t(&x, &Shape::nhwc(2, 3, 2, 6)), &t(&y, &s)));
    rejects(&mut fx, "softmax", |fx| {
        fx.h.cudnn()?.softmax_forward(&sm.scale(f32::INFINITY, 0.0), &t(&x, &s), &t(&y, &s))
    });
    rejects(&mut fx, "dx", |fx| fx.h.cudnn()?.softmax_backward(&sm, &t(&y, &s), &t(&dy, &s), &t(&y, &s)));
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.softmax_backward(&sm, &t(&y, &s), &t(&dy, &Shape::nhwc(3, 2, 2, 5)), &t(&dx, &s))
    });
    let f = fx.foreign::<f32>(60);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.softmax_backward(&sm, &t(&y, &s), &t(&f, &s), &t(&dx, &s)));
    runs(&mut fx, |fx| fx.h.cudnn()?.softmax_forward(&sm, &t(&x, &s), &t(&x, &s)));
    runs(&mut fx, |fx| fx.h.cudnn()?.softmax_backward(&sm, &t(&y, &s), &t(&dy, &s), &t(&dx, &s)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.cudnn()?.softmax_forward(&sm, &t(&x, &s), &t(&y, &s)));
}

#[test]
fn pooling_rejects_bad_windows_shapes_and_buffers() {
    let mut fx = fx();
    let (x, y, dy, dx) =
        (fx.buf::<f32>(2 * 3 * 49), fx.buf::<f32>(2 * 3 * 16), fx.buf::<f32>(2 * 3 * 16), fx.buf::<f32>(2 * 3 * 49));
    let (xs, ys) = (Shape::nchw(2, 3, 7, 7), Shape::nchw(2, 3, 4, 4));
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let p = Pooling::new(PoolingMode::Max, &[3, 3]).pad(&[1, 1]).stride(&[2, 2]);
    let fwd = |fx: &mut Fx, p: &Pooling, ys: &Shape| fx.h.cudnn()?.pooling_forward(p, &t(&x, &xs), &t(&y, ys));
    // The window: a list of the wrong length, a zero, padding not below it, larger than the
    // padded input; a zero stride.
    rejects(&mut fx, "pooling", |fx| fwd(fx, &Pooling::new(PoolingMode::Max, &[3]), &ys));
    rejects(&mut fx, "pooling", |fx| fwd(fx, &Pooling::new(PoolingMode::Max, &[0, 3]), &ys));
    rejects(&mut fx, "pooling", |fx| fwd(fx, &p.clone().pad(&[3, 1]), &ys));
    rejects(&mut fx, "pooling", |fx| fwd(fx, &Pooling::new(PoolingMode::Max, &[10, 3]), &ys));
    rejects(&mut fx, "pooling", |fx| fwd(fx, &p.clone().stride(&[0, 2]), &ys));
    // An output of the wrong shape or layout.
    rejects(&mut fx, "y", |fx| fwd(fx, &p, &Shape::nchw(2, 3, 3, 4)));
    rejects(&mut fx, "y", |fx| fwd(fx, &p, &Shape::nhwc(2, 3, 4, 4)));
    rejects(&mut fx, "dx", |fx| {
        fx.h.cudnn()?.pooling_backward(&p, &t(&y, &ys), &t(&dy, &ys), &t(&x, &xs), &t(&x, &xs))
    });
    rejects(&mut fx, "dy", |fx| {
        fx.h.cudnn()?.pooling_backward(&p, &t(&y, &ys), &t(&dy, &Shape::nchw(2, 3, 4, 3)), &t(&x, &xs), &t(&dx, &xs))
    });
    let f = fx.foreign::<f32>(2 * 3 * 49);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.pooling_forward(&p, &t(&f, &xs), &t(&y, &ys)));
    runs(&mut fx, |fx| fwd(fx, &p, &ys));
    runs(&mut fx, |fx| fx.h.cudnn()?.pooling_backward(&p, &t(&y, &ys), &t(&dy, &ys), &t(&x, &xs), &t(&dx, &xs)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &p, &ys));
}

#[test]
fn dropout_rejects_bad_probabilities_reserves_and_buffers() {
    let mut fx = fx();
    let s = Shape::nchw(2, 3, 4, 5);
    let (x, y, dy, dx) = (fx.buf::<f32>(120), fx.buf::<f32>(120), fx.buf::<f32>(120), fx.buf::<f32>(120));
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    rejects(&mut fx, "probability", |fx| fx.h.cudnn()?.dropout(1.0, 7));
    rejects(&mut fx, "probability", |fx| fx.h.cudnn()?.dropout(-0.5, 7));
    rejects(&mut fx, "probability", |fx| fx.h.cudnn()?.dropout(f32::NAN, 7));
    let d = fx.h.cudnn().unwrap().dropout(0.5, 7).unwrap();
    let bytes = fx.h.cudnn().unwrap().dropout_reserve_bytes::<f32>(&s).unwrap();
    let (reserve, short) = (fx.buf::<u8>(bytes), fx.buf::<u8>(bytes - 1));
    rejects(&mut fx, "reserve", |fx| fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&y, &s), &short));
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&x, &s), &reserve));
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&y, &Shape::nhwc(2, 3, 4, 5)), &reserve)
    });
    rejects(&mut fx, "dx", |fx| {
        fx.h.cudnn()?.dropout_backward(&d, &t(&dy, &s), &t(&dx, &Shape::nchw(2, 3, 5, 4)), &reserve)
    });
    rejects(&mut fx, "x", |fx| {
        fx.h.cudnn()?.dropout_forward(&d, &t(&x, &Shape::nchw(2, 3, 4, 6)), &t(&y, &s), &reserve)
    });
    let f = fx.foreign::<u8>(bytes);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&y, &s), &f));
    // States of another device.
    let mut other = Handles::new(&fx.other, fx.other.default_stream()).unwrap();
    let foreign_state = other.cudnn().unwrap().dropout(0.5, 7).unwrap();
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.dropout_forward(&foreign_state, &t(&x, &s), &t(&y, &s), &reserve));
    runs(&mut fx, |fx| fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&y, &s), &reserve));
    runs(&mut fx, |fx| fx.h.cudnn()?.dropout_backward(&d, &t(&dy, &s), &t(&dx, &s), &reserve));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fx.h.cudnn()?.dropout_forward(&d, &t(&x, &s), &t(&y, &s), &reserve));
}

/// The states are a tracked buffer: each forward op advances them (the next mask differs),
/// and forward ops on two streams that share one state are ordered by it, without a hazard.
#[test]
fn dropout_states_advance_and_order_the_ops_that_share_them() {
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let (mut h1, mut h2) = (Handles::new(&d, s1).unwrap(), Handles::new(&d, s2).unwrap());
    let shape = Shape::nchw(1, 1, 16, 16);
    let x = d.upload(s1, &[1.0f32; 256]).unwrap();
    let (y1, y2) = (d.alloc_zeros::<f32>(s1, 256).unwrap(), d.alloc_zeros::<f32>(s2, 256).unwrap());
    let (r1, r2) = (d.alloc_zeros::<u8>(s1, 256).unwrap(), d.alloc_zeros::<u8>(s2, 256).unwrap());
    let state = h1.cudnn().unwrap().dropout(0.5, 99).unwrap();
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    h1.cudnn().unwrap().dropout_forward(&state, &t(&x, &shape), &t(&y1, &shape), &r1).unwrap();
    h2.cudnn().unwrap().dropout_forward(&state, &t(&x, &shape), &t(&y2, &shape), &r2).unwrap().wait().unwrap();
    let (a, b) = (y1.download(s1).unwrap(), y2.download(s2).unwrap());
    assert_ne!(a, b, "the second forward op drew the first one's mask again");
    assert!(a.iter().chain(&b).all(|&v| v == 0.0 || v == 2.0));
}

#[test]
fn lrn_rejects_bad_windows_coefficients_and_buffers() {
    let mut fx = fx();
    let (x, y, dy, dx) = (fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60));
    let s = Shape::nchw(2, 3, 2, 5);
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let fwd = |fx: &mut Fx, l: &Lrn| fx.h.cudnn()?.lrn_forward(l, &t(&x, &s), &t(&y, &s));
    rejects(&mut fx, "lrn", |fx| fwd(fx, &Lrn::new(4, 1e-4, 0.75, 2.0)));
    rejects(&mut fx, "lrn", |fx| fwd(fx, &Lrn::new(17, 1e-4, 0.75, 2.0)));
    rejects(&mut fx, "lrn", |fx| fwd(fx, &Lrn::new(5, 1e-4, 0.001, 2.0)));
    rejects(&mut fx, "lrn", |fx| fwd(fx, &Lrn::new(5, 1e-4, 0.75, 0.0)));
    rejects(&mut fx, "lrn", |fx| fwd(fx, &Lrn::new(5, f64::NAN, 0.75, 2.0)));
    let l = Lrn::new(5, 1e-4, 0.75, 2.0);
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.lrn_forward(&l, &t(&x, &s), &t(&x, &s)));
    rejects(&mut fx, "y", |fx| fx.h.cudnn()?.lrn_forward(&l, &t(&x, &s), &t(&y, &Shape::nhwc(2, 3, 2, 5))));
    rejects(&mut fx, "dx", |fx| fx.h.cudnn()?.lrn_backward(&l, &t(&y, &s), &t(&dy, &s), &t(&x, &s), &t(&dy, &s)));
    let f = fx.foreign::<f32>(60);
    rejects(&mut fx, "!foreign", |fx| fx.h.cudnn()?.lrn_forward(&l, &t(&f, &s), &t(&y, &s)));
    runs(&mut fx, |fx| fwd(fx, &l));
    runs(&mut fx, |fx| fx.h.cudnn()?.lrn_backward(&l, &t(&y, &s), &t(&dy, &s), &t(&x, &s), &t(&dx, &s)));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| fwd(fx, &l));
}

#[test]
fn batch_norm_rejects_bad_parameters_statistics_and_aliasing() {
    let mut fx = fx();
    let s = Shape::nhwc(2, 3, 2, 5);
    let (x, y, dy, dx) = (fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60), fx.buf::<f32>(60));
    let p: Vec<cusched::GpuRef<f32>> = (0..8).map(|_| fx.buf::<f32>(3)).collect();
    let t = |buf, s: &Shape| TensorView::new(buf, s.clone());
    let bn = BatchNorm::new(1e-5);
    let short = fx.buf::<f32>(2);
    let infer = |fx: &mut Fx, bn: &BatchNorm, scale: &cusched::GpuRef<f32>, ys: &Shape| {
        fx.h.cudnn()?.batch_norm_inference(bn, &t(&x, &s), &t(&y, ys), scale, &p[1], &p[2], &p[3])
    };
    rejects(&mut fx, "batch_norm", |fx| infer(fx, &BatchNorm::new(-1.0), &p[0], &s));
    rejects(&mut fx, "batch_norm", |fx| infer(fx, &BatchNorm::new(f64::NAN), &p[0], &s));
    rejects(&mut fx, "scale", |fx| infer(fx, &bn, &short, &s));
    rejects(&mut fx, "y", |fx| infer(fx, &bn, &p[0], &Shape::nchw(2, 3, 2, 5)));
    rejects(&mut fx, "y", |fx| {
        fx.h.cudnn()?.batch_norm_inference(&bn, &t(&x, &s), &t(&x, &s), &p[0], &p[1], &p[2], &p[3])
    });
    let running = RunningStats { mean: &p[2], var: &p[3], factor: 0.1 };
    let saved = SavedStats { mean: &p[4], inv_var: &p[5] };
    let train = |fx: &mut Fx, xs: &Shape, r: &RunningStats<'_>, sv: &SavedStats<'_>| {
        fx.h.cudnn()?.batch_norm_training(&bn, &t(&x, xs), &t(&y, xs), &p[0], &p[1], Some(r), Some(sv))
    };
    rejects(&mut fx, "running", |fx| train(fx, &s, &RunningStats { factor: 1.5, ..running }, &saved));
    rejects(&mut fx, "running.var", |fx| train(fx, &s, &RunningStats { var: &short, ..running }, &saved));
    // A saved statistic that is the running one, or a parameter.
    rejects(&mut fx, "saved.mean", |fx| train(fx, &s, &running, &SavedStats { mean: &p[2], ..saved }));
    rejects(&mut fx, "saved.inv_var", |fx| train(fx, &s, &running, &SavedStats { inv_var: &p[0], ..saved }));
    // One value per channel cannot give an unbiased variance.
    rejects(&mut fx, "x", |fx| train(fx, &Shape::nhwc(1, 3, 1, 1), &running, &saved));
    let back = |fx: &mut Fx, dxb: &cusched::GpuRef<f32>, dscale: &cusched::GpuRef<f32>| {
        fx.h.cudnn()?.batch_norm_backward(
            &bn,
            &t(&x, &s),
            &t(&dy, &s),
            &TensorView::new(dxb, s.clone()),
            &p[0],
            dscale,
            &p[7],
            &saved,
        )
    };
    rejects(&mut fx, "dx", |fx| back(fx, &dy, &p[6]));
    rejects(&mut fx, "dscale", |fx| back(fx, &dx, &p[0]));
    rejects(&mut fx, "dscale", |fx| back(fx, &dx, &short));
    let f = fx.foreign::<f32>(3);
    rejects(&mut fx, "!foreign", |fx| infer(fx, &bn, &f, &s));
    runs(&mut fx, |fx| infer(fx, &bn, &p[0], &s));
    runs(&mut fx, |fx| train(fx, &s, &running, &saved));
    runs(&mut fx, |fx| back(fx, &dx, &p[6]));
    fx.device.advance_generation();
    rejects(&mut fx, "!stale", |fx| infer(fx, &bn, &p[0], &s));
}

/// The references themselves: a 1x1 convolution is a channel mix, the layouts round-trip,
/// and the backward references are the forward one's adjoints (`<conv(x, w), dy>` equals
/// `<x, dx>` and `<w, dw>`).
#[test]
fn the_references_are_consistent() {
    let mut rng = Rng::seeded(5);
    for shape in [Shape::nhwc(2, 3, 4, 5), Shape::ndhwc(2, 3, 2, 4, 5), Shape::nchw(1, 2, 3, 4)] {
        let v = random(&mut rng, shape.dims().iter().product());
        assert_eq!(from_storage(&to_storage(&v, &shape), &shape), v);
    }
    assert_eq!(to_storage(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &Shape::nhwc(1, 2, 1, 3)), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for (xd, wd, case) in conv_cases() {
        let yd = conv_out_dims(&xd, &wd, &case);
        let (x, w, dy) = (
            random(&mut rng, xd.iter().product()),
            random(&mut rng, wd.iter().product()),
            random(&mut rng, yd.iter().product()),
        );
        let y = conv_forward(&x, &xd, &w, &wd, &case);
        let dx = conv_backward_data(&w, &wd, &dy, &xd, &case);
        let dw = conv_backward_filter(&x, &xd, &dy, &wd, &case);
        let (a, b, c) = (dot(&y, &dy), dot(&x, &dx), dot(&w, &dw));
        assert!(
            (a - b).abs() < 1e-9 * a.abs().max(1.0) && (a - c).abs() < 1e-9 * a.abs().max(1.0),
            "{case:?}: {a} {b} {c}"
        );
    }
}
