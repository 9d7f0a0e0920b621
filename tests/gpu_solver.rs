//! cuSOLVER dense on the GPU against f64 CPU references: reconstruction residuals scaled by
//! norm and size, solves against known solutions, and the typed numerical errors. Inputs are
//! random per run; the seed is printed.
#![cfg(feature = "cusolver")]

mod common;
use common::*;
use cusched::solver::{Fill, Geqrf, Gesvdj, Getrf, Getrs, Orgqr, Potrf, PotrfBatched, Potrs, Syevd, Trans};
use cusched::{Device, Error, Handles, NumericalFailure, StreamId};

fn setup() -> Option<(Device, StreamId, Handles)> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    Some((d, s, h))
}

/// Column-major `n x n` product `A B`.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for j in 0..n {
        for l in 0..k {
            let blj = b[l + j * k];
            for i in 0..m {
                c[i + j * m] += a[i + l * m] * blj;
            }
        }
    }
    c
}

fn transpose(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    let mut t = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            t[j + i * n] = a[i + j * m];
        }
    }
    t
}

fn fro(a: &[f64]) -> f64 {
    a.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// ‖X − Y‖ / (‖Y‖ · size · ε): below a few tens for a backward-stable algorithm.
fn scaled(x: &[f64], y: &[f64], size: usize) -> f64 {
    let d: Vec<f64> = x.iter().zip(y).map(|(a, b)| a - b).collect();
    fro(&d) / (fro(y).max(1.0) * size as f64 * f64::EPSILON)
}

fn random(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.f32() as f64).collect()
}

/// A random symmetric positive definite matrix: `M Mᵀ + n I`.
fn spd(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = random(rng, n * n);
    let mut a = matmul(&m, &transpose(&m, n, n), n, n, n);
    for i in 0..n {
        a[i + i * n] += n as f64;
    }
    a
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn potrf_reconstructs_and_potrs_solves() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 67;
    let a = spd(&mut rng, n);
    let x: Vec<f64> = random(&mut rng, n * 2);
    let b = matmul(&a, &x, n, n, 2);
    let (da, db) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap());
    h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n, a: &da, lda: None }).unwrap().wait().unwrap();
    let f = da.download(s).unwrap();
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        for i in j..n {
            l[i + j * n] = f[i + j * n];
        }
    }
    let llt = matmul(&l, &transpose(&l, n, n), n, n, n);
    let r = scaled(&llt, &a, n);
    println!("potrf n={n}: ‖LLᵀ−A‖/(‖A‖ n ε) = {r:.2}");
    assert!(r < 100.0, "{r}");
    let p = Potrs { fill: Fill::Lower, n, nrhs: 2, a: &da, lda: None, b: &db, ldb: None };
    h.solver().unwrap().potrs(&p).unwrap().wait().unwrap();
    let got = db.download(s).unwrap();
    let err = scaled(&got, &x, n) * f64::EPSILON;
    println!("potrs: relative error {err:.2e}");
    assert!(err < 1e-8, "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn potrf_of_an_indefinite_matrix_names_the_minor() {
    let Some((d, s, mut h)) = setup() else { return };
    let n = 8;
    let mut a = vec![0.0f64; n * n];
    for i in 0..n {
        a[i + i * n] = if i == 4 { -1.0 } else { 2.0 };
    }
    let da = d.upload(s, &a).unwrap();
    let got = h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n, a: &da, lda: None }).unwrap().wait();
    match got {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: 0, minor: 5 }]);
        }
        other => panic!("expected a numerical error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn getrf_reconstructs_and_getrs_solves() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 53;
    let a = random(&mut rng, n * n);
    let x = random(&mut rng, n);
    let b = matmul(&a, &x, n, n, 1);
    let (da, db, ipiv) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.alloc_zeros::<i64>(s, n).unwrap());
    h.solver().unwrap().getrf(&Getrf { m: n, n, a: &da, lda: None, ipiv: Some(&ipiv) }).unwrap().wait().unwrap();
    let (f, piv) = (da.download(s).unwrap(), ipiv.download(s).unwrap());
    let (mut l, mut u) = (vec![0.0; n * n], vec![0.0; n * n]);
    for j in 0..n {
        for i in 0..n {
            if i > j {
                l[i + j * n] = f[i + j * n];
            } else {
                u[i + j * n] = f[i + j * n];
            }
        }
        l[j + j * n] = 1.0;
    }
    let mut pa = a.clone();
    for (i, &p) in piv.iter().enumerate() {
        let p = (p - 1) as usize;
        for j in 0..n {
            pa.swap(i + j * n, p + j * n);
        }
    }
    let r = scaled(&matmul(&l, &u, n, n, n), &pa, n);
    println!("getrf n={n}: ‖PLU−A‖ scaled = {r:.2}");
    assert!(r < 1000.0, "{r}");
    let g = Getrs { trans: Trans::No, n, nrhs: 1, a: &da, lda: None, ipiv: Some(&ipiv), b: &db, ldb: None };
    h.solver().unwrap().getrs(&g).unwrap().wait().unwrap();
    let got = db.download(s).unwrap();
    let err = fro(&got.iter().zip(&x).map(|(a, b)| a - b).collect::<Vec<_>>()) / fro(&x);
    println!("getrs: relative error {err:.2e}");
    assert!(err < 1e-8, "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn getrf_of_a_singular_matrix_names_the_pivot() {
    let Some((d, s, mut h)) = setup() else { return };
    let n = 4;
    // diag(1, 2, 0, 3): no pivoting needed, U(3,3) is exactly zero.
    let mut a = vec![0.0f32; n * n];
    for (i, v) in [1.0, 2.0, 0.0, 3.0].into_iter().enumerate() {
        a[i + i * n] = v;
    }
    let da = d.upload(s, &a).unwrap();
    let got = h.solver().unwrap().getrf(&Getrf { m: n, n, a: &da, lda: None, ipiv: None }).unwrap().wait();
    match got {
        Err(e @ Error::Numerical { .. }) => assert!(e.to_string().contains("U(3,3) is exactly zero"), "{e}"),
        other => panic!("expected a numerical error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn geqrf_and_orgqr_give_an_orthonormal_q_that_reconstructs() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (m, n) = (71, 29);
    let a = random(&mut rng, m * n);
    let (da, tau) = (d.upload(s, &a).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    h.solver().unwrap().geqrf(&Geqrf { m, n, a: &da, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let f = da.download(s).unwrap();
    let mut r = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..=j {
            r[i + j * n] = f[i + j * m];
        }
    }
    h.solver().unwrap().orgqr(&Orgqr { m, n, k: n, a: &da, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let q = da.download(s).unwrap();
    let rec = scaled(&matmul(&q, &r, m, n, n), &a, m);
    let mut eye = vec![0.0; n * n];
    for i in 0..n {
        eye[i + i * n] = 1.0;
    }
    let orth = scaled(&matmul(&transpose(&q, m, n), &q, n, m, n), &eye, m);
    println!("geqrf {m}x{n}: ‖QR−A‖ scaled = {rec:.2}, ‖QᵀQ−I‖ scaled = {orth:.2}");
    assert!(rec < 100.0 && orth < 100.0, "{rec} {orth}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn syevd_satisfies_av_equals_v_lambda() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 41;
    let m = random(&mut rng, n * n);
    let a: Vec<f64> = (0..n * n).map(|k| (m[k] + m[(k % n) * n + k / n]) / 2.0).collect();
    let (da, w) = (d.upload(s, &a).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let e = Syevd { vectors: true, fill: Fill::Upper, n, a: &da, lda: None, w: &w };
    h.solver().unwrap().syevd(&e).unwrap().wait().unwrap();
    let (v, w) = (da.download(s).unwrap(), w.download(s).unwrap());
    let av = matmul(&a, &v, n, n, n);
    let vl: Vec<f64> = (0..n * n).map(|k| v[k] * w[k / n]).collect();
    let r = scaled(&av, &vl, n);
    println!("syevd n={n}: ‖AV−VΛ‖ scaled = {r:.2}");
    assert!(r < 100.0, "{r}");
    assert!(w.windows(2).all(|p| p[0] <= p[1]), "eigenvalues ascend");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gesvdj_reconstructs_and_reports_its_sweeps() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (m, n) = (37, 23);
    let a = random(&mut rng, m * n);
    let da = d.upload(s, &a).unwrap();
    let (sv, u, v) = (
        d.alloc_zeros::<f64>(s, n).unwrap(),
        d.alloc_zeros::<f64>(s, m * n).unwrap(),
        d.alloc_zeros::<f64>(s, n * n).unwrap(),
    );
    let g = Gesvdj { vectors: true, m, n, a: &da, lda: None, s: &sv, u: &u, ldu: None, v: &v, ldv: None };
    let run = h.solver().unwrap().gesvdj(&g).unwrap().wait().unwrap();
    let report = h.solver().unwrap().jacobi_report(&run).unwrap();
    let (sv, u, v) = (sv.download(s).unwrap(), u.download(s).unwrap(), v.download(s).unwrap());
    let us: Vec<f64> = (0..m * n).map(|k| u[k] * sv[k / m]).collect();
    let r = scaled(&matmul(&us, &transpose(&v, n, n), m, n, n), &a, m);
    println!(
        "gesvdj {m}x{n}: ‖UΣVᵀ−A‖ scaled = {r:.2}; residual {:.2e} after {} sweeps",
        report.residual, report.sweeps
    );
    assert!(r < 1000.0, "{r}");
    assert!(report.sweeps >= 1);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_potrf_lists_the_one_bad_matrix() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (n, batch, bad) = (16, 10, 6);
    let mut all = Vec::new();
    for i in 0..batch {
        let mut a = spd(&mut rng, n);
        if i == bad {
            a[2 + 2 * n] = -1e6;
        }
        all.extend(a);
    }
    let da = d.upload(s, &all).unwrap();
    let p = PotrfBatched { fill: Fill::Lower, n, batch, a: &da, lda: None, stride: None };
    match h.solver().unwrap().potrf_batched(&p).unwrap().wait() {
        Err(Error::Numerical { batch: b, failures, .. }) => {
            assert_eq!(b, batch);
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: bad, minor: 3 }]);
        }
        other => panic!("expected the bad matrix listed, got {other:?}"),
    }
    // A good matrix's factor is valid.
    let f = da.download(s).unwrap();
    let a0 = &all[..n * n];
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        for i in j..n {
            l[i + j * n] = f[i + j * n];
        }
    }
    let r = scaled(&matmul(&l, &transpose(&l, n, n), n, n, n), a0, n);
    assert!(r < 100.0, "{r}");
}
