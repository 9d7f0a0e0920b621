//! cuSOLVER dense on the GPU against f64 CPU references: reconstruction residuals scaled by
//! norm and size, solves against known solutions, and the typed numerical errors. Inputs are
//! random per run; the seed is printed.
#![cfg(feature = "cusolver")]

mod common;
use common::*;
use cusched::solver::{
    Fill, Generalized, Geqrf, Gesvdj, GesvdjBatched, Getrf, GetrfBatched, Getrs, GetrsBatched, Orgqr, Potrf,
    PotrfBatched, Potri, Potrs, PotrsBatched, Syevd, Syevj, SyevjBatched, Sygvd, Trans,
};
use cusched::{Complex, Device, Error, Handles, NumericalFailure, StreamId};

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

fn symmetric(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = random(rng, n * n);
    (0..n * n).map(|k| (m[k] + m[(k % n) * n + k / n]) / 2.0).collect()
}

fn identity(n: usize) -> Vec<f64> {
    let mut eye = vec![0.0; n * n];
    for i in 0..n {
        eye[i + i * n] = 1.0;
    }
    eye
}

/// `max_k ‖A v_k − λ_k B v_k‖` over the columns, scaled by `‖A‖ n ε` (`b` `None`: the identity).
fn eigen_residual(a: &[f64], b: Option<&[f64]>, v: &[f64], w: &[f64], n: usize) -> f64 {
    let av = matmul(a, v, n, n, n);
    let bv = match b {
        Some(b) => matmul(b, v, n, n, n),
        None => v.to_vec(),
    };
    let d: Vec<f64> = (0..n * n).map(|k| av[k] - bv[k] * w[k / n]).collect();
    fro(&d) / (fro(a).max(1.0) * n as f64 * f64::EPSILON)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn potri_inverts_from_the_cholesky_factor() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 37;
    let a = spd(&mut rng, n);
    let da = d.upload(s, &a).unwrap();
    h.solver().unwrap().potrf(&Potrf { fill: Fill::Upper, n, a: &da, lda: None }).unwrap();
    h.solver().unwrap().potri(&Potri { fill: Fill::Upper, n, a: &da, lda: None }).unwrap().wait().unwrap();
    let f = da.download(s).unwrap();
    // The upper triangle holds the inverse; mirror it.
    let mut x = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..=j {
            x[i + j * n] = f[i + j * n];
            x[j + i * n] = f[i + j * n];
        }
    }
    let ax = matmul(&a, &x, n, n, n);
    let d_: Vec<f64> = ax.iter().zip(identity(n)).map(|(p, q)| p - q).collect();
    let r = fro(&d_) / (fro(&a) * fro(&x) * n as f64 * f64::EPSILON);
    println!("potri n={n}: ‖A·A⁻¹−I‖/(‖A‖‖A⁻¹‖ n ε) = {r:.2}");
    assert!(r < 100.0, "{r}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn syevj_satisfies_av_equals_v_lambda_and_reports() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 41;
    let a = symmetric(&mut rng, n);
    let (da, w) = (d.upload(s, &a).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let e = Syevj { vectors: true, fill: Fill::Lower, n, a: &da, lda: None, w: &w };
    let run = h.solver().unwrap().syevj(&e).unwrap().wait().unwrap();
    let report = h.solver().unwrap().jacobi_report(&run).unwrap();
    let (v, w) = (da.download(s).unwrap(), w.download(s).unwrap());
    let r = eigen_residual(&a, None, &v, &w, n);
    println!("syevj n={n}: ‖AV−VΛ‖ scaled = {r:.2}; residual {:.2e} after {} sweeps", report.residual, report.sweeps);
    assert!(r < 1000.0, "{r}");
    assert!(report.sweeps >= 1);
    assert!(w.windows(2).all(|p| p[0] <= p[1]), "eigenvalues ascend");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sygvd_satisfies_av_equals_bv_lambda() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 29;
    let (a, b) = (symmetric(&mut rng, n), spd(&mut rng, n));
    let (da, db, w) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let g = Sygvd {
        problem: Generalized::Ax,
        vectors: true,
        fill: Fill::Lower,
        n,
        a: &da,
        lda: None,
        b: &db,
        ldb: None,
        w: &w,
    };
    h.solver().unwrap().sygvd(&g).unwrap().wait().unwrap();
    let (v, w) = (da.download(s).unwrap(), w.download(s).unwrap());
    let r = eigen_residual(&a, Some(&b), &v, &w, n);
    println!("sygvd n={n}: ‖AV−BVΛ‖ scaled = {r:.2}");
    assert!(r < 1000.0, "{r}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sygvd_with_an_indefinite_b_names_its_minor() {
    let Some((d, s, mut h)) = setup() else { return };
    let n = 6;
    let mut b = identity(n);
    b[3 + 3 * n] = -1.0;
    let (da, db, w) =
        (d.upload(s, &identity(n)).unwrap(), d.upload(s, &b).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let g = Sygvd {
        problem: Generalized::Ax,
        vectors: false,
        fill: Fill::Lower,
        n,
        a: &da,
        lda: None,
        b: &db,
        ldb: None,
        w: &w,
    };
    match h.solver().unwrap().sygvd(&g).unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: 0, minor: 4 }]);
        }
        other => panic!("expected B's minor 4, got {other:?}"),
    }
}

/// Column-major complex product `A B` (`m x k` by `k x n`).
fn cmatmul(a: &[Complex<f64>], b: &[Complex<f64>], m: usize, k: usize, n: usize) -> Vec<Complex<f64>> {
    let mut c = vec![Complex { re: 0.0, im: 0.0 }; m * n];
    for j in 0..n {
        for l in 0..k {
            let y = b[l + j * k];
            for i in 0..m {
                let x = a[i + l * m];
                c[i + j * m].re += x.re * y.re - x.im * y.im;
                c[i + j * m].im += x.re * y.im + x.im * y.re;
            }
        }
    }
    c
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hegvd_satisfies_av_equals_bv_lambda_for_complex() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let n = 17;
    let mut rand = || Complex { re: rng.f32() as f64, im: rng.f32() as f64 };
    let (ma, mb): (Vec<_>, Vec<_>) = ((0..n * n).map(|_| rand()).collect(), (0..n * n).map(|_| rand()).collect());
    let herm = |m: &[Complex<f64>], shift: f64| -> Vec<Complex<f64>> {
        // (M + Mᴴ)/2 + shift·I: Hermitian, and positive definite for a large enough shift.
        let mut a = vec![Complex { re: 0.0, im: 0.0 }; n * n];
        for j in 0..n {
            for i in 0..n {
                let (x, y) = (m[i + j * n], m[j + i * n]);
                a[i + j * n] = Complex { re: (x.re + y.re) / 2.0, im: (x.im - y.im) / 2.0 };
            }
            a[j + j * n].re += shift;
        }
        a
    };
    let (a, b) = (herm(&ma, 0.0), herm(&mb, 2.0 * n as f64));
    let (da, db, w) = (d.upload(s, &a).unwrap(), d.upload(s, &b).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let g = Sygvd {
        problem: Generalized::Ax,
        vectors: true,
        fill: Fill::Upper,
        n,
        a: &da,
        lda: None,
        b: &db,
        ldb: None,
        w: &w,
    };
    h.solver().unwrap().hegvd(&g).unwrap().wait().unwrap();
    let (v, w) = (da.download(s).unwrap(), w.download(s).unwrap());
    let (av, bv) = (cmatmul(&a, &v, n, n, n), cmatmul(&b, &v, n, n, n));
    let diff: Vec<f64> =
        (0..n * n).flat_map(|k| [av[k].re - bv[k].re * w[k / n], av[k].im - bv[k].im * w[k / n]]).collect();
    let norm_a: Vec<f64> = a.iter().flat_map(|z| [z.re, z.im]).collect();
    let r = fro(&diff) / (fro(&norm_a).max(1.0) * n as f64 * f64::EPSILON);
    println!("hegvd c64 n={n}: ‖AV−BVΛ‖ scaled = {r:.2}");
    assert!(r < 1000.0, "{r}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_cholesky_solves() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (n, batch) = (12, 6);
    let (mut all_a, mut all_x, mut all_b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..batch {
        let a = spd(&mut rng, n);
        let x = random(&mut rng, n);
        all_b.extend(matmul(&a, &x, n, n, 1));
        all_a.extend(a);
        all_x.extend(x);
    }
    let (da, db) = (d.upload(s, &all_a).unwrap(), d.upload(s, &all_b).unwrap());
    let p = PotrfBatched { fill: Fill::Lower, n, batch, a: &da, lda: None, stride: None };
    h.solver().unwrap().potrf_batched(&p).unwrap();
    let q = PotrsBatched {
        fill: Fill::Lower,
        n,
        nrhs: 1,
        batch,
        a: &da,
        lda: None,
        stride_a: None,
        b: &db,
        ldb: None,
        stride_b: None,
    };
    h.solver().unwrap().potrs_batched(&q).unwrap().wait().unwrap();
    let got = db.download(s).unwrap();
    let err = fro(&got.iter().zip(&all_x).map(|(a, b)| a - b).collect::<Vec<_>>()) / fro(&all_x);
    println!("potrsBatched {batch} x n={n}: relative error {err:.2e}");
    assert!(err < 1e-8, "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_lu_solves() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (n, nrhs, batch) = (9, 2, 8);
    let (mut all_a, mut all_x, mut all_b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..batch {
        let mut a = random(&mut rng, n * n);
        for i in 0..n {
            a[i + i * n] += 2.0;
        }
        let x = random(&mut rng, n * nrhs);
        all_b.extend(matmul(&a, &x, n, n, nrhs));
        all_a.extend(a);
        all_x.extend(x);
    }
    let (da, db, ipiv) =
        (d.upload(s, &all_a).unwrap(), d.upload(s, &all_b).unwrap(), d.alloc_zeros::<i32>(s, n * batch).unwrap());
    let g = GetrfBatched { n, batch, a: &da, lda: None, stride: None, ipiv: Some(&ipiv) };
    h.solver().unwrap().getrf_batched(&g).unwrap();
    let r = GetrsBatched {
        trans: Trans::No,
        n,
        nrhs,
        batch,
        a: &da,
        lda: None,
        stride_a: None,
        ipiv: &ipiv,
        b: &db,
        ldb: None,
        stride_b: None,
    };
    h.solver().unwrap().getrs_batched(&r).unwrap().wait().unwrap();
    let got = db.download(s).unwrap();
    let err = fro(&got.iter().zip(&all_x).map(|(a, b)| a - b).collect::<Vec<_>>()) / fro(&all_x);
    println!("getrf/getrsBatched {batch} x n={n}, nrhs={nrhs}: relative error {err:.2e}");
    assert!(err < 1e-8, "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_lu_lists_the_one_singular_matrix() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (n, batch, bad) = (9, 8, 5);
    let mut all = Vec::new();
    for i in 0..batch {
        let mut a = random(&mut rng, n * n);
        for k in 0..n {
            a[k + k * n] += 2.0;
        }
        if i == bad {
            // A zero column stays exactly zero through the elimination: U(5,5) = 0.
            for k in 0..n {
                a[k + 4 * n] = 0.0;
            }
        }
        all.extend(a);
    }
    let (da, ipiv) = (d.upload(s, &all).unwrap(), d.alloc_zeros::<i32>(s, n * batch).unwrap());
    let g = GetrfBatched { n, batch, a: &da, lda: None, stride: None, ipiv: Some(&ipiv) };
    match h.solver().unwrap().getrf_batched(&g).unwrap().wait() {
        Err(Error::Numerical { batch: b, failures, .. }) => {
            assert_eq!(b, batch);
            assert_eq!(failures, vec![NumericalFailure::Singular { matrix: bad, index: 5 }]);
        }
        other => panic!("expected the singular matrix listed, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_gesvdj_reconstructs_every_matrix() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (m, n, batch) = (12, 9, 20);
    let a = random(&mut rng, m * n * batch);
    let da = d.upload(s, &a).unwrap();
    let p = m.min(n);
    let (sv, u, v) = (
        d.alloc_zeros::<f64>(s, p * batch).unwrap(),
        d.alloc_zeros::<f64>(s, m * m * batch).unwrap(),
        d.alloc_zeros::<f64>(s, n * n * batch).unwrap(),
    );
    let g = GesvdjBatched { vectors: true, m, n, batch, a: &da, lda: None, s: &sv, u: &u, ldu: None, v: &v, ldv: None };
    h.solver().unwrap().gesvdj_batched(&g).unwrap().wait().unwrap();
    let (sv, u, v) = (sv.download(s).unwrap(), u.download(s).unwrap(), v.download(s).unwrap());
    let mut worst = 0.0f64;
    for i in 0..batch {
        let (ui, vi, si) = (&u[i * m * m..][..m * p], &v[i * n * n..][..n * p], &sv[i * p..][..p]);
        let us: Vec<f64> = (0..m * p).map(|k| ui[k] * si[k / m]).collect();
        let rec = matmul(&us, &transpose(vi, n, p), m, p, n);
        worst = worst.max(scaled(&rec, &a[i * m * n..][..m * n], m));
    }
    println!("gesvdjBatched {batch} x {m}x{n}: worst ‖UΣVᵀ−A‖ scaled = {worst:.2}");
    assert!(worst < 1000.0, "{worst}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn batched_syevj_satisfies_av_equals_v_lambda_for_every_matrix() {
    let Some((d, s, mut h)) = setup() else { return };
    let mut rng = Rng::new();
    let (n, batch) = (20, 16);
    let mut all = Vec::new();
    for _ in 0..batch {
        all.extend(symmetric(&mut rng, n));
    }
    let (da, w) = (d.upload(s, &all).unwrap(), d.alloc_zeros::<f64>(s, n * batch).unwrap());
    let e = SyevjBatched { vectors: true, fill: Fill::Upper, n, batch, a: &da, lda: None, w: &w };
    h.solver().unwrap().syevj_batched(&e).unwrap().wait().unwrap();
    let (v, w) = (da.download(s).unwrap(), w.download(s).unwrap());
    let mut worst = 0.0f64;
    for i in 0..batch {
        let r = eigen_residual(&all[i * n * n..][..n * n], None, &v[i * n * n..][..n * n], &w[i * n..][..n], n);
        worst = worst.max(r);
    }
    println!("syevjBatched {batch} x n={n}: worst ‖AV−VΛ‖ scaled = {worst:.2}");
    assert!(worst < 1000.0, "{worst}");
}
