//! NCCL on two GPUs of one process: every collective and element type against the CPU, in
//! place and out of place, uneven counts (the simulator's cases, on `Device::open(0)` and
//! `Device::open(1)`), and an all-reduce on one lane fenced after a slow kernel on another.
//! Skipped with fewer than two GPUs or without NCCL, unless `CUSCHED_REQUIRE_GPU=1`. Put NCCL
//! on the loader path first: `. tools/cuda-libs-env`.

use crate::common::nccl::*;
use crate::each_type;
use cusched::nccl::CommConfig;
use cusched::Device;

/// Both GPUs, with NVLink multicast off for every communicator of the process.
fn two_gpus() -> Option<Vec<Device>> {
    // Set before NCCL is loaded by any test of this binary, and
    // every test sets the same value.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let skip = |why: String| {
        if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("CUSCHED_REQUIRE_GPU=1 but {why}");
        }
        eprintln!("skipping NCCL GPU test: {why}");
        None
    };
    let a = match Device::open(0) {
        Ok(a) => a,
        Err(e) => return skip(e.to_string()),
    };
    match Device::open(1) {
        Ok(b) => Some(vec![a, b]),
        Err(e) => skip(format!("no second GPU ({e})")),
    }
}

fn gpu_ranks() -> Option<Ranks> {
    let gpus = two_gpus()?;
    Some(Ranks::new(gpus, CommConfig::default().with_timeout(std::time::Duration::from_secs(60))))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_all_reduce_matches_the_cpu_for_every_type_and_op() {
    let Some(mut rk) = gpu_ranks() else { return };
    each_type!(all_reduce_case, &mut rk, 7);
    each_type!(all_reduce_case, &mut rk, 100_003);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_broadcast_and_reduce_match_the_cpu_from_every_root() {
    let Some(mut rk) = gpu_ranks() else { return };
    each_type!(rooted_case, &mut rk, 5);
    each_type!(rooted_case, &mut rk, 65_537);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_all_gather_and_reduce_scatter_match_the_cpu() {
    let Some(mut rk) = gpu_ranks() else { return };
    each_type!(gather_scatter_case, &mut rk, 3);
    each_type!(gather_scatter_case, &mut rk, 40_001);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_send_recv_and_all_to_all_match_the_cpu() {
    let Some(mut rk) = gpu_ranks() else { return };
    each_type!(p2p_case, &mut rk, 4);
    each_type!(p2p_case, &mut rk, 10_007);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_capabilities_name_the_installed_version() {
    let Some(rk) = gpu_ranks() else { return };
    let caps = rk.comms[0].capabilities();
    eprintln!("NCCL capabilities: {caps:?}");
    assert!(caps.nccl_version.is_some_and(|v| v.0 == 2));
    assert!(!caps.spans_processes);
}

/// A slow kernel on a compute lane writes each GPU's gradient; the all-reduce on a comm lane,
/// declared as a read-write of it, must wait for it: the sums are exact.
#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "nvrtc")]
fn nccl_all_reduce_on_one_lane_waits_for_a_slow_kernel_on_another() {
    use crate::common::slow::{fill, kernels, N, SLOW};
    use cusched::nccl::ReduceOp;
    let Some(rk) = gpu_ranks() else { return };
    let per_gpu: Vec<_> = rk
        .gpus
        .iter()
        .map(|g| (std::sync::Arc::new(kernels(g)), g.lane("compute").unwrap(), g.lane("comm").unwrap()))
        .collect();
    for round in 0..4 {
        let mut jobs = Vec::new();
        let mut grads = Vec::new();
        for (r, (gpu, (k, compute, comm_lane))) in rk.gpus.iter().zip(&per_gpu).enumerate() {
            let g = gpu.alloc_zeros::<f32>(gpu.default_stream(), N).unwrap();
            let (gk, gc, k) = (g.clone(), g.clone(), k.clone());
            let v = (round * 2 + r + 1) as f32;
            let kernel = compute.job().write(&g).submit(move |cx, _| fill(cx.device(), &k, cx.stream(), &gk, v, SLOW));
            let comm = rk.comms[r].clone();
            let reduce = comm_lane
                .job()
                .read_write(&g)
                .submit(move |cx, _| cx.nccl()?.all_reduce_in_place(&comm, &gc, ReduceOp::Sum));
            jobs.push((kernel, reduce));
            grads.push(g);
        }
        // Both ranks' all-reduces are enqueued from their lanes' threads: no group needed.
        for (k, c) in jobs {
            k.wait().unwrap();
            c.wait().unwrap().wait().unwrap();
        }
        let want = (round * 4 + 3) as f32;
        for (r, g) in grads.iter().enumerate() {
            let got = g.download(rk.gpus[r].default_stream()).unwrap();
            assert!(got.iter().all(|&x| x == want), "round {round}, rank {r}: {:?}", &got[..4]);
        }
    }
}

/// Rank 1 leaves: rank 0 shrinks the communicator to itself (`ncclCommShrink`, where the
/// installed NCCL has it) and goes on alone.
#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_shrink_leaves_a_working_communicator() {
    use cusched::nccl::ReduceOp;
    let Some(mut rk) = gpu_ranks() else { return };
    if !rk.comms[0].capabilities().shrink {
        eprintln!("skipping: this NCCL has no ncclCommShrink");
        return;
    }
    let small = rk.comms[0].shrink(&[1]).unwrap().expect("rank 0 stays");
    assert_eq!((small.rank(), small.size()), (0, 1));
    let x = rk.upload::<f32>(0, &[1.5; 1000]);
    rk.h[0].nccl().unwrap().all_reduce_in_place(&small, &x, ReduceOp::Sum).unwrap().wait().unwrap();
    assert_eq!(rk.get(0, &x), vec![1.5f32; 1000]);
}

/// A non-blocking communicator (every NCCL call returns at once, cusched polls it) computes
/// what a blocking one does, in groups of both ranks, and shrinks.
#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_non_blocking_communicators_reduce_gather_and_shrink() {
    let Some(gpus) = two_gpus() else { return };
    let config = CommConfig::default().with_timeout(std::time::Duration::from_secs(60)).with_blocking(false);
    let mut rk = Ranks::new(gpus, config);
    all_reduce_case::<f32>(&mut rk, 100_003);
    gather_scatter_case::<i32>(&mut rk, 3);
    p2p_case::<u8>(&mut rk, 10_007);
    if rk.comms[0].capabilities().shrink {
        use cusched::nccl::ReduceOp;
        let small = rk.comms[0].shrink(&[1]).unwrap().expect("rank 0 stays");
        let x = rk.upload::<f32>(0, &[2.5; 1000]);
        rk.h[0].nccl().unwrap().all_reduce_in_place(&small, &x, ReduceOp::Sum).unwrap().wait().unwrap();
        assert_eq!(rk.get(0, &x), vec![2.5f32; 1000]);
    }
}

/// Collectives in steady state reuse their fence events in place: the communicator's watchdog
/// keeps the events of few pending ops (a later op of the same stream passes the earlier
/// ones), so a commit seldom takes an event from the device's pool and almost never creates
/// one, however long the watchdog waits between looks. One thread drives both ranks as one
/// group per iteration, about 20 µs per group: a hundred ops pending at each look. (On two
/// H100s: 0 to 2 events, where keeping every pending op's event made 38 to 111.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_collectives_in_steady_state_create_no_events() {
    let Some(mut rk) = gpu_ranks() else { return };
    let bufs: Vec<_> = (0..2).map(|r| rk.upload::<f32>(r, &vec![1.0; 2048])).collect();
    let groups = |rk: &mut Ranks, n: usize| {
        let mut last = Vec::new();
        for _ in 0..n {
            last = cusched::nccl::group(|| {
                let mut done = Vec::new();
                for ((h, c), b) in rk.h.iter_mut().zip(&rk.comms).zip(&bufs) {
                    done.push(h.nccl()?.all_reduce_in_place(c, b, cusched::nccl::ReduceOp::Max)?);
                }
                Ok(done)
            })
            .unwrap();
        }
        for r in cusched::wait_all(last) {
            r.unwrap();
        }
    };
    groups(&mut rk, 1000);
    let created = |rk: &Ranks| -> u64 { rk.gpus.iter().map(Device::events_created).sum() };
    let before = created(&rk);
    groups(&mut rk, 4000);
    let made = created(&rk) - before;
    eprintln!("events created by 4,000 groups of two all-reduces after 1,000 to warm up: {made}");
    assert!(made <= 10, "{made} events created in steady state (8,000 ops)");
}
