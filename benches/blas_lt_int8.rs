//! cuBLASLt i8 matmul passthrough: an `n³` i8 x i8 into i32 matmul (`CUBLAS_COMPUTE_32I`, the
//! TN layout IMMA kernels take) through cusched's `BlasLt::matmul`, next to the same matmul on a
//! raw cuBLASLt handle (cudarc's `sys`) on the same stream, its descriptor, layouts and
//! heuristic asked once with the preferences cusched gives it (the same workspace limit, 256-byte
//! alignment), so both run the heuristic's first algorithm. Interleaved rounds, the best of each
//! over three (`benches/common`); prints TOP/s and the ratio raw / cusched.
//!
//! `cargo bench --bench blas_lt_int8 --features cublaslt -- [n] [iters]` (needs a GPU; `n` a
//! multiple of 4).

mod common;

use common::{interleaved, ratio};
use cusched::blas_lt::{Matmul, Transpose};
use cusched::cudarc::cublaslt::sys;
use cusched::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cusched::{Device, Handles};
use std::ffi::c_void;
use std::sync::Arc;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ok(s: sys::cublasStatus_t) -> Res<()> {
    if s == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{s:?}").into())
    }
}

/// A raw cuBLASLt i8 TN matmul `D (i32) = Aᵀ B`, column-major, set up once.
struct Raw {
    h: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    l: [sys::cublasLtMatrixLayout_t; 4],
    algo: sys::cublasLtMatmulAlgo_t,
    ws: CudaSlice<u8>,
    ws_bytes: usize,
}

impl Raw {
    fn new(stream: &Arc<CudaStream>, n: u64, ws_bytes: usize) -> Res<Raw> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        // SAFETY: (1) host-side descriptor calls on valid out-pointers, with attribute values of
        // the attributes' types (int32 transpose, uint64 workspace bytes, uint32 alignments);
        // (2) the handle is created in the stream's context, which the caller bound.
        unsafe {
            let mut h = std::ptr::null_mut();
            ok(sys::cublasLtCreate(&mut h))?;
            let mut desc = std::ptr::null_mut();
            ok(sys::cublasLtMatmulDescCreate(
                &mut desc,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32I,
                sys::cudaDataType_t::CUDA_R_32I,
            ))?;
            let t = 1i32;
            ok(sys::cublasLtMatmulDescSetAttribute(
                desc,
                A::CUBLASLT_MATMUL_DESC_TRANSA,
                (&t as *const i32).cast(),
                4,
            ))?;
            let mut l = [std::ptr::null_mut(); 4];
            let (i8t, i32t) = (sys::cudaDataType_t::CUDA_R_8I, sys::cudaDataType_t::CUDA_R_32I);
            for (i, ty) in [i8t, i8t, i32t, i32t].into_iter().enumerate() {
                ok(sys::cublasLtMatrixLayoutCreate(&mut l[i], ty, n, n, n as i64))?;
            }
            let mut pref = std::ptr::null_mut();
            ok(sys::cublasLtMatmulPreferenceCreate(&mut pref))?;
            let wsb = ws_bytes as u64;
            ok(sys::cublasLtMatmulPreferenceSetAttribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&wsb as *const u64).cast(),
                8,
            ))?;
            let align = 256u32;
            for attr in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ] {
                ok(sys::cublasLtMatmulPreferenceSetAttribute(pref, attr, (&align as *const u32).cast(), 4))?;
            }
            let mut res: sys::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
            let mut found = 0;
            ok(sys::cublasLtMatmulAlgoGetHeuristic(h, desc, l[0], l[1], l[2], l[3], pref, 1, &mut res, &mut found))?;
            ok(sys::cublasLtMatmulPreferenceDestroy(pref))?;
            if found < 1 {
                return Err("no raw cuBLASLt i8 algorithm".into());
            }
            Ok(Raw { h, desc, l, algo: res.algo, ws: stream.alloc_zeros::<u8>(ws_bytes)?, ws_bytes })
        }
    }

    /// Enqueues `d = aᵀ b` on `stream`.
    fn call(&self, stream: &Arc<CudaStream>, a: &CudaSlice<i8>, b: &CudaSlice<i8>, d: &mut CudaSlice<i32>) -> Res<()> {
        let (alpha, beta) = (1i32, 0i32);
        let (ws, _g) = self.ws.device_ptr(stream);
        let (a, _ga) = a.device_ptr(stream);
        let (b, _gb) = b.device_ptr(stream);
        let (d, _gd) = d.device_ptr_mut(stream);
        // SAFETY: (1) a live handle, descriptor, layouts and workspace of `ws_bytes`, made in the
        // stream's context; (2) `a`, `b` are n x n i8 buffers and `d` an n x n i32 one of that
        // context (the sizes `main` allocates), `d` distinct from both; (3) i32 host scalars for
        // the R_32I scale type.
        unsafe {
            ok(sys::cublasLtMatmul(
                self.h,
                self.desc,
                (&alpha as *const i32).cast(),
                a as *const c_void,
                self.l[0],
                b as *const c_void,
                self.l[1],
                (&beta as *const i32).cast(),
                d as *const c_void,
                self.l[2],
                d as *mut c_void,
                self.l[3],
                &self.algo,
                ws as *mut c_void,
                self.ws_bytes,
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
            println!("bench-blas_lt_int8 needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own (its buffers and
    // workspace), made from and used on this one stream, and synchronizes it before each timing
    // ends; (2) memory cusched owns is used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let mut h = Handles::new(&device, s)?;
    // The workspace limit cusched's plans use.
    let ws_bytes = if device.compute_capability()?.0 >= 9 { 32 << 20 } else { 4 << 20 };
    let ops = 2.0 * (n as f64).powi(3);
    let a = device.alloc_zeros::<i8>(s, n * n)?;
    let b = device.alloc_zeros::<i8>(s, n * n)?;
    let d = device.alloc_zeros::<i32>(s, n * n)?;
    let mm = Matmul::new(n, n, n, &a, &b, &d).transpose(Transpose::Yes, Transpose::No);
    stream.context().bind_to_thread()?;
    let raw = Raw::new(&stream, n as u64, ws_bytes)?;
    // The raw side's own buffers: memory cusched owns is touched by cusched's ops only.
    let (ra, rb, mut rd) =
        (stream.alloc_zeros::<i8>(n * n)?, stream.alloc_zeros::<i8>(n * n)?, stream.alloc_zeros::<i32>(n * n)?);
    let (ours, theirs) = interleaved(
        iters,
        || h.blas_lt()?.matmul(&mm).map(drop).map_err(Into::into),
        || raw.call(&stream, &ra, &rb, &mut rd),
        || Ok(device.synchronize(s)?),
        || Ok(stream.synchronize()?),
    )?;
    println!("{n}³ i8 TN into i32: {iters} back-to-back calls per round, best of 3 interleaved rounds per side");
    println!("| case | cusched | raw cuBLASLt | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| {n}³ i8 x i8 -> i32 (TN, COMPUTE_32I) | {:.1} TOP/s ({:.3} ms) | {:.1} TOP/s ({:.3} ms) | {} |",
        ops / ours / 1e12,
        ours * 1e3,
        ops / theirs / 1e12,
        theirs * 1e3,
        ratio(ours, theirs)
    );
    Ok(())
}
