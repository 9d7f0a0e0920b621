//! Faults on the simulator: a faulting kernel poisons the (simulated) context while other lanes
//! have work in flight; every pending completion resolves with `ContextPoisoned`, the device
//! rebuilds, old buffers are stale, and new work succeeds on the same lanes. Also the watchdog.
//! Every wait is bounded so a hang fails the test.

use crate::common::*;
use cusched::{Device, DeviceConfig, Error, GpuRef, Handles, SimConfig};
use std::sync::mpsc;
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(60);

/// A simulated kernel that bumps every element.
fn bump(cx: &mut Handles, buf: &GpuRef<u32>) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("bump");
    rec.read_write(buf)?;
    let data = buf.sim_data()?;
    rec.launch(cx.device(), move |s| s.sim_kernel(move || data.lock().iter_mut().for_each(|x| *x += 1)))
}

/// A simulated kernel that says it started, blocks until `gate` opens (or its sender is
/// dropped), then bumps every element: GPU work that stays in flight for as long as a test
/// needs, whatever the machine's speed.
fn gated_bump(
    cx: &mut Handles,
    buf: &GpuRef<u32>,
    started: mpsc::Sender<()>,
    gate: mpsc::Receiver<()>,
) -> cusched::Result<()> {
    let mut rec = cx.recorder().named("gated_bump");
    rec.read_write(buf)?;
    let data = buf.sim_data()?;
    rec.launch(cx.device(), move |s| {
        s.sim_kernel(move || {
            let _ = started.send(());
            let _ = gate.recv();
            data.lock().iter_mut().for_each(|x| *x += 1);
        })
    })
}

#[test]
fn a_fault_poisons_pending_work_then_the_device_rebuilds_and_runs_new_work() {
    bounded(LIMIT, || {
        let d = sim();
        let lanes: Vec<_> = (0..3).map(|i| d.lane(&format!("l{i}")).unwrap()).collect();
        let bufs: Vec<_> = (0..2).map(|_| d.upload(d.default_stream(), &[1u32; 16]).unwrap()).collect();
        let host = d.host_from_slice(&[3u32; 4]).unwrap();
        let generation = d.generation();
        // Work in flight on two lanes, each holding its buffer as a keep-alive; their kernels
        // run and block until the fault has resolved.
        let (started_tx, started) = mpsc::channel();
        let mut gates = Vec::new();
        let pending: Vec<_> = (0..2)
            .map(|i| {
                let (b, started_tx) = (bufs[i].clone(), started_tx.clone());
                let (open, gate) = mpsc::channel();
                gates.push(open);
                lanes[i].submit(move |cx| {
                    gated_bump(cx, &b, started_tx, gate)?;
                    cx.keep(b);
                    Ok(())
                })
            })
            .collect();
        for _ in 0..2 {
            started.recv().unwrap();
        }
        // Opens the gates once the fault has been seen (the generation advances first thing in
        // the rebuild), so the pending kernels finish in the poisoned context. The simulator's
        // rebuild joins the old stream threads, so it waits for them.
        let d2 = d.clone();
        let opener = std::thread::spawn(move || {
            while d2.generation() == generation {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(gates);
        });
        let fault = lanes[2].submit(|cx| {
            let rec = cx.recorder().named("oob_write");
            rec.launch(cx.device(), |s| s.sim_fault())
        });
        let err = fault.wait().expect_err("the faulting job fails");
        assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
        opener.join().unwrap();
        for p in pending {
            match p.wait_timeout(LIMIT) {
                Err(Error::ContextPoisoned { call, .. }) => assert!(call.starts_with("cuEvent"), "{call}"),
                other => panic!("in-flight work must resolve ContextPoisoned, got {other:?}"),
            }
        }
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
                    bump(cx, &b)?;
                    b.download(cx.stream())
                })
                .wait_timeout(LIMIT)
                .unwrap();
            assert_eq!(out, vec![6u32; 16]);
        }
        let fresh = d.upload(d.default_stream(), &[9u8; 4]).unwrap();
        assert_eq!(fresh.download(lanes[0].stream()).unwrap(), vec![9u8; 4]);
        assert!(d.sim_hazards().unwrap().is_empty());
    });
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
    bounded(LIMIT, || {
        let d = Device::sim_with(
            SimConfig::default(),
            DeviceConfig { watchdog: Some(Duration::from_millis(50)), ..DeviceConfig::default() },
        )
        .unwrap();
        let lane = d.lane("slow").unwrap();
        let buf = d.upload(d.default_stream(), &[0u32; 8]).unwrap();
        let (released_tx, released) = mpsc::channel::<()>();
        struct Marker(mpsc::Sender<()>);
        impl Drop for Marker {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let marker = Marker(released_tx);
        let (started_tx, started) = mpsc::channel();
        let (open, gate) = mpsc::channel();
        let b = buf.clone();
        // The kernel blocks until the test opens the gate: the watchdog must fire while it runs.
        let done = lane.submit(move |cx| {
            gated_bump(cx, &b, started_tx, gate)?;
            cx.keep(marker);
            Ok(())
        });
        started.recv().unwrap();
        match done.wait() {
            Err(Error::Timeout { waited }) => assert_eq!(waited, Duration::from_millis(50)),
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert_eq!(
            released.try_recv(),
            Err(mpsc::TryRecvError::Empty),
            "the keep-alive is still held while the GPU runs"
        );
        open.send(()).unwrap();
        released.recv_timeout(LIMIT).expect("released once the GPU finished");
        assert_eq!(buf.download(d.default_stream()).unwrap(), vec![1u32; 8], "the work itself completed");
        // Fast work is untouched by the watchdog.
        assert_eq!(lane.submit(|_| Ok(7)).wait().unwrap(), 7);
    });
}
