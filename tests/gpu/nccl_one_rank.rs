//! NCCL on one GPU: one-rank communicators, whose collectives run on the GPU (copies, the
//! PreMulSum scaling) without a peer, so that the op path of a collective, called outside a
//! group (one lock, one NCCL call or group, its watch) or inside one, runs on every GPU
//! machine. Every
//! collective and element type against the CPU, in place and out of place, uneven counts,
//! blocking and non-blocking; an out-of-place all-reduce on one lane fenced after a slow kernel
//! on another; steady state without new events; the watchdog's timeout; every collective
//! inside a group. Put NCCL on the loader path first: `. tools/cuda-libs-env`.

use crate::common::nccl::*;
use crate::each_type;
use cusched::nccl::{CommConfig, ReduceOp};
use cusched::Device;
use std::time::Duration;

/// GPU 0 and a one-rank communicator on it (a 60 s timeout), with NVLink multicast off for
/// the process.
fn one_rank(config: CommConfig) -> Option<Ranks> {
    lone_rank(config.with_timeout(Duration::from_secs(60)))
}

/// [`one_rank`] with `config` as given.
fn lone_rank(config: CommConfig) -> Option<Ranks> {
    // Set before NCCL is loaded by any test of this binary, and every test sets the same value.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    match Device::open(0) {
        Ok(gpu) => Some(Ranks::new(vec![gpu], config)),
        Err(e) if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("CUSCHED_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            eprintln!("skipping NCCL GPU test: {e}");
            None
        }
    }
}

/// Every collective of every type; the large counts are where NCCL's own one-rank reductions
/// out of place leave their last elements unwritten (see `plan::lone_rank_reduction`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_rank_computes_every_collective_of_every_type() {
    let Some(mut rk) = one_rank(CommConfig::default()) else { return };
    every_collective(&mut rk, &[1, 7, 65_537, 100_003]);
}

/// Every collective case of every type, at each of `lens`.
fn every_collective(rk: &mut Ranks, lens: &[usize]) {
    for &len in lens {
        each_type!(all_reduce_case, rk, len);
        each_type!(rooted_case, rk, len);
        each_type!(gather_scatter_case, rk, len);
        each_type!(p2p_case, rk, len);
    }
}

/// The same inside a group of one op (NCCL's group path: the op preflighted, then enqueued
/// between `ncclGroupStart` and `ncclGroupEnd`, then committed), blocking and non-blocking.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_rank_computes_every_collective_of_every_type_in_a_group() {
    for blocking in [true, false] {
        let Some(mut rk) = one_rank(CommConfig::default().with_blocking(blocking)) else { return };
        rk.grouped = true;
        every_collective(&mut rk, &[3, 100_003]);
    }
}

/// Reduce and reduce-scatter by every reduction, in place and out of place, every type: a
/// lone rank's result is its input reduced alone (an average is the input, PreMulSum scales it).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_rank_reduces_and_scatters_by_every_reduction() {
    let Some(mut rk) = one_rank(CommConfig::default()) else { return };
    for len in [5, 65_537, 100_003] {
        each_type!(lone_reductions_case, &mut rk, len);
    }
}

fn lone_reductions_case<T: Num>(rk: &mut Ranks, len: usize) {
    let input = rk.input(0, len);
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum(2.0)] {
        let want: Vec<T> = reference(std::slice::from_ref(&input), op).iter().map(|&v| T::of(v)).collect();
        let send = rk.upload::<T>(0, &input);
        let recv = rk.zeros::<T>(0, len);
        rk.each(|h, c, _| h.nccl()?.reduce(c, &send, Some(&recv), op, 0));
        assert_eq!(rk.get(0, &recv), want, "reduce {op:?} out of place, {len}");
        let recv = rk.zeros::<T>(0, len);
        rk.each(|h, c, _| h.nccl()?.reduce_scatter(c, &send, &recv, op));
        assert_eq!(rk.get(0, &recv), want, "reduce_scatter {op:?} out of place, {len}");
        rk.each(|h, c, _| h.nccl()?.reduce_in_place(c, &send, op, 0));
        assert_eq!(rk.get(0, &send), want, "reduce {op:?} in place, {len}");
        let send = rk.upload::<T>(0, &input);
        rk.each(|h, c, _| h.nccl()?.reduce_scatter_in_place(c, &send, op));
        assert_eq!(rk.get(0, &send), want, "reduce_scatter {op:?} in place, {len}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_rank_of_a_non_blocking_communicator_computes_every_collective() {
    let Some(mut rk) = one_rank(CommConfig::default().with_blocking(false)) else { return };
    every_collective(&mut rk, &[3, 100_003]);
}

/// A slow kernel on a compute lane writes the input; the out-of-place all-reduce on a comm
/// lane (a device-to-device copy for one rank), declared as a read of it, must wait for it.
#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "nvrtc")]
fn a_lone_ranks_all_reduce_on_one_lane_waits_for_a_slow_kernel_on_another() {
    use crate::common::slow::{fill, kernels, N, SLOW};
    let Some(rk) = one_rank(CommConfig::default()) else { return };
    let gpu = &rk.gpus[0];
    let k = std::sync::Arc::new(kernels(gpu));
    let (compute, comm_lane) = (gpu.lane("compute").unwrap(), gpu.lane("comm").unwrap());
    for round in 0..4 {
        let x = gpu.alloc_zeros::<f32>(gpu.default_stream(), N).unwrap();
        let y = gpu.alloc_zeros::<f32>(gpu.default_stream(), N).unwrap();
        let (xk, xc, yc, kk) = (x.clone(), x.clone(), y.clone(), k.clone());
        let v = (round + 1) as f32;
        let kernel = compute.job().write(&x).submit(move |cx, _| fill(cx.device(), &kk, cx.stream(), &xk, v, SLOW));
        let comm = rk.comms[0].clone();
        let reduce = comm_lane
            .job()
            .read(&x)
            .write(&y)
            .submit(move |cx, _| cx.nccl()?.all_reduce(&comm, &xc, &yc, ReduceOp::Sum));
        kernel.wait().unwrap();
        reduce.wait().unwrap().wait().unwrap();
        let got = y.download(gpu.default_stream()).unwrap();
        assert!(got.iter().all(|&e| e == v), "round {round}: {:?}", &got[..4]);
    }
}

/// Collectives called one at a time, outside any group, reuse their fence events in place:
/// after a warm-up, thousands of ops create next to none.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_lone_ranks_collectives_in_steady_state_create_no_events() {
    let Some(mut rk) = one_rank(CommConfig::default()) else { return };
    let x = rk.upload::<f32>(0, &vec![1.0; 2048]);
    let run = |rk: &mut Ranks, n: usize| {
        let mut last = None;
        for _ in 0..n {
            last = Some(rk.h[0].nccl().unwrap().all_reduce_in_place(&rk.comms[0], &x, ReduceOp::Max).unwrap());
        }
        if let Some(l) = last {
            l.wait().unwrap();
        }
    };
    run(&mut rk, 1000);
    let before = rk.gpus[0].events_created();
    run(&mut rk, 8000);
    let made = rk.gpus[0].events_created() - before;
    eprintln!("events created by 8,000 lone all-reduces after 1,000 to warm up: {made}");
    assert!(made <= 10, "{made} events created in steady state");
    assert_eq!(rk.get(0, &x), vec![1.0f32; 2048]);
}

/// An op that stays pending past its communicator's timeout (behind a slow kernel on its
/// stream, standing in for a peer that never comes) fails with a typed timeout once its event
/// passes; the communicator is aborted, so that the next op on it fails at once, and the
/// device goes on: the kernel's write lands, and new work runs.
#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "nvrtc")]
fn a_lone_ranks_op_pending_past_the_timeout_fails_typed_and_the_device_goes_on() {
    use crate::common::slow::{fill, kernels, N, SLOW};
    use cusched::{CollectiveFault, Error};
    let timeout = Duration::from_millis(20);
    let Some(mut rk) = lone_rank(CommConfig::default().with_timeout(timeout)) else { return };
    let gpu = rk.gpus[0].clone();
    let k = kernels(&gpu);
    let (x, y) = (rk.zeros::<f32>(0, N), rk.zeros::<f32>(0, N));
    let stream = rk.h[0].stream();
    // About ten times the timeout on an H100.
    fill(&gpu, &k, stream, &x, 3.0, 20 * SLOW).unwrap();
    let start = std::time::Instant::now();
    let pending = rk.h[0].nccl().unwrap().all_reduce(&rk.comms[0], &x, &y, ReduceOp::Sum).unwrap();
    let e = pending.wait().unwrap_err();
    let waited = start.elapsed();
    assert!(matches!(e, Error::Collective { fault: CollectiveFault::Timeout, .. }), "{e}");
    assert!(waited >= timeout, "failed after {waited:?}, before the timeout");
    let again = rk.h[0].nccl().unwrap().all_reduce(&rk.comms[0], &x, &y, ReduceOp::Sum);
    assert!(again.is_err(), "an op on the aborted communicator is refused");
    gpu.synchronize(stream).unwrap();
    assert!(rk.get(0, &x).iter().all(|&v| v == 3.0));
    fill(&gpu, &k, stream, &y, 4.0, 0).unwrap();
    assert!(rk.get(0, &y).iter().all(|&v| v == 4.0));
}
