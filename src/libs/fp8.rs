//! FP8 (E4M3 and E5M2) conversions from and to f32, as the GPU's `__nv_cvt_float_to_fp8` with
//! `__NV_SATFINITE` makes them: round to nearest even, finite values beyond the largest one
//! saturate to it, infinities too, NaN stays NaN.

/// One FP8 format: mantissa bits, the exponent of its smallest normal value, its largest
/// finite value with that value's bits, and its NaN's bits.
struct Format {
    mantissa: i32,
    min_exp: i32,
    max: f32,
    max_bits: u8,
    nan: u8,
}

const E4M3: Format = Format { mantissa: 3, min_exp: -6, max: 448.0, max_bits: 0x7e, nan: 0x7f };
const E5M2: Format = Format { mantissa: 2, min_exp: -14, max: 57344.0, max_bits: 0x7b, nan: 0x7f };

fn encode(x: f32, f: &Format) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | f.nan;
    }
    let a = x.abs();
    if a >= f.max {
        return sign | f.max_bits;
    }
    // The binade of `a` (the subnormals share the smallest normal's step).
    let binade = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
    let e = binade.max(f.min_exp);
    let step = 2f32.powi(e - f.mantissa);
    // Exact: `step` is a power of two well inside f32's range.
    let q = (a / step).round_ties_even() as u32;
    let implicit = 1u32 << f.mantissa;
    let bits = if e == f.min_exp && q < implicit {
        q
    } else if q == 2 * implicit {
        // Rounded up into the next binade (below the largest value, so still finite).
        ((e + 2 - f.min_exp) as u32) << f.mantissa
    } else {
        (((e - f.min_exp + 1) as u32) << f.mantissa) | (q - implicit)
    };
    sign | bits as u8
}

/// f32 to E4M3 bits (round to nearest even, saturating at ±448).
pub(crate) fn e4m3_from_f32(x: f32) -> u8 {
    encode(x, &E4M3)
}

/// f32 to E5M2 bits (round to nearest even, saturating at ±57344).
pub(crate) fn e5m2_from_f32(x: f32) -> u8 {
    encode(x, &E5M2)
}

/// E4M3 bits to f32 (exact).
pub(crate) fn e4m3_to_f32(bits: u8) -> f32 {
    let (e, m) = (((bits >> 3) & 0xf) as i32, (bits & 7) as f32);
    let v = match (e, bits & 7) {
        (15, 7) => f32::NAN,
        (0, _) => m * 2f32.powi(-9),
        _ => (1.0 + m / 8.0) * 2f32.powi(e - 7),
    };
    if bits & 0x80 != 0 {
        -v
    } else {
        v
    }
}

/// E5M2 bits to f32 (exact: E5M2 is the upper byte of an IEEE half).
pub(crate) fn e5m2_to_f32(bits: u8) -> f32 {
    half::f16::from_bits(u16::from(bits) << 8).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_e4m3_and_e5m2_value_round_trips() {
        for bits in 0..=255u8 {
            let v = e4m3_to_f32(bits);
            if v.is_nan() {
                assert!(e4m3_to_f32(e4m3_from_f32(v)).is_nan());
            } else if bits != 0x80 {
                assert_eq!(e4m3_from_f32(v), bits, "e4m3 {bits:#x} = {v}");
            }
            let w = e5m2_to_f32(bits);
            if w.is_finite() && bits != 0x80 {
                assert_eq!(e5m2_from_f32(w), bits, "e5m2 {bits:#x} = {w}");
            }
        }
    }

    #[test]
    fn rounding_is_to_nearest_even_and_saturates() {
        // 1.0625 lies halfway between 1.0 (even mantissa) and 1.125.
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.0625)), 1.0);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.1875)), 1.25);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1.07)), 1.125);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(1e6)), 448.0);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(f32::NEG_INFINITY)), -448.0);
        assert_eq!(e5m2_to_f32(e5m2_from_f32(1e9)), 57344.0);
        // Halfway between the largest subnormal (7/512) and the smallest normal (8/512).
        assert_eq!(e4m3_to_f32(e4m3_from_f32(7.5 / 512.0)), 8.0 / 512.0);
        assert_eq!(e4m3_to_f32(e4m3_from_f32(0.5 / 512.0)), 0.0);
        assert_eq!(e5m2_to_f32(e5m2_from_f32(0.3)), half::f16::from_f32(0.3125).to_f32());
    }
}
