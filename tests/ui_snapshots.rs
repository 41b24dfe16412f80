//! Screen tests: the chat screen drawn into ratatui's `TestBackend` at 80×24 and 120×40 for
//! every visible state, compared with insta snapshots of the text (styles ignored). All data is
//! fixed: durations are constants and `now` is `base + offset`, so only differences of instants
//! reach the screen and the snapshots are deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;
use tokscope::app::conversation::{AssistantTurn, Conversation, Exchange};
use tokscope::app::{App, EngineStatus, Mode, Notice, NoticeKind, Scroll};
use tokscope::engine::{LlamaCounters, ModelInfo, SamplingParams, StopReason, TurnReport};
use tokscope::llama::settings::KvType;
use tokscope::metrics::roofline::{Bandwidth, BandwidthSource, KvShape, Peaks, WeightBytes};
use tokscope::metrics::TurnTimeline;
use unicode_width::UnicodeWidthStr;

const MODEL_FILE: &str = "qwen2.5-0.5b-instruct-q4_k_m.gguf";

/// A fixed model, field by field.
fn model() -> ModelInfo {
    ModelInfo {
        path: PathBuf::from(format!("/models/{MODEL_FILE}")),
        file_name: MODEL_FILE.to_string(),
        file_size_bytes: 397_808_192,
        fingerprint: "0123456789abcdef".to_string(),
        name: "Qwen2.5 0.5B Instruct".to_string(),
        architecture: "qwen2".to_string(),
        n_params: 494_032_768,
        n_layer: 24,
        n_embd: 896,
        n_head: 14,
        n_head_kv: 2,
        n_vocab: 151_936,
        n_ctx_train: 32_768,
        quantization: "Q4_K_M".to_string(),
        weights_bytes: 391_000_000,
        n_ctx: 4096,
        n_batch: 512,
        threads: 8,
        backend: "CUDA".to_string(),
        devices: vec![
            "CPU (CPU: AMD EPYC 9654)".to_string(),
            "CUDA0 (CUDA: NVIDIA H200)".to_string(),
        ],
        n_gpu_layers: 25,
        kernels: "default".into(),
        weights_repacked: false,
        fa_kv_kernel: None,
        template: "model".to_string(),
        template_note: None,
        synthetic: false,
        llama_cpp: "llama-cpp-2 0.1.160".to_string(),
        load_ms: 812.0,
        load_stages: Default::default(),
        // Qwen2.5 0.5B Q4_K_M-like figures: ~398 MB of weights read per token, minus the
        // embedding table; 24 layers × 128-wide K and V per position in f16.
        weight_bytes: Some(WeightBytes {
            total_bytes: 397_000_000,
            token_embd_bytes: 100_000_000,
            embd_row_bytes: 1_400,
            tied_output: false,
            output_bytes: 100_000_000,
        }),
        kv_shape: Some(KvShape {
            n_layer: 24,
            n_embd_k: 128,
            n_embd_v: 128,
            type_k: KvType::F16,
            type_v: KvType::F16,
            sliding_window: None,
        }),
        kv_cache_bytes: None,
    }
}

fn synthetic_model() -> ModelInfo {
    ModelInfo {
        path: PathBuf::from("/tmp/synth-tiny.gguf"),
        file_name: "synth-tiny.gguf".to_string(),
        file_size_bytes: 470_000,
        name: "tokscope synthetic tiny".to_string(),
        architecture: "llama".to_string(),
        n_params: 470_000,
        quantization: "F16".to_string(),
        backend: "CPU".to_string(),
        devices: vec!["CPU (CPU: AMD EPYC 9654)".to_string()],
        n_gpu_layers: 0,
        n_ctx: 512,
        template: "completion".to_string(),
        template_note: Some("the GGUF carries no chat template".to_string()),
        synthetic: true,
        ..model()
    }
}

fn ready_app() -> App {
    let mut app = App::new(
        PathBuf::from(format!("/models/{MODEL_FILE}")),
        Conversation::new("c1".to_string(), 0, None),
        SamplingParams::default(),
        512,
    );
    app.engine = EngineStatus::Ready;
    app.model = Some(model());
    // A fixed datasheet figure (the snapshots must not depend on this machine).
    app.bandwidth = Peaks::configured(Some(Bandwidth {
        bytes_per_s: 4.8e12,
        source: BandwidthSource::Datasheet {
            device: "H200".into(),
        },
    }));
    app
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A fixed, slightly irregular gap pattern (ms), with a spike now and then.
fn gap(i: usize) -> Duration {
    let base = 18 + (i * 7 % 11) as u64;
    if i % 23 == 22 {
        ms(base + 40)
    } else {
        Duration::from_micros(base * 1000 + (i * 131 % 997) as u64)
    }
}

/// Split text into token-sized pieces (a few characters each, on char boundaries).
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        cur.push(c);
        if cur.chars().count() >= 4 || c == ' ' || c == '\n' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The times each piece was ready, first at `ttft`.
fn ready_times(n: usize, ttft: Duration) -> Vec<Duration> {
    let mut at = ttft;
    (0..n)
        .map(|i| {
            if i > 0 {
                at += gap(i);
            }
            at
        })
        .collect()
}

/// A turn on the loaded model (as the chat starts every turn): its figures are drawn against
/// that model's roofline.
fn on_model(mut turn: AssistantTurn) -> AssistantTurn {
    turn.model = Some(tokscope::history::SavedModel::of(&model()));
    turn
}

/// A turn that streamed `text` and is still streaming.
fn streaming_turn(id: u64, text: &str, prompt: usize, cached: usize) -> AssistantTurn {
    let mut turn = on_model(AssistantTurn::new(id, Some(MODEL_FILE.to_string())));
    turn.on_prefill_started(prompt, cached);
    let parts = pieces(text);
    for (piece, at) in parts.iter().zip(ready_times(parts.len(), ms(184))) {
        turn.on_token(piece, at);
    }
    turn
}

/// A turn that finished the way `reason` says, with a full engine report.
fn finished_turn(
    id: u64,
    text: &str,
    prompt: usize,
    cached: usize,
    reason: StopReason,
) -> AssistantTurn {
    finish(
        streaming_turn(id, text, prompt, cached),
        text,
        prompt,
        cached,
        reason,
    )
}

/// `turn` finished the way `reason` says with the answer `text`, with a full engine report.
fn finish(
    mut turn: AssistantTurn,
    text: &str,
    prompt: usize,
    cached: usize,
    reason: StopReason,
) -> AssistantTurn {
    let token_ready_at = turn.timeline.token_ready_at.clone();
    let last = token_ready_at.last().copied().unwrap_or(ms(180));
    let report = TurnReport {
        prompt: Default::default(),
        text: text.to_string(),
        thinking_text: turn.thinking.clone(),
        stop_reason: reason,
        timeline: TurnTimeline {
            // 171 ms = queue + template/tokenize + prefill, as the engine takes them.
            queue: Some(Duration::from_micros(27_760)),
            template_tokenize: Some(Duration::from_micros(1_240)),
            prefill: Some(ms(142)),
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            prefill_done_at: Some(ms(171)),
            decode_calls: token_ready_at.len().saturating_sub(1),
            decode_compute: ms(15) * token_ready_at.len() as u32,
            token_ready_at,
            finished_at: Some(last + ms(1)),
            pass_done_at: Vec::new(),
            pass_started_at: Vec::new(),
            prefill_chunk_done_at: Vec::new(),
            accepted_drafts: 0,
            remote: None,
            thinking: turn.timeline.thinking,
            submitted_at: None,
        },
        context_used: prompt + turn.timeline.tokens_generated(),
        dropped_messages: 0,
        llama_counters: LlamaCounters::default(),
        first_logits: None,
        host: Default::default(),
        sampler: "host-greedy",
        sampling: Default::default(),
        spec: None,
        profile: None,
    };
    turn.on_finished(report);
    turn
}

const ANSWER_1: &str = "Hello! I'm a small language model. Ask me anything — I'll answer as well as 0.5B parameters allow.";

const ANSWER_2: &str = "## Ownership in brief

Every value has **one owner**; when the owner goes out of scope the value is *dropped*.

1. A move transfers ownership.
2. A borrow (`&T` or `&mut T`) lends it without moving.

- no data races: one `&mut` **or** many `&`
- no dangling references

```rust
fn main() {
    let s = String::from(\"hi\");
    let t = &s;
    println!(\"{t}\");
}
```

That is the whole idea.";

const ANSWER_STREAMING: &str = "## Borrowing

A reference lets code *use* a value without owning it:

- `&T` shares it, read-only
- `&mut T` lends it exclusively

```rust
fn len(s: &String) -> usize {
    s.len()
";

fn finished_app() -> App {
    let mut app = ready_app();
    app.conversation.exchanges.push(Exchange {
        user: "hi".to_string(),
        assistant: Some(finished_turn(
            1,
            ANSWER_1,
            38,
            0,
            StopReason::EndOfGeneration,
        )),
    });
    app.conversation.exchanges.push(Exchange {
        user: "Explain Rust ownership briefly, with a code example.".to_string(),
        assistant: Some(finished_turn(
            2,
            ANSWER_2,
            112,
            67,
            StopReason::EndOfGeneration,
        )),
    });
    app.context_used = app.conversation.exchanges[1]
        .assistant
        .as_ref()
        .and_then(|a| a.context_used)
        .unwrap_or_default();
    app
}

fn streaming_app() -> App {
    let mut app = finished_app();
    app.conversation.exchanges.push(Exchange {
        user: "And borrowing?".to_string(),
        assistant: Some(streaming_turn(3, ANSWER_STREAMING, 260, 249)),
    });
    app.active_since = Some(base());
    app
}

fn base() -> Instant {
    use std::sync::OnceLock;
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// The time the screen is drawn at: a fixed offset after `base`.
fn now() -> Instant {
    base() + ms(1_234)
}

/// The buffer as text, one line per row, trailing spaces cut (styles ignored).
fn buffer_text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        let mut hidden = 0usize;
        for x in 0..buf.area.width {
            let symbol = buf[(x, y)].symbol();
            if hidden == 0 {
                line.push_str(symbol);
            }
            hidden = hidden.max(symbol.width()).saturating_sub(1);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn draw_at(app: &App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| {
            tokscope::ui::draw(frame, app, now());
        })
        .unwrap();
    terminal
}

fn render(app: &App, width: u16, height: u16) -> String {
    buffer_text(draw_at(app, width, height).backend().buffer())
}

/// Snapshot a state at 80×24 and 120×40.
fn snapshot_both(name: &str, app: &App) {
    for (w, h) in [(80u16, 24u16), (120, 40)] {
        let screen = render(app, w, h);
        // Drawing is pure: the same state draws the same screen.
        assert_eq!(screen, render(app, w, h));
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), screen);
    }
}

#[test]
fn empty_ready() {
    snapshot_both("empty_ready", &ready_app());
}

#[test]
fn loading_with_progress() {
    let mut app = ready_app();
    app.engine = EngineStatus::Loading {
        stage: tokscope::engine::LoadStage::Weights,
        progress: 0.42,
        read: Some(tokscope::metrics::LoadRead {
            file_bytes: 253_000_000,
            elapsed: std::time::Duration::from_millis(1_300),
        }),
    };
    app.model = None;
    snapshot_both("loading", &app);
}

#[test]
fn prefill_shows_the_waiting_clock() {
    let mut app = finished_app();
    let mut turn = on_model(AssistantTurn::new(3, Some(MODEL_FILE.to_string())));
    turn.on_prefill_started(260, 249);
    app.conversation.exchanges.push(Exchange {
        user: "And borrowing?".to_string(),
        assistant: Some(turn),
    });
    app.active_since = Some(base());
    let screen = render(&app, 120, 40);
    assert!(screen.contains("waiting ms"), "{screen}");
    assert!(screen.contains("1234"), "{screen}");
    snapshot_both("prefill", &app);
}

#[test]
fn a_long_prefill_shows_its_progress_and_esc_shows_stopping_at_once() {
    let mut app = finished_app();
    let mut turn = on_model(AssistantTurn::new(3, Some(MODEL_FILE.to_string())));
    turn.on_prefill_started(4_096, 0);
    app.conversation.exchanges.push(Exchange {
        user: "A very long document".to_string(),
        assistant: Some(turn),
    });
    app.active_since = Some(base());
    let screen = render(&app, 120, 40);
    assert!(screen.contains("prefill 0/4096 tok"), "{screen}");
    // The engine reports each micro-batch.
    tokscope::app::update(
        &mut app,
        tokscope::app::Msg::Engine(tokscope::engine::EngineEvent::PrefillProgress {
            request_id: 3,
            done: 1_536,
            total: 4_096,
            at: ms(900),
        }),
        tokscope::app::Now {
            instant: now(),
            unix_s: 0,
        },
    );
    let screen = render(&app, 120, 40);
    assert!(screen.contains("prefill 1536/4096 tok"), "{screen}");
    // Esc: the screen says so at once, before the engine has stopped.
    let effects = tokscope::app::update(
        &mut app,
        tokscope::app::Msg::Key(crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Esc,
            crossterm::event::KeyModifiers::NONE,
        )),
        tokscope::app::Now {
            instant: now(),
            unix_s: 0,
        },
    );
    assert_eq!(effects, vec![tokscope::app::Effect::Cancel(3)]);
    let screen = render(&app, 120, 40);
    assert!(
        screen.contains("stopping… (prefill 1536/4096 tok)"),
        "{screen}"
    );
    assert!(screen.contains("stopping…"), "status bar: {screen}");
}

#[test]
fn queued_shows_the_waiting_clock() {
    let mut app = finished_app();
    app.conversation.exchanges.push(Exchange {
        user: "And borrowing?".to_string(),
        assistant: Some(on_model(AssistantTurn::new(3, None))),
    });
    app.active_since = Some(base());
    let screen = render(&app, 80, 24);
    assert!(screen.contains("queued"), "{screen}");
    insta::assert_snapshot!("queued_shows_the_waiting_clock_80x24", screen);
}

#[test]
fn streaming_with_metrics() {
    let app = streaming_app();
    let screen = render(&app, 120, 40);
    for figure in [
        "TTFT ms",
        "decode tok/s",
        "ITL ms",
        "p99",
        "context tok",
        "streaming",
    ] {
        assert!(screen.contains(figure), "{figure} missing:\n{screen}");
    }
    snapshot_both("streaming", &app);
}

#[test]
fn finished() {
    let mut app = finished_app();
    app.input.set("Summarise that\nin one line");
    snapshot_both("finished", &app);
}

#[test]
fn a_partial_offload_blends_the_gpu_and_cpu_bandwidths() {
    // 12 of 25 layers on the GPU (H200 datasheet), the rest read at the CPU probe's speed: the
    // pane names the split, each side's figure and where it comes from, and the blend the
    // ceiling is computed from.
    let mut app = finished_app();
    if let Some(m) = app.model.as_mut() {
        m.n_gpu_layers = 12;
    }
    app.bandwidth = Peaks {
        configured: None,
        gpu: Some(Bandwidth {
            bytes_per_s: 4.8e12,
            source: BandwidthSource::Datasheet {
                device: "H200".into(),
            },
        }),
        cpu: Some(Bandwidth {
            bytes_per_s: 40e9,
            source: BandwidthSource::Measured {
                method: "read/copy/triad, 8 threads".into(),
            },
        }),
    };
    let screen = render(&app, 120, 40);
    for figure in [
        "12/25 layers on GPU",
        "GPU GB/s",
        "CPU GB/s",
        "blend GB/s",
        "datasheet, H200",
    ] {
        assert!(screen.contains(figure), "{figure} missing:\n{screen}");
    }
    // llama.cpp offloads the output layer first: of 12 offloaded, 11 are repeating layers
    // with their KV cache.
    assert!(screen.contains("11/24 layers"), "{screen}");
    // All layers and the output layer on the GPU: the datasheet alone, as before.
    if let Some(m) = app.model.as_mut() {
        m.n_gpu_layers = 25;
    }
    let full = render(&app, 120, 40);
    assert!(
        full.contains("datasheet, H200") && !full.contains("blend"),
        "{full}"
    );
    // The cost names what its hour is of: the GPU's here, this machine's on the CPU below.
    assert!(full.contains("$/1M @2.00/GPU-h"), "{full}");
    // Nothing offloaded: the CPU probe, never the GPU's datasheet.
    if let Some(m) = app.model.as_mut() {
        m.n_gpu_layers = 0;
    }
    let cpu = render(&app, 120, 40);
    assert!(cpu.contains("$/1M @2.00/machine-h"), "{cpu}");
    // The source wraps onto the next row instead of being cut.
    assert!(
        cpu.contains("roofline measured,")
            && cpu.contains("read/copy/triad, 8 threads")
            && !cpu.contains("datasheet"),
        "{cpu}"
    );
    if let Some(m) = app.model.as_mut() {
        m.n_gpu_layers = 12;
    }
    snapshot_both("partial_offload", &app);
}

#[test]
fn few_gaps_are_marked_and_a_resumed_turn_keeps_its_itl_without_bars() {
    let mut app = finished_app();
    // A three-piece answer: two gaps.
    app.conversation.exchanges.push(Exchange {
        user: "Say hi.".to_string(),
        assistant: Some(finished_turn(
            3,
            "Hi there.",
            20,
            0,
            StopReason::EndOfGeneration,
        )),
    });
    let screen = render(&app, 120, 40);
    assert!(screen.contains("gaps, few"), "{screen}");
    let history: Vec<&str> = screen.lines().filter(|l| l.contains("~")).collect();
    assert!(
        !history.is_empty(),
        "the short turn's rate is marked: {screen}"
    );
    // A resumed turn: its summary was saved, its timeline was not.
    let turn = app.conversation.exchanges[1].assistant.as_mut().unwrap();
    let itl = turn.summary.as_ref().unwrap().itl.unwrap();
    turn.timeline = Default::default();
    app.conversation.exchanges.pop();
    let screen = render(&app, 120, 40);
    assert!(screen.contains(&format!("{} gaps", itl.count)), "{screen}");
    assert!(!screen.contains("no gaps yet"), "{screen}");
    assert!(screen.contains("ITL bars: not saved (resumed)"), "{screen}");
}

#[test]
fn stopped() {
    let mut app = finished_app();
    let partial = "A reference lets code use a value without owning";
    app.conversation.exchanges.push(Exchange {
        user: "And borrowing?".to_string(),
        assistant: Some(finished_turn(3, partial, 260, 249, StopReason::Cancelled)),
    });
    let screen = render(&app, 80, 24);
    assert!(screen.contains("stopped"), "{screen}");
    snapshot_both("stopped", &app);
}

#[test]
fn engine_failed_to_load() {
    let mut app = ready_app();
    let error =
        "model not found: /models/missing.gguf (check the path, or run `tokscope fetch-demo`)";
    app.engine = EngineStatus::Failed(error.to_string());
    app.model = None;
    app.model_path = PathBuf::from("/models/missing.gguf");
    app.notice = Some(Notice {
        text: error.to_string(),
        kind: NoticeKind::Error,
    });
    snapshot_both("error_load", &app);
}

#[test]
fn turn_failed() {
    let mut app = finished_app();
    let mut turn = on_model(AssistantTurn::new(3, Some(MODEL_FILE.to_string())));
    turn.on_prefill_started(260, 249);
    let error = "decode failed: llama_decode returned -3 (out of KV cache space)";
    turn.on_failed(error.to_string());
    app.conversation.exchanges.push(Exchange {
        user: "And borrowing?".to_string(),
        assistant: Some(turn),
    });
    app.notice = Some(Notice {
        text: error.to_string(),
        kind: NoticeKind::Error,
    });
    snapshot_both("error_turn", &app);
}

#[test]
fn help_overlay() {
    let mut app = finished_app();
    app.mode = Mode::Help;
    snapshot_both("help", &app);
    // Scrolled far past the end: clamped to the last page.
    app.help_scroll = 10_000;
    let screen = render(&app, 80, 24);
    assert!(screen.contains("Status line"), "{screen}");
    insta::assert_snapshot!("help_scrolled_end_80x24", screen.clone());
    // End jumps to that last page at any width; a page up from there moves up.
    app.help_scroll = 0;
    app.help_from_end = Some(0);
    assert_eq!(render(&app, 80, 24), screen);
    app.help_from_end = Some(20);
    assert_ne!(render(&app, 80, 24), screen);
}

#[test]
fn synthetic_model_is_labelled() {
    let mut app = ready_app();
    app.model = Some(synthetic_model());
    let mut turn = finished_turn(
        1,
        "Question Answer hello the of noise tokens",
        12,
        0,
        StopReason::MaxTokens,
    );
    turn.model = Some(tokscope::history::SavedModel::of(&synthetic_model()));
    app.conversation.exchanges.push(Exchange {
        user: "hello".to_string(),
        assistant: Some(turn),
    });
    app.context_used = 20;
    for (w, h) in [(80u16, 24u16), (120, 40)] {
        let screen = render(&app, w, h);
        assert!(
            screen.contains(ModelInfo::SYNTHETIC_LABEL) || w < 100,
            "{screen}"
        );
        assert!(screen.contains("SYNTHETIC") || screen.contains("synthetic weights"));
    }
    snapshot_both("synthetic", &app);
}

#[test]
fn narrow_pane_never_cuts_a_figure() {
    let app = streaming_app();
    let screen = render(&app, 60, 20);
    assert!(screen.contains("TTFT"), "{screen}");
    assert!(screen.contains("tok/s"), "{screen}");
    // Too narrow for the pane, the figures go on one line: each number on it is a whole
    // number of the wide pane (184, 40.2, 23.9, 322 / 4096), never a cut one.
    let line = screen
        .lines()
        .find(|l| l.starts_with("TTFT "))
        .expect(&screen);
    let wide = render(&app, 120, 40);
    let wide_pane: Vec<&str> = wide
        .lines()
        .filter_map(|l| l.rsplit_once('│').map(|(_, pane)| pane))
        .flat_map(str::split_whitespace)
        .collect();
    let numbers: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '/')
        .filter(|w| w.parse::<f64>().is_ok())
        .collect();
    assert_eq!(numbers.len(), 5, "{line}");
    for n in numbers {
        assert!(
            wide_pane.contains(&n),
            "{n} of {line:?} is not in the wide pane:\n{wide}"
        );
    }
    insta::assert_snapshot!("narrow_pane_never_cuts_a_figure_60x20", screen);
}

/// The metrics pane's `label value` rows (right of the last `│`), the value the row's last
/// word and the label the words before it, each run of spaces as one; gauges and charts,
/// whose bars change with the width, left out.
fn pane_figures(screen: &str) -> std::collections::BTreeMap<String, String> {
    let bars = |w: &str| w.chars().any(|c| ('\u{2580}'..='\u{259f}').contains(&c));
    screen
        .lines()
        .skip(1)
        .filter_map(|line| {
            let pane = &line[line.rfind('│')? + '│'.len_utf8()..];
            let words: Vec<&str> = pane.split_whitespace().collect();
            let (value, label) = words.split_last()?;
            (!label.is_empty() && !words.iter().any(|w| bars(w)))
                .then(|| (label.join(" "), value.to_string()))
        })
        .collect()
}

/// The metrics pane at 80 and at 120 columns: the narrow one leaves rows out (the TTFT
/// breakdown, TPOT), never changes a figure it keeps.
#[test]
fn the_metrics_pane_shows_the_same_figures_at_80_and_120_columns() {
    for app in [finished_app(), streaming_app()] {
        let (narrow, wide) = (render(&app, 80, 24), render(&app, 120, 40));
        let (narrow_figures, wide_figures) = (pane_figures(&narrow), pane_figures(&wide));
        assert!(narrow_figures.len() >= 8, "{narrow}");
        for (label, value) in &narrow_figures {
            assert_eq!(
                wide_figures.get(label),
                Some(value),
                "{label} at 80 columns:\n{narrow}\nat 120:\n{wide}"
            );
        }
    }
}

/// The palette on a light background: every style the finished and streaming screens use,
/// as `fg/bg modifiers: sample`. A colour a white background hides (white, the grey and
/// light shades) is never a text colour without a background of its own: theme.rs's promise
/// that the screen reads on dark and on light terminals.
#[test]
fn light_background_palette_never_hides_a_figure() {
    use ratatui::style::Color;
    let hidden_on_white = |c: Color| {
        matches!(
            c,
            Color::White
                | Color::Gray
                | Color::LightYellow
                | Color::LightCyan
                | Color::LightGreen
                | Color::LightMagenta
                | Color::Rgb(..)
                | Color::Indexed(..)
        )
    };
    let mut palette = std::collections::BTreeMap::new();
    for app in [finished_app(), streaming_app()] {
        let terminal = draw_at(&app, 120, 40);
        let buffer = terminal.backend().buffer();
        for cell in buffer.content() {
            if cell.symbol().trim().is_empty() {
                continue;
            }
            let key = format!("{:?}/{:?} {:?}", cell.fg, cell.bg, cell.modifier);
            assert!(
                !hidden_on_white(cell.fg) || cell.bg != Color::Reset,
                "{key}: {:?} would vanish on a light background",
                cell.symbol()
            );
            let sample: &mut String = palette.entry(key).or_default();
            if sample.chars().count() < 12 {
                sample.push_str(cell.symbol());
            }
        }
    }
    let listing: Vec<String> = palette.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    insta::assert_snapshot!("light_background_palette", listing.join("\n"));
}

#[test]
fn too_small_says_its_size_and_never_panics() {
    let app = streaming_app();
    let screen = render(&app, 49, 12);
    assert!(screen.contains("terminal too small (49×12"), "{screen}");
    insta::assert_snapshot!("too_small_says_its_size_49x12", screen);
    insta::assert_snapshot!("too_small_says_its_size_10x5", render(&app, 10, 5));
    insta::assert_snapshot!("too_small_says_its_size_1x1", render(&app, 1, 1));
    // Degenerate sizes never panic.
    for (w, h) in [(0, 0), (1, 0), (0, 1), (2, 2), (50, 11), (49, 30)] {
        render(&app, w, h);
    }
}

#[test]
fn scrolled_up_shows_how_much_is_below() {
    let mut app = finished_app();
    app.scroll = Scroll {
        lines_from_bottom: 6,
    };
    let screen = render(&app, 80, 24);
    assert!(screen.contains("↓ 6 more lines"), "{screen}");
    insta::assert_snapshot!("scrolled_up_says_how_much_is_below_80x24", screen);
}

#[test]
fn scroll_is_clamped_to_the_top() {
    let mut app = streaming_app();
    app.scroll = Scroll {
        lines_from_bottom: usize::MAX / 2,
    };
    let screen = render(&app, 80, 24);
    let rows: Vec<&str> = screen.lines().collect();
    // Row 0 is the status line; the conversation starts on row 1 with the first turn.
    assert!(rows[1].starts_with("▍you"), "{screen}");
    assert!(rows[2].starts_with("  hi"), "{screen}");
    assert!(screen.contains("more lines · End follows"), "{screen}");
    // The state itself is not changed by drawing.
    assert_eq!(app.scroll.lines_from_bottom, usize::MAX / 2);
}

#[test]
fn a_thousand_tokens_stream_fine() {
    let mut app = ready_app();
    let text: String = (0..1000)
        .map(|i| match i % 50 {
            0 => format!("\n\n### Part {}\n\n", i / 50),
            25 => "\n\n```\ncode line\n```\n\n".to_string(),
            _ => format!("word{i} "),
        })
        .collect();
    let mut turn = on_model(AssistantTurn::new(1, None));
    turn.on_prefill_started(40, 0);
    let times = ready_times(1000, ms(150));
    for (i, at) in times.iter().enumerate() {
        let piece = match i % 50 {
            0 => format!("\n\n### Part {}\n\n", i / 50),
            25 => "\n\n```\ncode line\n```\n\n".to_string(),
            _ => format!("word{i} "),
        };
        turn.on_token(&piece, *at);
    }
    assert_eq!(turn.text, text);
    app.conversation.exchanges.push(Exchange {
        user: "write a lot".to_string(),
        assistant: Some(turn),
    });
    app.active_since = Some(base());
    for (w, h) in [(80u16, 24u16), (120, 40), (200, 60)] {
        let screen = render(&app, w, h);
        // Following the stream: the newest words are on screen, with the cursor after them.
        assert!(screen.contains("word999▌"), "{screen}");
        assert!(screen.contains("1000"), "token count missing:\n{screen}");
    }
}

#[test]
fn control_characters_never_reach_the_terminal() {
    let mut app = ready_app();
    let nasty = "clear \u{1b}[2J\u{1b}]0;pwned\u{7} done\r\n\u{9b}31m";
    app.conversation.exchanges.push(Exchange {
        user: format!("user {nasty}"),
        assistant: Some(finished_turn(1, nasty, 10, 0, StopReason::EndOfGeneration)),
    });
    app.input.set(nasty);
    app.notice = Some(Notice {
        text: nasty.to_string(),
        kind: NoticeKind::Warning,
    });
    let terminal = draw_at(&app, 120, 40);
    let buf = terminal.backend().buffer();
    for cell in buf.content() {
        assert!(
            !cell.symbol().chars().any(|c| c.is_control()),
            "control character in {:?}",
            cell.symbol()
        );
    }
    let screen = buffer_text(buf);
    assert!(screen.contains("clear ␛[2J␛]0;pwned␇ done"), "{screen}");
}

#[test]
fn input_grows_and_places_the_cursor() {
    let mut app = ready_app();
    app.input.set("first line\nsecond line\nthird");
    let mut terminal = draw_at(&app, 80, 24);
    let screen = buffer_text(terminal.backend().buffer());
    let rows: Vec<&str> = screen.lines().collect();
    assert_eq!(rows[21], "› first line");
    assert_eq!(rows[22], "  second line");
    assert_eq!(rows[23], "  third");
    // After "third": column 2 (prompt) + 5.
    terminal.backend_mut().assert_cursor_position((7, 23));
}

#[test]
fn only_the_visible_tail_is_rendered_and_it_matches_the_full_render() {
    let mut app = finished_app();
    // Many earlier exchanges: the tail must equal the end of the full rendering.
    let first = app.conversation.exchanges[0].clone();
    for _ in 0..50 {
        app.conversation.exchanges.insert(0, first.clone());
    }
    let full = tokscope::ui::conversation::lines(&app, 80, now());
    let tail = tokscope::ui::conversation::tail_lines(&app, 80, now(), 30);
    assert!(
        tail.len() >= 30 && tail.len() < full.len() / 4,
        "{} of {}",
        tail.len(),
        full.len()
    );
    assert_eq!(&full[full.len() - tail.len()..], &tail[..]);
    // Asking for everything gives everything.
    assert_eq!(
        tokscope::ui::conversation::tail_lines(&app, 80, now(), usize::MAX),
        full
    );
}

#[test]
fn one_huge_exchange_is_rendered_from_its_tail_and_the_tail_matches_the_full_render() {
    // A single exchange holding megabytes (a pasted file and a long answer, with a code block
    // that is open where the tail starts): the pane renders only a tail of whole paragraphs,
    // and what it shows equals the end of the full rendering.
    let mut app = finished_app();
    let para = "The keeper climbed the stairs again and wrote in the log that the wind had \
                turned to the north-east, as it did every autumn.";
    let mut answer = String::new();
    for i in 0..4000 {
        answer.push_str(&format!("{i}: {para}\n\n"));
        if i == 1000 {
            // A code block that spans the last paragraphs, blank lines included.
            answer.push_str("```rust\nfn main() {\n\n    let x = 1;\n\n");
        }
    }
    answer.push_str("    println!(\"{x}\");\n}\n```\n\nThe end.");
    let user = format!("{para}\n\n").repeat(20_000);
    assert!(answer.len() > 500_000 && user.len() > 2_000_000);
    app.conversation.exchanges[1].user = user;
    app.conversation.exchanges[1]
        .assistant
        .as_mut()
        .unwrap()
        .text = answer;
    let full = tokscope::ui::conversation::lines(&app, 80, now());
    for wanted in [1, 30, 200] {
        let tail = tokscope::ui::conversation::tail_lines(&app, 80, now(), wanted);
        assert!(
            tail.len() >= wanted && tail.len() < full.len() / 4,
            "{wanted}: {} of {}",
            tail.len(),
            full.len()
        );
        assert_eq!(&full[full.len() - tail.len()..], &tail[..], "{wanted}");
    }
    // Far enough up, the user's paste is reached, from its tail too.
    // (The answer is about 12,000 lines here and the paste about 60,000.)
    let deep = full.len() - 30_000;
    let tail = tokscope::ui::conversation::tail_lines(&app, 80, now(), deep);
    assert!(
        tail.len() >= deep && tail.len() < full.len(),
        "{deep}: {} of {}",
        tail.len(),
        full.len()
    );
    assert_eq!(&full[full.len() - tail.len()..], &tail[..]);
}

#[test]
fn finished_with_speculative_decoding_figures() {
    // An n-gram turn: 40 drafted, 30 accepted over 10 verify passes (6 rejecting), 4 plain
    // passes; the metrics column shows acceptance, tokens per pass, draft and verify time,
    // passes per token and the expected beside the measured speed-up.
    let mut app = finished_app();
    app.conversation.exchanges[1]
        .assistant
        .as_mut()
        .unwrap()
        .spec = Some(tokscope::metrics::spec::SpecStats {
        mode: "ngram",
        draft_max: 4,
        verify_passes: 10,
        plain_passes: 4,
        drafted: 40,
        accepted: 30,
        rejections: 6,
        draft_time: Duration::from_micros(900),
        verify_time: Duration::from_millis(120),
        plain_time: Duration::from_millis(32),
        draft_cost_ratio: 0.0,
        row_cost: Some(0.25),
        off_reason: None,
        ..Default::default()
    });
    let screen = render(&app, 120, 40);
    assert!(screen.contains("spec ngram k≤4"), "{screen}");
    // The roofline with its compute term: α = 30/36, k = 4, a verify pass of 1 + 4·0.25
    // plain passes, 10 of the 14 passes verifying.
    let with_compute = tokscope::metrics::spec::expected_speedup_over_steps(
        30.0 / 36.0,
        4.0,
        0.0,
        0.25,
        10.0 / 14.0,
    );
    assert!(
        screen.lines().any(|l| l.contains("exp × with compute")
            && l.contains(&format!(" {with_compute:.2}"))),
        "{with_compute} {screen}"
    );
    assert!(screen.contains("30/40 accepted"), "{screen}");
    snapshot_both("finished_spec", &app);
}

/// An answer's score against a reference, token by token: `(kld, same top, p_ref)`.
fn answer_score(tokens: &[(f64, bool, f64)]) -> tokscope::metrics::quality::AnswerScore {
    use tokscope::metrics::quality::{AnswerScore, TokenScore};
    let scores: Vec<TokenScore> = tokens
        .iter()
        .map(|&(kld, same_top, p_ref)| TokenScore {
            kld,
            same_top,
            top_ref: 11,
            top_cand: if same_top { 11 } else { 12 },
            p_ref,
            p_cand: 0.5,
            ln_p_cand: 0.5f64.ln(),
            entropy_ref: Some(1.2),
            entropy_cand: Some(1.3),
        })
        .collect();
    let ids: Vec<i32> = (0..scores.len() as i32).collect();
    let texts = ids.iter().map(|i| format!("t{i}")).collect();
    AnswerScore::new(
        PathBuf::from("/models/qwen2.5-0.5b-instruct-f16.gguf"),
        scores,
        &ids,
        texts,
        38,
    )
}

/// [`answer_score`] with the tokens' texts given (ids from 1).
fn answer_score_of(
    tokens: &[(f64, bool, f64)],
    texts: &[&str],
) -> tokscope::metrics::quality::AnswerScore {
    let base = answer_score(tokens);
    let scores: Vec<_> = base.tokens.iter().map(|t| t.score).collect();
    let ids: Vec<i32> = (1..=scores.len() as i32).collect();
    let texts = texts.iter().map(|t| t.to_string()).collect();
    tokscope::metrics::quality::AnswerScore::new(base.reference, scores, &ids, texts, 38)
}

/// The last answer of `app`'s conversation scored so.
fn score_last(app: &mut App, score: tokscope::metrics::quality::AnswerScore) {
    use tokscope::app::conversation::TurnQuality;
    let last = app.conversation.exchanges.len() - 1;
    app.conversation.exchanges[last]
        .assistant
        .as_mut()
        .unwrap()
        .quality = Some(TurnQuality::Scored(Box::new(score)));
}

#[test]
fn finished_with_a_quality_score() {
    use tokscope::app::conversation::TurnQuality;
    // Both answers scored against the F16 reference: the block shows the answer on screen (the
    // last) and, with two scored, the conversation's tokens pooled.
    let mut app = finished_app();
    app.reference = Some(PathBuf::from("/models/qwen2.5-0.5b-instruct-f16.gguf"));
    let first = answer_score(&[(0.01, true, 0.9), (0.03, true, 0.6)]);
    let last = answer_score(&[
        (0.02, true, 0.8),
        (0.40, false, 0.004),
        (0.05, true, 0.7),
        (0.01, true, 0.9),
    ]);
    let mut last = last;
    // The reference as loaded: the status bar shows its size and, on a GPU, its layers there.
    (last.reference_file_bytes, last.reference_gpu_layers) = (988_000_000, 25);
    for (i, score) in [first, last].into_iter().enumerate() {
        app.conversation.exchanges[i]
            .assistant
            .as_mut()
            .unwrap()
            .quality = Some(TurnQuality::Scored(Box::new(score)));
    }
    let screen = render(&app, 120, 40);
    assert!(
        screen
            .lines()
            .any(|l| l.contains("quality") && l.contains("f16.gguf")),
        "{screen}"
    );
    let status = screen.lines().next().unwrap();
    assert!(status.contains("│ ref 988 MB"), "{status}");
    assert!(
        render(&app, 160, 40)
            .lines()
            .next()
            .unwrap()
            .contains("ref 988 MB · ngl 25"),
        "{screen}"
    );
    // Mean KLD of the last answer: (0.02 + 0.40 + 0.05 + 0.01) / 4 = 0.12; 3 of 4 same top; one
    // token under 1% for the reference; the first divergence at the second token, counted
    // from 1 as the token screen counts ("token 2 of 4").
    // Its standard error over the 4 tokens is 0.094: the mean to that precision, not 0.1200;
    // same top in whole percent (the digits the check against llama-perplexity supports).
    assert!(screen.contains("0.120"), "{screen}");
    assert!(!screen.contains("0.1200"), "{screen}");
    assert!(screen.contains("75%"), "{screen}");
    assert!(
        screen
            .lines()
            .any(|l| l.contains("1st diverges") && l.contains("token 2")),
        "{screen}"
    );
    // Pooled: (0.01 + 0.03 + 0.48) / 6 tokens, 5 of 6 same top.
    // 0.0867 (3 significant digits) and 83%.
    let pooled = "KLD 0.0867 · 83%";
    assert!(
        screen
            .lines()
            .any(|l| l.contains("2 answers") && l.contains(pooled)),
        "{pooled}: {screen}"
    );
    // Scoring, then not scored: said in the block.
    app.conversation.exchanges[1]
        .assistant
        .as_mut()
        .unwrap()
        .quality = Some(TurnQuality::Scoring(9));
    assert!(render(&app, 120, 40).contains("scoring…"));
    app.conversation.exchanges[1]
        .assistant
        .as_mut()
        .unwrap()
        .quality = Some(TurnQuality::NotScored(
        "stopped: a new message came first".into(),
    ));
    assert!(render(&app, 120, 40).contains("not scored: stopped"));
    app.conversation.exchanges[1]
        .assistant
        .as_mut()
        .unwrap()
        .quality = Some(TurnQuality::Scored(Box::new(answer_score(&[
        (0.02, true, 0.8),
        (0.40, false, 0.004),
        (0.05, true, 0.7),
        (0.01, true, 0.9),
    ]))));
    snapshot_both("finished_quality", &app);
}

#[test]
fn bench_screen_with_a_batch_sweep() {
    let mut app = ready_app();
    app.mode = Mode::Bench;
    // Aggregate tok/s rising with B while each sequence's ITL grows slowly: the batching
    // trade-off, with fixed figures.
    for (b, agg, p50, p99) in [
        (1u32, 40.0, 25.0, 27.0),
        (2, 78.0, 25.6, 28.0),
        (4, 150.0, 26.7, 30.0),
        (8, 280.0, 28.6, 33.0),
        (16, 480.0, 33.3, 40.0),
        (32, 720.0, 44.4, 55.0),
    ] {
        app.bench.points.push(tokscope::app::BenchPoint {
            point: tokscope::metrics::BatchPoint {
                batch: b,
                aggregate_tok_per_s: Some(agg),
                per_sequence_tok_per_s: Some(agg / f64::from(b)),
                itl_p50_ms: Some(p50),
                itl_p99_ms: Some(p99),
            },
            prefill_ms: Some(12.0 * f64::from(b)),
        });
    }
    snapshot_both("bench", &app);
    app.bench.running = Some(9);
    app.bench.points.truncate(3);
    insta::assert_snapshot!("bench_running_80x24", render(&app, 80, 24));
    // A batch size whose ITL and prefill were not defined (one generated token per sequence,
    // no prefill timing): "—", never 0.
    app.bench.points.push(tokscope::app::BenchPoint {
        point: tokscope::metrics::BatchPoint {
            batch: 16,
            aggregate_tok_per_s: Some(480.0),
            per_sequence_tok_per_s: Some(30.0),
            itl_p50_ms: None,
            itl_p99_ms: None,
        },
        prefill_ms: None,
    });
    insta::assert_snapshot!("bench_undefined_80x24", render(&app, 80, 24));
}

/// F2's depth view: a depth sweep whose decode slows faster than its bytes grow, beside the
/// chat's own answers at their depths (fixed figures); then a sweep measuring its second
/// depth, and one stopped and saved.
#[test]
fn the_depth_view_sets_each_depth_beside_what_its_bytes_predict() {
    let mut app = finished_app();
    app.mode = Mode::Bench;
    app.bench.view = tokscope::app::SweepView::Depth;
    let run = |depth, tok_per_s, fill_ms| tokscope::metrics::DepthRun {
        depth,
        n_gen: 32,
        tok_per_s,
        itl_p50_ms: Some(1e3 / tok_per_s),
        itl_p99_ms: Some(1.2e3 / tok_per_s),
        fill_ms,
    };
    let empty = render(&app, 120, 40);
    assert!(
        empty.contains(
            "Enter or r measures tg32 at depths 0, 512, 2048 (those that fit the chat's -c 4096)"
        ),
        "{empty}"
    );
    app.bench.depth_points = vec![
        run(0, 150.0, 0.0),
        run(512, 140.0, 300.0),
        run(2048, 110.0, 1400.0),
    ];
    snapshot_both("bench_depth", &app);
    let screen = render(&app, 120, 40);
    assert!(
        screen.contains("at depth 2048 decode runs 0.73× its depth-0 speed"),
        "{screen}"
    );
    assert!(screen.contains("this chat"), "{screen}");
    app.bench.running = Some(9);
    app.bench.ran = tokscope::app::SweepView::Depth;
    app.bench.depth_points.truncate(1);
    let screen = render(&app, 80, 24);
    assert!(screen.contains("measuring depth 512"), "{screen}");
    app.bench.running = None;
    app.bench.stopped = true;
    app.bench.saved = Some(Ok("r7".into()));
    let screen = render(&app, 120, 40);
    assert!(
        screen.contains("stopped · Enter or r runs it again · Esc closes · saved as run r7"),
        "{screen}"
    );
}

/// The A/B screen with fixed data: A is the last answer of `finished_app`'s first exchange
/// shape, B another model's answer that parts from it after a few tokens.
fn ab_app(b_text: &str, b_pieces: &[&str], finished: bool) -> App {
    use tokscope::app::conversation::{first_divergence, TurnSettings};
    use tokscope::app::{AbOutcome, AbScreen};
    let mut app = ready_app();
    let a = finished_turn(1, ANSWER_1, 38, 0, StopReason::EndOfGeneration);
    app.conversation.exchanges.push(Exchange {
        user: "hi".to_string(),
        assistant: Some(a.clone()),
    });
    let b_file = "qwen2.5-0.5b-instruct-q8_0.gguf";
    let mut b = if finished {
        finished_turn(7, b_text, 38, 0, StopReason::MaxTokens)
    } else {
        streaming_turn(7, b_text, 38, 0)
    };
    b.model_file = Some(b_file.to_string());
    let pieces: Vec<String> = b_pieces.iter().map(|p| p.to_string()).collect();
    let outcome = finished.then(|| match first_divergence(&a.text, &b.text, &pieces) {
        None => AbOutcome::Identical,
        Some(d) => AbOutcome::Diverges(d),
    });
    app.ab = Some(AbScreen {
        like_for_like: finished,
        prompt: "hi".to_string(),
        settings: TurnSettings {
            sampling: SamplingParams::default(),
            max_tokens: 512,
            ignore_eos: false,
            system_prompt: None,
        },
        a,
        b_path: PathBuf::from(format!("/models/{b_file}")),
        b,
        b_model: None,
        b_pieces: pieces,
        running: (!finished).then_some(7),
        started: base(),
        outcome,
        error: None,
        scroll: 0,
        reference: None,
    });
    app.mode = Mode::Ab;
    app
}

const ANSWER_B: &str =
    "Hello! I'm a compact assistant. Ask me anything and I will do my best to help.";

#[test]
fn ab_screen_side_by_side() {
    let app = ab_app(
        ANSWER_B,
        &[
            "Hello",
            "!",
            " I",
            "'m",
            " a",
            " compact",
            " assistant",
            ".",
        ],
        true,
    );
    let screen = render(&app, 120, 40);
    for needle in [
        "first divergence at token 6:",
        "TTFT ms",
        "decode tok/s",
        "ITL p50 ms",
        "A · qwen2.5-0.5b-instruct-q4_k_m.gguf",
        "B · qwen2.5-0.5b-instruct-q8_0.gguf",
        "seed 42",
    ] {
        assert!(screen.contains(needle), "{needle} missing:\n{screen}");
    }
    snapshot_both("ab", &app);
}

#[test]
fn ab_screen_identical_and_running_and_failed() {
    let pieces = [
        "Hello! I'm a small language model.",
        " Ask me anything — I'll answer as well as 0.5B parameters allow.",
    ];
    let app = ab_app(ANSWER_1, &pieces, true);
    let screen = render(&app, 80, 24);
    assert!(screen.contains("identical"), "{screen}");
    insta::assert_snapshot!("ab_identical_80x24", screen);
    let mut app = ab_app("Hello! I'm a", &[], false);
    let screen = render(&app, 80, 24);
    assert!(screen.contains("Esc stops B"), "{screen}");
    insta::assert_snapshot!("ab_running_80x24", screen);
    if let Some(ab) = app.ab.as_mut() {
        let error = "model file not found: /models/nope.gguf";
        ab.b = AssistantTurn::new(7, None);
        ab.b.on_failed(error.to_string());
        ab.error = Some(error.to_string());
        ab.running = None;
    }
    let screen = render(&app, 80, 24);
    assert!(
        screen.contains("B failed: model file not found"),
        "{screen}"
    );
    insta::assert_snapshot!("ab_failed_80x24", screen);
}

fn comparison() -> tokscope::compare::Comparison {
    use tokscope::compare::quality::QualityStats;
    use tokscope::compare::{CompareRow, Comparison};
    let row =
        |label: &str, quant: &str, bpw: f64, kld: Option<f64>, tg: f64, pareto: bool| CompareRow {
            label: label.to_string(),
            model: format!("/models/{label}"),
            quantization: quant.to_string(),
            file_size_bytes: (bpw * 494_032_768.0 / 8.0) as u64,
            bits_per_weight: bpw,
            n_gpu_layers: -1,
            type_k: "f16".into(),
            type_v: "f16".into(),
            flash_attn: "auto".into(),
            reference: kld.is_none(),
            quantized_here: kld.is_some(),
            quality: QualityStats {
                n_scored: 4096,
                ppl: 12.5 + kld.unwrap_or(0.0) * 10.0,
                ppl_uncertainty: 0.21,
                kld_mean: Some(kld.unwrap_or(0.0)),
                kld_uncertainty: Some(0.0004),
                kld_median: kld.map(|k| k * 0.6),
                kld_p99: Some(kld.unwrap_or(0.0) * 9.0),
                kld_max: Some(kld.unwrap_or(0.0) * 30.0),
                same_top_pct: Some(100.0 - kld.unwrap_or(0.0) * 80.0),
                delta_p_mean_pct: Some(-kld.unwrap_or(0.0)),
                delta_p_rms_pct: Some(kld.unwrap_or(0.0) * 3.0),
            },
            pp_tok_per_s: Some(tg * 40.0),
            pp_tok_per_s_sd: Some(3.0),
            tg_tok_per_s: Some(tg),
            tg_tok_per_s_sd: Some(0.4),
            ceiling_tok_per_s: Some(tg * 1.6),
            mbu_pct: Some(62.5),
            cost_per_million_tokens_usd: Some(2.0 / (tg * 3600.0) * 1e6),
            pareto,
            dominated_by: if pareto {
                vec![]
            } else {
                vec!["q4_k_m.gguf".into()]
            },
            synthetic: false,
            requantized_from: None,
            fallback: None,
            fa_kv_kernel: None,
        };
    Comparison {
        id: "20250101-120000".into(),
        unix_time_s: 1_735_732_800,
        command_line: "tokscope compare -m f16.gguf --quantize q8_0,q4_k_m,q4_0".into(),
        text: "builtin:eval".into(),
        text_tokens: 8192,
        n_ctx: 512,
        chunks: 16,
        reference: "f16.gguf".into(),
        reference_why: "the most bits per weight".into(),
        rows: vec![
            row("f16.gguf", "F16", 16.0, None, 210.0, true),
            row("q8_0.gguf", "Q8_0", 8.5, Some(0.0012), 380.0, true),
            row("q4_k_m.gguf", "Q4_K_M", 4.9, Some(0.0210), 560.0, true),
            row("q4_0.gguf", "Q4_0", 4.5, Some(0.0450), 540.0, false),
        ],
        verdict: vec![
            "Pareto front (no other candidate is both faster and closer to the reference): f16.gguf, q8_0.gguf, q4_k_m.gguf.".into(),
            "q4_0.gguf is dominated: q4_k_m.gguf is faster (560.0 vs 540.0 tok/s) and closer to the reference (KL 0.021000 vs 0.045000).".into(),
        ],
        llama_cpp: "llama-cpp-2 0.1.160".into(),
        control: None,
    }
}

#[test]
fn compare_screen_with_a_table() {
    use tokscope::app::CompareView;
    let mut app = ready_app();
    app.mode = Mode::Compare;
    app.compare = CompareView::Loaded(Box::new(comparison()));
    let wide = render(&app, 120, 40);
    for needle in [
        "★",
        "q4_k_m.gguf",
        "KLD mean",
        "tg t/s",
        "$/1M tok",
        "is dominated",
    ] {
        assert!(wide.contains(needle), "{needle} missing:\n{wide}");
    }
    let narrow = render(&app, 80, 24);
    assert!(
        narrow.contains("tg t/s") && narrow.contains("KLD mean"),
        "{narrow}"
    );
    snapshot_both("compare", &app);
    app.compare = CompareView::Empty;
    let screen = render(&app, 80, 24);
    assert!(screen.contains("no comparison yet"), "{screen}");
    insta::assert_snapshot!("compare_empty_80x24", screen);
}

#[test]
fn ab_and_compare_screens_survive_any_size() {
    use tokscope::app::CompareView;
    let mut ab = ab_app(
        ANSWER_B,
        &["Hello", "!", " I", "'m", " a", " compact"],
        true,
    );
    if let Some(s) = ab.ab.as_mut() {
        s.scroll = 10_000;
    }
    let mut compare = ready_app();
    compare.mode = Mode::Compare;
    compare.compare = CompareView::Loaded(Box::new(comparison()));
    for app in [&ab, &compare] {
        for (w, h) in [(50, 12), (51, 13), (60, 14), (79, 20), (200, 60), (300, 15)] {
            render(app, w, h);
        }
    }
    // Scrolled far down: clamped, the figures stay on top.
    let screen = render(&ab, 80, 24);
    assert!(screen.contains("TTFT ms"), "{screen}");
}

/// The model picker (Ctrl+O, `/model` without a path): rows from a fixed search result, one
/// chosen, then filtered; and while the search runs.
#[test]
fn model_picker() {
    use tokscope::app::{PickFor, Picker};
    use tokscope::discover::{Discovery, FoundModel, Origin};
    let found =
        |name: &str, arch: &str, params, quant: &str, size, origin, synthetic, path: &str| {
            FoundModel {
                name: name.into(),
                path: PathBuf::from(path),
                origin,
                architecture: arch.into(),
                n_params: params,
                quantization: quant.into(),
                size_bytes: size,
                synthetic,
                in_use: false,
            }
        };
    // The model the chat runs, first and marked "in use" (it sat in a folder no root covers).
    let in_use = FoundModel {
        in_use: true,
        ..found(
            "SmolLM2-135M-Instruct-Q4_1.gguf",
            "llama",
            134_515_008,
            "Q4_1",
            90_897_600,
            Origin::ModelDir,
            false,
            "/data/m/SmolLM2-135M-Instruct-Q4_1.gguf",
        )
    };
    let mut app = ready_app();
    app.mode = Mode::Picker;
    app.picker = Some(Picker {
        purpose: PickFor::Switch,
        filter: String::new(),
        selected: 2,
        found: Some(Discovery {
            models: vec![
                in_use,
                found("tiny.gguf", "llama", 470_000, "F32", 1_900_000, Origin::ConfigDir, true, "/home/u/models/tiny.gguf"),
                found("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf", "qwen2", 494_032_768, "Q4_K_M", 397_808_192, Origin::HuggingFace, false, "/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/9217f5db79a29953eb74d5343926648285ec7e67/qwen2.5-0.5b-instruct-q4_k_m.gguf"),
                found("lmstudio-community/gemma-3-270m.gguf", "gemma3", 268_098_176, "Q8_0", 291_545_344, Origin::LmStudio, false, "/home/u/.lmstudio/models/lmstudio-community/gemma-3-270m.gguf"),
                found("llama3.2:1b", "llama", 1_235_814_400, "Q8_0", 1_321_082_688, Origin::Ollama, false, "/home/u/.ollama/models/blobs/sha256-74701a8c35f6c8d9a4b91f3f3497643001d63e0c7a84e085bed452548fa88d45"),
            ],
            skipped: 2,
            cut_short: None,
            elapsed: Duration::from_millis(37),
            folders_read: 12,
        }),
    });
    snapshot_both("picker", &app);
    let filtered = {
        let mut a = app.clone();
        let p = a.picker.as_mut().unwrap();
        p.filter = "q8".into();
        p.selected = 0;
        p.purpose = PickFor::Ab;
        a
    };
    insta::assert_snapshot!("picker_filtered_80x24", render(&filtered, 80, 24));
    let searching = {
        let mut a = app.clone();
        a.picker.as_mut().unwrap().found = None;
        a
    };
    insta::assert_snapshot!("picker_searching_80x24", render(&searching, 80, 24));
}

/// The metrics column says where the finished answer sampled and its host time per token.
#[test]
fn finished_turn_shows_host_time_and_sampling_place() {
    let mut app = finished_app();
    let without = render(&app, 120, 40);
    assert!(!without.contains("host µs/tok"), "{without}");
    let last = app.conversation.exchanges[1].assistant.as_mut().unwrap();
    last.host = Some(tokscope::app::conversation::HostDetail {
        host_us_per_token: Some(41.5),
        sampler: "backend",
        place: tokscope::llama::sampler::SamplingPlace {
            backend: true,
            why: "--sampling backend",
        },
    });
    let screen = render(&app, 120, 40);
    assert!(screen.contains("host µs/tok (graph sampling)"), "{screen}");
    assert!(screen.contains("41.5"), "{screen}");
}

/// A profiled decode step of a 4-layer Llama-like graph, fixed times; layer `slow` takes
/// twice as long in its FFN.
fn profiled_step(depth: usize, slow: u16) -> tokscope::metrics::profile::StepRecord {
    use tokscope::metrics::profile::{NodeFacts, StepRecord};
    let node =
        |name: String, op: &'static str, weight: Option<String>, bytes: u64, us: u64| NodeFacts {
            name,
            op,
            weight,
            weight_bytes: bytes,
            kv_bytes: if op == "FLASH_ATTN_EXT" { 4_000_000 } else { 0 },
            kv_cells: 0,
            flops: 2 * bytes,
            time: Duration::from_micros(us),
            start: Duration::ZERO,
        };
    let mut nodes = vec![node(
        "inp_embd".into(),
        "GET_ROWS",
        Some("token_embd.weight".into()),
        8_192,
        20,
    )];
    for l in 0..4u16 {
        let w = |k: &str| Some(format!("blk.{l}.{k}.weight"));
        let ffn = if l == slow { 2 } else { 1 };
        nodes.extend([
            node(format!("norm-{l}"), "RMS_NORM", None, 0, 10),
            node(format!("attn_norm-{l}"), "MUL", w("attn_norm"), 16_384, 5),
            node(format!("Qcur-{l}"), "MUL_MAT", w("attn_q"), 9_000_000, 600),
            node(format!("Kcur-{l}"), "MUL_MAT", w("attn_k"), 2_250_000, 160),
            node(format!("Vcur-{l}"), "MUL_MAT", w("attn_v"), 2_250_000, 160),
            node(format!("Qcur-{l}"), "ROPE", None, 0, 20),
            node(format!("cache_k_l{l} (view)"), "SET_ROWS", None, 0, 8),
            node(format!("__fattn__-{l}"), "FLASH_ATTN_EXT", None, 0, 200),
            node(
                format!("kqv_out-{l}"),
                "MUL_MAT",
                w("attn_output"),
                9_000_000,
                600,
            ),
            node(format!("ffn_inp-{l}"), "ADD", None, 0, 6),
            node(format!("norm-{l}"), "RMS_NORM", None, 0, 10),
            node(format!("ffn_norm-{l}"), "MUL", w("ffn_norm"), 16_384, 5),
            node(
                format!("ffn_gate-{l}"),
                "MUL_MAT",
                w("ffn_gate"),
                31_000_000,
                2_000 * ffn,
            ),
            node(
                format!("ffn_up-{l}"),
                "MUL_MAT",
                w("ffn_up"),
                31_000_000,
                2_000 * ffn,
            ),
            node(format!("ffn_swiglu-{l}"), "SWIGLU", None, 0, 15),
            node(
                format!("ffn_out-{l}"),
                "MUL_MAT",
                w("ffn_down"),
                31_000_000,
                2_000 * ffn,
            ),
            node(format!("l_out-{l}"), "ADD", None, 0, 6),
        ]);
    }
    nodes.push(node("norm".into(), "RMS_NORM", None, 0, 10));
    nodes.push(node(
        "result_norm".into(),
        "MUL",
        Some("output_norm.weight".into()),
        16_384,
        5,
    ));
    nodes.push(node(
        "result_output".into(),
        "MUL_MAT",
        Some("output.weight".into()),
        260_000_000,
        9_000,
    ));
    let inside: Duration = nodes.iter().map(|n| n.time).sum();
    let (graph, sync, output, host) = (
        ms(0) + Duration::from_micros(60),
        Duration::from_micros(300),
        Duration::from_micros(80),
        Duration::from_micros(90),
    );
    StepRecord {
        nodes,
        graph_inputs: graph,
        sync,
        output,
        host,
        wall: inside + graph + sync + output + host,
        rows: 1,
        depth,
        llama_eval: None,
    }
}

#[test]
fn profile_screen_shows_where_the_step_goes() {
    let mut app = finished_app();
    app.mode = Mode::Profile;
    // Profiling off: the screen says how to turn it on.
    let off = render(&app, 80, 24);
    assert!(off.contains("--profile"), "{off}");
    insta::assert_snapshot!("profile_off_80x24", off);
    // On, nothing profiled yet.
    app.profile.rate = 16;
    insta::assert_snapshot!("profile_waiting_80x24", render(&app, 80, 24));
    // Two profiled steps: the last one's bars, the mean, layer 2 standing out.
    app.profile.add(
        7,
        profiled_step(40, 2),
        tokscope::metrics::profile::Correction {
            per_node: Duration::from_micros(3),
            ..Default::default()
        },
        Some(27.2e9),
    );
    app.profile.add(
        7,
        profiled_step(56, 2),
        tokscope::metrics::profile::Correction {
            per_node: Duration::from_micros(3),
            ..Default::default()
        },
        Some(27.2e9),
    );
    let screen = render(&app, 120, 40);
    for want in [
        "attn QKV",
        "ffn gate/up",
        "output head",
        "mean of 2 this turn",
        "slowest layer 2",
        "MUL_MAT",
    ] {
        assert!(screen.contains(want), "{want} missing:\n{screen}");
    }
    snapshot_both("profile", &app);
    // A new turn starts a new mean.
    app.profile.add(
        8,
        profiled_step(60, 1),
        tokscope::metrics::profile::Correction {
            per_node: Duration::from_micros(3),
            ..Default::default()
        },
        Some(27.2e9),
    );
    assert_eq!(app.profile.mean.as_ref().unwrap().steps, 1);
    assert!(render(&app, 120, 40).contains("slowest layer 1"));
}

#[test]
fn scored_tokens_in_their_kld_colours() {
    use ratatui::style::{Color, Modifier};
    // Alt+K: the last answer drawn from its scored tokens, each in its KLD band's colour, the
    // first divergence reversed, a token the reference gave under 1% underlined, a legend.
    let mut app = finished_app();
    let score = answer_score_of(
        &[
            (0.001, true, 0.9),
            (0.05, true, 0.6),
            (0.5, false, 0.004),
            (3.0, true, 0.2),
            (0.0, true, 0.99),
        ],
        &["Paris", " is", " lovely", " indeed", "\nyes"],
    );
    score_last(&mut app, score);
    let plain = render(&app, 120, 40);
    assert!(!plain.contains("first divergence"), "{plain}");
    assert!(plain.contains("Alt+K: tokens by KLD"), "{plain}");
    app.quality_colours = true;
    let terminal = draw_at(&app, 120, 40);
    let buffer = terminal.backend().buffer();
    let screen = buffer_text(buffer);
    assert!(
        screen.contains("Paris is lovely indeed") && screen.contains("  yes"),
        "{screen}"
    );
    assert!(screen.contains("first divergence"), "{screen}");
    assert!(!screen.contains("Alt+K: tokens by KLD"), "{screen}");
    let style_of = |word: &str| word_style(buffer, &screen, "Paris is lovely", word);
    let paris = style_of("Paris");
    assert!(
        paris.fg.is_none() || paris.fg == Some(Color::Reset),
        "{paris:?}"
    );
    assert!(!paris.add_modifier.contains(Modifier::REVERSED));
    assert_eq!(style_of("is").fg, Some(Color::Yellow));
    let lovely = style_of("lovely");
    assert_eq!(lovely.fg, Some(Color::Magenta));
    assert!(
        lovely.add_modifier.contains(Modifier::REVERSED),
        "first divergence"
    );
    assert!(
        lovely.add_modifier.contains(Modifier::UNDERLINED),
        "ref p < 1%"
    );
    let indeed = style_of("indeed");
    assert_eq!(indeed.fg, Some(Color::Red));
    assert!(!indeed.add_modifier.contains(Modifier::REVERSED));
    snapshot_both("finished_quality_colours", &app);
}

/// The style of the first cell of `word` (the one after a space, else the first) on the first
/// line of `screen` that holds `line_has`.
fn word_style(buffer: &Buffer, screen: &str, line_has: &str, word: &str) -> ratatui::style::Style {
    let (y, line) = screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(line_has))
        .unwrap_or_else(|| panic!("no line with {line_has:?}: {screen}"));
    // The word after a space ("is" is in "Paris" too).
    let at = line
        .find(&format!(" {word}"))
        .map_or_else(|| line.find(word), |i| Some(i + 1));
    let x = line[..at.expect("the word")].chars().count();
    buffer[(x as u16, y as u16)].style()
}

/// The token screen (Alt+T) opened on answer `exchange` with the cursor on `token`, drawn at
/// 120 × 40.
fn token_screen(app: &mut App, exchange: usize, token: usize) -> String {
    app.mode = Mode::Tokens;
    app.token_cursor = Some(tokscope::app::TokenCursor { exchange, token });
    render(app, 120, 40)
}

/// Whether one line of `screen` holds `parts` left to right.
fn in_order_on_a_line(screen: &str, parts: &[&str]) -> bool {
    screen.lines().any(|line| {
        let mut rest = line;
        parts.iter().all(|p| match rest.find(p) {
            Some(i) => {
                rest = &rest[i + p.len()..];
                true
            }
            None => false,
        })
    })
}

/// Top tokens from `(id, text, p)`.
fn top(entries: &[(i32, &str, f32)]) -> Vec<tokscope::metrics::quality::TopToken> {
    entries
        .iter()
        .map(|&(token, text, p)| tokscope::metrics::quality::TopToken {
            token,
            text: text.to_string(),
            p,
        })
        .collect()
}

#[test]
fn the_token_screen_shows_the_cursors_token_and_both_models_top_tokens() {
    // Alt+T on a scored answer: the answer in its KLD colours with the cursor on " lovely"
    // (the first divergence), its figures, the reference's and the model's top tokens side by
    // side, the chosen one marked.
    let mut app = finished_app();
    let mut score = answer_score_of(
        &[
            (0.001, true, 0.9),
            (0.05, true, 0.6),
            (0.5, false, 0.004),
            (3.0, true, 0.2),
        ],
        &["Paris", " is", " lovely", " indeed"],
    );
    let reference = score.reference.clone();
    score.tokens[2].top_ref = top(&[
        (7, " beautiful", 0.61),
        (8, " the", 0.2),
        (3, " lovely", 0.004),
    ]);
    score.tokens[2].top_cand = top(&[(3, " lovely", 0.5), (7, " beautiful", 0.3), (9, "\n", 0.1)]);
    score_last(&mut app, score);
    let last = app.conversation.exchanges.len() - 1;
    app.reference = Some(reference);
    app.quality_colours = true;
    let screen = token_screen(&mut app, last, 2);
    for want in [
        "token 3 of 4",
        "\" lovely\"",
        "first divergence",
        "KLD 0.5000",
        "same top no",
        "p ref 0.4%",
        "reference: top 5",
        "model: top 5",
    ] {
        assert!(screen.contains(want), "{want}: {screen}");
    }
    // Each row: the reference's rank, token and p, then the model's.
    for row in [
        [" 1 \" beautiful\"", "61.0%", "▸1 \" lovely\"", "50.0%"],
        ["▸3 \" lovely\"", "0.4%", " 3 \"\\n\"", "10.0%"],
    ] {
        assert!(in_order_on_a_line(&screen, &row), "{row:?}: {screen}");
    }
    snapshot_both("token_screen_scored", &app);
}

#[test]
fn own_confidence_colours_the_answer_and_the_token_screen_shows_the_models_top_tokens() {
    use ratatui::style::{Color, Modifier};
    use tokscope::app::conversation::TurnConfidence;
    use tokscope::metrics::quality::TokenConfidence;
    // No reference: Alt+K colours an answer by the model's own probability of each token, with
    // the legend under it and the own-confidence block in the metrics pane.
    let mut app = finished_app();
    let token = |id: i32, text: &str, p: f32, entropy: f32| TokenConfidence {
        token: id,
        text: text.to_string(),
        p,
        entropy,
        // Sampled, so the chosen token is not always the most likely.
        top: if p >= 0.5 {
            top(&[(id, text, p), (99, " maybe", (1.0 - p) / 2.0)])
        } else {
            top(&[(99, " maybe", 0.8), (id, text, p)])
        },
    };
    let tokens = vec![
        token(1, "Paris", 0.97, 0.2),
        token(2, " is", 0.7, 0.9),
        token(3, " lovely", 0.2, 2.5),
        token(4, " indeed", 0.05, 3.1),
    ];
    let last = app.conversation.exchanges.len() - 1;
    app.conversation.exchanges[last]
        .assistant
        .as_mut()
        .unwrap()
        .confidence = Some(TurnConfidence::Measured(tokens));
    app.quality_colours = true;
    let terminal = draw_at(&app, 120, 40);
    let buffer = terminal.backend().buffer();
    let screen = buffer_text(buffer);
    assert!(screen.contains("Paris is lovely indeed"), "{screen}");
    assert!(screen.contains("own p ≥0.9 ≥0.5 ≥0.1 <0.1"), "{screen}");
    assert!(screen.contains("own confidence"), "{screen}");
    // Mean p (0.97 + 0.7 + 0.2 + 0.05) / 4 = 0.48; min 0.05; one token under 0.1.
    assert!(screen.contains("0.480"), "mean p: {screen}");
    let style_of = |word: &str| word_style(buffer, &screen, "Paris is lovely", word);
    let paris = style_of("Paris");
    assert!(
        paris.fg.is_none() || paris.fg == Some(Color::Reset),
        "{paris:?}"
    );
    assert_eq!(style_of("is").fg, Some(Color::Yellow));
    assert_eq!(style_of("lovely").fg, Some(Color::Magenta));
    assert_eq!(style_of("indeed").fg, Some(Color::Red));
    assert!(!style_of("indeed").add_modifier.contains(Modifier::REVERSED));
    snapshot_both("own_confidence_colours", &app);

    let screen = token_screen(&mut app, last, 3);
    for want in [
        "the model's own confidence",
        "token 4 of 4",
        "p 5.0%",
        "entropy 3.10",
        "model: top 5",
    ] {
        assert!(screen.contains(want), "{want}: {screen}");
    }
    assert!(
        in_order_on_a_line(&screen, &[" 1 \" maybe\"", "80.0%"]),
        "{screen}"
    );
    assert!(
        in_order_on_a_line(&screen, &["▸2 \" indeed\"", "5.0%"]),
        "{screen}"
    );
    assert!(!screen.contains("reference: top"), "{screen}");
    snapshot_both("token_screen_own", &app);
}

#[test]
fn ab_screen_scores_b_against_a_and_alt_k_colours_b() {
    use ratatui::style::Color;
    use tokscope::app::conversation::TurnQuality;
    let pieces = [
        "Hello",
        "!",
        " I",
        "'m",
        " a",
        " compact",
        " assistant",
        ".",
    ];
    let mut app = ab_app(ANSWER_B, &pieces, true);
    // While B is scored against A's model, B's column says so.
    app.ab.as_mut().unwrap().b.quality = Some(TurnQuality::Scoring(7));
    let screen = render(&app, 120, 40);
    assert!(screen.contains("scoring B against A's model"), "{screen}");
    // Scored: the summary in B's column, against A's file.
    let mut score = answer_score_of(
        &[
            (0.001, true, 0.9),
            (0.002, true, 0.9),
            (0.004, true, 0.9),
            (0.003, true, 0.9),
            (0.005, true, 0.9),
            (2.0, false, 0.005),
            (0.05, true, 0.5),
            (0.02, true, 0.8),
        ],
        &pieces,
    );
    score.reference = PathBuf::from(format!("/models/{MODEL_FILE}"));
    app.ab.as_mut().unwrap().b.quality = Some(TurnQuality::Scored(Box::new(score)));
    let screen = render(&app, 120, 40);
    // The mean with its standard error over B's 8 tokens (0.25): the digits they support.
    let kld = format!("vs {MODEL_FILE} KLD 0.26 ± 0.25");
    for needle in [
        kld.as_str(),
        "same top 88%",
        "1st diverges 6",
        "<1% ref 1",
        "Alt+K colours",
    ] {
        assert!(screen.contains(needle), "{needle} missing:\n{screen}");
    }
    snapshot_both("ab_scored", &app);
    // Alt+K: B's answer drawn from its scored tokens in their KLD colours.
    app.quality_colours = true;
    let terminal = draw_at(&app, 120, 40);
    let buffer = terminal.backend().buffer();
    let screen = buffer_text(buffer);
    let compact = word_style(buffer, &screen, "│Hello! I'm a compact", "compact");
    assert_eq!(compact.fg, Some(Color::Red), "{screen}");
}

const THINKING: &str = "The user greets me and asks nothing yet. A short, friendly reply is best; \
no need for detail. I will say hello and offer help.";

/// A turn of a model that thinks first, as the engine's events build it: `thinking` in
/// thinking tokens (then one for the closing marker when an answer follows), then the
/// `answer`'s tokens; finished the way `end` says, or still streaming.
fn thinking_turn(id: u64, answer: Option<&str>, end: Option<StopReason>) -> AssistantTurn {
    use tokscope::metrics::ThinkingSpan;
    let mut turn = on_model(AssistantTurn::new(id, Some(MODEL_FILE.to_string())));
    turn.on_prefill_started(52, 0);
    let thought = pieces(THINKING);
    let closes = answer.is_some();
    let n_thinking = thought.len() + usize::from(closes);
    let answer_parts = answer.map(pieces).unwrap_or_default();
    let times = ready_times(n_thinking + answer_parts.len(), ms(184));
    let mut span = ThinkingSpan::default();
    for (i, at) in times[..n_thinking].iter().enumerate() {
        turn.on_token("", *at);
        span.tokens = i + 1;
        if closes && i + 1 == n_thinking {
            span.ended_at = Some(*at);
        }
        turn.on_thinking(span, thought.get(i).map_or("", String::as_str));
    }
    for (j, (piece, at)) in answer_parts.iter().zip(&times[n_thinking..]).enumerate() {
        turn.on_token(piece, *at);
        if j == 0 {
            span.first_answer_at = Some(*at);
            turn.on_thinking(span, "");
        }
    }
    match end {
        Some(reason) => finish(turn, answer.unwrap_or_default(), 52, 0, reason),
        None => turn,
    }
}

fn thinking_app(answer: Option<&str>, end: Option<StopReason>) -> App {
    let mut app = ready_app();
    app.conversation.exchanges.push(Exchange {
        user: "hi".to_string(),
        assistant: Some(thinking_turn(1, answer, end)),
    });
    if end.is_none() {
        app.active_since = Some(base());
    }
    app
}

fn alt_r(app: &mut App) {
    tokscope::app::update(
        app,
        tokscope::app::Msg::Key(crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Char('r'),
            crossterm::event::KeyModifiers::ALT,
        )),
        tokscope::app::Now {
            instant: now(),
            unix_s: 0,
        },
    );
}

#[test]
fn a_thinking_answer_is_one_folded_line_until_alt_r_unfolds_it() {
    let mut app = thinking_app(Some(ANSWER_1), Some(StopReason::EndOfGeneration));
    let screen = render(&app, 120, 40);
    assert!(screen.contains("▸ thought for"), "{screen}");
    assert!(!screen.contains("friendly reply"), "folded: {screen}");
    for figure in ["thinking", "1st answer ms", "answer tok/s", "TTFT ms"] {
        assert!(screen.contains(figure), "{figure} missing:\n{screen}");
    }
    snapshot_both("thinking_folded_is_one_line", &app);
    alt_r(&mut app);
    let screen = render(&app, 120, 40);
    assert!(screen.contains("▾ thought for"), "{screen}");
    assert!(screen.contains("friendly reply"), "unfolded: {screen}");
    snapshot_both("thinking_unfolded_shows_its_text", &app);
    alt_r(&mut app);
    assert_eq!(
        render(&app, 120, 40),
        render(
            &thinking_app(Some(ANSWER_1), Some(StopReason::EndOfGeneration)),
            120,
            40
        )
    );
}

#[test]
fn a_model_still_thinking_says_so_live() {
    let app = thinking_app(None, None);
    let screen = render(&app, 120, 40);
    assert!(screen.contains("▸ thinking… "), "{screen}");
    assert!(screen.contains("still thinking…"), "{screen}");
    snapshot_both("thinking_live_says_still_thinking", &app);
}

#[test]
fn a_turn_that_ended_while_thinking_says_so() {
    let app = thinking_app(None, Some(StopReason::MaxTokens));
    let screen = render(&app, 120, 40);
    assert!(screen.contains("▸ ended while thinking"), "{screen}");
    assert!(screen.contains("(no answer)"), "{screen}");
    snapshot_both("thinking_ended_while_thinking_says_so", &app);
}
