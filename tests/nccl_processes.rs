//! NCCL across processes on one host, one GPU each: the test starts itself once per rank
//! (as `nvtx_ranges` does), rank 0 makes the unique id and writes it to a temporary file, rank
//! 1 reads it. Runs with NCCL's default transports, with the network transport alone
//! (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`, the path that crosses hosts), and with rank 1
//! killed while its all-reduce is in flight: rank 0's completion must resolve with
//! `Error::Collective` within the communicator's timeout, and its device stay usable.
//!
//! A binary of its own: it needs the `nccl` feature as a whole, and processes of its own.
//! Needs two GPUs and NCCL on the loader path (`. tools/cuda-libs-env`); skipped otherwise,
//! unless `CUSCHED_REQUIRE_GPU=1`. Every process runs with `NCCL_NVLS_ENABLE=0`.
#![cfg(target_os = "linux")]

use cusched::nccl::{CommConfig, Communicator, ReduceOp, UniqueId};
use cusched::{Device, Error, Handles};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RANK: &str = "CUSCHED_NCCL_RANK";
const ID_FILE: &str = "CUSCHED_NCCL_ID_FILE";
const MODE: &str = "CUSCHED_NCCL_MODE";
/// The survivor's communicator timeout in the kill test.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What a rank process does: make its communicator, run the collectives, report.
fn child(rank: usize, id_file: &Path, mode: &str) {
    let device = Device::open(rank).expect("the rank's GPU");
    let id = if rank == 0 {
        let id = UniqueId::new().expect("NCCL");
        id.write_file(id_file).unwrap();
        id
    } else {
        UniqueId::read_file(id_file, Duration::from_secs(60)).unwrap()
    };
    // "kill" runs blocking communicators, "kill-nonblocking" non-blocking ones.
    let config = CommConfig::default().with_timeout(TIMEOUT).with_blocking(mode != "kill-nonblocking");
    let comm = Communicator::init_rank(&device, &id, 2, rank, &config).unwrap();
    assert!(comm.capabilities().spans_processes);
    let mut h = Handles::new(&device, device.new_stream().unwrap()).unwrap();
    let n = 1 << 20;
    let x = device.upload(h.stream(), &vec![(rank + 1) as f32; n]).unwrap();
    h.nccl().unwrap().all_reduce_in_place(&comm, &x, ReduceOp::Sum).unwrap().wait().unwrap();
    assert!(x.download(h.stream()).unwrap().iter().all(|&v| v == 3.0));
    let g = device.alloc_zeros::<i32>(h.stream(), 2 * 1001).unwrap();
    let mine = device.upload(h.stream(), &vec![rank as i32 + 7; 1001]).unwrap();
    h.nccl().unwrap().all_gather(&comm, &mine, &g).unwrap().wait().unwrap();
    let got = g.download(h.stream()).unwrap();
    assert!(got[..1001].iter().all(|&v| v == 7) && got[1001..].iter().all(|&v| v == 8));
    if !mode.starts_with("kill") {
        println!("OK");
        return;
    }
    // Rank 1 enqueues a large all-reduce, says so, and waits to be killed; rank 0 enqueues
    // its part once rank 1 is dead.
    let big = device.alloc_zeros::<f32>(h.stream(), 64 << 20).unwrap();
    if rank == 1 {
        let _pending = h.nccl().unwrap().all_reduce_in_place(&comm, &big, ReduceOp::Sum).unwrap();
        println!("ENQUEUED");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let start = Instant::now();
    let c = h.nccl().unwrap().all_reduce_in_place(&comm, &big, ReduceOp::Sum);
    let outcome = c.and_then(|c| c.wait());
    let took = start.elapsed();
    match outcome {
        Err(Error::Collective { fault, .. }) => println!("FAULT {fault:?} after {took:?}"),
        other => panic!("expected the collective to fail, got {other:?}"),
    }
    assert!(took < TIMEOUT + Duration::from_secs(30), "the survivor waited {took:?}");
    assert!(comm.fault().is_some());
    // The device goes on.
    let y = device.upload(h.stream(), &[5u32; 16]).unwrap();
    assert_eq!(y.download(h.stream()).unwrap(), [5; 16]);
    println!("OK");
}

/// Starts rank `rank` of a test with `env` added.
fn spawn(test: &str, rank: usize, id_file: &Path, mode: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(RANK, rank.to_string())
        .env(ID_FILE, id_file)
        .env(MODE, mode)
        .env("NCCL_NVLS_ENABLE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("the test binary starts again")
}

/// Runs the current test as a rank process if this is one; returns whether it was.
fn as_child() -> bool {
    let Ok(rank) = std::env::var(RANK) else { return false };
    // Set before NCCL loads, on the test's only thread.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let id_file = PathBuf::from(std::env::var(ID_FILE).unwrap());
    child(rank.parse().unwrap(), &id_file, &std::env::var(MODE).unwrap_or_default());
    true
}

/// Whether this machine can run the test (two GPUs); prints why not.
fn two_gpus() -> bool {
    // The parent loads no NCCL, but keeps the rule: every process of the test runs without
    // NVLink multicast.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    match Device::open(1) {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("CUSCHED_REQUIRE_GPU=1 but there are not two GPUs: {e}");
            }
            eprintln!("skipping the two-process NCCL test: {e}");
            false
        }
    }
}

fn id_file(test: &str) -> PathBuf {
    let f = std::env::temp_dir().join(format!("cusched-{test}-{}.id", std::process::id()));
    let _ = std::fs::remove_file(&f);
    f
}

/// Both ranks in their own processes, with `env`; both must print OK.
fn two_processes(test: &str, env: &[(&str, &str)]) {
    if as_child() || !two_gpus() {
        return;
    }
    let file = id_file(test);
    let kids: Vec<Child> = (0..2).map(|r| spawn(test, r, &file, "", env)).collect();
    for (r, kid) in kids.into_iter().enumerate() {
        let out = kid.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("OK"), "rank {r} failed: {stdout}");
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn nccl_two_processes_all_reduce_and_all_gather() {
    two_processes("nccl_two_processes_all_reduce_and_all_gather", &[]);
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn nccl_two_processes_over_the_network_transport() {
    two_processes(
        "nccl_two_processes_over_the_network_transport",
        &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
    );
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn nccl_a_killed_rank_fails_the_survivor_within_the_timeout() {
    const TEST: &str = "nccl_a_killed_rank_fails_the_survivor_within_the_timeout";
    if as_child() || !two_gpus() {
        return;
    }
    let network = &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")][..];
    let runs = [("kill", &[][..]), ("kill", network), ("kill-nonblocking", &[][..]), ("kill-nonblocking", network)];
    for (mode, env) in runs {
        let file = id_file(TEST);
        let mut kids: Vec<Child> = (0..2).map(|r| spawn(TEST, r, &file, mode, env)).collect();
        // Rank 1 says when its all-reduce is in flight; then it is killed, and rank 0 told to
        // enqueue its part.
        let mut lines = BufReader::new(kids[1].stdout.take().unwrap()).lines();
        let enqueued = lines.by_ref().map_while(|l| l.ok()).any(|l| l.contains("ENQUEUED"));
        assert!(enqueued, "rank 1 never enqueued its all-reduce");
        kids[1].kill().unwrap();
        let _ = kids[1].wait();
        {
            use std::io::Write;
            let stdin = kids[0].stdin.as_mut().unwrap();
            writeln!(stdin, "go").unwrap();
        }
        let survivor = kids.remove(0).wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&survivor.stdout);
        eprintln!("survivor ({mode}, {env:?}): {stdout}");
        assert!(survivor.status.success() && stdout.contains("FAULT") && stdout.contains("OK"), "rank 0: {stdout}");
        let _ = std::fs::remove_file(&file);
    }
}
