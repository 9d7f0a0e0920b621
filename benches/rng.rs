//! cuRAND draws: cusched's `Rng` against raw cuRAND (cudarc's `curand::sys`) on streams of the
//! same device, side by side in one run (alternating, medians of several repetitions).
//!
//! A cusched draw names its generator, seed and offset (the same `Seed` always gives the same
//! numbers): its generator is set to them, unless the handle's last draw ended there and the
//! draw continues exactly (see the `rng` module). A pseudo-random generator set to a new seed
//! or offset sets up its state at its next draw, which synchronizes the device. So both are
//! timed two ways: `continuing`, each draw at the offset where the last one ended, and
//! `re-seeded`, each draw at a new seed (cusched) or with seed and offset set before it (raw).
//!
//! 1. Host time per draw of 1,024 `f32` uniforms, back to back, for Philox4x32-10, XORWOW and
//!    Sobol32 (one synchronize at the end).
//! 2. The host time of one draw made while a 20 ms kernel runs on another stream of the device:
//!    a draw whose set-up synchronizes the device waits for that kernel.
//! 3. 64 Mi `f32` uniforms (Philox): the generator's own throughput through both.
//!
//! `bench-rng` needs a GPU (and NVRTC for the long kernel).

mod common;

use common::*;
use cusched::cudarc::curand::sys;
use cusched::cudarc::driver::{CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use cusched::rng::{Generator, Seed};
use cusched::{Device, Handles};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const REPS: usize = 7;
const SMALL: usize = 1024;
const BIG: usize = 64 << 20;
const SEED: u64 = 1234;

/// Spins for `cycles` clock ticks: the long kernel of row 2.
const SPIN_SRC: &str = r#"
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"#;

/// About 20 ms at 2 GHz.
const SPIN_CYCLES: i64 = 40_000_000;

fn check(r: sys::curandStatus_t, call: &str) -> Res<()> {
    if r == sys::curandStatus_t::CURAND_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {r:?}").into())
    }
}

fn raw_kind(g: Generator) -> sys::curandRngType_t {
    use sys::curandRngType_t as T;
    match g {
        Generator::Philox4x32_10 => T::CURAND_RNG_PSEUDO_PHILOX4_32_10,
        Generator::Sobol32 => T::CURAND_RNG_QUASI_SOBOL32,
        _ => T::CURAND_RNG_PSEUDO_XORWOW,
    }
}

/// A raw cuRAND generator on a raw stream, with a buffer to draw into.
struct Raw {
    g: sys::curandGenerator_t,
    quasi: bool,
    stream: Arc<CudaStream>,
    out: cusched::cudarc::driver::CudaSlice<f32>,
}

impl Raw {
    fn new(stream: Arc<CudaStream>, kind: Generator, n: usize) -> Res<Raw> {
        stream.context().bind_to_thread()?;
        let out = stream.alloc_zeros::<f32>(n)?;
        let mut g = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        check(unsafe { sys::curandCreateGenerator(&mut g, raw_kind(kind)) }, "curandCreateGenerator")?;
        // SAFETY: a live generator and a live stream of the current context, which outlives it.
        check(unsafe { sys::curandSetStream(g, stream.cu_stream() as _) }, "curandSetStream")?;
        if kind == Generator::Philox4x32_10 {
            let order = sys::curandOrdering_t::CURAND_ORDERING_PSEUDO_LEGACY;
            // SAFETY: a live generator, not yet used.
            check(unsafe { sys::curandSetGeneratorOrdering(g, order) }, "curandSetGeneratorOrdering")?;
        }
        let raw = Raw { g, quasi: kind == Generator::Sobol32, stream, out };
        raw.reset(0)?;
        Ok(raw)
    }

    /// Seed (or dimensions) and offset, as a cusched draw sets them.
    fn reset(&self, offset: u64) -> Res<()> {
        // SAFETY: a live generator used by this thread only.
        unsafe {
            if self.quasi {
                check(sys::curandSetQuasiRandomGeneratorDimensions(self.g, 1), "dimensions")?;
            } else {
                check(sys::curandSetPseudoRandomGeneratorSeed(self.g, SEED), "seed")?;
            }
            check(sys::curandSetGeneratorOffset(self.g, offset), "offset")
        }
    }

    /// One draw of `n` uniforms into the buffer's start.
    fn draw(&self, n: usize) -> Res<()> {
        let (p, _sync) = self.out.device_ptr(&self.stream);
        // SAFETY: `p` holds at least `n` floats of this context, used only by this generator on
        // its stream.
        check(unsafe { sys::curandGenerateUniform(self.g, p as *mut f32, n) }, "curandGenerateUniform")
    }

    /// Seconds per draw of `n`, `iters` back to back then a synchronize; `reseed`: seed and
    /// offset set before each draw.
    fn time(&self, n: usize, iters: usize, reseed: bool) -> Res<f64> {
        self.stream.context().bind_to_thread()?;
        let t = Instant::now();
        for i in 0..iters {
            if reseed {
                self.reset((i * n) as u64)?;
            }
            self.draw(n)?;
        }
        self.stream.synchronize()?;
        Ok(t.elapsed().as_secs_f64() / iters as f64)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        // SAFETY: a live generator with nothing pending (its stream is synchronized).
        unsafe { sys::curandDestroyGenerator(self.g) };
    }
}

/// Seconds per cusched draw of `n`, `iters` back to back then a wait: each at the next offset
/// (`continuing`), or each at a new seed.
fn ours(h: &mut Handles, kind: Generator, out: &cusched::GpuRef<f32>, iters: usize, continuing: bool) -> Res<f64> {
    let t = Instant::now();
    let mut last = None;
    for i in 0..iters {
        let seed = if continuing {
            Seed::new(kind, SEED).at((i * out.len()) as u64)
        } else {
            Seed::new(kind, SEED + 1 + i as u64)
        };
        last = Some(h.rng()?.uniform(&seed, out)?);
    }
    if let Some(l) = last {
        l.wait()?;
    }
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}

fn main() -> Res<()> {
    let device = match Device::open(0) {
        Ok(d) if !d.is_simulated() => d,
        Ok(_) | Err(_) => {
            println!("bench-rng: skipped, needs a GPU");
            return Ok(());
        }
    };
    let s = device.new_stream()?;
    let mut h = Handles::new(&device, s)?;
    let raw_stream = device.new_stream()?;
    // SAFETY: (1) the raw side touches only cudarc memory of its own, made from and used on its
    // own stream, and synchronizes it before each timing ends; (2) memory cusched owns is used
    // only by cusched's ops.
    let raw_stream = unsafe { device.cuda_stream(raw_stream) }?;

    println!("bench-rng: 1. host time per draw of {SMALL} f32 uniforms, back to back");
    println!(
        "{:>14} {:>19} {:>15} {:>18} {:>14} {:>9} {:>9}",
        "generator", "cusched continuing", "raw continuing", "cusched re-seeded", "raw re-seeded", "ratio", "ratio"
    );
    for kind in [Generator::Philox4x32_10, Generator::Xorwow, Generator::Sobol32] {
        let out = device.alloc_zeros::<f32>(s, SMALL)?;
        let raw = Raw::new(raw_stream.clone(), kind, SMALL)?;
        // Re-seeded draws of XORWOW take 250 µs each: fewer of them.
        let (iters, reseeded) = (2000, 200);
        ours(&mut h, kind, &out, 20, true)?;
        raw.time(SMALL, 20, true)?;
        let (mut oc, mut c, mut or, mut r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            oc.push(ours(&mut h, kind, &out, iters, true)?);
            c.push(raw.time(SMALL, iters, false)?);
            or.push(ours(&mut h, kind, &out, reseeded, false)?);
            r.push(raw.time(SMALL, reseeded, true)?);
        }
        let (oc, c, or, r) = (median(&mut oc), median(&mut c), median(&mut or), median(&mut r));
        println!(
            "{:>14} {:>19} {:>15} {:>18} {:>14} {:>9} {:>9}",
            format!("{kind:?}"),
            us(oc),
            us(c),
            us(or),
            us(r),
            ratio(oc, c),
            ratio(or, r)
        );
    }

    println!("\n2. host time of one draw while a 20 ms kernel runs on another stream (median of {REPS})");
    let spin = device.compile(SPIN_SRC, &[])?.kernel("spin")?;
    let busy = device.new_stream()?;
    // SAFETY: as above; the spin kernel touches no memory.
    let busy_raw = unsafe { device.cuda_stream(busy) }?;
    let launch_spin = || -> Res<()> {
        busy_raw.context().bind_to_thread()?;
        let mut b = busy_raw.launch_builder(spin.function()?);
        b.arg(&SPIN_CYCLES);
        // SAFETY: `spin` takes one `long long` and touches no memory.
        unsafe { b.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }) }?;
        Ok(())
    };
    println!(
        "{:>14} {:>19} {:>15} {:>18} {:>14} {:>11}",
        "generator", "cusched continuing", "raw continuing", "cusched re-seeded", "raw re-seeded", "kernel"
    );
    for kind in [Generator::Philox4x32_10, Generator::Xorwow, Generator::Sobol32] {
        let out = device.alloc_zeros::<f32>(s, SMALL)?;
        let raw = Raw::new(raw_stream.clone(), kind, SMALL)?;
        let [mut oc, mut c, mut or, mut r, mut k]: [Vec<f64>; 5] = Default::default();
        let timed = |f: &mut dyn FnMut() -> Res<()>| -> Res<f64> {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed().as_secs_f64())
        };
        let beside_spin = |times: &mut Vec<f64>, f: &mut dyn FnMut() -> Res<()>| -> Res<f64> {
            let start = Instant::now();
            launch_spin()?;
            times.push(timed(f)?);
            device.synchronize(busy)?;
            Ok(start.elapsed().as_secs_f64())
        };
        for rep in 0..REPS {
            let offset = (2 * rep * SMALL) as u64;
            // Where the timed draw continues from: drawn before the kernel starts.
            h.rng()?.uniform(&Seed::new(kind, SEED).at(offset), &out)?.wait()?;
            let continuing = Seed::new(kind, SEED).at(offset + SMALL as u64);
            k.push(beside_spin(&mut oc, &mut || h.rng()?.uniform(&continuing, &out).map(drop).map_err(Into::into))?);
            let fresh = Seed::new(kind, SEED + 1 + rep as u64);
            beside_spin(&mut or, &mut || h.rng()?.uniform(&fresh, &out).map(drop).map_err(Into::into))?;
            beside_spin(&mut r, &mut || {
                raw.stream.context().bind_to_thread()?;
                raw.reset(offset)?;
                raw.draw(SMALL)
            })?;
            beside_spin(&mut c, &mut || {
                raw.stream.context().bind_to_thread()?;
                raw.draw(SMALL)
            })?;
            device.synchronize(s)?;
            raw.stream.synchronize()?;
        }
        println!(
            "{:>14} {:>19} {:>15} {:>18} {:>14} {:>11}",
            format!("{kind:?}"),
            us(median(&mut oc)),
            us(median(&mut c)),
            us(median(&mut or)),
            us(median(&mut r)),
            us(median(&mut k))
        );
    }

    println!("\n3. {BIG} f32 uniforms, Philox4x32-10");
    let out = device.alloc_zeros::<f32>(s, BIG)?;
    let raw = Raw::new(raw_stream.clone(), Generator::Philox4x32_10, BIG)?;
    ours(&mut h, Generator::Philox4x32_10, &out, 2, true)?;
    raw.time(BIG, 2, false)?;
    let (mut o, mut r) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        o.push(ours(&mut h, Generator::Philox4x32_10, &out, 10, true)?);
        r.push(raw.time(BIG, 10, false)?);
    }
    let (o, r) = (median(&mut o), median(&mut r));
    let rate = |t: f64| BIG as f64 / t / 1e9;
    println!("continuing: cusched {} ({:.1} G/s), raw {} ({:.1} G/s): {}", us(o), rate(o), us(r), rate(r), ratio(o, r));
    Ok(())
}
