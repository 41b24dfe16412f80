//! End to end in a real terminal: tmux runs the real release binary on a synthetic model. Start,
//! type a prompt, see streamed text and non-zero TTFT and tok/s in the metrics column, stop a
//! long answer with Esc, quit, and find the shell screen back. Polls with deadlines for the
//! expected text, never fixed sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::tmux::Tmux;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The number at the end of the metrics line that starts with `label`.
fn metric(screen: &str, label: &str) -> Option<f64> {
    screen.lines().find_map(|line| {
        let pane = line.rsplit('│').next()?.trim();
        let rest = pane.strip_prefix(label)?;
        rest.split_whitespace().last()?.parse().ok()
    })
}

#[test]
fn chat_streams_shows_metrics_stops_on_esc_and_restores_the_terminal() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let data = dir.path().join("data");
    let config = dir.path().join("config");
    let tmux = Tmux::start(
        "chat",
        120,
        40,
        &[
            ("TOKSCOPE_DATA_DIR", &data),
            ("TOKSCOPE_CONFIG_DIR", &config),
        ],
    );
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    let bin = env!("CARGO_BIN_EXE_tokscope");
    tmux.type_text(&format!(
        "{bin} chat -m {} -t 1 -c 8192 --max-tokens 100000 --temp 0",
        model.display()
    ));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the model to be ready", Duration::from_secs(60), |s| {
        s.lines().next().is_some_and(|l| l.contains("ready"))
    });

    tmux.type_text("Write a very long story about the sea");
    // The live token count of the input, without the engine. It is counted on its own thread,
    // so the screen may show the count of an earlier keystroke first: wait for it to catch up.
    let shown = |s: &str| -> Option<usize> {
        s.split(" message · ")
            .nth(1)
            .filter(|_| s.contains(" tokens "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    let typed = tmux.wait_for("the live token count", Duration::from_secs(10), |s| {
        shown(s).is_some_and(|n| n >= 5)
    });
    let count: usize = shown(&typed).expect("a number of tokens");
    assert!(
        (5..40).contains(&count),
        "{count} tokens for a short sentence"
    );
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for(
        "streamed text with TTFT and tok/s",
        Duration::from_secs(60),
        |s| {
            s.lines().next().is_some_and(|l| l.contains("streaming"))
                && metric(s, "TTFT ms").is_some_and(|v| v > 0.0)
                && metric(s, "decode tok/s").is_some_and(|v| v > 0.0)
                && metric(s, "tokens").is_some_and(|v| v >= 5.0)
        },
    );
    assert!(screen.contains("Write a very long story"), "{screen}");
    assert!(
        screen.contains("synthetic weights"),
        "the synthetic label is shown:\n{screen}"
    );

    tmux.keys(&["Escape"]);
    let stopped = tmux.wait_for("the answer to stop", Duration::from_secs(10), |s| {
        s.contains("■ stopped") && s.lines().next().is_some_and(|l| !l.contains("streaming"))
    });
    let tokens = metric(&stopped, "tokens").unwrap();
    assert!(
        tokens < 8000.0,
        "stopped long before the context filled: {tokens}"
    );
    // Nothing more arrives after the stop.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&tmux.screen(), "tokens"), Some(tokens));

    tmux.keys(&["C-q"]);
    let back = tmux.wait_for("the shell to come back", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.starts_with("e2e$")).count() >= 2
    });
    assert!(
        !back.contains("TTFT ms"),
        "the TUI is gone from the screen:\n{back}"
    );
    assert_eq!(
        tmux.tmux(&["display", "-p", "-t", "main", "#{alternate_on}"])
            .trim(),
        "0"
    );
    // The finished (stopped) turn was saved.
    let history = std::fs::read_dir(data.join("history")).unwrap().count();
    assert_eq!(history, 1, "one conversation file");
}

#[test]
fn history_lists_and_resume_continues_a_saved_conversation() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let config = dir.path().join("config");
    let env: &[(&str, &Path)] = &[
        ("TOKSCOPE_DATA_DIR", &data),
        ("TOKSCOPE_CONFIG_DIR", &config),
    ];
    let bin = env!("CARGO_BIN_EXE_tokscope");
    let chat = |tmux: &Tmux, extra: &str| {
        tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.contains("e2e$")
        });
        tmux.type_text(&format!(
            "{bin} chat -m {} -t 1 -n 6 --temp 0 {extra}",
            model.display()
        ));
        tmux.keys(&["Enter"]);
        tmux.wait_for("the model to be ready", Duration::from_secs(60), |s| {
            s.lines().next().is_some_and(|l| l.contains("ready"))
        });
    };

    let tmux = Tmux::start("resume", 100, 30, env);
    chat(&tmux, "");
    tmux.type_text("first question about lighthouses");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer to finish", Duration::from_secs(30), |s| {
        s.contains("─ TTFT") && s.lines().next().is_some_and(|l| l.contains("ready"))
    });
    tmux.keys(&["C-c"]);
    tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.starts_with("e2e$")).count() >= 2
    });

    let listing = Command::new(bin)
        .arg("history")
        .env("TOKSCOPE_DATA_DIR", &data)
        .env("TOKSCOPE_CONFIG_DIR", &config)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("first question about lighthouses"),
        "{listing}"
    );

    tmux.keys(&["C-l"]);
    chat(&tmux, "--resume");
    let screen = tmux.wait_for("the resumed turn", Duration::from_secs(10), |s| {
        s.contains("first question about lighthouses")
    });
    assert!(
        screen.contains("─ TTFT"),
        "the saved figures come back:\n{screen}"
    );
    tmux.type_text("second question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the second answer", Duration::from_secs(30), |s| {
        s.matches("─ TTFT").count() >= 2 && s.lines().next().is_some_and(|l| l.contains("ready"))
    });
    tmux.keys(&["C-q"]);
    tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.starts_with("e2e$")).count() >= 2
    });
    let files: Vec<_> = std::fs::read_dir(data.join("history")).unwrap().collect();
    assert_eq!(
        files.len(),
        1,
        "resuming continues the same conversation file"
    );
    let saved = std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    assert_eq!(saved["turns"].as_array().unwrap().len(), 2);
}

#[test]
fn a_panic_restores_the_terminal_and_says_so_briefly() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("panic", 100, 30, &[("TOKSCOPE_DATA_DIR", &data)]);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    let bin = env!("CARGO_BIN_EXE_tokscope");
    tmux.type_text(&format!(
        "TOKSCOPE_INJECT_PANIC=1 {bin} chat -m {} -t 1; echo exit=$?",
        model.display()
    ));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for(
        "the crash message and the shell",
        Duration::from_secs(60),
        |s| s.contains("exit=") && s.lines().filter(|l| l.starts_with("e2e$")).count() >= 2,
    );
    assert!(screen.contains("tokscope crashed"), "{screen}");
    assert!(!screen.contains("stack backtrace"), "{screen}");
    assert!(
        !screen.contains("exit=0"),
        "a crash is not a success:\n{screen}"
    );
    assert_eq!(
        tmux.tmux(&["display", "-p", "-t", "main", "#{alternate_on}"])
            .trim(),
        "0"
    );
    // The shell still echoes typed text: raw mode is off.
    tmux.type_text("echo cooked-mode-ok");
    tmux.keys(&["Enter"]);
    tmux.wait_for("cooked mode", Duration::from_secs(5), |s| {
        s.lines().any(|l| l.trim() == "cooked-mode-ok")
    });
}

#[test]
fn ab_compares_the_last_answer_with_another_model_and_f3_shows_the_compare_screen() {
    use common::tmux::{send, start_chat, status_line, wait_idle_after_answers};
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let a = common::synth(
        dir.path(),
        "a.gguf",
        "tiny",
        tokscope::synth::TensorType::F32,
        1,
    );
    let b = common::synth(
        dir.path(),
        "b.gguf",
        "tiny",
        tokscope::synth::TensorType::F32,
        2,
    );
    let data = dir.path().join("data");
    let tmux = Tmux::start_in("ab", 120, 40, dir.path());
    start_chat(&tmux, &a, "-n 12");
    send(&tmux, "a question about lighthouses");
    wait_idle_after_answers(&tmux, 1);

    // The same file and seed as the chat's model: identical.
    send(&tmux, &format!("/ab {}", a.display()));
    let screen = tmux.wait_for(
        "the A/B result and B's score",
        Duration::from_secs(60),
        |s| s.contains("identical: B's answer is the same text as A's") && s.contains("same top"),
    );
    assert!(screen.contains("B · a.gguf"), "{screen}");
    // B scored against A's model (the same file): no divergence.
    assert!(
        screen.contains("vs a.gguf KLD 0 p99 0 ") && screen.contains("same top 100%"),
        "{screen}"
    );
    tmux.keys(&["Escape"]);
    tmux.wait_for("the chat", Duration::from_secs(10), |s| {
        !s.contains("A/B: the last prompt") && status_line(s).contains("ready")
    });

    // Another model file: its own answer beside A's.
    send(&tmux, &format!("/ab {}", b.display()));
    let screen = tmux.wait_for("B's answer and its score", Duration::from_secs(60), |s| {
        s.contains("B · b.gguf")
            && (s.contains("first divergence at token") || s.contains("identical:"))
            && s.contains("same top")
    });
    assert!(screen.contains("TTFT ms"), "{screen}");
    assert!(screen.contains("vs a.gguf KLD"), "{screen}");
    assert!(
        !screen.contains("vs a.gguf KLD 0.0000"),
        "other weights: {screen}"
    );
    tmux.keys(&["Escape"]);

    // A missing file: a message, and the chat goes on.
    send(&tmux, "/ab /nonexistent/model.gguf");
    tmux.wait_for("the error", Duration::from_secs(30), |s| {
        s.contains("model file not found")
    });
    tmux.keys(&["Escape"]);
    send(&tmux, "and another question");
    wait_idle_after_answers(&tmux, 2);

    // F3: no comparison in this data dir yet.
    tmux.keys(&["F3"]);
    tmux.wait_for("the compare screen", Duration::from_secs(10), |s| {
        s.contains("no comparison yet")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_for("the chat", Duration::from_secs(10), |s| {
        !s.contains("no comparison yet") && status_line(s).contains("ready")
    });
    tmux.keys(&["C-q"]);
    tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.starts_with("e2e$")).count() >= 2
    });
    // B's answers were never added to the conversation.
    assert_eq!(common::tmux::saved_turns(&data), 2);
}

/// Job control from outside (`kill -TSTP`): the shell gets its normal screen back (no
/// alternate screen, no mouse reporting) and after `fg` the chat takes the terminal again and
/// redraws, with the typed draft still there.
#[test]
fn an_external_suspend_gives_the_terminal_back_and_fg_redraws_the_chat() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let config = dir.path().join("config");
    let tmux = Tmux::start(
        "suspend",
        100,
        30,
        &[
            ("TOKSCOPE_DATA_DIR", &data),
            ("TOKSCOPE_CONFIG_DIR", &config),
        ],
    );
    common::tmux::start_chat(&tmux, &model, "");
    tmux.type_text("a draft kept over the suspend");
    tmux.wait_for("the draft", Duration::from_secs(10), |s| {
        s.contains("a draft kept over the suspend")
    });
    let pid = common::tmux::tokscope_pid(&tmux);
    let display = |what: &str| {
        tmux.tmux(&["display", "-p", "-t", "main", what])
            .trim()
            .to_string()
    };
    assert_eq!(display("#{alternate_on}"), "1");
    assert!(Command::new("kill")
        .args(["-TSTP", &pid])
        .status()
        .unwrap()
        .success());
    let shell = tmux.wait_for("the shell's job notice", Duration::from_secs(10), |s| {
        s.contains("Stopped")
    });
    assert_eq!(display("#{alternate_on}"), "0", "{shell}");
    assert_eq!(display("#{mouse_any_flag}"), "0", "{shell}");
    tmux.type_text("fg");
    tmux.keys(&["Enter"]);
    let back = tmux.wait_for("the chat redrawn", Duration::from_secs(10), |s| {
        common::tmux::status_line(s).contains("ready")
            && s.contains("a draft kept over the suspend")
    });
    assert_eq!(display("#{alternate_on}"), "1", "{back}");
    // Still live: the draft can be sent and answered.
    tmux.keys(&["Enter"]);
    common::tmux::wait_idle_after_answers(&tmux, 1);
    tmux.keys(&["C-q"]);
    // (The shell ran `echo exit=$?` when the job stopped; after `fg` the quit is seen as the
    // prompt coming back below it.)
    let end = tmux.wait_for("the shell to come back", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.starts_with("e2e$")).count() >= 3
    });
    assert_eq!(display("#{alternate_on}"), "0", "{end}");
    assert!(!end.contains("TTFT ms"), "{end}");
}
