//! The key table: which key does what in which view. `(mode, key) -> Action`, pure.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::picker::PickerKey;
use super::Mode;

/// The function keys the chat answers to, with the view each opens (the help lists each).
#[cfg(test)]
pub(crate) const FUNCTION_KEYS: &[(u8, Mode)] =
    &[(1, Mode::Help), (2, Mode::Bench), (3, Mode::Compare)];

/// Lines one PgUp/PgDn moves.
pub(crate) const PAGE_LINES: usize = 10;

/// What the user asked for, after the key table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Send,
    Newline,
    Stop,
    Regenerate,
    RecallOrUp,
    Down,
    NewConversation,
    /// Ctrl+L: repaint the whole screen.
    Repaint,
    /// Copy the last answer to the clipboard.
    Copy,
    ToggleHelp,
    CloseHelp,
    Quit,
    OpenBench,
    RunBench,
    CloseBench,
    CloseAb,
    OpenCompare,
    ReloadCompare,
    CloseCompare,
    PageUp,
    PageDown,
    ScrollTop,
    ScrollBottom,
    Backspace,
    Delete,
    Left,
    Right,
    LineStart,
    LineEnd,
    Char(char),
    /// Ctrl+O: the model picker.
    OpenPicker,
    /// A key in the model picker.
    Picker(PickerKey),
    /// Tab: complete the path after `/model ` or `/ab ` (elsewhere a space, as before).
    Complete,
}

/// The key table: `(mode, key) → action`. Press events only (no repeats or releases).
pub(crate) fn action_for(mode: Mode, input_empty: bool, key: KeyEvent) -> Option<Action> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    match (mode, key.code) {
        (_, KeyCode::Char('c') | KeyCode::Char('q')) if ctrl => Some(Action::Quit),
        (_, KeyCode::Char('l')) if ctrl => Some(Action::Repaint),
        (Mode::Help, KeyCode::Esc | KeyCode::F(1) | KeyCode::Char('?') | KeyCode::Char('q')) => {
            Some(Action::CloseHelp)
        }
        (Mode::Help, KeyCode::PageUp | KeyCode::Up) => Some(Action::PageUp),
        (Mode::Help, KeyCode::PageDown | KeyCode::Down) => Some(Action::PageDown),
        (Mode::Help, _) => None,
        (Mode::Bench, KeyCode::Esc | KeyCode::F(2) | KeyCode::Char('q')) => {
            Some(Action::CloseBench)
        }
        (Mode::Bench, KeyCode::Enter | KeyCode::Char('r')) => Some(Action::RunBench),
        (Mode::Bench, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Bench, _) => None,
        (Mode::Ab, KeyCode::Esc | KeyCode::Char('q')) => Some(Action::CloseAb),
        (Mode::Ab, KeyCode::PageUp | KeyCode::Up) => Some(Action::PageUp),
        (Mode::Ab, KeyCode::PageDown | KeyCode::Down) => Some(Action::PageDown),
        (Mode::Ab, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Ab, _) => None,
        (Mode::Compare, KeyCode::Esc | KeyCode::F(3) | KeyCode::Char('q')) => {
            Some(Action::CloseCompare)
        }
        (Mode::Compare, KeyCode::Char('r')) => Some(Action::ReloadCompare),
        (Mode::Compare, KeyCode::F(1) | KeyCode::Char('?')) => Some(Action::ToggleHelp),
        (Mode::Compare, _) => None,
        (Mode::Picker, KeyCode::Esc) => Some(Action::Picker(PickerKey::Close)),
        (Mode::Picker, KeyCode::Enter) => Some(Action::Picker(PickerKey::Pick)),
        (Mode::Picker, KeyCode::Up) => Some(Action::Picker(PickerKey::Up)),
        (Mode::Picker, KeyCode::Down) => Some(Action::Picker(PickerKey::Down)),
        (Mode::Picker, KeyCode::PageUp) => Some(Action::Picker(PickerKey::PageUp)),
        (Mode::Picker, KeyCode::PageDown) => Some(Action::Picker(PickerKey::PageDown)),
        (Mode::Picker, KeyCode::Backspace) => Some(Action::Picker(PickerKey::Backspace)),
        (Mode::Picker, KeyCode::Char('a') | KeyCode::Char('A')) if ctrl || alt => {
            Some(Action::Picker(PickerKey::Ab))
        }
        (Mode::Picker, KeyCode::F(1)) => Some(Action::ToggleHelp),
        (Mode::Picker, KeyCode::Char(c)) if !ctrl && !alt => {
            Some(Action::Picker(PickerKey::Char(c)))
        }
        (Mode::Picker, _) => None,
        (Mode::Chat, KeyCode::Char('o')) if ctrl => Some(Action::OpenPicker),
        (Mode::Chat, KeyCode::F(2)) => Some(Action::OpenBench),
        (Mode::Chat, KeyCode::F(3)) => Some(Action::OpenCompare),
        (Mode::Chat, KeyCode::F(1)) => Some(Action::ToggleHelp),
        (Mode::Chat, KeyCode::Char('?')) if input_empty => Some(Action::ToggleHelp),
        (Mode::Chat, KeyCode::Enter) if alt || shift => Some(Action::Newline),
        (Mode::Chat, KeyCode::Char('j')) if ctrl => Some(Action::Newline),
        (Mode::Chat, KeyCode::Enter) => Some(Action::Send),
        (Mode::Chat, KeyCode::Esc) => Some(Action::Stop),
        (Mode::Chat, KeyCode::Char('r')) if ctrl => Some(Action::Regenerate),
        (Mode::Chat, KeyCode::Char('n')) if ctrl => Some(Action::NewConversation),
        (Mode::Chat, KeyCode::Up) => Some(Action::RecallOrUp),
        (Mode::Chat, KeyCode::Down) => Some(Action::Down),
        (Mode::Chat, KeyCode::PageUp) => Some(Action::PageUp),
        (Mode::Chat, KeyCode::PageDown) => Some(Action::PageDown),
        (Mode::Chat, KeyCode::Home) if ctrl || input_empty => Some(Action::ScrollTop),
        (Mode::Chat, KeyCode::End) if ctrl || input_empty => Some(Action::ScrollBottom),
        (Mode::Chat, KeyCode::Home) => Some(Action::LineStart),
        (Mode::Chat, KeyCode::End) => Some(Action::LineEnd),
        (Mode::Chat, KeyCode::Backspace) => Some(Action::Backspace),
        (Mode::Chat, KeyCode::Delete) => Some(Action::Delete),
        (Mode::Chat, KeyCode::Left) => Some(Action::Left),
        (Mode::Chat, KeyCode::Right) => Some(Action::Right),
        (Mode::Chat, KeyCode::Char('c')) if alt => Some(Action::Copy),
        (Mode::Chat, KeyCode::Char(c)) if !ctrl && !alt => Some(Action::Char(c)),
        (Mode::Chat, KeyCode::Tab) => Some(Action::Complete),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Msg};

    #[test]
    fn key_table() {
        use Action as A;
        let chat = |k, empty| action_for(Mode::Chat, empty, k);
        assert_eq!(chat(key(KeyCode::Enter), false), Some(A::Send));
        assert_eq!(
            chat(with(KeyCode::Enter, KeyModifiers::ALT), false),
            Some(A::Newline)
        );
        assert_eq!(
            chat(with(KeyCode::Enter, KeyModifiers::SHIFT), false),
            Some(A::Newline)
        );
        assert_eq!(
            chat(with(KeyCode::Char('j'), KeyModifiers::CONTROL), false),
            Some(A::Newline)
        );
        assert_eq!(chat(key(KeyCode::Esc), true), Some(A::Stop));
        assert_eq!(
            chat(with(KeyCode::Char('r'), KeyModifiers::CONTROL), true),
            Some(A::Regenerate)
        );
        assert_eq!(
            chat(with(KeyCode::Char('n'), KeyModifiers::CONTROL), true),
            Some(A::NewConversation)
        );
        assert_eq!(
            chat(with(KeyCode::Char('c'), KeyModifiers::CONTROL), false),
            Some(A::Quit)
        );
        assert_eq!(
            chat(with(KeyCode::Char('q'), KeyModifiers::CONTROL), false),
            Some(A::Quit)
        );
        assert_eq!(chat(key(KeyCode::F(1)), false), Some(A::ToggleHelp));
        assert_eq!(chat(key(KeyCode::Char('?')), true), Some(A::ToggleHelp));
        assert_eq!(chat(key(KeyCode::Char('?')), false), Some(A::Char('?')));
        assert_eq!(chat(key(KeyCode::Up), true), Some(A::RecallOrUp));
        assert_eq!(chat(key(KeyCode::PageUp), false), Some(A::PageUp));
        assert_eq!(chat(key(KeyCode::Home), true), Some(A::ScrollTop));
        assert_eq!(chat(key(KeyCode::Home), false), Some(A::LineStart));
        assert_eq!(chat(key(KeyCode::End), true), Some(A::ScrollBottom));
        assert_eq!(chat(key(KeyCode::Char('é')), false), Some(A::Char('é')));
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::Esc)),
            Some(A::CloseHelp)
        );
        assert_eq!(action_for(Mode::Help, true, key(KeyCode::Char('x'))), None);
        assert_eq!(chat(key(KeyCode::F(3)), true), Some(A::OpenCompare));
        for (n, mode) in FUNCTION_KEYS {
            let mut app = ready_app();
            update(&mut app, Msg::Key(key(KeyCode::F(*n))), now());
            assert_eq!(app.mode, *mode, "F{n}");
        }
        assert_eq!(chat(key(KeyCode::F(2)), true), Some(A::OpenBench));
        let compare = |k| action_for(Mode::Compare, true, k);
        assert_eq!(compare(key(KeyCode::Esc)), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::F(3))), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::Char('r'))), Some(A::ReloadCompare));
        assert_eq!(compare(key(KeyCode::F(1))), Some(A::ToggleHelp));
        assert_eq!(compare(key(KeyCode::Char('x'))), None);
        let ab = |k| action_for(Mode::Ab, true, k);
        assert_eq!(ab(key(KeyCode::Esc)), Some(A::CloseAb));
        assert_eq!(ab(key(KeyCode::Char('q'))), Some(A::CloseAb));
        assert_eq!(ab(key(KeyCode::PageDown)), Some(A::PageDown));
        assert_eq!(ab(key(KeyCode::Up)), Some(A::PageUp));
        assert_eq!(ab(key(KeyCode::Char('?'))), Some(A::ToggleHelp));
        assert_eq!(ab(key(KeyCode::Enter)), None);
        assert_eq!(
            ab(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(A::Quit)
        );
        let mut release = key(KeyCode::Enter);
        release.kind = KeyEventKind::Release;
        assert_eq!(chat(release, false), None, "only presses count");
    }
}
