//! Text on its way to the terminal: control characters made harmless (model output and user
//! input may carry escape sequences, which must never reach the terminal raw), and wrapping of
//! styled text to a width with unicode-width aware word wrapping, so that every pane knows how
//! many rows its content takes.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// What a tab becomes on screen.
const TAB: &str = "    ";

/// The text as it may be drawn: newlines kept, tabs expanded to spaces, carriage returns
/// dropped, every other character [`crate::text::is_unsafe`] names (C0/C1 controls, DEL, the
/// bidirectional overrides) replaced by its visible stand-in (`␛` for ESC), so no escape
/// sequence reaches the terminal and nothing reorders what is shown.
pub(crate) fn clean(text: &str) -> String {
    let out = clean_chars(text);
    match terminal_widths() {
        Some(m) if !out.is_ascii() => fit_clusters(&out, m),
        _ => out,
    }
}

fn clean_chars(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push('\n'),
            '\t' => out.push_str(TAB),
            '\r' => {}
            // The one rule of what may not reach a terminal (crate::text), bidirectional
            // overrides included.
            c if crate::text::is_unsafe(c) => out.push(crate::text::visible(c)),
            c => out.push(c),
        }
    }
    out
}

/// How this terminal measures the grapheme clusters on which terminals disagree with
/// unicode-width (which ratatui lays the screen out by). Probed once at start by
/// `tui::terminal::probe_widths`; unset (tests on `TestBackend`, a terminal that did not
/// answer), the text is left as unicode-width measures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TermWidths {
    /// Spacing vowel signs that extend a cluster (Bengali া U+09BE, Tamil ா U+0BBE, …) take a
    /// column of their own (glibc's wcwidth, tmux, xterm); unicode-width gives them none.
    pub spacing_marks: bool,
    /// An emoji joined by U+200D to the one before it takes no more columns.
    pub zwj_joins: bool,
    /// U+FE0F makes a narrow symbol (❤, a digit) two columns wide.
    pub vs16_widens: bool,
    /// A skin-tone modifier (U+1F3FB–U+1F3FF) joins the emoji before it.
    pub modifier_joins: bool,
}

impl TermWidths {
    /// What unicode-width assumes: grapheme-aware.
    pub const UNICODE: TermWidths = TermWidths {
        spacing_marks: false,
        zwj_joins: true,
        vs16_widens: true,
        modifier_joins: true,
    };
}

static TERMINAL_WIDTHS: std::sync::OnceLock<TermWidths> = std::sync::OnceLock::new();

/// Sets the terminal's width rules, once, before the first frame.
pub fn set_terminal_widths(widths: TermWidths) {
    let _ = TERMINAL_WIDTHS.set(widths);
}

/// The probed rules, when they differ from unicode-width's.
fn terminal_widths() -> Option<&'static TermWidths> {
    TERMINAL_WIDTHS.get().filter(|w| **w != TermWidths::UNICODE)
}

/// Spacing marks that unicode-width counts as zero (they are Grapheme_Extend) and glibc's
/// wcwidth as one column.
fn is_spacing_extend(c: char) -> bool {
    const MARKS: [u32; 25] = [
        0x09BE, 0x09D7, 0x0B3E, 0x0B57, 0x0BBE, 0x0BD7, 0x0CC2, 0x0CD5, 0x0CD6, 0x0D3E, 0x0D57,
        0x0DCF, 0x0DDF, 0x1B35, 0x302E, 0x302F, 0xFF9E, 0xFF9F, 0x1133E, 0x11357, 0x114B0, 0x114BD,
        0x115AF, 0x11930, 0x1D165,
    ];
    MARKS.contains(&(c as u32)) || ('\u{1D16E}'..='\u{1D172}').contains(&c)
}

/// Columns a terminal with the rules `m` advances for the grapheme cluster `g`: the sum of
/// its code points' widths, with the joins `m` says the terminal makes.
pub fn cluster_width(g: &str, m: &TermWidths) -> usize {
    let mut total = 0;
    let mut prev: Option<char> = None;
    for c in g.chars() {
        let w = match c {
            _ if prev == Some('\u{200D}') && m.zwj_joins => 0,
            '\u{1F3FB}'..='\u{1F3FF}' if m.modifier_joins && prev.is_some() => 0,
            '\u{FE0F}' if m.vs16_widens && prev.is_some_and(|p| char_width(p) == 1) => 1,
            c if is_spacing_extend(c) => usize::from(m.spacing_marks),
            c => char_width(c),
        };
        total += w;
        prev = Some(c);
    }
    total
}

/// The filler after a cluster the terminal draws wider than ratatui counts it: a private-use
/// character (one column to ratatui) that `fit_buffer` turns into a cell the terminal's wide
/// cluster already covers, so that the layout and the terminal agree column for column.
pub(crate) const FILLER: char = '\u{E000}';

/// Each grapheme cluster as this terminal will draw it: followed by fillers when the terminal
/// draws it wider than unicode-width says, without its U+FE0F when the terminal draws it
/// narrower (so a "❤️" it shows in one column takes one column here too).
fn fit_clusters(text: &str, m: &TermWidths) -> String {
    use unicode_segmentation::UnicodeSegmentation;
    let mut out = String::with_capacity(text.len() + 8);
    for g in text.graphemes(true) {
        if g.is_ascii() || g == "\n" {
            out.push_str(g);
            continue;
        }
        let ours = UnicodeWidthStr::width(g);
        let theirs = cluster_width(g, m);
        if theirs > ours {
            out.push_str(g);
            out.extend(std::iter::repeat_n(FILLER, theirs - ours));
        } else if theirs < ours && g.contains('\u{FE0F}') {
            out.extend(g.chars().filter(|c| *c != '\u{FE0F}'));
        } else {
            out.push_str(g);
        }
    }
    out
}

/// After a frame is drawn into `buf`, two repairs between ratatui's layout and the terminal:
///
/// - The cells after a cluster of three or more columns (Devanagari त्रि, Bengali ত্রি) become
///   skipped cells. ratatui 0.29's diff skips only the one cell after a wide symbol, so it
///   wrote a blank over the third column of such a cluster, and the terminal lost its vowel
///   sign (क्षत्रिय showed as "क्षत्र य").
/// - With probed rules (`TermWidths`), each filler cell right after a cluster the terminal draws
///   wider becomes a skipped cell (never written: the cluster covers it), and a filler that
///   wrapping separated from its cluster becomes a space.
pub(crate) fn fit_buffer(buf: &mut ratatui::buffer::Buffer) {
    fit_buffer_with(buf, terminal_widths());
}

fn fit_buffer_with(buf: &mut ratatui::buffer::Buffer, rules: Option<&TermWidths>) {
    let area = buf.area;
    let filler = FILLER.to_string();
    for y in area.top()..area.bottom() {
        // Columns the last drawn cluster covers beyond the cells ratatui gave it.
        let mut overflow = 0usize;
        let mut x = area.left();
        while x < area.right() {
            let Some(cell) = buf.cell_mut((x, y)) else {
                break;
            };
            let symbol = cell.symbol();
            if symbol.is_ascii() {
                overflow = 0;
                x += 1;
                continue;
            }
            if symbol == filler {
                if overflow > 0 {
                    overflow -= 1;
                    cell.set_skip(true);
                } else {
                    cell.set_symbol(" ");
                }
                x += 1;
                continue;
            }
            // A wide cluster's own cells (ratatui blanks those after its first) are its.
            let cells = UnicodeWidthStr::width(symbol).max(1);
            overflow = rules.map_or(0, |m| cluster_width(symbol, m).saturating_sub(cells));
            if cells >= 3 {
                for dx in 1..cells {
                    if let Some(hidden) = buf.cell_mut((x.saturating_add(dx as u16), y)) {
                        hidden.set_skip(true);
                    }
                }
            }
            x = x.saturating_add(cells as u16);
        }
    }
}

/// Columns that `clean` of the one character `c` takes, without making the string.
pub(crate) fn shown_width(c: char) -> usize {
    match c {
        ' '..='~' => 1,
        '\r' => 0,
        '\t' => TAB.len(),
        // A control picture, the delete symbol, or the replacement character.
        c if (c as u32) < 0x20 || crate::text::is_unsafe(c) => 1,
        c => char_width(c),
    }
}

/// `clean`, on one line (newlines become spaces).
pub(crate) fn one_line(text: &str) -> String {
    clean(text).replace('\n', " ")
}

/// Columns a string takes on screen.
pub(crate) fn width(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

fn char_width(c: char) -> usize {
    UnicodeWidthChar::width(c).unwrap_or(0)
}

/// `s` cut to at most `max` columns from the start, beginning with `…` when cut: for names
/// whose end tells them apart (`…q4_k_m-Q8_0 ← Q4_K_M`).
pub(crate) fn truncate_start(s: &str, max: usize) -> String {
    match max {
        _ if width(s) <= max => s.to_string(),
        0 => String::new(),
        _ => {
            let kept = take_columns(s.chars().rev(), max - 1);
            std::iter::once('…').chain(kept.into_iter().rev()).collect()
        }
    }
}

/// `s` cut to at most `max` columns, ending in `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    match max {
        _ if width(s) <= max => s.to_string(),
        0 => String::new(),
        _ => take_columns(s.chars(), max - 1)
            .into_iter()
            .chain(['…'])
            .collect(),
    }
}

/// The first `chars` that fit in `max` columns.
fn take_columns(chars: impl Iterator<Item = char>, max: usize) -> Vec<char> {
    let mut used = 0;
    chars
        .take_while(|&c| {
            used += char_width(c);
            used <= max
        })
        .collect()
}

/// Columns taken by a line's spans.
pub(crate) fn line_width(line: &Line<'_>) -> usize {
    spans_width(&line.spans)
}

fn spans_width(spans: &[Span<'_>]) -> usize {
    spans.iter().map(|s| width(&s.content)).sum()
}

type Run = Vec<(char, Style)>;

/// Merge adjacent characters of the same style into spans.
fn to_spans(run: &[(char, Style)]) -> Vec<Span<'static>> {
    run.chunk_by(|a, b| a.1 == b.1)
        .map(|chunk| Span::styled(chunk.iter().map(|(c, _)| c).collect::<String>(), chunk[0].1))
        .collect()
}

fn run_width(run: &[(char, Style)]) -> usize {
    let s: String = run.iter().map(|(c, _)| *c).collect();
    width(&s)
}

enum Token {
    Word(Run),
    Space(Run),
    Newline,
}

fn tokens(spans: &[Span<'static>]) -> Vec<Token> {
    let chars: Run = spans
        .iter()
        .flat_map(|span| {
            clean(&span.content)
                .chars()
                .map(|c| (c, span.style))
                .collect::<Run>()
        })
        .collect();
    // Each newline alone; between them, runs of spaces and runs of anything else.
    let same = |a: &(char, Style), b: &(char, Style)| {
        a.0 != '\n' && b.0 != '\n' && (a.0 == ' ') == (b.0 == ' ')
    };
    chars
        .chunk_by(same)
        .map(|run| match run[0].0 {
            '\n' => Token::Newline,
            ' ' => Token::Space(run.to_vec()),
            _ => Token::Word(run.to_vec()),
        })
        .collect()
}

/// Builds wrapped lines, adding the first-line prefix to the first and the continuation
/// prefix to every other.
struct Lines<'a> {
    out: Vec<Line<'static>>,
    first_prefix: &'a [Span<'static>],
    rest_prefix: &'a [Span<'static>],
}

impl Lines<'_> {
    fn push(&mut self, run: &[(char, Style)]) {
        let prefix = if self.out.is_empty() {
            self.first_prefix
        } else {
            self.rest_prefix
        };
        let mut spans = prefix.to_vec();
        spans.extend(to_spans(run));
        self.out.push(Line::from(spans));
    }
}

/// Split a run into pieces of at most `max` columns (at least one character each).
fn split_run(run: &[(char, Style)], max: usize) -> Vec<Run> {
    let mut pieces = Vec::new();
    let mut cur: Run = Vec::new();
    let mut used = 0;
    for &(c, s) in run {
        let w = char_width(c);
        if used + w > max && !cur.is_empty() && w > 0 {
            pieces.push(std::mem::take(&mut cur));
            used = 0;
        }
        cur.push((c, s));
        used += w;
    }
    if !cur.is_empty() {
        pieces.push(cur);
    }
    pieces
}

/// Word-wrap styled text to `width` columns. `\n` breaks the line; runs of spaces break
/// between words and are dropped at a wrap; a word longer than a whole line is broken hard.
/// Leading spaces of a hard line are kept (indentation). Text is `clean`ed on the way.
/// The result always has at least one line.
pub(crate) fn wrap(
    spans: &[Span<'static>],
    width: usize,
    first_prefix: &[Span<'static>],
    rest_prefix: &[Span<'static>],
) -> Vec<Line<'static>> {
    let first_avail = width.saturating_sub(spans_width(first_prefix)).max(1);
    let rest_avail = width.saturating_sub(spans_width(rest_prefix)).max(1);
    let mut lines = Lines {
        out: Vec::new(),
        first_prefix,
        rest_prefix,
    };
    let avail = |lines: &Lines<'_>| {
        if lines.out.is_empty() {
            first_avail
        } else {
            rest_avail
        }
    };
    let mut cur: Run = Vec::new();
    let mut cur_w = 0usize;
    let mut pending: Run = Vec::new();
    let mut hard_line_start = true;
    for token in tokens(spans) {
        match token {
            Token::Newline => {
                lines.push(&cur);
                cur.clear();
                cur_w = 0;
                pending.clear();
                hard_line_start = true;
            }
            Token::Space(run) => {
                if hard_line_start {
                    // Indentation: kept, up to the line's width (a space is one column).
                    let room = avail(&lines).saturating_sub(cur_w);
                    let kept: Run = run.into_iter().take(room).collect();
                    cur_w += kept.len();
                    cur.extend(kept);
                } else {
                    pending.extend(run);
                }
            }
            Token::Word(run) => {
                hard_line_start = false;
                let word_w = run_width(&run);
                let pending_w = run_width(&pending);
                if cur_w + pending_w + word_w <= avail(&lines) {
                    cur.append(&mut pending);
                    cur_w += pending_w + word_w;
                    cur.extend(run);
                    continue;
                }
                pending.clear();
                if !cur.is_empty() {
                    lines.push(&cur);
                    cur.clear();
                }
                if word_w <= avail(&lines) {
                    cur_w = word_w;
                    cur = run;
                    continue;
                }
                // Longer than a whole line: break it hard, keep the tail on the current line.
                let mut pieces = split_run(&run, avail(&lines));
                let tail = pieces.pop().unwrap_or_default();
                for piece in pieces {
                    lines.push(&piece);
                }
                cur_w = run_width(&tail);
                cur = tail;
            }
        }
    }
    lines.push(&cur);
    lines.out
}

/// Break text into rows of at most `width` columns without looking for words (code):
/// spaces are kept as they are. `\n` breaks the line.
pub(crate) fn hard_wrap(text: &str, style: Style, width: usize) -> Vec<Vec<Span<'static>>> {
    let mut rows = Vec::new();
    for line in clean(text).split('\n') {
        let run: Run = line.chars().map(|c| (c, style)).collect();
        if run.is_empty() {
            rows.push(Vec::new());
            continue;
        }
        for piece in split_run(&run, width.max(1)) {
            rows.push(to_spans(&piece));
        }
    }
    rows
}

/// The lines' text without their styles, for tests.
#[cfg(test)]
pub(crate) fn plain(lines: &[Line<'_>]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrap_plain(text: &str, width: usize) -> Vec<String> {
        plain(&wrap(&[Span::raw(text.to_string())], width, &[], &[]))
    }

    #[test]
    fn control_characters_never_pass() {
        let dirty = "red \u{1b}[31mtext\u{1b}[0m\r\nbell\u{7}\ttab\u{9b}csi\u{7f}";
        let clean = clean(dirty);
        assert!(
            !clean.chars().any(|c| c.is_control() && c != '\n'),
            "{clean:?}"
        );
        assert_eq!(clean, "red ␛[31mtext␛[0m\nbell␇    tab\u{FFFD}csi␡");
        assert_eq!(one_line("a\nb\u{1b}"), "a b␛");
        // The bidirectional overrides and isolates would reorder what is shown.
        for bidi in ['\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}'] {
            let shown = super::clean(&format!("abc{bidi}fdp.exe"));
            assert_eq!(shown, "abc\u{FFFD}fdp.exe", "{bidi:?}");
        }
    }

    #[test]
    fn shown_width_is_the_width_of_the_cleaned_character() {
        let samples = (0u32..0x3400)
            .chain(0xFE00..0xFF10)
            .chain(0x1F300..0x1FA00)
            .filter_map(char::from_u32);
        for c in samples {
            assert_eq!(
                shown_width(c),
                width(&clean(c.encode_utf8(&mut [0; 4]))),
                "{c:?}"
            );
        }
    }

    #[test]
    fn truncate_start_keeps_the_end() {
        assert_eq!(truncate_start("model-Q8_0 ← Q4_K_M", 12), "…_0 ← Q4_K_M");
        assert_eq!(truncate_start("short", 12), "short");
        assert_eq!(truncate_start("漢字漢字", 5), "…漢字");
        assert_eq!(truncate_start("abc", 0), "");
    }

    #[test]
    fn wrapped_text_is_cleaned() {
        let lines = wrap(&[Span::raw("a\u{1b}]0;title\u{7}b")], 40, &[], &[]);
        let s = plain(&lines).join("\n");
        assert!(!s.chars().any(|c| c.is_control()), "{s:?}");
    }

    #[test]
    fn words_wrap_at_spaces() {
        assert_eq!(
            wrap_plain("the quick brown fox jumps over the lazy dog", 10),
            ["the quick", "brown fox", "jumps over", "the lazy", "dog"]
        );
    }

    #[test]
    fn newlines_and_indentation_are_kept() {
        assert_eq!(
            wrap_plain("a\n\n  indented line", 20),
            ["a", "", "  indented line"]
        );
    }

    #[test]
    fn over_long_words_break_hard() {
        assert_eq!(
            wrap_plain("see https://example.com/a/very/long/path ok", 12),
            ["see", "https://exam", "ple.com/a/ve", "ry/long/path", "ok"]
        );
    }

    #[test]
    fn wide_characters_count_two_columns() {
        // Each CJK character takes two columns: five fit in ten.
        let lines = wrap_plain("日本語のテキストです", 10);
        assert_eq!(lines, ["日本語のテ", "キストです"]);
        for l in &lines {
            assert!(width(l) <= 10);
        }
        let emoji = wrap_plain("🙂🙂🙂 ok 🙂🙂", 6);
        assert_eq!(emoji, ["🙂🙂🙂", "ok", "🙂🙂"]);
        // A wide character never sits half over the edge.
        assert_eq!(wrap_plain("a日本", 4), ["a日", "本"]);
    }

    #[test]
    fn prefixes_take_their_columns() {
        let lines = wrap(
            &[Span::raw("one two three four")],
            10,
            &[Span::raw("- ")],
            &[Span::raw("  ")],
        );
        assert_eq!(plain(&lines), ["- one two", "  three", "  four"]);
    }

    #[test]
    fn styles_survive_wrapping() {
        let bold = Style::new().add_modifier(ratatui::style::Modifier::BOLD);
        let lines = wrap(
            &[Span::raw("plain "), Span::styled("bold words", bold)],
            11,
            &[],
            &[],
        );
        assert_eq!(plain(&lines), ["plain bold", "words"]);
        assert_eq!(lines[0].spans[1].style, bold);
        assert_eq!(lines[1].spans[0].style, bold);
    }

    #[test]
    fn empty_text_is_one_empty_line() {
        assert_eq!(wrap_plain("", 10), [""]);
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("hello world", 8), "hello w…");
        assert_eq!(truncate("hello", 8), "hello");
        assert_eq!(truncate("日本語", 4), "日…");
        assert_eq!(truncate("abc", 0), "");
    }

    #[test]
    fn hard_wrap_keeps_spaces() {
        let rows = hard_wrap("    let x = 1;\n\nabcdef", Style::new(), 5);
        let text: Vec<String> = rows
            .iter()
            .map(|r| r.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        assert_eq!(text, ["    l", "et x ", "= 1;", "", "abcde", "f"]);
    }
}

#[cfg(test)]
mod width_tests {
    use super::*;

    /// tmux 3.3 and glibc: spacing marks take a column, ZWJ sequences join, U+FE0F and skin
    /// tones do not (as its cursor showed for each probe).
    const TMUX: TermWidths = TermWidths {
        spacing_marks: true,
        zwj_joins: true,
        vs16_widens: false,
        modifier_joins: false,
    };

    #[test]
    fn cluster_widths_follow_the_terminal_rules() {
        // (cluster, unicode-width's rules, tmux's), the tmux figures measured with its cursor.
        for (g, unicode, tmux) in [
            ("ক্ষ", 2, 2),
            ("ত্রি", 3, 3),
            ("বাং", 2, 3),
            ("লা", 1, 2),
            ("তি", 2, 2),
            ("مَ", 1, 1),
            ("👍🏽", 2, 4),
            ("🇫🇷", 2, 2),
            ("❤️", 2, 1),
            ("1️⃣", 2, 1),
            ("👨‍👩‍👧", 2, 2),
            ("ﾊﾞ", 1, 2),
            ("가", 2, 2),
            ("é", 1, 1),
        ] {
            assert_eq!(
                cluster_width(g, &TermWidths::UNICODE),
                unicode,
                "{g} unicode"
            );
            assert_eq!(
                UnicodeWidthStr::width(g),
                unicode,
                "{g}: unicode-width itself"
            );
            assert_eq!(cluster_width(g, &TMUX), tmux, "{g} tmux");
        }
    }

    #[test]
    fn clusters_get_fillers_or_lose_their_fe0f_to_match_the_terminal() {
        let f = FILLER.to_string();
        assert_eq!(fit_clusters("plain ascii", &TMUX), "plain ascii");
        assert_eq!(fit_clusters("বাংলা", &TMUX), format!("বাং{f}লা{f}"));
        assert_eq!(fit_clusters("👍🏽!", &TMUX), format!("👍🏽{f}{f}!"));
        assert_eq!(fit_clusters("❤️ 1️⃣", &TMUX), "❤ 1⃣");
        assert_eq!(fit_clusters("ত্রি\nx", &TMUX), "ত্রি\nx");
        // Under unicode-width's own rules nothing changes.
        for s in ["বাংলা", "👍🏽", "❤️", "ক্ষত্রিয়"] {
            assert_eq!(fit_clusters(s, &TermWidths::UNICODE), s);
        }
        // Every cluster then takes, to ratatui, the columns the terminal gives it.
        use unicode_segmentation::UnicodeSegmentation;
        let text = "বাংলা ভাষা সংস্কৃতি 👍🏽 ❤️ ﾊﾞ";
        let fitted = fit_clusters(text, &TMUX);
        let terminal: usize = text.graphemes(true).map(|g| cluster_width(g, &TMUX)).sum();
        let fitted_terminal: usize = fitted
            .graphemes(true)
            .map(|g| if g == f { 0 } else { cluster_width(g, &TMUX) })
            .sum();
        assert_eq!(UnicodeWidthStr::width(fitted.as_str()), terminal);
        assert_eq!(fitted_terminal, terminal);
    }

    #[test]
    fn the_buffer_skips_what_wide_clusters_cover() {
        use ratatui::buffer::Buffer;
        use ratatui::layout::Rect;
        use ratatui::style::Style;
        let f = FILLER.to_string();
        let mut buf = Buffer::empty(Rect::new(0, 0, 12, 2));
        // Row 0: a three-column cluster, then a cluster tmux draws one wider, its filler, "x".
        buf.set_string(0, 0, format!("ত্রিলা{f}x"), Style::default());
        // Row 1: a filler that wrapping left at the start of a row.
        buf.set_string(0, 1, format!("{f}y"), Style::default());
        fit_buffer_with(&mut buf, Some(&TMUX));
        let skip = |x: u16, y: u16| buf[(x, y)].skip;
        assert_eq!(buf[(0, 0)].symbol(), "ত্রি");
        assert!(
            skip(1, 0) && skip(2, 0),
            "the cluster's own cells are never written"
        );
        assert_eq!(buf[(3, 0)].symbol(), "লা");
        assert!(!skip(3, 0));
        assert!(skip(4, 0), "the filler is covered by লা in tmux");
        assert_eq!(buf[(5, 0)].symbol(), "x");
        assert!(!skip(5, 0));
        assert_eq!(buf[(0, 1)].symbol(), " ", "a stray filler is a blank");
        assert!(!skip(0, 1));
        // Without probed rules: only the three-column repair.
        let mut plain = Buffer::empty(Rect::new(0, 0, 12, 1));
        plain.set_string(0, 0, format!("ত্রিলা{f}x"), Style::default());
        fit_buffer_with(&mut plain, None);
        assert!(plain[(1, 0)].skip && plain[(2, 0)].skip);
        assert_eq!(plain[(4, 0)].symbol(), " ");
    }
}
