//! The token screen (`Alt+T`): one answer drawn token by token in its colours with a cursor,
//! and under it the token at the cursor: its figures (KLD, both probabilities and entropies
//! against the reference, or its own probability and entropy) and the most likely tokens of
//! both models there, the chosen one marked. Reads `app.token_cursor`; the figures are
//! `metrics::quality`'s, as the engine made them.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::conversation::{coloured_tokens, confidence_tokens};
use super::text::{truncate, width as text_width};
use super::theme;
use crate::app::{AnswerTokens, App};
use crate::metrics::quality::{TopToken, TOP_K};

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let title = match place(app) {
        Some((c, AnswerTokens::Scored(s))) => format!(
            " tokens of answer {} against {} ",
            c.exchange + 1,
            file_name(&s.reference)
        ),
        Some((c, AnswerTokens::Own(_))) => format!(
            " tokens of answer {}: the model's own confidence ",
            c.exchange + 1
        ),
        None => " tokens ".to_string(),
    };
    let title = truncate(&title, area.width.saturating_sub(4) as usize);
    let inner = super::screen_block(frame, area, title);
    let lines = lines(app, inner.width as usize, inner.height as usize);
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The answer the cursor is in, and its tokens.
fn place(app: &App) -> Option<(crate::app::TokenCursor, AnswerTokens<'_>)> {
    app.token_cursor
        .and_then(|c| Some((c, app.answer_tokens(c.exchange)?)))
}

/// A path's file name, or the whole path when it has none.
pub(super) fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Everything the screen shows for `width` × `height` cells: the answer's lines around the
/// cursor, the legend, the token's figures and the top tokens, the keys.
pub(crate) fn lines(app: &App, width: usize, height: usize) -> Vec<Line<'static>> {
    let width = width.max(10);
    let Some((cursor, tokens)) = place(app) else {
        return vec![Line::from(Span::styled(
            "No answer has token figures. Esc: back to the chat.",
            theme::DIM,
        ))];
    };
    let at = cursor.token.min(tokens.len() - 1);
    let mut detail = detail_lines(tokens, at, width);
    detail.push(Line::default());
    detail.push(Line::from(Span::styled(
        truncate(
            "←/→ token · ↑/↓ 10 tokens · Home/End · PgUp/PgDn answer · d first divergence · Esc back",
            width,
        ),
        theme::DIM,
    )));
    let body = match tokens {
        AnswerTokens::Scored(s) => coloured_tokens(s, width, Some(at)),
        AnswerTokens::Own(t) => confidence_tokens(t, width, Some(at)),
    };
    // The answer gets what the figures leave, at least 3 lines, scrolled to the cursor.
    let room = height.saturating_sub(detail.len() + 1).max(3);
    let cursor_line = body
        .iter()
        .position(|l| l.spans.iter().any(|s| s.style.bg == theme::TOKEN_CURSOR.bg))
        .unwrap_or(0);
    let start = cursor_line
        .saturating_sub(room / 2)
        .min(body.len().saturating_sub(room));
    let mut out: Vec<Line<'static>> = body.into_iter().skip(start).take(room).collect();
    out.push(Line::from(Span::styled("─".repeat(width), theme::DIM)));
    out.extend(detail);
    out
}

/// A token's text as the figures show it: quoted, with newlines and tabs as `\n` and `\t`
/// (control characters become visible symbols when drawn).
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn pct(p: f64) -> String {
    if !p.is_finite() {
        "—".to_string()
    } else if p >= 0.001 {
        format!("{:.1}%", p * 100.0)
    } else {
        format!("{:.1e}", p)
    }
}

fn nats(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.2}"))
}

/// The token at `at`: its figures, then the top tokens (the reference's beside the model's
/// for a scored answer).
fn detail_lines(tokens: AnswerTokens<'_>, at: usize, width: usize) -> Vec<Line<'static>> {
    let (label, value) = (theme::METRIC_LABEL, theme::METRIC_VALUE);
    // "token N of M" with its text and id.
    let head = |n: usize, text: &str, id: i32| {
        vec![
            Span::styled(format!("token {} of {n} ", at + 1), label),
            Span::styled(truncate(&quoted(text), width / 2), value),
            Span::styled(format!(" (id {id})"), theme::DIM),
        ]
    };
    let mut out = Vec::new();
    match tokens {
        AnswerTokens::Scored(s) => {
            let t = &s.tokens[at];
            let first = s.summary.as_ref().and_then(|q| q.first_divergence) == Some(at);
            let mut head = head(s.tokens.len(), &t.text, t.token);
            head.push(Span::styled(
                if first { " · first divergence" } else { "" }.to_string(),
                theme::TEXT.add_modifier(theme::FIRST_DIVERGENCE),
            ));
            out.push(Line::from(head));
            out.push(Line::from(vec![
                Span::styled("KLD ", label),
                Span::styled(
                    format!("{:.4}", t.score.kld),
                    theme::KLD_BAND[crate::metrics::quality::kld_band(t.score.kld)],
                ),
                Span::styled(" · same top ", label),
                Span::styled(if t.score.same_top { "yes" } else { "no" }, value),
                Span::styled(" · p ref ", label),
                Span::styled(pct(t.score.p_ref), value),
                Span::styled(" · p model ", label),
                Span::styled(pct(t.score.p_cand), value),
            ]));
            out.push(Line::from(vec![
                Span::styled("entropy ref ", label),
                Span::styled(nats(t.score.entropy_ref), value),
                Span::styled(" · model ", label),
                Span::styled(nats(t.score.entropy_cand), value),
                Span::styled(" nats", label),
            ]));
            out.push(Line::default());
            out.extend(top_columns(
                &[("reference", &t.top_ref), ("model", &t.top_cand)],
                t.token,
                width,
            ));
        }
        AnswerTokens::Own(all) => {
            let t = &all[at];
            out.push(Line::from(head(all.len(), &t.text, t.token)));
            out.push(Line::from(vec![
                Span::styled("p ", label),
                Span::styled(
                    pct(f64::from(t.p)),
                    theme::KLD_BAND[crate::metrics::quality::confidence_band(f64::from(t.p))],
                ),
                Span::styled(" · entropy ", label),
                Span::styled(nats(Some(f64::from(t.entropy))), value),
                Span::styled(" nats · no reference: /ref PATH scores against one", label),
            ]));
            out.push(Line::default());
            out.extend(top_columns(&[("model", &t.top)], t.token, width));
        }
    }
    out
}

/// The top tokens of one or two distributions side by side, the chosen token marked `▸`.
fn top_columns(columns: &[(&str, &[TopToken])], chosen: i32, width: usize) -> Vec<Line<'static>> {
    let col_w = (width / columns.len().max(1)).max(12);
    let head = columns.iter().map(|(name, _)| {
        let head = pad(&format!("  {name}: top {TOP_K}"), col_w);
        Span::styled(head, theme::METRIC_LABEL)
    });
    let mut out = vec![Line::from(head.collect::<Vec<_>>())];
    let rows = columns.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    if rows == 0 {
        out.push(Line::from(Span::styled(
            "  not kept for this answer (scored by an older tokscope)",
            theme::DIM,
        )));
    }
    for r in 0..rows {
        let spans = columns.iter().map(|(_, tops)| match tops.get(r) {
            Some(t) => {
                let (mark, style) = if t.token == chosen {
                    ("▸", theme::METRIC_VALUE)
                } else {
                    (" ", theme::TEXT)
                };
                let p = pct(f64::from(t.p));
                let room = col_w.saturating_sub(p.len() + 6);
                let text = pad(&truncate(&quoted(&t.text), room), room);
                Span::styled(pad(&format!("{mark}{} {text} {p}", r + 1), col_w), style)
            }
            None => Span::styled(pad("", col_w), Style::new()),
        });
        out.push(Line::from(spans.collect::<Vec<_>>()));
    }
    out
}

/// `s` padded with spaces to `w` columns.
fn pad(s: &str, w: usize) -> String {
    format!("{s}{}", " ".repeat(w.saturating_sub(text_width(s))))
}
