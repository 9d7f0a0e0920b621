//! cuRAND's Philox4x32-10 host-API numbers by their definition: the Philox block function
//! (Salmon et al., SC'11), cuRAND's legacy ordering (value `p` is word `p % 4` of the block at
//! subsequence `(p / 4) % 65536`, counter `(p / 4) / 65536`, the seed's halves as the key), and
//! cuRAND's conversions to uniforms and Box-Muller normals. Also the sample moments the
//! distribution tests bound.

/// Philox4x32-10 of `ctr` under `key`.
pub fn philox(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key = [key[0].wrapping_add(0x9E37_79B9), key[1].wrapping_add(0xBB67_AE85)];
        }
        let p0 = 0xD251_1F53u64 * ctr[0] as u64;
        let p1 = 0xCD9E_8D57u64 * ctr[2] as u64;
        ctr = [(p1 >> 32) as u32 ^ ctr[1] ^ key[0], p1 as u32, (p0 >> 32) as u32 ^ ctr[3] ^ key[1], p0 as u32];
    }
    ctr
}

/// The Philox block at subsequence `sub`, counter `ctr`, for `seed`.
pub fn block(seed: u64, sub: u64, ctr: u64) -> [u32; 4] {
    philox([ctr as u32, (ctr >> 32) as u32, sub as u32, (sub >> 32) as u32], [seed as u32, (seed >> 32) as u32])
}

/// Word `p` of the host API's Philox sequence for `seed` (legacy ordering).
pub fn word(seed: u64, p: u64) -> u32 {
    let b = p / 4;
    block(seed, b % 65_536, b / 65_536)[(p % 4) as usize]
}

/// `curandGenerate`'s `n` words from `offset`.
pub fn bits(seed: u64, offset: u64, n: usize) -> Vec<u32> {
    (0..n as u64).map(|i| word(seed, offset + i)).collect()
}

/// cuRAND's `(0, 1]` float of a word: `x * 2^-32 + 2^-33` in `f32`.
pub fn unit32(x: u32) -> f32 {
    x as f32 * 2.328_306_4e-10 + 1.164_153_2e-10
}

/// cuRAND's `(0, 1]` double of a word pair: `(x ^ y << 21) * 2^-53 + 2^-54`.
pub fn unit53(x: u32, y: u32) -> f64 {
    let inv = 1.0 / (1u64 << 53) as f64;
    ((x as u64) ^ ((y as u64) << 21)) as f64 * inv + inv / 2.0
}

/// The block and half of `f64` value `d`: double `p = offset + d` is thread
/// `j = (p / 4) % 65536`'s (its subsequence) in round `r = p / 262144`, two blocks per round,
/// and the offset skips the thread one block per whole round of its before the offset.
pub fn double_words(seed: u64, offset: u64, d: u64) -> ([u32; 4], usize) {
    let p = offset + d;
    let (j, round) = ((p / 4) % 65_536, p / 4 / 65_536);
    let q = offset / 4;
    let skipped = if q > j { (q - j).div_ceil(65_536) } else { 0 };
    (block(seed, j, 2 * round - skipped + (p % 4) / 2), (p % 2) as usize)
}

/// `curandGenerateUniformDouble`'s `n` values.
pub fn uniform_f64(seed: u64, offset: u64, n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|d| {
            let (w, j) = double_words(seed, offset, d);
            unit53(w[2 * j], w[2 * j + 1])
        })
        .collect()
}

/// `curandGenerateNormal`'s `n` values, in `f64` from cuRAND's `f32` Box-Muller inputs.
pub fn normal_f32(seed: u64, offset: u64, n: usize, mean: f64, stddev: f64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let p = offset + i;
            let (x, y) = (word(seed, p & !1), word(seed, p | 1));
            let u = unit32(x) as f64;
            let v = (y as f64 + 0.5) * 2.328_306_436_538_696_3e-10 * std::f64::consts::TAU;
            let s = (-2.0 * u.ln()).sqrt();
            mean + stddev * s * if p % 2 == 0 { v.sin() } else { v.cos() }
        })
        .collect()
}

/// `curandGenerateNormalDouble`'s `n` values.
pub fn normal_f64(seed: u64, offset: u64, n: usize, mean: f64, stddev: f64) -> Vec<f64> {
    let inv = 1.0 / (1u64 << 53) as f64;
    (0..n as u64)
        .map(|d| {
            let (w, j) = double_words(seed, offset, d);
            let u = unit53(w[0], w[1]);
            let v = ((w[2] as u64) ^ ((w[3] as u64) << 21)) as f64 * (2.0 * inv) + inv;
            let s = (-2.0 * u.ln()).sqrt();
            let (sin, cos) = (v * std::f64::consts::PI).sin_cos();
            mean + stddev * s * if j == 0 { sin } else { cos }
        })
        .collect()
}

/// Sample mean and (population) variance.
pub fn moments(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    (mean, var)
}
