//! One streamed request reduced to the figures a load test and the chat's `--prometheus`
//! export count (docs/metrics.md, "Load tests"): its record when it completed, the kind of its
//! error when it did not. Pure: the turn was measured by the client.

use std::time::Duration;

use serde::Serialize;

use super::{RemoteTurn, StreamEnd};
use crate::metrics::remote::VllmRecord;

/// One request that completed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RequestRecord {
    /// Request sent → first chunk on any channel (a reasoning chunk included).
    pub ttft: Duration,
    /// Request sent → first answer chunk: AIPerf's `time_to_first_output_token` (TTFO); equal
    /// to `ttft` without reasoning, `None` when the stream ended while thinking.
    pub ttfo: Option<Duration>,
    /// Tokens of the reasoning channel (AIPerf's `reasoning_token_count`), part of
    /// `completion_tokens`.
    pub reasoning_tokens: u64,
    /// The stream ended while the model still thought (no answer chunk after its reasoning).
    pub ended_while_thinking: bool,
    /// (E2E − TTFT) / (output tokens − 1); `None` for a single-token answer.
    pub tpot: Option<Duration>,
    pub itl: Vec<Duration>,
    /// The gaps between content chunks, undivided (OTel's time per output chunk).
    pub chunk_gaps: Vec<Duration>,
    pub e2e: Duration,
    /// From the server's usage.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// llama-server's `timings.prompt_n` (prompt tokens it evaluated, cache hits excluded).
    pub server_prompt_n: Option<u64>,
    /// The same request under vLLM's benchmark's definitions.
    pub vllm: Option<VllmRecord>,
}

impl RequestRecord {
    /// The request as `--prometheus` and `--otlp` count it.
    pub(crate) fn observed(&self) -> crate::metrics::exposition::Observed<'_> {
        crate::metrics::exposition::Observed {
            ttft: self.ttft,
            ttfo: self.ttfo,
            reasoning_tokens: self.reasoning_tokens,
            itl: &self.itl,
            chunk_gaps: &self.chunk_gaps,
            tpot: self.tpot,
            e2e: self.e2e,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
        }
    }
}

/// Why one request failed.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestError {
    /// A short kind (`transport`, `timeout`, `status_500`, ...), counted per level.
    pub kind: String,
    /// The message, as the error said it.
    pub detail: String,
}

impl RequestError {
    pub fn new(kind: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            detail: detail.into(),
        }
    }
}

/// A measured request's record, or the kind of its error.
pub(crate) fn record(turn: &RemoteTurn) -> Result<RequestRecord, RequestError> {
    match &turn.end {
        Ok(StreamEnd::Done) => {}
        Ok(StreamEnd::Cancelled) => {
            return Err(RequestError::new("cancelled", "stopped by Ctrl-C"))
        }
        Err(e) => return Err(RequestError::new(e.kind(), e.to_string())),
    }
    let t = &turn.timeline;
    let usage = t.usage.ok_or_else(|| {
        if turn.notes.is_empty() {
            RequestError::new("no_usage", "the stream ended without a usage object")
        } else {
            // The usage came but could not be true (the client dropped it): say what it was.
            RequestError::new("implausible_usage", turn.notes.join("; "))
        }
    })?;
    let ttft = t
        .ttft()
        .ok_or_else(|| RequestError::new("no_content", "the stream had no text on any channel"))?;
    let e2e = t.e2e();
    let n = usage.completion_tokens;
    let tpot = (n > 1).then(|| (e2e.saturating_sub(ttft)) / u32::try_from(n - 1).unwrap_or(1));
    let thinking = t.thinking_span();
    Ok(RequestRecord {
        ttft,
        ttfo: t.ttfo(),
        reasoning_tokens: t.reasoning_tokens(),
        ended_while_thinking: thinking.is_some_and(|s| s.first_answer_at.is_none()),
        tpot,
        itl: t.inter_token_latencies(),
        chunk_gaps: t
            .chunks
            .windows(2)
            .map(|w| w[1].at.saturating_sub(w[0].at))
            .collect(),
        e2e,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: n,
        server_prompt_n: t.server_timings.map(|s| s.prompt_n),
        vllm: t.vllm_record(),
    })
}
