//! What cusched still refuses in cuSPARSE, asked of cuSPARSE itself: each combination the
//! module docs of `cusched::sparse` list as not taken (a BSR matrix in SpSV and SpSM, SpSM with
//! `B` and `C` in different orders, SpMM with a transposed `B` and a BSR `A`) goes straight to
//! the library's own size query through the raw handle, which must refuse it. A query that
//! succeeds is the cue to run the combination against the CPU reference and, if cuSPARSE
//! computes it, lift cusched's refusal (a size query may pass what a later phase refuses).
//! What cusched has lifted is covered by the result tests of `sparse_cross` and
//! `sparse_layouts`.

use crate::common::*;
use cusched::cudarc::cusparse::sys;
use cusched::{Device, GpuRef, Handles, LaunchRecorder};
use std::ffi::c_void;

type Status = sys::cusparseStatus_t;
const I32: sys::cusparseIndexType_t = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
const BASE: sys::cusparseIndexBase_t = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
const N: sys::cusparseOperation_t = sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE;
const TRANS: sys::cusparseOperation_t = sys::cusparseOperation_t::CUSPARSE_OPERATION_TRANSPOSE;
const COL: sys::cusparseOrder_t = sys::cusparseOrder_t::CUSPARSE_ORDER_COL;
const ROW: sys::cusparseOrder_t = sys::cusparseOrder_t::CUSPARSE_ORDER_ROW;

/// The device address of `b`, for a descriptor.
fn ptr<T: cusched::Element>(b: &GpuRef<T>) -> *mut c_void {
    b.raw_device_ptr().unwrap() as *mut c_void
}

/// A 4x4 matrix's arrays: CSR (the diagonal), BSR (two diagonal 2x2 blocks), and dense 4x4
/// buffers, in `f32`.
struct Arrays {
    off32: GpuRef<i32>,
    idx32: GpuRef<i32>,
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
        sys::cusparseDestroyDnMat(rb);
        sys::cusparseDestroyDnMat(b);
        sys::cusparseDestroyDnMat(c);
        sys::cusparseDestroySpMat(csr);
        sys::cusparseDestroySpMat(bsr);
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn combinations_cusched_still_refuses_are_refused_by_cusparse() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let arrays = Arrays::new(&d, &h);
    let raw = h.sparse().unwrap().cusparse_handle().unwrap();
    let rec = arrays.recorder(&h);
    let got = raw_launch(&d, rec, |_| queries(raw, &arrays));
    let taken: Vec<String> =
        got.iter().filter(|(_, st)| *st == Status::CUSPARSE_STATUS_SUCCESS).map(|(what, _)| what.to_string()).collect();
    for (what, st) in &got {
        eprintln!("{what}: {st:?}");
    }
    assert!(
        taken.is_empty(),
        "cuSPARSE's size queries take {taken:?}: check them against the CPU reference and lift cusched's refusals"
    );
}
