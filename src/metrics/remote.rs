//! The figures of one turn against a remote OpenAI-compatible server, defined once (see
//! docs/metrics.md, "Remote servers"). Pure: the client records when each streamed chunk
//! arrived and what the server said about itself; everything shown is derived here.
//!
//! A figure the server does not give stays `None` (shown as "—"), never 0.

use std::time::Duration;

use serde::Serialize;

use super::{ms, rate_per_s, LatencyStats};

/// The most output tokens one content chunk is taken to carry (servers that batch tokens per
/// chunk, with a stream interval or speculative decoding, send a few to a few dozen): a server
/// count past it is not believed.
pub(crate) const MAX_TOKENS_PER_CHUNK: u64 = 256;
/// The most output tokens of one answer believed from a server (2^20): bounds the per-token
/// figures at 16 MiB per turn whatever the server says.
pub(crate) const MAX_OUTPUT_TOKENS: u64 = 1 << 20;
/// The most prompt tokens believed from a server (2^24, past every context length served).
pub(crate) const MAX_PROMPT_TOKENS: u64 = 1 << 24;

/// Whether a server's count of `tokens` output tokens can be true of a stream of `chunks`
/// content chunks. A count that fails it is ignored, never used to size anything.
pub(crate) fn plausible_output_tokens(tokens: u64, chunks: usize) -> bool {
    let chunks = u64::try_from(chunks.max(1)).unwrap_or(u64::MAX);
    tokens <= MAX_OUTPUT_TOKENS && tokens <= chunks.saturating_mul(MAX_TOKENS_PER_CHUNK)
}

/// A server's duration in ms, when it can be one of this turn: finite, not negative, and not
/// longer than the client waited for the whole turn (plus a second for clock granularity).
fn plausible_ms(v: f64, turn: Duration) -> bool {
    v.is_finite() && v >= 0.0 && v <= ms(turn) + 1000.0
}

/// One streamed chunk that carried text on either channel: the answer's `delta.content`, or
/// the reasoning channel's `delta.reasoning_content` / `delta.reasoning` (ollama's
/// `message.thinking`). A role-only or empty delta is not a token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChunkMark {
    /// Offset from the request being sent to the chunk being parsed.
    pub at: Duration,
    /// The server's running `completion_tokens` after this chunk, when it sends usage with
    /// every chunk (vLLM's `continuous_usage_stats`).
    pub cumulative_tokens: Option<u64>,
    /// The chunk is on the reasoning channel (the model's thinking), not the answer's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reasoning: bool,
}

/// The server's final usage object (`stream_options.include_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`, where the server reports it.
    pub cached_tokens: Option<u64>,
}

/// llama-server's own `timings` object for the request, or ollama's durations in the same
/// shape (`prompt_eval_count`/`_duration`, `eval_count`/`_duration`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServerTimings {
    /// Whose report this is.
    pub source: ServerTimingSource,
    /// Prompt tokens the server evaluated (not taken from its cache).
    pub prompt_n: u64,
    pub prompt_ms: f64,
    /// Prompt tokens reused from the server's cache.
    pub cache_n: Option<u64>,
    pub predicted_n: u64,
    pub predicted_ms: f64,
}

/// Which server's own per-request report a turn's server figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerTimingSource {
    /// llama-server's `timings` object on the last chunk.
    LlamaServer,
    /// vLLM's `metrics` object on the final usage chunk (the request asks with
    /// `include_metrics`; the server runs with `--enable-per-request-metrics`).
    Vllm,
    /// TGI's `x-queue-time` / `x-inference-time` / `x-time-per-token` response headers.
    Tgi,
    /// ollama's native `/api/chat` final line: `prompt_eval_duration`, `eval_duration` and
    /// `load_duration` (ns), with their counts.
    Ollama,
}

impl ServerTimingSource {
    pub(crate) fn label(self) -> &'static str {
        match self {
            ServerTimingSource::LlamaServer => "llama-server timings",
            ServerTimingSource::Vllm => "vLLM per-request metrics",
            ServerTimingSource::Tgi => "TGI x-*-time headers",
            ServerTimingSource::Ollama => "ollama durations (/api/chat)",
        }
    }
}

/// A server's own per-request times other than llama-server's `timings`, each as the server
/// defines it (`None`: not sent):
/// - vLLM (`build_per_request_timing_metrics` in `vllm/entrypoints/openai/engine/serving.py`):
///   `queue_time_ms` = scheduled − queued; `time_to_first_token_ms` = first token − scheduled
///   (prefill and the first sample, the queue left out); `generation_time_ms` = last token −
///   first token; `mean_itl_ms` = that ÷ (tokens − 1).
/// - TGI: `x-queue-time`, `x-inference-time` (the whole inference, prefill included) and
///   `x-time-per-token`, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServerReported {
    pub source: ServerTimingSource,
    pub queue_ms: Option<f64>,
    pub first_token_ms: Option<f64>,
    pub decode_ms: Option<f64>,
    pub inference_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

impl ServerReported {
    pub(crate) fn is_empty(&self) -> bool {
        [
            self.queue_ms,
            self.first_token_ms,
            self.decode_ms,
            self.inference_ms,
            self.tpot_ms,
        ]
        .iter()
        .all(Option::is_none)
    }
}

/// A turn whose TTFT holds a model load or a wake from sleep, not a slow prefill (issue 35,
/// item 7), and how it was told.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum ColdStart {
    /// llama-server's `/props` said `is_sleeping: true` just before the request
    /// (`--sleep-idle-seconds`): the request woke it, and its model was loaded again.
    Sleeping,
    /// TTFT − RTT − the server's own part is more than [`COLD_UNEXPLAINED_MS`] and more than
    /// [`COLD_STEPS`] of the server's decode steps: time the server's report does not account
    /// for (a model loaded on demand, as a router or ollama does, or a wake-up).
    Unexplained { unexplained_ms: f64 },
    /// The server said it spent more than [`COLD_UNEXPLAINED_MS`] loading the model for this
    /// request (ollama's `load_duration`).
    ModelLoad { load_ms: f64 },
}

/// The least time outside the server's report that marks a turn cold (a model load takes
/// seconds; one decode step and the HTTP path take milliseconds).
pub(crate) const COLD_UNEXPLAINED_MS: f64 = 1000.0;
/// ... and it must be more than this many of the server's own decode steps.
pub(crate) const COLD_STEPS: f64 = 20.0;

impl ColdStart {
    pub(crate) fn words(self) -> String {
        match self {
            ColdStart::Sleeping => "the server was asleep (llama-server --sleep-idle-seconds): this TTFT includes its wake-up and model reload, not a slow prefill".to_string(),
            ColdStart::Unexplained { unexplained_ms } => format!(
                "{unexplained_ms:.0} ms of this TTFT is outside the server's own prompt and queue times: a model load or a wake from sleep, not a slow prefill"
            ),
            ColdStart::ModelLoad { load_ms } => format!(
                "the server spent {load_ms:.0} ms loading the model for this request (ollama load_duration): this TTFT includes the load, not a slow prefill"
            ),
        }
    }
}

/// Where the per-chunk token counts come from; shown next to the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenCountSource {
    /// Usage with every chunk: exact per chunk.
    ContinuousUsage,
    /// A final usage total equal to the number of content chunks: one token per chunk, exact.
    UsageOnePerChunk,
    /// A final usage total that differs from the chunk count: the total is exact, the split
    /// among chunks is an even spread (estimated).
    UsageSpread,
    /// No usage from the server: one token per chunk is assumed (estimated).
    ChunksAssumed,
}

impl TokenCountSource {
    pub(crate) fn label(self) -> &'static str {
        match self {
            TokenCountSource::ContinuousUsage => "server usage per chunk (exact)",
            TokenCountSource::UsageOnePerChunk => "server usage, 1 token per chunk (exact)",
            TokenCountSource::UsageSpread => "server usage total, spread over chunks (estimated)",
            TokenCountSource::ChunksAssumed => "no usage: 1 token per chunk assumed (estimated)",
        }
    }
}

/// The raw record of one remote turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemoteTimeline {
    /// Round trip of a cheap request (`GET /v1/models`) timed just before the turn.
    pub network_rtt: Option<Duration>,
    /// The instant the request was sent (its offsets start here): where a trace of several
    /// turns places this one (`metrics::trace`). Not saved.
    #[serde(skip)]
    pub sent_at: Option<std::time::Instant>,
    /// Offset at which the response headers arrived.
    pub headers_at: Option<Duration>,
    /// Every content chunk, in order.
    pub chunks: Vec<ChunkMark>,
    /// Every chunk whose `choices` is a non-empty array, content or not (a role-only first
    /// delta, a reasoning delta, the closing `finish_reason` chunk): what vLLM's benchmark
    /// times (`VllmFigures`). At most `MAX_OUTPUT_TOKENS` are kept.
    pub choice_chunks: Vec<Duration>,
    /// Offset at which the stream ended (`[DONE]`, close, error or cancel).
    pub finished_at: Duration,
    pub usage: Option<ServerUsage>,
    pub server_timings: Option<ServerTimings>,
    /// vLLM's or TGI's own times for the request, where the server sent them.
    pub server_reported: Option<ServerReported>,
    /// llama-server's `/props` `is_sleeping` read just before the request (`None`: not asked,
    /// or the server has no such field).
    pub server_sleeping: Option<bool>,
    /// The time the server says it spent loading the model for this request (ollama's
    /// `load_duration`), part of TTFT.
    pub server_load_ms: Option<f64>,
}

/// The derived figures of a remote turn, as `run --url --json` prints them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RemoteSummary {
    /// Request sent → first chunk with text on any channel (a reasoning chunk included).
    pub ttft_ms: Option<f64>,
    /// Request sent → first answer chunk (`delta.content`): AIPerf's time to first output
    /// token (TTFO). Equal to TTFT for a turn without reasoning; `None` without an answer.
    pub ttfo_ms: Option<f64>,
    /// The reasoning channel's split of the turn: thinking tokens (part of
    /// `tokens_generated`, never added to it again) and time, time to the first answer token,
    /// and whether the stream ended while the model still thought. `None` without reasoning.
    pub thinking: Option<super::ThinkingSummary>,
    pub network_rtt_ms: Option<f64>,
    /// The server's prompt processing time (llama-server `timings.prompt_ms`, ollama
    /// `prompt_eval_duration`).
    pub server_prompt_ms: Option<f64>,
    /// The server's model load for this request (ollama `load_duration`).
    pub server_load_ms: Option<f64>,
    /// Time the request waited in the server's queue (vLLM `queue_time_ms`, TGI
    /// `x-queue-time`).
    pub server_queue_ms: Option<f64>,
    /// The server's own time to first token, its queue left out (vLLM
    /// `time_to_first_token_ms`: scheduled → first token).
    pub server_first_token_ms: Option<f64>,
    /// Whose report the server figures come from (`None`: the server sent none).
    pub server_timing_source: Option<ServerTimingSource>,
    /// The turn woke the server or waited for a model load (`None`: nothing says so).
    pub cold_start: Option<ColdStart>,
    pub server_prompt_tokens: Option<u64>,
    pub server_cached_tokens: Option<u64>,
    /// TTFT − network round trip − the server's own part: llama-server's prompt time (what is
    /// left is its first decode step and sample, with its queue, template, tokenizer, and the
    /// transport: about one server decode step against an idle server), or vLLM's queue and
    /// time to first token (what is left is its tokenizer and detokenizer and the transport).
    pub queue_transport_ms: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub tokens_generated: u64,
    pub token_count_source: TokenCountSource,
    pub chunks: usize,
    /// Per-token inter-token latency: each chunk's gap divided evenly among its tokens.
    pub itl: Option<LatencyStats>,
    /// Time per output token after the first: (last chunk − first chunk) / (tokens − 1).
    pub tpot_ms: Option<f64>,
    /// (tokens − 1) / (last chunk − first chunk).
    pub decode_tok_per_s: Option<f64>,
    /// Request sent → last content chunk (→ end of stream when there was none).
    pub e2e_ms: f64,
    /// The server's own decode time (llama-server `timings.predicted_ms`, vLLM
    /// `generation_time_ms`) and per-token time (`predicted_ms ÷ predicted_n`, vLLM
    /// `mean_itl_ms`, TGI `x-time-per-token`).
    pub server_decode_ms: Option<f64>,
    pub server_tpot_ms: Option<f64>,
    /// Tokens the server says it generated (`timings.predicted_n`).
    pub server_predicted_tokens: Option<u64>,
    /// The same stream under vLLM's benchmark's definitions.
    pub vllm_convention: VllmFigures,
}

/// One stream's figures as `vllm bench serve` defines them
/// (`vllm/benchmarks/lib/endpoint_request_func.py`, `async_request_openai_chat_completions`,
/// and `calculate_metrics` in `vllm/benchmarks/serve.py`): TTFT ends at the first chunk with a
/// non-empty `choices` (even an empty or role-only delta); one ITL entry per later such chunk,
/// the whole gap, undivided however many tokens the chunk carries; E2E ends at the last such
/// chunk; TPOT = (E2E − TTFT) ÷ (N − 1) with N the server's `usage.completion_tokens`, and 0
/// when N ≤ 1 (so such a request meets any TPOT target). Percentiles interpolate, as numpy's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct VllmFigures {
    pub ttft_ms: Option<f64>,
    /// One entry per chunk after the first, undivided.
    pub itl: Option<LatencyStats>,
    pub e2e_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

/// One request's raw figures under vLLM's definitions (see `VllmFigures`), for a load level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct VllmRecord {
    pub ttft: Duration,
    pub itl: Vec<Duration>,
    pub e2e: Duration,
    /// Zero when the server counted at most one output token, as vLLM's goodput takes it.
    pub tpot: Duration,
    /// The server's `usage.completion_tokens` (0 without usage).
    pub output_tokens: u64,
}

impl RemoteTimeline {
    /// Request sent → first chunk on any channel.
    pub(crate) fn ttft(&self) -> Option<Duration> {
        self.chunks.first().map(|c| c.at)
    }

    /// Request sent → first answer chunk (AIPerf's TTFO); `None` without one.
    pub(crate) fn ttfo(&self) -> Option<Duration> {
        self.chunks.iter().find(|c| !c.reasoning).map(|c| c.at)
    }

    /// Tokens of the reasoning channel, by the same per-chunk counts as every token (so the
    /// server's `completion_tokens`, which holds them, is never exceeded).
    pub(crate) fn reasoning_tokens(&self) -> u64 {
        let (counts, _) = self.tokens_per_chunk();
        let chunks = self.chunks.iter().zip(counts);
        chunks.filter(|(c, _)| c.reasoning).map(|(_, k)| k).sum()
    }

    /// Where the reasoning channel ends and the answer starts (`None`: no reasoning chunk):
    /// the thinking ends at the last reasoning chunk before the first answer chunk (at the
    /// last one, when no answer came), the answer starts at its first chunk.
    pub(crate) fn thinking_span(&self) -> Option<super::ThinkingSpan> {
        if !self.chunks.iter().any(|c| c.reasoning) {
            return None;
        }
        let first_answer_at = self.ttfo();
        let ended_at = self
            .chunks
            .iter()
            .filter(|c| c.reasoning && first_answer_at.is_none_or(|a| c.at <= a))
            .map(|c| c.at)
            .next_back();
        Some(super::ThinkingSpan {
            tokens: usize::try_from(self.reasoning_tokens()).unwrap_or(usize::MAX),
            ended_at,
            first_answer_at,
        })
    }

    pub(crate) fn e2e(&self) -> Duration {
        self.chunks.last().map_or(self.finished_at, |c| c.at)
    }

    /// Every chunk has a running count, none goes down, and the last is plausible: then
    /// (and only then) the per-chunk counts are the server's.
    fn cumulative_counts_hold(&self) -> bool {
        let mut counts = self.chunks.iter().map(|c| c.cumulative_tokens);
        let last = counts.try_fold(0, |previous, t| t.filter(|&t| t >= previous));
        last.is_some_and(|last| plausible_output_tokens(last, self.chunks.len()))
    }

    /// Drops what the server said that cannot be true of this stream (a count past what the
    /// stream could hold, a time that is not finite, negative or longer than the turn), so
    /// that no figure shows it and nothing is sized by it; returns one note per thing dropped,
    /// e.g. "the server reported 3000000000000000 output tokens for 12 chunks: ignored".
    pub(crate) fn drop_implausible(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let n = self.chunks.len();
        if self.chunks.iter().any(|c| c.cumulative_tokens.is_some())
            && !self.cumulative_counts_hold()
        {
            let last = self.chunks.iter().filter_map(|c| c.cumulative_tokens).max();
            notes.push(format!(
                "the server's running output-token counts (up to {}) do not fit {n} chunks (they must rise and stay within {MAX_TOKENS_PER_CHUNK} per chunk): ignored",
                last.unwrap_or(0)
            ));
            for c in &mut self.chunks {
                c.cumulative_tokens = None;
            }
        }
        if let Some(u) = self.usage {
            if !plausible_output_tokens(u.completion_tokens, n) {
                notes.push(format!(
                    "the server reported {} output tokens for {n} chunks: ignored",
                    u.completion_tokens
                ));
                self.usage = None;
            } else if u.prompt_tokens > MAX_PROMPT_TOKENS {
                notes.push(format!(
                    "the server reported {} prompt tokens (more than {MAX_PROMPT_TOKENS}): ignored",
                    u.prompt_tokens
                ));
                self.usage = None;
            } else if u.cached_tokens.is_some_and(|c| c > u.prompt_tokens) {
                notes.push(format!(
                    "the server reported {} cached tokens of a {}-token prompt: ignored",
                    u.cached_tokens.unwrap_or(0),
                    u.prompt_tokens
                ));
                self.usage = Some(ServerUsage {
                    cached_tokens: None,
                    ..u
                });
            }
        }
        if let Some(t) = self.server_timings {
            let turn = self.finished_at;
            let problem = if t.prompt_n > MAX_PROMPT_TOKENS
                || t.cache_n.is_some_and(|c| c > MAX_PROMPT_TOKENS)
            {
                Some(format!(
                    "{} prompt tokens",
                    t.prompt_n.max(t.cache_n.unwrap_or(0))
                ))
            } else if !plausible_output_tokens(t.predicted_n, n) {
                Some(format!("{} output tokens for {n} chunks", t.predicted_n))
            } else if !plausible_ms(t.prompt_ms, turn) {
                Some(format!(
                    "a prompt time of {} ms",
                    finite_or_word(t.prompt_ms)
                ))
            } else if !plausible_ms(t.predicted_ms, turn) {
                Some(format!(
                    "a decode time of {} ms",
                    finite_or_word(t.predicted_ms)
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                notes.push(format!(
                    "the server's timings report {problem} in a {:.0} ms turn: ignored",
                    ms(turn)
                ));
                self.server_timings = None;
            }
        }
        if let Some(v) = self
            .server_load_ms
            .filter(|&v| !plausible_ms(v, self.finished_at))
        {
            notes.push(format!(
                "the server reports a model load of {} ms in a {:.0} ms turn: ignored",
                finite_or_word(v),
                ms(self.finished_at)
            ));
            self.server_load_ms = None;
        }
        if let Some(mut r) = self.server_reported {
            let turn = self.finished_at;
            for (name, field) in [
                ("queue time", &mut r.queue_ms),
                ("time to first token", &mut r.first_token_ms),
                ("decode time", &mut r.decode_ms),
                ("inference time", &mut r.inference_ms),
                ("time per token", &mut r.tpot_ms),
            ] {
                if let Some(v) = field.filter(|&v| !plausible_ms(v, turn)) {
                    notes.push(format!(
                        "the server's {} reports a {name} of {} ms in a {:.0} ms turn: ignored",
                        r.source.label(),
                        finite_or_word(v),
                        ms(turn)
                    ));
                    *field = None;
                }
            }
            self.server_reported = (!r.is_empty()).then_some(r);
        }
        notes
    }

    /// Tokens carried by each content chunk, and where the counts come from.
    pub(crate) fn tokens_per_chunk(&self) -> (Vec<u64>, TokenCountSource) {
        let n = self.chunks.len();
        if n > 0 && self.cumulative_counts_hold() {
            let mut previous = 0;
            let counts = self
                .chunks
                .iter()
                .map(|c| {
                    let now = c.cumulative_tokens.unwrap_or(previous);
                    let k = now.saturating_sub(previous);
                    previous = now;
                    k
                })
                .collect();
            return (counts, TokenCountSource::ContinuousUsage);
        }
        // A count no stream of `n` chunks can hold is ignored here too (`check` says so).
        let usage = self
            .usage
            .filter(|u| plausible_output_tokens(u.completion_tokens, n));
        match usage {
            Some(u) if u.completion_tokens == n as u64 => {
                (vec![1; n], TokenCountSource::UsageOnePerChunk)
            }
            Some(u) if n > 0 => {
                // An even spread that still sums to the exact total.
                let base = u.completion_tokens / n as u64;
                let extra = (u.completion_tokens % n as u64) as usize;
                let counts = (0..n).map(|i| base + u64::from(i < extra)).collect();
                (counts, TokenCountSource::UsageSpread)
            }
            Some(_) => (Vec::new(), TokenCountSource::UsageSpread),
            None => (vec![1; n], TokenCountSource::ChunksAssumed),
        }
    }

    /// Inter-token latencies, one per token after the first chunk: a chunk's gap from the
    /// previous chunk divided evenly among the tokens it carries (a chunk of 0 tokens adds its
    /// gap to the next one).
    pub(crate) fn inter_token_latencies(&self) -> Vec<Duration> {
        let (counts, _) = self.tokens_per_chunk();
        let mut out = Vec::new();
        let Some(mut last_at) = self.chunks.first().map(|c| c.at) else {
            return out;
        };
        for (chunk, &k) in self.chunks.iter().zip(counts.iter()).skip(1) {
            if k == 0 {
                continue;
            }
            let gap = chunk.at.saturating_sub(last_at);
            let share = gap / u32::try_from(k).unwrap_or(u32::MAX);
            out.extend(std::iter::repeat_n(share, k as usize));
            last_at = chunk.at;
        }
        out
    }

    pub(crate) fn tokens_generated(&self) -> u64 {
        self.tokens_per_chunk().0.iter().sum()
    }

    /// Time per output token after the first.
    pub(crate) fn tpot(&self) -> Option<Duration> {
        let n = self.tokens_generated();
        let (first, last) = (self.chunks.first()?, self.chunks.last()?);
        let span = last.at.saturating_sub(first.at);
        if n < 2 || span.is_zero() {
            return None;
        }
        Some(span / u32::try_from(n - 1).unwrap_or(u32::MAX))
    }

    /// The turn as the chat keeps every turn, local or remote, so one conversation, one
    /// history and one pane serve both (docs/metrics.md, "Remote servers in the chat"):
    /// token ready times are the chunk arrivals with each chunk's gap divided among its tokens
    /// (a first chunk's extra tokens arrive with it), the prompt and cache counts are the
    /// server's, `prefill` is the server's own prompt time, `decode_compute`/`decode_calls`
    /// its `predicted_ms`/`predicted_n`. The stages only a local engine has (queue, template
    /// and tokenize, end of prefill) stay `None`. The record itself is kept in `remote`.
    pub fn turn_timeline(&self) -> super::TurnTimeline {
        let token_ready_at = self.token_ready_at();
        let from_ms = |v: f64| Duration::try_from_secs_f64(v / 1e3).ok();
        let summary = self.summary();
        super::TurnTimeline {
            prompt_tokens: summary.prompt_tokens.map(|n| n as usize),
            cached_tokens: summary.server_cached_tokens.map(|n| n as usize),
            prefill: summary.server_prompt_ms.and_then(from_ms),
            token_ready_at,
            decode_compute: summary
                .server_decode_ms
                .and_then(from_ms)
                .unwrap_or_default(),
            decode_calls: summary.server_predicted_tokens.unwrap_or(0) as usize,
            finished_at: Some(self.finished_at),
            submitted_at: self.sent_at,
            thinking: self.thinking_span(),
            remote: Some(Box::new(self.clone())),
            ..Default::default()
        }
    }

    /// Each generated token's ready time: the chunk arrivals with each chunk's gap divided
    /// among its tokens (a first chunk's extra tokens arrive with it).
    fn token_ready_at(&self) -> Vec<Duration> {
        let (counts, _) = self.tokens_per_chunk();
        let mut token_ready_at = Vec::new();
        if let Some(first) = self.chunks.first() {
            let leading = counts.first().copied().unwrap_or(1).max(1);
            token_ready_at.extend(std::iter::repeat_n(first.at, leading as usize));
            let mut at = first.at;
            for gap in self.inter_token_latencies() {
                at += gap;
                token_ready_at.push(at);
            }
        }
        token_ready_at
    }

    /// The thinking figures under the one definition every turn uses
    /// (`TurnTimeline::thinking_summary`); `None` without reasoning.
    fn thinking_summary(&self) -> Option<super::ThinkingSummary> {
        super::TurnTimeline {
            token_ready_at: self.token_ready_at(),
            finished_at: Some(self.finished_at),
            thinking: self.thinking_span(),
            ..Default::default()
        }
        .thinking_summary()
    }

    /// The stream under vLLM's benchmark's definitions (`VllmFigures`); `None` without a
    /// chunk that had a choice.
    pub(crate) fn vllm_record(&self) -> Option<VllmRecord> {
        let (&first, &last) = (self.choice_chunks.first()?, self.choice_chunks.last()?);
        let itl = self
            .choice_chunks
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .collect();
        let n = self.usage.map_or(0, |u| u.completion_tokens);
        let tpot = if n > 1 {
            last.saturating_sub(first) / u32::try_from(n - 1).unwrap_or(u32::MAX)
        } else {
            Duration::ZERO
        };
        Some(VllmRecord {
            ttft: first,
            itl,
            e2e: last,
            tpot,
            output_tokens: n,
        })
    }

    fn vllm_figures(&self) -> VllmFigures {
        let Some(r) = self.vllm_record() else {
            return VllmFigures::default();
        };
        VllmFigures {
            ttft_ms: Some(ms(r.ttft)),
            itl: LatencyStats::from_durations_interpolated(&r.itl),
            e2e_ms: Some(ms(r.e2e)),
            tpot_ms: (r.output_tokens > 1).then(|| ms(r.tpot)),
        }
    }

    /// Whether the turn was cold ([`ColdStart`]): said by the server, or the time its report
    /// leaves out (`rest_ms`) is past both bounds.
    fn cold_start(&self, rest_ms: Option<f64>, server_tpot_ms: Option<f64>) -> Option<ColdStart> {
        if self.server_sleeping == Some(true) {
            return Some(ColdStart::Sleeping);
        }
        if let Some(load_ms) = self.server_load_ms.filter(|&l| l > COLD_UNEXPLAINED_MS) {
            return Some(ColdStart::ModelLoad { load_ms });
        }
        let rest = rest_ms?;
        let step = server_tpot_ms.unwrap_or(0.0).max(1.0);
        (rest > COLD_UNEXPLAINED_MS && rest > COLD_STEPS * step).then_some(ColdStart::Unexplained {
            unexplained_ms: rest,
        })
    }

    pub(crate) fn summary(&self) -> RemoteSummary {
        let (_, count_source) = self.tokens_per_chunk();
        let n = self.tokens_generated();
        let ttft = self.ttft();
        let server_prompt = self.server_timings.map(|t| t.prompt_ms);
        let reported = self.server_reported;
        // The server's part of TTFT: llama-server's prompt time (ollama's, with its model
        // load), or vLLM's queue + its TTFT.
        let server_part = server_prompt
            .map(|p| p + self.server_load_ms.unwrap_or(0.0))
            .or_else(|| {
                let r = reported?;
                Some(r.queue_ms? + r.first_token_ms?)
            });
        let queue_transport_ms =
            (ttft.zip(self.network_rtt).zip(server_part)).map(|((t, rtt), p)| ms(t) - ms(rtt) - p);
        let source = self
            .server_timings
            .map(|t| t.source)
            .or(reported.map(|r| r.source));
        let decode_span = (self.chunks.first().zip(self.chunks.last()))
            .map_or(Duration::ZERO, |(a, b)| b.at.saturating_sub(a.at));
        let server_tpot = self
            .server_timings
            .filter(|t| t.predicted_n > 0)
            .map(|t| t.predicted_ms / t.predicted_n as f64)
            .or(reported.and_then(|r| r.tpot_ms));
        RemoteSummary {
            ttft_ms: ttft.map(ms),
            ttfo_ms: self.ttfo().map(ms),
            thinking: self.thinking_summary(),
            network_rtt_ms: self.network_rtt.map(ms),
            server_prompt_ms: server_prompt,
            server_load_ms: self.server_load_ms,
            server_queue_ms: reported.and_then(|r| r.queue_ms),
            server_first_token_ms: reported.and_then(|r| r.first_token_ms),
            server_timing_source: source,
            cold_start: self.cold_start(queue_transport_ms, server_tpot),
            server_prompt_tokens: self.server_timings.map(|t| t.prompt_n),
            server_cached_tokens: self
                .server_timings
                .and_then(|t| t.cache_n)
                .or(self.usage.and_then(|u| u.cached_tokens)),
            queue_transport_ms,
            prompt_tokens: self.usage.map(|u| u.prompt_tokens),
            tokens_generated: n,
            token_count_source: count_source,
            chunks: self.chunks.len(),
            itl: LatencyStats::from_durations(&self.inter_token_latencies()),
            tpot_ms: self.tpot().map(ms),
            decode_tok_per_s: rate_per_s(n.saturating_sub(1) as usize, decode_span),
            e2e_ms: ms(self.e2e()),
            server_decode_ms: self
                .server_timings
                .map(|t| t.predicted_ms)
                .or(reported.and_then(|r| r.decode_ms)),
            server_tpot_ms: server_tpot,
            server_predicted_tokens: self.server_timings.map(|t| t.predicted_n),
            vllm_convention: self.vllm_figures(),
        }
    }
}

/// A server's number for a note: at most 3 significant digits, so no huge or odd value is
/// echoed digit by digit.
fn finite_or_word(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "infinity" } else { "-infinity" }.into()
    } else if v.abs() >= 1e6 {
        format!("{v:.2e}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> ChunkMark {
        ChunkMark {
            at: Duration::from_millis(ms),
            cumulative_tokens: None,
            reasoning: false,
        }
    }

    /// A llama-server turn: TTFT `ttft` ms, RTT 1 ms, prompt 10 ms, 4 tokens decoded in 40 ms.
    fn llama_turn(ttft: u64) -> RemoteTimeline {
        RemoteTimeline {
            network_rtt: Some(Duration::from_millis(1)),
            chunks: vec![at(ttft), at(ttft + 10), at(ttft + 20), at(ttft + 30)],
            finished_at: Duration::from_millis(ttft + 31),
            server_timings: Some(ServerTimings {
                source: ServerTimingSource::LlamaServer,
                prompt_n: 8,
                prompt_ms: 10.0,
                cache_n: None,
                predicted_n: 4,
                predicted_ms: 40.0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_cold_turn_is_told_by_the_server_or_by_what_its_report_leaves_out() {
        // 20 ms of TTFT: one step and the HTTP path beyond the prompt: warm.
        assert_eq!(llama_turn(20).summary().cold_start, None);
        // 900 ms outside the report: under the 1 s bound, not called cold.
        assert_eq!(llama_turn(911).summary().cold_start, None);
        // 1489 ms outside the report, 149 decode steps: a load or a wake.
        let cold = llama_turn(1500).summary().cold_start;
        assert_eq!(
            cold,
            Some(ColdStart::Unexplained {
                unexplained_ms: 1489.0
            })
        );
        // The server said it was asleep: cold whatever the times.
        let mut t = llama_turn(20);
        t.server_sleeping = Some(true);
        assert_eq!(t.summary().cold_start, Some(ColdStart::Sleeping));
        // Without the server's own part nothing is unexplained: not called cold.
        let mut t = llama_turn(5000);
        t.server_timings = None;
        assert_eq!(t.summary().cold_start, None);
    }

    #[test]
    fn a_chunk_gap_is_divided_among_its_tokens() {
        let t = RemoteTimeline {
            chunks: vec![at(100), at(110), at(140)],
            usage: Some(ServerUsage {
                prompt_tokens: 5,
                completion_tokens: 6,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        // 6 tokens over 3 chunks: 2 each (estimated spread).
        let (counts, source) = t.tokens_per_chunk();
        assert_eq!(counts, vec![2, 2, 2]);
        assert_eq!(source, TokenCountSource::UsageSpread);
        let itl = t.inter_token_latencies();
        assert_eq!(
            itl,
            vec![
                Duration::from_millis(5),
                Duration::from_millis(5),
                Duration::from_millis(15),
                Duration::from_millis(15)
            ]
        );
        assert_eq!(t.tokens_generated(), 6);
        assert_eq!(t.ttft(), Some(Duration::from_millis(100)));
        assert_eq!(t.tpot(), Some(Duration::from_millis(8)));
    }

    #[test]
    fn vllm_convention_times_every_choice_chunk_undivided() {
        let d = Duration::from_millis;
        let t = RemoteTimeline {
            // A role-only chunk at 50 ms, content at 100, 110 and 140 ms, the finish chunk at
            // 145 ms.
            choice_chunks: vec![d(50), d(100), d(110), d(140), d(145)],
            chunks: vec![at(100), at(110), at(140)],
            usage: Some(ServerUsage {
                prompt_tokens: 5,
                completion_tokens: 6,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        let r = t.vllm_record().expect("choice chunks");
        assert_eq!(r.ttft, d(50));
        assert_eq!(r.itl, vec![d(50), d(10), d(30), d(5)]);
        assert_eq!(r.e2e, d(145));
        assert_eq!(r.tpot, d(19));
        let s = t.summary();
        // tokscope's own: content chunks, gaps divided per token.
        assert_eq!(s.ttft_ms, Some(100.0));
        assert_eq!(s.itl.map(|i| i.count), Some(4));
        assert_eq!(s.e2e_ms, 140.0);
        let v = s.vllm_convention;
        assert_eq!(v.ttft_ms, Some(50.0));
        assert_eq!(v.e2e_ms, Some(145.0));
        assert_eq!(v.tpot_ms, Some(19.0));
        let itl = v.itl.expect("gaps");
        assert_eq!(itl.count, 4);
        // numpy's median of [5, 10, 30, 50] is 20; nearest rank would give 10.
        assert_eq!(itl.p50_ms, 20.0);
        // A stream of one token: no TPOT, and none without any choice chunk.
        let one = RemoteTimeline {
            choice_chunks: vec![d(30)],
            usage: Some(ServerUsage {
                prompt_tokens: 5,
                completion_tokens: 1,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        assert_eq!(one.summary().vllm_convention.tpot_ms, None);
        assert_eq!(one.vllm_record().map(|r| r.tpot), Some(Duration::ZERO));
        assert_eq!(RemoteTimeline::default().vllm_record(), None);
    }

    #[test]
    fn continuous_usage_gives_exact_counts() {
        let mut t = RemoteTimeline {
            chunks: vec![at(10), at(20), at(30)],
            ..Default::default()
        };
        for (c, n) in t.chunks.iter_mut().zip([1, 3, 4]) {
            c.cumulative_tokens = Some(n);
        }
        assert_eq!(
            t.tokens_per_chunk(),
            (vec![1, 2, 1], TokenCountSource::ContinuousUsage)
        );
    }

    #[test]
    fn unknown_parts_are_none_not_zero() {
        let t = RemoteTimeline {
            chunks: vec![at(50)],
            finished_at: Duration::from_millis(60),
            ..Default::default()
        };
        let s = t.summary();
        assert_eq!(s.ttft_ms, Some(50.0));
        assert_eq!(s.network_rtt_ms, None);
        assert_eq!(s.server_prompt_ms, None);
        assert_eq!(s.queue_transport_ms, None);
        assert_eq!(s.itl, None);
        assert_eq!(s.tpot_ms, None);
        assert_eq!(s.decode_tok_per_s, None);
        assert_eq!(s.token_count_source, TokenCountSource::ChunksAssumed);
        let empty = RemoteTimeline::default().summary();
        assert_eq!(empty.ttft_ms, None);
        assert_eq!(empty.tokens_generated, 0);
    }

    #[test]
    fn the_chat_timeline_of_a_remote_turn_keeps_its_figures() {
        let t = RemoteTimeline {
            network_rtt: Some(Duration::from_millis(2)),
            chunks: vec![at(30), at(40), at(60)],
            finished_at: Duration::from_millis(61),
            server_timings: Some(ServerTimings {
                source: ServerTimingSource::LlamaServer,
                prompt_n: 6,
                prompt_ms: 20.0,
                cache_n: Some(4),
                predicted_n: 3,
                predicted_ms: 25.0,
            }),
            usage: Some(ServerUsage {
                prompt_tokens: 10,
                completion_tokens: 3,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        let chat = t.turn_timeline();
        assert_eq!(
            chat.token_ready_at,
            vec![
                Duration::from_millis(30),
                Duration::from_millis(40),
                Duration::from_millis(60)
            ]
        );
        assert_eq!(chat.prompt_tokens, Some(10));
        assert_eq!(chat.cached_tokens, Some(4));
        assert_eq!(chat.prefill, Some(Duration::from_millis(20)));
        assert_eq!(chat.decode_calls, 3);
        assert_eq!(chat.decode_compute, Duration::from_millis(25));
        // Stages only a local engine has stay unknown.
        assert_eq!(chat.queue, None);
        assert_eq!(chat.template_tokenize, None);
        assert_eq!(chat.prefill_done_at, None);
        assert_eq!(chat.remote.as_deref(), Some(&t));
        // The saved summary and the remote one agree on every shared figure.
        let (saved, remote) = (chat.summary(), t.summary());
        assert_eq!(saved.ttft_ms, remote.ttft_ms);
        assert_eq!(saved.tpot_ms, remote.tpot_ms);
        assert_eq!(saved.decode_tok_per_s, remote.decode_tok_per_s);
        assert_eq!(saved.itl, remote.itl);
        assert_eq!(saved.e2e_ms, remote.e2e_ms);
        assert_eq!(saved.tokens_generated as u64, remote.tokens_generated);
    }

    fn thought(ms: u64) -> ChunkMark {
        ChunkMark {
            reasoning: true,
            ..at(ms)
        }
    }

    /// Issue 56 item 5: a reasoning chunk is a token for TTFT and ITL; the answer's first
    /// chunk is TTFO; thinking tokens are part of the server's count, never added again.
    #[test]
    fn the_reasoning_channel_is_timed_counted_once_and_split_in_the_chat_timeline() {
        let t = RemoteTimeline {
            // Five reasoning chunks 20 ms apart from 50 ms, then three answer chunks.
            chunks: vec![
                thought(50),
                thought(70),
                thought(90),
                thought(110),
                thought(130),
                at(150),
                at(160),
                at(170),
            ],
            finished_at: Duration::from_millis(175),
            usage: Some(ServerUsage {
                prompt_tokens: 4,
                completion_tokens: 8,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        let s = t.summary();
        assert_eq!(
            s.ttft_ms,
            Some(50.0),
            "TTFT is the first token on any channel"
        );
        assert_eq!(s.ttfo_ms, Some(150.0));
        assert_eq!(s.tokens_generated, 8, "thinking tokens are counted once");
        assert_eq!(s.itl.map(|i| i.count), Some(7), "ITL spans both channels");
        let th = s.thinking.expect("a thinking split");
        assert_eq!(th.thinking_tokens, 5);
        assert_eq!(th.answer_tokens, 3);
        assert_eq!(th.time_to_first_answer_ms, Some(150.0));
        assert_eq!(th.thinking_ms, Some(80.0));
        assert!(!th.ended_while_thinking);
        // The chat's record holds the same split, and its summary agrees.
        let chat = t.turn_timeline();
        assert_eq!(
            chat.thinking,
            Some(crate::metrics::ThinkingSpan {
                tokens: 5,
                ended_at: Some(Duration::from_millis(130)),
                first_answer_at: Some(Duration::from_millis(150)),
            })
        );
        assert_eq!(chat.summary().thinking, Some(th));
        assert_eq!(chat.summary().ttft_ms, Some(50.0));
        // A stream that ended while thinking says so, with no answer figures.
        let mut still = t.clone();
        still.chunks.truncate(3);
        still.usage = None;
        let th = still.summary().thinking.expect("a thinking split");
        assert!(th.ended_while_thinking);
        assert_eq!(th.time_to_first_answer_ms, None);
        assert_eq!(still.summary().ttfo_ms, None);
        assert!(
            still
                .turn_timeline()
                .summary()
                .thinking
                .unwrap()
                .ended_while_thinking
        );
        // Without reasoning, TTFO is TTFT and there is no split.
        let plain = llama_turn(20).summary();
        assert_eq!(plain.ttfo_ms, plain.ttft_ms);
        assert_eq!(plain.thinking, None);
    }

    #[test]
    fn a_spread_first_chunk_gives_every_token_a_ready_time() {
        let t = RemoteTimeline {
            chunks: vec![at(10), at(20)],
            usage: Some(ServerUsage {
                prompt_tokens: 1,
                completion_tokens: 4,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        let chat = t.turn_timeline();
        assert_eq!(chat.tokens_generated(), 4);
        assert_eq!(chat.token_ready_at.last(), Some(&Duration::from_millis(20)));
    }

    #[test]
    fn ttft_breakdown_subtracts_rtt_and_server_prompt_time() {
        let t = RemoteTimeline {
            network_rtt: Some(Duration::from_millis(2)),
            chunks: vec![at(30), at(40)],
            server_timings: Some(ServerTimings {
                source: ServerTimingSource::LlamaServer,
                prompt_n: 10,
                prompt_ms: 20.0,
                cache_n: Some(0),
                predicted_n: 2,
                predicted_ms: 16.0,
            }),
            usage: Some(ServerUsage {
                prompt_tokens: 10,
                completion_tokens: 2,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        let s = t.summary();
        assert_eq!(s.queue_transport_ms, Some(8.0));
        assert_eq!(s.token_count_source, TokenCountSource::UsageOnePerChunk);
        assert_eq!(s.server_tpot_ms, Some(8.0));
        assert_eq!(s.server_cached_tokens, Some(0));
    }

    #[test]
    fn absurd_server_counts_never_size_anything_and_are_dropped_with_a_note() {
        for completion_tokens in [7_000_000_000_000_000, u64::MAX - 3, MAX_OUTPUT_TOKENS + 1] {
            let mut t = RemoteTimeline {
                chunks: vec![at(10), at(20)],
                finished_at: Duration::from_millis(30),
                usage: Some(ServerUsage {
                    prompt_tokens: 4,
                    completion_tokens,
                    cached_tokens: None,
                }),
                ..Default::default()
            };
            // Even unchecked, the figures fall back to one token per chunk.
            assert_eq!(t.tokens_generated(), 2);
            assert_eq!(t.turn_timeline().token_ready_at.len(), 2);
            let notes = t.drop_implausible();
            assert_eq!(
                notes,
                vec![format!(
                    "the server reported {completion_tokens} output tokens for 2 chunks: ignored"
                )]
            );
            assert_eq!(t.usage, None);
        }
        // Running counts that jump past what the chunks hold, or go down, are not the server's.
        let mut t = RemoteTimeline {
            chunks: vec![at(10), at(20), at(30)],
            ..Default::default()
        };
        for (c, n) in t.chunks.iter_mut().zip([1, u64::MAX, 3]) {
            c.cumulative_tokens = Some(n);
        }
        assert_eq!(t.tokens_per_chunk().1, TokenCountSource::ChunksAssumed);
        assert_eq!(t.inter_token_latencies().len(), 2);
        assert_eq!(t.drop_implausible().len(), 1);
        assert!(t.chunks.iter().all(|c| c.cumulative_tokens.is_none()));
    }

    #[test]
    fn impossible_server_times_and_prompt_counts_are_dropped() {
        let timings = |prompt_ms: f64, predicted_ms: f64| ServerTimings {
            source: ServerTimingSource::LlamaServer,
            prompt_n: 3,
            prompt_ms,
            cache_n: None,
            predicted_n: 1,
            predicted_ms,
        };
        for (t, word) in [
            (timings(-5.0, 1.0), "-5.0"),
            (timings(f64::NAN, 1.0), "NaN"),
            (timings(1.0, f64::INFINITY), "infinity"),
            (timings(1.0, 9e300), "9.00e300"),
            (timings(50_000.0, 1.0), "50000.0"),
        ] {
            let mut r = RemoteTimeline {
                chunks: vec![at(10)],
                finished_at: Duration::from_millis(20),
                server_timings: Some(t),
                ..Default::default()
            };
            let notes = r.drop_implausible();
            assert_eq!(notes.len(), 1, "{notes:?}");
            assert!(notes[0].contains(word), "{notes:?}");
            assert_eq!(r.server_timings, None);
            assert_eq!(r.summary().server_prompt_ms, None);
        }
        let mut r = RemoteTimeline {
            chunks: vec![at(10)],
            usage: Some(ServerUsage {
                prompt_tokens: u64::MAX,
                completion_tokens: 1,
                cached_tokens: None,
            }),
            ..Default::default()
        };
        assert_eq!(r.drop_implausible().len(), 1);
        assert_eq!(r.summary().prompt_tokens, None);
        // Plausible figures stay as they are.
        let mut fine = RemoteTimeline {
            chunks: vec![at(10), at(20)],
            finished_at: Duration::from_millis(25),
            usage: Some(ServerUsage {
                prompt_tokens: 9,
                completion_tokens: 5,
                cached_tokens: Some(2),
            }),
            server_timings: Some(timings(3.0, 12.0)),
            ..Default::default()
        };
        let before = fine.clone();
        assert!(fine.drop_implausible().is_empty());
        assert_eq!(fine, before);
    }

    /// One file of `tests/fixtures/timing/`: a stream's events and the figures they must give
    /// under each convention (docs/metrics.md, "Worked examples"); a figure left out must be
    /// absent.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TimingFixture {
        events: Vec<FixtureEvent>,
        usage_completion_tokens: Option<u64>,
        tokscope: FixtureFigures,
        vllm: FixtureFigures,
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FixtureEvent {
        at_ms: u64,
        /// `role` (a choice without text), `content`, `reasoning`, `finish` (the closing
        /// choice).
        kind: String,
        /// The running output-token count sent with the chunk (vLLM's continuous usage).
        tokens: Option<u64>,
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct FixtureFigures {
        ttft_ms: Option<f64>,
        itl_p50_ms: Option<f64>,
        itl_p99_ms: Option<f64>,
        tpot_ms: Option<f64>,
        e2e_ms: Option<f64>,
    }

    impl TimingFixture {
        fn timeline(&self) -> RemoteTimeline {
            let mut t = RemoteTimeline {
                usage: self.usage_completion_tokens.map(|n| ServerUsage {
                    prompt_tokens: 1,
                    completion_tokens: n,
                    cached_tokens: None,
                }),
                ..Default::default()
            };
            for e in &self.events {
                let at = Duration::from_millis(e.at_ms);
                t.choice_chunks.push(at);
                match e.kind.as_str() {
                    "role" | "finish" => {}
                    "content" | "reasoning" => t.chunks.push(ChunkMark {
                        at,
                        cumulative_tokens: e.tokens,
                        reasoning: e.kind == "reasoning",
                    }),
                    other => panic!("unknown event kind {other:?}"),
                }
                t.finished_at = at;
            }
            t
        }
    }

    /// Figures rounded to the fixtures' 3 decimals, so that 100 / 6 ms reads 16.667.
    fn rounded(f: FixtureFigures) -> FixtureFigures {
        let r = |v: Option<f64>| v.map(|v| (v * 1e3).round() / 1e3);
        FixtureFigures {
            ttft_ms: r(f.ttft_ms),
            itl_p50_ms: r(f.itl_p50_ms),
            itl_p99_ms: r(f.itl_p99_ms),
            tpot_ms: r(f.tpot_ms),
            e2e_ms: r(f.e2e_ms),
        }
    }

    #[test]
    fn every_timing_fixture_gives_its_figures_under_both_conventions() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/timing");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 4, "{files:?}");
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            let fixture: TimingFixture =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let s = fixture.timeline().summary();
            let ours = FixtureFigures {
                ttft_ms: s.ttft_ms,
                itl_p50_ms: s.itl.map(|l| l.p50_ms),
                itl_p99_ms: s.itl.map(|l| l.p99_ms),
                tpot_ms: s.tpot_ms,
                e2e_ms: Some(s.e2e_ms),
            };
            let v = &s.vllm_convention;
            let vllms = FixtureFigures {
                ttft_ms: v.ttft_ms,
                itl_p50_ms: v.itl.map(|l| l.p50_ms),
                itl_p99_ms: v.itl.map(|l| l.p99_ms),
                tpot_ms: v.tpot_ms,
                e2e_ms: v.e2e_ms,
            };
            let name = path.display();
            assert_eq!(
                rounded(ours),
                fixture.tokscope,
                "{name}: tokscope's convention"
            );
            assert_eq!(rounded(vllms), fixture.vllm, "{name}: vLLM's convention");
        }
    }

    /// docs/metrics.md's worked examples are the fixtures, quoted whole: a fixture changed
    /// without its example (or the other way round) fails here.
    #[test]
    fn docs_quote_every_timing_fixture_whole() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let docs = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
        for entry in std::fs::read_dir(root.join("tests/fixtures/timing")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let quoted = format!("`tests/fixtures/timing/{name}`:\n\n```toml\n{text}```\n");
            assert!(
                docs.contains(&quoted),
                "docs/metrics.md does not quote {name} whole"
            );
        }
    }
}
