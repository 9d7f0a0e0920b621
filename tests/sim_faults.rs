//! Faults on the simulator: a faulting kernel poisons the (simulated) context while other lanes
//! have work in flight; every pending completion resolves with `ContextPoisoned`, the device
//! rebuilds, old buffers are stale, and new work succeeds on the same lanes. Also the watchdog.
//! Every wait is bounded so a hang fails the test.

mod common;
use common::*;
use cusched::{Device, DeviceConfig, Error, GpuRef, LaneCtx, SimConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

/// A simulated kernel that takes `ms` milliseconds and then bumps every element.
fn slow_bump(cx: &mut LaneCtx, buf: &GpuRef<u32>, ms: u64) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("slow_bump");
    rec.read_write(buf)?;
    let data = buf.sim_data()?;
    rec.launch(cx.device(), move |s| {
        s.sim_kernel(move || {
            std::thread::sleep(Duration::from_millis(ms));
            data.lock().iter_mut().for_each(|x| *x += 1);
        })
    })
}

#[test]
fn a_fault_poisons_pending_work_then_the_device_rebuilds_and_runs_new_work() {
    let d = sim();
    let lanes: Vec<_> = (0..3).map(|i| d.lane(&format!("l{i}")).unwrap()).collect();
    let bufs: Vec<_> = (0..2).map(|_| d.upload(d.default_stream(), &[1u32; 16]).unwrap()).collect();
    let host = d.host_from_slice(&[3u32; 4]).unwrap();
    let generation = d.generation();
    // Work in flight on two lanes, each holding its buffer as a keep-alive.
    let pending: Vec<_> = (0..2)
        .map(|i| {
            let b = bufs[i].clone();
            lanes[i].submit(move |cx| {
                slow_bump(cx, &b, 200)?;
                cx.keep(b);
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let fault = lanes[2].submit(|cx| {
        let rec = cx.recorder().named("oob_write");
        rec.launch(cx.device(), |s| s.sim_fault())
    });
    let start = Instant::now();
    let err = fault.wait().expect_err("the faulting job fails");
    assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
    for p in pending {
        match p.wait_timeout(LIMIT) {
            Err(Error::ContextPoisoned { call, .. }) => assert!(call.starts_with("cuEvent"), "{call}"),
            other => panic!("in-flight work must resolve ContextPoisoned, got {other:?}"),
        }
    }
    assert!(start.elapsed() < LIMIT);
    assert!(d.generation() > generation, "the generation advanced");
    // Old handles are stale, not touched.
    match bufs[0].download(d.default_stream()) {
        Err(Error::Stale { made, current, .. }) => assert!(made < current),
        other => panic!("expected Stale, got {other:?}"),
    }
    assert!(matches!(host.read(), Err(Error::Stale { .. })), "pinned memory of the old context is stale too");
    // New work succeeds, on the same lanes and on the default stream.
    for lane in &lanes {
        let out = lane
            .submit(|cx| {
                let b = cx.device().upload(cx.stream(), &[5u32; 16])?;
                slow_bump(cx, &b, 1)?;
                b.download(cx.stream())
            })
            .wait_timeout(LIMIT)
            .unwrap();
        assert_eq!(out, vec![6u32; 16]);
    }
    let fresh = d.upload(d.default_stream(), &[9u8; 4]).unwrap();
    assert_eq!(fresh.download(lanes[0].stream()).unwrap(), vec![9u8; 4]);
    assert!(d.sim_hazards().unwrap().is_empty());
}

#[test]
fn a_second_fault_after_a_rebuild_is_recovered_too() {
    let d = sim();
    for round in 0..2 {
        let generation = d.generation();
        let mut h = cusched::Handles::new(&d, d.default_stream()).unwrap();
        let err = h
            .run(|cx| {
                let rec = cx.recorder();
                rec.launch(cx.device(), |s| s.sim_fault())
            })
            .wait()
            .unwrap_err();
        assert!(matches!(err, Error::ContextPoisoned { .. }), "round {round}: {err}");
        assert!(d.generation() > generation, "round {round}");
        assert_eq!(d.upload(d.default_stream(), &[round]).unwrap().download(d.default_stream()).unwrap(), vec![round]);
    }
}

#[test]
fn the_watchdog_times_out_a_job_but_holds_its_keep_alives_until_the_gpu_is_done() {
    let d = Device::sim_with(
        SimConfig::default(),
        DeviceConfig { watchdog: Some(Duration::from_millis(50)), ..DeviceConfig::default() },
    )
    .unwrap();
    let lane = d.lane("slow").unwrap();
    let buf = d.upload(d.default_stream(), &[0u32; 8]).unwrap();
    let marker = Arc::new(());
    let (m, b) = (marker.clone(), buf.clone());
    let start = Instant::now();
    let done = lane.submit(move |cx| {
        slow_bump(cx, &b, 600)?;
        cx.keep(m);
        Ok(())
    });
    match done.wait() {
        Err(Error::Timeout { waited }) => assert_eq!(waited, Duration::from_millis(50)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_millis(500), "the watchdog fired before the work finished");
    assert_eq!(Arc::strong_count(&marker), 2, "the keep-alive is still held while the GPU runs");
    let deadline = Instant::now() + LIMIT;
    while Arc::strong_count(&marker) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(Arc::strong_count(&marker), 1, "released once the GPU finished");
    assert_eq!(buf.download(d.default_stream()).unwrap(), vec![1u32; 8], "the work itself completed");
    // Fast work is untouched by the watchdog.
    assert_eq!(lane.submit(|_| Ok(7)).wait().unwrap(), 7);
}
