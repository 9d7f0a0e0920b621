//! A two-layer MLP, forward and backward, with cuBLASLt's fused epilogues:
//!
//! - forward: `H = gelu(W1 X + b1)` (GELU_AUX_BIAS, keeping the pre-activation in an aux
//!   matrix), then `Y = W2 H + b2` (BIAS);
//! - backward, with `dY = Y` as a stand-in loss gradient: `dH = gelu'(pre) ⊙ W2ᵀ dY` and
//!   `db1 = Σ dH` (DGELU_BGRAD, reading the aux), `dW2ᵀ = H dYᵀ` and `db2 = Σ dY` (BGRADB),
//!   `dX = W1ᵀ dH`.
//!
//! Column-major, bf16 with f32 accumulation. `cargo run --release --example mlp_blaslt
//! --features cublaslt` (needs a GPU; without one it says so and exits cleanly).

use cusched::blas_lt::{Aux, Epilogue, Matmul, Transpose};
use cusched::half::bf16;
use cusched::{Device, Handles};

fn main() -> cusched::Result<()> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("this example needs a CUDA GPU ({e}); the quickstart example runs on the simulator");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    let (inp, hid, out, batch) = (256usize, 512usize, 128usize, 64usize);
    let fill = |n: usize, seed: u32| -> Vec<bf16> {
        (0..n)
            .map(|i| bf16::from_f32((((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5))
            .collect()
    };
    let x = device.upload(s, &fill(inp * batch, 1))?; // inp x batch
    let w1 = device.upload(s, &fill(hid * inp, 2))?; // hid x inp
    let b1 = device.upload(s, &fill(hid, 3))?;
    let w2 = device.upload(s, &fill(out * hid, 4))?; // out x hid
    let b2 = device.upload(s, &fill(out, 5))?;
    let hidden = device.alloc::<bf16>(s, hid * batch)?;
    let pre = device.alloc::<bf16>(s, hid * batch)?; // GELU's input, for the backward pass
    let y = device.alloc::<bf16>(s, out * batch)?;

    // Forward.
    let lt = h.blas_lt()?;
    let aux = Aux { buf: &pre, ld: None };
    lt.matmul(&Matmul::new(hid, batch, inp, &w1, &x, &hidden).epilogue(Epilogue::GeluAuxBias { bias: &b1, aux }))?;
    lt.matmul(&Matmul::new(out, batch, hid, &w2, &hidden, &y).epilogue(Epilogue::Bias(&b2)))?;

    // Backward, with dY = Y (a stand-in loss gradient).
    let dy = &y;
    let dh = device.alloc::<bf16>(s, hid * batch)?;
    let db1 = device.alloc::<bf16>(s, hid)?;
    let dw2 = device.alloc::<bf16>(s, out * hid)?;
    let db2 = device.alloc::<bf16>(s, out)?;
    // dH = gelu'(pre) ⊙ (W2ᵀ dY), and db1 = Σ_batch dH.
    lt.matmul(
        &Matmul::new(hid, batch, out, &w2, dy, &dh)
            .transpose(Transpose::Yes, Transpose::No)
            .epilogue(Epilogue::DGeluBgrad { aux, bias_grad: &db1 }),
    )?;
    // dW2ᵀ (hid x out) = H dYᵀ, and db2 = Σ_batch dY: op(B) = dYᵀ summed over k = batch.
    lt.matmul(
        &Matmul::new(hid, out, batch, &hidden, dy, &dw2)
            .transpose(Transpose::No, Transpose::Yes)
            .epilogue(Epilogue::BgradB(&db2)),
    )?;
    // dX = W1ᵀ dH.
    let dx = device.alloc::<bf16>(s, inp * batch)?;
    let done = lt.matmul(&Matmul::new(inp, batch, hid, &w1, &dh, &dx).transpose(Transpose::Yes, Transpose::No))?;
    done.wait()?;

    let sum = |v: Vec<bf16>| v.iter().map(|x| x.to_f64()).sum::<f64>();
    println!(
        "y {:.4}  dh {:.4}  db1 {:.4}  dw2 {:.4}  db2 {:.4}  dx {:.4}  ({} plans, {} MiB workspace)",
        sum(y.download(s)?),
        sum(dh.download(s)?),
        sum(db1.download(s)?),
        sum(dw2.download(s)?),
        sum(db2.download(s)?),
        sum(dx.download(s)?),
        lt.plans_made(),
        lt.workspace_bytes() >> 20
    );
    Ok(())
}
