//! cuFFT's transforms by the definition: a direct DFT in f64 over cuFFT's advanced layouts
//! (embeddings, strides, distances), unnormalized, and the Hermitian reading of a
//! complex-to-real input. Quadratic: for small sizes.
#![allow(clippy::needless_range_loop)] // index loops mirror the math

use cusched::fft::{DataLayout, Direction, FftLayout};
use cusched::Complex;

/// The offsets of batch `b`'s elements of one side of `dims` logical elements, row-major.
pub fn offsets(layout: &Option<DataLayout>, dims: &[usize], b: usize) -> Vec<usize> {
    let l =
        layout.clone().unwrap_or_else(|| DataLayout { embed: dims.to_vec(), stride: 1, dist: dims.iter().product() });
    let mut out = vec![b * l.dist];
    for (i, &n) in dims.iter().enumerate() {
        let s: usize = l.embed[i + 1..].iter().product::<usize>() * l.stride;
        out = out.iter().flat_map(|&base| (0..n).map(move |k| base + k * s)).collect();
    }
    out
}

/// The complex side's dimensions of a real transform: the last halved to `n / 2 + 1`.
pub fn halved(dims: &[usize]) -> Vec<usize> {
    let mut d = dims.to_vec();
    let last = d.len() - 1;
    d[last] = d[last] / 2 + 1;
    d
}

/// The packed row-major DFT of `x` over `dims`: `exp(-2πi jk/n)` forward, `+` inverse.
pub fn dft(x: &[(f64, f64)], dims: &[usize], direction: Direction) -> Vec<(f64, f64)> {
    let sign = if direction == Direction::Forward { -1.0 } else { 1.0 };
    let total: usize = dims.iter().product();
    let index = |mut i: usize| {
        let mut idx = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            idx[a] = i % dims[a];
            i /= dims[a];
        }
        idx
    };
    (0..total)
        .map(|k| {
            let kk = index(k);
            let (mut re, mut im) = (0.0, 0.0);
            for j in 0..total {
                let jj = index(j);
                let phase: f64 = (0..dims.len()).map(|a| (jj[a] * kk[a] % dims[a]) as f64 / dims[a] as f64).sum();
                let ang = sign * std::f64::consts::TAU * phase;
                let (s, c) = ang.sin_cos();
                re += x[j].0 * c - x[j].1 * s;
                im += x[j].0 * s + x[j].1 * c;
            }
            (re, im)
        })
        .collect()
}

/// C2C / Z2Z: `(output offset, value)` for every element the transform writes.
pub fn c2c<T: Into<f64> + Copy>(
    layout: &FftLayout,
    input: &[Complex<T>],
    direction: Direction,
) -> Vec<(usize, (f64, f64))> {
    let mut out = Vec::new();
    for b in 0..layout.batch {
        let x: Vec<(f64, f64)> =
            offsets(&layout.input, &layout.dims, b).iter().map(|&o| (input[o].re.into(), input[o].im.into())).collect();
        out.extend(offsets(&layout.output, &layout.dims, b).into_iter().zip(dft(&x, &layout.dims, direction)));
    }
    out
}

/// R2C / D2Z: the first `n / 2 + 1` bins of the last dimension.
pub fn r2c<T: Into<f64> + Copy>(layout: &FftLayout, input: &[T]) -> Vec<(usize, (f64, f64))> {
    let half = halved(&layout.dims);
    let last = layout.dims[layout.dims.len() - 1];
    let bins = last / 2 + 1;
    let mut out = Vec::new();
    for b in 0..layout.batch {
        let x: Vec<(f64, f64)> =
            offsets(&layout.input, &layout.dims, b).iter().map(|&o| (input[o].into(), 0.0)).collect();
        let full = dft(&x, &layout.dims, Direction::Forward);
        let kept = full.chunks(last).flat_map(|row| row[..bins].to_vec());
        out.extend(offsets(&layout.output, &half, b).into_iter().zip(kept));
    }
    out
}

/// C2R / Z2D: the spectrum rebuilt from its stored half by Hermitian symmetry
/// (`X[-k] = conj(X[k])`), inverted, real part.
pub fn c2r<T: Into<f64> + Copy>(layout: &FftLayout, input: &[Complex<T>]) -> Vec<(usize, f64)> {
    let dims = &layout.dims;
    let half = halved(dims);
    let rank = dims.len();
    let bins = half[rank - 1];
    let total: usize = dims.iter().product();
    let mut out = Vec::new();
    for b in 0..layout.batch {
        let stored: Vec<(f64, f64)> =
            offsets(&layout.input, &half, b).iter().map(|&o| (input[o].re.into(), input[o].im.into())).collect();
        let at = |idx: &[usize]| -> usize { idx.iter().zip(&half).fold(0, |a, (&i, &n)| a * n + i) };
        let full: Vec<(f64, f64)> = (0..total)
            .map(|mut i| {
                let mut idx = vec![0; rank];
                for a in (0..rank).rev() {
                    idx[a] = i % dims[a];
                    i /= dims[a];
                }
                if idx[rank - 1] < bins {
                    stored[at(&idx)]
                } else {
                    let mirror: Vec<usize> = idx.iter().zip(dims).map(|(&k, &n)| (n - k) % n).collect();
                    let v = stored[at(&mirror)];
                    (v.0, -v.1)
                }
            })
            .collect();
        let x = dft(&full, dims, Direction::Inverse);
        out.extend(offsets(&layout.output, dims, b).into_iter().zip(x.into_iter().map(|v| v.0)));
    }
    out
}
