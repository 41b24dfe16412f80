//! Counting a message's tokens without the engine: the live count under the chat input.
//!
//! Owns the choice of counter and what a count means. A count is the number of tokens of the
//! message text as the engine tokenizes it inside the prompt: no BOS, special tokens such as
//! `<|eot_id|>` parsed as one token each. It comes from the Hugging Face tokenizers crate when
//! a tokenizer.json is configured or sits next to the model (fast, no llama.cpp involved), and
//! otherwise from the model's own vocabulary, loaded by llama.cpp without any weights
//! (`vocab_only`: milliseconds, a few MB, independent of the engine thread's copy).
//!
//! [`load_vocab_only`] is shared with `tokscope doctor tokenizer`.

use std::fmt;
use std::path::{Path, PathBuf};

use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use tokenizers::Tokenizer;

use crate::engine::{self, EngineError};
use crate::synth::{llama3, SynthError};

/// File name looked for next to the model when no tokenizer.json is configured.
pub(crate) const TOKENIZER_FILE_NAME: &str = "tokenizer.json";

/// Why a [`TokenCounter`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TokenCountError {
    /// The tokenizer.json could not be read or is not a tokenizer.
    #[error(transparent)]
    Tokenizer(#[from] SynthError),
    /// The model's vocabulary could not be loaded.
    #[error(transparent)]
    Model(#[from] EngineError),
}

/// Counts tokens the way the engine does, without the engine. `Send`: the UI thread owns it.
pub struct TokenCounter {
    counter: Counter,
}

enum Counter {
    TokenizerJson {
        tokenizer: Box<Tokenizer>,
        path: PathBuf,
    },
    /// The vocabulary, and its `tokenizer.ggml.pre` (what text it may be given depends on it,
    /// `llama::runs`), read once.
    ModelVocabulary {
        model: Box<LlamaModel>,
        kind: crate::llama::runs::TokenizerKind,
    },
}

impl fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.counter {
            Counter::TokenizerJson { path, .. } => f
                .debug_struct("TokenCounter")
                .field("tokenizer_json", path)
                .finish(),
            Counter::ModelVocabulary { .. } => f
                .debug_struct("TokenCounter")
                .field("source", &self.source())
                .finish(),
        }
    }
}

impl TokenCounter {
    /// The counter for a model: `tokenizer_json` when given, else a `tokenizer.json` beside
    /// the model file, else the model's own vocabulary (loaded vocabulary-only by llama.cpp).
    pub fn for_model(
        model_path: &Path,
        tokenizer_json: Option<&Path>,
    ) -> Result<Self, TokenCountError> {
        if let Some(path) = tokenizer_json {
            return Self::from_tokenizer_json(path);
        }
        let beside = model_path.with_file_name(TOKENIZER_FILE_NAME);
        if beside.is_file() {
            return Self::from_tokenizer_json(&beside);
        }
        Self::from_model_vocabulary(model_path)
    }

    /// A counter reading a Hugging Face tokenizer.json.
    pub(crate) fn from_tokenizer_json(path: &Path) -> Result<Self, TokenCountError> {
        let tokenizer = llama3::open_tokenizer(path)?;
        Ok(Self {
            counter: Counter::TokenizerJson {
                tokenizer: Box::new(tokenizer),
                path: path.to_path_buf(),
            },
        })
    }

    /// A counter using the GGUF's own vocabulary through llama.cpp.
    pub(crate) fn from_model_vocabulary(model_path: &Path) -> Result<Self, TokenCountError> {
        Ok(Self {
            counter: {
                let model = load_vocab_only(model_path)?;
                let kind = crate::llama::runs::TokenizerKind::of(&model);
                Counter::ModelVocabulary {
                    model: Box::new(model),
                    kind,
                }
            },
        })
    }

    /// Tokens of `text` as a message inside the prompt: no BOS, special tokens parsed.
    /// `None` for text llama.cpp's tokenizer is not given (`llama::runs::check`: sending it
    /// says why). With the model's vocabulary, call it on a thread of
    /// `llama::runs::TOKENIZER_STACK_BYTES` stack (the count worker's).
    #[must_use]
    pub fn count(&self, text: &str) -> Option<usize> {
        if text.is_empty() {
            return Some(0);
        }
        match &self.counter {
            // Added (special) tokens are always matched by the tokenizers crate;
            // `add_special_tokens = false` only leaves out the post-processor's BOS.
            Counter::TokenizerJson { tokenizer, .. } => Some(
                tokenizer
                    .encode_fast(text, false)
                    .map_or(0, |encoding| encoding.len()),
            ),
            Counter::ModelVocabulary { model, kind } => {
                crate::llama::runs::check(text, kind).ok()?;
                Some(model.vocab().tokenize(text.as_bytes(), false, true).len())
            }
        }
    }

    /// Where the counts come from: `"tokenizer.json"` or `"model vocabulary"`.
    #[must_use]
    pub fn source(&self) -> &'static str {
        match self.counter {
            Counter::TokenizerJson { .. } => "tokenizer.json",
            Counter::ModelVocabulary { .. } => "model vocabulary",
        }
    }

    /// The tokenizer.json in use, if any.
    #[must_use]
    pub fn tokenizer_json(&self) -> Option<&Path> {
        match &self.counter {
            Counter::TokenizerJson { path, .. } => Some(path),
            Counter::ModelVocabulary { .. } => None,
        }
    }
}

/// Loads only a GGUF's vocabulary (no weights) through llama.cpp, after the same pre-flight
/// checks as a full load, so missing and damaged files get the same messages.
pub(crate) fn load_vocab_only(path: &Path) -> Result<LlamaModel, EngineError> {
    let backend = crate::llama::backend()?;
    engine::check_model_file(path)?;
    crate::llama::probe::ensure_survivable(path)?;
    crate::logging::clear_llama_problems();
    let params = LlamaModelParams::default().with_vocab_only(true);
    LlamaModel::load_from_file(backend, path, &params).map_err(|_| EngineError::LoadFailed {
        path: path.to_path_buf(),
        llama_says: crate::llama::error::llama_says(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<TokenCounter>();
    }

    #[test]
    fn vocabulary_counts_like_the_engine_on_a_synthetic_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        crate::synth::write_model(&path, &crate::synth::SynthSpec::preset("tiny").unwrap())
            .unwrap();
        let counter = TokenCounter::for_model(&path, None).unwrap();
        assert_eq!(counter.source(), "model vocabulary");
        assert!(counter.tokenizer_json().is_none());
        assert_eq!(counter.count(""), Some(0));
        // The built-in vocabulary has "Hello" and "▁world" as pieces.
        assert_eq!(counter.count("Hello world"), Some(2));
        assert_eq!(counter.count("<|eot_id|>"), Some(1));
        assert_eq!(
            counter.count(&"A".repeat(crate::llama::runs::MAX_CHARS + 1)),
            None
        );
    }

    #[test]
    fn missing_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.gguf");
        let error = TokenCounter::for_model(&missing, None).unwrap_err();
        assert!(matches!(
            error,
            TokenCountError::Model(EngineError::ModelNotFound(_))
        ));
        let error =
            TokenCounter::for_model(&missing, Some(&dir.path().join("none.json"))).unwrap_err();
        assert!(error.to_string().contains("none.json"), "{error}");
    }
}
