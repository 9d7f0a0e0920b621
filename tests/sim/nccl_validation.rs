//! Bad input to every NCCL op is rejected before anything is recorded or enqueued, with a
//! typed error naming the argument (`<op>_rejects_<what>`).

use crate::common::nccl::{ranks, Ranks};
use cusched::nccl::ReduceOp;
use cusched::{Error, GpuRef, Result};

/// Runs `op` on rank 0 and asserts it was rejected for `arg` (an argument name, or
/// `!foreign` for a buffer or communicator of another device, `!stale` for a communicator of
/// an earlier device generation) with nothing recorded on any device.
#[track_caller]
fn rejects<T: std::fmt::Debug>(rk: &mut Ranks, arg: &str, op: impl FnOnce(&mut Ranks) -> Result<T>) {
    let before: Vec<_> = rk.gpus.iter().map(|g| g.stats()).map(|s| (s.events, s.waits)).collect();
    let got = op(rk);
    match (&got, arg) {
        (Err(Error::InvalidArgument { arg: a, .. }), _) if *a == arg => {}
        (Err(Error::ForeignDevice { what, .. }), "!foreign") if what.contains("argument") => {}
        (Err(Error::Stale { what, .. }), "!stale") if what.contains("argument `comm`") => {}
        _ => panic!("expected a rejection of `{arg}`, got {got:?}"),
    }
    let after: Vec<_> = rk.gpus.iter().map(|g| g.stats()).map(|s| (s.events, s.waits)).collect();
    assert_eq!(before, after, "a rejected op recorded something");
}

/// Three ranks, and on rank 0 buffers of 6 and 4 elements and a buffer of rank 1's device.
fn setup() -> (Ranks, GpuRef<f32>, GpuRef<f32>, GpuRef<f32>) {
    let rk = ranks(3);
    let (a, b) = (rk.zeros::<f32>(0, 6), rk.zeros::<f32>(0, 4));
    let foreign = rk.zeros::<f32>(1, 6);
    (rk, a, b, foreign)
}

#[test]
fn all_reduce_rejects_bad_buffers_comms_and_ops() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    let c1 = rk.comms[1].clone();
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_reduce(&c0, &a, &b, ReduceOp::Sum));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_reduce(&c0, &a, &a, ReduceOp::Sum));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.all_reduce(&c0, &a, &a.clone(), ReduceOp::PreMulSum(f64::NAN)));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_reduce(&c1, &a, &b, ReduceOp::Sum));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_reduce(&c0, &f, &a, ReduceOp::Sum));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.all_reduce_in_place(&c0, &a, ReduceOp::PreMulSum(f64::INFINITY)));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_reduce_in_place(&c1, &a, ReduceOp::Sum));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_reduce_in_place(&c0, &f, ReduceOp::Sum));
}

#[test]
fn broadcast_rejects_bad_roots_and_buffers() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    rejects(&mut rk, "root", |rk| rk.h[0].nccl()?.broadcast(&c0, Some(&a), &b, 3));
    rejects(&mut rk, "send", |rk| rk.h[0].nccl()?.broadcast(&c0, None, &b, 0));
    rejects(&mut rk, "send", |rk| rk.h[0].nccl()?.broadcast(&c0, Some(&a), &b, 0));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.broadcast(&c0, Some(&a), &a, 0));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.broadcast(&c0, Some(&f), &a, 0));
    rejects(&mut rk, "root", |rk| rk.h[0].nccl()?.broadcast_in_place(&c0, &a, 7));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.broadcast_in_place(&c0, &f, 0));
    let c2 = rk.comms[2].clone();
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.broadcast_in_place(&c2, &a, 0));
}

#[test]
fn reduce_rejects_bad_roots_and_buffers() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    rejects(&mut rk, "root", |rk| rk.h[0].nccl()?.reduce(&c0, &a, Some(&b), ReduceOp::Sum, 3));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.reduce(&c0, &a, None, ReduceOp::Sum, 0));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.reduce(&c0, &a, Some(&b), ReduceOp::Sum, 0));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.reduce(&c0, &a, None, ReduceOp::PreMulSum(f64::NAN), 1));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.reduce(&c0, &f, Some(&a), ReduceOp::Sum, 0));
    rejects(&mut rk, "root", |rk| rk.h[0].nccl()?.reduce_in_place(&c0, &a, ReduceOp::Max, usize::MAX));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.reduce_in_place(&c0, &a, ReduceOp::PreMulSum(f64::NAN), 0));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.reduce_in_place(&c0, &f, ReduceOp::Max, 0));
}

#[test]
fn all_gather_rejects_counts_that_do_not_fit() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    let two = rk.zeros::<f32>(0, 2);
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_gather(&c0, &two, &b));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_gather(&c0, &a, &a));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_gather(&c0, &two, &two));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_gather(&c0, &two, &f));
    rejects(&mut rk, "buf", |rk| rk.h[0].nccl()?.all_gather_in_place(&c0, &b));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_gather_in_place(&c0, &f));
    let c1 = rk.comms[1].clone();
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_gather_in_place(&c1, &a));
}

#[test]
fn reduce_scatter_rejects_counts_that_do_not_fit() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    let two = rk.zeros::<f32>(0, 2);
    rejects(&mut rk, "send", |rk| rk.h[0].nccl()?.reduce_scatter(&c0, &b, &two, ReduceOp::Sum));
    rejects(&mut rk, "send", |rk| rk.h[0].nccl()?.reduce_scatter(&c0, &a, &b, ReduceOp::Sum));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.reduce_scatter(&c0, &a, &two, ReduceOp::PreMulSum(f64::NAN)));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.reduce_scatter(&c0, &f, &two, ReduceOp::Sum));
    rejects(&mut rk, "buf", |rk| rk.h[0].nccl()?.reduce_scatter_in_place(&c0, &b, ReduceOp::Sum));
    rejects(&mut rk, "op", |rk| rk.h[0].nccl()?.reduce_scatter_in_place(&c0, &a, ReduceOp::PreMulSum(f64::NAN)));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.reduce_scatter_in_place(&c0, &f, ReduceOp::Sum));
}

#[test]
fn send_and_recv_reject_bad_peers_and_buffers() {
    let (mut rk, a, _b, f) = setup();
    let (c0, c1) = (rk.comms[0].clone(), rk.comms[1].clone());
    rejects(&mut rk, "peer", |rk| rk.h[0].nccl()?.send(&c0, &a, 3));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.send(&c0, &f, 1));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.send(&c1, &a, 1));
    rejects(&mut rk, "peer", |rk| rk.h[0].nccl()?.recv(&c0, &a, 9));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.recv(&c0, &f, 1));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.recv(&c1, &a, 1));
}

#[test]
fn all_to_all_rejects_parts_that_do_not_fit() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    rejects(&mut rk, "send", |rk| rk.h[0].nccl()?.all_to_all(&c0, &b, &b.clone()));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_to_all(&c0, &a, &b));
    rejects(&mut rk, "recv", |rk| rk.h[0].nccl()?.all_to_all(&c0, &a, &a));
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_to_all(&c0, &a, &f));
}

#[test]
fn all_to_allv_rejects_bad_counts_and_offsets() {
    let (mut rk, a, b, f) = setup();
    let c0 = rk.comms[0].clone();
    let (ok, offs) = ([2, 2, 2], [0, 2, 4]);
    rejects(&mut rk, "send_counts", |rk| {
        rk.h[0].nccl()?.all_to_allv(&c0, &a, &[2, 2], &offs, &b, &[1, 1, 1], &[0, 1, 2])
    });
    rejects(&mut rk, "recv_offsets", |rk| rk.h[0].nccl()?.all_to_allv(&c0, &a, &ok, &offs, &b, &[1, 1, 1], &[0, 1]));
    rejects(&mut rk, "send_offsets", |rk| {
        rk.h[0].nccl()?.all_to_allv(&c0, &a, &ok, &[0, 2, 5], &b, &[1, 1, 1], &[0, 1, 2])
    });
    rejects(&mut rk, "recv_offsets", |rk| {
        rk.h[0].nccl()?.all_to_allv(&c0, &a, &ok, &offs, &b, &[1, 1, usize::MAX], &[0, 1, 2])
    });
    rejects(&mut rk, "!foreign", |rk| rk.h[0].nccl()?.all_to_allv(&c0, &a, &ok, &offs, &f, &ok, &offs));
}

#[test]
fn every_op_rejects_a_communicator_of_an_earlier_generation() {
    let (mut rk, a, _b, _f) = setup();
    let c0 = rk.comms[0].clone();
    rk.gpus[0].advance_generation();
    rejects(&mut rk, "!stale", |rk| rk.h[0].nccl()?.all_reduce_in_place(&c0, &a, ReduceOp::Sum));
    rejects(&mut rk, "!stale", |rk| rk.h[0].nccl()?.broadcast_in_place(&c0, &a, 0));
    rejects(&mut rk, "!stale", |rk| rk.h[0].nccl()?.send(&c0, &a, 1));
}
