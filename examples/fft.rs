//! cuFFT through cusched: a batched real-to-complex transform, the peak frequency of each
//! signal, and the inverse back to the input.
//!
//! `cargo run --release --example fft` uses GPU 0, or the CPU simulation when there is none
//! (and says so), where cuFFT's transforms are computed on the host. It checks its results and
//! times one 2^20-point complex transform.

use cusched::fft::{Direction, FftLayout};
use cusched::{Complex, Device, Error, Handles};
use std::time::Instant;

fn main() -> cusched::Result<()> {
    let device = Device::open_or_sim()?;
    println!("running on the {} backend", if device.is_simulated() { "simulated (CPU)" } else { "CUDA" });
    let (n, batch) = (4096, 8);
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    // Signal b is a cosine of frequency 10 * (b + 1) plus a little of frequency 3.
    let signal: Vec<f32> = (0..batch)
        .flat_map(|b| {
            (0..n).map(move |t| {
                let x = t as f32 / n as f32 * std::f32::consts::TAU;
                (x * 10.0 * (b + 1) as f32).cos() + 0.1 * (x * 3.0).cos()
            })
        })
        .collect();
    let layout = FftLayout::d1(n).batched(batch);
    let bins = n / 2 + 1;
    let input = device.upload(s, &signal)?;
    let spectrum = device.alloc_zeros::<Complex<f32>>(s, bins * batch)?;
    let back = device.alloc_zeros::<f32>(s, n * batch)?;
    h.fft()?.r2c(&layout, &input, &spectrum)?;
    h.fft()?.c2r(&layout, &spectrum.clone(), &back)?.wait()?;
    // c2r overwrote `spectrum` (cuFFT does that), so the peaks come from a second forward pass.
    h.fft()?.r2c(&layout, &input, &spectrum)?.wait()?;
    let spec = spectrum.download(s)?;
    for b in 0..batch {
        let row = &spec[b * bins..(b + 1) * bins];
        let peak =
            (0..bins).max_by(|&i, &j| row[i].re.hypot(row[i].im).total_cmp(&row[j].re.hypot(row[j].im))).unwrap_or(0);
        println!("signal {b}: peak at frequency {peak} (expected {})", 10 * (b + 1));
        if peak != 10 * (b + 1) {
            return Err(wrong(format!("signal {b} peaks at {peak}")));
        }
    }
    let restored = back.download(s)?;
    let worst = restored.iter().zip(&signal).map(|(r, x)| (r / n as f32 - x).abs()).fold(0.0f32, f32::max);
    println!("inverse transform: largest error {worst:.2e}; {} plan(s) made", h.fft()?.plans_made());
    if worst > 1e-4 {
        return Err(wrong(format!("the inverse is off by {worst:.2e}")));
    }

    // One 2^20-point complex transform, timed from enqueue to completion.
    let big = 1 << 20;
    let x: Vec<Complex<f32>> = (0..big).map(|i| Complex::new((i % 17) as f32 - 8.0, 0.0)).collect();
    let (a, b) = (device.upload(s, &x)?, device.alloc_zeros::<Complex<f32>>(s, big)?);
    h.fft()?.c2c(&FftLayout::d1(big), &a, &b, Direction::Forward)?.wait()?;
    let start = Instant::now();
    h.fft()?.c2c(&FftLayout::d1(big), &a, &b, Direction::Forward)?.wait()?;
    println!("a 2^20-point c2c transform took {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    let dc = b.download(s)?[0].re as f64;
    let sum: f64 = x.iter().map(|v| v.re as f64).sum();
    if (dc - sum).abs() > 1e-3 * big as f64 {
        return Err(wrong(format!("the 2^20-point DC bin is {dc}, the sum {sum}")));
    }
    println!("all results check out");
    Ok(())
}

fn wrong(what: String) -> Error {
    Error::InvalidArgument { arg: "result", reason: what }
}
