//! Library passthrough: large GEMMs and a large FFT through cusched next to the same calls
//! through cudarc's own cuBLAS and cuFFT wrappers, in one process on one context, plus the host
//! round trip of a small GEMM.
//!
//! Run from the GPU bundle: `target/gpu-bundle/bin/bench-passthrough [size] [iterations]`.

use cusched::blas::Gemm;
use cusched::cudarc::cublas::{sys, CudaBlas, Gemm as _, GemmConfig};
use cusched::cudarc::cufft::{sys as cufft_sys, CudaFft, FftDirection};
use cusched::fft::{Direction, FftLayout};
use cusched::half::bf16;
use cusched::{Complex, Device, Handles};
use std::time::Instant;

mod common;

use common::{best_of_3, per_call};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-passthrough needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let raw = CudaBlas::new(stream.clone())?;
    let mut h = Handles::new(&device, s)?;
    let flops = 2.0 * (n as f64).powi(3);
    println!("| case | cusched | raw cudarc | ratio |");
    println!("| --- | --- | --- | --- |");

    macro_rules! gemm_case {
        ($t:ty, $zero:expr, $one:expr, $label:expr) => {{
            let (a, b, c) = (
                device.alloc_zeros::<$t>(s, n * n)?,
                device.alloc_zeros::<$t>(s, n * n)?,
                device.alloc_zeros::<$t>(s, n * n)?,
            );
            let g = Gemm::new(n, n, n, &a, &b, &c);
            let (ra, rb, mut rc) =
                (stream.alloc_zeros::<$t>(n * n)?, stream.alloc_zeros::<$t>(n * n)?, stream.alloc_zeros::<$t>(n * n)?);
            let cfg = GemmConfig {
                transa: sys::cublasOperation_t::CUBLAS_OP_N,
                transb: sys::cublasOperation_t::CUBLAS_OP_N,
                m: n as i32,
                n: n as i32,
                k: n as i32,
                alpha: $one,
                lda: n as i32,
                ldb: n as i32,
                beta: $zero,
                ldc: n as i32,
            };
            let (best_ours, best_raw) = best_of_3(
                || {
                    per_call(
                        iters,
                        || {
                            h.blas()?.gemm(&g)?;
                            Ok(())
                        },
                        || Ok(device.synchronize(s)?),
                    )
                },
                || {
                    per_call(
                        iters,
                        // SAFETY: three n x n buffers of this context, packed, on the blas stream.
                        || Ok(unsafe { raw.gemm(cfg, &ra, &rb, &mut rc) }?),
                        || Ok(stream.synchronize()?),
                    )
                },
            )?;
            println!(
                "| {n}³ {} GEMM | {:.1} TFLOP/s ({:.2} ms) | {:.1} TFLOP/s ({:.2} ms) | {:.3}x |",
                $label,
                flops / best_ours / 1e12,
                best_ours * 1e3,
                flops / best_raw / 1e12,
                best_raw * 1e3,
                best_raw / best_ours
            );
        }};
    }
    gemm_case!(f32, 0.0f32, 1.0f32, "f32");
    gemm_case!(bf16, bf16::ZERO, bf16::ONE, "bf16");

    // A 64x64 GEMM's round trip: op then wait, against raw gemm then stream synchronize.
    let m = 64;
    let (a, b, c) = (
        device.alloc_zeros::<f32>(s, m * m)?,
        device.alloc_zeros::<f32>(s, m * m)?,
        device.alloc_zeros::<f32>(s, m * m)?,
    );
    let g = Gemm::new(m, m, m, &a, &b, &c);
    let (ra, rb, mut rc) =
        (stream.alloc_zeros::<f32>(m * m)?, stream.alloc_zeros::<f32>(m * m)?, stream.alloc_zeros::<f32>(m * m)?);
    let cfg = GemmConfig {
        transa: sys::cublasOperation_t::CUBLAS_OP_N,
        transb: sys::cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: m as i32,
        k: m as i32,
        alpha: 1.0f32,
        lda: m as i32,
        ldb: m as i32,
        beta: 0.0,
        ldc: m as i32,
    };
    let reps = 2000;
    let mut ours = Vec::with_capacity(reps);
    let mut theirs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        h.blas()?.gemm(&g)?.wait()?;
        ours.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        // SAFETY: three 64 x 64 buffers of this context, packed, on the blas stream.
        unsafe { raw.gemm(cfg, &ra, &rb, &mut rc) }?;
        stream.synchronize()?;
        theirs.push(t.elapsed().as_secs_f64());
    }
    let (o, t) = (common::median(&mut ours), common::median(&mut theirs));
    println!("| 64³ f32 GEMM, op to wake (median of {reps}) | {:.1} µs | {:.1} µs | {:.3}x |", o * 1e6, t * 1e6, t / o);

    // A large single-precision complex FFT, 2^26 points, forward, out of place.
    let points = 1usize << 26;
    let x = device.alloc_zeros::<Complex<f32>>(s, points)?;
    let y = device.alloc_zeros::<Complex<f32>>(s, points)?;
    let layout = FftLayout::d1(points);
    let plan = CudaFft::plan_1d(points as i32, cufft_sys::cufftType::CUFFT_C2C, 1, stream.clone())?;
    let (mut rx, mut ry) =
        (stream.alloc_zeros::<cufft_sys::float2>(points)?, stream.alloc_zeros::<cufft_sys::float2>(points)?);
    let (best_ours, best_raw) = best_of_3(
        || {
            per_call(
                iters,
                || {
                    h.fft()?.c2c(&layout, &x, &y, Direction::Forward)?;
                    Ok(())
                },
                || Ok(device.synchronize(s)?),
            )
        },
        || {
            per_call(
                iters,
                || Ok(plan.exec_c2c(&mut rx, &mut ry, FftDirection::Forward)?),
                || Ok(stream.synchronize()?),
            )
        },
    )?;
    println!(
        "| 2^26-point c2c f32 FFT | {:.3} ms | {:.3} ms | {:.3}x |",
        best_ours * 1e3,
        best_raw * 1e3,
        best_raw / best_ours
    );
    Ok(())
}
