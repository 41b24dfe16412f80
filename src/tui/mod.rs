//! The chat's runtime: the event loop and what it drives. The loop drains every queued message
//! before drawing and draws at most once per frame, never once per token; only ratatui writes
//! to the terminal. The terminal itself is in `terminal`, when to draw in `frames`, and the
//! I/O the loop does for `update` in `effects`.

mod count;
mod effects;
mod frames;
mod side;
mod terminal;

use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossterm::event::Event;
use ratatui::backend::Backend;
use ratatui::Terminal;

use crate::app::{animates, update, App, Effect, Msg, Now};
use crate::engine::{EngineConfig, EngineHandle, EventReceiver, STREAM_FRAME_INTERVAL};

pub use effects::{comparison_at, Backends, Effects};
pub use frames::{
    FrameLog, FrameScheduler, FRAME_INTERVAL, SLOWEST_STREAM_FRAME_INTERVAL, STREAM_DRAW_BUDGET,
};
pub use terminal::{clipboard_blocked, enter, restore, unsupported_term, RestoreGuard};
use terminal::{terminal_msg, TerminalInput};

/// How often time-driven parts of the screen (waiting clocks, loading) refresh.
pub(crate) const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// A hidden test switch: when set, the chat panics right after its first frame, so tests can
/// check that the terminal is restored and the history kept.
pub(crate) const INJECT_PANIC_ENV: &str = "TOKSCOPE_INJECT_PANIC";

/// Every this many ticks (once a second) the terminal's size is checked, in case a resize
/// event was missed.
const SIZE_CHECK_TICKS: u32 = 10;

/// The state, the terminal and the frame scheduler: what the loop drives. Generic over the
/// backend so that tests drive it with ratatui's `TestBackend`.
pub struct Driver<B: Backend> {
    pub terminal: Terminal<B>,
    pub app: App,
    pub frames: FrameScheduler,
    pub draws: usize,
    /// Every frame drawn, for `/trace`.
    pub frame_log: FrameLog,
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
            frame_log: FrameLog::default(),
        }
    }

    /// Apply every message of a batch; effects are returned in order.
    pub fn apply_all(&mut self, msgs: Vec<Msg>, now: Now) -> Vec<Effect> {
        let mut effects = Vec::new();
        for msg in msgs {
            // A fresh id changes nothing on screen; a tick only what animates.
            let redraw = match msg {
                Msg::FreshConversationId(_) => false,
                Msg::Tick => animates(&self.app),
                _ => true,
            };
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
    pub(crate) fn sync_size(&mut self) -> io::Result<()> {
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
        if std::mem::take(&mut self.app.full_repaint) {
            self.terminal.clear()?;
        }
        let app = &self.app;
        let started = Instant::now();
        let mut drawn = crate::ui::Drawn::default();
        self.terminal
            .draw(|f| drawn = crate::ui::draw(f, app, now))?;
        let cost = started.elapsed();
        if let Some(top) = drawn.scroll_limit {
            if self.app.scroll.lines_from_bottom > top {
                // Nothing else changes: no effect, no new frame needed.
                update(&mut self.app, Msg::ScrollLimit(top), self::now());
            }
        }
        self.frames.record_draw_cost(cost);
        self.frame_log.push(started, cost);
        self.frames.drawn(now);
        self.draws += 1;
        Ok(true)
    }
}

/// Take every engine event already queued, without waiting.
pub fn drain_engine(rx: &mut EventReceiver, into: &mut Vec<Msg>) {
    while let Ok(event) = rx.try_recv() {
        into.push(Msg::Engine(event));
    }
}

pub(crate) fn now() -> Now {
    Now {
        instant: Instant::now(),
        unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    }
}

/// Apply `msgs` and run their effects, then the messages reporting those effects' outcomes,
/// until none is left. Returns whether an effect asked to quit.
fn settle<B: Backend + io::Write>(
    driver: &mut Driver<B>,
    effects: &mut Effects,
    msgs: Vec<Msg>,
) -> bool {
    let mut pending = msgs;
    while !pending.is_empty() {
        // A clipboard write goes to the terminal (through the backend ratatui draws with) and a
        // trace takes the UI's frames: both are the driver's, so the loop does them; the rest
        // go to `effects`.
        let (own, fx): (Vec<Effect>, Vec<Effect>) = driver
            .apply_all(pending, now())
            .into_iter()
            .partition(|e| matches!(e, Effect::Copy(_) | Effect::WriteTrace { .. }));
        let (mut outcomes, quit) = effects.run(fx);
        for effect in own {
            match effect {
                Effect::WriteTrace { path, turns } => {
                    outcomes.push(Msg::Traced(write_trace(&path, &turns, &driver.frame_log)));
                }
                Effect::Copy(text) => {
                    let backend = driver.terminal.backend_mut();
                    let written = backend
                        .write_all(terminal::osc52(&text).as_bytes())
                        .and_then(|()| io::Write::flush(backend));
                    if let Err(e) = written {
                        outcomes.push(Msg::Notice(
                            crate::app::NoticeKind::Error,
                            format!("could not copy: writing to the terminal failed: {e}"),
                        ));
                    }
                }
                _ => {}
            }
        }
        if quit {
            return true;
        }
        pending = outcomes;
    }
    false
}

/// `/trace`: the answers and the frames as one Chrome trace, written like `/export` writes
/// (the folder must exist; the file is replaced).
fn write_trace(
    path: &std::path::Path,
    turns: &[crate::app::TracedTurn],
    log: &FrameLog,
) -> Result<(std::path::PathBuf, usize, usize), String> {
    crate::app::export::check_export_dir(path)?;
    let (doc, frames) = crate::metrics::trace::chat_document(turns, &log.frames());
    let bytes = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    crate::fsx::write_private(path, &bytes).map_err(|e| e.to_string())?;
    Ok((path.to_path_buf(), turns.len(), frames))
}

/// How the chat ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChatEnd {
    /// The user quit.
    Quit,
    /// A signal asked the process to end (SIGTERM, SIGHUP, SIGINT): the number.
    Signal(i32),
}

/// Run the chat until the user quits or a termination signal arrives. Finished turns are
/// already on disk (through `save_slot`); the terminal is restored on every way out. `notices`
/// are shown once the chat is up.
pub(crate) fn run_chat(
    app: App,
    engine: &mut EngineHandle,
    mut events: EventReceiver,
    backends: Backends,
    engine_config: EngineConfig,
    save_slot: crate::history::SaveSlot,
    mut notices: Vec<String>,
) -> io::Result<(App, ChatEnd)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .enable_io()
        .build()?;
    let terminal = enter()?;
    let _guard = RestoreGuard;
    let mut driver = Driver::new(terminal, app);
    // One allocator of request ids: the engine handle's.
    driver.app.request_ids = engine.request_ids();
    let data_dir = crate::paths::data_dir();
    let mut effects = Effects {
        counter: count::CountWorker::start(engine_config.model_path.clone(), &data_dir),
        engine,
        engine_config,
        backends,
        ab_remote: None,
        ab_local: None,
        save_slot,
        data_dir,
        jobs: effects::Jobs::new(),
    };
    let mut draft = DraftKeeper::new(&effects.data_dir);
    let mut in_flight = InFlightKeeper::new(&effects.data_dir);
    let mut first = vec![effects.fresh_conversation_id()];
    if let Some(text) = draft.take_previous() {
        // Counting it may be what ended the last session: not again before the user's word.
        let crashed = count::crashed_while_counting(&effects.data_dir);
        if crashed {
            effects.counter.hold(text.clone());
        }
        first.push(Msg::Paste(text));
        // One notice shows at a time, cut at two lines: the restored draft is said first,
        // in the last (the shown) one.
        let said = restored_draft_notice(crashed);
        match notices.last_mut() {
            Some(last) => *last = format!("{said}; {last}"),
            None => first.push(Msg::Notice(
                if crashed {
                    crate::app::NoticeKind::Warning
                } else {
                    crate::app::NoticeKind::Info
                },
                said.to_owned(),
            )),
        }
    }
    first.extend(
        notices
            .into_iter()
            .map(|text| Msg::Notice(crate::app::NoticeKind::Warning, text)),
    );
    settle(&mut driver, &mut effects, first);
    let inject_panic = std::env::var_os(INJECT_PANIC_ENV).is_some();
    let end = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        let mut sigint = signal(SignalKind::interrupt())?;
        // Listening replaces SIGTSTP's default stop, which would leave the shell in the
        // alternate screen with mouse reporting on.
        let mut sigtstp = signal(SignalKind::from_raw(libc::SIGTSTP))?;
        let mut term_events = TerminalInput::start();
        let mut ticks = tokio::time::interval(TICK_INTERVAL);
        let mut tick_count: u32 = 0;
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            match driver.draw_if_due(Instant::now()) {
                Err(e) if hung_up(&e) => return Ok(ChatEnd::Signal(1)),
                other => other?,
            };
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
                    Some(Ok(e)) => on_terminal_event(&mut driver, &mut batch, e)?,
                    // The terminal went away (its window was closed): a hangup.
                    Some(Err(e)) if hung_up(&e) => return Ok(ChatEnd::Signal(1)),
                    Some(Err(e)) => return Err(e),
                    None => return Ok(ChatEnd::Quit),
                },
                _ = sigterm.recv() => return Ok(ChatEnd::Signal(15)),
                _ = sighup.recv() => return Ok(ChatEnd::Signal(1)),
                _ = sigint.recv() => return Ok(ChatEnd::Signal(2)),
                _ = sigtstp.recv() => {
                    terminal::suspend_until_continued()?;
                    // Continued: the screen is the shell's, and its size may have changed.
                    driver.sync_size()?;
                    driver.app.full_repaint = true;
                    driver.frames.mark_dirty(true);
                }
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
                Some(msg) = effects.jobs.results.recv() => batch.push(msg),
                Some(tokens) = effects.counter.counts.recv() => {
                    batch.extend(effects.counter.report(tokens).map(Msg::InputTokens));
                }
                _ = sleep_until_opt(frame_at) => {}
            }
            // Drain everything else already queued before drawing once.
            while let Ok(Ok(e)) = term_events.events.try_recv() {
                on_terminal_event(&mut driver, &mut batch, e)?;
            }
            drain_engine(&mut events, &mut batch);
            if settle(&mut driver, &mut effects, batch) {
                return Ok(ChatEnd::Quit);
            }
            // What the loop keeps in step after every batch: the input's token count and the
            // id the next new conversation takes.
            let input = &driver.app.input;
            effects.counter.request(input.revision(), || input.text());
            draft.keep(input.revision(), || input.text());
            in_flight.keep(&driver.app, Instant::now(), now().unix_s);
            let after = vec![effects.fresh_conversation_id()];
            if settle(&mut driver, &mut effects, after) {
                return Ok(ChatEnd::Quit);
            }
        }
    })?;
    if let (ChatEnd::Signal(_), Some(active)) = (end, driver.app.conversation.active()) {
        // Stop the answer in flight; its text so far stays in its in-flight file, which the
        // next chat start saves into history.
        engine.cancel(active.request_id);
    }
    Ok((driver.app, end))
}

/// A terminal event into `batch`; a resize matches the terminal's size first.
fn on_terminal_event<B: Backend>(
    driver: &mut Driver<B>,
    batch: &mut Vec<Msg>,
    e: Event,
) -> io::Result<()> {
    if matches!(e, Event::Resize(..)) {
        driver.sync_size()?;
    }
    batch.extend(terminal_msg(e));
    Ok(())
}

/// Whether a terminal read or write failed because the terminal is gone (EIO: the window or
/// the SSH connection was closed; ENXIO/EBADF likewise), which ends the chat as SIGHUP does.
fn hung_up(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::ENXIO) | Some(libc::EBADF)
    )
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
    use crate::app::conversation::Conversation;
    use ratatui::backend::TestBackend;

    #[test]
    fn a_fresh_id_does_not_redraw_and_a_new_count_does() {
        let app = App::new(
            "m.gguf".into(),
            Conversation::new("c1".into(), 0, None),
            crate::engine::SamplingParams::default(),
            64,
        );
        let terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let mut driver = Driver::new(terminal, app);
        let start = Instant::now();
        assert!(driver.draw_if_due(start).unwrap());
        let later = start + Duration::from_secs(1);
        let id = Msg::FreshConversationId("c2".into());
        assert!(driver.apply_all(vec![id], now()).is_empty());
        assert_eq!(driver.app.fresh_conversation_id, "c2");
        assert!(!driver.frames.due(later));
        let count = Msg::InputTokens(Some((2, "model vocabulary")));
        assert!(driver.apply_all(vec![count], now()).is_empty());
        assert!(driver.frames.due(later));
    }

    /// Home scrolls to the top; the frame drawn brings a scroll past the top back to it, so
    /// the next PageDown moves at once (it did nothing until End before).
    #[test]
    fn page_down_after_home_moves_at_once() {
        use crate::app::conversation::Exchange;
        use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut app = App::new(
            "m.gguf".into(),
            Conversation::new("c1".into(), 0, None),
            crate::engine::SamplingParams::default(),
            64,
        );
        for i in 0..60 {
            app.conversation.exchanges.push(Exchange {
                user: format!("message {i}"),
                assistant: None,
            });
        }
        let terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        let mut driver = Driver::new(terminal, app);
        let key = |code| Msg::Key(KeyEvent::new(code, KeyModifiers::NONE));
        let mut t = Instant::now();
        let mut frame = |driver: &mut Driver<TestBackend>| {
            t += Duration::from_secs(1);
            driver.frames.mark_dirty(true);
            assert!(driver.draw_if_due(t).unwrap());
        };
        frame(&mut driver);
        driver.apply_all(vec![key(KeyCode::Home)], now());
        frame(&mut driver);
        let top = driver.app.scroll.lines_from_bottom;
        assert!((60..1000).contains(&top), "the top of 60 messages: {top}");
        // The frame at the top shows the first message.
        let screen = format!("{:?}", driver.terminal.backend().buffer());
        assert!(screen.contains("message 0"), "{screen}");
        driver.apply_all(vec![key(KeyCode::PageDown)], now());
        assert!(driver.app.scroll.lines_from_bottom < top, "PageDown moved");
        frame(&mut driver);
        let screen = format!("{:?}", driver.terminal.backend().buffer());
        assert!(
            !screen.contains("message 0"),
            "scrolled down from the top: {screen}"
        );
    }
}

/// Files kept up to date off the UI thread: each message is a path and its newest contents
/// (`None`: remove the file), written synced and user-only by a thread of its own, so typing and
/// streaming never wait on the disk. Only the newest contents of each path are written.
struct KeptFiles {
    writes: Option<std::sync::mpsc::Sender<(std::path::PathBuf, Option<Vec<u8>>)>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl KeptFiles {
    fn new(name: &str) -> Self {
        let (writes, inbox) = std::sync::mpsc::channel::<(std::path::PathBuf, Option<Vec<u8>>)>();
        let writer = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(first) = inbox.recv() {
                    let mut queued = vec![first];
                    queued.extend(inbox.try_iter());
                    // The last message for each path, in the order of those last messages.
                    let mut latest: Vec<(std::path::PathBuf, Option<Vec<u8>>)> = Vec::new();
                    for (path, contents) in queued {
                        latest.retain(|(p, _)| *p != path);
                        latest.push((path, contents));
                    }
                    for (path, contents) in latest {
                        // A file that cannot be kept costs only the keeping: the chat goes on.
                        let _ = match contents {
                            Some(bytes) => {
                                if let Some(dir) = path.parent() {
                                    let _ = crate::fsx::ensure_private_dir(dir);
                                }
                                crate::fsx::write_private(&path, &bytes).map_err(|e| e.to_string())
                            }
                            None => std::fs::remove_file(&path).map_err(|e| e.to_string()),
                        };
                    }
                }
            })
            .ok();
        Self {
            writes: writer.as_ref().map(|_| writes),
            writer,
        }
    }

    fn send(&self, path: &std::path::Path, contents: Option<Vec<u8>>) {
        if let Some(writes) = &self.writes {
            let _ = writes.send((path.to_path_buf(), contents));
        }
    }
}

impl Drop for KeptFiles {
    /// The last write is on disk when the chat ends.
    fn drop(&mut self) {
        self.writes = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// What the start says of a restored draft; `crashed`: the last session ended while counting
/// its tokens, so they are not counted until the user edits or sends it.
fn restored_draft_notice(crashed: bool) -> &'static str {
    if crashed {
        "your unsent message from the last session is back in the input, not counted: the \
         last session ended while counting it; edit or send it to count it"
    } else {
        "your unsent message from the last session is back in the input"
    }
}

/// The unsent message, kept in the data dir as it changes (`draft.txt`, private), so that
/// nothing typed is lost when the process ends before it is sent: a crash llama.cpp brings,
/// a model file truncated under the chat (SIGBUS), a closed terminal or a plain quit. The
/// next chat start puts it back in the input and says so; sending it (or clearing the
/// input) removes the file.
struct DraftKeeper {
    path: std::path::PathBuf,
    revision: Option<u64>,
    files: KeptFiles,
}

impl DraftKeeper {
    /// The most of a draft read back (the input's own limit is far below it).
    const MAX_BYTES: u64 = 4 << 20;

    fn new(data_dir: &std::path::Path) -> Self {
        Self {
            path: data_dir.join("draft.txt"),
            revision: None,
            files: KeptFiles::new("draft"),
        }
    }

    /// The draft the last session left, if any (the file stays until this session's input
    /// changes).
    fn take_previous(&self) -> Option<String> {
        let bytes = crate::fsx::read_regular(&self.path, Self::MAX_BYTES, "a draft").ok()?;
        let text = String::from_utf8(bytes).ok()?;
        (!text.trim().is_empty()).then_some(text)
    }

    /// Hands the input's text to the writer when it changed since the last call.
    fn keep(&mut self, revision: u64, text: impl FnOnce() -> String) {
        if self.revision == Some(revision) {
            return;
        }
        let first = self.revision.replace(revision).is_none();
        let text = text();
        let blank = text.trim().is_empty();
        if !(blank && first) {
            self.files
                .send(&self.path, (!blank).then(|| text.into_bytes()));
        }
    }
}

/// The answer in flight, kept as it streams: the conversation with the answer so far as a
/// stopped turn, in `in-flight/<pid>-<id>.json` in the data dir (`history::in_flight_path`),
/// at most every [`Self::EVERY`] while it grows, removed when the answer ends (then history
/// has it). A chat that dies meanwhile leaves the file; the next chat start saves it into
/// history (`history::recover_in_flight`) and says so.
struct InFlightKeeper {
    data_dir: std::path::PathBuf,
    /// The file written last and the answer's length then.
    written: Option<(std::path::PathBuf, usize)>,
    last_write: Option<Instant>,
    files: KeptFiles,
}

impl InFlightKeeper {
    const EVERY: Duration = Duration::from_millis(500);

    fn new(data_dir: &std::path::Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            written: None,
            last_write: None,
            files: KeptFiles::new("in-flight"),
        }
    }

    fn keep(&mut self, app: &crate::app::App, now: Instant, unix_s: u64) {
        let conversation = &app.conversation;
        let Some(active) = conversation.active() else {
            if let Some((path, _)) = self.written.take() {
                self.files.send(&path, None);
            }
            return;
        };
        let path = crate::history::in_flight_path(&self.data_dir, &conversation.id);
        let len = active.text.len();
        if let Some((old, old_len)) = &self.written {
            if *old == path && *old_len == len && len > 0 {
                return;
            }
            if *old != path {
                self.files.send(old, None);
            }
        }
        if self
            .last_write
            .is_some_and(|at| now.duration_since(at) < Self::EVERY)
            && self.written.as_ref().is_some_and(|(old, _)| *old == path)
        {
            return;
        }
        let Some(saved) = conversation.to_saved_in_flight(unix_s) else {
            return;
        };
        let Ok(json) = serde_json::to_vec(&saved) else {
            return;
        };
        self.files.send(&path, Some(json));
        self.written = Some((path, len));
        self.last_write = Some(now);
    }
}

#[cfg(test)]
mod draft_tests {
    use super::DraftKeeper;

    fn on_disk(dir: &std::path::Path) -> Option<String> {
        DraftKeeper::new(dir).take_previous()
    }

    #[test]
    fn a_draft_is_kept_as_it_changes_and_removed_when_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = DraftKeeper::new(dir.path());
        assert_eq!(d.take_previous(), None);
        d.keep(1, || "half a thought".into());
        d.keep(1, || panic!("the same revision is not read again"));
        drop(d);
        assert_eq!(on_disk(dir.path()).as_deref(), Some("half a thought"));
        let mut d = DraftKeeper::new(dir.path());
        d.keep(1, || "half a thought".into());
        d.keep(2, String::new);
        drop(d);
        assert_eq!(on_disk(dir.path()), None);
    }

    #[test]
    fn the_first_empty_input_keeps_the_last_sessions_draft() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = DraftKeeper::new(dir.path());
        first.keep(1, || "left over".into());
        drop(first);
        let mut next = DraftKeeper::new(dir.path());
        assert_eq!(next.take_previous().as_deref(), Some("left over"));
        // The restored paste arrives after the loop's first look at the (still empty) input.
        next.keep(0, String::new);
        drop(next);
        assert_eq!(on_disk(dir.path()).as_deref(), Some("left over"));
    }
}
