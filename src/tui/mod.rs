//! The chat's terminal side: setting the terminal up and restoring it (on quit, on error and on
//! panic), and the event loop. The loop drains every queued message before drawing and draws
//! at most once per frame, never once per token; only ratatui writes to the terminal.

use std::io::{self, Stdout};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, Event,
    MouseEventKind,
};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::{Backend, CrosstermBackend};
use ratatui::Terminal;

use crate::app::{animates, update, App, Effect, ExportFormat, Msg, Now};
use crate::engine::{EngineConfig, EngineHandle, EventReceiver};

/// Shortest time between two frames after the user did something (60 Hz).
pub const FRAME_INTERVAL: Duration = Duration::from_millis(16);
/// Shortest time between two frames that only show streamed tokens (20 Hz). The interval
/// grows with what a draw costs (see `STREAM_DRAW_BUDGET`) up to `SLOWEST_STREAM_FRAME_INTERVAL`.
pub const STREAM_FRAME_INTERVAL: Duration = Duration::from_millis(50);
/// Longest time between two frames of streamed tokens (10 Hz).
pub const SLOWEST_STREAM_FRAME_INTERVAL: Duration = Duration::from_millis(100);
/// The share of one core that drawing streamed tokens may take. On a machine whose cores
/// llama.cpp's threads fill, every millisecond the UI runs costs the decode more than a
/// millisecond (the other threads wait at their barrier), so the stream frame interval is
/// fitted to the measured cost of a draw (BENCHMARKS.md).
pub const STREAM_DRAW_BUDGET: f64 = 0.005;
/// How often time-driven parts of the screen (waiting clocks, loading) refresh.
pub const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// A hidden test switch: when set, the chat panics right after its first frame, so tests can
/// check that the terminal is restored and the history kept.
pub const INJECT_PANIC_ENV: &str = "TOKSCOPE_INJECT_PANIC";

/// Every this many ticks (once a second) the terminal's size is checked, in case a resize
/// event was missed.
const SIZE_CHECK_TICKS: u32 = 10;

/// Lines one mouse-wheel notch scrolls.
const WHEEL_LINES: i32 = 3;

static TERMINAL_ACTIVE: AtomicBool = AtomicBool::new(false);

/// Put the terminal into the TUI's mode: raw input, alternate screen, paste and mouse events.
pub fn enter() -> io::Result<Terminal<CrosstermBackend<Stdout>>> {
    enable_raw_mode()?;
    TERMINAL_ACTIVE.store(true, Ordering::SeqCst);
    let mut stdout = io::stdout();
    if let Err(e) = execute!(
        stdout,
        EnterAlternateScreen,
        EnableBracketedPaste,
        EnableMouseCapture
    ) {
        restore();
        return Err(e);
    }
    // A fixed viewport, resized when the terminal says it changed (and checked on every tick):
    // a fullscreen one asks the terminal for its size before every frame, which opens /dev/tty
    // each time (a tenth of the UI thread's CPU while streaming).
    let backend = CrosstermBackend::new(stdout);
    let area = match backend.size() {
        Ok(size) => ratatui::layout::Rect::new(0, 0, size.width, size.height),
        Err(e) => {
            restore();
            return Err(e);
        }
    };
    Terminal::with_options(
        backend,
        ratatui::TerminalOptions {
            viewport: ratatui::Viewport::Fixed(area),
        },
    )
    .inspect_err(|_| restore())
}

/// Give the terminal back as it was. Safe to call more than once and from the panic hook.
pub fn restore() {
    if TERMINAL_ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = execute!(
            io::stdout(),
            DisableMouseCapture,
            DisableBracketedPaste,
            LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = disable_raw_mode();
    }
}

/// Restores the terminal when dropped (normal exit and early returns alike).
pub struct RestoreGuard;

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Decides when to draw: only when something changed, and at most once per frame interval:
/// the short one when the user did something, the longer one for streamed output alone.
#[derive(Debug, Clone)]
pub struct FrameScheduler {
    pub input_interval: Duration,
    /// The current stream frame interval, between the two bounds below.
    pub stream_interval: Duration,
    fastest_stream: Duration,
    slowest_stream: Duration,
    /// Moving average of what a draw costs (wall time, output included).
    draw_cost: Option<Duration>,
    last_draw: Option<Instant>,
    dirty: bool,
    /// A change the user caused is pending (drawn at the input rate).
    urgent: bool,
}

impl FrameScheduler {
    /// Fixed intervals.
    pub fn new(input_interval: Duration, stream_interval: Duration) -> Self {
        Self::adaptive(input_interval, stream_interval, stream_interval)
    }

    /// A stream interval fitted to the cost of a draw, between `fastest` and `slowest`.
    pub fn adaptive(input_interval: Duration, fastest: Duration, slowest: Duration) -> Self {
        Self {
            input_interval,
            stream_interval: fastest,
            fastest_stream: fastest,
            slowest_stream: slowest.max(fastest),
            draw_cost: None,
            last_draw: None,
            dirty: true,
            urgent: true,
        }
    }

    /// Something changed; `urgent` when the user caused it (a key, a paste, a resize).
    pub fn mark_dirty(&mut self, urgent: bool) {
        self.dirty = true;
        self.urgent |= urgent;
    }

    fn interval(&self) -> Duration {
        if self.urgent {
            self.input_interval
        } else {
            self.stream_interval
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        self.dirty
            && self
                .last_draw
                .is_none_or(|t| now.saturating_duration_since(t) >= self.interval())
    }

    /// When a pending change may be drawn (None when nothing is pending).
    pub fn next_frame_at(&self) -> Option<Instant> {
        self.dirty.then(|| {
            self.last_draw
                .map_or_else(Instant::now, |t| t + self.interval())
        })
    }

    /// Until when streamed output alone need not be looked at (the next stream frame).
    pub fn stream_quiet_until(&self) -> Instant {
        self.last_draw
            .map_or_else(Instant::now, |t| t + self.stream_interval)
    }

    /// A draw took `cost`: keep drawing streamed tokens within `STREAM_DRAW_BUDGET` of a core.
    pub fn record_draw_cost(&mut self, cost: Duration) {
        let average = match self.draw_cost {
            Some(previous) => (previous * 7 + cost) / 8,
            None => cost,
        };
        self.draw_cost = Some(average);
        self.stream_interval = average
            .div_f64(STREAM_DRAW_BUDGET)
            .clamp(self.fastest_stream, self.slowest_stream);
    }

    pub fn drawn(&mut self, now: Instant) {
        self.dirty = false;
        self.urgent = false;
        self.last_draw = Some(now);
    }
}

/// The state, the terminal and the frame scheduler: what the loop drives. Generic over the
/// backend so that tests drive it with ratatui's `TestBackend`.
pub struct Driver<B: Backend> {
    pub terminal: Terminal<B>,
    pub app: App,
    pub frames: FrameScheduler,
    pub draws: usize,
}

impl<B: Backend> Driver<B> {
    pub fn new(terminal: Terminal<B>, app: App) -> Self {
        Self {
            terminal,
            app,
            frames: FrameScheduler::adaptive(
                FRAME_INTERVAL,
                STREAM_FRAME_INTERVAL,
                SLOWEST_STREAM_FRAME_INTERVAL,
            ),
            draws: 0,
        }
    }

    /// Apply every message of a batch; effects are returned in order.
    pub fn apply_all(&mut self, msgs: Vec<Msg>, now: Now) -> Vec<Effect> {
        let mut effects = Vec::new();
        for msg in msgs {
            let redraw = !matches!(msg, Msg::Tick) || animates(&self.app);
            let urgent = !matches!(msg, Msg::Tick | Msg::Engine(_));
            effects.extend(update(&mut self.app, msg, now));
            if redraw {
                self.frames.mark_dirty(urgent);
            }
        }
        effects
    }

    /// Match the terminal's size (after a resize event, and on ticks in case one was missed);
    /// a change redraws everything at once.
    pub fn sync_size(&mut self) -> io::Result<()> {
        let size = self.terminal.backend().size()?;
        let area = ratatui::layout::Rect::new(0, 0, size.width, size.height);
        if area != self.terminal.get_frame().area() {
            self.terminal.resize(area)?;
            self.frames.mark_dirty(true);
        }
        Ok(())
    }

    /// Draw if something changed and a frame is due. Returns whether it drew.
    pub fn draw_if_due(&mut self, now: Instant) -> io::Result<bool> {
        if !self.frames.due(now) {
            return Ok(false);
        }
        let app = &self.app;
        let started = Instant::now();
        self.terminal.draw(|f| crate::ui::draw(f, app, now))?;
        self.frames.record_draw_cost(started.elapsed());
        self.frames.drawn(now);
        self.draws += 1;
        Ok(true)
    }
}

/// A chat turn's request to the engine, stamped now.
fn chat_request(
    id: crate::engine::RequestId,
    messages: Vec<crate::engine::ChatMessage>,
    sampling: crate::engine::SamplingParams,
    max_tokens: u32,
    ignore_eos: bool,
) -> crate::engine::GenerateRequest {
    crate::engine::GenerateRequest {
        id,
        messages,
        sampling,
        max_tokens,
        capture_first_logits: false,
        ignore_eos,
        submitted_at: Instant::now(),
    }
}

/// Take every engine event already queued, without waiting.
pub fn drain_engine(rx: &mut EventReceiver, into: &mut Vec<Msg>) {
    while let Ok(event) = rx.try_recv() {
        into.push(Msg::Engine(event));
    }
}

fn terminal_msg(event: Event) -> Option<Msg> {
    match event {
        Event::Key(k) => Some(Msg::Key(k)),
        Event::Paste(s) => Some(Msg::Paste(s)),
        Event::Resize(..) => Some(Msg::Resize),
        Event::Mouse(m) => match m.kind {
            MouseEventKind::ScrollUp => Some(Msg::Scroll(WHEEL_LINES)),
            MouseEventKind::ScrollDown => Some(Msg::Scroll(-WHEEL_LINES)),
            _ => None,
        },
        _ => None,
    }
}

pub fn now() -> Now {
    Now {
        instant: Instant::now(),
        unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    }
}

/// Where the effects go: the engine, the history dir; and the live token counter of the input.
pub struct Effects<'a> {
    pub engine: &'a mut EngineHandle,
    pub engine_config: EngineConfig,
    pub history_dir: PathBuf,
    /// Where the comparisons log is (the compare screen reads it).
    pub data_dir: PathBuf,
    pub counter: Option<crate::tokcount::TokenCounter>,
    /// The input text last counted, so typing recounts only what changed.
    pub counted: Option<String>,
}

impl Effects<'_> {
    /// Keep `app.input_tokens` in step with the input: the message's tokens as the engine will
    /// tokenize them (the template trims the message, so the count does too).
    pub fn recount(&mut self, app: &mut App) {
        let Some(counter) = &self.counter else {
            app.input_tokens = None;
            return;
        };
        if self.counted.as_deref() == Some(app.input.text.as_str()) {
            return;
        }
        app.input_tokens = Some((counter.count(app.input.text.trim()), counter.source()));
        self.counted = Some(app.input.text.clone());
    }

    /// Run effects; returns messages reporting their outcomes, and whether to quit.
    pub fn run(&mut self, effects: Vec<Effect>, app: &mut App) -> (Vec<Msg>, bool) {
        let mut msgs = Vec::new();
        let mut quit = false;
        for effect in effects {
            match effect {
                Effect::Generate {
                    id,
                    messages,
                    sampling,
                    max_tokens,
                    ignore_eos,
                } => {
                    let request = chat_request(id, messages, sampling, max_tokens, ignore_eos);
                    if let Err(e) = self.engine.send_request(request) {
                        msgs.push(Msg::Engine(crate::engine::EngineEvent::Failed {
                            request_id: id,
                            error: e,
                        }));
                    }
                }
                Effect::Cancel(id) => self.engine.cancel(id),
                Effect::BatchSweep {
                    id,
                    batches,
                    n_prompt,
                    n_gen,
                } => {
                    if let Err(e) = self.engine.batch_sweep(id, batches, n_prompt, n_gen) {
                        msgs.push(Msg::Engine(crate::engine::EngineEvent::BatchSweepDone {
                            request_id: id,
                            error: Some(e),
                        }));
                    }
                }
                Effect::AbGenerate {
                    id,
                    path,
                    messages,
                    sampling,
                    max_tokens,
                    ignore_eos,
                } => {
                    let request = chat_request(id, messages, sampling, max_tokens, ignore_eos);
                    if let Err(e) = self.engine.ab_generate(path, request) {
                        msgs.push(Msg::Engine(crate::engine::EngineEvent::Failed {
                            request_id: id,
                            error: e,
                        }));
                    }
                }
                Effect::LoadComparison => {
                    msgs.push(Msg::ComparisonLoaded(latest_comparison(&self.data_dir)));
                }
                Effect::LoadModel(path) => {
                    // Count with the new model's vocabulary from now on.
                    self.counter = crate::tokcount::TokenCounter::for_model(&path, None).ok();
                    self.counted = None;
                    let mut config = self.engine_config.clone();
                    config.model_path = path;
                    if let Err(e) = self.engine.load_model(config) {
                        msgs.push(Msg::Engine(crate::engine::EngineEvent::LoadFailed(e)));
                    }
                }
                Effect::Save(conversation) => {
                    let result = crate::history::save(&self.history_dir, &conversation)
                        .map_err(|e| e.to_string());
                    msgs.push(Msg::Saved(result));
                }
                Effect::Export {
                    format,
                    path,
                    conversation,
                } => {
                    let contents = match format {
                        ExportFormat::Markdown => {
                            Ok(crate::history::export_markdown(&conversation))
                        }
                        ExportFormat::Json => crate::history::export_json(&conversation),
                    };
                    let result = contents
                        .and_then(|c| crate::history::write_private(&path, c.as_bytes()))
                        .map(|()| path.clone())
                        .map_err(|e| e.to_string());
                    msgs.push(Msg::Exported(result));
                }
                Effect::Quit => quit = true,
            }
        }
        app.fresh_conversation_id = crate::history::new_id(SystemTime::now());
        (msgs, quit)
    }
}

/// The newest comparison in the comparisons log of `data_dir` (for the compare screen).
pub fn latest_comparison(
    data_dir: &std::path::Path,
) -> Result<Option<crate::compare::Comparison>, String> {
    let path = crate::compare::log::comparisons_path(data_dir);
    crate::compare::log::latest(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// How the chat ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatEnd {
    /// The user quit.
    Quit,
    /// A signal asked the process to end (SIGTERM, SIGHUP, SIGINT): the number.
    Signal(i32),
}

/// Run the chat until the user quits or a termination signal arrives. Finished turns are
/// already on disk; the terminal is restored on every way out.
pub fn run_chat(
    app: App,
    engine: &mut EngineHandle,
    mut events: EventReceiver,
    engine_config: EngineConfig,
) -> io::Result<(App, ChatEnd)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .enable_io()
        .build()?;
    let terminal = enter()?;
    let _guard = RestoreGuard;
    let mut driver = Driver::new(terminal, app);
    driver.app.fresh_conversation_id = crate::history::new_id(SystemTime::now());
    let mut effects = Effects {
        counter: crate::tokcount::TokenCounter::for_model(&engine_config.model_path, None).ok(),
        counted: None,
        engine,
        engine_config,
        history_dir: crate::history::history_dir(&crate::paths::data_dir()),
        data_dir: crate::paths::data_dir(),
    };
    let inject_panic = std::env::var_os(INJECT_PANIC_ENV).is_some();
    let end = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut term_events = TerminalInput::start();
        let mut ticks = tokio::time::interval(TICK_INTERVAL);
        let mut tick_count: u32 = 0;
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            driver.draw_if_due(Instant::now())?;
            if inject_panic
                && driver.draws > 0
                && driver.app.engine == crate::app::EngineStatus::Ready
            {
                panic!("injected panic ({INJECT_PANIC_ENV} is set)");
            }
            let frame_at = driver.frames.next_frame_at();
            let engine_gate = driver.frames.stream_quiet_until();
            let mut batch = Vec::new();
            tokio::select! {
                ev = term_events.events.recv() => match ev {
                    Some(Ok(e)) => {
                        if matches!(e, Event::Resize(..)) {
                            driver.sync_size()?;
                        }
                        batch.extend(terminal_msg(e));
                    }
                    Some(Err(e)) => return Err(e),
                    None => return Ok(ChatEnd::Quit),
                },
                _ = sigterm.recv() => return Ok(ChatEnd::Signal(15)),
                _ = sighup.recv() => return Ok(ChatEnd::Signal(1)),
                _ = sigint.recv() => return Ok(ChatEnd::Signal(2)),
                // Engine events are taken at most once per stream frame: tokens that arrive
                // meanwhile wait in the channel (their timestamps were taken on the engine
                // thread) and are drained together, so the UI wakes 10 to 20 times a second while
                // streaming instead of once per token, and leaves the cores to llama.cpp.
                ev = events.recv(), if Instant::now() >= engine_gate => match ev {
                    Some(e) => batch.push(Msg::Engine(e)),
                    None => return Err(io::Error::other("the engine stopped unexpectedly")),
                },
                _ = tokio::time::sleep_until(engine_gate.into()), if Instant::now() < engine_gate => {}
                _ = ticks.tick() => {
                    tick_count = tick_count.wrapping_add(1);
                    if tick_count % SIZE_CHECK_TICKS == 0 {
                        driver.sync_size()?;
                    }
                    batch.push(Msg::Tick);
                }
                _ = sleep_until_opt(frame_at) => {}
            }
            // Drain everything else already queued before drawing once.
            while let Ok(Ok(e)) = term_events.events.try_recv() {
                if matches!(e, Event::Resize(..)) {
                    driver.sync_size()?;
                }
                batch.extend(terminal_msg(e));
            }
            drain_engine(&mut events, &mut batch);
            let mut pending = batch;
            while !pending.is_empty() {
                let fx = driver.apply_all(pending, now());
                let (outcomes, quit) = effects.run(fx, &mut driver.app);
                if quit {
                    return Ok(ChatEnd::Quit);
                }
                pending = outcomes;
            }
            effects.recount(&mut driver.app);
        }
    })?;
    if let (ChatEnd::Signal(_), Some(active)) = (end, driver.app.conversation.active()) {
        // Stop the answer in flight; its partial text is not saved (finished turns are).
        engine.cancel(active.request_id);
    }
    Ok((driver.app, end))
}

/// Terminal input read on a thread of its own and handed to the event loop over a channel.
///
/// crossterm's `EventStream` polls its global reader from the loop's thread while a helper
/// thread of its own blocks on the same lock, so every turn of the loop spun on that lock
/// (`sched_yield`): a fifth of the UI thread's CPU time while streaming, taken from llama.cpp's
/// threads. Here one thread owns the reader and the loop only waits on a channel.
struct TerminalInput {
    events: tokio::sync::mpsc::UnboundedReceiver<io::Result<Event>>,
    stop: std::sync::Arc<AtomicBool>,
}

impl TerminalInput {
    /// How long the reader waits for input before checking whether it should stop.
    const POLL: Duration = Duration::from_millis(100);

    fn start() -> Self {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stop_reader = std::sync::Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("terminal-input".into())
            .spawn(move || {
                while !stop_reader.load(Ordering::Relaxed) {
                    let next = match crossterm::event::poll(Self::POLL) {
                        Ok(false) => continue,
                        Ok(true) => crossterm::event::read(),
                        Err(e) => Err(e),
                    };
                    let failed = next.is_err();
                    if tx.send(next).is_err() || failed {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the terminal input thread: {e}");
        }
        Self { events, stop }
    }
}

impl Drop for TerminalInput {
    fn drop(&mut self) {
        // The reader notices within `POLL` and exits, so it never reads the shell's keys.
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduler() -> FrameScheduler {
        FrameScheduler::adaptive(
            FRAME_INTERVAL,
            STREAM_FRAME_INTERVAL,
            SLOWEST_STREAM_FRAME_INTERVAL,
        )
    }

    #[test]
    fn the_stream_interval_follows_the_draw_cost() {
        let mut f = scheduler();
        assert_eq!(f.stream_interval, STREAM_FRAME_INTERVAL);
        // Cheap draws: the fastest rate.
        f.record_draw_cost(Duration::from_micros(50));
        assert_eq!(f.stream_interval, STREAM_FRAME_INTERVAL);
        // 0.35 ms a draw at 0.5% of a core: one frame every 70 ms.
        let mut g = scheduler();
        g.record_draw_cost(Duration::from_micros(350));
        assert_eq!(g.stream_interval, Duration::from_millis(70));
        // Expensive draws: never slower than the slowest rate.
        for _ in 0..50 {
            g.record_draw_cost(Duration::from_millis(5));
        }
        assert_eq!(g.stream_interval, SLOWEST_STREAM_FRAME_INTERVAL);
        // Input frames keep their rate.
        assert_eq!(g.input_interval, FRAME_INTERVAL);
        // A fixed scheduler stays fixed.
        let mut fixed = FrameScheduler::new(FRAME_INTERVAL, STREAM_FRAME_INTERVAL);
        fixed.record_draw_cost(Duration::from_millis(5));
        assert_eq!(fixed.stream_interval, STREAM_FRAME_INTERVAL);
    }
}
