//! cuSPARSE's ops of several launches with a host step between them (a launch counts, the
//! host sizes the output from the count, a later launch fills it) against a write of an input
//! that another thread commits between the launches. The write is made deterministic by a
//! trace hook: `after_enqueue` runs on the op's thread right after the named launch committed,
//! and there it runs the write on a thread of its own and joins it. The later launch is fenced
//! after that write, so before the fix it filled an output sized for the old contents with the
//! new (past its end, on the GPU); the op must refuse with `Error::InputChanged` instead,
//! enqueueing nothing more, and a retry then converts the new contents. The checker must stay
//! clean throughout (`sim()` fails an op on a hazard).

use crate::common::sim;
use cusched::sparse::{DenseMatrix, SparseMatrix};
use cusched::{Device, Error, GpuRef, Handles, KernelTrace, OpInfo, StreamId, TraceOptions};
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
        // Taken out first: the write's own launch calls this hook too.
        let write = self.write.lock().unwrap().take();
        if let Some(write) = write {
            std::thread::spawn(write).join().expect("the write between the phases");
        }
    }
}

/// A simulated device with two streams; the op runs on the first.
fn setup() -> (Device, StreamId, StreamId, Handles) {
    let d = sim();
    let (s, other) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let h = Handles::new(&d, s).unwrap();
    (d, s, other, h)
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
    let hook = Between { after, write: Mutex::new(Some(write)) };
    d.set_trace(Arc::new(hook), TraceOptions::default()).unwrap();
}

/// Asserts that the op refused with `InputChanged` naming `op` and `arg`.
#[track_caller]
fn refused<T: std::fmt::Debug>(got: cusched::Result<T>, op: &str, arg: &str) {
    match got {
        Err(Error::InputChanged { op: o, arg: a, buffer, .. }) => {
            assert_eq!((o, a), (op, arg), "refused for {buffer}");
        }
        other => panic!("expected {op} to refuse with InputChanged for `{arg}`, got {other:?}"),
    }
}

/// A 4x4 CSR matrix with its two entries in row 0, at columns `cols` (one block of 2 or two).
fn row0(d: &Device, s: StreamId, cols: [i32; 2]) -> SparseMatrix<f64> {
    let offsets = d.upload(s, &[0i32, 2, 2, 2, 2]).unwrap();
    let indices = d.upload(s, &cols).unwrap();
    let values = d.upload(s, &[1.0f64, 2.0]).unwrap();
    SparseMatrix::csr(4, 4, 2, &offsets, &indices, &values).unwrap()
}

/// `csr_to_bsr` counts one block of 2x2 (columns 0 and 1 of row 0); another stream then moves
/// the second entry to column 3 (two blocks). Before the fix the fill wrote two blocks into
/// arrays sized for one (the simulated kernel panicked on the slice).
#[test]
fn csr_to_bsr_refuses_a_structure_written_on_another_stream_after_the_count() {
    let (d, s, other, mut h) = setup();
    let a = row0(&d, s, [0, 1]);
    write_between(&d, "csr_to_bsr.count", a.indices(), other, vec![0, 3]);
    refused(h.sparse().unwrap().csr_to_bsr(&a, 2).and_then(|c| c.wait()), "csr_to_bsr", "a.indices");
    // The retry converts what the write left.
    let b = h.sparse().unwrap().csr_to_bsr(&a, 2).unwrap().wait().unwrap();
    assert_eq!((b.nnz(), b.indices().download(s).unwrap()), (2, vec![0, 1]));
    assert_eq!(b.values().download(s).unwrap(), [1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// The same on one stream, written by another thread: while the device has run work on one
/// stream only, launches there take no marks, so the write was invisible to the buffers'
/// states unless the op leaves that mode first.
#[test]
fn csr_to_bsr_refuses_a_structure_written_on_its_own_stream_by_another_thread() {
    let (d, s, _, mut h) = setup();
    let a = row0(&d, s, [0, 1]);
    write_between(&d, "csr_to_bsr.count", a.indices(), s, vec![0, 3]);
    refused(h.sparse().unwrap().csr_to_bsr(&a, 2).and_then(|c| c.wait()), "csr_to_bsr", "a.indices");
    let b = h.sparse().unwrap().csr_to_bsr(&a, 2).unwrap().wait().unwrap();
    assert_eq!(b.nnz(), 2);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// A write of the values only leaves the structure counted: the op converts the new values.
#[test]
fn csr_to_bsr_takes_new_values_written_after_the_count() {
    let (d, s, other, mut h) = setup();
    let a = row0(&d, s, [0, 1]);
    write_between(&d, "csr_to_bsr.count", a.values(), other, vec![5.0, 6.0]);
    let b = h.sparse().unwrap().csr_to_bsr(&a, 2).unwrap().wait().unwrap();
    assert_eq!(b.values().download(s).unwrap(), [5.0, 6.0, 0.0, 0.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// `dense_to_csr` counts one nonzero of the 2x2 column-major `[[1 0] [0 0]]`; another stream
/// then writes `[[0 7] [5 9]]` (three). Before the fix the fill put the new matrix's first
/// nonzero under the old count's offsets: neither matrix.
#[test]
fn dense_to_csr_refuses_a_matrix_written_after_the_count() {
    let (d, s, other, mut h) = setup();
    let dense = d.upload(s, &[1.0f64, 0.0, 0.0, 0.0]).unwrap();
    write_between(&d, "dense_to_csr.analysis", &dense, other, vec![0.0, 5.0, 7.0, 9.0]);
    let got = h.sparse().unwrap().dense_to_csr::<f64, i32>(DenseMatrix::new(&dense, 2, 2)).and_then(|c| c.wait());
    refused(got, "dense_to_csr", "dense");
    let m = h.sparse().unwrap().dense_to_csr::<f64, i32>(DenseMatrix::new(&dense, 2, 2)).unwrap().wait().unwrap();
    assert_eq!(m.offsets().download(s).unwrap(), [0, 1, 3]);
    assert_eq!(m.indices().download(s).unwrap(), [1, 0, 1]);
    assert_eq!(m.values().download(s).unwrap(), [7.0, 5.0, 9.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// `dense_to_coo` and `dense_to_csc` share the guard; one stream this time.
#[test]
fn dense_to_coo_and_csc_refuse_a_matrix_written_after_the_count() {
    let (d, s, _, mut h) = setup();
    let dense = d.upload(s, &[1.0f64, 0.0, 0.0, 0.0]).unwrap();
    write_between(&d, "dense_to_coo.analysis", &dense, s, vec![0.0, 5.0, 7.0, 9.0]);
    let got = h.sparse().unwrap().dense_to_coo::<f64, i32>(DenseMatrix::new(&dense, 2, 2)).and_then(|c| c.wait());
    refused(got, "dense_to_coo", "dense");
    write_between(&d, "dense_to_csc.analysis", &dense, s, vec![1.0, 0.0, 0.0, 0.0]);
    let got = h.sparse().unwrap().dense_to_csc::<f64, i64>(DenseMatrix::new(&dense, 2, 2)).and_then(|c| c.wait());
    refused(got, "dense_to_csc", "dense");
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// The 2x2 identity in CSR.
fn identity(d: &Device, s: StreamId) -> SparseMatrix<f64> {
    let offsets = d.upload(s, &[0i32, 1, 2]).unwrap();
    let indices = d.upload(s, &[0i32, 1]).unwrap();
    let values = d.upload(s, &[1.0f64, 1.0]).unwrap();
    SparseMatrix::csr(2, 2, 2, &offsets, &indices, &values).unwrap()
}

/// SpGEMM's compute and copy phases use buffers sized by the phases before them: a write of a
/// factor's structure after the work estimation, or after the compute, is refused. (The
/// simulator computes the whole product in its compute phase, so only the refusal shows here;
/// on the GPU the later phase would overrun the buffers.)
#[test]
fn spgemm_refuses_a_factor_structure_written_between_its_phases() {
    let (d, s, other, mut h) = setup();
    let (a, b) = (identity(&d, s), identity(&d, s));
    write_between(&d, "spgemm.work_estimation", b.indices(), other, vec![1, 0]);
    refused(h.sparse().unwrap().spgemm(1.0, &a, &b).and_then(|c| c.wait()), "spgemm", "b.indices");
    write_between(&d, "spgemm.compute", a.offsets(), s, vec![0, 2, 2]);
    refused(h.sparse().unwrap().spgemm(1.0, &a, &b).and_then(|c| c.wait()), "spgemm", "a.offsets");
    // A's row 0 now holds both entries (columns 0 and 1); B swaps the columns.
    let c = h.sparse().unwrap().spgemm(1.0, &a, &b).unwrap().wait().unwrap();
    assert_eq!(c.offsets().download(s).unwrap(), [0, 2, 2]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// The reusable SpGEMM's setup: a write of a factor's structure after its work estimation is
/// refused; values written after the setup are what a compute reads.
#[test]
fn spgemm_reuse_refuses_a_factor_structure_written_during_its_setup() {
    let (d, s, other, mut h) = setup();
    let (a, b) = (identity(&d, s), identity(&d, s));
    write_between(&d, "spgemm_reuse.work_estimation", a.indices(), other, vec![1, 0]);
    refused(h.sparse().unwrap().spgemm_reuse(&a, &b), "spgemm_reuse", "a.indices");
    write_between(&d, "spgemm_reuse.nnz", b.indices(), s, vec![0, 1]);
    refused(h.sparse().unwrap().spgemm_reuse(&a, &b), "spgemm_reuse", "b.indices");
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 2.0, 0.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().indices().download(s).unwrap(), [1, 0]);
    assert_eq!(plan.c().values().download(s).unwrap(), [2.0, 2.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// `dense_to_bsr` counts through `dense_to_csr`: a write during that step is refused under the
/// name of the op called, not of the step.
#[test]
fn dense_to_bsr_names_itself_when_its_dense_step_sees_a_write() {
    let (d, s, other, mut h) = setup();
    let dense = d.upload(s, &[1.0f64, 0.0, 0.0, 0.0]).unwrap();
    write_between(&d, "dense_to_csr.analysis", &dense, other, vec![0.0, 5.0, 7.0, 9.0]);
    let got = h.sparse().unwrap().dense_to_bsr(DenseMatrix::new(&dense, 2, 2), 1).and_then(|c| c.wait());
    refused(got, "dense_to_bsr", "dense");
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// A reusable product's buffers and `C`'s structure are sized from the factors' structure at
/// its setup: a compute after a write of a factor's offsets or indices, or of `C`'s, is
/// refused naming the argument (before the fix the simulator computed the new product at the
/// old structure, dropping entries; on the GPU cuSPARSE may overrun the plan's buffers). A
/// plan set up again computes the new product.
#[test]
fn spgemm_reuse_compute_refuses_a_structure_written_after_the_setup() {
    let (d, s, other, mut h) = setup();
    let (a, b) = (identity(&d, s), identity(&d, s));
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    // A swaps the columns: A B's entries move to (0, 1) and (1, 0).
    a.indices().copy_from_slice(other, &[1, 0]).unwrap();
    let got = h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).and_then(|c| c.wait());
    refused(got, "spgemm_reuse_compute", "a.indices");
    // The same with a write of B's offsets on the op's own stream, and of C's indices.
    let (a2, b2) = (identity(&d, s), identity(&d, s));
    let plan2 = h.sparse().unwrap().spgemm_reuse(&a2, &b2).unwrap();
    b2.offsets().copy_from_slice(s, &[0, 2, 2]).unwrap();
    let got = h.sparse().unwrap().spgemm_reuse_compute(&plan2, 1.0, 0.0).and_then(|c| c.wait());
    refused(got, "spgemm_reuse_compute", "b.offsets");
    let plan3 = h.sparse().unwrap().spgemm_reuse(&a2, &identity(&d, s)).unwrap();
    plan3.c().indices().copy_from_slice(other, &[0, 0]).unwrap();
    let got = h.sparse().unwrap().spgemm_reuse_compute(&plan3, 1.0, 0.0).and_then(|c| c.wait());
    refused(got, "spgemm_reuse_compute", "c.indices");
    // Set up again, the plan computes the product of the new structure.
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().indices().download(s).unwrap(), [1, 0]);
    assert_eq!(plan.c().values().download(s).unwrap(), [1.0, 1.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// Values written between computes, by another stream or the op's own, are what reuse is for:
/// the next compute takes them.
#[test]
fn spgemm_reuse_compute_takes_values_written_after_the_setup() {
    let (d, s, other, mut h) = setup();
    let (a, b) = (identity(&d, s), identity(&d, s));
    let plan = h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    a.values().copy_from_slice(other, &[3.0, 4.0]).unwrap();
    b.values().copy_from_slice(s, &[5.0, 6.0]).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().values().download(s).unwrap(), [15.0, 24.0]);
    // C's values too, read back with a nonzero beta.
    plan.c().values().copy_from_slice(other, &[1.0, 2.0]).unwrap();
    h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 1.0).unwrap().wait().unwrap();
    assert_eq!(plan.c().values().download(s).unwrap(), [16.0, 26.0]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
}

/// A triangular solve recorded into a graph is refused with [`Error::Recording`], as on the
/// GPU (where cuSPARSE's analysis must run on the host before the solve), and abandons the
/// recording: nothing stays lent, and the same solve runs eagerly afterwards.
#[test]
fn triangular_solves_are_refused_in_graphs() {
    let (d, s, _, mut h) = setup();
    let a = identity(&d, s);
    let x = d.upload(s, &[1.0f64, 2.0]).unwrap();
    let y = d.alloc_zeros::<f64>(s, 2).unwrap();
    let tri = cusched::sparse::Triangle::default();
    let (ar, xr, yr) = (a.clone(), x.clone(), y.clone());
    let err = cusched::Graph::record(&d, move |rec| rec.handles(0)?.sparse()?.spsv(tri, 1.0, &ar, &xr, &yr).map(drop));
    assert!(matches!(err, Err(Error::Recording { .. })), "spsv: {:?}", err.err());
    let (ar, xr, yr) = (a.clone(), x.clone(), y.clone());
    let err = cusched::Graph::record(&d, move |rec| {
        let (b, c) = (DenseMatrix::new(&xr, 2, 1), DenseMatrix::new(&yr, 2, 1));
        rec.handles(0)?.sparse()?.spsm(tri, 1.0, &ar, b, c).map(drop)
    });
    assert!(matches!(err, Err(Error::Recording { .. })), "spsm: {:?}", err.err());
    h.sparse().unwrap().spsv(tri, 2.0, &a, &x, &y).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [2.0, 4.0]);
}

/// The ops that make their output matrix from a count the GPU makes (and the compressed-format
/// conversion) are refused in a graph with [`Error::Recording`], as on the GPU, before anything
/// is recorded: the same ops run eagerly afterwards.
#[test]
fn ops_that_size_their_output_on_the_host_are_refused_in_graphs() {
    let (d, s, _, mut h) = setup();
    let a = identity(&d, s);
    let dense = d.upload(s, &[1.0f64, 0.0, 0.0, 2.0]).unwrap();
    type Op = Box<dyn Fn(&mut cusched::sparse::Sparse) -> cusched::Result<()> + Send + Sync>;
    let ops: Vec<(&str, Op)> = vec![
        ("spgemm", {
            let a = a.clone();
            Box::new(move |sp| sp.spgemm(1.0, &a, &a).map(drop))
        }),
        ("spgemm_reuse", {
            let a = a.clone();
            Box::new(move |sp| sp.spgemm_reuse(&a, &a).map(drop))
        }),
        ("csr_to_bsr", {
            let a = a.clone();
            Box::new(move |sp| sp.csr_to_bsr(&a, 1).map(drop))
        }),
        ("convert_compressed", {
            let a = a.clone();
            Box::new(move |sp| sp.convert_compressed(&a).map(drop))
        }),
        ("dense_to_csr", {
            let dense = dense.clone();
            Box::new(move |sp| sp.dense_to_csr::<f64, i32>(DenseMatrix::new(&dense, 2, 2)).map(drop))
        }),
        ("dense_to_bsr", {
            let dense = dense.clone();
            Box::new(move |sp| sp.dense_to_bsr(DenseMatrix::new(&dense, 2, 2), 1).map(drop))
        }),
    ];
    for (name, op) in ops {
        let op = Arc::new(op);
        let recorded = op.clone();
        let err = cusched::Graph::record(&d, move |rec| recorded(rec.handles(0)?.sparse()?));
        assert!(matches!(err, Err(Error::Recording { .. })), "{name}: {:?}", err.err());
        op(h.sparse().unwrap()).unwrap();
    }
    let c = h.sparse().unwrap().spgemm(2.0, &a, &a).unwrap().wait().unwrap();
    assert_eq!(c.values().download(s).unwrap(), [2.0, 2.0]);
}

/// A recorded op's completion resolves at once, as on a GPU, with what its enqueue makes: a
/// conversion's output matrix (which each replay fills), or `()`. So waiting on it inside the
/// recording works on the simulator as on a GPU, and the matrix it gives holds the replay's
/// result. (The simulator's completion used to fail with `Error::Recording`, which failed the
/// recording.)
#[test]
fn a_recorded_conversion_resolves_with_its_output_matrix() {
    let (d, s, _, mut h) = setup();
    let a = identity(&d, s);
    let got = Arc::new(Mutex::new(None));
    let x = d.upload(s, &[3.0f64, 4.0]).unwrap();
    let y = d.alloc_zeros::<f64>(s, 2).unwrap();
    let (ar, g, xr, yr) = (a.clone(), got.clone(), x.clone(), y.clone());
    let graph = cusched::Graph::record(&d, move |rec| {
        let sp = rec.handles(0)?.sparse()?;
        let coo = sp.csr_to_coo(&ar)?.wait()?;
        sp.spmv(cusched::sparse::Transpose::No, 2.0, &ar, &xr, 0.0, &yr)?.wait()?;
        *g.lock().unwrap() = Some(coo);
        Ok(())
    })
    .unwrap();
    graph.instantiate().unwrap().replay(s).unwrap().wait().unwrap();
    assert_eq!(y.download(s).unwrap(), [6.0, 8.0]);
    let coo = got.lock().unwrap().take().expect("the recording kept the output matrix");
    let eager = h.sparse().unwrap().csr_to_coo(&a).unwrap().wait().unwrap();
    for (g, e) in [(coo.offsets(), eager.offsets()), (coo.indices(), eager.indices())] {
        assert_eq!(g.download(s).unwrap(), e.download(s).unwrap());
    }
    assert_eq!(coo.values().download(s).unwrap(), eager.values().download(s).unwrap());
}
