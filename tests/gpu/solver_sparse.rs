//! cuSOLVER's sparse direct solves on a real GPU: a known SPD system by QR and Cholesky in f32
//! and f64, and a singular system whose completion carries the singular row.

use crate::common::*;
use cusched::solver_sparse::{CsrSystem, Reorder, Stored};
use cusched::{Error, Handles, NumericalFailure};

/// The 1-D Laplacian `tridiag(-1, 2 + shift, -1)` of size `n` in CSR, with `zero_row` (if any)
/// left without entries.
fn laplacian(n: usize, shift: f64, zero_row: Option<usize>) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let (mut off, mut idx, mut val) = (vec![0i32], Vec::new(), Vec::new());
    for r in 0..n {
        if Some(r) != zero_row {
            for c in r.saturating_sub(1)..(r + 2).min(n) {
                idx.push(c as i32);
                val.push(if c == r { 2.0 + shift } else { -1.0 });
            }
        }
        off.push(idx.len() as i32);
    }
    (off, idx, val)
}

fn apply((off, idx, val): &(Vec<i32>, Vec<i32>, Vec<f64>), x: &[f64]) -> Vec<f64> {
    (0..off.len() - 1)
        .map(|r| (off[r]..off[r + 1]).map(|k| val[k as usize] * x[idx[k as usize] as usize]).sum())
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn qr_and_cholesky_solve_a_known_system_in_f32_and_f64() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let n = 200;
    let a = laplacian(n, 0.1, None);
    let x_true: Vec<f64> = (0..n).map(|_| rng.f32() as f64).collect();
    let b = apply(&a, &x_true);
    let (o, i) = (d.upload(s, &a.0).unwrap(), d.upload(s, &a.1).unwrap());
    let v64 = d.upload(s, &a.2).unwrap();
    let b64 = d.upload(s, &b).unwrap();
    let sys = CsrSystem { n, nnz: a.1.len(), offsets: &o, indices: &i, values: &v64 };
    for (name, chol) in [("qr", false), ("chol", true)] {
        let x = d.upload(s, &vec![f64::NAN; n]).unwrap();
        let solver = h.solver_sparse().unwrap();
        let done = if chol {
            solver.csrlsvchol(sys, Stored::Full, &b64, &x, 1e-12, Reorder::Symrcm)
        } else {
            solver.csrlsvqr(sys, &b64, &x, 1e-12, Reorder::None)
        };
        done.unwrap().wait().unwrap();
        for (k, (g, w)) in x.download(s).unwrap().iter().zip(&x_true).enumerate() {
            assert!((g - w).abs() < 1e-9, "f64 {name}: x[{k}] = {g}, want {w}");
        }
    }
    let v32 = d.upload(s, &a.2.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap();
    let b32 = d.upload(s, &b.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap();
    let x32 = d.upload(s, &vec![f32::NAN; n]).unwrap();
    let sys32 = CsrSystem { n, nnz: a.1.len(), offsets: &o, indices: &i, values: &v32 };
    h.solver_sparse().unwrap().csrlsvqr(sys32, &b32, &x32, 1e-6, Reorder::Symrcm).unwrap().wait().unwrap();
    for (k, (g, w)) in x32.download(s).unwrap().iter().zip(&x_true).enumerate() {
        assert!((*g as f64 - w).abs() < 1e-3, "f32 qr: x[{k}] = {g}, want {w}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_singular_system_fails_with_the_row() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let n = 16;
    let a = laplacian(n, 0.0, Some(7));
    let (o, i, v) = (d.upload(s, &a.0).unwrap(), d.upload(s, &a.1).unwrap(), d.upload(s, &a.2).unwrap());
    let (b, x) = (d.upload(s, &vec![1.0f64; n]).unwrap(), d.alloc_zeros::<f64>(s, n).unwrap());
    let sys = CsrSystem { n, nnz: a.1.len(), offsets: &o, indices: &i, values: &v };
    let err = h.solver_sparse().unwrap().csrlsvqr(sys, &b, &x, 1e-12, Reorder::None).unwrap().wait().unwrap_err();
    match err {
        Error::Numerical { op, batch: 1, ref failures }
            if matches!(failures[..], [NumericalFailure::SingularToTolerance { matrix: 0, .. }]) =>
        {
            let NumericalFailure::SingularToTolerance { row, .. } = failures[0] else { unreachable!() };
            assert_eq!(op, "cusolverSpDcsrlsvqr");
            assert!(row < n, "row {row}");
            println!("singular at row {row}");
        }
        other => panic!("expected a SingularToTolerance failure, got {other}"),
    }
    // The handle stays usable.
    let good = laplacian(n, 0.5, None);
    let (o, i, v) = (d.upload(s, &good.0).unwrap(), d.upload(s, &good.1).unwrap(), d.upload(s, &good.2).unwrap());
    let sys = CsrSystem { n, nnz: good.1.len(), offsets: &o, indices: &i, values: &v };
    h.solver_sparse().unwrap().csrlsvchol(sys, Stored::Full, &b, &x, 1e-12, Reorder::None).unwrap().wait().unwrap();
}

/// The raw handle is the live cuSOLVER sparse handle of the `SolverSparse`, bound to the stream it enqueues on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_cusolver_sp_handle_is_live_on_the_solver_sparse_stream() {
    use cusched::cudarc::cusolver::sys;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let lib = h.solver_sparse().unwrap();
    let raw = lib.cusolver_sp_handle().unwrap();
    let (status, got, want) = raw_launch(&d, cusched::LaunchRecorder::new_strict(lib.stream()), |stream| {
        let mut got: sys::cudaStream_t = std::ptr::null_mut();
        // SAFETY: 1. `raw` is the live handle of `lib`, which outlives the launch, and its
        // context is current (`raw_launch` binds it); 2. `got` is a valid out-pointer for one
        // stream; 3. the query enqueues nothing and touches no device memory, so the launch
        // declares no uses.
        let status = unsafe { sys::cusolverSpGetStream(raw, &mut got) };
        (status, got as usize, stream as usize)
    });
    assert_eq!(status, sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS);
    assert_ne!(want, 0, "the handles' stream is one of its own, not the legacy default stream");
    assert_eq!(got, want, "the raw handle is not bound to the stream of its SolverSparse");
}

/// A CSR matrix: offsets, column indices, values.
type Csr = (Vec<i32>, Vec<i32>, Vec<f64>);

/// A random sparse SPD matrix of size `n` (diagonally dominant), as the full symmetric CSR
/// and as its lower triangle only.
fn spd(n: usize, rng: &mut Rng) -> (Csr, Csr) {
    let mut dense = vec![0.0f64; n * n];
    for r in 0..n {
        for c in 0..r {
            // A band plus a few far entries, so the reorderings have something to move.
            if r - c <= 2 || rng.below(10) == 0 {
                let v = -(rng.f32() as f64) - 0.1;
                dense[r * n + c] = v;
                dense[c * n + r] = v;
            }
        }
    }
    for r in 0..n {
        let off: f64 = (0..n).filter(|&c| c != r).map(|c| dense[r * n + c].abs()).sum();
        dense[r * n + r] = off + 1.0;
    }
    let csr = |lower_only: bool| {
        let (mut off, mut idx, mut val) = (vec![0i32], Vec::new(), Vec::new());
        for r in 0..n {
            for c in 0..n {
                if dense[r * n + c] != 0.0 && (!lower_only || c <= r) {
                    idx.push(c as i32);
                    val.push(dense[r * n + c]);
                }
            }
            off.push(idx.len() as i32);
        }
        (off, idx, val)
    };
    (csr(false), csr(true))
}

/// Every storage (full, lower triangle only) with every reordering: the Cholesky solve is
/// right (residual ‖Ax − b‖ / (‖A‖ ‖x‖) near machine precision, with the full matrix) or the
/// combination is rejected before anything is recorded.
#[test]
#[ignore = "needs a CUDA GPU"]
fn cholesky_is_right_or_rejected_for_every_storage_and_reordering() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let n = 60;
    let (full, lower) = spd(n, &mut rng);
    let x_true: Vec<f64> = (0..n).map(|_| rng.f32() as f64 - 0.5).collect();
    let b = apply(&full, &x_true);
    let norm_a = full.2.iter().map(|v| v * v).sum::<f64>().sqrt();
    let b_dev = d.upload(s, &b).unwrap();
    let mut failures = Vec::new();
    for (storage, stored, m) in [("full", Stored::Full, &full), ("lower", Stored::Lower, &lower)] {
        let (o, i, v) = (d.upload(s, &m.0).unwrap(), d.upload(s, &m.1).unwrap(), d.upload(s, &m.2).unwrap());
        let sys = CsrSystem { n, nnz: m.1.len(), offsets: &o, indices: &i, values: &v };
        for reorder in [Reorder::None, Reorder::Symrcm, Reorder::Symamd, Reorder::Metis] {
            let x = d.upload(s, &vec![f64::NAN; n]).unwrap();
            let before = d.stats();
            match h.solver_sparse().unwrap().csrlsvchol(sys, stored, &b_dev, &x, 1e-12, reorder) {
                Err(Error::InvalidArgument { arg, .. }) if stored == Stored::Lower && reorder != Reorder::None => {
                    let after = d.stats();
                    assert_eq!(
                        (after.events, after.waits),
                        (before.events, before.waits),
                        "{storage} {reorder:?}: recorded"
                    );
                    println!("{storage} {reorder:?}: rejected (`{arg}`)");
                }
                Err(e) => failures.push(format!("{storage} {reorder:?}: {e}")),
                Ok(done) => {
                    done.wait().unwrap();
                    let got = x.download(s).unwrap();
                    let ax = apply(&full, &got);
                    let res = ax.iter().zip(&b).map(|(p, q)| (p - q) * (p - q)).sum::<f64>().sqrt();
                    let norm_x = got.iter().map(|v| v * v).sum::<f64>().sqrt();
                    let rel = res / (norm_a * norm_x);
                    println!("{storage} {reorder:?}: relative residual {rel:.2e}");
                    if rel.is_nan() || rel >= 1e-12 {
                        failures.push(format!("{storage} {reorder:?}: relative residual {rel:.2e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every element type (`f32`, `f64`, `Complex<f32>`, `Complex<f64>`), every storage and every
/// reordering, at odd orders: QR solves a general and a Hermitian system and Cholesky the
/// Hermitian positive definite one to the type's precision, and a lower triangle with a
/// reordering is rejected before anything is recorded.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_type_storage_and_reordering_solves_or_is_rejected() {
    use crate::common::reference::solver_sparse::check_every_type;
    use cusched::Complex;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut rng = Rng::new();
    let mut failures = Vec::new();
    for n in [1, 7, 61] {
        failures.extend(check_every_type::<f32>(&d, s, &mut h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<f64>(&d, s, &mut h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<Complex<f32>>(&d, s, &mut h, &mut rng, n, 1e3));
        failures.extend(check_every_type::<Complex<f64>>(&d, s, &mut h, &mut rng, n, 1e3));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A complex system with a zero row fails with the row, naming the complex call, and the
/// handle stays usable for a complex Cholesky solve after it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_singular_complex_system_fails_with_the_row() {
    use cusched::Complex;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let n = 9;
    let a = laplacian(n, 0.5, Some(4));
    let cv: Vec<Complex<f32>> = a.2.iter().map(|&v| Complex::new(v as f32, 0.0)).collect();
    let (o, i, v) = (d.upload(s, &a.0).unwrap(), d.upload(s, &a.1).unwrap(), d.upload(s, &cv).unwrap());
    let b = d.upload(s, &vec![Complex::new(1.0f32, -1.0); n]).unwrap();
    let x = d.alloc_zeros::<Complex<f32>>(s, n).unwrap();
    let sys = CsrSystem { n, nnz: a.1.len(), offsets: &o, indices: &i, values: &v };
    match h.solver_sparse().unwrap().csrlsvqr(sys, &b, &x, 1e-6, Reorder::None).unwrap().wait() {
        Err(Error::Numerical { op, batch: 1, ref failures })
            if matches!(failures[..], [NumericalFailure::SingularToTolerance { matrix: 0, .. }]) =>
        {
            assert_eq!(op, "cusolverSpCcsrlsvqr");
            println!("singular: {failures:?}");
        }
        other => panic!("expected a SingularToTolerance failure, got {other:?}"),
    }
    let good = laplacian(n, 0.5, None);
    let cv: Vec<Complex<f32>> = good.2.iter().map(|&v| Complex::new(v as f32, 0.0)).collect();
    let (o, i, v) = (d.upload(s, &good.0).unwrap(), d.upload(s, &good.1).unwrap(), d.upload(s, &cv).unwrap());
    let sys = CsrSystem { n, nnz: good.1.len(), offsets: &o, indices: &i, values: &v };
    h.solver_sparse().unwrap().csrlsvchol(sys, Stored::Full, &b, &x, 1e-6, Reorder::Symamd).unwrap().wait().unwrap();
}
