//! cuSOLVER dense side by side with raw cuSOLVER (cudarc's `sys`, same stream, same buffers)
//! in one process: Cholesky (`potrf`) and LU (`getrf`, pivoted) at n = 8192 in f32 and f64,
//! and batched Jacobi SVD (`gesvdjBatched`, 512 matrices of 32 x 32, f32).
//!
//! `cargo bench --features cusolver --bench solver -- [n] [reps]`. Prints
//! `| op | raw ms | cusched ms | ratio |`; the ratio is raw time over cusched time (1.00: the
//! same; the target is ≥ 0.99).

use cusched::cudarc::cusolver::sys;
use cusched::solver::{Fill, GesvdjBatched, Getrf, Potrf};
use cusched::{Device, GpuRef, Handles, StreamId};
use std::ffi::c_void;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ok(s: sys::cusolverStatus_t, call: &str) -> Res<()> {
    if s == sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {s:?}").into())
    }
}

/// Milliseconds per call: two warm-up calls, then `reps` timed ones, synchronized around.
fn per_call(device: &Device, s: StreamId, reps: usize, mut call: impl FnMut() -> Res<()>) -> Res<f64> {
    for _ in 0..2 {
        call()?;
    }
    device.synchronize(s)?;
    let t = Instant::now();
    for _ in 0..reps {
        call()?;
    }
    device.synchronize(s)?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

/// The best of three interleaved rounds of each, so clocks treat both alike; prints the row.
fn row(label: &str, mut raw: impl FnMut() -> Res<f64>, mut ours: impl FnMut() -> Res<f64>) -> Res<()> {
    let (mut r, mut o) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        r = r.min(raw()?);
        o = o.min(ours()?);
    }
    println!("| {label} | {r:.3} | {o:.3} | {:.3}x |", r / o);
    Ok(())
}

/// A raw cuSOLVER handle on the bench stream, with its params object.
struct Raw {
    h: sys::cusolverDnHandle_t,
    p: sys::cusolverDnParams_t,
}

impl Raw {
    fn new(stream: sys::cudaStream_t) -> Res<Raw> {
        let (mut h, mut p) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers; the stream is live for the whole bench.
        unsafe {
            ok(sys::cusolverDnCreate(&mut h), "cusolverDnCreate")?;
            ok(sys::cusolverDnSetStream(h, stream), "cusolverDnSetStream")?;
            ok(sys::cusolverDnCreateParams(&mut p), "cusolverDnCreateParams")?;
        }
        Ok(Raw { h, p })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: created once in `new`, the stream synchronized by then.
        unsafe {
            sys::cusolverDnDestroyParams(self.p);
            sys::cusolverDnDestroy(self.h);
        }
    }
}

fn ptr<T: cusched::Element>(b: &GpuRef<T>) -> Res<*mut c_void> {
    Ok(b.raw_device_ptr()? as *mut c_void)
}

/// `potrf` and `getrf` of one element type: the raw side queries its workspace once and
/// allocates it and its status word up front, as a careful raw caller would.
fn factorizations<T: cusched::solver::SolverElement + From<f32>>(
    device: &Device,
    s: StreamId,
    h: &mut Handles,
    raw: &Raw,
    (n, reps): (usize, usize),
    (label, dt): (&str, sys::cudaDataType),
) -> Res<()> {
    // n·I: symmetric positive definite, and factoring it in place again stays so (its factor
    // is a positive diagonal), so every rep factors a valid matrix without a refill.
    let mut host = vec![T::from(0.0); n * n];
    for i in 0..n {
        host[i + i * n] = T::from(n as f32);
    }
    let a = device.upload(s, &host)?;
    drop(host);
    let ipiv = device.alloc_zeros::<i64>(s, n)?;
    let info = device.alloc_zeros::<i32>(s, 1)?;
    let (ap, pp, ip) = (ptr(&a)?, ipiv.raw_device_ptr()? as *mut i64, info.raw_device_ptr()? as *mut i32);
    let (ni, lower) = (n as i64, sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER);
    let (mut pd, mut ph, mut gd, mut gh) = (0usize, 0usize, 0usize, 0usize);
    // SAFETY: a live handle; the queries read no buffer.
    unsafe {
        ok(
            sys::cusolverDnXpotrf_bufferSize(raw.h, raw.p, lower, ni, dt, ap, ni, dt, &mut pd, &mut ph),
            "potrf_bufferSize",
        )?;
        ok(
            sys::cusolverDnXgetrf_bufferSize(raw.h, raw.p, ni, ni, dt, ap, ni, dt, &mut gd, &mut gh),
            "getrf_bufferSize",
        )?;
    }
    let dwork = device.alloc_zeros::<u8>(s, pd.max(gd).max(1))?;
    let mut hwork = vec![0u8; ph.max(gh).max(1)];
    let wp = ptr(&dwork)?;
    let hp = hwork.as_mut_ptr() as *mut c_void;
    device.synchronize(s)?;

    let raw_potrf = || {
        // SAFETY: live handle on the bench stream; `a` is n x n, the workspaces hold the queried
        // sizes, `info` one int; nothing else uses them meanwhile.
        ok(unsafe { sys::cusolverDnXpotrf(raw.h, raw.p, lower, ni, dt, ap, ni, dt, wp, pd, hp, ph, ip) }, "potrf")
    };
    let raw_getrf = || {
        // SAFETY: as above, `ipiv` holds n pivots.
        ok(unsafe { sys::cusolverDnXgetrf(raw.h, raw.p, ni, ni, dt, ap, ni, pp, dt, wp, gd, hp, gh, ip) }, "getrf")
    };
    row(
        &format!("potrf {label} n={n}"),
        || per_call(device, s, reps, raw_potrf),
        || {
            per_call(device, s, reps, || {
                h.solver()?.potrf(&Potrf { fill: Fill::Lower, n, a: &a, lda: None }).map(drop).map_err(Into::into)
            })
        },
    )?;
    row(
        &format!("getrf {label} n={n}"),
        || per_call(device, s, reps, raw_getrf),
        || {
            per_call(device, s, reps, || {
                h.solver()?.getrf(&Getrf { m: n, n, a: &a, lda: None, ipiv: Some(&ipiv) }).map(drop).map_err(Into::into)
            })
        },
    )?;
    device.synchronize(s)?;
    drop(hwork);
    Ok(())
}

/// `gesvdjBatched`: `batch` f32 matrices of order `m`, vectors computed. Jacobi iterates, so
/// every rep refills the inputs from a pristine copy on both sides (the copy is in both times).
fn gesvdj_batched(
    device: &Device,
    s: StreamId,
    h: &mut Handles,
    raw: &Raw,
    (m, batch, reps): (usize, usize, usize),
) -> Res<()> {
    let len = m * m * batch;
    let host: Vec<f32> = (0..len).map(|i| ((i * 7919 % 1013) as f32 / 1013.0) - 0.5).collect();
    let pristine = device.upload(s, &host)?;
    let a = device.alloc_zeros::<f32>(s, len)?;
    let (sv, u, v) = (
        device.alloc_zeros::<f32>(s, m * batch)?,
        device.alloc_zeros::<f32>(s, len)?,
        device.alloc_zeros::<f32>(s, len)?,
    );
    let info = device.alloc_zeros::<i32>(s, batch)?;
    let (ap, sp, up, vp, ip) = (ptr(&a)?, ptr(&sv)?, ptr(&u)?, ptr(&v)?, info.raw_device_ptr()? as *mut i32);
    let (mi, bi, mode) = (m as i32, batch as i32, sys::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR);
    let mut params: sys::gesvdjInfo_t = std::ptr::null_mut();
    let mut lwork = 0;
    // SAFETY: valid out-pointers; the query reads no buffer.
    unsafe {
        ok(sys::cusolverDnCreateGesvdjInfo(&mut params), "CreateGesvdjInfo")?;
        ok(
            sys::cusolverDnSgesvdjBatched_bufferSize(
                raw.h, mode, mi, mi, ap as _, mi, sp as _, up as _, mi, vp as _, mi, &mut lwork, params, bi,
            ),
            "gesvdjBatched_bufferSize",
        )?;
    }
    let work = device.alloc_zeros::<f32>(s, lwork.max(1) as usize)?;
    let wp = ptr(&work)?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let bytes = len * std::mem::size_of::<f32>();
    let (src, dst) = (pristine.raw_device_ptr()?, a.raw_device_ptr()?);
    let refill = || -> Res<()> {
        // SAFETY: both buffers hold `len` f32 on this device; the copy is ordered on the stream.
        unsafe { cusched::cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }?;
        Ok(())
    };
    device.synchronize(s)?;
    let raw_call = || {
        refill()?;
        // SAFETY: live handle and params on the bench stream; the buffers hold `batch`
        // matrices of order m, `s` m per matrix, the workspace `lwork` floats, `info` `batch`.
        ok(
            unsafe {
                sys::cusolverDnSgesvdjBatched(
                    raw.h, mode, mi, mi, ap as _, mi, sp as _, up as _, mi, vp as _, mi, wp as _, lwork, ip, params, bi,
                )
            },
            "gesvdjBatched",
        )
    };
    let g =
        GesvdjBatched { vectors: true, m, n: m, batch, a: &a, lda: None, s: &sv, u: &u, ldu: None, v: &v, ldv: None };
    row(
        &format!("gesvdjBatched f32 {batch} x {m}²"),
        || per_call(device, s, reps, raw_call),
        || {
            per_call(device, s, reps, || {
                refill()?;
                h.solver()?.gesvdj_batched(&g).map(drop).map_err(Into::into)
            })
        },
    )?;
    device.synchronize(s)?;
    // SAFETY: made above; the stream is idle.
    unsafe { sys::cusolverDnDestroyGesvdjInfo(params) };
    Ok(())
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-solver needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let raw = Raw::new(stream.cu_stream() as sys::cudaStream_t)?;
    let mut h = Handles::new(&device, s)?;
    println!("| op | raw ms | cusched ms | ratio |");
    println!("| --- | --- | --- | --- |");
    factorizations::<f32>(&device, s, &mut h, &raw, (n, reps), ("f32", sys::cudaDataType::CUDA_R_32F))?;
    factorizations::<f64>(&device, s, &mut h, &raw, (n, reps), ("f64", sys::cudaDataType::CUDA_R_64F))?;
    gesvdj_batched(&device, s, &mut h, &raw, (32, 512, reps.max(20)))?;
    device.synchronize(s)?;
    Ok(())
}
