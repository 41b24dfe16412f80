//! The key table: which key does what in which view. `(mode, key) -> Action`, pure.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::input::Edit;
use super::picker::PickerKey;
use super::{Mode, SweepView};

/// The function keys the chat answers to, with the view each opens (the help lists each).
#[cfg(test)]
pub(crate) const FUNCTION_KEYS: &[(u8, Mode)] = &[
    (1, Mode::Help),
    (2, Mode::Bench),
    (3, Mode::Compare),
    (4, Mode::Profile),
];

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
    /// Alt+K: colour answers' tokens (by KLD against the reference, else by their own
    /// confidence), or stop.
    QualityColours,
    /// Alt+R: unfold (or fold again) the thinking of the answers of a reasoning model.
    ToggleThinking,
    /// Alt+T: the token screen (each token's figures and both models' top tokens).
    OpenTokens,
    CloseTokens,
    /// Move the token cursor by this many tokens.
    TokenMove(isize),
    /// The token cursor to the answer's first or last token.
    TokenFirst,
    TokenLast,
    /// The token screen shows the previous (-1) or next (1) answer with token figures.
    TokenAnswer(isize),
    /// The token cursor to the first divergence from the reference.
    TokenDivergence,
    ToggleHelp,
    CloseHelp,
    Quit,
    OpenBench,
    RunBench,
    /// The bench screen's batching or depth sweep (`None`: the other one).
    BenchView(Option<SweepView>),
    StopBench,
    CloseBench,
    CloseAb,
    OpenCompare,
    ReloadCompare,
    CloseCompare,
    /// F4: where the decode steps' time goes.
    OpenProfile,
    CloseProfile,
    /// The comparison before (older) or after (newer) the one shown.
    CompareOlder,
    CompareNewer,
    /// Move the compare screen's selected row by this many.
    CompareRow(isize),
    /// The selected row's model: A/B against the last answer (`ab`), or switch to it.
    CompareUse {
        ab: bool,
    },
    PageUp,
    PageDown,
    /// One line up or down (the help screen's arrows).
    LineUp,
    LineDown,
    ScrollTop,
    ScrollBottom,
    /// A key of the input's editor (readline/emacs keys, undo and redo).
    Edit(Edit),
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
    Some(match (mode, key.code) {
        (_, KeyCode::Char('c' | 'q')) if ctrl => Action::Quit,
        (_, KeyCode::Char('l')) if ctrl => Action::Repaint,
        (Mode::Help, KeyCode::Esc | KeyCode::F(1) | KeyCode::Char('?' | 'q')) => Action::CloseHelp,
        (Mode::Help, KeyCode::PageUp) => Action::PageUp,
        (Mode::Help, KeyCode::PageDown | KeyCode::Char(' ')) => Action::PageDown,
        (Mode::Help, KeyCode::Up) => Action::LineUp,
        (Mode::Help, KeyCode::Down) => Action::LineDown,
        (Mode::Help, KeyCode::Home) => Action::ScrollTop,
        (Mode::Help, KeyCode::End) => Action::ScrollBottom,
        (Mode::Help, _) => return None,
        // Esc stops a running sweep and keeps the screen; on an idle screen it closes it.
        (Mode::Bench, KeyCode::Esc) => Action::StopBench,
        (Mode::Bench, KeyCode::F(2) | KeyCode::Char('q')) => Action::CloseBench,
        (Mode::Bench, KeyCode::Enter | KeyCode::Char('r')) => Action::RunBench,
        (Mode::Bench, KeyCode::Tab) => Action::BenchView(None),
        (Mode::Bench, KeyCode::Char('d')) => Action::BenchView(Some(SweepView::Depth)),
        (Mode::Bench, KeyCode::Char('b')) => Action::BenchView(Some(SweepView::Batch)),
        (Mode::Bench, KeyCode::F(1) | KeyCode::Char('?')) => Action::ToggleHelp,
        (Mode::Bench, _) => return None,
        (Mode::Ab, KeyCode::Esc | KeyCode::Char('q')) => Action::CloseAb,
        (Mode::Ab, KeyCode::PageUp | KeyCode::Up) => Action::PageUp,
        (Mode::Ab, KeyCode::PageDown | KeyCode::Down) => Action::PageDown,
        (Mode::Ab, KeyCode::F(1) | KeyCode::Char('?')) => Action::ToggleHelp,
        (Mode::Ab, KeyCode::Char('k')) if alt => Action::QualityColours,
        (Mode::Ab, _) => return None,
        (Mode::Compare, KeyCode::Esc | KeyCode::F(3) | KeyCode::Char('q')) => Action::CloseCompare,
        (Mode::Compare, KeyCode::Char('r')) => Action::ReloadCompare,
        (Mode::Compare, KeyCode::Left | KeyCode::Char('[')) => Action::CompareOlder,
        (Mode::Compare, KeyCode::Right | KeyCode::Char(']')) => Action::CompareNewer,
        (Mode::Compare, KeyCode::Up | KeyCode::Char('k')) => Action::CompareRow(-1),
        (Mode::Compare, KeyCode::Down | KeyCode::Char('j')) => Action::CompareRow(1),
        (Mode::Compare, KeyCode::Enter) => Action::CompareUse { ab: true },
        (Mode::Compare, KeyCode::Char('m')) => Action::CompareUse { ab: false },
        (Mode::Compare, KeyCode::F(1) | KeyCode::Char('?')) => Action::ToggleHelp,
        (Mode::Compare, _) => return None,
        (Mode::Profile, KeyCode::Esc | KeyCode::F(4) | KeyCode::Char('q')) => Action::CloseProfile,
        (Mode::Profile, KeyCode::F(1) | KeyCode::Char('?')) => Action::ToggleHelp,
        (Mode::Profile, _) => return None,
        (Mode::Tokens, KeyCode::Esc | KeyCode::Char('q')) => Action::CloseTokens,
        (Mode::Tokens, KeyCode::Char('t')) if alt => Action::CloseTokens,
        (Mode::Tokens, KeyCode::Left | KeyCode::Char('h')) => Action::TokenMove(-1),
        (Mode::Tokens, KeyCode::Right | KeyCode::Char('l')) => Action::TokenMove(1),
        (Mode::Tokens, KeyCode::Up | KeyCode::Char('k')) => Action::TokenMove(-10),
        (Mode::Tokens, KeyCode::Down | KeyCode::Char('j')) => Action::TokenMove(10),
        (Mode::Tokens, KeyCode::Home) => Action::TokenFirst,
        (Mode::Tokens, KeyCode::End) => Action::TokenLast,
        (Mode::Tokens, KeyCode::PageUp | KeyCode::Char('[')) => Action::TokenAnswer(-1),
        (Mode::Tokens, KeyCode::PageDown | KeyCode::Char(']')) => Action::TokenAnswer(1),
        (Mode::Tokens, KeyCode::Char('d')) => Action::TokenDivergence,
        (Mode::Tokens, KeyCode::F(1) | KeyCode::Char('?')) => Action::ToggleHelp,
        (Mode::Tokens, _) => return None,
        (Mode::Picker, KeyCode::Esc) => Action::Picker(PickerKey::Close),
        (Mode::Picker, KeyCode::Enter) => Action::Picker(PickerKey::Pick),
        (Mode::Picker, KeyCode::Up) => Action::Picker(PickerKey::Up),
        (Mode::Picker, KeyCode::Down) => Action::Picker(PickerKey::Down),
        (Mode::Picker, KeyCode::PageUp) => Action::Picker(PickerKey::PageUp),
        (Mode::Picker, KeyCode::PageDown) => Action::Picker(PickerKey::PageDown),
        (Mode::Picker, KeyCode::Backspace) => Action::Picker(PickerKey::Backspace),
        (Mode::Picker, KeyCode::Char('a' | 'A')) if ctrl || alt => Action::Picker(PickerKey::Ab),
        (Mode::Picker, KeyCode::F(1)) => Action::ToggleHelp,
        (Mode::Picker, KeyCode::Char(c)) if !ctrl && !alt => Action::Picker(PickerKey::Char(c)),
        (Mode::Picker, _) => return None,
        (Mode::Chat, KeyCode::Char('o')) if ctrl => Action::OpenPicker,
        (Mode::Chat, KeyCode::F(2)) => Action::OpenBench,
        (Mode::Chat, KeyCode::F(3)) => Action::OpenCompare,
        (Mode::Chat, KeyCode::F(4)) => Action::OpenProfile,
        (Mode::Chat, KeyCode::F(1)) => Action::ToggleHelp,
        (Mode::Chat, KeyCode::Char('?')) if input_empty => Action::ToggleHelp,
        (Mode::Chat, KeyCode::Enter) if alt || shift => Action::Newline,
        (Mode::Chat, KeyCode::Char('j')) if ctrl => Action::Newline,
        (Mode::Chat, KeyCode::Enter) => Action::Send,
        (Mode::Chat, KeyCode::Esc) => Action::Stop,
        (Mode::Chat, KeyCode::Char('r')) if ctrl => Action::Regenerate,
        (Mode::Chat, KeyCode::Char('n')) if ctrl => Action::NewConversation,
        (Mode::Chat, KeyCode::Up) => Action::RecallOrUp,
        (Mode::Chat, KeyCode::Down) => Action::Down,
        (Mode::Chat, KeyCode::PageUp) => Action::PageUp,
        (Mode::Chat, KeyCode::PageDown) => Action::PageDown,
        (Mode::Chat, KeyCode::Home) if ctrl || input_empty => Action::ScrollTop,
        (Mode::Chat, KeyCode::End) if ctrl || input_empty => Action::ScrollBottom,
        (Mode::Chat, KeyCode::Char('c')) if alt => Action::Copy,
        (Mode::Chat, KeyCode::Char('k')) if alt => Action::QualityColours,
        (Mode::Chat, KeyCode::Char('t')) if alt => Action::OpenTokens,
        (Mode::Chat, KeyCode::Char('r')) if alt => Action::ToggleThinking,
        (Mode::Chat, KeyCode::Tab) => Action::Complete,
        (Mode::Chat, code) => Action::Edit(edit_key(code, ctrl, alt, shift)?),
    })
}

/// The input's editing keys (readline/emacs), after the chat's own keys above have had theirs:
/// Ctrl+R stays regenerate (so redo is Alt+Z), Ctrl+N new conversation, Ctrl+L repaint, Ctrl+C
/// quit, Up/Down recall and scroll (within a message of several lines they move the cursor
/// first, in `App::on_action`).
fn edit_key(code: KeyCode, ctrl: bool, alt: bool, shift: bool) -> Option<Edit> {
    use Edit as E;
    Some(match code {
        KeyCode::Char('z' | 'Z') if ctrl && shift => E::Redo,
        KeyCode::Char('z') if ctrl => E::Undo,
        // Ctrl+_ (readline's undo; terminals send it, and Ctrl+/, as 0x1F).
        KeyCode::Char('7' | '_' | '/') if ctrl => E::Undo,
        KeyCode::Char('z') if alt => E::Redo,
        KeyCode::Char('a') if ctrl => E::LineStart,
        KeyCode::Char('e') if ctrl => E::LineEnd,
        KeyCode::Char('b') if ctrl => E::Left,
        KeyCode::Char('f') if ctrl => E::Right,
        KeyCode::Char('h') if ctrl => E::Backspace,
        KeyCode::Char('d') if ctrl => E::Delete,
        KeyCode::Char('k') if ctrl => E::KillToLineEnd,
        KeyCode::Char('u') if ctrl => E::KillToLineStart,
        KeyCode::Char('w') if ctrl => E::KillWordBack,
        KeyCode::Char('y') if ctrl => E::Yank,
        KeyCode::Char('b') if alt => E::WordLeft,
        KeyCode::Char('f') if alt => E::WordRight,
        KeyCode::Char('d') if alt => E::KillWordForward,
        KeyCode::Backspace if alt || ctrl => E::KillWordBack,
        KeyCode::Left if ctrl || alt => E::WordLeft,
        KeyCode::Right if ctrl || alt => E::WordRight,
        KeyCode::Home => E::LineStart,
        KeyCode::End => E::LineEnd,
        KeyCode::Backspace => E::Backspace,
        KeyCode::Delete => E::Delete,
        KeyCode::Left => E::Left,
        KeyCode::Right => E::Right,
        KeyCode::Char(c) if !ctrl && !alt => E::Char(c),
        _ => return None,
    })
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
        assert_eq!(
            chat(key(KeyCode::Char('?')), false),
            Some(A::Edit(Edit::Char('?')))
        );
        assert_eq!(chat(key(KeyCode::Up), true), Some(A::RecallOrUp));
        assert_eq!(chat(key(KeyCode::PageUp), false), Some(A::PageUp));
        assert_eq!(chat(key(KeyCode::Home), true), Some(A::ScrollTop));
        assert_eq!(
            chat(key(KeyCode::Home), false),
            Some(A::Edit(Edit::LineStart))
        );
        assert_eq!(chat(key(KeyCode::End), true), Some(A::ScrollBottom));
        assert_eq!(
            chat(key(KeyCode::Char('é')), false),
            Some(A::Edit(Edit::Char('é')))
        );
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::Esc)),
            Some(A::CloseHelp)
        );
        assert_eq!(action_for(Mode::Help, true, key(KeyCode::Char('x'))), None);
        // The help screen scrolls by line, by page, and jumps to either end.
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::Down)),
            Some(Action::LineDown)
        );
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::PageDown)),
            Some(Action::PageDown)
        );
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::End)),
            Some(Action::ScrollBottom)
        );
        assert_eq!(
            action_for(Mode::Help, true, key(KeyCode::Home)),
            Some(Action::ScrollTop)
        );
        assert_eq!(chat(key(KeyCode::F(3)), true), Some(A::OpenCompare));
        for (n, mode) in FUNCTION_KEYS {
            let mut app = ready_app();
            update(&mut app, Msg::Key(key(KeyCode::F(*n))), now());
            assert_eq!(app.mode, *mode, "F{n}");
        }
        assert_eq!(chat(key(KeyCode::F(2)), true), Some(A::OpenBench));
        let bench = |k| action_for(Mode::Bench, true, k);
        assert_eq!(bench(key(KeyCode::Tab)), Some(A::BenchView(None)));
        let depth = Some(SweepView::Depth);
        assert_eq!(bench(key(KeyCode::Char('d'))), Some(A::BenchView(depth)));
        let batch = Some(SweepView::Batch);
        assert_eq!(bench(key(KeyCode::Char('b'))), Some(A::BenchView(batch)));
        let compare = |k| action_for(Mode::Compare, true, k);
        assert_eq!(compare(key(KeyCode::Esc)), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::F(3))), Some(A::CloseCompare));
        assert_eq!(compare(key(KeyCode::Char('r'))), Some(A::ReloadCompare));
        assert_eq!(compare(key(KeyCode::Left)), Some(A::CompareOlder));
        assert_eq!(compare(key(KeyCode::Char(']'))), Some(A::CompareNewer));
        assert_eq!(compare(key(KeyCode::Down)), Some(A::CompareRow(1)));
        assert_eq!(
            compare(key(KeyCode::Enter)),
            Some(A::CompareUse { ab: true })
        );
        assert_eq!(
            compare(key(KeyCode::Char('m'))),
            Some(A::CompareUse { ab: false })
        );
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
            ab(with(KeyCode::Char('k'), KeyModifiers::ALT)),
            Some(A::QualityColours)
        );
        assert_eq!(
            ab(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(A::Quit)
        );
        // The chat's own keys win over readline's.
        for (c, action) in [
            ('r', A::Regenerate),
            ('n', A::NewConversation),
            ('l', A::Repaint),
            ('c', A::Quit),
            ('j', A::Newline),
        ] {
            assert_eq!(
                chat(with(KeyCode::Char(c), KeyModifiers::CONTROL), false),
                Some(action),
                "Ctrl+{c}"
            );
        }
        assert_eq!(
            chat(with(KeyCode::Char('c'), KeyModifiers::ALT), false),
            Some(A::Copy)
        );
        assert_eq!(
            chat(with(KeyCode::Char('k'), KeyModifiers::ALT), false),
            Some(A::QualityColours)
        );
        assert_eq!(
            chat(with(KeyCode::Char('t'), KeyModifiers::ALT), false),
            Some(A::OpenTokens)
        );
        assert_eq!(
            chat(with(KeyCode::Char('r'), KeyModifiers::ALT), false),
            Some(A::ToggleThinking)
        );
        let tokens = |k| action_for(Mode::Tokens, true, k);
        assert_eq!(tokens(key(KeyCode::Right)), Some(A::TokenMove(1)));
        assert_eq!(tokens(key(KeyCode::Char('h'))), Some(A::TokenMove(-1)));
        assert_eq!(tokens(key(KeyCode::PageUp)), Some(A::TokenAnswer(-1)));
        assert_eq!(tokens(key(KeyCode::Char('d'))), Some(A::TokenDivergence));
        assert_eq!(tokens(key(KeyCode::Esc)), Some(A::CloseTokens));
        assert_eq!(
            tokens(with(KeyCode::Char('t'), KeyModifiers::ALT)),
            Some(A::CloseTokens)
        );
        assert_eq!(tokens(key(KeyCode::Char('x'))), None, "no typing there");
        let mut release = key(KeyCode::Enter);
        release.kind = KeyEventKind::Release;
        assert_eq!(chat(release, false), None, "only presses count");
    }

    #[test]
    fn editing_keys() {
        use Edit as E;
        let ctrl = KeyModifiers::CONTROL;
        let alt = KeyModifiers::ALT;
        let cases = [
            (KeyCode::Char('a'), ctrl, E::LineStart),
            (KeyCode::Char('e'), ctrl, E::LineEnd),
            (KeyCode::Char('b'), ctrl, E::Left),
            (KeyCode::Char('f'), ctrl, E::Right),
            (KeyCode::Char('h'), ctrl, E::Backspace),
            (KeyCode::Char('d'), ctrl, E::Delete),
            (KeyCode::Char('k'), ctrl, E::KillToLineEnd),
            (KeyCode::Char('u'), ctrl, E::KillToLineStart),
            (KeyCode::Char('w'), ctrl, E::KillWordBack),
            (KeyCode::Char('y'), ctrl, E::Yank),
            (KeyCode::Char('z'), ctrl, E::Undo),
            (KeyCode::Char('7'), ctrl, E::Undo),
            (KeyCode::Char('z'), ctrl | KeyModifiers::SHIFT, E::Redo),
            (KeyCode::Char('z'), alt, E::Redo),
            (KeyCode::Char('b'), alt, E::WordLeft),
            (KeyCode::Char('f'), alt, E::WordRight),
            (KeyCode::Char('d'), alt, E::KillWordForward),
            (KeyCode::Backspace, alt, E::KillWordBack),
            (KeyCode::Left, ctrl, E::WordLeft),
            (KeyCode::Right, ctrl, E::WordRight),
            (KeyCode::Home, KeyModifiers::NONE, E::LineStart),
            (KeyCode::End, KeyModifiers::NONE, E::LineEnd),
            (KeyCode::Backspace, KeyModifiers::NONE, E::Backspace),
            (KeyCode::Delete, KeyModifiers::NONE, E::Delete),
            (KeyCode::Left, KeyModifiers::NONE, E::Left),
            (KeyCode::Right, KeyModifiers::NONE, E::Right),
            (KeyCode::Char('x'), KeyModifiers::NONE, E::Char('x')),
            (KeyCode::Char('X'), KeyModifiers::SHIFT, E::Char('X')),
        ];
        // Tab completes after `/model ` and `/ab ` (a space elsewhere, in `App::on_action`).
        assert_eq!(
            action_for(Mode::Chat, false, with(KeyCode::Tab, KeyModifiers::NONE)),
            Some(Action::Complete)
        );
        for (code, mods, edit) in cases {
            assert_eq!(
                action_for(Mode::Chat, false, with(code, mods)),
                Some(Action::Edit(edit)),
                "{mods:?} {code:?}"
            );
            for mode in [Mode::Help, Mode::Bench, Mode::Compare, Mode::Ab] {
                assert!(
                    !matches!(
                        action_for(mode, false, with(code, mods)),
                        Some(Action::Edit(_))
                    ),
                    "{mode:?}: {mods:?} {code:?} edits nothing outside the chat"
                );
            }
        }
        assert_eq!(
            action_for(Mode::Chat, false, with(KeyCode::Char('x'), alt)),
            None,
            "an unbound Alt key types nothing"
        );
    }
}
