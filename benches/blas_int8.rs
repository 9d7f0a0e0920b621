//! int8 GEMM passthrough: an `m = n = k` int8 GEMM into int32 (`CUBLAS_COMPUTE_32I`) through
//! cusched's `gemm_ex` next to the same `cublasGemmEx` through a raw cudarc cuBLAS handle on the
//! same stream, in interleaved rounds (the best of each over three), plus the same for f16 into
//! f32. The target: cusched at 0.99x of raw or better at 8192³.
//!
//! Run from the GPU bundle: `bench-blas_int8 [size] [iterations]`.

mod common;

use common::{best_of_3, per_call};
use cusched::blas::{ComputeType, GemmEx, Transpose};
use cusched::cudarc::cublas::{sys, CudaBlas};
use cusched::cudarc::driver::{DevicePtr, DevicePtrMut};
use cusched::half::f16;
use cusched::{Device, Handles};
use std::ffi::c_void;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-blas_int8 needs a GPU: {e}");
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
    let ops = 2.0 * (n as f64).powi(3);
    let ni = n as i32;
    println!("| case | cusched | raw cudarc | ratio |");
    println!("| --- | --- | --- | --- |");

    macro_rules! case {
        ($ab:ty, $out:ty, $compute:expr, $raw_ab:ident, $raw_out:ident, $raw_compute:ident, $scale:ty, $one:expr,
         $zero:expr, $unit:expr, $label:expr) => {{
            let (a, b, c) = (
                device.alloc_zeros::<$ab>(s, n * n)?,
                device.alloc_zeros::<$ab>(s, n * n)?,
                device.alloc_zeros::<$out>(s, n * n)?,
            );
            // A transposed (TN): the layout cuBLAS's int8 tensor-core kernels want.
            let g = GemmEx::new(n, n, n, &a, &b, &c, $compute).transpose(Transpose::Yes, Transpose::No);
            let (ra, rb, mut rc) = (
                stream.alloc_zeros::<$ab>(n * n)?,
                stream.alloc_zeros::<$ab>(n * n)?,
                stream.alloc_zeros::<$out>(n * n)?,
            );
            let (alpha, beta): ($scale, $scale) = ($one, $zero);
            let (best_ours, best_raw) = best_of_3(
                || {
                    per_call(
                        iters,
                        || {
                            h.blas()?.gemm_ex(&g)?;
                            Ok(())
                        },
                        || Ok(device.synchronize(s)?),
                    )
                },
                || {
                    per_call(
                        iters,
                        || {
                            let (pa, _ra) = ra.device_ptr(&stream);
                            let (pb, _rb) = rb.device_ptr(&stream);
                            let (pc, _rc) = rc.device_ptr_mut(&stream);
                            // SAFETY: (1) the raw handle is live and bound to `stream`; (2) three
                            // n x n packed buffers of this context of the named types; (3) C
                            // aliases neither input; (4) host scalars of the compute type's
                            // scale type.
                            unsafe {
                                sys::cublasGemmEx(
                                    *raw.handle(),
                                    sys::cublasOperation_t::CUBLAS_OP_T,
                                    sys::cublasOperation_t::CUBLAS_OP_N,
                                    ni,
                                    ni,
                                    ni,
                                    (&alpha as *const $scale).cast::<c_void>(),
                                    pa as *const c_void,
                                    sys::cudaDataType_t::$raw_ab,
                                    ni,
                                    pb as *const c_void,
                                    sys::cudaDataType_t::$raw_ab,
                                    ni,
                                    (&beta as *const $scale).cast::<c_void>(),
                                    pc as *mut c_void,
                                    sys::cudaDataType_t::$raw_out,
                                    ni,
                                    sys::cublasComputeType_t::$raw_compute,
                                    sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                                )
                            }
                            .result()?;
                            Ok(())
                        },
                        || Ok(stream.synchronize()?),
                    )
                },
            )?;
            println!(
                "| {n}³ {} | {:.1} {} ({:.2} ms) | {:.1} {} ({:.2} ms) | {:.3}x |",
                $label,
                ops / best_ours / 1e12,
                $unit,
                best_ours * 1e3,
                ops / best_raw / 1e12,
                $unit,
                best_raw * 1e3,
                best_raw / best_ours
            );
        }};
    }
    case!(
        i8,
        i32,
        ComputeType::I32,
        CUDA_R_8I,
        CUDA_R_32I,
        CUBLAS_COMPUTE_32I,
        i32,
        1,
        0,
        "TOP/s",
        "int8 gemm_ex (i32)"
    );
    case!(
        f16,
        f32,
        ComputeType::F32,
        CUDA_R_16F,
        CUDA_R_32F,
        CUBLAS_COMPUTE_32F,
        f32,
        1.0,
        0.0,
        "TFLOP/s",
        "f16 gemm_ex (f32 out)"
    );
    Ok(())
}
