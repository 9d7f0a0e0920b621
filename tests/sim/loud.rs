//! Hazards are loud on the simulator: with the default configuration a hazard fails the
//! completion that observed it (and the device's shutdown), and its message names the kernel,
//! the lane and the buffer as the user named them.

use crate::common::*;
use cusched::{Device, Error, FenceMutation, GpuRef, Handles, HazardKind, SimConfig};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

/// A kernel named `scale` that declares `x` read-only but writes it.
fn scale_writing_a_read(cx: &mut Handles, x: &GpuRef<f32>) -> cusched::Result<()> {
    let mut rec = cx.recorder();
    rec.read(x)?;
    let m = x.sim_data()?;
    rec.named("scale").launch(cx.device(), move |scope| scope.sim_kernel(move || m.lock()[0] *= 2.0))
}

#[test]
fn a_kernel_that_declared_a_read_but_wrote_fails_its_completion_by_default() {
    bounded(LIMIT, || {
        let device = Device::sim(SimConfig::default()).unwrap();
        let lane = device.lane("compute").unwrap();
        let x = device.upload(device.default_stream(), &[1.0f32; 4]).unwrap();
        let xj = x.clone();
        let done = lane.job().read(&x).submit(move |cx, _| scale_writing_a_read(cx, &xj));
        let err = done.wait().expect_err("the undeclared write must fail the job's completion");
        let msg = err.to_string();
        assert!(msg.contains("scale"), "the kernel is named: {msg}");
        assert!(msg.contains("compute"), "the lane is named: {msg}");
    });
}

#[test]
fn the_hazard_names_the_buffer_label_and_the_shutdown_reports_it() {
    bounded(LIMIT, || {
        let device = Device::sim(SimConfig::default()).unwrap();
        let lane = device.lane("compute").unwrap();
        let x = device.upload(device.default_stream(), &[1.0f32; 4]).unwrap().with_label("weights");
        let xj = x.clone();
        let done = lane.job().read(&x).submit(move |cx, _| scale_writing_a_read(cx, &xj));
        let Err(Error::Hazard { hazard, more: 0 }) = done.wait() else { panic!("expected the hazard") };
        assert_eq!(hazard.kind, HazardKind::Undeclared);
        assert_eq!(hazard.label.as_deref(), Some("weights"));
        assert_eq!(hazard.later_origin.kernel.as_deref(), Some("scale"));
        assert_eq!(hazard.later_origin.lane.as_deref(), Some("compute"));
        let msg = hazard.to_string();
        assert!(msg.contains(&format!("buffer #{} \"weights\"", x.id())), "{msg}");
        assert!(msg.contains("wrote") && msg.contains(".write(..)"), "says what to do: {msg}");
        // The stream has reported it: later work there succeeds.
        assert_eq!(x.download(device.default_stream()).unwrap()[0], 2.0);
        drop(lane);
        let Err(Error::Hazard { hazard: first, more: 0 }) = device.shutdown() else {
            panic!("shutdown must report it")
        };
        assert_eq!(*first, *hazard);
    });
}

#[test]
fn an_unordered_pair_names_both_kernels_and_their_lanes() {
    bounded(LIMIT, || {
        let device =
            Device::sim(SimConfig { fence_mutation: Some(FenceMutation::NoFences), ..SimConfig::default() }).unwrap();
        let (a, b) = (device.lane("producer").unwrap(), device.lane("consumer").unwrap());
        let x = device.alloc_zeros::<f32>(device.default_stream(), 4).unwrap();
        device.synchronize(device.default_stream()).unwrap();
        x.label("activations");
        let (xa, xb) = (x.clone(), x.clone());
        let w = a.submit(move |cx| {
            let mut rec = cx.recorder().named("fill");
            rec.write(&xa)?;
            let m = xa.sim_data()?;
            rec.launch(cx.device(), move |s| s.sim_kernel(move || m.lock().fill(1.0)))
        });
        w.wait_committed().unwrap();
        let r = b.submit(move |cx| {
            let mut rec = cx.recorder().named("sum");
            rec.read(&xb)?;
            let m = xb.sim_data()?;
            rec.launch(cx.device(), move |s| s.sim_kernel(move || assert!(m.read().iter().sum::<f32>() >= 0.0)))
        });
        let outcomes = [w.wait(), r.wait()];
        let hazards = device.sim_hazards().unwrap();
        let named = |h: &&cusched::Hazard, k: &str| {
            [&h.earlier_origin, &h.later_origin].iter().any(|o| o.kernel.as_deref() == Some(k))
        };
        let h = hazards
            .iter()
            .find(|h| h.buffer == x.id() && named(h, "fill") && named(h, "sum"))
            .unwrap_or_else(|| panic!("the unfenced pair is found: {hazards:?}"));
        let names = [&h.earlier_origin, &h.later_origin].map(|o| (o.kernel.as_deref(), o.lane.as_deref()));
        assert!(names.contains(&(Some("fill"), Some("producer"))), "{h:?}");
        assert!(names.contains(&(Some("sum"), Some("consumer"))), "{h:?}");
        let msg = h.to_string();
        assert!(msg.contains("\"activations\"") && msg.contains("`fill`") && msg.contains("`sum`"), "{msg}");
        assert!(outcomes.iter().any(|o| matches!(o, Err(Error::Hazard { .. }))), "a completion fails: {outcomes:?}");
        assert!(matches!(device.shutdown(), Err(Error::Hazard { .. })));
    });
}

#[test]
fn with_the_switch_off_hazards_are_listed_but_nothing_fails() {
    bounded(LIMIT, || {
        let device = Device::sim(SimConfig { fail_on_hazard: false, ..SimConfig::default() }).unwrap();
        let lane = device.lane("compute").unwrap();
        let x = device.upload(device.default_stream(), &[1.0f32; 4]).unwrap();
        let xj = x.clone();
        lane.job().read(&x).submit(move |cx, _| scale_writing_a_read(cx, &xj)).wait().unwrap();
        assert_eq!(device.sim_hazards().unwrap().len(), 1);
        drop(lane);
        device.shutdown().unwrap();
    });
}
