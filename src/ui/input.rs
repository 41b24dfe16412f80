//! The input box at the bottom: the message being typed, broken into rows at the box width,
//! growing with its rows up to a limit and scrolled so the cursor stays visible, with the
//! terminal cursor placed at the insertion point.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use super::text::{clean, truncate, width};
use super::theme;
use crate::app::{App, EngineStatus, Mode};

const PROMPT: &str = "› ";
const CONTINUATION: &str = "  ";

/// The input's rows at `width` columns and the cursor's (row, column) among them.
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

/// Rows of text the box shows at most, for a terminal `height` rows tall.
pub(crate) fn max_rows(height: u16) -> usize {
    (height.saturating_sub(8) / 2).clamp(1, 10) as usize
}

/// The height of the box (its top border and its text rows) at `area_width` columns.
pub(crate) fn height(app: &App, area_width: u16, max_rows: usize) -> u16 {
    let inner = (area_width as usize).saturating_sub(width(PROMPT));
    let (rows, _) = rows(&app.input.text, app.input.cursor, inner);
    (rows.len().clamp(1, max_rows.max(1)) + 1) as u16
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
        EngineStatus::Loading { .. } => "the model is loading; you can type meanwhile",
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
    let (rows, (cur_row, cur_col)) = rows(&app.input.text, app.input.cursor, text_w);
    let visible = inner.height as usize;
    let offset = (cur_row + 1).saturating_sub(visible);
    let lines: Vec<Line<'static>> = if app.input.text.is_empty() {
        vec![Line::from(vec![
            Span::styled(PROMPT, theme::INPUT_PROMPT),
            Span::styled(placeholder(app), theme::INPUT_PLACEHOLDER),
        ])]
    } else {
        rows.into_iter()
            .enumerate()
            .skip(offset)
            .take(visible)
            .map(|(i, row)| {
                let prefix = if i == 0 { PROMPT } else { CONTINUATION };
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
        let y = inner.y as usize + cur_row - offset;
        if x < (inner.x + inner.width) as usize && y < (inner.y + inner.height) as usize {
            frame.set_cursor_position((x as u16, y as u16));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
