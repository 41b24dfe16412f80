//! `synth --like MODEL.gguf`: a synthetic clone of any GGUF model's shape.
//!
//! Owns the copying rules: every metadata key (architecture, hyperparameters, tokenizer, chat
//! template) is copied as it is, `general.name` gets " (synthetic)" and the file is marked
//! synthetic; every tensor keeps its name, shape and type and gets pseudo-random data
//! ([`super::blocks`]). Only the header of the source is read, never its weights, so cloning a
//! model proves nothing about it except its shape — which is all that decode speed depends on.
//!
//! With a file type (`synth --like X --type q8_0`), every matrix gets the type llama.cpp's
//! quantizer would give it in a file of that type ([`super::mix`]: the output projection's
//! extra bits, `use_more_bits` for Q4_K_M, the fallbacks for rows that are not whole blocks),
//! 1-D tensors keep theirs, and `general.file_type` says the new type: the same model's shape
//! at another quantization, for speed (its weights are random, so quality figures mean nothing).

use std::path::Path;

use super::blocks::{self, Fill};
use super::mix::{self, TensorRole, TensorSite};
use super::{
    finish, tensor_seed, SynthError, SynthSummary, TensorType, SYNTHETIC_SEED_METADATA_KEY,
    SYNTHETIC_SOURCE_METADATA_KEY,
};
use crate::gguf::{
    self, GgmlType, GgufArray, GgufValue, GgufWriter, TensorData, WriteProgress,
    SYNTHETIC_METADATA_KEY,
};

/// Suffix appended to the source's `general.name`.
pub(crate) const NAME_SUFFIX: &str = " (synthetic)";

/// Writes a synthetic clone of `source` to `output` (atomically), reporting progress after
/// each tensor. The same source and seed always give a byte-identical file.
pub fn write_like(
    source: &Path,
    output: &Path,
    seed: u64,
    on_progress: &mut dyn FnMut(WriteProgress),
) -> Result<SynthSummary, SynthError> {
    write_like_as(source, output, seed, None, on_progress)
}

/// [`write_like`], with every tensor's type chosen for a `file_type` file when one is given.
pub fn write_like_as(
    source: &Path,
    output: &Path,
    seed: u64,
    file_type: Option<TensorType>,
    on_progress: &mut dyn FnMut(WriteProgress),
) -> Result<SynthSummary, SynthError> {
    let (writer, n_vocab) = build_clone(source, seed, file_type)?;
    // The clone replaces `output` atomically: were it the source, the real weights would be
    // gone.
    let source_path = source.canonicalize().ok();
    if source_path.is_some() && source_path == output.canonicalize().ok() {
        return Err(SynthError::CloneOverSource {
            path: source.to_path_buf(),
        });
    }
    finish(output, &writer, n_vocab, on_progress)
}

fn build_clone(
    source: &Path,
    seed: u64,
    file_type: Option<TensorType>,
) -> Result<(GgufWriter, u32), SynthError> {
    let header = gguf::read_metadata(source).map_err(|e| SynthError::Source {
        path: source.to_path_buf(),
        source: e,
    })?;
    // A tensor type the clone cannot fill is named first: it is the one thing no fix to the
    // file's metadata would change.
    // (A retyped matrix gets a type the clone fills; a 1-D tensor keeps its own.)
    if let Some(tensor) = header.tensors.iter().find(|t| {
        let retyped = file_type.is_some() && t.dims.iter().skip(1).any(|&d| d != 1);
        !retyped && !blocks::is_supported(t.ggml_type)
    }) {
        return Err(SynthError::UnsupportedTensorType {
            path: source.to_path_buf(),
            tensor: tensor.name.clone(),
            ggml_type: tensor.ggml_type,
        });
    }

    // What llama.cpp rejects is not cloned: overlapping tensor offsets would make the clone
    // far larger than the source, and a crashing vocabulary would crash the clone too.
    gguf::validate::validate_model(&header).map_err(|defect| SynthError::SourceDefect {
        path: source.to_path_buf(),
        defect,
    })?;

    let mut writer = GgufWriter::new();
    let mut has_name = false;
    for (key, value) in &header.metadata {
        // The writer sets its own alignment; earlier synthetic marks are replaced below.
        if key == gguf::ALIGNMENT_KEY || key.starts_with(SYNTHETIC_METADATA_KEY) {
            continue;
        }
        if key == FILE_TYPE_KEY && file_type.is_some() {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("general.name", GgufValue::String(name)) => {
                has_name = true;
                GgufValue::String(synthetic_name(name))
            }
            _ => value.clone(),
        };
        writer.add_kv(key, value)?;
    }
    let file_name = source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !has_name {
        let stem = source
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        writer.add_kv("general.name", synthetic_name(&stem))?;
    }
    writer.add_kv(SYNTHETIC_METADATA_KEY, true)?;
    writer.add_kv(SYNTHETIC_SEED_METADATA_KEY, GgufValue::U64(seed))?;
    writer.add_kv(SYNTHETIC_SOURCE_METADATA_KEY, &file_name)?;
    if let Some(t) = file_type {
        writer.add_kv(FILE_TYPE_KEY, t.file_type())?;
    }

    let n_layer = header
        .tensors
        .iter()
        .filter_map(|t| layer_of(&t.name))
        .max()
        .map_or(0, |l| l + 1);
    let tied_embeddings = !header.tensors.iter().any(|t| t.name == "output.weight");
    for (index, tensor) in header.tensors.iter().enumerate() {
        let ggml_type = match file_type {
            Some(t) => retype(
                t,
                &tensor.name,
                &tensor.dims,
                tensor.ggml_type,
                n_layer,
                tied_embeddings,
            ),
            None => tensor.ggml_type,
        };
        let n_elements = tensor.n_elements();
        let fill = fill_for(&tensor.name, &tensor.dims, ggml_type, seed, index);
        let data =
            TensorData::streamed(move |out| blocks::write_tensor(ggml_type, n_elements, fill, out));
        writer.add_tensor(&tensor.name, &tensor.dims, ggml_type, data)?;
    }

    let n_vocab = match header.get("tokenizer.ggml.tokens") {
        Some(GgufValue::Array(GgufArray::String(tokens))) => {
            u32::try_from(tokens.len()).unwrap_or(u32::MAX)
        }
        _ => 0,
    };
    Ok((writer, n_vocab))
}

/// llama.cpp's `enum llama_ftype` of the file.
const FILE_TYPE_KEY: &str = "general.file_type";

/// The block of a `blk.N.…` tensor.
fn layer_of(name: &str) -> Option<u32> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The type llama.cpp's quantizer gives a tensor in a `file_type` file: 1-D tensors (norms,
/// biases, scales) keep theirs; matrices follow [`mix::tensor_type`] by their role, a matrix of
/// no known role gets the file's base type (with the fallback for rows that are not whole
/// blocks), as llama.cpp's default does.
fn retype(
    file_type: TensorType,
    name: &str,
    dims: &[u64],
    source_type: GgmlType,
    n_layer: u32,
    tied_embeddings: bool,
) -> GgmlType {
    if dims.iter().skip(1).all(|&d| d == 1) {
        return source_type;
    }
    let row_len = dims.first().copied().unwrap_or(1);
    let part = name.strip_suffix(".weight").unwrap_or(name);
    let part = part.rsplit('.').next().unwrap_or(part);
    let role = [
        ("token_embd.weight", TensorRole::TokenEmbedding),
        ("output.weight", TensorRole::Output),
        ("attn_q", TensorRole::AttentionQ),
        ("attn_k", TensorRole::AttentionK),
        ("attn_v", TensorRole::AttentionV),
        ("attn_output", TensorRole::AttentionOutput),
        ("ffn_gate", TensorRole::FfnGate),
        ("ffn_up", TensorRole::FfnUp),
        ("ffn_down", TensorRole::FfnDown),
    ]
    .into_iter()
    .find(|&(key, _)| key == name || key == part)
    .map(|(_, role)| role);
    match role {
        Some(role) => mix::tensor_type(
            file_type,
            TensorSite {
                role,
                layer: layer_of(name).unwrap_or(0),
                n_layer,
                row_len,
                tied_embeddings,
            },
        ),
        None => mix::fallback(mix::base_type(file_type), row_len),
    }
}

fn synthetic_name(name: &str) -> String {
    if name.ends_with(NAME_SUFFIX) {
        name.to_owned()
    } else {
        format!("{name}{NAME_SUFFIX}")
    }
}

/// Vectors of float type are norms, scales or biases: norms and scales get 1 (as a freshly
/// initialised model has), everything else 0, so that no division or rotation goes wild.
/// Matrices get random values within ±1/sqrt(row length).
fn fill_for(name: &str, dims: &[u64], ggml_type: GgmlType, seed: u64, index: usize) -> Fill {
    let is_vector = dims.iter().skip(1).all(|&d| d == 1);
    let is_float = matches!(ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    if is_vector && is_float {
        let one = ["norm", "scale", "rope"].iter().any(|k| name.contains(k));
        return Fill::Constant(if one { 1.0 } else { 0.0 });
    }
    let row_len = dims.first().copied().unwrap_or(1).max(1);
    Fill::Random {
        bound: 1.0 / (row_len as f32).sqrt(),
        seed: tensor_seed(seed, index as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_the_suffix_once() {
        assert_eq!(synthetic_name("Gemma 3 270m"), "Gemma 3 270m (synthetic)");
        assert_eq!(synthetic_name("x (synthetic)"), "x (synthetic)");
    }

    #[test]
    fn fills_by_kind() {
        assert_eq!(
            fill_for("blk.0.attn_norm.weight", &[640], GgmlType::F32, 1, 0),
            Fill::Constant(1.0)
        );
        assert_eq!(
            fill_for("blk.0.attn_q.bias", &[640], GgmlType::F32, 1, 0),
            Fill::Constant(0.0)
        );
        assert!(matches!(
            fill_for("blk.0.attn_q.weight", &[640, 1024], GgmlType::Q5_0, 1, 0),
            Fill::Random { bound, .. } if (bound - 1.0 / 640_f32.sqrt()).abs() < 1e-6
        ));
    }
}
