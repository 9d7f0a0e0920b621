//! NCCL groups on one GPU: one thread drives a one-rank communicator on each of two contexts of
//! GPU 0 (`Device::open` and `Device::open_isolated`) through `nccl::group`, as it drives the
//! ranks of several GPUs: every op of the group is preflighted (fenced on its own stream)
//! before any is enqueued, the ops of both communicators are one NCCL group, each op is one
//! recorded launch, and a group that fails enqueues nothing. A one-rank collective is a copy
//! (or a scaling, for PreMulSum), so every result is known without a peer. Put NCCL on the
//! loader path first: `. tools/cuda-libs-env`.
//!
//! These tests also run the group path on any one-GPU machine, and `bench-nccl` measures it
//! there the same way.

use crate::common::nccl::*;
use cusched::half::bf16;
use cusched::nccl::{self, CommConfig, Communicator, ReduceOp};
use cusched::{Device, DeviceConfig, Error, GpuRef, Handles};
use std::time::Duration;

/// Two contexts of GPU 0, a one-rank communicator on each (`config`, a 60 s timeout) and a
/// stream per context; every op runs inside a group.
fn two_contexts(config: CommConfig) -> Option<Ranks> {
    // Set before NCCL is loaded by any test of this binary, and every test sets the same value.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let opened = Device::open(0).and_then(|a| Ok(vec![a, Device::open_isolated(0, DeviceConfig::default())?]));
    let gpus = match opened {
        Ok(g) => g,
        Err(e) if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("CUSCHED_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            eprintln!("skipping NCCL GPU test: {e}");
            return None;
        }
    };
    let config = config.with_timeout(Duration::from_secs(60));
    let comms: Vec<Communicator> =
        gpus.iter().map(|g| Communicator::init_all(std::slice::from_ref(g), &config).unwrap().remove(0)).collect();
    let h = gpus.iter().map(|g| Handles::new(g, g.new_stream().unwrap()).unwrap()).collect();
    Some(Ranks { gpus, comms, h, grouped: true })
}

/// The kinds of op [`group_of`] runs, each on both communicators. Not sends and receives: on
/// a context that is not the GPU's primary one, NCCL 2.28.9 fails a send to the rank itself
/// inside `ncclGroupEnd` (CUDA's "invalid resource handle"); `nccl_one_rank` runs them in a
/// group on the primary context.
const KINDS: [&str; 4] = ["all_reduce", "premul_sum", "broadcast", "all_gather"];

/// Runs the ops of `kinds` (of [`KINDS`]) on both communicators of `rk` in one group, several
/// on each: an out-of-place sum (f32), an in-place PreMulSum (i32), a broadcast from the lone
/// root (bf16), an all-gather (u8). Checks every output; an error names the op that failed.
fn group_of(rk: &mut Ranks, kinds: &[&str]) -> Result<(), String> {
    let Ranks { gpus, comms, h, .. } = rk;
    let up = |c: usize, what: &str| -> Result<(), String> { Err(format!("context {c}: {what}")) };
    let mut bufs = Vec::new();
    for (c, (g, h)) in gpus.iter().zip(h.iter()).enumerate() {
        let (s, v) = (h.stream(), (c + 1) as f32);
        let x: GpuRef<f32> = g.upload(s, &[v, 2.0 * v, 3.0 * v]).map_err(|e| e.to_string())?;
        let y: GpuRef<f32> = g.alloc_zeros(s, 3).map_err(|e| e.to_string())?;
        let k: GpuRef<i32> = g.upload(s, &[1, -2, 3 + c as i32]).map_err(|e| e.to_string())?;
        let b: GpuRef<bf16> = g.upload(s, &[bf16::from_f32(v), bf16::from_f32(-0.5)]).map_err(|e| e.to_string())?;
        let u: GpuRef<u8> = g.upload(s, &[7, 8 + c as u8]).map_err(|e| e.to_string())?;
        let gathered: GpuRef<u8> = g.alloc_zeros(s, 2).map_err(|e| e.to_string())?;
        bufs.push((x, y, k, b, u, gathered));
    }
    let done = nccl::group(|| {
        let mut done = Vec::new();
        for ((h, c), (x, y, k, b, u, gathered)) in h.iter_mut().zip(comms.iter()).zip(&bufs) {
            let n = h.nccl()?;
            for kind in kinds {
                match *kind {
                    "all_reduce" => done.push(n.all_reduce(c, x, y, ReduceOp::Sum)?),
                    "premul_sum" => done.push(n.all_reduce_in_place(c, k, ReduceOp::PreMulSum(3.0))?),
                    "broadcast" => done.push(n.broadcast_in_place(c, b, 0)?),
                    "all_gather" => done.push(n.all_gather(c, u, gathered)?),
                    other => panic!("no op kind {other}"),
                }
            }
        }
        Ok(done)
    })
    .map_err(|e| e.to_string())?;
    for r in cusched::wait_all(done) {
        r.map_err(|e| e.to_string())?;
    }
    for (c, ((_, y, k, b, _, gathered), h)) in bufs.iter().zip(h.iter()).enumerate() {
        let (s, v) = (h.stream(), (c + 1) as f32);
        for kind in kinds {
            let ok = match *kind {
                "all_reduce" => y.download(s).map_err(|e| e.to_string())? == [v, 2.0 * v, 3.0 * v],
                "premul_sum" => k.download(s).map_err(|e| e.to_string())? == [3, -6, 3 * (3 + c as i32)],
                "broadcast" => b.download(s).map_err(|e| e.to_string())? == [bf16::from_f32(v), bf16::from_f32(-0.5)],
                _ => gathered.download(s).map_err(|e| e.to_string())? == [7, 8 + c as u8],
            };
            if !ok {
                up(c, &format!("{kind} computed a wrong result"))?;
            }
        }
    }
    Ok(())
}

/// Each kind of op alone in a group over both communicators, then all of them in one group
/// (several ops on each communicator), on blocking and non-blocking communicators.
#[test]
#[ignore = "needs a CUDA GPU"]
fn one_group_runs_the_ops_of_communicators_on_two_contexts() {
    for blocking in [true, false] {
        let config = CommConfig::default().with_blocking(blocking);
        let mut failed = Vec::new();
        for kind in KINDS {
            let Some(mut rk) = two_contexts(config.clone()) else { return };
            if let Err(e) = group_of(&mut rk, &[kind]) {
                failed.push(format!("{kind}: {e}"));
            }
        }
        assert!(failed.is_empty(), "blocking {blocking}: {failed:#?}");
        let Some(mut rk) = two_contexts(config) else { return };
        group_of(&mut rk, &KINDS).unwrap();
    }
}

/// Each context's input is written by a slow kernel on another stream of that context; the
/// group's all-reduce of it, declared as a read, waits for both kernels.
#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "nvrtc")]
fn a_group_over_two_contexts_waits_for_slow_kernels_on_other_streams() {
    use crate::common::slow::{fill, kernels, N, SLOW};
    let Some(rk) = two_contexts(CommConfig::default()) else { return };
    let Ranks { gpus, comms, mut h, .. } = rk;
    let k: Vec<_> = gpus.iter().map(kernels).collect();
    for round in 0..3 {
        let x: Vec<GpuRef<f32>> = gpus.iter().map(|g| g.alloc_zeros(g.default_stream(), N).unwrap()).collect();
        let y: Vec<GpuRef<f32>> = gpus.iter().map(|g| g.alloc_zeros(g.default_stream(), N).unwrap()).collect();
        for (c, g) in gpus.iter().enumerate() {
            let v = (10 * round + c + 1) as f32;
            fill(g, &k[c], g.default_stream(), &x[c], v, SLOW).unwrap();
        }
        let done =
            nccl::group(|| (0..2).map(|c| h[c].nccl()?.all_reduce(&comms[c], &x[c], &y[c], ReduceOp::Sum)).collect())
                .unwrap();
        wait(done);
        for (c, h) in h.iter().enumerate() {
            let v = (10 * round + c + 1) as f32;
            let got = y[c].download(h.stream()).unwrap();
            assert!(got.iter().all(|&e| e == v), "round {round}, context {c}: {:?}", &got[..4]);
        }
    }
}

/// A group whose closure fails (here, an op it rejects after two were queued) enqueues none of
/// its ops: their completions resolve with the closure's error and their outputs stay as they
/// were. The communicators go on: the next group runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_group_whose_closure_fails_enqueues_nothing_and_its_ops_resolve_with_the_error() {
    let Some(rk) = two_contexts(CommConfig::default()) else { return };
    let Ranks { gpus, comms, mut h, .. } = rk;
    let x: Vec<GpuRef<f32>> = gpus.iter().zip(&h).map(|(g, h)| g.upload(h.stream(), &[1.0, 2.0]).unwrap()).collect();
    let y: Vec<GpuRef<f32>> = gpus.iter().zip(&h).map(|(g, h)| g.alloc_zeros(h.stream(), 2).unwrap()).collect();
    let short = gpus[0].alloc_zeros::<f32>(h[0].stream(), 1).unwrap();
    let mut queued = Vec::new();
    let failed = nccl::group(|| {
        for c in 0..2 {
            queued.push(h[c].nccl()?.all_reduce(&comms[c], &x[c], &y[c], ReduceOp::Sum)?);
        }
        // A receive buffer of the wrong length: rejected at the call.
        h[0].nccl()?.all_reduce(&comms[0], &x[0], &short, ReduceOp::Sum)
    });
    let e = failed.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!(queued.len(), 2);
    for q in queued {
        let got = q.wait().unwrap_err();
        assert_eq!(got.to_string(), e.to_string());
    }
    for c in 0..2 {
        gpus[c].synchronize(h[c].stream()).unwrap();
        assert_eq!(y[c].download(h[c].stream()).unwrap(), [0.0, 0.0], "context {c}");
    }
    let done =
        nccl::group(|| (0..2).map(|c| h[c].nccl()?.all_reduce(&comms[c], &x[c], &y[c], ReduceOp::Sum)).collect())
            .unwrap();
    wait(done);
    for c in 0..2 {
        assert_eq!(y[c].download(h[c].stream()).unwrap(), [1.0, 2.0], "context {c}");
    }
}
