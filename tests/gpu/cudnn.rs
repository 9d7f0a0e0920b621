//! cuDNN on a real GPU against the f64 CPU references (the same runners as the simulator's
//! tests): convolutions forward, backward-data and backward-filter (3x3 stride 2 padding 1,
//! 5x5 dilation 2, groups 2, depthwise, 3-D; batch 3) and the fused convolution + bias +
//! activation (identity, ReLU; with a residual, in place too), batch norm (inference,
//! training with the running statistics, backward), LRN, dropout (same seed, same mask),
//! activations, softmax and pooling,
//! forward and backward, in f32, f16 and bf16, NCHW and NHWC, inline and in a lane job; the
//! plan cache, the measured algorithm search and TF32. Inputs are random per run (the seed is
//! printed; `CUSCHED_SEED` replays it).
//!
//! Needs cuDNN 9 on the loader path (`. tools/cuda-libs-env` finds the nvidia-cudnn-cu13
//! wheel's `libcudnn.so.9`).

use crate::common::reference::cudnn::*;
use crate::common::*;
use cusched::cudnn::{ActivationMode, AlgoSearch, Convolution, Layout, Shape, SoftmaxAlgo, SoftmaxMode, TensorView};
use cusched::half::{bf16, f16};

const LAYOUTS: [Layout; 2] = [Layout::Nchw, Layout::Nhwc];

/// How many times the type's tolerance a GPU result may be off: f32 sums in another order
/// (and through Winograd or FFT transforms); the half types are dominated by their rounding,
/// and by the transforms cuDNN's algorithms may run in them (an f16 3-D backward-data case was
/// seen 1.6 times over a slack of 2, with one seed of several). A layout or padding mistake is
/// off by the values themselves, far beyond either.
fn slack<T: El>() -> f64 {
    if T::NAME == "f32" {
        10.0
    } else {
        4.0
    }
}

fn conv_all<T: El>() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: slack::<T>() };
    for layout in LAYOUTS {
        for (xd, wd, case) in conv_cases() {
            check_conv::<T>(&mut b, layout, &xd, &wd, &case, &mut rng);
            check_conv_fused::<T>(&mut b, layout, &xd, &wd, &case, &mut rng);
        }
    }
    drop(h);
    d.synchronize(s).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn convolutions_match_the_reference_in_f32() {
    conv_all::<f32>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn convolutions_match_the_reference_in_f16() {
    conv_all::<f16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn convolutions_match_the_reference_in_bf16() {
    conv_all::<bf16>();
}

fn pointwise_all<T: El>() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: slack::<T>() };
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
    drop(h);
    d.synchronize(s).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_f32() {
    pointwise_all::<f32>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_f16() {
    pointwise_all::<f16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pointwise_ops_pooling_and_norms_match_the_reference_in_bf16() {
    pointwise_all::<bf16>();
}

/// Every op again, inside lane jobs (the lane's own handles), in each type and layout.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_matches_the_reference_in_a_lane_job() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("cudnn").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        fn all<T: El>(b: &mut Bench<'_>, rng: &mut Rng) {
            for layout in LAYOUTS {
                for (xd, wd, case) in conv_cases() {
                    check_conv::<T>(b, layout, &xd, &wd, &case, rng);
                    check_conv_fused::<T>(b, layout, &xd, &wd, &case, rng);
                }
                let shape = Shape::new(layout, &[3, 5, 4, 3]);
                check_activation::<T>(b, ActivationMode::Swish { beta: 1.0 }, &shape, rng);
                check_activation::<T>(b, ActivationMode::ClippedRelu { ceiling: 1.0 }, &shape, rng);
                check_softmax::<T>(b, SoftmaxAlgo::Log, SoftmaxMode::Channel, &shape, rng);
                check_softmax::<T>(b, SoftmaxAlgo::Accurate, SoftmaxMode::Instance, &shape, rng);
                check_batch_norm::<T>(b, &shape, rng);
                check_lrn::<T>(b, &shape, rng);
                check_dropout::<T>(b, &Shape::new(layout, &[4, 8, 8, 9]), rng);
                for (xd, case) in pool_cases() {
                    check_pooling::<T>(b, layout, &xd, &case, rng);
                }
            }
        }
        all::<f32>(&mut Bench { d: &dev, s, h: &mut *cx, slack: slack::<f32>() }, &mut rng);
        all::<f16>(&mut Bench { d: &dev, s, h: &mut *cx, slack: slack::<f16>() }, &mut rng);
        all::<bf16>(&mut Bench { d: &dev, s, h: &mut *cx, slack: slack::<bf16>() }, &mut rng);
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Plans are made once per shape key; the measured search and TF32 make plans of their own and
/// still compute the convolution.
#[test]
#[ignore = "needs a CUDA GPU"]
fn plans_are_cached_per_shape_key_and_find_and_tf32_work() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let (xd, wd) = ([3usize, 16, 17, 15], [32usize, 16, 3, 3]);
    let case = ConvCase { pad: vec![1, 1], stride: vec![1, 1], dilation: vec![1, 1], groups: 1 };
    let yd = conv_out_dims(&xd, &wd, &case);
    let (xs, ws, ys) = (Shape::new(Layout::Nhwc, &xd), Shape::new(Layout::Nhwc, &wd), Shape::new(Layout::Nhwc, &yd));
    let x = random(&mut rng, xd.iter().product());
    let w = random(&mut rng, wd.iter().product());
    let want = conv_forward(&x, &xd, &w, &wd, &case);
    let b = Bench { d: &d, s, h: &mut h, slack: 1.0 };
    let (bx, bw, by) = (b.up::<f32>(&x, &xs), b.up::<f32>(&w, &ws), b.nans::<f32>(&ys));
    let conv = Convolution::new().pad(&[1, 1]);
    let run = |h: &mut cusched::Handles, conv: &Convolution| {
        h.cudnn()
            .unwrap()
            .conv_forward(
                conv,
                &TensorView::new(&bx, xs.clone()),
                &TensorView::new(&bw, ws.clone()),
                &TensorView::new(&by, ys.clone()),
            )
            .unwrap()
            .wait()
            .unwrap()
    };
    for _ in 0..3 {
        run(&mut h, &conv);
    }
    run(&mut h, &conv.clone().scale(0.5, 0.0));
    assert_eq!(h.cudnn().unwrap().plans_made(), 1, "scaling is not part of the plan");
    let down = || from_storage(&by.download(s).unwrap().iter().map(|&v| v as f64).collect::<Vec<_>>(), &ys);
    let half: Vec<f64> = want.iter().map(|v| v * 0.5).collect();
    close(&down(), &half, 1e-4, "scaled by 0.5");
    h.cudnn().unwrap().set_algo_search(AlgoSearch::Find);
    run(&mut h, &conv);
    assert_eq!(h.cudnn().unwrap().plans_made(), 2, "the measured search makes its own plan");
    close(&down(), &want, 1e-4, "measured algorithm");
    h.cudnn().unwrap().set_tf32(true);
    run(&mut h, &conv);
    assert_eq!(h.cudnn().unwrap().plans_made(), 3);
    // TF32 keeps 10 bits of each input: about 1e-3 relative.
    close(&down(), &want, 5e-3, "TF32");
    assert!(h.cudnn().unwrap().cudnn_handle().is_ok());
    drop(h);
    d.synchronize(s).unwrap();
}
