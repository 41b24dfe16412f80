//! `tokscope chat --url` end to end: the real binary in a real terminal (tmux) against a real
//! llama-server (tests/common/llama_server.rs: built from the llama.cpp in the
//! llama-cpp-python sdist on PyPI, not the revision tokscope links; on 127.0.0.1, a synthetic model), and the A/B comparison across kinds (a server's answer
//! beside a local GGUF's). These tests FAIL, not skip, when llama-server cannot be had;
//! scripts/test.sh builds it once and passes TOKSCOPE_LLAMA_SERVER.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::llama_server::LlamaServer;
use common::tmux::{bin, exit_line, saved_turns, send, status_line, Tmux, READY};

const KEY: &str = "sk-tokscope-e2e-7f3a9c1d";

/// The value of a metrics-pane row (`label` then spaces then the value), as shown.
fn pane_value<'a>(screen: &'a str, label: &str) -> Option<&'a str> {
    screen.lines().find_map(|line| {
        let (_, pane) = line.split_once('│')?;
        let rest = pane.trim_start().strip_prefix(label)?;
        if !rest.starts_with("  ") {
            return None;
        }
        rest.split_whitespace().next()
    })
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, into);
        } else if path.is_file() {
            into.push(path);
        }
    }
}

struct Setup {
    dir: tempfile::TempDir,
    /// Where llama-server's log goes: apart from the dirs tokscope writes.
    server_dir: tempfile::TempDir,
    model: PathBuf,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server_dir = tempfile::tempdir().unwrap();
        let model = common::synth(
            server_dir.path(),
            "tiny.gguf",
            "tiny",
            tokscope::synth::TensorType::F32,
            1,
        );
        Self {
            dir,
            server_dir,
            model,
        }
    }

    fn tmux(&self, name: &str) -> Tmux {
        let data = self.dir.path().join("data");
        let config = self.dir.path().join("config");
        let cache = self.dir.path().join("cache");
        Tmux::start(
            name,
            160,
            50,
            &[
                ("TOKSCOPE_DATA_DIR", &data),
                ("TOKSCOPE_CONFIG_DIR", &config),
                ("TOKSCOPE_CACHE_DIR", &cache),
                ("TOKSCOPE_E2E_KEY", Path::new(KEY)),
            ],
        )
    }
}

fn start(tmux: &Tmux, args: &str) {
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    tmux.type_text(&format!("{} chat {args}; echo exit=$?", bin()));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the chat to be ready", READY, |s| {
        status_line(s).contains("ready")
    });
}

fn quit(tmux: &Tmux) {
    tmux.keys(&["C-q"]);
    let screen = tmux.wait_for("the chat to exit", Duration::from_secs(20), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&screen), Some("exit=0"), "{screen}");
}

#[test]
fn a_remote_chat_turn_shows_ttft_tok_s_and_the_breakdown_and_the_key_lands_in_no_file() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    let server = LlamaServer::start(
        &setup.model,
        1,
        &["--api-key", KEY],
        setup.server_dir.path(),
    );
    let tmux = setup.tmux("remote-chat");
    start(
        &tmux,
        &format!(
            "--url {} --api-key-env TOKSCOPE_E2E_KEY --temp 0 -n 24",
            server.url()
        ),
    );
    let ready = tmux.screen();
    assert!(
        status_line(&ready).contains(&format!("remote · http://127.0.0.1:{}", server.port)),
        "the status bar names the server: {ready}"
    );
    tmux.type_text("/system You are terse.");
    tmux.keys(&["Enter"]);
    send(&tmux, "Why is the sky blue?");
    let screen = tmux.wait_for("the answer and its figures", Duration::from_secs(60), |s| {
        s.contains("─ TTFT") && status_line(s).contains("ready") && s.contains("tokens: server")
    });
    for label in [
        "TTFT ms",
        "network RTT ms",
        "server prompt ms",
        "1st step+net ms",
    ] {
        let v = pane_value(&screen, label).unwrap_or("missing");
        assert!(
            v.parse::<f64>().is_ok(),
            "{label} shows a number, not {v:?}: {screen}"
        );
    }
    let rate: f64 = pane_value(&screen, "decode tok/s")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("decode tok/s shows a number: {screen}"));
    assert!(rate > 0.0);
    assert_eq!(pane_value(&screen, "tokens"), Some("24"), "{screen}");
    // The server's own counts: the prompt it evaluated, and where the token counts come from.
    let prompt: u64 = pane_value(&screen, "prompt tok")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("prompt tok shows a number: {screen}"));
    assert!(prompt > 5, "{screen}");
    assert!(
        screen.contains("tokens: server usage, 1 token per"),
        "{screen}"
    );
    // No hardware configured for the server: no roofline, never this machine's probe.
    assert_eq!(pane_value(&screen, "MBU %"), Some("—"), "{screen}");
    assert!(screen.contains("bandwidth unknown"), "{screen}");

    // Ctrl+R asks the server again; the conversation keeps one answer to it.
    tmux.keys(&["C-r"]);
    tmux.wait_for("the regenerated answer", Duration::from_secs(60), |s| {
        s.contains("regenerating with seed")
    });
    tmux.wait_for("ready again", Duration::from_secs(60), |s| {
        status_line(s).contains("ready") && s.contains("─ TTFT")
    });
    quit(&tmux);
    let data = setup.dir.path().join("data");
    assert_eq!(saved_turns(&data), 1, "the history holds the turn");

    // The key goes only into the Authorization header: no file tokscope wrote holds it.
    let mut files = Vec::new();
    files_under(setup.dir.path(), &mut files);
    assert!(
        files.iter().any(|f| f.starts_with(data.join("history"))),
        "history was written: {files:?}"
    );
    assert!(
        files.iter().any(|f| f.starts_with(data.join("logs"))),
        "the log was written: {files:?}"
    );
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(KEY), "{} holds the API key", file.display());
    }
}

#[test]
fn ab_across_kinds_a_servers_answer_beside_a_local_gguf() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    let server = LlamaServer::start(&setup.model, 1, &[], setup.server_dir.path());

    // A remote chat, B from the same model file in-process: greedy, the same prompt.
    let tmux = setup.tmux("ab-remote");
    start(&tmux, &format!("--url {} -t 1 --temp 0 -n 8", server.url()));
    send(&tmux, "Hello");
    tmux.wait_for("the answer", Duration::from_secs(60), |s| {
        s.contains("─ TTFT") && status_line(s).contains("ready")
    });
    tmux.type_text(&format!("/ab {}", setup.model.display()));
    tmux.keys(&["Enter"]);
    // B answered (a failed B shows its error instead, and this wait times out).
    tmux.wait_for("B's answer", Duration::from_secs(120), |s| {
        s.contains("identical: B's answer") || s.contains("first divergence at token")
    });
    quit(&tmux);
    drop(tmux);

    // A local chat, B from the server.
    let tmux = setup.tmux("ab-local");
    start(
        &tmux,
        &format!("-m {} -t 1 --temp 0 -n 8", setup.model.display()),
    );
    send(&tmux, "Hello");
    tmux.wait_for("the answer", Duration::from_secs(60), |s| {
        s.contains("─ TTFT") && status_line(s).contains("ready")
    });
    tmux.type_text(&format!("/ab {}", server.url()));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("B's answer", Duration::from_secs(120), |s| {
        s.contains("identical: B's answer") || s.contains("first divergence at token")
    });
    assert!(
        screen.contains(&format!("@ http://127.0.0.1:{}", server.port)),
        "B is named by the server: {screen}"
    );
    quit(&tmux);
}

#[test]
fn esc_closes_the_stream_and_the_server_stops_generating() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    // A model slow enough (a few ms per token on one core) that 1000 tokens take seconds.
    let medium = common::synth_medium(setup.server_dir.path());
    let server = LlamaServer::start(&medium, 1, &[], setup.server_dir.path());
    let tmux = setup.tmux("remote-esc");
    start(
        &tmux,
        &format!("--url {} --temp 0 -n 1000 --ignore-eos", server.url()),
    );
    send(&tmux, "Tell me everything.");
    tmux.wait_for("the answer to stream", Duration::from_secs(60), |s| {
        s.contains("· streaming")
    });
    tmux.keys(&["Escape"]);
    let screen = tmux.wait_for("the answer to stop", Duration::from_secs(20), |s| {
        s.contains("■ stopped ·")
    });
    let tokens: u64 = pane_value(&screen, "tokens")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("tokens shows a number: {screen}"));
    assert!(tokens < 1000, "stopped early: {tokens} tokens");
    // The closed connection made the server stop: its decode counter no longer moves (at a
    // few ms per token it would add dozens of decodes in half a second).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let before = server.metric("llamacpp:n_decode_total");
        std::thread::sleep(Duration::from_millis(500));
        let after = server.metric("llamacpp:n_decode_total");
        if after == before && server.metric("llamacpp:requests_processing") == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server kept generating after Esc ({before} → {after} decodes)"
        );
    }
    // The partial answer is kept, and saved.
    quit(&tmux);
    assert_eq!(saved_turns(&setup.dir.path().join("data")), 1);
}

#[test]
fn an_unreachable_server_is_named_and_a_silent_one_does_not_hold_the_quit() {
    let dir = tempfile::tempdir().unwrap();
    let config_dir = dir.path().join("config");
    std::fs::create_dir_all(&config_dir).unwrap();
    // A port nobody listens on: connection refused. Given by the config, not a flag.
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refused.local_addr().unwrap().port();
    drop(refused);
    std::fs::write(
        config_dir.join("config.toml"),
        format!("[remote]\nurl = \"http://127.0.0.1:{port}/v1\"\n"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let cache = dir.path().join("cache");
    let tmux = Tmux::start(
        "remote-unreachable",
        160,
        50,
        &[
            ("TOKSCOPE_DATA_DIR", &data),
            ("TOKSCOPE_CONFIG_DIR", &config_dir),
            ("TOKSCOPE_CACHE_DIR", &cache),
        ],
    );
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    tmux.type_text(&format!("{} chat; echo exit=$?", bin()));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the connection error", Duration::from_secs(30), |s| {
        s.contains(&format!("could not connect to http://127.0.0.1:{port}"))
            && s.contains("is the server running")
    });
    quit(&tmux);

    // A server that accepts the connection and never answers: the chat waits for the model
    // list (up to --timeout 60), and quitting does not wait with it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/v1",
        silent.local_addr().unwrap().port()
    );
    tmux.type_text(&format!("clear; {} chat --url {url}; echo exit=$?", bin()));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the chat to start", Duration::from_secs(10), |s| {
        status_line(s).contains("connecting")
    });
    let asked = std::time::Instant::now();
    quit(&tmux);
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "quitting waited {:?} for a silent server",
        asked.elapsed()
    );
}

#[test]
fn chat_exporters_count_each_turn_as_the_pane_shows_it() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    let server = LlamaServer::start(&setup.model, 1, &[], setup.server_dir.path());
    exporters_count_each_turn(
        &setup,
        "remote-prometheus",
        &format!("--url {}", server.url()),
    );
}

/// A local chat exports the same figures under the same names (issue #59, item 8), counted
/// on the engine thread: where it once refused `--prometheus` and `--otlp` without `--url`.
#[test]
fn a_local_chat_exports_each_turn_as_a_remote_one_does() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    exporters_count_each_turn(
        &setup,
        "local-prometheus",
        &format!("-m {} -t 1", setup.model.display()),
    );
}

/// Two turns of a chat on `target` (`--url URL` or `-m MODEL`) with `/metrics` served, an
/// OTLP file and a refusing collector: both readers (the Prometheus project's parser and
/// opentelemetry-proto) read the pane's figures back.
fn exporters_count_each_turn(setup: &Setup, name: &str, target: &str) {
    let addr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    let otlp_file = setup.dir.path().join("otlp.jsonl");
    // A collector that refuses: said once in the chat, the file still written.
    let (refusing, _) = crate::load_export::collector(503, "collector overloaded");
    let tmux = setup.tmux(name);
    start(
        &tmux,
        &format!(
            "{target} --temp 0 -n 12 --prometheus {addr} --otlp-file {} --otlp http://127.0.0.1:{refusing}",
            otlp_file.display()
        ),
    );
    let shown = |screen: &str, label: &str| -> f64 {
        pane_value(screen, label)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{label} shows a number: {screen}"))
    };
    let (mut ttft_ms, mut tokens, mut prompt) = (0.0, 0.0, 0.0);
    for (i, question) in ["Why is the sky blue?", "And the sea?"].iter().enumerate() {
        send(&tmux, question);
        let screen = tmux.wait_for("the answer and its figures", Duration::from_secs(60), |s| {
            s.matches("─ TTFT").count() > i && status_line(s).contains("ready")
        });
        ttft_ms += shown(&screen, "TTFT ms");
        tokens += shown(&screen, "tokens");
        // A server's prompt tokens; a local model's, those prefilled and those the KV cache
        // kept.
        prompt += match pane_value(&screen, "prompt tok") {
            Some(_) => shown(&screen, "prompt tok"),
            None => shown(&screen, "prefill tok") + shown(&screen, "cached tok"),
        };
        if i == 0 {
            tmux.wait_for("the refused export said", Duration::from_secs(30), |s| {
                // The notice may wrap: read the screen's words.
                let words = s.split_whitespace().collect::<Vec<_>>().join(" ");
                words.contains("HTTP 503") && words.contains("the chat goes on")
            });
        }
    }
    let reply = crate::load_export::get(&addr, "/metrics");
    // The second turn's export has reached the file before it is read (written after the
    // count, on the exporters' thread).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&otlp_file).map_or(0, |t| t.lines().count()) < 2
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    quit(&tmux);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let text = reply.split("\r\n\r\n").nth(1).unwrap();
    // Read by prometheus_client's parser, not by tokscope's.
    let samples = crate::load_export::samples(text, setup.dir.path());
    let at = |name: &str| -> f64 {
        let found: Vec<f64> = samples
            .iter()
            .filter(|((n, labels), _)| {
                n == name
                    && labels.get("level").map(String::as_str) == Some("chat")
                    && labels.get("model_name").is_some_and(|m| !m.is_empty())
            })
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(found.len(), 1, "one {name} of level chat: {samples:#?}");
        found[0]
    };
    assert_eq!(at("tokscope:time_to_first_token_seconds_count"), 2.0);
    assert_eq!(at("tokscope:e2e_request_latency_seconds_count"), 2.0);
    assert_eq!(at("tokscope:request_success_total"), 2.0);
    // The pane's figures, to their shown precision (0.1 ms each).
    let exported_ms = at("tokscope:time_to_first_token_seconds_sum") * 1e3;
    assert!(
        (exported_ms - ttft_ms).abs() <= 0.11,
        "exported TTFT {exported_ms} ms, shown {ttft_ms} ms"
    );
    assert_eq!(at("tokscope:generation_tokens_total"), tokens);
    assert_eq!(at("tokscope:prompt_tokens_total"), prompt);
    // OTLP: one cumulative export per turn, decoded by opentelemetry-proto.
    let lines: Vec<String> = std::fs::read_to_string(&otlp_file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2, "one export per turn: {lines:?}");
    let requests = crate::load_export::decoded(&lines, setup.dir.path());
    for (i, request) in requests.iter().enumerate() {
        let point = |name: &str| request[name]["points"][0].clone();
        let first = point("gen_ai.client.operation.time_to_first_chunk");
        assert_eq!(first["count"], i + 1, "cumulative: {request}");
        assert_eq!(point("gen_ai.client.operation.duration")["count"], i + 1);
        assert_eq!(first["attributes"]["tokscope.load.level"], "chat");
    }
    let last_first_chunk = requests[1]["gen_ai.client.operation.time_to_first_chunk"]["points"][0]
        ["sum"]
        .as_f64()
        .unwrap();
    assert!(
        (last_first_chunk * 1e3 - ttft_ms).abs() <= 0.11,
        "OTLP TTFT {last_first_chunk} s, shown {ttft_ms} ms"
    );
    // The endpoint ends with the chat.
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "{addr} still listens after the chat quit"
    );
}

#[test]
fn the_chat_quits_at_once_while_an_otlp_export_hangs() {
    let _lock = common::model_lock();
    let setup = Setup::new();
    let server = LlamaServer::start(&setup.model, 1, &[], setup.server_dir.path());
    // A collector that takes the connection and never answers (the export's own limit is 10 s).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = {
        let (taken, done) = (std::sync::Arc::clone(&taken), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            silent.set_nonblocking(true).unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while std::time::Instant::now() < until && !done.load(Ordering::SeqCst) {
                if let Ok((stream, _)) = silent.accept() {
                    kept.push(stream);
                    taken.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let tmux = setup.tmux("remote-otlp-hang");
    start(
        &tmux,
        &format!(
            "--url {} --temp 0 -n 4 --otlp http://127.0.0.1:{port}",
            server.url()
        ),
    );
    send(&tmux, "Hello");
    tmux.wait_for("the answer", Duration::from_secs(60), |s| {
        s.contains("─ TTFT") && status_line(s).contains("ready")
    });
    // The export is under way (the collector holds it) when the chat quits.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while taken.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        taken.load(Ordering::SeqCst),
        1,
        "the export reached the collector"
    );
    let asked = std::time::Instant::now();
    quit(&tmux);
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "quitting waited {took:?} for a silent collector"
    );
    done.store(true, Ordering::SeqCst);
    held.join().unwrap();
}
