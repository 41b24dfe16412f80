//! The engine: one named OS thread that owns llama.cpp's backend, the model and the context
//! for their whole life. Commands go in over a channel, events come out over another, and every
//! event carries the request id it belongs to. Timestamps are taken on the engine thread at the
//! moment a token's text is ready, so UI scheduling never distorts TTFT or inter-token latency.

mod detok;
mod prompt;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::llama::error::EngineError;
pub use crate::llama::model_info::{check_model_file, fingerprint, quantization_name, ModelInfo};
pub use detok::{StopMatcher, Utf8Stream};
pub use prompt::{common_prefix_len, completion_transcript, COMPLETION_STOPS};

pub use crate::llama::settings::{EngineSettings, SamplingParams, TemplateChoice};
use crate::metrics::TurnTimeline;

/// Identifies one generation request; events of other requests are ignored by their readers.
pub type RequestId = u64;

/// The one allocator of request ids, shared by the engine handle and by whoever builds
/// requests (the chat's `App`): ids only grow, since cancelling an id cancels every request up
/// to it. Clones share the counter.
#[derive(Debug, Clone)]
pub struct RequestIds(Arc<AtomicU64>);

impl Default for RequestIds {
    fn default() -> Self {
        Self(Arc::new(AtomicU64::new(1)))
    }
}

impl RequestIds {
    /// A new id, never handed out before.
    pub fn next(&self) -> RequestId {
        self.0.fetch_add(1, Ordering::SeqCst)
    }

    /// The id `next` will hand out.
    pub fn peek(&self) -> RequestId {
        self.0.load(Ordering::SeqCst)
    }

    /// An id was used (chosen by a caller): later ones are above it.
    fn observe(&self, id: RequestId) {
        self.0.fetch_max(id.saturating_add(1), Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
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
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
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
    /// See `GenerateRequest::capture_first_logits`.
    pub capture_first_logits: bool,
    /// See `GenerateRequest::ignore_eos`.
    pub ignore_eos: bool,
}

/// One chat turn to generate, as the engine thread receives it.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub id: RequestId,
    pub messages: Vec<ChatMessage>,
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    /// Return the logits the first token was sampled from (for cross-checks and quality
    /// comparisons; a vocabulary-sized copy, so off by default).
    pub capture_first_logits: bool,
    /// Generate exactly `max_tokens`: end-of-generation tokens and stop strings do not end
    /// the turn (for benchmarks, like llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
    /// When the request was handed to the engine: TTFT and every offset start here.
    pub submitted_at: Instant,
}

impl GenerateRequest {
    /// The request without its id and clock (`send` stamps a new `submitted_at`).
    fn into_turn(self) -> (RequestId, TurnRequest) {
        let turn = TurnRequest {
            messages: self.messages,
            sampling: self.sampling,
            max_tokens: self.max_tokens,
            capture_first_logits: self.capture_first_logits,
            ignore_eos: self.ignore_eos,
        };
        (self.id, turn)
    }
}

pub enum EngineCommand {
    Generate(GenerateRequest),
    /// Drop the current model and context and load another (the conversation is the caller's).
    LoadModel(EngineConfig),
    /// Load another model beside the current one and switch to it only once it is ready
    /// (`Ready`); on any failure, or when `id` is cancelled (Esc) during the load, the current
    /// model and its KV cache stay as they were (`SwitchFailed`).
    SwitchModel {
        id: RequestId,
        config: EngineConfig,
    },
    /// Measure batched decoding on the loaded model for each batch size (the chat's bench
    /// screen); cancelled like a generation request.
    BatchSweep {
        id: RequestId,
        batches: Vec<u32>,
        n_prompt: u32,
        n_gen: u32,
    },
    /// Answer `request` with another model file (the chat's A/B comparison): model B is
    /// loaded beside the chat's model with the same settings and a context of its own,
    /// generates once (its events carry the request's id), then is dropped. The chat's model
    /// and its KV cache are left as they are.
    AbGenerate {
        path: PathBuf,
        request: GenerateRequest,
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
    pub fn as_str(self) -> &'static str {
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
    pub text: String,
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
}

/// llama.cpp's perf counters: prompt eval (multi-token decodes) and eval (single-token decodes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LlamaCounters {
    pub prompt_eval_ms: f64,
    pub prompt_eval_tokens: i32,
    pub eval_ms: f64,
    pub eval_tokens: i32,
}

pub enum EngineEvent {
    /// Model loading progress, 0.0..=1.0 (llama.cpp's progress callback).
    Loading { progress: f32 },
    /// The model and context are ready.
    Ready(Box<ModelInfo>),
    /// The model could not be loaded; the engine waits for another `LoadModel`.
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
    /// string is held back; `at` is the offset from `submitted_at` when it was ready.
    Token {
        request_id: RequestId,
        index: usize,
        text: String,
        at: Duration,
    },
    Finished {
        request_id: RequestId,
        report: Box<TurnReport>,
    },
    Failed {
        request_id: RequestId,
        error: EngineError,
    },
    /// One batch size of a batch sweep measured.
    BatchPoint {
        request_id: RequestId,
        point: crate::metrics::BatchPoint,
        prefill_ms: f64,
    },
    /// Model B of an A/B comparison answered (its prefill and token events came before, under
    /// the same id; an error arrives as `Failed`).
    AbFinished {
        request_id: RequestId,
        report: Box<AbReport>,
    },
    /// A batch sweep ended (`error` when it could not finish).
    BatchSweepDone {
        request_id: RequestId,
        error: Option<EngineError>,
    },
}

impl EngineEvent {
    pub fn request_id(&self) -> Option<RequestId> {
        match self {
            EngineEvent::PrefillStarted { request_id, .. }
            | EngineEvent::PrefillProgress { request_id, .. }
            | EngineEvent::PrefillDone { request_id, .. }
            | EngineEvent::Token { request_id, .. }
            | EngineEvent::Finished { request_id, .. }
            | EngineEvent::Failed { request_id, .. }
            | EngineEvent::BatchPoint { request_id, .. }
            | EngineEvent::AbFinished { request_id, .. }
            | EngineEvent::BatchSweepDone { request_id, .. }
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

/// The caller's side of the engine.
pub struct EngineHandle {
    commands: mpsc::Sender<EngineCommand>,
    /// Every request with an id up to and including this one is cancelled.
    cancel_through: Arc<AtomicU64>,
    ids: RequestIds,
    thread: Option<JoinHandle<()>>,
}

impl EngineHandle {
    /// Start the engine thread and begin loading the model. Progress and the outcome of the
    /// load arrive as events (`Loading`, then `Ready` or `LoadFailed`).
    pub fn spawn(config: EngineConfig) -> Result<(Self, EventReceiver), EngineError> {
        let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let cancel_through = Arc::new(AtomicU64::new(0));
        let worker_cancel = Arc::clone(&cancel_through);
        let thread = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || worker::run(config, cmd_rx, event_tx, worker_cancel))
            .map_err(|e| EngineError::Thread(e.to_string()))?;
        Ok((
            Self {
                commands: cmd_tx,
                cancel_through,
                ids: RequestIds::default(),
                thread: Some(thread),
            },
            event_rx,
        ))
    }

    /// Hand a turn to the engine under a new id.
    pub fn generate(
        &mut self,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
    ) -> Result<RequestId, EngineError> {
        self.submit(messages, sampling, max_tokens, false)
    }

    /// As `generate`, optionally asking for the logits the first token is sampled from.
    pub fn submit(
        &mut self,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        capture_first_logits: bool,
    ) -> Result<RequestId, EngineError> {
        let id = self.ids.next();
        self.submit_with_id(id, messages, sampling, max_tokens, capture_first_logits)
    }

    /// Submit under an id the caller chose. Ids must increase: cancelling an id cancels every
    /// request up to it.
    pub fn submit_with_id(
        &mut self,
        id: RequestId,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        capture_first_logits: bool,
    ) -> Result<RequestId, EngineError> {
        let turn = TurnRequest {
            messages,
            sampling,
            max_tokens,
            capture_first_logits,
            ignore_eos: false,
        };
        self.send(id, turn, None)
    }

    /// The one door: every turn reaches the engine through here, and its `submitted_at` (where
    /// TTFT and every offset start) is read here, once. `model`: `None` answers with the loaded
    /// model; `Some(path)` with that model file, loaded beside it for this turn alone (the A/B
    /// comparison: prefill and token events under `id`, then `AbFinished` or `Failed`;
    /// cancelled like a generation request, also while model B loads).
    pub fn send(
        &mut self,
        id: RequestId,
        turn: TurnRequest,
        model: Option<PathBuf>,
    ) -> Result<RequestId, EngineError> {
        self.ids.observe(id);
        let request = GenerateRequest {
            id,
            messages: turn.messages,
            sampling: turn.sampling,
            max_tokens: turn.max_tokens,
            capture_first_logits: turn.capture_first_logits,
            ignore_eos: turn.ignore_eos,
            submitted_at: Instant::now(),
        };
        let command = match model {
            None => EngineCommand::Generate(request),
            Some(path) => EngineCommand::AbGenerate { path, request },
        };
        self.commands
            .send(command)
            .map_err(|_| EngineError::EngineGone)?;
        Ok(id)
    }

    /// Send a fully specified request (its `submitted_at` is replaced by the time it is sent).
    pub fn send_request(&mut self, request: GenerateRequest) -> Result<RequestId, EngineError> {
        let (id, turn) = request.into_turn();
        self.send(id, turn, None)
    }

    /// Answer `request` with the model file at `path` (an A/B comparison; see `send`).
    pub fn ab_generate(
        &mut self,
        path: PathBuf,
        request: GenerateRequest,
    ) -> Result<RequestId, EngineError> {
        let (id, turn) = request.into_turn();
        self.send(id, turn, Some(path))
    }

    /// The id the next `generate`/`submit` will use.
    pub fn next_id(&self) -> RequestId {
        self.ids.peek()
    }

    /// The handle's id allocator, for callers that build requests themselves (the chat).
    pub fn request_ids(&self) -> RequestIds {
        self.ids.clone()
    }

    /// Stop a request: the engine checks this before every decode step, so generation stops
    /// within one token and the partial answer is kept.
    pub fn cancel(&self, id: RequestId) {
        self.cancel_through.fetch_max(id, Ordering::SeqCst);
    }

    /// Start a batch sweep on the loaded model (points arrive as `BatchPoint` events).
    pub fn batch_sweep(
        &mut self,
        id: RequestId,
        batches: Vec<u32>,
        n_prompt: u32,
        n_gen: u32,
    ) -> Result<(), EngineError> {
        self.ids.observe(id);
        self.commands
            .send(EngineCommand::BatchSweep {
                id,
                batches,
                n_prompt,
                n_gen,
            })
            .map_err(|_| EngineError::EngineGone)
    }

    /// Replace the loaded model (the engine answers with `Loading`… then `Ready`/`LoadFailed`).
    pub fn load_model(&self, config: EngineConfig) -> Result<(), EngineError> {
        self.commands
            .send(EngineCommand::LoadModel(config))
            .map_err(|_| EngineError::EngineGone)
    }

    /// Load the model `config` names beside the current one and switch when it is ready
    /// (`SwitchProgress`… then `Ready`, or `SwitchFailed` with the current model kept).
    /// Cancelling `id` aborts the load.
    pub fn switch_model(&mut self, id: RequestId, config: EngineConfig) -> Result<(), EngineError> {
        self.ids.observe(id);
        self.commands
            .send(EngineCommand::SwitchModel { id, config })
            .map_err(|_| EngineError::EngineGone)
    }

    /// Stop the engine thread and wait for it (it finishes the current token first).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.cancel_through.store(u64::MAX, Ordering::SeqCst);
        let _ = self.commands.send(EngineCommand::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
