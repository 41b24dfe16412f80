//! The input box's editing model: tui-textarea's `TextArea` is the buffer and the editing engine
//! (cursor moves, kill and yank, undo and redo); the key table (`keymap.rs`) turns keys into
//! `Edit`s, so the chat's own keys always win. The box is drawn by `ui/input.rs` (word wrap and
//! a layout of only the rows it shows), never by tui-textarea's widget.

use std::sync::atomic::{AtomicU64, Ordering};

use tui_textarea::{CursorMove, TextArea};

/// Edits the undo history keeps (each typed character, kill, yank or paste is one).
const UNDO_STEPS: usize = 100;

/// One editing key's effect on the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edit {
    Char(char),
    Newline,
    /// Backspace, Ctrl+H: the character before the cursor (or the newline, at a line's start).
    Backspace,
    /// Delete, Ctrl+D: the character under the cursor (or the newline, at a line's end).
    Delete,
    /// Left, Ctrl+B (at a line's start: the end of the line above).
    Left,
    /// Right, Ctrl+F.
    Right,
    /// Up, within a message of several lines.
    Up,
    /// Down, within a message of several lines.
    Down,
    /// Home, Ctrl+A: the start of the cursor's line.
    LineStart,
    /// End, Ctrl+E: the end of the cursor's line.
    LineEnd,
    /// Alt+B, Ctrl+Left: the start of this or the previous word.
    WordLeft,
    /// Alt+F, Ctrl+Right: the start of the next word.
    WordRight,
    /// Ctrl+K: cut to the end of the line (at its end: the newline), kept for Ctrl+Y.
    KillToLineEnd,
    /// Ctrl+U: cut to the start of the line (at its start: the newline), kept for Ctrl+Y.
    KillToLineStart,
    /// Ctrl+W, Alt+Backspace: cut the word before the cursor, kept for Ctrl+Y.
    KillWordBack,
    /// Alt+D: cut the word after the cursor, kept for Ctrl+Y.
    KillWordForward,
    /// Ctrl+Y: insert the text cut last.
    Yank,
    /// Ctrl+Z, Ctrl+_: undo the last edit.
    Undo,
    /// Alt+Z (Ctrl+Shift+Z where the terminal tells it apart): redo what undo took back.
    Redo,
}

/// The multi-line input box: the text being typed, its cursor, its undo history and the text
/// cut last. Lines are the text split at `\n`; the cursor is (line, character).
#[derive(Debug, Clone)]
pub struct Input {
    area: TextArea<'static>,
    /// Names the text's state, so the loop can tell a changed input without comparing texts:
    /// a new value, unique in the process, at every change.
    revision: u64,
    /// The cursor as (line, byte offset), kept in step after every edit: finding the byte of a
    /// character column scans the line, which a 1 MiB paste makes long, so it is done once a key
    /// rather than on every frame.
    cursor_at: (usize, usize),
}

impl Default for Input {
    fn default() -> Self {
        Self::from_lines(vec![String::new()])
    }
}

impl PartialEq for Input {
    fn eq(&self, other: &Self) -> bool {
        self.area.lines() == other.area.lines() && self.area.cursor() == other.area.cursor()
    }
}

impl Input {
    fn from_lines(lines: Vec<String>) -> Self {
        let mut area = TextArea::new(lines);
        area.set_max_histories(UNDO_STEPS);
        let mut input = Self {
            area,
            revision: next_revision(),
            cursor_at: (0, 0),
        };
        input.sync_cursor();
        input
    }

    /// Applies one editing key.
    pub(crate) fn apply(&mut self, edit: Edit) {
        let a = &mut self.area;
        let changed = match edit {
            Edit::Char('\n') | Edit::Newline => {
                a.insert_newline();
                true
            }
            Edit::Char(c) => {
                a.insert_char(c);
                true
            }
            Edit::Backspace => a.delete_char(),
            Edit::Delete => a.delete_next_char(),
            Edit::Left => move_cursor(a, CursorMove::Back),
            Edit::Right => move_cursor(a, CursorMove::Forward),
            Edit::Up => move_cursor(a, CursorMove::Up),
            Edit::Down => move_cursor(a, CursorMove::Down),
            Edit::LineStart => move_cursor(a, CursorMove::Head),
            Edit::LineEnd => move_cursor(a, CursorMove::End),
            Edit::WordLeft => move_cursor(a, CursorMove::WordBack),
            Edit::WordRight => move_cursor(a, CursorMove::WordForward),
            Edit::KillToLineEnd => a.delete_line_by_end(),
            Edit::KillToLineStart => a.delete_line_by_head(),
            Edit::KillWordBack => a.delete_word(),
            Edit::KillWordForward => a.delete_next_word(),
            Edit::Yank => a.paste(),
            Edit::Undo => a.undo(),
            Edit::Redo => a.redo(),
        };
        if changed {
            self.revision = next_revision();
        }
        self.sync_cursor();
    }

    /// Inserts `s` (a paste: one undo step however long) at the cursor.
    pub(crate) fn insert_str(&mut self, s: &str) {
        if self.area.insert_str(s) {
            self.revision = next_revision();
        }
        self.sync_cursor();
    }

    /// Replaces the text with `text`, the cursor at its end; the undo history starts afresh and
    /// the text cut last is kept for Ctrl+Y.
    pub fn set(&mut self, text: &str) {
        self.replace(text.split('\n').map(str::to_string).collect());
        let _ = move_cursor(&mut self.area, CursorMove::Bottom);
        let _ = move_cursor(&mut self.area, CursorMove::End);
        self.sync_cursor();
    }

    /// The text, leaving the input empty (a fresh undo history; the text cut last is kept).
    pub(crate) fn take(&mut self) -> String {
        let text = self.text();
        self.replace(vec![String::new()]);
        text
    }

    fn replace(&mut self, lines: Vec<String>) {
        let yank = self.area.yank_text();
        *self = Self::from_lines(lines);
        self.area.set_yank_text(yank);
    }

    /// The whole text, lines joined with `\n` (a copy: for sending, not for every frame).
    pub fn text(&self) -> String {
        self.area.lines().join("\n")
    }

    /// The text's lines (split at `\n`; at least one).
    pub(crate) fn lines(&self) -> &[String] {
        self.area.lines()
    }

    /// The cursor: its line, and its byte offset in that line (on a character boundary).
    pub(crate) fn cursor(&self) -> (usize, usize) {
        self.cursor_at
    }

    fn sync_cursor(&mut self) {
        let (row, col) = self.area.cursor();
        let line = self.area.lines().get(row).map_or("", String::as_str);
        let at = if line.is_ascii() {
            col.min(line.len())
        } else {
            line.char_indices().nth(col).map_or(line.len(), |(i, _)| i)
        };
        self.cursor_at = (row, at);
    }

    /// Whether the cursor is on the first line (Up leaves the text) or the last (Down does).
    pub(crate) fn on_first_line(&self) -> bool {
        self.area.cursor().0 == 0
    }

    pub(crate) fn on_last_line(&self) -> bool {
        self.area.cursor().0 + 1 >= self.area.lines().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.area.is_empty()
    }

    /// The text's length in bytes (as `text().len()`, without the copy).
    pub(crate) fn len_bytes(&self) -> usize {
        let lines = self.area.lines();
        lines.iter().map(String::len).sum::<usize>() + lines.len().saturating_sub(1)
    }

    /// Changes whenever the text may have changed (cursor moves leave it alone).
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }
}

fn next_revision() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Moves the cursor; never an edit (the text is unchanged).
fn move_cursor(area: &mut TextArea<'static>, to: CursorMove) -> bool {
    area.move_cursor(to);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An input holding `text` with the cursor at the `|` in it.
    fn input(marked: &str) -> Input {
        let (before, after) = marked.split_once('|').unwrap_or((marked, ""));
        let mut i = Input::default();
        i.set(&format!("{before}{after}"));
        i.area.move_cursor(CursorMove::Top);
        i.area.move_cursor(CursorMove::Head);
        for _ in 0..before.chars().count() {
            i.area.move_cursor(CursorMove::Forward);
        }
        i.sync_cursor();
        i
    }

    /// The text with `|` where the cursor is.
    fn shown(i: &Input) -> String {
        let (row, at) = i.cursor();
        let mut lines: Vec<String> = i.lines().to_vec();
        lines[row].insert(at, '|');
        lines.join("\n")
    }

    fn after(marked: &str, edits: &[Edit]) -> String {
        let mut i = input(marked);
        for e in edits {
            i.apply(*e);
        }
        shown(&i)
    }

    use Edit as E;

    #[test]
    fn typing_and_newlines() {
        assert_eq!(after("|", &[E::Char('h'), E::Char('é')]), "hé|");
        assert_eq!(after("ab|cd", &[E::Newline]), "ab\n|cd");
        assert_eq!(after("ab|", &[E::Char('\n'), E::Char('日')]), "ab\n日|");
    }

    #[test]
    fn backspace_and_delete_are_char_safe_and_join_lines() {
        assert_eq!(after("hé|llo", &[E::Backspace]), "h|llo");
        assert_eq!(after("ab\n|cd", &[E::Backspace]), "ab|cd");
        assert_eq!(after("|", &[E::Backspace]), "|");
        assert_eq!(after("h|éllo", &[E::Delete]), "h|llo");
        assert_eq!(after("ab|\ncd", &[E::Delete]), "ab|cd");
        assert_eq!(after("ab|", &[E::Delete]), "ab|");
    }

    #[test]
    fn char_moves_cross_lines() {
        assert_eq!(after("a日|b", &[E::Left]), "a|日b");
        assert_eq!(after("ab\n|cd", &[E::Left]), "ab|\ncd");
        assert_eq!(after("|ab", &[E::Left]), "|ab");
        assert_eq!(after("a|日b", &[E::Right]), "a日|b");
        assert_eq!(after("ab|\ncd", &[E::Right]), "ab\n|cd");
        assert_eq!(after("ab|", &[E::Right]), "ab|");
    }

    #[test]
    fn up_and_down_keep_the_column_within_the_line_lengths() {
        assert_eq!(after("abc\nde|f", &[E::Up]), "ab|c\ndef");
        assert_eq!(after("abc\nd\nef|gh", &[E::Up]), "abc\nd|\nefgh");
        assert_eq!(after("a|bc\ndef", &[E::Down]), "abc\nd|ef");
        assert_eq!(after("a|bc", &[E::Up]), "a|bc");
        assert_eq!(after("a|bc", &[E::Down]), "a|bc");
    }

    #[test]
    fn line_start_and_end_stay_on_the_cursors_line() {
        assert_eq!(after("ab\ncd|ef\ngh", &[E::LineStart]), "ab\n|cdef\ngh");
        assert_eq!(after("ab\ncd|ef\ngh", &[E::LineEnd]), "ab\ncdef|\ngh");
    }

    #[test]
    fn word_moves() {
        assert_eq!(after("one two|", &[E::WordLeft]), "one |two");
        assert_eq!(after("one two|", &[E::WordLeft, E::WordLeft]), "|one two");
        assert_eq!(after("one\n|two", &[E::WordLeft]), "one|\ntwo");
        assert_eq!(after("|one two", &[E::WordRight]), "one |two");
        assert_eq!(after("one |two", &[E::WordRight]), "one two|");
        assert_eq!(after("a|b\ncd", &[E::WordRight]), "ab\n|cd");
    }

    #[test]
    fn kills_cut_and_yank_puts_back() {
        assert_eq!(after("hello |world", &[E::KillToLineEnd]), "hello |");
        assert_eq!(
            after("hello |world", &[E::KillToLineEnd, E::LineStart, E::Yank]),
            "world|hello "
        );
        assert_eq!(after("ab|\ncd", &[E::KillToLineEnd]), "ab|cd");
        assert_eq!(after("hello |world", &[E::KillToLineStart]), "|world");
        assert_eq!(
            after("hello |world", &[E::KillToLineStart, E::LineEnd, E::Yank]),
            "worldhello |"
        );
        assert_eq!(after("ab\n|cd", &[E::KillToLineStart]), "ab|cd");
        assert_eq!(after("say hello|", &[E::KillWordBack]), "say |");
        assert_eq!(after("say hello |", &[E::KillWordBack]), "say |");
        assert_eq!(
            after("say hello|", &[E::KillWordBack, E::LineStart, E::Yank]),
            "hello|say "
        );
        assert_eq!(after("|say hello", &[E::KillWordForward]), "| hello");
        assert_eq!(
            after("|say hello", &[E::KillWordForward, E::LineEnd, E::Yank]),
            " hellosay|"
        );
        assert_eq!(after("|", &[E::Yank]), "|", "nothing cut yet");
    }

    #[test]
    fn undo_and_redo() {
        assert_eq!(after("ab|", &[E::Char('c'), E::Undo]), "ab|");
        assert_eq!(after("ab|", &[E::Char('c'), E::Undo, E::Redo]), "abc|");
        assert_eq!(
            after("say hello|", &[E::KillWordBack, E::Undo]),
            "say hello|"
        );
        assert_eq!(after("ab|", &[E::Undo]), "ab|", "a set text is not undone");
        let mut i = input("|");
        i.insert_str("a\nlong\npaste");
        i.apply(E::Undo);
        assert!(i.is_empty(), "a paste is one step");
        i.apply(E::Redo);
        assert_eq!(i.text(), "a\nlong\npaste");
    }

    #[test]
    fn set_take_and_the_yank_survive_a_sent_message() {
        let mut i = input("keep this| and send");
        i.apply(E::KillToLineEnd);
        assert_eq!(i.take(), "keep this");
        assert!(i.is_empty());
        i.apply(E::Undo);
        assert!(i.is_empty(), "undo does not bring a sent message back");
        i.apply(E::Yank);
        assert_eq!(shown(&i), " and send|");
        i.set("a\nbc");
        assert_eq!(shown(&i), "a\nbc|");
        assert_eq!(i.len_bytes(), 4);
    }

    #[test]
    fn the_revision_changes_with_the_text_only() {
        let mut i = input("ab|c");
        let r = i.revision();
        i.apply(E::Left);
        i.apply(E::WordRight);
        assert_eq!(i.revision(), r, "moves are not changes");
        i.apply(E::Backspace);
        assert_ne!(i.revision(), r);
        let r = i.revision();
        i.take();
        assert_ne!(i.revision(), r);
    }

    #[test]
    fn the_kept_cursor_is_the_editors_after_every_edit() {
        let all = [
            E::Char('x'),
            E::Char('日'),
            E::Newline,
            E::Backspace,
            E::Delete,
            E::Left,
            E::Right,
            E::Up,
            E::Down,
            E::LineStart,
            E::LineEnd,
            E::WordLeft,
            E::WordRight,
            E::KillToLineEnd,
            E::KillToLineStart,
            E::KillWordBack,
            E::KillWordForward,
            E::Yank,
            E::Undo,
            E::Redo,
        ];
        let mut i = input("héllo wörld\nsecond| line\nthird");
        // A fixed pseudo-random walk over every edit.
        let mut state = 7u32;
        for _ in 0..2000 {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            i.apply(all[(state >> 16) as usize % all.len()]);
            let (row, col) = i.area.cursor();
            let line = &i.lines()[row];
            let at = line.char_indices().nth(col).map_or(line.len(), |(b, _)| b);
            assert_eq!(i.cursor(), (row, at), "{:?}", i.lines());
        }
    }
}
