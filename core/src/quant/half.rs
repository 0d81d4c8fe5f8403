//! Exact widening of the 16-bit float formats that scales and F16/BF16
//! weights are stored in. Written out here so core needs no dependency.

/// Widens an IEEE binary16 bit pattern to f32 exactly (subnormals, infinities
/// and NaN payloads included).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    match exp {
        // Zero or subnormal: man × 2^-24, exact in f32.
        0 => {
            let magnitude = man as f32 * (1.0 / 16_777_216.0);
            if sign != 0 {
                -magnitude
            } else {
                magnitude
            }
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Widens a bfloat16 bit pattern to f32 (it is the f32's top half).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Half the value of an E8M0 scale byte (a bare exponent, bias 127):
/// `2^(e − 128)`, exact, subnormal for `e < 2` (llama.cpp's
/// `GGML_E8M0_TO_FP32_HALF`; MXFP4's values are stored doubled).
#[inline]
pub fn e8m0_half_to_f32(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_to_f32_matches_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }

    #[test]
    fn e8m0_half_is_two_to_the_exponent_less_128() {
        for e in 0..=255u8 {
            assert_eq!(
                e8m0_half_to_f32(e),
                2f64.powi(i32::from(e) - 128) as f32,
                "{e}"
            );
        }
    }
}
