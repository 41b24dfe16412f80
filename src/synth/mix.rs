//! Which ggml type each tensor of a synthetic model gets, for every file type.
//!
//! A "Q4_K_M" file is not all Q4_K: llama.cpp's quantizer (`llama_tensor_get_type` in
//! `src/llama-quant.cpp`) gives the output projection more bits, half of the `attn_v` and
//! `ffn_down` matrices more bits, and falls back to a 32-block type when a row is not a whole
//! number of 256-element super-blocks. This module mirrors those rules for the file types
//! `synth` writes (F32, F16, Q8_0, Q6_K, Q4_K_M, Q4_0), so that a synthetic file has the real
//! one's per-tensor types, size and speed.

use super::TensorType;
use crate::gguf::GgmlType;

/// What a tensor is for: the quantizer's rules depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TensorRole {
    /// `token_embd.weight`.
    TokenEmbedding,
    /// `output.weight` (absent when the embeddings are tied).
    Output,
    /// `attn_q`.
    AttentionQ,
    /// `attn_k`.
    AttentionK,
    /// `attn_v`.
    AttentionV,
    /// `attn_output`.
    AttentionOutput,
    /// `ffn_gate`.
    FfnGate,
    /// `ffn_up`.
    FfnUp,
    /// `ffn_down`.
    FfnDown,
    /// Norm weights (1-D): never quantized.
    Norm,
    /// `rope_freqs.weight` (1-D): never quantized.
    RopeFrequencies,
}

/// The ggml type of the weight matrices before the per-tensor rules (llama.cpp's
/// `default_type` for the file type).
#[must_use]
pub(crate) fn base_type(file_type: TensorType) -> GgmlType {
    match file_type {
        TensorType::F32 => GgmlType::F32,
        TensorType::F16 => GgmlType::F16,
        TensorType::Q8_0 => GgmlType::Q8_0,
        TensorType::Q6K => GgmlType::Q6_K,
        TensorType::Q4KM => GgmlType::Q4_K,
        TensorType::Q4_0 => GgmlType::Q4_0,
    }
}

/// Where a tensor sits: its layer (for per-layer rules) and the model's facts the rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TensorSite {
    /// What it is for.
    pub role: TensorRole,
    /// Its block (0 for tensors outside the blocks).
    pub layer: u32,
    /// Blocks in the model.
    pub n_layer: u32,
    /// Row length (`ne[0]`): quantized rows must be whole blocks.
    pub row_len: u64,
    /// Whether `token_embd` doubles as the output projection.
    pub tied_embeddings: bool,
}

/// The ggml type llama.cpp's quantizer gives this tensor in a `file_type` file.
#[must_use]
pub(crate) fn tensor_type(file_type: TensorType, site: TensorSite) -> GgmlType {
    if matches!(site.role, TensorRole::Norm | TensorRole::RopeFrequencies) {
        return GgmlType::F32;
    }
    let base = base_type(file_type);
    if !is_quantized(base) {
        return base;
    }
    let more_bits = || file_type == TensorType::Q4KM && use_more_bits(site.layer, site.n_layer);
    let chosen = match site.role {
        // The output projection (or the embeddings standing in for it) gets Q6_K, except in a
        // Q8_0 file, or Q8_0 when its rows do not fit the file's blocks.
        TensorRole::Output => output_type(base, site.row_len),
        TensorRole::TokenEmbedding if site.tied_embeddings => output_type(base, site.row_len),
        TensorRole::AttentionV | TensorRole::FfnDown if more_bits() => GgmlType::Q6_K,
        _ => base,
    };
    fallback(chosen, site.row_len)
}

fn output_type(base: GgmlType, row_len: u64) -> GgmlType {
    if row_len % block_elems(base) != 0 {
        GgmlType::Q8_0
    } else if base != GgmlType::Q8_0 {
        GgmlType::Q6_K
    } else {
        base
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third one
/// in between.
#[must_use]
pub(crate) fn use_more_bits(layer: u32, n_layer: u32) -> bool {
    let (i, n) = (i64::from(layer), i64::from(n_layer));
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// llama.cpp's `tensor_type_fallback`: a type whose blocks do not divide the row length is
/// replaced by a 32-block one, and by F16 when even that does not fit.
#[must_use]
pub(crate) fn fallback(ggml_type: GgmlType, row_len: u64) -> GgmlType {
    if row_len % block_elems(ggml_type) == 0 {
        return ggml_type;
    }
    let replacement = match ggml_type {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    };
    if row_len % block_elems(replacement) == 0 {
        replacement
    } else {
        GgmlType::F16
    }
}

fn block_elems(ggml_type: GgmlType) -> u64 {
    ggml_type.block_layout().map_or(1, |(elems, _)| elems)
}

fn is_quantized(ggml_type: GgmlType) -> bool {
    block_elems(ggml_type) > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(role: TensorRole, layer: u32) -> TensorSite {
        TensorSite {
            role,
            layer,
            n_layer: 32,
            row_len: 4096,
            tied_embeddings: false,
        }
    }

    #[test]
    fn use_more_bits_matches_llama_cpp_for_32_layers() {
        let more: Vec<u32> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            more,
            vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        let more_16: Vec<u32> = (0..16).filter(|&i| use_more_bits(i, 16)).collect();
        assert_eq!(more_16, vec![0, 1, 4, 7, 10, 13, 14, 15]);
    }

    #[test]
    fn q4_k_m_mix() {
        let q = |role, layer| tensor_type(TensorType::Q4KM, site(role, layer));
        assert_eq!(q(TensorRole::Output, 0), GgmlType::Q6_K);
        assert_eq!(q(TensorRole::TokenEmbedding, 0), GgmlType::Q4_K);
        assert_eq!(q(TensorRole::AttentionV, 0), GgmlType::Q6_K);
        assert_eq!(q(TensorRole::AttentionV, 4), GgmlType::Q4_K);
        assert_eq!(q(TensorRole::FfnDown, 6), GgmlType::Q6_K);
        assert_eq!(q(TensorRole::FfnDown, 7), GgmlType::Q4_K);
        assert_eq!(q(TensorRole::FfnGate, 0), GgmlType::Q4_K);
        assert_eq!(q(TensorRole::AttentionQ, 31), GgmlType::Q4_K);
        assert_eq!(q(TensorRole::Norm, 0), GgmlType::F32);
        let tied = TensorSite {
            tied_embeddings: true,
            ..site(TensorRole::TokenEmbedding, 0)
        };
        assert_eq!(tensor_type(TensorType::Q4KM, tied), GgmlType::Q6_K);
    }

    #[test]
    fn other_file_types() {
        let embd = site(TensorRole::TokenEmbedding, 0);
        let out = site(TensorRole::Output, 0);
        let down = site(TensorRole::FfnDown, 0);
        for (file_type, embd_type, out_type, down_type) in [
            (TensorType::F32, GgmlType::F32, GgmlType::F32, GgmlType::F32),
            (TensorType::F16, GgmlType::F16, GgmlType::F16, GgmlType::F16),
            (
                TensorType::Q8_0,
                GgmlType::Q8_0,
                GgmlType::Q8_0,
                GgmlType::Q8_0,
            ),
            (
                TensorType::Q6K,
                GgmlType::Q6_K,
                GgmlType::Q6_K,
                GgmlType::Q6_K,
            ),
            (
                TensorType::Q4_0,
                GgmlType::Q4_0,
                GgmlType::Q6_K,
                GgmlType::Q4_0,
            ),
        ] {
            assert_eq!(tensor_type(file_type, embd), embd_type, "{file_type}");
            assert_eq!(tensor_type(file_type, out), out_type, "{file_type}");
            assert_eq!(tensor_type(file_type, down), down_type, "{file_type}");
        }
    }

    #[test]
    fn rows_that_do_not_fit_fall_back_like_llama_cpp() {
        let narrow = |role| TensorSite {
            row_len: 128,
            ..site(role, 5)
        };
        assert_eq!(
            tensor_type(TensorType::Q4KM, narrow(TensorRole::AttentionQ)),
            GgmlType::Q5_0
        );
        assert_eq!(
            tensor_type(TensorType::Q4KM, narrow(TensorRole::Output)),
            GgmlType::Q8_0
        );
        assert_eq!(
            tensor_type(TensorType::Q6K, narrow(TensorRole::FfnUp)),
            GgmlType::Q8_0
        );
        assert_eq!(
            tensor_type(TensorType::Q4_0, narrow(TensorRole::Output)),
            GgmlType::Q8_0
        );
        assert_eq!(fallback(GgmlType::Q4_0, 48), GgmlType::F16);
        assert_eq!(fallback(GgmlType::Q4_K, 48), GgmlType::F16);
        assert_eq!(fallback(GgmlType::Q5_K, 96), GgmlType::Q5_1);
        assert_eq!(fallback(GgmlType::F16, 7), GgmlType::F16);
    }
}
