//! The Philox4x32-10 core every pseudo-random generator draws from: the block function, and the
//! stream of a seed (cuRAND's legacy layout for Philox, a mixed key for the other generators).

use crate::libs::rng::{Generator, Seed};

/// Philox4x32-10 of `ctr` under `key` (Salmon et al., SC'11; cuRAND's constants).
pub(super) fn philox(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(0x9E37_79B9);
            key[1] = key[1].wrapping_add(0xBB67_AE85);
        }
        let p0 = M0 * ctr[0] as u64;
        let p1 = M1 * ctr[2] as u64;
        ctr = [((p1 >> 32) as u32) ^ ctr[1] ^ key[0], p1 as u32, ((p0 >> 32) as u32) ^ ctr[3] ^ key[1], p0 as u32];
    }
    ctr
}

/// A pseudo-random generator as a counter-based stream of 4-word blocks.
#[derive(Clone, Copy)]
pub(super) struct Stream {
    pub(super) key: [u32; 2],
    /// cuRAND's legacy Philox ordering (blocks spread over 65,536 subsequences), or one
    /// plain counter sequence.
    legacy: bool,
}

impl Stream {
    pub(super) fn of(seed: &Seed) -> Stream {
        let s = seed.seed;
        match seed.generator {
            Generator::Philox4x32_10 => Stream { key: [s as u32, (s >> 32) as u32], legacy: true },
            g => {
                // The other generators: a Philox stream keyed by the seed mixed with the generator.
                let tag = match g {
                    Generator::Default | Generator::Xorwow => 0x584f_5257u64,
                    Generator::Mrg32k3a => 0x4d52_4733,
                    _ => 0x4d54_4750,
                };
                let k = splitmix(s ^ tag.rotate_left(32));
                Stream { key: [k as u32, (k >> 32) as u32], legacy: false }
            }
        }
    }

    /// Block `b` of the sequence.
    fn block(&self, b: u64) -> [u32; 4] {
        let (sub, ctr) = if self.legacy { (b % 65_536, b / 65_536) } else { (0, b) };
        philox([ctr as u32, (ctr >> 32) as u32, sub as u32, (sub >> 32) as u32], self.key)
    }

    /// Word `p` of the sequence.
    pub(super) fn word(&self, p: u64) -> u32 {
        self.block(p / 4)[(p % 4) as usize]
    }
}

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The block of `f64` value `d` at offset `offset`, and which word pair of it the value takes.
///
/// cuRAND's legacy double draws, as measured on the GPU: double `p = offset + d` of the
/// sequence belongs to thread `j = (p / 4) % 65536` (its subsequence) in round
/// `r = p / 262144`; each round takes two blocks of the thread's subsequence (four doubles),
/// but the offset skips a thread ahead by ONE block for every whole round of its that lies
/// before the offset (cuRAND computes the skip as for words). So the block's counter is
/// `2r - skipped + (p % 4) / 2`. Other generators: one plain counter sequence.
pub(super) fn double_block(stream: &Stream, offset: u64, d: u64) -> ([u32; 4], usize) {
    let p = offset + d;
    let t = p / 4;
    let (sub, ctr) = if stream.legacy {
        let (j, round) = (t % 65_536, t / 65_536);
        let q = offset / 4;
        let skipped = if q > j { (q - j).div_ceil(65_536) } else { 0 };
        (j, 2 * round - skipped + (p % 4) / 2)
    } else {
        (0, t * 2 + (p % 4) / 2)
    };
    let block = philox([ctr as u32, (ctr >> 32) as u32, sub as u32, (sub >> 32) as u32], stream.key);
    (block, (p % 2) as usize)
}
