//! Nothing lost, nothing garbled: the real binary in a real terminal (tmux) under kill -9, a
//! storm of resizes while streaming, a 1 MB paste, a file-size limit that makes saving fail,
//! and signals while loading.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::tmux::{
    bin, exit_line, saved_turns, send, start_chat, status_line, tokscope_pid,
    wait_idle_after_answers, Tmux,
};
use tokscope::synth::TensorType;

#[test]
fn kill_9_during_generation_keeps_every_completed_turn() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("kill9", 100, 30, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "-c 8192 -n 3");
    send(&tmux, "one");
    wait_idle_after_answers(&tmux, 1);
    send(&tmux, "two");
    wait_idle_after_answers(&tmux, 2);
    send(&tmux, "/max 100000");
    send(&tmux, "three, a long one");
    tmux.wait_for("streaming", Duration::from_secs(30), |s| {
        status_line(s).contains("streaming")
    });
    // A message being typed while the answer streams, not sent.
    tmux.type_text("a draft nobody sent");
    tmux.wait_for("the draft on screen", Duration::from_secs(10), |s| {
        s.contains("› a draft nobody sent")
    });
    // The draft is kept as it changes (the loop writes it after each batch of events), the
    // answer in flight at most every 500 ms.
    std::thread::sleep(Duration::from_millis(700));
    let pid = tokscope_pid(&tmux);
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(
        saved_turns(&data),
        2,
        "both completed turns are on disk and load back"
    );
    // The answer in flight is on disk too, in its in-flight file.
    let in_flight: Vec<_> = std::fs::read_dir(data.join("in-flight"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(in_flight.len(), 1, "{in_flight:?}");
    // The next start saves it into history as a stopped turn, and resumes all three.
    tmux.tmux(&["send-keys", "-t", "main", "reset", "Enter"]);
    // (The status line shows the last turn's phase: "stopped", not "ready".)
    tmux.type_text(&format!(
        "{} chat -m {} -t 1 --temp 0 -n 2 --resume; echo exit=$?",
        bin(),
        model.display()
    ));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the resumed conversation", Duration::from_secs(60), |s| {
        s.contains("two") && s.contains("three, a long one") && status_line(s).contains("stopped")
    });
    assert!(screen.matches("─ TTFT").count() >= 2, "{screen}");
    assert_eq!(saved_turns(&data), 3, "the answer in flight is recovered");
    assert!(!in_flight[0].exists(), "the in-flight file is taken");
    let history = std::fs::read_dir(data.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let conv = tokscope::history::load(&history).unwrap();
    let third = &conv.turns[2];
    assert_eq!(third.user, "three, a long one");
    assert!(!third.assistant.is_empty(), "the answer so far is kept");
    assert_eq!(
        third.stop_reason,
        tokscope::engine::StopReason::Cancelled,
        "kept as a stopped turn"
    );
    // The unsent draft is back in the input, and the chat says so.
    let screen = tmux.wait_for("the draft restored", Duration::from_secs(10), |s| {
        s.contains("› a draft nobody sent")
    });
    assert!(
        screen.contains("unsent message from the last session"),
        "{screen}"
    );
    tmux.keys(&["C-q"]);
}

#[test]
fn a_storm_of_resizes_while_streaming_garbles_nothing() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let tmux = Tmux::start(
        "resize",
        120,
        40,
        &[("TOKSCOPE_DATA_DIR", &dir.path().join("data"))],
    );
    start_chat(&tmux, &model, "-c 8192 -n 600");
    send(&tmux, "tell me everything");
    tmux.wait_for("streaming", Duration::from_secs(30), |s| {
        status_line(s).contains("streaming")
    });
    for i in 0..60u16 {
        let (w, h) = match i % 4 {
            0 => (10, 5),
            1 => (1, 1),
            2 => (200, 60),
            _ => (60 + i, 15 + i % 20),
        };
        tmux.tmux(&[
            "resize-window",
            "-t",
            "main",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
        ]);
        std::thread::sleep(Duration::from_millis(10));
    }
    tmux.tmux(&["resize-window", "-t", "main", "-x", "120", "-y", "40"]);
    let screen = tmux.wait_for("a clean full-size frame", Duration::from_secs(60), |s| {
        status_line(s).contains("ready") && s.contains("─ TTFT")
    });
    assert!(screen.contains("tell me everything"), "{screen}");
    assert!(!screen.contains("too small"), "{screen}");
    tmux.keys(&["C-q"]);
    let back = tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&back), Some("exit=0"), "{back}");
}

#[test]
fn a_one_megabyte_paste_is_taken_and_a_too_long_prompt_is_said_on_screen() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let tmux = Tmux::start(
        "paste",
        120,
        40,
        &[("TOKSCOPE_DATA_DIR", &dir.path().join("data"))],
    );
    start_chat(&tmux, &model, "-c 512 -n 4");
    let paste = dir.path().join("paste.txt");
    let text = "lorem ipsum \x1b[31mdolor\x1b[0m sit amet\n".repeat((1 << 20) / 36);
    std::fs::write(&paste, &text).unwrap();
    tmux.tmux(&["load-buffer", "-b", "big", paste.to_str().unwrap()]);
    tmux.tmux(&["paste-buffer", "-p", "-b", "big", "-t", "main"]);
    tmux.wait_for(
        "the pasted text in the input",
        Duration::from_secs(30),
        |s| s.contains("lorem ipsum"),
    );
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the too-long message", Duration::from_secs(60), |s| {
        s.contains("context holds")
    });
    assert!(
        !screen.contains('\u{1b}'),
        "no raw escape sequence reaches the screen"
    );
    // The chat goes on.
    send(&tmux, "short");
    tmux.wait_for(
        "an answer to the next prompt",
        Duration::from_secs(30),
        |s| s.contains("─ TTFT"),
    );
    tmux.keys(&["C-q"]);
    let back = tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&back), Some("exit=0"), "{back}");
}

#[test]
fn keys_after_a_one_megabyte_paste_are_drawn_while_the_count_catches_up() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    // Llama 3's 128,256-token vocabulary, where counting a megabyte takes long.
    let mut spec = tokscope::synth::SynthSpec::preset("tiny").unwrap();
    spec.tokenizer_json = Some(common::llama3_tokenizer().to_path_buf());
    let model = dir.path().join("tiny-l3.gguf");
    tokscope::synth::write_model(&model, &spec).unwrap();
    let tmux = Tmux::start(
        "pastekeys",
        120,
        40,
        &[("TOKSCOPE_DATA_DIR", &dir.path().join("data"))],
    );
    start_chat(&tmux, &model, "-c 512 -n 4");
    let paste = dir.path().join("paste.txt");
    let unit = "héllo wörld, 日本語のテキスト, lorem ipsum ";
    std::fs::write(&paste, unit.repeat((1 << 20) / unit.len())).unwrap();
    tmux.tmux(&["load-buffer", "-b", "big", paste.to_str().unwrap()]);
    tmux.tmux(&["paste-buffer", "-p", "-b", "big", "-t", "main"]);
    // Each key is a change of a 1 MB input: the box lays out only the rows it shows, and the
    // count runs on its own thread. This is a liveness check (keys drawn in order, the count
    // arrives, Ctrl+Q honoured); the deadline is far above a frame, and the latency itself is
    // measured by scripts/long-day.py (BENCHMARKS.md, "Long days").
    for marker in ["Q", "QZ", "QZX"] {
        tmux.type_text(&marker[marker.len() - 1..]);
        tmux.wait_for("the typed key", Duration::from_secs(10), |s| {
            s.contains(marker)
        });
    }
    tmux.wait_for("the input's token count", Duration::from_secs(120), |s| {
        s.lines()
            .any(|l| l.starts_with(" message · ") && l.contains(" tokens "))
    });
    tmux.keys(&["C-q"]);
    let back = tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&back), Some("exit=0"), "{back}");
}

#[test]
fn a_full_disk_is_reported_and_the_chat_survives() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("history")).unwrap();
    let tmux = Tmux::start("fsize", 120, 40, &[("TOKSCOPE_DATA_DIR", &data)]);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    // A 1 KiB file-size limit for the chat only: its history file cannot be written.
    tmux.type_text("ulimit -f 1");
    tmux.keys(&["Enter"]);
    start_chat(&tmux, &model, "-n 40");
    send(&tmux, "hello");
    let screen = tmux.wait_for("the save error", Duration::from_secs(30), |s| {
        s.contains("could not save")
    });
    assert!(
        screen.contains("─ TTFT"),
        "the answer is still shown:\n{screen}"
    );
    send(&tmux, "still here?");
    wait_idle_after_answers(&tmux, 2);
    // The turns are not saved: one quit does not lose them, it asks (and tries again).
    tmux.keys(&["C-q"]);
    tmux.wait_for("the quit to be held back", Duration::from_secs(10), |s| {
        s.contains("quit again")
    });
    // A second one within the window quits, and the exit code says turns were lost.
    tmux.keys(&["C-q"]);
    let back = tmux.wait_for("the shell", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&back), Some("exit=1"), "{back}");
    assert!(
        back.contains("quit with the conversation not saved"),
        "{back}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(data.join("history"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        leftovers
            .iter()
            .all(|n| !n.to_string_lossy().contains(".tmp")),
        "no temp files left: {leftovers:?}"
    );
}

#[test]
fn quitting_or_sighup_while_loading_ends_cleanly() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    for (name, how) in [("ctrlc", "C-c"), ("hup", "HUP")] {
        let tmux = Tmux::start(
            &format!("load-{name}"),
            100,
            30,
            &[("TOKSCOPE_DATA_DIR", &dir.path().join("data"))],
        );
        tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.contains("e2e$")
        });
        tmux.type_text(&format!(
            "{} chat -m {} -t 1; echo exit=$?",
            bin(),
            model.display()
        ));
        tmux.keys(&["Enter"]);
        tmux.wait_for("the chat", Duration::from_secs(30), |s| {
            ["checking", "loading", "creating", "ready"]
                .iter()
                .any(|w| status_line(s).contains(w))
        });
        if how == "HUP" {
            let pid = tokscope_pid(&tmux);
            Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        } else {
            tmux.keys(&[how]);
        }
        let back = tmux.wait_for("the shell", Duration::from_secs(20), |s| {
            exit_line(s).is_some()
        });
        let code = exit_line(&back).unwrap();
        let expected = if how == "HUP" { "exit=129" } else { "exit=0" };
        assert_eq!(code, expected, "{back}");
        assert_eq!(
            tmux.tmux(&["display", "-p", "-t", "main", "#{alternate_on}"])
                .trim(),
            "0"
        );
    }
}

#[test]
fn closing_the_terminal_window_ends_quietly_and_keeps_the_turns() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let data = dir.path().join("data");
    let tmux = Tmux::start("winclose", 100, 30, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "-n 8");
    send(&tmux, "hello");
    wait_idle_after_answers(&tmux, 1);
    let pid = tokscope_pid(&tmux);
    // The window closes: the pane's terminal goes away under the chat (SIGHUP, then EIO on
    // every read and write of the terminal).
    tmux.tmux(&["kill-pane", "-t", "main"]);
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while proc_dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !proc_dir.exists(),
        "the chat ended after its terminal closed"
    );
    let log = std::fs::read_to_string(data.join("logs/tokscope.log")).unwrap();
    assert!(!log.contains("panic"), "no panic is logged:\n{log}");
    assert!(
        log.contains("stopped by signal 1"),
        "the hangup is logged:\n{log}"
    );
    assert_eq!(
        common::tmux::saved_turns(&data),
        1,
        "the finished turn is saved"
    );
}

#[test]
fn sigterm_while_streaming_restores_the_terminal_and_keeps_finished_turns() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("sigterm", 100, 30, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "-c 8192 -n 4");
    send(&tmux, "short one");
    wait_idle_after_answers(&tmux, 1);
    send(&tmux, "/max 100000");
    send(&tmux, "a long one");
    tmux.wait_for("streaming", Duration::from_secs(30), |s| {
        status_line(s).contains("streaming")
    });
    let pid = tokscope_pid(&tmux);
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let screen = tmux.wait_for("the shell after SIGTERM", Duration::from_secs(10), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&screen), Some("exit=143"), "{screen}");
    assert!(screen.contains("signal 15"), "{screen}");
    assert_eq!(
        tmux.tmux(&["display", "-p", "-t", "main", "#{alternate_on}"])
            .trim(),
        "0"
    );
    assert_eq!(saved_turns(&data), 1, "the finished turn is on disk");
}

#[test]
fn ctrl_c_during_prefill_quits_cleanly() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_medium(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("prefill", 120, 40, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "-c 8192 -n 4");
    // A long prompt: thousands of tokens take a while to prefill on one thread.
    let paste = dir.path().join("long.txt");
    std::fs::write(
        &paste,
        "the quick brown fox jumps over the lazy dog ".repeat(200),
    )
    .unwrap();
    tmux.tmux(&["load-buffer", "-b", "long", paste.to_str().unwrap()]);
    tmux.tmux(&["paste-buffer", "-p", "-b", "long", "-t", "main"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("prefill", Duration::from_secs(30), |s| {
        status_line(s).contains("prefill")
    });
    tmux.keys(&["C-c"]);
    let back = tmux.wait_for("the shell", Duration::from_secs(20), |s| {
        exit_line(s).is_some()
    });
    assert_eq!(exit_line(&back), Some("exit=0"), "{back}");
    assert_eq!(
        tmux.tmux(&["display", "-p", "-t", "main", "#{alternate_on}"])
            .trim(),
        "0"
    );
}

/// Issue 57: a draft whose live token count ended the last session (its counting marker is
/// still there) is restored as text, uncounted, with a warning saying why, so the chat does
/// not crash again before a key is pressed; the user's edit counts it. The marker is planted:
/// no crash is needed (a count in flight writes it, a count that ends removes it).
#[test]
fn a_draft_whose_count_ended_the_last_session_is_restored_uncounted() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth_cli(dir.path(), "tiny", 1);
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("draft.txt"), "a draft that crashed").unwrap();
    std::fs::write(data.join("draft.counting"), "").unwrap();
    let tmux = Tmux::start("crashmark", 120, 30, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "");
    let screen = tmux.wait_for("the draft restored", Duration::from_secs(10), |s| {
        s.contains("› a draft that crashed")
    });
    assert!(screen.contains("not counted"), "{screen}");
    assert!(screen.contains("ended while counting it"), "{screen}");
    // The count worker answers within milliseconds when it counts: a second without a count
    // is a count not asked for.
    std::thread::sleep(Duration::from_secs(1));
    let screen = tmux.screen();
    assert!(!screen.contains("message · "), "{screen}");
    assert!(
        data.join("draft.counting").exists(),
        "the marker stays until counted"
    );
    // An edit is the user's word: it is counted, and the marker goes.
    tmux.type_text("!");
    tmux.wait_for("the count", Duration::from_secs(10), |s| {
        s.contains("› a draft that crashed!") && s.contains("message · ")
    });
    assert!(!data.join("draft.counting").exists());
    tmux.keys(&["C-q"]);
}
