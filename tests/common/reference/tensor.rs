//! cuTENSOR's ops on the CPU in f64, by the plainest loops: an einsum over every mode (its sum
//! and product replaceable, for reductions by max or min), and the layouts' strides.

use std::collections::BTreeMap;

/// The extents of every mode of a spec, from the operands' mode strings and extents (inputs,
/// then the output).
pub fn extents_of(spec: &str, shapes: &[&[usize]]) -> BTreeMap<char, usize> {
    let (lhs, rhs) = spec.split_once("->").unwrap();
    let mut map = BTreeMap::new();
    for (modes, shape) in lhs.split(',').chain([rhs]).zip(shapes) {
        for (c, &e) in modes.chars().zip(shape.iter()) {
            assert_eq!(*map.entry(c).or_insert(e), e, "mode {c}");
        }
    }
    map
}

/// Row-major packed strides: the last mode contiguous.
pub fn packed(extents: &[usize]) -> Vec<usize> {
    let mut s = vec![1; extents.len()];
    for i in (0..extents.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * extents[i + 1];
    }
    s
}

/// `out[...] = Σ Π inputs` over the modes the output lacks, in f64; inputs are strided, the
/// output is packed row-major.
pub fn einsum(spec: &str, inputs: &[(&[f64], &[usize])], ext: &BTreeMap<char, usize>) -> Vec<f64> {
    einsum_fold(spec, inputs, ext, 0.0, |acc, x| acc + x)
}

/// [`einsum`] with the sum replaced by `fold` from `init` (`f64::max` from `-inf`: a max
/// reduction).
pub fn einsum_fold(
    spec: &str,
    inputs: &[(&[f64], &[usize])],
    ext: &BTreeMap<char, usize>,
    init: f64,
    fold: impl Fn(f64, f64) -> f64,
) -> Vec<f64> {
    let (lhs, rhs) = spec.split_once("->").unwrap();
    let in_modes: Vec<Vec<char>> = lhs.split(',').map(|m| m.chars().collect()).collect();
    let out_modes: Vec<char> = rhs.chars().collect();
    let out_ext: Vec<usize> = out_modes.iter().map(|c| ext[c]).collect();
    let out_strides = packed(&out_ext);
    let mut out = vec![init; out_ext.iter().product()];
    let all: Vec<char> = ext.keys().copied().collect();
    let mut idx = vec![0usize; all.len()];
    let pos = |c: char| all.iter().position(|&x| x == c).unwrap();
    loop {
        let mut prod = 1.0;
        for ((data, strides), modes) in inputs.iter().zip(&in_modes) {
            let off: usize = modes.iter().zip(strides.iter()).map(|(&c, &s)| idx[pos(c)] * s).sum();
            prod *= data[off];
        }
        let o: usize = out_modes.iter().zip(&out_strides).map(|(&c, &s)| idx[pos(c)] * s).sum();
        out[o] = fold(out[o], prod);
        // Odometer over every mode.
        let mut k = all.len();
        loop {
            if k == 0 {
                return out;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < ext[&all[k]] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Asserts `got` is within `tol` times the largest magnitude of `want` (at least 1) of `want`.
#[track_caller]
pub fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * scale, "{what}: element {i}: got {g}, want {w} (tolerance {tol} x {scale})");
    }
}
