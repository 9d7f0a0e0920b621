//! cuSOLVER through cusched: a least-squares fit (QR with `geqrf`, `Qᵀb` with `ormqr`, then the
//! 3x3 triangular solve `R x = (Qᵀb)[..n]` on the host) and a symmetric eigen decomposition
//! (`syevd`), both checked on the CPU; the example exits with an error when a check fails.
//!
//! `cargo run --release --features cusolver --example solve`: on a GPU with cuSOLVER, or on the
//! simulator (which computes the same ops on the CPU) when there is none.

use cusched::solver::{Fill, Geqrf, Ormqr, Side, Syevd, Trans};
use cusched::{Device, Handles};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::open_or_sim()?;
    println!("running on {}", if device.is_simulated() { "the simulated backend (CPU)" } else { "CUDA device 0" });
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;

    // Least squares: fit y = c0 + c1 t + c2 t² to m noisy samples. A is m x 3, column-major.
    let (m, n) = (200usize, 3usize);
    let truth = [0.5f64, -1.25, 2.0];
    let t: Vec<f64> = (0..m).map(|i| i as f64 / m as f64).collect();
    let mut a = vec![0.0f64; m * n];
    for (i, &ti) in t.iter().enumerate() {
        a[i] = 1.0;
        a[i + m] = ti;
        a[i + 2 * m] = ti * ti;
    }
    // A small deterministic wiggle stands in for noise.
    let y: Vec<f64> = t
        .iter()
        .enumerate()
        .map(|(i, &ti)| truth[0] + truth[1] * ti + truth[2] * ti * ti + 1e-3 * ((i * 7 % 11) as f64 - 5.0))
        .collect();
    let (da, dy, tau) = (device.upload(s, &a)?, device.upload(s, &y)?, device.alloc_zeros::<f64>(s, n)?);
    h.solver()?.geqrf(&Geqrf { m, n, a: &da, lda: None, tau: &tau })?;
    // y := Qᵀ y; its first n entries are R x's right-hand side.
    let ormqr =
        Ormqr { side: Side::Left, trans: Trans::Yes, m, n: 1, k: n, a: &da, lda: None, tau: &tau, c: &dy, ldc: None };
    h.solver()?.ormqr(&ormqr)?.wait()?;
    // R is the upper triangle of the factored A (leading dimension m): back substitution.
    let (r, qty) = (da.download(s)?, dy.download(s)?);
    let mut x = [0.0f64; 3];
    for i in (0..n).rev() {
        let tail: f64 = (i + 1..n).map(|j| r[i + j * m] * x[j]).sum();
        x[i] = (qty[i] - tail) / r[i + i * m];
    }
    println!("least squares fit of {m} samples: x = {x:.4?} (generated with {truth:?})");

    // Symmetric eigen decomposition of the 1-D Laplacian, whose eigenvalues are known:
    // 2 - 2 cos(k π / (n + 1)).
    let n = 64usize;
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        l[i + i * n] = 2.0;
        if i + 1 < n {
            l[i + 1 + i * n] = -1.0;
            l[i + (i + 1) * n] = -1.0;
        }
    }
    let (dl, w) = (device.upload(s, &l)?, device.alloc_zeros::<f64>(s, n)?);
    h.solver()?.syevd(&Syevd { vectors: true, fill: Fill::Lower, n, a: &dl, lda: None, w: &w })?.wait()?;
    let (w, v) = (w.download(s)?, dl.download(s)?);
    let mut worst_value = 0.0f64;
    for (k, &wk) in w.iter().enumerate() {
        let want = 2.0 - 2.0 * ((k + 1) as f64 * std::f64::consts::PI / (n + 1) as f64).cos();
        worst_value = worst_value.max((wk - want).abs());
    }
    // ‖L v − λ v‖ for every eigenvector (column k of v).
    let mut worst_residual = 0.0f64;
    for k in 0..n {
        let col = &v[k * n..(k + 1) * n];
        for i in 0..n {
            let lv: f64 = (0..n).map(|j| l[i + j * n] * col[j]).sum();
            worst_residual = worst_residual.max((lv - w[k] * col[i]).abs());
        }
    }
    println!(
        "eigenvalues of the {n}x{n} Laplacian: largest error {worst_value:.2e}, largest |Lv - λv| {worst_residual:.2e}"
    );
    // The wiggle is 1e-3 at most: the fit is within a few 1e-3 of the truth.
    let fit_error = x.iter().zip(&truth).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    if fit_error > 1e-2 || worst_value > 1e-10 || worst_residual > 1e-10 {
        return Err(format!(
            "wrong result: fit error {fit_error:.2e}, eigenvalue error {worst_value:.2e}, residual {worst_residual:.2e}"
        )
        .into());
    }
    println!("results checked");
    Ok(())
}
