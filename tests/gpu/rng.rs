//! cuRAND on a real GPU: every generator, moments of every distribution, bounds, and
//! reproducibility (same seed and offset, same numbers). Outputs are poisoned first.
#![allow(clippy::needless_range_loop)] // index loops mirror the math of the references

use crate::common::reference::rng as reference;
use crate::common::*;
use cusched::rng::{Generator, Seed};
use cusched::{Device, Handles};

const N: usize = 1 << 20;

fn moments(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    (mean, var)
}

fn seed_for(g: Generator, seed: u64) -> Seed {
    Seed::new(g, seed)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_generator_draws_uniforms_with_the_right_moments() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let seed = Rng::new().next();
    for g in Generator::ALL {
        let out = d.upload(s, &vec![f32::NAN; N]).unwrap();
        h.rng().unwrap().uniform(&seed_for(g, seed), &out).unwrap().wait().unwrap();
        let v: Vec<f64> = out.download(s).unwrap().iter().map(|&x| x as f64).collect();
        assert!(v.iter().all(|&x| x > 0.0 && x <= 1.0), "{g:?}: a value outside (0, 1]");
        let (mean, var) = moments(&v);
        assert!((mean - 0.5).abs() < 0.005, "{g:?}: mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.003, "{g:?}: variance {var}");

        let out64 = d.upload(s, &vec![f64::NAN; N]).unwrap();
        h.rng().unwrap().uniform(&seed_for(g, seed), &out64).unwrap().wait().unwrap();
        let v = out64.download(s).unwrap();
        assert!(v.iter().all(|&x| x > 0.0 && x <= 1.0), "{g:?} f64: a value outside (0, 1]");
        assert!((moments(&v).0 - 0.5).abs() < 0.005, "{g:?} f64 mean");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn same_seed_and_offset_give_the_same_numbers() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let seed = Rng::new().next();
    for g in Generator::ALL {
        let draw = |h: &mut Handles, sd: Seed| {
            let out = d.upload(s, &vec![f32::NAN; 4096]).unwrap();
            h.rng().unwrap().uniform(&sd, &out).unwrap().wait().unwrap();
            out.download(s).unwrap()
        };
        let a = draw(&mut h, seed_for(g, seed));
        // Something else in between must not matter.
        let _ = draw(&mut h, seed_for(g, seed ^ 0xdead).at(if g == Generator::Mtgp32 { 0 } else { 77 }));
        let b = draw(&mut h, seed_for(g, seed));
        assert_eq!(a, b, "{g:?}: same seed and offset, different numbers");
        if !g.is_quasi() {
            let c = draw(&mut h, seed_for(g, seed.wrapping_add(1)));
            assert_ne!(a, c, "{g:?}: different seeds, same numbers");
        }
        if g != Generator::Mtgp32 {
            let e = draw(&mut h, seed_for(g, seed).at(1000));
            assert_ne!(a, e, "{g:?}: the offset changed nothing");
            assert_eq!(e, draw(&mut h, seed_for(g, seed).at(1000)), "{g:?}: offset not reproducible");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn distributions_have_their_moments() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let seed = Seed::new(Generator::Philox4x32_10, Rng::new().next());

    let out = d.upload(s, &vec![f32::NAN; N]).unwrap();
    h.rng().unwrap().uniform_range(&seed, &out, -3.0, 5.0).unwrap().wait().unwrap();
    let v: Vec<f64> = out.download(s).unwrap().iter().map(|&x| x as f64).collect();
    assert!(v.iter().all(|&x| (-3.0..=5.0).contains(&x)), "uniform_range out of bounds");
    let (m, var) = moments(&v);
    assert!((m - 1.0).abs() < 0.02 && (var - 64.0 / 12.0).abs() < 0.05, "uniform_range f32: {m} {var}");

    let out = d.upload(s, &vec![f64::NAN; N]).unwrap();
    h.rng().unwrap().uniform_range(&seed, &out, 10.0, 10.5).unwrap().wait().unwrap();
    let v = out.download(s).unwrap();
    assert!(v.iter().all(|&x| x > 10.0 && x <= 10.5), "uniform_range f64 out of bounds");
    assert!((moments(&v).0 - 10.25).abs() < 0.002);

    let out = d.upload(s, &vec![f32::NAN; N]).unwrap();
    h.rng().unwrap().normal(&seed, &out, 2.0, 3.0).unwrap().wait().unwrap();
    let (m, var) = moments(&out.download(s).unwrap().iter().map(|&x| x as f64).collect::<Vec<_>>());
    assert!((m - 2.0).abs() < 0.02 && (var.sqrt() - 3.0).abs() < 0.02, "normal f32: {m} {var}");

    let out = d.upload(s, &vec![f64::NAN; N]).unwrap();
    h.rng().unwrap().normal(&seed, &out, -1.0, 0.5).unwrap().wait().unwrap();
    let (m, var) = moments(&out.download(s).unwrap());
    assert!((m + 1.0).abs() < 0.005 && (var.sqrt() - 0.5).abs() < 0.005, "normal f64: {m} {var}");

    for (mu, sigma) in [(0.0f64, 0.5f64), (1.0, 0.25)] {
        let want = (mu + sigma * sigma / 2.0).exp();
        let out = d.upload(s, &vec![f32::NAN; N]).unwrap();
        h.rng().unwrap().log_normal(&seed, &out, mu as f32, sigma as f32).unwrap().wait().unwrap();
        let v: Vec<f64> = out.download(s).unwrap().iter().map(|&x| x as f64).collect();
        assert!(v.iter().all(|&x| x > 0.0));
        assert!((moments(&v).0 / want - 1.0).abs() < 0.01, "log-normal f32 mean");
        let out = d.upload(s, &vec![f64::NAN; N]).unwrap();
        h.rng().unwrap().log_normal(&seed, &out, mu, sigma).unwrap().wait().unwrap();
        assert!((moments(&out.download(s).unwrap()).0 / want - 1.0).abs() < 0.01, "log-normal f64 mean");
    }

    for lambda in [0.5, 4.0, 250.0] {
        let out = d.upload(s, &vec![u32::MAX; N]).unwrap();
        h.rng().unwrap().poisson(&seed, &out, lambda).unwrap().wait().unwrap();
        let v: Vec<f64> = out.download(s).unwrap().iter().map(|&x| x as f64).collect();
        assert!(v.iter().all(|&x| x < 1e6), "poisson left poison");
        let (m, var) = moments(&v);
        assert!((m / lambda - 1.0).abs() < 0.02 && (var / lambda - 1.0).abs() < 0.05, "poisson {lambda}: {m} {var}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn quasi_random_dimensions_and_lane_path() {
    let Some(d) = gpu() else { return };
    let lane = d.lane("rng").unwrap();
    let dd: Device = d.clone();
    let v = lane
        .submit(move |cx| {
            let out = dd.upload(cx.stream(), &vec![f64::NAN; 3 * 4096])?;
            let mut seed = Seed::new(Generator::ScrambledSobol64, 0);
            seed.dimensions = 3;
            cx.rng()?.uniform(&seed, &out)?;
            cx.keep(out.clone());
            Ok(out)
        })
        .wait()
        .unwrap();
    let host = v.download(d.default_stream()).unwrap();
    // Sobol fills dimension by dimension: each block of 4096 is one dimension, evenly spread.
    for dim in 0..3 {
        let block = &host[dim * 4096..(dim + 1) * 4096];
        assert!(block.iter().all(|&x| x > 0.0 && x <= 1.0));
        let below_half = block.iter().filter(|&&x| x <= 0.5).count();
        assert!((below_half as i64 - 2048).abs() <= 8, "dimension {dim}: {below_half} of 4096 below 0.5");
    }
}

/// The raw generator draws on the `Rng`'s stream with a call of your own (`curandGenerate`
/// here, which `Rng::bits` also wraps), into a buffer declared on the recorder;
/// `curand_generator` sets it to the seed each time, as a draw does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn raw_generator_draws_u32s_on_the_rng_stream() {
    use cusched::cudarc::curand::sys;
    const N: usize = 4096;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let seed = Rng::new().next();
    let mut draw = |sd: Seed| -> Vec<u32> {
        let rng = h.rng().unwrap();
        let g = rng.curand_generator(&sd).unwrap();
        let out = d.upload(s, &vec![0u32; N]).unwrap();
        let p = out.raw_device_ptr().unwrap();
        let mut rec = cusched::LaunchRecorder::new_strict(rng.stream());
        rec.write(&out).unwrap();
        let status = raw_launch(&d, rec, |_| {
            // SAFETY: 1. `g` is the live Philox generator of `rng` (which outlives the launch),
            // made in this device's context, current here, and set to this launch's stream;
            // 2. `p` is the address of `out`, which holds N u32s and is declared written on
            // the recorder, so the launch is fenced against its other uses; 3. `curandGenerate`
            // writes exactly N u32s there, enqueued on the generator's stream.
            unsafe { sys::curandGenerate(g, p as *mut u32, N) }
        });
        assert_eq!(status, sys::curandStatus_t::CURAND_STATUS_SUCCESS);
        out.download(s).unwrap()
    };
    let a = draw(Seed::new(Generator::Philox4x32_10, seed));
    assert!(a.iter().any(|&x| x != 0), "the raw draw wrote nothing");
    assert!(a.iter().any(|&x| x != a[0]), "the raw draw wrote one value {} everywhere", a[0]);
    assert_eq!(a, draw(Seed::new(Generator::Philox4x32_10, seed)), "same seed, different numbers");
    assert_ne!(a, draw(Seed::new(Generator::Philox4x32_10, seed.wrapping_add(1))), "different seeds, same numbers");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bits_are_balanced_and_reproducible() {
    const N: usize = 4096;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let seed = Rng::new().next();
    let mut draw = |sd: Seed| -> Vec<u32> {
        let out = d.upload(s, &vec![0u32; N]).unwrap();
        h.rng().unwrap().bits(&sd, &out).unwrap().wait().unwrap();
        out.download(s).unwrap()
    };
    let a = draw(Seed::new(Generator::Philox4x32_10, seed));
    assert!(a.iter().any(|&x| x != a[0]), "bits wrote one value {} everywhere", a[0]);
    // 131,072 fair bits: the standard deviation of the fraction set is about 0.0014.
    let ones: u64 = a.iter().map(|x| x.count_ones() as u64).sum();
    let frac = ones as f64 / (32 * N) as f64;
    assert!((frac - 0.5).abs() < 0.01, "{frac} of the bits are set");
    assert_eq!(a, draw(Seed::new(Generator::Philox4x32_10, seed)), "same seed, different numbers");
    assert_ne!(a, draw(Seed::new(Generator::Philox4x32_10, seed.wrapping_add(1))), "different seeds, same numbers");
    // CPU reference: cuRAND's uniform floats are these same 32-bit values mapped to (0, 1] as
    // x * 2^-32 + 2^-33 (curand_uniform.h), so the two draws of one seed agree value by value.
    let out = d.upload(s, &vec![0f32; N]).unwrap();
    h.rng().unwrap().uniform(&Seed::new(Generator::Philox4x32_10, seed), &out).unwrap().wait().unwrap();
    let u = out.download(s).unwrap();
    for (i, (&x, &got)) in a.iter().zip(&u).enumerate() {
        let want = x as f32 * 2.328_306_4e-10_f32 + 1.164_153_2e-10_f32;
        assert!((got - want).abs() <= want * f32::EPSILON, "value {i}: uniform {got}, bits {x} give {want}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bits64_draws_a_sobol_sequence() {
    const N: usize = 1024;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let mut draw = |sd: Seed| -> Vec<u64> {
        let out = d.upload(s, &vec![u64::MAX; N]).unwrap();
        h.rng().unwrap().bits64(&sd, &out).unwrap().wait().unwrap();
        out.download(s).unwrap()
    };
    let sobol = Seed::new(Generator::Sobol64, 0);
    let a = draw(sobol);
    let mut sorted = a.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), N, "Sobol points repeat");
    // A one-dimensional Sobol sequence's first 2^k points fall one in each of 2^k equal
    // intervals; whether cuRAND's sequence starts at the point 0 or after it, at most one
    // point moves, so each of 16 bins by the top 4 bits holds 64 +- 1 of the 1024.
    let mut bins = [0usize; 16];
    for &x in &a {
        bins[(x >> 60) as usize] += 1;
    }
    assert!(bins.iter().all(|&b| b.abs_diff(N / 16) <= 1), "unevenly spread: {bins:?}");
    assert_eq!(a, draw(sobol), "same dimensions and offset, different numbers");
    let b = draw(sobol.at(N as u64));
    assert_ne!(a, b, "the offset changed nothing");
    // CPU reference: dimension 1 of Sobol is the van der Corput sequence in Gray-code order,
    // point n being the bit-reversed Gray code of n.
    let point = |n: u64| (n ^ (n >> 1)).reverse_bits();
    let start = SOBOL_FIRST_POINT;
    let want: Vec<u64> = (start..start + N as u64).map(point).collect();
    assert_eq!(a[..8], want[..8], "not the van der Corput points from point {start}");
    assert_eq!(a, want);
    let want: Vec<u64> = (start + N as u64..start + 2 * N as u64).map(point).collect();
    assert_eq!(b, want, "the offset did not skip {N} points");
}

/// The index of the first Sobol point cuRAND's host API returns at offset 0.
const SOBOL_FIRST_POINT: u64 = 0;

/// Runs `op` (upload, draw, download) on the GPU and on a simulated device.
fn on_both<T>(op: impl Fn(&Device, cusched::StreamId, &mut Handles) -> Vec<T>) -> Option<(Vec<T>, Vec<T>)> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    let on_gpu = op(&d, s, &mut h);
    let sim = sim();
    let ss = sim.new_stream().unwrap();
    let mut hs = Handles::new(&sim, ss).unwrap();
    Some((on_gpu, op(&sim, ss, &mut hs)))
}

const COUNTS: [usize; 7] = [1, 3, 4, 5, 17, 1001, 300_001];
const OFFSETS: [u64; 7] = [0, 1, 3, 4, 7, 1000, 262_147];

/// Philox4x32-10's raw words: the simulator draws cuRAND's, bit for bit, for every count and
/// offset (odd ones included, and past the first 65,536 blocks), and so does the reference.
#[test]
#[ignore = "needs a CUDA GPU"]
fn philox_bits_are_bit_exact_on_the_simulator() {
    let seed = 0x0123_4567_89ab_cdef;
    for n in COUNTS {
        for offset in OFFSETS {
            let sd = Seed::new(Generator::Philox4x32_10, seed).at(offset);
            let Some((g, s)) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![0u32; n]).unwrap();
                h.rng().unwrap().bits(&sd, &out).unwrap().wait().unwrap();
                out.download(s).unwrap()
            }) else {
                return;
            };
            let first = g.iter().zip(&s).position(|(a, b)| a != b);
            assert_eq!(first, None, "n {n}, offset {offset}: first difference at {first:?}");
            assert_eq!(g, reference::bits(seed, offset, n), "n {n}, offset {offset}: the reference differs");
        }
    }
}

/// Philox4x32-10's f32 uniforms bit for bit; f64 uniforms bit for bit; normals and log-normals
/// to the GPU math functions' rounding.
#[test]
#[ignore = "needs a CUDA GPU"]
fn philox_distributions_match_the_simulator() {
    let seed = 77;
    for n in [2usize, 6, 1002, 300_002] {
        for offset in [0u64, 4, 8, 1000, 262_148, 2, 6] {
            let sd = Seed::new(Generator::Philox4x32_10, seed).at(offset);
            let Some((g, s)) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![f32::NAN; n]).unwrap();
                h.rng().unwrap().uniform(&sd, &out).unwrap().wait().unwrap();
                out.download(s).unwrap()
            }) else {
                return;
            };
            assert_eq!(g, s, "f32 uniform, n {n}, offset {offset}");
            let (g, s) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![f64::NAN; n]).unwrap();
                h.rng().unwrap().uniform(&sd, &out).unwrap().wait().unwrap();
                out.download(s).unwrap()
            })
            .unwrap();
            let first = g.iter().zip(&s).position(|(a, b)| a != b);
            assert_eq!(first, None, "f64 uniform, n {n}, offset {offset}: first difference at {first:?}");
            let (g, s) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![f32::NAN; n]).unwrap();
                h.rng().unwrap().normal(&sd, &out, 1.0, 2.0).unwrap().wait().unwrap();
                out.download(s).unwrap()
            })
            .unwrap();
            for (i, (a, b)) in g.iter().zip(&s).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-5 * (1.0 + a.abs()),
                    "f32 normal n {n} offset {offset} value {i}: {a} vs {b}"
                );
            }
            let (g, s) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![f64::NAN; n]).unwrap();
                h.rng().unwrap().log_normal(&sd, &out, 0.0, 0.5).unwrap().wait().unwrap();
                out.download(s).unwrap()
            })
            .unwrap();
            for (i, (a, b)) in g.iter().zip(&s).enumerate() {
                assert!((a - b).abs() <= 1e-12 * a, "f64 log-normal n {n} offset {offset} value {i}: {a} vs {b}");
            }
        }
    }
}

/// The generators the simulator matches by distribution: on both backends, each draw has the
/// same moments (to the sampling error), and the Sobol generators' first points agree.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_other_generators_match_the_simulator_in_distribution() {
    let n = 1 << 18;
    for g in Generator::ALL {
        let sd = Seed::new(g, 1234);
        let Some((a, b)) = on_both(|d, s, h| {
            let out = d.upload(s, &vec![f64::NAN; n]).unwrap();
            h.rng().unwrap().normal(&sd, &out, 2.0, 3.0).unwrap().wait().unwrap();
            out.download(s).unwrap()
        }) else {
            return;
        };
        let ((ma, va), (mb, vb)) = (moments(&a), moments(&b));
        assert!((ma - mb).abs() < 0.05 && (va.sqrt() - vb.sqrt()).abs() < 0.05, "{g:?} normal: {ma} {va} vs {mb} {vb}");
        let (a, b) = on_both(|d, s, h| {
            let out = d.upload(s, &vec![u32::MAX; n]).unwrap();
            h.rng().unwrap().poisson(&sd, &out, 4.0).unwrap().wait().unwrap();
            out.download(s).unwrap().iter().map(|&x| x as f64).collect::<Vec<_>>()
        })
        .unwrap();
        let ((ma, va), (mb, vb)) = (moments(&a), moments(&b));
        assert!((ma - mb).abs() < 0.05 && (va - vb).abs() < 0.1, "{g:?} poisson: {ma} {va} vs {mb} {vb}");
        if matches!(g, Generator::Sobol32) {
            let mut sd = sd;
            sd.dimensions = 8;
            let (a, b) = on_both(|d, s, h| {
                let out = d.upload(s, &vec![0u32; 8 * 64]).unwrap();
                h.rng().unwrap().bits(&sd, &out).unwrap().wait().unwrap();
                out.download(s).unwrap()
            })
            .unwrap();
            // Reported, not failed on: the simulator's direction numbers are Joe-Kuo's, which
            // cuRAND's are documented to be; a difference shows in this line of the log.
            let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
            println!("Sobol32, 8 dimensions: {same} of {} points equal cuRAND's", a.len());
        }
    }
}
