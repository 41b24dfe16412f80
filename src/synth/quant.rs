//! Number formats for synthetic tensors: IEEE half precision and ggml's Q8_0 blocks.
//!
//! Owns the bit-exact conversions from `f32`, so that files written here decode in llama.cpp to
//! the same values they would have had if llama.cpp's own quantizer had produced them.

/// Values per Q8_0 block: one scale shared by 32 weights.
pub(crate) const Q8_0_BLOCK_ELEMS: usize = 32;
/// Bytes per Q8_0 block: an f16 scale followed by 32 `i8` quants.
pub(crate) const Q8_0_BLOCK_BYTES: usize = 2 + Q8_0_BLOCK_ELEMS;

/// Converts an `f32` to IEEE 754 binary16 bits, rounding to nearest with ties to even.
///
/// Values too large for f16 become infinity, values too small become (signed) zero or a
/// subnormal, and NaN stays NaN (quiet), as ggml's own conversion does.
#[must_use]
pub(crate) fn f32_to_f16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x007f_ffff;

    if exponent == 0xff {
        // Keep NaN a NaN even when its payload sits only in the low mantissa bits.
        return if mantissa == 0 {
            sign | 0x7c00
        } else {
            sign | 0x7e00 | (mantissa >> 13) as u16
        };
    }

    let half_exponent = exponent - 127 + 15;
    if half_exponent >= 0x1f {
        return sign | 0x7c00;
    }

    if half_exponent <= 0 {
        // Below f16's normal range: the result is a subnormal, i.e. a multiple of 2^-24.
        if half_exponent < -10 {
            return sign;
        }
        let full_mantissa = mantissa | 0x0080_0000;
        let shift = (14 - half_exponent) as u32;
        let truncated = full_mantissa >> shift;
        let remainder = full_mantissa & ((1 << shift) - 1);
        let rounded = round_half_even(truncated, remainder, 1 << (shift - 1));
        // A carry out of the 10 mantissa bits lands in the exponent field, which is exactly the
        // smallest normal number: no special case needed.
        return sign | rounded as u16;
    }

    let truncated = ((half_exponent as u32) << 10) | (mantissa >> 13);
    let rounded = round_half_even(truncated, mantissa & 0x1fff, 0x1000);
    // A carry may overflow the exponent into 0x7c00, which is infinity: the correct result.
    sign | rounded as u16
}

/// `truncated`, rounded by the bits cut off (`remainder`, of which `halfway` is one half) to
/// nearest with ties to even.
fn round_half_even(truncated: u32, remainder: u32, halfway: u32) -> u32 {
    let up = remainder > halfway || (remainder == halfway && truncated & 1 == 1);
    truncated + u32::from(up)
}

/// Converts IEEE 754 binary16 bits to `f32` (exact: every f16 value is representable).
#[must_use]
pub(crate) fn f16_bits_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x03ff);
    match exponent {
        0 => {
            // Zero or subnormal: mantissa * 2^-24, exact in f32.
            let magnitude = mantissa as f32 * f32::from_bits(0x3380_0000);
            if sign == 0 {
                magnitude
            } else {
                -magnitude
            }
        }
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

/// Appends the little-endian f16 encoding of `values` to `out`.
pub(crate) fn encode_f16_into(values: &[f32], out: &mut Vec<u8>) {
    out.reserve(values.len() * 2);
    for &value in values {
        out.extend_from_slice(&f32_to_f16_bits(value).to_le_bytes());
    }
}

/// Appends the Q8_0 encoding of `values` to `out`, one 34-byte block per 32 values.
///
/// Mirrors ggml's reference quantizer (`quantize_row_q8_0_ref`): scale `d = max|x| / 127`,
/// quants `round(x / d)` computed with the exact scale, scale stored as f16. A trailing partial
/// block is padded with zeros; callers that need exact tensor sizes keep rows a multiple of 32.
pub(crate) fn encode_q8_0_into(values: &[f32], out: &mut Vec<u8>) {
    out.reserve(values.len().div_ceil(Q8_0_BLOCK_ELEMS) * Q8_0_BLOCK_BYTES);
    for chunk in values.chunks(Q8_0_BLOCK_ELEMS) {
        let mut block = [0.0_f32; Q8_0_BLOCK_ELEMS];
        block[..chunk.len()].copy_from_slice(chunk);
        encode_q8_0_block(&block, out);
    }
}

fn encode_q8_0_block(block: &[f32; Q8_0_BLOCK_ELEMS], out: &mut Vec<u8>) {
    let max_abs = block.iter().fold(0.0_f32, |acc, v| acc.max(v.abs()));
    let scale = max_abs / 127.0;
    let inverse_scale = if scale == 0.0 { 0.0 } else { 1.0 / scale };
    out.extend_from_slice(&f32_to_f16_bits(scale).to_le_bytes());
    for &value in block {
        // |value * inverse_scale| <= 127 by construction, so the cast cannot saturate.
        let quant = (value * inverse_scale).round() as i8;
        out.push(quant.to_le_bytes()[0]);
    }
}

/// Decodes Q8_0 blocks back to `f32` (the inverse of [`encode_q8_0_into`], up to rounding).
/// Trailing bytes that do not fill a whole block are ignored.
#[must_use]
#[cfg(test)]
pub(crate) fn decode_q8_0(bytes: &[u8]) -> Vec<f32> {
    let mut values = Vec::with_capacity(bytes.len() / Q8_0_BLOCK_BYTES * Q8_0_BLOCK_ELEMS);
    for block in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
        let scale = f16_bits_to_f32(u16::from_le_bytes([block[0], block[1]]));
        values.extend(
            block[2..]
                .iter()
                .map(|&quant| f32::from(i8::from_le_bytes([quant])) * scale),
        );
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_known_values() {
        assert_eq!(f32_to_f16_bits(0.0), 0x0000);
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        assert_eq!(f32_to_f16_bits(1.0), 0x3C00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xC000);
        assert_eq!(f32_to_f16_bits(0.5), 0x3800);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7BFF);
        assert_eq!(f32_to_f16_bits(1.0 / 3.0), 0x3555);
        // Smallest normal and the subnormal range.
        assert_eq!(f32_to_f16_bits(2.0_f32.powi(-14)), 0x0400);
        assert_eq!(f32_to_f16_bits(2.0_f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_f16_bits(-(2.0_f32.powi(-24))), 0x8001);
        assert_eq!(f32_to_f16_bits(3.0 * 2.0_f32.powi(-24)), 0x0003);
        assert_eq!(f32_to_f16_bits(2.0_f32.powi(-15)), 0x0200);
        // Exactly half the smallest subnormal ties to even (zero); just above rounds up.
        assert_eq!(f32_to_f16_bits(2.0_f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16_bits(2.0_f32.powi(-25) * 1.5), 0x0001);
        assert_eq!(f32_to_f16_bits(1e-10), 0x0000);
    }

    #[test]
    fn f16_rounding_overflow_and_specials() {
        // 1 + 2^-11 is halfway between 1.0 and the next f16: ties to even stays at 1.0.
        assert_eq!(f32_to_f16_bits(1.0 + 2.0_f32.powi(-11)), 0x3C00);
        // 1 + 3 * 2^-11 is halfway between two values; the even one is above.
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * 2.0_f32.powi(-11)), 0x3C02);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7C00);
        assert_eq!(f32_to_f16_bits(1e6), 0x7C00);
        assert_eq!(f32_to_f16_bits(-1e6), 0xFC00);
        assert_eq!(f32_to_f16_bits(f32::INFINITY), 0x7C00);
        assert_eq!(f32_to_f16_bits(f32::NEG_INFINITY), 0xFC00);
        let nan = f32_to_f16_bits(f32::NAN);
        assert_eq!(nan & 0x7C00, 0x7C00);
        assert_ne!(nan & 0x03FF, 0);
        // A NaN whose payload is only in the low bits must not turn into infinity.
        let low_payload_nan = f32_to_f16_bits(f32::from_bits(0x7f80_0001));
        assert_ne!(low_payload_nan & 0x03FF, 0);
    }

    #[test]
    fn f16_decode_round_trips_every_finite_value() {
        for bits in 0..=u16::MAX {
            let value = f16_bits_to_f32(bits);
            if value.is_nan() {
                assert!(f16_bits_to_f32(f32_to_f16_bits(value)).is_nan());
            } else {
                assert_eq!(f32_to_f16_bits(value), bits, "bits {bits:#06x}");
            }
        }
        assert_eq!(f16_bits_to_f32(0x3C00), 1.0);
        assert_eq!(f16_bits_to_f32(0xC000), -2.0);
        assert_eq!(f16_bits_to_f32(0x0001), 2.0_f32.powi(-24));
        assert_eq!(f16_bits_to_f32(0x7C00), f32::INFINITY);
    }

    #[test]
    fn q8_0_block_layout_and_round_trip_error() {
        let values: Vec<f32> = (0..96)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 61.0)
            .collect();
        let mut bytes = Vec::new();
        encode_q8_0_into(&values, &mut bytes);
        assert_eq!(bytes.len(), 3 * Q8_0_BLOCK_BYTES);

        let decoded = decode_q8_0(&bytes);
        assert_eq!(decoded.len(), values.len());
        for (block_index, (original, restored)) in values
            .chunks(Q8_0_BLOCK_ELEMS)
            .zip(decoded.chunks(Q8_0_BLOCK_ELEMS))
            .enumerate()
        {
            let exact_scale = original.iter().fold(0.0_f32, |a, v| a.max(v.abs())) / 127.0;
            let offset = block_index * Q8_0_BLOCK_BYTES;
            let stored_scale =
                f16_bits_to_f32(u16::from_le_bytes([bytes[offset], bytes[offset + 1]]));
            // Half a quantization step, plus what storing the scale as f16 costs at |q| = 127.
            let tolerance = stored_scale / 2.0 + 127.0 * (exact_scale - stored_scale).abs() + 1e-7;
            for (a, b) in original.iter().zip(restored) {
                assert!(
                    (a - b).abs() <= tolerance,
                    "{a} vs {b} (tolerance {tolerance})"
                );
            }
            // The largest magnitude maps to +-127.
            let max_quant = bytes[offset + 2..offset + Q8_0_BLOCK_BYTES]
                .iter()
                .map(|&q| i8::from_le_bytes([q]).unsigned_abs())
                .max();
            assert_eq!(max_quant, Some(127));
        }
    }

    #[test]
    fn q8_0_zero_block_and_partial_block() {
        let mut bytes = Vec::new();
        encode_q8_0_into(&[0.0; 32], &mut bytes);
        assert_eq!(bytes, vec![0u8; Q8_0_BLOCK_BYTES]);

        let mut padded = Vec::new();
        encode_q8_0_into(&[1.0, -1.0], &mut padded);
        assert_eq!(padded.len(), Q8_0_BLOCK_BYTES);
        let decoded = decode_q8_0(&padded);
        assert!((decoded[0] - 1.0).abs() < 1e-3);
        assert!((decoded[1] + 1.0).abs() < 1e-3);
        assert!(decoded[2..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn f16_encoding_is_little_endian() {
        let mut bytes = Vec::new();
        encode_f16_into(&[1.0, -2.0], &mut bytes);
        assert_eq!(bytes, vec![0x00, 0x3C, 0x00, 0xC0]);
    }
}
