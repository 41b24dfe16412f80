//! What tokscope reads of each server's replies, one serde struct per wire format: OpenAI's
//! streamed chat chunk (with its `usage`, llama-server's `timings` and vLLM's `metrics`),
//! ollama's native stream line, `/v1/models` and ollama's `/api/tags`, llama-server's
//! `/props`. Every field is optional unless a figure cannot be formed without it; a field of
//! the wrong type, or a required one missing, is an error that names it by its path
//! (`usage.completion_tokens: invalid type: string "x", expected u64`). Fields not listed are
//! not read.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::metrics::remote::{ServerReported, ServerTimingSource, ServerTimings, ServerUsage};

/// Why a reply could not be read as its wire format.
#[derive(Debug, thiserror::Error)]
pub(super) enum WireError {
    #[error("{0}")]
    NotJson(serde_json::Error),
    /// The path of the field and what was wrong with it.
    #[error("{0}")]
    Field(serde_path_to_error::Error<serde_json::Error>),
}

/// `text` as a `T`.
pub(super) fn parse<T: DeserializeOwned>(text: &[u8]) -> Result<T, WireError> {
    let value: serde_json::Value = serde_json::from_slice(text).map_err(WireError::NotJson)?;
    serde_path_to_error::deserialize(value).map_err(WireError::Field)
}

/// One event of an OpenAI-compatible chat stream.
#[derive(Deserialize)]
pub(super) struct ChatChunk {
    pub error: Option<serde_json::Value>,
    pub model: Option<String>,
    pub choices: Option<Vec<Choice>>,
    pub usage: Option<Usage>,
    /// llama-server's own times for the request.
    pub timings: Option<Timings>,
    /// vLLM's per-request times (`--enable-per-request-metrics`).
    pub metrics: Option<VllmMetrics>,
}

#[derive(Deserialize)]
pub(super) struct Choice {
    /// Absent: choice 0.
    pub index: Option<u64>,
    pub finish_reason: Option<String>,
    pub delta: Option<Message>,
}

/// A delta's (or ollama's `message`'s) text on each channel. vLLM, SGLang, DeepSeek's API and
/// llama-server say `reasoning_content`; newer vLLM and OpenRouter say `reasoning`; ollama
/// says `thinking`.
#[derive(Deserialize, Default)]
pub(super) struct Message {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    pub reasoning: Option<String>,
    pub thinking: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize)]
pub(super) struct PromptTokensDetails {
    pub cached_tokens: Option<u64>,
}

impl From<Usage> for ServerUsage {
    fn from(u: Usage) -> Self {
        ServerUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Timings {
    pub prompt_n: u64,
    pub prompt_ms: f64,
    pub cache_n: Option<u64>,
    pub predicted_n: u64,
    pub predicted_ms: f64,
}

impl From<Timings> for ServerTimings {
    fn from(t: Timings) -> Self {
        ServerTimings {
            source: ServerTimingSource::LlamaServer,
            prompt_n: t.prompt_n,
            prompt_ms: t.prompt_ms,
            cache_n: t.cache_n,
            predicted_n: t.predicted_n,
            predicted_ms: t.predicted_ms,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct VllmMetrics {
    pub queue_time_ms: Option<f64>,
    pub time_to_first_token_ms: Option<f64>,
    pub generation_time_ms: Option<f64>,
    pub mean_itl_ms: Option<f64>,
}

impl VllmMetrics {
    /// `None` when it holds none of its times (as vLLM sends it when the timestamps are
    /// missing).
    pub(super) fn reported(self) -> Option<ServerReported> {
        let r = ServerReported {
            source: ServerTimingSource::Vllm,
            queue_ms: self.queue_time_ms,
            first_token_ms: self.time_to_first_token_ms,
            decode_ms: self.generation_time_ms,
            inference_ms: None,
            tpot_ms: self.mean_itl_ms,
        };
        (!r.is_empty()).then_some(r)
    }
}

/// One line of ollama's native `/api/chat` stream: `{"message": {"content"}, "done": false}`
/// per token, then `{"done": true, "done_reason", "load_duration", "prompt_eval_count",
/// "prompt_eval_duration", "eval_count", "eval_duration"}` (durations in ns).
#[derive(Deserialize)]
pub(super) struct OllamaLine {
    pub error: Option<serde_json::Value>,
    pub model: Option<String>,
    pub message: Option<Message>,
    pub done: Option<bool>,
    pub done_reason: Option<String>,
    pub load_duration: Option<f64>,
    pub prompt_eval_count: Option<u64>,
    pub prompt_eval_duration: Option<f64>,
    pub eval_count: Option<u64>,
    pub eval_duration: Option<f64>,
}

impl OllamaLine {
    /// The final line's counts as usage.
    pub(super) fn usage(&self) -> Option<ServerUsage> {
        Some(ServerUsage {
            prompt_tokens: self.prompt_eval_count?,
            completion_tokens: self.eval_count?,
            cached_tokens: None,
        })
    }

    /// The final line's counts and durations in llama-server's shape.
    pub(super) fn timings(&self) -> Option<ServerTimings> {
        Some(ServerTimings {
            source: ServerTimingSource::Ollama,
            prompt_n: self.prompt_eval_count?,
            prompt_ms: self.prompt_eval_duration? / 1e6,
            cache_n: None,
            predicted_n: self.eval_count?,
            predicted_ms: self.eval_duration? / 1e6,
        })
    }
}

/// `GET /v1/models`.
#[derive(Deserialize)]
pub(super) struct Models {
    pub data: Option<Vec<ModelId>>,
}

#[derive(Deserialize)]
pub(super) struct ModelId {
    pub id: String,
}

/// ollama's `GET /api/tags`.
#[derive(Deserialize)]
pub(super) struct Tags {
    pub models: Option<Vec<TagName>>,
}

#[derive(Deserialize)]
pub(super) struct TagName {
    pub name: String,
}

/// llama-server's `GET /props`.
#[derive(Deserialize)]
pub(super) struct Props {
    pub is_sleeping: Option<bool>,
}
