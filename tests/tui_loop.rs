//! Rendering discipline: the loop drains every queued event before drawing and draws at most
//! once per frame, so a burst of tokens costs one draw, not one per token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tokscope::app::conversation::Conversation;
use tokscope::app::{update, App, Effect, EngineStatus, Msg, Now};
use tokscope::engine::{EngineEvent, SamplingParams};
use tokscope::tui::{drain_engine, Driver, FRAME_INTERVAL};

fn now_at(instant: Instant) -> Now {
    Now {
        instant,
        unix_s: 1_700_000_000,
    }
}

#[test]
fn a_burst_of_1000_token_events_causes_one_draw() {
    let mut app = App::new(
        "m.gguf".into(),
        Conversation::new("c".into(), 0, None),
        SamplingParams::default(),
        2000,
    );
    app.engine = EngineStatus::Ready;
    let t0 = Instant::now();
    app.input.set("go");
    let fx = update(
        &mut app,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Enter,
        )),
        now_at(t0),
    );
    let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
        panic!("{fx:?}")
    };

    let mut driver = Driver::new(Terminal::new(TestBackend::new(120, 40)).unwrap(), app);
    driver.draw_if_due(t0).unwrap();
    assert_eq!(driver.draws, 1, "first frame");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..1000 {
        tx.send(EngineEvent::Token {
            request_id: id,
            index: i,
            text: format!("w{i} "),
            at: Duration::from_micros(500 * i as u64 + 1000),
        })
        .unwrap();
    }
    // One loop iteration: drain everything, apply, draw if a frame is due.
    // The stream interval follows the cost of a draw (10 to 20 Hz).
    let t1 = t0 + driver.frames.stream_interval;
    let mut batch = Vec::new();
    drain_engine(&mut rx, &mut batch);
    assert_eq!(batch.len(), 1000);
    driver.apply_all(batch, now_at(t1));
    driver.draw_if_due(t1).unwrap();
    // Nothing new: no draw. New event within the same frame: deferred to the next frame.
    driver.draw_if_due(t1).unwrap();
    tx.send(EngineEvent::Token {
        request_id: id,
        index: 1000,
        text: "end".into(),
        at: Duration::from_millis(600),
    })
    .unwrap();
    let mut batch = Vec::new();
    drain_engine(&mut rx, &mut batch);
    driver.apply_all(batch, now_at(t1));
    assert!(
        !driver.draw_if_due(t1 + FRAME_INTERVAL).unwrap(),
        "streamed tokens alone are drawn at most at 20 Hz"
    );
    let interval = driver.frames.stream_interval;
    assert!(interval >= tokscope::engine::STREAM_FRAME_INTERVAL);
    assert!(driver.draw_if_due(t1 + interval).unwrap());
    assert_eq!(
        driver.draws, 3,
        "1,001 token events cost two draws after the first frame"
    );

    let turn = driver.app.conversation.active().unwrap();
    assert_eq!(turn.timeline.tokens_generated(), 1001);
    assert!(turn.text.ends_with("w999 end"));
}

#[test]
fn ticks_redraw_only_while_something_animates() {
    let app = App::new(
        "m.gguf".into(),
        Conversation::new("c".into(), 0, None),
        SamplingParams::default(),
        10,
    );
    let t0 = Instant::now();
    let mut driver = Driver::new(Terminal::new(TestBackend::new(80, 24)).unwrap(), app);
    driver.draw_if_due(t0).unwrap();
    // Loading animates (progress), so a tick redraws.
    driver.apply_all(vec![Msg::Tick], now_at(t0));
    assert!(!driver.draw_if_due(t0 + FRAME_INTERVAL).unwrap());
    let t1 = t0 + driver.frames.stream_interval;
    assert!(driver.draw_if_due(t1).unwrap());
    // Ready and idle: a resize (the user) redraws at the input rate…
    driver.app.engine = EngineStatus::Ready;
    driver.apply_all(vec![Msg::Resize], now_at(t1));
    assert!(driver.draw_if_due(t1 + FRAME_INTERVAL).unwrap());
    // …and ticks change nothing on screen, so no draw.
    driver.apply_all(vec![Msg::Tick, Msg::Tick], now_at(t1));
    assert!(!driver
        .draw_if_due(t1 + 4 * driver.frames.stream_interval)
        .unwrap());
}

#[test]
fn the_compare_screen_reads_the_latest_comparison_from_the_data_dir() {
    use tokscope::app::{CompareView, Mode};
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(tokscope::tui::comparison_at(dir.path(), 0), Ok(None));
    let mut app = App::new(
        "m.gguf".into(),
        Conversation::new("c".into(), 0, None),
        SamplingParams::default(),
        64,
    );
    let fx = update(
        &mut app,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::F(3),
        )),
        now_at(Instant::now()),
    );
    assert_eq!(fx, vec![Effect::LoadComparison { back: 0 }]);
    let loaded = tokscope::tui::comparison_at(dir.path(), 0);
    update(
        &mut app,
        Msg::ComparisonLoaded(loaded),
        now_at(Instant::now()),
    );
    assert_eq!(app.mode, Mode::Compare);
    assert_eq!(app.compare, CompareView::Empty);
    // A damaged log is skipped line by line; an unreadable one is a message, not a panic.
    let path = tokscope::compare::log::comparisons_path(dir.path());
    std::fs::write(&path, "{not json\n").unwrap();
    assert_eq!(tokscope::tui::comparison_at(dir.path(), 0), Ok(None));
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = tokscope::tui::comparison_at(dir.path(), 0).unwrap_err();
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn ctrl_l_and_closing_an_overlay_repaint_every_cell() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::backend::Backend;
    let app = App::new(
        "m.gguf".into(),
        Conversation::new("c".into(), 0, None),
        SamplingParams::default(),
        10,
    );
    let t0 = Instant::now();
    let mut driver = Driver::new(Terminal::new(TestBackend::new(80, 24)).unwrap(), app);
    driver.app.engine = EngineStatus::Ready;
    driver.draw_if_due(t0).unwrap();
    let mut t = t0;
    // A stray letter on the real screen that ratatui's diff does not know of (what a
    // terminal that measured a character differently leaves behind).
    let stray = |driver: &mut Driver<TestBackend>| {
        let cell = ratatui::buffer::Cell::new("Ж");
        driver
            .terminal
            .backend_mut()
            .draw(std::iter::once((40u16, 12u16, &cell)))
            .unwrap();
    };
    let has_stray = |driver: &Driver<TestBackend>| {
        driver
            .terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .any(|c| c.symbol() == "Ж")
    };
    let mut press = |driver: &mut Driver<TestBackend>, key: KeyEvent| {
        driver.apply_all(vec![Msg::Key(key)], now_at(t));
        t += Duration::from_secs(1);
        assert!(driver.draw_if_due(t).unwrap());
    };
    stray(&mut driver);
    // An ordinary redraw leaves it…
    press(
        &mut driver,
        KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE),
    );
    assert!(has_stray(&driver), "a diff-only redraw does not touch it");
    // …Ctrl+L repaints everything.
    press(
        &mut driver,
        KeyEvent::new(KeyCode::Char('l'), KeyModifiers::CONTROL),
    );
    assert!(!has_stray(&driver));
    // Closing an overlay (the help) repaints everything too.
    press(
        &mut driver,
        KeyEvent::new(KeyCode::F(1), KeyModifiers::NONE),
    );
    stray(&mut driver);
    let esc = KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE);
    driver.apply_all(vec![Msg::Key(esc)], now_at(t));
    assert!(
        driver.app.full_repaint,
        "closing the help asks for a full repaint"
    );
    assert!(driver.draw_if_due(t + Duration::from_secs(1)).unwrap());
    assert!(!driver.app.full_repaint);
    assert!(!has_stray(&driver));
}
