//! End to end in tmux, the real binary: a failed `/model` keeps the chat's model (the next
//! message is answered by it), a good one switches; the bare `tokscope -m` starts the chat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::tmux::{bin, send, status_line, wait_idle_after_answers, Tmux, READY};

#[test]
fn a_failed_model_switch_keeps_the_model_and_a_good_one_switches() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let ty = tokscope::synth::TensorType::F32;
    let a = common::synth(dir.path(), "a.gguf", "tiny", ty, 1);
    let b = common::synth(dir.path(), "b.gguf", "tiny", ty, 2);
    // Two bad files of the reliability matrix: a truncated model, and not a GGUF at all.
    let bytes = std::fs::read(&a).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let random = dir.path().join("random.gguf");
    std::fs::File::create(&random)
        .unwrap()
        .write_all(
            &(0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let data = dir.path().join("data");
    let tmux = Tmux::start_in("switch", 160, 40, dir.path());
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    // The bare command with the chat's flags.
    tmux.type_text(&format!(
        "{} -m {} -t 1 --temp 0 -n 8; echo exit=$?",
        bin(),
        a.display()
    ));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the model to be ready", READY, |s| {
        status_line(s).contains("ready")
    });
    send(&tmux, "first question");
    wait_idle_after_answers(&tmux, 1);

    let mut answers = 1;
    for (bad, says) in [
        (dir.path().join("missing.gguf"), "model file not found"),
        (truncated, "truncated"),
        (random, "not a GGUF"),
    ] {
        send(&tmux, &format!("/model {}", bad.display()));
        let screen = tmux.wait_for("the switch error", Duration::from_secs(30), |s| {
            s.contains("could not switch model (still on a.gguf)")
        });
        assert!(screen.contains(says), "{says}: {screen}");
        assert!(status_line(&screen).contains("ready"), "{screen}");
        // The old model answers the next message.
        send(&tmux, "and then?");
        answers += 1;
        let screen = wait_idle_after_answers(&tmux, answers);
        assert!(!screen.contains("not ready"), "{screen}");
    }
    send(&tmux, &format!("/model {}", b.display()));
    tmux.wait_for("the switch", Duration::from_secs(30), |s| {
        s.contains("switched to b.gguf") && status_line(s).contains("ready")
    });
    send(&tmux, "and on b?");
    wait_idle_after_answers(&tmux, answers + 1);
    tmux.keys(&["C-q"]);
    let screen = tmux.wait_for("the exit", Duration::from_secs(20), |s| {
        common::tmux::exit_line(s).is_some()
    });
    assert_eq!(common::tmux::exit_line(&screen), Some("exit=0"), "{screen}");
    assert_eq!(common::tmux::saved_turns(&data), answers + 1);
}

/// `/copy` writes the last answer as OSC 52: tmux with `set-clipboard on` takes it into its
/// paste buffer (the real sequence, through the real terminal), byte for byte the saved
/// answer; with tmux's default (`external`), which drops such writes, the chat says so.
#[test]
fn copy_puts_the_answer_on_the_clipboard_and_says_when_the_terminal_cannot_take_it() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("copy", 120, 40, &[("TOKSCOPE_DATA_DIR", &data)]);
    tmux.tmux(&["set", "-g", "set-clipboard", "on"]);
    common::tmux::start_chat(&tmux, &model, "-n 12");
    send(&tmux, "hello");
    wait_idle_after_answers(&tmux, 1);
    send(&tmux, "/copy");
    tmux.wait_for("the copy notice", Duration::from_secs(10), |s| {
        s.contains("copied answer 1")
    });
    let saved: Vec<_> = std::fs::read_dir(data.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    let answer = tokscope::history::load(&saved[0]).unwrap().turns[0]
        .assistant
        .clone();
    assert!(!answer.is_empty());
    let mut buffer = String::new();
    for _ in 0..100 {
        buffer = tmux.tmux(&["show-buffer"]);
        if !buffer.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(buffer, answer, "tmux's buffer holds the answer");
    tmux.keys(&["C-q"]);
    tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        common::tmux::exit_line(s).is_some()
    });

    tmux.tmux(&["set", "-g", "set-clipboard", "external"]);
    tmux.type_text("clear");
    tmux.keys(&["Enter"]);
    common::tmux::start_chat(&tmux, &model, "-n 12 --resume");
    send(&tmux, "/copy");
    let screen = tmux.wait_for("the refusal", Duration::from_secs(10), |s| {
        s.contains("not copied")
    });
    assert!(screen.contains("set-clipboard on"), "{screen}");
}

/// The bench screen's sweep (F2) is saved to the results log: the screen names the run, and
/// `tokscope results` lists it with its batch tests.
#[test]
fn the_bench_screens_sweep_is_saved_to_results() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(
        dir.path(),
        "tiny.gguf",
        "tiny",
        tokscope::synth::TensorType::F32,
        1,
    );
    let tmux = Tmux::start_in("sweep-saved", 120, 40, dir.path());
    common::tmux::start_chat(&tmux, &model, "");
    tmux.keys(&["F2"]);
    tmux.wait_for("the bench screen", Duration::from_secs(10), |s| {
        s.contains("runs the sweep")
    });
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the sweep saved", Duration::from_secs(120), |s| {
        s.contains("saved as run")
    });
    let id = screen
        .split("saved as run ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a run id")
        .to_string();
    tmux.keys(&["Escape"]);
    tmux.keys(&["C-q"]);
    tmux.wait_for("the chat to end", Duration::from_secs(20), |s| {
        s.contains("exit=0")
    });
    let out = common::tokscope_cmd(dir.path())
        .args(["results", &id, "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = run["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 6, "B = 1, 2, 4, 8, 16, 32: {run}");
    assert_eq!(rows[5]["test"], "B32 pp64+tg32");
    assert_eq!(rows[0]["kind"], "batch");
    assert!(rows[3]["tok_per_s_mean"].as_f64().unwrap() > 0.0);
    assert_eq!(rows[0]["stopped"], false);
    let listing = common::tokscope_cmd(dir.path())
        .arg("results")
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains(&id), "{listing}");
}

/// F4 in the chat started with `--profile`: the profiled steps of an answer show as parts
/// (attention, FFN, output head) and a layer strip, live from the engine.
#[test]
fn the_profile_screen_shows_where_the_answers_steps_went() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(
        dir.path(),
        "tiny.gguf",
        "tiny",
        tokscope::synth::TensorType::F32,
        1,
    );
    let tmux = Tmux::start_in("profile-screen", 120, 40, dir.path());
    common::tmux::start_chat(
        &tmux,
        &model,
        "-n 24 --ignore-eos --profile --profile-rate 4",
    );
    common::tmux::send(&tmux, "Hello there");
    common::tmux::wait_idle_after_answers(&tmux, 1);
    tmux.keys(&["F4"]);
    let screen = tmux.wait_for("the profile screen", Duration::from_secs(10), |s| {
        s.contains("where the time goes") && s.contains("layers")
    });
    for want in [
        "one decode step in 4 profiled",
        "attn QKV",
        "ffn gate/up",
        "output head",
        "mean of 5 this turn",
        "parts add up to",
    ] {
        assert!(screen.contains(want), "{want} missing:\n{screen}");
    }
    tmux.keys(&["Escape"]);
    tmux.wait_for("the chat again", Duration::from_secs(10), |s| {
        !s.contains("where the time goes")
    });
    // `/trace PATH`: the answer's engine spans, tokens and profiled nodes, and the UI's
    // frames, read back by the independent reader (scripts/trace-check.py).
    let trace = dir.path().join("chat-trace.json");
    common::tmux::send(&tmux, &format!("/trace {}", trace.display()));
    tmux.wait_for("the trace notice", Duration::from_secs(10), |s| {
        s.contains("trace of 1 answer(s)")
    });
    let said = common::trace_check(&trace, None).unwrap();
    assert!(said.contains("every track nests"), "{said}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let count = |name: &str| events.iter().filter(|e| e["name"] == name).count();
    assert_eq!(count("token"), 24);
    assert!(count("frame") > 0, "no UI frames");
    assert!(
        events.iter().any(|e| e["cat"] == "node"),
        "no profiled nodes"
    );
    // The frames sit on the answer's clock: the ones drawn from the submission on.
    let ts = |e: &serde_json::Value| e["ts"].as_f64().unwrap();
    let submitted = events
        .iter()
        .find(|e| e["name"] == "request submitted")
        .map(ts)
        .unwrap();
    let last_token = events
        .iter()
        .filter(|e| e["name"] == "token")
        .map(ts)
        .fold(0.0, f64::max);
    assert!(
        events
            .iter()
            .filter(|e| e["name"] == "frame")
            .all(|e| ts(e) >= submitted),
        "a frame before the answer's submission"
    );
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "frame" && ts(e) >= last_token),
        "no frame drawn after the last token"
    );
    tmux.keys(&["C-q"]);
    tmux.wait_for("the chat to end", Duration::from_secs(20), |s| {
        s.contains("exit=0")
    });
}
