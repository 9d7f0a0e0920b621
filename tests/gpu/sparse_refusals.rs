//! What cusched still refuses in cuSPARSE: each combination the module docs of
//! `cusched::sparse` list as not taken (a BSR matrix in SpSV and SpSM, SpSM with `B` and `C` in
//! different orders, SpMM with a transposed `B` and a BSR `A`, SDDMM with a conjugate transpose
//! of complex values or into a BSR `C`, the reusable SpGEMM with `i64` indices) must be refused
//! by cusched as unsupported, naming the argument, with nothing recorded. cuSPARSE's own size
//! query for each is printed beside it as information: a query that succeeds is a cue to run
//! the combination against the CPU reference (and under memcheck) before lifting a refusal,
//! not proof that the library computes it (a size query may pass what a later phase refuses or
//! miscomputes). What cusched has lifted is covered by the result tests of `sparse_cross` and
//! `sparse_layouts`.

use crate::common::*;
use cusched::cudarc::cusparse::sys;
use cusched::sparse::{DenseMatrix, SparseMatrix, Transpose, Triangle};
use cusched::{Complex, Device, Error, GpuRef, Handles, LaunchRecorder};
use std::ffi::c_void;

type Status = sys::cusparseStatus_t;
const I32: sys::cusparseIndexType_t = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
const I64: sys::cusparseIndexType_t = sys::cusparseIndexType_t::CUSPARSE_INDEX_64I;
const BASE: sys::cusparseIndexBase_t = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
const N: sys::cusparseOperation_t = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
const TRANS: sys::cusparseOperation_t = sys::cusparseOperation_t::CUSPARSE_OPERATION_TRANSPOSE;
const COL: sys::cusparseOrder_t = sys::cusparseOrder_t::CUSPARSE_ORDER_COL;
const ROW: sys::cusparseOrder_t = sys::cusparseOrder_t::CUSPARSE_ORDER_ROW;

/// The device address of `b`, for a descriptor.
fn ptr<T: cusched::Element>(b: &GpuRef<T>) -> *mut c_void {
    b.raw_device_ptr().unwrap() as *mut c_void
}

/// A 4x4 matrix's arrays: CSR (the diagonal, with `i32` and `i64` indices), BSR (two diagonal
/// 2x2 blocks), and dense 4x4 buffers, in `f32`.
struct Arrays {
    off32: GpuRef<i32>,
    idx32: GpuRef<i32>,
    off64: GpuRef<i64>,
    idx64: GpuRef<i64>,
    boff: GpuRef<i32>,
    bidx: GpuRef<i32>,
    val: GpuRef<f32>,
    dense: [GpuRef<f32>; 2],
}

impl Arrays {
    fn new(d: &Device, h: &Handles) -> Arrays {
        let s = h.stream();
        Arrays {
            off32: d.upload(s, &[0i32, 1, 2, 3, 4]).unwrap(),
            idx32: d.upload(s, &[0i32, 1, 2, 3]).unwrap(),
            off64: d.upload(s, &[0i64, 1, 2, 3, 4]).unwrap(),
            idx64: d.upload(s, &[0i64, 1, 2, 3]).unwrap(),
            boff: d.upload(s, &[0i32, 1, 2]).unwrap(),
            bidx: d.upload(s, &[0i32, 1]).unwrap(),
            val: d.upload(s, &[1.0f32; 16]).unwrap(),
            dense: [d.upload(s, &[1.0f32; 16]).unwrap(), d.upload(s, &[0.0f32; 16]).unwrap()],
        }
    }

    /// A recorder on `h`'s stream that declares every array read: the queries read none, but
    /// the declarations keep the buffers fenced and alive around the launch.
    fn recorder(&self, h: &Handles) -> LaunchRecorder {
        let mut rec = LaunchRecorder::new_strict(h.stream());
        rec.read(&self.off32).unwrap().read(&self.idx32).unwrap();
        rec.read(&self.off64).unwrap().read(&self.idx64).unwrap();
        rec.read(&self.boff).unwrap().read(&self.bidx).unwrap().read(&self.val).unwrap();
        for b in &self.dense {
            rec.read(b).unwrap();
        }
        rec
    }
}

/// Every refused combination's size query, in order: (what, status).
fn queries(raw: sys::cusparseHandle_t, a: &Arrays) -> Vec<(&'static str, Status)> {
    let r32 = sys::cudaDataType::CUDA_R_32F;
    let (one, zero) = (1.0f32, 0.0f32);
    let (alpha, beta) = (&one as *const f32 as *const c_void, &zero as *const f32 as *const c_void);
    let mut out = Vec::new();
    let mut size = 0usize;
    // SAFETY (every block below): 1. `raw` is a live handle whose context is current (the
    // caller runs this inside `raw_launch`); 2. every descriptor is made here on live device
    // buffers of that context sized for the 4x4 shapes it is given (the `Arrays`), used only
    // by the size queries, and destroyed before returning; 3. `alpha` / `beta` point at host
    // scalars of the compute type, alive for the calls; 4. the queries write only `size` and
    // the out-pointers, and enqueue no work.
    unsafe {
        let dn = |buf: *mut c_void, order| {
            let mut m = std::ptr::null_mut();
            let st = sys::cusparseCreateDnMat(&mut m, 4, 4, 4, buf, r32, order);
            assert_eq!(st, Status::CUSPARSE_STATUS_SUCCESS, "cusparseCreateDnMat");
            m
        };
        let mut bsr = std::ptr::null_mut();
        let st = sys::cusparseCreateBsr(
            &mut bsr,
            2,
            2,
            2,
            2,
            2,
            ptr(&a.boff),
            ptr(&a.bidx),
            ptr(&a.val),
            I32,
            I32,
            BASE,
            r32,
            ROW,
        );
        assert_eq!(st, Status::CUSPARSE_STATUS_SUCCESS, "cusparseCreateBsr");
        let mut csr = std::ptr::null_mut();
        let st =
            sys::cusparseCreateCsr(&mut csr, 4, 4, 4, ptr(&a.off32), ptr(&a.idx32), ptr(&a.val), I32, I32, BASE, r32);
        assert_eq!(st, Status::CUSPARSE_STATUS_SUCCESS, "cusparseCreateCsr");

        // SpSV with a BSR matrix.
        let (mut x, mut y) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(sys::cusparseCreateDnVec(&mut x, 4, ptr(&a.dense[0]), r32), Status::CUSPARSE_STATUS_SUCCESS);
        assert_eq!(sys::cusparseCreateDnVec(&mut y, 4, ptr(&a.dense[1]), r32), Status::CUSPARSE_STATUS_SUCCESS);
        let mut sv = std::ptr::null_mut();
        assert_eq!(sys::cusparseSpSV_createDescr(&mut sv), Status::CUSPARSE_STATUS_SUCCESS);
        let alg = sys::cusparseSpSVAlg_t::CUSPARSE_SPSV_ALG_DEFAULT;
        out.push((
            "SpSV with a BSR matrix",
            sys::cusparseSpSV_bufferSize(raw, N, alpha, bsr, x, y, r32, alg, sv, &mut size),
        ));
        sys::cusparseSpSV_destroyDescr(sv);
        sys::cusparseDestroyDnVec(x);
        sys::cusparseDestroyDnVec(y);

        // SpSM with a BSR matrix, and with B row-major and C column-major.
        let spsm = |m, b, c| {
            let mut d = std::ptr::null_mut();
            assert_eq!(sys::cusparseSpSM_createDescr(&mut d), Status::CUSPARSE_STATUS_SUCCESS);
            let mut n = 0usize;
            let alg = sys::cusparseSpSMAlg_t::CUSPARSE_SPSM_ALG_DEFAULT;
            let st = sys::cusparseSpSM_bufferSize(raw, N, N, alpha, m, b, c, r32, alg, d, &mut n);
            sys::cusparseSpSM_destroyDescr(d);
            st
        };
        let (b, c) = (dn(ptr(&a.dense[0]), COL), dn(ptr(&a.dense[1]), COL));
        out.push(("SpSM with a BSR matrix", spsm(bsr, b, c)));
        let rb = dn(ptr(&a.dense[0]), ROW);
        out.push(("SpSM with B row-major and C column-major", spsm(csr, rb, c)));

        // SpMM with a BSR A and a transposed B.
        let alg = sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT;
        let st = sys::cusparseSpMM_bufferSize(raw, N, TRANS, alpha, bsr, b, beta, c, r32, alg, &mut size);
        out.push(("SpMM with a BSR A and a transposed B", st));

        // SDDMM into a BSR C, with k a multiple of the block size.
        let alg = sys::cusparseSDDMMAlg_t::CUSPARSE_SDDMM_ALG_DEFAULT;
        let st = sys::cusparseSDDMM_bufferSize(raw, N, N, alpha, b, c, beta, bsr, r32, alg, &mut size);
        out.push(("SDDMM into a BSR C", st));

        // The reusable SpGEMM's work estimation with i64 CSR factors.
        let mut c64 = std::ptr::null_mut();
        let (o64, i64p) = (ptr(&a.off64), ptr(&a.idx64));
        let st = sys::cusparseCreateCsr(&mut c64, 4, 4, 4, o64, i64p, ptr(&a.val), I64, I64, BASE, r32);
        assert_eq!(st, Status::CUSPARSE_STATUS_SUCCESS, "cusparseCreateCsr i64");
        let mut prod = std::ptr::null_mut();
        let null = std::ptr::null_mut();
        let st = sys::cusparseCreateCsr(&mut prod, 4, 4, 0, null, null, null, I64, I64, BASE, r32);
        assert_eq!(st, Status::CUSPARSE_STATUS_SUCCESS, "cusparseCreateCsr product");
        let mut g = std::ptr::null_mut();
        assert_eq!(sys::cusparseSpGEMM_createDescr(&mut g), Status::CUSPARSE_STATUS_SUCCESS);
        let alg = sys::cusparseSpGEMMAlg_t::CUSPARSE_SPGEMM_DEFAULT;
        let st = sys::cusparseSpGEMMreuse_workEstimation(raw, N, N, c64, c64, prod, alg, g, &mut size, null);
        out.push(("SpGEMM reuse with i64 indices", st));
        sys::cusparseSpGEMM_destroyDescr(g);
        sys::cusparseDestroySpMat(prod);
        sys::cusparseDestroySpMat(c64);
        sys::cusparseDestroyDnMat(rb);
        sys::cusparseDestroyDnMat(b);
        sys::cusparseDestroyDnMat(c);
        sys::cusparseDestroySpMat(csr);
        sys::cusparseDestroySpMat(bsr);
    }
    out
}

/// Asserts that `op` is refused as unsupported naming `arg`, with nothing recorded on `d`.
#[track_caller]
fn refused<T: std::fmt::Debug>(d: &Device, what: &str, arg: &str, op: impl FnOnce() -> cusched::Result<T>) {
    let before = d.stats();
    let got = op();
    let named = format!("`{arg}`");
    match &got {
        Err(Error::Unsupported { what: w, .. }) if w.contains(&named) => {}
        _ => panic!("{what}: expected `{arg}` refused as unsupported, got {got:?}"),
    }
    let after = d.stats();
    assert_eq!((after.events, after.waits), (before.events, before.waits), "{what}: a refused op recorded something");
}

/// cusched refuses every combination it does not take; cuSPARSE's size queries for them are
/// printed, not asserted (the SDDMM conjugate transposes have no query: the size query took
/// them, and the kernel read out of bounds).
#[test]
#[ignore = "needs a CUDA GPU"]
fn combinations_cusched_still_refuses_are_refused_as_unsupported() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let a = Arrays::new(&d, &h);
    let raw = h.sparse().unwrap().cusparse_handle().unwrap();
    let rec = a.recorder(&h);
    for (what, st) in raw_launch(&d, rec, |_| queries(raw, &a)) {
        eprintln!("cuSPARSE's size query, {what}: {st:?}");
    }
    let bsr = SparseMatrix::bsr(4, 4, 2, 2, &a.boff, &a.bidx, &a.val).unwrap();
    let csr = SparseMatrix::csr(4, 4, 4, &a.off32, &a.idx32, &a.val).unwrap();
    let csr64 = SparseMatrix::csr(4, 4, 4, &a.off64, &a.idx64, &a.val).unwrap();
    let [x, y] = &a.dense;
    let (dx, dy) = (DenseMatrix::new(x, 4, 4), DenseMatrix::new(y, 4, 4));
    let tri = Triangle::default();
    let n = Transpose::No;
    refused(&d, "SpSV with a BSR matrix", "a", || h.sparse()?.spsv(tri, 1.0, &bsr, x, y));
    refused(&d, "SpSM with a BSR matrix", "a", || h.sparse()?.spsm(tri, 1.0, &bsr, dx, dy));
    refused(&d, "SpSM with B row-major and C column-major", "c", || {
        h.sparse()?.spsm(tri, 1.0, &csr, DenseMatrix::new(x, 4, 4).row_major(), dy)
    });
    refused(&d, "SpMM with a BSR A and a transposed B", "op_b", || {
        h.sparse()?.spmm_ops(n, Transpose::Yes, 1.0, &bsr, dx, 0.0, dy)
    });
    refused(&d, "SDDMM into a BSR C", "c", || h.sparse()?.sddmm(n, n, 1.0, dx, dy, 0.0, &bsr));
    refused(&d, "SpGEMM reuse with i64 indices", "a", || h.sparse()?.spgemm_reuse(&csr64, &csr64));
    let one = Complex::new(1.0f32, 0.0);
    let (zo, zi) = (d.upload(s, &[0i32, 1, 2]).unwrap(), d.upload(s, &[0i32, 1]).unwrap());
    let (zv, zd) = (d.upload(s, &[one; 2]).unwrap(), d.upload(s, &[one; 4]).unwrap());
    let zc = SparseMatrix::csr(2, 2, 2, &zo, &zi, &zv).unwrap();
    let zm = DenseMatrix::new(&zd, 2, 2);
    refused(&d, "SDDMM with a conjugate-transposed complex A", "op_a", || {
        h.sparse()?.sddmm(Transpose::Conj, n, one, zm, zm, one, &zc)
    });
    refused(&d, "SDDMM with a conjugate-transposed complex B", "op_b", || {
        h.sparse()?.sddmm(n, Transpose::Conj, one, zm, zm, one, &zc)
    });
}
