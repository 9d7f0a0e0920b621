//! Tracing on a real GPU: GPU spans from timing events, the Chrome-trace timeline of a
//! three-lane pipeline, and the hooks' view of library ops. Skipped without a GPU unless
//! `CUSCHED_REQUIRE_GPU=1`.

use crate::common::*;
use cusched::cudarc::driver::LaunchConfig;
use cusched::{Timeline, TraceOptions};
use std::time::Duration;

const SRC: &str = r#"
extern "C" __global__ void spin(float* y, const float* x, unsigned n, unsigned rounds) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; for (unsigned k = 0; k < rounds; ++k) v = v * 0.999f + 0.001f; y[i] = v; }
}
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_timeline_of_three_lanes_is_well_formed_and_gpu_spans_are_plausible() {
    let Some(d) = gpu() else { return };
    let k = d.compile(SRC, &[]).unwrap().kernel("spin").unwrap();
    let timeline = Timeline::new();
    d.set_trace(timeline.clone(), TraceOptions { gpu_timing: true }).unwrap();
    let names = ["upload", "compute", "download"];
    let lanes: Vec<_> = names.iter().map(|n| d.lane(n).unwrap()).collect();
    let n = 1usize << 20;
    let mut done = Vec::new();
    for _ in 0..8 {
        let x = d.alloc_zeros::<f32>(d.default_stream(), n).unwrap();
        let y = d.alloc_zeros::<f32>(d.default_stream(), n).unwrap();
        let host = d.host_from_slice(&vec![1.0f32; n]).unwrap();
        let xu = x.clone();
        lanes[0].submit(move |cx| xu.copy_from_host(cx.stream(), &host)).wait_committed().unwrap();
        let (k2, xm, ym) = (k.clone(), x.clone(), y.clone());
        lanes[1]
            .submit(move |cx| {
                let launch = cx
                    .launch(&k2, LaunchConfig::for_num_elems(n as u32))
                    .write(&ym)
                    .read(&xm)
                    .scalar(n as u32)
                    .scalar(2000u32);
                // SAFETY: 1. `spin` writes y and reads x, as declared; 2. it touches indices
                // below n, the length of both; 3. the parameters are two float pointers and two
                // unsigned, as declared.
                unsafe { launch.enqueue() }.map(drop)
            })
            .wait_committed()
            .unwrap();
        done.push(lanes[2].submit(move |cx| y.download(cx.stream())));
    }
    for c in done {
        assert_eq!(c.wait().unwrap().len(), n);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while timeline.spans().iter().filter(|s| s.track == cusched::TrackKind::Gpu).count() < 3 * 8
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let counts = timeline::check_chrome_trace(&timeline.to_chrome_json(), &names);
    eprintln!("tracks: {counts:?}");
    let spins: Vec<_> =
        timeline.spans().into_iter().filter(|s| s.track == cusched::TrackKind::Gpu && s.op == "spin").collect();
    assert_eq!(spins.len(), 8);
    for s in &spins {
        // 2000 dependent FMAs per element: tens of microseconds at least, well under a second.
        assert!(s.duration > Duration::from_micros(10) && s.duration < Duration::from_secs(1), "{s:?}");
        assert_eq!(s.library, "kernel");
    }
}

#[cfg(feature = "cublas")]
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_library_ops_reach_the_hooks_with_their_names() {
    let Some(d) = gpu() else { return };
    let timeline = Timeline::new();
    d.set_trace(timeline.clone(), TraceOptions { gpu_timing: true }).unwrap();
    let s = d.new_stream().unwrap();
    let m = 256;
    let (a, b, c) = (
        d.alloc_zeros::<f32>(s, m * m).unwrap(),
        d.alloc_zeros::<f32>(s, m * m).unwrap(),
        d.alloc_zeros::<f32>(s, m * m).unwrap(),
    );
    let mut h = cusched::Handles::new(&d, s).unwrap();
    h.blas().unwrap().gemm(&cusched::blas::Gemm::new(m, m, m, &a, &b, &c)).unwrap().wait().unwrap();
    d.synchronize(s).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !timeline.spans().iter().any(|s| s.track == cusched::TrackKind::Gpu && s.op == "gemm")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let spans = timeline.spans();
    assert!(
        spans.iter().any(|s| s.library == "cuBLAS" && s.op == "gemm" && s.track == cusched::TrackKind::Gpu),
        "{spans:?}"
    );
}
