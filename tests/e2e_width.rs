//! End to end in tmux, the real binary: text whose grapheme clusters terminals measure
//! differently from unicode-width (Bengali spacing vowel signs, Devanagari and Bengali
//! clusters of three columns, an emoji with a skin tone, a ZWJ family, ❤️ with U+FE0F,
//! halfwidth katakana with a voiced mark, Arabic harakat) is shown whole, the input's cursor
//! stands right after it, and the metrics pane's border stays in its column on that row.
//!
//! The check does not trust tokscope's own width rules: the same text is printed by the shell
//! in a second tmux window and the terminal's cursor says how many columns it took.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::tmux::{start_chat, wait_idle_after_answers, Tmux};

const MESSAGE: &str = "বাংলা ভাষা সংস্কৃতি ক্ষত্রিয় क्षत्रिय 👍🏽 ❤️ 👨‍👩‍👧 ﾊﾞ مَرْحَبًا end";

/// Columns the terminal (tmux) advances for `text`, printed by the shell in a window of its
/// own.
fn terminal_columns(tmux: &Tmux, text: &str) -> usize {
    tmux.tmux(&[
        "new-window",
        "-d",
        "-n",
        "measure",
        "bash --norc --noprofile",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    tmux.tmux(&[
        "send-keys",
        "-t",
        "measure",
        &format!("clear; cat {}; sleep 30", file.path().display()),
        "Enter",
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = tmux.tmux(&["capture-pane", "-p", "-t", "measure"]);
        if shown.contains("end") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the shell did not print the text"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let x = tmux.tmux(&["display", "-p", "-t", "measure", "#{cursor_x}"]);
    tmux.tmux(&["kill-window", "-t", "measure"]);
    x.trim().parse().unwrap()
}

#[test]
fn clusters_terminals_measure_differently_are_shown_whole_and_the_border_stays() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny(dir.path());
    let data = dir.path().join("data");
    let tmux = Tmux::start("width", 120, 40, &[("TOKSCOPE_DATA_DIR", &data)]);
    let columns = terminal_columns(&tmux, MESSAGE);
    start_chat(&tmux, &model, "-n 4");
    tmux.type_text(MESSAGE);
    // In the input box, the cursor stands right after the text, in the terminal's columns.
    tmux.wait_for("the typed message", Duration::from_secs(10), |s| {
        s.lines()
            .any(|l| l.starts_with("› ") && l.trim_end().ends_with("end"))
    });
    let cursor = tmux.tmux(&["display", "-p", "-t", "main", "#{cursor_x}"]);
    assert_eq!(
        cursor.trim().parse::<usize>().unwrap(),
        2 + columns,
        "the input's cursor is not after the text:\n{}",
        tmux.screen()
    );
    tmux.keys(&["Enter"]);
    let screen = wait_idle_after_answers(&tmux, 1);
    let rows: Vec<&str> = screen.lines().collect();
    // The column of the metrics pane's border, from a row of plain text.
    let you = rows
        .iter()
        .find(|r| r.starts_with("▍you"))
        .unwrap_or_else(|| panic!("no message row:\n{screen}"));
    let border = you.chars().position(|c| c == '│').unwrap();
    let row = rows
        .iter()
        .find(|r| r.contains("end") && r.contains('│') && !r.starts_with('›'))
        .unwrap_or_else(|| panic!("the message is not on screen:\n{screen}"));
    let (left, _) = row.split_once('│').unwrap();
    // tmux draws ❤ without U+FE0F in one column, as the chat writes it.
    let shown = left.trim();
    assert_eq!(
        shown.replace('\u{FE0F}', ""),
        MESSAGE.replace('\u{FE0F}', ""),
        "the message is not shown whole:\n{screen}"
    );
    // "  " + the message + blanks = the border's column, in the terminal's own columns.
    let blanks = left.len() - left.trim_end().len();
    let measured = columns;
    assert_eq!(
        2 + measured + blanks,
        border,
        "the border moved on the message's row ({measured} columns of text, {blanks} blanks, \
         border at {border}):\n{screen}"
    );
    tmux.keys(&["C-c"]);
}
