//! The `nvtx` feature emits one balanced, named range per op. Runs the ops in a child process
//! whose `LD_LIBRARY_PATH` holds a stand-in `libnvToolsExt.so.1` (tools/nvtx-probe) that logs
//! every push and pop; the dynamic loader reads that path only at process start. It builds the
//! stand-in with cargo, so it runs where the crate is built (CI runs it), and the GPU bundle's
//! run.sh leaves it out.
//!
//! A binary of its own (not a module of `sim`): it starts itself as the child process, and it
//! needs the `nvtx` feature as a whole (Cargo.toml's `required-features`).
#![cfg(target_os = "linux")]

use cusched::{Device, LaunchRecorder, SimConfig};
use std::path::PathBuf;
use std::process::Command;

const CHILD: &str = "CUSCHED_NVTX_CHILD";

/// What the child process runs: three ops, the middle one a named user launch.
fn run_ops() {
    let device = Device::sim(SimConfig::default()).unwrap();
    let s = device.default_stream();
    let buf = device.upload(s, &[1u32, 2, 3]).unwrap();
    let mut rec = LaunchRecorder::new_strict(s).named("triple");
    rec.read_write(&buf).unwrap();
    let data = buf.sim_data().unwrap();
    rec.launch(&device, move |scope| scope.sim_kernel(move || data.lock().iter_mut().for_each(|x| *x *= 3))).unwrap();
    assert_eq!(buf.download(s).unwrap(), vec![3, 6, 9]);
}

#[test]
fn every_op_pushes_and_pops_one_named_range() {
    if std::env::var_os(CHILD).is_some() {
        run_ops();
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target/nvtx-probe");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(root.join("tools/nvtx-probe/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(built.success(), "building the NVTX stand-in failed");
    let lib_dir = target.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::fs::copy(target.join("release/libnvToolsExt.so"), lib_dir.join("libnvToolsExt.so.1")).unwrap();
    let log = target.join(format!("ranges-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "every_op_pushes_and_pops_one_named_range", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("NVTX_PROBE_OUT", &log)
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_string).collect();
    let _ = std::fs::remove_file(&log);
    let pushes: Vec<&str> = lines.iter().filter(|l| *l != "<pop>").map(String::as_str).collect();
    assert_eq!(pushes, ["memory::alloc", "user::triple", "memory::download"]);
    assert_eq!(lines.iter().filter(|l| *l == "<pop>").count(), 3, "every range is closed: {lines:?}");
    // Ranges nest nothing here: each push is followed by its pop.
    for pair in lines.chunks(2) {
        assert_eq!(pair[1], "<pop>", "{lines:?}");
    }
}
