//! cuBLASLt through cusched against raw cuBLASLt (cudarc's `sys`, one descriptor set up once)
//! in the same run: bf16 and FP8 (E4M3 in, bf16 out) `n³` matmuls with a bias + GELU epilogue,
//! and a 64³ f32 matmul's op-to-wake and host time per enqueued op against cudarc's safe
//! `CudaBlasLT` (which makes its descriptors and re-runs the heuristic on every call). The big
//! rows interleave the two sides' timed rounds and report the median round (see the header it
//! prints).
//!
//! `cargo bench --bench blas_lt --features cublaslt -- [n] [iters]` (needs a GPU).

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

/// A raw cuBLASLt matmul `D = gelu(op(A) B + bias)`, column-major, set up once.
struct Raw {
    h: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    l: [sys::cublasLtMatrixLayout_t; 4],
    algo: sys::cublasLtMatmulAlgo_t,
    ws: CudaSlice<u8>,
}

impl Raw {
    /// # Safety
    /// `bias` and `scales` are live device pointers of the stream's context.
    unsafe fn new(
        stream: &Arc<CudaStream>,
        n: u64,
        ab: sys::cudaDataType_t,
        transa: bool,
        bias: u64,
        scales: Option<u64>,
    ) -> Res<Raw> {
        use sys::cublasLtMatmulDescAttributes_t as A;
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
            let bp = bias as *const c_void;
            set(A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, (&bp as *const *const c_void).cast(), 8)?;
            if let Some(s) = scales {
                let sp = s as *const c_void;
                set(A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, (&sp as *const *const c_void).cast(), 8)?;
                set(A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, (&sp as *const *const c_void).cast(), 8)?;
            }
            let mut l = [std::ptr::null_mut(); 4];
            for (i, ty) in
                [ab, ab, sys::cudaDataType_t::CUDA_R_16BF, sys::cudaDataType_t::CUDA_R_16BF].into_iter().enumerate()
            {
                ok(sys::cublasLtMatrixLayoutCreate(&mut l[i], ty, n, n, n as i64))?;
            }
            let ws_bytes = 32usize << 20;
            let mut pref = std::ptr::null_mut();
            ok(sys::cublasLtMatmulPreferenceCreate(&mut pref))?;
            let wsb = ws_bytes as u64;
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
            Ok(Raw { h, desc, l, algo: res.algo, ws: stream.alloc_zeros::<u8>(ws_bytes)? })
        }
    }

    /// # Safety
    /// `a`, `b`, `d` are live `n x n` device buffers of the types given to `new`.
    unsafe fn call(&self, stream: &Arc<CudaStream>, a: u64, b: u64, d: u64) -> Res<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (ws, _g) = self.ws.device_ptr(stream);
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
                32 << 20,
                stream.cu_stream() as _,
            ))
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
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
        "{n}³ rows: {WARMUP} warm-up calls per side, then {ROUNDS} interleaved rounds (cusched and raw, the order \
         swapped every round) of {iters} back-to-back calls timed to the stream's synchronize; per side the median \
         round's time per call (best round in brackets); ratio = raw / cusched of the medians"
    );
    println!("| case | cusched | raw cuBLASLt | ratio |");
    println!("| --- | --- | --- | --- |");

    let bias = device.alloc_zeros::<bf16>(s, n)?;
    let d = device.alloc_zeros::<bf16>(s, n * n)?;
    let scale = device.upload(s, &[1.0f32])?;
    for fp8 in [false, true] {
        let (label, ours, raw) = if fp8 {
            let a = device.alloc_zeros::<F8E4M3>(s, n * n)?;
            let b = device.alloc_zeros::<F8E4M3>(s, n * n)?;
            let scales = Fp8Scales { a: &scale, b: &scale, c: None, d: None };
            let mm = Matmul::new(n, n, n, &a, &b, &d)
                .transpose(Transpose::Yes, Transpose::No)
                .fp8(scales, false)
                .epilogue(Epilogue::GeluBias(&bias));
            // SAFETY: the pointers are live buffers of this context, kept alive below.
            let raw = unsafe {
                Raw::new(
                    &stream,
                    n as u64,
                    sys::cudaDataType_t::CUDA_R_8F_E4M3,
                    true,
                    bias.raw_device_ptr()?,
                    Some(scale.raw_device_ptr()?),
                )
            }?;
            let (pa, pb, pd) = (a.raw_device_ptr()?, b.raw_device_ptr()?, d.raw_device_ptr()?);
            let (ours, theirs) = interleaved(
                iters,
                &mut || h.blas_lt()?.matmul(&mm).map(drop).map_err(Into::into),
                &mut || Ok(device.synchronize(s)?),
                // SAFETY: n x n buffers of the raw plan's types, alive for the loop.
                &mut || unsafe { raw.call(&stream, pa, pb, pd) },
                &mut || Ok(stream.synchronize()?),
            )?;
            ("FP8 E4M3 (bf16 out) bias+GELU", ours, theirs)
        } else {
            let a = device.alloc_zeros::<bf16>(s, n * n)?;
            let b = device.alloc_zeros::<bf16>(s, n * n)?;
            let mm = Matmul::new(n, n, n, &a, &b, &d).epilogue(Epilogue::GeluBias(&bias));
            // SAFETY: as above.
            let raw = unsafe {
                Raw::new(&stream, n as u64, sys::cudaDataType_t::CUDA_R_16BF, false, bias.raw_device_ptr()?, None)
            }?;
            let (pa, pb, pd) = (a.raw_device_ptr()?, b.raw_device_ptr()?, d.raw_device_ptr()?);
            let (ours, theirs) = interleaved(
                iters,
                &mut || h.blas_lt()?.matmul(&mm).map(drop).map_err(Into::into),
                &mut || Ok(device.synchronize(s)?),
                // SAFETY: as above.
                &mut || unsafe { raw.call(&stream, pa, pb, pd) },
                &mut || Ok(stream.synchronize()?),
            )?;
            ("bf16 bias+GELU", ours, theirs)
        };
        println!(
            "| {n}³ {label} | {:.1} TFLOP/s ({:.3} ms [{:.3}]) | {:.1} TFLOP/s ({:.3} ms [{:.3}]) | {:.3}x |",
            flops / ours.median / 1e12,
            ours.median * 1e3,
            ours.best * 1e3,
            flops / raw.median / 1e12,
            raw.median * 1e3,
            raw.best * 1e3,
            raw.median / ours.median
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

/// Warm-up calls per side before the timed rounds.
const WARMUP: usize = 3;
/// Timed rounds per side.
const ROUNDS: usize = 5;
/// Matmuls enqueued per round in the host-time row.
const ENQUEUED: usize = 1000;

/// One side's seconds per call: the median round and the best.
#[derive(Clone, Copy)]
struct Timing {
    median: f64,
    best: f64,
}

type Call<'a> = &'a mut dyn FnMut() -> Res<()>;

/// Both sides timed in alternation: `WARMUP` calls each (synchronized), then `ROUNDS` rounds in
/// which each side runs `iters` calls timed to its synchronize, the side that goes first
/// swapped every round (neither always runs right after the other's clocks ramped up).
fn interleaved(
    iters: usize,
    ours: Call<'_>,
    ours_sync: Call<'_>,
    raw: Call<'_>,
    raw_sync: Call<'_>,
) -> Res<(Timing, Timing)> {
    for _ in 0..WARMUP {
        ours()?;
        raw()?;
    }
    ours_sync()?;
    raw_sync()?;
    let (mut o, mut r) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                o.push(round_time(iters, ours, ours_sync)?);
            } else {
                r.push(round_time(iters, raw, raw_sync)?);
            }
        }
    }
    let timing = |v: &mut Vec<f64>| Timing { best: v.iter().copied().fold(f64::MAX, f64::min), median: median(v) };
    Ok((timing(&mut o), timing(&mut r)))
}

/// Seconds per call of `iters` back-to-back calls, timed to `sync`.
fn round_time(iters: usize, call: Call<'_>, sync: Call<'_>) -> Res<f64> {
    let t = Instant::now();
    for _ in 0..iters {
        call()?;
    }
    sync()?;
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}
