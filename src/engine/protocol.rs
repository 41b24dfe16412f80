//! What crosses the engine thread's channels: the commands it takes, the events it sends, the
//! requests and the reports. Every event of a request carries its id.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::llama::error::EngineError;
use crate::llama::model_info::ModelInfo;
use crate::llama::settings::{EngineSettings, SamplingParams};
use crate::metrics::TurnTimeline;

/// Identifies one generation request; events of other requests are ignored by their readers.
pub type RequestId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// An earlier answer's thinking (markers left out), kept apart from its content as
    /// llama-server and vLLM keep it: a model's own template is given it as
    /// `reasoning_content` and keeps or drops it as it does (Qwen3 keeps it after the last
    /// user message, drops it before).
    #[serde(
        default,
        alias = "reasoning_content",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning: Option<String>,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            reasoning: None,
        }
    }
}

/// Which model to load and how to set up its context.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_path: PathBuf,
    pub settings: EngineSettings,
}

/// A turn as its caller asks for it: the conversation so far, ending with the user's message,
/// and how to answer it. It has no clock: `EngineHandle::send` stamps `submitted_at` when it
/// hands the turn to the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRequest {
    pub messages: Vec<ChatMessage>,
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    /// Return the logits the first token was sampled from (for cross-checks and quality
    /// comparisons; a vocabulary-sized copy, so off by default).
    pub capture_first_logits: bool,
    /// Generate exactly `max_tokens`: end-of-generation tokens and stop strings do not end
    /// the turn (for benchmarks, like llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
    /// When the conversation no longer fits the context.
    pub context_full: ContextFull,
}

/// What a turn does when the conversation no longer fits the context with room for an answer
/// (`chat --context-full`, `/context-full`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContextFull {
    /// Leave the oldest exchanges out, enough that the kept part fills half the context, and
    /// say how many (`PrefillStarted::dropped_messages`).
    #[default]
    DropOldest,
    /// Leave nothing out and generate nothing: the turn fails with `EngineError::ContextFull`,
    /// which names the user's choices.
    Stop,
}

impl ContextFull {
    pub const NAMES: &'static str = "drop-oldest or stop";

    pub fn name(self) -> &'static str {
        match self {
            ContextFull::DropOldest => "drop-oldest",
            ContextFull::Stop => "stop",
        }
    }
}

impl std::str::FromStr for ContextFull {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "drop-oldest" => Ok(ContextFull::DropOldest),
            "stop" => Ok(ContextFull::Stop),
            other => Err(format!(
                "unknown context-full policy {other:?}: {}",
                Self::NAMES
            )),
        }
    }
}

/// One chat turn to generate, as the engine thread receives it: the caller's turn, its id,
/// and the moment `EngineHandle::send` handed it over.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub id: RequestId,
    pub turn: TurnRequest,
    /// When the request was handed to the engine: TTFT and every offset start here.
    pub submitted_at: Instant,
    /// Compute each emitted token's own confidence from the logits the host samples from
    /// (`EngineHandle::set_confidence`), sent as `Confidence` before `Finished`.
    pub confidence: bool,
}

pub enum EngineCommand {
    Generate(GenerateRequest),
    /// Load another model beside the current one and switch to it only once it is ready
    /// (`Ready`); on any failure, or when `id` is cancelled (Esc) during the load, the current
    /// model and its KV cache stay as they were (`SwitchFailed`).
    SwitchModel {
        id: RequestId,
        config: EngineConfig,
    },
    /// Measure the loaded model as the chat's bench screen (F2) asks: batched decoding for
    /// each batch size, or decode at each depth; in contexts of its own, cancelled like a
    /// generation request. Points arrive as `BatchPoint` or `DepthPoint`, then `SweepDone`.
    Sweep {
        id: RequestId,
        plan: SweepPlan,
    },
    /// One timed run of bench's tg test (`llama::measure`: `n_gen` single-token decodes of
    /// random tokens, no sampling) on the loaded model, in a context of its own sized like
    /// bench's (llama-bench's rule), kept for the next request of the same length; warmed up
    /// once when created. On the engine's thread, so that `bench --run-vs-tg` times tg and the
    /// engine's turns on one thread and one OpenMP pool. Answered by `TgMeasured` or `Failed`.
    BenchTg {
        id: RequestId,
        n_gen: u32,
    },
    /// Answer `request` with another model file (the chat's A/B comparison): model B is
    /// loaded beside the chat's model with the same settings and a context of its own,
    /// generates once (its events carry the request's id), then is dropped. The chat's model
    /// and its KV cache are left as they are.
    AbGenerate {
        path: PathBuf,
        request: GenerateRequest,
        /// The chat's reference (`--ref`, `/ref`): B is scored against it, as A's answers
        /// are, so both sides of the A/B have one baseline; `None`: against A's model.
        reference: Option<PathBuf>,
    },
    /// Score the last finished answer against the reference model at `reference` (loaded
    /// once, with the vocabulary check `--draft` makes, and kept for the next answer):
    /// answered by `Scored` or `Failed` under `id`, cancelled like a generation request.
    ScoreLast {
        id: RequestId,
        reference: PathBuf,
    },
    /// Score an evaluation text against `reference` through the same path as `ScoreLast`,
    /// the text cut as llama-perplexity cuts it (`Chunking`: in each chunk the first half,
    /// BOS first, is read as the prompt and the rest as the answer), so that the chat's
    /// figures can be held against llama-perplexity's (`tokscope doctor scoring`). Answered
    /// by `Scored` or `Failed` under `id`.
    ScoreText {
        id: RequestId,
        reference: PathBuf,
        text: String,
        chunking: crate::metrics::quality::Chunking,
        /// The chat's passes, or llama-perplexity's whole-chunk decode.
        passes: super::score::Passes,
    },
    Shutdown,
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// A stop string of the completion-style prompt appeared.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context window is full.
    ContextFull,
    /// The user cancelled; the partial answer is kept.
    Cancelled,
}

impl StopReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "end of generation",
            StopReason::StopString => "stop string",
            StopReason::MaxTokens => "max tokens",
            StopReason::ContextFull => "context full",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// The outcome of a finished (or cancelled) turn.
#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    /// The answer's text. For a model that thought first, the answer only: the thinking is
    /// in `thinking_text`.
    pub text: String,
    /// The prompt as the model was given it; empty for a remote server's turn, whose server
    /// builds the prompt.
    #[serde(skip)]
    pub prompt: PromptText,
    /// The thinking's text (its markers left out) of a turn that thought
    /// (`timeline.thinking`); `None` for a turn without a thinking span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_text: Option<String>,
    pub stop_reason: StopReason,
    pub timeline: TurnTimeline,
    /// Tokens in the KV cache after the turn (context used).
    pub context_used: usize,
    /// Oldest messages left out of the prompt because the conversation no longer fit.
    pub dropped_messages: usize,
    /// llama.cpp's own counters for this turn (`llama_perf_context`), for cross-checks.
    pub llama_counters: LlamaCounters,
    /// The logits after prefill, when the request asked for them.
    #[serde(skip)]
    pub first_logits: Option<Vec<f32>>,
    /// Host time between decode calls, summed over the turn (docs/metrics.md).
    #[serde(skip)]
    pub host: crate::metrics::host::HostTimes,
    /// The sampling path the turn took (`host-greedy`, `host-top-k`, `host-chain`, `backend`).
    pub sampler: &'static str,
    /// Where the turn sampled (backend or host) and why there.
    #[serde(skip)]
    pub sampling: crate::llama::sampler::SamplingPlace,
    /// Speculative decoding's counts and times, when the engine speculates.
    #[serde(skip)]
    pub spec: Option<crate::metrics::spec::SpecStats>,
    /// The step profiler's record of the turn (`--profile`; `None` when off).
    #[serde(skip)]
    pub profile: Option<crate::metrics::profile::ProfileRecord>,
}

/// A turn's prompt as the model was given it: the template rendered, special tokens as their
/// text, and where in that text each special token (a control or user-defined token of the
/// vocabulary, not text that spells one) stands, for the chat's `/prompt`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptText {
    pub text: String,
    /// Byte ranges of `text` that are special tokens.
    pub special: Vec<std::ops::Range<usize>>,
}

/// Model B's answer in an A/B comparison.
#[derive(Debug, Clone)]
pub struct AbReport {
    /// Model B as loaded (file, quantization, template).
    pub model: ModelInfo,
    pub turn: TurnReport,
    /// Model A (the chat's) answering the same request in a fresh context of its own, just
    /// before B, so that A's and B's figures are like for like (both cold: no KV cache
    /// reuse, no queue behind the chat). `None` when A could not be re-run.
    pub a_fresh: Option<TurnReport>,
    /// The text of each generated token, in order (whole characters; before stop strings are
    /// held back or cut, so a stop string's tokens are there too): where B's answer parts from
    /// A's is counted in these.
    pub pieces: Vec<String>,
    /// `None`: B's answer is being scored against A's model (the chat's, as the reference),
    /// and `AbScored` follows under the same id; otherwise why it is not (a server on either
    /// side sends no full distributions; another vocabulary).
    pub not_scored: Option<String>,
}

/// llama.cpp's perf counters: prompt eval (multi-token decodes) and eval (single-token decodes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LlamaCounters {
    pub prompt_eval_ms: f64,
    pub prompt_eval_tokens: i32,
    pub eval_ms: f64,
    pub eval_tokens: i32,
}

/// What a model load is doing, for the words on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadStage {
    /// The pre-flight checks of the file and, for a file not seen before, the child process
    /// that tries it first (`llama::probe`).
    Checking,
    /// llama.cpp reading the weights (and repacking them for the CPU's kernels).
    Weights,
    /// The context (KV cache and compute buffers), the draft model when speculating.
    Context,
    /// A server being connected (`--url`).
    Connecting,
}

impl LoadStage {
    /// The stage in a few words, for the status line.
    #[must_use]
    pub fn short(self) -> &'static str {
        match self {
            Self::Checking => "checking file",
            Self::Weights => "loading",
            Self::Context => "creating context",
            Self::Connecting => "connecting",
        }
    }

    /// The stage in a sentence, for the welcome screen.
    #[must_use]
    pub fn words(self) -> &'static str {
        match self {
            Self::Checking => "checking the file (in a child process, once per file)",
            Self::Weights => "loading the weights",
            Self::Context => "creating the context (KV cache and compute buffers)",
            Self::Connecting => "connecting to the server",
        }
    }
}

pub enum EngineEvent {
    /// Each answer token's own confidence, in answer order, sent just before `Finished` when
    /// the request asked for it; `None` when the turn sampled on the backend (no logits reach
    /// the host).
    Confidence {
        request_id: RequestId,
        tokens: Option<Vec<crate::metrics::quality::TokenConfidence>>,
    },
    /// Model loading: its stage, and within `Weights` llama.cpp's progress, 0.0..=1.0, and how
    /// fast the weights are read (`None` in the other stages).
    Loading {
        stage: LoadStage,
        progress: f32,
        read: Option<crate::metrics::LoadRead>,
    },
    /// The model and context are ready.
    Ready(Box<ModelInfo>),
    /// The model could not be loaded; the engine waits for a `SwitchModel` (the picker).
    LoadFailed(EngineError),
    /// Progress of loading the model of a switch, 0.0..=1.0; the current model still serves.
    SwitchProgress {
        request_id: RequestId,
        progress: f32,
    },
    /// A switch did not happen (the new model failed to load, or the load was cancelled):
    /// the model loaded before, its KV cache and the engine's state are as they were.
    SwitchFailed {
        request_id: RequestId,
        error: EngineError,
    },
    /// Prefill of a request began.
    PrefillStarted {
        request_id: RequestId,
        prompt_tokens: usize,
        cached_tokens: usize,
        /// Oldest messages left out because the conversation no longer fits the context.
        dropped_messages: usize,
    },
    /// One micro-batch of the prompt was prefilled: `done` of the `total` tokens this turn
    /// prefills (the cached prefix not counted). `at` is the offset from `submitted_at`.
    PrefillProgress {
        request_id: RequestId,
        done: usize,
        total: usize,
        at: Duration,
    },
    /// Prefill finished: the first parts of TTFT, for the live display.
    PrefillDone {
        request_id: RequestId,
        template_tokenize: Duration,
        prefill: Duration,
        /// Offset from `submitted_at`.
        at: Duration,
    },
    /// One generated token. `text` may be empty while a UTF-8 character or a possible stop
    /// string (or thinking marker) is held back; `at` is the offset from `submitted_at` when it
    /// was ready. A thinking token's text is not here but in the `Thinking` event after it.
    Token {
        request_id: RequestId,
        index: usize,
        text: String,
        at: Duration,
    },
    /// The thinking span of a model that reasons before it answers, after a token that
    /// changed it (sent after that token's `Token` event, whose text is then the token's
    /// answer part only): the span so far (for the live timeline) and the token's thinking
    /// text, markers left out. Never sent for a turn without thinking.
    Thinking {
        request_id: RequestId,
        span: crate::metrics::ThinkingSpan,
        text: String,
    },
    /// Speculative decoding's figures so far, after each target pass of a speculating turn
    /// (the chat's metrics column shows them live).
    Spec {
        request_id: RequestId,
        stats: Box<crate::metrics::spec::SpecStats>,
    },
    /// A profiled decode step (`--profile`; the chat's profile screen shows it live), with
    /// what profiling adds to each node so far this turn, with its spread.
    StepProfiled {
        request_id: RequestId,
        step: Box<crate::metrics::profile::StepRecord>,
        per_node: crate::metrics::profile::Correction,
    },
    Finished {
        request_id: RequestId,
        report: Box<TurnReport>,
    },
    Failed {
        request_id: RequestId,
        error: EngineError,
    },
    /// Something to say that belongs to no request: a remote chat's OTLP export that failed.
    Warning(String),
    /// One batch size of a batch sweep measured.
    BatchPoint {
        request_id: RequestId,
        point: crate::metrics::BatchPoint,
        /// Prefill of all B prompts together; `None` when it was not timed.
        prefill_ms: Option<f64>,
    },
    /// One depth of a depth sweep measured (`SweepPlan::Depth`).
    DepthPoint {
        request_id: RequestId,
        run: crate::metrics::DepthRun,
    },
    /// Model B of an A/B comparison answered (its prefill and token events came before, under
    /// the same id; an error arrives as `Failed`).
    AbFinished {
        request_id: RequestId,
        report: Box<AbReport>,
    },
    /// Model B's answer of an A/B comparison scored against model A (after `AbFinished`, when
    /// its `not_scored` is `None`); `Err` says why not ("stopped" when cancelled).
    AbScored {
        request_id: RequestId,
        score: Result<Box<crate::metrics::quality::AnswerScore>, String>,
    },
    /// The last answer scored against a reference (`EngineCommand::ScoreLast`).
    Scored {
        request_id: RequestId,
        score: Box<crate::metrics::quality::AnswerScore>,
    },
    /// One run of bench's tg test measured (`EngineCommand::BenchTg`).
    TgMeasured {
        request_id: RequestId,
        sample: TgSample,
    },
    /// A batch sweep ended (`error` when it could not finish).
    SweepDone {
        request_id: RequestId,
        error: Option<EngineError>,
    },
}

/// What the chat's bench screen (F2) measures on the loaded model.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepPlan {
    /// B sequences × `n_prompt` prompt + `n_gen` generated tokens, for each B in `batches`.
    Batch {
        batches: Vec<u32>,
        n_prompt: u32,
        n_gen: u32,
    },
    /// bench's tg test of `n_gen` tokens after the cache is filled to each depth, untimed
    /// (`bench -d`, llama-bench's `-d`): how decode slows as the KV cache grows.
    Depth { depths: Vec<u32>, n_gen: u32 },
}

/// One timed run of bench's tg test on the engine's thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TgSample {
    /// N ÷ the run (bench's tg t/s).
    pub tok_per_s: f64,
    /// The mean decode call (synchronised), ms: (run − host time) ÷ N.
    pub decode_call_ms: f64,
    /// The time between decode calls ÷ N, µs.
    pub host_us_per_token: f64,
}

impl EngineEvent {
    pub(crate) fn request_id(&self) -> Option<RequestId> {
        match self {
            EngineEvent::PrefillStarted { request_id, .. }
            | EngineEvent::PrefillProgress { request_id, .. }
            | EngineEvent::PrefillDone { request_id, .. }
            | EngineEvent::Token { request_id, .. }
            | EngineEvent::Thinking { request_id, .. }
            | EngineEvent::Finished { request_id, .. }
            | EngineEvent::Spec { request_id, .. }
            | EngineEvent::StepProfiled { request_id, .. }
            | EngineEvent::Failed { request_id, .. }
            | EngineEvent::BatchPoint { request_id, .. }
            | EngineEvent::AbFinished { request_id, .. }
            | EngineEvent::AbScored { request_id, .. }
            | EngineEvent::DepthPoint { request_id, .. }
            | EngineEvent::SweepDone { request_id, .. }
            | EngineEvent::TgMeasured { request_id, .. }
            | EngineEvent::Scored { request_id, .. }
            | EngineEvent::Confidence { request_id, .. }
            | EngineEvent::SwitchProgress { request_id, .. }
            | EngineEvent::SwitchFailed { request_id, .. } => Some(*request_id),
            _ => None,
        }
    }
}

/// Where the engine sends its events. A tokio channel, usable from the engine's OS thread
/// and read either by the async UI loop or with `blocking_recv` by headless commands.
pub type EventSender = tokio::sync::mpsc::UnboundedSender<EngineEvent>;
pub type EventReceiver = tokio::sync::mpsc::UnboundedReceiver<EngineEvent>;

/// The pace at which events are taken while tokens stream: the shortest time between two
/// frames that only show streamed tokens (20 Hz), and the `pace` of headless readers
/// (`recv_paced`). The chat's interval grows with what a draw costs (see
/// `tui::STREAM_DRAW_BUDGET`) up to `tui::SLOWEST_STREAM_FRAME_INTERVAL`.
pub const STREAM_FRAME_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// The next event for a headless reader (`run`, `bench --spec`), which blocks its thread.
///
/// Waking a parked thread is paid by the thread that wakes it: a token event sent to a
/// receiver asleep in `blocking_recv` cost the engine thread 17 µs at the median between two
/// decodes on these VMs (`examples/event_cost.rs`, BENCHMARKS.md "Host time"), against 0.04 µs
/// into a receiver that is not waiting. With `pace` set, a reader that finds nothing queued
/// sleeps for `pace` and looks again, as the chat takes its events once per stream frame
/// (`STREAM_FRAME_INTERVAL`): it never waits inside the channel, so the engine's
/// sends wake nothing. Timestamps are taken on the engine thread, so no figure moves; what
/// moves is when the reader sees an event, at most `pace` later. `None` blocks (and is woken
/// by each event), for readers that promise each token the moment it arrives.
pub fn recv_paced(
    events: &mut EventReceiver,
    pace: Option<std::time::Duration>,
) -> Option<EngineEvent> {
    use tokio::sync::mpsc::error::TryRecvError;
    let Some(pace) = pace else {
        return events.blocking_recv();
    };
    loop {
        match events.try_recv() {
            Ok(event) => return Some(event),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::thread::sleep(pace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(index: usize) -> EngineEvent {
        EngineEvent::Token {
            request_id: 7,
            index,
            text: format!("t{index}"),
            at: Duration::from_millis(index as u64),
        }
    }

    /// Paced or not, the reader gets every event in order, also those sent while it sleeps
    /// between looks, and `None` once the engine is gone and the channel is empty.
    #[test]
    fn paced_and_blocking_readers_get_every_event_in_order() {
        for pace in [None, Some(Duration::from_millis(2))] {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let sender = std::thread::spawn(move || {
                for i in 0..40 {
                    tx.send(token(i)).expect("reader alive");
                    if i % 8 == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                }
            });
            let mut seen = Vec::new();
            while let Some(e) = recv_paced(&mut rx, pace) {
                match e {
                    EngineEvent::Token { index, text, .. } => {
                        assert_eq!(text, format!("t{index}"));
                        seen.push(index);
                    }
                    _ => panic!("an event that was not sent"),
                }
            }
            sender.join().expect("sender");
            assert_eq!(seen, (0..40).collect::<Vec<_>>(), "pace {pace:?}");
        }
    }
}
