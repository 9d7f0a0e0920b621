//! cuBLASLt through cusched against raw cuBLASLt (cudarc's `sys`, one descriptor set up once)
//! in the same run: bf16 and FP8 (E4M3 in, bf16 out) `n³` matmuls with a bias + GELU epilogue,
//! and a 64³ f32 matmul's op-to-wake and host time per enqueued op against cudarc's safe
//! `CudaBlasLT` (which makes its descriptors and re-runs the heuristic on every call). The big
//! rows interleave the two sides' timed rounds and report each side's best (see the header it
//! prints). The raw side runs on buffers of its own.
//!
//! `cargo bench --bench blas_lt --features cublaslt -- [n] [iters]` (needs a GPU).

mod common;

use common::{interleaved, median, ratio};
use cusched::blas_lt::{Epilogue, Fp8Scales, Matmul, Transpose, F8E4M3};
use cusched::cudarc::cublaslt::sys;
use cusched::cudarc::cublaslt::{CudaBlasLT, Matmul as _, MatmulConfig};
use cusched::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cusched::half::bf16;
use cusched::{Device, Handles};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ok(s: sys::cublasStatus_t) -> Res<()> {
    if s == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{s:?}").into())
    }
}

/// A raw cuBLASLt matmul `D = gelu(op(A) B + bias)`, column-major, set up once, on buffers it
/// allocates itself (raw cudarc memory of the stream's context: cusched's buffers stay
/// cusched's): `A` and `B` as bytes of the input type, `D` and the bias bf16 (as `u16`), and
/// for FP8 the scale of A and B, 1.
struct Raw {
    h: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    l: [sys::cublasLtMatrixLayout_t; 4],
    algo: sys::cublasLtMatmulAlgo_t,
    ws: CudaSlice<u8>,
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
    d: CudaSlice<u16>,
    bias: CudaSlice<u16>,
    scale: Option<CudaSlice<f32>>,
}

/// The workspace both sides may use.
const WS_BYTES: usize = 32 << 20;

impl Raw {
    /// The matmul of `n x n` matrices of `ab` (`elem` bytes each), `A` transposed or not, with
    /// the FP8 scales where `fp8`.
    fn new(
        stream: &Arc<CudaStream>,
        n: usize,
        ab: sys::cudaDataType_t,
        elem: usize,
        transa: bool,
        fp8: bool,
    ) -> Res<Raw> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        let a = stream.alloc_zeros::<u8>(n * n * elem)?;
        let b = stream.alloc_zeros::<u8>(n * n * elem)?;
        let d = stream.alloc_zeros::<u16>(n * n)?;
        let bias = stream.alloc_zeros::<u16>(n)?;
        let scale = if fp8 { Some(stream.clone_htod(&[1.0f32])?) } else { None };
        let ws = stream.alloc_zeros::<u8>(WS_BYTES)?;
        // Addresses only: each call records the buffers' uses (`call`).
        let bias_ptr = bias.device_ptr(stream).0;
        let scale_ptr = scale.as_ref().map(|s| s.device_ptr(stream).0);
        let nn = n as u64;
        // SAFETY: host-side descriptor calls on out-pointers and live descriptors, each value of
        // its attribute's type; the bias and scale pointers are this struct's own buffers, which
        // live as long as the descriptor.
        unsafe {
            let mut h = std::ptr::null_mut();
            ok(sys::cublasLtCreate(&mut h))?;
            let mut desc = std::ptr::null_mut();
            ok(sys::cublasLtMatmulDescCreate(
                &mut desc,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType_t::CUDA_R_32F,
            ))?;
            let set =
                |attr: A, p: *const c_void, size: usize| ok(sys::cublasLtMatmulDescSetAttribute(desc, attr, p, size));
            let t = i32::from(transa);
            set(A::CUBLASLT_MATMUL_DESC_TRANSA, (&t as *const i32).cast(), 4)?;
            let epi = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS;
            set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, (&epi as *const sys::cublasLtEpilogue_t).cast(), 4)?;
            let bt = sys::cudaDataType_t::CUDA_R_16BF as i32;
            set(A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, (&bt as *const i32).cast(), 4)?;
            let bp = bias_ptr as *const c_void;
            set(A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, (&bp as *const *const c_void).cast(), 8)?;
            if let Some(s) = scale_ptr {
                let sp = s as *const c_void;
                set(A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, (&sp as *const *const c_void).cast(), 8)?;
                set(A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, (&sp as *const *const c_void).cast(), 8)?;
            }
            let mut l = [std::ptr::null_mut(); 4];
            for (i, ty) in
                [ab, ab, sys::cudaDataType_t::CUDA_R_16BF, sys::cudaDataType_t::CUDA_R_16BF].into_iter().enumerate()
            {
                ok(sys::cublasLtMatrixLayoutCreate(&mut l[i], ty, nn, nn, nn as i64))?;
            }
            let mut pref = std::ptr::null_mut();
            ok(sys::cublasLtMatmulPreferenceCreate(&mut pref))?;
            let wsb = WS_BYTES as u64;
            ok(sys::cublasLtMatmulPreferenceSetAttribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&wsb as *const u64).cast(),
                8,
            ))?;
            let mut res: sys::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
            let mut found = 0;
            ok(sys::cublasLtMatmulAlgoGetHeuristic(h, desc, l[0], l[1], l[2], l[3], pref, 1, &mut res, &mut found))?;
            ok(sys::cublasLtMatmulPreferenceDestroy(pref))?;
            if found < 1 {
                return Err("no raw cuBLASLt algorithm".into());
            }
            Ok(Raw { h, desc, l, algo: res.algo, ws, a, b, d, bias, scale })
        }
    }

    /// Enqueues the matmul on `stream` (the one its buffers were made on).
    fn call(&mut self, stream: &Arc<CudaStream>) -> Res<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (ws, _gw) = self.ws.device_ptr(stream);
        let (a, _ga) = self.a.device_ptr(stream);
        let (b, _gb) = self.b.device_ptr(stream);
        // The descriptor's bias and scale pointers: their uses recorded with the call's.
        let _gbias = self.bias.device_ptr(stream);
        let _gscale = self.scale.as_ref().map(|s| s.device_ptr(stream));
        let (d, _gd) = self.d.device_ptr_mut(stream);
        // SAFETY: (1) a live handle, descriptor, layouts and workspace of `WS_BYTES`, made in the
        // stream's context; (2) `a`, `b` hold n x n elements of the input type, `d` n x n bf16,
        // the bias n bf16 and the scale one f32, all this struct's own buffers of that context,
        // `d` distinct from the others; (3) f32 host scalars for the R_32F scale type.
        unsafe {
            ok(sys::cublasLtMatmul(
                self.h,
                self.desc,
                (&alpha as *const f32).cast(),
                a as *const c_void,
                self.l[0],
                b as *const c_void,
                self.l[1],
                (&beta as *const f32).cast(),
                d as *const c_void,
                self.l[2],
                d as *mut c_void,
                self.l[3],
                &self.algo,
                ws as *mut c_void,
                WS_BYTES,
                stream.cu_stream() as _,
            ))
        }
    }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-blas_lt needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let mut h = Handles::new(&device, s)?;
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "{n}³ rows: {iters} back-to-back calls per round timed to the stream's synchronize, best of 3 interleaved \
         rounds per side (time per call); ratio = raw / cusched"
    );
    println!("| case | cusched | raw cuBLASLt | ratio |");
    println!("| --- | --- | --- | --- |");

    let bias = device.alloc_zeros::<bf16>(s, n)?;
    let d = device.alloc_zeros::<bf16>(s, n * n)?;
    let scale = device.upload(s, &[1.0f32])?;
    for fp8 in [false, true] {
        let (label, ours, theirs) = if fp8 {
            let a = device.alloc_zeros::<F8E4M3>(s, n * n)?;
            let b = device.alloc_zeros::<F8E4M3>(s, n * n)?;
            let scales = Fp8Scales { a: &scale, b: &scale, c: None, d: None };
            let mm = Matmul::new(n, n, n, &a, &b, &d)
                .transpose(Transpose::Yes, Transpose::No)
                .fp8(scales, false)
                .epilogue(Epilogue::GeluBias(&bias));
            let mut raw = Raw::new(&stream, n, sys::cudaDataType_t::CUDA_R_8F_E4M3, 1, true, true)?;
            let (ours, theirs) = interleaved(
                iters,
                || h.blas_lt()?.matmul(&mm).map(drop).map_err(Into::into),
                || raw.call(&stream),
                || Ok(device.synchronize(s)?),
                || Ok(stream.synchronize()?),
            )?;
            ("FP8 E4M3 (bf16 out) bias+GELU", ours, theirs)
        } else {
            let a = device.alloc_zeros::<bf16>(s, n * n)?;
            let b = device.alloc_zeros::<bf16>(s, n * n)?;
            let mm = Matmul::new(n, n, n, &a, &b, &d).epilogue(Epilogue::GeluBias(&bias));
            let mut raw = Raw::new(&stream, n, sys::cudaDataType_t::CUDA_R_16BF, 2, false, false)?;
            let (ours, theirs) = interleaved(
                iters,
                || h.blas_lt()?.matmul(&mm).map(drop).map_err(Into::into),
                || raw.call(&stream),
                || Ok(device.synchronize(s)?),
                || Ok(stream.synchronize()?),
            )?;
            ("bf16 bias+GELU", ours, theirs)
        };
        println!(
            "| {n}³ {label} | {:.1} TFLOP/s ({:.3} ms) | {:.1} TFLOP/s ({:.3} ms) | {} |",
            flops / ours / 1e12,
            ours * 1e3,
            flops / theirs / 1e12,
            theirs * 1e3,
            ratio(ours, theirs)
        );
    }

    // 64³ f32: op then wait with the cached plan, against CudaBlasLT::matmul then synchronize.
    let m = 64;
    let (a, b, c) = (
        device.alloc_zeros::<f32>(s, m * m)?,
        device.alloc_zeros::<f32>(s, m * m)?,
        device.alloc_zeros::<f32>(s, m * m)?,
    );
    let mm = Matmul::new(m, m, m, &a, &b, &c).tf32(true);
    let safe = CudaBlasLT::new(stream.clone())?;
    let (ra, rb, mut rc) =
        (stream.alloc_zeros::<f32>(m * m)?, stream.alloc_zeros::<f32>(m * m)?, stream.alloc_zeros::<f32>(m * m)?);
    let cfg = MatmulConfig {
        transa: false,
        transb: false,
        transc: false,
        m: m as u64,
        n: m as u64,
        k: m as u64,
        alpha: 1.0,
        lda: m as i64,
        ldb: m as i64,
        beta: 0.0,
        ldc: m as i64,
        stride_a: None,
        stride_b: None,
        stride_c: None,
        stride_bias: None,
        batch_size: None,
    };
    let reps = 2000;
    let (mut ours, mut theirs) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for _ in 0..reps {
        let t = Instant::now();
        h.blas_lt()?.matmul(&mm)?.wait()?;
        ours.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        // SAFETY: three packed 64 x 64 f32 buffers of this context.
        unsafe { safe.matmul(cfg, &ra, &rb, &mut rc, None, None) }?;
        stream.synchronize()?;
        theirs.push(t.elapsed().as_secs_f64());
    }
    let (o, t) = (median(&mut ours), median(&mut theirs));
    println!(
        "| 64³ f32 (TF32) matmul, op to wake (median of {reps}; {} plan made) | {:.1} µs | {:.1} µs (CudaBlasLT, heuristic per call) | {:.3}x |",
        h.blas_lt()?.plans_made() - 2,
        o * 1e6,
        t * 1e6,
        t / o
    );

    // Host time per op: enqueue ENQUEUED matmuls without waiting (timed up to the last enqueue),
    // then drain; interleaved rounds, the median per side. Shows the cached plan against a
    // descriptor set and a heuristic per call.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        for side in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            if side == 0 {
                for _ in 0..ENQUEUED {
                    drop(h.blas_lt()?.matmul(&mm)?);
                }
            } else {
                for _ in 0..ENQUEUED {
                    // SAFETY: as above.
                    unsafe { safe.matmul(cfg, &ra, &rb, &mut rc, None, None) }?;
                }
            }
            let host = t.elapsed().as_secs_f64() / ENQUEUED as f64;
            device.synchronize(s)?;
            stream.synchronize()?;
            // Round 0 warms both sides up.
            if round > 0 {
                if side == 0 { &mut ours } else { &mut theirs }.push(host);
            }
        }
    }
    let _ = rc.device_ptr_mut(&stream);
    let (o, t) = (median(&mut ours), median(&mut theirs));
    println!(
        "| 64³ f32 (TF32) matmul, host time per op ({ENQUEUED} enqueued without waiting, median of {ROUNDS} rounds) | {:.2} µs | {:.2} µs (CudaBlasLT) | {:.3}x |",
        o * 1e6,
        t * 1e6,
        t / o
    );
    Ok(())
}

/// Matmuls enqueued per round in the host-time row.
const ENQUEUED: usize = 1000;
/// Rounds per side in the host-time row.
const ROUNDS: usize = 5;
