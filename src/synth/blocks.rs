//! Pseudo-random tensor data written straight in ggml's storage formats.
//!
//! Owns how a synthetic tensor of any supported [`GgmlType`] gets its bytes without a
//! quantizer: the quant bits are pseudo-random and every scale field is set explicitly to a
//! small finite value, so that each decoded weight is finite, bounded by the requested bound
//! and roughly zero-mean. Decode speed depends only on shapes and types, so these files run
//! as fast as real ones, and writing them costs little more than the disk write: an
//! 8B-parameter Q4_K_M model is a few seconds of generation.
//!
//! The block scales are drawn per block, about as varied as a real model's (see
//! `random_half_below`), not one constant: ggml's CPU kernels convert each block's f16 scale
//! through a 256 KB lookup table on x86, so a constant scale (one cache line, always hot) made
//! synthetic files decode a few percent faster than real ones.
//!
//! Block layouts and decoding formulas are ggml's (`ggml-common.h`, `dequantize_row_*` in
//! `ggml-quants.c`); the tests check every type against ggml's own dequantizer.

use std::io::{self, Write};

use super::quant::{f16_bits_to_f32, f32_to_f16_bits};
use crate::gguf::GgmlType;

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
pub(crate) fn is_supported(ggml_type: GgmlType) -> bool {
    SUPPORTED_TYPES.contains(&ggml_type)
}

/// The names of the supported types, for error messages.
#[must_use]
pub(crate) fn supported_type_names() -> String {
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
    // The scales have a stream of their own, so the bytes do not depend on the chunk size.
    let mut scale_rng = WyRand(seed ^ 0x5ca1_ab1e_5ca1_ab1e);
    let chunk_bytes = (CHUNK_BYTES / block_bytes).max(1) * block_bytes;
    let mut buffer = vec![0_u8; chunk_bytes.min(n_bytes as usize)];
    let mut remaining = n_bytes;
    let recipe = block_recipe(ggml_type, bound);
    while remaining > 0 {
        let len = remaining.min(buffer.len() as u64) as usize;
        let chunk = &mut buffer[..len];
        match ggml_type {
            GgmlType::F32 => fill_float(chunk, bound, &mut rng, F32_BITS),
            GgmlType::F16 => fill_float(chunk, bound, &mut rng, F16_BITS),
            GgmlType::BF16 => fill_float(chunk, bound, &mut rng, BF16_BITS),
            _ => {
                rng.fill_bytes(chunk);
                for block in chunk.chunks_exact_mut(block_bytes) {
                    recipe.apply(block, &mut scale_rng);
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

/// How one block of a type is completed after its bytes were filled at random: fixed bytes
/// (packed sub-block scales chosen so that values centre on zero) and per-block scale fields.
#[derive(Debug, Default)]
struct BlockRecipe {
    fixed: Vec<(usize, Vec<u8>)>,
    scales: Vec<ScaleField>,
}

#[derive(Debug, Clone, Copy)]
enum ScaleField {
    /// A random f16 scale at `offset`, below `max`.
    Half { offset: usize, max: f32 },
    /// An f16 at `offset` equal to `factor` times the scale at `of` (a min that centres a
    /// block whose quants are all non-negative).
    HalfTimes {
        offset: usize,
        of: usize,
        factor: f32,
    },
    /// A random E8M0 exponent at `offset`, at most `max`.
    Exponent { offset: usize, max: u8 },
}

impl BlockRecipe {
    fn apply(&self, block: &mut [u8], rng: &mut WyRand) {
        for (offset, bytes) in &self.fixed {
            block[*offset..*offset + bytes.len()].copy_from_slice(bytes);
        }
        if self.scales.is_empty() {
            return;
        }
        let mut bits = rng.next_u64();
        for field in &self.scales {
            match *field {
                ScaleField::Half { offset, max } => {
                    let half = random_half_below(max, bits);
                    bits = bits.rotate_right(13);
                    block[offset..offset + 2].copy_from_slice(&half.to_le_bytes());
                }
                ScaleField::HalfTimes { offset, of, factor } => {
                    let scale = f16_bits_to_f32(u16::from_le_bytes([block[of], block[of + 1]]));
                    let half = f32_to_f16_bits((scale * factor).clamp(-65504.0, 65504.0));
                    block[offset..offset + 2].copy_from_slice(&half.to_le_bytes());
                }
                ScaleField::Exponent { offset, max } => {
                    block[offset] = max.saturating_sub((bits & 3) as u8).max(2);
                    bits = bits.rotate_right(2);
                }
            }
        }
    }
}

/// An f16 below `max` (clamped to f16's range), spread like a real model's block scales: the
/// binade just under `max`'s own three times in four, the one below otherwise, with 512
/// mantissas each. Llama 3 and Gemma 3 GGUFs have a few hundred to about a thousand distinct
/// scales per tensor, most within one binade. Too narrow a spread (one constant) keeps the
/// scale lookup table's cache line hot and decodes faster than a real model; too wide a
/// spread (four binades) prefills slower (BENCHMARKS.md).
fn random_half_below(max: f32, bits: u64) -> u16 {
    let max_bits = f32_to_f16_bits(max.clamp(0.0, 65504.0));
    let exponent = i32::from((max_bits >> 10) & 0x1f);
    let chosen = exponent - 1 - i32::from(bits & 3 == 3);
    let mantissa = ((bits >> 2) & 0x1ff) as u16 * 2;
    if chosen < 1 {
        // Too small for two normal binades: half of it, rounded (possibly to zero).
        return f32_to_f16_bits(max.clamp(0.0, 65504.0) / 2.0);
    }
    ((chosen as u16) << 10) | mantissa
}

/// The recipe of each block type, with every scale chosen so that decoded values stay within
/// `bound`.
fn block_recipe(ggml_type: GgmlType, bound: f32) -> BlockRecipe {
    let half = |offset, max: f32| ScaleField::Half { offset, max };
    let times = |offset, of, factor| ScaleField::HalfTimes { offset, of, factor };
    let same_as = |offset, of| times(offset, of, 1.0);
    let recipe =
        |fixed: Vec<(usize, Vec<u8>)>, scales: Vec<ScaleField>| BlockRecipe { fixed, scales };
    match ggml_type {
        // d * (q - 8), q in 0..16.
        GgmlType::Q4_0 => recipe(vec![], vec![half(0, bound / 8.0)]),
        // d * q + m, q in 0..16, m = -7.5 d.
        GgmlType::Q4_1 => recipe(vec![], vec![half(0, bound / 8.0), times(2, 0, -7.5)]),
        // d * (q - 16), q in 0..32.
        GgmlType::Q5_0 => recipe(vec![], vec![half(0, bound / 16.0)]),
        // d * q + m, q in 0..32, m = -15.5 d.
        GgmlType::Q5_1 => recipe(vec![], vec![half(0, bound / 16.0), times(2, 0, -15.5)]),
        // d * q, q an i8.
        GgmlType::Q8_0 => recipe(vec![], vec![half(0, bound / 128.0)]),
        // scales[16] (4-bit scale 2, 4-bit min 3), qs[64], d, dmin = d: d * (2q - 3), q in
        // 0..4.
        GgmlType::Q2_K => recipe(
            vec![(0, vec![0x32; 16])],
            vec![half(80, bound / 3.0), same_as(82, 80)],
        ),
        // hmask[32], qs[64], scales[12] (every 6-bit scale 33, i.e. 1 after the -32 offset),
        // d: d * q, q in -4..4.
        GgmlType::Q3_K => {
            let mut scales = vec![0x11; 8];
            scales.extend_from_slice(&[0xAA; 4]);
            recipe(vec![(96, scales)], vec![half(108, bound / 4.0)])
        }
        // d, dmin = d, scales[12] (6-bit scales 8, mins 60): d * (8q - 60), q in 0..16.
        GgmlType::Q4_K => {
            let mut scales = vec![8, 8, 8, 8, 0xFC, 0xFC, 0xFC, 0xFC];
            scales.extend_from_slice(&[0xC8; 4]);
            recipe(
                vec![(4, scales)],
                vec![half(0, bound / 60.0), same_as(2, 0)],
            )
        }
        // d, dmin = d, scales[12] (6-bit scales 4, mins 62): d * (4q - 62), q in 0..32.
        GgmlType::Q5_K => {
            let mut scales = vec![4, 4, 4, 4, 0xFE, 0xFE, 0xFE, 0xFE];
            scales.extend_from_slice(&[0xE4; 4]);
            recipe(
                vec![(4, scales)],
                vec![half(0, bound / 62.0), same_as(2, 0)],
            )
        }
        // ql[128], qh[64], scales[16] (i8 16), d: d * 16 * (q - 32), q in 0..64.
        GgmlType::Q6_K => recipe(vec![(192, vec![16; 16])], vec![half(208, bound / 512.0)]),
        // d * kvalues_iq4nl[q], |kvalue| <= 127.
        GgmlType::IQ4_NL => recipe(vec![], vec![half(0, bound / 127.0)]),
        // d, scales_h, scales_l[4] (every 6-bit scale 33): d * kvalues_iq4nl[q].
        GgmlType::IQ4_XS => recipe(
            vec![(2, vec![0xAA, 0xAA, 0x11, 0x11, 0x11, 0x11])],
            vec![half(0, bound / 127.0)],
        ),
        // e (E8M0): kvalues_mxfp4[q] * 2^(e - 128), |kvalue| <= 12.
        GgmlType::MXFP4 => {
            let exponent = 128.0 + (bound / 12.0).log2().floor();
            recipe(
                vec![],
                vec![ScaleField::Exponent {
                    offset: 0,
                    max: exponent.clamp(2.0, 254.0) as u8,
                }],
            )
        }
        _ => BlockRecipe::default(),
    }
}

/// Biased exponent of the largest power of two strictly below `bound` (at least 2^-1 smaller),
/// clamped so that the 4 exponents used (`base..base + 4`) stay normal and finite.
fn exponent_base(bound: f32, bias: i32, max_biased: i32) -> u64 {
    let top = bound.log2().floor() as i32 - 1;
    (top - 3 + bias).clamp(1, max_biased - 3) as u64
}

/// A float format's bits, per lane of a 64-bit word: (exponent bias, largest finite biased
/// exponent, mantissa bits, 1 in every lane, the sign and mantissa mask).
type FloatBits = (i32, i32, u32, u64, u64);
const F16_BITS: FloatBits = (15, 30, 10, 0x0001_0001_0001_0001, 0x83FF_83FF_83FF_83FF);
const BF16_BITS: FloatBits = (127, 254, 7, 0x0001_0001_0001_0001, 0x807F_807F_807F_807F);
const F32_BITS: FloatBits = (127, 254, 23, 0x0000_0001_0000_0001, 0x807F_FFFF_807F_FFFF);

/// Random floats built from their bits: random sign and mantissa, one of four exponents just
/// below the bound. Not uniform, but finite, bounded and zero-mean, and several values per
/// random word.
fn fill_float(chunk: &mut [u8], bound: f32, rng: &mut WyRand, bits: FloatBits) {
    let (bias, max_biased, shift, lane, keep) = bits;
    let base = exponent_base(bound, bias, max_biased) * lane;
    fill_words(chunk, rng, |r| {
        let exponent = ((r >> shift) & (3 * lane)) + base;
        (r & keep) | (exponent << shift)
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
    fn q4_k_blocks_carry_packed_scales_and_varied_block_scales() {
        let bytes = generate(
            GgmlType::Q4_K,
            256 * 4096,
            Fill::Random {
                bound: 0.6,
                seed: 5,
            },
        );
        let mut distinct = std::collections::HashSet::new();
        for block in bytes.chunks_exact(144) {
            let scale = f16_bits_to_f32(u16::from_le_bytes([block[0], block[1]]));
            assert!((0.01 / 8.0..0.01).contains(&scale), "{scale}");
            assert_eq!(&block[2..4], &block[0..2], "dmin = d");
            distinct.insert(block[0..2].to_vec());
            assert_eq!(
                &block[4..16],
                &[8, 8, 8, 8, 252, 252, 252, 252, 200, 200, 200, 200]
            );
        }
        // About a thousand different scales, as in a real model, not one.
        assert!((800..=1024).contains(&distinct.len()), "{}", distinct.len());
    }

    #[test]
    fn random_halves_stay_below_their_maximum() {
        for max in [1e-3_f32, 0.01, 0.5, 3.0, 60000.0, 1e9] {
            for bits in [0, 1, 2, 3, u64::MAX, 0x1234_5678_9abc_def0] {
                let value = f16_bits_to_f32(random_half_below(max, bits));
                assert!(
                    value.is_finite() && value >= 0.0 && value < max,
                    "{max} {value}"
                );
            }
        }
        assert!(f16_bits_to_f32(random_half_below(1e-6, u64::MAX)) < 1e-6);
        assert_eq!(random_half_below(0.0, u64::MAX), 0);
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
