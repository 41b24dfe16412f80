//! The conversation pane: user and assistant turns (assistant text as Markdown), each answer's
//! footer (waiting clock, streaming cursor, stopped marker, error, or its compact figures), the
//! welcome screen of an empty conversation, and scrolling from the bottom with the position
//! clamped to the content at draw time.

use std::time::{Duration, Instant};

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::text::{line_width, one_line, truncate, wrap};
use super::view::View;
use super::{format, markdown, theme};
use crate::app::conversation::{AssistantTurn, TurnPhase};
use crate::app::{App, EngineStatus};
use crate::engine::ModelInfo;
use crate::metrics::quality::{self, AnswerScore, TokenConfidence};
use crate::metrics::TurnSummary;

/// Body text is indented under its role label.
const INDENT: &str = "  ";

/// A message longer than this (in bytes) is rendered from a tail of whole paragraphs, just
/// long enough for the lines the pane wants: a 20 MB answer costs a frame what a page does.
const TAIL_FROM: usize = 64 * 1024;

/// `render` of the shortest tail of `text` that starts a paragraph and renders to at least
/// `need` lines (of the whole text when it is shorter than [`TAIL_FROM`] or no tail is enough),
/// and whether the text was cut. `markdown`: an open code fence at the cut is reopened, so
/// code keeps looking like code.
fn render_tail(
    text: &str,
    need: usize,
    width: usize,
    markdown: bool,
    render: impl Fn(&str) -> Vec<Line<'static>>,
) -> (Vec<Line<'static>>, bool) {
    // A row holds at most `width` columns; a byte a column (and a newline) is a first guess
    // of the bytes per row, doubled until the tail renders to enough lines (the renders add
    // up to at most twice the last one).
    let mut bytes = TAIL_FROM.max(need.saturating_mul(width.saturating_add(1)));
    while bytes < text.len() {
        let mut cut = text.len() - bytes;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        if let Some(i) = text[cut..].find("\n\n") {
            cut += i + 2;
        }
        let lines = match markdown.then(|| open_fence(&text[..cut])).flatten() {
            Some(fence) => {
                // The reopened block's top line (its frame and language) belongs to the
                // full render's start of the block, far above: it is not shown here.
                let lines = render(&format!("{fence}\n{}", &text[cut..]));
                lines.into_iter().skip(1).collect()
            }
            None => render(&text[cut..]),
        };
        if lines.len() >= need {
            return (lines, true);
        }
        bytes = bytes.saturating_mul(2);
    }
    (render(text), false)
}

/// The opening line of the fenced code block still open at the end of `text`, if one is.
fn open_fence(text: &str) -> Option<&str> {
    let mut open: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            continue;
        }
        let marker = |c: char| trimmed.chars().take_while(|&x| x == c).count() >= 3;
        if !(marker('`') || marker('~')) {
            continue;
        }
        open = match open {
            None => Some(trimmed),
            Some(opener) => {
                let c = opener.chars().next().unwrap_or('`');
                let n = opener.chars().take_while(|&x| x == c).count();
                let closes = trimmed.chars().take_while(|&x| x == c).count() >= n
                    && trimmed.trim_end().chars().all(|x| x == c);
                if closes {
                    None
                } else {
                    Some(opener)
                }
            }
        };
    }
    open
}

/// Draws the conversation; returns how far up it can scroll (its top, in lines from the
/// bottom) when it was drawn scrolled up, `None` when it follows the end.
pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App, view: &View) -> Option<usize> {
    if area.is_empty() {
        return None;
    }
    let height = area.height as usize;
    // Only what can be seen is rendered: the newest exchanges back to the scroll position
    // (plus the hint row), so a long conversation costs no more per frame than a short one.
    let wanted = if app.scroll.follows() {
        height
    } else {
        height.saturating_add(app.scroll.lines_from_bottom)
    }
    .saturating_add(1);
    let lines = tail_lines_waited(app, area.width as usize, view.waiting, wanted);
    let total = lines.len();
    let (start, view, hidden_below, top) = if app.scroll.follows() || total <= height {
        let top = (!app.scroll.follows()).then_some(0);
        (total.saturating_sub(height), height, 0, top)
    } else {
        // One row goes to the "more lines" hint; the offset is clamped to the content.
        let view = height.saturating_sub(1).max(1);
        let max_offset = total.saturating_sub(view);
        let offset = app.scroll.lines_from_bottom.min(max_offset);
        (total - view - offset, view, offset, Some(max_offset))
    };
    let end = (start + view).min(total);
    let visible: Vec<Line<'static>> = lines.get(start..end).unwrap_or_default().to_vec();
    frame.render_widget(Paragraph::new(visible), area);
    if hidden_below > 0 && area.height >= 2 {
        let noun = if hidden_below == 1 { "line" } else { "lines" };
        let hint = truncate(
            &format!(" ↓ {hidden_below} more {noun} · End follows "),
            area.width as usize,
        );
        let row = Rect {
            y: area.y + area.height - 1,
            height: 1,
            ..area
        };
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(hint, theme::SCROLL_HINT))),
            row,
        );
    }
    top
}

/// Every line of the conversation at `width` columns, oldest first.
pub fn lines(app: &App, width: usize, now: Instant) -> Vec<Line<'static>> {
    tail_lines(app, width, now, usize::MAX)
}

/// The last lines of the conversation, at least `wanted` of them when there are that many
/// (whole exchanges are rendered, newest first, until enough lines are known), oldest first.
pub fn tail_lines(app: &App, width: usize, now: Instant, wanted: usize) -> Vec<Line<'static>> {
    tail_lines_waited(app, width, super::view::waiting(app, now), wanted)
}

/// [`tail_lines`] with the answer in flight's waiting time as the frame's `View` has it.
fn tail_lines_waited(
    app: &App,
    width: usize,
    waiting: Option<Duration>,
    wanted: usize,
) -> Vec<Line<'static>> {
    let width = width.max(1);
    let indent = [Span::raw(INDENT)];
    let exchanges = &app.conversation.exchanges;
    let mut blocks: Vec<Vec<Line<'static>>> = Vec::new();
    let mut count = 0usize;
    let mut cut = false;
    for (i, exchange) in exchanges.iter().enumerate().rev() {
        if count >= wanted {
            break;
        }
        let need = wanted - count;
        let (answer, answer_cut) = match &exchange.assistant {
            Some(turn) => assistant(
                turn,
                width,
                waiting,
                need,
                (app.quality_colours, app.show_thinking),
            ),
            None => (Vec::new(), false),
        };
        let mut out = Vec::new();
        if answer_cut {
            // The answer alone fills the pane: its labels and its question are above what
            // can be seen.
            cut = true;
            out = answer;
        } else {
            let user_need = need.saturating_sub(answer.len());
            let (user, user_cut) = render_tail(&exchange.user, user_need, width, false, |text| {
                wrap(
                    &[Span::styled(text.to_string(), theme::USER_TEXT)],
                    width,
                    &indent,
                    &indent,
                )
            });
            if user_cut {
                cut = true;
            } else {
                if i > 0 {
                    out.push(Line::default());
                }
                out.push(Line::from(Span::styled("▍you", theme::USER_LABEL)));
            }
            out.extend(user);
            if exchange.assistant.is_some() {
                out.push(Line::default());
                out.extend(answer);
            }
        }
        count += out.len();
        blocks.push(out);
    }
    let reached_top = blocks.len() == exchanges.len() && !cut;
    let mut out = Vec::new();
    if reached_top {
        if let Some(system) = &app.conversation.system_prompt {
            out.extend(wrap(
                &[
                    Span::styled("system: ", theme::DIM),
                    Span::styled(system.clone(), theme::SYSTEM_PROMPT),
                ],
                width,
                &[],
                &indent,
            ));
            out.push(Line::default());
        }
        if exchanges.is_empty() {
            out.extend(welcome(app, width));
            return out;
        }
    }
    out.extend(blocks.into_iter().rev().flatten());
    out
}

/// The answer's lines, at least `need` of them when it has that many (a long answer is
/// rendered from its tail: [`render_tail`]), and whether it was cut. `colours`: tokens in
/// colour (`Alt+K`); `show_thinking`: a thinking span unfolded (`Alt+R`).
fn assistant(
    turn: &AssistantTurn,
    width: usize,
    waiting: Option<Duration>,
    need: usize,
    (colours, show_thinking): (bool, bool),
) -> (Vec<Line<'static>>, bool) {
    let mut out = vec![Line::from(Span::styled(
        "▍assistant",
        theme::ASSISTANT_LABEL,
    ))];
    let body_width = width.saturating_sub(INDENT.len()).max(1);
    let scored = turn
        .quality
        .as_ref()
        .and_then(|q| q.score())
        .filter(|s| colours && !s.tokens.is_empty() && turn.is_finished());
    let confident = turn
        .confidence
        .as_ref()
        .and_then(|c| c.tokens())
        .filter(|t| colours && scored.is_none() && !t.is_empty() && turn.is_finished());
    let (rendered, mut cut) = match (scored, confident) {
        (Some(score), _) => (coloured_tokens(score, body_width, None), false),
        (None, Some(tokens)) => (confidence_tokens(tokens, body_width, None), false),
        (None, None) => render_tail(&turn.text, need, body_width, true, |text| {
            markdown::render(text, body_width)
        }),
    };
    // The thinking above the answer (coloured tokens show every token as it came instead),
    // unless the answer alone fills the pane.
    let thinking = match (scored, confident, cut) {
        (None, None, false) => {
            let (lines, thinking_cut) = thinking_lines(
                turn,
                width,
                show_thinking,
                need.saturating_sub(rendered.len()),
            );
            cut = thinking_cut;
            lines
        }
        _ => Vec::new(),
    };
    let mut body: Vec<Line<'static>> = rendered
        .into_iter()
        .map(|line| {
            if line.spans.is_empty() {
                line
            } else {
                Line::from(
                    [Span::raw(INDENT)]
                        .into_iter()
                        .chain(line.spans)
                        .collect::<Vec<_>>(),
                )
            }
        })
        .collect();
    let summary = || figures(turn.summary.as_ref());
    let footer = match &turn.phase {
        TurnPhase::Streaming => {
            // The cursor follows the text as it grows.
            let cursor = Span::styled("▌", theme::STREAM_CURSOR);
            match body.last_mut() {
                Some(last) if !last.spans.is_empty() && line_width(last) < width => {
                    last.spans.push(cursor)
                }
                _ => body.push(Line::from(vec![Span::raw(INDENT), cursor])),
            }
            Vec::new()
        }
        TurnPhase::Queued | TurnPhase::Prefill => {
            let waited = waiting.map_or_else(|| "—".to_string(), format::secs);
            let progress = match turn.prefill_progress {
                Some((done, total)) => format!("{done}/{total}"),
                None => format!("0/{}", count(turn.timeline.prefilled_tokens())),
            };
            let what = match (turn.stopping, &turn.phase) {
                (true, TurnPhase::Queued) => "⋯ stopping…".to_string(),
                (true, _) => format!("⋯ stopping… (prefill {progress} tok)"),
                (false, TurnPhase::Queued) => "⋯ queued".to_string(),
                (false, _) => format!(
                    "⋯ prefill {progress} tok ({} cached)",
                    count(turn.timeline.cached_tokens)
                ),
            };
            let footer = format!("{what} · waiting {waited}");
            vec![Span::styled(footer, theme::WAITING)]
        }
        TurnPhase::Done(reason) => {
            if body.is_empty() {
                let none = if turn.thinking.is_some() {
                    "  (no answer)"
                } else {
                    "  (no text)"
                };
                body.push(Line::from(Span::styled(none, theme::DIM)));
            }
            let footer = format!("─ {} · {}", summary(), reason.as_str());
            vec![Span::styled(footer, theme::TURN_FOOTER)]
        }
        TurnPhase::Stopped => vec![
            Span::styled("■ stopped", theme::STOPPED),
            Span::styled(format!(" · {}", summary()), theme::TURN_FOOTER),
        ],
        TurnPhase::Failed(message) => {
            vec![Span::styled(format!("✗ failed: {message}"), theme::FAILED)]
        }
    };
    out.extend(thinking);
    out.extend(body);
    let legend = match (scored, confident) {
        (Some(_), _) => kld_legend(),
        (None, Some(_)) => confidence_legend(),
        (None, None) => Vec::new(),
    };
    let indent = [Span::raw(INDENT)];
    for spans in [footer, legend].iter().filter(|s| !s.is_empty()) {
        out.extend(wrap(spans, width, &indent, &indent));
    }
    if cut {
        // Only a tail of the body is rendered: the label above it is out of sight.
        out.remove(0);
    }
    (out, cut)
}

/// The thinking of a turn that thought: one line that says so (folded), or that line and the
/// thinking's text (`show`: `Alt+R`), at least `need` lines when there are that many (a long
/// thinking is rendered from its tail), and whether it was cut (its first line then out of
/// sight). No lines for a turn without thinking.
fn thinking_lines(
    turn: &AssistantTurn,
    width: usize,
    show: bool,
    need: usize,
) -> (Vec<Line<'static>>, bool) {
    let Some(text) = turn.thinking.as_deref() else {
        return (Vec::new(), false);
    };
    let indent = [Span::raw(INDENT)];
    let inner = [Span::raw(format!("{INDENT}  "))];
    let (mut body, cut) = if show {
        render_tail(text.trim(), need.saturating_sub(1), width, false, |text| {
            wrap(
                &[Span::styled(text.to_string(), theme::DIM)],
                width,
                &inner,
                &inner,
            )
        })
    } else {
        (Vec::new(), false)
    };
    if cut {
        return (body, true);
    }
    let mut out = wrap(
        &[Span::styled(thinking_head(turn, show), theme::TURN_FOOTER)],
        width,
        &indent,
        &indent,
    );
    out.append(&mut body);
    if show {
        out.push(Line::default());
    }
    (out, false)
}

/// The line that stands for a turn's thinking: how long and how many tokens, live while it
/// thinks; `▸` folded, `▾` unfolded, with the key that changes it.
fn thinking_head(turn: &AssistantTurn, shown: bool) -> String {
    let (mark, key) = if shown {
        ("▾", "Alt+R folds")
    } else {
        ("▸", "Alt+R unfolds")
    };
    let figures = match &turn.summary {
        Some(s) => s.thinking,
        None => turn.timeline.thinking_summary(),
    };
    let tokens = figures.map_or_else(
        || "— tokens".to_string(),
        |f| format!("{} tokens", f.thinking_tokens),
    );
    let what = match figures {
        Some(f) if f.ended_while_thinking => format!("ended while thinking · {tokens}"),
        Some(f) => match f.thinking_ms {
            Some(ms) => format!("thought for {} · {tokens}", crate::fmt::secs_of_ms(ms)),
            None if turn.phase.is_active() => format!("thinking… {tokens}"),
            None => format!("thought · {tokens}"),
        },
        None => "thought".to_string(),
    };
    format!("{mark} {what} · {key}")
}

/// A scored answer as its tokens' texts, each in its KLD band's style (`Alt+K`), the first
/// divergence reversed and the tokens the reference gave under 1% underlined: plain text, not
/// Markdown, so that every token is where the model put it. `cursor`: the token the token
/// screen points at (`Alt+T`), marked.
pub(crate) fn coloured_tokens(
    score: &AnswerScore,
    width: usize,
    cursor: Option<usize>,
) -> Vec<Line<'static>> {
    let first = score.summary.as_ref().and_then(|s| s.first_divergence);
    let spans: Vec<Span<'static>> = score
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut style = theme::KLD_BAND[quality::kld_band(t.score.kld)];
            if first == Some(i) {
                style = style.add_modifier(theme::FIRST_DIVERGENCE);
            }
            if t.score.p_ref < quality::LOW_P {
                style = style.add_modifier(theme::BELOW_LOW_P);
            }
            token_span(&t.text, style, cursor == Some(i))
        })
        .collect();
    wrap(&spans, width, &[], &[])
}

/// An answer as its tokens' texts, each in the style of its own-confidence band (`Alt+K`
/// without a reference; `metrics::quality::CONFIDENCE_BANDS`, coloured as the KLD bands:
/// the less sure, the warmer): plain text, as [`coloured_tokens`].
pub(crate) fn confidence_tokens(
    tokens: &[TokenConfidence],
    width: usize,
    cursor: Option<usize>,
) -> Vec<Line<'static>> {
    let spans: Vec<Span<'static>> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let style = theme::KLD_BAND[quality::confidence_band(f64::from(t.p))];
            token_span(&t.text, style, cursor == Some(i))
        })
        .collect();
    wrap(&spans, width, &[], &[])
}

/// One token's text as drawn in a coloured answer (`wrap` shows its control characters as
/// symbols), the cursor's token marked, and a token of no visible text shown as `·` under
/// the cursor so that it can be seen.
fn token_span(text: &str, style: ratatui::style::Style, cursor: bool) -> Span<'static> {
    match (cursor, text.trim().is_empty()) {
        (false, _) => Span::styled(text.to_string(), style),
        (true, blank) => Span::styled(
            if blank { "·" } else { text }.to_string(),
            style.patch(theme::TOKEN_CURSOR),
        ),
    }
}

/// The key to [`confidence_tokens`], under each answer coloured so.
fn confidence_legend() -> Vec<Span<'static>> {
    let [a, b, c] = quality::CONFIDENCE_BANDS;
    let mut spans = band_legend(
        "own p ",
        [
            format!("≥{a}"),
            format!("≥{b}"),
            format!("≥{c}"),
            format!("<{c}"),
        ],
    );
    spans.push(Span::styled(
        "· Alt+T: top 5 · Alt+K: Markdown",
        theme::TURN_FOOTER,
    ));
    spans
}

/// The key to [`coloured_tokens`], under each coloured answer.
fn kld_legend() -> Vec<Span<'static>> {
    let [a, b, c] = quality::KLD_BANDS;
    let mut spans = band_legend(
        "KLD ",
        [
            format!("<{a}"),
            format!("<{b}"),
            format!("<{c}"),
            format!("≥{c}"),
        ],
    );
    spans.extend([
        Span::styled("· ", theme::TURN_FOOTER),
        Span::styled(
            "first divergence",
            theme::TEXT.add_modifier(theme::FIRST_DIVERGENCE),
        ),
        Span::styled(" · ", theme::TURN_FOOTER),
        Span::styled(
            format!("ref p<{}%", quality::LOW_P * 100.0),
            theme::TEXT.add_modifier(theme::BELOW_LOW_P),
        ),
        Span::styled(" · Alt+T: top 5 · Alt+K: Markdown", theme::TURN_FOOTER),
    ]);
    spans
}

/// A legend's `head`, then each band's label in its style.
fn band_legend(head: &'static str, labels: [String; 4]) -> Vec<Span<'static>> {
    let bands = labels.into_iter().zip(theme::KLD_BAND);
    std::iter::once(Span::styled(head, theme::TURN_FOOTER))
        .chain(bands.flat_map(|(label, style)| [Span::styled(label, style), Span::raw(" ")]))
        .collect()
}

/// A token count, `—` while unknown.
fn count(n: Option<usize>) -> String {
    n.map_or_else(|| "—".to_string(), |n| n.to_string())
}

/// The compact figures under a finished answer: its summary, made once when it finished (or
/// read from its saved file); `—` for a figure it does not have.
fn figures(s: Option<&TurnSummary>) -> String {
    format!(
        "TTFT {} ms · {} tok/s · {} tok",
        format::num(s.and_then(|s| s.ttft_ms)),
        format::num(s.and_then(|s| s.decode_tok_per_s)),
        count(s.map(|s| s.tokens_generated))
    )
}

fn model_line(info: &ModelInfo) -> String {
    format!(
        "{} ({}, {} params, {})",
        one_line(&info.name),
        one_line(&info.architecture),
        format::params(info.n_params),
        one_line(&info.quantization)
    )
}

/// What an empty conversation shows: the model, what to type, where help is.
fn welcome(app: &App, width: usize) -> Vec<Line<'static>> {
    let indent = [Span::raw(INDENT)];
    let para = |spans: Vec<Span<'static>>| wrap(&spans, width, &indent, &indent);
    let note = |text: String, style| para(vec![Span::styled(text, style)]);
    let mut out = vec![Line::default()];
    out.extend(note(
        "tokscope · a chat that measures the model while it talks".into(),
        theme::WELCOME_TITLE,
    ));
    out.push(Line::default());
    match (&app.engine, &app.model) {
        (
            EngineStatus::Loading {
                stage,
                progress,
                read,
            },
            _,
        ) => {
            let file = app
                .model_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let done = match stage {
                crate::engine::LoadStage::Weights => format!(
                    " {}",
                    crate::metrics::LoadRead::describe(read.as_ref(), *progress)
                ),
                _ => String::new(),
            };
            let loading = format!("{}: {} …{done}", one_line(&file), stage.words());
            out.extend(note(loading, theme::WAITING));
        }
        (EngineStatus::Failed(error), _) => {
            let failed = format!("The model could not be loaded: {error}");
            out.extend(note(failed, theme::FAILED));
            out.extend(para(vec![
                Span::raw("Load another with "),
                Span::styled("/model PATH", theme::KEY),
                Span::raw("."),
            ]));
        }
        (EngineStatus::Ready, Some(info)) => {
            out.extend(para(vec![
                Span::raw("Chatting with "),
                Span::styled(model_line(info), theme::BOLD),
                Span::raw("."),
            ]));
        }
        (EngineStatus::Ready, None) => {}
    }
    if app.model.as_ref().is_some_and(|m| m.synthetic) {
        let warning = format!("⚠ {}", ModelInfo::SYNTHETIC_LABEL);
        out.extend(note(warning, theme::SYNTHETIC));
    }
    out.push(Line::default());
    let key = |k: &str| Span::styled(k.to_string(), theme::KEY);
    out.extend(para(vec![
        Span::raw("Type a message and press "),
        key("Enter"),
        Span::raw(" to send; "),
        key("Alt+Enter"),
        Span::raw(" adds a line. "),
        key("Esc"),
        Span::raw(" stops an answer, "),
        key("Ctrl+R"),
        Span::raw(" regenerates it, "),
        key("Ctrl+N"),
        Span::raw(" starts over."),
    ]));
    out.extend(para(vec![
        key("F1"),
        Span::raw(" or "),
        key("?"),
        Span::raw(" shows every key, the /commands and what each figure means."),
    ]));
    if let Some(info) = &app.model {
        out.push(Line::default());
        let why = info.template_note.as_ref();
        let why = why.map_or_else(String::new, |why| format!(" ({})", one_line(why)));
        let template = format!("Prompt template: {}{why}", one_line(&info.template));
        out.extend(note(template, theme::DIM));
        if let Some(line) = info.kv_cache_line() {
            out.extend(note(line, theme::DIM));
        }
    }
    out
}
