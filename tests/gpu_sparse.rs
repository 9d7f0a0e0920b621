//! cuSPARSE on a real GPU, against dense f64 CPU references on random sparsity (with an empty
//! row and a fully dense row): SpMV, SpMM, SpGEMM, SpSV, and conversions that round-trip
//! exactly.
#![cfg(feature = "cusparse")]
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

mod common;
use common::*;
use cusched::sparse::{DenseMatrix, Fill, SparseIndex, SparseMatrix, Transpose, Triangle};
use cusched::{Device, Handles, StreamId};

/// A random CSR structure: row 1 empty, row 2 fully dense, the others about `density` full.
/// Returns (offsets, indices, values) with values in [-1, 1).
fn random_csr(rng: &mut Rng, rows: usize, cols: usize, density: f64) -> (Vec<usize>, Vec<usize>, Vec<f64>) {
    let (mut off, mut idx, mut val) = (vec![0], Vec::new(), Vec::new());
    for r in 0..rows {
        for c in 0..cols {
            let keep = match r {
                1 => false,
                2 => true,
                _ => (rng.below(1_000_000) as f64) < density * 1e6,
            };
            if keep {
                idx.push(c);
                val.push(rng.f32() as f64);
            }
        }
        off.push(idx.len());
    }
    (off, idx, val)
}

fn dense_of(rows: usize, cols: usize, (off, idx, val): &(Vec<usize>, Vec<usize>, Vec<f64>)) -> Vec<f64> {
    let mut d = vec![0.0; rows * cols];
    for r in 0..rows {
        for k in off[r]..off[r + 1] {
            d[r * cols + idx[k]] += val[k];
        }
    }
    d
}

fn upload_csr<I: SparseIndex>(
    d: &Device,
    s: StreamId,
    rows: usize,
    cols: usize,
    m: &(Vec<usize>, Vec<usize>, Vec<f64>),
    to_i: impl Fn(usize) -> I,
) -> SparseMatrix<f64, I> {
    let off: Vec<I> = m.0.iter().map(|&x| to_i(x)).collect();
    let mut idx: Vec<I> = m.1.iter().map(|&x| to_i(x)).collect();
    let mut val = m.2.clone();
    if idx.is_empty() {
        idx.push(to_i(0));
        val.push(0.0);
    }
    let (o, i, v) = (d.upload(s, &off).unwrap(), d.upload(s, &idx).unwrap(), d.upload(s, &val).unwrap());
    SparseMatrix::csr(rows, cols, m.1.len(), &o, &i, &v).unwrap()
}

fn setup() -> Option<(Device, StreamId, Handles, Rng)> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    Some((d, s, h, Rng::new()))
}

#[track_caller]
fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spmv_matches_a_dense_product_both_ways_and_with_64_bit_indices() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (rows, cols) = (37, 53);
    let m = random_csr(&mut rng, rows, cols, 0.1);
    let dense = dense_of(rows, cols, &m);
    let x: Vec<f64> = (0..cols).map(|_| rng.f32() as f64).collect();
    let y0: Vec<f64> = (0..rows).map(|_| rng.f32() as f64).collect();
    let (alpha, beta) = (1.5, -0.5);
    let want: Vec<f64> =
        (0..rows).map(|r| alpha * (0..cols).map(|c| dense[r * cols + c] * x[c]).sum::<f64>() + beta * y0[r]).collect();
    let a32 = upload_csr(&d, s, rows, cols, &m, |v| v as i32);
    let a64 = upload_csr(&d, s, rows, cols, &m, |v| v as i64);
    let dx = d.upload(s, &x).unwrap();
    for (name, run) in [("i32", 0), ("i64", 1)] {
        let dy = d.upload(s, &y0).unwrap();
        let sp = h.sparse().unwrap();
        let done = if run == 0 {
            sp.spmv(Transpose::No, alpha, &a32, &dx, beta, &dy)
        } else {
            sp.spmv(Transpose::No, alpha, &a64, &dx, beta, &dy)
        };
        done.unwrap().wait().unwrap();
        close(&dy.download(s).unwrap(), &want, 1e-12, name);
    }
    // Aᵀ x' with x' of `rows` entries; y written only (beta = 0).
    let xt: Vec<f64> = (0..rows).map(|_| rng.f32() as f64).collect();
    let want_t: Vec<f64> = (0..cols).map(|c| (0..rows).map(|r| dense[r * cols + c] * xt[r]).sum()).collect();
    let (dxt, dyt) = (d.upload(s, &xt).unwrap(), d.upload(s, &vec![f64::NAN; cols]).unwrap());
    h.sparse().unwrap().spmv(Transpose::Yes, 1.0, &a32, &dxt, 0.0, &dyt).unwrap().wait().unwrap();
    close(&dyt.download(s).unwrap(), &want_t, 1e-12, "transposed");
    // Repeating reuses the descriptors.
    let made = h.sparse().unwrap().descriptors_made();
    h.sparse().unwrap().spmv(Transpose::Yes, 1.0, &a32, &dxt, 0.0, &dyt).unwrap().wait().unwrap();
    assert_eq!(h.sparse().unwrap().descriptors_made(), made);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spmm_matches_a_dense_product_on_a_lane() {
    let Some((d, s, _h, mut rng)) = setup() else { return };
    let (m, k, n, ldb) = (29, 41, 7, 45);
    let a = random_csr(&mut rng, m, k, 0.15);
    let dense = dense_of(m, k, &a);
    let b: Vec<f64> = (0..ldb * n).map(|_| rng.f32() as f64).collect();
    let want: Vec<f64> = (0..n)
        .flat_map(|j| {
            let (dense, b) = (&dense, &b);
            (0..m).map(move |i| (0..k).map(|l| dense[i * k + l] * b[j * ldb + l]).sum::<f64>())
        })
        .collect();
    let da = upload_csr(&d, s, m, k, &a, |v| v as i32);
    let (db, dc) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f64::NAN; m * n]).unwrap());
    let lane = d.lane("sparse").unwrap();
    let (da2, db2, dc2) = (da.clone(), db.clone(), dc.clone());
    lane.submit(move |cx| {
        cx.sparse()?
            .spmm(Transpose::No, 1.0, &da2, DenseMatrix::new(&db2, k, n).ld(ldb), 0.0, DenseMatrix::new(&dc2, m, n))?
            .wait()
    })
    .wait()
    .unwrap();
    close(&dc.download(s).unwrap(), &want, 1e-12, "spmm");
}

/// Downloads a CSR matrix into a dense row-major one.
fn download_dense(s: StreamId, c: &SparseMatrix<f64, i32>) -> Vec<f64> {
    let off = c.offsets().download(s).unwrap();
    let idx = c.indices().download(s).unwrap();
    let val = c.values().download(s).unwrap();
    let m = (
        off.iter().map(|&x| x as usize).collect(),
        idx[..c.nnz()].iter().map(|&x| x as usize).collect(),
        val[..c.nnz()].to_vec(),
    );
    dense_of(c.rows(), c.cols(), &m)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spgemm_of_random_patterns_matches_a_dense_product() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    for (m, k, n, density) in [(23, 31, 19, 0.1), (64, 64, 64, 0.05), (5, 9, 3, 0.5)] {
        let (a, b) = (random_csr(&mut rng, m, k, density), random_csr(&mut rng, k, n, density));
        let (da_h, db_h) = (dense_of(m, k, &a), dense_of(k, n, &b));
        let alpha = 2.0;
        let want: Vec<f64> = (0..m * n)
            .map(|ij| alpha * (0..k).map(|l| da_h[(ij / n) * k + l] * db_h[l * n + ij % n]).sum::<f64>())
            .collect();
        let (da, db) = (upload_csr(&d, s, m, k, &a, |v| v as i32), upload_csr(&d, s, k, n, &b, |v| v as i32));
        let c = h.sparse().unwrap().spgemm(alpha, &da, &db).unwrap().wait().unwrap();
        assert_eq!((c.rows(), c.cols()), (m, n));
        c.check(s).unwrap();
        close(&download_dense(s, &c), &want, 1e-12, &format!("spgemm {m}x{k}x{n}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spsv_solves_triangular_systems_with_known_solutions_and_reuses_the_analysis() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let n = 50;
    // Lower triangular, diagonally dominant: L[i][i] = 4, random entries below.
    let (mut off, mut idx, mut val) = (vec![0usize], Vec::new(), Vec::new());
    for r in 0..n {
        for c in 0..r {
            if rng.below(4) == 0 {
                idx.push(c);
                val.push(rng.f32() as f64);
            }
        }
        idx.push(r);
        val.push(4.0);
        off.push(idx.len());
    }
    let l = (off, idx, val);
    let dense = dense_of(n, n, &l);
    let dl = upload_csr(&d, s, n, n, &l, |v| v as i32);
    for round in 0..2 {
        let x_true: Vec<f64> = (0..n).map(|_| rng.f32() as f64).collect();
        let b: Vec<f64> = (0..n).map(|i| (0..n).map(|j| dense[i * n + j] * x_true[j]).sum()).collect();
        let (db, dy) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f64::NAN; n]).unwrap());
        let tri = Triangle { fill: Fill::Lower, ..Triangle::default() };
        h.sparse().unwrap().spsv(tri, 1.0, &dl, &db, &dy).unwrap().wait().unwrap();
        close(&dy.download(s).unwrap(), &x_true, 1e-12, &format!("solve {round}"));
    }
    assert_eq!(h.sparse().unwrap().analyses_made(), 1, "the second solve reused the analysis");
    // Lᵀ is upper triangular: solve Lᵀ y = b through the transpose.
    let x_true: Vec<f64> = (0..n).map(|_| rng.f32() as f64).collect();
    let b: Vec<f64> = (0..n).map(|i| (0..n).map(|j| dense[j * n + i] * x_true[j]).sum()).collect();
    let (db, dy) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f64::NAN; n]).unwrap());
    let tri = Triangle { fill: Fill::Lower, transpose: Transpose::Yes, ..Triangle::default() };
    h.sparse().unwrap().spsv(tri, 1.0, &dl, &db, &dy).unwrap().wait().unwrap();
    close(&dy.download(s).unwrap(), &x_true, 1e-12, "transposed solve");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn conversions_round_trip_exactly() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (rows, cols) = (33, 27);
    let m = random_csr(&mut rng, rows, cols, 0.2);
    let a = upload_csr(&d, s, rows, cols, &m, |v| v as i32);
    let want = dense_of(rows, cols, &m);
    // CSR -> CSC -> CSR gives back the same arrays (the input's column indices are sorted).
    let csc = h.sparse().unwrap().convert_compressed(&a).unwrap().wait().unwrap();
    csc.check(s).unwrap();
    let back = h.sparse().unwrap().convert_compressed(&csc).unwrap().wait().unwrap();
    assert_eq!(back.offsets().download(s).unwrap(), a.offsets().download(s).unwrap());
    assert_eq!(back.indices().download(s).unwrap()[..a.nnz()], a.indices().download(s).unwrap()[..a.nnz()]);
    assert_eq!(back.values().download(s).unwrap()[..a.nnz()], a.values().download(s).unwrap()[..a.nnz()]);
    // Sparse -> dense (column-major, padded) and dense -> sparse -> dense are exact.
    let ld = rows + 3;
    let dd = d.upload(s, &vec![f64::NAN; ld * cols]).unwrap();
    h.sparse().unwrap().sparse_to_dense(&a, DenseMatrix::new(&dd, rows, cols).ld(ld)).unwrap().wait().unwrap();
    let got = dd.download(s).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(got[c * ld + r], want[r * cols + c], "dense ({r}, {c})");
        }
    }
    let csr =
        h.sparse().unwrap().dense_to_csr::<f64, i64>(DenseMatrix::new(&dd, rows, cols).ld(ld)).unwrap().wait().unwrap();
    assert_eq!(csr.nnz(), m.2.iter().filter(|&&v| v != 0.0).count());
    csr.check(s).unwrap();
    let csc_dense = d.upload(s, &vec![f64::NAN; rows * cols]).unwrap();
    h.sparse().unwrap().sparse_to_dense(&csc, DenseMatrix::new(&csc_dense, rows, cols)).unwrap().wait().unwrap();
    let again = csc_dense.download(s).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(again[c * rows + r], want[r * cols + c], "from CSC ({r}, {c})");
        }
    }
}
