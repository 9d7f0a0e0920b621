//! cuDNN RNNs on a real GPU against the f64 CPU reference (the simulator's runner): every cell
//! × directions {1, 2} × layers {1, 2} × type, variable lengths, forward (training), backward
//! data and backward weights (accumulated and overwritten) against finite differences, the
//! weights placed through the layout helper (padded sequence-major, batch-major and packed
//! data in turn, forward inference too); cuDNN's layout against the documented one the
//! simulator uses; descriptors cached per key, in a lane job; short weight and reserve spaces
//! refused before recording. Inputs are random per run (the seed is printed; `CUSCHED_SEED` replays it).
//!
//! Needs cuDNN 9 on the loader path (`. tools/cuda-libs-env`).

use crate::common::reference::cudnn::{Bench, El};
use crate::common::reference::rnn::*;
use crate::common::*;
use cusched::cudnn::{Rnn, RnnCell, RnnData, RnnLayout};
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

/// Descriptors are made once per configuration key: a second forward op of the same shape
/// makes none; a new batch size makes one. In a lane job, so the lane path runs cuDNN too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn rnn_descriptors_are_cached_per_key_and_lanes_run_them() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("cudnn").unwrap();
    let seed = Rng::new().next();
    lane.submit(move |cx| {
        let (dev, s) = (cx.device().clone(), cx.stream());
        let mut rng = Rng::seeded(seed);
        let mut b = Bench { d: &dev, s, h: cx, slack: slack::<f32>() };
        let c = RnnCase { cell: RnnCell::Lstm, input: 3, hidden: 4, layers: 2, dirs: 2, layout: RnnLayout::SeqMajor };
        check_rnn::<f32>(&mut b, &c, &[2, 3], 3, &mut rng);
        let rnn = c.rnn();
        let dnn = b.h.cudnn()?;
        let seqs = dnn.seq_lengths(&[2, 3], 3)?;
        let w = dev.alloc_zeros::<f32>(s, dnn.rnn_weight_layout::<f32>(&rnn)?.len())?;
        let (x, y) = (dev.alloc_zeros::<f32>(s, 3 * 2 * 3)?, dev.alloc_zeros::<f32>(s, 3 * 2 * 8)?);
        let made = dnn.rnn_plans_made();
        dnn.rnn_forward(&rnn, &seqs, &RnnData::new(&x, &y), &w, None)?.wait()?;
        assert_eq!(dnn.rnn_plans_made(), made, "a cached key made a descriptor");
        let seqs3 = dnn.seq_lengths(&[2, 3, 1], 3)?;
        let y3 = dev.alloc_zeros::<f32>(s, 3 * 3 * 8)?;
        let x3 = dev.alloc_zeros::<f32>(s, 3 * 3 * 3)?;
        dnn.rnn_forward(&rnn, &seqs3, &RnnData::new(&x3, &y3), &w, None)?.wait()?;
        assert_eq!(dnn.rnn_plans_made(), made + 1, "a new batch size needs its own descriptors");
        Ok(())
    })
    .wait()
    .unwrap();
    d.synchronize(d.default_stream()).unwrap();
}

/// The sizes cuDNN reports bound the weight and reserve spaces: one element or byte short is
/// refused, naming the argument, before anything is recorded.
#[test]
#[ignore = "needs a CUDA GPU"]
fn short_weight_and_reserve_spaces_are_refused_before_recording() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let rnn = Rnn::new(RnnCell::Lstm, 3, 4).layers(2).bidirectional(true);
    let dnn = h.cudnn().unwrap();
    let seqs = dnn.seq_lengths(&[3, 2], 3).unwrap();
    let wlen = dnn.rnn_weight_layout::<f32>(&rnn).unwrap().len();
    let rbytes = dnn.rnn_reserve_bytes::<f32>(&rnn, &seqs).unwrap();
    let (x, y) = (d.alloc_zeros::<f32>(s, 3 * 2 * 3).unwrap(), d.alloc_zeros::<f32>(s, 3 * 2 * 8).unwrap());
    let (w, short_w) = (d.alloc_zeros::<f32>(s, wlen).unwrap(), d.alloc_zeros::<f32>(s, wlen - 1).unwrap());
    let short_r = d.alloc_zeros::<u8>(s, rbytes - 1).unwrap();
    d.synchronize(s).unwrap();
    let before = d.stats();
    let arg = |e: cusched::Error| match e {
        cusched::Error::InvalidArgument { arg, .. } => arg,
        other => panic!("expected an invalid argument, got {other:?}"),
    };
    let e = dnn.rnn_forward(&rnn, &seqs, &RnnData::new(&x, &y), &short_w, None).unwrap_err();
    assert_eq!(arg(e), "weights");
    let e = dnn.rnn_forward(&rnn, &seqs, &RnnData::new(&x, &y), &w, Some(&short_r)).unwrap_err();
    assert_eq!(arg(e), "reserve");
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "a rejected op recorded something");
    drop(h);
    d.synchronize(s).unwrap();
}
