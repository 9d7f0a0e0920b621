//! cuTENSOR through cusched: attention scores `S = Q·Kᵀ / √d` for every batch and head as one
//! contraction in Einstein notation, then each query's largest score (the max a softmax
//! subtracts) as a reduction, both on a lane, checked on the CPU.
//!
//! `cargo run --release --example tensor --features cutensor` uses GPU 0 (with libcutensor.so.2
//! reachable as libcutensor.so on LD_LIBRARY_PATH; see tools/carry-cutensor), or the CPU
//! simulation when there is no GPU: there the ops compute on the host, and the checks are the
//! same.

use cusched::tensor::{BinaryOp, Contraction, Reduction, TensorRef};
use cusched::{Device, Error};

fn main() -> cusched::Result<()> {
    let device = Device::open_or_sim()?;
    if device.is_simulated() {
        println!("no CUDA GPU: running on the simulated backend (cuTENSOR's ops computed on the CPU)");
    }
    let (b, h, q, k, d) = (2usize, 4usize, 64usize, 80usize, 32usize);
    let s = device.new_stream()?;
    let queries: Vec<f32> = (0..b * h * q * d).map(|i| ((i * 7 % 23) as f32 - 11.0) / 16.0).collect();
    let keys: Vec<f32> = (0..b * h * k * d).map(|i| ((i * 5 % 19) as f32 - 9.0) / 16.0).collect();
    let (dq, dk) = (device.upload(s, &queries)?, device.upload(s, &keys)?);
    let (scores, row_max) = (device.alloc_zeros::<f32>(s, b * h * q * k)?, device.alloc_zeros::<f32>(s, b * h * q)?);

    let lane = device.lane("attention")?;
    let (dq2, dk2, ds2, dm2) = (dq.clone(), dk.clone(), scores.clone(), row_max.clone());
    let done = lane
        .submit(move |cx| {
            let scale = 1.0 / (d as f64).sqrt();
            let qk = Contraction::new(
                "bhqd,bhkd->bhqk",
                TensorRef::new(&dq2, &[b, h, q, d]),
                TensorRef::new(&dk2, &[b, h, k, d]),
                TensorRef::new(&ds2, &[b, h, q, k]),
            )
            .alpha(scale);
            cx.tensor()?.contract(&qk)?;
            let max =
                Reduction::new("bhqk->bhq", TensorRef::new(&ds2, &[b, h, q, k]), TensorRef::new(&dm2, &[b, h, q]))
                    .fold(BinaryOp::Max);
            cx.tensor()?.reduce(&max)
        })
        .wait();
    match done {
        Err(e @ Error::LibraryUnavailable { .. }) => {
            println!("LibraryUnavailable: {e}");
            println!("(tools/carry-cutensor carries libcutensor.so.2 to a machine without it)");
            return Ok(());
        }
        other => other?.wait()?,
    }

    let (got, got_max) = (scores.download(s)?, row_max.download(s)?);
    let mut worst = 0.0f64;
    let mut worst_max = 0.0f64;
    for bh in 0..b * h {
        for i in 0..q {
            let mut m = f64::MIN;
            for j in 0..k {
                let dot: f64 = (0..d)
                    .map(|x| queries[(bh * q + i) * d + x] as f64 * keys[(bh * k + j) * d + x] as f64)
                    .sum::<f64>()
                    / (d as f64).sqrt();
                m = m.max(dot);
                worst = worst.max((got[(bh * q + i) * k + j] as f64 - dot).abs());
            }
            worst_max = worst_max.max((got_max[bh * q + i] as f64 - m).abs());
        }
    }
    println!("attention scores bhqd,bhkd->bhqk (b={b} h={h} q={q} k={k} d={d}): largest error {worst:.2e}");
    println!("row maxima bhqk->bhq: largest error {worst_max:.2e}");
    if worst > 1e-4 || worst_max > 1e-4 {
        return Err(Error::InvalidArgument {
            arg: "result",
            reason: format!("largest errors {worst:.2e} (scores) and {worst_max:.2e} (maxima) exceed 1e-4"),
        });
    }
    Ok(())
}
