//! The input box at the bottom: the message being typed, broken into rows at the box width,
//! growing with its rows up to a limit and scrolled so the cursor stays visible, with the
//! terminal cursor placed at the insertion point.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use super::text::{clean, shown_width, truncate, width};
use super::theme;
use crate::app::{App, EngineStatus, Mode};

const PROMPT: &str = "› ";
const CONTINUATION: &str = "  ";

/// Byte ranges of the rows of `line` (which holds no newline) at `max_w` columns, at most
/// `limit` of them; an empty line is one empty row.
fn line_rows(line: &str, max_w: usize, limit: usize) -> Vec<(usize, usize)> {
    if line.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        // Printable ASCII (a pasted file, mostly): one column a byte, rows of `max_w` bytes.
        if line.is_empty() {
            return vec![(0, 0)];
        }
        return (0..line.len())
            .step_by(max_w)
            .take(limit)
            .map(|start| (start, (start + max_w).min(line.len())))
            .collect();
    }
    let mut out = Vec::new();
    let (mut start, mut col) = (0, 0);
    for (i, c) in line.char_indices() {
        let w = shown_width(c);
        if col + w > max_w && col > 0 {
            out.push((start, i));
            if out.len() >= limit {
                return out;
            }
            start = i;
            col = 0;
        }
        col += w;
    }
    out.push((start, line.len()));
    out
}

/// Columns a row's text takes as drawn: printable ASCII a column a byte; otherwise the drawn
/// text's width, so that the cursor lands after clusters the terminal draws wider (the
/// fillers `clean` adds for them) and after whole emoji sequences.
fn columns(text: &str) -> usize {
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        text.len()
    } else {
        width(&clean(text))
    }
}

/// The part of the input the box shows: only the rows around the cursor are laid out, so a
/// key costs the same whatever the input's size (a scan of the cursor's line, no copies).
#[derive(Debug, PartialEq)]
struct Window {
    /// The rows shown, in order, as drawn (controls as their symbols).
    rows: Vec<String>,
    /// Whether `rows[0]` is the input's first row (which carries the prompt).
    from_top: bool,
    /// The cursor's row within `rows`, and its column.
    cursor: (usize, usize),
    /// Rows of the whole input, counted up to `visible` (the box never grows further).
    total: usize,
}

/// The `visible` rows of the input's `lines` (its text split at `\n`) at `max_w` columns that
/// the box shows with the cursor on line `row` at byte `at`: the first rows while the cursor is
/// among them, else the rows ending at the cursor's row.
fn window<S: AsRef<str>>(
    lines: &[S],
    row: usize,
    at: usize,
    max_w: usize,
    visible: usize,
) -> Window {
    let max_w = max_w.max(1);
    let visible = visible.max(1);
    let row = row.min(lines.len().saturating_sub(1));
    let line: &str = lines.get(row).map_or("", AsRef::as_ref);
    let mut at = at.min(line.len());
    while !line.is_char_boundary(at) {
        at -= 1;
    }
    let last_line = row + 1 >= lines.len();
    let mut own = line_rows(line, max_w, usize::MAX);
    let (cur_row, cur_col) = if at == line.len() {
        let last = own.len() - 1;
        let col = columns(&line[own[last].0..]);
        if last_line && col >= max_w {
            // At the end of a full last row: the cursor starts the next one.
            own.push((line.len(), line.len()));
            (last + 1, 0)
        } else {
            (last, col)
        }
    } else {
        let r = own.iter().position(|&(_, end)| at < end).unwrap_or(0);
        let col = columns(&line[own[r].0..at]);
        (r, col)
    };
    // Rows above the cursor's row, nearest last: this line's, then earlier lines' (only as
    // many as the box can show).
    let mut above: Vec<String> = own[cur_row.saturating_sub(visible - 1)..cur_row]
        .iter()
        .map(|&(a, b)| clean(&line[a..b]))
        .collect();
    let mut reached_top = row == 0 && cur_row < visible;
    if above.len() < visible - 1 && row > 0 {
        let mut earlier = lines[..row].iter().rev().map(AsRef::as_ref).peekable();
        while above.len() < visible - 1 {
            let Some(prev) = earlier.next() else { break };
            let ranges = line_rows(prev, max_w, usize::MAX);
            let wanted = visible - 1 - above.len();
            let rows: Vec<String> = ranges[ranges.len().saturating_sub(wanted)..]
                .iter()
                .map(|&(a, b)| clean(&prev[a..b]))
                .collect();
            reached_top = ranges.len() <= wanted && earlier.peek().is_none();
            above.splice(0..0, rows);
        }
    }
    // Rows below the cursor's row: this line's, then later lines' (as many as can be shown).
    let mut below: Vec<String> = own[cur_row + 1..]
        .iter()
        .take(visible)
        .map(|&(a, b)| clean(&line[a..b]))
        .collect();
    if !last_line {
        for next in lines[row + 1..].iter().map(AsRef::as_ref) {
            if below.len() >= visible {
                break;
            }
            let want = visible - below.len();
            below.extend(
                line_rows(next, max_w, want)
                    .iter()
                    .map(|&(a, b)| clean(&next[a..b])),
            );
        }
    }
    let cursor_row_text = own
        .get(cur_row)
        .map(|&(a, b)| clean(&line[a..b]))
        .unwrap_or_default();
    // `above` holds at most `visible - 1` rows, so the cursor's row is always shown.
    let total = (above.len() + 1 + below.len()).min(visible);
    let cursor_at = above.len();
    let mut rows = above;
    rows.push(cursor_row_text);
    rows.extend(below.into_iter().take(visible - rows.len()));
    Window {
        rows,
        from_top: reached_top,
        cursor: (cursor_at, cur_col),
        total,
    }
}

/// Rows of text the box shows at most, for a terminal `height` rows tall.
pub(crate) fn max_rows(height: u16) -> usize {
    (height.saturating_sub(8) / 2).clamp(1, 10) as usize
}

/// The height of the box (its top border and its text rows) at `area_width` columns.
pub(crate) fn height(app: &App, area_width: u16, max_rows: usize) -> u16 {
    let inner = (area_width as usize).saturating_sub(width(PROMPT));
    let (row, at) = app.input.cursor();
    let shown = window(app.input.lines(), row, at, inner, max_rows);
    (shown.total.clamp(1, max_rows.max(1)) + 1) as u16
}

fn hint(app: &App) -> &'static str {
    if app.is_generating() {
        " Esc stops the answer · F1 help "
    } else {
        " Enter send · Alt+Enter newline · F1 help "
    }
}

fn placeholder(app: &App) -> &'static str {
    match app.engine {
        EngineStatus::Loading { .. } => {
            "the model is loading; type meanwhile: Enter sends when it is ready"
        }
        EngineStatus::Failed(_) => "/model PATH loads another model",
        EngineStatus::Ready if app.is_generating() => "an answer is being generated…",
        EngineStatus::Ready => "type a message, or /help",
    }
}

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let w = area.width as usize;
    let title = match app.input_tokens {
        Some((n, _)) if !app.input.is_empty() => {
            let noun = if n == 1 { "token" } else { "tokens" };
            truncate(&format!(" message · {n} {noun} "), w)
        }
        _ => truncate(" message ", w),
    };
    let hint = hint(app);
    let mut block = Block::new()
        .borders(Borders::TOP)
        .border_style(theme::INPUT_BORDER)
        .title(Line::from(Span::styled(title.clone(), theme::INPUT_TITLE)));
    if width(&title) + width(hint) + 2 <= w {
        block = block.title(Line::from(Span::styled(hint, theme::DIM)).right_aligned());
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.is_empty() {
        return;
    }
    let text_w = (inner.width as usize).saturating_sub(width(PROMPT)).max(1);
    let visible = inner.height as usize;
    let (row, at) = app.input.cursor();
    let shown = window(app.input.lines(), row, at, text_w, visible);
    let (cur_row, cur_col) = shown.cursor;
    let lines: Vec<Line<'static>> = if app.input.is_empty() {
        vec![Line::from(vec![
            Span::styled(PROMPT, theme::INPUT_PROMPT),
            Span::styled(placeholder(app), theme::INPUT_PLACEHOLDER),
        ])]
    } else {
        let from_top = shown.from_top;
        shown
            .rows
            .into_iter()
            .enumerate()
            .map(|(i, row)| {
                let prefix = if i == 0 && from_top {
                    PROMPT
                } else {
                    CONTINUATION
                };
                Line::from(vec![
                    Span::styled(prefix, theme::INPUT_PROMPT),
                    Span::styled(row, theme::INPUT_TEXT),
                ])
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines), inner);
    if app.mode == Mode::Chat {
        let x = inner.x as usize + width(PROMPT) + cur_col;
        let y = inner.y as usize + cur_row;
        if x < (inner.x + inner.width) as usize && y < (inner.y + inner.height) as usize {
            frame.set_cursor_position((x as u16, y as u16));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window of `text` with the cursor at byte `cursor` (the input's lines and cursor).
    fn window_of(text: &str, cursor: usize, max_w: usize, visible: usize) -> Window {
        let lines: Vec<&str> = text.split('\n').collect();
        let row = text[..cursor].matches('\n').count();
        let line_start = text[..cursor].rfind('\n').map_or(0, |i| i + 1);
        window(&lines, row, cursor - line_start, max_w, visible)
    }

    /// The reference layout: every row of the input at `width` columns and the cursor's (row,
    /// column) among them (what the box did before it laid out only the rows it shows).
    fn rows(text: &str, cursor: usize, max_w: usize) -> (Vec<String>, (usize, usize)) {
        let max_w = max_w.max(1);
        let mut rows = vec![String::new()];
        let mut col = 0;
        let mut at = None;
        for (i, c) in text.char_indices() {
            if c == '\n' {
                if i == cursor {
                    at = Some((rows.len() - 1, col));
                }
                rows.push(String::new());
                col = 0;
                continue;
            }
            let shown = clean(c.encode_utf8(&mut [0; 4]));
            let w = width(&shown);
            if col + w > max_w && col > 0 {
                rows.push(String::new());
                col = 0;
            }
            if i == cursor {
                at = Some((rows.len() - 1, col));
            }
            if let Some(row) = rows.last_mut() {
                row.push_str(&shown);
            }
            col += w;
        }
        let at = match at {
            Some(at) => at,
            None if col >= max_w => {
                // At the end of a full row: the cursor starts the next one.
                rows.push(String::new());
                (rows.len() - 1, 0)
            }
            None => (rows.len() - 1, col),
        };
        (rows, at)
    }

    /// What the box showed with the reference layout: rows `offset..offset + visible`.
    fn reference(text: &str, cursor: usize, max_w: usize, visible: usize) -> Window {
        let (all, (row, col)) = rows(text, cursor, max_w);
        let offset = (row + 1).saturating_sub(visible);
        Window {
            total: all.len().min(visible),
            rows: all.into_iter().skip(offset).take(visible).collect(),
            from_top: offset == 0,
            cursor: (row - offset, col),
        }
    }

    #[test]
    fn the_window_is_the_reference_layouts_rows_for_any_text_cursor_and_size() {
        // Every text over a small alphabet (newlines, wide, tab, control, combining) up to
        // length 6, every cursor position, widths 1-5 and heights 1-4.
        let alphabet = ['a', '\n', '日', '\t', '\u{1b}', '\u{301}', 'b'];
        let mut texts = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|t| {
                    alphabet.iter().map(move |&c| {
                        let mut t = t.clone();
                        t.push(c);
                        t
                    })
                })
                .collect();
            texts.extend(last.iter().cloned());
        }
        let mut checked = 0;
        for text in &texts {
            let cursors: Vec<usize> = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .collect();
            for &cursor in &cursors {
                for max_w in 1..=5 {
                    for visible in 1..=4 {
                        assert_eq!(
                            window_of(text, cursor, max_w, visible),
                            reference(text, cursor, max_w, visible),
                            "{text:?} cursor {cursor} width {max_w} height {visible}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    #[test]
    fn a_megabyte_line_is_laid_out_around_the_cursor() {
        let text = "lorem ipsum ".repeat(1 << 17);
        let shown = window_of(&text, text.len(), 100, 10);
        assert_eq!(shown.rows.len(), 10);
        assert!(!shown.from_top);
        assert_eq!(shown, reference(&text, text.len(), 100, 10));
        let top = window_of(&text, 0, 100, 10);
        assert!(top.from_top);
        assert_eq!(top, reference(&text, 0, 100, 10));
    }

    #[test]
    fn rows_break_at_the_width_and_track_the_cursor() {
        let (r, at) = rows("hello world", 11, 5);
        assert_eq!(r, ["hello", " worl", "d"]);
        assert_eq!(at, (2, 1));
        let (r, at) = rows("ab\ncd", 1, 10);
        assert_eq!(r, ["ab", "cd"]);
        assert_eq!(at, (0, 1));
        let (_, at) = rows("ab\ncd", 2, 10);
        assert_eq!(at, (0, 2));
        let (_, at) = rows("ab\ncd", 3, 10);
        assert_eq!(at, (1, 0));
    }

    #[test]
    fn cursor_after_a_full_row_starts_the_next() {
        let (r, at) = rows("abcde", 5, 5);
        assert_eq!(r, ["abcde", ""]);
        assert_eq!(at, (1, 0));
    }

    #[test]
    fn wide_characters_and_controls() {
        let (r, at) = rows("日本語", 6, 4);
        assert_eq!(r, ["日本", "語"]);
        assert_eq!(at, (1, 0));
        let (_, at) = rows("日本語", 9, 4);
        assert_eq!(at, (1, 2));
        let (r, _) = rows("a\u{1b}[0m\tb", 0, 40);
        assert_eq!(r, ["a␛[0m    b"]);
    }
}
