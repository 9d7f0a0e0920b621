//! cuRAND on the simulator: Philox4x32-10 word for word as `common::reference::rng` defines
//! cuRAND's host-API sequence (known-answer block, every count and offset), its uniforms and
//! normals; every generator's distributions by their moments; the Sobol sequences' first points
//! and their dimension-by-dimension layout; reproducibility.

use crate::common::reference::rng as reference;
use crate::common::sim;
use cusched::rng::{Generator, Seed};
use cusched::{Device, Handles, StreamId};
use cusched::{Error, Graph};

fn setup() -> (Device, StreamId, Handles) {
    let d = sim();
    let s = d.new_stream().unwrap();
    let h = Handles::new(&d, s).unwrap();
    (d, s, h)
}

fn bits(h: &mut Handles, d: &Device, s: StreamId, seed: Seed, n: usize) -> Vec<u32> {
    let out = d.upload(s, &vec![0u32; n]).unwrap();
    h.rng().unwrap().bits(&seed, &out).unwrap().wait().unwrap();
    out.download(s).unwrap()
}

#[test]
fn philox_is_the_known_answer_block_and_the_reference_sequence() {
    let (d, s, mut h) = setup();
    // Random123's known answer for Philox4x32-10 at counter 0, key 0.
    let first = bits(&mut h, &d, s, Seed::new(Generator::Philox4x32_10, 0), 4);
    assert_eq!(first, [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]);
    assert_eq!(reference::philox([0; 4], [0; 2]).to_vec(), first);
    assert_eq!(reference::philox([u32::MAX; 4], [u32::MAX; 2]), [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]);
    let seed = 0x1234_5678_9abc_def0;
    for n in [1usize, 3, 4, 5, 17, 1001, 262_147] {
        for offset in [0u64, 1, 3, 4, 7, 1000, 262_141, 1 << 40] {
            let got = bits(&mut h, &d, s, Seed::new(Generator::Philox4x32_10, seed).at(offset), n);
            assert_eq!(got, reference::bits(seed, offset, n), "n {n}, offset {offset}");
        }
    }
}

/// cuRAND counts a double draw's offset in doubles: `curandGenerateUniformDouble` at offset
/// `k` starts at double `k` of the sequence, not at word `k` (values captured from cuRAND 13 on
/// an H200, Philox4x32-10 in legacy order, seed 77).
#[test]
fn philox_f64_offsets_count_doubles_as_curand_does() {
    let (d, s, mut h) = setup();
    const DOUBLES: [u64; 7] = [
        0x3fe2_2ac1_1abd_7d56,
        0x3fe2_5a16_3358_2f6c,
        0x3fe8_4c00_8299_048a,
        0x3feb_939b_575e_f5f2,
        0x3fdd_4861_be52_4a11,
        0x3fee_533c_ab17_e666,
        0x3fef_fd83_4848_9c0e,
    ];
    for offset in [1u64, 2, 3, 5] {
        let sd = Seed::new(Generator::Philox4x32_10, 77).at(offset);
        let u = d.upload(s, &[0f64; 2]).unwrap();
        h.rng().unwrap().uniform(&sd, &u).unwrap().wait().unwrap();
        let want: Vec<f64> = DOUBLES[(offset - 1) as usize..][..2].iter().map(|&b| f64::from_bits(b)).collect();
        assert_eq!(u.download(s).unwrap(), want, "offset {offset}");
        assert_eq!(reference::uniform_f64(77, offset, 2), want, "the reference, offset {offset}");
    }
}

/// Past the first 65,536 threads' round, cuRAND's double draws take two blocks per thread
/// round, and an offset skips a thread one block per whole round of its before the offset:
/// (offset, index, bits) captured from cuRAND 13 on an H200 (Philox, legacy order, seed 77).
#[test]
fn philox_f64_rounds_past_the_first_follow_curands_layout() {
    let known: [(u64, usize, u64); 8] = [
        (0, 262144, 0x3f8076de90410a60),
        (0, 524289, 0x3fde47cd64c5487b),
        (4, 262140, 0x3fe25a1633582f6c),
        (6, 262144, 0x3fbfd74ac457433c),
        (262144, 0, 0x3fe25a1633582f6c),
        (262144, 262146, 0x3fcbc76e545b30a2),
        (262150, 3, 0x3fe218035b209bf6),
        (1000, 655355, 0x3fdf8ed30ea09fcf),
    ];
    for (offset, index, bits) in known {
        assert_eq!(
            reference::uniform_f64(77, offset, index + 1)[index].to_bits(),
            bits,
            "offset {offset}, index {index}"
        );
    }
    let (d, s, mut h) = setup();
    let (offset, n) = (4u64, 262_144usize);
    let sd = Seed::new(Generator::Philox4x32_10, 77).at(offset);
    let u = d.alloc_zeros::<f64>(s, n).unwrap();
    h.rng().unwrap().uniform(&sd, &u).unwrap().wait().unwrap();
    assert_eq!(u.download(s).unwrap()[262_140].to_bits(), known[2].2, "the simulator, offset 4, index 262140");
}

#[test]
fn philox_uniforms_and_normals_are_curands_conversions_of_its_words() {
    let (d, s, mut h) = setup();
    let seed = 987_654_321;
    for (n, offset) in [(6usize, 0u64), (1002, 8), (4096, 3), (70_000, 262_144)] {
        let sd = Seed::new(Generator::Philox4x32_10, seed).at(offset);
        let u = d.upload(s, &vec![0f32; n]).unwrap();
        h.rng().unwrap().uniform(&sd, &u).unwrap().wait().unwrap();
        let want: Vec<f32> = reference::bits(seed, offset, n).into_iter().map(reference::unit32).collect();
        assert_eq!(u.download(s).unwrap(), want, "f32 uniforms, n {n}, offset {offset}");

        let u = d.upload(s, &vec![0f64; n]).unwrap();
        h.rng().unwrap().uniform(&sd, &u).unwrap().wait().unwrap();
        assert_eq!(u.download(s).unwrap(), reference::uniform_f64(seed, offset, n), "f64 uniforms");

        let z = d.upload(s, &vec![0f32; n]).unwrap();
        h.rng().unwrap().normal(&sd, &z, 1.5, 2.0).unwrap().wait().unwrap();
        for (i, (g, w)) in
            z.download(s).unwrap().iter().zip(reference::normal_f32(seed, offset, n, 1.5, 2.0)).enumerate()
        {
            assert!((*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "f32 normal {i}: {g} vs {w}");
        }
        let z = d.upload(s, &vec![0f64; n]).unwrap();
        h.rng().unwrap().normal(&sd, &z, -1.0, 0.5).unwrap().wait().unwrap();
        for (i, (g, w)) in
            z.download(s).unwrap().iter().zip(reference::normal_f64(seed, offset, n, -1.0, 0.5)).enumerate()
        {
            assert!((g - w).abs() <= 1e-13 * (1.0 + w.abs()), "f64 normal {i}: {g} vs {w}");
        }
        let z = d.upload(s, &vec![0f64; n]).unwrap();
        h.rng().unwrap().log_normal(&sd, &z, -1.0, 0.5).unwrap().wait().unwrap();
        for (i, (g, w)) in
            z.download(s).unwrap().iter().zip(reference::normal_f64(seed, offset, n, -1.0, 0.5)).enumerate()
        {
            assert!((g - w.exp()).abs() <= 1e-13 * w.exp(), "f64 log-normal {i}: {g} vs {}", w.exp());
        }
    }
}

const N: usize = 1 << 17;

#[test]
fn every_generator_draws_each_distribution_with_its_moments() {
    let (d, s, mut h) = setup();
    for g in Generator::ALL {
        let seed = Seed::new(g, 42);
        let f = d.upload(s, &vec![f32::NAN; N]).unwrap();
        h.rng().unwrap().uniform(&seed, &f).unwrap().wait().unwrap();
        let v: Vec<f64> = f.download(s).unwrap().iter().map(|&x| x as f64).collect();
        assert!(v.iter().all(|&x| x > 0.0 && x <= 1.0), "{g:?}: a uniform outside (0, 1]");
        let (m, var) = reference::moments(&v);
        assert!((m - 0.5).abs() < 0.005 && (var - 1.0 / 12.0).abs() < 0.003, "{g:?} uniform: {m} {var}");

        let f = d.upload(s, &vec![f64::NAN; N]).unwrap();
        h.rng().unwrap().uniform_range(&seed, &f, 10.0, 10.5).unwrap().wait().unwrap();
        let v = f.download(s).unwrap();
        // A uniform of 2^-54 (Sobol64's point 0) scaled by 0.5 rounds to the lower bound.
        assert!(v.iter().all(|&x| (10.0..=10.5).contains(&x)), "{g:?}: uniform_range out of bounds");
        assert!((reference::moments(&v).0 - 10.25).abs() < 0.002, "{g:?} uniform_range");

        let f = d.upload(s, &vec![f32::NAN; N]).unwrap();
        h.rng().unwrap().normal(&seed, &f, 2.0, 3.0).unwrap().wait().unwrap();
        let (m, var) = reference::moments(&f.download(s).unwrap().iter().map(|&x| x as f64).collect::<Vec<_>>());
        assert!((m - 2.0).abs() < 0.05 && (var.sqrt() - 3.0).abs() < 0.05, "{g:?} normal f32: {m} {var}");

        let f = d.upload(s, &vec![f64::NAN; N]).unwrap();
        h.rng().unwrap().log_normal(&seed, &f, 0.0, 0.5).unwrap().wait().unwrap();
        let v = f.download(s).unwrap();
        assert!(v.iter().all(|&x| x > 0.0));
        let want = (0.125f64).exp();
        assert!((reference::moments(&v).0 / want - 1.0).abs() < 0.01, "{g:?} log-normal");

        for lambda in [0.5, 4.0, 250.0] {
            let p = d.upload(s, &vec![u32::MAX; N]).unwrap();
            h.rng().unwrap().poisson(&seed, &p, lambda).unwrap().wait().unwrap();
            let v: Vec<f64> = p.download(s).unwrap().iter().map(|&x| x as f64).collect();
            let (m, var) = reference::moments(&v);
            assert!(
                (m / lambda - 1.0).abs() < 0.02 && (var / lambda - 1.0).abs() < 0.05,
                "{g:?} poisson {lambda}: {m} {var}"
            );
        }
    }
}

#[test]
fn the_same_seed_and_offset_give_the_same_numbers() {
    let (d, s, mut h) = setup();
    for g in Generator::ALL {
        let mut draw = |sd: Seed| {
            let out = d.upload(s, &vec![f32::NAN; 4096]).unwrap();
            h.rng().unwrap().uniform(&sd, &out).unwrap().wait().unwrap();
            out.download(s).unwrap()
        };
        let a = draw(Seed::new(g, 5));
        assert_eq!(a, draw(Seed::new(g, 5)), "{g:?}");
        if !g.is_quasi() {
            assert_ne!(a, draw(Seed::new(g, 6)), "{g:?}: different seeds, same numbers");
        }
        if g != Generator::Mtgp32 {
            let e = draw(Seed::new(g, 5).at(1000));
            assert_ne!(a, e, "{g:?}: the offset changed nothing");
        }
    }
}

#[test]
fn sobol_points_are_the_gray_code_sequence_dimension_by_dimension() {
    let (d, s, mut h) = setup();
    let mut seed = Seed::new(Generator::Sobol32, 0);
    seed.dimensions = 2;
    // Dimension 0 is van der Corput in gray-code order: 0, 1/2, 3/4, 1/4; dimension 1 (Joe-Kuo
    // s = 1, m = 1): 0, 1/2, 1/4, 3/4.
    let got = bits(&mut h, &d, s, seed, 8);
    assert_eq!(got, [0, 1 << 31, 3 << 30, 1 << 30, 0, 1 << 31, 1 << 30, 3 << 30]);
    let out = d.upload(s, &[0u64; 4]).unwrap();
    h.rng().unwrap().bits64(&Seed::new(Generator::Sobol64, 0).at(1), &out).unwrap().wait().unwrap();
    assert_eq!(out.download(s).unwrap(), [1 << 63, 3 << 62, 1 << 62, 3 << 61]);
    // Each dimension's block of 4096 points is evenly spread, scrambled or not, past the
    // direction-number table too.
    for g in [Generator::Sobol32, Generator::ScrambledSobol32, Generator::Sobol64, Generator::ScrambledSobol64] {
        let mut seed = Seed::new(g, 0);
        seed.dimensions = 40;
        let out = d.upload(s, &vec![f64::NAN; 40 * 4096]).unwrap();
        h.rng().unwrap().uniform(&seed, &out).unwrap().wait().unwrap();
        let host = out.download(s).unwrap();
        for dim in 0..40 {
            let block = &host[dim * 4096..(dim + 1) * 4096];
            assert!(block.iter().all(|&x| x > 0.0 && x <= 1.0));
            for quarter in 0..4 {
                let lo = quarter as f64 / 4.0;
                let count = block.iter().filter(|&&x| x > lo && x <= lo + 0.25).count();
                assert!((count as i64 - 1024).abs() <= 2, "{g:?} dimension {dim}: {count} in quarter {quarter}");
            }
        }
    }
}

#[test]
fn draws_run_under_their_declared_uses() {
    // A draw on one stream, read on another right after: the tracker orders them, and the
    // checker sees the draw's write as declared.
    let d = sim();
    let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let mut h = Handles::new(&d, s1).unwrap();
    let out = d.alloc_zeros::<u32>(s1, 1000).unwrap();
    h.rng().unwrap().bits(&Seed::new(Generator::Philox4x32_10, 3), &out).unwrap();
    assert_eq!(out.download(s2).unwrap(), reference::bits(3, 0, 1000));
    assert!(d.sim_hazards().unwrap().is_empty());
}

/// As on a GPU: in a graph recording a quasi-random draw records and replays the eager draw's
/// numbers; a pseudo-random one is refused, typed (its state set-up cannot be captured there).
#[test]
fn pseudo_random_draws_are_refused_in_a_recording_and_quasi_random_ones_record() {
    let (d, s, mut h) = setup();
    for g in Generator::ALL {
        let seed = Seed::new(g, 11);
        let eager = d.alloc_zeros::<f32>(s, 256).unwrap();
        h.rng().unwrap().uniform(&seed, &eager).unwrap().wait().unwrap();
        let want = eager.download(s).unwrap();
        let out = d.alloc_zeros::<f32>(s, 256).unwrap();
        let o = out.clone();
        let graph = Graph::record(&d, move |rec| rec.handles(0)?.rng()?.uniform(&seed, &o).map(drop));
        match (g.is_quasi(), graph) {
            (true, Ok(graph)) => {
                let exec = graph.instantiate().unwrap();
                exec.replay(s).unwrap().wait().unwrap();
                assert_eq!(out.download(s).unwrap(), want, "{g:?}");
            }
            (false, Err(Error::Recording { what, .. })) => {
                assert!(what.contains("pseudo-random"), "{g:?}: {what}")
            }
            (_, other) => panic!("{g:?}: {:?}", other.map(drop)),
        }
    }
}
