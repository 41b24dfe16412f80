//! A streamed answer replayed into a terminal emulator and read back, as the Codex TUI tests
//! its history (issue 61, item 6): the chat's frames go through ratatui's crossterm backend,
//! byte for byte what a terminal receives, into a `vt100` parser; after every frame, and across
//! a resize mid-stream, the screen the emulator holds is read back and every line of the answer
//! must be on it once, in order, and nothing else that looks like one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use tokscope::app::conversation::Conversation;
use tokscope::app::{update, App, Effect, EngineStatus, Msg, Now};
use tokscope::engine::{EngineEvent, RequestId, SamplingParams, StopReason, TurnReport};
use tokscope::tui::{Driver, SLOWEST_STREAM_FRAME_INTERVAL};

/// The terminal: every byte the backend writes goes into the emulator.
#[derive(Clone)]
struct Vt(Rc<RefCell<vt100::Parser>>);

impl io::Write for Vt {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().process(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type VtDriver = Driver<CrosstermBackend<Vt>>;

fn now_at(instant: Instant) -> Now {
    Now {
        instant,
        unix_s: 1_700_000_000,
    }
}

/// `n` short paragraphs ("L0001 amber garnet"), each its own line on screen at every width
/// used here: a line that appears twice, is missing or out of place is visible as such.
fn answer_lines(n: usize) -> Vec<String> {
    const WORDS: [&str; 12] = [
        "amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "heron", "indigo",
        "juniper", "kestrel", "lichen",
    ];
    (0..n)
        .map(|i| format!("L{:04} {} {}", i + 1, WORDS[i % 12], WORDS[(i + 5) % 12]))
        .collect()
}

/// The conversation column of each screen row (left of the metrics pane's `│`), trimmed and
/// without the stream's cursor, for the rows that hold an answer line or the start of one
/// ("L" and a digit).
fn answer_rows(parser: &vt100::Parser) -> Vec<String> {
    let screen = parser.screen();
    let (_, cols) = screen.size();
    screen
        .rows(0, cols)
        .map(|row| {
            // The stream's cursor (`▌`) follows the last token while the answer streams.
            let text = row.split('│').next().unwrap_or("").trim();
            text.trim_end_matches('▌').to_string()
        })
        .filter(|row| {
            let mut c = row.chars();
            c.next() == Some('L') && c.next().is_some_and(|d| d.is_ascii_digit())
        })
        .collect()
}

/// The answer rows on screen are consecutive lines of the answer in order, each whole except
/// the last while streaming (the line being written: a prefix of it). Once `complete`, they
/// end with the answer's last line, and `from_top` they are every line, once.
fn assert_screen_holds_the_answer(
    parser: &vt100::Parser,
    lines: &[String],
    complete: bool,
    from_top: bool,
    when: &str,
) {
    let rows = answer_rows(parser);
    let contents = parser.screen().contents();
    assert!(!rows.is_empty(), "{when}: no answer on screen\n{contents}");
    let first = rows[0]
        .get(1..5)
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n - 1);
    for (k, row) in rows.iter().enumerate() {
        let expected = lines.get(first + k).unwrap_or_else(|| {
            panic!("{when}: answer row {k} ({row:?}) past the answer's end\n{contents}")
        });
        let last = k + 1 == rows.len();
        if complete || !last {
            assert_eq!(row, expected, "{when}: answer row {k}\n{contents}");
        } else {
            assert!(
                expected.starts_with(row.as_str()),
                "{when}: the line being written, {row:?}, is not the start of {expected:?}\n{contents}"
            );
        }
    }
    if complete {
        assert_eq!(
            rows.last(),
            lines.last(),
            "{when}: the answer's last line ends the screen\n{contents}"
        );
    }
    if from_top {
        assert_eq!(
            rows, lines,
            "{when}: every line of the answer once, in order\n{contents}"
        );
    }
}

/// The chat at `cols`×`rows` with a message sent; returns the driver, the emulator and the
/// request id the answer's events carry.
fn chat_in_vt(
    cols: u16,
    rows: u16,
    t0: Instant,
) -> (VtDriver, Rc<RefCell<vt100::Parser>>, RequestId) {
    let parser = Rc::new(RefCell::new(vt100::Parser::new(rows, cols, 0)));
    let backend = CrosstermBackend::new(Vt(parser.clone()));
    let terminal = Terminal::with_options(
        backend,
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, cols, rows)),
        },
    )
    .unwrap();
    let mut app = App::new(
        "m.gguf".into(),
        Conversation::new("c".into(), 0, None),
        SamplingParams::default(),
        2000,
    );
    app.engine = EngineStatus::Ready;
    app.input.set("go");
    let fx = update(
        &mut app,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Enter,
        )),
        now_at(t0),
    );
    let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
        panic!("Enter did not start an answer: {fx:?}")
    };
    let mut driver = Driver::new(terminal, app);
    assert!(driver.draw_if_due(t0).unwrap(), "the first frame");
    (driver, parser, id)
}

/// What the terminal does on a resize: the emulator's grid changes size, the chat reads the
/// new size and repaints (as `sync_size` does on the resize event).
fn resize(
    driver: &mut VtDriver,
    parser: &Rc<RefCell<vt100::Parser>>,
    cols: u16,
    rows: u16,
    now: Now,
) {
    parser.borrow_mut().set_size(rows, cols);
    driver.terminal.resize(Rect::new(0, 0, cols, rows)).unwrap();
    driver.apply_all(vec![Msg::Resize], now);
}

/// The answer as three-character tokens, so that lines and paragraph breaks are split across
/// tokens.
fn tokens_of(lines: &[String]) -> Vec<String> {
    let chars: Vec<char> = lines.join("\n\n").chars().collect();
    chars.chunks(3).map(|c| c.iter().collect()).collect()
}

/// The engine's last event: the turn's report with the streamed text.
fn finish(driver: &mut VtDriver, id: RequestId, tokens: usize, now: Now) {
    let turn = driver.app.conversation.active().unwrap();
    let mut timeline = turn.timeline.clone();
    timeline.finished_at = timeline.token_ready_at.last().copied();
    let report = TurnReport {
        text: turn.text.clone(),
        prompt: Default::default(),
        thinking_text: None,
        stop_reason: StopReason::EndOfGeneration,
        timeline,
        context_used: 8 + tokens,
        dropped_messages: 0,
        llama_counters: Default::default(),
        first_logits: None,
        host: Default::default(),
        sampler: "host-greedy",
        sampling: Default::default(),
        spec: None,
        profile: None,
    };
    driver.apply_all(
        vec![Msg::Engine(EngineEvent::Finished {
            request_id: id,
            report: Box::new(report),
        })],
        now,
    );
}

/// Streams `lines` into the chat at 100×36, `per_frame` tokens between two frames, resizing to
/// 72×28 a third of the way in and to 120×40 at two thirds; after every frame the screen holds
/// consecutive lines of the answer. Returns the driver, the emulator and the next frame's time.
fn stream(lines: &[String], per_frame: usize) -> (VtDriver, Rc<RefCell<vt100::Parser>>, Instant) {
    let t0 = Instant::now();
    let (mut driver, parser, id) = chat_in_vt(100, 36, t0);
    let tokens = tokens_of(lines);
    let mut now = t0;
    let mut frames = 0;
    for (i, piece) in tokens.iter().enumerate() {
        driver.apply_all(
            vec![Msg::Engine(EngineEvent::Token {
                request_id: id,
                index: i,
                text: piece.clone(),
                at: Duration::from_micros(100 * i as u64 + 1000),
            })],
            now_at(now),
        );
        if i == tokens.len() / 3 {
            resize(&mut driver, &parser, 72, 28, now_at(now));
        }
        if i == 2 * tokens.len() / 3 {
            resize(&mut driver, &parser, 120, 40, now_at(now));
        }
        if i % per_frame == per_frame - 1 {
            now += SLOWEST_STREAM_FRAME_INTERVAL;
            assert!(driver.draw_if_due(now).unwrap());
            frames += 1;
            let when = format!("frame {frames}, after token {i}");
            assert_screen_holds_the_answer(&parser.borrow(), lines, false, false, &when);
        }
    }
    assert!(
        frames >= 20,
        "the answer streamed over many frames ({frames})"
    );
    now += SLOWEST_STREAM_FRAME_INTERVAL;
    driver.draw_if_due(now).unwrap();
    assert_screen_holds_the_answer(&parser.borrow(), lines, true, false, "all tokens drawn");
    finish(&mut driver, id, tokens.len(), now_at(now));
    now += SLOWEST_STREAM_FRAME_INTERVAL;
    assert!(driver.draw_if_due(now).unwrap());
    (driver, parser, now + SLOWEST_STREAM_FRAME_INTERVAL)
}

#[test]
fn a_streamed_answer_appears_once_in_order_across_resizes() {
    let lines = answer_lines(12);
    let (mut driver, parser, now) = stream(&lines, 3);
    assert_screen_holds_the_answer(&parser.borrow(), &lines, true, true, "the finished turn");
    // A last resize after the turn: the finished answer is laid out again, still once.
    resize(&mut driver, &parser, 80, 30, now_at(now));
    assert!(driver.draw_if_due(now).unwrap());
    let when = "the finished turn at 80×30";
    assert_screen_holds_the_answer(&parser.borrow(), &lines, true, true, when);
}

#[test]
fn an_answer_past_the_rendered_tail_streams_without_a_seam() {
    // 4,000 lines, about 88 KB: past the 64 KiB from which the pane renders only a tail of
    // whole paragraphs, so every frame's top rows come from a cut made in the text.
    let lines = answer_lines(4000);
    let (mut driver, parser, now) = stream(&lines, 200);
    assert_screen_holds_the_answer(&parser.borrow(), &lines, true, false, "the finished turn");
    resize(&mut driver, &parser, 80, 30, now_at(now));
    assert!(driver.draw_if_due(now).unwrap());
    let when = "the finished turn at 80×30";
    assert_screen_holds_the_answer(&parser.borrow(), &lines, true, false, when);
}
