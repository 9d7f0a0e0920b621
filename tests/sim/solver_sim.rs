//! cuSOLVER on the simulator: every op computes on the CPU, checked against the f64 references
//! the GPU tests use (reconstructions, residuals, orthonormality, singular values), and the
//! numerical failures come back as on the GPU (the same `Error::Numerical` and index).

use crate::common::fixture::{fx, Fx};
use crate::common::reference::solver::*;
use crate::common::{random, Rng};
use cusched::solver::{
    EigRange, Fallback, Fill, Geev, Gels, Generalized, Geqrf, Gesv, Gesvd, GesvdEconomy, GesvdaBatched, Gesvdj,
    GesvdjBatched, Gesvdr, Getrf, GetrfBatched, Getrs, GetrsBatched, JacobiSettings, LowPrecision, Orgqr, Ormqr, Potrf,
    PotrfBatched, Potri, Potrs, PotrsBatched, Refinement, Side, Syevd, Syevdx, Syevj, SyevjBatched, Sygvd, Sytrf,
    Sytrs, Trans, Trtri,
};
use cusched::{Complex, Error, NumericalFailure};

fn down<T: cusched::Element>(fx: &Fx, b: &cusched::GpuRef<T>) -> Vec<T> {
    b.download(fx.s).unwrap()
}

/// The `lower` (or upper) triangle of `a`, the rest zero.
fn triangle(a: &[f64], n: usize, lower: bool) -> Vec<f64> {
    (0..n * n).map(|k| if k % n == k / n || (k % n > k / n) == lower { a[k] } else { 0.0 }).collect()
}

#[test]
fn potrf_potrs_potri_reconstruct_solve_and_invert() {
    let mut rng = Rng::new();
    let n = 12;
    for fill in [Fill::Lower, Fill::Upper] {
        let mut fx = fx();
        let a0 = spd(&mut rng, n);
        let a = fx.upload(&a0);
        fx.h.solver().unwrap().potrf(&Potrf { fill, n, a: &a, lda: None }).unwrap().wait().unwrap();
        let f = down(&fx, &a);
        let lower = fill == Fill::Lower;
        let t = triangle(&f, n, lower);
        let back =
            if lower { matmul(&t, &transpose(&t, n, n), n, n, n) } else { matmul(&transpose(&t, n, n), &t, n, n, n) };
        assert!(scaled(&back, &a0, n) < 100.0);
        // The other triangle is left as it was.
        assert!((0..n * n).all(|k| (k % n >= k / n) == lower || k % n == k / n || f[k] == a0[k]));
        let x0 = random(&mut rng, n * 2);
        let b = fx.upload(&matmul(&a0, &x0, n, n, 2));
        let p = Potrs { fill, n, nrhs: 2, a: &a, lda: None, b: &b, ldb: None };
        fx.h.solver().unwrap().potrs(&p).unwrap().wait().unwrap();
        assert!(scaled(&down(&fx, &b), &x0, n) < 1e4);
        fx.h.solver().unwrap().potri(&Potri { fill, n, a: &a, lda: None }).unwrap().wait().unwrap();
        let inv = triangle(&down(&fx, &a), n, lower);
        let full: Vec<f64> =
            (0..n * n).map(|k| if k % n == k / n { inv[k] } else { inv[k] + inv[k / n + (k % n) * n] }).collect();
        assert!(scaled(&matmul(&full, &a0, n, n, n), &identity(n), n) < 1e4);
    }
}

#[test]
fn potrf_of_an_indefinite_matrix_names_the_minor() {
    let mut fx = fx();
    let mut a0 = identity(4);
    a0[2 + 2 * 4] = -1.0;
    let a = fx.upload(&a0);
    let got = fx.h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n: 4, a: &a, lda: None }).unwrap().wait();
    match got {
        Err(Error::Numerical { op: "potrf", batch: 1, failures }) => {
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: 0, minor: 3 }])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn getrf_pivots_reconstruct_and_getrs_solves_every_transpose() {
    let mut rng = Rng::new();
    let mut fx = fx();
    // A known pivot sequence: the largest entry of column 0 is in row 2, then row 2 of the rest.
    let a = fx.upload(&[1.0f64, 2.0, 4.0, 3.0, 1.0, 1.0, 2.0, 8.0, 1.0]);
    let ipiv = fx.buf::<i64>(3);
    fx.h.solver().unwrap().getrf(&Getrf { m: 3, n: 3, a: &a, lda: None, ipiv: Some(&ipiv) }).unwrap().wait().unwrap();
    assert_eq!(down(&fx, &ipiv), vec![3, 3, 3]);
    let n = 10;
    for pivot in [true, false] {
        let a0: Vec<f64> =
            (0..n * n).map(|k| random(&mut rng, 1)[0] + if k % n == k / n { 4.0 } else { 0.0 }).collect();
        let a = fx.upload(&a0);
        let ipiv = fx.buf::<i64>(n);
        let g = Getrf { m: n, n, a: &a, lda: None, ipiv: pivot.then_some(&ipiv) };
        fx.h.solver().unwrap().getrf(&g).unwrap().wait().unwrap();
        for trans in [Trans::No, Trans::Yes, Trans::Conj] {
            let x0 = random(&mut rng, n);
            let op = if trans == Trans::No { a0.clone() } else { transpose(&a0, n, n) };
            let b = fx.upload(&matvec(&op, &x0, n));
            let s = Getrs { trans, n, nrhs: 1, a: &a, lda: None, ipiv: pivot.then_some(&ipiv), b: &b, ldb: None };
            fx.h.solver().unwrap().getrs(&s).unwrap().wait().unwrap();
            assert!(scaled(&down(&fx, &b), &x0, n) < 1e4, "{pivot} {trans:?}");
        }
    }
}

#[test]
fn getrf_of_a_singular_matrix_names_the_pivot() {
    let mut fx = fx();
    // Column 1 is twice column 0: U(2, 2) is exactly zero.
    let a = fx.upload(&[1.0f64, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0]);
    let ipiv = fx.buf::<i64>(3);
    let got = fx.h.solver().unwrap().getrf(&Getrf { m: 3, n: 3, a: &a, lda: None, ipiv: Some(&ipiv) }).unwrap().wait();
    match got {
        Err(Error::Numerical { op: "getrf", failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::Singular { matrix: 0, index: 2 }])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn geqrf_orgqr_ormqr_give_q_and_r() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n) = (9, 5);
    let a0 = random(&mut rng, m * n);
    let (a, tau) = (fx.upload(&a0), fx.buf::<f64>(n));
    fx.h.solver().unwrap().geqrf(&Geqrf { m, n, a: &a, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let f = down(&fx, &a);
    let r: Vec<f64> = (0..n * n).map(|k| if k % n <= k / n { f[k % n + (k / n) * m] } else { 0.0 }).collect();
    // LAPACK's reflectors: tau in [1, 2] for real data.
    assert!(down(&fx, &tau).iter().all(|t| (0.0..=2.0).contains(t)));
    let q = fx.upload(&f);
    fx.h.solver().unwrap().orgqr(&Orgqr { m, n, k: n, a: &q, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let qm = down(&fx, &q);
    assert!(orthonormality(&qm, m, n, f64::EPSILON) < 100.0);
    assert!(scaled(&matmul(&qm, &r, m, n, n), &a0, m) < 100.0);
    // Qᵀ C from the reflectors equals Qᵀ C from the formed Q (its first n rows).
    let c0 = random(&mut rng, m * 2);
    let c = fx.upload(&c0);
    let o = Ormqr { side: Side::Left, trans: Trans::Yes, m, n: 2, k: n, a: &a, lda: None, tau: &tau, c: &c, ldc: None };
    fx.h.solver().unwrap().ormqr(&o).unwrap().wait().unwrap();
    let qtc = matmul(&transpose(&qm, m, n), &c0, n, m, 2);
    let got = down(&fx, &c);
    let top: Vec<f64> = (0..2).flat_map(|j| got[j * m..j * m + n].to_vec()).collect();
    assert!(scaled(&top, &qtc, m) < 100.0);
    // Q (Qᵀ C) = C, from the right too: (Cᵀ Q) Qᵀ = Cᵀ.
    let o = Ormqr { trans: Trans::No, ..o };
    fx.h.solver().unwrap().ormqr(&o).unwrap().wait().unwrap();
    assert!(scaled(&down(&fx, &c), &c0, m) < 100.0);
    let ct = fx.upload(&transpose(&c0, m, 2));
    for trans in [Trans::Yes, Trans::No] {
        let o = Ormqr { side: Side::Right, trans, m: 2, n: m, k: n, a: &a, lda: None, tau: &tau, c: &ct, ldc: None };
        fx.h.solver().unwrap().ormqr(&o).unwrap().wait().unwrap();
    }
    assert!(scaled(&down(&fx, &ct), &transpose(&c0, m, 2), m) < 100.0);
}

#[test]
fn complex_geqrf_and_ungqr_give_a_unitary_q() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n) = (6, 4);
    let a0: Vec<Complex<f64>> = (0..m * n).map(|_| Complex::new(rng.f32() as f64, rng.f32() as f64)).collect();
    let (a, tau) = (fx.upload(&a0), fx.buf::<Complex<f64>>(n));
    fx.h.solver().unwrap().geqrf(&Geqrf { m, n, a: &a, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let f = down(&fx, &a);
    fx.h.solver().unwrap().orgqr(&Orgqr { m, n, k: n, a: &a, lda: None, tau: &tau }).unwrap().wait().unwrap();
    let q = down(&fx, &a);
    // Q R = A and Qᴴ Q = I, in complex arithmetic.
    let mut worst = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut re, mut im) = (0.0, 0.0);
            for k in 0..=j {
                let (x, y) = (q[i + k * m], f[k + j * m]);
                re += x.re * y.re - x.im * y.im;
                im += x.re * y.im + x.im * y.re;
            }
            worst = worst.max((re - a0[i + j * m].re).abs() + (im - a0[i + j * m].im).abs());
        }
    }
    for p in 0..n {
        for r in 0..n {
            let (mut re, mut im) = (0.0, 0.0);
            for i in 0..m {
                let (x, y) = (q[i + p * m], q[i + r * m]);
                re += x.re * y.re + x.im * y.im;
                im += x.re * y.im - x.im * y.re;
            }
            worst = worst.max((re - if p == r { 1.0 } else { 0.0 }).abs() + im.abs());
        }
    }
    assert!(worst < 1e-12, "{worst}");
}

#[test]
fn syevd_and_syevj_satisfy_av_equals_v_lambda() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let n = 16;
    let a0 = symmetric(&mut rng, n);
    for fill in [Fill::Lower, Fill::Upper] {
        let (a, w) = (fx.upload(&triangle(&a0, n, fill == Fill::Lower)), fx.buf::<f64>(n));
        fx.h.solver()
            .unwrap()
            .syevd(&Syevd { vectors: true, fill, n, a: &a, lda: None, w: &w })
            .unwrap()
            .wait()
            .unwrap();
        let (v, wv) = (down(&fx, &a), down(&fx, &w));
        assert!(wv.windows(2).all(|p| p[0] <= p[1]), "ascending");
        assert!(eigen_residual(&a0, None, &v, &wv, n) < 100.0);
        assert!(orthonormality(&v, n, n, f64::EPSILON) < 100.0);
    }
    let (a, w) = (fx.upload(&a0), fx.buf::<f64>(n));
    let run = fx.h.solver().unwrap().syevj(&Syevj { vectors: true, fill: Fill::Lower, n, a: &a, lda: None, w: &w });
    let run = run.unwrap().wait().unwrap();
    let report = fx.h.solver().unwrap().jacobi_report(&run).unwrap();
    assert!(report.sweeps >= 1 && report.sweeps <= 100 && report.residual < 1e-10, "{report:?}");
    assert!(eigen_residual(&a0, None, &down(&fx, &a), &down(&fx, &w), n) < 100.0);
    // f32 to its own precision; a single sweep is not enough and says so as cuSOLVER does.
    let (a, w) = (fx.upload(&a0.iter().map(|&x| x as f32).collect::<Vec<_>>()), fx.buf::<f32>(n));
    fx.h.solver().unwrap().set_jacobi(JacobiSettings { tolerance: 0.0, max_sweeps: 1 }).unwrap();
    let got = fx.h.solver().unwrap().syevj(&Syevj { vectors: true, fill: Fill::Lower, n, a: &a, lda: None, w: &w });
    match got.unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::NotConverged { matrix: 0, count: n + 1 }])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sygvd_satisfies_av_equals_bv_lambda_and_names_an_indefinite_b() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let n = 8;
    let (a0, b0) = (symmetric(&mut rng, n), spd(&mut rng, n));
    let (a, b, w) = (fx.upload(&a0), fx.upload(&b0), fx.buf::<f64>(n));
    let g = Sygvd {
        problem: Generalized::Ax,
        vectors: true,
        fill: Fill::Upper,
        n,
        a: &a,
        lda: None,
        b: &b,
        ldb: None,
        w: &w,
    };
    fx.h.solver().unwrap().sygvd(&g).unwrap().wait().unwrap();
    assert!(eigen_residual(&a0, Some(&b0), &down(&fx, &a), &down(&fx, &w), n) < 1e3);
    // A B x = λ x and B A x = λ x: the eigenvalues of A B.
    for problem in [Generalized::Abx, Generalized::Bax] {
        let (a, b) = (fx.upload(&a0), fx.upload(&b0));
        fx.h.solver().unwrap().sygvd(&Sygvd { problem, a: &a, b: &b, ..g }).unwrap().wait().unwrap();
        let (v, wv) = (down(&fx, &a), down(&fx, &w));
        let ab = if problem == Generalized::Abx { matmul(&a0, &b0, n, n, n) } else { matmul(&b0, &a0, n, n, n) };
        assert!(eigen_residual(&ab, None, &v, &wv, n) / fro(&ab).max(1.0) < 1e3, "{problem:?}");
    }
    let mut bad = identity(n);
    bad[3 + 3 * n] = -2.0;
    let (a, b) = (fx.upload(&a0), fx.upload(&bad));
    match fx.h.solver().unwrap().sygvd(&Sygvd { a: &a, b: &b, ..g }).unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: 0, minor: 4 }])
        }
        other => panic!("{other:?}"),
    }
}

/// `U diag(s) Vᵀ` for `U` `m x p`, `V` `n x p`.
fn usv(u: &[f64], s: &[f64], v: &[f64], m: usize, n: usize, p: usize) -> Vec<f64> {
    let us: Vec<f64> = (0..m * p).map(|k| u[k] * s[k / m]).collect();
    matmul(&us, &transpose(v, n, p), m, p, n)
}

#[test]
fn gesvd_and_gesvdj_reconstruct_with_the_reference_singular_values() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n) = (9, 6);
    let a0 = random(&mut rng, m * n);
    let want = singular_values_of(&a0, m, n);
    let (a, s, u, vt) = (fx.upload(&a0), fx.buf::<f64>(n), fx.buf::<f64>(m * m), fx.buf::<f64>(n * n));
    let g = Gesvd { vectors: true, m, n, a: &a, lda: None, s: &s, u: &u, ldu: None, vt: &vt, ldvt: None };
    fx.h.solver().unwrap().gesvd(&g).unwrap().wait().unwrap();
    let (sv, um, vtm) = (down(&fx, &s), down(&fx, &u), down(&fx, &vt));
    assert!(scaled(&sv, &want, n) < 1e3);
    assert!(orthonormality(&um, m, m, f64::EPSILON) < 100.0);
    assert!(scaled(&usv(&um[..m * n], &sv, &transpose(&vtm, n, n), m, n, n), &a0, m) < 100.0);
    // gesvdj, economy size, tall and wide.
    for (m, n) in [(9, 6), (5, 8)] {
        let p = m.min(n);
        let a0 = random(&mut rng, m * n);
        let (a, s, u, v) = (fx.upload(&a0), fx.buf::<f64>(p), fx.buf::<f64>(m * p), fx.buf::<f64>(n * p));
        let j = Gesvdj { vectors: true, m, n, a: &a, lda: None, s: &s, u: &u, ldu: None, v: &v, ldv: None };
        let run = fx.h.solver().unwrap().gesvdj(&j).unwrap().wait().unwrap();
        assert!(fx.h.solver().unwrap().jacobi_report(&run).unwrap().sweeps >= 1);
        let (sv, um, vm) = (down(&fx, &s), down(&fx, &u), down(&fx, &v));
        assert!(scaled(&sv, &singular_values_of(&a0, m, n)[..p], p) < 1e4, "{m}x{n}");
        assert!(orthonormality(&um, m, p, f64::EPSILON) < 100.0 && orthonormality(&vm, n, p, f64::EPSILON) < 100.0);
        assert!(scaled(&usv(&um, &sv, &vm, m, n, p), &a0, m) < 100.0, "{m}x{n}");
    }
}

/// The full `U` of gesvd on `a0` (`m x n`, column-major, `m > n`): orthonormal, and with the
/// singular values it reconstructs `a0`.
fn full_u_is_orthonormal(fx: &mut Fx, a0: &[f64], m: usize, n: usize) {
    let (a, s, u, vt) = (fx.upload(a0), fx.buf::<f64>(n), fx.buf::<f64>(m * m), fx.buf::<f64>(n * n));
    let g = Gesvd { vectors: true, m, n, a: &a, lda: None, s: &s, u: &u, ldu: None, vt: &vt, ldvt: None };
    fx.h.solver().unwrap().gesvd(&g).unwrap().wait().unwrap();
    let (sv, um, vtm) = (down(fx, &s), down(fx, &u), down(fx, &vt));
    let o = orthonormality(&um, m, m, f64::EPSILON);
    assert!(o < 100.0, "{m}x{n}: the full U is {o} eps from orthonormal: {um:?}");
    assert!(scaled(&usv(&um[..m * n], &sv, &transpose(&vtm, n, n), m, n, n), a0, m) < 100.0);
}

/// The columns of the full `U` past the thin factor complete its basis: each must be found
/// even when no unit vector lies far from the thin factor's span. Here that span is every
/// vector whose entries sum to zero, so its complement is `(1, 1, 1, 1, 1) / sqrt(5)` and every
/// unit vector is within `sqrt(0.2)` of it, below the old first-fit threshold of 0.5: the fifth
/// column stayed zero.
#[test]
fn gesvd_completes_the_full_u_when_every_unit_vector_lies_near_the_thin_span() {
    let mut fx = fx();
    let (m, n) = (5, 4);
    // Column j is e_j - e_4: full rank, each column summing to zero.
    let mut a0 = vec![0.0; m * n];
    for j in 0..n {
        a0[j * m + j] = 1.0;
        a0[j * m + 4] = -1.0;
    }
    full_u_is_orthonormal(&mut fx, &a0, m, n);
}

/// The seed that found it: a random 9x6 matrix whose thin factor leaves the ninth column of
/// the full `U` without a unit vector far enough from the span of the eight before it.
#[test]
fn gesvd_full_u_is_orthonormal_for_the_seed_that_left_a_column_zero() {
    let mut rng = Rng::seeded(1795823587813265046);
    let mut fx = fx();
    let (m, n) = (9, 6);
    full_u_is_orthonormal(&mut fx, &random(&mut rng, m * n), m, n);
}

#[test]
fn batched_ops_compute_every_matrix_and_list_the_bad_ones() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (n, batch) = (5, 3);
    // potrf/potrs batched; matrix 1 is not positive definite.
    let mats: Vec<Vec<f64>> = (0..batch).map(|_| spd(&mut rng, n)).collect();
    let mut all: Vec<f64> = mats.concat();
    all[n * n + 2 + 2 * n] = -100.0;
    let a = fx.upload(&all);
    let p = PotrfBatched { fill: Fill::Lower, n, batch, a: &a, lda: None, stride: None };
    match fx.h.solver().unwrap().potrf_batched(&p).unwrap().wait() {
        Err(Error::Numerical { op: "potrfBatched", batch: 3, failures }) => {
            assert_eq!(failures, vec![NumericalFailure::NotPositiveDefinite { matrix: 1, minor: 3 }])
        }
        other => panic!("{other:?}"),
    }
    let x0 = random(&mut rng, n * batch);
    let b: Vec<f64> = (0..batch).flat_map(|i| matvec(&mats[i], &x0[i * n..(i + 1) * n], n)).collect();
    let b = fx.upload(&b);
    let ps = PotrsBatched {
        fill: Fill::Lower,
        n,
        nrhs: 1,
        batch,
        a: &a,
        lda: None,
        stride_a: None,
        b: &b,
        ldb: None,
        stride_b: None,
    };
    fx.h.solver().unwrap().potrs_batched(&ps).unwrap().wait().unwrap();
    let x = down(&fx, &b);
    for i in [0, 2] {
        assert!(scaled(&x[i * n..(i + 1) * n], &x0[i * n..(i + 1) * n], n) < 1e4);
    }
    // getrf/getrs batched (cuBLAS's, i32 pivots).
    let gen: Vec<f64> = random(&mut rng, n * n * batch);
    let (a, ipiv) = (fx.upload(&gen), fx.buf::<i32>(n * batch));
    let g = GetrfBatched { n, batch, a: &a, lda: None, stride: None, ipiv: Some(&ipiv) };
    fx.h.solver().unwrap().getrf_batched(&g).unwrap().wait().unwrap();
    assert!(down(&fx, &ipiv).iter().all(|&p| (1..=n as i32).contains(&p)));
    let b = fx.upload(
        &(0..batch)
            .flat_map(|i| matvec(&gen[i * n * n..(i + 1) * n * n], &x0[i * n..(i + 1) * n], n))
            .collect::<Vec<_>>(),
    );
    let s = GetrsBatched {
        trans: Trans::No,
        n,
        nrhs: 1,
        batch,
        a: &a,
        lda: None,
        stride_a: None,
        ipiv: &ipiv,
        b: &b,
        ldb: None,
        stride_b: None,
    };
    fx.h.solver().unwrap().getrs_batched(&s).unwrap().wait().unwrap();
    assert!(scaled(&down(&fx, &b), &x0, n) < 1e5);
    // A singular matrix among them: a zero column, which elimination keeps exactly zero (a
    // column twice another is singular too, but rounding leaves a pivot near 1e-16 for some
    // inputs, which no LU reports).
    let mut sing = gen.clone();
    for r in 0..n {
        sing[n * n * 2 + r + n] = 0.0;
    }
    let a = fx.upload(&sing);
    match fx.h.solver().unwrap().getrf_batched(&GetrfBatched { a: &a, ..g }).unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert!(matches!(failures[..], [NumericalFailure::Singular { matrix: 2, .. }]), "{failures:?}")
        }
        other => panic!("{other:?}"),
    }
    // gesvdjBatched (full U, V) and syevjBatched.
    let (m, n) = (4, 3);
    let gen = random(&mut rng, m * n * batch);
    let (a, s, u, v) =
        (fx.upload(&gen), fx.buf::<f64>(n * batch), fx.buf::<f64>(m * m * batch), fx.buf::<f64>(n * n * batch));
    let j = GesvdjBatched { vectors: true, m, n, batch, a: &a, lda: None, s: &s, u: &u, ldu: None, v: &v, ldv: None };
    fx.h.solver().unwrap().gesvdj_batched(&j).unwrap().wait().unwrap();
    let (sv, um, vm) = (down(&fx, &s), down(&fx, &u), down(&fx, &v));
    for i in 0..batch {
        let ui = &um[i * m * m..(i + 1) * m * m];
        assert!(orthonormality(ui, m, m, f64::EPSILON) < 100.0);
        let back = usv(&ui[..m * n], &sv[i * n..(i + 1) * n], &vm[i * n * n..(i + 1) * n * n], m, n, n);
        assert!(scaled(&back, &gen[i * m * n..(i + 1) * m * n], m) < 100.0);
    }
    let syms: Vec<Vec<f64>> = (0..batch).map(|_| symmetric(&mut rng, n)).collect();
    let (a, w) = (fx.upload(&syms.concat()), fx.buf::<f64>(n * batch));
    let e = SyevjBatched { vectors: true, fill: Fill::Upper, n, batch, a: &a, lda: None, w: &w };
    fx.h.solver().unwrap().syevj_batched(&e).unwrap().wait().unwrap();
    let (v, w) = (down(&fx, &a), down(&fx, &w));
    for i in 0..batch {
        let r = eigen_residual(&syms[i], None, &v[i * n * n..(i + 1) * n * n], &w[i * n..(i + 1) * n], n);
        assert!(r < 100.0, "{i}: {r}");
    }
}

#[test]
fn csrlsv_solves_with_every_reordering_and_reports_a_singular_matrix() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let mut fx = fx();
    // The 1-D Laplacian of order 6 (positive definite), both triangles stored.
    let n = 6;
    let (mut offsets, mut indices, mut values) = (vec![0i32], vec![], vec![]);
    let mut dense = vec![0.0f64; n * n];
    for r in 0..n {
        for c in r.saturating_sub(1)..(r + 2).min(n) {
            let v = if r == c { 2.0 } else { -1.0 };
            indices.push(c as i32);
            values.push(v);
            dense[r + c * n] = v;
        }
        offsets.push(indices.len() as i32);
    }
    let x0: Vec<f64> = (0..n).map(|i| i as f64 - 2.5).collect();
    let (o, i, v) = (fx.upload(&offsets), fx.upload(&indices), fx.upload(&values));
    let (b, x) = (fx.upload(&matvec(&dense, &x0, n)), fx.buf::<f64>(n));
    let sys = CsrSystem { n, nnz: values.len(), offsets: &o, indices: &i, values: &v };
    for r in [Reorder::None, Reorder::Symrcm, Reorder::Symamd, Reorder::Metis] {
        fx.h.solver_sparse().unwrap().csrlsvqr(sys, &b, &x, 1e-12, r).unwrap().wait().unwrap();
        assert!(scaled(&down(&fx, &x), &x0, n) < 1e3, "qr {r:?}");
        fx.h.solver_sparse().unwrap().csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, r).unwrap().wait().unwrap();
        assert!(scaled(&down(&fx, &x), &x0, n) < 1e3, "chol {r:?}");
    }
    // f32, and a matrix whose row 3 is zero: singular at that row.
    let v32 = fx.upload(&values.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let (b32, x32) =
        (fx.upload(&matvec(&dense, &x0, n).iter().map(|&x| x as f32).collect::<Vec<_>>()), fx.buf::<f32>(n));
    let sys32 = CsrSystem { n, nnz: values.len(), offsets: &o, indices: &i, values: &v32 };
    fx.h.solver_sparse().unwrap().csrlsvqr(sys32, &b32, &x32, 1e-6, Reorder::None).unwrap().wait().unwrap();
    let got: Vec<f64> = down(&fx, &x32).iter().map(|&x| x as f64).collect();
    assert!(scaled_eps(&got, &x0, n, f32::EPSILON as f64) < 1e3);
    let zeroed: Vec<f64> = (0..values.len())
        .map(|k| if (offsets[3] as usize..offsets[4] as usize).contains(&k) { 0.0 } else { values[k] })
        .collect();
    let vz = fx.upload(&zeroed);
    let sys = CsrSystem { values: &vz, ..sys };
    for chol in [false, true] {
        let c = if chol {
            fx.h.solver_sparse().unwrap().csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, Reorder::None)
        } else {
            fx.h.solver_sparse().unwrap().csrlsvqr(sys, &b, &x, 1e-12, Reorder::None)
        };
        match c.unwrap().wait() {
            Err(Error::Numerical { failures, .. }) => {
                assert!(
                    matches!(failures[..], [NumericalFailure::SingularToTolerance { matrix: 0, .. }]),
                    "{failures:?}"
                )
            }
            other => panic!("{chol}: {other:?}"),
        }
    }
}

/// The simulated op is a kernel on its stream under its declared uses: a matrix uploaded on
/// another stream is fenced before it, as for any op (the checker would report otherwise).
#[test]
fn a_solver_op_is_ordered_after_work_on_another_stream() {
    let fx = fx();
    let s2 = fx.device.new_stream().unwrap();
    let a = fx.device.upload(s2, &spd(&mut Rng::seeded(7), 4)).unwrap();
    let mut h = cusched::Handles::new(&fx.device, fx.s).unwrap();
    h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n: 4, a: &a, lda: None }).unwrap().wait().unwrap();
    assert!(fx.device.stats().waits >= 1, "no fence before the op");
}

/// A random `n x n` triangular matrix (`lower` or upper) with a dominant diagonal and small
/// off-diagonal entries, the other triangle filled with `junk` (which trtri must neither read
/// nor write).
fn triangular(rng: &mut Rng, n: usize, lower: bool, junk: f64) -> Vec<f64> {
    let r = random(rng, n * n);
    (0..n * n)
        .map(|k| {
            let (i, j) = (k % n, k / n);
            if i == j {
                r[k] + n as f64
            } else if (i > j) == lower {
                // Small enough that a unit diagonal keeps A well conditioned.
                r[k] / n as f64
            } else {
                junk
            }
        })
        .collect()
}

#[test]
fn trtri_inverts_every_triangle_and_diagonal_kind() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let n = 11;
    for fill in [Fill::Lower, Fill::Upper] {
        for unit in [false, true] {
            let lower = fill == Fill::Lower;
            let a0 = triangular(&mut rng, n, lower, 7.0);
            let a = fx.upload(&a0);
            let t = Trtri { fill, unit_diagonal: unit, n, a: &a, lda: None };
            fx.h.solver().unwrap().trtri(&t).unwrap().wait().unwrap();
            let got = down(&fx, &a);
            // The other triangle is untouched, and so is a unit diagonal.
            for k in 0..n * n {
                let (i, j) = (k % n, k / n);
                if (i != j && (i > j) != lower) || (i == j && unit) {
                    assert_eq!(got[k], a0[k], "{fill:?} unit={unit}: ({i}, {j}) was written");
                }
            }
            let with_diag = |m: &[f64]| -> Vec<f64> {
                let mut t = triangle(m, n, lower);
                if unit {
                    for i in 0..n {
                        t[i + i * n] = 1.0;
                    }
                }
                t
            };
            let (tri, inv) = (with_diag(&a0), with_diag(&got));
            let r = scaled(&matmul(&tri, &inv, n, n, n), &identity(n), n);
            assert!(r < 100.0, "{fill:?} unit={unit}: ‖A·A⁻¹ − I‖ scaled = {r}");
        }
    }
    // f32 and Complex<f64>: A·A⁻¹ = I to their precision.
    let a0 = triangular(&mut rng, n, true, 0.0);
    let a = fx.upload(&a0.iter().map(|&x| x as f32).collect::<Vec<_>>());
    fx.h.solver()
        .unwrap()
        .trtri(&Trtri { fill: Fill::Lower, unit_diagonal: false, n, a: &a, lda: None })
        .unwrap()
        .wait()
        .unwrap();
    let inv: Vec<f64> = down(&fx, &a).into_iter().map(f64::from).collect();
    assert!(scaled_eps(&matmul(&a0, &inv, n, n, n), &identity(n), n, f32::EPSILON as f64) < 100.0);
    let c0: Vec<Complex<f64>> = a0.iter().map(|&re| Complex::new(re, 0.5 * re)).collect();
    let c = fx.upload(&c0);
    fx.h.solver()
        .unwrap()
        .trtri(&Trtri { fill: Fill::Lower, unit_diagonal: false, n, a: &c, lda: None })
        .unwrap()
        .wait()
        .unwrap();
    let ci = down(&fx, &c);
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in 0..n {
            let mut z = Complex::new(0.0, 0.0);
            for k in 0..n {
                let (x, y) = (c0[i + k * n], ci[k + j * n]);
                z = Complex::new(z.re + x.re * y.re - x.im * y.im, z.im + x.re * y.im + x.im * y.re);
            }
            let want = if i == j { 1.0 } else { 0.0 };
            worst = worst.max((z.re - want).abs() + z.im.abs());
        }
    }
    assert!(worst < 1e-12, "complex ‖A·A⁻¹ − I‖ max = {worst}");
}

#[test]
fn trtri_of_a_zero_diagonal_names_it_and_leaves_a() {
    let mut fx = fx();
    let mut a0 = identity(5);
    a0[3 + 3 * 5] = 0.0;
    a0[1 + 3 * 5] = 2.0;
    let a = fx.upload(&a0);
    let got = fx.h.solver().unwrap().trtri(&Trtri { fill: Fill::Upper, unit_diagonal: false, n: 5, a: &a, lda: None });
    match got.unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::Singular { matrix: 0, index: 4 }])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(down(&fx, &a), a0);
    // With a unit diagonal the stored zero is not read.
    fx.h.solver()
        .unwrap()
        .trtri(&Trtri { fill: Fill::Upper, unit_diagonal: true, n: 5, a: &a, lda: None })
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(down(&fx, &a)[1 + 3 * 5], -2.0);
}

#[test]
fn gesvd_economy_gives_a_thin_u_that_reconstructs() {
    let mut rng = Rng::new();
    let mut fx = fx();
    for (m, n) in [(9, 6), (7, 7), (45, 29)] {
        let a0 = random(&mut rng, m * n);
        let ldu = m + 2;
        let (a, s, u, vt) = (fx.upload(&a0), fx.buf::<f64>(n), fx.buf::<f64>(ldu * n), fx.buf::<f64>(n * n));
        let g =
            GesvdEconomy { vectors: true, m, n, a: &a, lda: None, s: &s, u: &u, ldu: Some(ldu), vt: &vt, ldvt: None };
        fx.h.solver().unwrap().gesvd_economy(&g).unwrap().wait().unwrap();
        let (sv, ul, vtm) = (down(&fx, &s), down(&fx, &u), down(&fx, &vt));
        let um: Vec<f64> = (0..m * n).map(|k| ul[k % m + (k / m) * ldu]).collect();
        assert!(scaled(&sv, &singular_values_of(&a0, m, n), n) < 1e4, "{m}x{n}");
        assert!(orthonormality(&um, m, n, f64::EPSILON) < 100.0, "{m}x{n}");
        assert!(orthonormality(&transpose(&vtm, n, n), n, n, f64::EPSILON) < 100.0, "{m}x{n}");
        assert!(scaled(&usv(&um, &sv, &transpose(&vtm, n, n), m, n, n), &a0, m) < 100.0, "{m}x{n}");
    }
}

/// `max_k ‖A v_k − λ_k v_k‖ / (‖A‖ n ε)` over the `k` columns of `v`.
fn partial_residual(a: &[f64], v: &[f64], w: &[f64], n: usize, k: usize) -> f64 {
    let av = matmul(a, &v[..n * k], n, n, k);
    let d: Vec<f64> = (0..n * k).map(|i| av[i] - v[i] * w[i / n]).collect();
    fro(&d) / (fro(a).max(1.0) * n as f64 * f64::EPSILON)
}

#[test]
fn syevdx_selects_by_index_and_by_value_range() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let n = 13;
    let a0 = symmetric(&mut rng, n);
    let (a, w) = (fx.upload(&a0), fx.buf::<f64>(n));
    fx.h.solver()
        .unwrap()
        .syevd(&Syevd { vectors: false, fill: Fill::Lower, n, a: &a, lda: None, w: &w })
        .unwrap()
        .wait()
        .unwrap();
    let all = down(&fx, &w);
    for fill in [Fill::Lower, Fill::Upper] {
        let run = |fx: &mut Fx, range: EigRange<f64>| {
            let (a, w) = (fx.upload(&triangle(&a0, n, fill == Fill::Lower)), fx.buf::<f64>(n));
            let e = Syevdx { vectors: true, fill, range, n, a: &a, lda: None, w: &w };
            let k = fx.h.solver().unwrap().syevdx(&e).unwrap().wait().unwrap();
            (k, down(fx, &a), down(fx, &w))
        };
        let (k, v, wv) = run(&mut fx, EigRange::Indices(3..8));
        assert_eq!(k, 5);
        assert!(scaled(&wv[..5], &all[3..8], n) < 100.0, "{fill:?}");
        assert!(
            partial_residual(&a0, &v, &wv, n, k) < 100.0 && orthonormality(&v[..n * k], n, k, f64::EPSILON) < 100.0
        );
        // (low, high]: the bounds between eigenvalues, so that rounding cannot move one across.
        let (low, high) = ((all[1] + all[2]) / 2.0, (all[9] + all[10]) / 2.0);
        let (k, v, wv) = run(&mut fx, EigRange::Values { low, high });
        assert_eq!(k, 8, "{fill:?}");
        assert!(scaled(&wv[..8], &all[2..10], n) < 100.0);
        assert!(partial_residual(&a0, &v, &wv, n, k) < 100.0);
        let (k, _, wv) = run(&mut fx, EigRange::All);
        assert_eq!(k, n);
        assert!(scaled(&wv, &all, n) < 100.0);
        let top = all[n - 1] + 1.0;
        assert_eq!(run(&mut fx, EigRange::Values { low: top, high: top + 1.0 }).0, 0, "an empty interval finds none");
    }
    // f32 and Hermitian Complex<f32>: the values to f32 precision.
    let (a, w) = (fx.upload(&a0.iter().map(|&x| x as f32).collect::<Vec<_>>()), fx.buf::<f32>(n));
    let e = Syevdx { vectors: false, fill: Fill::Lower, range: EigRange::Indices(0..2), n, a: &a, lda: None, w: &w };
    assert_eq!(fx.h.solver().unwrap().syevdx(&e).unwrap().wait().unwrap(), 2);
    let wf: Vec<f64> = down(&fx, &w).into_iter().map(f64::from).collect();
    assert!(scaled_eps(&wf[..2], &all[..2], n, f32::EPSILON as f64) < 100.0);
    let c0: Vec<Complex<f32>> = a0.iter().map(|&x| Complex::new(x as f32, 0.0)).collect();
    let (c, cw) = (fx.upload(&c0), fx.buf::<f32>(n));
    let e = Syevdx { vectors: true, fill: Fill::Upper, range: EigRange::Indices(10..13), n, a: &c, lda: None, w: &cw };
    assert_eq!(fx.h.solver().unwrap().syevdx(&e).unwrap().wait().unwrap(), 3);
    let wc: Vec<f64> = down(&fx, &cw).into_iter().map(f64::from).collect();
    assert!(scaled_eps(&wc[..3], &all[10..13], n, f32::EPSILON as f64) < 100.0);
}

/// A random `n x n` with a dominant diagonal: well conditioned, so that refinement from any
/// lower precision converges.
fn dominant(rng: &mut Rng, n: usize) -> Vec<f64> {
    let mut a = random(rng, n * n);
    for i in 0..n {
        a[i + i * n] += n as f64;
    }
    a
}

#[test]
fn gesv_refines_from_every_lower_precision_to_the_element_type() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (n, nrhs) = (23, 2);
    let a0 = dominant(&mut rng, n);
    let x0 = random(&mut rng, n * nrhs);
    let b0 = matmul(&a0, &x0, n, n, nrhs);
    for low in [LowPrecision::Main, LowPrecision::F32, LowPrecision::F16, LowPrecision::Bf16, LowPrecision::Tf32] {
        let (a, b, x, ipiv) = (fx.upload(&a0), fx.upload(&b0), fx.buf::<f64>(n * nrhs), fx.buf::<i32>(n));
        let g = Gesv { low, n, nrhs, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None, x: &x, ldx: None };
        let got = fx.h.solver().unwrap().gesv(&g).unwrap().wait().unwrap();
        assert!(matches!(got, Refinement::Converged { .. }), "{low:?}: {got:?}");
        if let (LowPrecision::F16 | LowPrecision::Bf16, Refinement::Converged { iterations }) = (low, got) {
            assert!(iterations >= 1, "{low:?}: a half-precision factor needs refinement");
        }
        let xv = down(&fx, &x);
        let r = scaled(&matmul(&a0, &xv, n, n, nrhs), &b0, n);
        assert!(r < 100.0, "{low:?}: ‖AX − B‖ scaled = {r}");
        assert_eq!(down(&fx, &b), b0, "B is only read");
        let piv = down(&fx, &ipiv);
        assert!(piv.iter().enumerate().all(|(i, &p)| p as usize > i && p as usize <= n), "{low:?}: {piv:?}");
        if low != LowPrecision::Main {
            assert_eq!(down(&fx, &a), a0, "{low:?}: A is kept when refinement converged");
        }
    }
    // f32 from f16, and Complex<f64> from f32.
    let a = fx.upload(&a0.iter().map(|&v| v as f32).collect::<Vec<_>>());
    let b = fx.upload(&b0.iter().map(|&v| v as f32).collect::<Vec<_>>());
    let (x, ipiv) = (fx.buf::<f32>(n * nrhs), fx.buf::<i32>(n));
    let g = Gesv { low: LowPrecision::F16, n, nrhs, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None, x: &x, ldx: None };
    assert!(matches!(fx.h.solver().unwrap().gesv(&g).unwrap().wait().unwrap(), Refinement::Converged { .. }));
    let xv: Vec<f64> = down(&fx, &x).into_iter().map(f64::from).collect();
    assert!(scaled_eps(&xv, &x0, n, f32::EPSILON as f64) < 1e3);
    let ca: Vec<Complex<f64>> = a0.iter().map(|&v| Complex::new(v, -v / 2.0)).collect();
    let cx: Vec<Complex<f64>> = (0..n).map(|i| Complex::new(x0[i], 1.0)).collect();
    let cb: Vec<Complex<f64>> = (0..n)
        .map(|i| {
            (0..n).fold(Complex::new(0.0, 0.0), |s, k| {
                let (p, q) = (ca[i + k * n], cx[k]);
                Complex::new(s.re + p.re * q.re - p.im * q.im, s.im + p.re * q.im + p.im * q.re)
            })
        })
        .collect();
    let (a, b, x) = (fx.upload(&ca), fx.upload(&cb), fx.buf::<Complex<f64>>(n));
    let g =
        Gesv { low: LowPrecision::F32, n, nrhs: 1, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None, x: &x, ldx: None };
    assert!(matches!(fx.h.solver().unwrap().gesv(&g).unwrap().wait().unwrap(), Refinement::Converged { .. }));
    let err = down(&fx, &x).iter().zip(&cx).map(|(p, q)| (p.re - q.re).abs() + (p.im - q.im).abs()).fold(0.0, f64::max);
    assert!(err < 1e-12, "complex gesv error {err}");
}

#[test]
fn gesv_falls_back_on_overflow_and_names_a_singular_matrix() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let n = 6;
    // 1e6 is beyond f16's range (65504): the solve falls back to f64, and A holds its LU.
    let mut a0 = dominant(&mut rng, n);
    a0[1] = 1e6;
    let x0 = random(&mut rng, n);
    let b0 = matmul(&a0, &x0, n, n, 1);
    let (a, b, x, ipiv) = (fx.upload(&a0), fx.upload(&b0), fx.buf::<f64>(n), fx.buf::<i32>(n));
    let g =
        Gesv { low: LowPrecision::F16, n, nrhs: 1, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None, x: &x, ldx: None };
    let got = fx.h.solver().unwrap().gesv(&g).unwrap().wait().unwrap();
    assert_eq!(got, Refinement::FellBack(Fallback::Overflow));
    assert!(scaled(&down(&fx, &x), &x0, n) < 1e4);
    // Bf16 has f32's range: no overflow there.
    let (a, x) = (fx.upload(&a0), fx.buf::<f64>(n));
    let g = Gesv { low: LowPrecision::Bf16, a: &a, x: &x, ..g };
    assert!(matches!(fx.h.solver().unwrap().gesv(&g).unwrap().wait().unwrap(), Refinement::Converged { .. }));
    let mut s0 = identity(n);
    s0[2 + 2 * n] = 0.0;
    let (a, x) = (fx.upload(&s0), fx.buf::<f64>(n));
    match fx.h.solver().unwrap().gesv(&Gesv { a: &a, x: &x, ..g }).unwrap().wait() {
        Err(Error::Numerical { failures, .. }) => {
            assert_eq!(failures, vec![NumericalFailure::Singular { matrix: 0, index: 3 }])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn gels_solves_least_squares_from_every_lower_precision() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n, nrhs) = (31, 17, 2);
    let a0 = random(&mut rng, m * n);
    // A consistent system (B = A X₀) converges; a random B is inconsistent: cuSOLVER's test is
    // on the residual `B − A X`, which stays at the least-squares residual's size, so refinement
    // runs to its limit and falls back, X still the least-squares answer.
    let x0 = random(&mut rng, n * nrhs);
    let consistent = matmul(&a0, &x0, m, n, nrhs);
    let inconsistent = random(&mut rng, m * nrhs);
    for (b0, converges) in [(consistent, true), (inconsistent, false)] {
        for low in [LowPrecision::Main, LowPrecision::F32, LowPrecision::F16, LowPrecision::Bf16, LowPrecision::Tf32] {
            let (a, b, x) = (fx.upload(&a0), fx.upload(&b0), fx.buf::<f64>(n * nrhs));
            let g = Gels { low, m, n, nrhs, a: &a, lda: None, b: &b, ldb: None, x: &x, ldx: None };
            let got = fx.h.solver().unwrap().gels(&g).unwrap().wait().unwrap();
            let xv = down(&fx, &x);
            // The normal equations: Aᵀ (A x − b) = 0, relative to ‖Aᵀ‖ ‖b‖.
            let r: Vec<f64> = matmul(&a0, &xv, m, n, nrhs).iter().zip(&b0).map(|(p, q)| p - q).collect();
            let normal =
                fro(&matmul(&transpose(&a0, m, n), &r, n, m, nrhs)) / (fro(&a0) * fro(&b0) * m as f64 * f64::EPSILON);
            println!("gels {low:?} (consistent: {converges}): {got:?}, ‖Aᵀ(AX − B)‖ scaled = {normal:.2}");
            assert!(normal < 100.0, "{low:?} ({got:?}): ‖Aᵀ(AX − B)‖ scaled = {normal}");
            if converges {
                assert!(matches!(got, Refinement::Converged { .. }), "{low:?}: a random 31x17 is well conditioned");
                assert!(scaled_eps(&xv, &x0, n * nrhs, f64::EPSILON) < 1e4, "{low:?}: X is not X₀");
            } else {
                assert_eq!(got, Refinement::FellBack(Fallback::IterationLimit), "{low:?}: an inconsistent system");
            }
            assert_eq!(down(&fx, &b), b0, "B is only read");
        }
    }
}

/// Whether `ipiv` is a valid Bunch–Kaufman pivot vector of order `n` (LAPACK's convention),
/// and how many 2x2 blocks it has.
fn bunch_kaufman_blocks(ipiv: &[i64], n: usize) -> Option<usize> {
    let (mut k, mut blocks) = (0, 0);
    while k < n {
        let p = ipiv[k];
        if p > 0 {
            if p as usize > n {
                return None;
            }
            k += 1;
        } else {
            if k + 1 >= n || ipiv[k + 1] != p || p.unsigned_abs() as usize > n || p == 0 {
                return None;
            }
            blocks += 1;
            k += 2;
        }
    }
    Some(blocks)
}

#[test]
fn sytrf_and_sytrs_solve_symmetric_indefinite_systems() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (n, nrhs) = (19, 3);
    // A random symmetric matrix, and one with a zero diagonal (every pivot must be 2x2 or a swap).
    let mut hollow = symmetric(&mut rng, n);
    for i in 0..n {
        hollow[i + i * n] = 0.0;
    }
    for (what, a0) in [("random", symmetric(&mut rng, n)), ("zero diagonal", hollow)] {
        for fill in [Fill::Lower, Fill::Upper] {
            let lower = fill == Fill::Lower;
            let x0 = random(&mut rng, n * nrhs);
            let b0 = matmul(&a0, &x0, n, n, nrhs);
            let (a, ipiv, b) = (fx.upload(&triangle(&a0, n, lower)), fx.buf::<i64>(n), fx.upload(&b0));
            fx.h.solver().unwrap().sytrf(&Sytrf { fill, n, a: &a, lda: None, ipiv: &ipiv }).unwrap().wait().unwrap();
            let piv = down(&fx, &ipiv);
            let blocks = bunch_kaufman_blocks(&piv, n);
            assert!(blocks.is_some(), "{what} {fill:?}: {piv:?}");
            if what == "zero diagonal" {
                assert!(blocks.unwrap_or(0) >= 1, "{what} {fill:?}: a zero diagonal needs 2x2 blocks: {piv:?}");
            }
            let s = Sytrs { fill, n, nrhs, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None };
            fx.h.solver().unwrap().sytrs(&s).unwrap().wait().unwrap();
            let r = scaled(&matmul(&a0, &down(&fx, &b), n, n, nrhs), &b0, n);
            assert!(r < 1e3, "{what} {fill:?}: ‖AX − B‖ scaled = {r}");
        }
    }
    // f32, and complex symmetric (not Hermitian): A = Aᵀ with complex entries.
    let a0 = symmetric(&mut rng, n);
    let x0 = random(&mut rng, n);
    let b0 = matmul(&a0, &x0, n, n, 1);
    let (a, ipiv, b) = (
        fx.upload(&a0.iter().map(|&v| v as f32).collect::<Vec<_>>()),
        fx.buf::<i64>(n),
        fx.upload(&b0.iter().map(|&v| v as f32).collect::<Vec<_>>()),
    );
    fx.h.solver()
        .unwrap()
        .sytrf(&Sytrf { fill: Fill::Upper, n, a: &a, lda: None, ipiv: &ipiv })
        .unwrap()
        .wait()
        .unwrap();
    fx.h.solver()
        .unwrap()
        .sytrs(&Sytrs { fill: Fill::Upper, n, nrhs: 1, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None })
        .unwrap()
        .wait()
        .unwrap();
    let xv: Vec<f64> = down(&fx, &b).into_iter().map(f64::from).collect();
    let r = scaled_eps(&matmul(&a0, &xv, n, n, 1), &b0, n, f32::EPSILON as f64);
    assert!(r < 1e3, "f32: {r}");
    let ca: Vec<Complex<f64>> =
        (0..n * n).map(|k| Complex::new(a0[k], a0[(k % n) * n + k / n] * 0.0 + 0.3 * a0[k])).collect();
    let cx: Vec<Complex<f64>> = (0..n).map(|i| Complex::new(x0[i], -x0[i])).collect();
    let cb: Vec<Complex<f64>> = (0..n)
        .map(|i| {
            (0..n).fold(Complex::new(0.0, 0.0), |s, k| {
                let (p, q) = (ca[i + k * n], cx[k]);
                Complex::new(s.re + p.re * q.re - p.im * q.im, s.im + p.re * q.im + p.im * q.re)
            })
        })
        .collect();
    let (a, b) = (fx.upload(&ca), fx.upload(&cb));
    fx.h.solver()
        .unwrap()
        .sytrf(&Sytrf { fill: Fill::Lower, n, a: &a, lda: None, ipiv: &ipiv })
        .unwrap()
        .wait()
        .unwrap();
    fx.h.solver()
        .unwrap()
        .sytrs(&Sytrs { fill: Fill::Lower, n, nrhs: 1, a: &a, lda: None, ipiv: &ipiv, b: &b, ldb: None })
        .unwrap()
        .wait()
        .unwrap();
    let err = down(&fx, &b).iter().zip(&cx).map(|(p, q)| (p.re - q.re).abs() + (p.im - q.im).abs()).fold(0.0, f64::max);
    assert!(err < 1e-9, "complex symmetric sytrs error {err}");
}

#[test]
fn sytrf_of_a_singular_matrix_names_the_zero_block() {
    let mut fx = fx();
    let n = 5;
    let mut a0 = identity(n);
    a0[2 + 2 * n] = 0.0;
    for fill in [Fill::Lower, Fill::Upper] {
        let (a, ipiv) = (fx.upload(&a0), fx.buf::<i64>(n));
        match fx.h.solver().unwrap().sytrf(&Sytrf { fill, n, a: &a, lda: None, ipiv: &ipiv }).unwrap().wait() {
            Err(Error::Numerical { failures, .. }) => {
                assert_eq!(failures, vec![NumericalFailure::Singular { matrix: 0, index: 3 }], "{fill:?}")
            }
            other => panic!("{fill:?}: {other:?}"),
        }
        assert_eq!(down(&fx, &ipiv), vec![1, 2, 3, 4, 5], "{fill:?}");
    }
}

#[test]
fn geev_gives_the_eigenpairs_of_general_matrices() {
    let mut rng = Rng::new();
    let mut fx = fx();
    for n in [1, 2, 13] {
        let a0 = random(&mut rng, n * n);
        let (a, w, vr) = (fx.upload(&a0), fx.buf::<f64>(2 * n), fx.buf::<f64>(n * n));
        let g = Geev { vectors: true, n, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
        fx.h.solver().unwrap().geev(&g).unwrap().wait().unwrap();
        let (wv, v) = (down(&fx, &w), down(&fx, &vr));
        let pairs = real_geev_pairs(&wv, &v, n).unwrap_or_else(|| panic!("n={n}: malformed pairs {wv:?}"));
        let ac: Vec<(f64, f64)> = a0.iter().map(|&x| (x, 0.0)).collect();
        let r = general_eigen_residual(&ac, &pairs, n, f64::EPSILON);
        assert!(r < 1e3, "n={n}: ‖AV − VΛ‖ scaled = {r}");
        // The eigenvalues sum to the trace.
        let trace: f64 = (0..n).map(|i| a0[i + i * n]).sum();
        assert!((wv[..n].iter().sum::<f64>() - trace).abs() < 1e-10 * n as f64, "n={n}");
        assert!(wv[n..].iter().sum::<f64>().abs() < 1e-10, "n={n}: conjugate pairs");
    }
    // A rotation block has eigenvalues ±i: one conjugate pair, positive imaginary part first.
    let a0 = vec![0.0, 1.0, -1.0, 0.0];
    let (a, w, vr) = (fx.upload(&a0), fx.buf::<f64>(4), fx.buf::<f64>(4));
    fx.h.solver()
        .unwrap()
        .geev(&Geev { vectors: true, n: 2, a: &a, lda: None, w: &w, vr: &vr, ldvr: None })
        .unwrap()
        .wait()
        .unwrap();
    let wv = down(&fx, &w);
    assert!(
        wv[0].abs() < 1e-14 && wv[1].abs() < 1e-14 && (wv[2] - 1.0).abs() < 1e-14 && (wv[3] + 1.0).abs() < 1e-14,
        "{wv:?}"
    );
    // Complex<f64>: w holds n complex eigenvalues, VR complex eigenvectors.
    let n = 9;
    let c0: Vec<Complex<f64>> = (0..n * n).map(|_| Complex::new(rng.f32() as f64, rng.f32() as f64)).collect();
    let (a, w, vr) = (fx.upload(&c0), fx.buf::<Complex<f64>>(n), fx.buf::<Complex<f64>>(n * n));
    fx.h.solver()
        .unwrap()
        .geev(&Geev { vectors: true, n, a: &a, lda: None, w: &w, vr: &vr, ldvr: None })
        .unwrap()
        .wait()
        .unwrap();
    let (wv, v) = (down(&fx, &w), down(&fx, &vr));
    let pairs: Vec<Eigenpair> =
        (0..n).map(|j| ((wv[j].re, wv[j].im), (0..n).map(|r| (v[r + j * n].re, v[r + j * n].im)).collect())).collect();
    let ac: Vec<(f64, f64)> = c0.iter().map(|z| (z.re, z.im)).collect();
    let r = general_eigen_residual(&ac, &pairs, n, f64::EPSILON);
    assert!(r < 1e3, "complex: ‖AV − VΛ‖ scaled = {r}");
    for j in 0..n {
        let col = &v[j * n..(j + 1) * n];
        let norm: f64 = col.iter().map(|z| z.re * z.re + z.im * z.im).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-12, "column {j} has norm {norm}");
    }
}

#[test]
fn gesvdr_gives_the_leading_singular_triplets() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n, k) = (14, 9, 3);
    let a0 = random(&mut rng, m * n);
    let want = singular_values_of(&a0, m, n);
    let (a, s, u, v) = (fx.upload(&a0), fx.buf::<f64>(n), fx.buf::<f64>(m * n), fx.buf::<f64>(n * n));
    let g = Gesvdr {
        vectors: true,
        m,
        n,
        k,
        oversampling: 2,
        iterations: 2,
        a: &a,
        lda: None,
        s: &s,
        u: &u,
        ldu: None,
        v: &v,
        ldv: None,
    };
    fx.h.solver().unwrap().gesvdr(&g).unwrap().wait().unwrap();
    let (sv, um, vm) = (down(&fx, &s), down(&fx, &u), down(&fx, &v));
    assert!(scaled(&sv[..k], &want[..k], n) < 1e4);
    let (uk, vk) = (&um[..m * k], &vm[..n * k]);
    assert!(orthonormality(uk, m, k, f64::EPSILON) < 100.0 && orthonormality(vk, n, k, f64::EPSILON) < 100.0);
    // A V_k = U_k Σ_k.
    let av = matmul(&a0, vk, m, n, k);
    let us: Vec<f64> = (0..m * k).map(|i| uk[i] * sv[i / m]).collect();
    assert!(scaled(&av, &us, m) < 100.0);
}

#[test]
fn gesvda_batched_gives_each_matrix_its_leading_triplets() {
    let mut rng = Rng::new();
    let mut fx = fx();
    let (m, n, rank, batch) = (11, 6, 4, 3);
    let all = random(&mut rng, m * n * batch);
    let (a, s, u, v) = (
        fx.upload(&all),
        fx.buf::<f64>(rank * batch),
        fx.buf::<f64>(m * rank * batch),
        fx.buf::<f64>(n * rank * batch),
    );
    let g = GesvdaBatched {
        vectors: true,
        rank,
        m,
        n,
        batch,
        a: &a,
        lda: None,
        stride_a: None,
        s: &s,
        stride_s: None,
        u: &u,
        ldu: None,
        stride_u: None,
        v: &v,
        ldv: None,
        stride_v: None,
    };
    fx.h.solver().unwrap().gesvda_batched(&g).unwrap().wait().unwrap();
    let (sv, um, vm) = (down(&fx, &s), down(&fx, &u), down(&fx, &v));
    assert_eq!(down(&fx, &a), all, "A is only read");
    for i in 0..batch {
        let a0 = &all[i * m * n..(i + 1) * m * n];
        let want = singular_values_of(a0, m, n);
        let (si, ui, vi) = (
            &sv[i * rank..(i + 1) * rank],
            &um[i * m * rank..(i + 1) * m * rank],
            &vm[i * n * rank..(i + 1) * n * rank],
        );
        assert!(scaled(si, &want[..rank], n) < 1e4, "matrix {i}");
        let back = usv(ui, si, vi, m, n, rank);
        let r: Vec<f64> = a0.iter().zip(&back).map(|(x, y)| x - y).collect();
        let tail = want[rank..].iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((fro(&r) - tail).abs() < 1e-10, "matrix {i}: {} {tail}", fro(&r));
    }
}

/// `geev_complex_w` of a real matrix: `w` holds the `n` eigenvalues as complex numbers (both
/// members of a conjugate pair, positive imaginary part first), the same as `geev`'s `2n`
/// layout, and `VR` the real layout's eigenvectors, in `f32` and `f64` at odd and small sizes.
#[test]
fn geev_complex_w_gives_the_eigenvalues_as_complex_numbers() {
    use cusched::solver::GeevComplexW;
    let mut rng = Rng::new();
    let mut fx = fx();
    for n in [1, 2, 13] {
        let a0 = random(&mut rng, n * n);
        let (a, w, vr) = (fx.upload(&a0), fx.buf::<Complex<f64>>(n), fx.buf::<f64>(n * n));
        let g = GeevComplexW { vectors: true, n, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
        fx.h.solver().unwrap().geev_complex_w(&g).unwrap().wait().unwrap();
        let (wc, v) = (down(&fx, &w), down(&fx, &vr));
        // The same eigenvalues as geev's real layout, from which the reference reads the pairs.
        let wv: Vec<f64> = wc.iter().map(|z| z.re).chain(wc.iter().map(|z| z.im)).collect();
        let (a2, w2, vr2) = (fx.upload(&a0), fx.buf::<f64>(2 * n), fx.buf::<f64>(n * n));
        let g2 = Geev { vectors: true, n, a: &a2, lda: None, w: &w2, vr: &vr2, ldvr: None };
        fx.h.solver().unwrap().geev(&g2).unwrap().wait().unwrap();
        assert_eq!(wv, down(&fx, &w2), "n={n}: geev's layout");
        let pairs = real_geev_pairs(&wv, &v, n).unwrap_or_else(|| panic!("n={n}: malformed pairs {wc:?}"));
        let ac: Vec<(f64, f64)> = a0.iter().map(|&x| (x, 0.0)).collect();
        let r = general_eigen_residual(&ac, &pairs, n, f64::EPSILON);
        assert!(r < 1e3, "n={n}: ‖AV − VΛ‖ scaled = {r}");
    }
    // f32, eigenvalues only: a rotation block's ±i, positive first.
    let (a, w, vr) = (fx.upload(&[0.0f32, 1.0, -1.0, 0.0]), fx.buf::<Complex<f32>>(2), fx.buf::<f32>(1));
    let g = GeevComplexW { vectors: false, n: 2, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
    fx.h.solver().unwrap().geev_complex_w(&g).unwrap().wait().unwrap();
    let wc = down(&fx, &w);
    assert!(
        wc[0].re.abs() < 1e-6
            && (wc[0].im - 1.0).abs() < 1e-6
            && wc[1].re.abs() < 1e-6
            && (wc[1].im + 1.0).abs() < 1e-6,
        "{wc:?}"
    );
}

/// Eigenvectors whose components have equal magnitudes (a rotation, and a scaled and shifted
/// one): every eigenpair `geev` (real and complex) and `geev_complex_w` return satisfies
/// `A v = λ v`. Making the largest component real must not drop another component's
/// imaginary part when two are equally large.
#[test]
fn geev_eigenvectors_with_equally_large_components_are_eigenvectors() {
    use cusched::solver::GeevComplexW;
    let c = Complex::new;
    let mul = |p: Complex<f64>, q: Complex<f64>| c(p.re * q.re - p.im * q.im, p.re * q.im + p.im * q.re);
    // ‖A v − λ v‖∞ for the 2x2 column-major `a`.
    let residual = |a: &[Complex<f64>], v: [Complex<f64>; 2], lam: Complex<f64>| {
        (0..2)
            .map(|i| {
                let (p, q, l) = (mul(a[i], v[0]), mul(a[i + 2], v[1]), mul(lam, v[i]));
                (p.re + q.re - l.re).hypot(p.im + q.im - l.im)
            })
            .fold(0.0, f64::max)
    };
    let mut fx = fx();
    for a0 in [[0.0f64, 1.0, -1.0, 0.0], [1.0, 1.0, -1.0, 1.0]] {
        let ac: Vec<Complex<f64>> = a0.iter().map(|&x| c(x, 0.0)).collect();
        // Real geev: the pair in columns 0 and 1, v = VR(:,0) ± i VR(:,1).
        let (a, w, vr) = (fx.upload(&a0), fx.buf::<f64>(4), fx.buf::<f64>(4));
        let g = Geev { vectors: true, n: 2, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
        fx.h.solver().unwrap().geev(&g).unwrap().wait().unwrap();
        let (w, v) = (down(&fx, &w), down(&fx, &vr));
        let pos = [c(v[0], v[2]), c(v[1], v[3])];
        let r = residual(&ac, pos, c(w[0], w[2]));
        assert!(r < 1e-12, "geev f64 {a0:?}: w {w:?}, vr {v:?}, ‖Av − λv‖ = {r}");
        // geev_complex_w: the same layout of VR, W as complex numbers.
        let (a, w, vr) = (fx.upload(&a0), fx.buf::<Complex<f64>>(2), fx.buf::<f64>(4));
        let g = GeevComplexW { vectors: true, n: 2, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
        fx.h.solver().unwrap().geev_complex_w(&g).unwrap().wait().unwrap();
        let (w, v) = (down(&fx, &w), down(&fx, &vr));
        let r = residual(&ac, [c(v[0], v[2]), c(v[1], v[3])], w[0]);
        assert!(r < 1e-12, "geev_complex_w {a0:?}: w {w:?}, vr {v:?}, ‖Av − λv‖ = {r}");
        // Complex geev: each column its eigenvalue's eigenvector.
        let (a, w, vr) = (fx.upload(&ac), fx.buf::<Complex<f64>>(2), fx.buf::<Complex<f64>>(4));
        let g = Geev { vectors: true, n: 2, a: &a, lda: None, w: &w, vr: &vr, ldvr: None };
        fx.h.solver().unwrap().geev(&g).unwrap().wait().unwrap();
        let (w, v) = (down(&fx, &w), down(&fx, &vr));
        for k in 0..2 {
            let r = residual(&ac, [v[2 * k], v[2 * k + 1]], w[k]);
            assert!(r < 1e-12, "geev complex {a0:?}, pair {k}: w {w:?}, vr {v:?}, ‖Av − λv‖ = {r}");
        }
    }
}

/// cuSOLVER's ops report through status words the host reads: each is refused in a graph
/// recording with `Error::Recording`, as on a GPU, and runs outside it.
#[test]
fn solver_ops_are_refused_in_a_graph_recording() {
    let fx = fx();
    let a = fx.upload(&[4.0f64, 1.0, 1.0, 3.0]);
    let ar = a.clone();
    let got = cusched::Graph::record(&fx.device, move |rec| {
        rec.handles(0)?.solver()?.potrf(&Potrf { fill: Fill::Lower, n: 2, a: &ar, lda: None }).map(drop)
    });
    assert!(matches!(got, Err(Error::Recording { .. })), "potrf: {:?}", got.err());
    let mut fx = fx;
    fx.h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n: 2, a: &a, lda: None }).unwrap().wait().unwrap();
    assert_eq!(down(&fx, &a)[0], 2.0);
}
