//! cuSPARSE passthrough: SpMV, SpMM and SpGEMM of a random 10⁶-row matrix (about 10 nonzeros
//! per row, f32, i32 indices) through cusched next to the same calls through cuSPARSE's raw
//! API (cudarc's `sys`), in one process on one stream. Each side has its own B and C; SpMM is
//! timed again with both sides on cusched's pair and on the raw side's pair, since where the
//! buffers lie in memory alone moved SpMM by 2% on an H200.
//!
//! Then triangular solves after a write of the matrix's values (a device-to-device copy of new
//! values, on both sides): through cusched (the copy, then `spsv` or `spsm`, which finds the
//! values written and has its cached analysis take them) next to raw `updateMatrix` + solve,
//! and SpSV next to raw re-analysis + solve (the analysis run again on the same descriptor and
//! buffer, the cheapest way to analyse anew), on a random lower-triangular matrix of the same
//! rows (2 to 8 nonzeros left of a strong diagonal per row).
//!
//! `cargo bench --bench sparse --features cusparse -- [rows] [iterations]`

mod common;

use common::{best_of_3, interleaved, per_call};

use cusched::cudarc::cusparse::sys;
use cusched::sparse::{DenseMatrix, Fill, SparseMatrix, Transpose, Triangle};
use cusched::{Device, Handles, StreamId};
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
    // SpMM with each side on its own B and C, then with both sides on one pair, each pair in
    // turn: whether a difference follows the buffers (where they lie in memory) or the path.
    let (mut sb, mut sc) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-pointers are valid; `b` and `c` are live device buffers of `rows * ncols`.
    unsafe {
        ok(sys::cusparseCreateDnMat(&mut sb, n, ncols as i64, n, p(&b)?, f32t, col), "cusparseCreateDnMat")?;
        ok(sys::cusparseCreateDnMat(&mut sc, n, ncols as i64, n, p(&c)?, f32t, col), "cusparseCreateDnMat")?;
    }
    let spmm_rows = [
        ("", (&b, &c), (mb, mc)),
        (", both on cusched's B and C", (&b, &c), (sb, sc)),
        (", both on the raw side's B and C", (&rb, &rc), (mb, mc)),
    ];
    for (which, (ob, oc), (db, dc)) in spmm_rows {
        let ours = || -> Res<()> {
            let (bm, cm) = (DenseMatrix::new(ob, rows, ncols), DenseMatrix::new(oc, rows, ncols));
            h.sparse()?.spmm(Transpose::No, 1.0, &a, bm, 0.0, cm)?;
            Ok(())
        };
        // SAFETY: as above; the descriptors describe live buffers of the shapes given.
        let raw =
            || ok(unsafe { sys::cusparseSpMM(rh, nt, nt, al, ma as _, db as _, be, dc, f32t, mm_alg, mmp) }, "SpMM");
        let (ours, raw) = interleaved(iters, ours, raw, sync, sync)?;
        row(&format!("SpMM ({ncols} columns){which}"), ours, raw);
    }

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
    solves_after_a_values_write(&device, s, &mut h, rh, rows, iters)?;

    // SAFETY: every descriptor and the handle are destroyed once, after the stream drained.
    unsafe {
        stream.synchronize()?;
        for d in [vx, vy] {
            sys::cusparseDestroyDnVec(d);
        }
        for d in [mb, mc, sb, sc] {
            sys::cusparseDestroyDnMat(d);
        }
        sys::cusparseDestroySpMat(ma);
        sys::cusparseDestroy(rh);
    }
    Ok(())
}

/// The rows of triangular solves after a write of the matrix's values (see the module docs),
/// raw on handle `h`: its own copies of the matrix, right-hand sides and analyses.
fn solves_after_a_values_write(
    device: &Device,
    s: StreamId,
    h: &mut Handles,
    rh: sys::cusparseHandle_t,
    rows: usize,
    iters: usize,
) -> Res<()> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut off, mut idx, mut vals) = (vec![0i32], Vec::new(), Vec::new());
    for r in 0..rows {
        let k = (2 + (next() % 7) as usize).min(r);
        let mut cols: Vec<i32> = (0..k).map(|_| (next() % r as u64) as i32).collect();
        cols.sort_unstable();
        cols.dedup();
        vals.extend(cols.iter().map(|_| ((next() % 17) as f32 - 8.0) / 64.0));
        idx.extend_from_slice(&cols);
        idx.push(r as i32);
        vals.push(4.0);
        off.push(idx.len() as i32);
    }
    let nnz = idx.len();
    let new_vals: Vec<f32> = vals.iter().map(|v| if *v == 4.0 { 5.0 } else { -v }).collect();
    let (o, i, v) = (device.upload(s, &off)?, device.upload(s, &idx)?, device.upload(s, &vals)?);
    let l = SparseMatrix::csr(rows, rows, nnz, &o, &i, &v)?;
    let fresh = device.upload(s, &new_vals)?;
    let ncols = 8;
    let (x, y) = (device.upload(s, &vec![1.0f32; rows])?, device.alloc_zeros::<f32>(s, rows)?);
    let (b, c) = (device.upload(s, &vec![1.0f32; rows * ncols])?, device.alloc_zeros::<f32>(s, rows * ncols)?);
    // The raw side's copies.
    let (ro, ri, rv) = (device.upload(s, &off)?, device.upload(s, &idx)?, device.upload(s, &vals)?);
    let (rx, ry) = (device.upload(s, &vec![1.0f32; rows])?, device.alloc_zeros::<f32>(s, rows)?);
    let (rb, rc) = (device.upload(s, &vec![1.0f32; rows * ncols])?, device.alloc_zeros::<f32>(s, rows * ncols)?);
    device.synchronize(s)?;
    // SAFETY: as in `main`: (1) the raw side uses only buffers no cusched op touches after
    // their upload, on this one stream, and synchronizes it before each timing ends; (2) the
    // cusched side's buffers are used only by cusched's ops.
    let stream = unsafe { device.cuda_stream(s) }?;
    let sync = || -> Res<()> { Ok(stream.synchronize()?) };

    let r32 = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
    let base = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
    let f32t = sys::cudaDataType::CUDA_R_32F;
    let nt = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
    let col = sys::cusparseOrder_t::CUSPARSE_ORDER_COL;
    let sv_alg = sys::cusparseSpSVAlg_t::CUSPARSE_SPSV_ALG_DEFAULT;
    let sm_alg = sys::cusparseSpSMAlg_t::CUSPARSE_SPSM_ALG_DEFAULT;
    let sv_general = sys::cusparseSpSVUpdate_t::CUSPARSE_SPSV_UPDATE_GENERAL;
    let sm_general = sys::cusparseSpSMUpdate_t::CUSPARSE_SPSM_UPDATE_GENERAL;
    let p = |g: &cusched::GpuRef<f32>| g.raw_device_ptr().map(|p| p as *mut c_void);
    let pi = |g: &cusched::GpuRef<i32>| g.raw_device_ptr().map(|p| p as *mut c_void);
    let (mut ma, mut vx, mut vy, mut mb, mut mc) =
        (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let (mut sv, mut sm) = (std::ptr::null_mut(), std::ptr::null_mut());
    let n = rows as i64;
    let one = 1.0f32;
    let al = (&one as *const f32).cast::<c_void>();
    let (mut sv_bytes, mut sm_bytes) = (0usize, 0usize);
    let mut fill = sys::cusparseFillMode_t::CUSPARSE_FILL_MODE_LOWER;
    let mut diag = sys::cusparseDiagType_t::CUSPARSE_DIAG_TYPE_NON_UNIT;
    // SAFETY: (1) out-pointers are valid; (2) the buffers are live device buffers of this
    // context, sized for the shapes given; (3) the attributes are passed with their own sizes;
    // (4) `rh` is a live handle bound to this stream.
    unsafe {
        ok(
            sys::cusparseCreateCsr(&mut ma, n, n, nnz as i64, pi(&ro)?, pi(&ri)?, p(&rv)?, r32, r32, base, f32t),
            "cusparseCreateCsr",
        )?;
        let (fp, dp) =
            ((&mut fill as *mut sys::cusparseFillMode_t).cast(), (&mut diag as *mut sys::cusparseDiagType_t).cast());
        let fill_attr = sys::cusparseSpMatAttribute_t::CUSPARSE_SPMAT_FILL_MODE;
        let diag_attr = sys::cusparseSpMatAttribute_t::CUSPARSE_SPMAT_DIAG_TYPE;
        ok(sys::cusparseSpMatSetAttribute(ma, fill_attr, fp, std::mem::size_of_val(&fill)), "SetAttribute")?;
        ok(sys::cusparseSpMatSetAttribute(ma, diag_attr, dp, std::mem::size_of_val(&diag)), "SetAttribute")?;
        ok(sys::cusparseCreateDnVec(&mut vx, n, p(&rx)?, f32t), "cusparseCreateDnVec")?;
        ok(sys::cusparseCreateDnVec(&mut vy, n, p(&ry)?, f32t), "cusparseCreateDnVec")?;
        ok(sys::cusparseCreateDnMat(&mut mb, n, ncols as i64, n, p(&rb)?, f32t, col), "cusparseCreateDnMat")?;
        ok(sys::cusparseCreateDnMat(&mut mc, n, ncols as i64, n, p(&rc)?, f32t, col), "cusparseCreateDnMat")?;
        ok(sys::cusparseSpSV_createDescr(&mut sv), "SpSV_createDescr")?;
        ok(sys::cusparseSpSM_createDescr(&mut sm), "SpSM_createDescr")?;
        ok(
            sys::cusparseSpSV_bufferSize(rh, nt, al, ma as _, vx as _, vy, f32t, sv_alg, sv, &mut sv_bytes),
            "SpSV_bufferSize",
        )?;
        ok(
            sys::cusparseSpSM_bufferSize(rh, nt, nt, al, ma as _, mb as _, mc, f32t, sm_alg, sm, &mut sm_bytes),
            "SpSM_bufferSize",
        )?;
    }
    let sv_buf = device.alloc::<u8>(s, sv_bytes.max(1))?;
    let sm_buf = device.alloc::<u8>(s, sm_bytes.max(1))?;
    let (svp, smp) = (sv_buf.raw_device_ptr()? as *mut c_void, sm_buf.raw_device_ptr()? as *mut c_void);
    // SAFETY: (1)-(4) as above; (5) the analysis buffers hold the sizes queried and outlive the
    // descriptors.
    unsafe {
        ok(sys::cusparseSpSV_analysis(rh, nt, al, ma as _, vx as _, vy, f32t, sv_alg, sv, svp), "SpSV_analysis")?;
        ok(sys::cusparseSpSM_analysis(rh, nt, nt, al, ma as _, mb as _, mc, f32t, sm_alg, sm, smp), "SpSM_analysis")?;
    }
    let (src, dst, bytes) = (fresh.raw_device_ptr()?, rv.raw_device_ptr()?, nnz * std::mem::size_of::<f32>());
    let write = || -> Res<()> {
        // SAFETY: (1) both buffers hold `nnz` f32 on this device; (2) the copy is ordered on the
        // stream before the update or analysis that reads it.
        unsafe { cusched::cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }?;
        Ok(())
    };
    let lower = Triangle { fill: Fill::Lower, ..Triangle::default() };
    // The first solves make cusched's analyses, outside the timings.
    h.sparse()?.spsv(lower, 1.0, &l, &x, &y)?;
    h.sparse()?.spsm(lower, 1.0, &l, DenseMatrix::new(&b, rows, ncols), DenseMatrix::new(&c, rows, ncols))?;
    device.synchronize(s)?;
    let analyses = h.sparse()?.analyses_made();
    let mut ours_sv = || -> Res<()> {
        v.copy_from(s, &fresh)?;
        h.sparse()?.spsv(lower, 1.0, &l, &x, &y)?;
        Ok(())
    };
    let raw_update_sv = || -> Res<()> {
        write()?;
        // SAFETY: (1) a live handle and a descriptor analysed for `ma`, whose values array
        // `dst` is (its nonzeros, f32); (2) the solve's descriptors point at live buffers of
        // their sizes; (3) the loaded cuSPARSE has the entry point (CUDA 12.1's on; the bench
        // needs CUDA 13's).
        unsafe {
            ok(sys::cusparseSpSV_updateMatrix(rh, sv, dst as _, sv_general), "SpSV_updateMatrix")?;
            ok(sys::cusparseSpSV_solve(rh, nt, al, ma as _, vx as _, vy, f32t, sv_alg, sv), "SpSV_solve")
        }
    };
    let (ours, raw) = interleaved(iters, &mut ours_sv, raw_update_sv, sync, sync)?;
    row("SpSV after a values write vs raw updateMatrix + solve", ours, raw);
    let raw_analyse_sv = || -> Res<()> {
        write()?;
        // SAFETY: (1)-(2) as above; (3) the analysis buffer holds the size queried and is the
        // one the descriptor was analysed with.
        unsafe {
            ok(sys::cusparseSpSV_analysis(rh, nt, al, ma as _, vx as _, vy, f32t, sv_alg, sv, svp), "SpSV_analysis")?;
            ok(sys::cusparseSpSV_solve(rh, nt, al, ma as _, vx as _, vy, f32t, sv_alg, sv), "SpSV_solve")
        }
    };
    let (ours, raw) = interleaved(iters, &mut ours_sv, raw_analyse_sv, sync, sync)?;
    row("SpSV after a values write vs raw re-analysis + solve", ours, raw);
    let ours_sm = || -> Res<()> {
        v.copy_from(s, &fresh)?;
        h.sparse()?.spsm(lower, 1.0, &l, DenseMatrix::new(&b, rows, ncols), DenseMatrix::new(&c, rows, ncols))?;
        Ok(())
    };
    let raw_update_sm = || -> Res<()> {
        write()?;
        // SAFETY: (1)-(3) as above, for the SpSM descriptor analysed for `ma`, `mb` and `mc`
        // (its entry point is in CUDA 12.4's cuSPARSE on).
        unsafe {
            ok(sys::cusparseSpSM_updateMatrix(rh, sm, dst as _, sm_general), "SpSM_updateMatrix")?;
            ok(sys::cusparseSpSM_solve(rh, nt, nt, al, ma as _, mb as _, mc, f32t, sm_alg, sm), "SpSM_solve")
        }
    };
    let (ours, raw) = interleaved(iters, ours_sm, raw_update_sm, sync, sync)?;
    row(&format!("SpSM ({ncols} columns) after a values write vs raw updateMatrix + solve"), ours, raw);
    let made = h.sparse()?.analyses_made() - analyses;
    println!("cusched analyses made by the solves after a values write: {made}");

    // SAFETY: (1) every descriptor is destroyed once, (2) after the stream drained.
    unsafe {
        stream.synchronize()?;
        sys::cusparseSpSV_destroyDescr(sv);
        sys::cusparseSpSM_destroyDescr(sm);
        for d in [vx, vy] {
            sys::cusparseDestroyDnVec(d);
        }
        for d in [mb, mc] {
            sys::cusparseDestroyDnMat(d);
        }
        sys::cusparseDestroySpMat(ma);
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
