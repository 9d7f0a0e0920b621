//! cuFFT through cusched: a batched real-to-complex transform, the peak frequency of each
//! signal, and the inverse back to the input.
//!
//! `cargo run --release --example fft` (needs a GPU with cuFFT).

use cusched::fft::FftLayout;
use cusched::{Complex, Device, Handles};

fn main() -> cusched::Result<()> {
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("this example needs a CUDA GPU ({e}); the quickstart example runs on the simulator");
            return Ok(());
        }
    };
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
    }
    let restored = back.download(s)?;
    let worst = restored.iter().zip(&signal).map(|(r, x)| (r / n as f32 - x).abs()).fold(0.0f32, f32::max);
    println!("inverse transform: largest error {worst:.2e}; {} plan(s) made", h.fft()?.plans_made());
    Ok(())
}
