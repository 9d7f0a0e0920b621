//! cuSPARSE through cusched: a few conjugate-gradient iterations on the 2-D Laplacian (the
//! 5-point stencil on an `n x n` grid), with the matrix-vector products on the GPU (SpMV) and
//! the vector updates on the host. The residual norm falls with every iteration.
//!
//! `cargo run --release --example sparse --features cusparse` (needs a GPU with cuSPARSE).

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
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("this example needs a CUDA GPU ({e}); the quickstart example runs on the simulator");
            return Ok(());
        }
    };
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
    println!("iteration 0: |r| = {:.3e}", rr.sqrt());
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
        if it % 5 == 0 {
            println!("iteration {it}: |r| = {:.3e}", rr.sqrt());
        }
    }
    Ok(())
}
