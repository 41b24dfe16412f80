//! The live metrics column beside the conversation: the figures of the answer in flight (or of
//! the last finished one): TTFT and its breakdown, the waiting clock, decode speed, ITL with its
//! percentiles and a sparkline of the gaps, tokens, E2E, the context gauge and the per-turn
//! history. Every figure comes from the frame's `View` (built once in `view.rs` from
//! `metrics`); this file only chooses what fits and formats it. On narrow terminals, `strip` gives the key
//! figures on one line instead.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Sparkline};
use ratatui::Frame;

use super::text::{truncate, width as text_width, wrap};
use super::view::{Figures, Focus, View};
use super::{format, theme};
use crate::app::conversation::TurnPhase;
use crate::app::App;
use crate::engine::ModelInfo;
use crate::metrics::ms;

/// Height the ITL sparkline may grow to.
const SPARK_MAX_ROWS: usize = 3;
/// Gaps drawn are capped (at about 11 days) so that bar scaling never overflows.
const MAX_GAP_US: u64 = 1_000_000_000_000;

/// Below this many inter-token gaps a turn's ITL percentiles and tok/s are marked as few.
const FEW_GAPS: usize = 8;

enum Content {
    Text(Vec<Line<'static>>),
    /// ITL gaps in microseconds, oldest first.
    Spark(Vec<u64>),
    History {
        header: Line<'static>,
        rows: Vec<Line<'static>>,
    },
}

/// One piece of the column; when the column is short, pieces with the largest `priority`
/// number go first.
struct Piece {
    priority: u8,
    content: Content,
}

impl Piece {
    fn text(priority: u8, lines: Vec<Line<'static>>) -> Self {
        Self {
            priority,
            content: Content::Text(lines),
        }
    }

    fn min_height(&self) -> usize {
        match &self.content {
            Content::Text(lines) => lines.len(),
            Content::Spark(_) => 1,
            // The header and one row (the newest turn, or "no finished turn yet").
            Content::History { .. } => 2,
        }
    }
}

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App, view: &View) {
    let block = Block::new()
        .borders(Borders::LEFT)
        .border_style(theme::PANE_BORDER);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.is_empty() {
        return;
    }
    // One column of padding on the left, none on the right.
    let inner = Rect {
        x: inner.x + 1,
        width: inner.width.saturating_sub(1),
        ..inner
    };
    let w = inner.width as usize;
    let mut pieces = pieces(app, view, w);

    // Drop the least important pieces until the minimum heights fit.
    let avail = inner.height as usize;
    while pieces.iter().map(Piece::min_height).sum::<usize>() > avail {
        let Some(worst) = pieces
            .iter()
            .enumerate()
            .max_by_key(|(i, p)| (p.priority, *i))
            .map(|(i, _)| i)
        else {
            break;
        };
        pieces.remove(worst);
    }
    // Share what is left: the sparkline grows first, then the history shows more turns.
    let mut spare = avail.saturating_sub(pieces.iter().map(Piece::min_height).sum());
    let mut heights: Vec<usize> = pieces.iter().map(Piece::min_height).collect();
    for (p, h) in pieces.iter().zip(heights.iter_mut()) {
        if matches!(&p.content, Content::Spark(gaps) if !gaps.is_empty()) {
            let extra = spare.min(SPARK_MAX_ROWS - 1);
            *h += extra;
            spare -= extra;
        }
    }
    for (p, h) in pieces.iter().zip(heights.iter_mut()) {
        if let Content::History { rows, .. } = &p.content {
            let extra = spare.min(rows.len().saturating_sub(1));
            *h += extra;
            spare -= extra;
        }
    }

    let mut y = inner.y;
    for (piece, h) in pieces.into_iter().zip(heights) {
        let rect = Rect {
            y,
            height: h as u16,
            ..inner
        };
        y += h as u16;
        match piece.content {
            Content::Text(lines) => frame.render_widget(Paragraph::new(lines), rect),
            Content::Spark(gaps) => draw_spark(frame, rect, &gaps),
            Content::History { header, rows } => {
                let shown = h.saturating_sub(1);
                let mut lines = vec![header];
                if rows.is_empty() {
                    lines.push(Line::from(Span::styled(
                        "  no finished turn yet",
                        theme::DIM,
                    )));
                }
                lines.extend(rows[rows.len().saturating_sub(shown)..].iter().cloned());
                frame.render_widget(Paragraph::new(lines), rect);
            }
        }
    }
}

fn draw_spark(frame: &mut Frame, rect: Rect, gaps_us: &[u64]) {
    if gaps_us.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled("ITL bars: no gaps yet", theme::DIM)),
            rect,
        );
        return;
    }
    // The latest gaps that fit, scaled to the largest shown; every gap shows at least the
    // lowest bar so that a short gap is not mistaken for a missing one.
    let shown = &gaps_us[gaps_us.len().saturating_sub(rect.width as usize)..];
    let max = shown.iter().copied().max().unwrap_or(1).max(1);
    let floor = max.div_ceil(u64::from(rect.height.max(1)) * 8);
    let data: Vec<u64> = shown.iter().map(|g| (*g).max(floor)).collect();
    frame.render_widget(
        Sparkline::default()
            .data(&data)
            .max(max)
            .style(theme::SPARKLINE),
        rect,
    );
}

/// A sub-figure's row (indented label, plain value).
fn sub_row(label: &str, value: String, width: usize) -> Line<'static> {
    row(
        label,
        value,
        width,
        theme::METRIC_SUB_LABEL,
        theme::METRIC_VALUE,
    )
}

/// A headline figure's row (TTFT, decode tok/s).
fn key_row(label: &str, value: String, width: usize) -> Line<'static> {
    row(
        label,
        value,
        width,
        theme::METRIC_LABEL,
        theme::METRIC_KEY_VALUE,
    )
}

/// A figure's row.
fn main_row(label: &str, value: String, width: usize) -> Line<'static> {
    row(
        label,
        value,
        width,
        theme::METRIC_LABEL,
        theme::METRIC_VALUE,
    )
}

/// A `label … value` row, the value right-aligned to `width`.
fn row(
    label: &str,
    value: String,
    width: usize,
    label_style: Style,
    value_style: Style,
) -> Line<'static> {
    let vw = text_width(&value);
    let label = truncate(label, width.saturating_sub(vw + 1));
    let pad = width.saturating_sub(text_width(&label) + vw).max(1);
    Line::from(vec![
        Span::styled(label, label_style),
        Span::raw(" ".repeat(pad)),
        Span::styled(value, value_style),
    ])
}

/// `n` label/value cells on one row, sharing `width` with one column between cells.
fn cells(items: &[(&str, String)], width: usize) -> Line<'static> {
    let n = items.len().max(1);
    let avail = width.saturating_sub(n - 1);
    let mut spans = Vec::new();
    for (i, (label, value)) in items.iter().enumerate() {
        // The first cells take the columns that do not divide evenly.
        let cw = avail / n + usize::from(i < avail % n);
        let vw = text_width(value);
        let label = truncate(label, cw.saturating_sub(vw + 1));
        let pad = cw.saturating_sub(text_width(&label) + vw).max(1);
        if i > 0 {
            spans.push(Span::raw(" "));
        }
        spans.push(Span::styled(label, theme::METRIC_SUB_LABEL));
        spans.push(Span::raw(" ".repeat(pad)));
        spans.push(Span::styled(value.clone(), theme::METRIC_VALUE));
    }
    Line::from(spans)
}

fn phase_word(phase: &TurnPhase) -> &'static str {
    match phase {
        TurnPhase::Queued => "queued",
        TurnPhase::Prefill => "prefill",
        TurnPhase::Streaming => "streaming",
        TurnPhase::Done(_) => "done",
        TurnPhase::Stopped => "stopped",
        TurnPhase::Failed(_) => "failed",
    }
}

/// The column's pieces, top to bottom: the synthetic-model warning, the header, the latency
/// figures, ITL, speculation, host time, quality, confidence, context, roofline and history.
fn pieces(app: &App, view: &View, w: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    if app.model.as_ref().is_some_and(|m| m.synthetic) {
        out.push(synthetic_warning(w));
    }
    let focus = view.focus.as_ref();
    out.push(focus_header(focus, w));
    out.extend(latency_pieces(view, w));
    out.extend(itl_pieces(focus, w));
    out.extend(speculation_pieces(focus, w));
    out.extend(host_piece(focus, w));
    if let Some(lines) = quality_lines(app, focus.map(|f| f.turn), w) {
        out.push(Piece::text(3, lines));
    }
    if let Some(lines) = confidence_lines(app, focus.map(|f| f.turn), w) {
        out.push(Piece::text(3, lines));
    }
    out.push(Piece::text(2, context_lines(view, w)));
    out.push(Piece::text(4, roofline_lines(app, view, w)));
    out.push(history(app, w));
    out
}

/// The warning that the loaded model is synthetic (its answers are noise).
fn synthetic_warning(w: usize) -> Piece {
    Piece::text(
        0,
        wrap(
            &[Span::styled(
                format!("⚠ {}", ModelInfo::SYNTHETIC_LABEL),
                theme::SYNTHETIC,
            )],
            w,
            &[],
            &[],
        ),
    )
}

/// The answer in focus, by number and phase, or "no answer yet".
fn focus_header(focus: Option<&Focus>, w: usize) -> Piece {
    let header = match focus {
        Some(f) => format!("turn {} · {}", f.number, phase_word(&f.turn.phase)),
        None => "no answer yet".to_string(),
    };
    Piece::text(
        1,
        vec![Line::from(Span::styled(
            truncate(&header, w),
            theme::METRIC_HEADER,
        ))],
    )
}

/// The waiting clock, TTFT and its breakdown (local stages or a server's), decode speed,
/// TPOT, tokens and E2E.
fn latency_pieces(view: &View, w: usize) -> Vec<Piece> {
    let s = view.focus.as_ref().map(|f| &f.figures);
    let mut out = Vec::new();
    if let Some(waited) = view.waiting {
        out.push(Piece::text(
            1,
            vec![key_row("waiting ms", format::num(Some(ms(waited))), w)],
        ));
    }
    out.push(Piece::text(
        1,
        vec![key_row(
            "TTFT ms",
            format::num(s.and_then(|s| s.ttft_ms)),
            w,
        )],
    ));
    if let Some(r) = s.and_then(|s| s.remote.as_ref()) {
        out.push(Piece::text(6, remote_breakdown(r, w)));
    } else {
        out.push(Piece::text(6, ttft_breakdown(s, w)));
    }
    out.push(Piece::text(
        1,
        vec![key_row(
            "decode tok/s",
            format::num(s.and_then(|s| s.decode_tok_per_s)),
            w,
        )],
    ));
    out.push(Piece::text(
        6,
        vec![main_row(
            "TPOT ms",
            format::num(s.and_then(|s| s.tpot_ms)),
            w,
        )],
    ));
    out.push(Piece::text(
        3,
        vec![
            main_row("tokens", opt_count(s.map(|s| s.tokens_generated)), w),
            main_row("E2E ms", format::num(s.and_then(|s| s.e2e_ms)), w),
        ],
    ));
    out
}

/// A local turn's TTFT breakdown: queue, template and tokenize, prefill, first sample, and the
/// prompt's prefilled and cached tokens with the prefill speed.
fn ttft_breakdown(s: Option<&Figures>, w: usize) -> Vec<Line<'static>> {
    vec![
        sub_row("  queue ms", format::num(s.and_then(|s| s.queue_ms)), w),
        sub_row(
            "  tmpl+tok ms",
            format::num(s.and_then(|s| s.template_tokenize_ms)),
            w,
        ),
        sub_row("  prefill ms", format::num(s.and_then(|s| s.prefill_ms)), w),
        sub_row(
            "  first sample ms",
            format::num(s.and_then(|s| s.first_sample_ms)),
            w,
        ),
        sub_row(
            "  prefill tok",
            opt_count(s.and_then(|s| s.prefilled_tokens)),
            w,
        ),
        sub_row(
            "  cached tok",
            opt_count(s.and_then(|s| s.cached_tokens)),
            w,
        ),
        sub_row(
            "  prefill tok/s",
            format::num(s.and_then(|s| s.prefill_tok_per_s)),
            w,
        ),
    ]
}

/// ITL: the gap count and percentiles, then the sparkline of the gaps (or why a resumed turn
/// has none).
fn itl_pieces(focus: Option<&Focus>, w: usize) -> [Piece; 2] {
    let (label, sub) = (theme::METRIC_LABEL, theme::METRIC_SUB_LABEL);
    // ITL: the last gap comes from the timeline, the statistics from the summary.
    let gaps: &[std::time::Duration] = focus.map_or(&[], |f| &f.gaps);
    let itl = focus.and_then(|f| f.figures.itl);
    let count = itl.map_or(0, |i| i.count);
    // A handful of gaps makes p90/p99 the max and the mean a guess: said beside the count.
    let gaps_word = if (1..FEW_GAPS).contains(&count) {
        format!("{count} gaps, few")
    } else {
        format!("{count} gaps")
    };
    let figures = Piece::text(
        2,
        vec![
            row("ITL ms", gaps_word, w, label, sub),
            cells(
                &[
                    ("last", format::num(gaps.last().map(|g| ms(*g)))),
                    ("mean", format::num(itl.map(|i| i.mean_ms))),
                    ("p50", format::num(itl.map(|i| i.p50_ms))),
                ],
                w,
            ),
            cells(
                &[
                    ("p90", format::num(itl.map(|i| i.p90_ms))),
                    ("p99", format::num(itl.map(|i| i.p99_ms))),
                    ("max", format::num(itl.map(|i| i.max_ms))),
                ],
                w,
            ),
        ],
    );
    let bars = Piece {
        priority: 4,
        // A resumed turn keeps its figures but not its gaps: never "no gaps yet" beside them.
        content: if gaps.is_empty() && count > 0 {
            Content::Text(vec![Line::from(Span::styled(
                truncate("ITL bars: not saved (resumed)", w),
                theme::DIM,
            ))])
        } else {
            Content::Spark(
                gaps.iter()
                    .map(|g| {
                        u64::try_from(g.as_micros()).map_or(MAX_GAP_US, |us| us.min(MAX_GAP_US))
                    })
                    .collect(),
            )
        },
    };
    [figures, bars]
}

/// Speculation: the gaps between target passes and tokens per pass (when a pass delivers
/// several tokens), then the speculation figures.
fn speculation_pieces(focus: Option<&Focus>, w: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    // A verify pass's accepted tokens share one time, so the per-pass figures go beside the
    // per-token ones.
    if let Some((gap, per_pass)) = focus
        .and_then(|f| f.figures.pass_gap.zip(f.figures.tokens_per_pass))
        .filter(|(_, per_pass)| *per_pass > 1.0)
    {
        out.push(Piece::text(
            2,
            vec![
                row(
                    "pass gap ms",
                    format!("{} passes", gap.count),
                    w,
                    theme::METRIC_LABEL,
                    theme::METRIC_SUB_LABEL,
                ),
                cells(
                    &[
                        ("p50", format::num(Some(gap.p50_ms))),
                        ("max", format::num(Some(gap.max_ms))),
                        ("tok/pass", format::num(Some(per_pass))),
                    ],
                    w,
                ),
            ],
        ));
    }
    if let Some(stats) = focus.and_then(|f| f.turn.spec.as_ref()) {
        out.push(Piece::text(3, spec_lines(stats, w)));
    }
    out
}

/// Host time per token and where sampling ran, for a local turn that measured it.
fn host_piece(focus: Option<&Focus>, w: usize) -> Option<Piece> {
    let h = focus
        .and_then(|f| f.turn.host.as_ref())
        .filter(|h| h.host_us_per_token.is_some() && h.sampler != "server")?;
    Some(Piece::text(
        3,
        vec![row(
            &format!(
                "host µs/tok ({} sampling)",
                if h.place.backend { "graph" } else { "host" }
            ),
            format::num(h.host_us_per_token),
            w,
            theme::METRIC_LABEL,
            theme::METRIC_SUB_LABEL,
        )],
    ))
}

/// The roofline of the answer shown: bytes a decode step reads at the current context depth,
/// the bandwidth ceiling that gives, how close decode gets to it (MBU), and the cost per 1M
/// tokens at the configured GPU-hour price. All from `metrics::roofline`.
fn roofline_lines(app: &App, view: &View, w: usize) -> Vec<Line<'static>> {
    use crate::metrics::roofline::BandwidthSource;
    let roofline = &view.roofline;
    let bandwidth = roofline.bandwidth.as_ref();
    let split = bandwidth.and_then(|b| match &b.source {
        BandwidthSource::Split {
            gpu_layers,
            layers,
            gpu_gb_s,
            gpu,
            cpu_gb_s,
            cpu,
        } => Some((*gpu_layers, *layers, *gpu_gb_s, gpu, *cpu_gb_s, cpu)),
        _ => None,
    });
    let source = match (&split, bandwidth) {
        (Some((n, of, ..)), _) => format!("{n}/{of} layers on GPU"),
        (None, Some(b)) => b.source.label(),
        (None, None) => "bandwidth unknown".to_string(),
    };
    // The source wraps (a measured one says how, with its load and spread): at most three
    // rows, the last cut with `…`.
    let mut lines = wrap(
        &[Span::styled(source, theme::DIM)],
        w,
        &[Span::styled("roofline ", theme::METRIC_LABEL)],
        &[Span::raw("  ")],
    );
    if lines.len() > 3 {
        lines.truncate(3);
        if let Some(last) = lines.last_mut() {
            let text: String = last.spans.iter().map(|s| s.content.as_ref()).collect();
            *last = Line::from(Span::styled(
                truncate(&format!("{}…", text.trim_end()), w),
                theme::DIM,
            ));
        }
    }
    // A partial offload: where the KV cache is (each layer's cache sits on that layer's
    // device; the output layer has none), each side's figure and where it comes from, then
    // their blend.
    if let Some((n, of, gpu_gb_s, gpu, cpu_gb_s, cpu)) = split {
        // llama.cpp offloads the output layer first (it has no cache), then the repeating
        // layers from the last (`LayerSplit`).
        let layers = crate::metrics::roofline::LayerSplit::of(of.saturating_sub(1), n);
        lines.push(sub_row(
            "  KV on GPU",
            format!("{}/{} layers", layers.repeating_on_gpu, layers.n_layer),
            w,
        ));
        for (label, gb_s, from) in [("  GPU GB/s", gpu_gb_s, gpu), ("  CPU GB/s", cpu_gb_s, cpu)] {
            lines.push(sub_row(label, format::num(Some(gb_s)), w));
            lines.push(Line::from(Span::styled(
                truncate(&format!("    {}", from.label()), w),
                theme::DIM,
            )));
        }
    }
    lines.extend([
        sub_row(
            if split.is_some() {
                "  blend GB/s"
            } else {
                "  bandwidth GB/s"
            },
            format::num(bandwidth.map(|b| b.bytes_per_s / 1e9)),
            w,
        ),
        sub_row(
            "  bytes/token MB",
            format::num(roofline.bytes_per_token.map(|b| b / 1e6)),
            w,
        ),
        sub_row(
            "  ceiling tok/s",
            format::num(roofline.ceiling_tok_per_s),
            w,
        ),
    ]);
    match roofline.mbu {
        Some(u) => {
            let above = crate::metrics::roofline::above_ceiling(u);
            let pct = format!(" MBU {:>3.0}%{}", u * 100.0, if above { "↑" } else { "" });
            let bar_w = w.saturating_sub(pct.len() + 2);
            let filled = ((u.clamp(0.0, 1.0) * bar_w as f64).round() as usize).min(bar_w);
            lines.push(Line::from(vec![
                Span::raw("  "),
                Span::styled("█".repeat(filled), theme::GAUGE_FILLED),
                Span::styled("░".repeat(bar_w - filled), theme::GAUGE_EMPTY),
                Span::styled(pct, theme::METRIC_VALUE),
            ]));
            if above {
                lines.push(Line::from(Span::styled(
                    truncate(
                        &format!("  ↑ {}", crate::metrics::roofline::ABOVE_CEILING),
                        w,
                    ),
                    theme::DIM,
                )));
            }
        }
        None => lines.push(sub_row("  MBU %", "—".to_string(), w)),
    }
    if let Some(other) = &roofline.other_model {
        lines.push(Line::from(Span::styled(
            truncate(&format!("  ran on {other}: no MBU"), w),
            theme::DIM,
        )));
    }
    // What the configured hour is the price of: the GPU's when layers run on one, the
    // server's for a remote chat, else this machine's.
    let hour = match app.model.as_ref() {
        Some(m) if m.backend == "remote" => "server-h",
        Some(m) if m.n_gpu_layers > 0 && m.backend != "CPU" => "GPU-h",
        _ => "machine-h",
    };
    lines.push(sub_row(
        &format!("  $/1M @{:.2}/{hour}", app.price_per_hour_usd),
        format::num(roofline.cost_per_million_tokens),
        w,
    ));
    lines
}

/// A remote turn's TTFT breakdown (network round trip, the server's prompt time and cache
/// hits, the rest) and the source of its token counts; "—" for what the server does not say.
fn remote_breakdown(r: &super::view::RemoteFigures, w: usize) -> Vec<Line<'static>> {
    let count = |n: Option<u64>| n.map_or_else(|| "—".to_string(), |n| n.to_string());
    let mut lines = vec![sub_row(
        "  network RTT ms",
        format::num(r.network_rtt_ms),
        w,
    )];
    if r.server_queue_ms.is_some() || r.server_first_token_ms.is_some() {
        // vLLM's own split: its queue, then its time to first token; the rest is the
        // transport and the server's tokenizer.
        lines.push(sub_row(
            "  server queue ms",
            format::num(r.server_queue_ms),
            w,
        ));
        lines.push(sub_row(
            "  server TTFT ms",
            format::num(r.server_first_token_ms),
            w,
        ));
        lines.push(sub_row("  net+other ms", format::num(r.rest_ms), w));
    } else {
        if r.server_load_ms.is_some() {
            lines.push(sub_row(
                "  server load ms",
                format::num(r.server_load_ms),
                w,
            ));
        }
        lines.push(sub_row(
            "  server prompt ms",
            format::num(r.server_prompt_ms),
            w,
        ));
        lines.push(sub_row("  1st step+net ms", format::num(r.rest_ms), w));
    }
    lines.push(sub_row("  prompt tok", count(r.prompt_tokens), w));
    lines.push(sub_row("  cached tok", count(r.cached_tokens), w));
    lines.extend(wrap(
        &[Span::styled(
            format!("tokens: {}", r.token_source),
            theme::METRIC_SUB_LABEL,
        )],
        w,
        &[],
        &[],
    ));
    if let Some(cold) = r.cold {
        lines.extend(wrap(
            &[Span::styled(
                format!("⚠ cold: {}", cold.words()),
                theme::NOTICE_WARNING,
            )],
            w,
            &[],
            &[],
        ));
    }
    if let Some(source) = r.timing_source {
        lines.extend(wrap(
            &[Span::styled(
                format!("server times: {source}"),
                theme::METRIC_SUB_LABEL,
            )],
            w,
            &[],
            &[],
        ));
    }
    lines
}

/// Speculative decoding's figures (`metrics::spec`): acceptance, tokens per target pass,
/// draft and verify time per step, and the roofline's expected speed-up beside the measured
/// one (against this turn's own plain passes; `—` without any).
fn spec_lines(stats: &crate::metrics::spec::SpecStats, w: usize) -> Vec<Line<'static>> {
    let sp = stats.summary();
    let pct = |v: Option<f64>| format::num(v.map(|x| x * 100.0));
    let mut lines = vec![row(
        &format!("spec {} k≤{}", sp.mode, sp.draft_max),
        format!("{}/{} accepted", sp.accepted, sp.drafted),
        w,
        theme::METRIC_LABEL,
        theme::METRIC_SUB_LABEL,
    )];
    if let Some(why) = &sp.off_reason {
        lines.push(Line::from(Span::styled(
            truncate(&format!("off: {why}"), w),
            theme::DIM,
        )));
        return lines;
    }
    lines.push(cells(
        &[
            ("acc%", pct(sp.acceptance_rate)),
            ("tok/pass", format::num(sp.tokens_per_pass)),
        ],
        w,
    ));
    lines.push(cells(
        &[
            ("draft ms", format::num(sp.draft_ms_per_step)),
            ("verify ms", format::num(sp.verify_ms_per_pass)),
        ],
        w,
    ));
    lines.push(sub_row(
        "  target passes/tok",
        format::num(sp.passes_per_token),
        w,
    ));
    lines.push(cells(
        &[
            ("exp ×", format::num(sp.expected_speedup)),
            ("meas ×", format::num(sp.measured_speedup)),
        ],
        w,
    ));
    lines.push(sub_row(
        "  exp × with compute",
        format::num(sp.expected_speedup_compute),
        w,
    ));
    lines
}

/// The answer shown against the reference model (`--ref`, `/ref`) and the conversation's
/// scored answers pooled; `None` when no reference is set and nothing was scored.
fn quality_lines(
    app: &App,
    turn: Option<&crate::app::conversation::AssistantTurn>,
    w: usize,
) -> Option<Vec<Line<'static>>> {
    use crate::app::conversation::TurnQuality;
    let quality = turn.and_then(|t| t.quality.as_ref());
    let reference = match (quality.and_then(TurnQuality::score), &app.reference) {
        (Some(s), _) => Some(s.reference.as_path()),
        (None, Some(r)) => Some(r.as_path()),
        (None, None) if quality.is_some() => None,
        (None, None) => return None,
    };
    let name = reference
        .and_then(|r| r.file_name())
        .map_or_else(|| "—".to_string(), |n| n.to_string_lossy().into_owned());
    // The file's end names the quantization: a long name keeps its tail.
    let room = w.saturating_sub("quality ".len()).max(2);
    let name = if text_width(&name) > room {
        let tail: Vec<char> = name.chars().rev().take(room - 1).collect();
        format!("…{}", tail.into_iter().rev().collect::<String>())
    } else {
        name
    };
    let mut lines = vec![row(
        "quality",
        name,
        w,
        theme::METRIC_LABEL,
        theme::METRIC_SUB_LABEL,
    )];
    let dim = |text: String| Line::from(Span::styled(truncate(&text, w), theme::DIM));
    match quality {
        None => lines.push(dim("  scored after each answer".to_string())),
        Some(TurnQuality::Scoring(_)) => lines.push(dim("  scoring…".to_string())),
        Some(TurnQuality::NotScored(why)) => {
            let why = why.lines().next().unwrap_or_default();
            lines.push(dim(format!("  not scored: {why}")));
        }
        Some(TurnQuality::Scored(score)) => match &score.summary {
            None => lines.push(dim("  no answer tokens".to_string())),
            Some(a) => {
                lines.push(cells(
                    &[
                        ("KLD", format!("{:.4}", a.kld_mean)),
                        ("p99", format!("{:.4}", a.kld_p99)),
                    ],
                    w,
                ));
                lines.push(cells(
                    &[
                        ("same top", format!("{:.1}%", a.same_top_pct)),
                        ("<1% ref", a.below_low_p.to_string()),
                    ],
                    w,
                ));
                let divergence = a
                    .first_divergence
                    .map_or_else(|| "none".to_string(), |i| format!("token {i}"));
                lines.push(sub_row("  1st diverges", divergence, w));
                if !app.quality_colours {
                    lines.push(dim("  Alt+K: tokens by KLD".to_string()));
                }
            }
        },
    }
    if let Some(c) = app.conversation_quality().filter(|c| c.answers > 1) {
        lines.push(sub_row(
            &format!("  {} answers", c.answers),
            format!("KLD {:.4} · {:.1}%", c.kld_mean, c.same_top_pct),
            w,
        ));
    }
    Some(lines)
}

/// The answer's own confidence (`Alt+K` without a reference): shown while it is measured or
/// when the answer has it; `None` otherwise.
fn confidence_lines(
    app: &App,
    turn: Option<&crate::app::conversation::AssistantTurn>,
    w: usize,
) -> Option<Vec<Line<'static>>> {
    use crate::app::conversation::TurnConfidence;
    use crate::metrics::quality::{AnswerConfidence, CONFIDENCE_LOW_P};
    let confidence = turn.and_then(|t| t.confidence.as_ref());
    if confidence.is_none() && !app.own_confidence {
        return None;
    }
    let mut lines = vec![row(
        "own confidence",
        String::new(),
        w,
        theme::METRIC_LABEL,
        theme::METRIC_SUB_LABEL,
    )];
    let dim = |text: &str| Line::from(Span::styled(truncate(text, w), theme::DIM));
    match confidence {
        None => lines.push(dim("  measured from the next answer")),
        Some(TurnConfidence::Unavailable) => {
            lines.push(dim("  not available: sampled on the backend"));
        }
        Some(TurnConfidence::Measured(tokens)) => match AnswerConfidence::of(tokens) {
            None => lines.push(dim("  no answer tokens")),
            Some(a) => {
                lines.push(cells(
                    &[
                        ("mean p", format!("{:.3}", a.p_mean)),
                        ("min p", format!("{:.3}", a.p_min)),
                    ],
                    w,
                ));
                lines.push(cells(
                    &[
                        ("entropy", format!("{:.2}", a.entropy_mean)),
                        (&format!("p<{CONFIDENCE_LOW_P}"), a.below_low_p.to_string()),
                    ],
                    w,
                ));
            }
        },
    }
    Some(lines)
}

fn opt_count(n: Option<usize>) -> String {
    n.map_or_else(|| "—".to_string(), |n| n.to_string())
}

fn context_lines(view: &View, w: usize) -> Vec<Line<'static>> {
    let (used, total) = (view.context_used, view.n_ctx);
    let value = match total {
        Some(t) => format!("{used} / {t}"),
        None => "—".to_string(),
    };
    let mut lines = vec![main_row("context tok", value, w)];
    if let Some(total) = total.filter(|t| *t > 0) {
        let fraction = (used as f64 / f64::from(total)).clamp(0.0, 1.0);
        let pct = format!(" {:>3.0}%", fraction * 100.0);
        let bar_w = w.saturating_sub(pct.len());
        let filled = ((fraction * bar_w as f64).round() as usize).min(bar_w);
        let fill_style = if fraction >= 0.9 {
            theme::GAUGE_FULL
        } else {
            theme::GAUGE_FILLED
        };
        lines.push(Line::from(vec![
            Span::styled("█".repeat(filled), fill_style),
            Span::styled("░".repeat(bar_w - filled), theme::GAUGE_EMPTY),
            Span::styled(pct, theme::METRIC_VALUE),
        ]));
    }
    lines
}

/// TTFT and decode speed of every finished turn, newest last.
fn history(app: &App, w: usize) -> Piece {
    let with_tokens = w >= 29;
    let fmt_row = |n: &str, ttft: &str, rate: &str, tok: &str| {
        if with_tokens {
            format!("{n:>3} {ttft:>9} {rate:>8} {tok:>6}")
        } else {
            format!("{n:>3} {ttft:>9} {rate:>8}")
        }
    };
    let header = Line::from(Span::styled(
        truncate(&fmt_row("#", "TTFT ms", "tok/s", "tok"), w),
        theme::METRIC_SECTION,
    ));
    let rows = app
        .conversation
        .exchanges
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let t = e.assistant.as_ref()?;
            let s = t.summary.as_ref()?;
            let mark = if t.phase == TurnPhase::Stopped {
                "■"
            } else {
                ""
            };
            // `~`: a rate from fewer than FEW_GAPS gaps (F1 says so).
            let few = s.itl.is_none_or(|itl| itl.count < FEW_GAPS);
            let rate = crate::fmt::opt(s.decode_tok_per_s, 1);
            let text = fmt_row(
                &format!("{mark}{}", i + 1),
                &format::num(s.ttft_ms),
                &if few && s.decode_tok_per_s.is_some() {
                    format!("~{rate}")
                } else {
                    rate
                },
                &s.tokens_generated.to_string(),
            );
            Some(Line::from(Span::styled(
                truncate(&text, w),
                theme::METRIC_LABEL,
            )))
        })
        .collect();
    Piece {
        priority: 7,
        content: Content::History { header, rows },
    }
}

/// The key figures on one line, for terminals too narrow for the column.
pub(crate) fn strip(view: &View) -> Line<'static> {
    let s = view.focus.as_ref().map(|f| &f.figures);
    let mut parts = Vec::new();
    if let Some(waited) = view.waiting {
        parts.push(format!("waiting {} ms", format::num(Some(ms(waited)))));
    }
    parts.push(format!(
        "TTFT {} ms",
        format::num(s.and_then(|s| s.ttft_ms))
    ));
    parts.push(format!(
        "{} tok/s",
        format::num(s.and_then(|s| s.decode_tok_per_s))
    ));
    parts.push(format!(
        "ITL p50 {} ms",
        format::num(s.and_then(|s| s.itl).map(|i| i.p50_ms))
    ));
    let (used, total) = (view.context_used, view.n_ctx);
    parts.push(format!(
        "ctx {used}/{}",
        total.map_or_else(|| "—".to_string(), |t| t.to_string())
    ));
    Line::from(Span::styled(parts.join(" · "), theme::METRICS_STRIP))
}
