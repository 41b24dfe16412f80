//! The chat application's state and its one update function. `update` takes a message (a key,
//! a paste, an engine event, a tick) and the current time, changes the state and returns the
//! effects to run (send to the engine, save, export, quit). It does no I/O itself, so every
//! behaviour is unit-tested without a terminal or a model.

mod ab;
mod complete;
pub mod conversation;
mod copy;
pub(crate) mod export;
mod input;
mod keymap;
mod picker;
mod quality;
mod screens;
mod slash;
mod switch;

use std::path::PathBuf;
use std::time::Instant;

use crossterm::event::KeyEvent;

use crate::compare::Comparison;
use crate::engine::{
    EngineError, EngineEvent, LoadStage, ModelInfo, RequestId, RequestIds, SamplingParams,
    TurnRequest,
};
use crate::history::SavedConversation;
use conversation::{AssistantTurn, Conversation, Exchange, TurnPhase, TurnSettings};

pub use ab::{AbOutcome, AbScreen};
pub(crate) use complete::{complete as complete_path, target as completion_target};
pub use complete::{Candidate, Completion};
pub(crate) use input::{Edit, Input};
pub(crate) use keymap::{action_for, Action, PAGE_LINES};
pub use picker::{PickFor, Picker};
pub use quality::{AnswerTokens, ConversationQuality, TokenCursor};
pub use screens::{BenchPoint, BenchScreen, CompareView, ProfileScreen, SweepView};
pub(crate) use switch::Switch;
#[cfg(test)]
pub(crate) use {keymap::FUNCTION_KEYS, slash::SLASH_COMMANDS};

/// The engine as the UI sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineStatus {
    /// The model loads: its stage, and within `Weights` llama.cpp's progress, 0.0..=1.0, and
    /// how fast the weights are read.
    Loading {
        stage: LoadStage,
        progress: f32,
        read: Option<crate::metrics::LoadRead>,
    },
    Ready,
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Chat,
    Help,
    /// The batching screen: a batch sweep on the loaded model, charted.
    Bench,
    /// The A/B screen: the last answer beside another model file's answer to the same turns.
    Ab,
    /// The latest `tokscope compare` table.
    Compare,
    /// The model picker: GGUF files found where people keep them.
    Picker,
    /// Where the decode steps' time goes (`--profile`): parts, layers, operations.
    Profile,
    /// One answer token by token (`Alt+T`): a cursor over its tokens, each token's figures and
    /// both models' most likely tokens there.
    Tokens,
}

/// A model load that has not started yet.
impl Default for EngineStatus {
    fn default() -> Self {
        EngineStatus::Loading {
            stage: LoadStage::Checking,
            progress: 0.0,
            read: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Info,
    Warning,
    Error,
}

/// The most a message may hold, in bytes: a paste that would make it longer is refused. The
/// largest contexts (about a million tokens) hold some 4 MiB of text, so nothing longer could
/// be sent; and the input stays cheap to edit and to count.
pub(crate) const INPUT_MAX_BYTES: usize = 8 << 20;
// The tokenizer threads' stacks are sized for a message of this length (`llama::runs`).
const _: () = assert!(INPUT_MAX_BYTES <= crate::llama::runs::MAX_CHARS);

/// A one-line message in the status area (command results, errors, warnings).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub text: String,
    pub kind: NoticeKind,
}

pub use crate::metrics::trace::TracedTurn;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Markdown,
    Json,
}

/// Conversation scroll position: lines up from the bottom; `0` follows the stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scroll {
    pub lines_from_bottom: usize,
}

impl Scroll {
    pub(crate) fn follows(&self) -> bool {
        self.lines_from_bottom == 0
    }
}

/// Inputs to `update`.
pub enum Msg {
    Key(KeyEvent),
    Paste(String),
    /// Mouse wheel: positive scrolls up (back in the conversation).
    Scroll(i32),
    Resize,
    Engine(EngineEvent),
    /// The outcome of a save effect (`Err` holds the message to show).
    Saved(Result<PathBuf, String>),
    /// The outcome of an export effect.
    Exported(Result<PathBuf, String>),
    /// `/trace` wrote (the path, turns and frames in it) or failed.
    Traced(Result<(PathBuf, usize, usize), String>),
    /// The outcome of saving a batch sweep: its run id (and a warning about the log), or
    /// the message to show.
    SweepSaved(Result<(String, Option<String>), String>),
    /// Something the loop wants the user to read (a conversation saved as a fork, a copy
    /// resumed as its own conversation).
    Notice(NoticeKind, String),
    /// The comparisons log, read for the compare screen (`Ok(None)`: no comparison yet).
    ComparisonLoaded(Result<Option<(Comparison, crate::compare::log::Place)>, String>),
    /// The input's token count, counted by the loop as the text changes.
    InputTokens(Option<InputTokens>),
    /// A new conversation id, minted by the loop, for the next new conversation.
    FreshConversationId(String),
    /// The model search's result, for the picker.
    ModelsFound(crate::discover::Discovery),
    /// Tab's completion of `asked` (the input when Tab was pressed); `None`: nothing to
    /// complete there.
    Completed {
        asked: String,
        completion: Option<Completion>,
    },
    Tick,
    /// The frame just drawn could scroll the conversation up at most this many lines (its
    /// top): a scroll past it (Home, or PageUp held) is brought back to it, so that the next
    /// PageDown moves at once.
    ScrollLimit(usize),
}

/// Work `update` asks the loop to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Score the engine's last answer against the reference model file (`--ref`, `/ref`).
    Score {
        id: RequestId,
        reference: PathBuf,
    },
    /// Hand a turn to the engine: to the loaded model (`model: None`), or to another model file
    /// (the A/B screen's answer B, never added to the conversation).
    Generate {
        id: RequestId,
        turn: TurnRequest,
        model: Option<PathBuf>,
        /// With `model` (A/B): the chat's reference, which B is scored against as A's answers
        /// are (`None`: B against A's model).
        ab_reference: Option<PathBuf>,
    },
    Cancel(RequestId),
    /// Run a sweep on the loaded model (the bench screen).
    Sweep {
        id: RequestId,
        plan: crate::engine::SweepPlan,
    },
    /// Append a finished or stopped batch sweep to the results log and report
    /// `Msg::SweepSaved`.
    SaveSweep(Box<SweepToSave>),
    /// Read the comparison `back` steps before the newest (0: the newest).
    LoadComparison {
        back: usize,
    },
    /// Load this model beside the current one and switch when it is ready.
    SwitchModel {
        id: RequestId,
        path: PathBuf,
    },
    /// Count the input's tokens with this model's vocabulary from now on.
    CountWith(PathBuf),
    Save(SavedConversation),
    Export {
        format: ExportFormat,
        path: PathBuf,
        conversation: SavedConversation,
        /// The settings in force, written into the export (each turn carries its own).
        settings: TurnSettings,
    },
    /// Compute (or stop computing) each token's own confidence with the turns sent from now
    /// on (`EngineHandle::set_confidence`).
    SetConfidence(bool),
    /// Put this text on the clipboard (an OSC 52 sequence written to the terminal).
    Copy(String),
    /// Write these turns, with the UI's frames the loop kept, as a Chrome trace (`/trace`).
    WriteTrace {
        path: PathBuf,
        turns: Vec<TracedTurn>,
    },
    /// Search for GGUF models (off the UI thread) and report `Msg::ModelsFound`.
    DiscoverModels {
        model_dirs: Vec<PathBuf>,
        /// The model file the chat runs (listed first and marked; its folder searched).
        in_use: Option<PathBuf>,
    },
    /// Complete the path at the end of this input line (`/model ~/mo`) and report
    /// `Msg::Completed`.
    CompletePath(String),
    Quit,
}

/// A sweep of the bench screen, as the results log keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepToSave {
    /// (point, prefill ms) per batch size, in the order measured (a batch sweep).
    pub points: Vec<(crate::metrics::BatchPoint, Option<f64>)>,
    /// Each depth, in the order measured (a depth sweep).
    pub depths: Vec<crate::metrics::DepthRun>,
    pub n_prompt: u32,
    pub n_gen: u32,
    /// Stopped (Esc) or failed before its last batch size.
    pub stopped: bool,
    pub model: ModelInfo,
    pub sampling: SamplingParams,
}

/// The time as `update` sees it, passed in so that `update` never reads the clock.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub instant: Instant,
    pub unix_s: u64,
}

/// Tokens in the input as typed, and where the count comes from ("tokenizer.json" or "model
/// vocabulary").
pub(crate) type InputTokens = (usize, &'static str);

/// The whole state of the chat screen.
#[derive(Debug, Clone, Default)]
pub struct App {
    pub engine: EngineStatus,
    pub model: Option<ModelInfo>,
    pub model_path: PathBuf,
    pub conversation: Conversation,
    pub input: Input,
    pub mode: Mode,
    pub scroll: Scroll,
    pub help_scroll: usize,
    /// After End on the help screen: how many lines above its end it is scrolled (`None`:
    /// `help_scroll` counts from the top). The end is known only where it is drawn.
    pub help_from_end: Option<usize>,
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    /// Answers run to `max_tokens` regardless of end-of-generation (benchmarking).
    pub ignore_eos: bool,
    /// When the conversation no longer fits the context: leave the oldest messages out, or
    /// stop and say so (`chat --context-full`, `/context-full`).
    pub context_full: crate::engine::ContextFull,
    /// Peak memory bandwidths for the roofline pane, with where they come from; the view
    /// picks or blends them for where llama.cpp put the model's layers.
    pub bandwidth: crate::metrics::roofline::Peaks,
    /// Price per GPU-hour (USD) for the cost per 1M tokens.
    pub price_per_hour_usd: f64,
    /// Why this terminal cannot take an OSC 52 clipboard write (`None`: it may), found when
    /// the chat starts (`tui::terminal::clipboard_blocked`).
    pub clipboard_blocked: Option<String>,
    pub notice: Option<Notice>,
    /// Prompts sent in this session, for Up-recall.
    pub sent_prompts: Vec<String>,
    /// When the turn in flight was handed to the engine (for the live "waiting" clock).
    pub active_since: Option<Instant>,
    /// Tokens in the KV cache (context used), from the last finished turn.
    pub context_used: usize,
    /// Where request ids come from: the engine handle's allocator once the chat runs.
    pub request_ids: RequestIds,
    /// A new conversation id, minted by the caller (update never reads the clock or RNG).
    pub fresh_conversation_id: String,
    pub bench: BenchScreen,
    /// The profile screen (F4).
    pub profile: ProfileScreen,
    /// The A/B comparison, while it is on screen.
    pub ab: Option<AbScreen>,
    pub compare: CompareView,
    /// Which comparison of the log the compare screen shows, and its selected row.
    pub compare_place: crate::compare::log::Place,
    pub compare_row: usize,
    /// The view the help returns to when closed.
    pub help_return: Mode,
    /// The help screen shows the prompt of the last turn (`/prompt`) instead of the keys.
    pub help_shows_prompt: bool,
    /// The last local turn's prompt as the model was given it (`/prompt`).
    pub last_prompt: Option<crate::engine::PromptText>,
    /// Tokens in the input as typed (counted without the engine), and where the count comes
    /// from; reported by the loop (`Msg::InputTokens`).
    pub input_tokens: Option<InputTokens>,
    /// The model switch in progress (`/model PATH`), while the old model still serves.
    pub switching: Option<Switch>,
    /// Enter was pressed while the model loaded: the input is sent when it is ready (Esc, a
    /// failed load or a failed switch keeps it unsent).
    pub send_when_ready: bool,
    /// The next frame repaints every cell (Ctrl+L, or an overlay closed), not only changes.
    pub full_repaint: bool,
    /// The model picker, while it is open.
    pub picker: Option<Picker>,
    /// Folders the picker searches besides the well-known places (config `model_dirs`).
    pub model_dirs: Vec<PathBuf>,
    /// The reference model each answer is scored against after it finishes (`--ref`,
    /// `/ref`, config `[quality] ref`); `None`: answers are not scored.
    pub reference: Option<PathBuf>,
    /// Answers are drawn token by token in colour (`Alt+K`): scored ones by their KLD against
    /// the reference, the others by their own confidence when it was measured.
    pub quality_colours: bool,
    /// The engine computes each token's own confidence with the turns sent from now on
    /// (while the colours are on and no reference is set; `Effect::SetConfidence`).
    pub own_confidence: bool,
    /// The token screen's answer and token (`Alt+T`).
    pub token_cursor: Option<quality::TokenCursor>,
    /// Answers' thinking is drawn in full (`Alt+R`); folded to one line otherwise.
    pub show_thinking: bool,
    /// Why the last save of the conversation failed (a full disk, say); `None` while every
    /// finished turn is saved. A quit asks again while it is set.
    pub unsaved: Option<String>,
    /// When a quit was held back because of `unsaved`: another within [`QUIT_CONFIRM`] quits.
    pub quit_asked_at: Option<Instant>,
}

/// With turns not saved, the second quit (Ctrl+C, Ctrl+Q, /quit) within this long quits
/// without them; the first one says so and tries the save again.
pub const QUIT_CONFIRM: std::time::Duration = std::time::Duration::from_secs(3);

impl App {
    pub fn new(
        model_path: PathBuf,
        conversation: Conversation,
        sampling: SamplingParams,
        max_tokens: u32,
    ) -> Self {
        Self {
            model_path,
            conversation,
            sampling,
            max_tokens,
            price_per_hour_usd: 2.0,
            ..Self::default()
        }
    }

    fn notice(&mut self, kind: NoticeKind, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            kind,
        });
    }

    /// A notice, and nothing for the loop to do.
    fn notice_only(&mut self, kind: NoticeKind, text: impl Into<String>) -> Vec<Effect> {
        self.notice(kind, text);
        Vec::new()
    }

    pub(crate) fn is_generating(&self) -> bool {
        self.conversation.active().is_some()
    }

    fn model_file(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.file_name.clone())
    }

    /// The settings the next turn is generated with.
    pub(crate) fn current_settings(&self) -> TurnSettings {
        TurnSettings {
            sampling: self.sampling.clone(),
            max_tokens: self.max_tokens,
            ignore_eos: self.ignore_eos,
            system_prompt: self.conversation.system_prompt.clone(),
        }
    }

    /// Start an answer for the last exchange.
    fn start_turn(&mut self, now: Now) -> Vec<Effect> {
        let id = self.request_ids.next();
        let model_file = self.model_file();
        let messages = self.conversation.messages_for_last();
        let settings = self.current_settings();
        let turn = turn_request(messages, &settings, self.context_full);
        let model = self.model.as_ref().map(crate::history::SavedModel::of);
        if let Some(ex) = self.conversation.exchanges.last_mut() {
            ex.assistant = Some(AssistantTurn {
                settings: Some(settings),
                model,
                ..AssistantTurn::new(id, model_file)
            });
        }
        self.active_since = Some(now.instant);
        self.scroll = Scroll::default();
        vec![Effect::Generate {
            id,
            turn,
            model: None,
            ab_reference: None,
        }]
    }

    fn send(&mut self, now: Now) -> Vec<Effect> {
        let typed = self.input.text();
        if typed.trim().is_empty() {
            return Vec::new();
        }
        // `//text` sends `/text` as a message; one `/` starts a command.
        let escaped = typed.trim_start().starts_with("//");
        if typed.trim_start().starts_with('/') && !escaped {
            let line = self.input.take();
            return self.slash_command(line.trim(), now);
        }
        if self.is_generating() {
            return self.notice_only(
                NoticeKind::Warning,
                "an answer is still streaming: Esc stops it",
            );
        }
        if let EngineStatus::Failed(_) = self.engine {
            return self.notice_only(
                NoticeKind::Warning,
                "no model is loaded: /model PATH (or Ctrl+O) loads one; the message is kept",
            );
        }
        if self.engine != EngineStatus::Ready || self.switching.is_some() {
            let what = match &self.switching {
                Some(s) => format!("{} is loading", s.path.display()),
                None => "the model is loading".to_owned(),
            };
            self.send_when_ready = true;
            return self.notice_only(
                NoticeKind::Info,
                format!("{what}: the message is sent as soon as it is ready (Esc keeps it here)"),
            );
        }
        let mut text = self.input.take();
        if escaped {
            if let Some(at) = text.find("//") {
                text.remove(at);
            }
        }
        self.sent_prompts.push(text.clone());
        self.conversation.exchanges.push(Exchange {
            user: text,
            assistant: None,
        });
        self.notice = None;
        // The new turn's TTFT never waits for the last answer's score.
        let mut effects = self.stop_scoring("stopped: a new message came first");
        effects.extend(self.start_turn(now));
        effects
    }

    /// The message Enter left waiting for the model, sent now that it is ready.
    fn send_if_waiting(&mut self, now: Now) -> Vec<Effect> {
        if !std::mem::take(&mut self.send_when_ready)
            || self.engine != EngineStatus::Ready
            || self.switching.is_some()
        {
            return Vec::new();
        }
        let effects = self.send(now);
        if !effects.is_empty() {
            self.notice(
                NoticeKind::Info,
                "the model is ready: your message was sent",
            );
        }
        effects
    }

    fn regenerate(&mut self, now: Now) -> Vec<Effect> {
        if self.is_generating() || self.engine != EngineStatus::Ready || self.switching.is_some() {
            return Vec::new();
        }
        let Some(last) = self.conversation.exchanges.last_mut() else {
            return self.notice_only(NoticeKind::Info, "nothing to regenerate yet");
        };
        last.assistant = None;
        // A new seed, so that sampling can give a different answer (shown, so it can be
        // reproduced).
        self.sampling.seed = self.sampling.seed.wrapping_add(1);
        self.notice(
            NoticeKind::Info,
            format!("regenerating with seed {}", self.sampling.seed),
        );
        let mut effects = self.stop_scoring("stopped: regenerated");
        effects.extend(self.start_turn(now));
        effects
    }

    fn cancel_active(&mut self) -> Vec<Effect> {
        // Shown at once; the engine stops within one micro-batch or one token.
        Vec::from_iter(self.conversation.active_mut().map(|a| {
            a.stopping = true;
            Effect::Cancel(a.request_id)
        }))
    }

    fn new_conversation(&mut self, now: Now) -> Vec<Effect> {
        let mut effects = self.cancel_active();
        effects.extend(self.stop_scoring("stopped: a new conversation"));
        let id = std::mem::take(&mut self.fresh_conversation_id);
        let system = self.conversation.system_prompt.clone();
        // Each conversation starts when it is started, not when the session did.
        self.conversation = Conversation::new(id, now.unix_s, system);
        self.scroll = Scroll::default();
        self.active_since = None;
        self.notice(NoticeKind::Info, "new conversation");
        effects
    }

    fn quit(&mut self, now: Now) -> Vec<Effect> {
        if let Some(why) = &self.unsaved {
            let confirmed = self
                .quit_asked_at
                .is_some_and(|at| now.instant.saturating_duration_since(at) <= QUIT_CONFIRM);
            if !confirmed {
                // Asked as gitui and atuin ask: a second press within a few seconds. Meanwhile
                // the save is tried again (the disk may have room now).
                // What to do first: a long cause must not push it off the notice line.
                let text = format!(
                    "the conversation is not saved: quit again (Ctrl+C) within {} s to quit \
                     without it, or /export FILE to keep it elsewhere (saving again; {why})",
                    QUIT_CONFIRM.as_secs()
                );
                self.quit_asked_at = Some(now.instant);
                self.notice(NoticeKind::Error, text);
                return vec![Effect::Save(self.conversation.to_saved(now.unix_s))];
            }
        }
        let mut effects = self.cancel_active();
        effects.extend(self.stop_scoring("stopped: the chat quit"));
        if let Some(id) = self.ab.as_ref().and_then(AbScreen::in_flight) {
            effects.push(Effect::Cancel(id));
        }
        effects.push(Effect::Quit);
        effects
    }

    /// An engine event: one of A/B's model B goes to the A/B screen; every other is handed to
    /// its own handler (events the chat never asks for, or of a closed screen, are dropped).
    fn on_engine(&mut self, event: EngineEvent, now: Now) -> Vec<Effect> {
        let ab_request = self.ab.as_ref().and_then(|ab| ab.running);
        if ab_request.is_some() && event.request_id() == ab_request {
            self.on_ab_event(event);
            return Vec::new();
        }
        match event {
            EngineEvent::Loading {
                stage,
                progress,
                read,
            } => {
                self.engine = EngineStatus::Loading {
                    stage,
                    progress,
                    read,
                };
            }
            EngineEvent::Warning(text) => self.notice(NoticeKind::Warning, text),
            EngineEvent::SwitchProgress {
                request_id,
                progress,
            } => self.on_switch_progress(request_id, progress),
            EngineEvent::SwitchFailed { request_id, error } => {
                self.on_switch_failed(request_id, &error);
            }
            EngineEvent::Ready(info) => return self.on_ready(info, now),
            EngineEvent::LoadFailed(e) => self.on_load_failed(&e),
            EngineEvent::PrefillStarted {
                request_id,
                prompt_tokens,
                cached_tokens,
                dropped_messages,
            } => {
                self.on_prefill_started(request_id, prompt_tokens, cached_tokens, dropped_messages)
            }
            EngineEvent::PrefillDone {
                request_id,
                template_tokenize,
                prefill,
                at,
            } => {
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.on_prefill_done(template_tokenize, prefill, at);
                }
            }
            EngineEvent::Token {
                request_id,
                text,
                at,
                ..
            } => {
                if let Some(t) = self.active_turn(request_id) {
                    t.on_token(&text, at);
                }
            }
            EngineEvent::Thinking {
                request_id,
                span,
                text,
            } => {
                if let Some(t) = self.active_turn(request_id) {
                    t.on_thinking(span, &text);
                }
            }
            EngineEvent::StepProfiled {
                request_id,
                step,
                per_node,
            } => self.on_step_profiled(request_id, *step, per_node),
            EngineEvent::Spec { request_id, stats } => {
                if let Some(t) = self.active_turn(request_id) {
                    t.spec = Some(*stats);
                }
            }
            EngineEvent::Finished { request_id, report } => {
                return self.on_turn_finished(request_id, *report, now);
            }
            EngineEvent::BatchPoint {
                request_id,
                point,
                prefill_ms,
            } => {
                if self.bench.running == Some(request_id) {
                    self.bench.points.push(BenchPoint { point, prefill_ms });
                }
            }
            EngineEvent::DepthPoint { request_id, run } => {
                if self.bench.running == Some(request_id) {
                    self.bench.depth_points.push(run);
                }
            }
            // A cancelled or closed A/B comparison: its late events are dropped.
            EngineEvent::AbFinished { .. } => {}
            EngineEvent::AbScored { request_id, score } => self.on_ab_scored(request_id, score),
            EngineEvent::PrefillProgress {
                request_id,
                done,
                total,
                ..
            } => {
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.on_prefill_progress(done, total);
                }
            }
            EngineEvent::SweepDone { request_id, error } => {
                return self.on_sweep_done(request_id, error);
            }
            // The chat never asks for bench's tg test (`bench --run-vs-tg` does).
            EngineEvent::TgMeasured { .. } => {}
            EngineEvent::Scored { request_id, score } => {
                return self.on_scored(request_id, score, now.unix_s);
            }
            // Each token's own confidence of a turn, or that it could not be measured.
            EngineEvent::Confidence { request_id, tokens } => {
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.confidence = Some(tokens.map_or(
                        conversation::TurnConfidence::Unavailable,
                        conversation::TurnConfidence::Measured,
                    ));
                }
            }
            EngineEvent::Failed { request_id, error } => {
                return self.on_request_failed(request_id, error);
            }
        }
        Vec::new()
    }

    /// The model is ready (the first one, a switched one, or the one kept after a refused
    /// `/model`): a waiting message is sent now.
    fn on_ready(&mut self, info: Box<ModelInfo>, now: Now) -> Vec<Effect> {
        let effects = self.on_switched(&info);
        self.engine = EngineStatus::Ready;
        // After a refused /model the engine keeps (and reports) the model it had.
        self.model_path = info.path.clone();
        self.context_used = 0;
        // The template note is also in the conversation pane: a warning shown now (a
        // resumed conversation on another model) stays.
        let warned = self
            .notice
            .as_ref()
            .is_some_and(|n| n.kind != NoticeKind::Info);
        if let Some(note) = info.template_note.as_ref().filter(|_| !warned) {
            self.notice(NoticeKind::Info, note.clone());
        }
        self.model = Some(*info);
        effects
            .into_iter()
            .chain(self.send_if_waiting(now))
            .collect()
    }

    /// The model could not be loaded: a message waiting for it stays unsent.
    fn on_load_failed(&mut self, e: &EngineError) {
        self.engine = EngineStatus::Failed(e.to_string());
        self.send_when_ready = false;
        self.notice(NoticeKind::Error, e.to_string());
    }

    /// A turn's prefill began; a warning when the oldest messages no longer fit the context.
    fn on_prefill_started(
        &mut self,
        request_id: RequestId,
        prompt_tokens: usize,
        cached_tokens: usize,
        dropped_messages: usize,
    ) {
        if let Some(t) = self.conversation.turn_for(request_id) {
            t.on_prefill_started(prompt_tokens, cached_tokens);
            if dropped_messages > 0 {
                let n_ctx = self.model.as_ref().map_or(0, |m| m.n_ctx);
                self.notice(
                    NoticeKind::Warning,
                    format!(
                        "the conversation no longer fits the {n_ctx}-token context: the oldest {dropped_messages} messages were left out of this answer (`/context-full stop` stops and asks instead; Ctrl+N starts over)"
                    ),
                );
            }
        }
    }

    /// The turn of `request_id` while it is still in flight (a stopped turn keeps the text and
    /// figures it had).
    fn active_turn(&mut self, request_id: RequestId) -> Option<&mut AssistantTurn> {
        self.conversation
            .turn_for(request_id)
            .filter(|t| t.phase.is_active())
    }

    /// A profiled decode step for the profile screen, with the roofline's bandwidth for
    /// where the model's layers were placed.
    fn on_step_profiled(
        &mut self,
        request_id: RequestId,
        step: crate::metrics::profile::StepRecord,
        per_node: crate::metrics::profile::Correction,
    ) {
        let bandwidth = self.model.as_ref().and_then(|m| {
            self.bandwidth
                .placed(m.weight_bytes.as_ref(), m.n_layer, m.n_gpu_layers)
                .map(|b| b.bytes_per_s)
        });
        self.profile.add(request_id, step, per_node, bandwidth);
    }

    /// A turn finished: the conversation is saved and the answer scored (when a reference
    /// is set).
    fn on_turn_finished(
        &mut self,
        request_id: RequestId,
        report: crate::engine::TurnReport,
        now: Now,
    ) -> Vec<Effect> {
        let used = report.context_used;
        let Some(t) = self.conversation.turn_for(request_id) else {
            return Vec::new();
        };
        let prompt = (!report.prompt.text.is_empty()).then(|| report.prompt.clone());
        t.on_finished(report);
        if prompt.is_some() {
            self.last_prompt = prompt;
        }
        t.finished_unix_s = Some(now.unix_s);
        self.context_used = used;
        self.active_since = None;
        let mut effects = vec![Effect::Save(self.conversation.to_saved(now.unix_s))];
        effects.extend(self.score_finished(request_id));
        effects
    }

    /// The bench screen's batch sweep ended (failed when `error`): it is saved.
    fn on_sweep_done(&mut self, request_id: RequestId, error: Option<EngineError>) -> Vec<Effect> {
        if self.bench.running != Some(request_id) {
            return Vec::new();
        }
        self.bench.running = None;
        let failed = error.is_some();
        self.bench.error = error.map(|e| e.to_string());
        self.save_sweep(failed)
    }

    /// A request failed: a scoring (which may turn the reference off) or a turn, which keeps
    /// its text and shows the error.
    fn on_request_failed(&mut self, request_id: RequestId, error: EngineError) -> Vec<Effect> {
        if self.on_score_failed(request_id, &error) {
            // A reference turned off as unusable: the colours fall back to the
            // model's own confidence.
            return self.sync_confidence();
        }
        if let Some(t) = self.conversation.turn_for(request_id) {
            t.on_failed(error.to_string());
            self.active_since = None;
            self.notice(NoticeKind::Error, error.to_string());
        }
        Vec::new()
    }

    /// A user action (a key through the key table): each group of actions (the input and its
    /// turn, the token screen, help, bench, compare, scrolling) has its own handlers; the ones
    /// that need the loop to act return its effects.
    fn on_action(&mut self, action: Action, now: Now) -> Vec<Effect> {
        match action {
            Action::Send => return self.send(now),
            Action::Newline => self.input.apply(Edit::Newline),
            Action::Stop => return self.stop(),
            Action::Regenerate => return self.regenerate(now),
            Action::RecallOrUp => self.recall_or_up(),
            Action::Down => self.down_or_scroll(),
            Action::NewConversation => return self.new_conversation(now),
            Action::Repaint => self.full_repaint = true,
            Action::Copy => return self.copy(""),
            Action::QualityColours => return self.toggle_quality_colours(),
            Action::ToggleThinking => self.show_thinking = !self.show_thinking,
            Action::OpenTokens => self.open_tokens(),
            Action::CloseTokens => self.close_tokens(),
            Action::TokenMove(by) => self.move_token_cursor(by),
            Action::TokenFirst => self.move_token_cursor(isize::MIN),
            Action::TokenLast => self.move_token_cursor(isize::MAX),
            Action::TokenAnswer(by) => self.token_answer(by),
            Action::TokenDivergence => self.token_divergence(),
            Action::ToggleHelp => self.open_help(),
            Action::CloseHelp => self.close_help(),
            Action::OpenBench => self.mode = Mode::Bench,
            Action::RunBench => return self.run_bench(),
            Action::BenchView(view) => self.bench.show(view),
            Action::StopBench if self.bench.running.is_some() => return self.stop_bench(),
            Action::StopBench | Action::CloseBench => return self.close_bench(),
            Action::CloseAb => return self.close_ab(),
            Action::OpenCompare => return self.open_newest_compare(),
            Action::ReloadCompare => return self.open_compare(),
            Action::CompareOlder => return self.compare_step(true),
            Action::CompareNewer => return self.compare_step(false),
            Action::CompareRow(step) => self.move_compare_row(step),
            Action::CompareUse { ab } => return self.use_compare_row(ab, now),
            Action::CloseCompare | Action::CloseProfile => self.mode = Mode::Chat,
            Action::OpenProfile => self.mode = Mode::Profile,
            Action::Quit => return self.quit(now),
            Action::PageUp => self.page(PAGE_LINES as i32),
            Action::PageDown => self.page(-(PAGE_LINES as i32)),
            Action::LineUp => self.page(1),
            Action::LineDown => self.page(-1),
            // The help screen counts from its top and is clamped where it is drawn.
            Action::ScrollTop if self.mode == Mode::Help => self.help_to_top(),
            Action::ScrollBottom if self.mode == Mode::Help => self.help_from_end = Some(0),
            Action::ScrollTop => self.scroll.lines_from_bottom = usize::MAX / 2,
            Action::ScrollBottom => self.scroll = Scroll::default(),
            Action::Edit(edit) => self.input.apply(edit),
            Action::OpenPicker => return self.open_picker(PickFor::Switch),
            Action::Picker(key) => return self.on_picker_key(key, now),
            Action::Complete => return self.complete_or_space(),
        }
        Vec::new()
    }

    /// Esc: a message waiting for the model stays unsent; then, the first that applies, a
    /// model switch, the answer streaming or the scoring is stopped; else the notice goes.
    fn stop(&mut self) -> Vec<Effect> {
        if std::mem::take(&mut self.send_when_ready) {
            self.notice(NoticeKind::Info, "the message stays unsent");
            if self.switching.is_none() {
                return Vec::new();
            }
        }
        if self.switching.is_some() {
            return self.cancel_switch();
        }
        if self.is_generating() {
            return self.cancel_active();
        }
        if self.scoring().is_some() {
            self.notice(NoticeKind::Info, "scoring stopped");
            return self.stop_scoring("stopped (Esc)");
        }
        self.notice = None;
        Vec::new()
    }

    /// Up: a line up within the message; on its first line, the last prompt sent into an
    /// empty input, else the conversation scrolls up.
    fn recall_or_up(&mut self) {
        if !self.input.on_first_line() {
            self.input.apply(Edit::Up);
        } else if self.input.is_empty() {
            if let Some(last) = self.sent_prompts.last().cloned() {
                self.input.set(&last);
            }
        } else {
            self.scroll_by(1);
        }
    }

    /// Down: a line down within the message; on its last line the conversation scrolls down.
    fn down_or_scroll(&mut self) {
        if self.input.on_last_line() {
            self.scroll_by(-1);
        } else {
            self.input.apply(Edit::Down);
        }
    }

    /// The token screen closes to the chat, repainted in full.
    fn close_tokens(&mut self) {
        self.mode = Mode::Chat;
        self.full_repaint = true;
    }

    /// The help opens at its top, remembering the view it returns to.
    fn open_help(&mut self) {
        if self.mode != Mode::Help {
            self.help_return = self.mode;
        }
        self.mode = Mode::Help;
        self.help_shows_prompt = false;
        self.help_to_top();
    }

    /// `/prompt`: the last turn's prompt, as the model was given it, in the help's frame.
    pub(super) fn open_prompt(&mut self) {
        if self.last_prompt.is_none() {
            let why = match self.conversation.exchanges.iter().any(|e| e.assistant.is_some()) {
                true => "the server builds the prompt of a remote turn (llama-server shows it at POST /apply-template)",
                false => "no turn yet: /prompt shows the last turn's prompt once a message is answered",
            };
            self.notice(NoticeKind::Info, format!("/prompt: {why}"));
            return;
        }
        self.open_help();
        self.help_shows_prompt = true;
    }

    /// The help closes to the view it was opened from, or the chat when that one is gone.
    fn close_help(&mut self) {
        self.mode = match self.help_return {
            Mode::Ab if self.ab.is_none() => Mode::Chat,
            Mode::Picker if self.picker.is_none() => Mode::Chat,
            Mode::Help => Mode::Chat,
            other => other,
        };
    }

    /// The help scrolled back to its top.
    fn help_to_top(&mut self) {
        self.help_scroll = 0;
        self.help_from_end = None;
    }

    /// Esc during a batch sweep: it is cancelled and saved as stopped.
    fn stop_bench(&mut self) -> Vec<Effect> {
        self.bench.stopped = true;
        let Some(id) = self.bench.running.take() else {
            return Vec::new();
        };
        [Effect::Cancel(id)]
            .into_iter()
            .chain(self.save_sweep(true))
            .collect()
    }

    /// The bench screen closes to the chat; a sweep still running is cancelled.
    fn close_bench(&mut self) -> Vec<Effect> {
        self.mode = Mode::Chat;
        Vec::from_iter(self.bench.running.take().map(Effect::Cancel))
    }

    /// The compare screen opens on the newest comparison, its first row selected.
    fn open_newest_compare(&mut self) -> Vec<Effect> {
        self.compare_place = Default::default();
        self.compare_row = 0;
        self.open_compare()
    }

    /// The comparison before (`older`) or after the one shown, when there is one.
    fn compare_step(&mut self, older: bool) -> Vec<Effect> {
        let place = self.compare_place;
        let back = if older {
            (place.back + 1).min(place.total.saturating_sub(1))
        } else {
            place.back.saturating_sub(1)
        };
        if back != place.back {
            self.compare_place.back = back;
            self.compare_row = 0;
            return self.open_compare();
        }
        Vec::new()
    }

    /// The compare screen's selected row moves by `step`, within its rows.
    fn move_compare_row(&mut self, step: isize) {
        if let CompareView::Loaded(c) = &self.compare {
            let last = c.rows.len().saturating_sub(1);
            self.compare_row = self.compare_row.saturating_add_signed(step).min(last);
        }
    }

    /// The selected row's model, back in the chat: A/B against the last answer (`ab`), or
    /// switched to.
    fn use_compare_row(&mut self, ab: bool, now: Now) -> Vec<Effect> {
        let CompareView::Loaded(c) = &self.compare else {
            return Vec::new();
        };
        let Some(path) = c.rows.get(self.compare_row).map(|row| row.model.clone()) else {
            return Vec::new();
        };
        self.mode = Mode::Chat;
        self.use_model(&path, ab, now)
    }

    /// A chosen model file (a compare row, a picked one) through the same door as a typed
    /// path: A/B against the last answer (`ab`, as `/ab PATH`), or switched to (`/model PATH`).
    fn use_model(&mut self, path: &str, ab: bool, now: Now) -> Vec<Effect> {
        if ab {
            self.start_ab(path, now)
        } else {
            self.start_switch(path)
        }
    }

    /// Tab: the path after `/model ` or `/ab ` is completed (by the loop); elsewhere a space.
    fn complete_or_space(&mut self) -> Vec<Effect> {
        let text = self.input.text();
        if complete::is_path_command(&text) {
            return vec![Effect::CompletePath(text)];
        }
        self.input.apply(Edit::Char(' '));
        Vec::new()
    }

    fn page(&mut self, lines: i32) {
        let up = lines as isize;
        match (self.mode, self.ab.as_mut()) {
            // From the end, a page up is more lines above it.
            (Mode::Help, _) => match self.help_from_end.as_mut() {
                Some(k) => *k = k.saturating_add_signed(up),
                None => self.help_scroll = self.help_scroll.saturating_add_signed(-up),
            },
            (Mode::Ab, Some(ab)) => ab.scroll = ab.scroll.saturating_add_signed(-up),
            _ => self.scroll_by(lines),
        }
    }

    fn scroll_by(&mut self, lines: i32) {
        let s = &mut self.scroll.lines_from_bottom;
        *s = s.saturating_add_signed(lines as isize);
    }

    /// A key: the key table's action for it in this mode, if any.
    fn on_key(&mut self, key: KeyEvent, now: Now) -> Vec<Effect> {
        let Some(action) = action_for(self.mode, self.input.is_empty(), key) else {
            return Vec::new();
        };
        let before = self.mode;
        let effects = self.on_action(action, now);
        // A closed overlay leaves nothing behind (wide or combining characters can
        // fool a diff-only redraw).
        if before != self.mode && before != Mode::Chat {
            self.full_repaint = true;
        }
        effects
    }

    /// A paste into the chat's input, cleaned, or refused when the message could not hold it.
    fn on_paste(&mut self, text: &str) {
        if self.mode == Mode::Chat {
            // Terminals send pasted newlines as \r; control characters other than
            // newline and tab are dropped so they never reach the screen raw.
            let clean: String = text
                .replace("\r\n", "\n")
                .replace('\r', "\n")
                .chars()
                .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
                .collect();
            let total = self.input.len_bytes().saturating_add(clean.len());
            if total > INPUT_MAX_BYTES {
                self.notice(
                    NoticeKind::Warning,
                    format!(
                        "not pasted: the paste is {}, and the message may be at most {} \
                         (no model's context holds more); paste a part of it, or give a \
                         file to `tokscope run -f`",
                        crate::fmt::bytes(clean.len() as u64),
                        crate::fmt::bytes(INPUT_MAX_BYTES as u64)
                    ),
                );
            } else {
                self.input.insert_str(&clean);
            }
        }
    }

    /// A batch sweep was saved (its run id, and a warning about the log shown) or not.
    fn on_sweep_saved(&mut self, result: Result<(String, Option<String>), String>) {
        let saved = result.map(|(id, warning)| {
            if let Some(w) = warning {
                self.notice(NoticeKind::Warning, w);
            }
            id
        });
        self.bench.saved = Some(saved);
    }

    /// The comparisons log was read for the compare screen: its place, with the selected row
    /// kept within the rows.
    fn on_comparison_loaded(
        &mut self,
        result: Result<Option<(Comparison, crate::compare::log::Place)>, String>,
    ) {
        self.compare = match result {
            Ok(Some((c, place))) => {
                self.compare_place = place;
                self.compare_row = self.compare_row.min(c.rows.len().saturating_sub(1));
                CompareView::Loaded(Box::new(c))
            }
            Ok(None) => CompareView::Empty,
            Err(e) => CompareView::Failed(e),
        };
    }
}

/// The one update function: each message has its handler; only keys and engine events can
/// ask the loop for effects.
pub fn update(app: &mut App, msg: Msg, now: Now) -> Vec<Effect> {
    match msg {
        Msg::Key(key) => return app.on_key(key, now),
        Msg::Paste(text) => app.on_paste(&text),
        Msg::Scroll(lines) => app.scroll_by(lines),
        Msg::Resize | Msg::Tick => {}
        Msg::ScrollLimit(top) => {
            let s = &mut app.scroll.lines_from_bottom;
            *s = (*s).min(top);
        }
        Msg::Engine(event) => return app.on_engine(event, now),
        Msg::Saved(Ok(_)) => {
            if app.unsaved.take().is_some() {
                app.quit_asked_at = None;
                app.notice(NoticeKind::Info, "the conversation is saved now");
            }
        }
        Msg::Saved(Err(e)) => {
            // A failed retry after a held-back quit keeps that notice: it says what to do.
            let asking = app
                .quit_asked_at
                .is_some_and(|at| now.instant.saturating_duration_since(at) <= QUIT_CONFIRM);
            if !asking {
                app.notice(
                    NoticeKind::Error,
                    format!("could not save the conversation: {e}"),
                );
            }
            app.unsaved = Some(e);
        }
        Msg::Notice(kind, text) => app.notice(kind, text),
        Msg::SweepSaved(result) => app.on_sweep_saved(result),
        // `/trace` or an export wrote its file, or failed: either is shown.
        Msg::Traced(Ok((p, turns, frames))) => app.notice(
            NoticeKind::Info,
            format!(
                "trace of {turns} answer(s) and {frames} frame(s) written to {} (open it in ui.perfetto.dev)",
                p.display()
            ),
        ),
        Msg::Traced(Err(e)) => app.notice(NoticeKind::Error, format!("trace failed: {e}")),
        Msg::Exported(Ok(p)) => app.notice(NoticeKind::Info, format!("exported to {}", p.display())),
        Msg::Exported(Err(e)) => app.notice(NoticeKind::Error, format!("export failed: {e}")),
        Msg::InputTokens(tokens) => app.input_tokens = tokens,
        Msg::FreshConversationId(id) => app.fresh_conversation_id = id,
        Msg::ModelsFound(found) => app.on_models_found(found),
        Msg::Completed { asked, completion } => app.on_completed(&asked, completion),
        Msg::ComparisonLoaded(result) => app.on_comparison_loaded(result),
    }
    Vec::new()
}

/// The engine's request for a turn of these messages, generated with `s`.
fn turn_request(
    messages: Vec<crate::engine::ChatMessage>,
    s: &TurnSettings,
    context_full: crate::engine::ContextFull,
) -> TurnRequest {
    TurnRequest {
        messages,
        sampling: s.sampling.clone(),
        max_tokens: s.max_tokens,
        capture_first_logits: false,
        ignore_eos: s.ignore_eos,
        context_full,
    }
}

/// Whether the phase of the turn in flight is one whose display changes with time alone
/// (the waiting clock), so the loop redraws on ticks.
pub(crate) fn animates(app: &App) -> bool {
    matches!(app.engine, EngineStatus::Loading { .. })
        || app.bench.running.is_some()
        || app.ab.as_ref().is_some_and(|ab| ab.running.is_some())
        || app
            .conversation
            .active()
            .is_some_and(|a| matches!(a.phase, TurnPhase::Queued | TurnPhase::Prefill))
}

#[cfg(test)]
pub(crate) mod tests {
    //! The helpers every part of the app's tests uses, and the tests of `update` itself.
    use super::*;
    pub(crate) use crate::engine::RequestId;
    use crate::engine::{StopReason, TurnReport};
    pub(crate) use crossterm::event::{KeyCode, KeyModifiers};
    use std::time::Duration;

    pub(crate) fn now() -> Now {
        Now {
            instant: Instant::now(),
            unix_s: 1_700_000_000,
        }
    }

    pub(crate) fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    pub(crate) fn with(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, m)
    }

    pub(crate) fn ready_app() -> App {
        let mut app = App::new(
            "m.gguf".into(),
            Conversation::new("c1".into(), 0, None),
            SamplingParams::default(),
            64,
        );
        app.engine = EngineStatus::Ready;
        app.fresh_conversation_id = "c2".into();
        app
    }

    pub(crate) fn type_text(app: &mut App, text: &str) {
        for c in text.chars() {
            update(app, Msg::Key(key(KeyCode::Char(c))), now());
        }
    }

    pub(crate) fn finished(id: RequestId, text: &str, reason: StopReason) -> Msg {
        Msg::Engine(EngineEvent::Finished {
            request_id: id,
            report: Box::new(TurnReport {
                context_used: 20,
                ..conversation::tests::report(text, reason, &[10])
            }),
        })
    }

    /// The context filling is the user's choice, never silent: under `drop-oldest` (the
    /// default) each turn that left messages out says how many and how to choose otherwise;
    /// `/context-full stop` makes the next turns ask for it (the engine then fails the turn
    /// with what to do, shown as an error), and `/context-full drop-oldest` with Ctrl+R
    /// sends the same message again with the oldest left out.
    #[test]
    fn a_full_context_is_said_and_what_happens_then_is_the_users_choice() {
        use crate::engine::ContextFull;
        let mut app = ready_app();
        let sent = |app: &mut App, fx: Vec<Effect>| match fx.first().cloned() {
            Some(Effect::Generate { id, turn, .. }) => (id, turn.context_full),
            _ => panic!("no turn sent: {fx:?} ({:?})", app.notice),
        };
        type_text(&mut app, "hi");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let (id, policy) = sent(&mut app, fx);
        assert_eq!(policy, ContextFull::DropOldest);
        let started = |dropped_messages| {
            Msg::Engine(EngineEvent::PrefillStarted {
                request_id: id,
                prompt_tokens: 100,
                cached_tokens: 0,
                dropped_messages,
            })
        };
        update(&mut app, started(0), now());
        assert!(app.notice.is_none(), "nothing left out, nothing said");
        update(&mut app, started(6), now());
        let said = app.notice.as_ref().map(|n| (n.kind, n.text.clone()));
        let (kind, text) = said.expect("the drop is said");
        assert_eq!(kind, NoticeKind::Warning);
        for part in [
            "no longer fits",
            "the oldest 6 messages were left out",
            "/context-full stop",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        update(
            &mut app,
            finished(id, "ok", StopReason::EndOfGeneration),
            now(),
        );
        run_line(&mut app, "/context-full stop");
        assert_eq!(app.context_full, ContextFull::Stop);
        type_text(&mut app, "again");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let (id, policy) = sent(&mut app, fx);
        assert_eq!(policy, ContextFull::Stop);
        let full = EngineError::ContextFull {
            prompt_tokens: 300,
            n_ctx: 256,
            reserve: 16,
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::Failed {
                request_id: id,
                error: full,
            }),
            now(),
        );
        let notice = app.notice.clone().expect("the stop is said");
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(
            notice.text.contains("nothing was left out"),
            "{}",
            notice.text
        );
        run_line(&mut app, "/context-full drop-oldest");
        assert_eq!(app.context_full, ContextFull::DropOldest);
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('r'), KeyModifiers::CONTROL)),
            now(),
        );
        let (_, policy) = sent(&mut app, fx);
        assert_eq!(policy, ContextFull::DropOldest);
        run_line(&mut app, "/context-full sometimes");
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(
            notice.text.contains("drop-oldest or stop"),
            "{}",
            notice.text
        );
    }

    #[test]
    fn request_ids_come_from_one_shared_allocator() {
        let mut app = ready_app();
        // The engine handle's side of the allocator (run_chat gives the app the handle's).
        let handle_side = app.request_ids.clone();
        let before = handle_side.next();
        type_text(&mut app, "hi");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        assert_eq!(id, before + 1);
        assert_eq!(handle_side.peek(), id + 1);
        assert_eq!(handle_side.next(), id + 1, "never handed out twice");
    }

    #[test]
    fn the_loop_reports_the_input_count_and_fresh_ids_as_messages() {
        let mut app = ready_app();
        let counted = Msg::InputTokens(Some((3, "tokenizer.json")));
        assert!(update(&mut app, counted, now()).is_empty());
        assert_eq!(app.input_tokens, Some((3, "tokenizer.json")));
        assert!(update(&mut app, Msg::InputTokens(None), now()).is_empty());
        assert_eq!(app.input_tokens, None);
        let fresh = Msg::FreshConversationId("c9".into());
        assert!(update(&mut app, fresh, now()).is_empty());
        assert_eq!(
            app.conversation.id, "c1",
            "a fresh id waits for a new conversation"
        );
        run_line(&mut app, "/new");
        assert_eq!(app.conversation.id, "c9");
    }

    #[test]
    fn send_starts_a_turn_and_events_fill_it() {
        let mut app = ready_app();
        type_text(&mut app, "hi");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate {
            id,
            turn: TurnRequest { messages, .. },
            model: None,
            ab_reference: None,
        }) = fx.first().cloned()
        else {
            panic!("no generate effect: {fx:?}")
        };
        assert_eq!(messages.last().map(|m| m.content.as_str()), Some("hi"));
        assert!(app.input.is_empty());
        assert!(app.is_generating());
        update(
            &mut app,
            Msg::Engine(EngineEvent::Token {
                request_id: id,
                index: 0,
                text: "Hel".into(),
                at: Duration::from_millis(5),
            }),
            now(),
        );
        // Events of another request are dropped.
        update(
            &mut app,
            Msg::Engine(EngineEvent::Token {
                request_id: id + 100,
                index: 0,
                text: "XX".into(),
                at: Duration::from_millis(6),
            }),
            now(),
        );
        let turn = app.conversation.active().unwrap();
        assert_eq!(turn.text, "Hel");
        assert_eq!(turn.phase, TurnPhase::Streaming);
        let fx = update(
            &mut app,
            finished(id, "Hello", StopReason::EndOfGeneration),
            now(),
        );
        assert!(matches!(fx.as_slice(), [Effect::Save(s)] if s.turns.len() == 1));
        assert!(!app.is_generating());
        assert_eq!(app.context_used, 20);
    }

    #[test]
    fn esc_cancels_the_active_request_and_stopped_turn_keeps_text() {
        let mut app = ready_app();
        type_text(&mut app, "long");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!()
        };
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        update(
            &mut app,
            finished(id, "partial", StopReason::Cancelled),
            now(),
        );
        let t = app.conversation.exchanges[0].assistant.as_ref().unwrap();
        assert_eq!(t.phase, TurnPhase::Stopped);
        assert_eq!(t.text, "partial");
    }

    fn loading_app() -> App {
        let mut app = ready_app();
        app.engine = EngineStatus::Loading {
            stage: LoadStage::Weights,
            progress: 0.5,
            read: None,
        };
        app
    }

    #[test]
    fn enter_while_loading_sends_the_message_when_the_model_is_ready() {
        let mut app = loading_app();
        type_text(&mut app, "x");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        assert_eq!(
            app.input.text(),
            "x",
            "the input is kept while the model loads"
        );
        let said = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(said.contains("sent as soon as it is ready"), "{said}");
        let info = ModelInfo::default();
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::Ready(Box::new(info))),
            now(),
        );
        assert!(
            fx.iter().any(|e| matches!(e, Effect::Generate { .. })),
            "sent on Ready: {fx:?}"
        );
        assert_eq!(app.input.text(), "");
        assert_eq!(app.conversation.exchanges.last().unwrap().user, "x");
        let said = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(said.contains("your message was sent"), "{said}");
    }

    #[test]
    fn esc_or_a_failed_load_keeps_the_waiting_message_unsent() {
        let mut app = loading_app();
        type_text(&mut app, "x");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        let info = ModelInfo::default();
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::Ready(Box::new(info))),
            now(),
        );
        assert!(fx.is_empty(), "Esc took the message back: {fx:?}");
        assert_eq!(app.input.text(), "x");

        let mut app = loading_app();
        type_text(&mut app, "y");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        update(
            &mut app,
            Msg::Engine(EngineEvent::LoadFailed(crate::engine::EngineError::NoModel)),
            now(),
        );
        assert!(!app.send_when_ready);
        assert_eq!(app.input.text(), "y", "a failed load keeps the message");
        type_text(&mut app, "");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let said = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(said.contains("no model is loaded"), "{said}");
    }

    #[test]
    fn nothing_is_sent_while_streaming() {
        let mut app = ready_app();
        type_text(&mut app, "q");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(matches!(fx.first(), Some(Effect::Generate { .. })));
        type_text(&mut app, "x");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        assert_eq!(app.input.text(), "x", "the input is kept");
        assert!(app.notice.is_some());
    }

    #[test]
    fn up_recalls_the_last_prompt_and_regenerate_resends_it() {
        let mut app = ready_app();
        type_text(&mut app, "question");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!()
        };
        update(
            &mut app,
            finished(id, "answer", StopReason::EndOfGeneration),
            now(),
        );
        update(&mut app, Msg::Key(key(KeyCode::Up)), now());
        assert_eq!(app.input.text(), "question");
        app.input.take();
        let seed = app.sampling.seed;
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('r'), KeyModifiers::CONTROL)),
            now(),
        );
        let Some(Effect::Generate {
            turn: TurnRequest {
                messages, sampling, ..
            },
            ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert_eq!(messages.len(), 1, "the old answer is not sent again");
        assert_eq!(sampling.seed, seed.wrapping_add(1));
        assert_eq!(app.conversation.exchanges.len(), 1);
    }

    #[test]
    fn readline_keys_edit_the_message_that_is_sent() {
        let mut app = ready_app();
        let ctrl = |c| Msg::Key(with(KeyCode::Char(c), KeyModifiers::CONTROL));
        let alt = |c| Msg::Key(with(KeyCode::Char(c), KeyModifiers::ALT));
        type_text(&mut app, "world hello");
        // Cut "hello", put it at the start, then fix the spacing.
        for msg in [ctrl('w'), ctrl('a'), ctrl('y')] {
            update(&mut app, msg, now());
        }
        assert_eq!(app.input.text(), "helloworld ");
        update(&mut app, Msg::Key(key(KeyCode::Char(' '))), now());
        update(&mut app, ctrl('e'), now());
        update(&mut app, Msg::Key(key(KeyCode::Backspace)), now());
        assert_eq!(app.input.text(), "hello world");
        // Alt+B to "world", Ctrl+K cuts it, Ctrl+Z brings it back.
        update(&mut app, alt('b'), now());
        update(&mut app, ctrl('k'), now());
        assert_eq!(app.input.text(), "hello ");
        update(&mut app, ctrl('z'), now());
        assert_eq!(app.input.text(), "hello world");
        update(&mut app, alt('z'), now());
        assert_eq!(app.input.text(), "hello ", "Alt+Z redoes");
        update(&mut app, ctrl('z'), now());
        assert_eq!(
            app.input.cursor(),
            (0, 11),
            "undo puts the cursor after the text back"
        );
        update(&mut app, alt('b'), now());
        update(&mut app, ctrl('u'), now());
        assert_eq!(app.input.text(), "world");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(
            matches!(fx.first(), Some(Effect::Generate { .. })),
            "{fx:?}"
        );
        assert_eq!(app.conversation.exchanges[0].user, "world");
        // Ctrl+R regenerates, it is not redo.
        assert_eq!(
            action_for(
                Mode::Chat,
                false,
                with(KeyCode::Char('r'), KeyModifiers::CONTROL)
            ),
            Some(Action::Regenerate)
        );
    }

    #[test]
    fn up_and_down_move_within_a_message_of_several_lines_and_scroll_otherwise() {
        let mut app = ready_app();
        app.input.set("first\nsecond");
        update(&mut app, Msg::Key(key(KeyCode::Up)), now());
        assert_eq!(app.input.cursor(), (0, 5));
        assert_eq!(app.scroll.lines_from_bottom, 0);
        update(&mut app, Msg::Key(key(KeyCode::Up)), now());
        assert_eq!(
            app.scroll.lines_from_bottom, 1,
            "on the first line Up scrolls"
        );
        update(&mut app, Msg::Key(key(KeyCode::Down)), now());
        assert_eq!(app.input.cursor(), (1, 5));
        assert_eq!(app.scroll.lines_from_bottom, 1);
        update(&mut app, Msg::Key(key(KeyCode::Down)), now());
        assert_eq!(
            app.scroll.lines_from_bottom, 0,
            "on the last line Down scrolls"
        );
        assert_eq!(app.input.text(), "first\nsecond");
    }

    #[test]
    fn newline_keys_split_the_line_at_the_cursor() {
        let mut app = ready_app();
        type_text(&mut app, "ab");
        update(&mut app, Msg::Key(key(KeyCode::Left)), now());
        update(
            &mut app,
            Msg::Key(with(KeyCode::Enter, KeyModifiers::ALT)),
            now(),
        );
        update(
            &mut app,
            Msg::Key(with(KeyCode::Char('j'), KeyModifiers::CONTROL)),
            now(),
        );
        assert_eq!(app.input.text(), "a\n\nb");
        assert_eq!(app.input.cursor(), (2, 0));
    }

    #[test]
    fn paste_keeps_newlines_and_drops_control_characters() {
        let mut app = ready_app();
        update(&mut app, Msg::Paste("a\r\nb\x1b[31mc\x07".into()), now());
        assert_eq!(app.input.text(), "a\nb[31mc");
    }

    #[test]
    fn a_paste_the_message_cannot_hold_is_refused_with_a_message() {
        let mut app = ready_app();
        app.input.set("typed ");
        let fits = "x".repeat(INPUT_MAX_BYTES - app.input.len_bytes());
        update(&mut app, Msg::Paste(fits.clone()), now());
        assert_eq!(
            app.input.len_bytes(),
            INPUT_MAX_BYTES,
            "a paste that just fits is taken"
        );
        app.input.set("typed ");
        update(&mut app, Msg::Paste(format!("{fits}y")), now());
        assert_eq!(app.input.text(), "typed ", "the input is kept as it was");
        let notice = app.notice.as_ref().expect("a notice");
        assert_eq!(notice.kind, NoticeKind::Warning);
        assert!(notice.text.contains("not pasted"), "{}", notice.text);
        assert!(notice.text.contains("8.4 MB"), "{}", notice.text);
    }

    #[test]
    fn scrolling_moves_away_and_back() {
        let mut app = ready_app();
        update(&mut app, Msg::Scroll(3), now());
        assert!(!app.scroll.follows());
        update(&mut app, Msg::Key(key(KeyCode::PageDown)), now());
        assert!(app.scroll.follows());
        update(&mut app, Msg::Key(key(KeyCode::Home)), now());
        assert!(!app.scroll.follows());
        update(&mut app, Msg::Key(key(KeyCode::End)), now());
        assert!(app.scroll.follows());
    }

    /// An app whose last exchange has a finished answer; returns its request id.
    pub(crate) fn answered_app() -> (App, RequestId) {
        let mut app = ready_app();
        app.sampling.seed = 1234;
        type_text(&mut app, "question");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(
            &mut app,
            finished(id, "Hello world", StopReason::EndOfGeneration),
            now(),
        );
        (app, id)
    }

    pub(crate) fn run_line(app: &mut App, line: &str) -> Vec<Effect> {
        app.input.set(line);
        update(app, Msg::Key(key(KeyCode::Enter)), now())
    }

    /// Sends `text` at `sent_unix_s`, the answer finishing 10 s later; returns the save.
    fn turn_at(app: &mut App, text: &str, sent_unix_s: u64) -> SavedConversation {
        let at = |unix_s| Now {
            instant: Instant::now(),
            unix_s,
        };
        app.input.set(text);
        let fx = update(app, Msg::Key(key(KeyCode::Enter)), at(sent_unix_s));
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        let done = finished(id, "answer", StopReason::EndOfGeneration);
        match update(app, done, at(sent_unix_s + 10)).as_slice() {
            [Effect::Save(saved)] => saved.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_saved_turn_keeps_its_own_finish_time_model_seed_and_system_prompt() {
        let mut app = ready_app();
        let model = ModelInfo {
            file_name: "a.gguf".into(),
            path: "/m/a.gguf".into(),
            fingerprint: "00000000000000aa".into(),
            ..ModelInfo::default()
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::Ready(Box::new(model))),
            now(),
        );
        turn_at(&mut app, "one", 1_000);
        turn_at(&mut app, "two", 2_000);
        run_line(&mut app, "/seed 43");
        run_line(&mut app, "/system Be brief.");
        let saved = turn_at(&mut app, "three", 3_000);
        let finished: Vec<u64> = saved.turns.iter().map(|t| t.finished_unix_s).collect();
        assert_eq!(finished, [1_010, 2_010, 3_010], "each turn's own time");
        let settings: Vec<_> = saved
            .turns
            .iter()
            .map(|t| t.settings.clone().unwrap())
            .collect();
        let seeds: Vec<u32> = settings.iter().map(|s| s.sampling.seed).collect();
        assert_eq!(seeds, [42, 42, 43]);
        let prompts: Vec<Option<&str>> = settings
            .iter()
            .map(|s| s.system_prompt.as_deref())
            .collect();
        assert_eq!(prompts, [None, None, Some("Be brief.")]);
        assert!(settings.iter().all(|s| s.max_tokens == 64));
        let on = crate::history::SavedModel {
            path: "/m/a.gguf".into(),
            fingerprint: Some("00000000000000aa".into()),
        };
        assert!(saved.turns.iter().all(|t| t.model.as_ref() == Some(&on)));
        assert_eq!(saved.model.as_ref(), Some(&on));

        // Through the file and back into a chat, and saved again later: nothing is lost.
        let dir = tempfile::tempdir().unwrap();
        let path = crate::history::save(dir.path(), &saved).unwrap();
        let loaded = crate::history::load(&path).unwrap();
        assert_eq!(loaded, saved);
        let again = Conversation::from_saved(&loaded).to_saved(9_999);
        assert_eq!(again.turns, saved.turns);
    }

    #[test]
    fn quitting_with_an_unsaved_conversation_asks_again_and_retries_the_save() {
        let ctrl_c = || Msg::Key(with(KeyCode::Char('c'), KeyModifiers::CONTROL));
        let mut app = ready_app();
        let t0 = now();
        update(&mut app, Msg::Saved(Err("disk full".into())), t0);
        assert_eq!(app.unsaved.as_deref(), Some("disk full"));
        // The first Ctrl+C does not quit: it says why and tries the save again.
        let fx = update(&mut app, ctrl_c(), t0);
        assert!(matches!(fx.as_slice(), [Effect::Save(_)]), "{fx:?}");
        let notice = app.notice.as_ref().map(|n| n.text.clone()).unwrap();
        assert!(notice.contains("not saved: quit again"), "{notice}");
        assert!(notice.contains("disk full"), "{notice}");
        assert!(notice.contains("quit again"), "{notice}");
        // The retry fails too: the notice still says how to quit.
        update(&mut app, Msg::Saved(Err("disk full".into())), t0);
        assert!(app.notice.as_ref().unwrap().text.contains("quit again"));
        // A second one after the window asks again; one within it quits.
        let late = Now {
            instant: t0.instant + QUIT_CONFIRM + Duration::from_secs(1),
            unix_s: t0.unix_s,
        };
        let fx = update(&mut app, ctrl_c(), late);
        assert!(!fx.contains(&Effect::Quit), "{fx:?}");
        let soon = Now {
            instant: late.instant + Duration::from_secs(1),
            unix_s: t0.unix_s,
        };
        let fx = update(&mut app, ctrl_c(), soon);
        assert!(fx.contains(&Effect::Quit), "{fx:?}");
        assert!(
            app.unsaved.is_some(),
            "the caller tells that turns were lost"
        );
        // A save that succeeds clears it: the next Ctrl+C quits at once.
        let mut app = ready_app();
        update(&mut app, Msg::Saved(Err("disk full".into())), t0);
        update(&mut app, ctrl_c(), t0);
        update(&mut app, Msg::Saved(Ok("/h/c1.json".into())), t0);
        assert_eq!(app.unsaved, None);
        let fx = update(&mut app, ctrl_c(), t0);
        assert!(fx.contains(&Effect::Quit), "{fx:?}");
    }
}
