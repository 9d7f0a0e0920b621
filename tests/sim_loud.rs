//! Hazards are loud on the simulator: with the default configuration a hazard fails the
//! completion that observed it (and the device's shutdown), and its message names the kernel,
//! the lane and the buffer as the user named them.

mod common;
use common::*;
use cusched::{Device, Error, GpuRef, LaneCtx, SimConfig};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

/// A kernel named `scale` that declares `x` read-only but writes it.
fn scale_writing_a_read(cx: &mut LaneCtx, x: &GpuRef<f32>) -> cusched::Result<()> {
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
        let done = lane.job().read(&x).submit(move |cx| scale_writing_a_read(cx, &xj));
        let err = done.wait().expect_err("the undeclared write must fail the job's completion");
        let msg = err.to_string();
        assert!(msg.contains("scale"), "the kernel is named: {msg}");
        assert!(msg.contains("compute"), "the lane is named: {msg}");
    });
}
