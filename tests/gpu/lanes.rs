//! Lanes and completions on a real GPU. Skipped without a GPU unless `CUSCHED_REQUIRE_GPU=1`.

use crate::common::*;
use cusched::cudarc::driver::{LaunchConfig, PushKernelArg};
use cusched::{wait_all, Error, GpuRef, Handles, Kernel, Lane, Result};
use std::sync::Arc;

const SRC: &str = r#"
extern "C" __global__ void add(unsigned long long* acc, unsigned long long v, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    // A plain read-modify-write: two unordered launches on one buffer lose an update.
    if (i < n) acc[i] = acc[i] + v;
}
extern "C" __global__ void square(float* y, const float* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}
"#;

fn add(cx: &mut Handles, k: &Kernel, acc: &GpuRef<u64>, v: u64) -> Result<()> {
    let mut rec = cx.recorder();
    rec.read_write(acc)?;
    rec.launch(cx.device(), |scope| {
        let n = acc.len() as u32;
        // SAFETY: (1) the kernel reads and writes `acc`, as declared, on the launch's stream,
        // enqueued before the closure returns, and no cudarc memory is made; (2) the arguments
        // match `add` and `acc` holds `n` values.
        unsafe {
            let mut b = scope.cuda_stream()?.launch_builder(k.function()?);
            b.arg(acc.cuda_slice()?).arg(&v).arg(&n);
            b.launch(LaunchConfig::for_num_elems(n))
        }
        .map(drop)
        .map_err(|status| Error::Driver { call: "cuLaunchKernel", status })
    })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_cross_lane_stress_100k_jobs_over_shared_buffers() {
    // Additions to shared accumulators commute: the program means commit order, so the
    // submit-order check (which would rightly see one thread's adds land out of submit order
    // across lanes) is off.
    let config = cusched::DeviceConfig { submit_order: cusched::SubmitOrderCheck::Off, ..Default::default() };
    let Some(d) = gpu_with(config) else { return };
    let k = d.compile(SRC, &[]).unwrap().kernel("add").unwrap();
    const THREADS: u64 = 8;
    // 100,000 jobs in all; CUSCHED_STRESS_JOBS scales it down for sanitizer runs, where every
    // launch is instrumented.
    let total: u64 = std::env::var("CUSCHED_STRESS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let jobs_per_thread = total / THREADS;
    const ACCS: usize = 8;
    let lanes: Arc<Vec<Lane>> = Arc::new((0..4).map(|i| d.lane(&format!("stress-{i}")).unwrap()).collect());
    let accs: Arc<Vec<GpuRef<u64>>> =
        Arc::new((0..ACCS).map(|_| d.alloc_zeros::<u64>(d.default_stream(), 256).unwrap()).collect());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lanes, accs, k) = (lanes.clone(), accs.clone(), k.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::seeded(t + 99);
                let mut expected = [0u64; ACCS];
                let mut pending = Vec::new();
                for j in 0..jobs_per_thread {
                    let lane = &lanes[rng.below(4) as usize];
                    let a = rng.below(ACCS as u64) as usize;
                    let v = 1 + (t * jobs_per_thread + j) % 97;
                    expected[a] += v;
                    let (acc, k) = (accs[a].clone(), k.clone());
                    pending.push(lane.submit(move |cx| add(cx, &k, &acc, v)));
                    if pending.len() >= 512 {
                        for r in wait_all(pending.drain(..)) {
                            r.unwrap();
                        }
                    }
                }
                for r in wait_all(pending) {
                    r.unwrap();
                }
                expected
            })
        })
        .collect();
    let mut expected = [0u64; ACCS];
    for t in threads {
        for (e, x) in expected.iter_mut().zip(t.join().unwrap()) {
            *e += x;
        }
    }
    for (a, acc) in accs.iter().enumerate() {
        let v = acc.download(d.default_stream()).unwrap();
        assert!(v.iter().all(|&x| x == expected[a]), "accumulator {a}: {} expected {}", v[0], expected[a]);
    }
    eprintln!("stress: {} waits, {} events, {} events created", d.stats().waits, d.stats().events, d.events_created());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_pipeline_over_three_lanes() {
    let Some(d) = gpu() else { return };
    let k = d.compile(SRC, &[]).unwrap().kernel("square").unwrap();
    let (up, mid, down) = (d.lane("up").unwrap(), d.lane("mid").unwrap(), d.lane("down").unwrap());
    let n = 1 << 18;
    let mut rng = Rng::new();
    let mut results = Vec::new();
    // CUSCHED_PIPELINE_CHUNKS scales the run down for sanitizer runs.
    let chunks: usize = std::env::var("CUSCHED_PIPELINE_CHUNKS").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    for _ in 0..chunks {
        let input: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let host_in = d.host_from_slice(&input).unwrap();
        let x = d.alloc::<f32>(d.default_stream(), n).unwrap();
        let y = d.alloc::<f32>(d.default_stream(), n).unwrap();
        let mut host_out = d.host_from_slice(&vec![f32::NAN; n]).unwrap();
        let xu = x.clone();
        up.submit(move |cx| {
            xu.copy_from_host(cx.stream(), &host_in)?;
            cx.keep(host_in);
            Ok(())
        })
        .wait_committed()
        .unwrap();
        let (k2, ym) = (k.clone(), y.clone());
        mid.submit(move |cx| {
            let mut rec = cx.recorder();
            rec.read(&x)?.write(&ym)?;
            rec.launch(cx.device(), |scope| {
                let n = x.len() as u32;
                // SAFETY: (1) the kernel reads `x` and writes `ym`, as declared, on the launch's
                // stream, enqueued before the closure returns, and no cudarc memory is made; (2)
                // the arguments match `square` and both buffers hold `n` floats.
                unsafe {
                    let mut b = scope.cuda_stream()?.launch_builder(k2.function()?);
                    b.arg(ym.cuda_slice()?).arg(x.cuda_slice()?).arg(&n);
                    b.launch(LaunchConfig::for_num_elems(n))
                }
                .map(drop)
                .map_err(|status| Error::Driver { call: "cuLaunchKernel", status })
            })
        })
        .wait_committed()
        .unwrap();
        results.push((
            input,
            down.submit(move |cx| {
                y.copy_to_host(cx.stream(), &mut host_out)?;
                Ok(host_out)
            }),
        ));
    }
    for (input, c) in results {
        let out = c.wait().unwrap();
        let out = out.read().unwrap();
        for (o, i) in out.iter().zip(&input) {
            assert_eq!(*o, i * i);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_inline_handles_and_callbacks() {
    let Some(d) = gpu() else { return };
    let k = d.compile(SRC, &[]).unwrap().kernel("add").unwrap();
    let s = d.new_stream().unwrap();
    let mut h = cusched::Handles::new(&d, s).unwrap();
    let acc = d.alloc_zeros::<u64>(d.default_stream(), 64).unwrap();
    let mut done = Vec::new();
    for v in 1..=100u64 {
        done.push(h.run(|h| add(h, &k, &acc, v)));
    }
    for r in wait_all(done) {
        r.unwrap();
    }
    assert!(acc.download(s).unwrap().iter().all(|&x| x == 5050));
    let (tx, rx) = std::sync::mpsc::channel();
    let lane = d.lane("cb").unwrap();
    lane.submit(move |cx| add(cx, &k, &acc, 1)).on_complete(move |r| tx.send(r.is_ok()).unwrap());
    assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap());
}
