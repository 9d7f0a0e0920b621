//! cuRAND draws that continue where the handle's last draw ended: they skip the generator's
//! reset (whose set-up synchronizes the device) and must give the numbers of a fresh draw at
//! their offset, for every generator and draw kind after every other.

use crate::common::*;
use cusched::rng::{Generator, Seed};
use cusched::{Device, Handles};

/// One draw of `n` values of kind `k` (0 to 9: uniform, uniform in a range and normal in `f32`,
/// uniform in `f64`, log-normal in `f32`, normal and log-normal in `f64`, Poisson, raw bits,
/// raw 64-bit bits) from `seed`, as bit patterns; `None` where the generator does not draw
/// that kind.
fn draw_bits(d: &Device, s: cusched::StreamId, h: &mut Handles, seed: &Seed, k: usize, n: usize) -> Option<Vec<u64>> {
    let wide = matches!(seed.generator, Generator::Sobol64 | Generator::ScrambledSobol64);
    if matches!(k, 2 | 4 | 5 | 6) && !seed.generator.is_quasi() && n % 2 == 1 {
        // Pseudo-random normals come in pairs.
        return None;
    }
    let rng = h.rng().unwrap();
    let f32s = |v: Vec<f32>| v.into_iter().map(|x| u64::from(x.to_bits())).collect();
    let f64s = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect();
    Some(match k {
        0 | 1 | 2 | 4 => {
            let out = d.upload(s, &vec![f32::NAN; n]).unwrap();
            match k {
                0 => rng.uniform(seed, &out),
                1 => rng.uniform_range(seed, &out, -2.0, 3.0),
                2 => rng.normal(seed, &out, 1.0, 2.0),
                _ => rng.log_normal(seed, &out, 0.5, 0.25),
            }
            .unwrap()
            .wait()
            .unwrap();
            f32s(out.download(s).unwrap())
        }
        3 | 5 | 6 => {
            let out = d.upload(s, &vec![f64::NAN; n]).unwrap();
            match k {
                3 => rng.uniform(seed, &out),
                5 => rng.normal(seed, &out, -1.0, 0.5),
                _ => rng.log_normal(seed, &out, 0.0, 1.0),
            }
            .unwrap()
            .wait()
            .unwrap();
            f64s(out.download(s).unwrap())
        }
        7 | 8 if !wide => {
            let out = d.upload(s, &vec![u32::MAX; n]).unwrap();
            match k {
                7 => rng.poisson(seed, &out, 3.5),
                _ => rng.bits(seed, &out),
            }
            .unwrap()
            .wait()
            .unwrap();
            out.download(s).unwrap().into_iter().map(u64::from).collect()
        }
        9 if wide => {
            let out = d.upload(s, &vec![u64::MAX; n]).unwrap();
            rng.bits64(seed, &out).unwrap().wait().unwrap();
            out.download(s).unwrap()
        }
        _ => return None,
    })
}

/// Draws `k1` of `n1` values at `start`, then `k2` of `n2` where it ended on the same handle
/// (`on`), and `k2` there on `fresh`, whose generator is set to that offset: the two must be
/// equal. (`fresh`'s last draw never ends at `start + n1`: its generator is set again.)
#[allow(clippy::too_many_arguments)]
fn assert_continues(
    d: &Device,
    s: cusched::StreamId,
    (on, fresh): (&mut Handles, &mut Handles),
    seed: Seed,
    (k1, n1): (usize, usize),
    (k2, n2): (usize, usize),
) {
    let at = |o: u64| seed.at(o);
    if draw_bits(d, s, on, &seed, k1, n1).is_none() {
        return;
    }
    let next = seed.offset + n1 as u64;
    let continued = draw_bits(d, s, on, &at(next), k2, n2);
    let set = draw_bits(d, s, fresh, &at(next), k2, n2);
    let g = seed.generator;
    assert_eq!(continued, set, "{g:?}: draw {k2} of {n2} after draw {k1} of {n1} from offset {}", seed.offset);
}

/// A draw that continues where its generator's last draw ended (the same seed, the offset
/// advanced by the count drawn) gives the numbers a fresh generator set to that offset draws:
/// every generator with offsets, every kind of draw, counts from 1 to 1,048,581, odd and even,
/// from odd and even offsets. (cusched leaves the generator as it is where cuRAND continues
/// exactly, which skips its state set-up, and sets it again elsewhere.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn continuing_draws_give_the_numbers_of_fresh_draws_at_their_offsets() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let seed = Rng::new().next();
    let counts = [(1024, 1024), (1000, 1024), (6, 10), (4096, 6), (1, 7), (7, 3), (3, 1_048_579), (1_048_581, 9)];
    for g in Generator::ALL.into_iter().filter(|&g| g != Generator::Mtgp32) {
        let (mut on, mut fresh) = (Handles::new(&d, s).unwrap(), Handles::new(&d, s).unwrap());
        for (n1, n2) in counts {
            for start in [0, 5] {
                for k in 0..10 {
                    let seed = Seed::new(g, seed).at(start);
                    assert_continues(&d, s, (&mut on, &mut fresh), seed, (k, n1), (k, n2));
                }
            }
        }
    }
}

/// A draw of any kind continues one of any other kind as a fresh generator would draw it at
/// the advanced offset (a uniform after raw bits, a normal after a uniform, ...).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_draw_of_any_kind_continues_one_of_any_other_kind() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let seed = Rng::new().next();
    for g in Generator::ALL.into_iter().filter(|&g| g != Generator::Mtgp32) {
        let (mut on, mut fresh) = (Handles::new(&d, s).unwrap(), Handles::new(&d, s).unwrap());
        for (n1, n2) in [(1000, 24), (7, 4)] {
            for k1 in 0..10 {
                for k2 in (0..10).filter(|&k2| k2 != k1) {
                    let seed = Seed::new(g, seed).at(3);
                    assert_continues(&d, s, (&mut on, &mut fresh), seed, (k1, n1), (k2, n2));
                }
            }
        }
    }
}

/// A pseudo-random draw that continues its generator's last one sets no state up, so it does
/// not synchronize the device: it returns while a long kernel still runs on another stream.
/// (A draw at a new seed or offset still waits for it: cuRAND's set-up synchronizes.)
#[test]
#[ignore = "needs a CUDA GPU"]
#[cfg(feature = "nvrtc")]
fn a_continuing_pseudo_random_draw_does_not_wait_for_other_streams() {
    use crate::common::slow::{fill, kernels, N, SLOW};
    use std::time::{Duration, Instant};
    let Some(d) = gpu() else { return };
    let (s, busy) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let k = kernels(&d);
    let x = d.alloc_zeros::<f32>(busy, N).unwrap();
    let mut h = Handles::new(&d, s).unwrap();
    for g in [Generator::Philox4x32_10, Generator::Xorwow, Generator::Mrg32k3a] {
        let out = d.alloc_zeros::<f32>(s, 1024).unwrap();
        h.rng().unwrap().uniform(&Seed::new(g, 5), &out).unwrap().wait().unwrap();
        // About 200 ms on an H100.
        fill(&d, &k, busy, &x, 1.0, 20 * SLOW).unwrap();
        let start = Instant::now();
        let next = h.rng().unwrap().uniform(&Seed::new(g, 5).at(1024), &out).unwrap();
        let took = start.elapsed();
        d.synchronize(busy).unwrap();
        next.wait().unwrap();
        assert!(took < Duration::from_millis(100), "{g:?}: the continuing draw waited {took:?} for another stream");
    }
    // Poisson counts after Poisson counts of the same mean, as a simulation draws them.
    for (g, lambda) in [(Generator::Philox4x32_10, 50_000.0), (Generator::Xorwow, 50.0), (Generator::Mrg32k3a, 1_000.0)]
    {
        let out = d.alloc_zeros::<u32>(s, 1024).unwrap();
        h.rng().unwrap().poisson(&Seed::new(g, 5), &out, lambda).unwrap().wait().unwrap();
        fill(&d, &k, busy, &x, 1.0, 20 * SLOW).unwrap();
        let start = Instant::now();
        let next = h.rng().unwrap().poisson(&Seed::new(g, 5).at(1024), &out, lambda).unwrap();
        let took = start.elapsed();
        d.synchronize(busy).unwrap();
        next.wait().unwrap();
        assert!(
            took < Duration::from_millis(100),
            "{g:?}: the continuing Poisson draw waited {took:?} for another stream"
        );
    }
}

/// `n` Poisson counts of mean `lambda` from `seed` on `h`.
fn poisson(d: &Device, s: cusched::StreamId, h: &mut Handles, seed: &Seed, lambda: f64, n: usize) -> Vec<u32> {
    let out = d.upload(s, &vec![u32::MAX; n]).unwrap();
    h.rng().unwrap().poisson(seed, &out, lambda).unwrap().wait().unwrap();
    out.download(s).unwrap()
}

/// Poisson counts continue where the last Poisson draw ended as a fresh generator set there
/// draws them, at every mean, for every generator with offsets: cusched continues Philox's
/// after means up to 100,000 and XORWOW's and MRG32k3a's after means up to 1,000 (where
/// cuRAND makes them in pairs beyond, it sets the generator again), and a uniform draw
/// continues them too.
#[test]
#[ignore = "needs a CUDA GPU"]
fn poisson_draws_continue_at_every_mean() {
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let seed = Rng::new().next();
    let counts = [(7, 5), (1000, 1024), (4096, 6), (3, 1_048_579), (1_048_581, 9), (8, 1_048_576)];
    let lambdas = [0.1, 3.5, 64.0, 1_000.0, 1_500.0, 2_000.0, 100_000.0, 200_000.0];
    let far = 1 << 40;
    for g in [Generator::Philox4x32_10, Generator::Xorwow, Generator::Mrg32k3a, Generator::Default] {
        // `fresh` draws the reference at each offset: its last draw, one value far away, never
        // ends there, so its generator is set again.
        let (mut on, mut fresh) = (Handles::new(&d, s).unwrap(), Handles::new(&d, s).unwrap());
        for lambda in lambdas {
            for (n1, n2) in counts {
                for start in [0, 5] {
                    let first = Seed::new(g, seed).at(start);
                    let next = first.at(start + n1 as u64);
                    poisson(&d, s, &mut on, &first, lambda, n1);
                    let continued = poisson(&d, s, &mut on, &next, lambda, n2);
                    poisson(&d, s, &mut fresh, &first.at(far), lambda, 1);
                    let set = poisson(&d, s, &mut fresh, &next, lambda, n2);
                    let what = format!("{g:?}: {n2} counts of mean {lambda} after {n1} from offset {start}");
                    assert!(continued == set, "{what}");
                    // A uniform draw continuing the counts.
                    let after = next.at(start + (n1 + n2) as u64);
                    let u = d.upload(s, &[f32::NAN; 5]).unwrap();
                    on.rng().unwrap().uniform(&after, &u).unwrap().wait().unwrap();
                    poisson(&d, s, &mut fresh, &first.at(far), lambda, 1);
                    let v = d.upload(s, &[f32::NAN; 5]).unwrap();
                    fresh.rng().unwrap().uniform(&after, &v).unwrap().wait().unwrap();
                    assert_eq!(u.download(s).unwrap(), v.download(s).unwrap(), "{what}, then 5 uniforms");
                }
            }
        }
    }
}

/// A generator handed out raw may be drawn on by its caller between cusched's draws, so
/// cusched sets it again before every later draw: a draw at the offset where cusched's last
/// draw ended gives the numbers of a fresh generator there, whatever the caller drew.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_generator_handed_out_raw_is_set_again_before_every_draw() {
    use cusched::cudarc::curand::sys;
    let Some(d) = gpu() else { return };
    let s = d.new_stream().unwrap();
    let (mut h, mut fresh) = (Handles::new(&d, s).unwrap(), Handles::new(&d, s).unwrap());
    let seed = Seed::new(Generator::Philox4x32_10, Rng::new().next());
    let g = h.rng().unwrap().curand_generator(&seed).unwrap();
    let first = draw_bits(&d, s, &mut h, &seed, 0, 1024);
    // The caller's own draw on the raw generator, between cusched's.
    let theirs = d.alloc_zeros::<u32>(s, 512).unwrap();
    let p = theirs.raw_device_ptr().unwrap();
    let mut rec = cusched::LaunchRecorder::new_strict(s);
    rec.write(&theirs).unwrap();
    let status = raw_launch(&d, rec, |_| {
        // SAFETY: 1. `g` is the live Philox generator of `h`'s `Rng` (which outlives the
        // launch), made in this device's context, current here, and set to this launch's
        // stream; 2. `p` is the address of `theirs`, which holds 512 u32s and is declared
        // written on the recorder; 3. `curandGenerate` writes exactly 512 u32s there, enqueued
        // on the generator's stream.
        unsafe { sys::curandGenerate(g, p as *mut u32, 512) }
    });
    assert_eq!(status, sys::curandStatus_t::CURAND_STATUS_SUCCESS);
    let next = seed.at(1024);
    assert!(first.is_some());
    assert_eq!(draw_bits(&d, s, &mut h, &next, 0, 1024), draw_bits(&d, s, &mut fresh, &next, 0, 1024));
}
