//! cuDNN RNNs on a real GPU against the f64 CPU reference (the simulator's runner): every cell
//! × directions {1, 2} × layers {1, 2} × type, variable lengths, forward (training), backward
//! data and backward weights (accumulated and overwritten) against finite differences, the
//! weights placed through the layout helper; and cuDNN's layout against the documented one the
//! simulator uses. Inputs are random per run (the seed is printed; `CUSCHED_SEED` replays it).
//!
//! Needs cuDNN 9 on the loader path (`. tools/cuda-libs-env`).

use crate::common::reference::cudnn::{Bench, El};
use crate::common::reference::rnn::*;
use crate::common::*;
use cusched::cudnn::{Rnn, RnnCell};
use cusched::half::{bf16, f16};

/// How many times the type's tolerance a GPU result may be off: f32 sums in another order; the
/// half types keep their states and the layers' outputs in the type between steps, so rounding
/// errors compound through time (a layout or gate-order mistake is off by the values).
fn slack<T: El>() -> f64 {
    if T::NAME == "f32" {
        20.0
    } else {
        8.0
    }
}

fn all<T: El>() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let mut rng = Rng::new();
    let mut b = Bench { d: &d, s, h: &mut h, slack: slack::<T>() };
    for c in rnn_cases() {
        eprintln!("{} {c:?}", T::NAME);
        check_rnn::<T>(&mut b, &c, &[3, 5, 1], 6, &mut rng);
        check_rnn::<T>(&mut b, &c, &[4, 4], 4, &mut rng);
    }
    drop(h);
    d.synchronize(s).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rnns_match_the_reference_in_f32() {
    all::<f32>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rnns_match_the_reference_in_f16() {
    all::<f16>();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rnns_match_the_reference_in_bf16() {
    all::<bf16>();
}

/// cuDNN's weight layout (from `cudnnGetRNNWeightParams`) is the documented one the simulator
/// computes, for every cell, both directions and two layers (so users' initialization code
/// finds the same offsets on both backends).
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gpu_weight_layout_is_the_documented_one() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let sim = sim();
    let mut sh = cusched::Handles::new(&sim, sim.default_stream()).unwrap();
    for cell in [RnnCell::Lstm, RnnCell::Gru, RnnCell::Relu, RnnCell::Tanh] {
        let rnn = Rnn::new(cell, 3, 4).layers(2).bidirectional(true);
        let gpu = h.cudnn().unwrap().rnn_weight_layout::<f32>(&rnn).unwrap();
        let want = sh.cudnn().unwrap().rnn_weight_layout::<f32>(&rnn).unwrap();
        assert_eq!(gpu, want, "{cell:?}: the GPU's layout, then the documented one");
        let half = h.cudnn().unwrap().rnn_weight_layout::<f16>(&rnn).unwrap();
        assert_eq!(half, want, "{cell:?} in f16");
    }
    drop(h);
    d.synchronize(s).unwrap();
}
