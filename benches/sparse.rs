//! cuSPARSE passthrough: SpMV, SpMM and SpGEMM of a random 10⁶-row matrix (about 10 nonzeros
//! per row, f32, i32 indices) through cusched next to the same calls through cuSPARSE's raw
//! API (cudarc's `sys`), in one process on one stream.
//!
//! `cargo bench --bench sparse --features cusparse -- [rows] [iterations]`

mod common;

use common::{best_of_3, per_call};

use cusched::cudarc::cusparse::sys;
use cusched::sparse::{DenseMatrix, SparseMatrix, Transpose};
use cusched::{Device, Handles};
use std::ffi::c_void;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ok(s: sys::cusparseStatus_t, call: &str) -> Res<()> {
    if s == sys::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {s:?}").into())
    }
}

fn row(case: &str, ours: f64, raw: f64) {
    println!("| {case} | {:.3} ms | {:.3} ms | {:.3}x |", ours * 1e3, raw * 1e3, raw / ours);
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let rows: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-sparse needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on
    // this one stream, and synchronizes it before each timing ends; (2) memory cusched owns is
    // used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let mut h = Handles::new(&device, s)?;

    // A random matrix: 5 to 15 nonzeros per row at random columns (sorted, distinct).
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut off, mut idx) = (vec![0i32], Vec::new());
    for _ in 0..rows {
        let k = 5 + (next() % 11) as usize;
        let mut cols: Vec<i32> = (0..k).map(|_| (next() % rows as u64) as i32).collect();
        cols.sort_unstable();
        cols.dedup();
        idx.extend_from_slice(&cols);
        off.push(idx.len() as i32);
    }
    let nnz = idx.len();
    let vals: Vec<f32> = (0..nnz).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    let (o, i, v) = (device.upload(s, &off)?, device.upload(s, &idx)?, device.upload(s, &vals)?);
    let a = SparseMatrix::csr(rows, rows, nnz, &o, &i, &v)?;
    let ncols = 8;
    let (x, y) = (device.upload(s, &vec![1.0f32; rows])?, device.alloc_zeros::<f32>(s, rows)?);
    let (b, c) = (device.upload(s, &vec![1.0f32; rows * ncols])?, device.alloc_zeros::<f32>(s, rows * ncols)?);
    let (rx, ry) = (device.upload(s, &vec![1.0f32; rows])?, device.alloc_zeros::<f32>(s, rows)?);
    let (rb, rc) = (device.upload(s, &vec![1.0f32; rows * ncols])?, device.alloc_zeros::<f32>(s, rows * ncols)?);
    device.synchronize(s)?;

    // The raw side: its own handle and descriptors on the same stream.
    let r32 = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
    let base = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
    let f32t = sys::cudaDataType::CUDA_R_32F;
    let nt = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    let col = sys::cusparseOrder_t::CUSPARSE_ORDER_COL;
    let p = |g: &cusched::GpuRef<f32>| g.raw_device_ptr().map(|p| p as *mut c_void);
    let pi = |g: &cusched::GpuRef<i32>| g.raw_device_ptr().map(|p| p as *mut c_void);
    let (mut rh, mut ma, mut vx, mut vy, mut mb, mut mc) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let n = rows as i64;
    // SAFETY: out-pointers are valid; the buffers are live device buffers of this context, sized
    // for the shapes given; the handle is bound to the bench's stream, which outlives it.
    unsafe {
        ok(sys::cusparseCreate(&mut rh), "cusparseCreate")?;
        ok(sys::cusparseSetStream(rh, stream.cu_stream() as _), "cusparseSetStream")?;
        ok(
            sys::cusparseCreateCsr(&mut ma, n, n, nnz as i64, pi(&o)?, pi(&i)?, p(&v)?, r32, r32, base, f32t),
            "cusparseCreateCsr",
        )?;
        ok(sys::cusparseCreateDnVec(&mut vx, n, p(&rx)?, f32t), "cusparseCreateDnVec")?;
        ok(sys::cusparseCreateDnVec(&mut vy, n, p(&ry)?, f32t), "cusparseCreateDnVec")?;
        ok(sys::cusparseCreateDnMat(&mut mb, n, ncols as i64, n, p(&rb)?, f32t, col), "cusparseCreateDnMat")?;
        ok(sys::cusparseCreateDnMat(&mut mc, n, ncols as i64, n, p(&rc)?, f32t, col), "cusparseCreateDnMat")?;
    }
    let (one, zero) = (1.0f32, 0.0f32);
    let (al, be) = ((&one as *const f32).cast::<c_void>(), (&zero as *const f32).cast::<c_void>());
    let mv_alg = sys::cusparseSpMVAlg_t::CUSPARSE_SPMV_ALG_DEFAULT;
    let mm_alg = sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT;
    let (mut mv_bytes, mut mm_bytes) = (0usize, 0usize);
    // SAFETY: as above.
    unsafe {
        ok(
            sys::cusparseSpMV_bufferSize(rh, nt, al, ma as _, vx as _, be, vy, f32t, mv_alg, &mut mv_bytes),
            "SpMV_bufferSize",
        )?;
        ok(
            sys::cusparseSpMM_bufferSize(rh, nt, nt, al, ma as _, mb as _, be, mc, f32t, mm_alg, &mut mm_bytes),
            "SpMM_bufferSize",
        )?;
    }
    let mv_buf = device.alloc::<u8>(s, mv_bytes.max(1))?;
    let mm_buf = device.alloc::<u8>(s, mm_bytes.max(1))?;
    let (mvp, mmp) = (mv_buf.raw_device_ptr()? as *mut c_void, mm_buf.raw_device_ptr()? as *mut c_void);
    let sync = || -> Res<()> { Ok(stream.synchronize()?) };

    println!("random {rows}-row matrix, {nnz} nonzeros (f32, i32 indices)");
    println!("| case | cusched | raw cuSPARSE | ratio |");
    println!("| --- | --- | --- | --- |");
    let (ours, raw) = best_of_3(
        || {
            per_call(
                iters,
                || {
                    h.sparse()?.spmv(Transpose::No, 1.0, &a, &x, 0.0, &y)?;
                    Ok(())
                },
                sync,
            )
        },
        // SAFETY: as above; the buffer holds the size queried.
        || {
            per_call(
                iters,
                || ok(unsafe { sys::cusparseSpMV(rh, nt, al, ma as _, vx as _, be, vy, f32t, mv_alg, mvp) }, "SpMV"),
                sync,
            )
        },
    )?;
    row("SpMV", ours, raw);
    let (ours, raw) = best_of_3(
        || {
            per_call(
                iters,
                || {
                    h.sparse()?.spmm(
                        Transpose::No,
                        1.0,
                        &a,
                        DenseMatrix::new(&b, rows, ncols),
                        0.0,
                        DenseMatrix::new(&c, rows, ncols),
                    )?;
                    Ok(())
                },
                sync,
            )
        },
        // SAFETY: as above.
        || {
            per_call(
                iters,
                || {
                    ok(
                        unsafe { sys::cusparseSpMM(rh, nt, nt, al, ma as _, mb as _, be, mc, f32t, mm_alg, mmp) },
                        "SpMM",
                    )
                },
                sync,
            )
        },
    )?;
    row(&format!("SpMM ({ncols} columns)"), ours, raw);

    let gemm_iters = (iters / 10).max(2);
    let (ours, raw) = best_of_3(
        || {
            per_call(
                gemm_iters,
                || {
                    h.sparse()?.spgemm(1.0f32, &a, &a)?;
                    Ok(())
                },
                sync,
            )
        },
        || per_call(gemm_iters, || raw_spgemm(&device, s, rh, ma, rows), sync),
    )?;
    row("SpGEMM A·A (whole protocol)", ours, raw);

    // SAFETY: every descriptor and the handle are destroyed once, after the stream drained.
    unsafe {
        stream.synchronize()?;
        for d in [vx, vy] {
            sys::cusparseDestroyDnVec(d);
        }
        for d in [mb, mc] {
            sys::cusparseDestroyDnMat(d);
        }
        sys::cusparseDestroySpMat(ma);
        sys::cusparseDestroy(rh);
    }
    Ok(())
}

/// One SpGEMM `C = A A` through the raw API: estimation, compute, size, allocation, copy.
fn raw_spgemm(
    device: &Device,
    s: cusched::StreamId,
    h: sys::cusparseHandle_t,
    a: sys::cusparseSpMatDescr_t,
    rows: usize,
) -> Res<()> {
    let f32t = sys::cudaDataType::CUDA_R_32F;
    let nt = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    let alg = sys::cusparseSpGEMMAlg_t::CUSPARSE_SPGEMM_DEFAULT;
    let r32 = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
    let base = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
    let (one, zero) = (1.0f32, 0.0f32);
    let (al, be) = ((&one as *const f32).cast::<c_void>(), (&zero as *const f32).cast::<c_void>());
    let n = rows as i64;
    let offsets = device.alloc::<i32>(s, rows + 1)?;
    let (mut c, mut d) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut s1, mut s2) = (0usize, 0usize);
    // SAFETY: the descriptors are live; buffers are allocated to the sizes queried, on the
    // handle's stream, and freed after the stream's later work (tracked buffers).
    unsafe {
        let op = offsets.raw_device_ptr()? as *mut c_void;
        ok(
            sys::cusparseCreateCsr(
                &mut c,
                n,
                n,
                0,
                op,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                r32,
                r32,
                base,
                f32t,
            ),
            "CreateCsr",
        )?;
        ok(sys::cusparseSpGEMM_createDescr(&mut d), "createDescr")?;
        ok(
            sys::cusparseSpGEMM_workEstimation(
                h,
                nt,
                nt,
                al,
                a as _,
                a as _,
                be,
                c,
                f32t,
                alg,
                d,
                &mut s1,
                std::ptr::null_mut(),
            ),
            "we",
        )?;
        let b1 = device.alloc::<u8>(s, s1.max(1))?;
        ok(
            sys::cusparseSpGEMM_workEstimation(
                h,
                nt,
                nt,
                al,
                a as _,
                a as _,
                be,
                c,
                f32t,
                alg,
                d,
                &mut s1,
                b1.raw_device_ptr()? as _,
            ),
            "we",
        )?;
        ok(
            sys::cusparseSpGEMM_compute(
                h,
                nt,
                nt,
                al,
                a as _,
                a as _,
                be,
                c,
                f32t,
                alg,
                d,
                &mut s2,
                std::ptr::null_mut(),
            ),
            "compute",
        )?;
        let b2 = device.alloc::<u8>(s, s2.max(1))?;
        ok(
            sys::cusparseSpGEMM_compute(
                h,
                nt,
                nt,
                al,
                a as _,
                a as _,
                be,
                c,
                f32t,
                alg,
                d,
                &mut s2,
                b2.raw_device_ptr()? as _,
            ),
            "compute",
        )?;
        let (mut r, mut cc, mut nnz) = (0, 0, 0);
        ok(sys::cusparseSpMatGetSize(c as _, &mut r, &mut cc, &mut nnz), "GetSize")?;
        let ci = device.alloc::<i32>(s, (nnz as usize).max(1))?;
        let cv = device.alloc::<f32>(s, (nnz as usize).max(1))?;
        ok(sys::cusparseCsrSetPointers(c, op, ci.raw_device_ptr()? as _, cv.raw_device_ptr()? as _), "SetPointers")?;
        ok(sys::cusparseSpGEMM_copy(h, nt, nt, al, a as _, a as _, be, c, f32t, alg, d), "copy")?;
        // Host objects: destroying them does not wait for the GPU.
        sys::cusparseSpGEMM_destroyDescr(d);
        sys::cusparseDestroySpMat(c);
    }
    Ok(())
}
