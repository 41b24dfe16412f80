//! Pseudo-random tensor data written straight in ggml's storage formats.
//!
//! Owns how a synthetic tensor of any supported [`GgmlType`] gets its bytes without a
//! quantizer: the quant bits are pseudo-random and every scale field is set explicitly to a
//! small finite value, so that each decoded weight is finite, bounded by the requested bound
//! and roughly zero-mean. Decode speed depends only on shapes and types, so these files run
//! exactly as fast as real ones, and writing them costs little more than the disk write: an
//! 8B-parameter Q4_K_M model is a few seconds of generation.
//!
//! Block layouts and decoding formulas are ggml's (`ggml-common.h`, `dequantize_row_*` in
//! `ggml-quants.c`); the tests check every type against ggml's own dequantizer.

use std::io::{self, Write};

use super::gguf::GgmlType;
use super::quant::f32_to_f16_bits;

/// The types [`write_tensor`] can produce, in ggml's numbering order.
pub const SUPPORTED_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::BF16,
    GgmlType::MXFP4,
];

/// Bytes generated per write call: large enough to amortise the call, small enough to stay
/// in cache.
const CHUNK_BYTES: usize = 1 << 20;

/// What a tensor is filled with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fill {
    /// Every element is this value (norm weights are 1). Float types only.
    Constant(f32),
    /// Pseudo-random values with magnitude at most `bound`, from `seed`.
    Random {
        /// Largest magnitude of a decoded value.
        bound: f32,
        /// Seed of this tensor's stream.
        seed: u64,
    },
}

/// Whether [`write_tensor`] can produce this type.
#[must_use]
pub fn is_supported(ggml_type: GgmlType) -> bool {
    SUPPORTED_TYPES.contains(&ggml_type)
}

/// The names of the supported types, for error messages.
#[must_use]
pub fn supported_type_names() -> String {
    SUPPORTED_TYPES
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `n_elements` values of `ggml_type` (a whole number of its blocks) to `out`.
///
/// Errors with `InvalidInput` for an unsupported type, a constant fill of a quantized type, or
/// an element count that is not a whole number of blocks.
pub fn write_tensor(
    ggml_type: GgmlType,
    n_elements: u64,
    fill: Fill,
    out: &mut dyn Write,
) -> io::Result<()> {
    let invalid = |reason: String| io::Error::new(io::ErrorKind::InvalidInput, reason);
    let (block_elems, block_bytes) = ggml_type
        .block_layout()
        .filter(|_| is_supported(ggml_type))
        .ok_or_else(|| invalid(format!("cannot generate data of type {ggml_type}")))?;
    if n_elements % block_elems != 0 {
        return Err(invalid(format!(
            "{n_elements} elements are not a whole number of {ggml_type} blocks of {block_elems}"
        )));
    }
    let n_bytes = n_elements / block_elems * block_bytes;
    let block_bytes = block_bytes as usize;
    let (bound, seed) = match fill {
        Fill::Constant(value) => return write_constant(ggml_type, n_elements, value, out),
        Fill::Random { bound, seed } => (sanitize_bound(bound), seed),
    };

    let mut rng = WyRand(seed);
    let chunk_bytes = (CHUNK_BYTES / block_bytes).max(1) * block_bytes;
    let mut buffer = vec![0_u8; chunk_bytes.min(n_bytes as usize)];
    let mut remaining = n_bytes;
    let patches = block_patches(ggml_type, bound);
    while remaining > 0 {
        let len = remaining.min(buffer.len() as u64) as usize;
        let chunk = &mut buffer[..len];
        match ggml_type {
            GgmlType::F32 => fill_f32(chunk, bound, &mut rng),
            GgmlType::F16 => fill_f16(chunk, bound, &mut rng),
            GgmlType::BF16 => fill_bf16(chunk, bound, &mut rng),
            _ => {
                rng.fill_bytes(chunk);
                for block in chunk.chunks_exact_mut(block_bytes) {
                    for (offset, bytes) in &patches {
                        block[*offset..*offset + bytes.len()].copy_from_slice(bytes);
                    }
                }
            }
        }
        out.write_all(chunk)?;
        remaining -= len as u64;
    }
    Ok(())
}

/// A finite, positive bound; anything else falls back to 1/16 (a typical weight scale).
fn sanitize_bound(bound: f32) -> f32 {
    if bound.is_finite() && bound > 0.0 {
        bound
    } else {
        1.0 / 16.0
    }
}

fn write_constant(
    ggml_type: GgmlType,
    n_elements: u64,
    value: f32,
    out: &mut dyn Write,
) -> io::Result<()> {
    let element: Vec<u8> = match ggml_type {
        GgmlType::F32 => value.to_le_bytes().to_vec(),
        GgmlType::F16 => f32_to_f16_bits(value).to_le_bytes().to_vec(),
        GgmlType::BF16 => ((value.to_bits() >> 16) as u16).to_le_bytes().to_vec(),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a constant fill needs a float type, not {other}"),
            ))
        }
    };
    let per_chunk = CHUNK_BYTES / element.len();
    let chunk: Vec<u8> = element.repeat(per_chunk);
    let mut remaining = n_elements;
    while remaining > 0 {
        let n = remaining.min(per_chunk as u64) as usize;
        out.write_all(&chunk[..n * element.len()])?;
        remaining -= n as u64;
    }
    Ok(())
}

/// The fixed bytes of every block of a type: `(offset, bytes)` pairs written over the random
/// bytes. They set each scale so that decoded values stay within `bound`, with the offsets of
/// `min`-style fields chosen to centre the values on zero.
fn block_patches(ggml_type: GgmlType, bound: f32) -> Vec<(usize, Vec<u8>)> {
    // Clamped to f16's range: a scale must never round to infinity.
    let half = |value: f32| f32_to_f16_bits(value.clamp(-65504.0, 65504.0)).to_le_bytes();
    let scale_and = |d: f32, extra: &[u8]| -> Vec<u8> {
        let mut bytes = half(d).to_vec();
        bytes.extend_from_slice(extra);
        bytes
    };
    match ggml_type {
        // d * (q - 8), q in 0..16.
        GgmlType::Q4_0 => vec![(0, half(bound / 8.0).to_vec())],
        // d * q + m, q in 0..16, m = -7.5 d.
        GgmlType::Q4_1 => {
            let d = bound / 8.0;
            vec![(0, scale_and(d, &half(-7.5 * d)))]
        }
        // d * (q - 16), q in 0..32.
        GgmlType::Q5_0 => vec![(0, half(bound / 16.0).to_vec())],
        // d * q + m, q in 0..32, m = -15.5 d.
        GgmlType::Q5_1 => {
            let d = bound / 16.0;
            vec![(0, scale_and(d, &half(-15.5 * d)))]
        }
        // d * q, q an i8.
        GgmlType::Q8_0 => vec![(0, half(bound / 128.0).to_vec())],
        // scales[16] (4-bit scale 2, 4-bit min 3), qs[64], d, dmin = d: d * (2q - 3), q in 0..4.
        GgmlType::Q2_K => {
            let d = bound / 3.0;
            vec![(0, vec![0x32; 16]), (80, scale_and(d, &half(d)))]
        }
        // hmask[32], qs[64], scales[12] (every 6-bit scale 33, i.e. 1 after the -32 offset),
        // d: d * q, q in -4..4.
        GgmlType::Q3_K => {
            let mut scales = vec![0x11; 8];
            scales.extend_from_slice(&[0xAA; 4]);
            scales.extend_from_slice(&half(bound / 4.0));
            vec![(96, scales)]
        }
        // d, dmin = d, scales[12] (6-bit scales 8, mins 60): d * (8q - 60), q in 0..16.
        GgmlType::Q4_K => {
            let d = bound / 60.0;
            let mut bytes = scale_and(d, &half(d));
            bytes.extend_from_slice(&[8, 8, 8, 8, 0xFC, 0xFC, 0xFC, 0xFC]);
            bytes.extend_from_slice(&[0xC8; 4]);
            vec![(0, bytes)]
        }
        // d, dmin = d, scales[12] (6-bit scales 4, mins 62): d * (4q - 62), q in 0..32.
        GgmlType::Q5_K => {
            let d = bound / 62.0;
            let mut bytes = scale_and(d, &half(d));
            bytes.extend_from_slice(&[4, 4, 4, 4, 0xFE, 0xFE, 0xFE, 0xFE]);
            bytes.extend_from_slice(&[0xE4; 4]);
            vec![(0, bytes)]
        }
        // ql[128], qh[64], scales[16] (i8 16), d: d * 16 * (q - 32), q in 0..64.
        GgmlType::Q6_K => {
            let mut bytes = vec![16; 16];
            bytes.extend_from_slice(&half(bound / 512.0));
            vec![(192, bytes)]
        }
        // d * kvalues_iq4nl[q], |kvalue| <= 127.
        GgmlType::IQ4_NL => vec![(0, half(bound / 127.0).to_vec())],
        // d, scales_h, scales_l[4] (every 6-bit scale 33): d * kvalues_iq4nl[q].
        GgmlType::IQ4_XS => {
            let mut bytes = half(bound / 127.0).to_vec();
            bytes.extend_from_slice(&[0xAA, 0xAA, 0x11, 0x11, 0x11, 0x11]);
            vec![(0, bytes)]
        }
        // e (E8M0): kvalues_mxfp4[q] * 2^(e - 128), |kvalue| <= 12.
        GgmlType::MXFP4 => {
            let exponent = 128.0 + (bound / 12.0).log2().floor();
            vec![(0, vec![exponent.clamp(2.0, 254.0) as u8])]
        }
        _ => Vec::new(),
    }
}

/// Biased exponent of the largest power of two strictly below `bound` (at least 2^-1 smaller),
/// clamped so that the 4 exponents used (`base..base + 4`) stay normal and finite.
fn exponent_base(bound: f32, bias: i32, max_biased: i32) -> u64 {
    let top = bound.log2().floor() as i32 - 1;
    (top - 3 + bias).clamp(1, max_biased - 3) as u64
}

/// Random floats built from their bits: random sign and mantissa, one of four exponents just
/// below the bound. Not uniform, but finite, bounded and zero-mean, and several values per
/// random word.
fn fill_f16(chunk: &mut [u8], bound: f32, rng: &mut WyRand) {
    let base = exponent_base(bound, 15, 30) * 0x0001_0001_0001_0001;
    fill_words(chunk, rng, |r| {
        let exponent = ((r >> 10) & 0x0003_0003_0003_0003) + base;
        (r & 0x83FF_83FF_83FF_83FF) | (exponent << 10)
    });
}

fn fill_bf16(chunk: &mut [u8], bound: f32, rng: &mut WyRand) {
    let base = exponent_base(bound, 127, 254) * 0x0001_0001_0001_0001;
    fill_words(chunk, rng, |r| {
        let exponent = ((r >> 7) & 0x0003_0003_0003_0003) + base;
        (r & 0x807F_807F_807F_807F) | (exponent << 7)
    });
}

fn fill_f32(chunk: &mut [u8], bound: f32, rng: &mut WyRand) {
    let base = exponent_base(bound, 127, 254) * 0x0000_0001_0000_0001;
    fill_words(chunk, rng, |r| {
        let exponent = ((r >> 23) & 0x0000_0003_0000_0003) + base;
        (r & 0x807F_FFFF_807F_FFFF) | (exponent << 23)
    });
}

/// Fills `chunk` with `make(random word)`, little-endian; a tail shorter than 8 bytes takes
/// the first bytes of one more word (chunks hold whole elements, so no element is split).
fn fill_words(chunk: &mut [u8], rng: &mut WyRand, make: impl Fn(u64) -> u64) {
    let mut words = chunk.chunks_exact_mut(8);
    for word in &mut words {
        word.copy_from_slice(&make(rng.next_u64()).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let bytes = make(rng.next_u64()).to_le_bytes();
        tail.copy_from_slice(&bytes[..tail.len()]);
    }
}

/// wyrand: one multiply per 8 random bytes, the fastest generator that is still good enough
/// for weights nobody reads.
struct WyRand(u64);

impl WyRand {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) ^ t) as u64
    }

    fn fill_bytes(&mut self, bytes: &mut [u8]) {
        fill_words(bytes, self, |r| r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::quant::f16_bits_to_f32;

    fn generate(ggml_type: GgmlType, n_elements: u64, fill: Fill) -> Vec<u8> {
        let mut out = Vec::new();
        write_tensor(ggml_type, n_elements, fill, &mut out).unwrap();
        out
    }

    #[test]
    fn sizes_follow_the_block_layouts() {
        for ggml_type in SUPPORTED_TYPES {
            let (block_elems, block_bytes) = ggml_type.block_layout().unwrap();
            let n_elements = block_elems * 1000;
            let bytes = generate(
                ggml_type,
                n_elements,
                Fill::Random {
                    bound: 0.1,
                    seed: 1,
                },
            );
            assert_eq!(bytes.len() as u64, 1000 * block_bytes, "{ggml_type}");
        }
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let fill = |seed| Fill::Random { bound: 0.1, seed };
        let a = generate(GgmlType::Q4_K, 256 * 64, fill(3));
        assert_eq!(a, generate(GgmlType::Q4_K, 256 * 64, fill(3)));
        assert_ne!(a, generate(GgmlType::Q4_K, 256 * 64, fill(4)));
        // Chunking does not change the stream: a prefix of a longer tensor is the shorter one.
        let long = generate(GgmlType::Q8_0, 32 * 100_000, fill(9));
        let short = generate(GgmlType::Q8_0, 32 * 10, fill(9));
        assert_eq!(&long[..short.len()], short.as_slice());
    }

    #[test]
    fn q4_k_blocks_carry_the_fixed_scales() {
        let bytes = generate(
            GgmlType::Q4_K,
            512,
            Fill::Random {
                bound: 0.6,
                seed: 5,
            },
        );
        for block in bytes.chunks_exact(144) {
            let d = f16_bits_to_f32(u16::from_le_bytes([block[0], block[1]]));
            assert!((d - 0.01).abs() < 1e-5, "{d}");
            assert_eq!(&block[2..4], &block[0..2], "dmin = d");
            assert_eq!(
                &block[4..16],
                &[8, 8, 8, 8, 252, 252, 252, 252, 200, 200, 200, 200]
            );
        }
    }

    #[test]
    fn float_types_stay_within_the_bound_and_are_centred() {
        let bound = 1.0 / 64.0;
        let fill = Fill::Random { bound, seed: 11 };
        let f16: Vec<f32> = generate(GgmlType::F16, 4096, fill)
            .chunks_exact(2)
            .map(|c| f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        let f32s: Vec<f32> = generate(GgmlType::F32, 4096, fill)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let bf16: Vec<f32> = generate(GgmlType::BF16, 4096, fill)
            .chunks_exact(2)
            .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
            .collect();
        for values in [f16, f32s, bf16] {
            assert!(values.iter().all(|v| v.is_finite() && v.abs() <= bound));
            assert!(values.iter().all(|v| v.abs() >= bound / 32.0));
            let mean = values.iter().sum::<f32>() / values.len() as f32;
            assert!(mean.abs() < bound / 10.0, "{mean}");
            assert!(values.iter().any(|&v| v > 0.0) && values.iter().any(|&v| v < 0.0));
        }
    }

    #[test]
    fn constant_fill_and_refusals() {
        let ones = generate(GgmlType::F32, 3, Fill::Constant(1.0));
        assert_eq!(
            ones,
            [1.0_f32; 3]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let half_ones = generate(GgmlType::F16, 2, Fill::Constant(1.0));
        assert_eq!(half_ones, vec![0x00, 0x3C, 0x00, 0x3C]);
        let bf16_ones = generate(GgmlType::BF16, 1, Fill::Constant(1.0));
        assert_eq!(bf16_ones, vec![0x80, 0x3F]);

        let mut out = Vec::new();
        let error = write_tensor(GgmlType::Q4_K, 256, Fill::Constant(1.0), &mut out).unwrap_err();
        assert!(error.to_string().contains("float type"), "{error}");
        let error =
            write_tensor(GgmlType::IQ2_XXS, 256, Fill::Constant(0.0), &mut out).unwrap_err();
        assert!(error.to_string().contains("iq2_xxs"), "{error}");
        let random = Fill::Random {
            bound: 0.1,
            seed: 1,
        };
        let error = write_tensor(GgmlType::Q4_K, 100, random, &mut out).unwrap_err();
        assert!(error.to_string().contains("whole number"), "{error}");
        assert!(out.is_empty());
        assert!(!is_supported(GgmlType::Q8_K));
        assert!(supported_type_names().contains("q4_K"));
    }

    #[test]
    fn odd_bounds_are_sanitised() {
        for bound in [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-30, 1e30] {
            let bytes = generate(GgmlType::F16, 64, Fill::Random { bound, seed: 2 });
            for c in bytes.chunks_exact(2) {
                assert!(f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]])).is_finite());
            }
            let q = generate(GgmlType::Q8_0, 32, Fill::Random { bound, seed: 2 });
            assert!(f16_bits_to_f32(u16::from_le_bytes([q[0], q[1]])).is_finite());
        }
    }
}
