//! The chat application's state and its one update function. `update` takes a message (a key,
//! a paste, an engine event, a tick) and the current time, changes the state and returns the
//! effects to run (send to the engine, save, export, quit). It does no I/O itself, so every
//! behaviour is unit-tested without a terminal or a model.

pub mod conversation;

use std::path::PathBuf;
use std::time::Instant;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::compare::Comparison;
use crate::engine::{ChatMessage, EngineEvent, ModelInfo, RequestId, SamplingParams};
use crate::history::SavedConversation;
use conversation::{
    first_divergence, AssistantTurn, Conversation, Divergence, Exchange, TurnPhase, TurnSettings,
};

/// The engine as the UI sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineStatus {
    Loading { progress: f32 },
    Ready,
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Chat,
    Help,
    /// The batching screen: a batch sweep on the loaded model, charted.
    Bench,
    /// The A/B screen: the last answer beside another model file's answer to the same turns.
    Ab,
    /// The latest `tokscope compare` table.
    Compare,
}

/// How answer B compares with answer A, once B has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbOutcome {
    Identical,
    Diverges(Divergence),
}

/// The A/B screen: the last answer (A, from the loaded model) and the same turns answered by
/// another model file (B) with the same sampling settings and seed. B is never added to the
/// conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct AbScreen {
    /// The last user message, answered by both.
    pub prompt: String,
    pub settings: TurnSettings,
    /// A copy of the conversation's last answer.
    pub a: AssistantTurn,
    pub b_path: PathBuf,
    /// B's answer, filled from its engine events like a chat turn.
    pub b: AssistantTurn,
    /// Model B as the engine loaded it (known once B has finished).
    pub b_model: Option<ModelInfo>,
    /// The text of each of B's tokens.
    pub b_pieces: Vec<String>,
    /// The request in flight, while B loads or generates.
    pub running: Option<RequestId>,
    /// When B was asked for (for the loading clock).
    pub started: Instant,
    pub outcome: Option<AbOutcome>,
    pub error: Option<String>,
    /// Lines scrolled down in both answers.
    pub scroll: usize,
}

/// The compare screen's table: read from the comparisons log when the screen opens.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum CompareView {
    /// Not read yet, or being read.
    #[default]
    Reading,
    /// The log has no comparison.
    Empty,
    Loaded(Box<Comparison>),
    Failed(String),
}

/// One batch size's figures on the bench screen.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPoint {
    pub point: crate::plot::BatchPoint,
    /// Prefill of all B prompts together.
    pub prefill_ms: f64,
}

/// The bench screen: which sweep, its points so far, and whether it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchScreen {
    pub batches: Vec<u32>,
    pub n_prompt: u32,
    pub n_gen: u32,
    pub running: Option<RequestId>,
    pub points: Vec<BenchPoint>,
    pub error: Option<String>,
}

impl Default for BenchScreen {
    fn default() -> Self {
        Self {
            batches: vec![1, 2, 4, 8, 16, 32],
            n_prompt: 64,
            n_gen: 32,
            running: None,
            points: Vec::new(),
            error: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Info,
    Warning,
    Error,
}

/// A one-line message in the status area (command results, errors, warnings).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub text: String,
    pub kind: NoticeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Markdown,
    Json,
}

/// The multi-line input box. `cursor` is a byte index on a char boundary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Input {
    pub text: String,
    pub cursor: usize,
}

impl Input {
    pub fn insert_char(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    pub fn insert_str(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    pub fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// Start of the current line.
    pub fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    /// End of the current line.
    pub fn end(&mut self) {
        self.cursor = self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i);
    }

    pub fn set(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.len();
    }

    pub fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// (line, column in chars) of the cursor, for drawing it.
    pub fn cursor_line_col(&self) -> (usize, usize) {
        let before = &self.text[..self.cursor];
        let line = before.matches('\n').count();
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        (line, col)
    }
}

/// Conversation scroll position: lines up from the bottom; `0` follows the stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scroll {
    pub lines_from_bottom: usize,
}

impl Scroll {
    pub fn follows(&self) -> bool {
        self.lines_from_bottom == 0
    }
}

/// What the user asked for, after the key table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Send,
    Newline,
    Stop,
    Regenerate,
    RecallOrUp,
    Down,
    NewConversation,
    ToggleHelp,
    CloseHelp,
    Quit,
    OpenBench,
    RunBench,
    CloseBench,
    CloseAb,
    OpenCompare,
    ReloadCompare,
    CloseCompare,
    PageUp,
    PageDown,
    ScrollTop,
    ScrollBottom,
    Backspace,
    Delete,
    Left,
    Right,
    LineStart,
    LineEnd,
    Char(char),
}

/// The key table: `(mode, key) → action`. Press events only (no repeats or releases).
pub fn action_for(mode: Mode, input_empty: bool, key: KeyEvent) -> Option<Action> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    match (mode, key.code) {
        (_, KeyCode::Char('c') | KeyCode::Char('q')) if ctrl => Some(Action::Quit),
        (Mode::Help, KeyCode::Esc | KeyCode::F(1) | KeyCode::Char('?') | KeyCode::Char('q')) => {
            Some(Action::CloseHelp)
        }
        (Mode::Help, KeyCode::PageUp | KeyCode::Up) => Some(Action::PageUp),
        (Mode::Help, KeyCode::PageDown | KeyCode::Down) => Some(Action::PageDown),
        (Mode::Help, _) => None,
        (Mode::Bench, KeyCode::Esc | KeyCode::F(2) | KeyCode::Char('q')) => {
            Some(Action::CloseBench)
        }
        (Mode::Bench, KeyCode::Enter | KeyCode::Char('r')) => Some(Action::RunBench),
        (Mode::Bench, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Bench, _) => None,
        (Mode::Ab, KeyCode::Esc | KeyCode::Char('q')) => Some(Action::CloseAb),
        (Mode::Ab, KeyCode::PageUp | KeyCode::Up) => Some(Action::PageUp),
        (Mode::Ab, KeyCode::PageDown | KeyCode::Down) => Some(Action::PageDown),
        (Mode::Ab, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Ab, _) => None,
        (Mode::Compare, KeyCode::Esc | KeyCode::F(3) | KeyCode::Char('q')) => {
            Some(Action::CloseCompare)
        }
        (Mode::Compare, KeyCode::Char('r')) => Some(Action::ReloadCompare),
        (Mode::Compare, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Compare, _) => None,
        (Mode::Chat, KeyCode::F(2)) => Some(Action::OpenBench),
        (Mode::Chat, KeyCode::F(3)) => Some(Action::OpenCompare),
        (Mode::Chat, KeyCode::F(1)) => Some(Action::ToggleHelp),
        (Mode::Chat, KeyCode::Char('?')) if input_empty => Some(Action::ToggleHelp),
        (Mode::Chat, KeyCode::Enter) if alt || shift => Some(Action::Newline),
        (Mode::Chat, KeyCode::Char('j')) if ctrl => Some(Action::Newline),
        (Mode::Chat, KeyCode::Enter) => Some(Action::Send),
        (Mode::Chat, KeyCode::Esc) => Some(Action::Stop),
        (Mode::Chat, KeyCode::Char('r')) if ctrl => Some(Action::Regenerate),
        (Mode::Chat, KeyCode::Char('n')) if ctrl => Some(Action::NewConversation),
        (Mode::Chat, KeyCode::Up) => Some(Action::RecallOrUp),
        (Mode::Chat, KeyCode::Down) => Some(Action::Down),
        (Mode::Chat, KeyCode::PageUp) => Some(Action::PageUp),
        (Mode::Chat, KeyCode::PageDown) => Some(Action::PageDown),
        (Mode::Chat, KeyCode::Home) if ctrl || input_empty => Some(Action::ScrollTop),
        (Mode::Chat, KeyCode::End) if ctrl || input_empty => Some(Action::ScrollBottom),
        (Mode::Chat, KeyCode::Home) => Some(Action::LineStart),
        (Mode::Chat, KeyCode::End) => Some(Action::LineEnd),
        (Mode::Chat, KeyCode::Backspace) => Some(Action::Backspace),
        (Mode::Chat, KeyCode::Delete) => Some(Action::Delete),
        (Mode::Chat, KeyCode::Left) => Some(Action::Left),
        (Mode::Chat, KeyCode::Right) => Some(Action::Right),
        (Mode::Chat, KeyCode::Char(c)) if !ctrl && !alt => Some(Action::Char(c)),
        (Mode::Chat, KeyCode::Tab) => Some(Action::Char(' ')),
        _ => None,
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
    /// The comparisons log, read for the compare screen (`Ok(None)`: no comparison yet).
    ComparisonLoaded(Result<Option<Comparison>, String>),
    Tick,
}

/// Work `update` asks the loop to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Generate {
        id: RequestId,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        ignore_eos: bool,
    },
    Cancel(RequestId),
    /// Run a batch sweep on the loaded model (the bench screen).
    BatchSweep {
        id: RequestId,
        batches: Vec<u32>,
        n_prompt: u32,
        n_gen: u32,
    },
    /// Answer the same turns with another model file (the A/B screen).
    AbGenerate {
        id: RequestId,
        path: PathBuf,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        ignore_eos: bool,
    },
    /// Read the latest comparison from the comparisons log.
    LoadComparison,
    LoadModel(PathBuf),
    Save(SavedConversation),
    Export {
        format: ExportFormat,
        path: PathBuf,
        conversation: SavedConversation,
    },
    Quit,
}

/// The time as `update` sees it, passed in so that `update` never reads the clock.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub instant: Instant,
    pub unix_s: u64,
}

/// Every slash command (the help lists each; a test keeps the two in step).
pub const SLASH_COMMANDS: &[&str] = &[
    "/system", "/temp", "/top_p", "/max", "/seed", "/export", "/model", "/ab", "/compare", "/new",
    "/help", "/quit",
];

/// The function keys the chat answers to, with the view each opens (the help lists each).
pub const FUNCTION_KEYS: &[(u8, Mode)] = &[(1, Mode::Help), (2, Mode::Bench), (3, Mode::Compare)];

/// Lines one PgUp/PgDn moves.
pub const PAGE_LINES: usize = 10;

/// The whole state of the chat screen.
#[derive(Debug, Clone)]
pub struct App {
    pub engine: EngineStatus,
    pub model: Option<ModelInfo>,
    pub model_path: PathBuf,
    pub conversation: Conversation,
    pub input: Input,
    pub mode: Mode,
    pub scroll: Scroll,
    pub help_scroll: usize,
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    /// Answers run to `max_tokens` regardless of end-of-generation (benchmarking).
    pub ignore_eos: bool,
    /// Peak memory bandwidth for the roofline pane, with where it comes from.
    pub bandwidth: Option<crate::metrics::roofline::Bandwidth>,
    /// Price per GPU-hour (USD) for the cost per 1M tokens.
    pub price_per_hour_usd: f64,
    pub notice: Option<Notice>,
    /// Prompts sent in this session, for Up-recall.
    pub sent_prompts: Vec<String>,
    /// When the turn in flight was handed to the engine (for the live "waiting" clock).
    pub active_since: Option<Instant>,
    /// Tokens in the KV cache (context used), from the last finished turn.
    pub context_used: usize,
    pub next_request_id: RequestId,
    pub should_quit: bool,
    /// A new conversation id, minted by the caller (update never reads the clock or RNG).
    pub fresh_conversation_id: String,
    pub bench: BenchScreen,
    /// The A/B comparison, while it is on screen.
    pub ab: Option<AbScreen>,
    pub compare: CompareView,
    /// The view the help returns to when closed.
    pub help_return: Mode,
    /// Tokens in the input as typed (counted without the engine), and where the count comes
    /// from ("tokenizer.json" or "model vocabulary"); set by the loop, not by `update`.
    pub input_tokens: Option<(usize, &'static str)>,
}

impl App {
    pub fn new(
        model_path: PathBuf,
        conversation: Conversation,
        sampling: SamplingParams,
        max_tokens: u32,
    ) -> Self {
        Self {
            engine: EngineStatus::Loading { progress: 0.0 },
            model: None,
            model_path,
            conversation,
            input: Input::default(),
            mode: Mode::Chat,
            scroll: Scroll::default(),
            help_scroll: 0,
            sampling,
            max_tokens,
            ignore_eos: false,
            bandwidth: None,
            price_per_hour_usd: 2.0,
            notice: None,
            sent_prompts: Vec::new(),
            active_since: None,
            context_used: 0,
            next_request_id: 1,
            should_quit: false,
            fresh_conversation_id: String::new(),
            bench: BenchScreen::default(),
            ab: None,
            compare: CompareView::default(),
            help_return: Mode::Chat,
            input_tokens: None,
        }
    }

    fn notice(&mut self, kind: NoticeKind, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            kind,
        });
    }

    pub fn is_generating(&self) -> bool {
        self.conversation.active().is_some()
    }

    fn model_file(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.file_name.clone())
    }

    /// Start an answer for the last exchange.
    fn start_turn(&mut self, now: Now) -> Vec<Effect> {
        let id = self.next_request_id;
        self.next_request_id += 1;
        let model_file = self.model_file();
        let messages = self.conversation.messages_for_last();
        if let Some(ex) = self.conversation.exchanges.last_mut() {
            let mut turn = AssistantTurn::new(id, model_file);
            turn.settings = Some(TurnSettings {
                sampling: self.sampling.clone(),
                max_tokens: self.max_tokens,
                ignore_eos: self.ignore_eos,
            });
            ex.assistant = Some(turn);
        }
        self.active_since = Some(now.instant);
        self.scroll = Scroll::default();
        vec![Effect::Generate {
            id,
            messages,
            sampling: self.sampling.clone(),
            max_tokens: self.max_tokens,
            ignore_eos: self.ignore_eos,
        }]
    }

    fn send(&mut self, now: Now) -> Vec<Effect> {
        if self.input.text.trim().is_empty() {
            return Vec::new();
        }
        if self.input.text.trim_start().starts_with('/') {
            let line = self.input.take();
            return self.slash_command(line.trim(), now);
        }
        if self.is_generating() {
            self.notice(
                NoticeKind::Warning,
                "an answer is still streaming: Esc stops it",
            );
            return Vec::new();
        }
        if self.engine != EngineStatus::Ready {
            self.notice(NoticeKind::Warning, "the model is not ready yet");
            return Vec::new();
        }
        let text = self.input.take();
        self.sent_prompts.push(text.clone());
        self.conversation.exchanges.push(Exchange {
            user: text,
            assistant: None,
        });
        self.notice = None;
        self.start_turn(now)
    }

    fn regenerate(&mut self, now: Now) -> Vec<Effect> {
        if self.is_generating() || self.engine != EngineStatus::Ready {
            return Vec::new();
        }
        let Some(last) = self.conversation.exchanges.last_mut() else {
            self.notice(NoticeKind::Info, "nothing to regenerate yet");
            return Vec::new();
        };
        last.assistant = None;
        // A new seed, so that sampling can give a different answer (shown, so it can be
        // reproduced).
        self.sampling.seed = self.sampling.seed.wrapping_add(1);
        self.notice(
            NoticeKind::Info,
            format!("regenerating with seed {}", self.sampling.seed),
        );
        self.start_turn(now)
    }

    fn cancel_active(&mut self) -> Vec<Effect> {
        match self.conversation.active() {
            Some(a) => vec![Effect::Cancel(a.request_id)],
            None => Vec::new(),
        }
    }

    fn new_conversation(&mut self) -> Vec<Effect> {
        let effects = self.cancel_active();
        let id = std::mem::take(&mut self.fresh_conversation_id);
        let system = self.conversation.system_prompt.clone();
        let created = self.conversation.created_unix_s;
        self.conversation = Conversation::new(id, created, system);
        self.scroll = Scroll::default();
        self.active_since = None;
        self.notice(NoticeKind::Info, "new conversation");
        effects
    }

    fn slash_command(&mut self, line: &str, now: Now) -> Vec<Effect> {
        let (cmd, arg) = match line.split_once(char::is_whitespace) {
            Some((c, a)) => (c, a.trim()),
            None => (line, ""),
        };
        let parse_f32 = |s: &str| s.parse::<f32>().ok().filter(|v| v.is_finite());
        match cmd {
            "/system" => {
                self.conversation.system_prompt = Some(arg.to_string()).filter(|s| !s.is_empty());
                self.notice(
                    NoticeKind::Info,
                    if arg.is_empty() {
                        "system prompt cleared".to_string()
                    } else {
                        "system prompt set (applies from the next answer)".to_string()
                    },
                );
            }
            "/temp" => match parse_f32(arg).filter(|v| (0.0..=100.0).contains(v)) {
                Some(v) => {
                    self.sampling.temperature = v;
                    self.notice(NoticeKind::Info, format!("temperature {v}"));
                }
                None => self.notice(NoticeKind::Error, "/temp needs a number from 0 to 100"),
            },
            "/top_p" => match parse_f32(arg).filter(|v| (0.0..=1.0).contains(v)) {
                Some(v) => {
                    self.sampling.top_p = v;
                    self.notice(NoticeKind::Info, format!("top_p {v}"));
                }
                None => self.notice(NoticeKind::Error, "/top_p needs a number from 0 to 1"),
            },
            "/max" => match arg.parse::<u32>().ok().filter(|v| *v >= 1) {
                Some(v) => {
                    self.max_tokens = v;
                    self.notice(NoticeKind::Info, format!("max tokens {v}"));
                }
                None => self.notice(NoticeKind::Error, "/max needs a whole number ≥ 1"),
            },
            "/seed" => match arg.parse::<u32>() {
                Ok(v) => {
                    self.sampling.seed = v;
                    self.notice(NoticeKind::Info, format!("seed {v}"));
                }
                Err(_) => self.notice(NoticeKind::Error, "/seed needs a whole number"),
            },
            "/export" => {
                let mut parts = arg.splitn(2, char::is_whitespace);
                let format = match parts.next() {
                    Some("md") | Some("markdown") => Some(ExportFormat::Markdown),
                    Some("json") => Some(ExportFormat::Json),
                    _ => None,
                };
                let path = parts.next().map(str::trim).filter(|p| !p.is_empty());
                match (format, path) {
                    (Some(format), Some(path)) => {
                        return vec![Effect::Export {
                            format,
                            path: crate::config::expand_home(std::path::Path::new(path)),
                            conversation: self.conversation.to_saved(now.unix_s),
                        }]
                    }
                    _ => self.notice(NoticeKind::Error, "usage: /export md|json PATH"),
                }
            }
            "/model" => {
                if arg.is_empty() {
                    self.notice(NoticeKind::Error, "usage: /model PATH");
                } else {
                    let mut effects = self.cancel_active();
                    let path = crate::config::expand_home(std::path::Path::new(arg));
                    self.model_path = path.clone();
                    self.engine = EngineStatus::Loading { progress: 0.0 };
                    self.notice(
                        NoticeKind::Info,
                        format!("loading {} (the conversation is kept)", path.display()),
                    );
                    effects.push(Effect::LoadModel(path));
                    return effects;
                }
            }
            "/ab" => return self.start_ab(arg, now),
            "/compare" => return self.open_compare(),
            "/new" => return self.new_conversation(),
            "/help" => {
                self.help_return = Mode::Chat;
                self.help_scroll = 0;
                self.mode = Mode::Help;
            }
            "/quit" | "/exit" => return self.quit(),
            other => self.notice(
                NoticeKind::Error,
                format!("unknown command {other}: try {}", SLASH_COMMANDS.join(" ")),
            ),
        }
        Vec::new()
    }

    fn run_bench(&mut self) -> Vec<Effect> {
        if self.bench.running.is_some() {
            return Vec::new();
        }
        if self.is_generating() || self.engine != EngineStatus::Ready {
            self.bench.error = Some("the engine is busy or not ready: try again when it is".into());
            return Vec::new();
        }
        let id = self.next_request_id;
        self.next_request_id += 1;
        self.bench.running = Some(id);
        self.bench.points.clear();
        self.bench.error = None;
        vec![Effect::BatchSweep {
            id,
            batches: self.bench.batches.clone(),
            n_prompt: self.bench.n_prompt,
            n_gen: self.bench.n_gen,
        }]
    }

    /// `/ab PATH`: answer the last exchange again with another model file, with the same
    /// turns, sampling settings and seed, and show both side by side.
    fn start_ab(&mut self, arg: &str, now: Now) -> Vec<Effect> {
        if arg.is_empty() {
            self.notice(
                NoticeKind::Error,
                "usage: /ab PATH (answers the last prompt again with another model file, side by side)",
            );
            return Vec::new();
        }
        if self.engine != EngineStatus::Ready {
            self.notice(NoticeKind::Warning, "the model is not ready yet");
            return Vec::new();
        }
        if self.is_generating() || self.bench.running.is_some() {
            self.notice(
                NoticeKind::Warning,
                "an answer is still streaming: Esc stops it, then /ab",
            );
            return Vec::new();
        }
        let last = self.conversation.exchanges.last();
        let Some((prompt, a)) = last.and_then(|ex| {
            ex.assistant
                .as_ref()
                .filter(|a| a.is_finished() && !a.text.is_empty())
                .map(|a| (ex.user.clone(), a.clone()))
        }) else {
            self.notice(
                NoticeKind::Error,
                "no answer to compare yet: /ab regenerates the last answer with another model",
            );
            return Vec::new();
        };
        let settings = a.settings.clone().unwrap_or_else(|| TurnSettings {
            sampling: self.sampling.clone(),
            max_tokens: self.max_tokens,
            ignore_eos: self.ignore_eos,
        });
        let path = crate::config::expand_home(std::path::Path::new(arg));
        let id = self.next_request_id;
        self.next_request_id += 1;
        let b_file = path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.notice(
            NoticeKind::Info,
            format!(
                "A/B: answering the last prompt again with {} (seed {})",
                path.display(),
                settings.sampling.seed
            ),
        );
        let effect = Effect::AbGenerate {
            id,
            path: path.clone(),
            messages: self.conversation.messages_for_last(),
            sampling: settings.sampling.clone(),
            max_tokens: settings.max_tokens,
            ignore_eos: settings.ignore_eos,
        };
        self.ab = Some(AbScreen {
            prompt,
            settings,
            a,
            b_path: path,
            b: AssistantTurn::new(id, b_file),
            b_model: None,
            b_pieces: Vec::new(),
            running: Some(id),
            started: now.instant,
            outcome: None,
            error: None,
            scroll: 0,
        });
        self.mode = Mode::Ab;
        vec![effect]
    }

    fn close_ab(&mut self) -> Vec<Effect> {
        self.mode = Mode::Chat;
        match self.ab.take().and_then(|ab| ab.running) {
            Some(id) => {
                self.notice(NoticeKind::Info, "A/B comparison stopped");
                vec![Effect::Cancel(id)]
            }
            None => Vec::new(),
        }
    }

    fn open_compare(&mut self) -> Vec<Effect> {
        self.mode = Mode::Compare;
        self.compare = CompareView::Reading;
        vec![Effect::LoadComparison]
    }

    /// Events of the A/B request in flight (model B's answer).
    fn on_ab_event(&mut self, event: EngineEvent) {
        let Some(ab) = self.ab.as_mut() else {
            return;
        };
        match event {
            EngineEvent::PrefillStarted {
                prompt_tokens,
                cached_tokens,
                ..
            } => ab.b.on_prefill_started(prompt_tokens, cached_tokens),
            EngineEvent::PrefillDone {
                template_tokenize,
                prefill,
                at,
                ..
            } => ab.b.on_prefill_done(template_tokenize, prefill, at),
            EngineEvent::Token { text, at, .. } if ab.b.phase.is_active() => {
                ab.b.on_token(&text, at);
            }
            EngineEvent::AbFinished { report, .. } => {
                let report = *report;
                ab.running = None;
                ab.b.model_file = Some(report.model.file_name.clone());
                ab.b_model = Some(report.model);
                ab.b_pieces = report.pieces;
                ab.b.on_finished(report.turn);
                let outcome = match first_divergence(&ab.a.text, &ab.b.text, &ab.b_pieces) {
                    None => AbOutcome::Identical,
                    Some(d) => AbOutcome::Diverges(d),
                };
                ab.outcome = Some(outcome);
                let text = match outcome {
                    AbOutcome::Identical => "A/B: B's answer is identical to A's".to_string(),
                    AbOutcome::Diverges(d) => {
                        format!(
                            "A/B: B's answer diverges from A's at token {}",
                            d.token_index
                        )
                    }
                };
                self.notice(NoticeKind::Info, text);
            }
            EngineEvent::Failed { error, .. } => {
                let message = error.to_string();
                ab.running = None;
                ab.b.on_failed(message.clone());
                ab.error = Some(message.clone());
                self.notice(NoticeKind::Error, format!("A/B: {message}"));
            }
            _ => {}
        }
    }

    fn quit(&mut self) -> Vec<Effect> {
        self.should_quit = true;
        let mut effects = self.cancel_active();
        if let Some(id) = self.ab.as_ref().and_then(|ab| ab.running) {
            effects.push(Effect::Cancel(id));
        }
        effects.push(Effect::Quit);
        effects
    }

    fn on_engine(&mut self, event: EngineEvent, now: Now) -> Vec<Effect> {
        let ab_request = self.ab.as_ref().and_then(|ab| ab.running);
        if ab_request.is_some() && event.request_id() == ab_request {
            self.on_ab_event(event);
            return Vec::new();
        }
        match event {
            EngineEvent::Loading { progress } => {
                self.engine = EngineStatus::Loading { progress };
            }
            EngineEvent::Ready(info) => {
                self.engine = EngineStatus::Ready;
                self.context_used = 0;
                if let Some(note) = &info.template_note {
                    self.notice(NoticeKind::Info, note.clone());
                }
                self.model = Some(*info);
            }
            EngineEvent::LoadFailed(e) => {
                self.engine = EngineStatus::Failed(e.to_string());
                self.notice(NoticeKind::Error, e.to_string());
            }
            EngineEvent::PrefillStarted {
                request_id,
                prompt_tokens,
                cached_tokens,
                dropped_messages,
            } => {
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.on_prefill_started(prompt_tokens, cached_tokens);
                    if dropped_messages > 0 {
                        let n_ctx = self.model.as_ref().map_or(0, |m| m.n_ctx);
                        self.notice(
                            NoticeKind::Warning,
                            format!(
                                "the conversation no longer fits the {n_ctx}-token context: the oldest {dropped_messages} messages were left out of this answer"
                            ),
                        );
                    }
                }
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
                if let Some(t) = self.conversation.turn_for(request_id) {
                    if t.phase.is_active() {
                        t.on_token(&text, at);
                    }
                }
            }
            EngineEvent::Finished { request_id, report } => {
                let used = report.context_used;
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.on_finished(*report);
                    self.context_used = used;
                    self.active_since = None;
                    return vec![Effect::Save(self.conversation.to_saved(now.unix_s))];
                }
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
            // A cancelled or closed A/B comparison: its late events are dropped.
            EngineEvent::AbFinished { .. } => {}
            EngineEvent::BatchSweepDone { request_id, error } => {
                if self.bench.running == Some(request_id) {
                    self.bench.running = None;
                    self.bench.error = error.map(|e| e.to_string());
                }
            }
            EngineEvent::Failed { request_id, error } => {
                if let Some(t) = self.conversation.turn_for(request_id) {
                    t.on_failed(error.to_string());
                    self.active_since = None;
                    self.notice(NoticeKind::Error, error.to_string());
                }
            }
        }
        Vec::new()
    }

    fn on_action(&mut self, action: Action, now: Now) -> Vec<Effect> {
        match action {
            Action::Send => return self.send(now),
            Action::Newline => self.input.insert_char('\n'),
            Action::Stop => {
                if self.is_generating() {
                    return self.cancel_active();
                }
                self.notice = None;
            }
            Action::Regenerate => return self.regenerate(now),
            Action::RecallOrUp => {
                if self.input.is_empty() {
                    if let Some(last) = self.sent_prompts.last().cloned() {
                        self.input.set(&last);
                    }
                } else {
                    self.scroll_by(1);
                }
            }
            Action::Down => self.scroll_by(-1),
            Action::NewConversation => return self.new_conversation(),
            Action::ToggleHelp => {
                if self.mode != Mode::Help {
                    self.help_return = self.mode;
                }
                self.mode = Mode::Help;
                self.help_scroll = 0;
            }
            Action::CloseHelp => {
                self.mode = match self.help_return {
                    Mode::Ab if self.ab.is_none() => Mode::Chat,
                    Mode::Help => Mode::Chat,
                    other => other,
                };
            }
            Action::OpenBench => self.mode = Mode::Bench,
            Action::RunBench => return self.run_bench(),
            Action::CloseBench => {
                self.mode = Mode::Chat;
                if let Some(id) = self.bench.running.take() {
                    return vec![Effect::Cancel(id)];
                }
            }
            Action::CloseAb => return self.close_ab(),
            Action::OpenCompare | Action::ReloadCompare => return self.open_compare(),
            Action::CloseCompare => self.mode = Mode::Chat,
            Action::Quit => return self.quit(),
            Action::PageUp => self.page(PAGE_LINES as i32),
            Action::PageDown => self.page(-(PAGE_LINES as i32)),
            Action::ScrollTop => self.scroll.lines_from_bottom = usize::MAX / 2,
            Action::ScrollBottom => self.scroll = Scroll::default(),
            Action::Backspace => self.input.backspace(),
            Action::Delete => self.input.delete(),
            Action::Left => self.input.left(),
            Action::Right => self.input.right(),
            Action::LineStart => self.input.home(),
            Action::LineEnd => self.input.end(),
            Action::Char(c) => self.input.insert_char(c),
        }
        Vec::new()
    }

    fn page(&mut self, lines: i32) {
        let down = |at: usize| {
            if lines > 0 {
                at.saturating_sub(lines as usize)
            } else {
                at.saturating_add(lines.unsigned_abs() as usize)
            }
        };
        match (self.mode, self.ab.as_mut()) {
            (Mode::Help, _) => self.help_scroll = down(self.help_scroll),
            (Mode::Ab, Some(ab)) => ab.scroll = down(ab.scroll),
            _ => self.scroll_by(lines),
        }
    }

    fn scroll_by(&mut self, lines: i32) {
        let s = &mut self.scroll.lines_from_bottom;
        *s = if lines >= 0 {
            s.saturating_add(lines as usize)
        } else {
            s.saturating_sub(lines.unsigned_abs() as usize)
        };
    }
}

/// The one update function.
pub fn update(app: &mut App, msg: Msg, now: Now) -> Vec<Effect> {
    match msg {
        Msg::Key(key) => match action_for(app.mode, app.input.is_empty(), key) {
            Some(action) => app.on_action(action, now),
            None => Vec::new(),
        },
        Msg::Paste(text) => {
            if app.mode == Mode::Chat {
                // Terminals send pasted newlines as \r; control characters other than
                // newline and tab are dropped so they never reach the screen raw.
                let clean: String = text
                    .replace("\r\n", "\n")
                    .replace('\r', "\n")
                    .chars()
                    .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
                    .collect();
                app.input.insert_str(&clean);
            }
            Vec::new()
        }
        Msg::Scroll(lines) => {
            app.scroll_by(lines);
            Vec::new()
        }
        Msg::Resize | Msg::Tick => Vec::new(),
        Msg::Engine(event) => app.on_engine(event, now),
        Msg::Saved(Ok(_)) => Vec::new(),
        Msg::Saved(Err(e)) => {
            app.notice(
                NoticeKind::Error,
                format!("could not save the conversation: {e}"),
            );
            Vec::new()
        }
        Msg::Exported(result) => {
            match result {
                Ok(p) => app.notice(NoticeKind::Info, format!("exported to {}", p.display())),
                Err(e) => app.notice(NoticeKind::Error, format!("export failed: {e}")),
            }
            Vec::new()
        }
        Msg::ComparisonLoaded(result) => {
            app.compare = match result {
                Ok(Some(c)) => CompareView::Loaded(Box::new(c)),
                Ok(None) => CompareView::Empty,
                Err(e) => CompareView::Failed(e),
            };
            Vec::new()
        }
    }
}

/// Whether the phase of the turn in flight is one whose display changes with time alone
/// (the waiting clock), so the loop redraws on ticks.
pub fn animates(app: &App) -> bool {
    matches!(app.engine, EngineStatus::Loading { .. })
        || app.bench.running.is_some()
        || app.ab.as_ref().is_some_and(|ab| ab.running.is_some())
        || app
            .conversation
            .active()
            .is_some_and(|a| matches!(a.phase, TurnPhase::Queued | TurnPhase::Prefill))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{LlamaCounters, StopReason, TurnReport};
    use crate::metrics::TurnTimeline;
    use std::time::Duration;

    fn now() -> Now {
        Now {
            instant: Instant::now(),
            unix_s: 1_700_000_000,
        }
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn with(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, m)
    }

    fn ready_app() -> App {
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

    fn type_text(app: &mut App, text: &str) {
        for c in text.chars() {
            update(app, Msg::Key(key(KeyCode::Char(c))), now());
        }
    }

    fn finished(id: RequestId, text: &str, reason: StopReason) -> Msg {
        Msg::Engine(EngineEvent::Finished {
            request_id: id,
            report: Box::new(TurnReport {
                text: text.into(),
                stop_reason: reason,
                timeline: TurnTimeline {
                    token_ready_at: vec![Duration::from_millis(10)],
                    ..TurnTimeline::default()
                },
                context_used: 20,
                dropped_messages: 0,
                llama_counters: LlamaCounters::default(),
                first_logits: None,
            }),
        })
    }

    #[test]
    fn key_table() {
        use Action as A;
        let chat = |k, empty| action_for(Mode::Chat, empty, k);
        assert_eq!(chat(key(KeyCode::Enter), false), Some(A::Send));
        assert_eq!(
            chat(with(KeyCode::Enter, KeyModifiers::ALT), false),
            Some(A::Newline)
        );
        assert_eq!(
            chat(with(KeyCode::Enter, KeyModifiers::SHIFT), false),
            Some(A::Newline)
        );
        assert_eq!(
            chat(with(KeyCode::Char('j'), KeyModifiers::CONTROL), false),
            Some(A::Newline)
        );
        assert_eq!(chat(key(KeyCode::Esc), true), Some(A::Stop));
        assert_eq!(
            chat(with(KeyCode::Char('r'), KeyModifiers::CONTROL), true),
            Some(A::Regenerate)
        );
        assert_eq!(
            chat(with(KeyCode::Char('n'), KeyModifiers::CONTROL), true),
            Some(A::NewConversation)
        );
        assert_eq!(
            chat(with(KeyCode::Char('c'), KeyModifiers::CONTROL), false),
            Some(A::Quit)
        );
        assert_eq!(
            chat(with(KeyCode::Char('q'), KeyModifiers::CONTROL), false),
            Some(A::Quit)
        );
        assert_eq!(chat(key(KeyCode::F(1)), false), Some(A::ToggleHelp));
        assert_eq!(chat(key(KeyCode::Char('?')), true), Some(A::ToggleHelp));
        assert_eq!(chat(key(KeyCode::Char('?')), false), Some(A::Char('?')));
        assert_eq!(chat(key(KeyCode::Up), true), Some(A::RecallOrUp));
        assert_eq!(chat(key(KeyCode::PageUp), false), Some(A::PageUp));
        assert_eq!(chat(key(KeyCode::Home), true), Some(A::ScrollTop));
        assert_eq!(chat(key(KeyCode::Home), false), Some(A::LineStart));
        assert_eq!(chat(key(KeyCode::End), true), Some(A::ScrollBottom));
        assert_eq!(chat(key(KeyCode::Char('é')), false), Some(A::Char('é')));
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::Esc)),
            Some(A::CloseHelp)
        );
        assert_eq!(action_for(Mode::Help, true, key(KeyCode::Char('x'))), None);
        assert_eq!(chat(key(KeyCode::F(3)), true), Some(A::OpenCompare));
        for (n, mode) in FUNCTION_KEYS {
            let mut app = ready_app();
            update(&mut app, Msg::Key(key(KeyCode::F(*n))), now());
            assert_eq!(app.mode, *mode, "F{n}");
        }
        assert_eq!(chat(key(KeyCode::F(2)), true), Some(A::OpenBench));
        let compare = |k| action_for(Mode::Compare, true, k);
        assert_eq!(compare(key(KeyCode::Esc)), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::F(3))), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::Char('r'))), Some(A::ReloadCompare));
        assert_eq!(compare(key(KeyCode::F(1))), Some(A::ToggleHelp));
        assert_eq!(compare(key(KeyCode::Char('x'))), None);
        let ab = |k| action_for(Mode::Ab, true, k);
        assert_eq!(ab(key(KeyCode::Esc)), Some(A::CloseAb));
        assert_eq!(ab(key(KeyCode::Char('q'))), Some(A::CloseAb));
        assert_eq!(ab(key(KeyCode::PageDown)), Some(A::PageDown));
        assert_eq!(ab(key(KeyCode::Up)), Some(A::PageUp));
        assert_eq!(ab(key(KeyCode::Char('?'))), Some(A::ToggleHelp));
        assert_eq!(ab(key(KeyCode::Enter)), None);
        assert_eq!(
            ab(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(A::Quit)
        );
        let mut release = key(KeyCode::Enter);
        release.kind = KeyEventKind::Release;
        assert_eq!(chat(release, false), None, "only presses count");
    }

    #[test]
    fn send_starts_a_turn_and_events_fill_it() {
        let mut app = ready_app();
        type_text(&mut app, "hi");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Generate { id, messages, .. }) = fx.first().cloned() else {
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

    #[test]
    fn nothing_is_sent_while_loading_or_streaming() {
        let mut app = ready_app();
        app.engine = EngineStatus::Loading { progress: 0.5 };
        type_text(&mut app, "x");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        assert_eq!(app.input.text, "x", "the input is kept");
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
        assert_eq!(app.input.text, "question");
        app.input.take();
        let seed = app.sampling.seed;
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('r'), KeyModifiers::CONTROL)),
            now(),
        );
        let Some(Effect::Generate {
            messages, sampling, ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert_eq!(messages.len(), 1, "the old answer is not sent again");
        assert_eq!(sampling.seed, seed.wrapping_add(1));
        assert_eq!(app.conversation.exchanges.len(), 1);
    }

    #[test]
    fn slash_commands() {
        let mut app = ready_app();
        let run = |app: &mut App, line: &str| {
            app.input.set(line);
            update(app, Msg::Key(key(KeyCode::Enter)), now())
        };
        run(&mut app, "/temp 0.2");
        assert_eq!(app.sampling.temperature, 0.2);
        run(&mut app, "/top_p 0.5");
        assert_eq!(app.sampling.top_p, 0.5);
        run(&mut app, "/max 33");
        assert_eq!(app.max_tokens, 33);
        run(&mut app, "/seed 9");
        assert_eq!(app.sampling.seed, 9);
        run(&mut app, "/system be terse");
        assert_eq!(app.conversation.system_prompt.as_deref(), Some("be terse"));
        run(&mut app, "/temp -3");
        assert_eq!(app.notice.as_ref().map(|n| n.kind), Some(NoticeKind::Error));
        assert_eq!(app.sampling.temperature, 0.2);
        run(&mut app, "/bogus");
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("unknown command"));
        let fx = run(&mut app, "/export md /tmp/x.md");
        assert!(matches!(
            &fx[..],
            [Effect::Export {
                format: ExportFormat::Markdown,
                ..
            }]
        ));
        let fx = run(&mut app, "/model /m/other.gguf");
        assert_eq!(fx, vec![Effect::LoadModel("/m/other.gguf".into())]);
        assert!(matches!(app.engine, EngineStatus::Loading { .. }));
        let fx = run(&mut app, "/new");
        assert!(fx.is_empty());
        assert_eq!(app.conversation.id, "c2");
        let fx = run(&mut app, "/quit");
        assert_eq!(fx, vec![Effect::Quit]);
    }

    #[test]
    fn paste_keeps_newlines_and_drops_control_characters() {
        let mut app = ready_app();
        update(&mut app, Msg::Paste("a\r\nb\x1b[31mc\x07".into()), now());
        assert_eq!(app.input.text, "a\nb[31mc");
    }

    #[test]
    fn input_editing_is_char_safe() {
        let mut i = Input::default();
        i.insert_str("héllo\nwörld");
        i.home();
        assert_eq!(i.cursor_line_col(), (1, 0));
        i.left();
        i.backspace();
        assert_eq!(i.text, "héll\nwörld");
        i.end();
        i.right();
        i.delete();
        assert_eq!(i.text, "héll\nörld");
        i.set("ü");
        i.backspace();
        i.backspace();
        assert!(i.is_empty());
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

    #[test]
    fn bench_screen_runs_a_sweep_and_collects_points() {
        let mut app = ready_app();
        update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        assert_eq!(app.mode, Mode::Bench);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::BatchSweep { id, batches, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        assert_eq!(batches, app.bench.batches);
        assert!(
            update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty(),
            "one at a time"
        );
        let point = crate::plot::BatchPoint {
            batch: 1,
            aggregate_tok_per_s: 10.0,
            per_sequence_tok_per_s: 10.0,
            itl_p50_ms: 100.0,
            itl_p99_ms: 120.0,
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::BatchPoint {
                request_id: id,
                point,
                prefill_ms: 5.0,
            }),
            now(),
        );
        assert_eq!(app.bench.points.len(), 1);
        // Esc stops a running sweep and returns to the chat.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.bench.running.is_none());
    }

    /// An app whose last exchange has a finished answer; returns its request id.
    fn answered_app() -> (App, RequestId) {
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

    fn run_line(app: &mut App, line: &str) -> Vec<Effect> {
        app.input.set(line);
        update(app, Msg::Key(key(KeyCode::Enter)), now())
    }

    fn ab_finished(id: RequestId, text: &str, pieces: &[&str]) -> Msg {
        let Msg::Engine(EngineEvent::Finished { report, .. }) =
            finished(id, text, StopReason::EndOfGeneration)
        else {
            unreachable!()
        };
        let model = ModelInfo {
            file_name: "b.gguf".into(),
            ..ModelInfo::default()
        };
        Msg::Engine(EngineEvent::AbFinished {
            request_id: id,
            report: Box::new(crate::engine::AbReport {
                model,
                turn: *report,
                pieces: pieces.iter().map(|p| p.to_string()).collect(),
            }),
        })
    }

    #[test]
    fn ab_needs_a_path_and_a_previous_answer() {
        let mut app = ready_app();
        assert!(run_line(&mut app, "/ab").is_empty());
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("usage: /ab PATH"));
        assert!(run_line(&mut app, "/ab /m/b.gguf").is_empty());
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(notice.text.contains("no answer to compare"), "{notice:?}");
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        // Not while an answer streams.
        type_text(&mut app, "q");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(run_line(&mut app, "/ab /m/b.gguf").is_empty());
        assert_eq!(app.notice.as_ref().unwrap().kind, NoticeKind::Warning);
    }

    #[test]
    fn ab_regenerates_the_last_answer_with_another_model_and_finds_the_divergence() {
        let (mut app, a_id) = answered_app();
        // Settings changed after the answer: B still uses the answer's own.
        run_line(&mut app, "/seed 7");
        let before = app.conversation.clone();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::AbGenerate {
            id,
            path,
            messages,
            sampling,
            max_tokens,
            ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert_ne!(id, a_id);
        assert_eq!(path, PathBuf::from("/m/b.gguf"));
        assert_eq!(messages, before.messages_for_last());
        assert_eq!(
            messages.last().map(|m| m.content.as_str()),
            Some("question")
        );
        assert_eq!(sampling.seed, 1234, "the seed A was sampled with");
        assert_eq!(max_tokens, 64);
        assert_eq!(app.mode, Mode::Ab);
        assert!(animates(&app));
        // B's events fill the B side, never the conversation.
        for (i, piece) in ["Hello", " there"].iter().enumerate() {
            update(
                &mut app,
                Msg::Engine(EngineEvent::Token {
                    request_id: id,
                    index: i,
                    text: piece.to_string(),
                    at: Duration::from_millis(10 + i as u64),
                }),
                now(),
            );
        }
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.b.text, "Hello there");
        assert_eq!(ab.a.text, "Hello world");
        let fx = update(
            &mut app,
            ab_finished(id, "Hello there", &["Hello", " there"]),
            now(),
        );
        assert!(fx.is_empty(), "B is not saved: {fx:?}");
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.running, None);
        assert_eq!(ab.b.model_file.as_deref(), Some("b.gguf"));
        assert_eq!(
            ab.outcome,
            Some(AbOutcome::Diverges(Divergence {
                token_index: 1,
                at_byte: 6
            }))
        );
        assert_eq!(app.conversation, before, "the conversation is untouched");
        assert!(!animates(&app));
        // Esc closes; nothing to cancel.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert!(fx.is_empty());
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        // The next turn goes on normally.
        type_text(&mut app, "next");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(matches!(fx.as_slice(), [Effect::Generate { .. }]));
    }

    #[test]
    fn ab_identical_answers_and_failures() {
        let (mut app, _) = answered_app();
        let fx = run_line(&mut app, "/ab ~/b.gguf");
        let Some(Effect::AbGenerate { id, path, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        assert!(!path.starts_with("~"), "the home dir is expanded");
        update(
            &mut app,
            ab_finished(id, "Hello world", &["Hello", " world"]),
            now(),
        );
        assert_eq!(app.ab.as_ref().unwrap().outcome, Some(AbOutcome::Identical));
        assert!(app.notice.as_ref().unwrap().text.contains("identical"));
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        // A missing file: a clear message, the screen shows it, nothing panics.
        let fx = run_line(&mut app, "/ab /nope.gguf");
        let Some(Effect::AbGenerate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::Failed {
                request_id: id,
                error: crate::engine::EngineError::ModelNotFound("/nope.gguf".into()),
            }),
            now(),
        );
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(notice.text.contains("/nope.gguf"), "{notice:?}");
        assert!(app.ab.as_ref().unwrap().error.is_some());
        assert_eq!(app.engine, EngineStatus::Ready, "the chat's model is fine");
    }

    #[test]
    fn esc_cancels_b_and_its_late_events_are_dropped() {
        let (mut app, _) = answered_app();
        let before = app.conversation.clone();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::AbGenerate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        update(
            &mut app,
            Msg::Engine(EngineEvent::Token {
                request_id: id,
                index: 0,
                text: "late".into(),
                at: Duration::from_millis(1),
            }),
            now(),
        );
        update(&mut app, ab_finished(id, "late", &["late"]), now());
        assert_eq!(app.conversation, before);
        assert!(app.ab.is_none());
        // Quitting while B runs cancels it too.
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::AbGenerate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            now(),
        );
        assert_eq!(fx, vec![Effect::Cancel(id), Effect::Quit]);
    }

    #[test]
    fn compare_screen_reads_the_log_through_an_effect() {
        let mut app = ready_app();
        let fx = update(&mut app, Msg::Key(key(KeyCode::F(3))), now());
        assert_eq!(fx, vec![Effect::LoadComparison]);
        assert_eq!(app.mode, Mode::Compare);
        assert_eq!(app.compare, CompareView::Reading);
        update(&mut app, Msg::ComparisonLoaded(Ok(None)), now());
        assert_eq!(app.compare, CompareView::Empty);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Char('r'))), now());
        assert_eq!(fx, vec![Effect::LoadComparison]);
        update(&mut app, Msg::ComparisonLoaded(Err("denied".into())), now());
        assert_eq!(app.compare, CompareView::Failed("denied".into()));
        // Help opened from the compare screen returns to it.
        update(&mut app, Msg::Key(key(KeyCode::F(1))), now());
        assert_eq!(app.mode, Mode::Help);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Compare);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Chat);
        let fx = run_line(&mut app, "/compare");
        assert_eq!(fx, vec![Effect::LoadComparison]);
        assert_eq!(app.mode, Mode::Compare);
    }
}
