//! Hazards on a real GPU: slow kernels on several streams, so that a missing fence shows up as
//! wrong data. Skipped without a GPU unless `CUSCHED_REQUIRE_GPU=1`.

use crate::common::slow::*;
use crate::common::*;
use cusched::Error;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_read_after_write_across_streams() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    for trial in 0..5 {
        let x = d.alloc_zeros::<f32>(s1, N).unwrap();
        let y = d.alloc_zeros::<f32>(s2, N).unwrap();
        d.synchronize(s1).unwrap();
        d.synchronize(s2).unwrap();
        fill(&d, &k, s1, &x, 7.0, SLOW).unwrap();
        copy(&d, &k, s2, &y, &x, 0).unwrap();
        assert!(all_eq(&y.download(s2).unwrap(), 7.0), "trial {trial}: the read ran before the slow write");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_write_after_write_across_streams() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    for trial in 0..5 {
        let x = d.alloc_zeros::<f32>(s1, N).unwrap();
        fill(&d, &k, s1, &x, 1.0, SLOW).unwrap();
        fill(&d, &k, s2, &x, 2.0, 0).unwrap();
        assert!(all_eq(&x.download(s1).unwrap(), 2.0), "trial {trial}: the slow first write landed last");
    }
}

/// Two readers on two streams, then a writer on a third: the writer must wait for both, not
/// only the latest reader (cudarc's single read event per slice waits for the fast one only).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_write_after_two_readers_on_two_streams() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let (s1, s2, s3) = (d.new_stream().unwrap(), d.new_stream().unwrap(), d.new_stream().unwrap());
    for trial in 0..5 {
        let x = d.upload(s3, &vec![5.0f32; N]).unwrap();
        let slow_out = d.alloc_zeros::<f32>(s1, N).unwrap();
        let fast_out = d.alloc_zeros::<f32>(s2, N).unwrap();
        for s in [s1, s2, s3] {
            d.synchronize(s).unwrap();
        }
        copy(&d, &k, s1, &slow_out, &x, SLOW).unwrap();
        copy(&d, &k, s2, &fast_out, &x, 0).unwrap();
        fill(&d, &k, s3, &x, 9.0, 0).unwrap();
        assert!(all_eq(&fast_out.download(s2).unwrap(), 5.0), "trial {trial}: fast reader saw the later write");
        assert!(all_eq(&slow_out.download(s1).unwrap(), 5.0), "trial {trial}: slow reader saw the later write");
        assert!(all_eq(&x.download(s3).unwrap(), 9.0));
    }
}

/// A reader that cannot finish before the host lets it: every block spins until a flag in
/// mapped pinned host memory turns non-zero, then copies `in` to `out`.
const GATED: &str = r#"
extern "C" __global__ void gated_copy(const volatile int* gate, float* out, const float* in, unsigned n) {
    if (threadIdx.x == 0) { while (*gate == 0) { } }
    __syncthreads();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
"#;

/// A pinned, device-mapped host word that gates [`GATED`]: zero holds the kernel, `open` lets
/// it go. Freed on drop, after opening (so no kernel is left spinning on freed memory).
struct Gate {
    ptr: *mut i32,
    ctx: std::sync::Arc<cusched::cudarc::driver::CudaContext>,
}

impl Gate {
    fn new(d: &cusched::Device) -> Gate {
        // SAFETY: the context is only bound to allocate and free the gate's memory.
        let ctx = unsafe { d.cuda_context() }.unwrap();
        ctx.bind_to_thread().unwrap();
        let flags = cusched::cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP
            | cusched::cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: 1. a context is bound (above); 2. four bytes, written below before any use.
        let ptr = unsafe { cusched::cudarc::driver::result::malloc_host(4, flags) }.unwrap().cast::<i32>();
        // SAFETY: `ptr` is a fresh, aligned 4-byte allocation owned here.
        unsafe { std::ptr::write_volatile(ptr, 0) };
        Gate { ptr, ctx }
    }

    /// Lets every gated kernel finish.
    fn open(&self) {
        // SAFETY: the allocation lives until `drop`; a volatile write, since a kernel reads it.
        unsafe { std::ptr::write_volatile(self.ptr, 1) };
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        self.ctx.bind_to_thread().unwrap();
        // The kernels that read the gate finish once it is open; wait for them before freeing.
        self.ctx.synchronize().unwrap();
        // SAFETY: allocated by `malloc_host` in this context (bound above); no kernel reads it
        // any more (the context was synchronized after the gate opened).
        unsafe { cusched::cudarc::driver::result::free_host(self.ptr.cast()) }.unwrap();
    }
}

/// A buffer dropped while a kernel on another stream still reads it: the free waits on the
/// device timeline, not on the host (the drop returns while the reader is provably still held
/// at its gate), the memory is reused at once by a new allocation that is overwritten, and the
/// reader still sees the old data.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_free_while_a_slow_kernel_reads() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let gated = d.compile(GATED, &[]).unwrap().kernel("gated_copy").unwrap();
    let (home, reader) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    for trial in 0..5 {
        let gate = Gate::new(&d);
        let a = d.upload(home, &vec![3.0f32; N]).unwrap();
        let out = d.alloc_zeros::<f32>(reader, N).unwrap();
        d.synchronize(home).unwrap();
        d.synchronize(reader).unwrap();
        let mut rec = cusched::LaunchRecorder::new_strict(reader);
        rec.read(&a).unwrap().write(&out).unwrap();
        let gate_address = gate.ptr as u64;
        rec.launch(&d, |scope| {
            use cusched::cudarc::driver::PushKernelArg;
            let n = out.len() as u32;
            // SAFETY: (1) the kernel reads `a` and writes `out`, as declared, on the launch's
            // stream, and no cudarc memory is made; (2) the arguments match `gated_copy`: the
            // gate's mapped host address (valid in kernels under unified addressing), two
            // buffers of `n` floats of this device, and `n`.
            unsafe {
                let mut b = scope.cuda_stream()?.launch_builder(gated.function()?);
                b.arg(&gate_address).arg(out.cuda_slice()?).arg(a.cuda_slice()?).arg(&n);
                b.launch(cusched::cudarc::driver::LaunchConfig::for_num_elems(n))
            }
            .map(drop)
            .map_err(|e| Error::Driver { call: "cuLaunchKernel", status: e })
        })
        .unwrap();
        // The drop runs on another thread: one that waited for the reader would never return
        // while the gate is shut, and this thread must stay free to open it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(a);
            let _ = tx.send(());
        });
        let dropped = rx.recv_timeout(std::time::Duration::from_secs(60));
        gate.open();
        assert!(dropped.is_ok(), "trial {trial}: dropping waited for the reader on the host");
        // Same size, same stream: the stream-ordered pool hands back the freed block.
        let b = d.alloc::<f32>(home, N).unwrap();
        fill(&d, &k, home, &b, -1.0, 0).unwrap();
        assert!(all_eq(&out.download(reader).unwrap(), 3.0), "trial {trial}: the slow reader saw reused memory");
        assert!(all_eq(&b.download(home).unwrap(), -1.0));
        drop(gate);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_upload_download_round_trip() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut rng = Rng::new();
    let data: Vec<f32> = (0..100_000).map(|_| rng.f32()).collect();
    let a = d.upload(s, &data).unwrap();
    assert_eq!(a.download(d.default_stream()).unwrap(), data);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_host_buffer_copies_are_asynchronous_and_fenced() {
    let Some(d) = gpu() else { return };
    let k = kernels(&d);
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let src = d.host_from_slice(&vec![4.0f32; N]).unwrap();
    let a = d.alloc_zeros::<f32>(s0, N).unwrap();
    a.copy_from_host(s0, &src).unwrap();
    let b = d.alloc_zeros::<f32>(s1, N).unwrap();
    copy(&d, &k, s1, &b, &a, SLOW).unwrap();
    let mut dst = d.alloc_host::<f32>(N).unwrap();
    b.copy_to_host(s0, &mut dst).unwrap();
    assert!(all_eq(&dst.read().unwrap(), 4.0), "host read did not wait for the copy");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_device_to_device_copy_and_adopt() {
    let Some(d) = gpu() else { return };
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.upload(s0, &[1.0f64, 2.0, 3.0]).unwrap();
    let b = d.alloc_zeros::<f64>(s1, 3).unwrap();
    b.copy_from(s1, &a).unwrap();
    assert_eq!(b.download(s0).unwrap(), vec![1.0, 2.0, 3.0]);

    // SAFETY: (1) the slice's only work before `adopt` takes it over is this copy on `s1`, its
    // own stream, which `adopt` waits for; (2) no memory cusched owns is touched.
    let raw = unsafe { d.cuda_stream(s1) }.unwrap().clone_htod(&[7u32, 8, 9]).unwrap();
    let adopted = d.adopt(s0, raw).unwrap();
    assert_eq!(adopted.download(s0).unwrap(), vec![7, 8, 9]);
    assert!(adopted.raw_device_ptr().unwrap() != 0);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_stale_buffer_is_rejected_and_new_work_succeeds() {
    let Some(d) = gpu() else { return };
    let s = d.default_stream();
    let a = d.upload(s, &[1u32]).unwrap();
    d.advance_generation();
    assert!(matches!(a.download(s), Err(Error::Stale { .. })));
    // SAFETY: the call fails (the handle is stale): no slice is handed out.
    assert!(matches!(unsafe { a.cuda_slice() }, Err(Error::Stale { .. })));
    assert_eq!(d.upload(s, &[2u32]).unwrap().download(s).unwrap(), vec![2]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_compile_error_returns_the_log() {
    let Some(d) = gpu() else { return };
    let err = d.compile("extern \"C\" __global__ void k() { this is not cuda; }", &[]).unwrap_err();
    assert!(matches!(err, Error::CompileFailed { .. }), "{err:?}");
    assert!(err.to_string().contains("error"), "{err}");
}
