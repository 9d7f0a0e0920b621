//! cuSOLVER on the GPU and on the simulator with the same inputs: the results agree to the
//! type's tolerance. Unique results (Cholesky and LU factors, pivots, Householder `R` and
//! `tau`, formed `Q`, solutions, eigenvalues, singular values) are compared element by element;
//! eigen and singular vectors, whose signs differ between implementations, through their
//! invariants on each backend (the sim tests' references).

use crate::common::reference::solver::*;
use crate::common::*;
use cusched::solver::{
    Fill, Generalized, Geqrf, Gesvd, Gesvdj, GesvdjBatched, Getrf, GetrfBatched, Getrs, GetrsBatched, Orgqr, Ormqr,
    Potrf, PotrfBatched, Potri, Potrs, PotrsBatched, Side, Syevd, Syevj, SyevjBatched, Sygvd, Trans,
};
use cusched::{Complex, Device, Element, GpuRef, Handles, StreamId};

/// Runs `op` on the GPU and on a simulated device; returns both outputs (`None` without a GPU).
fn both(op: impl Fn(&Device, StreamId, &mut Handles) -> Vec<f64>) -> Option<(Vec<f64>, Vec<f64>)> {
    let (d, s, mut h) = gpu_setup()?;
    let gpu = op(&d, s, &mut h);
    let sim = sim();
    let ss = sim.new_stream().unwrap();
    let mut sh = Handles::new(&sim, ss).unwrap();
    Some((gpu, op(&sim, ss, &mut sh)))
}

#[track_caller]
fn agree(name: &str, got: Option<(Vec<f64>, Vec<f64>)>, tol: f64) {
    let Some((g, s)) = got else { return };
    assert_eq!(g.len(), s.len(), "{name}");
    let d: Vec<f64> = g.iter().zip(&s).map(|(a, b)| a - b).collect();
    let rel = fro(&d) / fro(&g).max(1e-300);
    assert!(rel < tol, "{name}: GPU and simulator differ by {rel:e} (relative)");
}

fn f64s<T: Element + Into<f64>>(s: StreamId, b: &GpuRef<T>) -> Vec<f64> {
    b.download(s).unwrap().into_iter().map(Into::into).collect()
}

fn lower(a: &[f64], n: usize) -> Vec<f64> {
    (0..n * n).map(|k| if k % n >= k / n { a[k] } else { 0.0 }).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cholesky_family_agrees() {
    let n = 24;
    let a0 = spd(&mut Rng::seeded(1), n);
    let b0 = random(&mut Rng::seeded(2), n * 3);
    agree(
        "potrf/potrs/potri f64",
        both(|d, s, h| {
            let (a, b) = (d.upload(s, &a0).unwrap(), d.upload(s, &b0).unwrap());
            h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n, a: &a, lda: None }).unwrap().wait().unwrap();
            let mut out = lower(&f64s(s, &a), n);
            let p = Potrs { fill: Fill::Lower, n, nrhs: 3, a: &a, lda: None, b: &b, ldb: None };
            h.solver().unwrap().potrs(&p).unwrap().wait().unwrap();
            out.extend(f64s(s, &b));
            h.solver().unwrap().potri(&Potri { fill: Fill::Lower, n, a: &a, lda: None }).unwrap().wait().unwrap();
            out.extend(lower(&f64s(s, &a), n));
            out
        }),
        1e-9,
    );
    let a32: Vec<f32> = a0.iter().map(|&x| x as f32).collect();
    agree(
        "potrf f32 upper",
        both(|d, s, h| {
            let a = d.upload(s, &a32).unwrap();
            h.solver().unwrap().potrf(&Potrf { fill: Fill::Upper, n, a: &a, lda: None }).unwrap().wait().unwrap();
            transpose(&lower(&transpose(&f64s(s, &a), n, n), n), n, n)
        }),
        1e-4,
    );
    let ac: Vec<Complex<f64>> = a0.iter().map(|&x| Complex::new(x, 0.0)).collect();
    agree(
        "potrf complex",
        both(|d, s, h| {
            let a = d.upload(s, &ac).unwrap();
            h.solver().unwrap().potrf(&Potrf { fill: Fill::Lower, n, a: &a, lda: None }).unwrap().wait().unwrap();
            lower(&a.download(s).unwrap().iter().map(|c| c.re).collect::<Vec<_>>(), n)
        }),
        1e-9,
    );
    let mats: Vec<f64> = (0..4).flat_map(|i| spd(&mut Rng::seeded(10 + i), 6)).collect();
    let rhs = random(&mut Rng::seeded(3), 6 * 4);
    agree(
        "potrfBatched/potrsBatched",
        both(|d, s, h| {
            let (a, b) = (d.upload(s, &mats).unwrap(), d.upload(s, &rhs).unwrap());
            let p = PotrfBatched { fill: Fill::Lower, n: 6, batch: 4, a: &a, lda: None, stride: None };
            h.solver().unwrap().potrf_batched(&p).unwrap().wait().unwrap();
            let ps = PotrsBatched {
                fill: Fill::Lower,
                n: 6,
                nrhs: 1,
                batch: 4,
                a: &a,
                lda: None,
                stride_a: None,
                b: &b,
                ldb: None,
                stride_b: None,
            };
            h.solver().unwrap().potrs_batched(&ps).unwrap().wait().unwrap();
            let f = f64s(s, &a);
            let mut out: Vec<f64> = (0..4).flat_map(|i| lower(&f[i * 36..(i + 1) * 36], 6)).collect();
            out.extend(f64s(s, &b));
            out
        }),
        1e-9,
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lu_family_agrees_with_the_same_pivots() {
    let n = 20;
    let a0 = random(&mut Rng::seeded(4), n * n);
    let b0 = random(&mut Rng::seeded(5), n * 2);
    for trans in [Trans::No, Trans::Yes] {
        agree(
            "getrf/getrs",
            both(|d, s, h| {
                let (a, b, ipiv) =
                    (d.upload(s, &a0).unwrap(), d.upload(s, &b0).unwrap(), d.alloc_zeros::<i64>(s, n).unwrap());
                let g = Getrf { m: n, n, a: &a, lda: None, ipiv: Some(&ipiv) };
                h.solver().unwrap().getrf(&g).unwrap().wait().unwrap();
                let gs = Getrs { trans, n, nrhs: 2, a: &a, lda: None, ipiv: Some(&ipiv), b: &b, ldb: None };
                h.solver().unwrap().getrs(&gs).unwrap().wait().unwrap();
                let mut out = f64s(s, &a);
                out.extend(ipiv.download(s).unwrap().iter().map(|&p| p as f64));
                out.extend(f64s(s, &b));
                out
            }),
            1e-8,
        );
    }
    let mats = random(&mut Rng::seeded(6), 5 * 5 * 3);
    let rhs = random(&mut Rng::seeded(7), 5 * 3);
    agree(
        "getrfBatched/getrsBatched",
        both(|d, s, h| {
            let (a, b, ipiv) =
                (d.upload(s, &mats).unwrap(), d.upload(s, &rhs).unwrap(), d.alloc_zeros::<i32>(s, 15).unwrap());
            let g = GetrfBatched { n: 5, batch: 3, a: &a, lda: None, stride: None, ipiv: Some(&ipiv) };
            h.solver().unwrap().getrf_batched(&g).unwrap().wait().unwrap();
            let gs = GetrsBatched {
                trans: Trans::No,
                n: 5,
                nrhs: 1,
                batch: 3,
                a: &a,
                lda: None,
                stride_a: None,
                ipiv: &ipiv,
                b: &b,
                ldb: None,
                stride_b: None,
            };
            h.solver().unwrap().getrs_batched(&gs).unwrap().wait().unwrap();
            let mut out = f64s(s, &a);
            out.extend(ipiv.download(s).unwrap().iter().map(|&p| p as f64));
            out.extend(f64s(s, &b));
            out
        }),
        1e-8,
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn householder_qr_agrees_with_lapack_conventions() {
    let (m, n) = (30, 12);
    let a0 = random(&mut Rng::seeded(8), m * n);
    let c0 = random(&mut Rng::seeded(9), m * 3);
    agree(
        "geqrf/orgqr/ormqr",
        both(|d, s, h| {
            let (a, tau, c) =
                (d.upload(s, &a0).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap(), d.upload(s, &c0).unwrap());
            h.solver().unwrap().geqrf(&Geqrf { m, n, a: &a, lda: None, tau: &tau }).unwrap().wait().unwrap();
            let o = Ormqr {
                side: Side::Left,
                trans: Trans::Yes,
                m,
                n: 3,
                k: n,
                a: &a,
                lda: None,
                tau: &tau,
                c: &c,
                ldc: None,
            };
            h.solver().unwrap().ormqr(&o).unwrap().wait().unwrap();
            let mut out = f64s(s, &a);
            out.extend(f64s(s, &tau));
            out.extend(f64s(s, &c));
            h.solver().unwrap().orgqr(&Orgqr { m, n, k: n, a: &a, lda: None, tau: &tau }).unwrap().wait().unwrap();
            out.extend(f64s(s, &a));
            out
        }),
        1e-9,
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eigenvalues_and_singular_values_agree_and_vectors_satisfy_their_invariants() {
    let n = 16;
    let a0 = symmetric(&mut Rng::seeded(10), n);
    let b0 = spd(&mut Rng::seeded(11), n);
    agree(
        "syevd/syevj/sygvd eigenvalues",
        both(|d, s, h| {
            let mut out = Vec::new();
            let (a, w) = (d.upload(s, &a0).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
            h.solver()
                .unwrap()
                .syevd(&Syevd { vectors: true, fill: Fill::Lower, n, a: &a, lda: None, w: &w })
                .unwrap()
                .wait()
                .unwrap();
            assert!(eigen_residual(&a0, None, &f64s(s, &a), &f64s(s, &w), n) < 100.0);
            out.extend(f64s(s, &w));
            let a = d.upload(s, &a0).unwrap();
            h.solver()
                .unwrap()
                .syevj(&Syevj { vectors: true, fill: Fill::Upper, n, a: &a, lda: None, w: &w })
                .unwrap()
                .wait()
                .unwrap();
            assert!(eigen_residual(&a0, None, &f64s(s, &a), &f64s(s, &w), n) < 100.0);
            out.extend(f64s(s, &w));
            let (a, b) = (d.upload(s, &a0).unwrap(), d.upload(s, &b0).unwrap());
            let g = Sygvd {
                problem: Generalized::Ax,
                vectors: true,
                fill: Fill::Lower,
                n,
                a: &a,
                lda: None,
                b: &b,
                ldb: None,
                w: &w,
            };
            h.solver().unwrap().sygvd(&g).unwrap().wait().unwrap();
            assert!(eigen_residual(&a0, Some(&b0), &f64s(s, &a), &f64s(s, &w), n) < 1e3);
            out.extend(f64s(s, &w));
            out
        }),
        1e-10,
    );
    let (m, k) = (14, 9);
    let g0 = random(&mut Rng::seeded(12), m * k);
    agree(
        "gesvd/gesvdj singular values",
        both(|d, s, h| {
            let mut out = Vec::new();
            let (a, sv) = (d.upload(s, &g0).unwrap(), d.alloc_zeros::<f64>(s, k).unwrap());
            let (u, vt) = (d.alloc_zeros::<f64>(s, m * m).unwrap(), d.alloc_zeros::<f64>(s, k * k).unwrap());
            let g = Gesvd { vectors: true, m, n: k, a: &a, lda: None, s: &sv, u: &u, ldu: None, vt: &vt, ldvt: None };
            h.solver().unwrap().gesvd(&g).unwrap().wait().unwrap();
            assert!(orthonormality(&f64s(s, &u), m, m, f64::EPSILON) < 100.0);
            out.extend(f64s(s, &sv));
            let a = d.upload(s, &g0).unwrap();
            let (u, v) = (d.alloc_zeros::<f64>(s, m * k).unwrap(), d.alloc_zeros::<f64>(s, k * k).unwrap());
            let j = Gesvdj { vectors: true, m, n: k, a: &a, lda: None, s: &sv, u: &u, ldu: None, v: &v, ldv: None };
            h.solver().unwrap().gesvdj(&j).unwrap().wait().unwrap();
            assert!(orthonormality(&f64s(s, &u), m, k, f64::EPSILON) < 100.0);
            assert!(orthonormality(&f64s(s, &v), k, k, f64::EPSILON) < 100.0);
            out.extend(f64s(s, &sv));
            out
        }),
        1e-10,
    );
    let mats = random(&mut Rng::seeded(13), 6 * 5 * 3);
    let syms: Vec<f64> = (0..3).flat_map(|i| symmetric(&mut Rng::seeded(20 + i), 5)).collect();
    agree(
        "gesvdjBatched/syevjBatched values",
        both(|d, s, h| {
            let (a, sv) = (d.upload(s, &mats).unwrap(), d.alloc_zeros::<f64>(s, 15).unwrap());
            let (u, v) = (d.alloc_zeros::<f64>(s, 36 * 3).unwrap(), d.alloc_zeros::<f64>(s, 25 * 3).unwrap());
            let j = GesvdjBatched {
                vectors: true,
                m: 6,
                n: 5,
                batch: 3,
                a: &a,
                lda: None,
                s: &sv,
                u: &u,
                ldu: None,
                v: &v,
                ldv: None,
            };
            h.solver().unwrap().gesvdj_batched(&j).unwrap().wait().unwrap();
            let mut out = f64s(s, &sv);
            let (a, w) = (d.upload(s, &syms).unwrap(), d.alloc_zeros::<f64>(s, 15).unwrap());
            let e = SyevjBatched { vectors: true, fill: Fill::Lower, n: 5, batch: 3, a: &a, lda: None, w: &w };
            h.solver().unwrap().syevj_batched(&e).unwrap().wait().unwrap();
            out.extend(f64s(s, &w));
            out
        }),
        1e-10,
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sparse_direct_solves_agree() {
    use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
    let n: usize = 40;
    let (mut offsets, mut indices, mut values) = (vec![0i32], vec![], vec![]);
    for r in 0..n {
        for c in r.saturating_sub(2)..(r + 3).min(n) {
            indices.push(c as i32);
            values.push(if r == c { 6.0 } else { -1.0 - 0.1 * (r + c) as f64 / n as f64 });
        }
        offsets.push(indices.len() as i32);
    }
    let b0 = random(&mut Rng::seeded(14), n);
    for reorder in [Reorder::None, Reorder::Symrcm] {
        agree(
            "csrlsvqr/csrlsvchol",
            both(|d, s, h| {
                let (o, i, v) =
                    (d.upload(s, &offsets).unwrap(), d.upload(s, &indices).unwrap(), d.upload(s, &values).unwrap());
                let (b, x) = (d.upload(s, &b0).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
                let sys = CsrSystem { n, nnz: values.len(), offsets: &o, indices: &i, values: &v };
                h.solver_sparse().unwrap().csrlsvqr(sys, &b, &x, 1e-12, reorder).unwrap().wait().unwrap();
                let mut out = f64s(s, &x);
                h.solver_sparse()
                    .unwrap()
                    .csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, reorder)
                    .unwrap()
                    .wait()
                    .unwrap();
                out.extend(f64s(s, &x));
                out
            }),
            1e-10,
        );
    }
}
