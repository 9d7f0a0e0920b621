//! cuSPARSE's ops of several launches with a host step between them on the GPU: a write of an
//! input that another thread commits between the count and the fill (forced by a trace hook
//! that runs it right after the count's launch committed) must be refused with
//! `Error::InputChanged` before the fill is enqueued. Without the refusal the fill converts the
//! new contents into arrays sized for the old count and cuSPARSE writes past their end: run
//! under compute-sanitizer (`tools/sanitize.sh`), which must report nothing.

use crate::common::reference::sparse::{solves_after_writes, Cx};
use crate::common::*;
use cusched::sparse::{DenseMatrix, Fill, SparseMatrix, Triangle};
use cusched::{Complex, Device, Error, GpuRef, KernelTrace, OpInfo, StreamId, TraceOptions};
use std::sync::{Arc, Mutex};

/// A pending write, run once.
type Write = Box<dyn FnOnce() + Send>;

/// Runs its write once, on a thread of its own (joined), right after the launch named `after`
/// committed on the op's thread.
struct Between {
    after: &'static str,
    write: Mutex<Option<Write>>,
}

impl KernelTrace for Between {
    fn after_enqueue(&self, op: &OpInfo) {
        if op.op != self.after {
            return;
        }
        let write = self.write.lock().unwrap().take();
        if let Some(write) = write {
            std::thread::spawn(write).join().expect("the write between the phases");
        }
    }
}

/// Once the op's launch `after` has committed, `buf` is overwritten with `data` on `stream`.
fn write_between<T: cusched::Element>(
    d: &Device,
    after: &'static str,
    buf: &GpuRef<T>,
    stream: StreamId,
    data: Vec<T>,
) {
    let buf = buf.clone();
    let write: Write = Box::new(move || buf.copy_from_slice(stream, &data).expect("the write between the phases"));
    d.set_trace(Arc::new(Between { after, write: Mutex::new(Some(write)) }), TraceOptions::default()).unwrap();
}

/// Asserts that the op refused with `InputChanged` naming `op` and `arg`.
#[track_caller]
fn refused<T: std::fmt::Debug>(got: cusched::Result<T>, op: &str, arg: &str) {
    match got {
        Err(Error::InputChanged { op: o, arg: a, buffer, .. }) => assert_eq!((o, a), (op, arg), "refused for {buffer}"),
        other => panic!("expected {op} to refuse with InputChanged for `{arg}`, got {other:?}"),
    }
}

/// A 64x64 CSR matrix, two entries per row: in columns 0 and 1 (`spread` false: one 2x2 block
/// per block row, 32 in all), or in columns `r` and `63 - r` (two blocks per block row, 64 in
/// all), sorted within each row as the legacy conversion requires.
fn two_per_row(spread: bool) -> (Vec<i32>, Vec<i32>) {
    let offsets = (0..=64).map(|r| 2 * r).collect();
    let indices = (0..64).flat_map(|r| if spread { [r.min(63 - r), r.max(63 - r)] } else { [0, 1] }).collect();
    (offsets, indices)
}

/// The 2x2 blocks a CSR structure touches.
fn blocks(offsets: &[i32], indices: &[i32]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    for (r, ends) in offsets.windows(2).enumerate() {
        for c in &indices[ends[0] as usize..ends[1] as usize] {
            seen.insert((r / 2, c / 2));
        }
    }
    seen.len()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn csr_to_bsr_refuses_a_structure_written_after_the_count() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let other = d.new_stream().unwrap();
    let (offsets, old) = two_per_row(false);
    let (_, new) = two_per_row(true);
    let (o, i) = (d.upload(s, &offsets).unwrap(), d.upload(s, &old).unwrap());
    let v = d.upload(s, &vec![1.0f32; 128]).unwrap();
    let a = SparseMatrix::csr(64, 64, 128, &o, &i, &v).unwrap();
    write_between(&d, "csr_to_bsr.count", &i, other, new.clone());
    refused(h.sparse().unwrap().csr_to_bsr(&a, 2).and_then(|c| c.wait()), "csr_to_bsr", "a.indices");
    // The retry converts what the write left.
    let b = h.sparse().unwrap().csr_to_bsr(&a, 2).unwrap().wait().unwrap();
    assert_eq!(b.nnz(), blocks(&offsets, &new));
    assert!(b.nnz() > blocks(&offsets, &old));
    d.synchronize(s).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dense_to_csr_refuses_a_matrix_written_after_the_count() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let other = d.new_stream().unwrap();
    let mut old = vec![0.0f32; 64 * 64];
    old[0] = 1.0;
    let dense = d.upload(s, &old).unwrap();
    write_between(&d, "dense_to_csr.analysis", &dense, other, vec![2.0f32; 64 * 64]);
    let got = h.sparse().unwrap().dense_to_csr::<f32, i32>(DenseMatrix::new(&dense, 64, 64)).and_then(|c| c.wait());
    refused(got, "dense_to_csr", "dense");
    let m = h.sparse().unwrap().dense_to_csr::<f32, i32>(DenseMatrix::new(&dense, 64, 64)).unwrap().wait().unwrap();
    assert_eq!(m.nnz(), 64 * 64);
    assert!(m.values().download(s).unwrap().iter().all(|&x| x == 2.0));
    d.synchronize(s).unwrap();
}

/// A reusable product set up for A with two entries per row in columns 0 and 1 (a C of 128
/// entries); A's indices are then spread (a product of about 256 entries). Without the refusal
/// the compute runs the plan's buffers, sized for the old structure, over the new one.
#[test]
#[ignore = "needs a CUDA GPU"]
fn spgemm_reuse_compute_refuses_a_structure_written_after_the_setup() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let other = d.new_stream().unwrap();
    let (offsets, old) = two_per_row(false);
    let (_, new) = two_per_row(true);
    let (o, i) = (d.upload(s, &offsets).unwrap(), d.upload(s, &old).unwrap());
    let v = d.upload(s, &vec![1.0f32; 128]).unwrap();
    let a = SparseMatrix::csr(64, 64, 128, &o, &i, &v).unwrap();
    let (bo, bi) = (d.upload(s, &offsets).unwrap(), d.upload(s, &new).unwrap());
    let b = SparseMatrix::csr(64, 64, 128, &bo, &bi, &d.upload(s, &vec![1.0f32; 128]).unwrap()).unwrap();
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    i.copy_from_slice(other, &new).unwrap();
    let got = h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).and_then(|c| c.wait());
    refused(got, "spgemm_reuse_compute", "a.indices");
    // Values alone are what reuse is for.
    v.copy_from_slice(other, &vec![2.0f32; 128]).unwrap();
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    v.copy_from_slice(other, &vec![3.0f32; 128]).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    assert!(plan.c().values().download(s).unwrap().iter().all(|&x| x % 3.0 == 0.0 && x > 0.0));
    d.synchronize(s).unwrap();
}

/// A solve after a write of A's values alone (no structure change, no `forget`) must solve the
/// system A holds now: cuSPARSE's analysis keeps what it saw of the values, so a cached
/// analysis run over new values solves the old system, silently. The solves hand the analysis
/// the new values (`cusparseSpSV_updateMatrix`, `cusparseSpSM_updateMatrix`) instead of
/// analysing anew: no analysis is made for them. Both solves, f32 and f64.
#[test]
#[ignore = "needs a CUDA GPU"]
fn spsv_and_spsm_solve_the_values_a_holds_now() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let other = d.new_stream().unwrap();
    let (offsets, indices, old) = lower(false);
    // Another diagonal and other entries left of it: another solution.
    let new: Vec<f64> =
        old.iter().enumerate().map(|(k, &x)| if x == 4.0 { 2.0 + (k % 3) as f64 } else { -0.5 }).collect();
    let b: Vec<f64> = (0..128).map(|k| 1.0 + (k % 7) as f64).collect();
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let want = |values: &[f64], cols: usize| forward_with(&offsets, &indices, values, &b[..64 * cols], cols);
    macro_rules! check {
        ($t:ty, $tol:expr) => {{
            let cast = |v: &[f64]| v.iter().map(|&x| x as $t).collect::<Vec<$t>>();
            let (o, i, v) =
                (d.upload(s, &offsets).unwrap(), d.upload(s, &indices).unwrap(), d.upload(s, &cast(&old)).unwrap());
            let a = SparseMatrix::csr(64, 64, 127, &o, &i, &v).unwrap();
            let db = d.upload(s, &cast(&b)).unwrap();
            let y = d.upload(s, &vec![<$t>::NAN; 128]).unwrap();
            let made = h.sparse().unwrap().analyses_made();
            let close = |got: Vec<$t>, want: Vec<f64>, what: &str| {
                assert_close(&got, &want, $tol, &format!("{} {what}", stringify!($t)))
            };
            h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
            close(y.download(s).unwrap()[..64].to_vec(), want(&old, 1), "spsv before the write");
            let (bm, ym) = (DenseMatrix::new(&db, 64, 2), DenseMatrix::new(&y, 64, 2));
            h.sparse().unwrap().spsm(tri, 1.0, &a, bm, ym).unwrap().wait().unwrap();
            close(y.download(s).unwrap(), want(&old, 2), "spsm before the write");
            assert_eq!(h.sparse().unwrap().analyses_made(), made + 2);
            v.copy_from_slice(other, &cast(&new)).unwrap();
            h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
            close(y.download(s).unwrap()[..64].to_vec(), want(&new, 1), "spsv after the values' write");
            let (bm, ym) = (DenseMatrix::new(&db, 64, 2), DenseMatrix::new(&y, 64, 2));
            h.sparse().unwrap().spsm(tri, 1.0, &a, bm, ym).unwrap().wait().unwrap();
            close(y.download(s).unwrap(), want(&new, 2), "spsm after the values' write");
            assert_eq!(h.sparse().unwrap().analyses_made(), made + 2, "the analyses took the new values");
        }};
    }
    check!(f64, 1e-12);
    check!(f32, 1e-5);
    d.synchronize(s).unwrap();
}

/// A triangular solve recorded into a graph is refused with [`Error::Recording`] before
/// anything is captured, and leaves the device working: cuSPARSE's analysis runs partly on the
/// host, so a captured analysis (which runs only at replay) left the captured solve nothing to
/// read, and the process died of SIGFPE inside `cusparseSpSV_solve` while recording. Both
/// solves; then both eagerly, and a graph of another op, on the same device.
#[test]
#[ignore = "needs a CUDA GPU"]
fn triangular_solves_are_refused_in_graphs_and_leave_the_device_working() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let (offsets, indices, values) = lower(false);
    let b: Vec<f64> = (0..128).map(|k| 1.0 + (k % 7) as f64).collect();
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let (o, i, v) = (d.upload(s, &offsets).unwrap(), d.upload(s, &indices).unwrap(), d.upload(s, &values).unwrap());
    let a = SparseMatrix::csr(64, 64, 127, &o, &i, &v).unwrap();
    let db = d.upload(s, &b).unwrap();
    let y = d.upload(s, &vec![f64::NAN; 128]).unwrap();
    let (ar, br, yr) = (a.clone(), db.clone(), y.clone());
    let err = cusched::Graph::record(&d, move |rec| rec.handles(0)?.sparse()?.spsv(tri, 1.0, &ar, &br, &yr).map(drop));
    assert!(matches!(err, Err(Error::Recording { .. })), "spsv: {:?}", err.err());
    let (ar, br, yr) = (a.clone(), db.clone(), y.clone());
    let err = cusched::Graph::record(&d, move |rec| {
        let (bm, ym) = (DenseMatrix::new(&br, 64, 2), DenseMatrix::new(&yr, 64, 2));
        rec.handles(0)?.sparse()?.spsm(tri, 1.0, &ar, bm, ym).map(drop)
    });
    assert!(matches!(err, Err(Error::Recording { .. })), "spsm: {:?}", err.err());
    h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
    assert_close(&y.download(s).unwrap()[..64], &forward(false, &b, 1), 1e-12, "spsv after the refusals");
    let (bm, ym) = (DenseMatrix::new(&db, 64, 2), DenseMatrix::new(&y, 64, 2));
    h.sparse().unwrap().spsm(tri, 1.0, &a, bm, ym).unwrap().wait().unwrap();
    assert_close(&y.download(s).unwrap(), &forward(false, &b, 2), 1e-12, "spsm after the refusals");
    // A graph of another op on the same device records and replays.
    let (xr, yr) = (db.clone(), y.clone());
    let exec = cusched::Graph::record(&d, move |rec| {
        let st = rec.stream(0)?;
        xr.copy_to(st, &yr)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.replay(s).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), b);
    d.synchronize(s).unwrap();
}

/// The harness of tests/common/reference/sparse.rs on the GPU: SpSV and SpSM after writes of
/// A's values (taken by the analyses, none made), column indices, offsets or row indices, and
/// indices with values (analysed anew), made on another stream between the solves, each
/// solve against the CPU reference; CSR and COO, each triangle and transpose, the four value
/// types and both index types. Run under compute-sanitizer too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn solves_after_writes_take_new_values_and_analyse_new_structures() {
    let Some(d) = gpu() else { return };
    let mut cx = Cx::new(d, Rng::new());
    solves_after_writes::<f32, i32>(&mut cx);
    solves_after_writes::<f64, i32>(&mut cx);
    solves_after_writes::<Complex<f32>, i32>(&mut cx);
    solves_after_writes::<Complex<f64>, i32>(&mut cx);
    solves_after_writes::<f32, i64>(&mut cx);
    solves_after_writes::<f64, i64>(&mut cx);
    solves_after_writes::<Complex<f32>, i64>(&mut cx);
    solves_after_writes::<Complex<f64>, i64>(&mut cx);
    cx.d.synchronize(cx.s).unwrap();
}

/// A 64x64 lower-triangular CSR matrix: 4 on the diagonal and a 1 left of it in every row but
/// the first, in column `r - 1` (`far` false) or column 0 (`far` true): the same offsets and
/// number of entries, another structure.
fn lower(far: bool) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let (mut offsets, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
    for r in 0..64i32 {
        if r > 0 {
            indices.push(if far { 0 } else { r - 1 });
            values.push(1.0);
        }
        indices.push(r);
        values.push(4.0);
        offsets.push(indices.len() as i32);
    }
    (offsets, indices, values)
}

/// Asserts each of `got` within `tol` of `want`'s entry, relative to it (absolute below 1),
/// naming `what` and the entry otherwise.
fn assert_close<T: Copy + Into<f64>>(got: &[T], want: &[f64], tol: f64, what: &str) {
    for (k, (&g, w)) in got.iter().zip(want).enumerate() {
        let g: f64 = g.into();
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}: entry {k} is {g}, not {w}");
    }
}

/// `L y = b` by forward substitution, `L` as [`lower`] makes it, `b` with `cols` columns
/// (column-major).
fn forward(far: bool, b: &[f64], cols: usize) -> Vec<f64> {
    let (offsets, indices, values) = lower(far);
    forward_with(&offsets, &indices, &values, b, cols)
}

/// `L y = b` by forward substitution, `L` the 64x64 lower-triangular CSR matrix of `offsets`,
/// `indices` and `values` (each row's diagonal entry last), `b` with `cols` columns
/// (column-major).
fn forward_with(offsets: &[i32], indices: &[i32], values: &[f64], b: &[f64], cols: usize) -> Vec<f64> {
    let mut y = b.to_vec();
    for k in 0..cols {
        let col = &mut y[k * 64..(k + 1) * 64];
        for r in 0..64 {
            let (lo, hi) = (offsets[r] as usize, offsets[r + 1] as usize);
            let off: f64 = (lo..hi - 1).map(|p| values[p] * col[indices[p] as usize]).sum();
            col[r] = (col[r] - off) / values[hi - 1];
        }
    }
    y
}

/// The triangular solves keep their analysis across calls, made from A's structure then: a
/// solve after a write of A's indices must not run the old analysis over the new structure
/// (undefined in cuSPARSE). It analyses A anew and solves the new system; run under
/// compute-sanitizer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn spsv_and_spsm_analyse_anew_after_a_structure_write() {
    let Some((d, s, mut h)) = gpu_setup() else { return };
    let other = d.new_stream().unwrap();
    let (offsets, near, values) = lower(false);
    let (_, far, _) = lower(true);
    let (o, i, v) = (d.upload(s, &offsets).unwrap(), d.upload(s, &near).unwrap(), d.upload(s, &values).unwrap());
    let a = SparseMatrix::csr(64, 64, 127, &o, &i, &v).unwrap();
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let b: Vec<f64> = (0..128).map(|k| 1.0 + (k % 7) as f64).collect();
    let db = d.upload(s, &b).unwrap();
    let y = d.upload(s, &vec![f64::NAN; 128]).unwrap();
    let close = |got: Vec<f64>, want: Vec<f64>, what: &str| assert_close(&got, &want, 1e-12, what);
    h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
    close(y.download(s).unwrap()[..64].to_vec(), forward(false, &b[..64], 1), "spsv before the write");
    let (bm, ym) = (DenseMatrix::new(&db, 64, 2), DenseMatrix::new(&y, 64, 2));
    h.sparse().unwrap().spsm(tri, 1.0, &a, bm, ym).unwrap().wait().unwrap();
    close(y.download(s).unwrap(), forward(false, &b, 2), "spsm before the write");
    assert_eq!(h.sparse().unwrap().analyses_made(), 2);
    i.copy_from_slice(other, &far).unwrap();
    h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
    close(y.download(s).unwrap()[..64].to_vec(), forward(true, &b[..64], 1), "spsv after the write");
    let (bm, ym) = (DenseMatrix::new(&db, 64, 2), DenseMatrix::new(&y, 64, 2));
    h.sparse().unwrap().spsm(tri, 1.0, &a, bm, ym).unwrap().wait().unwrap();
    close(y.download(s).unwrap(), forward(true, &b, 2), "spsm after the write");
    assert_eq!(h.sparse().unwrap().analyses_made(), 4, "each solve analysed the new structure");
    // Solving again reuses the new analyses.
    h.sparse().unwrap().spsv(tri, 1.0, &a, &db, &y).unwrap().wait().unwrap();
    assert_eq!(h.sparse().unwrap().analyses_made(), 4);
    d.synchronize(s).unwrap();
}
