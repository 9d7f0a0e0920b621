//! A windowed batched FFT three ways: cuFFT with a window multiply as an LTO load callback
//! through cusched (`Fft::c2c_with`), the same FFT after a separate NVRTC-compiled multiply
//! kernel (one more pass over memory), and the callback FFT done raw (cudarc's stream and
//! memory, `cufftXtSetJITCallback` and `cufftExecC2C` by hand) for the passthrough ratio.
//!
//! Run from the GPU bundle: `target/gpu-bundle/bin/bench-fft_callback [points] [batch] [iterations]`
//! (default 4096-point transforms x 16384, 20 iterations, best of 3 interleaved rounds).

use cusched::cudarc::cufft::sys as cufft_sys;
use cusched::cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};
use cusched::cudarc::nvrtc::sys as nvrtc_sys;
use cusched::fft::{Direction, FftCallback, FftCallbacks, FftLayout};
use cusched::{Complex, Device, Handles};
use std::ffi::{c_char, c_int, c_void, CString};

mod common;

use common::{best_of_3, per_call};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The window multiply on load; `N` (the transform's size) is defined in front.
const WINDOW_LOAD: &str = r#"
extern "C" __device__ float2 window_load(void* in, unsigned long long i, void* w, void* shared) {
    float2 v = ((float2*)in)[i]; float k = ((const float*)w)[i % N]; return make_float2(v.x * k, v.y * k); }"#;

/// The same multiply as a kernel of its own: `out[i] = in[i] * w[i % n]`.
const WINDOW_KERNEL: &str = r#"
extern "C" __global__ void window(const float2* in, const float* w, float2* out, unsigned n, unsigned long long total) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < total) { float2 v = in[i]; float k = w[i % n]; out[i] = make_float2(v.x * k, v.y * k); } }"#;

/// CUDA 13's `cufftXtSetJITCallback`.
type SetJitCallback = unsafe extern "C" fn(
    cufft_sys::cufftHandle,
    *const c_char,
    *const c_void,
    usize,
    c_int,
    *mut *mut c_void,
) -> cufft_sys::cufftResult;

fn check_cufft(call: &str, r: cufft_sys::cufftResult) -> Res<()> {
    if r == cufft_sys::cufftResult::CUFFT_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {r:?}").into())
    }
}

fn check_nvrtc(call: &str, r: nvrtc_sys::nvrtcResult) -> Res<()> {
    if r == nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {r:?}").into())
    }
}

/// NVRTC's LTO-IR of `src` for `sm_{cc}`, by hand (the raw side's own compile).
fn lto_ir(src: &str, cc: (u32, u32)) -> Res<Vec<u8>> {
    let src = CString::new(src)?;
    let prog = cusched::cudarc::nvrtc::result::create_program(&src, None).map_err(|e| format!("{e:?}"))?;
    let arch = CString::new(format!("-arch=sm_{}{}", cc.0, cc.1))?;
    let opts = [c"-dlto".as_ptr(), c"-rdc=true".as_ptr(), arch.as_ptr()];
    // SAFETY: (1) a live program; (2) NUL-terminated options that outlive the call.
    let r = unsafe { nvrtc_sys::nvrtcCompileProgram(prog, opts.len() as c_int, opts.as_ptr()) };
    let out = check_nvrtc("nvrtcCompileProgram", r).and_then(|()| {
        let mut size = 0usize;
        // SAFETY: (1) a compiled program; (2) a valid out-pointer.
        check_nvrtc("nvrtcGetLTOIRSize", unsafe { nvrtc_sys::nvrtcGetLTOIRSize(prog, &mut size) })?;
        let mut ir = vec![0u8; size];
        // SAFETY: `ir` holds the size NVRTC reported.
        check_nvrtc("nvrtcGetLTOIR", unsafe { nvrtc_sys::nvrtcGetLTOIR(prog, ir.as_mut_ptr().cast()) })?;
        Ok(ir)
    });
    // SAFETY: created above, destroyed once.
    let _ = unsafe { cusched::cudarc::nvrtc::result::destroy_program(prog) };
    out
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(4096);
    let batch: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(16384);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-fft_callback needs a GPU: {e}");
            return Ok(());
        }
    };
    let total = n * batch;
    let cc = device.compute_capability()?;
    let mut version: c_int = 0;
    // SAFETY: a valid out-pointer (cuFFT is loaded by cudarc on first use).
    check_cufft("cufftGetVersion", unsafe { cufft_sys::cufftGetVersion(&mut version) })?;
    if version < 12000 {
        println!("bench-fft_callback needs the cuFFT of CUDA 13 (cuFFT 12); this one is {version}");
        return Ok(());
    }
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory and a cuFFT plan of its own, made
    // from and used on this one stream, and synchronizes it before each timing ends; (2) memory
    // cusched owns is used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let mut h = Handles::new(&device, s)?;
    let window: Vec<f32> =
        (0..n).map(|i| 0.5 - 0.5 * (2.0 * std::f32::consts::PI * i as f32 / n as f32).cos()).collect();
    let source = format!("#define N {n}\n{WINDOW_LOAD}");

    // cusched: the callback FFT, and the multiply kernel then the plain FFT.
    let x = device.upload(s, &vec![Complex::new(1.0f32, 0.5); total])?;
    let (y, tmp) = (device.alloc_zeros::<Complex<f32>>(s, total)?, device.alloc_zeros::<Complex<f32>>(s, total)?);
    let w = device.upload(s, &window)?;
    let layout = FftLayout::d1(n).batched(batch);
    let callbacks = FftCallbacks::new().on_load(FftCallback::new(source.as_str(), "window_load").data(&w));
    let kernel = device.compile(WINDOW_KERNEL, &[])?.kernel("window")?;

    // Raw: the same callback FFT with cudarc's memory and a plan made by hand.
    let rx = stream.clone_htod(&vec![cufft_sys::float2 { x: 1.0, y: 0.5 }; total])?;
    let mut ry = stream.alloc_zeros::<cufft_sys::float2>(total)?;
    let rw = stream.clone_htod(&window)?;
    let ir = lto_ir(&source, cc)?;
    let mut plan: cufft_sys::cufftHandle = 0;
    let symbol = c"window_load";
    let mut caller_info: [*mut c_void; 1] = [{
        let (p, _g) = rw.device_ptr(&stream);
        p as *mut c_void
    }];
    // SAFETY: (1) a fresh plan gets the callback before planning, as cuFFT requires, with
    // the symbol, the IR and the caller-info array alive for the plan's life (until the end of
    // main); (2) the window stays allocated as long as the plan; (3) cuFFT 12 (CUDA 13) has the
    // declared signature.
    unsafe {
        let set: SetJitCallback = *cufft_sys::culib().get::<SetJitCallback>(b"cufftXtSetJITCallback\0")?;
        check_cufft("cufftCreate", cufft_sys::cufftCreate(&mut plan))?;
        check_cufft(
            "cufftXtSetJITCallback",
            set(plan, symbol.as_ptr(), ir.as_ptr().cast(), ir.len(), 0, caller_info.as_mut_ptr()),
        )?;
        let mut work = 0usize;
        check_cufft(
            "cufftMakePlan1d",
            cufft_sys::cufftMakePlan1d(plan, n as c_int, cufft_sys::cufftType::CUFFT_C2C, batch as c_int, &mut work),
        )?;
        check_cufft("cufftSetStream", cufft_sys::cufftSetStream(plan, stream.cu_stream() as _))?;
    }

    let (callback, raw) = best_of_3(
        || {
            per_call(
                iters,
                || {
                    h.fft()?.c2c_with(&layout, &x, &y, Direction::Forward, &callbacks)?;
                    Ok(())
                },
                || Ok(device.synchronize(s)?),
            )
        },
        || {
            per_call(
                iters,
                || {
                    let (pi, _gi) = rx.device_ptr(&stream);
                    let (po, _go) = ry.device_ptr_mut(&stream);
                    // SAFETY: both buffers hold `total` complex values on the plan's stream.
                    let r = unsafe { cufft_sys::cufftExecC2C(plan, pi as *mut _, po as *mut _, -1) };
                    check_cufft("cufftExecC2C", r)
                },
                || Ok(stream.synchronize()?),
            )
        },
    )?;
    let (separate, _) = best_of_3(
        || {
            per_call(
                iters,
                || {
                    let launch = kernel
                        .launch(&device, s, LaunchConfig::for_num_elems(total as u32))
                        .read(&x)
                        .read(&w)
                        .write(&tmp)
                        .scalar(n as u32)
                        .scalar(total as u64);
                    // SAFETY: (1) `window` reads x and w and writes tmp, as declared; (2) it
                    // touches indices below `total` of x and tmp and below `n` of w; (3) its
                    // parameters are two input pointers, an output pointer, an unsigned and an
                    // unsigned long long, as given.
                    unsafe { launch.enqueue() }?;
                    h.fft()?.c2c(&layout, &tmp, &y, Direction::Forward)?;
                    Ok(())
                },
                || Ok(device.synchronize(s)?),
            )
        },
        || Ok(0.0),
    )?;
    // SAFETY: (1) the plan is idle (the stream was synchronized); (2) it is destroyed once.
    unsafe { check_cufft("cufftDestroy", cufft_sys::cufftDestroy(plan))? };

    println!("{n}-point c2c f32 FFT x {batch}, window on load (best of 3 x {iters})\n");
    println!("| case | time | vs callback through cusched |");
    println!("| --- | --- | --- |");
    println!("| LTO load callback, cusched | {:.3} ms | 1.000x |", callback * 1e3);
    println!("| multiply kernel + FFT, cusched | {:.3} ms | {:.3}x |", separate * 1e3, separate / callback);
    println!("| LTO load callback, raw cudarc | {:.3} ms | {:.3}x (raw / cusched) |", raw * 1e3, raw / callback);
    Ok(())
}
