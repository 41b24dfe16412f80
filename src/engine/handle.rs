//! The caller's side of the engine: spawn the thread, the one door every request goes through
//! (where `submitted_at` is stamped), cancel, load or switch a model, shut down.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use super::protocol::{
    EngineCommand, EngineConfig, EventReceiver, EventSender, GenerateRequest, RequestId,
    TurnRequest,
};
use super::worker;
use crate::llama::error::EngineError;

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
    pub(crate) fn next(&self) -> RequestId {
        self.0.fetch_add(1, Ordering::SeqCst)
    }

    /// The id `next` will hand out.
    pub(crate) fn peek(&self) -> RequestId {
        self.0.load(Ordering::SeqCst)
    }

    /// An id was used (chosen by a caller): later ones are above it.
    fn observe(&self, id: RequestId) {
        self.0.fetch_max(id.saturating_add(1), Ordering::SeqCst);
    }
}

/// The caller's side of the engine.
pub struct EngineHandle {
    commands: mpsc::Sender<EngineCommand>,
    /// Every request with an id up to and including this one is cancelled.
    cancel_through: Arc<AtomicU64>,
    ids: RequestIds,
    thread: Option<JoinHandle<()>>,
    /// Ask for each token's own confidence with every turn sent from now on.
    confidence: bool,
}

impl EngineHandle {
    /// Start the engine thread and begin loading the model. Progress and the outcome of the
    /// load arrive as events (`Loading`, then `Ready` or `LoadFailed`).
    pub fn spawn(config: EngineConfig) -> Result<(Self, EventReceiver), EngineError> {
        let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok((Self::spawn_with_events(config, event_tx)?, event_rx))
    }

    /// As `spawn`, sending events into a channel the caller made (the chat shares one channel
    /// between its engine and an A/B comparison's other backend).
    pub(crate) fn spawn_with_events(
        config: EngineConfig,
        event_tx: EventSender,
    ) -> Result<Self, EngineError> {
        Self::spawn_exporting(config, event_tx, None)
    }

    /// As `spawn_with_events`, counting every turn into `exposition` on the engine thread as
    /// it ends (`chat`'s and `run`'s `--prometheus`/`--otlp` without `--url`).
    pub(crate) fn spawn_exporting(
        config: EngineConfig,
        event_tx: EventSender,
        exposition: Option<crate::metrics::exposition::Export>,
    ) -> Result<Self, EngineError> {
        if config.settings.spec.batch_invariant_kernels() {
            // Before any model decodes: ggml reads the switch once per process.
            crate::llama::invariant::disable_tiled_matmul();
        }
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let cancel_through = Arc::new(AtomicU64::new(0));
        let worker_cancel = Arc::clone(&cancel_through);
        let thread = std::thread::Builder::new()
            .name("engine".into())
            // The engine hands the user's text to llama.cpp's tokenizer (see llama::runs).
            .stack_size(crate::llama::runs::TOKENIZER_STACK_BYTES)
            .spawn(move || worker::run(config, cmd_rx, event_tx, worker_cancel, exposition))
            .map_err(|e| EngineError::Thread(e.to_string()))?;
        Ok(Self::from_worker(cmd_tx, cancel_through, thread))
    }

    /// A handle on a worker thread that speaks the engine's protocol (commands in, events out,
    /// every request with an id up to `cancel_through` cancelled): the local engine's, or the
    /// remote backend's (`remote::spawn`), so the chat drives both the same way.
    pub(crate) fn from_worker(
        commands: mpsc::Sender<EngineCommand>,
        cancel_through: Arc<AtomicU64>,
        thread: JoinHandle<()>,
    ) -> Self {
        Self {
            commands,
            cancel_through,
            ids: RequestIds::default(),
            thread: Some(thread),
            confidence: false,
        }
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
        match model {
            Some(path) => self.send_ab(id, turn, path, None),
            None => {
                let command = EngineCommand::Generate(self.stamped(id, turn));
                self.command(id, command).map(|()| id)
            }
        }
    }

    /// An A/B turn (`send` with a model file) whose answer B is scored against `reference`
    /// (the chat's `--ref`) rather than against the chat's model, so that A's and B's scores
    /// share one baseline; `None` is `send`'s.
    pub fn send_ab(
        &mut self,
        id: RequestId,
        turn: TurnRequest,
        path: PathBuf,
        reference: Option<PathBuf>,
    ) -> Result<RequestId, EngineError> {
        let command = EngineCommand::AbGenerate {
            path,
            request: self.stamped(id, turn),
            reference,
        };
        self.command(id, command).map(|()| id)
    }

    /// The turn as the engine receives it, its `submitted_at` read now: the one place TTFT's
    /// clock starts.
    fn stamped(&self, id: RequestId, turn: TurnRequest) -> GenerateRequest {
        GenerateRequest {
            id,
            turn,
            submitted_at: Instant::now(),
            confidence: self.confidence,
        }
    }

    /// Sends a command for request `id` (ids only grow: later ones are above it).
    fn command(&mut self, id: RequestId, command: EngineCommand) -> Result<(), EngineError> {
        self.ids.observe(id);
        self.commands
            .send(command)
            .map_err(|_| EngineError::EngineGone)
    }

    /// Whether the turns sent from now on compute each token's own confidence (docs/metrics.md,
    /// "Per token and per answer"); off by default, so that nothing is computed unasked. A
    /// server (`--url`) sends no logits and ignores it.
    pub fn set_confidence(&mut self, on: bool) {
        self.confidence = on;
    }

    /// The id the next request will use unless the caller chooses a higher one.
    pub fn next_id(&self) -> RequestId {
        self.ids.peek()
    }

    /// The handle's id allocator, for callers that build requests themselves (the chat).
    pub(crate) fn request_ids(&self) -> RequestIds {
        self.ids.clone()
    }

    /// Stop a request: the engine checks this before every decode step, so generation stops
    /// within one token and the partial answer is kept.
    pub fn cancel(&self, id: RequestId) {
        self.cancel_through.fetch_max(id, Ordering::SeqCst);
    }

    /// Start a sweep on the loaded model (its points arrive as `BatchPoint` or `DepthPoint`
    /// events, then `SweepDone`).
    pub fn sweep(&mut self, id: RequestId, plan: super::SweepPlan) -> Result<(), EngineError> {
        self.command(id, EngineCommand::Sweep { id, plan })
    }

    /// Time one run of bench's tg test on the loaded model, on the engine's thread (answered
    /// by `TgMeasured` or `Failed`).
    pub fn bench_tg(&mut self, id: RequestId, n_gen: u32) -> Result<(), EngineError> {
        self.command(id, EngineCommand::BenchTg { id, n_gen })
    }

    /// Score the last finished answer against the model file `reference` (answered by
    /// `Scored` or `Failed` under `id`; cancel stops it between passes).
    pub fn score_last(&mut self, id: RequestId, reference: PathBuf) -> Result<(), EngineError> {
        self.command(id, EngineCommand::ScoreLast { id, reference })
    }

    /// Score the evaluation `text` against the model file `reference` through the chat's
    /// scoring path, cut by `chunking` (answered by `Scored` or `Failed` under `id`).
    pub fn score_text(
        &mut self,
        id: RequestId,
        reference: PathBuf,
        text: String,
        chunking: crate::metrics::quality::Chunking,
        passes: super::Passes,
    ) -> Result<(), EngineError> {
        let command = EngineCommand::ScoreText {
            id,
            reference,
            text,
            chunking,
            passes,
        };
        self.command(id, command)
    }

    /// Load the model `config` names beside the current one and switch when it is ready
    /// (`SwitchProgress`… then `Ready`, or `SwitchFailed` with the current model kept).
    /// Cancelling `id` aborts the load.
    pub fn switch_model(&mut self, id: RequestId, config: EngineConfig) -> Result<(), EngineError> {
        self.command(id, EngineCommand::SwitchModel { id, config })
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
