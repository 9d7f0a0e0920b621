//! Every public cuSPARSE op of `Sparse` recorded into a CUDA graph, one test per op (each can be
//! run in a process of its own, so that an op that kills the process hides no other).
//!
//! An op recorded into a graph must do one of two things: replay as the eager op computes
//! (compared with the same op run eagerly, on a stream of its own, into other outputs), twice,
//! with inputs written between the replays taken by the second (the values of a matrix whose
//! structure stays; the replay reads the buffers, not what recording saw), or be refused with
//! `Error::Recording` before anything is captured, with the device working after it (the op
//! then runs eagerly again and is checked). A crash, another error, or a replay that differs
//! from the eager op is a defect: a recorded `spsv` killed the process with SIGFPE inside
//! `cusparseSpSV_solve` (the captured analysis never ran, so the solve found cuSPARSE's host
//! data empty). Ops that learn an output's size on the host (SpGEMM, the dense → sparse
//! conversions, CSR → BSR) are refused (see [`REFUSED`]); where an op records, its replays are checked the same
//! way. Each test prints (`--nocapture`) whether its op was recorded or refused.

use crate::common::gpu_setup;
use cusched::half::f16;
use cusched::sparse::{
    DenseMatrix, Fill, SpGemmReuse, Sparse, SparseMatrix, SparseVector, SpmmBatch, Transpose, Triangle,
};
use cusched::{Completion, Device, Element, Error, GpuRef, Graph, Handles, StreamId};
use std::sync::{Arc, Mutex};

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmv() {
    let Some(mut fx) = setup() else { return };
    let m = lower(16);
    let a = fx.csr(&m);
    let x = fx.up(&ramp(16));
    let y = fx.outs::<f64>(16);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let yo = y.clone();
    check(
        &mut fx,
        "spmv",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.spmv(Transpose::No, 1.5, &a, &x, 0.0, &yo[side.i()])?),
        read(&y),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmm() {
    let Some(mut fx) = setup() else { return };
    let (n, k) = (16, 3);
    let m = lower(n);
    let a = fx.csr(&m);
    let b = fx.up(&ramp(n * k));
    let c = fx.outs::<f64>(n * k);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let co = c.clone();
    check(
        &mut fx,
        "spmm",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let (bm, cm) = (DenseMatrix::new(&b, n, k), DenseMatrix::new(&co[side.i()], n, k));
            side.done(sp.spmm(Transpose::No, 1.5, &a, bm, 0.0, cm)?)
        },
        read(&c),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// `op(B) = Bᵀ`: `B` is stored `k x n`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmm_ops() {
    let Some(mut fx) = setup() else { return };
    let (n, k) = (16, 2);
    let m = general(n, n);
    let a = fx.csr(&m);
    let b = fx.up(&ramp(n * k));
    let c = fx.outs::<f64>(n * k);
    let (bb, new) = (b.clone(), changed(&ramp(n * k)));
    let co = c.clone();
    check(
        &mut fx,
        "spmm_ops",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let (bm, cm) = (DenseMatrix::new(&b, k, n), DenseMatrix::new(&co[side.i()], n, k));
            side.done(sp.spmm_ops(Transpose::Yes, Transpose::Yes, 0.5, &a, bm, 0.0, cm)?)
        },
        read(&c),
        Some(Box::new(move |s| bb.copy_from_slice(s, &new).unwrap())),
    );
}

/// Two products sharing `A`'s offsets, each with its own column indices (the same ones) and
/// values.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmm_batched() {
    let Some(mut fx) = setup() else { return };
    let (n, k) = (16, 2);
    let m = general(n, n);
    let nnz = m.nnz();
    let idx: Vec<i32> = m.indices.iter().chain(&m.indices).copied().collect();
    let vals: Vec<f64> = m.values.iter().copied().chain(changed(&m.values)).collect();
    let (o, i, v) = (fx.up(&m.offsets), fx.up(&idx), fx.up(&vals));
    let a = SparseMatrix::csr(n, n, nnz, &o, &i, &v).unwrap();
    let b = fx.up(&ramp(2 * n * k));
    let c = fx.outs::<f64>(2 * n * k);
    let batch = SpmmBatch { count: 2, a_offsets: 0, a_entries: nnz, b: n * k, c: n * k };
    let new: Vec<f64> = vals.iter().map(|x| -2.0 * x).collect();
    let co = c.clone();
    check(
        &mut fx,
        "spmm_batched",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let (bm, cm) = (DenseMatrix::new(&b, n, k), DenseMatrix::new(&co[side.i()], n, k));
            side.done(sp.spmm_batched(Transpose::No, 1.0, &a, bm, 0.0, cm, batch)?)
        },
        read(&c),
        Some(Box::new(move |s| v.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spsv() {
    let Some(mut fx) = setup() else { return };
    let m = lower(16);
    let a = fx.csr(&m);
    let x = fx.up(&ramp(16));
    let y = fx.outs::<f64>(16);
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let (av, new) = (a.values().clone(), changed(&m.values));
    let yo = y.clone();
    check(
        &mut fx,
        "spsv",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.spsv(tri, 2.0, &a, &x, &yo[side.i()])?),
        read(&y),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spsm() {
    let Some(mut fx) = setup() else { return };
    let (n, k) = (16, 3);
    let m = lower(n);
    let a = fx.csr(&m);
    let b = fx.up(&ramp(n * k));
    let c = fx.outs::<f64>(n * k);
    let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
    let (av, new) = (a.values().clone(), changed(&m.values));
    let co = c.clone();
    check(
        &mut fx,
        "spsm",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let (bm, cm) = (DenseMatrix::new(&b, n, k), DenseMatrix::new(&co[side.i()], n, k));
            side.done(sp.spsm(tri, 2.0, &a, bm, cm)?)
        },
        read(&c),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// `C = alpha (A B) ∘ pattern(C)`: two `C`s of one structure (shared offsets and indices), each
/// with its own values; `A` changes between the replays.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_sddmm() {
    let Some(mut fx) = setup() else { return };
    let (rows, k, cols) = (12, 3, 10);
    let m = general(rows, cols);
    let (o, i) = (fx.up(&m.offsets), fx.up(&m.indices));
    let vals = fx.outs::<f64>(m.nnz());
    let cs: Vec<SparseMatrix<f64>> =
        vals.iter().map(|v| SparseMatrix::csr(rows, cols, m.nnz(), &o, &i, v).unwrap()).collect();
    let (da, db) = (fx.up(&ramp(rows * k)), fx.up(&ramp(k * cols)));
    let (aa, new) = (da.clone(), changed(&ramp(rows * k)));
    check(
        &mut fx,
        "sddmm",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let (am, bm) = (DenseMatrix::new(&da, rows, k), DenseMatrix::new(&db, k, cols));
            side.done(sp.sddmm(Transpose::No, Transpose::No, 1.5, am, bm, 0.0, &cs[side.i()])?)
        },
        read(&vals),
        Some(Box::new(move |s| aa.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_axpby() {
    let Some(mut fx) = setup() else { return };
    let (x, xv) = fx.vector();
    let y = fx.outs::<f64>(VEC_SIZE);
    let new = changed(&vector_values());
    let yo = y.clone();
    check(
        &mut fx,
        "axpby",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.axpby(1.5, &x, 0.0, &yo[side.i()])?),
        read(&y),
        Some(Box::new(move |s| xv.copy_from_slice(s, &new).unwrap())),
    );
}

/// `x.values = y[x.indices]`: two sparse vectors of one structure (shared indices), each with its
/// own values; `y` changes between the replays.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_gather() {
    let Some(mut fx) = setup() else { return };
    let (x, _) = fx.vector();
    let vals = fx.outs::<f64>(x.nnz());
    let xs: Vec<SparseVector<f64>> =
        vals.iter().map(|v| SparseVector::new(VEC_SIZE, x.nnz(), x.indices(), v).unwrap()).collect();
    let y = fx.up(&ramp(VEC_SIZE));
    let (yy, new) = (y.clone(), changed(&ramp(VEC_SIZE)));
    check(
        &mut fx,
        "gather",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.gather(&y, &xs[side.i()])?),
        read(&vals),
        Some(Box::new(move |s| yy.copy_from_slice(s, &new).unwrap())),
    );
}

/// `y[x.indices] = x.values`, the other entries of `y` (the same on both sides) kept.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_scatter() {
    let Some(mut fx) = setup() else { return };
    let (x, xv) = fx.vector();
    let y = [fx.up(&ramp(VEC_SIZE)), fx.up(&ramp(VEC_SIZE))];
    let new = changed(&vector_values());
    let yo = y.clone();
    check(
        &mut fx,
        "scatter",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.scatter(&x, &yo[side.i()])?),
        read(&y),
        Some(Box::new(move |s| xv.copy_from_slice(s, &new).unwrap())),
    );
}

/// Counts the blocks on the host before sizing the output: refused ([`REFUSED`]).
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_csr_to_bsr() {
    let Some(mut fx) = setup() else { return };
    let m = general(16, 16);
    let a = fx.csr(&m);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "csr_to_bsr",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.csr_to_bsr(&a, 2)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_bsr_to_csr() {
    let Some(mut fx) = setup() else { return };
    let (a, av, new) = fx.bsr();
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "bsr_to_csr",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.bsr_to_csr(&a)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// Converts through CSR, whose nonzeros are counted on the host: refused ([`REFUSED`]).
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_dense_to_bsr() {
    let Some(mut fx) = setup() else { return };
    let m = general(16, 16);
    let dense = fx.up(&m.dense());
    let (dd, new) = (dense.clone(), changed(&m.dense()));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "dense_to_bsr",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.dense_to_bsr(DenseMatrix::new(&dense, 16, 16), 2)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| dd.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_bsr_to_dense() {
    let Some(mut fx) = setup() else { return };
    let (a, av, new) = fx.bsr();
    let (rows, cols) = (a.rows(), a.cols());
    let out = fx.outs::<f64>(rows * cols);
    let o = out.clone();
    check(
        &mut fx,
        "bsr_to_dense",
        F64,
        move |sp: &mut Sparse, side: Side| side.done(sp.bsr_to_dense(&a, DenseMatrix::new(&o[side.i()], rows, cols))?),
        read(&out),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// `f16` matrix and vector into an `f32` output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmv_mixed() {
    let Some(mut fx) = setup() else { return };
    let m = general(16, 16);
    let a = fx.csr_f16(&m);
    let x = fx.up(&halves(&ramp(16)));
    let y = fx.outs::<f32>(16);
    let (av, new) = (a.values().clone(), halves(&changed(&m.values)));
    let yo = y.clone();
    check(
        &mut fx,
        "spmv_mixed",
        F32,
        move |sp: &mut Sparse, side: Side| {
            side.done(sp.spmv_mixed(Transpose::No, 1.5f32, &a, &x, 0.0, &yo[side.i()])?)
        },
        read(&y),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// `f16` matrices into an `f32` output.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spmm_mixed() {
    let Some(mut fx) = setup() else { return };
    let (n, k) = (16, 3);
    let m = general(n, n);
    let a = fx.csr_f16(&m);
    let b = fx.up(&halves(&ramp(n * k)));
    let c = fx.outs::<f32>(n * k);
    let (av, new) = (a.values().clone(), halves(&changed(&m.values)));
    let co = c.clone();
    check(
        &mut fx,
        "spmm_mixed",
        F32,
        move |sp: &mut Sparse, side: Side| {
            let (bm, cm) = (DenseMatrix::new(&b, n, k), DenseMatrix::new(&co[side.i()], n, k));
            side.done(sp.spmm_mixed(Transpose::No, 1.5f32, &a, bm, 0.0, cm)?)
        },
        read(&c),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// The one-shot product, which counts `C`'s nonzeros on the host: refused ([`REFUSED`]).
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spgemm() {
    let Some(mut fx) = setup() else { return };
    let (ma, mb) = (general(12, 10), general(10, 8));
    let (a, b) = (fx.csr(&ma), fx.csr(&mb));
    let (av, new) = (a.values().clone(), changed(&ma.values));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "spgemm",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.spgemm(1.5, &a, &b)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// The reusable product's setup (blocking: it counts `C`'s nonzeros on the host) and a compute,
/// both in the recording: refused ([`REFUSED`]). Where recorded, a replay recomputes from `A`'s
/// values as they are then. Each side keeps its plan for the test's life.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spgemm_reuse() {
    let Some(mut fx) = setup() else { return };
    let (ma, mb) = (general(12, 10), general(10, 8));
    let (a, b) = (fx.csr(&ma), fx.csr(&mb));
    let (av, new) = (a.values().clone(), changed(&ma.values));
    let plans: Arc<Mutex<[Option<SpGemmReuse<f64>>; 2]>> = Arc::default();
    let p = plans.clone();
    check(
        &mut fx,
        "spgemm_reuse",
        F64,
        move |sp: &mut Sparse, side: Side| {
            let plan = sp.spgemm_reuse(&a, &b)?;
            side.done(sp.spgemm_reuse_compute(&plan, 1.5, 0.0)?)?;
            p.lock().unwrap()[side.i()] = Some(plan);
            Ok(())
        },
        move |s: StreamId, side: Side| {
            flat(s, plans.lock().unwrap()[side.i()].as_ref().expect("the op made its plan").c())
        },
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// The compute step alone. A plan is computed on the `Sparse` state that set it up, and a
/// graph's branch state exists only inside recordings, where the setup is refused
/// ([`graph_spgemm_reuse`]): so the compute is recorded with a plan set up eagerly, which must
/// be refused (as a plan of another state, or as not recordable) without harm, or, if it
/// records, replay as the eager compute does, `A`'s new values included.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_spgemm_reuse_compute() {
    let Some(mut fx) = setup() else { return };
    let (ma, mb) = (general(12, 10), general(10, 8));
    let (a, b) = (fx.csr(&ma), fx.csr(&mb));
    let s = fx.s;
    let plan = Arc::new(fx.h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap());
    fx.h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.5, 0.0).unwrap().wait().unwrap();
    let want = flat(s, plan.c());
    let pr = plan.clone();
    let recorded =
        Graph::record(&fx.d, move |rec| rec.handles(0)?.sparse()?.spgemm_reuse_compute(&pr, 1.5, 0.0).map(drop));
    // A plan computes on the stream that made it, and no recording can make one (the setup is
    // refused there): a compute is refused in any graph.
    assert!(recorded.is_err(), "spgemm_reuse_compute must be refused in a graph");
    match recorded {
        Err(e) => {
            assert!(
                matches!(e, Error::Recording { .. } | Error::InvalidArgument { arg: "plan", .. }),
                "spgemm_reuse_compute: the recording failed with {e:?}, not a typed refusal"
            );
            eprintln!("spgemm_reuse_compute: refused in a graph: {e}");
            a.values().copy_from_slice(s, &changed(&ma.values)).unwrap();
            fx.h.sparse().unwrap().spgemm_reuse_compute(&plan, 1.5, 0.0).unwrap().wait().unwrap();
            let again = flat(s, plan.c());
            assert_ne!(again, want, "spgemm_reuse_compute: the new values changed nothing eagerly");
            // The eager reference for the new values: a fresh plan.
            let fresh = fx.h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
            fx.h.sparse().unwrap().spgemm_reuse_compute(&fresh, 1.5, 0.0).unwrap().wait().unwrap();
            close(&again, &flat(s, fresh.c()), F64, "spgemm_reuse_compute: eager after the refusal");
        }
        Ok(graph) => {
            eprintln!("spgemm_reuse_compute: recorded ({} ops)", graph.ops());
            let exec = graph.instantiate().unwrap();
            plan.c().values().copy_from_slice(s, &vec![0.0; plan.c().values().len()]).unwrap();
            exec.replay(s).unwrap().wait().unwrap();
            close(&flat(s, plan.c()), &want, F64, "spgemm_reuse_compute: replay 1");
            a.values().copy_from_slice(s, &changed(&ma.values)).unwrap();
            let fresh = fx.h.sparse().unwrap().spgemm_reuse(&a, &b).unwrap();
            fx.h.sparse().unwrap().spgemm_reuse_compute(&fresh, 1.5, 0.0).unwrap().wait().unwrap();
            let want2 = flat(s, fresh.c());
            assert_ne!(want2, want, "spgemm_reuse_compute: the new values changed nothing eagerly");
            exec.replay(s).unwrap().wait().unwrap();
            close(&flat(s, plan.c()), &want2, F64, "spgemm_reuse_compute: replay 2, after A's values changed");
        }
    }
    fx.d.synchronize(s).unwrap();
}

/// The output's row indices are new; its column indices and values are the input's buffers.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_csr_to_coo() {
    let Some(mut fx) = setup() else { return };
    let m = general(12, 10);
    let a = fx.csr(&m);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "csr_to_coo",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.csr_to_coo(&a)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_coo_to_csr() {
    let Some(mut fx) = setup() else { return };
    let m = general(12, 10);
    let (r, c, v) = (fx.up(&m.row_indices()), fx.up(&m.indices), fx.up(&m.values));
    let a = SparseMatrix::coo(m.rows, m.cols, m.nnz(), &r, &c, &v).unwrap();
    let new = changed(&m.values);
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "coo_to_csr",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.coo_to_csr(&a)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| v.copy_from_slice(s, &new).unwrap())),
    );
}

/// CSR → CSC.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_convert_compressed() {
    let Some(mut fx) = setup() else { return };
    let m = general(12, 10);
    let a = fx.csr(&m);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        "convert_compressed",
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, sp.convert_compressed(&a)?.wait()?),
        out.reader(),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_sparse_to_dense() {
    let Some(mut fx) = setup() else { return };
    let m = general(12, 10);
    let a = fx.csr(&m);
    let (rows, cols) = (m.rows, m.cols);
    let (av, new) = (a.values().clone(), changed(&m.values));
    let out = fx.outs::<f64>(rows * cols);
    let o = out.clone();
    check(
        &mut fx,
        "sparse_to_dense",
        F64,
        move |sp: &mut Sparse, side: Side| {
            side.done(sp.sparse_to_dense(&a, DenseMatrix::new(&o[side.i()], rows, cols))?)
        },
        read(&out),
        Some(Box::new(move |s| av.copy_from_slice(s, &new).unwrap())),
    );
}

/// Counts the nonzeros on the host before sizing the output: refused ([`REFUSED`]). The new values
/// between the replays keep the zeros where they were (the count a recording saw).
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_dense_to_csr() {
    dense_to_sparse("dense_to_csr", |sp, d| sp.dense_to_csr::<f64, i32>(d)?.wait());
}

/// As [`graph_dense_to_csr`], into CSC.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_dense_to_csc() {
    dense_to_sparse("dense_to_csc", |sp, d| sp.dense_to_csc::<f64, i32>(d)?.wait());
}

/// As [`graph_dense_to_csr`], into COO.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_dense_to_coo() {
    dense_to_sparse("dense_to_coo", |sp, d| sp.dense_to_coo::<f64, i32>(d)?.wait());
}

// ---- the harness ---------------------------------------------------------------------------

/// Relative tolerance for `f64` outputs (the eager op and the replay run the same kernels).
const F64: f64 = 1e-12;
/// Relative tolerance for `f32` outputs.
const F32: f64 = 1e-5;

/// Which outputs an op writes: the eager reference's or the graph's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Eager,
    Graph,
}

impl Side {
    /// Waits for an eager op; lets a recorded one's completion go (a recording has nothing to
    /// wait for, and on the simulator a recorded op's completion carries no result).
    fn done(self, op: Completion<()>) -> cusched::Result<()> {
        match self {
            Side::Eager => op.wait(),
            Side::Graph => Ok(()),
        }
    }

    /// The side's index into a pair of outputs.
    fn i(self) -> usize {
        match self {
            Side::Eager => 0,
            Side::Graph => 1,
        }
    }
}

/// A write of an op's inputs between the two replays, on the given stream.
type Change = Box<dyn FnOnce(StreamId)>;

/// The device, a stream of its own and eager handles on it.
struct Fx {
    d: Device,
    s: StreamId,
    h: Handles,
}

/// The GPU fixture, or `None` without a GPU.
fn setup() -> Option<Fx> {
    let (d, s, h) = gpu_setup()?;
    Some(Fx { d, s, h })
}

/// Runs `op` eagerly on `fx`'s handles (the reference, `read(s, Side::Eager)`; `read`
/// downloads a side's outputs on a stream), then records it into a graph on the graph's branch 0
/// writing the graph's outputs. A refusal must be `Error::Recording`, after which the op runs
/// eagerly again and must give the reference. A recording is instantiated and replayed twice,
/// each replay's outputs (`read(s, Side::Graph)`) checked within `tol` of the eager op's;
/// `change`, when given, writes the op's inputs between the replays, the eager op is run again
/// on them (and must give something else), and the second replay must give what it gave.
///
/// An op that makes its output matrix hands it back through its completion: on CUDA a recorded
/// op's completion resolves at once with that value (the matrix made while recording, which
/// the replays write), so the graph's side waits for it too.
fn check<F, R>(fx: &mut Fx, name: &str, tol: f64, mut op: F, read: R, change: Option<Change>)
where
    F: FnMut(&mut Sparse, Side) -> cusched::Result<()> + Clone + Send + 'static,
    R: Fn(StreamId, Side) -> Vec<f64>,
{
    let s = fx.s;
    op(fx.h.sparse().unwrap(), Side::Eager).unwrap();
    let want = read(s, Side::Eager);
    let mut recorded_op = op.clone();
    let recorded = Graph::record(&fx.d, move |rec| recorded_op(rec.handles(0)?.sparse()?, Side::Graph));
    let refused = REFUSED.contains(&name);
    assert_eq!(recorded.is_err(), refused, "{name}: {}", if refused { "must be refused" } else { "must record" });
    match recorded {
        Err(e) => {
            assert!(
                matches!(e, Error::Recording { .. }),
                "{name}: the recording failed with {e:?}, not Error::Recording"
            );
            eprintln!("{name}: refused in a graph: {e}");
            op(fx.h.sparse().unwrap(), Side::Eager).unwrap();
            close(&read(s, Side::Eager), &want, tol, &format!("{name}: eager after the refusal"));
        }
        Ok(graph) => {
            eprintln!("{name}: recorded ({} ops)", graph.ops());
            let exec = graph.instantiate().unwrap();
            exec.replay(s).unwrap().wait().unwrap();
            close(&read(s, Side::Graph), &want, tol, &format!("{name}: replay 1"));
            let want = match change {
                Some(change) => {
                    change(s);
                    op(fx.h.sparse().unwrap(), Side::Eager).unwrap();
                    let now = read(s, Side::Eager);
                    assert_ne!(now, want, "{name}: the test's new inputs changed nothing eagerly");
                    now
                }
                None => want,
            };
            exec.replay(s).unwrap().wait().unwrap();
            close(&read(s, Side::Graph), &want, tol, &format!("{name}: replay 2, after the inputs changed"));
        }
    }
    fx.d.synchronize(s).unwrap();
}

/// The ops refused in a graph ([`Error::Recording`]): the triangular solves (cuSPARSE's analysis
/// runs partly on the host), the ops whose output the host sizes from a count the GPU makes
/// (recorded, each replay wrote the real count's entries past an output sized from nothing:
/// memcheck reported invalid global writes), and the compressed-format conversion (its replay
/// faulted with an illegal address). Every other op must record and replay.
const REFUSED: &[&str] = &[
    "spsv",
    "spsm",
    "spgemm",
    "spgemm_reuse",
    "csr_to_bsr",
    "dense_to_bsr",
    "dense_to_csr",
    "dense_to_csc",
    "dense_to_coo",
    "convert_compressed",
];

/// A dense → sparse conversion (`convert`, into `i32` indices) of a 12x10 column-major matrix
/// with zeros, checked by [`check`]; the values written between the replays keep its zeros.
fn dense_to_sparse(name: &str, convert: fn(&mut Sparse, DenseMatrix<'_, f64>) -> cusched::Result<SparseMatrix<f64>>) {
    let Some(mut fx) = setup() else { return };
    let m = general(12, 10);
    let (rows, cols) = (m.rows, m.cols);
    let dense = fx.up(&m.dense());
    let (dd, new) = (dense.clone(), changed(&m.dense()));
    let out = Slots::default();
    let o = out.clone();
    check(
        &mut fx,
        name,
        F64,
        move |sp: &mut Sparse, side: Side| o.put(side, convert(sp, DenseMatrix::new(&dense, rows, cols))?),
        out.reader(),
        Some(Box::new(move |s| dd.copy_from_slice(s, &new).unwrap())),
    );
}

impl Fx {
    /// `v` on the device.
    fn up<T: Element>(&self, v: &[T]) -> GpuRef<T> {
        self.d.upload(self.s, v).unwrap()
    }

    /// Two zeroed outputs of `len` elements: the eager op's and the graph's.
    fn outs<T: Element>(&self, len: usize) -> [GpuRef<T>; 2] {
        [0, 1].map(|_| self.d.alloc_zeros(self.s, len).unwrap())
    }

    /// `m` on the device, in `f64`.
    fn csr(&self, m: &Csr) -> SparseMatrix<f64> {
        let (o, i, v) = (self.up(&m.offsets), self.up(&m.indices), self.up(&m.values));
        SparseMatrix::csr(m.rows, m.cols, m.nnz(), &o, &i, &v).unwrap()
    }

    /// `m` on the device, its values in `f16`.
    fn csr_f16(&self, m: &Csr) -> SparseMatrix<f16> {
        let (o, i, v) = (self.up(&m.offsets), self.up(&m.indices), self.up(&halves(&m.values)));
        SparseMatrix::csr(m.rows, m.cols, m.nnz(), &o, &i, &v).unwrap()
    }

    /// A sparse vector of [`VEC_SIZE`] entries with [`vector_values`] at fixed positions, and
    /// its values' buffer.
    fn vector(&self) -> (SparseVector<f64>, GpuRef<f64>) {
        let idx: Vec<i32> = vec![1, 3, 4, 8, 13, 17, 21, 26, 31];
        let v = self.up(&vector_values());
        (SparseVector::new(VEC_SIZE, idx.len(), &self.up(&idx), &v).unwrap(), v)
    }

    /// An 8x8 BSR matrix of 2x2 blocks (9 of the 16, one block row with a single block), its
    /// values' buffer, and other values for it.
    fn bsr(&self) -> (SparseMatrix<f64>, GpuRef<f64>, Vec<f64>) {
        let (mut offsets, mut indices) = (vec![0i32], Vec::new());
        for i in 0..4 {
            for j in 0..4 {
                if (i * 3 + j) % 4 != 1 && (i != 2 || j == 3) {
                    indices.push(j);
                }
            }
            offsets.push(indices.len() as i32);
        }
        let values: Vec<f64> = (0..indices.len() * 4).map(|k| 0.5 + 0.25 * k as f64).collect();
        let v = self.up(&values);
        let a = SparseMatrix::bsr(8, 8, 2, indices.len(), &self.up(&offsets), &self.up(&indices), &v).unwrap();
        (a, v, changed(&values))
    }
}

/// Entries of the sparse vector of [`Fx::vector`].
const VEC_SIZE: usize = 32;

/// The sparse vector's values.
fn vector_values() -> Vec<f64> {
    (0..9).map(|k| 0.75 - 0.5 * k as f64).collect()
}

/// A CSR matrix on the host, `i32` indices (sorted in each row), no stored zeros.
#[derive(Clone, Debug)]
struct Csr {
    rows: usize,
    cols: usize,
    offsets: Vec<i32>,
    indices: Vec<i32>,
    values: Vec<f64>,
}

impl Csr {
    fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Each stored entry's row, as COO holds them.
    fn row_indices(&self) -> Vec<i32> {
        self.offsets
            .windows(2)
            .enumerate()
            .flat_map(|(r, w)| std::iter::repeat_n(r as i32, (w[1] - w[0]) as usize))
            .collect()
    }

    /// The matrix dense, column-major.
    fn dense(&self) -> Vec<f64> {
        let mut d = vec![0.0; self.rows * self.cols];
        for (r, w) in self.offsets.windows(2).enumerate() {
            for p in w[0] as usize..w[1] as usize {
                d[self.indices[p] as usize * self.rows + r] = self.values[p];
            }
        }
        d
    }
}

/// An `n x n` lower-triangular matrix whose solves are well conditioned: a diagonal of 3 to 7,
/// the entry left of it, and in every third row an entry in column 0.
fn lower(n: usize) -> Csr {
    let (mut offsets, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
    for r in 0..n {
        if r >= 2 && r % 3 == 2 {
            indices.push(0);
            values.push(0.5);
        }
        if r >= 1 {
            indices.push(r as i32 - 1);
            values.push(1.0 - 0.25 * (r % 4) as f64);
        }
        indices.push(r as i32);
        values.push(3.0 + (r % 5) as f64);
        offsets.push(indices.len() as i32);
    }
    Csr { rows: n, cols: n, offsets, indices, values }
}

/// A `rows x cols` matrix about 40% full, every value a nonzero multiple of 0.25 (exact in
/// `f16`).
fn general(rows: usize, cols: usize) -> Csr {
    let (mut offsets, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
    for r in 0..rows {
        for c in 0..cols {
            if (r * 7 + c * 3) % 5 < 2 {
                indices.push(c as i32);
                values.push(0.5 * ((r * cols + c) % 7) as f64 - 0.75);
            }
        }
        offsets.push(indices.len() as i32);
    }
    Csr { rows, cols, offsets, indices, values }
}

/// `0.25, 0.5, ...` cycling through eight values: a dense operand.
fn ramp(n: usize) -> Vec<f64> {
    (0..n).map(|k| 0.25 * (1 + k % 8) as f64).collect()
}

/// Other values for the same entries: each scaled by 1.5, 1.75 or 2 (no zero becomes nonzero or
/// the reverse, and signs stay).
fn changed(v: &[f64]) -> Vec<f64> {
    v.iter().enumerate().map(|(k, x)| x * (1.5 + 0.25 * (k % 3) as f64)).collect()
}

/// `v` in `f16`.
fn halves(v: &[f64]) -> Vec<f16> {
    v.iter().map(|&x| f16::from_f64(x)).collect()
}

/// Reads a pair of dense outputs, as `f64`.
fn read<T: Element + Into<f64>>(outs: &[GpuRef<T>; 2]) -> impl Fn(StreamId, Side) -> Vec<f64> {
    let outs = outs.clone();
    move |s: StreamId, side: Side| outs[side.i()].download(s).unwrap().into_iter().map(Into::into).collect()
}

/// The sparse matrices an op made, one per side, kept for the test's life.
#[derive(Clone, Default)]
struct Slots(Arc<Mutex<[Option<SparseMatrix<f64>>; 2]>>);

impl Slots {
    /// Keeps `side`'s output.
    fn put(&self, side: Side, m: SparseMatrix<f64>) -> cusched::Result<()> {
        self.0.lock().unwrap()[side.i()] = Some(m);
        Ok(())
    }

    /// Reads a side's output with [`flat`].
    fn reader(&self) -> impl Fn(StreamId, Side) -> Vec<f64> {
        let slots = self.clone();
        move |s: StreamId, side: Side| {
            flat(s, slots.0.lock().unwrap()[side.i()].as_ref().expect("the op made its output"))
        }
    }
}

/// A sparse matrix as one list to compare: shape, nonzeros (blocks for BSR) and block size, the
/// whole offsets array (COO: row indices), then the stored indices and values.
fn flat(s: StreamId, m: &SparseMatrix<f64>) -> Vec<f64> {
    let (nnz, area) = (m.nnz(), m.block().max(1).pow(2));
    let mut out = vec![m.rows() as f64, m.cols() as f64, nnz as f64, m.block() as f64];
    out.extend(m.offsets().download(s).unwrap().into_iter().map(f64::from));
    out.extend(m.indices().download(s).unwrap().into_iter().take(nnz).map(f64::from));
    out.extend(m.values().download(s).unwrap().into_iter().take(nnz * area));
    out
}

/// Asserts `got` as long as `want` and each entry within `tol` of `want`'s, relative to it
/// (absolute below 1), naming `what` and the entry otherwise.
#[track_caller]
fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}: entry {k} is {g}, not {w}");
    }
}
