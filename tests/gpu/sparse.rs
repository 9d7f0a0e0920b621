//! cuSPARSE on a real GPU, against dense f64 CPU references on random sparsity (with an empty
//! row and a fully dense row): SpMV, SpMM, SpGEMM, SpSV, and conversions that round-trip
//! exactly; SpGEMM reuse, SDDMM, SpSM, the sparse-vector ops, BSR and Blocked-ELL.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::*;
use cusched::sparse::{DenseMatrix, Fill, SparseIndex, SparseMatrix, SparseVector, Transpose, Triangle};
use cusched::{Device, Error, Handles, StreamId};

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
    let (d, s, h) = gpu_setup()?;
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

fn randv(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.f32() as f64).collect()
}

/// `alpha * A * B` for dense row-major `A` (`m x k`) and `B` (`k x n`), row-major.
fn product(alpha: f64, a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    (0..m * n).map(|ij| alpha * (0..k).map(|l| a[(ij / n) * k + l] * b[l * n + ij % n]).sum::<f64>()).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spgemm_reuse_recomputes_the_product_after_the_values_change() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (m, k, n) = (31, 23, 27);
    let (mut a, b) = (random_csr(&mut rng, m, k, 0.15), random_csr(&mut rng, k, n, 0.15));
    let (da, db) = (upload_csr(&d, s, m, k, &a, |v| v as i32), upload_csr(&d, s, k, n, &b, |v| v as i32));
    let plan = h.sparse().unwrap().spgemm_reuse(&da, &db).unwrap();
    assert_eq!((plan.c().rows(), plan.c().cols()), (m, n));
    plan.c().check(s).unwrap();
    for round in 0..3 {
        if round > 0 {
            // New values, same structure: the plan's compute picks them up.
            a.2 = randv(&mut rng, a.2.len());
            da.values().copy_from_slice(s, &a.2).unwrap();
        }
        let alpha = 1.0 + round as f64;
        h.sparse().unwrap().spgemm_reuse_compute(&plan, alpha, 0.0).unwrap().wait().unwrap();
        let want = product(alpha, &dense_of(m, k, &a), &dense_of(k, n, &b), m, k, n);
        close(&download_dense(s, plan.c()), &want, 1e-12, &format!("reuse round {round}"));
    }
    // A plan is computed on the state that made it.
    let s2 = d.new_stream().unwrap();
    let mut h2 = Handles::new(&d, s2).unwrap();
    let other = h2.sparse().unwrap().spgemm_reuse_compute(&plan, 1.0, 0.0);
    assert!(matches!(other, Err(Error::InvalidArgument { arg: "plan", .. })), "{other:?}");
    drop(plan);
    // The next op retires the dropped plan's objects without waiting.
    h.sparse().unwrap().spgemm_reuse(&da, &db).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spgemm_in_f32_matches_a_dense_product() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (m, k, n) = (40, 33, 21);
    let (a, b) = (random_csr(&mut rng, m, k, 0.1), random_csr(&mut rng, k, n, 0.1));
    let up = |mm: &(Vec<usize>, Vec<usize>, Vec<f64>), rows, cols| {
        let off: Vec<i32> = mm.0.iter().map(|&x| x as i32).collect();
        let idx: Vec<i32> = mm.1.iter().map(|&x| x as i32).collect();
        let val: Vec<f32> = mm.2.iter().map(|&x| x as f32).collect();
        let (o, i, v) = (d.upload(s, &off).unwrap(), d.upload(s, &idx).unwrap(), d.upload(s, &val).unwrap());
        SparseMatrix::csr(rows, cols, idx.len(), &o, &i, &v).unwrap()
    };
    let (da, db) = (up(&a, m, k), up(&b, k, n));
    let c = h.sparse().unwrap().spgemm(0.5f32, &da, &db).unwrap().wait().unwrap();
    c.check(s).unwrap();
    let off = c.offsets().download(s).unwrap();
    let idx = c.indices().download(s).unwrap();
    let val = c.values().download(s).unwrap();
    let got = (
        off.iter().map(|&x| x as usize).collect(),
        idx[..c.nnz()].iter().map(|&x| x as usize).collect(),
        val[..c.nnz()].iter().map(|&x| x as f64).collect(),
    );
    let want = product(0.5, &dense_of(m, k, &a), &dense_of(k, n, &b), m, k, n);
    close(&dense_of(m, n, &got), &want, 1e-5, "spgemm f32");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spmv_takes_coo_and_csc_inputs() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (rows, cols) = (29, 35);
    let m = random_csr(&mut rng, rows, cols, 0.12);
    let dense = dense_of(rows, cols, &m);
    let x = randv(&mut rng, cols);
    let want: Vec<f64> = (0..rows).map(|r| (0..cols).map(|c| dense[r * cols + c] * x[c]).sum()).collect();
    let dx = d.upload(s, &x).unwrap();
    // COO: the row of every nonzero, in CSR order (sorted by row).
    let coo_rows: Vec<i32> = (0..rows).flat_map(|r| std::iter::repeat_n(r as i32, m.0[r + 1] - m.0[r])).collect();
    let coo_cols: Vec<i32> = m.1.iter().map(|&c| c as i32).collect();
    let nnz = coo_cols.len();
    let (ri, ci, v) = (d.upload(s, &coo_rows).unwrap(), d.upload(s, &coo_cols).unwrap(), d.upload(s, &m.2).unwrap());
    let coo = SparseMatrix::coo(rows, cols, nnz, &ri, &ci, &v).unwrap();
    // CSC: column by column, rows increasing.
    let (mut off, mut idx, mut val) = (vec![0i64], Vec::new(), Vec::new());
    for c in 0..cols {
        for r in 0..rows {
            if let Some(p) = (m.0[r]..m.0[r + 1]).find(|&p| m.1[p] == c) {
                idx.push(r as i64);
                val.push(m.2[p]);
            }
        }
        off.push(idx.len() as i64);
    }
    let (o, i, vv) = (d.upload(s, &off).unwrap(), d.upload(s, &idx).unwrap(), d.upload(s, &val).unwrap());
    let csc = SparseMatrix::csc(rows, cols, idx.len(), &o, &i, &vv).unwrap();
    csc.check(s).unwrap();
    coo.check(s).unwrap();
    let y = d.upload(s, &vec![f64::NAN; rows]).unwrap();
    h.sparse().unwrap().spmv(Transpose::No, 1.0, &coo, &dx, 0.0, &y).unwrap().wait().unwrap();
    close(&y.download(s).unwrap(), &want, 1e-12, "coo");
    let y = d.upload(s, &vec![f64::NAN; rows]).unwrap();
    h.sparse().unwrap().spmv(Transpose::No, 1.0, &csc, &dx, 0.0, &y).unwrap().wait().unwrap();
    close(&y.download(s).unwrap(), &want, 1e-12, "csc (i64)");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sddmm_samples_a_dense_product_at_the_pattern() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (m, k, n) = (26, 9, 31);
    let pattern = random_csr(&mut rng, m, n, 0.2);
    let c = upload_csr(&d, s, m, n, &pattern, |v| v as i32);
    for (ta, tb) in [(Transpose::No, Transpose::No), (Transpose::Yes, Transpose::Yes)] {
        // op(A) is m x k and op(B) k x n, column-major; stored transposed when asked.
        let (ar, ac) = if ta == Transpose::No { (m, k) } else { (k, m) };
        let (br, bc) = if tb == Transpose::No { (k, n) } else { (n, k) };
        let (lda, ldb) = (ar + 2, br + 1);
        let (a, b) = (randv(&mut rng, lda * ac), randv(&mut rng, ldb * bc));
        let opa = |i: usize, l: usize| if ta == Transpose::No { a[l * lda + i] } else { a[i * lda + l] };
        let opb = |l: usize, j: usize| if tb == Transpose::No { b[j * ldb + l] } else { b[l * ldb + j] };
        let c0 = randv(&mut rng, pattern.2.len());
        c.values().copy_from_slice(s, &c0).unwrap();
        let (alpha, beta) = (2.0, 0.5);
        let mut want = Vec::new();
        for i in 0..m {
            for p in pattern.0[i]..pattern.0[i + 1] {
                let j = pattern.1[p];
                want.push(alpha * (0..k).map(|l| opa(i, l) * opb(l, j)).sum::<f64>() + beta * c0[p]);
            }
        }
        let (da, db) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap());
        let (va, vb) = (DenseMatrix::new(&da, ar, ac).ld(lda), DenseMatrix::new(&db, br, bc).ld(ldb));
        h.sparse().unwrap().sddmm(ta, tb, alpha, va, vb, beta, &c).unwrap().wait().unwrap();
        close(&c.values().download(s).unwrap()[..want.len()], &want, 1e-12, &format!("sddmm {ta:?}"));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spsm_solves_several_right_hand_sides_and_reuses_the_analysis() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (n, nrhs, ldb) = (45, 3, 47);
    let (mut off, mut idx, mut val) = (vec![0usize], Vec::new(), Vec::new());
    for r in 0..n {
        for c in 0..r {
            // Row 1 holds only its diagonal; row n - 1 is full below it.
            if r != 1 && (r == n - 1 || rng.below(4) == 0) {
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
    for (round, transpose) in [(0, Transpose::No), (1, Transpose::No), (2, Transpose::Yes)] {
        let x_true = randv(&mut rng, n * nrhs); // column-major, ld n
        let mut b = vec![0.0; ldb * nrhs];
        for j in 0..nrhs {
            for i in 0..n {
                let at =
                    |i: usize, c: usize| if transpose == Transpose::No { dense[i * n + c] } else { dense[c * n + i] };
                b[j * ldb + i] = (0..n).map(|c| at(i, c) * x_true[j * n + c]).sum::<f64>() / 2.0;
            }
        }
        let (db, dc) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f64::NAN; n * nrhs]).unwrap());
        let tri = Triangle { fill: Fill::Lower, transpose, ..Triangle::default() };
        let (vb, vc) = (DenseMatrix::new(&db, n, nrhs).ld(ldb), DenseMatrix::new(&dc, n, nrhs));
        h.sparse().unwrap().spsm(tri, 2.0, &dl, vb, vc).unwrap().wait().unwrap();
        close(&dc.download(s).unwrap(), &x_true, 1e-12, &format!("spsm round {round}"));
    }
    assert_eq!(h.sparse().unwrap().analyses_made(), 2, "one analysis per triangle: the second solve reused it");
}

/// `nnz` distinct increasing positions below `size`.
fn positions(rng: &mut Rng, size: usize, nnz: usize) -> Vec<i32> {
    let mut all: Vec<i32> = (0..size as i32).collect();
    for i in 0..nnz {
        let j = i + rng.below((size - i) as u64) as usize;
        all.swap(i, j);
    }
    let mut p = all[..nnz].to_vec();
    p.sort_unstable();
    p
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn axpby_gather_and_scatter_match_their_definitions() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (size, nnz) = (64, 17);
    let idx = positions(&mut rng, size, nnz);
    let xv = randv(&mut rng, nnz);
    let x = SparseVector::new(size, nnz, &d.upload(s, &idx).unwrap(), &d.upload(s, &xv).unwrap()).unwrap();
    x.check(s).unwrap();
    let y0 = randv(&mut rng, size);
    // axpby: y = alpha x + beta y.
    let y = d.upload(s, &y0).unwrap();
    h.sparse().unwrap().axpby(1.5, &x, -0.5, &y).unwrap().wait().unwrap();
    let mut want: Vec<f64> = y0.iter().map(|v| -0.5 * v).collect();
    for (p, v) in idx.iter().zip(&xv) {
        want[*p as usize] += 1.5 * v;
    }
    close(&y.download(s).unwrap(), &want, 1e-12, "axpby");
    // gather: x2.values = y0[idx].
    let g = SparseVector::new(size, nnz, x.indices(), &d.upload(s, &vec![f64::NAN; nnz]).unwrap()).unwrap();
    let dy0 = d.upload(s, &y0).unwrap();
    h.sparse().unwrap().gather(&dy0, &g).unwrap().wait().unwrap();
    let want: Vec<f64> = idx.iter().map(|&p| y0[p as usize]).collect();
    assert_eq!(g.values().download(s).unwrap(), want, "gather");
    // scatter: y0[idx] = x.values, the rest unchanged.
    h.sparse().unwrap().scatter(&x, &dy0).unwrap().wait().unwrap();
    let mut want = y0.clone();
    for (p, v) in idx.iter().zip(&xv) {
        want[*p as usize] = *v;
    }
    assert_eq!(dy0.download(s).unwrap(), want, "scatter");
}

/// A random BSR matrix of `bs x bs` blocks on a `br x bc` block grid: block row 1 empty, block
/// row 2 full. Returns (offsets, block columns, values (row-major blocks), dense row-major).
fn random_bsr(rng: &mut Rng, br: usize, bc: usize, bs: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>, Vec<f64>) {
    let (rows, cols) = (br * bs, bc * bs);
    let (mut off, mut idx, mut val, mut dense) = (vec![0i32], Vec::new(), Vec::new(), vec![0.0; rows * cols]);
    for i in 0..br {
        for j in 0..bc {
            let keep = match i {
                1 => false,
                2 => true,
                _ => rng.below(3) == 0,
            };
            if keep {
                idx.push(j as i32);
                for r in 0..bs {
                    for c in 0..bs {
                        let v = rng.f32() as f64;
                        val.push(v);
                        dense[(i * bs + r) * cols + j * bs + c] = v;
                    }
                }
            }
        }
        off.push(idx.len() as i32);
    }
    (off, idx, val, dense)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bsr_spmv_and_spmm_match_dense_products() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    let (br, bc, bs) = (6, 5, 3);
    let (rows, cols) = (br * bs, bc * bs);
    let (off, idx, val, dense) = random_bsr(&mut rng, br, bc, bs);
    let a = SparseMatrix::bsr(
        rows,
        cols,
        bs,
        idx.len(),
        &d.upload(s, &off).unwrap(),
        &d.upload(s, &idx).unwrap(),
        &d.upload(s, &val).unwrap(),
    )
    .unwrap();
    a.check(s).unwrap();
    let (x, y0) = (randv(&mut rng, cols), randv(&mut rng, rows));
    let (dx, dy) = (d.upload(s, &x).unwrap(), d.upload(s, &y0).unwrap());
    h.sparse().unwrap().spmv(Transpose::No, 2.0, &a, &dx, 0.25, &dy).unwrap().wait().unwrap();
    let want: Vec<f64> =
        (0..rows).map(|r| 2.0 * (0..cols).map(|c| dense[r * cols + c] * x[c]).sum::<f64>() + 0.25 * y0[r]).collect();
    close(&dy.download(s).unwrap(), &want, 1e-12, "bsr spmv");
    let n = 4;
    let b = randv(&mut rng, cols * n); // column-major
    let (db, dc) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f64::NAN; rows * n]).unwrap());
    h.sparse()
        .unwrap()
        .spmm(Transpose::No, 1.0, &a, DenseMatrix::new(&db, cols, n), 0.0, DenseMatrix::new(&dc, rows, n))
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f64> = (0..rows * n)
        .map(|p| (0..cols).map(|l| dense[(p % rows) * cols + l] * b[(p / rows) * cols + l]).sum())
        .collect();
    close(&dc.download(s).unwrap(), &want, 1e-12, "bsr spmm");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn blocked_ell_spmm_matches_a_dense_product() {
    let Some((d, s, mut h, mut rng)) = setup() else { return };
    // 3 block rows of 4x4 blocks, 3 slots each: row 0 two blocks, row 1 none (empty rows),
    // row 2 all three (full rows). Empty slots come last, marked -1, with zero values.
    let (bs, rows, cols, slots) = (4usize, 12usize, 12usize, 3usize);
    let layout: [[i32; 3]; 3] = [[0, 2, -1], [-1, -1, -1], [0, 1, 2]];
    let ell_cols = slots * bs;
    let idx: Vec<i32> = layout.iter().flatten().copied().collect();
    let (mut val, mut dense) = (vec![0.0f32; rows * ell_cols], vec![0.0f64; rows * cols]);
    for r in 0..rows {
        for e in 0..ell_cols {
            let bcol = layout[r / bs][e / bs];
            if bcol >= 0 {
                let v = rng.f32();
                val[r * ell_cols + e] = v;
                dense[r * cols + bcol as usize * bs + e % bs] = v as f64;
            }
        }
    }
    let a =
        SparseMatrix::blocked_ell(rows, cols, bs, ell_cols, &d.upload(s, &idx).unwrap(), &d.upload(s, &val).unwrap())
            .unwrap();
    a.check(s).unwrap();
    let n = 8;
    let b: Vec<f32> = (0..cols * n).map(|_| rng.f32()).collect(); // column-major
    let (db, dc) = (d.upload(s, &b).unwrap(), d.upload(s, &vec![f32::NAN; rows * n]).unwrap());
    h.sparse()
        .unwrap()
        .spmm(Transpose::No, 1.0f32, &a, DenseMatrix::new(&db, cols, n), 0.0, DenseMatrix::new(&dc, rows, n))
        .unwrap()
        .wait()
        .unwrap();
    let want: Vec<f64> = (0..rows * n)
        .map(|p| (0..cols).map(|l| dense[(p % rows) * cols + l] * b[(p / rows) * cols + l] as f64).sum())
        .collect();
    let got: Vec<f64> = dc.download(s).unwrap().iter().map(|&v| v as f64).collect();
    // cuSPARSE runs Blocked-ELL SpMM on tensor cores, which round f32 inputs to TF32 (10-bit
    // mantissa): seen on an H100 as a relative error of 5e-5.
    close(&got, &want, 1e-3, "blocked-ell spmm");
}

/// The raw handle is the live cuSPARSE handle of the `Sparse`, bound to the stream it enqueues on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_cusparse_handle_is_live_on_the_sparse_stream() {
    use cusched::cudarc::cusparse::sys;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let lib = h.sparse().unwrap();
    let raw = lib.cusparse_handle().unwrap();
    let (status, got, want) = raw_launch(&d, cusched::LaunchRecorder::new_strict(lib.stream()), |stream| {
        let mut got: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: 1. `raw` is the live handle of `lib`, which outlives the launch, and its
        // context is current (`raw_launch` binds it); 2. `got` is a valid out-pointer for one
        // stream; 3. the query enqueues nothing and touches no device memory, so the launch
        // declares no uses.
        let status = unsafe { sys::cusparseGetStream(raw, &mut got) };
        (status, got as usize, stream as usize)
    });
    assert_eq!(status, sys::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS);
    assert_ne!(want, 0, "the handles' stream is one of its own, not the legacy default stream");
    assert_eq!(got, want, "the raw handle is not bound to the stream of its Sparse");
}

/// The crash a review found: SpMM on a 1x1 `Complex<f64>` CSR matrix with `i64` indices, one
/// dense column, column-major B and C with leading dimensions above their rows, beta = 0.
/// cuSPARSE reads the host scalars as `cuDoubleComplex` (16-byte aligned); it died with SIGSEGV.
#[test]
#[ignore = "needs a CUDA GPU"]
fn spmm_complex_f64_with_i64_indices_and_padded_columns_runs() {
    use cusched::Complex;
    let Some((d, s, mut h, _)) = setup() else { return };
    let (m, k, n) = (1usize, 1usize, 1usize);
    let (ldb, ldc) = (k + 2, m + 1);
    let a = SparseMatrix::<Complex<f64>, i64>::csr(
        m,
        k,
        1,
        &d.upload(s, &[0i64, 1]).unwrap(),
        &d.upload(s, &[0i64]).unwrap(),
        &d.upload(s, &[Complex::new(2.0, -1.0)]).unwrap(),
    )
    .unwrap();
    let b = d.upload(s, &[Complex::new(3.0, 0.5), Complex::new(9.0, 9.0), Complex::new(9.0, 9.0)]).unwrap();
    let c = d.upload(s, &[Complex::new(f64::NAN, f64::NAN), Complex::new(7.0, 7.0)]).unwrap();
    let alpha = Complex::new(1.0, 0.0);
    let beta = Complex::new(0.0, 0.0);
    for _ in 0..2 {
        h.sparse()
            .unwrap()
            .spmm(
                Transpose::No,
                alpha,
                &a,
                DenseMatrix::new(&b, k, n).ld(ldb),
                beta,
                DenseMatrix::new(&c, m, n).ld(ldc),
            )
            .unwrap()
            .wait()
            .unwrap();
        let got = c.download(s).unwrap();
        // (2 - i)(3 + 0.5i) = 6.5 - 2i; the padding entry is untouched.
        assert_eq!(got[0], Complex::new(6.5, -2.0));
        assert_eq!(got[1], Complex::new(7.0, 7.0));
    }
}
