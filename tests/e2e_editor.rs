//! End to end in tmux, the real binary: the input's readline/emacs keys (Ctrl+A/E/W/U/K/Y,
//! Alt+B, undo and redo, Alt+Enter) edit what the screen shows, and the message sent (on screen
//! and in the saved conversation) is the edited text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::tmux::{start_chat, wait_idle_after_answers, Tmux};

/// The input box's rows: from the prompt row (`› `) to the screen's end (the box is the
/// bottom of the screen), each without its two-column prefix and trailing blanks, joined
/// with `\n`.
fn input_box(screen: &str) -> String {
    let rows: Vec<&str> = screen.lines().collect();
    let Some(start) = rows.iter().rposition(|l| l.starts_with("› ")) else {
        return String::new();
    };
    rows[start..]
        .iter()
        .map(|l| {
            l.strip_prefix("› ")
                .or_else(|| l.strip_prefix("  "))
                .unwrap_or(l)
                .trim_end()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Presses `keys` (tmux names) and waits until the input box shows `expect`.
fn press(tmux: &Tmux, keys: &[&str], expect: &str) {
    tmux.keys(keys);
    wait_box(tmux, &format!("{keys:?}"), expect);
}

fn typed(tmux: &Tmux, text: &str, expect: &str) {
    tmux.type_text(text);
    wait_box(tmux, text, expect);
}

fn wait_box(tmux: &Tmux, after: &str, expect: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let screen = tmux.screen();
        if input_box(&screen) == expect {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after {after}: the input box shows {:?}, not {expect:?}; the screen was:\n{screen}",
            input_box(&screen)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn readline_keys_edit_the_input_and_the_edited_text_is_sent() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("editor", 120, 40, &[("TOKSCOPE_DATA_DIR", &data)]);
    start_chat(&tmux, &model, "-n 4");

    typed(&tmux, "alpha beta gamma", "alpha beta gamma");
    press(&tmux, &["C-w"], "alpha beta");
    press(&tmux, &["C-a"], "alpha beta");
    typed(&tmux, "say ", "say alpha beta");
    press(&tmux, &["C-e"], "say alpha beta");
    typed(&tmux, "delta", "say alpha beta delta");
    // Alt+B to the start of "delta", Ctrl+K cuts it, Ctrl+A Ctrl+Y puts it first.
    press(&tmux, &["M-b", "C-k"], "say alpha beta");
    press(&tmux, &["C-a", "C-y"], "deltasay alpha beta");
    // Undo takes the yank back, redo does it again, undo once more.
    press(&tmux, &["C-z"], "say alpha beta");
    press(&tmux, &["M-z"], "deltasay alpha beta");
    press(&tmux, &["C-z"], "say alpha beta");
    // Ctrl+U clears the line (the cursor at its end); Ctrl+Y brings it back.
    press(&tmux, &["C-e", "C-u"], "type a message, or /help");
    press(&tmux, &["C-y"], "say alpha beta");
    typed(&tmux, "omega", "say alpha beta omega");
    // A new line, then undone: the newline is an edit like any other.
    press(&tmux, &["M-Enter"], "say alpha beta omega\n");
    typed(&tmux, "x", "say alpha beta omega\nx");
    press(&tmux, &["C-z", "C-z"], "say alpha beta omega");

    tmux.keys(&["Enter"]);
    let screen = wait_idle_after_answers(&tmux, 1);
    let rows: Vec<&str> = screen.lines().collect();
    assert!(
        rows.windows(2)
            .any(|w| w[0].starts_with("▍you") && w[1].starts_with("  say alpha beta omega ")),
        "the edited message is shown as sent:\n{screen}"
    );
    assert_eq!(
        input_box(&screen),
        "type a message, or /help",
        "the input is empty after sending"
    );
    tmux.keys(&["C-q"]);
    tmux.wait_for("the exit", Duration::from_secs(20), |s| {
        common::tmux::exit_line(s).is_some()
    });
    let saved: Vec<_> = std::fs::read_dir(data.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    let conversation = tokscope::history::load(&saved[0]).unwrap();
    assert_eq!(conversation.turns[0].user, "say alpha beta omega");
}
