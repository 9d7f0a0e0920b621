//! A two-layer MLP, forward and backward, with cuBLASLt's fused epilogues:
//!
//! - forward: `H = gelu(W1 X + b1)` (GELU_AUX_BIAS, keeping the pre-activation in an aux
//!   matrix), then `Y = W2 H + b2` (BIAS);
//! - backward, with `dY = Y` as a stand-in loss gradient: `dH = gelu'(pre) ⊙ W2ᵀ dY` and
//!   `db1 = Σ dH` (DGELU_BGRAD, reading the aux), `dW2ᵀ = H dYᵀ` and `db2 = Σ dY` (BGRADB),
//!   `dX = W1ᵀ dH`.
//!
//! Column-major, bf16 with f32 accumulation. `cargo run --release --example mlp_blaslt
//! --features cublaslt` runs on GPU 0, or on the CPU simulation when there is none (the
//! matmuls then compute on the host); either way every result is checked against a CPU
//! reference, and a wrong one fails the example.

use cusched::blas_lt::{Aux, Epilogue, Matmul, Transpose};
use cusched::half::bf16;
use cusched::{Device, Handles};

/// Column-major `m x n` `op(A) op(B)` in f64 (`a(i, p)` and `b(p, j)` give the operands).
fn reference(
    m: usize,
    n: usize,
    k: usize,
    a: impl Fn(usize, usize) -> f64,
    b: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            out[i + j * m] = (0..k).map(|p| a(i, p) * b(p, j)).sum();
        }
    }
    out
}

/// GELU (tanh approximation, as cuBLASLt's epilogue) and its derivative.
fn gelu(x: f64) -> (f64, f64) {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x * x * x)).tanh();
    (0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x))
}

/// Stores `v` as bf16, as the matmuls do.
fn round(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| bf16::from_f64(x).to_f64()).collect()
}

/// Fails unless `got` is within 2% of `want` (relative to `want`'s norm).
fn check(what: &str, got: &[bf16], want: &[f64]) -> Result<(), String> {
    let err: f64 = got.iter().zip(want).map(|(g, w)| (g.to_f64() - w).powi(2)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    if err > 2e-2 * norm.max(1e-3) {
        return Err(format!("{what} is off the reference by {err} (norm {norm})"));
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // CUDA device 0 if there is one, else the CPU simulation.
    let device = Device::open_or_sim()?;
    println!(
        "running on {}",
        if device.is_simulated() { "the simulated backend (matmuls computed on the CPU)" } else { "CUDA device 0" }
    );
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    let (inp, hid, out, batch) = (256usize, 512usize, 128usize, 64usize);
    let fill = |n: usize, seed: u32| -> Vec<bf16> {
        (0..n)
            .map(|i| bf16::from_f32((((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5))
            .collect()
    };
    let (hx, hw1, hb1, hw2, hb2) =
        (fill(inp * batch, 1), fill(hid * inp, 2), fill(hid, 3), fill(out * hid, 4), fill(out, 5));
    let x = device.upload(s, &hx)?; // inp x batch
    let w1 = device.upload(s, &hw1)?; // hid x inp
    let b1 = device.upload(s, &hb1)?;
    let w2 = device.upload(s, &hw2)?; // out x hid
    let b2 = device.upload(s, &hb2)?;
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

    let (gy, gdh, gdb1, gdw2, gdb2, gdx) =
        (y.download(s)?, dh.download(s)?, db1.download(s)?, dw2.download(s)?, db2.download(s)?, dx.download(s)?);
    let sum = |v: &[bf16]| v.iter().map(|x| x.to_f64()).sum::<f64>();
    println!(
        "y {:.4}  dh {:.4}  db1 {:.4}  dw2 {:.4}  db2 {:.4}  dx {:.4}  ({} plans, {} MiB workspace)",
        sum(&gy),
        sum(&gdh),
        sum(&gdb1),
        sum(&gdw2),
        sum(&gdb2),
        sum(&gdx),
        lt.plans_made(),
        lt.workspace_bytes() >> 20
    );

    // The CPU reference, stored as bf16 where the matmuls store.
    let f = |v: &[bf16]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let (fx, fw1, fb1, fw2, fb2) = (f(&hx), f(&hw1), f(&hb1), f(&hw2), f(&hb2));
    let z1 = reference(hid, batch, inp, |i, p| fw1[i + p * hid], |p, j| fx[p + j * inp]);
    let pre_f: Vec<f64> = (0..hid * batch).map(|ij| z1[ij] + fb1[ij % hid]).collect();
    let h_f = round(pre_f.iter().map(|&v| gelu(v).0).collect());
    let pre_f = round(pre_f);
    let z2 = reference(out, batch, hid, |i, p| fw2[i + p * out], |p, j| h_f[p + j * hid]);
    let y_f = round((0..out * batch).map(|ij| z2[ij] + fb2[ij % out]).collect());
    let g = reference(hid, batch, out, |i, p| fw2[p + i * out], |p, j| y_f[p + j * out]);
    let dh_exact: Vec<f64> = (0..hid * batch).map(|ij| g[ij] * gelu(pre_f[ij]).1).collect();
    let db1_f: Vec<f64> = (0..hid).map(|i| (0..batch).map(|j| dh_exact[i + j * hid]).sum()).collect();
    let dh_f = round(dh_exact);
    let dw2_f = reference(hid, out, batch, |i, p| h_f[i + p * hid], |p, j| y_f[j + p * out]);
    let db2_f: Vec<f64> = (0..out).map(|j| (0..batch).map(|p| y_f[j + p * out]).sum()).collect();
    let dx_f = reference(inp, batch, hid, |i, p| fw1[p + i * hid], |p, j| dh_f[p + j * hid]);
    check("y", &gy, &y_f)?;
    check("dh", &gdh, &dh_f)?;
    check("db1", &gdb1, &db1_f)?;
    check("dw2", &gdw2, &dw2_f)?;
    check("db2", &gdb2, &db2_f)?;
    check("dx", &gdx, &dx_f)?;
    println!("every result matches the CPU reference");
    Ok(())
}
