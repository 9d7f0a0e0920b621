//! Data-parallel training of two linear layers on two GPUs, one thread per GPU: each step runs
//! the forward and backward GEMMs on a `compute` lane and all-reduces (averages) each layer's
//! gradient on a `comm` lane as soon as it is ready, so that the second layer's gradient is
//! summed across GPUs while the first layer's backward still computes. The jobs declare their
//! buffers; the tracker fences each all-reduce after the GEMM that wrote its gradient and the
//! update after the all-reduce, with no event written by hand.
//!
//! `cargo run --release --example data_parallel --features nccl` uses GPUs 0 and 1 (NCCL on
//! the loader path: `. tools/cuda-libs-env`), or, without two GPUs, two simulated devices of
//! one `Device::sim_group`: there the GEMMs and the all-reduces compute on the host, on the
//! simulated streams, under the hazard checker. It checks that both replicas end equal and
//! that the loss went down.

use cusched::blas::{Gemm, Transpose, Vector};
use cusched::nccl::{CommConfig, Communicator, ReduceOp};
use cusched::{Device, GpuRef, Result, SimConfig};

/// Outputs and inputs of each layer, samples per GPU, steps, learning rate.
const M: usize = 32;
const K: usize = 64;
const B: usize = 16;
const STEPS: usize = 20;
const LR: f32 = 0.05;

fn failed(reason: impl Into<String>) -> cusched::Error {
    cusched::Error::InvalidArgument { arg: "result", reason: reason.into() }
}

fn devices() -> Result<(Vec<Device>, &'static str)> {
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    match (Device::open(0), Device::open(1)) {
        (Ok(a), Ok(b)) => Ok((vec![a, b], "GPUs 0 and 1")),
        _ => Ok((Device::sim_group(SimConfig::default(), 2)?, "two simulated devices (no two GPUs here)")),
    }
}

/// One layer's buffers on one GPU: weights, its batch's inputs and targets, and scratch.
struct Layer {
    w: GpuRef<f32>,
    x: GpuRef<f32>,
    t: GpuRef<f32>,
    y: GpuRef<f32>,
    dw: GpuRef<f32>,
}

fn layer(gpu: &Device, rank: usize, l: usize) -> Result<Layer> {
    let s = gpu.default_stream();
    let x: Vec<f32> = (0..K * B).map(|i| (((i * 7 + rank * 13 + l) % 17) as f32 - 8.0) / 8.0).collect();
    // Targets of a fixed true map, so that the loss can reach zero.
    let truth: Vec<f32> = (0..M * K).map(|i| (((i * 3 + l) % 11) as f32 - 5.0) / 20.0).collect();
    let t: Vec<f32> = (0..M * B)
        .map(|idx| {
            let (i, j) = (idx % M, idx / M);
            (0..K).map(|p| truth[i + p * M] * x[p + j * K]).sum()
        })
        .collect();
    Ok(Layer {
        w: gpu.alloc_zeros(s, M * K)?,
        x: gpu.upload(s, &x)?,
        t: gpu.upload(s, &t)?,
        y: gpu.alloc_zeros(s, M * B)?,
        dw: gpu.alloc_zeros(s, M * K)?,
    })
}

/// What a replica ends with: its layers' weights, its first and last loss.
type Trained = (Vec<Vec<f32>>, f32, f32);

/// The training loop of one GPU.
fn replica(gpu: &Device, comm: &Communicator) -> Result<Trained> {
    let (compute, comm_lane) = (gpu.lane("compute")?, gpu.lane("comm")?);
    let layers: Vec<Layer> = (0..2).map(|l| layer(gpu, comm.rank(), l)).collect::<Result<_>>()?;
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let mut reduced = Vec::new();
        // Backward from the last layer: its gradient is all-reduced while the first computes.
        for ly in layers.iter().rev() {
            let (w, x, t, y, dw) = (ly.w.clone(), ly.x.clone(), ly.t.clone(), ly.y.clone(), ly.dw.clone());
            let grad =
                compute.job().read(&ly.w).read(&ly.x).read(&ly.t).write(&ly.y).write(&ly.dw).submit(move |cx, _| {
                    // y = W·x - t (the loss's gradient in y), then dW = y·xᵀ / B.
                    y.copy_from(cx.stream(), &t)?;
                    cx.blas()?.gemm(&Gemm::new(M, B, K, &w, &x, &y).scale(1.0, -1.0))?;
                    cx.blas()?.gemm(
                        &Gemm::new(M, K, B, &y, &x, &dw)
                            .transpose(Transpose::No, Transpose::Yes)
                            .scale(1.0 / B as f32, 0.0),
                    )?;
                    cx.blas()?.dot(M * B, Vector::from(&y), Vector::from(&y))
                });
            let (c, dw) = (comm.clone(), ly.dw.clone());
            let avg = comm_lane
                .job()
                .read_write(&ly.dw)
                .submit(move |cx, _| cx.nccl()?.all_reduce_in_place(&c, &dw, ReduceOp::Avg));
            reduced.push((grad, avg));
        }
        let mut loss = 0.0;
        for (grad, avg) in reduced {
            loss += grad.wait()?.wait()? / (2 * M * B) as f32;
            avg.wait()?.wait()?;
        }
        losses.push(loss);
        for ly in &layers {
            let (w, dw) = (ly.w.clone(), ly.dw.clone());
            compute
                .job()
                .read(&ly.dw)
                .read_write(&ly.w)
                .submit(move |cx, _| cx.blas()?.axpy(M * K, -LR, Vector::from(&dw), Vector::from(&w)))
                .wait()?
                .wait()?;
        }
    }
    let weights = layers.iter().map(|l| l.w.download(gpu.default_stream())).collect::<Result<_>>()?;
    Ok((weights, losses[0], losses[STEPS - 1]))
}

fn main() -> Result<()> {
    let (gpus, what) = devices()?;
    println!("data-parallel training on {what}");
    let comms = Communicator::init_all(&gpus, &CommConfig::default())?;
    let results: Vec<Result<Trained>> = std::thread::scope(|s| {
        let threads: Vec<_> = gpus.iter().zip(&comms).map(|(g, c)| s.spawn(move || replica(g, c))).collect();
        threads.into_iter().map(|t| t.join().unwrap_or(Err(failed("a replica's thread panicked")))).collect()
    });
    let mut replicas = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        let (w, first, last) = r?;
        println!("rank {rank}: loss {first:.4} -> {last:.4}");
        if last >= first {
            return Err(failed(format!("rank {rank}'s loss did not go down")));
        }
        replicas.push(w);
    }
    if replicas[0] != replicas[1] {
        return Err(failed("the replicas' weights differ"));
    }
    if gpus[0].is_simulated() {
        let hazards = gpus[0].sim_hazards()?;
        println!("hazard checker: {} hazards", hazards.len());
        if !hazards.is_empty() {
            return Err(failed(format!("{hazards:?}")));
        }
    }
    println!("both replicas hold the same weights");
    Ok(())
}
