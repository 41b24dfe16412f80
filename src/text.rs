//! Text on its way to a terminal: the one function that neutralises control characters.
//!
//! Model output, model and file names, conversation files and results logs come from other
//! people. Written raw, a control sequence in them can set the clipboard (OSC 52), retitle or
//! clear the terminal, move the cursor or hide text. Everything tokscope writes to a terminal
//! outside the chat screen passes through [`terminal_safe`] (the chat screen shows control
//! characters as symbols in its own renderer). Exports and logs keep the text itself.

use std::borrow::Cow;
use std::io::IsTerminal;

/// Whether `c` must not reach a terminal as it is: C0 controls other than newline and tab,
/// DEL, C1 controls, and the bidirectional overrides that reorder what is shown.
pub(crate) fn is_unsafe(c: char) -> bool {
    matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The visible stand-in for an unsafe character: the Unicode control picture for C0 and DEL
/// (`␛` for ESC, `␍` for CR), the replacement character for the rest. The chat screen uses
/// it too (`ui::text::clean`), so one rule holds on every path.
pub(crate) fn visible(c: char) -> char {
    match c {
        '\0'..='\u{1f}' => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
        '\u{7f}' => '\u{2421}',
        _ => '\u{fffd}',
    }
}

/// `text` with every control character made visible and harmless (escape sequences become
/// plain text such as `␛]52;c;…␇`); newlines and tabs are kept. Borrowed when nothing changes.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| if is_unsafe(c) { visible(c) } else { c })
            .collect(),
    )
}

/// [`terminal_safe`] for a one-line field (a file or model name in a table): newlines and tabs
/// are neutralised too, so a name cannot break the table's layout.
pub(crate) fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) || c == '\n' || c == '\t') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if is_unsafe(c) || c == '\n' || c == '\t' {
                    visible(c)
                } else {
                    c
                }
            })
            .collect(),
    )
}

/// `text` on one line: whitespace runs and the characters that may not reach a terminal
/// ([`is_unsafe`]) become single spaces, so a title cannot break a table row, send escape
/// sequences or reorder a listing.
pub(crate) fn collapse_spaces(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || is_unsafe(c))
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` in at most `max_chars` characters, ending in `…` when cut (columns, not characters,
/// are `ui::text::truncate`'s job).
pub(crate) fn ellipsis(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `text` in at most `max_chars` characters, its middle cut to `…` when too long: the start
/// and the end of a file name tell candidates apart (`SmolLM2-1…-Q4_K_M ← Q4_1`).
pub(crate) fn ellipsis_middle(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    if n <= max_chars || max_chars < 3 {
        return ellipsis(text, max_chars);
    }
    let head = (max_chars - 1) * 2 / 5;
    let tail = max_chars - 1 - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// A path as a one-line, terminal-safe string.
pub(crate) fn path(p: &std::path::Path) -> String {
    one_line(&p.to_string_lossy()).into_owned()
}

/// `text` neutralised when `to_terminal`, as it is otherwise (a pipe or a file keeps the
/// bytes the model wrote).
pub(crate) fn for_output(text: &str, to_terminal: bool) -> Cow<'_, str> {
    if to_terminal {
        terminal_safe(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// What a piece of stdout is, for [`for_stdout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Tables, summaries, listings, Markdown: read by a person, wherever they go (`| tail`,
    /// `| less -R` and a file later shown by `cat` replay what they hold).
    Human,
    /// JSON: exact, with every unsafe character escaped (`\u001b`, `\u009b`, `\u202e`).
    Json,
    /// CSV: read by programs; exact into a pipe or file, neutralised on a terminal.
    Csv,
}

/// `text` as it may be written to stdout in `shape`: human-readable output is neutralised
/// whatever stdout is; JSON keeps the exact text with the unsafe characters escaped.
pub(crate) fn for_stdout(text: &str, shape: Shape) -> Cow<'_, str> {
    match shape {
        Shape::Human => terminal_safe(text),
        Shape::Json => json_safe(text),
        Shape::Csv => for_output(text, stdout_is_terminal()),
    }
}

/// JSON text with every unsafe character written as a `\uXXXX` escape. serde_json escapes C0
/// controls already but writes DEL, C1 controls and the bidirectional overrides as they are;
/// such characters can stand only inside JSON strings, where the escape means the same
/// character, so the value read back is exact.
pub(crate) fn json_safe(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether stdout is a terminal.
pub(crate) fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_sequence_is_made_visible() {
        for hostile in [
            "\x1b]52;c;cm0gLXJmIH4=\x07",
            "\x1b]0;pwned\x1b\\",
            "\x1b[2J\x1b[H",
            "\x1b[?1049h",
            "a\rb",
            "\u{9b}31m",
            "\u{9d}52;c;x\u{9c}",
            "\x7f\x08\x00",
            "abc\u{202e}cba",
        ] {
            let safe = terminal_safe(hostile);
            assert!(!safe.chars().any(is_unsafe), "{hostile:?} -> {safe:?}");
            assert!(
                !safe.contains('\x1b') && !safe.contains('\x07') && !safe.contains('\r'),
                "{safe:?}"
            );
        }
        assert_eq!(terminal_safe("\x1b]2;t\x07"), "␛]2;t␇");
    }

    #[test]
    fn ordinary_text_is_kept_and_borrowed() {
        let text = "Paris — é 日本 😀\n\tindented";
        assert!(matches!(terminal_safe(text), Cow::Borrowed(_)));
        assert_eq!(terminal_safe(text), text);
        assert_eq!(one_line("a\nb\tc"), "a␊b␉c");
        assert_eq!(for_output("\x1b", false), "\x1b");
        assert_eq!(for_output("\x1b", true), "␛");
    }

    #[test]
    fn any_input_comes_out_safe() {
        // Every code point below U+3000 in one string, in both functions.
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        assert!(!terminal_safe(&all).chars().any(is_unsafe));
        assert!(!one_line(&all)
            .chars()
            .any(|c| is_unsafe(c) || c == '\n' || c == '\t'));
        assert!(!for_stdout(&all, Shape::Human).chars().any(is_unsafe));
    }

    #[test]
    fn json_keeps_the_exact_text_with_unsafe_characters_escaped() {
        let hostile = "name\u{1b}]52;c;x\u{7}\u{9b}2J\u{7f}\u{202e}txt";
        let json = serde_json::to_string(&serde_json::json!({ "model": hostile })).unwrap();
        let safe = json_safe(&json);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        assert!(
            safe.contains("\\u009b") && safe.contains("\\u202e"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["model"], hostile);
        assert!(matches!(json_safe("{\"a\": \"é\"}"), Cow::Borrowed(_)));
    }
}
