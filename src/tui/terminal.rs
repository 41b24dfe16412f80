//! The terminal: entering the TUI's mode and restoring it (on quit, on error and on panic), and
//! terminal input read on a thread of its own.

use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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

use crate::app::Msg;

/// Lines one mouse-wheel notch scrolls.
const WHEEL_LINES: i32 = 3;

static TERMINAL_ACTIVE: AtomicBool = AtomicBool::new(false);

/// Why the full-screen chat cannot run on a terminal whose `TERM` is `term`, if it cannot:
/// ratatui draws by moving the cursor and the chat needs the alternate screen, which a `dumb`
/// terminal (Emacs' shell, some CI consoles) or an unnamed one (no or empty `TERM`) cannot
/// be asked for. Running without them would scroll every frame into the terminal's
/// history, so the chat refuses and names the headless command instead.
/// docs/safety.md, "The terminal".
pub fn unsupported_term(term: Option<&std::ffi::OsStr>) -> Option<String> {
    if cfg!(not(unix)) {
        // Windows' console is driven through its API, not by TERM.
        return None;
    }
    let shown = match term.map(|t| t.to_string_lossy()) {
        None => "TERM is not set".to_string(),
        Some(t) if t.trim().is_empty() => "TERM is empty".to_string(),
        Some(t) if t.trim() == "dumb" => "TERM is dumb".to_string(),
        Some(_) => return None,
    };
    Some(format!(
        "the chat needs a terminal that can move the cursor and has an alternate screen, and \
         {shown}: use `tokscope run -p TEXT` for headless use, or run the chat in a full \
         terminal (TERM=xterm-256color, say)"
    ))
}

/// Put the terminal into the TUI's mode: raw input, alternate screen, paste and mouse events.
pub fn enter() -> io::Result<Terminal<CrosstermBackend<Stdout>>> {
    take_terminal()?;
    // A fixed viewport, resized when the terminal says it changed (and checked on every tick):
    // a fullscreen one asks the terminal for its size before every frame, which opens /dev/tty
    // each time (a tenth of the UI thread's CPU while streaming).
    let mut backend = CrosstermBackend::new(io::stdout());
    if let Some(widths) = probe_widths(&mut backend) {
        tracing::info!("terminal width rules: {widths:?}");
        crate::ui::text::set_terminal_widths(widths);
    }
    let size = backend.size().inspect_err(|_| restore())?;
    let area = ratatui::layout::Rect::new(0, 0, size.width, size.height);
    Terminal::with_options(
        backend,
        ratatui::TerminalOptions {
            viewport: ratatui::Viewport::Fixed(area),
        },
    )
    .inspect_err(|_| restore())
}

/// Raw input, alternate screen, paste and mouse events on; the terminal restored again when
/// that fails.
fn take_terminal() -> io::Result<()> {
    enable_raw_mode()?;
    TERMINAL_ACTIVE.store(true, Ordering::SeqCst);
    crate::fatal::set_screen_active(true);
    execute!(
        io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste,
        EnableMouseCapture
    )
    .inspect_err(|_| restore())
}

/// Switches the width probe off (`0`), e.g. for a terminal that never answers a cursor
/// position request (the probe then waits for crossterm's timeout once).
const WIDTH_PROBE_ENV: &str = "TOKSCOPE_WIDTH_PROBE";

/// Asks the terminal how it measures the grapheme clusters on which terminals disagree with
/// unicode-width (ratatui's layout): each probe is written at the top-left corner of the
/// (still empty) alternate screen and the cursor's column read back (a cursor position
/// request, through ratatui's backend); the screen is cleared after. `None` when the terminal
/// does not answer or the probe is switched off.
fn probe_widths(backend: &mut CrosstermBackend<Stdout>) -> Option<crate::ui::text::TermWidths> {
    use std::io::Write as _;
    if std::env::var(WIDTH_PROBE_ENV).is_ok_and(|v| v == "0") {
        return None;
    }
    let mut advance = |probe: &str| -> Option<u16> {
        backend
            .set_cursor_position(ratatui::layout::Position::ORIGIN)
            .ok()?;
        backend.write_all(probe.as_bytes()).ok()?;
        Backend::flush(backend).ok()?;
        backend.get_cursor_position().ok().map(|p| p.x)
    };
    let spacing_marks = advance("\u{09AC}\u{09BE}")? == 2;
    let zwj_joins = advance("\u{1F468}\u{200D}\u{1F469}")? == 2;
    let vs16_widens = advance("\u{2764}\u{FE0F}")? == 2;
    let modifier_joins = advance("\u{1F44D}\u{1F3FD}")? == 2;
    backend.clear().ok()?;
    Some(crate::ui::text::TermWidths {
        spacing_marks,
        zwj_joins,
        vs16_widens,
        modifier_joins,
    })
}

/// Give the terminal back as it was. Safe to call more than once and from the panic hook.
pub fn restore() {
    if TERMINAL_ACTIVE.swap(false, Ordering::SeqCst) {
        crate::fatal::set_screen_active(false);
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

/// Job control (`kill -TSTP`, a shell's suspend): give the terminal back as it was, stop as
/// SIGTSTP's default action would, and when continued (`fg`, SIGCONT) take it again, as
/// editors do. The caller redraws everything after. (Ctrl+Z in the chat is the input's undo:
/// raw mode turns the terminal's suspend key off.)
#[allow(unsafe_code)]
pub(super) fn suspend_until_continued() -> io::Result<()> {
    restore();
    // SAFETY: raise is always safe to call; SIGSTOP cannot be caught, so the process stops
    // here and this call returns once it is continued.
    unsafe { libc::raise(libc::SIGSTOP) };
    take_terminal()
}

/// Restores the terminal when dropped (normal exit and early returns alike).
pub struct RestoreGuard;

impl Drop for RestoreGuard {
    fn drop(&mut self) {
        restore();
    }
}

pub(super) fn terminal_msg(event: Event) -> Option<Msg> {
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

/// Terminal input read on a thread of its own and handed to the event loop over a channel.
///
/// crossterm's `EventStream` polls its global reader from the loop's thread while a helper
/// thread of its own blocks on the same lock, so every turn of the loop spun on that lock
/// (`sched_yield`): a fifth of the UI thread's CPU time while streaming, taken from llama.cpp's
/// threads. Here one thread owns the reader and the loop only waits on a channel.
pub(super) struct TerminalInput {
    pub(super) events: tokio::sync::mpsc::UnboundedReceiver<io::Result<Event>>,
    stop: std::sync::Arc<AtomicBool>,
}

impl TerminalInput {
    /// How long the reader waits for input before checking whether it should stop.
    const POLL: Duration = Duration::from_millis(100);

    pub(super) fn start() -> Self {
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

/// The OSC 52 sequence that asks the terminal to put `text` on the system clipboard
/// ("c"), ended by BEL (understood by xterm, kitty, WezTerm, iTerm2, Windows Terminal,
/// foot, Alacritty and tmux).
pub(crate) fn osc52(text: &str) -> String {
    use base64::Engine as _;
    format!(
        "\x1b]52;c;{}\x07",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

/// Why an OSC 52 clipboard write cannot work in this terminal, when that can be known:
/// no terminal type, the Linux console or a dumb terminal; or tmux with `set-clipboard`
/// not `on` (its default, `external`, drops what programs send). `None`: it may work (most
/// terminals take it; some ask the user first).
pub fn clipboard_blocked() -> Option<String> {
    let term = std::env::var("TERM").unwrap_or_default();
    if term.is_empty() || term == "dumb" || term == "linux" {
        return Some(format!(
            "this terminal (TERM={}) cannot take OSC 52 clipboard writes",
            if term.is_empty() { "unset" } else { &term }
        ));
    }
    std::env::var_os("TMUX")?;
    let out = std::process::Command::new("tmux")
        .args(["show-options", "-gv", "set-clipboard"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && value != "on").then(|| {
        format!(
            "tmux passes clipboard writes on only with `tmux set -g set-clipboard on` (it is \
             {value})"
        )
    })
}

#[cfg(test)]
mod clipboard_tests {
    #[test]
    fn osc52_is_the_base64_text_between_the_osc_and_bel() {
        assert_eq!(super::osc52("héllo"), "\x1b]52;c;aMOpbGxv\x07");
        assert_eq!(super::osc52(""), "\x1b]52;c;\x07");
    }
}
