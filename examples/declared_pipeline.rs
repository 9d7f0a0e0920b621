//! A three-lane pipeline (upload → scale → download) over several chunks, written with
//! declared jobs and no `wait_committed`: each job reserves its buffers when submitted, so the
//! stages of a chunk run in the order they were submitted although they run on three lanes.
//! Then the same program with undeclared `Lane::submit` jobs: their uses are ordered by commit,
//! and when one comes too late for the order they were submitted in, cusched reports it (a
//! submit-order hazard on the simulator, `Error::SubmitOrder` on a GPU) instead of handing
//! back wrong data.
//!
//! `cargo run --example declared_pipeline` (the CPU simulator).

use cusched::{Device, Error, GpuRef, Handles, Result, SimConfig};
use std::time::Duration;

/// `y = 2 x` as one simulated kernel.
fn scale(cx: &mut Handles, x: &GpuRef<f32>, y: &GpuRef<f32>) -> Result<()> {
    let mut rec = cx.recorder().named("scale");
    rec.read(x)?.write(y)?;
    let (xs, ys) = (x.sim_data()?, y.sim_data()?);
    rec.launch(cx.device(), move |scope| {
        scope.sim_kernel(move || {
            let x = xs.read().to_vec();
            for (o, v) in ys.lock().iter_mut().zip(x) {
                *o = 2.0 * v;
            }
        })
    })
}

fn main() -> Result<()> {
    let device = Device::sim(SimConfig::default())?;
    let s = device.default_stream();
    let (up, mid, down) = (device.lane("upload")?, device.lane("scale")?, device.lane("download")?);
    let chunks: Vec<Vec<f32>> = (0..8).map(|c| (0..16).map(|i| (c * 16 + i) as f32).collect()).collect();

    // Declared: no wait between the stages.
    let mut results = Vec::new();
    for data in &chunks {
        let x = device.alloc_zeros::<f32>(s, data.len())?.with_label("x");
        let y = device.alloc_zeros::<f32>(s, data.len())?.with_label("y");
        let data = data.clone();
        up.job().write(&x).submit(move |cx, (x,)| {
            std::thread::sleep(Duration::from_micros(200)); // host work before the upload
            x.copy_from_slice(cx.stream(), &data)
        });
        mid.job().read(&x).write(&y).submit(|cx, (x, y)| scale(cx, &x, &y));
        results.push(down.job().read(&y).submit(|cx, (y,)| y.download(cx.stream())));
    }
    for (data, r) in chunks.iter().zip(results) {
        let want: Vec<f32> = data.iter().map(|v| 2.0 * v).collect();
        assert_eq!(r.wait()?, want);
    }
    println!("declared jobs: {} chunks right, no wait_committed", chunks.len());

    // Undeclared: the same stages, ordered by commit. The scale job tends to run before the
    // slower upload; the upload, submitted first, is then refused with the hazard.
    let mut reported = 0;
    for data in &chunks {
        let x = device.alloc_zeros::<f32>(s, data.len())?.with_label("x");
        let y = device.alloc_zeros::<f32>(s, data.len())?.with_label("y");
        device.synchronize(s)?;
        let (xu, data) = (x.clone(), data.clone());
        let uploaded = up.submit(move |cx| {
            std::thread::sleep(Duration::from_micros(200));
            xu.copy_from_slice(cx.stream(), &data)
        });
        let scaled = mid.submit(move |cx| scale(cx, &x, &y));
        scaled.wait()?;
        match uploaded.wait() {
            Err(Error::Hazard { hazard, .. }) => {
                reported += 1;
                if reported == 1 {
                    println!("undeclared jobs: {hazard}");
                }
            }
            other => other?,
        }
    }
    println!("undeclared jobs: {reported} of {} chunks reported out of submit order", chunks.len());
    // The simulator lists the hazards, and its shutdown reports them: expected here.
    let _ = device.shutdown();
    Ok(())
}
