//! cuSPARSE through cusched: a few conjugate-gradient iterations on the 2-D Laplacian (the
//! 5-point stencil on an `n x n` grid), with the matrix-vector products on the device (SpMV)
//! and the vector updates on the host. The energy `x^T A x / 2 - b^T x` (which CG minimizes
//! over growing subspaces) falls with every iteration, and at the end the true residual
//! `b - A x`, from one more SpMV, is checked against the residual the iteration carried.
//!
//! `cargo run --release --example sparse --features cusparse` uses GPU 0 with cuSPARSE, or the
//! CPU simulation when there is none (which computes the SpMV on the host).

use cusched::sparse::{SparseMatrix, Transpose};
use cusched::{Device, Handles};

/// The 5-point Laplacian on an `n x n` grid, in CSR.
fn laplacian_2d(n: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let (mut off, mut idx, mut val) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..n {
        for j in 0..n {
            let mut push = |r: usize, c: usize, v: f64| {
                idx.push((r * n + c) as i32);
                val.push(v);
            };
            if i > 0 {
                push(i - 1, j, -1.0);
            }
            if j > 0 {
                push(i, j - 1, -1.0);
            }
            push(i, j, 4.0);
            if j + 1 < n {
                push(i, j + 1, -1.0);
            }
            if i + 1 < n {
                push(i + 1, j, -1.0);
            }
            off.push(idx.len() as i32);
        }
    }
    (off, idx, val)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() -> cusched::Result<()> {
    let device = Device::open_or_sim()?;
    if device.is_simulated() {
        println!("no CUDA GPU: running on the simulated backend (cuSPARSE ops computed on the CPU)");
    }
    let n = 64;
    let rows = n * n;
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    let (off, idx, val) = laplacian_2d(n);
    let a = SparseMatrix::csr(
        rows,
        rows,
        idx.len(),
        &device.upload(s, &off)?,
        &device.upload(s, &idx)?,
        &device.upload(s, &val)?,
    )?;
    a.check(s)?;

    // Solve A x = b for b = all ones, from x = 0.
    let b = vec![1.0f64; rows];
    let mut x = vec![0.0f64; rows];
    let mut r = b.clone();
    let mut p = r.clone();
    let mut rr = dot(&r, &r);
    let (dp, dap) = (device.upload(s, &p)?, device.alloc_zeros::<f64>(s, rows)?);
    println!("CG on the {n}x{n} 2-D Laplacian ({rows} rows, {} nonzeros)", idx.len());
    let r0 = rr.sqrt();
    println!("iteration 0: |r| = {r0:.3e}");
    // The energy of x, from the residual r = b - A x: x^T (b - r) / 2 - b^T x.
    let energy = |x: &[f64], r: &[f64]| -0.5 * (dot(x, &b) + dot(x, r));
    let (mut last, mut falls) = (0.0, true);
    for it in 1..=20 {
        dp.copy_from_slice(s, &p)?;
        h.sparse()?.spmv(Transpose::No, 1.0, &a, &dp, 0.0, &dap)?.wait()?;
        let ap = dap.download(s)?;
        let alpha = rr / dot(&p, &ap);
        for k in 0..rows {
            x[k] += alpha * p[k];
            r[k] -= alpha * ap[k];
        }
        let rr_new = dot(&r, &r);
        for k in 0..rows {
            p[k] = r[k] + rr_new / rr * p[k];
        }
        rr = rr_new;
        let e = energy(&x, &r);
        falls &= e < last;
        last = e;
        if it % 5 == 0 {
            println!("iteration {it}: |r| = {:.3e}, energy {last:.6e}", rr.sqrt());
        }
    }

    // The check: b - A x, with A x from one more SpMV, is the residual the iteration carried.
    dp.copy_from_slice(s, &x)?;
    h.sparse()?.spmv(Transpose::No, -1.0, &a, &dp, 0.0, &dap)?.wait()?;
    let true_r: Vec<f64> = dap.download(s)?.iter().zip(&b).map(|(ax, bk)| bk + ax).collect();
    let gap = true_r.iter().zip(&r).map(|(t, k)| (t - k).abs()).fold(0.0, f64::max);
    let end = rr.sqrt();
    println!(
        "|b - A x| = {:.3e} (the recurrence's |r| = {end:.3e}, largest gap {gap:.1e})",
        dot(&true_r, &true_r).sqrt()
    );
    if !falls || gap > 1e-9 * r0 {
        eprintln!("wrong result: the energy fell every iteration: {falls}; the true residual is {gap:.1e} off");
        std::process::exit(1);
    }
    println!("ok");
    Ok(())
}
