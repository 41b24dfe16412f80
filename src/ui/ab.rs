//! The A/B screen: the last answer (A, the loaded model) beside the same turns answered by
//! another model file (B) with the same sampling settings and seed; each column with its
//! figures (TTFT, decode tok/s, tokens, ITL p50, from `metrics`) and its text, the part after
//! the first difference marked, and the token where B first parts from A. Reads `app.ab`.

use std::time::Duration;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::conversation::coloured_tokens;
use super::text::{clean, one_line, truncate, wrap};
use super::view::{Figures, View};
use super::{format, theme};
use crate::app::conversation::{AssistantTurn, TurnPhase, TurnQuality};
use crate::app::{AbOutcome, AbScreen, App};
use crate::metrics::quality::kld_band;

/// Characters of each answer shown either side of the first difference.
const SNIPPET_BEFORE_CHARS: usize = 8;
const SNIPPET_AFTER_CHARS: usize = 16;

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App, view: &View) {
    let Some(ab) = &app.ab else {
        frame.render_widget(Clear, area);
        return;
    };
    let s = &ab.settings.sampling;
    let inner = super::screen_block(
        frame,
        area,
        " A/B: the last prompt, same turns, sampling and seed, two models ".into(),
    );
    let w = inner.width as usize;
    let divergence = wrap(&divergence_spans(ab), w, &[], &[Span::raw("  ")]);
    let divergence_h = divergence.len().min(2) as u16;
    let [prompt_area, settings_area, columns, divergence_area, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(divergence_h),
        Constraint::Length(1),
    ])
    .areas(inner);
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("prompt ", theme::METRIC_LABEL),
            Span::styled(
                truncate(&one_line(&ab.prompt), w.saturating_sub(7)),
                theme::USER_TEXT,
            ),
        ])),
        prompt_area,
    );
    let conditions = if ab.like_for_like {
        "A and B both from a fresh context"
    } else {
        "A: the chat's turn (warm cache) · B: a fresh context"
    };
    let settings = format!(
        "temp {} · top_k {} · top_p {} · min_p {} · seed {} · max {} tokens · {conditions}",
        s.temperature, s.top_k, s.top_p, s.min_p, s.seed, ab.settings.max_tokens
    );
    frame.render_widget(
        Paragraph::new(Span::styled(truncate(&settings, w), theme::DIM)),
        settings_area,
    );
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(columns);
    let at_byte = match ab.outcome {
        Some(AbOutcome::Diverges(d)) => Some(d.at_byte),
        _ => None,
    };
    let a_file =
        ab.a.model_file
            .clone()
            .unwrap_or_else(|| "loaded model".into());
    let mut b_file =
        ab.b.model_file
            .clone()
            .unwrap_or_else(|| ab.b_path.display().to_string());
    if ab.b_model.as_ref().is_some_and(|m| m.synthetic) {
        // Like every other screen: a synthetic model's speed is real, its text is noise.
        b_file.push_str(" · synthetic");
    }
    let Some(sides) = &view.ab else {
        return;
    };
    for (area, side, file, turn, figures) in [
        (left, "A", &a_file, &ab.a, &sides.a),
        (right, "B", &b_file, &ab.b, &sides.b),
    ] {
        let colours = (ab, app.quality_colours);
        draw_side(
            frame,
            area,
            (side, file),
            (turn, figures),
            at_byte,
            colours,
            sides.waited,
        );
    }
    frame.render_widget(
        Paragraph::new(divergence.into_iter().take(2).collect::<Vec<_>>()),
        divergence_area,
    );
    let keys = if ab.running.is_some() {
        "Esc stops B and closes · ↑↓ PgUp PgDn scroll · F1 help"
    } else {
        "Esc closes · ↑↓ scroll · Alt+K colours · F1 help · B is not in the chat"
    };
    frame.render_widget(
        Paragraph::new(Span::styled(truncate(keys, w), theme::DIM)),
        footer,
    );
}

/// One answer's column: its figures, its state, then its text from `ab.scroll` on.
fn draw_side(
    frame: &mut Frame,
    area: Rect,
    (side, file): (&str, &str),
    (turn, figures): (&AssistantTurn, &Figures),
    at_byte: Option<usize>,
    (ab, colours): (&AbScreen, bool),
    waited: Duration,
) {
    let title_w = (area.width as usize).saturating_sub(4);
    let block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme::PANE_BORDER)
        .title(Span::styled(
            truncate(&format!(" {side} · {file} "), title_w),
            theme::METRIC_HEADER,
        ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let w = inner.width as usize;
    let mut lines = Vec::new();
    for [(l1, v1), (l2, v2)] in [
        [
            ("TTFT ms", format::num(figures.ttft_ms)),
            ("decode tok/s", format::num(figures.decode_tok_per_s)),
        ],
        [
            ("tokens", figures.tokens_generated.to_string()),
            ("ITL p50 ms", format::num(figures.itl.map(|i| i.p50_ms))),
        ],
    ] {
        let spans = [
            Span::styled(format!("{l1} "), theme::METRIC_LABEL),
            Span::styled(v1, theme::METRIC_VALUE),
            Span::raw("  "),
            Span::styled(format!("{l2} "), theme::METRIC_LABEL),
            Span::styled(v2, theme::METRIC_VALUE),
        ];
        lines.extend(wrap(&spans, w, &[], &[]));
    }
    let (state, style) = state_of(turn, side == "B", ab, waited);
    lines.push(Line::from(Span::styled(truncate(&state, w), style)));
    // Both against the chat's reference when one is set, else B against A's model.
    let quality = quality_spans(turn.quality.as_ref(), side == "B", ab.reference.as_deref());
    if !quality.is_empty() {
        lines.extend(
            wrap(&quality, w, &[], &[Span::raw("  ")])
                .into_iter()
                .take(2),
        );
    }
    lines.push(Line::default());
    let head = lines.len();
    let body = if let Some(TurnQuality::Scored(score)) = turn.quality.as_ref().filter(|_| colours) {
        // Alt+K: the answer's tokens in their KLD colours, as in the chat.
        coloured_tokens(score, w, None)
    } else {
        let text_spans = match at_byte.filter(|at| turn.text.is_char_boundary(*at)) {
            Some(at) => vec![
                Span::styled(turn.text[..at].to_string(), theme::TEXT),
                Span::styled(turn.text[at..].to_string(), theme::AB_DIVERGED),
            ],
            None => vec![Span::styled(turn.text.clone(), theme::TEXT)],
        };
        wrap(&text_spans, w, &[], &[])
    };
    let room = (inner.height as usize).saturating_sub(head);
    let scroll = ab.scroll.min(body.len().saturating_sub(room));
    lines.extend(body.into_iter().skip(scroll).take(room));
    frame.render_widget(Paragraph::new(lines), inner);
}

/// A side's score in one or two lines: "vs A.gguf KLD 0.0123 p99 0.2 · same top 97.0% · 1st
/// divergence 12 · 1 <1% ref", or "scoring against A's model…", or why not. A's side shows
/// only a finished score against the screen's `reference` (the one B is scored against): a
/// score against another file would put the two sides on different baselines.
fn quality_spans(
    quality: Option<&TurnQuality>,
    is_b: bool,
    baseline: Option<&std::path::Path>,
) -> Vec<Span<'static>> {
    let (label, value) = (theme::METRIC_LABEL, theme::METRIC_VALUE);
    match quality {
        Some(TurnQuality::Scored(q)) if !is_b && baseline.is_none_or(|b| b != q.reference) => {
            vec![Span::styled(
                format!(
                    "scored against {}, not B's baseline: not shown",
                    clean(&super::tokens::file_name(&q.reference))
                ),
                theme::DIM,
            )]
        }
        Some(TurnQuality::Scored(q)) => {
            let reference = super::tokens::file_name(&q.reference);
            let Some(a) = &q.summary else {
                return vec![Span::styled(
                    format!("vs {}: no tokens to score", clean(&reference)),
                    theme::DIM,
                )];
            };
            let divergence = a
                .first_divergence
                .map_or_else(|| "none".to_string(), |i| (i + 1).to_string());
            let digits = crate::metrics::quality::kld_digits(q);
            let (mean, p99) = digits.map_or_else(Default::default, |d| (d.mean_pm, d.p99));
            let figures = [
                ("KLD ", mean, theme::KLD_BAND[kld_band(a.kld_mean)]),
                (" p99 ", p99, value),
                (
                    " · same top ",
                    crate::metrics::quality::same_top_cell(a.same_top_pct),
                    value,
                ),
                (" · 1st diverges ", divergence, value),
                (" · <1% ref ", a.below_low_p.to_string(), value),
            ];
            let figures = figures
                .into_iter()
                .flat_map(|(l, v, style)| [Span::styled(l, label), Span::styled(v, style)]);
            std::iter::once(Span::styled(format!("vs {} ", clean(&reference)), label))
                .chain(figures)
                .collect()
        }
        Some(TurnQuality::Scoring(_)) if is_b => vec![Span::styled(
            match baseline {
                Some(r) => format!(
                    "scoring B against the reference {}… (Esc stops it)",
                    clean(&super::tokens::file_name(r))
                ),
                None => "scoring B against A's model… (Esc stops it)".to_string(),
            },
            theme::WAITING,
        )],
        Some(TurnQuality::NotScored(why)) if is_b => {
            let why = one_line(why);
            let why = why.strip_prefix("not scored: ").unwrap_or(&why).to_string();
            vec![Span::styled(format!("not scored: {why}"), theme::DIM)]
        }
        _ => Vec::new(),
    }
}

/// A side's state in words: loading, prefill, streaming, how it ended.
fn state_of(
    turn: &AssistantTurn,
    is_b: bool,
    ab: &AbScreen,
    waited: Duration,
) -> (String, ratatui::style::Style) {
    let waited = format::secs(waited);
    match &turn.phase {
        TurnPhase::Queued if is_b => (format!("loading model B… {waited}"), theme::WAITING),
        TurnPhase::Queued => ("queued".into(), theme::WAITING),
        TurnPhase::Prefill => (format!("prefill… {waited}"), theme::WAITING),
        TurnPhase::Streaming => ("streaming…".into(), theme::WAITING),
        TurnPhase::Done(reason) => {
            let cached = match (is_b, turn.timeline.prompt_tokens) {
                (_, None | Some(0)) => String::new(),
                (_, Some(n)) if is_b || ab.like_for_like => {
                    format!(" · {n} prompt tok, own context")
                }
                (_, Some(n)) => format!(
                    " · {n} prompt tok, {} cached",
                    turn.timeline.cached_tokens.unwrap_or(0)
                ),
            };
            (format!("{}{cached}", reason.as_str()), theme::TURN_FOOTER)
        }
        TurnPhase::Stopped => ("stopped".into(), theme::STOPPED),
        TurnPhase::Failed(message) => (format!("failed: {}", one_line(message)), theme::FAILED),
    }
}

/// "first divergence at token N: '…A…' vs '…B…'", "identical", or what B is doing.
fn divergence_spans(ab: &AbScreen) -> Vec<Span<'static>> {
    if let Some(error) = &ab.error {
        return vec![Span::styled(
            format!("B failed: {}", one_line(error)),
            theme::NOTICE_ERROR,
        )];
    }
    match ab.outcome {
        None => vec![Span::styled(
            "first divergence: shown when B has finished",
            theme::DIM,
        )],
        Some(AbOutcome::Identical) => vec![Span::styled(
            "identical: B's answer is the same text as A's",
            theme::METRIC_KEY_VALUE,
        )],
        Some(AbOutcome::Diverges(d)) => vec![
            Span::styled(
                format!("first divergence at token {}: ", d.token_index + 1),
                theme::METRIC_LABEL,
            ),
            Span::styled(snippet(&ab.a.text, d.at_byte), theme::METRIC_VALUE),
            Span::styled(" vs ", theme::METRIC_LABEL),
            Span::styled(snippet(&ab.b.text, d.at_byte), theme::AB_DIVERGED),
        ],
    }
}

/// A few characters either side of `at` (the first difference), quoted; newlines shown as ⏎.
fn snippet(text: &str, at: usize) -> String {
    let at = if text.is_char_boundary(at) {
        at.min(text.len())
    } else {
        text.len()
    };
    let before: Vec<char> = text[..at].chars().collect();
    let start = before.len().saturating_sub(SNIPPET_BEFORE_CHARS);
    let mut out = String::from(if start > 0 { "'…" } else { "'" });
    out.extend(&before[start..]);
    let after: String = text[at..].chars().take(SNIPPET_AFTER_CHARS + 1).collect();
    let cut = after.chars().count() > SNIPPET_AFTER_CHARS;
    out.extend(after.chars().take(SNIPPET_AFTER_CHARS));
    out.push_str(if cut { "…'" } else { "'" });
    if at == text.len() {
        out.push_str(" (end)");
    }
    clean(&out.replace('\n', "⏎"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_show_both_sides_of_the_difference() {
        assert_eq!(snippet("Hello world", 6), "'Hello world'");
        assert_eq!(
            snippet("The quick brown fox jumps over the lazy dog", 16),
            "'…k brown fox jumps over t…'"
        );
        assert_eq!(snippet("Hi", 2), "'Hi' (end)");
        assert_eq!(snippet("a\nb", 1), "'a⏎b'");
    }
}
