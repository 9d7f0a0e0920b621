//! NCCL on the simulator, beyond the arithmetic: ranks on threads and lanes, collectives
//! fenced against compute on another lane (and a missing declaration caught), communicators
//! from a unique id, shrinking, groups that fail, and faults (a rank that never comes, an
//! abort, ranks that disagree) resolving with typed errors within the timeout.

use crate::common::nccl::{ranks, ranks_with};
use cusched::nccl::{self, CommConfig, Communicator, ReduceOp, UniqueId};
use cusched::{CollectiveFault, Device, Error, Handles, HazardKind, LaunchRecorder, SimConfig};
use std::time::{Duration, Instant};

fn fault_of(e: &Error) -> Option<CollectiveFault> {
    match e {
        Error::Collective { fault, .. } => Some(*fault),
        _ => None,
    }
}

#[test]
fn ranks_on_their_own_threads_and_lanes_all_reduce_in_order() {
    let rk = ranks(3);
    std::thread::scope(|s| {
        for r in 0..3 {
            let (gpu, comm) = (rk.gpus[r].clone(), rk.comms[r].clone());
            s.spawn(move || {
                let lane = gpu.lane("comm").unwrap();
                let x = gpu.upload(gpu.default_stream(), &[1.0f32; 64]).unwrap();
                for _ in 0..10 {
                    let xc = x.clone();
                    let c = comm.clone();
                    let op = lane
                        .job()
                        .read_write(&x)
                        .submit(move |cx, _| cx.nccl()?.all_reduce_in_place(&c, &xc, ReduceOp::Sum));
                    op.wait().unwrap().wait().unwrap();
                }
                // 1, then times 3 per all-reduce.
                assert_eq!(x.download(gpu.default_stream()).unwrap(), vec![59049.0f32; 64]);
            });
        }
    });
    rk.assert_clean();
}

/// A slow kernel on one lane writes each rank's gradient; an all-reduce on another lane sums
/// it. The declared jobs fence the all-reduce after the kernel: the sums are exact and the
/// checker sees no hazard.
#[test]
fn an_all_reduce_on_one_lane_waits_for_the_kernel_on_another() {
    let rk = ranks(2);
    let mut done = Vec::new();
    let mut grads = Vec::new();
    for r in 0..2 {
        let gpu = &rk.gpus[r];
        let (compute, comm_lane) = (gpu.lane("compute").unwrap(), gpu.lane("comm").unwrap());
        let g = gpu.alloc_zeros::<f64>(gpu.default_stream(), 1000).unwrap();
        let (gm, gk, gc, dev) = (g.sim_data().unwrap(), g.clone(), g.clone(), gpu.clone());
        let kernel = compute.job().write(&g).submit(move |cx, _| {
            let mut rec = LaunchRecorder::new_strict(cx.stream()).named("slow_grad");
            rec.write(&gk)?;
            rec.launch(&dev, |scope| {
                scope.sim_kernel(move || {
                    std::thread::sleep(Duration::from_millis(40));
                    gm.lock().iter_mut().enumerate().for_each(|(i, v)| *v = (i * (r + 1)) as f64);
                })
            })
        });
        let comm = rk.comms[r].clone();
        let reduce = comm_lane
            .job()
            .read_write(&g)
            .submit(move |cx, _| cx.nccl()?.all_reduce_in_place(&comm, &gc, ReduceOp::Sum));
        done.push((kernel, reduce));
        grads.push(g);
    }
    for (k, c) in done {
        k.wait().unwrap();
        c.wait().unwrap().wait().unwrap();
    }
    for (r, g) in grads.iter().enumerate() {
        let want: Vec<f64> = (0..1000).map(|i| (i * 3) as f64).collect();
        assert_eq!(g.download(rk.gpus[r].default_stream()).unwrap(), want);
    }
    rk.assert_clean();
}

/// A kernel that reads an all-reduce's output without declaring it is reported.
#[test]
fn a_missing_declaration_after_an_all_reduce_is_reported() {
    let mut rk = ranks(2);
    let x: Vec<_> = (0..2).map(|r| rk.upload::<f32>(r, &[1.0; 8])).collect();
    rk.each(|h, c, r| h.nccl()?.all_reduce_in_place(c, &x[r], ReduceOp::Sum));
    let gpu = &rk.gpus[0];
    let (xm, s) = (x[0].sim_data().unwrap(), gpu.new_stream().unwrap());
    LaunchRecorder::new_strict(s)
        .named("undeclared_read")
        .launch(gpu, |scope| {
            scope.sim_kernel(move || {
                let _ = xm.read().iter().sum::<f32>();
            })
        })
        .unwrap();
    // The checker fails the stream's work with the hazard (`SimConfig::fail_on_hazard`).
    match gpu.synchronize(s) {
        Err(Error::Hazard { hazard, .. }) => assert_eq!(hazard.kind, HazardKind::Undeclared, "{hazard}"),
        other => panic!("expected the undeclared read to be reported, got {other:?}"),
    }
}

#[test]
fn a_rank_that_never_comes_fails_the_others_with_a_timeout_and_the_device_goes_on() {
    let mut rk = ranks_with(2, CommConfig::default().with_timeout(Duration::from_millis(300)));
    let x = rk.upload::<f32>(0, &[1.0; 4]);
    let start = Instant::now();
    let c = rk.h[0].nccl().unwrap().all_reduce_in_place(&rk.comms[0], &x, ReduceOp::Sum).unwrap();
    let e = c.wait().unwrap_err();
    assert_eq!(fault_of(&e), Some(CollectiveFault::Timeout), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5), "resolved after {:?}", start.elapsed());
    // The communicator is done for: a later op fails at once, recording nothing.
    let before = rk.gpus[0].stats();
    let again = rk.h[0].nccl().unwrap().all_reduce_in_place(&rk.comms[0], &x, ReduceOp::Sum);
    assert_eq!(again.err().as_ref().and_then(fault_of), Some(CollectiveFault::Timeout));
    assert_eq!(rk.gpus[0].stats().events, before.events);
    // The device is fine.
    let y = rk.upload::<f32>(0, &[2.0; 4]);
    assert_eq!(rk.get(0, &y), [2.0; 4]);
    assert!(rk.comms[0].fault().is_some() && rk.comms[1].fault().is_none());
}

#[test]
fn abort_stops_a_rank_waiting_for_its_peers() {
    let mut rk = ranks(2);
    let x = rk.upload::<i32>(0, &[1.0; 4]);
    let c = rk.h[0].nccl().unwrap().all_reduce_in_place(&rk.comms[0], &x, ReduceOp::Sum).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    rk.comms[0].abort();
    let e = c.wait().unwrap_err();
    assert_eq!(fault_of(&e), Some(CollectiveFault::Aborted), "{e}");
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn ranks_that_disagree_fail_with_invalid_usage() {
    let mut rk = ranks(2);
    let x: Vec<_> = (0..2).map(|r| rk.upload::<f32>(r, &[1.0; 4])).collect();
    let (h, comms) = (&mut rk.h, &rk.comms);
    let done = nccl::group(|| {
        Ok(vec![
            h[0].nccl()?.all_reduce_in_place(&comms[0], &x[0], ReduceOp::Sum)?,
            h[1].nccl()?.all_reduce_in_place(&comms[1], &x[1], ReduceOp::Max)?,
        ])
    })
    .unwrap();
    for r in cusched::wait_all(done) {
        assert_eq!(r.as_ref().err().and_then(fault_of), Some(CollectiveFault::InvalidUsage), "{r:?}");
    }
}

#[test]
fn a_failed_group_enqueues_nothing_and_fails_its_ops() {
    let mut rk = ranks(2);
    let x = rk.upload::<f32>(0, &[1.0; 4]);
    let before = rk.gpus[0].stats();
    let mut op = None;
    let (h, comms) = (&mut rk.h, &rk.comms);
    let out: cusched::Result<()> = nccl::group(|| {
        op = Some(h[0].nccl()?.all_reduce_in_place(&comms[0], &x, ReduceOp::Sum)?);
        Err(Error::Shutdown)
    });
    assert!(matches!(out, Err(Error::Shutdown)));
    assert!(matches!(op.unwrap().wait(), Err(Error::Shutdown)));
    assert_eq!(rk.gpus[0].stats().events, before.events);
    // Nothing was enqueued, so the communicators' sequences still agree.
    let bufs = [x.clone(), rk.upload::<f32>(1, &[1.0; 4])];
    rk.each(|h, c, r| h.nccl()?.all_reduce_in_place(c, &bufs[r], ReduceOp::Sum));
    assert_eq!(rk.get(0, &x), [2.0; 4]);
}

/// A thread's groups in a row, one of them failed, each launch only their own ops: the list
/// a group queues in is reused from one group to the next.
#[test]
fn groups_in_a_row_launch_only_their_own_ops() {
    let mut rk = ranks(2);
    let x: Vec<_> = (0..2).map(|r| rk.upload::<f32>(r, &[r as f64 + 1.0; 4])).collect();
    let (h, comms) = (&mut rk.h, &rk.comms);
    let mut failed = None;
    let out: cusched::Result<()> = nccl::group(|| {
        failed = Some(h[0].nccl()?.all_reduce_in_place(&comms[0], &x[0], ReduceOp::Sum)?);
        Err(Error::Shutdown)
    });
    assert!(matches!(out, Err(Error::Shutdown)));
    assert!(matches!(failed.unwrap().wait(), Err(Error::Shutdown)));
    for round in 0..3 {
        let done: Vec<_> =
            nccl::group(|| (0..2).map(|r| h[r].nccl()?.all_reduce_in_place(&comms[r], &x[r], ReduceOp::Sum)).collect())
                .unwrap();
        assert_eq!(done.len(), 2, "round {round}");
        for r in cusched::wait_all(done) {
            r.unwrap();
        }
    }
    // 1 + 2 summed three times over two ranks.
    for (r, x) in x.iter().enumerate() {
        assert_eq!(rk.get(r, x), [12.0; 4]);
    }
    rk.assert_clean();
}

#[test]
fn communicators_from_a_unique_id_work_between_threads_and_shrink() {
    let gpus = Device::sim_group(SimConfig::default(), 3).unwrap();
    let dir = std::env::temp_dir().join(format!("cusched-nccl-id-{}", std::process::id()));
    let path = dir.with_extension("id");
    UniqueId::simulated().write_file(&path).unwrap();
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let (gpu, path) = (gpus[r].clone(), path.clone());
                s.spawn(move || {
                    let id = UniqueId::read_file(&path, Duration::from_secs(5)).unwrap();
                    let comm = Communicator::init_rank(&gpu, &id, 3, r, &CommConfig::default()).unwrap();
                    assert!(comm.capabilities().spans_processes);
                    assert_eq!(comm.capabilities().nccl_version, None);
                    let mut h = Handles::new(&gpu, gpu.default_stream()).unwrap();
                    let x = gpu.upload(h.stream(), &[(r + 1) as f32; 4]).unwrap();
                    h.nccl().unwrap().all_reduce_in_place(&comm, &x, ReduceOp::Sum).unwrap().wait().unwrap();
                    // Rank 1 leaves; the others shrink to two ranks and go on.
                    let small = comm.shrink(&[1]).unwrap();
                    assert_eq!(small.is_none(), r == 1);
                    if let Some(small) = small {
                        assert_eq!((small.size(), small.rank()), (2, r / 2));
                        h.nccl().unwrap().all_reduce_in_place(&small, &x, ReduceOp::Sum).unwrap().wait().unwrap();
                    }
                    x.download(h.stream()).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let _ = std::fs::remove_file(&path);
    assert_eq!(results, [vec![12.0; 4], vec![6.0; 4], vec![12.0; 4]]);
}

#[test]
fn unique_ids_round_trip_through_bytes_and_reject_bad_input() {
    let id = UniqueId::simulated();
    assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
    assert!(matches!(UniqueId::from_bytes(&[0; 3]), Err(Error::InvalidArgument { arg: "bytes", .. })));
    assert!(matches!(UniqueId::read_from(&mut &[0u8; 200][..]), Err(Error::InvalidArgument { arg: "channel", .. })));
    let gpu = Device::sim(SimConfig::default()).unwrap();
    let e = Communicator::init_rank(&gpu, &id, 2, 2, &CommConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { arg: "rank", .. }), "{e}");
    let e = Communicator::init_rank(&gpu, &id, 0, 0, &CommConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { arg: "nranks", .. }), "{e}");
    let lone = Device::sim(SimConfig::default()).unwrap();
    let e = Communicator::init_all(&[gpu, lone], &CommConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { arg: "devices", .. }), "{e}");
}

#[test]
fn a_lone_rank_needs_no_peer() {
    let mut rk = ranks(1);
    let x = rk.upload::<f64>(0, &[1.5, 2.5]);
    rk.each(|h, c, r| {
        assert_eq!(r, 0);
        h.nccl()?.all_reduce_in_place(c, &x, ReduceOp::PreMulSum(2.0))
    });
    assert_eq!(rk.get(0, &x), [3.0, 5.0]);
}

/// An op's buffers live until the GPU is done with it, even when the caller drops them inside
/// the group, before the group launches.
#[test]
fn buffers_dropped_inside_a_group_live_until_it_has_run() {
    let mut rk = ranks(2);
    let out: Vec<_> = (0..2).map(|r| rk.zeros::<f64>(r, 3)).collect();
    let (h, comms, gpus) = (&mut rk.h, &rk.comms, &rk.gpus);
    let done = nccl::group(|| {
        let mut done = Vec::new();
        for r in 0..2 {
            let tmp = gpus[r].upload(h[r].stream(), &[r as f64 + 1.0; 3])?;
            done.push(h[r].nccl()?.all_reduce(&comms[r], &tmp, &out[r], ReduceOp::Sum)?);
            drop(tmp);
        }
        Ok(done)
    })
    .unwrap();
    for r in cusched::wait_all(done) {
        r.unwrap();
    }
    for (r, o) in out.iter().enumerate() {
        assert_eq!(rk.get(r, o), [3.0; 3]);
    }
    rk.assert_clean();
}
