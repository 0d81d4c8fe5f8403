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
}
