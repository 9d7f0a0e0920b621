//! Every cuSPARSE op on the GPU against the CPU reference of tests/common/reference/sparse.rs
//! (every value and index type, format, transpose and layout), the GPU and the simulator on the
//! same inputs against each other, and sequences that reuse buffers across shapes and value
//! types on one state, where a workspace size cached under too loose a key would come up short.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::common::reference::sparse::*;
use crate::common::*;
use cusched::sparse::{DenseMatrix, SparseMatrix, Transpose};
use cusched::Complex;

fn setup() -> Option<Cx> {
    Some(Cx::new(gpu()?, Rng::new()))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_value_type_and_index_type_matches_a_cpu_reference() {
    let Some(mut cx) = setup() else { return };
    every_op(&mut cx);
}

/// Every op on the GPU and on the simulator, with the same inputs (one seed drives both
/// harnesses), each against the CPU reference and the two against each other.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_op_matches_between_the_gpu_and_the_simulator() {
    let Some(d) = gpu() else { return };
    let seed = Rng::new().next();
    let mut on_gpu = Cx::new(d, Rng::seeded(seed));
    every_op(&mut on_gpu);
    let mut on_sim = Cx::new(sim(), Rng::seeded(seed));
    every_op(&mut on_sim);
    same_results(&on_gpu.log, &on_sim.log, ["gpu", "sim"]);
}

/// One state, buffers reused across shapes and value types: sizes cached for one call must
/// not serve another whose workspace differs (the results stay right, and compute-sanitizer
/// sees no access beyond the workspace).
#[test]
#[ignore = "needs a CUDA GPU"]
fn workspace_sizes_are_not_reused_across_shapes_or_value_types() {
    let Some(mut cx) = setup() else { return };
    // SpMM: the same values, indices, B and C buffers under 2 and 64 rows, same nnz and lds.
    let (k, n, nnz) = (4usize, 3usize, 2usize);
    let vals = cx.up(&[1.5f64, -2.0]);
    let idx = cx.idx::<i32>(&[1, 3]);
    let b: Vec<f64> = (0..k * n).map(|i| i as f64).collect();
    let db = cx.up(&b);
    let dc = cx.up(&vec![0.0f64; 64 * n]);
    for rows in [2usize, 64] {
        let mut off = vec![0usize; rows + 1];
        off[1] = 1;
        for r in 2..=rows {
            off[r] = nnz;
        }
        let a = SparseMatrix::csr(rows, k, nnz, &cx.idx::<i32>(&off), &idx, &vals).unwrap();
        cx.h.sparse()
            .unwrap()
            .spmm(Transpose::No, 1.0, &a, DenseMatrix::new(&db, k, n), 0.0, DenseMatrix::new(&dc, rows, n).ld(64))
            .unwrap()
            .wait()
            .unwrap();
        let got = dc.download(cx.s).unwrap();
        for j in 0..n {
            assert_eq!(got[j * 64], 1.5 * b[j * k + 1], "rows {rows} col {j} row 0");
            assert_eq!(got[j * 64 + 1], -2.0 * b[j * k + 3], "rows {rows} col {j} row 1");
        }
    }
    // CSR -> CSC: same m, n, nnz in f32 then Complex<f64>.
    let m = Dense { rows: 40, cols: 30, v: (0..1200).map(|i| if i % 7 == 0 { C(i as f64, 1.0) } else { Z }).collect() };
    let small = cx.matrix::<f32, i32>(&Dense { v: m.v.iter().map(|c| C(c.0, 0.0)).collect(), ..m.clone() }, "csr");
    cx.h.sparse().unwrap().convert_compressed(&small).unwrap().wait().unwrap();
    let wide = cx.matrix::<Complex<f64>, i32>(&m, "csr");
    let csc = cx.h.sparse().unwrap().convert_compressed(&wide).unwrap().wait().unwrap();
    let out = cx.dense_up::<Complex<f64>>(&Dense { rows: 40, cols: 30, v: vec![Z; 1200] }, 40);
    cx.h.sparse().unwrap().sparse_to_dense(&csc, DenseMatrix::new(&out, 40, 30)).unwrap().wait().unwrap();
    close(&dense_down(&cx, &out, 40, 30, 40), &m.v, 0.0, "csr2csc after f32");
    // SDDMM: the same A and B buffers read with two leading dimensions each.
    let pattern = cx.random(6, 5, 0.5, false);
    let c = cx.matrix::<f64, i32>(&pattern, "csr");
    let (raw_a, raw_b): (Vec<f64>, Vec<f64>) = (cx.vals(100), cx.vals(100));
    let (da, dbm) = (cx.up(&raw_a), cx.up(&raw_b));
    for (lda, ldb) in [(6usize, 4usize), (20, 20)] {
        cx.h.sparse()
            .unwrap()
            .sddmm(
                Transpose::No,
                Transpose::No,
                1.0,
                DenseMatrix::new(&da, 6, 4).ld(lda),
                DenseMatrix::new(&dbm, 4, 5).ld(ldb),
                0.0,
                &c,
            )
            .unwrap()
            .wait()
            .unwrap();
        let a = Dense { rows: 6, cols: 4, v: (0..24).map(|i| C(raw_a[(i % 4) * lda + i / 4], 0.0)).collect() };
        let bm = Dense { rows: 4, cols: 5, v: (0..20).map(|i| C(raw_b[(i % 5) * ldb + i / 5], 0.0)).collect() };
        let full = gemm(C(1.0, 0.0), &a, &bm, Z, &pattern);
        let want: Vec<C> = (0..30).filter(|&i| pattern.v[i] != Z).map(|i| full[i]).collect();
        let got: Vec<C> = c.values().download(cx.s).unwrap()[..c.nnz()].iter().map(|v| v.c()).collect();
        close(&got, &want, 1e-12, &format!("sddmm lda {lda} ldb {ldb}"));
    }
}
