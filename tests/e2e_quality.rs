//! End to end in tmux, the real binary: `chat --ref` scores each answer against a reference
//! model after it finishes (issue 34). The same file as its own reference shows KLD 0, 100%
//! same top and no divergence in the quality block; `/ref` to a quantization of the model
//! scores the last answer at once with a divergence above 0; the scores are saved with their
//! turns; `/ref off` stops. A missing reference and `--ref` with `--url` are refused before
//! the screen opens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::tmux::{bin, exit_line, send, status_line, wait_idle_after_answers, Tmux, READY};
use predicates::prelude::*;
use tokscope::synth::TensorType;

const SCORED: Duration = Duration::from_secs(60);

/// The value right of `label` on the first screen line that holds it (the metrics column).
fn value_after<'a>(screen: &'a str, label: &str) -> Option<&'a str> {
    let line = screen.lines().find(|l| l.contains(label))?;
    let rest = &line[line.find(label)? + label.len()..];
    rest.split_whitespace().next()
}

/// The quality block's first line (the metrics column's part of it).
fn quality_header(screen: &str) -> &str {
    screen
        .lines()
        .find_map(|l| l.split_once("│ quality ").map(|(_, r)| r))
        .unwrap_or("")
}

#[test]
fn the_chat_scores_each_answer_against_its_reference_and_saves_the_scores() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "m-f32.gguf", "small", TensorType::F32, 7);
    let quant = common::synth(dir.path(), "m-q4_0.gguf", "small", TensorType::Q4_0, 7);
    let data = dir.path().join("data");
    let tmux = Tmux::start_in("quality", 160, 48, dir.path());
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    tmux.type_text(&format!(
        "{} chat -m {} --ref {} -t 1 --temp 0 -n 12 --ignore-eos; echo exit=$?",
        bin(),
        model.display(),
        model.display()
    ));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the model to be ready", READY, |s| {
        status_line(s).contains("ready")
    });
    send(&tmux, "hello there");
    let screen = tmux.wait_for("the first score", SCORED, |s| {
        s.contains("1st diverges") && status_line(s).contains("ready")
    });
    assert!(quality_header(&screen).contains("m-f32.gguf"), "{screen}");
    assert_eq!(value_after(&screen, "KLD"), Some("0"), "{screen}");
    assert_eq!(value_after(&screen, "same top"), Some("100%"), "{screen}");
    assert_eq!(
        value_after(&screen, "1st diverges"),
        Some("none"),
        "{screen}"
    );

    // Another reference scores the last answer at once: a quantization strays.
    send(&tmux, &format!("/ref {}", quant.display()));
    let screen = tmux.wait_for("the score against the quantization", SCORED, |s| {
        quality_header(s).contains("m-q4_0.gguf") && s.contains("1st diverges")
    });
    let kld: f64 = value_after(&screen, "KLD")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a KLD figure: {screen}"));
    assert!(kld > 0.0 && kld.is_finite(), "{kld}: {screen}");

    // Alt+K: the scored answer drawn token by token in its KLD colours, with the legend; the
    // terminal receives colour (SGR) sequences for it, and Alt+K again gives Markdown back.
    tmux.keys(&["M-k"]);
    tmux.wait_for("the tokens coloured", Duration::from_secs(10), |s| {
        s.contains("first divergence") && s.contains("Alt+K: Markdown")
    });
    let styled = tmux.tmux(&["capture-pane", "-p", "-e", "-t", "main"]);
    let legend = styled
        .lines()
        .find(|l| l.contains("KLD") && l.contains("<0.01"))
        .unwrap_or_else(|| panic!("the legend: {styled}"));
    assert!(
        legend.contains("\u{1b}["),
        "the legend is coloured: {legend:?}"
    );
    tmux.keys(&["M-k"]);
    tmux.wait_for("Markdown again", Duration::from_secs(10), |s| {
        !s.contains("Alt+K: Markdown") && s.contains("Alt+K: tokens by KLD")
    });

    // The next answer is scored too, and the conversation row pools both.
    send(&tmux, "and then?");
    wait_idle_after_answers(&tmux, 2);
    let screen = tmux.wait_for("the second score", SCORED, |s| {
        s.contains("2 answers") && !s.contains("scoring…")
    });
    assert!(screen.contains("KLD"), "{screen}");
    send(&tmux, "/ref off");
    tmux.wait_for("scoring off", Duration::from_secs(10), |s| {
        s.contains("scoring is off")
    });
    tmux.keys(&["C-q"]);
    let screen = tmux.wait_for("the chat to exit", Duration::from_secs(20), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&screen), Some("exit=0"), "{screen}");

    // Both answers' scores are in the history, per token.
    let history = data.join("history");
    let file = std::fs::read_dir(&history)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("the conversation was saved");
    let saved = tokscope::history::load(&file).expect("it loads");
    assert_eq!(saved.turns.len(), 2);
    for turn in &saved.turns {
        let q = turn.quality.as_ref().expect("each turn keeps its score");
        assert_eq!(q.tokens.len(), 12, "one score per answer token");
        assert!(q.reference.ends_with("m-q4_0.gguf"), "{:?}", q.reference);
    }
}

#[test]
fn a_missing_reference_or_one_for_a_server_is_refused_before_the_screen_opens() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let missing = dir.path().join("missing-ref.gguf");
    common::tokscope_cmd(dir.path())
        .args(["chat", "-m"])
        .arg(&model)
        .arg("--ref")
        .arg(&missing)
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("missing-ref.gguf").and(predicate::str::contains("reference")),
        );
    common::tokscope_cmd(dir.path())
        .args(["chat", "--url", "http://127.0.0.1:9/v1", "--ref"])
        .arg(&model)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--ref scores a local model"));
}
