//! The remote chat's screen, without a server: the events the remote backend sends (the same
//! engine events as the local engine's) go through the one `update` into the one draw, in
//! ratatui's `TestBackend`. While a remote answer streams, its breakdown shows "—"; once it
//! finishes, the network round trip, the server's prompt time and cache, the rest, and the
//! source of the token counts; the roofline only from the configured server facts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use tokscope::app::conversation::Conversation;
use tokscope::app::{update, App, Effect, Msg, Now};
use tokscope::engine::{
    EngineEvent, LlamaCounters, ModelInfo, SamplingParams, StopReason, TurnReport,
};
use tokscope::metrics::remote::{
    ChunkMark, RemoteTimeline, ServerTimingSource, ServerTimings, ServerUsage,
};
use tokscope::metrics::roofline::{Bandwidth, BandwidthSource, Peaks, WeightBytes};

const URL: &str = "http://10.0.0.5:8000/v1";

fn now() -> Now {
    Now {
        instant: Instant::now(),
        unix_s: 1_700_000_000,
    }
}

fn remote_model(weights: Option<u64>) -> ModelInfo {
    ModelInfo {
        path: PathBuf::from(URL),
        file_name: "llama-3-8b @ http://10.0.0.5:8000".into(),
        name: "llama-3-8b".into(),
        architecture: "server".into(),
        backend: "remote".into(),
        devices: vec!["http://10.0.0.5:8000".into()],
        weight_bytes: weights.map(|b| WeightBytes {
            total_bytes: b,
            token_embd_bytes: 0,
            embd_row_bytes: 0,
            tied_output: false,
            output_bytes: 0,
        }),
        ..ModelInfo::default()
    }
}

fn render(app: &App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    terminal
        .draw(|f| {
            tokscope::ui::draw(f, app, Instant::now());
        })
        .unwrap();
    let buf = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

/// The value after `label` in the metrics pane.
fn pane_value(screen: &str, label: &str) -> Option<String> {
    screen.lines().find_map(|line| {
        let (_, pane) = line.split_once('│')?;
        let rest = pane.trim_start().strip_prefix(label)?;
        if !rest.starts_with("  ") {
            return None;
        }
        rest.split_whitespace().next().map(String::from)
    })
}

fn ready_app(weights: Option<u64>) -> App {
    let mut app = App::new(
        PathBuf::from(URL),
        Conversation::new("c1".into(), 0, None),
        SamplingParams::default(),
        64,
    );
    update(
        &mut app,
        Msg::Engine(EngineEvent::Ready(Box::new(remote_model(weights)))),
        now(),
    );
    app
}

/// Sends "Hello" and returns the request id the app asked for.
fn send(app: &mut App) -> u64 {
    update(app, Msg::Paste("Hello".into()), now());
    let effects = update(
        app,
        Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
        now(),
    );
    match effects.as_slice() {
        [Effect::Generate {
            id, model: None, ..
        }] => *id,
        other => panic!("expected one Generate, got {other:?}"),
    }
}

fn chunk(ms: u64) -> ChunkMark {
    ChunkMark {
        at: Duration::from_millis(ms),
        cumulative_tokens: None,
        reasoning: false,
    }
}

/// A finished remote turn as llama-server reports it: 4 chunks of one token, 2 ms round trip,
/// 20 ms of server prompt time over 10 prompt tokens (4 from its cache).
fn record() -> RemoteTimeline {
    RemoteTimeline {
        network_rtt: Some(Duration::from_millis(2)),
        sent_at: None,
        headers_at: Some(Duration::from_millis(1)),
        chunks: vec![chunk(30), chunk(40), chunk(50), chunk(60)],
        choice_chunks: [30, 30, 40, 50, 60, 60].map(Duration::from_millis).to_vec(),
        finished_at: Duration::from_millis(61),
        usage: Some(ServerUsage {
            prompt_tokens: 14,
            completion_tokens: 4,
            cached_tokens: None,
        }),
        server_timings: Some(ServerTimings {
            source: ServerTimingSource::LlamaServer,
            prompt_n: 10,
            prompt_ms: 20.0,
            cache_n: Some(4),
            predicted_n: 4,
            predicted_ms: 36.0,
        }),
        server_reported: None,
        server_sleeping: None,
        server_load_ms: None,
    }
}

fn finish(app: &mut App, id: u64, record: &RemoteTimeline) -> Vec<Effect> {
    let report = TurnReport {
        prompt: Default::default(),
        text: "a b c d".into(),
        thinking_text: None,
        stop_reason: StopReason::EndOfGeneration,
        timeline: record.turn_timeline(),
        context_used: 18,
        dropped_messages: 0,
        llama_counters: LlamaCounters::default(),
        first_logits: None,
        host: Default::default(),
        sampler: "server",
        sampling: Default::default(),
        spec: None,
        profile: None,
    };
    update(
        app,
        Msg::Engine(EngineEvent::Finished {
            request_id: id,
            report: Box::new(report),
        }),
        now(),
    )
}

#[test]
fn a_streaming_remote_answer_shows_its_breakdown_as_unknown() {
    let mut app = ready_app(None);
    let id = send(&mut app);
    for (i, (text, at)) in [("a", 30), (" b", 40)].into_iter().enumerate() {
        update(
            &mut app,
            Msg::Engine(EngineEvent::Token {
                request_id: id,
                index: i,
                text: text.into(),
                at: Duration::from_millis(at),
            }),
            now(),
        );
    }
    let screen = render(&app);
    assert_eq!(
        pane_value(&screen, "TTFT ms").as_deref(),
        Some("30.0"),
        "{screen}"
    );
    for label in [
        "network RTT ms",
        "server prompt ms",
        "1st step+net ms",
        "prompt tok",
    ] {
        assert_eq!(
            pane_value(&screen, label).as_deref(),
            Some("—"),
            "{label}: {screen}"
        );
    }
    assert!(screen.contains("tokens: 1 per chunk until the"), "{screen}");
    // The local stages a server does not have are not shown at all.
    assert!(!screen.contains("tmpl+tok"), "{screen}");
    assert!(screen.contains("remote · http://10.0.0.5:8000"), "{screen}");
}

#[test]
fn a_finished_remote_answer_shows_the_servers_breakdown_and_is_saved() {
    let mut app = ready_app(None);
    let id = send(&mut app);
    let effects = finish(&mut app, id, &record());
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Save(_))),
        "a finished remote turn is saved like any other"
    );
    let screen = render(&app);
    let v = |label| pane_value(&screen, label).unwrap_or_default();
    assert_eq!(v("TTFT ms"), "30.0", "{screen}");
    assert_eq!(v("network RTT ms"), "2.00", "{screen}");
    assert_eq!(v("server prompt ms"), "20.0", "{screen}");
    // 30 − 2 − 20.
    assert_eq!(v("1st step+net ms"), "8.00", "{screen}");
    assert_eq!(v("prompt tok"), "14", "{screen}");
    assert_eq!(v("cached tok"), "4", "{screen}");
    assert_eq!(v("tokens"), "4", "{screen}");
    // 3 gaps of 10 ms: 100 tok/s.
    assert_eq!(v("decode tok/s"), "100", "{screen}");
    assert!(
        screen.contains("tokens: server usage, 1 token per"),
        "{screen}"
    );
    // No server facts configured: no roofline.
    assert_eq!(v("MBU %"), "—", "{screen}");
    assert_eq!(v("bytes/token MB"), "—", "{screen}");
}

/// ollama's native durations: its model load is a row of its own before the prompt time,
/// the rest of TTFT leaves both out, and the source is named.
#[test]
fn an_ollama_answer_shows_its_model_load_and_source() {
    let mut app = ready_app(None);
    let id = send(&mut app);
    let mut r = record();
    r.server_timings = r.server_timings.map(|t| ServerTimings {
        source: ServerTimingSource::Ollama,
        cache_n: None,
        ..t
    });
    r.server_load_ms = Some(5.0);
    finish(&mut app, id, &r);
    let screen = render(&app);
    let v = |label| pane_value(&screen, label).unwrap_or_default();
    assert_eq!(v("server load ms"), "5.00", "{screen}");
    assert_eq!(v("server prompt ms"), "20.0", "{screen}");
    // 30 − 2 − 20 − 5.
    assert_eq!(v("1st step+net ms"), "3.00", "{screen}");
    assert!(screen.contains("server times: ollama"), "{screen}");
    // A llama-server answer has no load row.
    let mut app = ready_app(None);
    let id = send(&mut app);
    finish(&mut app, id, &record());
    assert!(!render(&app).contains("server load ms"));
}

#[test]
fn the_roofline_of_a_remote_model_comes_only_from_the_configured_facts() {
    // 16 GB of weights, 3350 GB/s: a ceiling of 209 tok/s; 100 tok/s is 48% of it.
    let mut app = ready_app(Some(16_000_000_000));
    app.bandwidth = Peaks::configured(Some(Bandwidth {
        bytes_per_s: 3350e9,
        source: BandwidthSource::Config,
    }));
    let id = send(&mut app);
    finish(&mut app, id, &record());
    let screen = render(&app);
    let v = |label| pane_value(&screen, label).unwrap_or_default();
    assert_eq!(v("bytes/token MB"), "16000", "{screen}");
    assert_eq!(v("ceiling tok/s"), "209", "{screen}");
    assert!(screen.contains("MBU  48%"), "{screen}");
    assert!(screen.contains("roofline configured"), "{screen}");
}
