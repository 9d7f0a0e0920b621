//! cuBLAS through cusched: a GEMM on a lane and a dot product whose scalar comes back through
//! the completion, checked on the CPU.
//!
//! `cargo run --release --example gemm` uses GPU 0, or the CPU simulation when there is none:
//! there cuBLAS's ops compute on the host, on the simulated streams, under the same checks.

use cusched::blas::{Gemm, Transpose, Vector};
use cusched::Device;

fn main() -> cusched::Result<()> {
    // CUDA device 0 if there is one, else the CPU simulation.
    let device = Device::open_or_sim()?;
    let backend =
        if device.is_simulated() { "the CPU simulation (cuBLAS computed on the host)" } else { "CUDA device 0" };
    println!("running on {backend}");
    let (m, n, k) = (256, 128, 512);
    let s = device.new_stream()?;
    // Column-major, as in cuBLAS: A is m x k, B is n x k (used transposed), C is m x n.
    let a: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    let b: Vec<f32> = (0..n * k).map(|i| ((i % 7) as f32 - 3.0) / 4.0).collect();
    let (da, db, dc) = (device.upload(s, &a)?, device.upload(s, &b)?, device.alloc_zeros::<f32>(s, m * n)?);

    let lane = device.lane("blas")?;
    let (da2, db2, dc2) = (da.clone(), db.clone(), dc.clone());
    let dot = lane
        .submit(move |cx| {
            // C = A · Bᵀ
            cx.blas()?.gemm(&Gemm::new(m, n, k, &da2, &db2, &dc2).transpose(Transpose::No, Transpose::Yes))?;
            // The sum of C's first column, as a dot product with itself's scale: cᵀc.
            cx.blas()?.dot(m, Vector::from(&dc2), Vector::from(&dc2))
        })
        .wait()?;
    let c = dc.download(s)?;
    let mut worst = 0.0f64;
    for j in 0..n {
        for i in 0..m {
            let want: f64 = (0..k).map(|l| a[i + l * m] as f64 * b[j + l * n] as f64).sum();
            worst = worst.max((c[i + j * m] as f64 - want).abs());
        }
    }
    let ctc = dot.wait()?;
    let want_ctc: f64 = c[..m].iter().map(|&x| x as f64 * x as f64).sum();
    println!("C = A·Bᵀ ({m}x{n}, k = {k}): largest error {worst:.2e}");
    println!("first column's cᵀc from the device {ctc:.4}, on the CPU {want_ctc:.4}");
    // f32 products of k = 512 terms of magnitude below one: a few ulps of the sums.
    let ctc_off = (ctc as f64 - want_ctc).abs() / want_ctc.max(1.0);
    if worst > 1e-3 || ctc_off > 1e-5 {
        return Err(cusched::Error::InvalidArgument {
            arg: "result",
            reason: format!("wrong result: GEMM error {worst:.2e}, cᵀc relative error {ctc_off:.2e}"),
        });
    }
    println!("results check out");
    Ok(())
}
