//! Graph captures beside other work on the GPU: ordinary work on one thread while another
//! thread's recording has a capture open on the same GPU must neither fail nor invalidate
//! that capture (a device-wide synchronization from any thread would: a cuRAND pseudo-random
//! draw's set-up makes one, so it waits for the capture), and neither must an op of each
//! optional library built (cuSPARSE, cuSOLVER, cuBLASLt, cuDNN, cuTENSOR, NCCL) on handles made
//! beside the capture; and cuRAND draws inside a recording (quasi-random ones record,
//! pseudo-random ones are refused).

use crate::common::*;
use cusched::blas::Vector;
use cusched::fft::{Direction, FftLayout};
use cusched::rng::{Generator, Seed};
use cusched::{Complex, Device, Error, GpuRef, Graph, Handles};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the recorded op keeps its capture open at most, waiting for the work to finish.
/// Work that must not run beside a capture (a cuRAND pseudo-random draw) waits this long.
const HOLD: Duration = Duration::from_secs(1);

/// Runs `work` on this thread while a recording on another thread holds a capture open on
/// `d`'s GPU (its op writes `x`). Returns the recording's outcome, how long `work` took and
/// what it returned.
fn beside_a_capture(
    d: &Device,
    x: &GpuRef<f32>,
    work: impl FnOnce() -> cusched::Result<()>,
) -> (cusched::Result<()>, Duration, cusched::Result<()>) {
    let x = x.clone();
    let (open_tx, open_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = Arc::new(Mutex::new(done_rx));
    let dd = d.clone();
    let recording = std::thread::spawn(move || {
        Graph::record(&dd, move |rec| {
            let mut launch = cusched::LaunchRecorder::new_strict(rec.stream(0)?);
            launch.read_write(&x)?;
            let (open, done) = (open_tx.clone(), done_rx.clone());
            launch.launch(rec.device(), move |_| {
                let _ = open.send(());
                let _ = done.lock().unwrap().recv_timeout(HOLD);
                Ok(())
            })
        })
        .map(drop)
    });
    open_rx.recv_timeout(Duration::from_secs(60)).expect("the recorded op never ran");
    let t = Instant::now();
    let worked = work();
    let took = t.elapsed();
    let _ = done_tx.send(());
    (recording.join().unwrap(), took, worked)
}

/// Work given the warm handles.
type WorkFn<'a> = Box<dyn FnMut(&mut Handles) -> cusched::Result<()> + 'a>;

/// One kind of work, named.
type Work<'a> = (&'static str, WorkFn<'a>);

/// A uniform draw of `seed` into a fresh buffer on `st`, waited for.
fn draw<'a>(d: &'a Device, st: cusched::StreamId, seed: Seed) -> WorkFn<'a> {
    Box::new(move |h| {
        let x = d.alloc_zeros::<f32>(st, 4096)?;
        h.rng()?.uniform(&seed, &x)?.wait()
    })
}

/// 4,096 Poisson counts of mean `lambda` from `seed`.
fn poisson<'a>(d: &'a Device, st: cusched::StreamId, seed: Seed, lambda: f64) -> WorkFn<'a> {
    Box::new(move |h| {
        let x = d.alloc_zeros::<u32>(st, 4096)?;
        h.rng()?.poisson(&seed, &x, lambda)?.wait()
    })
}

const KERNEL: &str = r#"
extern "C" __global__ void KERNEL_NAME(float* x) { x[threadIdx.x] += 1.0f; }
"#;

#[test]
#[ignore = "needs a CUDA GPU"]
fn ordinary_work_on_another_thread_leaves_a_recording_whole() {
    let Some(d) = gpu() else { return };
    let st = d.new_stream().unwrap();
    let mut h = Handles::new(&d, st).unwrap();
    // Warm: the library handles exist already on `h`.
    h.blas().unwrap();
    let kernels = std::sync::atomic::AtomicUsize::new(0);
    let x = d.alloc_zeros::<f32>(st, 4).unwrap();
    d.synchronize(st).unwrap();
    let mut works: Vec<Work<'_>> = vec![
        (
            "upload and download",
            Box::new(|_| {
                let x = d.upload(st, &[1.0f32; 4096])?;
                assert_eq!(x.download(st)?[4095], 1.0);
                Ok(())
            }),
        ),
        (
            "device allocation and free",
            Box::new(|_| {
                drop(d.alloc_zeros::<u8>(st, 64 << 20)?);
                d.synchronize(st)
            }),
        ),
        (
            "pinned host buffers, copies, cache trim",
            Box::new(|_| {
                let mut host = d.alloc_host::<f32>((3 << 20) + 17)?;
                let x = d.alloc_zeros::<f32>(st, host.len())?;
                x.copy_from_host(st, &host)?;
                x.copy_to_host(st, &mut host)?;
                d.synchronize(st)?;
                drop(host);
                d.trim_host_cache();
                Ok(())
            }),
        ),
        ("a new stream", Box::new(|_| d.new_stream().map(drop))),
        (
            "a cuBLAS op on warm handles",
            Box::new(|h| {
                let x = d.upload(st, &[1.0f32; 64])?;
                h.blas()?.scal(64, 2.0f32, Vector::from(&x))?.wait()
            }),
        ),
        (
            "new handles: cuBLAS made, used, dropped",
            Box::new(|_| {
                let mut h2 = Handles::new(&d, d.new_stream()?)?;
                let x = d.upload(st, &[1.0f32; 64])?;
                h2.blas()?.scal(64, 2.0f32, Vector::from(&x))?.wait()?;
                drop(h2);
                Ok(())
            }),
        ),
        (
            "a cuFFT plan made and run",
            Box::new(|h| {
                let x = d.upload(st, &vec![Complex::new(1.0f32, 0.0); 96])?;
                let y = d.alloc_zeros::<Complex<f32>>(st, 96)?;
                h.fft()?.c2c(&FftLayout::d1(96), &x, &y, Direction::Forward)?.wait()
            }),
        ),
        ("a cuRAND Philox generator made and run", draw(&d, st, Seed::new(Generator::Philox4x32_10, 7))),
        ("a warm cuRAND Philox generator run", draw(&d, st, Seed::new(Generator::Philox4x32_10, 8))),
        // Where the last draw ended: nothing set, nothing set up, and no wait for the capture.
        ("a continuing cuRAND Philox draw", draw(&d, st, Seed::new(Generator::Philox4x32_10, 8).at(4096))),
        ("a cuRAND XORWOW generator made and run", draw(&d, st, Seed::new(Generator::Xorwow, 7))),
        ("a continuing cuRAND XORWOW draw", draw(&d, st, Seed::new(Generator::Xorwow, 7).at(4096))),
        ("a cuRAND Philox Poisson draw", poisson(&d, st, Seed::new(Generator::Philox4x32_10, 9), 50.0)),
        (
            "a continuing cuRAND Philox Poisson draw",
            poisson(&d, st, Seed::new(Generator::Philox4x32_10, 9).at(4096), 50.0),
        ),
        (
            "a cuRAND Philox Poisson draw at a new mean where the last ended",
            poisson(&d, st, Seed::new(Generator::Philox4x32_10, 9).at(8192), 500.0),
        ),
        ("a cuRAND Sobol32 generator made and run", draw(&d, st, Seed::new(Generator::Sobol32, 7))),
        (
            "a module compiled and loaded",
            Box::new(|_| {
                let name = format!("k{}", kernels.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let m = d.compile(&KERNEL.replace("KERNEL_NAME", &name), &[])?;
                m.kernel(&name).map(drop)
            }),
        ),
        ("a stream synchronized", Box::new(|_| d.synchronize(st))),
    ];
    assert_each_leaves_a_recording_whole(&d, &x, &mut h, &mut works);
}

/// The library ops of the features built, each on handles made beside the capture: making a
/// library's handle (or plan, or communicator) is where a device-wide synchronization or an
/// allocation that a capture forbids would hide, so none is made before.
#[cfg(any(
    feature = "cusparse",
    feature = "cusolver",
    feature = "cublaslt",
    feature = "cudnn",
    feature = "cutensor",
    feature = "nccl"
))]
#[test]
#[ignore = "needs a CUDA GPU"]
fn library_ops_on_another_thread_leave_a_recording_whole() {
    let Some(d) = gpu() else { return };
    // As nccl.rs's tests do before NCCL is loaded, NVLink multicast off for the process: set
    // before this test's threads start.
    #[cfg(feature = "nccl")]
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    let st = d.new_stream().unwrap();
    let mut h = Handles::new(&d, st).unwrap();
    let x = d.alloc_zeros::<f32>(st, 4).unwrap();
    d.synchronize(st).unwrap();
    let mut works: Vec<Work<'_>> = Vec::new();
    #[cfg(feature = "cusparse")]
    works.push((
        "new handles: a cuSPARSE CSR SpMV",
        Box::new(|_| {
            use cusched::sparse::{SparseMatrix, Transpose};
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let s = h.stream();
            let (o, i, v) = (d.upload(s, &[0i32, 1, 2])?, d.upload(s, &[0i32, 1])?, d.upload(s, &[2.0f32; 2])?);
            let a = SparseMatrix::csr(2, 2, 2, &o, &i, &v)?;
            let (x, y) = (d.upload(s, &[1.0f32; 2])?, d.alloc_zeros::<f32>(s, 2)?);
            h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &y)?.wait()
        }),
    ));
    #[cfg(feature = "cusolver")]
    works.push((
        "new handles: a cuSOLVER potrf",
        Box::new(|_| {
            use cusched::solver::{Fill, Potrf};
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let a = d.upload(h.stream(), &[4.0f64, 1.0, 1.0, 3.0])?;
            h.solver()?.potrf(&Potrf { fill: Fill::Lower, n: 2, a: &a, lda: None })?.wait()
        }),
    ));
    #[cfg(feature = "cusolver")]
    works.push((
        "new handles: a cuSOLVER sparse csrlsvqr",
        Box::new(|_| {
            use cusched::solver_sparse::{CsrSystem, Reorder};
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let s = h.stream();
            let (o, i, v) = (d.upload(s, &[0i32, 1, 2])?, d.upload(s, &[0i32, 1])?, d.upload(s, &[2.0f64; 2])?);
            let (b, x) = (d.upload(s, &[1.0f64; 2])?, d.alloc_zeros::<f64>(s, 2)?);
            let a = CsrSystem { n: 2, nnz: 2, offsets: &o, indices: &i, values: &v };
            h.solver_sparse()?.csrlsvqr(a, &b, &x, 1e-12, Reorder::None)?.wait()
        }),
    ));
    #[cfg(feature = "cublaslt")]
    works.push((
        "new handles: a cuBLASLt f32 matmul",
        Box::new(|_| {
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let s = h.stream();
            let (a, b, c) = (d.upload(s, &[1.0f32; 4])?, d.upload(s, &[1.0f32; 4])?, d.alloc_zeros::<f32>(s, 4)?);
            h.blas_lt()?.matmul(&cusched::blas_lt::Matmul::new(2, 2, 2, &a, &b, &c))?.wait().map(drop)
        }),
    ));
    #[cfg(feature = "cudnn")]
    works.push((
        "new handles: a cuDNN ReLU forward",
        Box::new(|_| {
            use cusched::cudnn::{Activation, ActivationMode, Shape, TensorView};
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let s = h.stream();
            let (x, y) = (d.upload(s, &[-1.0f32, 1.0, -2.0, 2.0])?, d.alloc_zeros::<f32>(s, 4)?);
            let t = |b| TensorView::new(b, Shape::nchw(1, 1, 2, 2));
            h.cudnn()?.activation_forward(&Activation::new(ActivationMode::Relu), &t(&x), &t(&y))?.wait()
        }),
    ));
    #[cfg(feature = "cutensor")]
    works.push((
        "new handles: a cuTENSOR contraction",
        Box::new(|_| {
            use cusched::tensor::{Contraction, TensorRef};
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let s = h.stream();
            let (a, b, c) = (d.upload(s, &[1.0f32; 4])?, d.upload(s, &[1.0f32; 4])?, d.alloc_zeros::<f32>(s, 4)?);
            let t = |buf| TensorRef::new(buf, &[2, 2]);
            h.tensor()?.contract(&Contraction::new("ik,kj->ij", t(&a), t(&b), t(&c)))?.wait()
        }),
    ));
    #[cfg(feature = "nccl")]
    works.push((
        "new handles: a one-rank NCCL communicator and all-reduce",
        Box::new(|_| {
            use cusched::nccl::{CommConfig, Communicator, ReduceOp};
            let comm = Communicator::init_all(std::slice::from_ref(&d), &CommConfig::default())?.remove(0);
            let mut h = Handles::new(&d, d.new_stream()?)?;
            let x = d.upload(h.stream(), &[1.0f32; 64])?;
            h.nccl()?.all_reduce_in_place(&comm, &x, ReduceOp::Sum)?.wait()
        }),
    ));
    assert_each_leaves_a_recording_whole(&d, &x, &mut h, &mut works);
}

/// Runs every work, each beside a capture of its own on `x`, before failing: one run then
/// names every work that failed or broke its recording, not just the first.
fn assert_each_leaves_a_recording_whole(d: &Device, x: &GpuRef<f32>, h: &mut Handles, works: &mut [Work<'_>]) {
    let mut broken = Vec::new();
    for (what, work) in works.iter_mut() {
        let (recorded, took, worked) = beside_a_capture(d, x, || work(h));
        if let Err(e) = worked {
            broken.push(format!("{what}: the work itself failed: {e}"));
        }
        eprintln!("{what}: {took:?} beside the capture, recording {:?}", recorded.as_ref().map(drop));
        if let Err(e) = recorded {
            broken.push(format!("{what}: {e}"));
        }
    }
    assert!(broken.is_empty(), "work on another thread broke the capture: {broken:#?}");
}

/// In a graph recording a quasi-random draw records, and its replays give the eager draw's
/// numbers; a pseudo-random one is refused, typed, before anything is captured (its state
/// set-up synchronizes the device), and the thread's next cuRAND draw works.
#[test]
#[ignore = "needs a CUDA GPU"]
fn curand_draws_in_a_recording_record_quasi_and_refuse_pseudo() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut failed = Vec::new();
    for g in Generator::ALL {
        let seed = Seed::new(g, 11);
        let eager = d.alloc_zeros::<f32>(s, 4096).unwrap();
        h.rng().unwrap().uniform(&seed, &eager).unwrap().wait().unwrap();
        let want = eager.download(s).unwrap();
        let out = d.alloc_zeros::<f32>(s, 4096).unwrap();
        let o = out.clone();
        let graph = Graph::record(&d, move |rec| rec.handles(0)?.rng()?.uniform(&seed, &o).map(drop));
        match (g.is_quasi(), graph) {
            (true, Ok(graph)) => {
                let exec = graph.instantiate().unwrap();
                for replay in 0..2 {
                    out.copy_from_slice(s, &[0.0; 4096]).unwrap();
                    exec.replay(s).unwrap();
                    if out.download(s).unwrap() != want {
                        failed.push(format!("{g:?}: replay {replay} gave other numbers"));
                    }
                }
            }
            (false, Err(Error::Recording { .. })) => {}
            (_, other) => failed.push(format!("{g:?}: {:?}", other.map(drop))),
        }
        // The thread's next draw works.
        h.rng().unwrap().uniform(&seed, &eager).unwrap().wait().unwrap();
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
