//! Completions compose: `map`, `then`, `inspect`, `and_then` and `Device::join` deliver after
//! the GPU work, pass errors through, never block the completion thread, and refuse a wait
//! from a callback that could never end.

use crate::common::*;
use cusched::{Completion, Device, Error, SimConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

fn slow() -> Device {
    Device::sim(SimConfig {
        min_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(4),
        ..SimConfig::default()
    })
    .unwrap()
}

#[test]
fn map_then_and_inspect_see_the_value_after_the_gpu_work() {
    bounded(LIMIT, || {
        let d = slow();
        let lane = d.lane("compute").unwrap();
        let x = d.upload(d.default_stream(), &[3u32; 8]).unwrap();
        let xj = x.clone();
        let seen = Arc::new(AtomicBool::new(false));
        let s2 = seen.clone();
        let sum = lane
            .job()
            .read(&x)
            .submit(move |cx, _| xj.download(cx.stream()))
            .inspect(move |v| s2.store(v.len() == 8, Ordering::Relaxed))
            .map(|v| v.iter().sum::<u32>())
            .then(|r| r.map(|s| s * 2));
        assert_eq!(sum.wait().unwrap().unwrap(), 48);
        assert!(seen.load(Ordering::Relaxed));
        d.shutdown().unwrap();
    });
}

#[test]
fn and_then_runs_the_next_op_only_after_the_first_ops_gpu_work() {
    bounded(LIMIT, || {
        let d = slow();
        let (a, b) = (d.lane("writer").unwrap(), d.lane("reader").unwrap());
        for i in 1..=8u32 {
            let x = d.alloc_zeros::<u32>(d.default_stream(), 64).unwrap();
            let (xw, xr) = (x.clone(), x.clone());
            let b = b.clone();
            let got = a
                .submit(move |cx| {
                    let mut rec = cx.recorder().named("fill");
                    rec.write(&xw)?;
                    let m = xw.sim_data()?;
                    rec.launch(cx.device(), move |s| s.sim_kernel(move || m.lock().fill(i)))?;
                    Ok(i)
                })
                // Undeclared on purpose: the next job is submitted only once the fill is done.
                .and_then(move |i| Ok(b.submit(move |cx| xr.download(cx.stream()).map(|v| (i, v)))));
            let (i_seen, v) = got.wait().unwrap();
            assert_eq!(i_seen, i);
            assert!(v.iter().all(|&e| e == i), "round {i}: {v:?}");
        }
        assert!(d.sim_hazards().unwrap().is_empty());
        d.shutdown().unwrap();
    });
}

#[test]
fn errors_pass_through_without_calling_the_step() {
    bounded(LIMIT, || {
        let d = Device::sim(SimConfig::default()).unwrap();
        let lane = d.lane("compute").unwrap();
        let called = Arc::new(AtomicBool::new(false));
        let (c1, c2) = (called.clone(), called.clone());
        let failed: Completion<u32> = lane.submit(|_| Err(Error::invalid_for_test()));
        let mapped = failed.map(move |v| {
            c1.store(true, Ordering::Relaxed);
            v
        });
        assert!(matches!(mapped.wait(), Err(Error::InvalidArgument { arg: "test", .. })));
        let chained = lane.submit(|_| Err::<u32, _>(Error::invalid_for_test())).and_then(move |v| {
            c2.store(true, Ordering::Relaxed);
            Ok(lane_free(v))
        });
        assert!(matches!(chained.wait(), Err(Error::InvalidArgument { arg: "test", .. })));
        assert!(!called.load(Ordering::Relaxed), "no step ran after an error");
        // An error the step itself returns resolves the chain.
        let refused = lane.submit(|_| Ok(1u32)).and_then(|_| Err::<Completion<u32>, _>(Error::QueueFull));
        assert!(matches!(refused.wait(), Err(Error::QueueFull)));
    });
}

/// A stand-in for a next op that never runs.
fn lane_free(_: u32) -> Completion<u32> {
    unreachable!("the step is not called after an error")
}

trait ForTest {
    fn invalid_for_test() -> Error;
}
impl ForTest for Error {
    /// The simplest typed error a user meets: an argument rejected before anything runs.
    fn invalid_for_test() -> Error {
        Error::InvalidArgument { arg: "test", reason: "made by the test".into() }
    }
}

#[test]
fn join_keeps_order_reports_the_first_error_and_resolves_empty() {
    bounded(LIMIT, || {
        let d = slow();
        let lanes = [d.lane("a").unwrap(), d.lane("b").unwrap(), d.lane("c").unwrap()];
        let parts: Vec<Completion<u32>> = (0..9u32)
            .map(|i| {
                lanes[i as usize % 3].submit(move |cx| {
                    let x = cx.device().upload(cx.stream(), &[i; 4])?;
                    Ok(x.download(cx.stream())?[0])
                })
            })
            .collect();
        assert_eq!(d.join(parts).wait().unwrap(), (0..9).collect::<Vec<_>>());
        let mixed = vec![
            lanes[0].submit(|_| Ok(1u32)),
            lanes[1].submit(|_| Err(Error::QueueFull)),
            lanes[2].submit(|_| Err(Error::Shutdown)),
        ];
        assert!(matches!(d.join(mixed).wait(), Err(Error::QueueFull)), "the first error in input order");
        assert_eq!(d.join(Vec::<Completion<u8>>::new()).wait().unwrap(), Vec::<u8>::new());
    });
}

#[test]
fn a_callback_waiting_on_a_composed_completion_is_refused_not_hung() {
    bounded(LIMIT, || {
        let d = slow();
        let lane = d.lane("compute").unwrap();
        let (tx, rx) = mpsc::channel();
        let other = d.lane("other").unwrap();
        // Its source finishes long after the callback below starts, and only the completion
        // thread (busy running that callback) can fill it.
        let composed = lane
            .submit(|cx| {
                std::thread::sleep(Duration::from_millis(200));
                cx.device().upload(cx.stream(), &[1u8; 4]).map(|b| b.len())
            })
            .map(|n| n + 1);
        other.submit(|_| Ok(())).on_complete(move |_| tx.send(composed.wait()).unwrap());
        let got = rx.recv_timeout(LIMIT).unwrap();
        assert!(matches!(got, Err(Error::WouldDeadlock { .. })), "{got:?}");
    });
}

#[test]
fn a_dropped_chain_still_runs() {
    bounded(LIMIT, || {
        let d = slow();
        let lane = d.lane("compute").unwrap();
        let (tx, rx) = mpsc::channel();
        drop(lane.submit(|_| Ok(2u32)).map(move |v| tx.send(v * 10).unwrap()));
        assert_eq!(rx.recv_timeout(LIMIT).unwrap(), 20);
    });
}
