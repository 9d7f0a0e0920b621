//! Graphs on the GPU: a mixed graph (a cuBLAS GEMM, a cuFFT transform, a typed kernel, a copy)
//! replayed 100 times with rebinding, equal to the same ops run eagerly; replays fenced against
//! eager writers and readers on another stream (slow kernels: a missing fence shows as wrong
//! data); fork and join over three branches; ops that cannot be recorded.

use crate::common::slow::{self, Kernels, SLOW};
use crate::common::*;
use cusched::blas::{Gemm, Vector};
use cusched::cudarc::driver::LaunchConfig;
use cusched::fft::{Direction, FftLayout};
use cusched::{Complex, Device, Error, GpuRef, Graph, Handles, Kernel, StreamId};

const MIX: &str = r#"
extern "C" __global__ void mix(float* d, const float* c, const float2* f, float s, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = s * c[i] + f[i].x - f[i].y;
}
"#;

/// The mixed pipeline's buffers.
#[derive(Clone)]
struct Bufs {
    a: GpuRef<f32>,
    b: GpuRef<f32>,
    c: GpuRef<f32>,
    x: GpuRef<Complex<f32>>,
    f: GpuRef<Complex<f32>>,
    d: GpuRef<f32>,
    e: GpuRef<f32>,
}

const M: usize = 32;

/// Where the pipeline's ops go: three branches of a recording, or three eager streams.
trait Branches {
    fn handles(&mut self, i: usize) -> cusched::Result<&mut Handles>;
    fn stream(&mut self, i: usize) -> cusched::Result<StreamId>;
}

impl Branches for cusched::Recording<'_> {
    fn handles(&mut self, i: usize) -> cusched::Result<&mut Handles> {
        cusched::Recording::handles(self, i)
    }
    fn stream(&mut self, i: usize) -> cusched::Result<StreamId> {
        cusched::Recording::stream(self, i)
    }
}

struct Eager(Vec<Handles>);

impl Branches for Eager {
    fn handles(&mut self, i: usize) -> cusched::Result<&mut Handles> {
        Ok(&mut self.0[i])
    }
    fn stream(&mut self, i: usize) -> cusched::Result<StreamId> {
        Ok(self.0[i].stream())
    }
}

/// GEMM c = a·b (branch 0), FFT f = fft(x) (branch 1), d = 0.5 c + re f - im f (branch 0),
/// e = d (branch 2): the same calls eagerly and inside a recording.
fn pipeline(on: &mut impl Branches, mix: &Kernel, v: &Bufs) -> cusched::Result<()> {
    on.handles(0)?.blas()?.gemm(&Gemm::new(M, M, M, &v.a, &v.b, &v.c))?;
    on.handles(1)?.fft()?.c2c(&FftLayout::d1(M * M), &v.x, &v.f, Direction::Forward)?;
    let n = (M * M) as u32;
    let launch = on
        .handles(0)?
        .launch(mix, LaunchConfig::for_num_elems(n))
        .write(&v.d)
        .read(&v.c)
        .read(&v.f)
        .scalar(0.5f32)
        .scalar(n);
    // SAFETY: `mix` reads c and f and writes d, n elements each, as declared.
    unsafe { launch.enqueue() }?;
    let s2 = on.stream(2)?;
    v.e.copy_from(s2, &v.d)
}

fn bufs(d: &Device, s: StreamId, rng: &mut Rng) -> Bufs {
    let r = |rng: &mut Rng| (0..M * M).map(|_| rng.f32() - 0.5).collect::<Vec<f32>>();
    let (a, b) = (r(rng), r(rng));
    let x: Vec<Complex<f32>> = (0..M * M).map(|_| Complex { re: rng.f32() - 0.5, im: rng.f32() - 0.5 }).collect();
    Bufs {
        a: d.upload(s, &a).unwrap(),
        b: d.upload(s, &b).unwrap(),
        c: d.alloc_zeros(s, M * M).unwrap(),
        x: d.upload(s, &x).unwrap(),
        f: d.alloc_zeros(s, M * M).unwrap(),
        d: d.alloc_zeros(s, M * M).unwrap(),
        e: d.alloc_zeros(s, M * M).unwrap(),
    }
}

fn close(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_mixed_graph_replays_as_the_eager_ops_over_100_replays_with_rebinding() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mix = d.compile(MIX, &[]).unwrap().kernel("mix").unwrap();
    let mut rng = Rng::new();
    let v = bufs(&d, s, &mut rng);
    // The eager twin: its own buffers, the same inputs.
    let mut eager = Eager((0..3).map(|_| Handles::new(&d, d.new_stream().unwrap()).unwrap()).collect());
    let (es0, es1, es2) = (eager.0[0].stream(), eager.0[1].stream(), eager.0[2].stream());
    let w = bufs(&d, s, &mut rng);
    // The GEMM's right operand stays as it is: both sides get the same.
    w.b.copy_from(s, &v.b).unwrap();

    let (vr, mixr) = (v.clone(), mix.clone());
    let graph = Graph::record(&d, move |rec| pipeline(rec, &mixr, &vr)).unwrap();
    assert_eq!(graph.ops(), 4);
    let mut exec = graph.instantiate().unwrap();
    let mut a2 = d.alloc_zeros::<f32>(s, M * M).unwrap();
    for round in 0..100 {
        let a: Vec<f32> = (0..M * M).map(|_| rng.f32() - 0.5).collect();
        let x: Vec<Complex<f32>> = (0..M * M).map(|_| Complex { re: rng.f32(), im: rng.f32() }).collect();
        // Every tenth round the GEMM's left operand moves to another buffer.
        let a_now = if round % 10 == 9 {
            let fresh = d.upload(s, &a).unwrap();
            exec.rebind(&a2, &fresh).or_else(|_| exec.rebind(&v.a, &fresh)).unwrap();
            a2 = fresh.clone();
            fresh
        } else {
            let cur = if round >= 9 { a2.clone() } else { v.a.clone() };
            cur.copy_from_slice(s, &a).unwrap();
            cur
        };
        v.x.copy_from_slice(s, &x).unwrap();
        exec.replay(s).unwrap();
        w.a.copy_from_slice(es0, &a).unwrap();
        w.x.copy_from_slice(es1, &x).unwrap();
        pipeline(&mut eager, &mix, &w).unwrap();
        let flat = |b: &GpuRef<Complex<f32>>, st| {
            b.download(st).unwrap().iter().flat_map(|z| [z.re, z.im]).collect::<Vec<f32>>()
        };
        close(&v.c.download(s).unwrap(), &w.c.download(es2).unwrap(), &format!("round {round}: the GEMM's c"));
        close(&flat(&v.f, s), &flat(&w.f, es2), &format!("round {round}: the FFT's f"));
        close(&v.d.download(s).unwrap(), &w.d.download(es2).unwrap(), &format!("round {round}: the kernel's d"));
        close(&v.e.download(s).unwrap(), &w.e.download(es2).unwrap(), &format!("round {round}: the copy's e"));
        drop(a_now);
    }
    d.shutdown().unwrap();
}

/// x → (y = x on branch 1, z = x on branch 2, both slow) → w = y then += z (branch 0).
fn fork_join(d: &Device, k: &std::sync::Arc<Kernels>, x: &GpuRef<f32>, y: &GpuRef<f32>, z: &GpuRef<f32>) -> Graph {
    let (k, x, y, z) = (k.clone(), x.clone(), y.clone(), z.clone());
    Graph::record(d, move |rec| {
        let (b0, b1, b2) = (rec.stream(0)?, rec.stream(1)?, rec.stream(2)?);
        let dev = rec.device().clone();
        slow::add(&dev, &k, b0, &x, 1.0, SLOW / 4)?;
        slow::copy(&dev, &k, b1, &y, &x, SLOW / 4)?;
        slow::copy(&dev, &k, b2, &z, &x, SLOW / 4)?;
        slow::add(&dev, &k, b0, &x, 1.0, 0)?;
        slow::add(&dev, &k, b1, &y, 1.0, SLOW / 4)?;
        slow::add(&dev, &k, b2, &z, 2.0, SLOW / 4)
    })
    .unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_fork_and_join_over_three_branches_follow_the_declared_uses() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let k = std::sync::Arc::new(slow::kernels(&d));
    let x = d.upload(s, &vec![0.0f32; slow::N]).unwrap();
    let (y, z) = (d.alloc_zeros::<f32>(s, slow::N).unwrap(), d.alloc_zeros::<f32>(s, slow::N).unwrap());
    let exec = fork_join(&d, &k, &x, &y, &z).instantiate().unwrap();
    for round in 0..5 {
        exec.replay(s).unwrap();
        let base = 2.0 * round as f32;
        // The copies read x after the first add and before the second (which must wait for both).
        assert!(slow::all_eq(&y.download(s).unwrap(), base + 2.0), "round {round}: y");
        assert!(slow::all_eq(&z.download(s).unwrap(), base + 3.0), "round {round}: z");
        assert!(slow::all_eq(&x.download(s).unwrap(), base + 2.0), "round {round}: x");
    }
    d.shutdown().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_replay_and_eager_work_on_another_stream_are_fenced_both_ways() {
    let Some(d) = gpu() else { return };
    let (s, eager) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let k = std::sync::Arc::new(slow::kernels(&d));
    let x = d.upload(s, &vec![0.0f32; slow::N]).unwrap();
    let y = d.alloc_zeros::<f32>(s, slow::N).unwrap();
    let (kr, xr, yr) = (k.clone(), x.clone(), y.clone());
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        // Reads x only after spinning: an eager writer not fenced before it would be seen
        // half-done, and one not fenced after it would overwrite x first.
        slow::copy(&rec.device().clone(), &kr, b, &yr, &xr, SLOW)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    for round in 1..=3 {
        let v = round as f32;
        // The eager writer spins before writing: the replay must wait for it.
        slow::fill(&d, &k, eager, &x, v, SLOW).unwrap();
        exec.replay(s).unwrap();
        // And the next eager writer must wait for the replay's (slow) read.
        slow::fill(&d, &k, eager, &x, -v, 0).unwrap();
        assert!(slow::all_eq(&y.download(eager).unwrap(), v), "round {round}: the replay read the wrong x");
    }
    d.shutdown().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ops_that_cannot_be_recorded_fail_typed_and_leave_nothing_capturing() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let x = d.upload(s, &[1.0f32; 16]).unwrap();
    let xr = x.clone();
    let err = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        rec.handles(0)?.blas()?.scal(16, 2.0f32, Vector::from(&xr))?;
        xr.download(b).map(drop)
    })
    .unwrap_err();
    assert!(matches!(err, Error::Recording { .. }), "{err}");
    let xr = x.clone();
    let err =
        Graph::record(&d, move |rec| rec.handles(0)?.blas()?.dot(16, Vector::from(&xr), Vector::from(&xr)).map(drop))
            .unwrap_err();
    assert!(matches!(err, Error::Recording { .. }), "{err}");
    // Eager work on the device goes on, and the buffer was never touched by a recording.
    assert_eq!(x.download(s).unwrap(), vec![1.0; 16]);
    let xr = x.clone();
    let exec = Graph::record(&d, move |rec| rec.handles(0)?.blas()?.scal(16, 3.0f32, Vector::from(&xr)).map(drop))
        .unwrap()
        .instantiate()
        .unwrap();
    exec.replay(s).unwrap();
    exec.replay(s).unwrap().wait().unwrap();
    assert_eq!(x.download(s).unwrap(), vec![9.0; 16]);
    d.shutdown().unwrap();
}

/// An op whose capture the driver invalidates fails the recording with `Error::Recording`, at
/// the top level and inside a loop's body, and the failed recording is let go of with the
/// process and the device working. The driver destroys the graph it was capturing into when
/// it invalidates a capture: the recording then destroyed that graph again (top level), or
/// the loop's parent graph, whose WHILE node's body the driver had taken, and the process died
/// of SIGSEGV in `cuGraphDestroy` (the graph tests, run concurrently, hit it through cuBLAS's
/// first launch of a kernel inside a capture). Here a pinned host allocation, which a capture
/// forbids, made inside the op's launch closure invalidates it (each of a new size, so that
/// the host cache has none to hand out).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capture_the_driver_invalidates_fails_the_recording_and_the_process_goes_on() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let x = d.upload(s, &[1.0f32; 16]).unwrap();
    for (round, in_loop) in [(0usize, false), (1, true), (2, false), (3, true)] {
        let (xr, dd) = (x.clone(), d.clone());
        let len = (1 << 20) + 4096 * round + 7;
        // Declares x read-write and, while its capture is open, allocates pinned host memory.
        let invalidating = move |rec: &mut cusched::Recording<'_>| -> cusched::Result<()> {
            let mut launch = cusched::LaunchRecorder::new_strict(rec.stream(0)?);
            launch.read_write(&xr)?;
            let dd = dd.clone();
            launch.launch(rec.device(), move |_| dd.alloc_host::<f32>(len).map(drop).or(Ok(())))
        };
        let recorded =
            Graph::record(
                &d,
                move |rec| {
                    if in_loop {
                        rec.while_loop(|body, _| invalidating(body))
                    } else {
                        invalidating(rec)
                    }
                },
            );
        assert!(matches!(recorded, Err(Error::Recording { .. })), "round {round}: {:?}", recorded.err());
    }
    // The device goes on: eager work, and a new recording replayed.
    x.copy_from_slice(s, &[2.0; 16]).unwrap();
    let y = d.alloc_zeros::<f32>(s, 16).unwrap();
    let (xr, yr) = (x.clone(), y.clone());
    let exec = Graph::record(&d, move |rec| yr.copy_from(rec.stream(0)?, &xr)).unwrap().instantiate().unwrap();
    exec.replay(s).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), vec![2.0; 16]);
    d.shutdown().unwrap();
}

/// cuBLAS handles made and dropped on one thread while another records graphs of cuBLAS ops on
/// the same device: `cublasDestroy` synchronizes the device, which fails ("operation not
/// permitted when stream is capturing") and invalidates any capture open in the context, on
/// any thread. The reaper's destroys wait for open captures now; before, two graph tests run
/// at once failed one recording with `CUBLAS_STATUS_EXECUTION_FAILED` every run (one test's
/// dropped graph destroyed its handle while the other captured).
#[test]
#[ignore = "needs a CUDA GPU"]
fn handles_dropped_on_one_thread_leave_recordings_on_another_whole() {
    // Bounded, and paced: a destroy synchronizes the device, which takes longer than making a
    // handle, so a churn at full speed would outrun the reaper and fill the GPU with handles
    // waiting to be destroyed, gate or no gate.
    const CHURN: usize = 200;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let x = d.upload(s, &[1.0f32; 64]).unwrap();
    let dc = d.clone();
    let churn = std::thread::spawn(move || -> cusched::Result<()> {
        let st = dc.new_stream()?;
        for _ in 0..CHURN {
            let mut h = Handles::new(&dc, st)?;
            h.blas()?;
            drop(h);
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        Ok(())
    });
    let mut round = 0;
    while round < 40 || !churn.is_finished() {
        let xr = x.clone();
        let graph = Graph::record(&d, move |rec| rec.handles(0)?.blas()?.scal(64, 1.0f32, Vector::from(&xr)).map(drop));
        if let Err(e) = graph {
            panic!("round {round}: {e}");
        }
        round += 1;
    }
    churn.join().unwrap().unwrap();
    assert_eq!(x.download(s).unwrap(), vec![1.0; 64]);
}

/// A device whose last handle is dropped inside a recorded op, while the op's capture is open
/// on the same GPU, starts its shutdown without joining its threads: its reaper, destroying a
/// cuBLAS handle, waits for that very capture to close, so a join would never return.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_dropped_inside_a_capture_on_its_gpu_does_not_wait_for_the_capture() {
    let Some(d) = gpu() else { return };
    let other = Device::open(d.ordinal()).unwrap();
    let mut h = Handles::new(&other, other.default_stream()).unwrap();
    h.blas().unwrap();
    let x = d.alloc_zeros::<f32>(d.default_stream(), 4).unwrap();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Some((h, other))));
    let (tx, rx) = std::sync::mpsc::channel();
    let dd = d.clone();
    std::thread::spawn(move || {
        let recorded = Graph::record(&dd, move |rec| {
            let mut launch = cusched::LaunchRecorder::new_strict(rec.stream(0)?);
            launch.read_write(&x)?;
            let held = held.clone();
            launch.launch(rec.device(), move |_| {
                // The handle (its cuBLAS handle retired to the other device's reaper), then the
                // device itself.
                drop(held.lock().unwrap().take());
                Ok(())
            })
        });
        let _ = tx.send(recorded.map(drop));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the recording hung: the dropped device waited for the capture it was dropped in");
    got.unwrap();
}

/// `x /= 2`, `count += 1`, and (inside a graph loop) the loop goes on while `x >= 1`. Handle 0:
/// run eagerly, no condition to set.
const HALVE: &str = r#"
extern "C" __global__ void halve(float* x, float* count, unsigned long long cond) {
    x[0] *= 0.5f;
    count[0] += 1.0f;
    if (cond != 0) cudaGraphSetConditional(cond, x[0] >= 1.0f ? 1u : 0u);
}
extern "C" __global__ void check(const float* x, unsigned long long cond) {
    cudaGraphSetConditional(cond, x[0] >= 1.0f ? 1u : 0u);
}
"#;

fn halve_kernels(d: &Device) -> (Kernel, Kernel) {
    let src = format!("{}{HALVE}", cusched::LoopCondition::DEVICE_DECLARATION);
    let m = d.compile(&src, &[]).unwrap();
    (m.kernel("halve").unwrap(), m.kernel("check").unwrap())
}

fn one() -> LaunchConfig {
    LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }
}

/// The eager loop the graph's WHILE node replaces: one launch per step, the host reading x
/// back after each to decide.
fn eager_loop(h: &mut Handles, halve: &Kernel, x: &GpuRef<f32>, count: &GpuRef<f32>) -> (f32, f32) {
    count.copy_from_slice(h.stream(), &[0.0]).unwrap();
    loop {
        let launch = h.launch(halve, one()).read_write(x).read_write(count).scalar(0u64);
        // SAFETY: `halve` reads and writes x[0] and count[0], as declared; handle 0 sets nothing.
        unsafe { launch.enqueue() }.unwrap();
        if x.download(h.stream()).unwrap()[0] < 1.0 {
            return (x.download(h.stream()).unwrap()[0], count.download(h.stream()).unwrap()[0]);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_while_loop_replays_to_convergence_as_the_eager_loop_does() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let (halve, _) = halve_kernels(&d);
    let x = d.upload(s, &[100.0f32]).unwrap();
    let count = d.alloc_zeros::<f32>(s, 1).unwrap();
    let y = d.alloc_zeros::<f32>(s, 1).unwrap();
    let zero = d.alloc_zeros::<f32>(s, 1).unwrap();
    let (xr, cr, yr, zr, k) = (x.clone(), count.clone(), y.clone(), zero.clone(), halve.clone());
    let graph = Graph::record(&d, move |rec| {
        let s1 = rec.stream(1)?;
        let s0 = rec.stream(0)?;
        cr.copy_from(s0, &zr)?;
        rec.while_loop(|body, cond| {
            let launch = body.handles(0)?.launch(&k, one()).read_write(&xr).read_write(&cr).scalar(cond.handle());
            // SAFETY: `halve` reads and writes x[0] and count[0], as declared, and sets the
            // loop's condition through its handle.
            unsafe { launch.enqueue() }.map(drop)
        })?;
        // On another branch, after the loop: the loop's last x.
        yr.copy_from(s1, &xr)
    })
    .unwrap();
    assert_eq!(graph.ops(), 3);
    let exec = graph.instantiate().unwrap();
    let mut eager = Handles::new(&d, d.new_stream().unwrap()).unwrap();
    let ex = d.alloc_zeros::<f32>(eager.stream(), 1).unwrap();
    let ec = d.alloc_zeros::<f32>(eager.stream(), 1).unwrap();
    for start in [100.0f32, 1000.0, 3.0, 0.5, 1e6] {
        x.copy_from_slice(s, &[start]).unwrap();
        exec.replay(s).unwrap().wait().unwrap();
        ex.copy_from_slice(eager.stream(), &[start]).unwrap();
        let want = eager_loop(&mut eager, &halve, &ex, &ec);
        let got = (x.download(s).unwrap()[0], count.download(s).unwrap()[0]);
        assert_eq!(got, want, "from {start}");
        assert_eq!(y.download(s).unwrap()[0], want.0, "the op after the loop, from {start}");
    }
}

/// cuBLAS in a loop body: a GEMM (whose handle's workspace is fixed, so the capture holds no
/// allocation node, which a conditional body may not) halves x each iteration, then the check
/// kernel sets the condition.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_while_loop_body_may_hold_a_cublas_gemm() {
    const N: usize = 16;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let (_, check) = halve_kernels(&d);
    let mut half = vec![0.0f32; N * N];
    for i in 0..N {
        half[i * N + i] = 0.5;
    }
    let a = d.upload(s, &half).unwrap();
    let x = d.upload(s, &[100.0f32; N]).unwrap();
    let y = d.alloc_zeros::<f32>(s, N).unwrap();
    let (ar, xr, yr, k) = (a.clone(), x.clone(), y.clone(), check.clone());
    let graph = Graph::record(&d, move |rec| {
        rec.while_loop(|body, cond| {
            // y = (0.5 I) x, then x = y.
            body.handles(0)?.blas()?.gemm(&Gemm::new(N, 1, N, &ar, &xr, &yr))?;
            let s0 = body.stream(0)?;
            xr.copy_from(s0, &yr)?;
            let launch = body.handles(0)?.launch(&k, one()).read(&xr).scalar(cond.handle());
            // SAFETY: `check` reads x[0], as declared, and sets the loop's condition.
            unsafe { launch.enqueue() }.map(drop)
        })
    })
    .unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        x.copy_from_slice(s, &[100.0; N]).unwrap();
        exec.replay(s).unwrap().wait().unwrap();
        assert_eq!(x.download(s).unwrap(), vec![0.78125f32; N]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rebinding_a_graph_with_a_loop_updates_it_or_says_why_not() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let (halve, _) = halve_kernels(&d);
    let x = d.upload(s, &[100.0f32]).unwrap();
    let count = d.alloc_zeros::<f32>(s, 1).unwrap();
    let (xr, cr, k) = (x.clone(), count.clone(), halve.clone());
    let graph = Graph::record(&d, move |rec| {
        rec.while_loop(|body, cond| {
            let launch = body.handles(0)?.launch(&k, one()).read_write(&xr).read_write(&cr).scalar(cond.handle());
            // SAFETY: as in the loop test above.
            unsafe { launch.enqueue() }.map(drop)
        })
    })
    .unwrap();
    let mut exec = graph.instantiate().unwrap();
    let x2 = d.upload(s, &[10.0f32]).unwrap();
    match exec.rebind(&x, &x2) {
        Ok(()) => {
            exec.replay(s).unwrap().wait().unwrap();
            assert_eq!(x2.download(s).unwrap(), [0.625]);
            assert_eq!(x.download(s).unwrap(), [100.0], "the old buffer is left alone");
        }
        Err(e) => {
            assert!(matches!(e, Error::GraphUpdate { .. }), "{e:?}");
            eprintln!("rebinding a loop: {e}");
            exec.replay(s).unwrap().wait().unwrap();
            assert_eq!(x.download(s).unwrap(), [0.78125], "the graph is as it was");
        }
    }
}
