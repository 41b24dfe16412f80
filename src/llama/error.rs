//! The engine's typed errors. Each message names the problem and, where there is one, what to
//! do about it; the UI and the CLI show them as they are.

use std::path::PathBuf;

use thiserror::Error;

use crate::gguf::kv_type::KvType;

#[derive(Debug, Clone, Error, PartialEq)]
pub enum EngineError {
    #[error("model file not found: {0}\n  check the path, or run `tokscope fetch-demo` to get the demo model")]
    ModelNotFound(PathBuf),
    #[error("model path is a directory, not a file: {0}\n  point -m at a .gguf file inside it")]
    ModelIsDirectory(PathBuf),
    #[error("cannot read model file {path}: {reason}\n  check the file's permissions")]
    ModelUnreadable { path: PathBuf, reason: String },
    #[error("model file is empty (0 bytes): {0}\n  the download or copy did not finish; fetch the file again")]
    ModelEmpty(PathBuf),
    #[error("not a GGUF model file: {path} ({reason})\n  tokscope loads llama.cpp GGUF files; convert the model with llama.cpp's convert_hf_to_gguf.py")]
    NotGguf { path: PathBuf, reason: String },
    #[error("unusable model file {path}: {defect}\n  the file is damaged or was made to crash llama.cpp; tokscope refuses it before llama.cpp reads it")]
    InvalidModel { path: PathBuf, defect: String },
    #[error("llama.cpp crashed on {path} ({cause}){llama_says}\n  the file is damaged or not supported by this llama.cpp build; tokscope tried it in a separate process and kept running")]
    ModelCrashed {
        path: PathBuf,
        cause: String,
        llama_says: String,
    },
    #[error("llama.cpp could not load {path}{llama_says}\n  the file may be truncated or corrupt, or its architecture unsupported by this llama.cpp build")]
    LoadFailed { path: PathBuf, llama_says: String },
    #[error(
        "llama.cpp could not create a context (n_ctx {n_ctx}){llama_says}\n  try a smaller n_ctx"
    )]
    ContextFailed { n_ctx: u32, llama_says: String },
    /// The KV cache would not fit in the host's available memory: refused before llama.cpp
    /// allocates (and, on Linux, zero-fills) it, which would swap or be killed.
    #[error("the KV cache of a {n_ctx}-token context would take {cache} (K {tk}, V {tv}), but only {available} of memory is available (MemAvailable)\n  {what_to_do}", cache = crate::fmt::bytes(*.cache_bytes), available = crate::fmt::bytes(*.available_bytes), tk = .type_k.name(), tv = .type_v.name())]
    KvCacheTooLarge {
        n_ctx: u32,
        cache_bytes: u64,
        available_bytes: u64,
        type_k: KvType,
        type_v: KvType,
        what_to_do: String,
    },
    #[error("llama.cpp could not initialise its backend: {0}")]
    Backend(String),
    #[error("{0}")]
    Placement(String),
    #[error("the chat template could not be applied: {0}\n  choose another with --template (auto, completion, or a llama.cpp template name such as llama3, gemma, chatml)")]
    Template(String),
    /// The conversation no longer fits and the user asked to be told rather than have its
    /// oldest messages left out (`ContextFull::Stop`).
    #[error("the conversation is {prompt_tokens} tokens and no longer fits the {n_ctx}-token context with room for an answer ({reserve} tokens): nothing was left out and no answer was generated\n  your choice: `/context-full drop-oldest` then Ctrl+R leaves the oldest messages out (and from then on); Ctrl+N starts a new conversation; or restart the chat with a larger -c")]
    ContextFull {
        prompt_tokens: usize,
        n_ctx: u32,
        reserve: usize,
    },
    #[error("the prompt is {prompt_tokens} tokens but the context holds {n_ctx}\n  shorten the conversation (start a new one) or raise n_ctx")]
    PromptTooLong { prompt_tokens: usize, n_ctx: u32 },
    /// An evaluation text that cannot be scored (too short for its chunks).
    #[error("{0}")]
    EvalText(String),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("llama.cpp decode failed: {0}")]
    Decode(String),
    #[error("the model gave no usable distribution at token {at_token} (its logits are NaN or infinite): the answer was stopped there\n  the weights are broken (a damaged or badly converted file) or the KV cache type overflows; try another file, or --cache-type-k f16")]
    NonFiniteLogits { at_token: usize },
    /// A row of logits a quality figure would be computed from holds no distribution (NaN or
    /// infinite values): no figure is made from it (a NaN would read as a perfect match).
    #[error("{which} gave NaN or infinite logits at scored position {position}: no quality figure can be computed from them\n  {hint}")]
    NonFiniteScores {
        which: &'static str,
        position: usize,
        hint: &'static str,
    },
    #[error("the text has a run of {chars} characters of one kind (starting {starting:?}), longer than the {max} llama.cpp's tokenizer is given: {why}\n  break the run up, or shorten it")]
    RunTooLong {
        chars: usize,
        starting: char,
        max: usize,
        why: &'static str,
    },
    #[error("the text has {chars} characters, more than the {max} llama.cpp's tokenizer is given at once\n  shorten it, or send it in parts")]
    TextTooLong { chars: usize, max: usize },
    #[error("this model's SentencePiece vocabulary spells {spelled} characters of the text as bytes (such as {example:?}), side by side, and llama.cpp would take about {seconds:.1} s over it (it copies its whole output again for each), with no way to stop it\n  put spaces or other text between such characters, or send less at once")]
    SpellingTooSlow {
        spelled: usize,
        example: char,
        seconds: f64,
    },
    #[error("no model is loaded")]
    NoModel,
    #[error("could not start the engine thread: {0}")]
    Thread(String),
    #[error("the engine stopped unexpectedly")]
    EngineGone,
    #[error("cancelled")]
    Cancelled,
    /// A remote server's failure (the chat's remote backend); the message names the cause
    /// and what to do, and never holds the API key.
    #[error("{0}")]
    Remote(String),

    #[error("--sampling backend cannot run this chain: {0}\n  use --sampling host or auto (config sampling.mode), or change that setting")]
    BackendSampling(String),
    #[error("the draft model for speculative decoding could not be used: {0}")]
    Draft(Box<EngineError>),
    #[error("the draft model {draft} does not share the target's vocabulary: token {id} is {target_text} in the target and {draft_text} in the draft\n  speculative decoding needs a draft from the same model family (the same tokenizer), or use --spec ngram")]
    VocabMismatch {
        draft: PathBuf,
        id: i64,
        target_text: String,
        draft_text: String,
    },
    #[error("the reference model for quality scoring could not be used: {0}")]
    Reference(Box<EngineError>),
    #[error("the reference model {reference} does not share the model's vocabulary: token {id} is {model_text} in the model and {reference_text} in the reference\n  KL divergence compares two distributions over one vocabulary: give another file of the same model (its F16 or Q8_0, say) as --ref")]
    RefVocabMismatch {
        reference: PathBuf,
        id: i64,
        model_text: String,
        reference_text: String,
    },
}

impl EngineError {
    /// The reference model's row at scored `position` had no distribution in it.
    pub fn non_finite_reference(position: usize) -> Self {
        EngineError::NonFiniteScores {
            which: "the reference model",
            position,
            hint: "its weights are broken (a damaged or badly converted file); choose another reference: another file of the same model (--ref FILE; compare --reference FILE)",
        }
    }

    /// The scored model's row at scored `position` had no distribution in it.
    pub fn non_finite_candidate(position: usize) -> Self {
        EngineError::NonFiniteScores {
            which: "the scored model",
            position,
            hint: "its weights are broken (a damaged or badly converted file) or its KV cache type overflows; try another file, or --cache-type-k f16",
        }
    }

    /// True for problems with the model file itself (exit code 3 in the CLI).
    pub fn is_model_problem(&self) -> bool {
        matches!(
            self,
            EngineError::ModelNotFound(_)
                | EngineError::ModelIsDirectory(_)
                | EngineError::ModelUnreadable { .. }
                | EngineError::ModelEmpty(_)
                | EngineError::NotGguf { .. }
                | EngineError::LoadFailed { .. }
                | EngineError::InvalidModel { .. }
                | EngineError::ModelCrashed { .. }
                | EngineError::VocabMismatch { .. }
                | EngineError::RefVocabMismatch { .. }
        ) || matches!(self, EngineError::Draft(inner) | EngineError::Reference(inner) if inner.is_model_problem())
    }
}

/// A failed llama.cpp decode (or batch, or KV-cache call), with what it said.
pub(crate) fn decode_error(e: impl std::fmt::Display) -> EngineError {
    EngineError::Decode(e.to_string())
}

/// Format llama.cpp's last warnings and errors as a suffix for an error message.
pub(crate) fn llama_says() -> String {
    says(&crate::logging::recent_llama_problems())
}

/// The last three of `lines`, each as "\n  llama.cpp says: LINE" (empty without lines).
pub(crate) fn says(lines: &[String]) -> String {
    let tail = &lines[lines.len().saturating_sub(3)..];
    tail.iter()
        .map(|l| format!("\n  llama.cpp says: {l}"))
        .collect()
}
